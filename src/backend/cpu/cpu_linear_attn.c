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
 *   2. the delta rule in its chunked form: per (sequence, value head), its
 *      tokens a chunk's part at a time (DeltaTask); each output is normed,
 *      gated by silu(z) and written to out.
 *
 * A sequence's tokens are consecutive in the batch (forward.c builds it so)
 * and each task owns one sequence's slice, so the result of a token does
 * not depend on what else is in the step; and since chunks are aligned to
 * positions and a chunk's rows are kept until it is complete
 * (kv/state_cache.h), nor on how the prompt was split into steps.
 *
 * Here too: the gated attention's split of q from its gate and the
 * sigmoid gate, and Qwen3.5-MoE's shared expert added under its gate.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "base/activation.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXCSR_FTZ_DAZ 0x8040	/* flush results and inputs below FLT_MIN to zero */
#endif

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
			x[c] = cbllm_silu(y);
		}
	}
	for (int r = 0; r < K - 1; r++)
		for (int c = 0; c < n; c++)
			hist[(int64_t) r * cd + c0 + c] = h[r][c];
}

/*
 * The delta rule's decays reach far below FLT_MIN (exp(gc) of a chunk's
 * rows under a fast decay), and every product with such a number would
 * take the CPU's slow path for subnormal floats: a tenth of a prefill went
 * there.  DeltaTask flushes them to zero, on its own thread for its own
 * run (the mode it found is put back); the mode is the same in every step,
 * so the bits still do not depend on the step.
 */
static unsigned
FlushSubnormals(void)
{
#ifdef MXCSR_FTZ_DAZ
	unsigned	was = _mm_getcsr();

	_mm_setcsr(was | MXCSR_FTZ_DAZ);
	return was;
#else
	return 0;
#endif
}

