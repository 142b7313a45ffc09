/*
 * cpu_internal.h: what the CPU backend's files share: its context, the
 * matmul and gated activation that the mixture of experts (cpu_moe.c) runs
 * per expert, and the experts' workspace.  Private to backend/cpu.
 */
#ifndef CBLLM_CPU_INTERNAL_H
#define CBLLM_CPU_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/kernels.h"
#include "model/rope.h"

/*
 * One product of cpu_matmul_items: rows [r0, r0 + m) of the shared input
 * times w^T into y (m, w->rows).
 */
typedef struct cpu_rows_item
{
	const cbllm_weight *w;
	int			r0;
	int			m;
	float	   *y;
} cpu_rows_item;

/*
 * The experts' workspace for one chunk of a step's tokens: at most
 * max_rows (token, chosen expert) pairs, max_rows / n_experts_used tokens.
 */
typedef struct cpu_moe_ws
{
	int			max_rows;
	int32_t    *ids;			/* (max_rows) the experts each token chose, token-major */
	float	   *weights;		/* (max_rows) their weights */
	int32_t    *slot;			/* (max_rows) each pair's row in the grouped buffers */
	int32_t    *start;			/* (n_experts + 1) each expert's first grouped row */
	int32_t    *fill;			/* (n_experts) rows placed so far, while grouping */
	float	   *xg;				/* (max_rows, hidden) the tokens' inputs grouped by expert */
	float	   *gate;			/* (max_rows, expert_intermediate) */
	float	   *up;				/* (max_rows, expert_intermediate) */
	float	   *yg;				/* (max_rows, hidden) the experts' outputs, grouped */
	cpu_rows_item *items;		/* (2 n_experts) one step's grouped products */
	int		   *first_task;		/* (2 n_experts + 1) their task ranges */
} cpu_moe_ws;

typedef struct cpu_ctx
{
	cbllm_model_config cfg;
	cbllm_threadpool *pool;
	const cpu_kernels *k;
	int			max_tokens;
	int			max_ctx;
	float	   *scratch;		/* (n_threads, KERNEL_ROWS_PER_TASK, KERNEL_QLD(max_k)) packing blocks */
	int64_t		scratch_stride; /* floats per thread in scratch */
	cpu_attention attn;			/* the attention's workspace */
	int			rope_half;		/* the tables' angles per token: the widest RoPE head / 2 */
	float	   *rope_cos;		/* (n_rope, max_tokens, rope_half) for the current step */
	float	   *rope_sin;		/* (n_rope, max_tokens, head_dim / 2) */
	rope_freqs *freqs;			/* (n_rope) of cfg.rope */
	cpu_qx		qx;				/* a matmul's activations quantized, sized (max_tokens,
								 * KERNEL_QLD(max_k)); NULL buffers when no weight is
								 * block-quantized */
	uint8_t    *embed_row;		/* one embedding row as stored, unpacked from a packed
								 * embedding (a tied lm_head's); NULL otherwise */
	float	   *xpanel;			/* (max_tokens, max_k) a matmul's activations as
								 * cpu_kernels.panel_x arranges them; NULL until a float
								 * matrix is packed */
	int64_t		max_k;			/* the widest activations a matmul takes */
	cbllm_dtype kv_dtype;		/* the KV cache's elements (f32, f16, bf16) */
	cpu_moe_ws	moe;			/* a model with experts' workspace; zeroed otherwise */
	int32_t    *seq_first;		/* (max_tokens + 1) a step's sequences' first tokens (the
								 * linear attention's) */
	float	   *lin_scratch;	/* (n_threads, lin_stride) the delta rule's rows of a chunk;
								 * NULL without linear layers */
	int64_t		lin_stride;		/* cpu_linear_scratch_floats */
} cpu_ctx;

/* Floats of one thread's scratch for the chunked delta rule (cpu_linear_attn.c). */
int64_t		cpu_linear_scratch_floats(const cbllm_model_config *cfg);

/* y[i] (T, w[i]->rows) = x (T, cols) @ w[i]^T for a group of n matrices (backend.h's matmul). */
void		cpu_matmul(cbllm_backend *be, int n, const cbllm_weight *const *w, const float *x,
					   int T, float *const *y);

/*
 * Every item's product over x (rows, cols), the items block-quantized
 * matrices that take one activation block: x's rows quantized once and all
 * the items' row blocks in one dispatch of the thread pool (each output the
 * bits cpu_matmul gives it).  first_task: n + 1 ints of scratch.  False,
 * with nothing done, when the items do not qualify or rows exceed the
 * quantized activations' room: then cpu_matmul them one by one.
 */
bool		cpu_matmul_items(cbllm_backend *be, const cpu_rows_item *items, int n, const float *x,
							 int rows, int *first_task);

/* gate[i] = act(gate[i]) * up[i] over the thread pool. */
void		cpu_gate_mul(cbllm_backend *be, float *gate, const float *up, int64_t n,
						 arch_activation act);

/* Allocate ws for cfg's experts (nothing without experts); false when out of memory. */
bool		cpu_moe_init(cpu_moe_ws *ws, const cbllm_model_config *cfg);

/* Free what cpu_moe_init allocated. */
void		cpu_moe_free(cpu_moe_ws *ws);

/* backend.h's linear_attention on the CPU (cpu_linear_attn.c). */
void		cpu_linear_attention(cbllm_backend *be, state_cache *sc, int l, const cbllm_layer *w,
								 float *qkv, const float *z, const float *beta,
								 const float *alpha, const fwd_batch *b, float *out);

/* backend.h's split_halves, sigmoid_mul and add_gated_rows on the CPU (cpu_linear_attn.c). */
void		cpu_split_halves(cbllm_backend *be, const float *x, int64_t n, int width, float *first,
							 float *second);
void		cpu_sigmoid_mul(cbllm_backend *be, float *x, const float *gate, int64_t n);

/* x[i] = cap * tanh(x[i] / cap) (cpu_gemma4.c). */
void		cpu_softcap(cbllm_backend *be, float *x, float cap, int64_t n);

/* out (b, a, width) = x (a, b, width), the first two axes swapped (cpu_gemma4.c). */
void		cpu_swap_axes(cbllm_backend *be, const float *x, int a, int b, int width, float *out);
void		cpu_add_gated_rows(cbllm_backend *be, float *x, const float *y, const float *logit,
							   int T, int dim);

/* backend.h's moe on the CPU (cpu_moe.c). */
void		cpu_moe(cbllm_backend *be, const cbllm_layer *w, const float *x, const float *logits,
					int T, float *out);

#endif
