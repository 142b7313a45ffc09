/*
 * backend_cpu.c: the compute backend table on the CPU.  Heavy operations
 * (matmul, attention) are split into tasks over the thread pool; the split
 * is by output rows or by (token, head), never along a reduction, so results
 * do not depend on the number of threads or on the batch.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/backend_registry.h"
#include "backend/cpu/cpu_dtype_traits.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_pack.h"
#include "base/activation.h"
#include "dtype/dtype.h"
#include "model/rope.h"

#define CPU_KV_CAP_BYTES ((size_t) 4 << 30)	/* the pool sized by default: at most 4 GiB */
#define CPU_COPY_REPS 7			/* timed copies of copy_bandwidth; their median is reported */


/* Host memory, 64-byte aligned. */
static void *
CpuAlloc(cbllm_backend *be, size_t bytes)
{
	void	   *p = NULL;

	if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
		return NULL;
	return p;
}

static void
CpuFree(cbllm_backend *be, void *p)
{
	free(p);
}

/* Fill the step's RoPE cos/sin tables, one per RoPE configuration, from each token's position and set. */
static int
CpuBeginStep(cbllm_backend *be, const fwd_batch *b, cbllm_err *err)
{
	cpu_ctx    *c = be->ctx;
	int			half = c->rope_half;

	if (b->n_tokens > c->max_tokens)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "step of %d tokens exceeds the workspace of %d",
						  b->n_tokens, c->max_tokens);
	for (int t = 0; t < b->n_tokens; t++)
	{
		if (b->pos[t] >= c->max_ctx)
			return cbllm_fail(err, CBLLM_ERR_INTERNAL, "position %d exceeds the context of %d",
							  b->pos[t], c->max_ctx);
		for (int r = 0; r < c->cfg.n_rope; r++)
		{
			int64_t		at = ((int64_t) r * c->max_tokens + t) * half;

			rope_fill(&c->freqs[r], b->pos[t], b->rope_set != NULL ? b->rope_set[t] : 0,
					  c->rope_cos + at, c->rope_sin + at);
		}
	}
	return CBLLM_OK;
}

/* x[t] = embedding row of token t, widened to f32 (unpacked first when packed). */
static void
CpuEmbed(cbllm_backend *be, const cbllm_weight *emb, const fwd_batch *b, float *x)
{
	cpu_ctx    *c = be->ctx;
	int64_t		dim = emb->cols;

	for (int t = 0; t < b->n_tokens; t++)
		cbllm_to_f32(emb->dtype, weight_row(emb, b->tokens[t], c->embed_row), x + t * dim, dim);
}

/* out = x * w / sqrt(mean(x^2) + eps), row by row. */
static void
CpuRmsnorm(cbllm_backend *be, const float *x, const float *w, int T, int dim, float eps,
		   float *out)
{
	for (int t = 0; t < T; t++)
	{
		const float *xr = x + (int64_t) t * dim;
		float	   *o = out + (int64_t) t * dim;
		double		ss = 0;
		float		scale;

		for (int i = 0; i < dim; i++)
			ss += (double) xr[i] * xr[i];
		scale = (float) (1.0 / sqrt(ss / dim + eps));
		for (int i = 0; i < dim; i++)
			o[i] = w != NULL ? (xr[i] * scale) * w[i] : xr[i] * scale;
	}
}

typedef struct matmul_job
{
	cpu_ctx    *c;
	int			n;
	const cbllm_weight *const *w;
	const float *x;
	const float *xp;			/* x arranged by panel_x when a float matrix of the group is
								 * packed; else NULL */
	int			T;
	float	   *const *y;
	int			first_task[BACKEND_MAX_GROUP + 1];	/* task ranges of each matrix */
	int			parts;			/* of the panel_x arrangement */
} matmul_job;

/* Whether the CPU reads dt's rows block by block through the quantized products. */
static inline bool
IsBlocked(cbllm_dtype dt)
{
	return cpu_dtype_traits_of(dt)->path == CBLLM_CPU_QUANT;
}

/* One task: a block of KERNEL_ROWS_PER_TASK output rows of one of the matrices. */
static void
MatmulTask(void *arg, int task, int thread)
{
	matmul_job *j = arg;
	cpu_ctx    *c = j->c;
	float	   *scratch = c->scratch + thread * c->scratch_stride;
	int			i = 0;
	int64_t		r0,
				r1;

	while (task >= j->first_task[i + 1])
		i++;
	r0 = (int64_t) (task - j->first_task[i]) * KERNEL_ROWS_PER_TASK;
	r1 = r0 + KERNEL_ROWS_PER_TASK < j->w[i]->rows ? r0 + KERNEL_ROWS_PER_TASK : j->w[i]->rows;
	if (IsBlocked(j->w[i]->dtype))
		c->k->qmatmul_rows(j->w[i], &c->qx, j->y[i], r0, r1, scratch);
	else
		c->k->matmul_rows(j->w[i], j->x, j->xp, j->T, j->y[i], r0, r1, scratch);
}

