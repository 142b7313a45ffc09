/*
 * model.h: a checkpoint of one of arch.c's architectures (Llama and the
 * families that differ from it by arch.h's flags): its configuration
 * (config.json) and its weights, which stay in their stored dtype inside the
 * safetensors mapping.  Each matrix is a cbllm_weight (dtype/weight.h),
 * the type the compute kernels read without knowing the model.
 *
 * Norm vectors are f32 multipliers as the forward pass applies them: with
 * ARCH_NORM_PLUS_ONE (Gemma's RMSNorm scales by 1 + w) the checkpoint loader
 * adds the 1 when it converts them, so the decoder has one RMSNorm.
 *
 * The "dummy" load format (model_dummy.c) reads config.json alone and gives
 * every matrix deterministic pseudo-random bf16 values, for benchmarks of a
 * model's geometry without its weight files (dtype/weight.h says how each
 * element of a dummy matrix is made).  Its norm vectors are ones, as
 * multipliers (the +1 already in), and its biases zeros.
 */
#ifndef CBLLM_MODEL_H
#define CBLLM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/rng.h"
#include "base/util.h"
#include "dtype/weight.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/arch.h"
#include "model/rope.h"

#define CBLLM_MAX_LAYERS 1024		/* num_hidden_layers a config may give */
#define CBLLM_MAX_ROPE 2		/* RoPE configurations of one model (global, local) */
#define CBLLM_MAX_EXPERTS 512	/* experts of one layer a model may have */

/*
 * Positions: rope[0] is the RoPE of rope_theta and rope_scaling; rope[1],
 * when n_rope is 2, that of rope_local_base_freq (Gemma-3's local layers).
 * Layer l rotates with rope[layer_rope[l]] and attends to the last
 * layer_window[l] positions (0: the whole context).  sliding_window is
 * config.json's window when some layer uses it, else 0; the KV block
 * manager may drop blocks behind it only when model_kv_drop_window says so
 * (every layer windowed alike).
 */
