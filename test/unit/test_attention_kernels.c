/*
 * test_attention_kernels.c: the attention inner loops of every CPU kernel
 * set this machine runs (cpu_kernels.scores and .accumulate).
 *
 *   - scores: within float rounding of a float64 dot product, for head
 *     sizes with and without a vector tail and 1 to 40 keys;
 *   - a key's score has the same bits however the keys are split into
 *     calls (a call of all of them, calls of 1, 5 or 16 keys starting
 *     anywhere): the scores of a query do not depend on how its positions
 *     fall into cache blocks or steps;
 *   - accumulate: bit for bit the fused steps out[e] = fma(w[i], v_i[e],
 *     out[e]) key after key in order, whatever the head size, and the
 *     same when the keys come in several calls;
 *   - over keys and values cached as f16 or bf16 (scores_half,
 *     accumulate_half): bit for bit what the f32 loops give on the same
 *     values widened, so a half cache changes only the stored values;
 *   - scores_group and accumulate_group (1 to CPU_ATTN_GROUP queries reading
 *     the keys and values once), for f32, f16 and bf16 caches: each query's
 *     scores and output bit for bit what the one-query loops give it;
 *   - softmax_inplace: within 1e-6 of the float64 softmax (relative to the
 *     largest weight), weights summing to 1 within 2e-6, -inf scores
 *     weighing exactly 0, the same bits for a row shifted in memory;
 *     softmax_sink_inplace (gpt-oss's attention sinks): the same against the
 *     float64 softmax with the sink in its denominator, and a sink of -inf
 *     giving softmax_inplace's bits;
 *   - narrow_half, the rounding of keys and values into a half cache: bit
 *     for bit numeric.h's round to nearest even, through overflow,
 *     subnormals, signed zeros and infinities; NaN stays NaN;
 *   - delta_rows and delta_fold, the chunked gated delta rule's products
 *     (a hybrid model's linear attention): within float rounding of
 *     float64, a row's bits the same in a call of any number of rows.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "base/numeric.h"
#include "quant_rows.h"
#include "base/rng.h"
#include "base/softmax.h"
#include "tap.h"

#define MAX_KEYS 40
#define STRIDE 300				/* floats between keys: several heads a position */

static void
TestSet(const cpu_kernels *ks, int hd, cbllm_rng *r)
{
	float	   *q = malloc(sizeof(float) * hd),
			   *k = malloc(sizeof(float) * MAX_KEYS * STRIDE),
			   *w = malloc(sizeof(float) * MAX_KEYS),
			   *s = malloc(sizeof(float) * MAX_KEYS),
			   *part = malloc(sizeof(float) * MAX_KEYS),
			   *out = malloc(sizeof(float) * hd),
			   *ref = malloc(sizeof(float) * hd),
			   *split = malloc(sizeof(float) * hd);
	float		scale = 0.125f;
	bool		close = true,
				same = true,
				acc_exact = true,
				acc_split = true;
	const int	chunks[] = {1, 5, 16};

	for (int i = 0; i < hd; i++)
		q[i] = (float) quant_rows_gauss(r);
	for (int i = 0; i < MAX_KEYS * STRIDE; i++)
		k[i] = (float) quant_rows_gauss(r);
	for (int i = 0; i < MAX_KEYS; i++)
		w[i] = (float) fabs(quant_rows_gauss(r)) / MAX_KEYS;

	for (int n = 1; n <= MAX_KEYS; n++)
	{
		ks->scores(q, k, STRIDE, n, hd, scale, s);
		for (int i = 0; i < n; i++)
		{
			double		d = 0,
						mag = 0;

			for (int e = 0; e < hd; e++)
			{
				d += (double) q[e] * k[i * STRIDE + e];
				mag += fabs((double) q[e] * k[i * STRIDE + e]);
			}
			close = close && fabs(s[i] - d * scale) <= 1e-6 * mag * scale + 1e-30;
		}
		/* the same keys in calls of c keys, the first call starting at key off */
		for (int ci = 0; ci < 3; ci++)
			for (int off = 0; off < 3 && off < n; off++)
			{
				if (off > 0)
					ks->scores(q, k, STRIDE, off, hd, scale, part);
				for (int i0 = off; i0 < n; i0 += chunks[ci])
				{
					int			m = n - i0 < chunks[ci] ? n - i0 : chunks[ci];

					ks->scores(q, k + (int64_t) i0 * STRIDE, STRIDE, m, hd, scale, part + i0);
				}
				same = same && memcmp(part, s, sizeof(float) * n) == 0;
			}

		/* accumulate against the fused steps, then in two calls */
		for (int e = 0; e < hd; e++)
			out[e] = ref[e] = split[e] = (float) (e % 7) * 0.01f;
		for (int i = 0; i < n; i++)
			for (int e = 0; e < hd; e++)
				ref[e] = fmaf(w[i], k[i * STRIDE + e], ref[e]);
		ks->accumulate(out, w, k, STRIDE, n, hd);
		acc_exact = acc_exact && memcmp(out, ref, sizeof(float) * hd) == 0;
		ks->accumulate(split, w, k, STRIDE, n / 2, hd);
		ks->accumulate(split, w + n / 2, k + (int64_t) (n / 2) * STRIDE, STRIDE, n - n / 2, hd);
		acc_split = acc_split && memcmp(split, ref, sizeof(float) * hd) == 0;
	}
	TAP_OK(close, "%s: scores of 1 to %d keys of head size %d are the float64 dot products within rounding",
		   ks->isa, MAX_KEYS, hd);
	TAP_OK(same, "%s: head size %d, each key's score has the same bits however the keys are split into calls",
		   ks->isa, hd);
	TAP_OK(acc_exact, "%s: head size %d, accumulate is the in-order fused steps, bit for bit", ks->isa, hd);
	TAP_OK(acc_split, "%s: head size %d, accumulate over keys in two calls gives the same bits as in one",
		   ks->isa, hd);
	free(q);
	free(k);
	free(w);
	free(s);
	free(part);
	free(out);
	free(ref);
	free(split);
}

