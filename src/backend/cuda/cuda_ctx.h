/*
 * cuda_ctx.h: the CUDA backend's context, shared by the files of the backend
 * (backend_cuda.c: the table and a step's operations; cuda_weights.c: the
 * weights on the device; cuda_swap.c: KV blocks to and from host memory).
 * Plain C: CUDA is reached only through cuda_ops.h.
 */
#ifndef CBLLM_CUDA_CTX_H
#define CBLLM_CUDA_CTX_H

#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"

#define MAX_GRAPH_SIZES 48
#define COPY_BANDWIDTH_ITERS 20	/* device copies timed by copy_bandwidth; the median is reported */

typedef struct dev_weight
{
	const void *host;			/* the host data the engine passes (NULL for dummy weights) */
	uint64_t	seed;			/* dummy weights: their seed; 0 otherwise */
	void	   *dev;
	cbllm_dtype dtype;			/* on the device: CBLLM_F32 (norms), a CBLLM_CUDA_GEMM type, or a
								 * CBLLM_CUDA_QUANT one as stored */
} dev_weight;

/*
 * A mixture-of-experts layer's workspace for one chunk of a step's tokens:
 * at most max_rows (token, chosen expert) pairs (cuda_experts.c).
 */
typedef struct cuda_moe_ws
{
	int			max_rows;		/* 0: the model has no experts */
	int32_t    *d_ids;			/* (max_rows) each token's experts, token-major */
	float	   *d_weights;		/* (max_rows) their weights */
	int32_t    *d_slot;			/* (max_rows) each pair's grouped row */
	int32_t    *d_token;		/* (max_rows) each grouped row's token */
	float	   *d_xg;			/* (max_rows, hidden) the inputs grouped by expert */
	float	   *d_gate;			/* (max_rows, expert_intermediate) */
	float	   *d_up;			/* (max_rows, expert_intermediate) */
	float	   *d_yg;			/* (max_rows, hidden) the experts' outputs, grouped */
	int32_t    *h_ids;			/* (max_rows) pinned copies */
	int32_t    *h_slot;
	int32_t    *h_token;
	int32_t    *start;			/* (n_experts + 1) host: each expert's first grouped row */
	int32_t    *fill;			/* (n_experts) host: rows placed while grouping */
} cuda_moe_ws;

typedef enum step_mode
{
	STEP_EAGER,					/* operations launch as they are called */
	STEP_RECORD,				/* operations are recorded into a graph */
	STEP_REPLAY					/* operations do nothing; end_step replays the graph */
} step_mode;

typedef struct cuda_ctx
{
	cbllm_model_config cfg;
	void	   *blas;
	dev_weight *w;				/* (n_w) uploaded tensors */
	int			n_w;
	int			cap_w;
	int32_t    *w_slots;		/* (cap_slots) an open-addressing index of w by (host, seed):
								 * -1 for an empty slot; cap_slots is a power of two, at least
								 * twice n_w */
	int			cap_slots;
	size_t		weight_bytes;	/* device bytes of the uploaded tensors */
	int64_t		max_quant_elems;	/* elements of the largest block-quantized matrix; 0: none */
	/* the KV pool: bf16, the engine's block layout, plus the pad block */
	uint16_t   *k_cache;		/* per cache layer l (n_blocks + 1, block_size, kv_row[l]),
								 * layer after layer */
	uint16_t   *v_cache;
	int64_t		block_elems;	/* elements of one block in one layer whose rows are
								 * n_kv_heads * head_dim (every layer of most models) */
	bool		kv_uniform;		/* every cache layer's row is n_kv_heads * head_dim */
	int32_t		kv_row[CBLLM_MAX_LAYERS];	/* (cache layers) elements per position */
	int64_t		kv_base[CBLLM_MAX_LAYERS + 1];	/* (cache layers + 1) elements before each
												 * layer's block 0 (set with the pool) */
	int			rope_stride;	/* the RoPE tables' angles per position: the widest head / 2 */
	int			n_blocks;		/* blocks of the engine's pool; block n_blocks pads */
	int			block_size;
	int			max_tokens;
	int			max_seqs;
	int			max_ctx;
	int			rope_half[CBLLM_MAX_ROPE];	/* (n_rope) pairs each RoPE rotates per head
												 * (rope_freqs.half) */
	int			rope_sets;		/* factor sets of the RoPE tables: 2 when some RoPE has a long
								 * set (longrope, rope.h), else 1 */
	int			max_blocks;		/* table row length: ceil(max_ctx / block_size) */
	cuda_stream stream;			/* every step's work */
	cuda_stream swap_stream;	/* swap copies */
	cuda_event	ev_compute;		/* compute stream reached a swap */
	cuda_event	ev_swap;		/* swap copies done */
	cuda_event	ev_staged;		/* the last batch upload has read the staging buffers */
	bool		swap_pending;	/* the next step must wait for ev_swap */
	void	   *swap_pinned_k;	/* the host swap area, once page-locked */
	void	   *swap_pinned_v;
	/* device copies of the step's batch */
	int32_t    *d_tokens;		/* (max_tokens) */
	int32_t    *d_pos;			/* (max_tokens) */
	int32_t    *d_rope_row;		/* (max_tokens) row of the RoPE tables: rope_set * max_ctx + pos */
	int32_t    *d_seq;			/* (max_tokens) */
	int64_t    *d_slots;		/* (max_tokens) */
	int32_t    *d_rows;			/* (max_tokens) */
	int32_t    *d_tables;		/* (max_seqs, max_blocks) */
	float	   *d_cos;			/* (n_rope, rope_sets, max_ctx, head_dim / 2) RoPE tables of every
								 * position in each factor set */
	float	   *d_sin;
	void	   *d_xh;			/* (max_tokens, max_k) halves: matmul input */
	void	   *d_wtile;		/* (wtile_elems) bf16: a tile of a quantized matrix for cuBLAS */
	int64_t		wtile_elems;	/* 0: no quantized matrix or no step above CUDA_QMATVEC_MAX_T */
	sampler_row *d_sample;	/* (max_tokens) */
	int32_t    *d_sampled;		/* (max_tokens) */
	uint32_t   *d_masks;		/* (masks_cap words) the step's constraint masks, grown on demand */
	size_t		masks_cap;
	/* page-locked staging of the same */
	int32_t    *h_tokens;
	int32_t    *h_pos;
	int32_t    *h_rope_row;
	int32_t    *h_seq;
	int64_t    *h_slots;
	int32_t    *h_rows;
	int32_t    *h_tables;
	sampler_row *h_sample;
	int32_t    *h_sampled;
	/* graphs, one per padded decode size */
	bool		no_graphs;
	int			n_sizes;
	int			sizes[MAX_GRAPH_SIZES];	/* ascending */
	cuda_graph	graphs[MAX_GRAPH_SIZES];
	bool		warmed[MAX_GRAPH_SIZES];	/* a step of this size ran eagerly once */
	step_mode	mode;
	int			graph_index;	/* of the step being recorded or replayed */
	int			failed;			/* an operation failed since the last check */
	cbllm_err	err;
	cuda_moe_ws moe;			/* a model with experts' workspace; zeroed otherwise */
	/* a hybrid model's linear-attention states (cuda_state.c); NULL otherwise */
	state_cache_params state;	/* their geometry (the engine's state cache's) */
	float	   *d_conv_states;	/* (linear layers, slots, conv - 1, conv channels) */
	float	   *d_rec_states;	/* (linear layers, slots, value heads, k_dim, v_dim) */
	int32_t    *d_seq_first;	/* (max_tokens + 1) the step's sequences' first tokens */
	int32_t    *d_state_slots;	/* (max_tokens) their state slots */
	int32_t    *h_seq_first;	/* page-locked staging of the same */
	int32_t    *h_state_slots;
	int			n_state_seqs;	/* sequences of the step */
} cuda_ctx;

