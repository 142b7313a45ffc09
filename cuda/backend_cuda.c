/*
 * backend_cuda.c: the backend table on the GPU.  Plain C: it reaches CUDA
 * only through cuda_ops.h.  Errors inside an operation are remembered and
 * reported by the next begin_step or download, whose status fails the step
 * (the engine then fails that step's requests and keeps running).
 */
#include "backend_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "numeric.h"

typedef struct dev_weight
{
	const void *host;			/* the host pointer the engine passes (weight data or norm) */
	void	   *dev;
	int			dtype;			/* on the device: 0 f32 (norms), 1 f16, 2 bf16 */
} dev_weight;

typedef struct cuda_ctx
{
	cbllm_model_config cfg;
	void	   *blas;
	dev_weight *w;				/* (n_w) uploaded tensors */
	int			n_w;
	int			cap_w;
	float	   *k_cache;		/* (n_layers, n_blocks, block_size, n_kv_heads, head_dim) */
	float	   *v_cache;
	int64_t		block_floats;	/* floats of one block in one layer */
	int			n_blocks;
	int			block_size;
	int			max_tokens;
	int			max_seqs;
	int			max_ctx;
	int			max_blocks;		/* table row length: ceil(max_ctx / block_size) */
	/* device copies of the step's batch */
	int32_t    *d_tokens;		/* (max_tokens) */
	int32_t    *d_pos;			/* (max_tokens) */
	int32_t    *d_seq;			/* (max_tokens) */
	int64_t    *d_slots;		/* (max_tokens) */
	int32_t    *d_tables;		/* (max_seqs, max_blocks) */
	float	   *d_cos;			/* (max_tokens, head_dim / 2) */
	float	   *d_sin;
	void	   *d_xh;			/* (max_tokens, max_k) halves: matmul input */
	/* host staging */
	int32_t    *h_tables;		/* (max_seqs, max_blocks) */
	float	   *h_cos;
	float	   *h_sin;
	double	   *inv_freq;		/* (head_dim / 2) */
	int			failed;			/* an operation failed since the last check */
	cbllm_err	err;
} cuda_ctx;

/* Remember the first failure of an operation (ops return void in the table). */
static void
Note(cuda_ctx *c, int rc)
{
	if (rc != CBLLM_OK && !c->failed)
		c->failed = rc;
}

/* The device copy of a host tensor. */
static const dev_weight *
Find(const cuda_ctx *c, const void *host)
{
	for (int i = 0; i < c->n_w; i++)
		if (c->w[i].host == host)
			return &c->w[i];
	return NULL;
}