/* The f16 and bf16 loops against the f32 loops on the widened keys and values. */
static void
TestHalf(const cpu_kernels *ks, int hd, cbllm_rng *r)
{
	float	   *q = malloc(sizeof(float) * hd),
			   *wide = malloc(sizeof(float) * MAX_KEYS * STRIDE),
			   *w = malloc(sizeof(float) * MAX_KEYS),
			   *s = malloc(sizeof(float) * MAX_KEYS),
			   *sh = malloc(sizeof(float) * MAX_KEYS),
			   *out = malloc(sizeof(float) * hd),
			   *outh = malloc(sizeof(float) * hd);
	uint16_t   *k = malloc(sizeof(uint16_t) * MAX_KEYS * STRIDE);

	for (int t = 0; t < 2; t++)
	{
		bool		scores_same = true,
					acc_same = true;

		for (int i = 0; i < hd; i++)
			q[i] = (float) quant_rows_gauss(r);
		for (int i = 0; i < MAX_KEYS * STRIDE; i++)
		{
			float		x = (float) quant_rows_gauss(r);

			k[i] = t == 0 ? cbllm_f32_to_f16(x) : cbllm_f32_to_bf16(x);
			wide[i] = t == 0 ? cbllm_f16_to_f32(k[i]) : cbllm_bf16_to_f32(k[i]);
		}
		for (int i = 0; i < MAX_KEYS; i++)
			w[i] = (float) fabs(quant_rows_gauss(r)) / MAX_KEYS;
		for (int n = 1; n <= MAX_KEYS; n++)
		{
			ks->scores(q, wide, STRIDE, n, hd, 0.125f, s);
			ks->scores_half[t](q, k, STRIDE, n, hd, 0.125f, sh);
			scores_same = scores_same && memcmp(s, sh, sizeof(float) * n) == 0;
			for (int e = 0; e < hd; e++)
				out[e] = outh[e] = (float) (e % 5) * 0.02f;
			ks->accumulate(out, w, wide, STRIDE, n, hd);
			ks->accumulate_half[t](outh, w, k, STRIDE, n, hd);
			acc_same = acc_same && memcmp(out, outh, sizeof(float) * hd) == 0;
		}
		TAP_OK(scores_same, "%s: head size %d, scores over %s keys equal the f32 scores of the"
			   " widened keys, bit for bit (1 to %d keys)", ks->isa, hd, t ? "bf16" : "f16", MAX_KEYS);
		TAP_OK(acc_same, "%s: head size %d, accumulate over %s values equals the f32 loop on the"
			   " widened values, bit for bit", ks->isa, hd, t ? "bf16" : "f16");
	}
	free(q);
	free(wide);
	free(w);
	free(s);
	free(sh);
	free(out);
	free(outh);
	free(k);
}