typedef struct cbllm_model_config
{
	char		arch[64];		/* "LlamaForCausalLM", "MistralForCausalLM", ... (arch.c) */
	uint32_t	features;		/* ARCH_* flags of the architecture (arch.h) */
	arch_activation activation; /* the MLP's, from the architecture */
	int			hidden;			/* hidden_size */
	int			n_layers;		/* num_hidden_layers */
	int			n_heads;		/* num_attention_heads */
	int			n_kv_heads;		/* num_key_value_heads (GQA when < n_heads) */
	int			head_dim;		/* head_dim, or hidden / n_heads */
	int			intermediate;	/* intermediate_size: the dense MLP's width */
	int			vocab_size;
	int			max_pos;		/* max_position_embeddings */
	int			sliding_window; /* the windowed layers' window; 0: no layer has one */
	int			n_rope;			/* 1 or 2 */
	cbllm_rope	rope[CBLLM_MAX_ROPE];
	uint8_t		layer_rope[CBLLM_MAX_LAYERS];	/* (n_layers) index into rope */
	int32_t		layer_window[CBLLM_MAX_LAYERS]; /* (n_layers) 0: whole context */
	float		rms_eps;
	float		embed_scale;	/* the embeddings' multiplier: 1, or with ARCH_EMBED_SCALE
								 * sqrt(hidden) rounded as the loader says (model.c) */
	float		q_scale;		/* q's multiplier before attention, whose softmax scale is
								 * q_scale / sqrt(head_dim): sqrt(head_dim /
								 * query_pre_attn_scalar) when config.json has it, else 1 */
	bool		tie_embeddings;
	/* mixture of experts (ARCH_MOE; moe.h routes a token) */
	int			n_experts;		/* experts of a sparse layer; 0: no layer has experts */
	int			n_experts_used; /* experts each token goes to (num_experts_per_tok) */
	int			expert_intermediate;	/* one expert's MLP width */
	bool		moe_norm_topk;	/* the chosen experts' weights renormalised to sum 1 */
	int			shared_intermediate;	/* ARCH_SHARED_EXPERT: the shared expert's MLP width */
	float		swiglu_limit;	/* ARCH_ACT_SWIGLU_OAI's clamp (swiglu_limit, 7 when absent) */
	uint8_t		layer_moe[CBLLM_MAX_LAYERS];	/* (n_layers) 1: the layer's MLP is the experts */
	/*
	 * hybrid models (ARCH_LINEAR_ATTN): layer l mixes tokens by Gated
	 * DeltaNet linear attention when layer_linear[l], else by attention.
	 * A linear layer's state (a causal conv's last lin_conv - 1 inputs and
	 * a (lin_v_heads, lin_k_dim, lin_v_dim) matrix per sequence) lives in
	 * the state cache (kv/state_cache.h) at index state_layer[l]; an
	 * attention layer's K and V in the KV cache at index kv_layer[l].
	 * Value head h reads key head h / (lin_v_heads / lin_k_heads) (HF's
	 * grouped order), or h % lin_k_heads when lin_v_tiled (a GGUF file's
	 * heads, reordered by llama.cpp's converter).
	 */
	uint8_t		layer_linear[CBLLM_MAX_LAYERS]; /* (n_layers) 1: linear attention */
	int			n_linear_layers;
	int			n_kv_layers;	/* layers with K and V in the KV cache: n_layers without
								 * linear ones */
	int16_t		kv_layer[CBLLM_MAX_LAYERS]; /* (n_layers) KV cache layer, -1: none */
	int16_t		state_layer[CBLLM_MAX_LAYERS];	/* (n_layers) state cache layer, -1: none */
	int			lin_k_heads;	/* linear_num_key_heads */
	int			lin_v_heads;	/* linear_num_value_heads, a multiple of lin_k_heads */
	int			lin_k_dim;		/* linear_key_head_dim */
	int			lin_v_dim;		/* linear_value_head_dim */
	int			lin_conv;		/* linear_conv_kernel_dim */
	bool		lin_v_tiled;	/* value heads in a GGUF file's tiled order (above) */
	/*
	 * per-layer attention geometry (every model: model_config_cache_layers
	 * fills the uniform values where a config gives none).  Gemma 4's full
	 * layers have wider heads (global_head_dim) than its sliding ones, and
	 * its last num_kv_shared_layers layers compute no K and V: each reads
	 * the cache of the last earlier layer of its kind (layer_kv_source),
	 * so kv_layer[l] is that layer's.
	 */
	int16_t		layer_head_dim[CBLLM_MAX_LAYERS];	/* (n_layers) q, k and v heads' size */
	int16_t		layer_kv_heads[CBLLM_MAX_LAYERS];	/* (n_layers) K and V heads */
	int32_t		layer_ff[CBLLM_MAX_LAYERS]; /* (n_layers) the dense MLP's width
											 * (Gemma 4's double-wide MLP of KV-shared layers) */
	int16_t		layer_kv_source[CBLLM_MAX_LAYERS];	/* (n_layers) the layer whose K and V it
													 * attends to: itself, or the source of a
													 * KV-shared layer */
	uint8_t		layer_v_is_k[CBLLM_MAX_LAYERS]; /* (n_layers) 1: no v projection, the values
												 * are the keys as projected (Gemma 4's
												 * attention_k_eq_v on full layers) */
	int			n_kv_shared;	/* num_kv_shared_layers: the last layers that reuse K and V */
	float		attn_scale;		/* the attention softmax's scale when the model fixes one
								 * (Gemma 4: 1); 0: q_scale / sqrt(the layer's head size) */
	float		logit_softcap;	/* final_logit_softcapping c: logits = c tanh(logits / c); 0: none */
	int			ple_dim;		/* hidden_size_per_layer_input (ARCH_PLE): each layer's
								 * per-layer input width; 0: none */
	int			ple_vocab;		/* vocab_size_per_layer_input: rows of the per-layer embeddings */
	float		ple_embed_scale;	/* their multiplier: sqrt(ple_dim), rounded as embed_scale */
	int32_t		bos_id;			/* -1 when absent */
	int32_t		eos_id;			/* -1 when absent */
} cbllm_model_config;