/* Activations quantized a chunk of this many (a multiple of 256) at a time, so one token spreads over threads. */
#define QUANTIZE_CHUNK 1024

/* Chunks of a token's k activations. */
static inline int
QuantizeChunks(int64_t k)
{
	return (int) ((k + QUANTIZE_CHUNK - 1) / QUANTIZE_CHUNK);
}

/* Chunk task of the rows of x (k columns each) quantized into c's qx: QuantizeChunks(k) a row. */
static void
QuantizeChunk(cpu_ctx *c, const float *x, int64_t k, int task)
{
	int			per = QuantizeChunks(k),
				t = task / per;
	int64_t		e0 = (int64_t) (task % per) * QUANTIZE_CHUNK,
				e1 = e0 + QUANTIZE_CHUNK < k ? e0 + QUANTIZE_CHUNK : k;

	c->k->quantize_x(x + (int64_t) t * k, k, e0, e1, t, &c->qx);
}

/* One task: a chunk of a token's activations quantized into the context's qx. */
static void
QuantizeTask(void *arg, int task, int thread)
{
	matmul_job *j = arg;

	QuantizeChunk(j->c, j->x, j->w[0]->cols, task);
}

/* One task: a part of the activations arranged for the products over packed float rows. */
static void
PanelXTask(void *arg, int task, int thread)
{
	matmul_job *j = arg;

	j->c->k->panel_x(j->x, j->T, j->w[0]->cols, task, j->parts, j->c->xpanel);
}

/*
 * The activation block w's products want: 0 for a float matrix, else 32 or
 * 256 (the set's choice, packed or not: packed K-quants take 256, packed
 * MXFP4 32).
 */
static int
WantedBlock(const cpu_ctx *c, const cbllm_weight *w)
{
	return !IsBlocked(w->dtype) ? 0 : c->k->qx_block(w);
}

/*
 * y[i] = x @ w[i]^T for a group of matrices (all of x's width), all in one
 * parallel loop; when one is block-quantized, x is quantized once first.
 * Matrices that want activations per 256 and per 32 run as two groups, so
 * each gets the block its products take (packed rows take only 256).
 */
void
cpu_matmul(cbllm_backend *be, int n, const cbllm_weight *const *w, const float *x, int T,
		   float *const *y)
{
	cpu_ctx    *c = be->ctx;
	matmul_job	j = {c, n, w, x, NULL, T, y, {0}, 0};
	int			blk = 0;
	bool		panels = false;

	for (int i = 0; i < n; i++)
	{
		int			want = WantedBlock(c, w[i]);

		if (want != 0 && blk != 0 && want != blk)
		{
			const cbllm_weight *w256[BACKEND_MAX_GROUP],
					   *w32[BACKEND_MAX_GROUP];
			float	   *y256[BACKEND_MAX_GROUP],
					   *y32[BACKEND_MAX_GROUP];
			int			n256 = 0,
						n32 = 0;

			for (int k = 0; k < n; k++)
				if (WantedBlock(c, w[k]) == 32)
				{
					w32[n32] = w[k];
					y32[n32++] = y[k];
				}
				else
				{
					w256[n256] = w[k];
					y256[n256++] = y[k];
				}
			cpu_matmul(be, n256, w256, x, T, y256);
			cpu_matmul(be, n32, w32, x, T, y32);
			return;
		}
		blk = want != 0 ? want : blk;
		panels |= want == 0 && w[i]->packed_rows > 0;
		j.first_task[i + 1] = j.first_task[i] +
			(int) ((w[i]->rows + KERNEL_ROWS_PER_TASK - 1) / KERNEL_ROWS_PER_TASK);
	}
	if (blk != 0)
	{
		c->qx.T = T;
		c->qx.ld = KERNEL_QLD(w[0]->cols);
		c->qx.blk = blk;
		threadpool_run(c->pool, T * QuantizeChunks(w[0]->cols), QuantizeTask, &j);
	}
	if (panels && T == 1)
		j.xp = x;
	else if (panels)
	{
		j.xp = c->xpanel;
		j.parts = T < 4 * threadpool_size(c->pool) ? T : 4 * threadpool_size(c->pool);
		threadpool_run(c->pool, j.parts, PanelXTask, &j);
	}
	threadpool_run(c->pool, j.first_task[n], MatmulTask, &j);
}