/* The device copy of a host tensor (seed 0) or of a dummy tensor, or NULL (cuda_weights.c). */
const dev_weight *cuda_weight_find(const cuda_ctx *c, const void *host, uint64_t seed);

/* The device copy of a weight matrix, or NULL. */
const dev_weight *cuda_weight_find_matrix(const cuda_ctx *c, const cbllm_weight *w);

/* Upload every matrix and vector of m, after checking the device has room. */
int			cuda_weights_upload(cuda_ctx *c, const cbllm_model *m, cbllm_err *err);

/* Remember the first failure of an operation (rc not OK) until the step's end reports it. */
void		cuda_backend_note(cuda_ctx *c, int rc);

/* The backend table's matmul (backend_cuda.c), for the experts' blocks of rows too. */
void		cuda_backend_matmul(cbllm_backend *be, int n, const cbllm_weight *const *w,
								const float *x, int T, float *const *y);

/* The mixture-of-experts workspace for c->cfg (nothing without experts), and its release (cuda_experts.c). */
int			cuda_moe_alloc(cuda_ctx *c, cbllm_err *err);
void		cuda_moe_free(cuda_ctx *c);

/* The backend table's moe (cuda_experts.c). */
void		cuda_moe(cbllm_backend *be, const cbllm_layer *w, const float *x, const float *logits,
					 int T, float *out);

/* A hybrid model's states and the table's operations for them (cuda_state.c). */
int			cuda_state_alloc(cbllm_backend *be, const state_cache_params *p, cbllm_err *err);
void		cuda_state_free(cuda_ctx *c);
int			cuda_state_copy(cbllm_backend *be, int32_t slot, float *host, bool to_host,
							cbllm_err *err);
int			cuda_state_upload(cuda_ctx *c, const fwd_batch *b, cbllm_err *err);
void		cuda_linear_attention_op(cbllm_backend *be, state_cache *sc, int l,
									 const cbllm_layer *w, float *qkv, const float *z,
									 const float *beta, const float *alpha, const fwd_batch *b,
									 float *out);
void		cuda_split_halves_op(cbllm_backend *be, const float *x, int64_t n, int width,
								 float *first, float *second);
void		cuda_sigmoid_mul_op(cbllm_backend *be, float *x, const float *gate, int64_t n);
void		cuda_add_gated_rows_op(cbllm_backend *be, float *x, const float *y, const float *logit,
								   int T, int dim);

/* The backend table's prepare_swap, swap_out and swap_in (cuda_swap.c). */
int			cuda_swap_prepare(cbllm_backend *be, swap_space *sw, cbllm_err *err);
int			cuda_swap_out(cbllm_backend *be, const kv_cache *kv, swap_space *sw,
						  const int32_t *blocks, const int32_t *ids, int n, cbllm_err *err);
int			cuda_swap_in(cbllm_backend *be, kv_cache *kv, const swap_space *sw,
						 const int32_t *blocks, const int32_t *ids, int n, cbllm_err *err);

#endif