/* Upload n elements of a host tensor (as half precision unless keep_f32). */
static int
Upload(cuda_ctx *c, const void *host, cbllm_dtype dt, size_t n, bool keep_f32, cbllm_err *err)
{
	dev_weight  d = {host, NULL, 0};
	int			rc;

	if (Find(c, host) != NULL)
		return CBLLM_OK;		/* tied embeddings: one upload */
	if (c->n_w == c->cap_w)
	{
		int			cap = c->cap_w ? 2 * c->cap_w : 64;
		dev_weight *g = realloc(c->w, sizeof(dev_weight) * cap);

		if (g == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		c->w = g;
		c->cap_w = cap;
	}
	if (keep_f32)
	{
		d.dtype = CBLLM_F32;
		rc = cuda_alloc(&d.dev, n * 4, err);
		if (rc == CBLLM_OK)
			rc = cuda_upload(d.dev, host, n * 4, err);
	}
	else if (dt != CBLLM_F32)
	{
		d.dtype = dt;
		rc = cuda_alloc(&d.dev, n * 2, err);
		if (rc == CBLLM_OK)
			rc = cuda_upload(d.dev, host, n * 2, err);
	}
	else
	{
		/* F32 checkpoint: round to BF16 (nearest even) for the tensor cores */
		uint16_t   *h = malloc(n * 2);

		if (h == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		for (size_t i = 0; i < n; i++)
		{
			uint32_t	u;

			memcpy(&u, (const float *) host + i, 4);
			h[i] = (uint16_t) ((u + 0x7fff + ((u >> 16) & 1)) >> 16);
		}
		d.dtype = CBLLM_BF16;
		rc = cuda_alloc(&d.dev, n * 2, err);
		if (rc == CBLLM_OK)
			rc = cuda_upload(d.dev, h, n * 2, err);
		free(h);
	}
	if (rc != CBLLM_OK)
	{
		cuda_free(d.dev);
		return rc;
	}
	c->w[c->n_w++] = d;
	return CBLLM_OK;
}

/* Upload every matrix and norm of the model. */
static int
UploadModel(cuda_ctx *c, const cbllm_model *m, cbllm_err *err)
{
	const cbllm_model_config *cfg = &m->cfg;
	int			rc;

#define UPW(w) Upload(c, (w).data, (w).dtype, (size_t) ((w).rows * (w).cols), false, err)
#define UPN(p) Upload(c, (p), CBLLM_F32, (size_t) cfg->hidden, true, err)
	if ((rc = UPW(m->embed)) || (rc = UPW(m->lm_head)) || (rc = UPN(m->final_norm)))
		return rc;
	for (int l = 0; l < cfg->n_layers; l++)
	{
		const cbllm_layer *L = &m->layers[l];

		if ((rc = UPN(L->attn_norm)) || (rc = UPN(L->mlp_norm)) || (rc = UPW(L->wq)) ||
			(rc = UPW(L->wk)) || (rc = UPW(L->wv)) || (rc = UPW(L->wo)) ||
			(rc = UPW(L->w_gate)) || (rc = UPW(L->w_up)) || (rc = UPW(L->w_down)))
			return rc;
	}
#undef UPW
#undef UPN
	return CBLLM_OK;
}

static void *
CudaAlloc(cbllm_backend *be, size_t bytes)
{
	void	   *p = NULL;

	return cuda_alloc(&p, bytes ? bytes : 4, NULL) == CBLLM_OK ? p : NULL;
}

static void
CudaFree(cbllm_backend *be, void *p)
{
	cuda_free(p);
}

/* Upload the step's batch: tokens, positions, sequences, slots, block tables, RoPE angles. */
static int
CudaBeginStep(cbllm_backend *be, const fwd_batch *b, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	int			T = b->n_tokens,
				half = c->cfg.head_dim / 2;
	int			need[b->n_seqs > 0 ? b->n_seqs : 1];
	int			rc;

	if (c->failed)
	{
		*err = c->err;
		c->failed = 0;
		return CBLLM_ERR_DEVICE;
	}
	if (T > c->max_tokens || b->n_seqs > c->max_seqs)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "step exceeds the GPU workspace");
	for (int s = 0; s < b->n_seqs; s++)
		need[s] = 0;
	for (int t = 0; t < T; t++)
	{
		int			blocks = b->pos[t] / c->block_size + 1;

		if (b->pos[t] >= c->max_ctx)
			return cbllm_fail(err, CBLLM_ERR_INTERNAL, "position %d exceeds the context of %d",
							  b->pos[t], c->max_ctx);
		if (blocks > need[b->seq[t]])
			need[b->seq[t]] = blocks;
		for (int i = 0; i < half; i++)
		{
			double		a = (double) b->pos[t] / c->cfg.rope_scale * c->inv_freq[i];

			c->h_cos[(int64_t) t * half + i] = (float) cos(a);
			c->h_sin[(int64_t) t * half + i] = (float) sin(a);
		}
	}
	for (int s = 0; s < b->n_seqs; s++)
		memcpy(c->h_tables + (int64_t) s * c->max_blocks, b->block_tables[s],
			   sizeof(int32_t) * need[s]);
	if ((rc = cuda_upload(c->d_tokens, b->tokens, sizeof(int32_t) * T, err)) ||
		(rc = cuda_upload(c->d_pos, b->pos, sizeof(int32_t) * T, err)) ||
		(rc = cuda_upload(c->d_seq, b->seq, sizeof(int32_t) * T, err)) ||
		(rc = cuda_upload(c->d_slots, b->slot, sizeof(int64_t) * T, err)) ||
		(rc = cuda_upload(c->d_tables, c->h_tables,
						  sizeof(int32_t) * (size_t) b->n_seqs * c->max_blocks, err)) ||
		(rc = cuda_upload(c->d_cos, c->h_cos, sizeof(float) * (size_t) T * half, err)) ||
		(rc = cuda_upload(c->d_sin, c->h_sin, sizeof(float) * (size_t) T * half, err)))
		return rc;
	return CBLLM_OK;
}

static void
CudaEmbed(cbllm_backend *be, const cbllm_weight *emb, const fwd_batch *b, float *x)
{
	cuda_ctx   *c = be->ctx;
	const dev_weight *d = Find(c, emb->data);

	Note(c, d ? cuda_embed(d->dev, d->dtype, (int) emb->cols, c->d_tokens, b->n_tokens, x, &c->err) :
		 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "embedding not on the GPU"));
}