/* cpu_matmul_items' work: the items, their task ranges, the input. */
typedef struct items_job
{
	cpu_ctx    *c;
	const cpu_rows_item *items;
	int			n;
	const int  *first_task;		/* (n + 1) */
	const float *x;				/* (rows, cols) */
	int64_t		cols;
} items_job;

/* One task: a chunk of one input row quantized into the context's qx. */
static void
ItemsQuantizeTask(void *arg, int task, int thread)
{
	items_job  *j = arg;

	QuantizeChunk(j->c, j->x, j->cols, task);
}

/* One task: a block of KERNEL_ROWS_PER_TASK output rows of one item, over its rows of qx. */
static void
ItemsMatmulTask(void *arg, int task, int thread)
{
	items_job  *j = arg;
	cpu_ctx    *c = j->c;
	int			lo = 0,
				hi = j->n - 1;
	const cpu_rows_item *it;
	cpu_qx		view = c->qx;
	int64_t		ld = c->qx.ld,
				r0,
				r1;

	while (lo < hi)				/* the item whose range holds task */
	{
		int			mid = (lo + hi + 1) / 2;

		if (j->first_task[mid] <= task)
			lo = mid;
		else
			hi = mid - 1;
	}
	it = &j->items[lo];
	view.T = it->m;
	view.q += (int64_t) it->r0 * ld;
	view.s += (int64_t) it->r0 * (ld / 4);
	view.sum16 += (int64_t) it->r0 * (ld / 16);
	view.isum16 += (int64_t) it->r0 * (ld / 16);
	view.d += (int64_t) it->r0 * (ld / 32);
	r0 = (int64_t) (task - j->first_task[lo]) * KERNEL_ROWS_PER_TASK;
	r1 = r0 + KERNEL_ROWS_PER_TASK < it->w->rows ? r0 + KERNEL_ROWS_PER_TASK : it->w->rows;
	c->k->qmatmul_rows(it->w, &view, it->y, r0, r1, c->scratch + thread * c->scratch_stride);
}

bool
cpu_matmul_items(cbllm_backend *be, const cpu_rows_item *items, int n, const float *x, int rows,
				 int *first_task)
{
	cpu_ctx    *c = be->ctx;
	items_job	j = {c, items, n, first_task, x, n > 0 ? items[0].w->cols : 0};
	int			blk = n > 0 ? WantedBlock(c, items[0].w) : 0;

	if (n == 0 || blk == 0 || rows > c->max_tokens || c->qx.q == NULL)
		return false;
	first_task[0] = 0;
	for (int i = 0; i < n; i++)
	{
		if (WantedBlock(c, items[i].w) != blk || items[i].w->cols != j.cols || items[i].m <= 0 ||
			items[i].r0 < 0 || items[i].r0 + items[i].m > rows)
			return false;
		first_task[i + 1] = first_task[i] +
			(int) ((items[i].w->rows + KERNEL_ROWS_PER_TASK - 1) / KERNEL_ROWS_PER_TASK);
	}
	c->qx.T = rows;
	c->qx.ld = KERNEL_QLD(j.cols);
	c->qx.blk = blk;
	threadpool_run(c->pool, rows * QuantizeChunks(j.cols), ItemsQuantizeTask, &j);
	threadpool_run(c->pool, first_task[n], ItemsMatmulTask, &j);
	return true;
}

typedef struct pack_job
{
	const cbllm_weight *w;
	int64_t		groups;			/* of w */
	int64_t		per_task;		/* groups a task packs */
	uint8_t    *dst;			/* w's packed bytes: w->data itself, or a buffer of its own */
	uint8_t    *tmp;			/* (n_threads, 16 rows as stored) when packing in place */
	int64_t		tmp_stride;		/* bytes per thread */
} pack_job;

/* One task: a run of a matrix's groups packed in place. */
static void
PackTask(void *arg, int task, int thread)
{
	pack_job   *j = arg;
	int64_t		g0 = (int64_t) task * j->per_task,
				g1 = g0 + j->per_task < j->groups ? g0 + j->per_task : j->groups;

	weight_pack_groups(j->w, g0, g1, j->dst, j->tmp + thread * j->tmp_stride);
}

typedef struct pack_state
{
	cpu_ctx    *c;
	cbllm_model *m;
	uint8_t    *tmp;			/* grown to the largest group */
	int64_t		tmp_stride;
	bool		floats;			/* a float matrix was packed */
} pack_state;

/* Give back the whole pages of a mapped range no longer read (they come back from the file if they are). */
static void
ReleasePages(const void *p, size_t bytes)
{
	uintptr_t	page = (uintptr_t) sysconf(_SC_PAGESIZE),
				a = ((uintptr_t) p + page - 1) / page * page,
				b = ((uintptr_t) p + bytes) / page * page;

	if (b > a)
		(void) madvise((void *) a, b - a, MADV_DONTNEED);
}