/* The grouped loops against the one-query loops, query by query, for each cache type. */
static void
TestGroup(const cpu_kernels *ks, int hd, cbllm_rng *r)
{
	float	   *q = malloc(sizeof(float) * CPU_ATTN_GROUP * hd),
			   *wide = malloc(sizeof(float) * MAX_KEYS * STRIDE),
			   *w = malloc(sizeof(float) * CPU_ATTN_GROUP * MAX_KEYS),
			   *s1 = malloc(sizeof(float) * MAX_KEYS),
			   *sg = malloc(sizeof(float) * CPU_ATTN_GROUP * MAX_KEYS),
			   *o1 = malloc(sizeof(float) * hd),
			   *og = malloc(sizeof(float) * CPU_ATTN_GROUP * hd);
	uint16_t   *half = malloc(sizeof(uint16_t) * MAX_KEYS * STRIDE);
	static const char *names[] = {"f32", "f16", "bf16"};

	for (int t = 0; t < 3; t++)
	{
		const void *k = t == 0 ? (const void *) wide : (const void *) half;
		bool		scores_same = true,
					acc_same = true;

		for (int i = 0; i < CPU_ATTN_GROUP * hd; i++)
			q[i] = (float) quant_rows_gauss(r);
		for (int i = 0; i < MAX_KEYS * STRIDE; i++)
		{
			float		x = (float) quant_rows_gauss(r);

			half[i] = t == 2 ? cbllm_f32_to_bf16(x) : cbllm_f32_to_f16(x);
			wide[i] = t == 0 ? x : t == 1 ? cbllm_f16_to_f32(half[i]) : cbllm_bf16_to_f32(half[i]);
		}
		for (int i = 0; i < CPU_ATTN_GROUP * MAX_KEYS; i++)
			w[i] = (float) fabs(quant_rows_gauss(r)) / MAX_KEYS;
		for (int g = 1; g <= CPU_ATTN_GROUP; g++)
			for (int n = 1; n <= MAX_KEYS; n++)
			{
				const float *qp[CPU_ATTN_GROUP],
						   *wp[CPU_ATTN_GROUP];
				float	   *sp[CPU_ATTN_GROUP],
						   *op[CPU_ATTN_GROUP];

				for (int j = 0; j < g; j++)
				{
					qp[j] = q + j * hd;
					wp[j] = w + j * MAX_KEYS;
					sp[j] = sg + j * MAX_KEYS;
					op[j] = og + j * hd;
					for (int e = 0; e < hd; e++)
						op[j][e] = (float) ((e + j) % 5) * 0.02f;
				}
				ks->scores_group[t](g, qp, k, STRIDE, n, hd, 0.125f, sp);
				ks->accumulate_group[t](g, op, wp, k, STRIDE, n, hd);
				for (int j = 0; j < g; j++)
				{
					ks->scores(qp[j], wide, STRIDE, n, hd, 0.125f, s1);
					scores_same = scores_same && memcmp(s1, sp[j], sizeof(float) * n) == 0;
					for (int e = 0; e < hd; e++)
						o1[e] = (float) ((e + j) % 5) * 0.02f;
					ks->accumulate(o1, wp[j], wide, STRIDE, n, hd);
					acc_same = acc_same && memcmp(o1, op[j], sizeof(float) * hd) == 0;
				}
			}
		TAP_OK(scores_same, "%s: head size %d, %s keys: each of 1 to %d grouped queries gets the"
			   " one-query scores bit for bit (1 to %d keys)", ks->isa, hd, names[t], CPU_ATTN_GROUP,
			   MAX_KEYS);
		TAP_OK(acc_same, "%s: head size %d, %s values: each of 1 to %d grouped queries gets the"
			   " one-query output bit for bit", ks->isa, hd, names[t], CPU_ATTN_GROUP);
	}
	free(q);
	free(wide);
	free(w);
	free(s1);
	free(sg);
	free(o1);
	free(og);
	free(half);
}

