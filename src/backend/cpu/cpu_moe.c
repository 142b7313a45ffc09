/*
 * cpu_moe.c: a mixture-of-experts layer on the CPU (backend.h's moe).  The
 * step's tokens are taken in chunks of at most max_rows / k tokens (k: the
 * experts a token uses); in each chunk
 *
 *   route     each token's k experts and weights from its router logits (moe.h);
 *   group     the (token, expert) pairs counted per expert and each token's
 *             input copied to its expert's rows, in token order (a counting
 *             sort), so each expert's inputs are one contiguous block;
 *   compute   per expert that has rows, one matmul of its gate and up over
 *             its block, one activation over every block, one matmul of its
 *             down projection: an expert's matrices are read once per chunk
 *             whatever the number of its tokens;
 *   combine   each token's output, the sum of its experts' rows times their
 *             weights, added in the token's own order of experts.
 *
 * The matmul computes each row alone (backend_cpu.c) and the combine runs
 * per token, so a token's result does not depend on which tokens share the
 * step.  A decode step of up to max_rows / k sequences is one chunk; a long
 * prompt reads the experts once per chunk, where the step is bound by
 * arithmetic, not memory.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "model/moe.h"

#define MOE_MAX_ROWS 4096		/* (token, expert) pairs of one chunk */

bool
cpu_moe_init(cpu_moe_ws *ws, const cbllm_model_config *cfg)
{
	size_t		R = MOE_MAX_ROWS;

	memset(ws, 0, sizeof(*ws));
	if (cfg->n_experts == 0)
		return true;
	ws->max_rows = MOE_MAX_ROWS;
	ws->ids = malloc(sizeof(int32_t) * R);
	ws->weights = malloc(sizeof(float) * R);
	ws->slot = malloc(sizeof(int32_t) * R);
	ws->start = malloc(sizeof(int32_t) * (cfg->n_experts + 1));
	ws->fill = malloc(sizeof(int32_t) * cfg->n_experts);
	ws->xg = malloc(sizeof(float) * R * cfg->hidden);
	ws->gate = malloc(sizeof(float) * R * cfg->expert_intermediate);
	ws->up = malloc(sizeof(float) * R * cfg->expert_intermediate);
	ws->yg = malloc(sizeof(float) * R * cfg->hidden);
	ws->items = malloc(sizeof(cpu_rows_item) * 2 * cfg->n_experts);
	ws->first_task = malloc(sizeof(int) * (2 * cfg->n_experts + 1));
	return ws->ids && ws->weights && ws->slot && ws->start && ws->fill && ws->xg && ws->gate &&
		ws->up && ws->yg && ws->items && ws->first_task;
}

void
cpu_moe_free(cpu_moe_ws *ws)
{
	free(ws->ids);
	free(ws->weights);
	free(ws->slot);
	free(ws->start);
	free(ws->fill);
	free(ws->xg);
	free(ws->gate);
	free(ws->up);
	free(ws->yg);
	free(ws->items);
	free(ws->first_task);
	memset(ws, 0, sizeof(*ws));
}

/* Route the n tokens of the chunk and group their inputs by expert. */
static void
RouteAndGroup(cpu_ctx *c, const cbllm_layer *w, const float *x, const float *logits, int n)
{
	const cbllm_model_config *cfg = &c->cfg;
	cpu_moe_ws *ws = &c->moe;
	int			k = cfg->n_experts_used,
				E = cfg->n_experts,
				H = cfg->hidden;

	for (int t = 0; t < n; t++)
		moe_route(logits + (int64_t) t * E, E, k, cfg->moe_norm_topk, w->expert_scale,
				  ws->ids + t * k, ws->weights + t * k);
	moe_group(ws->ids, n * k, E, ws->start, ws->fill, ws->slot);
	for (int i = 0; i < n * k; i++)
		memcpy(ws->xg + (int64_t) ws->slot[i] * H, x + (int64_t) (i / k) * H, sizeof(float) * H);
}

/*
 * Each expert with rows over its block: gate and up, the activation over
 * all, then down.  Every expert's products of a stage go to the thread pool
 * at once (cpu_matmul_items: the block's rows quantized once, one dispatch)
 * where their matrices allow it, else expert by expert; the bits are the
 * same either way.
 */