/*
 * A buffer for a packed matrix (free() releases it): 2 MiB aligned and
 * asking for huge pages, so that decode steps streaming the weights take
 * fewer TLB misses and loading takes fewer page faults.
 */
static uint8_t *
PackBuffer(size_t bytes)
{
	void	   *p = NULL;
	size_t		huge = (size_t) 2 << 20;

	if (posix_memalign(&p, bytes >= huge ? huge : 64, bytes) != 0)
		return NULL;
	if (bytes >= huge)
		(void) madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
	return p;
}

/*
 * model_visit: pack one matrix the kernels take packed, over the threads:
 * in place in a buffer of the model's own, else (the mapping's) into a new
 * buffer that the model then owns, letting the mapped pages go.
 */
static int
PackMatrix(void *arg, const model_tensor *mt, cbllm_err *err)
{
	pack_state *ps = arg;
	cbllm_weight *w = mt->matrix;
	int			nt = threadpool_size(ps->c->pool);
	int64_t		rb,
				gb;
	pack_job	j;

	/* an untied embedding (or per-layer embedding) is only ever read a row at a time: it stays as stored */
	if (w == NULL || mt->tied || (w == &ps->m->embed && !ps->m->lm_head_tied) ||
		w == &ps->m->embed_ple || w->packed_rows > 0 || !ps->c->k->packs(w))
		return CBLLM_OK;
	rb = (int64_t) cbllm_dtype_row_bytes(w->dtype, w->cols);
	gb = WEIGHT_PACK_ROWS * rb;
	j = (pack_job) {w, w->rows / WEIGHT_PACK_ROWS, 16, (uint8_t *) w->data, NULL, 0};
	if (!w->owned && (j.dst = PackBuffer((size_t) (w->rows * rb))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory packing %s of layer %d (%lld MiB)",
						  mt->t->role, mt->layer, (long long) (w->rows * rb >> 20));
	if (w->owned && gb > ps->tmp_stride)
	{
		free(ps->tmp);
		ps->tmp = malloc((size_t) (gb * nt));
		ps->tmp_stride = ps->tmp != NULL ? gb : 0;
		if (ps->tmp == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory packing %s of layer %d",
							  mt->t->role, mt->layer);
	}
	j.tmp = ps->tmp;
	j.tmp_stride = ps->tmp_stride;
	threadpool_run(ps->c->pool, (int) ((j.groups + j.per_task - 1) / j.per_task), PackTask, &j);
	if (!w->owned)
	{
		memcpy(j.dst + j.groups * gb, (const uint8_t *) w->data + j.groups * gb,
			   (size_t) ((w->rows - j.groups * WEIGHT_PACK_ROWS) * rb));
		ReleasePages(w->data, (size_t) (w->rows * rb));
		w->data = j.dst;
		w->owned = true;
	}
	w->packed_rows = j.groups * WEIGHT_PACK_ROWS;
	ps->floats |= !IsBlocked(w->dtype);
	return CBLLM_OK;
}

/*
 * Pack every matrix the kernel set multiplies packed (a tied lm_head's
 * embedding too, whose rows the embedding lookup then unpacks one at a
 * time; the lm_head then shares the embedding's buffer, which the
 * embedding owns).
 */
static int
CpuPackWeights(cbllm_backend *be, cbllm_model *m, cbllm_err *err)
{
	cpu_ctx    *c = be->ctx;
	pack_state	ps = {c, m, NULL, 0, false};
	int			rc = model_visit(m, PackMatrix, &ps, err);

	free(ps.tmp);
	if (rc != CBLLM_OK)
		return rc;
	if (m->lm_head_tied && m->embed.packed_rows > 0)
	{
		m->lm_head.data = m->embed.data;
		m->lm_head.owned = false;
		m->lm_head.packed_rows = m->embed.packed_rows;
	}
	if (ps.floats && c->xpanel == NULL &&
		(c->xpanel = malloc(sizeof(float) * (size_t) c->max_tokens * c->max_k)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the arranged activations");
	if (m->embed.packed_rows > 0 && c->embed_row == NULL &&
		(c->embed_row = malloc(cbllm_dtype_row_bytes(m->embed.dtype, m->embed.cols))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for an embedding row");
	return CBLLM_OK;
}

/*
 * Rotate pairs (i, i + d/2) of every head by the token's angles of RoPE
 * rope (HF rotate_half), d its rotated width (the head's first d
 * dimensions; the others pass), or pairs (2i, 2i + 1) when it is
 * interleaved.  The step's tables hold head_dim / 2 angles per token.
 */
static void
CpuRope(cbllm_backend *be, float *x, int T, int n_heads, int rope, const fwd_batch *b)
{
	cpu_ctx    *c = be->ctx;
	int			hd = rope_head_dim(&c->cfg.rope[rope], c->cfg.head_dim),
				stride = c->rope_half,
				half = c->freqs[rope].half;
	bool		inter = c->cfg.rope[rope].interleaved;
	int			step = inter ? 2 : 1,	/* pair i is (i * step, i * step + other) */
				other = inter ? 1 : half;

	for (int t = 0; t < T; t++)
	{
		const float *cs = c->rope_cos + ((int64_t) rope * c->max_tokens + t) * stride;
		const float *sn = c->rope_sin + ((int64_t) rope * c->max_tokens + t) * stride;

		for (int h = 0; h < n_heads; h++)
		{
			float	   *v = x + ((int64_t) t * n_heads + h) * hd;

			for (int i = 0; i < half; i++)
			{
				float		a = v[i * step],
							bb = v[i * step + other];

				v[i * step] = a * cs[i] - bb * sn[i];
				v[i * step + other] = bb * cs[i] + a * sn[i];
			}
		}
	}
}

/* dst[0, n) = src as the cache's element type (f16 and bf16 rounded to nearest even). */
static void
StoreKv(const cpu_ctx *c, cbllm_dtype dt, void *dst, const float *src, int64_t n)
{
	if (dt == CBLLM_F32)
		memcpy(dst, src, sizeof(float) * n);
	else
		c->k->narrow_half[dt == CBLLM_BF16](src, dst, n);
}

/* Copy each token's k and v into its cache slot. */
static void
CpuKvStore(cbllm_backend *be, kv_cache *kv, int layer, const float *k, const float *v,
		   const fwd_batch *b)
{
	int			cl = kv_cache_layer_of(kv, layer);
	int64_t		n = kv->row[cl];

	for (int t = 0; t < b->n_tokens; t++)
	{
		int32_t		block = (int32_t) (b->slot[t] / kv->block_size);
		int			s = (int) (b->slot[t] % kv->block_size);

		StoreKv(be->ctx, kv->dtype, kv_cache_k(kv, cl, block, s), k + t * n, n);
		StoreKv(be->ctx, kv->dtype, kv_cache_v(kv, cl, block, s), v + t * n, n);
	}
}

/* Attention for every (token, head) of the step over the pool (cpu_attention.c). */
static void
CpuAttention(cbllm_backend *be, const kv_cache *kv, int layer, const float *q,
			 const float *sinks, const fwd_batch *b, float *out)
{
	cpu_ctx    *c = be->ctx;

	cpu_attention_run(&c->attn, kv, layer, q, sinks, b, out);
}

/* What a gated-MLP activation task works on. */
typedef struct gate_job
{
	float	   *gate;
	const float *up;
	int64_t		n;
	arch_activation act;
	float		limit;			/* ARCH_ACT_SWIGLU_OAI's clamp */
} gate_job;

#define GATE_TASK_ELEMS 16384	/* elements of one activation task */

/* One task: gate = act(gate) * up over its block of elements. */
static void
GateMulTask(void *arg, int task, int thread)
{
	gate_job   *j = arg;
	int64_t		i0 = (int64_t) task * GATE_TASK_ELEMS;
	int64_t		i1 = i0 + GATE_TASK_ELEMS < j->n ? i0 + GATE_TASK_ELEMS : j->n;

	switch (j->act)
	{
		case ARCH_ACT_GELU_TANH:
			for (int64_t i = i0; i < i1; i++)
				j->gate[i] = cbllm_gelu_tanh(j->gate[i]) * j->up[i];
			break;
		case ARCH_ACT_SWIGLU_OAI:
			for (int64_t i = i0; i < i1; i++)
				j->gate[i] = cbllm_swiglu_oai(j->gate[i], j->up[i], j->limit);
			break;
		case ARCH_ACT_SILU:
			for (int64_t i = i0; i < i1; i++)
				j->gate[i] = cbllm_silu(j->gate[i]) * j->up[i];
			break;
	}
}

/* gate = act(gate) * up over the pool (elementwise: the same values on any number of threads). */
void
cpu_gate_mul(cbllm_backend *be, float *gate, const float *up, int64_t n, arch_activation act)
{
	cpu_ctx    *c = be->ctx;
	gate_job	j = {gate, up, n, act, c->cfg.swiglu_limit};

	threadpool_run(c->pool, (int) ((n + GATE_TASK_ELEMS - 1) / GATE_TASK_ELEMS), GateMulTask, &j);
}

/* gate = silu(gate) * up. */
static void
CpuSiluMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cpu_gate_mul(be, gate, up, n, ARCH_ACT_SILU);
}

/* gate = swiglu_oai(gate, up) (activation.h), gpt-oss's. */
static void
CpuSwigluOaiMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cpu_gate_mul(be, gate, up, n, ARCH_ACT_SWIGLU_OAI);
}

/* gate = gelu_tanh(gate) * up (activation.h). */
static void
CpuGeluTanhMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cpu_gate_mul(be, gate, up, n, ARCH_ACT_GELU_TANH);
}

/* x *= s. */
static void
CpuScale(cbllm_backend *be, float *x, float s, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] *= s;
}

/* x += y. */
static void
CpuAdd(cbllm_backend *be, float *x, const float *y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] += y[i];
}

