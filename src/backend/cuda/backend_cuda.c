/*
 * backend_cuda.c: the backend table on the GPU.  Plain C: it reaches CUDA
 * only through cuda_ops.h.
 *
 * A step: begin_step copies the batch (tokens, positions, slots, block
 * tables, rows, RoPE angles) through page-locked staging buffers onto the
 * compute stream; every operation launches there; end_step finishes it.
 * Errors inside an operation (the table's operations return nothing) are
 * remembered and reported by end_step, sample or download, whose status
 * fails the step; the engine then fails that step's requests and goes on.
 *
 * Graphs: a padded decode step (fwd_batch.graph) runs eagerly the first time
 * its size is seen (so every kernel and cuBLAS routine is loaded), is
 * recorded the second time, and from then on is not launched operation by
 * operation: begin_step uploads the batch, the operations do nothing, and
 * end_step replays the recorded graph.  Every operation reads its per-step data from the
 * fixed device buffers, so a replay computes the new batch.
 */
#include "backend/cuda/backend_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ctx.h"
#include "backend/cuda/cuda_dtype_traits.h"
#include "backend/cuda/cuda_ops.h"
#include "base/numeric.h"
#include "kv/kv_cache.h"
#include "model/rope.h"

/*
 * The bf16 tile a quantized matrix is dequantized into for cuBLAS (steps of
 * more than CUDA_QMATVEC_MAX_T tokens): 32 Mi elements, 64 MiB, so a 7B
 * model's matrices take one to four tiles.
 */
#define QUANT_TILE_ELEMS ((int64_t) 32 << 20)

/* Remember the first failure of an operation (ops return void in the table). */
void
cuda_backend_note(cuda_ctx *c, int rc)
{
	if (rc != CBLLM_OK && !c->failed)
		c->failed = rc;
}

/* Report and clear a remembered failure. */
static int
TakeFailure(cuda_ctx *c, cbllm_err *err)
{
	if (!c->failed)
		return CBLLM_OK;
	*err = c->err;
	c->failed = 0;
	return CBLLM_ERR_DEVICE;
}

static void *
CudaAlloc(cbllm_backend *be, size_t bytes)
{
	void	   *p = NULL;

	return cuda_alloc(&p, bytes, NULL) == CBLLM_OK ? p : NULL;
}

static void
CudaFree(cbllm_backend *be, void *p)
{
	cuda_free(p);
}

/* The graph size a decode step of T tokens is padded to; 0 when it runs eagerly. */
static int
CudaGraphTokens(cbllm_backend *be, int T)
{
	cuda_ctx   *c = be->ctx;

	if (c->no_graphs || c->cfg.n_experts > 0)
		return 0;				/* experts are grouped on the host: a step waits for its routing */
	if (c->cfg.n_linear_layers > 0)
		return 0;				/* a padding sequence would have no linear-attention state */
	for (int i = 0; i < c->n_sizes; i++)
		if (c->sizes[i] >= T)
			return c->sizes[i];
	return 0;
}