/* One expert of a mixture-of-experts layer: an MLP of its own. */
typedef struct cbllm_expert
{
	cbllm_weight w_gate;		/* (expert_intermediate, hidden) */
	cbllm_weight w_up;			/* (expert_intermediate, hidden) */
	cbllm_weight w_down;		/* (hidden, expert_intermediate) */
	float	   *b_gate;			/* (expert_intermediate) with ARCH_MOE_BIASES, else NULL */
	float	   *b_up;			/* (expert_intermediate) with ARCH_MOE_BIASES */
	float	   *b_down;			/* (hidden) with ARCH_MOE_BIASES */
} cbllm_expert;

typedef struct cbllm_layer
{
	float	   *attn_norm;		/* (hidden), converted to f32 */
	cbllm_weight wq;			/* (n_heads * head_dim, hidden) */
	cbllm_weight wk;			/* (n_kv_heads * head_dim, hidden) */
	cbllm_weight wv;			/* (n_kv_heads * head_dim, hidden) */
	float	   *bq;				/* (n_heads * head_dim) with ARCH_QKV_BIAS, else NULL */
	float	   *bk;				/* (n_kv_heads * head_dim) with ARCH_QKV_BIAS */
	float	   *bv;				/* (n_kv_heads * head_dim) with ARCH_QKV_BIAS */
	float	   *q_norm;			/* (head_dim) with ARCH_QK_NORM, each q head's RMSNorm */
	float	   *k_norm;			/* (head_dim) with ARCH_QK_NORM, each k head's RMSNorm */
	float	   *sinks;			/* (n_heads) each head's attention sink logit; NULL without */
	cbllm_weight wo;			/* (hidden, n_heads * head_dim) */
	float	   *bo;				/* (hidden) with ARCH_O_BIAS */
	float	   *attn_out_norm;	/* (hidden) with ARCH_SANDWICH_NORM: norms the attention's output */
	float	   *mlp_norm;		/* (hidden), converted to f32: norms the MLP's input */
	cbllm_weight w_gate;		/* (intermediate, hidden) on a dense layer */
	cbllm_weight w_up;			/* (intermediate, hidden) on a dense layer */
	cbllm_weight w_down;		/* (hidden, intermediate) on a dense layer */
	cbllm_weight router;		/* (n_experts, hidden) on a layer with experts: its logits
								 * choose each token's experts */
	float	   *router_bias;	/* (n_experts) with ARCH_MOE_BIASES, else NULL */
	float	   *router_scale;	/* (hidden) Gemma 4: the router's input is rmsnorm(x) times
								 * this (router.scale / sqrt(hidden), folded at load) */
	float	   *expert_scale;	/* (n_experts) Gemma 4: each chosen expert's weight times this */
	float	   *moe_in_norm;	/* (hidden) Gemma 4: norms x into the experts' input */
	float	   *dense_out_norm; /* (hidden) Gemma 4: norms the dense MLP's output */
	float	   *moe_out_norm;	/* (hidden) Gemma 4: norms the experts' output */
	cbllm_expert *experts;		/* (n_experts) on a layer with experts, else NULL */
	cbllm_weight w_sh_gate;		/* (shared_intermediate, hidden) with ARCH_SHARED_EXPERT on a
								 * layer with experts: the shared expert's MLP */
	cbllm_weight w_sh_up;		/* (shared_intermediate, hidden) */
	cbllm_weight w_sh_down;		/* (hidden, shared_intermediate) */
	cbllm_weight w_sh_router;	/* (1, hidden): the logit whose sigmoid weighs the shared expert */
	float	   *mlp_out_norm;	/* (hidden) with ARCH_SANDWICH_NORM: norms the MLP's output */
	/* a linear-attention layer's (cfg.layer_linear; the attention fields above are unset) */
	cbllm_weight w_lin_qkv;		/* (2 lin_k_heads lin_k_dim + lin_v_heads lin_v_dim, hidden):
								 * the conv's channels q, k, v */
	cbllm_weight w_lin_z;		/* (lin_v_heads * lin_v_dim, hidden): the output gate */
	cbllm_weight w_lin_b;		/* (lin_v_heads, hidden): beta's logits */
	cbllm_weight w_lin_a;		/* (lin_v_heads, hidden): the decay's input */
	float	   *lin_conv;		/* (qkv channels, lin_conv) the causal conv's kernels, f32 */
	float	   *lin_dt_bias;	/* (lin_v_heads) added to a before softplus */
	float	   *lin_a;			/* (lin_v_heads) -exp(A_log): the decay g = lin_a *
								 * softplus(a + dt_bias) */
	float	   *lin_norm;		/* (lin_v_dim) the gated RMSNorm's multiplier, plain */
	cbllm_weight w_lin_out;		/* (hidden, lin_v_heads * lin_v_dim) */
	/* Gemma 4 */
	cbllm_weight w_ple_gate;	/* (ple_dim, hidden) with ARCH_PLE: the per-layer input's gate */
	cbllm_weight w_ple_proj;	/* (hidden, ple_dim) with ARCH_PLE: its projection */
	float	   *ple_norm;		/* (hidden) with ARCH_PLE: norms the projection */
	float	   *layer_scalar;	/* (1) with ARCH_GEMMA4: multiplies x at the layer's end */
	float		layer_scalar_value; /* layer_scalar[0] read at load (1 without it), for the
									 * forward pass on any backend */
} cbllm_layer;