/* x (T, dim) += bias on every row. */
static void
CpuAddBias(cbllm_backend *be, float *x, const float *bias, int T, int dim)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < dim; i++)
			x[(int64_t) t * dim + i] += bias[i];
}

/* out = the chosen rows of x. */
static void
CpuGatherRows(cbllm_backend *be, const float *x, const int32_t *rows, int n, int dim, float *out)
{
	for (int i = 0; i < n; i++)
		memmove(out + (int64_t) i * dim, x + (int64_t) rows[i] * dim, sizeof(float) * dim);
}

/* Copy one block's K and V, layer by layer, between the cache and the swap area. */
static void
CopyBlock(const kv_cache *kv, const swap_space *sw, int32_t block, int32_t sid, bool to_swap)
{
	size_t		at = 0;

	for (int l = 0; l < kv->n_layers; l++)
	{
		/* a swap block is the cache block's bytes over all layers, in the cache's element type */
		size_t		bytes = (size_t) kv->elem_bytes * kv->block_size * kv->row[l];
		char	   *ck = kv_cache_k(kv, l, block, 0);
		char	   *cv = kv_cache_v(kv, l, block, 0);
		char	   *hk = (char *) (sw->k + sid * sw->block_floats) + at;
		char	   *hv = (char *) (sw->v + sid * sw->block_floats) + at;

		memcpy(to_swap ? hk : ck, to_swap ? ck : hk, bytes);
		memcpy(to_swap ? hv : cv, to_swap ? cv : hv, bytes);
		at += bytes;
	}
}