static void
CudaRmsnorm(cbllm_backend *be, const float *x, const float *w, int T, int dim, float eps,
			float *out)
{
	cuda_ctx   *c = be->ctx;
	const dev_weight *d = Find(c, w);

	Note(c, d ? cuda_rmsnorm(x, d->dev, T, dim, eps, out, &c->err) :
		 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "norm weights not on the GPU"));
}

static void
CudaMatmul(cbllm_backend *be, int n, const cbllm_weight *const *w, const float *x, int T,
		   float *const *y)
{
	cuda_ctx   *c = be->ctx;

	for (int i = 0; i < n; i++)
	{
		const dev_weight *d = Find(c, w[i]->data);

		Note(c, d ? cuda_matmul(c->blas, d->dev, d->dtype, (int) w[i]->rows, (int) w[i]->cols, x,
								T, c->d_xh, y[i], &c->err) :
			 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "a weight is not on the GPU"));
	}
}

static void
CudaRope(cbllm_backend *be, float *x, int T, int n_heads, const fwd_batch *b)
{
	cuda_ctx   *c = be->ctx;

	Note(c, cuda_rope(x, c->d_cos, c->d_sin, T, n_heads, c->cfg.head_dim, &c->err));
}

static void
CudaKvStore(cbllm_backend *be, kv_cache *kv, int layer, const float *k, const float *v,
			const fwd_batch *b)
{
	cuda_ctx   *c = be->ctx;
	int64_t		off = (int64_t) layer * c->n_blocks * c->block_floats;

	Note(c, cuda_kv_store(c->k_cache + off, c->v_cache + off, k, v, c->d_slots, b->n_tokens,
						  (int64_t) c->cfg.n_kv_heads * c->cfg.head_dim, &c->err));
}

static void
CudaAttention(cbllm_backend *be, const kv_cache *kv, int layer, const float *q,
			  const fwd_batch *b, float *out)
{
	cuda_ctx   *c = be->ctx;
	int64_t		off = (int64_t) layer * c->n_blocks * c->block_floats;

	Note(c, cuda_attention(q, c->k_cache + off, c->v_cache + off, c->d_tables, c->max_blocks,
						   c->d_pos, c->d_seq, b->n_tokens, c->cfg.n_heads, c->cfg.n_kv_heads,
						   c->cfg.head_dim, c->block_size, c->cfg.sliding_window, c->max_ctx,
						   out, &c->err));
}

static void
CudaSiluMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	Note(c, cuda_silu_mul(gate, up, n, &c->err));
}

