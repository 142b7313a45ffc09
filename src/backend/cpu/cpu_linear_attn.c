/*
 * cpu_linear_attn.c: backend.h's linear_attention on the CPU, the Gated
 * DeltaNet of a hybrid model's linear layers (Qwen3.5).
 *
 * Two passes over the step, each a job for the thread pool:
 *
 *   1. the causal conv: per (sequence, block of channels), each channel's
 *      kernel slides over the sequence's past inputs (the state's last
 *      kernel - 1, zero before position 0) and this step's tokens in order;
 *      the outputs, through silu, replace the inputs in qkv, and the last
 *      inputs become the state;
 *   2. the delta rule: per (sequence, value head), its tokens in order
 *      update the head's (k_dim, v_dim) state and read it with q; the read
 *      is normed, gated by silu(z) and written to out.
 *
 * A sequence's tokens are consecutive in the batch (forward.c builds it so)
 * and each task owns one sequence's slice, so the result of a token does
 * not depend on what else is in the step, and the work is one pass over
 * each token however the prompt is chunked.  The recurrence is the token
 * loop of the delta rule, O(k_dim v_dim) per token and head: on a CPU it
 * reads a head's state from the cache once per token, which is what its
 * chunked (WY) form would save on a GPU.
 *
 * Here too: the gated attention's split of q from its gate and the
 * sigmoid gate, and Qwen3.5-MoE's shared expert added under its gate.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"

#define CONV_CHANNELS 64		/* channels of one conv task */
#define MAX_CONV 64				/* kernel taps: config.json's linear_conv_kernel_dim is at most 64 */

typedef struct lin_job
{
	const cpu_ctx *c;
	state_cache *sc;
	int			layer;			/* in the state cache */
	const cbllm_layer *w;
	float	   *qkv;			/* (T, conv_dim) */
	const float *z;				/* (T, n_v * v_dim) */
	const float *beta;			/* (T, n_v) */
	const float *alpha;			/* (T, n_v) */
	const fwd_batch *b;
	float	   *out;			/* (T, n_v * v_dim) */
	const int32_t *first;		/* (n_seqs + 1) each sequence's first token */
	int			conv_tasks;		/* per sequence */
} lin_job;

static inline float
Silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* softplus as PyTorch computes it: x itself above 20. */
static inline float
Softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

/*
 * Pass 1: the causal conv of one sequence's block of channels, token by
 * token (each token's channels are consecutive in qkv), every channel's
 * sum in the kernel's order.
 */
static void
ConvTask(void *arg, int task, int thread)
{
	lin_job    *j = arg;
	const cbllm_model_config *cfg = &j->c->cfg;
	int			s = task / j->conv_tasks,
				c0 = task % j->conv_tasks * CONV_CHANNELS,
				K = cfg->lin_conv,
				cd = j->sc->p.conv_dim,
				n = c0 + CONV_CHANNELS < cd ? CONV_CHANNELS : cd - c0;
	int			t0 = j->first[s],
				t1 = j->first[s + 1];
	float	   *hist = state_cache_conv(j->sc, j->layer, j->b->state_slots[j->b->seq[t0]]);
	bool		fresh = j->b->pos[t0] == 0;
	const float *kern = j->w->lin_conv + (int64_t) c0 * K;
	float		h[MAX_CONV - 1][CONV_CHANNELS];	/* the channels' past inputs, oldest first */

	(void) thread;
	for (int r = 0; r < K - 1; r++)
		for (int c = 0; c < n; c++)
			h[r][c] = fresh ? 0.0f : hist[(int64_t) r * cd + c0 + c];
	for (int t = t0; t < t1; t++)
	{
		float	   *x = j->qkv + (int64_t) t * cd + c0;

		for (int c = 0; c < n; c++)
		{
			const float *k = kern + (int64_t) c * K;
			float		in = x[c],
						y = k[K - 1] * in;

			for (int r = 0; r < K - 1; r++)
				y += k[r] * h[r][c];
			for (int r = 0; r + 1 < K - 1; r++)
				h[r][c] = h[r + 1][c];
			if (K > 1)
				h[K - 2][c] = in;
			x[c] = Silu(y);
		}
	}
	for (int r = 0; r < K - 1; r++)
		for (int c = 0; c < n; c++)
			hist[(int64_t) r * cd + c0 + c] = h[r][c];
}

