/*
 * backend.h: the compute backend table.  The forward pass (forward.c) is
 * written once against these operations; backend_cpu.c implements them with
 * the vectorised kernels and the thread pool, and a device backend implements
 * the same table over device memory.  Activation pointers passed to an
 * operation are backend memory from ops->alloc.
 *
 * The batch of one step is flat: T tokens from any number of sequences.
 *
 *   array            shape      meaning
 *   tokens[i]        (T)        token id of batch entry i
 *   pos[i]           (T)        its position in its sequence
 *   seq[i]           (T)        index of its sequence in [0, n_seqs)
 *   rope_set[i]      (T)        its sequence's RoPE factor set: 1 for longrope's long factors
 *                               (rope.h), else 0; NULL: 0 for every token
 *   slot[i]          (T)        KV slot written: block * block_size + pos % block_size
 *   block_tables[s]  (n_seqs)   block ids of sequence s, in position order
 *   rows[r]          (n_rows)   batch entries whose logits the step computes
 *
 * Token i attends to positions [0, pos[i]] of its sequence (or, in a layer
 * l with cfg.layer_window[l] > 0, the last layer_window[l] of them), read
 * through the block table.
 *
 * A backend may replay recorded decode steps (CUDA graphs): it says through
 * graph_tokens how many tokens a decode step of T tokens is padded to, and
 * the forward pass pads it with tokens of an extra sequence whose only block
 * is pad_block, a block the backend keeps for this, then marks the batch.
 *
 * The KV pool: kv_blocks says how many blocks fit the memory budget when the
 * caller gave no size; a backend that keeps K and V in memory of its own
 * allocates them with alloc_kv, and then the engine's kv_cache holds only
 * the geometry.  Which block holds what is the block manager's
 * (block_manager.h); a backend only stores and copies.  How a backend stores a block (its dtype and bytes) and
 * how a backend is found and created are in backend_registry.h.
 */
#ifndef CBLLM_BACKEND_H
#define CBLLM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "kv/kv_cache.h"
#include "kv/state_cache.h"
#include "kv/swap_space.h"
#include "model/model.h"
#include "sample/sampler.h"

typedef struct fwd_batch
{
	int			n_tokens;
	const int32_t *tokens;
	const int32_t *pos;
	const int32_t *seq;
	const int64_t *slot;
	int			n_seqs;
	const int32_t *const *block_tables;
	int			n_rows;
	const int32_t *rows;
	bool		graph;			/* a padded decode step: the backend may record or replay it */
	const uint8_t *rope_set;	/* NULL: every token in set 0 */
	const int32_t *state_slots; /* (n_seqs) each sequence's slot in the state cache of a hybrid
								 * model's linear-attention layers; NULL without them */
} fwd_batch;


/* What a backend may give the KV pool when the caller set no size (kv_blocks below). */
typedef struct backend_kv_budget
{
	double		memory_fraction;	/* of a device's memory, for weights, workspace and KV pool */
	int			max_seqs;		/* most sequences in one step */
	int			block_size;		/* KV positions per block */
	size_t		state_bytes;	/* a hybrid model's linear-attention states the engine keeps
								 * in host memory (the CPU's budget counts them) */
} backend_kv_budget;

typedef struct cbllm_backend cbllm_backend;

#define BACKEND_MAX_GROUP 3

struct cbllm_backend
{
	const char *name;
	const char *cpu_isa;		/* the CPU kernel set it runs ("avx512", ...); NULL for a device */
	void	   *ctx;
	int			pad_block;		/* a KV block id for padding tokens; -1 when graph_tokens is NULL */
	int64_t		graph_replays;	/* steps replayed from a recorded graph (the backend counts) */
	int64_t		expert_pairs;	/* (token, expert) pairs its moe computed (the backend counts) */
	int64_t		expert_runs;	/* experts its moe ran, each over all the rows that chose it */
	double		swap_bytes_per_sec; /* measured swap copy rate; 0: the engine times swaps itself */
	bool		per_layer_heads;	/* runs layers of different head sizes and kv heads, KV
									 * shared between layers and rmsnorm without a weight
									 * (Gemma 4) */

	void	   *(*alloc) (cbllm_backend *be, size_t bytes);
	void		(*free) (cbllm_backend *be, void *p);

	/*
	 * KV blocks that fit b once the weights and the workspace are counted;
	 * called when the caller set no KV size.  CBLLM_ERR_KV_BUDGET when none
	 * fit.
	 */
	int			(*kv_blocks) (cbllm_backend *be, const backend_kv_budget *b, int *n_blocks,
							  cbllm_err *err);
	/* Optional: allocate K and V of n_blocks blocks in the backend's own memory. */
	int			(*alloc_kv) (cbllm_backend *be, int n_blocks, cbllm_err *err);

