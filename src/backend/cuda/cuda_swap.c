/*
 * cuda_swap.c: KV blocks between the device pool and the host swap area, on
 * the swap stream, ordered against the compute stream with events; the host
 * area is page-locked once and the copy rate measured.
 */
#include "backend/cuda/cuda_ctx.h"

/*
 * Blocks between the device pool and the host swap area, layer by layer, on
 * the swap stream: after the compute stream's work so far, and before the
 * next step's (begin_step waits for ev_swap).
 */
/*
 * One block's K and V between the pool and swap block hk, hv: layers of
 * cache layer l0 on, all of one row width when uniform (one 2-D copy, a row
 * per layer), else cache layer l0 alone.  Returns the layers copied, or -1.
 */
static int
CopyLayers(cuda_ctx *c, int32_t block, char *hk, char *hv, int l0, bool out, cbllm_err *err)
{
	int			n = c->kv_uniform ? model_kv_layers(&c->cfg) - l0 : 1;
	size_t		bytes = sizeof(uint16_t) * (size_t) c->block_size * c->kv_row[l0];	/* a layer's block */
	size_t		dpitch = bytes * (size_t) (c->n_blocks + 1);	/* device: layer to layer */
	int64_t		doff = c->kv_base[l0] + (int64_t) block * c->block_size * c->kv_row[l0];
	int			rc = out ?
		cuda_copy_2d_async(hk, bytes, c->k_cache + doff, dpitch, bytes, n, c->swap_stream, err) ||
		cuda_copy_2d_async(hv, bytes, c->v_cache + doff, dpitch, bytes, n, c->swap_stream, err) :
		cuda_copy_2d_async(c->k_cache + doff, dpitch, hk, bytes, bytes, n, c->swap_stream, err) ||
		cuda_copy_2d_async(c->v_cache + doff, dpitch, hv, bytes, bytes, n, c->swap_stream, err);

	return rc ? -1 : n;
}

static int
CudaSwap(cuda_ctx *c, swap_space *sw, const int32_t *blocks, const int32_t *ids, int n,
		 bool out, cbllm_err *err)
{
	size_t		block_bytes = sizeof(uint16_t) * (size_t) c->block_size *
		(size_t) model_kv_rows(&c->cfg, NULL);	/* one block over all layers */
	int			rc = CBLLM_OK;

	if ((size_t) sw->block_floats * sizeof(float) < block_bytes)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "swap blocks are smaller than GPU blocks");
	if ((rc = cuda_event_record(c->ev_compute, c->stream, err)) ||
		(rc = cuda_stream_wait(c->swap_stream, c->ev_compute, err)))
		return rc;
	for (int i = 0; i < n && rc == CBLLM_OK; i++)
	{
		/* a swap block holds the cache block's layers one after another */
		char	   *hk = (char *) (sw->k + (int64_t) ids[i] * sw->block_floats);
		char	   *hv = (char *) (sw->v + (int64_t) ids[i] * sw->block_floats);

		for (int l = 0; l < model_kv_layers(&c->cfg) && rc == CBLLM_OK;)
		{
			/* the layers before l take one block's elements each of the swap block */
			size_t		at = sizeof(uint16_t) * (size_t) (c->kv_base[l] / (c->n_blocks + 1));
			int			done = CopyLayers(c, blocks[i], hk + at, hv + at, l, out, err);

			if (done < 0)
				rc = CBLLM_ERR_DEVICE;
			else
				l += done;
		}
	}
	if (rc)
	{
		/* the copies already issued still run: the compute stream waits for them too */
		cbllm_err	ignored;

		if (cuda_event_record(c->ev_swap, c->swap_stream, &ignored) == CBLLM_OK)
			c->swap_pending = true;
		return CBLLM_ERR_DEVICE;
	}
	if ((rc = cuda_event_record(c->ev_swap, c->swap_stream, err)) != CBLLM_OK)
		return rc;
	c->swap_pending = true;
	return CBLLM_OK;
}

/*
 * Time copies between the pool and the page-locked swap area, device to host
 * and back (the best of three), for the scheduler's swap-or-recompute choice:
 * asynchronous swaps cannot be timed as they are issued.
 */
static void
MeasureSwap(cbllm_backend *be, const swap_space *sw)
{
	cuda_ctx   *c = be->ctx;
	size_t		area = sizeof(float) * (size_t) sw->n_blocks * sw->block_floats;
	size_t		pool = sizeof(uint16_t) * (size_t) c->kv_base[model_kv_layers(&c->cfg)];
	size_t		bytes = (size_t) 64 << 20;
	double		best = 0;
	cbllm_err	ignored;

	bytes = bytes < area ? bytes : area;
	bytes = bytes < pool ? bytes : pool;
	for (int i = 0; i < 3 && bytes > 0; i++)
	{
		double		t = cbllm_now();

		if (cuda_copy_async(sw->k, c->k_cache, bytes, c->swap_stream, &ignored) != CBLLM_OK ||
			cuda_copy_async(c->k_cache, sw->k, bytes, c->swap_stream, &ignored) != CBLLM_OK ||
			cuda_stream_sync(c->swap_stream, &ignored) != CBLLM_OK)
			return;
		t = cbllm_now() - t;
		if (t > 0 && 2.0 * bytes / t > best)
			best = 2.0 * bytes / t;
	}
	be->swap_bytes_per_sec = best;
}

/*
 * Page-lock the host swap area once, so that swap copies run asynchronously.
 * Where the system refuses, swapping still works, with staged copies.
 */
int
cuda_swap_prepare(cbllm_backend *be, swap_space *sw, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	size_t		area = sizeof(float) * (size_t) sw->n_blocks * sw->block_floats;
	cbllm_err	ignored;

	if (sw->n_blocks == 0 || c->swap_pinned_k == sw->k)
		return CBLLM_OK;
	if (cuda_host_register(sw->k, area, &ignored) != CBLLM_OK)
		return CBLLM_OK;
	if (cuda_host_register(sw->v, area, &ignored) != CBLLM_OK)
	{
		cuda_host_unregister(sw->k);
		return CBLLM_OK;
	}
	c->swap_pinned_k = sw->k;
	c->swap_pinned_v = sw->v;
	MeasureSwap(be, sw);
	return CBLLM_OK;
}

/* Copy n pool blocks to their swap blocks. */
int
cuda_swap_out(cbllm_backend *be, const kv_cache *kv, swap_space *sw, const int32_t *blocks,
			const int32_t *ids, int n, cbllm_err *err)
{
	return CudaSwap(be->ctx, sw, blocks, ids, n, true, err);
}

/* Copy n swap blocks back to their pool blocks. */
int
cuda_swap_in(cbllm_backend *be, kv_cache *kv, const swap_space *sw, const int32_t *blocks,
		   const int32_t *ids, int n, cbllm_err *err)
{
	return CudaSwap(be->ctx, (swap_space *) sw, blocks, ids, n, false, err);
}