typedef struct cbllm_model
{
	cbllm_model_config cfg;
	const char *dir;			/* the caller's string, valid during model_load only */
	st_archive *st;				/* NULL for the dummy format and GGUF files */
	gguf_file  *gguf;			/* the mapped GGUF file the matrices point into; NULL
								 * otherwise.  Its tokenizer.* keys stay readable */
	cbllm_weight embed;			/* (vocab, hidden) */
	cbllm_weight embed_ple;		/* (ple_vocab, n_layers * ple_dim) with ARCH_PLE: each token's
								 * per-layer inputs, all layers' in a row */
	cbllm_weight w_ple_model_proj;	/* (n_layers * ple_dim, hidden) with ARCH_PLE: the
									 * embeddings' part of the per-layer inputs */
	float	   *ple_proj_norm;	/* (ple_dim) with ARCH_PLE: norms each layer's slice of it */
	cbllm_layer *layers;		/* (n_layers) */
	float	   *final_norm;		/* (hidden), converted to f32 */
	cbllm_weight lm_head;		/* (vocab, hidden); the embedding when tied */
	bool		lm_head_tied;	/* lm_head is the embedding, not a tensor of its own */
	size_t		weight_bytes;	/* bytes of all matrices as stored */
	size_t		step_weight_bytes;	/* bytes of the layer matrices and lm_head */
	int64_t		matmul_params;	/* elements of the layer matrices and lm_head */
	double		quantize_seconds;	/* spent quantizing at load (weight_format); 0 if none */
} cbllm_model;

/* Parse dir/config.json; errors name the file and the problem. */
int			model_config_load(const char *dir, cbllm_model_config *cfg, cbllm_err *err);

/* Parse the NUL-terminated text of a config.json; path names it in messages. */
int			model_config_parse(const char *json, const char *path, cbllm_model_config *cfg,
							   cbllm_err *err);