/* Fill the staging buffers with the batch and copy them to the device. */
static int
UploadBatch(cuda_ctx *c, const fwd_batch *b, cbllm_err *err)
{
	int			T = b->n_tokens;
	int			need[b->n_seqs > 0 ? b->n_seqs : 1];
	int			rc;

	/* the previous step's copies may still be reading the staging buffers */
	if ((rc = cuda_event_sync(c->ev_staged, err)) != CBLLM_OK)
		return rc;
	for (int s = 0; s < b->n_seqs; s++)
		need[s] = 0;
	for (int t = 0; t < T; t++)
	{
		int			blocks = b->pos[t] / c->block_size + 1;

		if (b->pos[t] < 0 || b->pos[t] >= c->max_ctx || b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
			return cbllm_fail(err, CBLLM_ERR_INTERNAL, "token %d: position %d or sequence %d out of range",
							  t, b->pos[t], b->seq[t]);
		if (blocks > need[b->seq[t]])
			need[b->seq[t]] = blocks;
	}
	memcpy(c->h_tokens, b->tokens, sizeof(int32_t) * T);
	memcpy(c->h_pos, b->pos, sizeof(int32_t) * T);
	for (int t = 0; t < T; t++)
		c->h_rope_row[t] = (b->rope_set != NULL && b->rope_set[t] != 0 && c->rope_sets > 1 ? c->max_ctx : 0) +
			b->pos[t];
	memcpy(c->h_seq, b->seq, sizeof(int32_t) * T);
	memcpy(c->h_slots, b->slot, sizeof(int64_t) * T);
	memcpy(c->h_rows, b->rows, sizeof(int32_t) * b->n_rows);
	for (int s = 0; s < b->n_seqs; s++)
		memcpy(c->h_tables + (int64_t) s * c->max_blocks, b->block_tables[s],
			   sizeof(int32_t) * need[s]);
	if ((rc = cuda_copy_async(c->d_tokens, c->h_tokens, sizeof(int32_t) * T, c->stream, err)) ||
		(rc = cuda_copy_async(c->d_pos, c->h_pos, sizeof(int32_t) * T, c->stream, err)) ||
		(rc = cuda_copy_async(c->d_rope_row, c->h_rope_row, sizeof(int32_t) * T, c->stream, err)) ||
		(rc = cuda_copy_async(c->d_seq, c->h_seq, sizeof(int32_t) * T, c->stream, err)) ||
		(rc = cuda_copy_async(c->d_slots, c->h_slots, sizeof(int64_t) * T, c->stream, err)) ||
		(rc = cuda_copy_async(c->d_rows, c->h_rows, sizeof(int32_t) * b->n_rows, c->stream, err)) ||
		(rc = cuda_copy_async(c->d_tables, c->h_tables,
							  sizeof(int32_t) * (size_t) b->n_seqs * c->max_blocks, c->stream, err)) ||
		(rc = cuda_state_upload(c, b, err)) ||
		(rc = cuda_event_record(c->ev_staged, c->stream, err)))
		return rc;
	return CBLLM_OK;
}

/* Upload the step's batch; for a graph step, start recording or prepare the replay. */
static int
CudaBeginStep(cbllm_backend *be, const fwd_batch *b, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	int			rc;

	c->mode = STEP_EAGER;
	if ((rc = TakeFailure(c, err)) != CBLLM_OK)
		return rc;
	if (c->k_cache == NULL)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "the GPU KV pool is not allocated");
	if (b->n_tokens > c->max_tokens || b->n_seqs > c->max_seqs || b->n_rows > c->max_tokens)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "step exceeds the GPU workspace");
	if (c->swap_pending)
	{
		if ((rc = cuda_stream_wait(c->stream, c->ev_swap, err)) != CBLLM_OK)
			return rc;
		c->swap_pending = false;
	}
	if ((rc = UploadBatch(c, b, err)) != CBLLM_OK)
		return rc;
	if (!b->graph || c->no_graphs)
		return CBLLM_OK;
	for (c->graph_index = 0; c->graph_index < c->n_sizes; c->graph_index++)
		if (c->sizes[c->graph_index] == b->n_tokens)
			break;
	if (c->graph_index == c->n_sizes)
		return CBLLM_OK;
	if (c->graphs[c->graph_index] != NULL)
		c->mode = STEP_REPLAY;
	else if (!c->warmed[c->graph_index])
	{
		/* the first step of a size runs eagerly: kernels and cuBLAS load before any capture */
		c->warmed[c->graph_index] = true;
	}
	else
	{
		if ((rc = cuda_capture_begin(c->stream, err)) != CBLLM_OK)
		{
			c->no_graphs = true;
			return rc;
		}
		c->mode = STEP_RECORD;
	}
	return CBLLM_OK;
}

/* Finish the step: end a recording and replay the graph; report failures. */
static int
CudaEndStep(cbllm_backend *be, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	step_mode	mode = c->mode;
	int			rc = CBLLM_OK;

	c->mode = STEP_EAGER;
	if (mode == STEP_RECORD)
	{
		cuda_graph	g = NULL;
		cbllm_err	end_err;

		rc = cuda_capture_end(c->stream, &g, &end_err);
		if (rc != CBLLM_OK || c->failed)
		{
			/*
			 * Nothing ran: the operations were only being recorded.  Report
			 * why, forget the failure and stop recording; the caller runs the
			 * step again eagerly.
			 */
			cuda_graph_destroy(g);
			*err = rc != CBLLM_OK ? end_err : c->err;
			c->failed = 0;
			c->no_graphs = true;
			return rc != CBLLM_OK ? rc : CBLLM_ERR_DEVICE;
		}
		c->graphs[c->graph_index] = g;
		mode = STEP_REPLAY;
	}
	if (mode == STEP_REPLAY)
	{
		rc = cuda_graph_launch(c->graphs[c->graph_index], c->stream, err);
		be->graph_replays++;
	}
	if (rc == CBLLM_OK)
		rc = TakeFailure(c, err);
	return rc;
}