/* softmax_inplace against a float64 softmax, at lengths with and without a vector tail. */
static void
TestSoftmax(cbllm_rng *r)
{
	enum
	{
		MAXN = 5000
	};
	static float s[MAXN + 1],
				x[MAXN],
				ref[MAXN];
	const int	lens[] = {1, 2, 15, 16, 17, 33, 100, 255, 1000, 4097, MAXN};
	bool		close = true,
				sums = true,
				masked = true,
				shifted = true;

	for (int li = 0; li < (int) (sizeof(lens) / sizeof(lens[0])); li++)
	{
		int			n = lens[li];
		double		mx = -INFINITY,
					sum = 0,
					total = 0;

		for (int i = 0; i < n; i++)
		{
			x[i] = (float) (quant_rows_gauss(r) * (1 + li % 4) * 3);
			if (n > 2 && i % 7 == 3)
				x[i] = -INFINITY;	/* a position no key should weigh */
			mx = x[i] > mx ? x[i] : mx;
		}
		for (int i = 0; i < n; i++)
			sum += exp((double) x[i] - mx);
		memcpy(s, x, sizeof(float) * n);
		softmax_inplace(s, n);
		for (int i = 0; i < n; i++)
		{
			double		want = exp((double) x[i] - mx) / sum;

			close = close && fabs(s[i] - want) <= 1e-6 * (1.0 / sum);
			masked = masked && (x[i] != -INFINITY || s[i] == 0.0f);
			total += s[i];
		}
		sums = sums && fabs(total - 1) <= 2e-6;
		/* the same scores one float further on: a different alignment, the same bits */
		memcpy(ref, s, sizeof(float) * n);
		memcpy(s + 1, x, sizeof(float) * n);
		softmax_inplace(s + 1, n);
		shifted = shifted && memcmp(s + 1, ref, sizeof(float) * n) == 0;
	}
	TAP_OK(close, "softmax of 1 to %d scores is within 1e-6 of the float64 softmax (relative to the largest weight)", MAXN);
	TAP_OK(sums, "softmax weights sum to 1 within 2e-6 at every length");
	TAP_OK(masked, "softmax gives a -inf score exactly 0 weight");
	TAP_OK(shifted, "softmax gives the same bits for the same scores at another address");
}

/*
 * softmax_sink_inplace: against the float64 softmax whose denominator holds
 * one more logit, the sink below, inside and above the scores' range; a
 * sink of -inf gives softmax_inplace's bits.
 */
static void
TestSoftmaxSink(cbllm_rng *r)
{
	enum
	{
		MAXN = 300
	};
	static float s[MAXN],
				x[MAXN],
				plain[MAXN];
	const int	lens[] = {1, 3, 16, 17, 100, MAXN};
	const float sinks[] = {-20.0f, 0.0f, 1.5f, 40.0f};
	bool		close = true,
				below_one = true,
				none_same = true;

	for (int li = 0; li < (int) (sizeof(lens) / sizeof(lens[0])); li++)
	{
		int			n = lens[li];

		for (int i = 0; i < n; i++)
			x[i] = (float) (quant_rows_gauss(r) * 3);
		for (int k = 0; k < (int) (sizeof(sinks) / sizeof(sinks[0])); k++)
		{
			double		mx = sinks[k],
						sum,
						total = 0;

			for (int i = 0; i < n; i++)
				mx = x[i] > mx ? x[i] : mx;
			sum = exp((double) sinks[k] - mx);
			for (int i = 0; i < n; i++)
				sum += exp((double) x[i] - mx);
			memcpy(s, x, sizeof(float) * n);
			softmax_sink_inplace(s, n, sinks[k]);
			for (int i = 0; i < n; i++)
			{
				double		want = exp((double) x[i] - mx) / sum;

				close = close && fabs(s[i] - want) <= 1e-6 * (1.0 / sum) + 1e-30;
				total += s[i];
			}
			below_one = below_one && total < 1 + 2e-6 &&
				fabs(total - (1 - exp((double) sinks[k] - mx) / sum)) <= 2e-6;
		}
		memcpy(s, x, sizeof(float) * n);
		memcpy(plain, x, sizeof(float) * n);
		softmax_sink_inplace(s, n, -INFINITY);
		softmax_inplace(plain, n);
		none_same = none_same && memcmp(s, plain, sizeof(float) * n) == 0;
	}
	TAP_OK(close, "softmax with a sink logit is within 1e-6 of the float64 softmax with it in the denominator");
	TAP_OK(below_one, "with a sink the weights sum to 1 less the sink's share");
	TAP_OK(none_same, "a sink of -inf gives plain softmax's bits");
}

/* narrow_half against numeric.h's conversions, element by element. */
static void
TestNarrow(const cpu_kernels *ks, cbllm_rng *r)
{
	enum
	{
		N = 1000
	};
	float		src[N];
	uint16_t	got[N];
	const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65520.0f, 1e6f, -7e4f,
		6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-9f, -3.0e-6f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
		3.4e38f, 1e-40f};
	const int	ns = (int) (sizeof(specials) / sizeof(specials[0]));

	for (int t = 0; t < 2; t++)
	{
		bool		same = true,
					nan_kept;

		for (int i = 0; i < N; i++)
			src[i] = i < ns ? specials[i] : (float) (quant_rows_gauss(r) * pow(2.0, (i % 40) - 20));
		src[N - 1] = NAN;
		ks->narrow_half[t](src, got, N - 3);	/* a length with a tail on every set */
		ks->narrow_half[t](src + N - 3, got + N - 3, 3);
		for (int i = 0; i < N - 1; i++)
			same = same && got[i] == (t ? cbllm_f32_to_bf16(src[i]) : cbllm_f32_to_f16(src[i]));
		nan_kept = t ? isnan(cbllm_bf16_to_f32(got[N - 1])) : isnan(cbllm_f16_to_f32(got[N - 1]));
		TAP_OK(same && nan_kept, "%s: narrowing to %s is numeric.h's round to nearest even on %d values"
			   " (specials, 40 binades), NaN stays NaN", ks->isa, t ? "bf16" : "f16", N - 1);
	}
}

