/*
 * arch.h: the architecture description.  Everything the engine knows about a
 * model family's weights and its differences from the plain Llama decoder is
 * written here once, as data:
 *
 *   - the architectures (cbllm_arch): the names config.json and GGUF files
 *     give them, their activation, and the feature flags the forward pass
 *     reads (ARCH_*);
 *   - the tensor roles (arch_tensor): per tensor its HF and GGUF names, its
 *     kind (matrix, norm, bias), its shape in terms of the config, the
 *     features under which it exists, and the field of cbllm_model or
 *     cbllm_layer it is bound to.
 *
 * Loading, dummy weights, freeing, device upload, weight-type checks and the
 * memory accounting all walk the roles with model_visit (model.h) instead of
 * naming tensors.  Adding an architecture is one row of the architecture
 * table (arch.c), rows for the tensors it has and Llama lacks, and a flag
 * check in the forward pass for each difference it makes there.
 */
#ifndef CBLLM_ARCH_H
#define CBLLM_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

/* Feature flags: what an architecture's decoder adds to the Llama one. */
#define ARCH_QKV_BIAS	(1u << 0)	/* q, k and v projections add a bias (bq, bk, bv) */
#define ARCH_O_BIAS		(1u << 1)	/* the output projection adds a bias (bo) */
#define ARCH_QK_NORM	(1u << 2)	/* each head of q and k is RMSNormed (q_norm, k_norm) before RoPE */
#define ARCH_NORM_PLUS_ONE (1u << 3)	/* every RMSNorm scales by (1 + w): the loader folds the 1 in */
#define ARCH_SANDWICH_NORM (1u << 4)	/* the attention and MLP outputs are normed before their
										 * residual adds; the MLP's input norm is
										 * pre_feedforward_layernorm (Gemma) */