static void
CudaAdd(cbllm_backend *be, float *x, const float *y, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	Note(c, cuda_add(x, y, n, &c->err));
}

static void
CudaGatherRows(cbllm_backend *be, const float *x, const int32_t *rows, int n, int dim, float *out)
{
	cuda_ctx   *c = be->ctx;

	for (int i = 0; i < n; i++)
		Note(c, cuda_copy(out + (int64_t) i * dim, x + (int64_t) rows[i] * dim,
						  sizeof(float) * dim, &c->err));
}

/* Copy device memory to the host; reports any failure of the step's operations. */
static int
CudaDownload(cbllm_backend *be, const float *src, float *dst, size_t n, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;

	if (c->failed)
	{
		*err = c->err;
		c->failed = 0;
		return CBLLM_ERR_DEVICE;
	}
	return cuda_download(dst, src, sizeof(float) * n, err);
}

/* Blocks between the device cache and host swap space, layer by layer. */
static int
CudaSwap(cuda_ctx *c, swap_space *sw, const int32_t *blocks, const int32_t *ids, int n,
		 bool out, cbllm_err *err)
{
	size_t		bytes = sizeof(float) * c->block_floats;

	for (int i = 0; i < n; i++)
		for (int l = 0; l < c->cfg.n_layers; l++)
		{
			int64_t		doff = ((int64_t) l * c->n_blocks + blocks[i]) * c->block_floats;
			int64_t		hoff = ids[i] * sw->block_floats + (int64_t) l * c->block_floats;
			int			rc = out ?
				cuda_download(sw->k + hoff, c->k_cache + doff, bytes, err) ||
				cuda_download(sw->v + hoff, c->v_cache + doff, bytes, err) :
				cuda_upload(c->k_cache + doff, sw->k + hoff, bytes, err) ||
				cuda_upload(c->v_cache + doff, sw->v + hoff, bytes, err);

			if (rc)
				return CBLLM_ERR_DEVICE;
		}
	return CBLLM_OK;
}

static int
CudaSwapOut(cbllm_backend *be, const kv_cache *kv, swap_space *sw, const int32_t *blocks,
			const int32_t *ids, int n, cbllm_err *err)
{
	return CudaSwap(be->ctx, sw, blocks, ids, n, true, err);
}

static int
CudaSwapIn(cbllm_backend *be, kv_cache *kv, const swap_space *sw, const int32_t *blocks,
		   const int32_t *ids, int n, cbllm_err *err)
{
	return CudaSwap(be->ctx, (swap_space *) sw, blocks, ids, n, false, err);
}

/* Free everything on the device and the host. */
static void
CudaDestroy(cbllm_backend *be)
{
	cuda_ctx   *c;

	if (be == NULL)
		return;
	c = be->ctx;
	if (c != NULL)
	{
		for (int i = 0; i < c->n_w; i++)
			cuda_free(c->w[i].dev);
		free(c->w);
		cuda_free(c->k_cache);
		cuda_free(c->v_cache);
		cuda_free(c->d_tokens);
		cuda_free(c->d_pos);
		cuda_free(c->d_seq);
		cuda_free(c->d_slots);
		cuda_free(c->d_tables);
		cuda_free(c->d_cos);
		cuda_free(c->d_sin);
		cuda_free(c->d_xh);
		free(c->h_tables);
		free(c->h_cos);
		free(c->h_sin);
		free(c->inv_freq);
		cuda_blas_destroy(c->blas);
		free(c);
	}
	free(be);
}