/* Cache blocks to swap blocks. */
static int
CpuSwapOut(cbllm_backend *be, const kv_cache *kv, swap_space *sw, const int32_t *blocks,
		   const int32_t *swap_ids, int n, cbllm_err *err)
{
	for (int i = 0; i < n; i++)
		CopyBlock(kv, sw, blocks[i], swap_ids[i], true);
	return CBLLM_OK;
}

/* Swap blocks back to cache blocks. */
static int
CpuSwapIn(cbllm_backend *be, kv_cache *kv, const swap_space *sw, const int32_t *blocks,
		  const int32_t *swap_ids, int n, cbllm_err *err)
{
	for (int i = 0; i < n; i++)
		CopyBlock(kv, sw, blocks[i], swap_ids[i], false);
	return CBLLM_OK;
}

/* Host to host copy. */
static int
CpuDownload(cbllm_backend *be, const float *src, float *dst, size_t n, cbllm_err *err)
{
	if (src != dst)
		memcpy(dst, src, sizeof(float) * n);
	return CBLLM_OK;
}

/*
 * K and V in the engine's host pool (kv_cache): f16 unless f32 or bf16 is
 * asked for.  f16 keeps 11 significant bits of each key and value: logits
 * within 1e-3 of the float64 reference (test_families), half the memory of
 * f32 and faster attention at long contexts.
 */
static int
CpuKvLayout(const cbllm_model_config *cfg, int block_size, const char *kv_dtype,
			backend_kv_layout *out, cbllm_err *err)
{
	int			rc = kv_cache_dtype_resolve(kv_dtype, CBLLM_F16, &out->dtype, err);

	if (rc != CBLLM_OK)
		return rc;
	out->block_bytes = kv_cache_rows_block_bytes(block_size, model_kv_rows(cfg, NULL), out->dtype);
	return CBLLM_OK;
}

/*
 * With no size given: room for max_seqs sequences of the longest length, at
 * most 4 GiB together with a hybrid model's linear-attention states.
 */