#define ARCH_EMBED_SCALE (1u << 5)	/* the embeddings are multiplied by sqrt(hidden_size) */
#define ARCH_TIED_DEFAULT (1u << 6)	/* tie_word_embeddings is true when config.json omits it */
#define ARCH_FUSED_QKV	(1u << 7)	/* wq, wk, wv are row blocks of one stored tensor (Phi-3) */
#define ARCH_FUSED_GATE_UP (1u << 8)	/* w_gate, w_up are row blocks of one stored tensor (Phi-3) */
#define ARCH_GGUF_PERMUTED_QK (1u << 9) /* GGUF files store wq, wk permuted for interleaved
										 * RoPE (llama.cpp's converter does it for llama) */
#define ARCH_MOE		(1u << 10)	/* some layers' MLP is a mixture of experts: set by the
									 * config loaders when the model has experts
									 * (cfg.n_experts > 0), not by an architecture's row */
#define ARCH_MOE_BLOCK_SPARSE (1u << 11)	/* the experts are named as Mixtral's
											 * block_sparse_moe (w1, w2, w3) */
#define ARCH_GPT_OSS	(1u << 12)	/* gpt-oss's names and layout: the router is mlp.router,
									 * its experts are stacked tensors stored [in, out] with
									 * gate and up interleaved, the MLP's input norm is
									 * GGUF's post_attention_norm */
#define ARCH_ATTN_SINKS (1u << 13)	/* a learned logit per head joins each attention softmax's
									 * denominator (sinks) */
#define ARCH_MOE_BIASES (1u << 14)	/* the router and every expert's projections add biases */
#define ARCH_LINEAR_ATTN (1u << 15)	/* some layers mix tokens by Gated DeltaNet linear attention
									 * with a recurrent state (cfg.layer_linear), the others
									 * by attention: a hybrid model (Qwen3.5) */
#define ARCH_ATTN_GATE	(1u << 16)	/* q_proj gives each head its q and then as many gate
									 * values; the attention's output is multiplied by their
									 * sigmoid before Wo (Qwen3.5's gated attention) */
#define ARCH_TEXT_CONFIG (1u << 17) /* a multimodal checkpoint: config.json keeps the decoder's
									 * fields under text_config and its tensors are named
									 * model.language_model.* (the vision tower is not read) */
#define ARCH_SHARED_EXPERT (1u << 18)	/* every layer with experts also has a shared expert:
										 * an MLP of shared_expert_intermediate_size whose
										 * output, times the sigmoid of its gate's logit,
										 * joins the routed experts' (Qwen3.5-MoE); the router
										 * always renormalises the chosen weights */
#define ARCH_MOE_STACKED_ROWS (1u << 19)	/* the checkpoint stacks the experts in (E, out,
											 * in) tensors, gate and up in one:
											 * mlp.experts.gate_up_proj (E, 2 I, H) and
											 * down_proj (E, H, I); set at load when the
											 * checkpoint has them (Qwen3.5-MoE as released) */
#define ARCH_GEMMA4		(1u << 20)	/* Gemma 4's layers: per-kind head sizes and RoPE
									 * (rope_parameters per layer type), KV-shared last
									 * layers, attention scale 1 (cfg.attn_scale), a
									 * weightless RMSNorm of v, x *= layer_scalar at each
									 * layer's end, final logit soft-capping */
#define ARCH_PLE		(1u << 21)	/* per-layer embeddings (Gemma 4 E2B/E4B): set by the
									 * config when hidden_size_per_layer_input > 0 */

/* The MLP's activation, as config.json's hidden_activation or hidden_act names it. */
typedef enum arch_activation
{
	ARCH_ACT_SILU,				/* "silu": silu(x W_gate) * x W_up */
	ARCH_ACT_GELU_TANH,			/* "gelu_pytorch_tanh": gelu_tanh(x W_gate) * x W_up */
	ARCH_ACT_SWIGLU_OAI			/* gpt-oss's, its config says "silu": activation.h's
								 * cbllm_swiglu_oai, clamped at cfg.swiglu_limit */
} arch_activation;

/* One architecture. */
typedef struct cbllm_arch
{
	const char *hf_name;		/* config.json "architectures"[0], e.g. "LlamaForCausalLM" */
	const char *model_type;		/* config.json "model_type", e.g. "llama" */
	const char *gguf_name;		/* GGUF general.architecture, e.g. "llama" */
	uint32_t	features;		/* ARCH_* */
	arch_activation activation;
} cbllm_arch;

/* What a tensor is, which also says where it is kept and how a dummy is made. */
typedef enum arch_kind
{
	ARCH_MATRIX,				/* cbllm_weight, (rows, cols) in its stored type */
	ARCH_NORM,					/* float *, (rows) converted to f32; dummy: ones */
	ARCH_BIAS					/* float *, (rows) or a small (rows, cols) converted to f32;
								 * dummy: zeros */
} arch_kind;

/* A dimension of a tensor, from the config. */
typedef enum arch_dim
{
	DIM_ONE,					/* 1: the column count of a vector */
	DIM_HIDDEN,					/* hidden_size */
	DIM_HEAD,					/* head_dim */
	DIM_Q,						/* num_attention_heads * head_dim */
	DIM_KV,						/* num_key_value_heads * head_dim */
	DIM_INTERMEDIATE,			/* intermediate_size */
	DIM_VOCAB,					/* vocab_size */
	DIM_EXPERTS,				/* n_experts: the router's rows */
	DIM_EXPERT_FF,				/* expert_intermediate: one expert's MLP width */
	DIM_HEADS,					/* num_attention_heads (the sinks) */
	DIM_Q_GATED,				/* 2 * num_attention_heads * head_dim: q and its gate */
	DIM_LIN_QKV,				/* the linear attention's conv channels: q, k (lin_k_heads *
								 * lin_k_dim each) and v (lin_v_heads * lin_v_dim) */
	DIM_LIN_V,					/* lin_v_heads * lin_v_dim */
	DIM_LIN_HEADS,				/* lin_v_heads */
	DIM_LIN_VDIM,				/* lin_v_dim: one value head */
	DIM_LIN_CONV,				/* lin_conv: the causal conv's kernel */
	DIM_SHARED_FF,				/* shared_intermediate: the shared expert's MLP width */
	DIM_PLE,					/* ple_dim: one layer's per-layer input */
	DIM_PLE_ALL,				/* n_layers * ple_dim: all layers' per-layer inputs */
	DIM_PLE_VOCAB				/* ple_vocab: the per-layer embeddings' rows */
} arch_dim;

/*
 * In a layer tensor, DIM_HEAD, DIM_Q, DIM_Q_GATED, DIM_KV and
 * DIM_INTERMEDIATE are the layer's own (cfg.layer_head_dim, layer_kv_heads,
 * layer_ff): Gemma 4's layers differ in them.
 */

/* Where a tensor lives. */
typedef enum arch_scope
{
	ARCH_BEFORE_LAYERS,			/* a model tensor that comes before the layers (embeddings) */
	ARCH_LAYER,					/* one per layer: "%d" in its names is the layer */
	ARCH_EXPERT,				/* one per expert of a mixture-of-experts layer: its HF name
								 * has "%d" for the layer, then "%d" for the expert; its GGUF
								 * name only the layer's, the experts stacked in one tensor
								 * (n_experts, rows, cols); its offset is in cbllm_expert */
	ARCH_AFTER_LAYERS			/* a model tensor after the layers (final norm, lm_head) */
} arch_scope;

/*
 * How an expert's tensor lies in a safetensors checkpoint: its own tensor
 * (Qwen3-MoE, Mixtral), or expert e's part of one tensor stacking all the
 * experts (gpt-oss: the name has only the layer's "%d"), whose matrices are
 * stored [in, out] (rows and columns swapped) and whose gate and up
 * projections interleave along the last axis: the gate takes the even
 * entries, up the odd ones.  A stacked expert's matrix is copied out at
 * load into a buffer of the model's own, in its (out, in) rows.
 */
typedef enum arch_hf_layout
{
	ARCH_HF_OWN = 0,			/* a tensor of its own, (rows, cols) or (rows) */
	ARCH_HF_STACKED,			/* (E, cols, rows) or (E, rows) */
	ARCH_HF_STACKED_EVEN,		/* (E, cols, 2 rows) or (E, 2 rows): the even entries */
	ARCH_HF_STACKED_ODD,		/* the odd entries */
	ARCH_HF_ROWS,				/* (E, rows, cols): expert e's matrix as stored, bound in place */
	ARCH_HF_ROWS_FIRST,			/* (E, 2 rows, cols): the first rows of expert e's block */
	ARCH_HF_ROWS_SECOND			/* the second */
} arch_hf_layout;

/* Which layers of a model with experts (cfg.layer_moe) a layer tensor belongs to. */
typedef enum arch_layers
{
	ARCH_EVERY_LAYER,			/* all of them (the default) */
	ARCH_DENSE_LAYERS,			/* those whose MLP is one dense MLP: every layer of a model
								 * without experts, and every Gemma 4 layer (its experts
								 * run beside the dense MLP) */
	ARCH_MOE_LAYERS				/* those whose MLP is the experts */
} arch_layers;

/* Which layers of a hybrid model (cfg.layer_linear) a layer tensor belongs to. */
typedef enum arch_mixer
{
	ARCH_ANY_MIXER,				/* all of them (the default) */
	ARCH_ATTN_LAYERS,			/* those that mix tokens by attention: every layer of a
								 * model without linear attention */
	ARCH_LINEAR_LAYERS,			/* those that mix tokens by linear attention */
	ARCH_KV_LAYERS,				/* attention layers that compute their own K and V (not
								 * KV-shared: cfg.layer_kv_source) */
	ARCH_V_LAYERS				/* those of them with a v projection (not cfg.layer_v_is_k) */
} arch_mixer;

/* One tensor role. */
typedef struct arch_tensor
{
	const char *role;			/* short name for messages, e.g. "wq" */
	const char *hf;				/* safetensors name, e.g. "model.layers.%d.self_attn.q_proj.weight" */
	const char *gguf;			/* GGUF name, e.g. "blk.%d.attn_q.weight" */
	arch_kind	kind;
	arch_scope	scope;
	arch_dim	rows;
	arch_dim	cols;			/* DIM_ONE for a vector */
	uint32_t	needs;			/* ARCH_* flags under which it exists; 0: always */
	bool		tied;			/* may be the embeddings (tie_word_embeddings) */
	bool		per_step;		/* read by every forward step (not the embeddings) */
	size_t		offset;			/* of its field in cbllm_model (scope BEFORE/AFTER) or cbllm_layer */
	uint32_t	unless;			/* ARCH_* flags under any of which it does not exist; 0: none */
	arch_layers layers;			/* scope ARCH_LAYER: the layers that have it */
	arch_hf_layout hf_layout;	/* ARCH_EXPERT: how its safetensors tensor holds it */
	arch_mixer	mixer;			/* scope ARCH_LAYER: the layers that have it */
	bool		plain_norm;		/* ARCH_NORM: a plain multiplier even under
								 * ARCH_NORM_PLUS_ONE (Qwen3.5's gated norm) */
	bool		hf_neg_exp;		/* a safetensors checkpoint stores log(-w) (Qwen3.5's A_log):
								 * w = -exp(stored) at load; a GGUF file stores w */
} arch_tensor;

#define ARCH_MAX_PARTS 3

/*
 * A tensor a checkpoint stores fused (Phi-3's self_attn.qkv_proj): its HF
 * name and its row blocks in order, each the field of the role bound to it.
 * A role whose HF name is a fused tensor's is that tensor's rows of its
 * block: the matrix points into the stored tensor, nothing is copied.
 */
typedef struct arch_fused
{
	const char *hf;				/* e.g. "model.layers.%d.self_attn.qkv_proj.weight" */
	int			n_parts;
	arch_dim	rows[ARCH_MAX_PARTS];	/* the blocks' row counts, in stored order */
	size_t		field[ARCH_MAX_PARTS];	/* the cbllm_layer field each block binds */
} arch_fused;

struct cbllm_model_config;

/* The architecture config.json names by "architectures"[0] or "model_type", or NULL. */
const cbllm_arch *arch_find(const char *hf_name, const char *model_type);

/* The first architecture whose GGUF general.architecture is name (len bytes), or NULL. */
const cbllm_arch *arch_find_gguf(const char *name, size_t len);

/* Into buf, "A, B and C": the architectures cbllm runs, for messages. */
void		arch_list_names(char *buf, size_t size);

/* Into buf, "a, b and c": the GGUF general.architecture names cbllm reads, for messages. */
void		arch_list_gguf_names(char *buf, size_t size);

/*
 * Add an architecture to the table (before any model is loaded, from one
 * thread).  CBLLM_ERR_INVALID for a name already there or a full table.
 */
int			arch_register(const cbllm_arch *a, cbllm_err *err);

/* The tensor roles, in load order (before, layer, after); n_out gets their count. */
const arch_tensor *arch_tensors(int *n_out);

/* The role the embeddings may stand for (lm_head). */
const arch_tensor *arch_tied_tensor(void);

/* Whether tensor t exists in a model with these features. */
static inline bool
arch_has_tensor(const arch_tensor *t, uint32_t features)
{
	return (features & t->needs) == t->needs && (features & t->unless) == 0;
}

/*
 * Where role t is stored: *stored_rows rows of which its own start at
 * *first_row: a block of a fused tensor (arch_fused), else its own rows
 * from 0.
 */
void		arch_stored_rows(const arch_tensor *t, const struct cbllm_model_config *cfg,
							 int64_t *stored_rows, int64_t *first_row);

/* The length of dimension d of a model of configuration cfg (the model's, not a layer's own). */
int64_t		arch_dim_size(const struct cbllm_model_config *cfg, arch_dim d);

/* The length of dimension d in layer (-1: outside the layers: arch_dim_size). */
int64_t		arch_layer_dim_size(const struct cbllm_model_config *cfg, arch_dim d, int layer);

/*
 * Into buf, tensor t's safetensors name (gguf false) or GGUF name, for layer
 * (or -1) and, for an ARCH_EXPERT role, expert (else ignored).
 */
void		arch_tensor_name(const arch_tensor *t, int layer, int expert, bool gguf, char *buf,
							 size_t size);

/*
 * A safetensors name of arch_tensor_name as a checkpoint of features stores
 * it: with ARCH_TEXT_CONFIG, "model.x" becomes "model.language_model.x".
 */
void		arch_hf_checkpoint_name(uint32_t features, char *buf, size_t size);

#endif