/* Create the GPU backend: upload the model, allocate the KV pool and the step buffers. */
int
cuda_backend_create(const cuda_backend_params *p, cbllm_backend **out, cbllm_err *err)
{
	const cbllm_model_config *cfg = &p->model->cfg;
	cbllm_backend *be = calloc(1, sizeof(*be));
	cuda_ctx   *c = calloc(1, sizeof(*c));
	int			half = cfg->head_dim / 2;
	int64_t		max_k = cfg->intermediate > cfg->hidden ? cfg->intermediate : cfg->hidden;
	size_t		cache;
	int			rc;

	if (be == NULL || c == NULL)
	{
		free(be);
		free(c);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	be->ctx = c;
	if (cuda_device_count() == 0)
	{
		CudaDestroy(be);
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "no CUDA device is available");
	}
	c->cfg = *cfg;
	c->n_blocks = p->n_kv_blocks;
	c->block_size = p->block_size;
	c->block_floats = (int64_t) p->block_size * cfg->n_kv_heads * cfg->head_dim;
	c->max_tokens = p->max_tokens;
	c->max_seqs = p->max_seqs;
	c->max_ctx = p->max_ctx;
	c->max_blocks = (p->max_ctx + p->block_size - 1) / p->block_size;
	if ((int64_t) cfg->n_heads * cfg->head_dim > max_k)
		max_k = (int64_t) cfg->n_heads * cfg->head_dim;
	cache = sizeof(float) * (size_t) cfg->n_layers * c->n_blocks * c->block_floats;
	if ((rc = cuda_blas_create(&c->blas, err)) ||
		(rc = UploadModel(c, p->model, err)) ||
		(rc = cuda_alloc((void **) &c->k_cache, cache, err)) ||
		(rc = cuda_alloc((void **) &c->v_cache, cache, err)) ||
		(rc = cuda_alloc((void **) &c->d_tokens, sizeof(int32_t) * p->max_tokens, err)) ||
		(rc = cuda_alloc((void **) &c->d_pos, sizeof(int32_t) * p->max_tokens, err)) ||
		(rc = cuda_alloc((void **) &c->d_seq, sizeof(int32_t) * p->max_tokens, err)) ||
		(rc = cuda_alloc((void **) &c->d_slots, sizeof(int64_t) * p->max_tokens, err)) ||
		(rc = cuda_alloc((void **) &c->d_tables,
						 sizeof(int32_t) * (size_t) p->max_seqs * c->max_blocks, err)) ||
		(rc = cuda_alloc((void **) &c->d_cos, sizeof(float) * (size_t) p->max_tokens * half, err)) ||
		(rc = cuda_alloc((void **) &c->d_sin, sizeof(float) * (size_t) p->max_tokens * half, err)) ||
		(rc = cuda_alloc(&c->d_xh, 2 * (size_t) p->max_tokens * max_k, err)))
	{
		CudaDestroy(be);
		return rc;
	}
	c->h_tables = calloc((size_t) p->max_seqs * c->max_blocks, sizeof(int32_t));
	c->h_cos = malloc(sizeof(float) * (size_t) p->max_tokens * half);
	c->h_sin = malloc(sizeof(float) * (size_t) p->max_tokens * half);
	c->inv_freq = malloc(sizeof(double) * half);
	if (!c->h_tables || !c->h_cos || !c->h_sin || !c->inv_freq)
	{
		CudaDestroy(be);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	for (int i = 0; i < half; i++)
		c->inv_freq[i] = 1.0 / pow((double) cfg->rope_theta, (2.0 * i) / cfg->head_dim);
	be->name = "cuda";
	be->alloc = CudaAlloc;
	be->free = CudaFree;
	be->begin_step = CudaBeginStep;
	be->embed = CudaEmbed;
	be->rmsnorm = CudaRmsnorm;
	be->matmul = CudaMatmul;
	be->rope = CudaRope;
	be->kv_store = CudaKvStore;
	be->attention = CudaAttention;
	be->silu_mul = CudaSiluMul;
	be->add = CudaAdd;
	be->gather_rows = CudaGatherRows;
	be->swap_out = CudaSwapOut;
	be->swap_in = CudaSwapIn;
	be->download = CudaDownload;
	be->destroy = CudaDestroy;
	*out = be;
	return CBLLM_OK;
}