static void
RestoreSubnormals(unsigned was)
{
#ifdef MXCSR_FTZ_DAZ
	_mm_setcsr(was);
#else
	(void) was;
#endif
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

/*
 * Pass 2: one sequence's value head through the chunked delta rule
 * (kv/state_cache.h), then its gated norm.  The sequence's tokens go a
 * chunk's part at a time: their rows through the state (two delta_rows),
 * then row by row their new values u and outputs o from the chunk's
 * earlier rows, and when the chunk is complete, its rows folded into the
 * state.  With G(r) = exp(gc[r]), the chunk's decay up to row r, and
 * D(r, j) = G(r) / G(j):
 *
 *   u[r] = beta[r] (v[r] - G(r) S^T k[r] - sum over j < r of D(r, j) (k[r] . k[j]) u[j])
 *   o[r] = G(r) S^T q[r] + sum over j <= r of D(r, j) (q[r] . k[j]) u[j]
 *   S   <- G(C - 1) S + sum over j of D(C - 1, j) k[j] u[j]^T
 *
 * which is the token loop (S *= g; u = beta (v - S^T k); S += k u^T;
 * o = S^T q) regrouped.
 */
static void
DeltaTask(void *arg, int task, int thread)
{
	lin_job    *j = arg;
	const cbllm_model_config *cfg = &j->c->cfg;
	const cpu_kernels *ks = j->c->k;
	int			nv = cfg->lin_v_heads,
				nk = cfg->lin_k_heads,
				dk = cfg->lin_k_dim,
				dv = cfg->lin_v_dim,
				cd = j->sc->p.conv_dim,
				C = STATE_CHUNK_ROWS;
	int			s = task / nv,
				hd = task % nv,
				kh = cfg->lin_v_tiled ? hd % nk : hd / (nv / nk);
	int			t0 = j->first[s],
				t1 = j->first[s + 1];
	float	   *S = state_cache_rec(j->sc, j->layer, j->b->state_slots[j->b->seq[t0]]) +
		hd * state_cache_head_floats(&j->sc->p);
	float	   *K = S + (int64_t) dk * dv,	/* (C, dk) the chunk's keys */
			   *U = K + (int64_t) C * dk,	/* (C, dv) its new values */
			   *gc = U + (int64_t) C * dv;	/* (C) its cumulative log decays */
	float	   *Q = j->c->lin_scratch + thread * j->c->lin_stride,	/* (C, dk) */
			   *QS = Q + (int64_t) C * dk,	/* (C, dv) S^T q of the part's rows */
			   *KS = QS + (int64_t) C * dv, /* (C, dv) S^T k */
			   *w = KS + (int64_t) C * dv;	/* (C) */
	unsigned	mode = FlushSubnormals();

	if (j->b->pos[t0] == 0)
		memset(S, 0, sizeof(float) * dk * dv);
	for (int t = t0; t < t1;)
	{
		int			r0 = j->b->pos[t] % C,
					m = C - r0 < t1 - t ? C - r0 : t1 - t;

		for (int i = 0; i < m; i++)
		{
			const float *row = j->qkv + (int64_t) (t + i) * cd;
			int64_t		a = (int64_t) (t + i) * nv + hd;
			int			r = r0 + i;

			L2Norm(row + kh * dk, dk, 1.0f / sqrtf((float) dk), Q + (int64_t) i * dk);
			L2Norm(row + nk * dk + kh * dk, dk, 1.0f, K + (int64_t) r * dk);
			gc[r] = (r == 0 ? 0.0f : gc[r - 1]) +
				j->w->lin_a[hd] * cbllm_softplus(j->alpha[a] + j->w->lin_dt_bias[hd]);
		}
		ks->delta_rows(Q, m, S, dk, dv, QS);
		ks->delta_rows(K + (int64_t) r0 * dk, m, S, dk, dv, KS);
		for (int i = 0; i < m; i++)
		{
			int			r = r0 + i;
			int64_t		a = (int64_t) (t + i) * nv + hd;
			const float *v = j->qkv + (int64_t) (t + i) * cd + 2 * nk * dk + hd * dv,
					   *z = j->z + a * dv,
					   *kr = K + (int64_t) r * dk,
					   *qr = Q + (int64_t) i * dk;
			float	   *u = U + (int64_t) r * dv,
					   *o = j->out + a * dv,
						g = expf(gc[r]),
						beta = cbllm_sigmoid(j->beta[a]),
						ss = 0.0f;

			memset(u, 0, sizeof(float) * dv);
			for (int p = 0; p < r; p++)
				ks->axpy(u, expf(gc[r] - gc[p]) * ks->dot(kr, K + (int64_t) p * dk, dk),
						 U + (int64_t) p * dv, dv);
			for (int c = 0; c < dv; c++)
			{
				u[c] = (v[c] - (g * KS[(int64_t) i * dv + c] + u[c])) * beta;
				o[c] = g * QS[(int64_t) i * dv + c];
			}
			for (int p = 0; p <= r; p++)
				ks->axpy(o, expf(gc[r] - gc[p]) * ks->dot(qr, K + (int64_t) p * dk, dk),
						 U + (int64_t) p * dv, dv);
			for (int c = 0; c < dv; c++)
				ss += o[c] * o[c];
			ss = 1.0f / sqrtf(ss / dv + cfg->rms_eps);
			for (int c = 0; c < dv; c++)
				o[c] = o[c] * ss * j->w->lin_norm[c] * cbllm_silu(z[c]);
		}
		if (r0 + m == C)
		{
			for (int p = 0; p < C; p++)
				w[p] = expf(gc[C - 1] - gc[p]);
			ks->delta_fold(S, dk, dv, K, U, w, expf(gc[C - 1]), C);
		}
		t += m;
	}
	RestoreSubnormals(mode);
}

/* Floats of one thread's scratch for DeltaTask (cpu_ctx.lin_scratch). */
int64_t
cpu_linear_scratch_floats(const cbllm_model_config *cfg)
{
	return (int64_t) STATE_CHUNK_ROWS * (cfg->lin_k_dim + 2 * cfg->lin_v_dim + 1);
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
		float		g = cbllm_sigmoid(logit[t]);

		for (int i = 0; i < dim; i++)
			x[(int64_t) t * dim + i] += g * y[(int64_t) t * dim + i];
	}
}

/* x[i] *= sigmoid(gate[i]). */
void
cpu_sigmoid_mul(cbllm_backend *be, float *x, const float *gate, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] *= cbllm_sigmoid(gate[i]);
}