	/* Per-step set-up (RoPE tables, batch upload); a negative status on failure. */
	int			(*begin_step) (cbllm_backend *be, const fwd_batch *b, cbllm_err *err);
	/*
	 * Optional: once, after create and before the first step, rearrange m's
	 * matrices into the backend's own layout where it has one (the CPU's:
	 * cbllm_weight.packed_rows): in place in the model's own buffers, into
	 * new buffers the model then owns for matrices in a mapping.
	 */
	int			(*pack_weights) (cbllm_backend *be, cbllm_model *m, cbllm_err *err);
	/* x (T, hidden) = embedding rows of b->tokens */
	void		(*embed) (cbllm_backend *be, const cbllm_weight *emb, const fwd_batch *b, float *x);
	/* Optional: the padded size of a decode step of T tokens; 0 or T to run it as it is. */
	int			(*graph_tokens) (cbllm_backend *be, int T);
	/* Optional: after the step's last operation; a negative status fails the step. */
	int			(*end_step) (cbllm_backend *be, cbllm_err *err);
	/*
	 * out (T, dim) = x / rms(x) * w, row by row; out may be x.  The rows may
	 * be heads: q (T, n_heads, head_dim) is T * n_heads rows of head_dim.
	 * w NULL: no weight (Gemma 4's v norm), only where per_layer_heads.
	 */
	void		(*rmsnorm) (cbllm_backend *be, const float *x, const float *w, int T, int dim,
							float eps, float *out);
	/*
	 * y[i] (T, w[i]->rows) = x (T, cols) @ w[i]^T for i < n (at most
	 * BACKEND_MAX_GROUP): matrices that read the same input run as one group.
	 */
	void		(*matmul) (cbllm_backend *be, int n, const cbllm_weight *const *w, const float *x,
						   int T, float *const *y);
	/*
	 * rotate x (T, n_heads, head_dim) in place by the positions of the step
	 * with RoPE configuration cfg.rope[rope] (a layer's cfg.layer_rope), each
	 * token in its factor set (b->rope_set); head_dim is the rope's own
	 * (rope_head_dim)
	 */
	void		(*rope) (cbllm_backend *be, float *x, int T, int n_heads, int rope,
						 const fwd_batch *b);
	/*
	 * write k, v (T, n_kv_heads, head_dim) of the step into the layer's
	 * cache slots (the layer's own kv heads and head size: cfg.layer_kv_heads,
	 * layer_head_dim)
	 */
	void		(*kv_store) (cbllm_backend *be, kv_cache *kv, int layer, const float *k,
							 const float *v, const fwd_batch *b);
	/*
	 * out (T, n_heads, head_dim) = causal attention of q over each
	 * sequence's cache, within the layer's cfg.layer_window; sinks
	 * (n_heads), a model vector, or NULL: each head's sink logit joins its
	 * softmax's denominator (gpt-oss)
	 */
	void		(*attention) (cbllm_backend *be, const kv_cache *kv, int layer, const float *q,
							  const float *sinks, const fwd_batch *b, float *out);
	/* gate[i] = silu(gate[i]) * up[i] */
	void		(*silu_mul) (cbllm_backend *be, float *gate, const float *up, int64_t n);
	/* gate[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh form (gelu_pytorch_tanh) */
	void		(*gelu_tanh_mul) (cbllm_backend *be, float *gate, const float *up, int64_t n);
	/* gate[i] = swiglu_oai(gate[i], up[i]) at cfg.swiglu_limit (activation.h; gpt-oss) */
	void		(*swiglu_oai_mul) (cbllm_backend *be, float *gate, const float *up, int64_t n);
	/* x[i] *= s */
	void		(*scale) (cbllm_backend *be, float *x, float s, int64_t n);
	/* x[i] += y[i] */
	void		(*add) (cbllm_backend *be, float *x, const float *y, int64_t n);
	/* x (T, dim) += bias (dim) on every row; bias is a model vector (an ARCH_BIAS tensor) */
	void		(*add_bias) (cbllm_backend *be, float *x, const float *bias, int T, int dim);
	/* Optional: x += y, then out (T, dim) = rmsnorm(x) * w */
	void		(*add_rmsnorm) (cbllm_backend *be, float *x, const float *y, const float *w, int T,
								int dim, float eps, float *out);
	/*
	 * Optional, needed by a model with experts: out (T, hidden) = the
	 * mixture of experts of layer w on x (T, hidden), the tokens routed by
	 * logits (T, cfg.n_experts), the router's output, as moe.h says: each
	 * token's sum of its chosen experts' MLPs, act(x Wgate) * x Wup) Wdown,
	 * weighted.  Each expert's matrices are read once for all the tokens
	 * that chose it; a token's result does not depend on the others.  out
	 * is not x.
	 */
	void		(*moe) (cbllm_backend *be, const cbllm_layer *w, const float *x,
						const float *logits, int T, float *out);
	/*
	 * Optional, needed by a hybrid model: out (T, lin_v_heads * lin_v_dim)
	 * = the Gated DeltaNet of layer l (w) over the step, from its input
	 * projections qkv (T, conv channels: q, k, v), z (T, lin_v_heads *
	 * lin_v_dim), beta (T, lin_v_heads) and alpha (T, lin_v_heads); qkv is
	 * overwritten.  Each sequence s of the batch continues its state in sc
	 * (slot b->state_slots[s], layer cfg.state_layer[l]) through its tokens
	 * in order, from a zero state when its first token is at position 0,
	 * and leaves it updated.  Per token t of a sequence, with value head h
	 * reading key head kh (cfg.lin_v_tiled):
	 *
	 *   c = silu(causal depthwise conv of the qkv channels, w->lin_conv,
	 *       over the sequence's past inputs);  q, k, v = c split
	 *   q = q / |q| / sqrt(lin_k_dim),  k = k / |k|  (|x| = sqrt(sum x^2 + 1e-6))
	 *   S_h = exp(g) S_h,  g = lin_a[h] softplus(alpha + lin_dt_bias[h])
	 *   S_h += k (sigmoid(beta) (v - k^T S_h))^T;  o = q^T S_h
	 *   out = rmsnorm(o) * lin_norm * silu(z)  (per value head)
	 */
	void		(*linear_attention) (cbllm_backend *be, state_cache *sc, int l,
									 const cbllm_layer *w, float *qkv, const float *z,
									 const float *beta, const float *alpha, const fwd_batch *b,
									 float *out);
	/*
	 * Optional: keep a hybrid model's linear-attention states in the
	 * backend's own memory, p->n_slots of them in state_cache.h's layout
	 * (the engine's state_cache then has no_data); copy_state moves one
	 * slot's state over all layers (state_cache_save's layout) to host
	 * memory or back, for a swap preemption.
	 */
	int			(*alloc_state) (cbllm_backend *be, const state_cache_params *p, cbllm_err *err);
	int			(*copy_state) (cbllm_backend *be, int32_t slot, float *host, bool to_host,
							   cbllm_err *err);
	/* Optional, needed by ARCH_ATTN_GATE: row r of x (n, 2 width) into first[r] and second[r] (width) */
	void		(*split_halves) (cbllm_backend *be, const float *x, int64_t n, int width,
								 float *first, float *second);
	/* Optional, needed by ARCH_SHARED_EXPERT: x[t] (T, dim) += sigmoid(logit[t]) * y[t], per row */
	void		(*add_gated_rows) (cbllm_backend *be, float *x, const float *y, const float *logit,
								   int T, int dim);
	/* Optional, needed by ARCH_ATTN_GATE: x[i] *= sigmoid(gate[i]) */
	void		(*sigmoid_mul) (cbllm_backend *be, float *x, const float *gate, int64_t n);
	/* Optional, needed by final logit soft-capping: x[i] = cap * tanh(x[i] / cap) */
	void		(*softcap) (cbllm_backend *be, float *x, float cap, int64_t n);
	/* Optional, needed by ARCH_PLE: out (b, a, width) = x (a, b, width), axes 0 and 1 swapped */
	void		(*swap_axes) (cbllm_backend *be, const float *x, int a, int b, int width,
							  float *out);
	/* out (n, dim) = rows of x (., dim) */
	void		(*gather_rows) (cbllm_backend *be, const float *x, const int32_t *rows, int n,
								int dim, float *out);
	/* Optional: get the host swap area ready (page-lock it); once, before any swap. */
	int			(*prepare_swap) (cbllm_backend *be, swap_space *sw, cbllm_err *err);
	/* copy n cache blocks to swap blocks (out) or swap blocks to cache blocks (in) */
	int			(*swap_out) (cbllm_backend *be, const kv_cache *kv, swap_space *sw,
							 const int32_t *blocks, const int32_t *swap_ids, int n, cbllm_err *err);
	int			(*swap_in) (cbllm_backend *be, kv_cache *kv, const swap_space *sw,
							const int32_t *blocks, const int32_t *swap_ids, int n, cbllm_err *err);
	/*
	 * Optional: tokens[r] = a token drawn from the first n_ids of row r of
	 * logits (n_rows, vocab) in backend memory with p[r]; only the ids reach
	 * the host.  masks (host memory: n_masks rows of (n_ids + 31) / 32
	 * words) are the constraints' of the rows whose p[r].mask names one:
	 * their other tokens become -inf in logits before the draw.
	 */
	int			(*sample) (cbllm_backend *be, float *logits, int n_rows, int vocab, int n_ids,
						   const sampler_row *p, const uint32_t *masks, int n_masks,
						   int32_t *tokens, cbllm_err *err);
	/* Optional: false when the device can no longer run anything (a sticky fault). */
	bool		(*healthy) (cbllm_backend *be);
	/* copy n floats of backend memory to host memory */
	int			(*download) (cbllm_backend *be, const float *src, float *dst, size_t n,
							 cbllm_err *err);
	void		(*destroy) (cbllm_backend *be);
};

typedef struct cpu_backend_params
{
	const cbllm_model_config *cfg;
	cbllm_threadpool *pool;
	const char *isa;			/* kernel set: NULL or "auto" for the best */
	int			max_tokens;		/* most tokens in one step */
	int			max_ctx;		/* longest sequence */
	bool		quantized;		/* some matrix is block-quantized: room for quantized activations */
	cbllm_dtype kv_dtype;		/* the KV cache's elements: CBLLM_F32 (0), CBLLM_F16 or CBLLM_BF16 */
} cpu_backend_params;

int			cpu_backend_create(const cpu_backend_params *p, cbllm_backend **out, cbllm_err *err);

#endif