/* Whether an operation launches now (not during a replayed step). */
#define LIVE(c) ((c)->mode != STEP_REPLAY)

static void
CudaEmbed(cbllm_backend *be, const cbllm_weight *emb, const fwd_batch *b, float *x)
{
	cuda_ctx   *c = be->ctx;
	const dev_weight *d = cuda_weight_find_matrix(c, emb);

	if (LIVE(c))
		cuda_backend_note(c, d ? cuda_embed(d->dev, d->dtype, (int) emb->cols, c->d_tokens, b->n_tokens, x,
							   c->stream, &c->err) :
			 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "embedding not on the GPU"));
}

static void
CudaRmsnorm(cbllm_backend *be, const float *x, const float *w, int T, int dim, float eps,
			float *out)
{
	cuda_ctx   *c = be->ctx;
	const dev_weight *d = w != NULL ? cuda_weight_find(c, w, 0) : NULL;

	if (LIVE(c))	/* no weight: Gemma 4's v norm */
		cuda_backend_note(c, d || w == NULL ?
						  cuda_rmsnorm(x, d ? d->dev : NULL, T, dim, eps, out, c->stream, &c->err) :
			 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "norm weights not on the GPU"));
}

static void
CudaAddRmsnorm(cbllm_backend *be, float *x, const float *y, const float *w, int T, int dim,
			   float eps, float *out)
{
	cuda_ctx   *c = be->ctx;
	const dev_weight *d = cuda_weight_find(c, w, 0);

	if (LIVE(c))
		cuda_backend_note(c, d ? cuda_add_rmsnorm(x, y, d->dev, T, dim, eps, out, c->stream, &c->err) :
			 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "norm weights not on the GPU"));
}

void
cuda_backend_matmul(cbllm_backend *be, int n, const cbllm_weight *const *w, const float *x, int T,
					float *const *y)
{
	cuda_ctx   *c = be->ctx;

	cbllm_dtype converted = CBLLM_DTYPE_COUNT;	/* the type x is in d_xh as; COUNT: none yet */

	if (!LIVE(c))
		return;
	for (int i = 0; i < n; i++)
	{
		const dev_weight *d = cuda_weight_find_matrix(c, w[i]);

		if (d == NULL)
		{
			cuda_backend_note(c, cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "a weight is not on the GPU"));
			return;
		}
		bool		quant = cuda_dtype_traits_of(d->dtype)->path == CBLLM_CUDA_QUANT;
		cbllm_dtype half = quant ? CBLLM_BF16 : d->dtype;	/* what cuBLAS multiplies */

		if (quant && T <= CUDA_QMATVEC_MAX_T)
		{
			/* decode: the fused kernel reads x as it is */
			cuda_backend_note(c, cuda_qmatvec(d->dev, d->dtype, (int) w[i]->rows, (int) w[i]->cols, x, T, y[i],
								 c->stream, &c->err));
			continue;
		}
		/* the group shares its input: convert it once */
		if (converted != half)
		{
			cuda_backend_note(c, cuda_to_half(x, (int64_t) T * w[i]->cols, half, c->d_xh, c->stream, &c->err));
			converted = half;
		}
		if (quant)
			cuda_backend_note(c, cuda_qmatmul_tiled(c->blas, d->dev, d->dtype, (int) w[i]->rows,
									   (int) w[i]->cols, c->d_xh, T, c->d_wtile, c->wtile_elems,
									   y[i], c->stream, &c->err));
		else
			cuda_backend_note(c, cuda_gemm_half(c->blas, d->dev, d->dtype, (int) w[i]->rows, (int) w[i]->cols,
								   c->d_xh, T, y[i], c->stream, &c->err));
	}
}

static void
CudaRope(cbllm_backend *be, float *x, int T, int n_heads, int rope, const fwd_batch *b)
{
	cuda_ctx   *c = be->ctx;
	size_t		at = (size_t) rope * c->rope_sets * c->max_ctx * c->rope_stride;

	if (LIVE(c))
		cuda_backend_note(c, cuda_rope(x, c->d_cos + at, c->d_sin + at, c->d_rope_row, T, n_heads,
									   rope_head_dim(&c->cfg.rope[rope], c->cfg.head_dim),
									   c->rope_stride, c->rope_half[rope],
									   c->cfg.rope[rope].interleaved, c->stream, &c->err));
}