/*
 * Fill cfg's positions (model_config_rope.c): rope_theta, rope_scaling,
 * rope_local_base_freq, partial_rotary_factor, sliding_window,
 * use_sliding_window, max_window_layers, layer_types and
 * sliding_window_pattern.  Needs n_layers, head_dim and max_pos parsed.
 * root is the parsed config.json (a cJSON object).
 */
struct cJSON;
int			model_config_positions(const struct cJSON *root, cbllm_model_config *cfg,
								   const char *path, cbllm_err *err);

/*
 * config.json's layer_types, where root has it (not null): kind[l] (of
 * n_layers) is the index in names (n_names of them) of layer l's type;
 * *given says whether the list was there.  A list of another length, or a
 * name outside names, is an error naming path and the names taken.
 */
int			model_config_layer_types(const struct cJSON *root, int n_layers,
									 const char *const *names, int n_names, int *kind,
									 bool *given, const char *path, cbllm_err *err);

/*
 * Layer l (of cfg->n_layers) is windowed when sliding[l]: it gets window (0:
 * none) and, when local_base > 0, rope[1] = plain RoPE of that base; the
 * other layers the whole context and rope[0].  Sets n_rope and sliding_window.
 */
void		model_config_layer_positions(cbllm_model_config *cfg, const bool *sliding, int window,
										 double local_base);

/* Build each of cfg's RoPE configurations once; an error names path and the problem. */
int			model_config_check_ropes(const cbllm_model_config *cfg, const char *path,
									 cbllm_err *err);

/*
 * Hybrid models (model_config_hybrid.c): the linear-attention geometry and
 * layer_types (or full_attention_interval, 4 when absent) of config.json
 * root, then the layers' cache indices.  Without ARCH_LINEAR_ATTN only the
 * indices: every layer has KV.
 */
int			model_config_hybrid(const struct cJSON *root, cbllm_model_config *cfg,
								const char *path, cbllm_err *err);

/*
 * Gemma 4's fields (model_config_gemma4.c): per-type head sizes, kv heads
 * and RoPE, windows, KV sharing, the double-wide MLP, per-layer embeddings,
 * soft-capping; then the cache layers.  Needs the common fields parsed.
 */
int			model_config_gemma4(const struct cJSON *root, cbllm_model_config *cfg,
								const char *path, cbllm_err *err);

/*
 * What Gemma 4's configs (config.json or GGUF keys) share once the layers'
 * sizes and rope[0] (full layers) and rope[1] (sliding) are set: each
 * layer's RoPE and window from full (n_layers), the attention scale 1, the
 * KV-shared layers' sources (the last earlier unshared layer of the same
 * kind) and the cache layers.
 */
int			model_config_gemma4_layers(cbllm_model_config *cfg, const bool *full, int window,
									   int n_shared, const char *path, cbllm_err *err);

/*
 * kv_layer, state_layer, n_kv_layers and n_linear_layers from layer_linear
 * and layer_kv_source (KV-shared layers take their source's cache layer);
 * the per-layer head sizes, kv heads and MLP widths a config left 0 take
 * head_dim, n_kv_heads and intermediate.
 */
void		model_config_cache_layers(cbllm_model_config *cfg);

/* Give every layer rope[0] = plain RoPE of base theta and the window (0: none). */
void		model_config_uniform_positions(cbllm_model_config *cfg, double theta, int window);

/*
 * The widest input of any of cfg's matrices (a matmul's activations): the
 * hidden size, the MLPs' widths, the attention's and the linear
 * attention's outputs.
 */
static inline int64_t
model_max_cols(const cbllm_model_config *cfg)
{
	int64_t		w[] = {cfg->hidden, cfg->intermediate,
		cfg->n_experts > 0 ? cfg->expert_intermediate : 0, cfg->shared_intermediate,
		(int64_t) cfg->n_heads * cfg->head_dim, (int64_t) cfg->lin_v_heads * cfg->lin_v_dim,
	cfg->ple_dim};
	int64_t		m = 0;

	for (int i = 0; i < (int) (sizeof(w) / sizeof(w[0])); i++)
		m = w[i] > m ? w[i] : m;
	for (int l = 0; l < cfg->n_layers; l++)
	{
		m = cfg->layer_ff[l] > m ? cfg->layer_ff[l] : m;
		m = (int64_t) cfg->n_heads * cfg->layer_head_dim[l] > m ?
			(int64_t) cfg->n_heads * cfg->layer_head_dim[l] : m;
	}
	return m;
}