static int
CpuKvBlocks(cbllm_backend *be, const backend_kv_budget *b, int *n_blocks, cbllm_err *err)
{
	const cpu_ctx *c = be->ctx;
	size_t		block_bytes = kv_cache_rows_block_bytes(b->block_size, model_kv_rows(&c->cfg, NULL),
														c->kv_dtype),
				full,
				cap,
				bytes;

	full = (size_t) b->max_seqs * ((c->max_ctx + b->block_size - 1) / b->block_size) * block_bytes;
	/* a hybrid model's states share the cap with its KV, down to a quarter of it for KV */
	cap = b->state_bytes < CPU_KV_CAP_BYTES / 4 * 3 ? CPU_KV_CAP_BYTES - b->state_bytes :
		CPU_KV_CAP_BYTES / 4;
	bytes = full < cap ? full : cap;
	*n_blocks = (int) (bytes / block_bytes);
	if (*n_blocks < 1)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "the KV cache of %zu bytes holds no block of %zu bytes", bytes,
						  block_bytes);
	return CBLLM_OK;
}

/* Free the context's buffers and the table. */
static void
CpuDestroy(cbllm_backend *be)
{
	cpu_ctx    *c;

	if (be == NULL)
		return;
	c = be->ctx;
	if (c != NULL)
	{
		free(c->scratch);
		free(c->xpanel);
		cpu_attention_free(&c->attn);
		free(c->rope_cos);
		free(c->rope_sin);
		free(c->seq_first);
		free(c->lin_scratch);
		free(c->freqs);
		free(c->qx.q);
		free(c->qx.s);
		free(c->qx.sum16);
		free(c->qx.isum16);
		free(c->qx.d);
		free(c->embed_row);
		cpu_moe_free(&c->moe);
		free(c);
	}
	free(be);
}

/* Create the CPU backend for a model geometry and step limits. */
int
cpu_backend_create(const cpu_backend_params *p, cbllm_backend **out, cbllm_err *err)
{
	cbllm_backend *be = calloc(1, sizeof(*be));
	cpu_ctx    *c = calloc(1, sizeof(*c));
	const cbllm_model_config *cfg = p->cfg;
	int			nt = threadpool_size(p->pool);
	int64_t		max_k = cfg->hidden;
	int			half = cfg->head_dim / 2;
	int			rc;

	for (int r = 0; r < cfg->n_rope; r++)
		half = rope_head_dim(&cfg->rope[r], cfg->head_dim) / 2 > half ?
			rope_head_dim(&cfg->rope[r], cfg->head_dim) / 2 : half;
	if (be == NULL || c == NULL)
	{
		free(be);
		free(c);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	be->ctx = c;
	c->cfg = *cfg;
	c->pool = p->pool;
	c->max_tokens = p->max_tokens;
	c->rope_half = half;
	c->max_ctx = p->max_ctx;
	c->kv_dtype = p->kv_dtype;
	c->k = cpu_kernels_select(p->isa);
	if (c->k == NULL)
	{
		CpuDestroy(be);
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "this CPU does not support the kernel set \"%s\"", p->isa);
	}
	if (model_max_cols(cfg) > max_k)
		max_k = model_max_cols(cfg);
	c->max_k = max_k;
	c->scratch_stride = KERNEL_ROWS_PER_TASK * KERNEL_QLD(max_k);
	c->scratch = malloc(sizeof(float) * c->scratch_stride * nt);
	c->seq_first = malloc(sizeof(int32_t) * ((size_t) p->max_tokens + 1));
	c->lin_stride = cpu_linear_scratch_floats(cfg);
	if (cfg->n_linear_layers > 0)
		c->lin_scratch = malloc(sizeof(float) * c->lin_stride * nt);
	c->rope_cos = malloc(sizeof(float) * (size_t) cfg->n_rope * p->max_tokens * half);
	c->rope_sin = malloc(sizeof(float) * (size_t) cfg->n_rope * p->max_tokens * half);
	c->freqs = malloc(sizeof(rope_freqs) * cfg->n_rope);
	if (p->quantized)
	{
		size_t		ld = (size_t) KERNEL_QLD(max_k);

		c->qx.q = malloc(ld * p->max_tokens);
		c->qx.s = malloc(sizeof(float) * ld / 4 * p->max_tokens);
		c->qx.sum16 = malloc(sizeof(float) * ld / 16 * p->max_tokens);
		c->qx.isum16 = malloc(sizeof(int16_t) * ld / 16 * p->max_tokens);
		c->qx.d = malloc(sizeof(float) * ld / 32 * p->max_tokens);
		if (!c->qx.q || !c->qx.s || !c->qx.sum16 || !c->qx.isum16 || !c->qx.d)
		{
			CpuDestroy(be);
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "out of memory for the quantized activations of %d tokens",
							  p->max_tokens);
		}
	}
	if (!c->scratch || !c->rope_cos || !c->rope_sin || !c->freqs || !c->seq_first ||
		(cfg->n_linear_layers > 0 && !c->lin_scratch) ||
		!cpu_attention_init(&c->attn, &c->cfg, c->k, p->pool, p->max_tokens, p->max_ctx) ||
		!cpu_moe_init(&c->moe, &c->cfg))
	{
		CpuDestroy(be);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the CPU workspace");
	}
	for (int r = 0; r < cfg->n_rope; r++)
		if ((rc = rope_freqs_build(&cfg->rope[r], cfg->head_dim, &c->freqs[r], err)) != CBLLM_OK)
		{
			CpuDestroy(be);
			return rc;
		}
	be->name = "cpu";
	be->cpu_isa = c->k->isa;
	be->pad_block = -1;
	be->alloc = CpuAlloc;
	be->free = CpuFree;
	be->kv_blocks = CpuKvBlocks;
	be->begin_step = CpuBeginStep;
	be->embed = CpuEmbed;
	be->pack_weights = CpuPackWeights;
	be->rmsnorm = CpuRmsnorm;
	be->matmul = cpu_matmul;
	be->rope = CpuRope;
	be->kv_store = CpuKvStore;
	be->attention = CpuAttention;
	be->linear_attention = cpu_linear_attention;
	be->split_halves = cpu_split_halves;
	be->sigmoid_mul = cpu_sigmoid_mul;
	be->softcap = cpu_softcap;
	be->swap_axes = cpu_swap_axes;
	be->per_layer_heads = true;
	be->add_gated_rows = cpu_add_gated_rows;
	be->silu_mul = CpuSiluMul;
	be->gelu_tanh_mul = CpuGeluTanhMul;
	be->swiglu_oai_mul = CpuSwigluOaiMul;
	be->scale = CpuScale;
	be->add = CpuAdd;
	be->add_bias = CpuAddBias;
	be->gather_rows = CpuGatherRows;
	be->moe = cfg->n_experts > 0 ? cpu_moe : NULL;
	be->swap_out = CpuSwapOut;
	be->swap_in = CpuSwapIn;
	be->download = CpuDownload;
	be->destroy = CpuDestroy;
	*out = be;
	return CBLLM_OK;
}


