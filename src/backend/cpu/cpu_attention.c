/*
 * cpu_attention.c: the CPU backend's attention over the paged KV cache.
 *
 * Queries go in groups: up to CPU_ATTN_GROUP queries of one sequence that
 * read the same KV head (a prompt's consecutive tokens, and the heads that
 * share a KV head under grouped-query attention), in order of position.  The group reads each key and value once (cpu_kernels
 * scores_group, accumulate_group), where one query at a time read them once
 * per query.  Query j sees positions [first_j, p_j]; both grow with j.
 *
 * Every query gets bit for bit what it would get alone: its scores are the
 * same per-key arithmetic (a group also scores the few keys past a query's
 * own position, which that query ignores); its softmax runs over its own
 * range (with its head's sink logit when the model has sinks); and its
 * output sums its own keys in order, the group's keys being
 * cut into runs where the same queries are active (a query joins at
 * first_j and leaves after p_j).  So results do not depend on the batch.
 */
#include "backend/cpu/cpu_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/softmax.h"

typedef struct attn_job
{
	cpu_attention *c;
	const kv_cache *kv;
	int			layer;			/* the model's: its window */
	int			cache_layer;	/* its K and V in the cache */
	const float *q;
	const float *sinks;			/* (n_heads) or NULL */
	const fwd_batch *b;
	float	   *out;
} attn_job;

/* Positions [i0, i1) of a sequence as runs within one cache block: RUN(i, block index, offset, n) per run. */
#define FOR_BLOCK_RUNS(kv, i0, i1, RUN) \
	for (int i_ = (i0); i_ < (i1);) \
	{ \
		int			off_ = i_ % (kv)->block_size, \
					n_ = (kv)->block_size - off_ < (i1) - i_ ? (kv)->block_size - off_ : (i1) - i_; \
		RUN(i_, i_ / (kv)->block_size, off_, n_); \
		i_ += n_; \
	}

/* One task: one group of queries: softmax(q k^T / sqrt(d)) v over each one's visible positions. */
static void
AttentionTask(void *arg, int task, int thread)
{
	attn_job   *j = arg;
	cpu_attention *c = j->c;
	const kv_cache *kv = j->kv;
	const int32_t *mem = c->members + c->groups[task];
	int			g = c->groups[task + 1] - c->groups[task];
	int			hd = c->head_dim;
	int			t0 = mem[0] / c->n_heads;
	int			kvh = (mem[0] % c->n_heads) / (c->n_heads / c->n_kv_heads);
	int			window = c->layer_window[j->layer];
	const int32_t *table = j->b->block_tables[j->b->seq[t0]];
	const float *q[CPU_ATTN_GROUP];
	float	   *out[CPU_ATTN_GROUP],
			   *s[CPU_ATTN_GROUP],
			   *sp[CPU_ATTN_GROUP];
	const float *w[CPU_ATTN_GROUP];
	int			p[CPU_ATTN_GROUP] = {0},
				first[CPU_ATTN_GROUP] = {0};
	float		scale = c->scale;
	int64_t		stride = kv->row[j->cache_layer];	/* elements between positions */
	int64_t		head_off = (int64_t) kvh * hd * kv->elem_bytes;
	int			kt = kv->dtype == CBLLM_F32 ? 0 : kv->dtype == CBLLM_F16 ? 1 : 2;
	int			lo,
				hi,
				gl = 0,
				gh = -1;

	for (int m = 0; m < g; m++)
	{
		int			t = mem[m] / c->n_heads;

		p[m] = j->b->pos[t];
		first[m] = window > 0 && p[m] - window + 1 > 0 ? p[m] - window + 1 : 0;
		q[m] = j->q + (int64_t) mem[m] * hd;
		out[m] = j->out + (int64_t) mem[m] * hd;
		s[m] = c->scores + ((int64_t) thread * CPU_ATTN_GROUP + m) * c->max_ctx;
	}
	lo = first[0];
	hi = p[g - 1];

	/* scores of every key any query sees, a block (or the part of it in range) at a time */
#define SCORE_RUN(i, b, off, n) \
	do { \
		for (int m = 0; m < g; m++) \
			sp[m] = s[m] + (i); \
		c->k->scores_group[kt](g, q, (const char *) kv_cache_k(kv, j->cache_layer, table[b], off) + \
							   head_off, stride, n, hd, scale, sp); \
	} while (0)
	FOR_BLOCK_RUNS(kv, lo, hi + 1, SCORE_RUN);

	for (int m = 0; m < g; m++)
	{
		if (j->sinks != NULL)
			softmax_sink_inplace(s[m] + first[m], p[m] - first[m] + 1, j->sinks[mem[m] % c->n_heads]);
		else
			softmax_inplace(s[m] + first[m], p[m] - first[m] + 1);
		memset(out[m], 0, sizeof(float) * hd);
	}

	/* values, in runs of keys where the same queries gl..gh are active */
#define VALUE_RUN(i, b, off, n) \
	do { \
		for (int m = gl; m <= gh; m++) \
			w[m - gl] = s[m] + (i); \
		c->k->accumulate_group[kt](gh - gl + 1, out + gl, w, \
								   (const char *) kv_cache_v(kv, j->cache_layer, table[b], off) + \
								   head_off, stride, n, hd); \
	} while (0)
	for (int i = lo; i <= hi;)
	{
		int			end = hi + 1;

		while (gl < g && p[gl] < i)
			gl++;
		while (gh + 1 < g && first[gh + 1] <= i)
			gh++;
		if (gl < g && p[gl] + 1 < end)
			end = p[gl] + 1;
		if (gh + 1 < g && first[gh + 1] < end)
			end = first[gh + 1];
		if (gl <= gh)
			FOR_BLOCK_RUNS(kv, i, end, VALUE_RUN);
		i = end;
	}
#undef SCORE_RUN
#undef VALUE_RUN
}