static void
RunExperts(cbllm_backend *be, const cbllm_layer *w, int rows)
{
	cpu_ctx    *c = be->ctx;
	const cbllm_model_config *cfg = &c->cfg;
	cpu_moe_ws *ws = &c->moe;
	int64_t		H = cfg->hidden,
				F = cfg->expert_intermediate;
	int			n = 0;

	for (int e = 0; e < cfg->n_experts; e++)
	{
		int			r0 = ws->start[e],
					m = ws->start[e + 1] - r0;

		if (m == 0)
			continue;
		ws->items[n++] = (cpu_rows_item) {&w->experts[e].w_gate, r0, m, ws->gate + r0 * F};
		ws->items[n++] = (cpu_rows_item) {&w->experts[e].w_up, r0, m, ws->up + r0 * F};
		be->expert_runs++;
	}
	if (!cpu_matmul_items(be, ws->items, n, ws->xg, rows, ws->first_task))
		for (int i = 0; i < n; i += 2)
			cpu_matmul(be, 2, (const cbllm_weight *[]) {ws->items[i].w, ws->items[i + 1].w},
					   ws->xg + (int64_t) ws->items[i].r0 * H, ws->items[i].m,
					   (float *[]) {ws->items[i].y, ws->items[i + 1].y});
	for (int e = 0; e < cfg->n_experts; e++)
	{
		int			r0 = ws->start[e],
					m = ws->start[e + 1] - r0;

		if (m > 0 && w->experts[e].b_gate != NULL)
		{
			be->add_bias(be, ws->gate + r0 * F, w->experts[e].b_gate, m, (int) F);
			be->add_bias(be, ws->up + r0 * F, w->experts[e].b_up, m, (int) F);
		}
	}
	be->expert_pairs += rows;
	cpu_gate_mul(be, ws->gate, ws->up, rows * F, cfg->activation);
	n = 0;
	for (int e = 0; e < cfg->n_experts; e++)
	{
		int			r0 = ws->start[e],
					m = ws->start[e + 1] - r0;

		if (m > 0)
			ws->items[n++] = (cpu_rows_item) {&w->experts[e].w_down, r0, m, ws->yg + r0 * H};
	}
	if (!cpu_matmul_items(be, ws->items, n, ws->gate, rows, ws->first_task))
		for (int i = 0; i < n; i++)
			cpu_matmul(be, 1, &ws->items[i].w, ws->gate + (int64_t) ws->items[i].r0 * F,
					   ws->items[i].m, &ws->items[i].y);
	for (int e = 0; e < cfg->n_experts; e++)
	{
		int			r0 = ws->start[e],
					m = ws->start[e + 1] - r0;

		if (m > 0 && w->experts[e].b_down != NULL)
			be->add_bias(be, ws->yg + r0 * H, w->experts[e].b_down, m, (int) H);
	}
}

/* out (n, hidden): each token's experts' rows, weighted, summed in its order of experts. */
static void
Combine(cpu_ctx *c, int n, float *out)
{
	cpu_moe_ws *ws = &c->moe;
	int			k = c->cfg.n_experts_used,
				H = c->cfg.hidden;

	for (int t = 0; t < n; t++)
	{
		float	   *o = out + (int64_t) t * H;

		memset(o, 0, sizeof(float) * H);
		for (int j = 0; j < k; j++)
		{
			const float *y = ws->yg + (int64_t) ws->slot[t * k + j] * H;
			float		wt = ws->weights[t * k + j];

			for (int h = 0; h < H; h++)
				o[h] += wt * y[h];
		}
	}
}

void
cpu_moe(cbllm_backend *be, const cbllm_layer *w, const float *x, const float *logits, int T,
		float *out)
{
	cpu_ctx    *c = be->ctx;
	const cbllm_model_config *cfg = &c->cfg;
	int			chunk = c->moe.max_rows / cfg->n_experts_used;

	for (int t0 = 0; t0 < T; t0 += chunk)
	{
		int			n = T - t0 < chunk ? T - t0 : chunk;

		RouteAndGroup(c, w, x + (int64_t) t0 * cfg->hidden, logits + (int64_t) t0 * cfg->n_experts, n);
		RunExperts(be, w, n * cfg->n_experts_used);
		Combine(c, n, out + (int64_t) t0 * cfg->hidden);
	}
}