static void
CudaKvStore(cbllm_backend *be, kv_cache *kv, int layer, const float *k, const float *v,
			const fwd_batch *b)
{
	cuda_ctx   *c = be->ctx;
	int			cl = kv_cache_layer_of(kv, layer);
	int64_t		off = c->kv_base[cl];

	if (LIVE(c))
		cuda_backend_note(c, cuda_kv_store(c->k_cache + off, c->v_cache + off, k, v, c->d_slots, b->n_tokens,
							  c->kv_row[cl], c->stream, &c->err));
}

/* The layer's attention; sinks, a model vector, through its device copy. */
static void
CudaAttention(cbllm_backend *be, const kv_cache *kv, int layer, const float *q,
			  const float *sinks, const fwd_batch *b, float *out)
{
	cuda_ctx   *c = be->ctx;
	int64_t		off = c->kv_base[kv_cache_layer_of(kv, layer)];
	const dev_weight *ds = sinks != NULL ? cuda_weight_find(c, sinks, 0) : NULL;
	int			hd = c->cfg.layer_head_dim[layer];

	if (!LIVE(c))
		return;
	if (sinks != NULL && ds == NULL)
	{
		cuda_backend_note(c, cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "attention sinks not on the GPU"));
		return;
	}
	cuda_backend_note(c, cuda_attention(q, c->k_cache + off, c->v_cache + off, c->d_tables,
										c->max_blocks, c->d_pos, c->d_seq, b->n_tokens,
										c->cfg.n_heads, c->cfg.layer_kv_heads[layer], hd,
										c->block_size, c->cfg.layer_window[layer], c->max_ctx,
										c->cfg.attn_scale > 0 ? c->cfg.attn_scale :
										1.0f / sqrtf((float) hd),
										ds != NULL ? ds->dev : NULL, out, c->stream, &c->err));
}

static void
CudaSiluMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_silu_mul(gate, up, n, c->stream, &c->err));
}

/* gate = gelu_tanh(gate) * up, Gemma's gated MLP. */
static void
CudaGeluTanhMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_gelu_tanh_mul(gate, up, n, c->stream, &c->err));
}

/* gate = swiglu_oai(gate, up), gpt-oss's gated MLP. */
static void
CudaSwigluOaiMul(cbllm_backend *be, float *gate, const float *up, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_swiglu_oai_mul(gate, up, n, c->cfg.swiglu_limit, c->stream,
												 &c->err));
}

/* x *= s: the embeddings' sqrt(hidden) and q's query_pre_attn_scalar factor. */
static void
CudaScale(cbllm_backend *be, float *x, float s, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_scale(x, s, n, c->stream, &c->err));
}

static void
CudaAdd(cbllm_backend *be, float *x, const float *y, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_add(x, y, n, c->stream, &c->err));
}

/* x (T, dim) += the bias's device copy on every row. */
static void
CudaAddBias(cbllm_backend *be, float *x, const float *bias, int T, int dim)
{
	cuda_ctx   *c = be->ctx;
	const dev_weight *d = cuda_weight_find(c, bias, 0);

	if (LIVE(c))
		cuda_backend_note(c, d ? cuda_add_bias(x, d->dev, T, dim, c->stream, &c->err) :
			 cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "bias not on the GPU"));
}

/* The rows are the step's rows, already on the device (begin_step). */
static void
CudaGatherRows(cbllm_backend *be, const float *x, const int32_t *rows, int n, int dim, float *out)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_gather_rows(x, c->d_rows, n, dim, out, c->stream, &c->err));
}

static void
CudaSoftcap(cbllm_backend *be, float *x, float cap, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_softcap(x, cap, n, c->stream, &c->err));
}

static void
CudaSwapAxes(cbllm_backend *be, const float *x, int a, int b, int width, float *out)
{
	cuda_ctx   *c = be->ctx;

	if (LIVE(c))
		cuda_backend_note(c, cuda_swap_axes(x, a, b, width, out, c->stream, &c->err));
}

/* Upload the step's constraint masks (n_masks rows of words words), growing their buffer. */
static int
UploadMasks(cuda_ctx *c, const uint32_t *masks, int n_masks, int words, cbllm_err *err)
{
	size_t		need = (size_t) n_masks * (size_t) words;
	int			rc;

	if (need > c->masks_cap)
	{
		/* the stream may still read the old buffer: wait before freeing it */
		if ((rc = cuda_stream_sync(c->stream, err)) != CBLLM_OK)
			return rc;
		cuda_free(c->d_masks);
		c->d_masks = NULL;
		c->masks_cap = 0;
		if ((rc = cuda_alloc((void **) &c->d_masks, sizeof(uint32_t) * need, err)) != CBLLM_OK)
			return rc;
		c->masks_cap = need;
	}
	/* pageable host memory: the copy is staged, and done with the source before it returns */
	return cuda_copy_async(c->d_masks, masks, sizeof(uint32_t) * need, c->stream, err);
}