/* The CPU is always there. */
static bool
CpuProbe(void)
{
	return true;
}

/* model_visit: stops (returning 1) at the first block-quantized matrix. */
static int
FindBlocked(void *arg, const model_tensor *mt, cbllm_err *err)
{
	return mt->matrix != NULL && !mt->tied && IsBlocked(mt->matrix->dtype) ? 1 : 0;
}

/* The registry's create: the CPU backend for the engine's model and limits. */
static int
CpuCreate(const backend_params *p, cbllm_backend **out, cbllm_err *err)
{
	cpu_backend_params cp = {&p->model->cfg, p->pool, p->cpu_isa, p->max_tokens, p->max_ctx,
	model_visit(p->model, FindBlocked, NULL, err) == 1, p->kv_dtype};

	return cpu_backend_create(&cp, out, err);
}

/* The types whose row of the CPU's table gives a path through the kernels. */
static bool
CpuSupportsWeight(cbllm_dtype dt)
{
	return cpu_dtype_traits_of(dt)->path != CBLLM_CPU_NONE;
}

/* qsort order of doubles. */
static int
CmpDouble(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* One thread's memcpy between two buffers of bytes: the median of timed copies, read + write. */
static int
CpuCopyBandwidth(size_t bytes, double *gbps, cbllm_err *err)
{
	char	   *src = malloc(bytes);
	char	   *dst = malloc(bytes);
	double		t[CPU_COPY_REPS];
	volatile char sink = 0;

	if (src == NULL || dst == NULL)
	{
		free(src);
		free(dst);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for two %zu MiB copy buffers",
						  bytes >> 20);
	}
	/* touch every page of both buffers first, so that no copy pays for faults */
	memset(src, 1, bytes);
	memset(dst, 2, bytes);
	for (int k = 0; k < CPU_COPY_REPS; k++)
	{
		double		t0;

		src[(size_t) k * 4099 % bytes] = (char) k;
		t0 = cbllm_now();
		memcpy(dst, src, bytes);
		t[k] = cbllm_now() - t0;
		sink += dst[(size_t) k * 4099 % bytes];	/* the copy is used: it cannot be elided */
	}
	(void) sink;
	free(src);
	free(dst);
	qsort(t, CPU_COPY_REPS, sizeof(double), CmpDouble);
	*gbps = 2.0 * bytes / t[CPU_COPY_REPS / 2] / 1e9;
	return CBLLM_OK;
}

const backend_reg cpu_backend_reg = {
	.name = "cpu",
	.priority = 0,
	.probe = CpuProbe,
	.create = CpuCreate,
	.kv_layout = CpuKvLayout,
	.supports_weight = CpuSupportsWeight,
	.copy_bandwidth = CpuCopyBandwidth,
	.runs_linear_attention = true,
	.runs_per_layer_heads = true,
};
