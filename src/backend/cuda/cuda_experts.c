/*
 * cuda_experts.c: a mixture-of-experts layer on the device (backend.h's moe),
 * the CPU's plan (cpu_moe.c) with the grouping on the host: per chunk of at
 * most max_rows / k tokens,
 *
 *   route     cuda_moe_route: each token's k experts and weights, on the device;
 *   group     their ids copied to the host (the stream waits here), counted
 *             per expert and placed in token order; each grouped row's token
 *             and each pair's row copied back, the inputs gathered by row;
 *   compute   per expert with rows, the backend's matmul of its gate and up
 *             over its block, one activation over all, its down projection:
 *             each expert's matrices read once per chunk;
 *   combine   cuda_moe_combine: each token's rows weighted, in its order.
 *
 * The wait for the routing makes a step with experts unrecordable as a
 * graph: the backend runs such a model's steps eagerly (CudaGraphTokens).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ctx.h"
#include "model/moe.h"

#define MOE_MAX_ROWS 4096		/* (token, expert) pairs of one chunk */

int
cuda_moe_alloc(cuda_ctx *c, cbllm_err *err)
{
	cuda_moe_ws *ws = &c->moe;
	size_t		R = MOE_MAX_ROWS,
				H = (size_t) c->cfg.hidden,
				F = (size_t) c->cfg.expert_intermediate;
	int			rc;

	memset(ws, 0, sizeof(*ws));
	if (c->cfg.n_experts == 0)
		return CBLLM_OK;
	ws->max_rows = MOE_MAX_ROWS;
	ws->start = malloc(sizeof(int32_t) * (c->cfg.n_experts + 1));
	ws->fill = malloc(sizeof(int32_t) * c->cfg.n_experts);
	if (ws->start == NULL || ws->fill == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	if ((rc = cuda_alloc((void **) &ws->d_ids, sizeof(int32_t) * R, err)) ||
		(rc = cuda_alloc((void **) &ws->d_weights, sizeof(float) * R, err)) ||
		(rc = cuda_alloc((void **) &ws->d_slot, sizeof(int32_t) * R, err)) ||
		(rc = cuda_alloc((void **) &ws->d_token, sizeof(int32_t) * R, err)) ||
		(rc = cuda_alloc((void **) &ws->d_xg, sizeof(float) * R * H, err)) ||
		(rc = cuda_alloc((void **) &ws->d_gate, sizeof(float) * R * F, err)) ||
		(rc = cuda_alloc((void **) &ws->d_up, sizeof(float) * R * F, err)) ||
		(rc = cuda_alloc((void **) &ws->d_yg, sizeof(float) * R * H, err)) ||
		(rc = cuda_host_alloc((void **) &ws->h_ids, sizeof(int32_t) * R, err)) ||
		(rc = cuda_host_alloc((void **) &ws->h_slot, sizeof(int32_t) * R, err)) ||
		(rc = cuda_host_alloc((void **) &ws->h_token, sizeof(int32_t) * R, err)))
		return rc;
	return CBLLM_OK;
}

void
cuda_moe_free(cuda_ctx *c)
{
	cuda_moe_ws *ws = &c->moe;

	cuda_free(ws->d_ids);
	cuda_free(ws->d_weights);
	cuda_free(ws->d_slot);
	cuda_free(ws->d_token);
	cuda_free(ws->d_xg);
	cuda_free(ws->d_gate);
	cuda_free(ws->d_up);
	cuda_free(ws->d_yg);
	cuda_host_free(ws->h_ids);
	cuda_host_free(ws->h_slot);
	cuda_host_free(ws->h_token);
	free(ws->start);
	free(ws->fill);
	memset(ws, 0, sizeof(*ws));
}

/* Route the chunk's n tokens, wait for their experts, and group the inputs by expert. */
static int
RouteAndGroup(cuda_ctx *c, const cbllm_layer *w, const float *x, const float *logits, int n,
			  cbllm_err *err)
{
	cuda_moe_ws *ws = &c->moe;
	int			k = c->cfg.n_experts_used,
				E = c->cfg.n_experts,
				rows = n * k;
	const dev_weight *ds = w->expert_scale != NULL ? cuda_weight_find(c, w->expert_scale, 0) : NULL;
	int			rc;

	if (w->expert_scale != NULL && ds == NULL)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "the experts' scales are not on the GPU");
	if ((rc = cuda_moe_route(logits, n, E, k, c->cfg.moe_norm_topk, ds != NULL ? ds->dev : NULL,
							 ws->d_ids, ws->d_weights, c->stream, err)) ||
		(rc = cuda_copy_async(ws->h_ids, ws->d_ids, sizeof(int32_t) * rows, c->stream, err)) ||
		(rc = cuda_stream_sync(c->stream, err)))
		return rc;
	for (int i = 0; i < rows; i++)
		if (ws->h_ids[i] < 0 || ws->h_ids[i] >= E)
			return cbllm_fail(err, CBLLM_ERR_DEVICE, "the device routed a token to expert %d of %d",
							  ws->h_ids[i], E);
	moe_group(ws->h_ids, rows, E, ws->start, ws->fill, ws->h_slot);
	for (int i = 0; i < rows; i++)
		ws->h_token[ws->h_slot[i]] = i / k;
	if ((rc = cuda_copy_async(ws->d_slot, ws->h_slot, sizeof(int32_t) * rows, c->stream, err)) ||
		(rc = cuda_copy_async(ws->d_token, ws->h_token, sizeof(int32_t) * rows, c->stream, err)) ||
		(rc = cuda_gather_rows(x, ws->d_token, rows, c->cfg.hidden, ws->d_xg, c->stream, err)))
		return rc;
	/* the pinned copies are read by the stream: they must outlive it before the next chunk */
	return cuda_stream_sync(c->stream, err);
}