/* x / sqrt(sum x^2 + 1e-6) * scale into out (n). */
static void
L2Norm(const float *x, int n, float scale, float *out)
{
	float		ss = 0.0f;

	for (int i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = scale / sqrtf(ss + 1e-6f);
	for (int i = 0; i < n; i++)
		out[i] = x[i] * ss;
}

/* Pass 2: one sequence's value head through the delta rule, then its gated norm. */
static void
DeltaTask(void *arg, int task, int thread)
{
	lin_job    *j = arg;
	const cbllm_model_config *cfg = &j->c->cfg;
	int			nv = cfg->lin_v_heads,
				nk = cfg->lin_k_heads,
				dk = cfg->lin_k_dim,
				dv = cfg->lin_v_dim,
				cd = j->sc->p.conv_dim;
	int			s = task / nv,
				hd = task % nv,
				kh = cfg->lin_v_tiled ? hd % nk : hd / (nv / nk);
	int			t0 = j->first[s],
				t1 = j->first[s + 1];
	float	   *S = state_cache_rec(j->sc, j->layer, j->b->state_slots[j->b->seq[t0]]) +
		(int64_t) hd * dk * dv;
	float		q[dk],
				k[dk],
				o[dv],
				kv[dv];

	(void) thread;
	if (j->b->pos[t0] == 0)
		memset(S, 0, sizeof(float) * dk * dv);
	for (int t = t0; t < t1; t++)
	{
		const float *row = j->qkv + (int64_t) t * cd;
		const float *v = row + 2 * nk * dk + hd * dv;
		const float *z = j->z + ((int64_t) t * nv + hd) * dv;
		float		decay = expf(j->w->lin_a[hd] *
								 Softplus(j->alpha[(int64_t) t * nv + hd] + j->w->lin_dt_bias[hd]));
		float		beta = 1.0f / (1.0f + expf(-j->beta[(int64_t) t * nv + hd]));
		float		ss = 0.0f;
		float	   *dst = j->out + ((int64_t) t * nv + hd) * dv;

		L2Norm(row + kh * dk, dk, 1.0f / sqrtf((float) dk), q);
		L2Norm(row + nk * dk + kh * dk, dk, 1.0f, k);
		j->c->k->delta_token(S, dk, dv, q, k, v, decay, beta, kv, o);
		for (int c = 0; c < dv; c++)
			ss += o[c] * o[c];
		ss = 1.0f / sqrtf(ss / dv + cfg->rms_eps);
		for (int c = 0; c < dv; c++)
			dst[c] = o[c] * ss * j->w->lin_norm[c] * Silu(z[c]);
	}
}

/* backend.h's linear_attention. */
void
cpu_linear_attention(cbllm_backend *be, state_cache *sc, int l, const cbllm_layer *w,
					 float *qkv, const float *z, const float *beta, const float *alpha,
					 const fwd_batch *b, float *out)
{
	cpu_ctx    *c = be->ctx;
	lin_job		j = {c, sc, c->cfg.state_layer[l], w, qkv, z, beta, alpha, b, out,
	c->seq_first, (sc->p.conv_dim + CONV_CHANNELS - 1) / CONV_CHANNELS};
	int			n = 0;

	/* each sequence's first token; the batch holds them in order */
	for (int t = 0; t < b->n_tokens; t++)
		if (t == 0 || b->seq[t] != b->seq[t - 1])
			c->seq_first[n++] = t;
	c->seq_first[n] = b->n_tokens;
	threadpool_run(c->pool, n * j.conv_tasks, ConvTask, &j);
	threadpool_run(c->pool, n * c->cfg.lin_v_heads, DeltaTask, &j);
}

/* The hybrid models' small row operations (backend.h's split_halves, sigmoid_mul, add_gated_rows). */

/* Row r of x (n, 2 width) to first[r] and second[r]. */
void
cpu_split_halves(cbllm_backend *be, const float *x, int64_t n, int width, float *first,
			   float *second)
{
	for (int64_t r = 0; r < n; r++)
	{
		memcpy(first + r * width, x + 2 * r * width, sizeof(float) * width);
		memcpy(second + r * width, x + (2 * r + 1) * width, sizeof(float) * width);
	}
}

/* x[t] += sigmoid(logit[t]) * y[t], row by row. */
void
cpu_add_gated_rows(cbllm_backend *be, float *x, const float *y, const float *logit, int T, int dim)
{
	for (int t = 0; t < T; t++)
	{
		float		g = 1.0f / (1.0f + expf(-logit[t]));

		for (int i = 0; i < dim; i++)
			x[(int64_t) t * dim + i] += g * y[(int64_t) t * dim + i];
	}
}

/* x[i] *= sigmoid(gate[i]). */
void
cpu_sigmoid_mul(cbllm_backend *be, float *x, const float *gate, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}