/* The widest head of any layer. */
static inline int
model_max_head_dim(const cbllm_model_config *cfg)
{
	int			m = cfg->head_dim;

	for (int l = 0; l < cfg->n_layers; l++)
		m = cfg->layer_head_dim[l] > m ? cfg->layer_head_dim[l] : m;
	return m;
}

/* The widest K (or V) row of one token in any layer: kv heads times head size. */
static inline int64_t
model_max_kv_row(const cbllm_model_config *cfg)
{
	int64_t		m = (int64_t) cfg->n_kv_heads * cfg->head_dim;

	for (int l = 0; l < cfg->n_layers; l++)
		if ((int64_t) cfg->layer_kv_heads[l] * cfg->layer_head_dim[l] > m)
			m = (int64_t) cfg->layer_kv_heads[l] * cfg->layer_head_dim[l];
	return m;
}

/* The widest dense MLP of any layer. */
static inline int
model_max_ff(const cbllm_model_config *cfg)
{
	int			m = cfg->intermediate;

	for (int l = 0; l < cfg->n_layers; l++)
		m = cfg->layer_ff[l] > m ? cfg->layer_ff[l] : m;
	return m;
}

/*
 * Layers with K and V in the KV cache: the attention layers that compute
 * their own (not a hybrid model's linear layers, not KV-shared ones).
 */
static inline int
model_kv_layers(const cbllm_model_config *cfg)
{
	return cfg->n_kv_layers;
}

/* Whether every cache layer has the same K and V geometry (n_kv_heads, head_dim). */
bool		model_kv_uniform(const cbllm_model_config *cfg);

/*
 * Into row (model_kv_layers entries), each cache layer's K (or V) elements
 * per position: its kv heads times its head size.  Returns their sum.
 */
int64_t		model_kv_rows(const cbllm_model_config *cfg, int32_t *row);

/* The window behind which KV blocks may be dropped: the window when every layer has it, else 0. */
int			model_kv_drop_window(const cbllm_model_config *cfg);

/* What model_load_ex loads, and from where. */
typedef struct model_load_params
{
	const char *dir;
	const char *format;			/* NULL or "auto" or "safetensors": the checkpoint;
								 * "dummy": random weights */
	bool		dummy_on_host;	/* dummy: fill host buffers now (CPU backend); false
								 * leaves data NULL for a device backend to generate */
	const char *weight_format;	/* NULL or "auto": the matrices as stored; "q8_0", "q4_k", ...:
								 * float matrices quantized at load (model_quantize) */
	int			threads;		/* for that quantization; 0: one per online CPU */
} model_load_params;

/* Load config and weights of the model in dir (the safetensors checkpoint). */
int			model_load(const char *dir, cbllm_model **out, cbllm_err *err);

/* Load config and weights as p says: from the checkpoint or as dummies. */
int			model_load_ex(const model_load_params *p, cbllm_model **out, cbllm_err *err);

/* What a weight format quantizes float matrices to. */
typedef struct model_weight_mix
{
	cbllm_dtype base;			/* the layer matrices */
	cbllm_dtype more;			/* those an _M mix gives more bits (model_quantize.c); else base */
} model_weight_mix;

/*
 * A weight format's name (NULL, "auto", a quantized type in any case: "q8_0",
 * "Q4_K", or a mix: "q4_k_m", "q5_k_m") into *quantize and, when it
 * quantizes, *mix; an unknown name fails listing the accepted ones.
 */
int			model_weight_format(const char *name, bool *quantize, model_weight_mix *mix,
								cbllm_err *err);