/* Group the queries of batch b (cpu_attention.h). */
static void
Plan(cpu_attention *c, const fwd_batch *b)
{
	int			per_kv = c->n_heads / c->n_kv_heads;
	int			n_groups = 0,
				n_members = 0;

	/* runs of a sequence's tokens at consecutive positions; each KV head's queries of a run in groups */
	for (int t0 = 0, t1; t0 < b->n_tokens; t0 = t1)
	{
		for (t1 = t0 + 1; t1 < b->n_tokens && b->seq[t1] == b->seq[t0] &&
			 b->pos[t1] == b->pos[t1 - 1] + 1; t1++)
			;
		for (int kvh = 0; kvh < c->n_kv_heads; kvh++)
			for (int t = t0, in_group = 0; t < t1; t++)
				for (int h = kvh * per_kv; h < (kvh + 1) * per_kv; h++)
				{
					if (in_group == 0)
						c->groups[n_groups++] = n_members;
					c->members[n_members++] = t * c->n_heads + h;
					in_group = (in_group + 1) % CPU_ATTN_GROUP;
				}
	}
	c->groups[n_groups] = n_members;
	c->n_groups = n_groups;
}

/*
 * Attention for every (token, head) of the step, in groups.  The grouping is
 * redone on every call (a pass over the step's tokens and heads, small
 * beside the attention): a caller may run layers without a begin_step.
 */
void
cpu_attention_run(cpu_attention *c, const kv_cache *kv, int layer, const float *q,
				  const float *sinks, const fwd_batch *b, float *out)
{
	attn_job	j = {c, kv, layer, kv_cache_layer_of(kv, layer), q, sinks, b, out};

	c->head_dim = c->cfg->layer_head_dim[layer];
	c->n_kv_heads = c->cfg->layer_kv_heads[layer];
	c->scale = c->cfg->attn_scale > 0 ? c->cfg->attn_scale : 1.0f / sqrtf((float) c->head_dim);
	Plan(c, b);
	threadpool_run(c->pool, c->n_groups, AttentionTask, &j);
}

/* Allocate the workspace for steps of up to max_tokens tokens and max_ctx positions; false when out of memory. */
bool
cpu_attention_init(cpu_attention *c, const cbllm_model_config *cfg, const cpu_kernels *k,
				   cbllm_threadpool *pool, int max_tokens, int max_ctx)
{
	int			nt = threadpool_size(pool);

	memset(c, 0, sizeof(*c));
	c->k = k;
	c->pool = pool;
	c->n_heads = cfg->n_heads;
	c->n_kv_heads = cfg->n_kv_heads;
	c->head_dim = cfg->head_dim;
	c->cfg = cfg;
	c->layer_window = cfg->layer_window;
	c->max_ctx = max_ctx;
	c->scores = malloc(sizeof(float) * (size_t) max_ctx * CPU_ATTN_GROUP * nt);
	c->members = malloc(sizeof(int32_t) * (size_t) max_tokens * cfg->n_heads);
	c->groups = malloc(sizeof(int32_t) * ((size_t) max_tokens * cfg->n_heads + 1));
	return c->scores != NULL && c->members != NULL && c->groups != NULL;
}

void
cpu_attention_free(cpu_attention *c)
{
	free(c->scores);
	free(c->members);
	free(c->groups);
	memset(c, 0, sizeof(*c));
}
