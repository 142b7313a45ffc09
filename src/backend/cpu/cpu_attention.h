/*
 * cpu_attention.h: the CPU backend's attention, softmax(q k^T / sqrt(d)) v
 * for every (token, head) of a step over the paged KV cache, queries in
 * groups that read each key and value once (cpu_attention.c).
 */
#ifndef CBLLM_CPU_ATTENTION_H
#define CBLLM_CPU_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "base/threadpool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

typedef struct cpu_attention
{
	const cpu_kernels *k;
	cbllm_threadpool *pool;
	int			n_heads;
	int			n_kv_heads;		/* of the layer being run (set by each cpu_attention_run) */
	int			head_dim;		/* of the layer being run */
	float		scale;			/* of the layer being run: the softmax's */
	const cbllm_model_config *cfg;	/* the layers' head sizes, kv heads and windows */
	const int32_t *layer_window;	/* (n_layers) the model's, 0: whole context */
	int			max_ctx;
	float	   *scores;			/* (n_threads, CPU_ATTN_GROUP, max_ctx) a group's weights */
	int32_t    *members;		/* (max_tokens * n_heads) the step's queries, t * n_heads + h,
								 * group after group */
	int32_t    *groups;			/* (max_tokens * n_heads + 1) where each group starts in
								 * members; the last entry ends the last group */
	int			n_groups;		/* the step's groups (set by each cpu_attention_run) */
} cpu_attention;

/*
 * The workspace for steps of up to max_tokens tokens and max_ctx positions;
 * cfg must outlive it.  False when out of memory (cpu_attention_free then
 * releases what was allocated).
 */
bool		cpu_attention_init(cpu_attention *a, const cbllm_model_config *cfg, const cpu_kernels *k,
							   cbllm_threadpool *pool, int max_tokens, int max_ctx);
void		cpu_attention_free(cpu_attention *a);

/*
 * out (n_tokens, n_heads * head_dim) = attention of q (same shape) over
 * layer's cache for the batch b, head_dim and the kv heads the layer's own,
 * the scale cfg's attn_scale or 1 / sqrt(head_dim); sinks (n_heads), when not NULL, are each
 * head's sink logit (softmax_sink_inplace).
 */
void		cpu_attention_run(cpu_attention *a, const kv_cache *kv, int layer, const float *q,
							  const float *sinks, const fwd_batch *b, float *out);

#endif