/* Draw each row's token on the device, within its constraint's mask; only the ids come back. */
static int
CudaSample(cbllm_backend *be, float *logits, int n_rows, int vocab, int n_ids,
		   const sampler_row *p, const uint32_t *masks, int n_masks, int32_t *tokens,
		   cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	int			rc;

	if ((rc = TakeFailure(c, err)) != CBLLM_OK)
		return rc;
	if (n_rows > c->max_tokens)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "%d rows exceed the GPU workspace", n_rows);
	memcpy(c->h_sample, p, sizeof(sampler_row) * n_rows);
	if ((rc = cuda_copy_async(c->d_sample, c->h_sample, sizeof(sampler_row) * n_rows,
							  c->stream, err)))
		return rc;
	if (n_masks > 0 &&
		((rc = UploadMasks(c, masks, n_masks, (n_ids + 31) / 32, err)) ||
		 (rc = cuda_apply_masks(logits, n_rows, n_ids, vocab, c->d_sample, c->d_masks, n_masks,
								c->stream, err))))
		return rc;
	if ((rc = cuda_sample(logits, n_rows, n_ids, vocab, c->d_sample, c->d_sampled, c->stream, err)) ||
		(rc = cuda_copy_async(c->h_sampled, c->d_sampled, sizeof(int32_t) * n_rows, c->stream,
							  err)) ||
		(rc = cuda_stream_sync(c->stream, err)))
		return rc;
	memcpy(tokens, c->h_sampled, sizeof(int32_t) * n_rows);
	return CBLLM_OK;
}

/* Copy device memory to the host once the step is done; reports any failure of its operations. */
static int
CudaDownload(cbllm_backend *be, const float *src, float *dst, size_t n, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	int			rc;

	if ((rc = TakeFailure(c, err)) != CBLLM_OK ||
		(rc = cuda_copy_async(dst, src, sizeof(float) * n, c->stream, err)) ||
		(rc = cuda_stream_sync(c->stream, err)))
		return rc;
	return CBLLM_OK;
}

/* False once a fault has poisoned the CUDA context. */
static bool
CudaHealthy(cbllm_backend *be)
{
	return cuda_device_ok() != 0;
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
		if (c->stream != NULL)
			(void) cuda_stream_sync(c->stream, NULL);
		if (c->swap_stream != NULL)
			(void) cuda_stream_sync(c->swap_stream, NULL);
		cuda_host_unregister(c->swap_pinned_k);
		cuda_host_unregister(c->swap_pinned_v);
		for (int i = 0; i < c->n_sizes; i++)
			cuda_graph_destroy(c->graphs[i]);
		cuda_blas_destroy(c->blas);
		for (int i = 0; i < c->n_w; i++)
			cuda_free(c->w[i].dev);
		free(c->w);
		free(c->w_slots);
		cuda_free(c->k_cache);
		cuda_free(c->v_cache);
		cuda_moe_free(c);
		cuda_state_free(c);
		cuda_free(c->d_tokens);
		cuda_free(c->d_pos);
		cuda_free(c->d_rope_row);
		cuda_free(c->d_seq);
		cuda_free(c->d_slots);
		cuda_free(c->d_rows);
		cuda_free(c->d_tables);
		cuda_free(c->d_cos);
		cuda_free(c->d_sin);
		cuda_free(c->d_xh);
		cuda_free(c->d_wtile);
		cuda_free(c->d_sample);
		cuda_free(c->d_sampled);
		cuda_free(c->d_masks);
		cuda_host_free(c->h_tokens);
		cuda_host_free(c->h_pos);
		cuda_host_free(c->h_rope_row);
		cuda_host_free(c->h_seq);
		cuda_host_free(c->h_slots);
		cuda_host_free(c->h_rows);
		cuda_host_free(c->h_tables);
		cuda_host_free(c->h_sample);
		cuda_host_free(c->h_sampled);
		cuda_event_destroy(c->ev_compute);
		cuda_event_destroy(c->ev_swap);
		cuda_event_destroy(c->ev_staged);
		cuda_stream_destroy(c->stream);
		cuda_stream_destroy(c->swap_stream);
		free(c);
	}
	free(be);
}