/*
 * Quantize m's float matrices as mix says at load (model_quantize.c says
 * which type each gets), rows split over n_threads (0: one per online CPU);
 * counts the time in m->quantize_seconds.  An error names the tensor and row.
 */
int			model_quantize(cbllm_model *m, model_weight_mix mix, int n_threads, cbllm_err *err);

/*
 * m->layers for m->cfg, and the experts of each layer with them
 * (cfg.layer_moe), zeroed; the loaders call it once the config is read.
 */
int			model_alloc_layers(cbllm_model *m, cbllm_err *err);

/* Release a loaded or partly loaded model (NULL is allowed). */
void		model_free(cbllm_model *m);

/*
 * One tensor of a model as model_visit shows it: its role, its layer (-1 for
 * a model tensor), its shape and its field.  Matrices are numbered in visit
 * order (the dummy seeds use the number); a tied lm_head has none.
 */
typedef struct model_tensor
{
	const arch_tensor *t;
	int			layer;
	int			expert;			/* of an ARCH_EXPERT role; -1 otherwise */
	int64_t		rows;
	int64_t		cols;			/* 1 for a vector */
	int64_t		stored_rows;	/* rows of the stored tensor: more than rows for a fused one */
	int64_t		first_row;		/* of its rows in the stored tensor (arch_stored_rows) */
	cbllm_weight *matrix;		/* ARCH_MATRIX: the field */
	float	  **vector;			/* ARCH_NORM, ARCH_BIAS: the field */
	bool		tied;			/* the embeddings stand for it: nothing of its own */
	uint64_t	index;			/* of a matrix not tied: 0 for the first, counting in visit order */
} model_tensor;

/* Called by model_visit for each tensor; a nonzero return stops the walk and is returned. */
typedef int (*model_visit_fn) (void *arg, const model_tensor *mt, cbllm_err *err);

/*
 * Call fn for every tensor m's architecture has, in the order: model tensors
 * before the layers, layer 0's, ..., the last layer's, model tensors after.
 * m->layers must be allocated.  A role marked tied is shown tied when
 * m->lm_head_tied.  The fields are m's own (as strchr does, the pointers
 * are not const): the loaders fill them through it.
 */
int			model_visit(const cbllm_model *m, model_visit_fn fn, void *arg, cbllm_err *err);

/*
 * *out = a malloc'd f32 copy of a stored vector of n elements of dtype, plus
 * one each when plus_one (Gemma's (1 + w) folded in).
 */
int			model_vector_f32(cbllm_dtype dtype, const void *data, int64_t n, bool plus_one,
							 float **out, cbllm_err *err);

/*
 * Into *gguf_path (malloc'd), the GGUF file path names: path itself when it
 * is a file ending in ".gguf", else the one .gguf file of a directory that
 * holds no .safetensors file; NULL when path is a checkpoint directory.
 * Several .gguf files or a split one ("-00001-of-00003.gguf") are errors
 * saying what was found (model_gguf.c).
 */
int			model_gguf_path(const char *path, char **gguf_path, cbllm_err *err);

/* Map the GGUF file at path, read m's cfg from its keys and bind its tensors (model_gguf.c). */
int			model_load_gguf(cbllm_model *m, const char *path, cbllm_err *err);

#define MODEL_WEIGHT_TYPES_LEN 128	/* room for model_weight_types' text */

/*
 * Into buf, the weight types m's tensors are used in and how many of each,
 * in the weight-type table's order: "F32 7, Q8_0 14".  Matrices count under
 * their stored type, once per role (a fused tensor once per block it holds;
 * a tied lm_head not again), norms and biases as F32.
 */
void		model_weight_types(const cbllm_model *m, char *buf, size_t size);

/* Give m (its cfg loaded) dummy matrices and unit norms (model_dummy.c). */
int			model_load_dummy(cbllm_model *m, bool on_host, cbllm_err *err);

#endif