/*
 * delta_rows and delta_fold (the chunked gated delta rule's products, of a
 * hybrid model's linear attention): within float rounding of float64, and
 * each row of delta_rows the same bits whether it comes in a call of m
 * rows or of one (a position's bits may not depend on its step), for sizes
 * with and without a vector tail and a row tile left over.
 */
static void
TestDelta(const cpu_kernels *ks, int dk, int dv, cbllm_rng *r)
{
	enum
	{
		M = 11
	};
	float	   *S = malloc(sizeof(float) * dk * dv),
			   *A = malloc(sizeof(float) * M * dk),
			   *U = malloc(sizeof(float) * M * dv),
			   *out = malloc(sizeof(float) * M * dv),
			   *one = malloc(sizeof(float) * dv),
				w[M];
	double		worst = 0,
				fworst = 0;
	bool		same = true;

	for (int i = 0; i < dk * dv; i++)
		S[i] = (float) (rng_uniform(r) - 0.5);
	for (int i = 0; i < M * dk; i++)
		A[i] = (float) (rng_uniform(r) - 0.5);
	for (int i = 0; i < M * dv; i++)
		U[i] = (float) (rng_uniform(r) - 0.5);
	for (int j = 0; j < M; j++)
		w[j] = (float) rng_uniform(r);
	ks->delta_rows(A, M, S, dk, dv, out);
	for (int m = 0; m < M; m++)
	{
		ks->delta_rows(A + (int64_t) m * dk, 1, S, dk, dv, one);
		same = same && memcmp(one, out + (int64_t) m * dv, sizeof(float) * dv) == 0;
		for (int c = 0; c < dv; c++)
		{
			double		e = 0;

			for (int i = 0; i < dk; i++)
				e += (double) A[m * dk + i] * S[i * dv + c];
			worst = fmax(worst, fabs(e - out[m * dv + c]));
		}
	}
	{
		double	   *ref = malloc(sizeof(double) * dk * dv);

		for (int i = 0; i < dk; i++)
			for (int c = 0; c < dv; c++)
			{
				ref[i * dv + c] = 0.75 * S[i * dv + c];
				for (int j = 0; j < M; j++)
					ref[i * dv + c] += (double) w[j] * A[j * dk + i] * U[j * dv + c];
			}
		ks->delta_fold(S, dk, dv, A, U, w, 0.75f, M);
		for (int i = 0; i < dk * dv; i++)
			fworst = fmax(fworst, fabs(ref[i] - S[i]));
		free(ref);
	}
	TAP_OK(worst <= 1e-5 * dk && same,
		   "%s delta_rows, %d rows through a %d x %d state: within float rounding of float64 (worst %.2g), each row the same bits alone",
		   ks->isa, M, dk, dv, worst);
	TAP_OK(fworst <= 1e-5 * M,
		   "%s delta_fold, %d rows into a %d x %d state: within float rounding of float64 (worst %.2g)",
		   ks->isa, M, dk, dv, fworst);
	free(S);
	free(A);
	free(U);
	free(out);
	free(one);
}

int
main(void)
{
	const char *isas[] = {"generic", "avx2", "avx512", "avx512vnni"};
	const int	hds[] = {64, 128, 96, 24, 72, 256};

	for (int i = 0; i < 4; i++)
	{
		const cpu_kernels *ks = cpu_kernels_select(isas[i]);
		cbllm_rng	r;

		if (ks == NULL)
		{
			TAP_DIAG("this CPU has no %s: its attention loops are not run", isas[i]);
			continue;
		}
		rng_seed(&r, 40 + i);
		for (int h = 0; h < 6; h++)
			TestSet(ks, hds[h], &r);
		for (int h = 0; h < 6; h++)
			TestHalf(ks, hds[h], &r);
		for (int h = 0; h < 6; h++)
			TestGroup(ks, hds[h], &r);
		TestNarrow(ks, &r);
		TestDelta(ks, 128, 128, &r);
		TestDelta(ks, 16, 24, &r);
		TestDelta(ks, 32, 7, &r);
	}
	{
		cbllm_rng	r;

		rng_seed(&r, 77);
		TestSoftmax(&r);
		TestSoftmaxSink(&r);
	}
	return tap_done();
}