/* Device and page-locked buffers of the step. */
static int
AllocStepBuffers(cuda_ctx *c, cbllm_err *err)
{
	size_t		T = (size_t) c->max_tokens,
				half = (size_t) c->rope_stride,
				tables = (size_t) c->max_seqs * c->max_blocks,
				rope_floats = (size_t) c->cfg.n_rope * c->rope_sets * c->max_ctx * half;
	int64_t		max_k = model_max_cols(&c->cfg);
	int			rc;

	if ((rc = cuda_moe_alloc(c, err)))
		return rc;
	if ((rc = cuda_alloc((void **) &c->d_tokens, sizeof(int32_t) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_pos, sizeof(int32_t) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_rope_row, sizeof(int32_t) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_seq, sizeof(int32_t) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_slots, sizeof(int64_t) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_rows, sizeof(int32_t) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_tables, sizeof(int32_t) * tables, err)) ||
		(rc = cuda_alloc((void **) &c->d_cos, sizeof(float) * rope_floats, err)) ||
		(rc = cuda_alloc((void **) &c->d_sin, sizeof(float) * rope_floats, err)) ||
		(rc = cuda_alloc(&c->d_xh, 2 * T * (size_t) max_k, err)) ||
		(rc = cuda_alloc((void **) &c->d_sample, sizeof(sampler_row) * T, err)) ||
		(rc = cuda_alloc((void **) &c->d_sampled, sizeof(int32_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_tokens, sizeof(int32_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_pos, sizeof(int32_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_rope_row, sizeof(int32_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_seq, sizeof(int32_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_slots, sizeof(int64_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_rows, sizeof(int32_t) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_tables, sizeof(int32_t) * tables, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_sample, sizeof(sampler_row) * T, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_sampled, sizeof(int32_t) * T, err)))
		return rc;
	memset(c->h_tables, 0, sizeof(int32_t) * tables);
	/* a tile of quantized rows for steps above the fused kernel's: QUANT_TILE_ELEMS, or the matrix */
	if (c->max_quant_elems > 0 && c->max_tokens > CUDA_QMATVEC_MAX_T)
	{
		c->wtile_elems = c->max_quant_elems < QUANT_TILE_ELEMS ? c->max_quant_elems : QUANT_TILE_ELEMS;
		if (c->wtile_elems < max_k)
			c->wtile_elems = max_k;
		if ((rc = cuda_alloc(&c->d_wtile, sizeof(uint16_t) * (size_t) c->wtile_elems, err)))
			return rc;
	}
	return CBLLM_OK;
}

/*
 * cos and sin of every position under each RoPE configuration (rope.h), in
 * each of its factor sets, computed once.
 */
static int
UploadRopeTables(cuda_ctx *c, cbllm_err *err)
{
	int			half = c->rope_stride;
	size_t		n = (size_t) c->cfg.n_rope * c->rope_sets * c->max_ctx * half;
	float	   *cs = malloc(sizeof(float) * n),
			   *sn = malloc(sizeof(float) * n);
	rope_freqs *f = malloc(sizeof(*f));
	int			rc = CBLLM_OK;

	if (cs == NULL || sn == NULL || f == NULL)
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	for (int r = 0; r < c->cfg.n_rope && rc == CBLLM_OK; r++)
	{
		if ((rc = rope_freqs_build(&c->cfg.rope[r], c->cfg.head_dim, f, err)) != CBLLM_OK)
			break;
		c->rope_half[r] = f->half;
		for (int set = 0; set < c->rope_sets; set++)
			for (int p = 0; p < c->max_ctx; p++)
			{
				size_t		at = (((size_t) r * c->rope_sets + set) * c->max_ctx + p) * half;

				rope_fill(f, p, set, cs + at, sn + at);
			}
	}
	if (rc == CBLLM_OK)
		rc = cuda_upload(c->d_cos, cs, sizeof(float) * n, err);
	if (rc == CBLLM_OK)
		rc = cuda_upload(c->d_sin, sn, sizeof(float) * n, err);
	free(cs);
	free(sn);
	free(f);
	return rc;
}

/* The padded decode sizes: 1, 2, 4, 8, then every multiple of 8 up to max_seqs. */
static void
GraphSizes(cuda_ctx *c)
{
	int			lim = c->max_seqs < c->max_tokens ? c->max_seqs : c->max_tokens;

	c->n_sizes = 0;
	for (int s = 1; s <= lim && c->n_sizes < MAX_GRAPH_SIZES; s = s < 8 ? 2 * s : s + 8)
		c->sizes[c->n_sizes++] = s;
}

/* Device bytes of one KV block over all layers: keys and values in bf16. */
static size_t
BlockBytes(const cbllm_model_config *cfg, int block_size)
{
	return kv_cache_rows_block_bytes(block_size, model_kv_rows(cfg, NULL), CBLLM_BF16);
}

/* The KV layout the registry reports: bf16 on the device, in the engine's block layout. */
static int
CudaKvLayout(const cbllm_model_config *cfg, int block_size, const char *kv_dtype,
			 backend_kv_layout *out, cbllm_err *err)
{
	int			rc = kv_cache_dtype_resolve(kv_dtype, CBLLM_BF16, &out->dtype, err);

	if (rc != CBLLM_OK)
		return rc;
	if (out->dtype != CBLLM_BF16)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "the cuda device keeps its KV cache in bf16; kv_cache_dtype %s is for the cpu"
						  " (use auto or bf16)", kv_dtype);
	out->block_bytes = BlockBytes(cfg, block_size);
	return CBLLM_OK;
}

/*
 * KV blocks that fit in b->memory_fraction of the device's memory once the
 * weights, the workspace and whatever else holds device memory are counted.
 */
static int
CudaKvBlocks(cbllm_backend *be, const backend_kv_budget *b, int *n_blocks, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	size_t		free_b = 0,
				total_b = 0,
				used,
				allowed,
				blocks;
	int			rc;

	if ((rc = cuda_mem_info(&free_b, &total_b, err)) != CBLLM_OK)
		return rc;
	used = total_b - free_b;
	allowed = (size_t) (b->memory_fraction * (double) total_b);
	blocks = allowed > used ? (allowed - used) / BlockBytes(&c->cfg, c->block_size) : 0;
	if (blocks < 2)
		return cbllm_fail(err, CBLLM_ERR_KV_BUDGET,
						  "no GPU memory is left for the KV cache: %zu MiB of %zu MiB are in use (the weights take %zu MiB) and gpu_memory_utilization %g allows %zu MiB; raise the GPU memory budget or batch fewer tokens per step",
						  used >> 20, total_b >> 20, c->weight_bytes >> 20, b->memory_fraction,
						  allowed >> 20);
	blocks -= 1;				/* the pad block */
	*n_blocks = blocks > (size_t) 0x7fffffff ? 0x7fffffff : (int) blocks;
	return CBLLM_OK;
}

/* Allocate the KV pool of n_blocks blocks and the pad block. */
static int
CudaAllocKv(cbllm_backend *be, int n_blocks, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	size_t		half_bytes = BlockBytes(&c->cfg, c->block_size) / 2 * (size_t) (n_blocks + 1);
	int			rc;

	if ((rc = cuda_alloc((void **) &c->k_cache, half_bytes, err)) ||
		(rc = cuda_alloc((void **) &c->v_cache, half_bytes, err)))
	{
		char		msg[CBLLM_ERR_MSG_LEN];

		snprintf(msg, sizeof(msg), "%s", err->msg);
		cuda_free(c->k_cache);
		c->k_cache = NULL;
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "the KV cache of %d blocks does not fit on the GPU: %s; ask for a smaller KV cache, or for none to size it from the GPU memory budget",
						  n_blocks, msg);
	}
	c->n_blocks = n_blocks;
	be->pad_block = n_blocks;
	c->kv_base[0] = 0;
	for (int l = 0; l < model_kv_layers(&c->cfg); l++)
		c->kv_base[l + 1] = c->kv_base[l] + (int64_t) (n_blocks + 1) * c->block_size * c->kv_row[l];
	return CBLLM_OK;
}

/* Create the GPU backend: upload the model and allocate the step buffers. */
int
cuda_backend_create(const cuda_backend_params *p, cbllm_backend **out, cbllm_err *err)
{
	const cbllm_model_config *cfg = &p->model->cfg;
	cbllm_backend *be = calloc(1, sizeof(*be));
	cuda_ctx   *c = calloc(1, sizeof(*c));
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
	c->block_size = p->block_size;
	c->block_elems = (int64_t) p->block_size * cfg->n_kv_heads * cfg->head_dim;
	c->kv_uniform = model_kv_uniform(cfg);
	model_kv_rows(cfg, c->kv_row);
	c->rope_stride = cfg->head_dim / 2;
	for (int r = 0; r < cfg->n_rope; r++)
		if (rope_head_dim(&cfg->rope[r], cfg->head_dim) / 2 > c->rope_stride)
			c->rope_stride = rope_head_dim(&cfg->rope[r], cfg->head_dim) / 2;
	c->max_tokens = p->max_tokens;
	c->max_seqs = p->max_seqs;
	c->max_ctx = p->max_ctx;
	c->rope_sets = 1;
	for (int r = 0; r < cfg->n_rope; r++)
		if (rope_long_from(&cfg->rope[r]) > 0)
			c->rope_sets = 2;
	c->max_blocks = (p->max_ctx + p->block_size - 1) / p->block_size;
	c->no_graphs = p->no_graphs;
	GraphSizes(c);
	if ((rc = cuda_weights_upload(c, p->model, err)) ||
		(rc = cuda_blas_create(&c->blas, err)) ||
		(rc = cuda_stream_create(&c->stream, err)) ||
		(rc = cuda_stream_create(&c->swap_stream, err)) ||
		(rc = cuda_event_create(&c->ev_compute, err)) ||
		(rc = cuda_event_create(&c->ev_swap, err)) ||
		(rc = cuda_event_create(&c->ev_staged, err)) ||
		(rc = AllocStepBuffers(c, err)))
	{
		CudaDestroy(be);
		return rc;
	}
	if ((rc = UploadRopeTables(c, err)))
	{
		CudaDestroy(be);
		return rc;
	}
	be->name = "cuda";
	be->pad_block = -1;			/* set with the pool */
	be->alloc = CudaAlloc;
	be->free = CudaFree;
	be->kv_blocks = CudaKvBlocks;
	be->alloc_kv = CudaAllocKv;
	be->graph_tokens = CudaGraphTokens;
	be->begin_step = CudaBeginStep;
	be->end_step = CudaEndStep;
	be->embed = CudaEmbed;
	be->rmsnorm = CudaRmsnorm;
	be->matmul = cuda_backend_matmul;
	be->rope = CudaRope;
	be->kv_store = CudaKvStore;
	be->attention = CudaAttention;
	be->silu_mul = CudaSiluMul;
	be->gelu_tanh_mul = CudaGeluTanhMul;
	be->swiglu_oai_mul = CudaSwigluOaiMul;
	be->scale = CudaScale;
	be->add = CudaAdd;
	be->add_bias = CudaAddBias;
	be->add_rmsnorm = CudaAddRmsnorm;
	be->gather_rows = CudaGatherRows;
	be->softcap = CudaSoftcap;
	be->swap_axes = CudaSwapAxes;
	be->per_layer_heads = true;
	be->moe = cfg->n_experts > 0 ? cuda_moe : NULL;
	be->linear_attention = cuda_linear_attention_op;
	be->alloc_state = cuda_state_alloc;
	be->copy_state = cuda_state_copy;
	be->split_halves = cuda_split_halves_op;
	be->sigmoid_mul = cuda_sigmoid_mul_op;
	be->add_gated_rows = cuda_add_gated_rows_op;
	be->sample = CudaSample;
	be->prepare_swap = cuda_swap_prepare;
	be->swap_out = cuda_swap_out;
	be->swap_in = cuda_swap_in;
	be->download = CudaDownload;
	be->healthy = CudaHealthy;
	be->destroy = CudaDestroy;
	*out = be;
	return CBLLM_OK;
}

/* Whether a CUDA device is usable here. */
static bool
CudaProbe(void)
{
	return cuda_device_count() > 0;
}

/* The registry's create: the GPU backend for the engine's model and limits. */
static int
CudaCreate(const backend_params *p, cbllm_backend **out, cbllm_err *err)
{
	cuda_backend_params cp = {p->model, p->max_tokens, p->max_seqs, p->max_ctx, p->block_size,
	p->no_graphs};

	return cuda_backend_create(&cp, out, err);
}

/* The types whose row gives a CUDA path: run as stored, or uploaded as BF16. */
static bool
CudaSupportsWeight(cbllm_dtype dt)
{
	return cuda_dtype_traits_of(dt)->path != CBLLM_CUDA_NONE;
}

/* Device-to-device copy bandwidth, read + write, the median of timed copies. */
static int
CudaCopyBandwidth(size_t bytes, double *gbps, cbllm_err *err)
{
	if (cuda_device_count() == 0)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "no CUDA device is available");
	return cuda_copy_bandwidth(bytes, COPY_BANDWIDTH_ITERS, gbps, err);
}

const backend_reg cuda_backend_reg = {
	.name = "cuda",
	.priority = 100,
	.probe = CudaProbe,
	.create = CudaCreate,
	.kv_layout = CudaKvLayout,
	.supports_weight = CudaSupportsWeight,
	.copy_bandwidth = CudaCopyBandwidth,
	.dummies_on_device = true,
	.threads_in_step = true,
	.runs_linear_attention = true,
	.runs_per_layer_heads = true,
};