/* Each expert with rows over its block: gate and up, the activation over all, then down. */
static int
RunExperts(cbllm_backend *be, const cbllm_layer *w, int rows, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	cuda_moe_ws *ws = &c->moe;
	int64_t		H = c->cfg.hidden,
				F = c->cfg.expert_intermediate;

	for (int e = 0; e < c->cfg.n_experts; e++)
	{
		int			r0 = ws->start[e],
					m = ws->start[e + 1] - r0;

		if (m == 0)
			continue;
		cuda_backend_matmul(be, 2, (const cbllm_weight *[]) {&w->experts[e].w_gate,
							&w->experts[e].w_up}, ws->d_xg + r0 * H, m,
							(float *[]) {ws->d_gate + r0 * F, ws->d_up + r0 * F});
		if (w->experts[e].b_gate != NULL)
		{
			be->add_bias(be, ws->d_gate + r0 * F, w->experts[e].b_gate, m, (int) F);
			be->add_bias(be, ws->d_up + r0 * F, w->experts[e].b_up, m, (int) F);
		}
		be->expert_runs++;
	}
	be->expert_pairs += rows;
	switch (c->cfg.activation)
	{
		case ARCH_ACT_GELU_TANH:
			be->gelu_tanh_mul(be, ws->d_gate, ws->d_up, rows * F);
			break;
		case ARCH_ACT_SWIGLU_OAI:
			be->swiglu_oai_mul(be, ws->d_gate, ws->d_up, rows * F);
			break;
		case ARCH_ACT_SILU:
			be->silu_mul(be, ws->d_gate, ws->d_up, rows * F);
			break;
	}
	for (int e = 0; e < c->cfg.n_experts; e++)
	{
		int			r0 = ws->start[e],
					m = ws->start[e + 1] - r0;

		if (m == 0)
			continue;
		cuda_backend_matmul(be, 1, (const cbllm_weight *[]) {&w->experts[e].w_down},
							ws->d_gate + r0 * F, m, (float *[]) {ws->d_yg + r0 * H});
		if (w->experts[e].b_down != NULL)
			be->add_bias(be, ws->d_yg + r0 * H, w->experts[e].b_down, m, (int) H);
	}
	return CBLLM_OK;
}

void
cuda_moe(cbllm_backend *be, const cbllm_layer *w, const float *x, const float *logits, int T,
		 float *out)
{
	cuda_ctx   *c = be->ctx;
	int			k = c->cfg.n_experts_used,
				chunk = c->moe.max_rows / k;

	if (c->mode == STEP_REPLAY || c->failed)
		return;
	for (int t0 = 0; t0 < T; t0 += chunk)
	{
		int			n = T - t0 < chunk ? T - t0 : chunk;
		int64_t		H = c->cfg.hidden;
		int			rc;

		if ((rc = RouteAndGroup(c, w, x + t0 * H, logits + (int64_t) t0 * c->cfg.n_experts, n,
								&c->err)) ||
			(rc = RunExperts(be, w, n * k, &c->err)) ||
			(rc = cuda_moe_combine(c->moe.d_yg, c->moe.d_slot, c->moe.d_weights, n, k,
								   (int) H, out + t0 * H, c->stream, &c->err)))
		{
			cuda_backend_note(c, rc);
			return;
		}
	}
}
