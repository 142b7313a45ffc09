/*
 * quantize.c: f32 rows into the GGUF block types, for load-time quantization.
 *
 * Each quantizer follows test/tools/quant.py step by step in the same f32
 * operations and the same order of sums, so the two write the same bytes
 * (test_quantize checks it) and the GGUF fixtures the tests make hold what
 * the engine would make.  This relies on no fused multiply-adds (-std=c11
 * gives gcc -ffp-contract=off; clang is told below) and no -ffast-math.
 *
 * Every type searches.  The 32-element integer types search each block as one
 * sub-block (steps 1 to 3 below) and store its scale (Q8_0, Q4_0, Q5_0:
 * symmetric, bias 128, 8 or 16) or its scale and offset of either sign
 * (Q4_1, Q5_1) as f16, then give each element its nearest code; the least
 * squares cut the relative RMS error of Gaussian rows by 6-11% against
 * rounding the format's reference way (d = amax / 127, or the signed max to
 * the most negative code, or [min, max] in equal steps).
 *
 * MXFP4 has no scale to fit, only a power of two over a fixed grid of codes
 * (dtype_quant.c's header): with 2^k <= amax < 2^(k + 1), amax the block's
 * largest magnitude, it tries two exponent bytes, e = k + 125 (amax then
 * lies in [8, 16) times the factor 2^(e - 128), so values beyond 12 clip
 * to the largest code: ggml's choice) and e + 1 (every value fits, amax in
 * [4, 8)); under each, every element takes its nearest code (ties to the
 * smaller magnitude, a zero magnitude as code 0), and the exponent whose
 * codes leave the smaller sum of squared errors wins (e on ties).  Both are
 * measured in units of e's factor, v = x / 2^(e - 128), against K[q] and
 * 2 K[q], so no square overflows.  e is at least 0 (a block too small for
 * any factor rounds towards zero), an all-zero block has e = 0, and e + 1 is
 * tried only up to 252, the last exponent under which 12 times the factor
 * is finite.  On Gaussian rows the choice between the two leaves 3% less
 * error than ggml's e alone.
 *
 * The K-quants.  A block of 256 is cut into sub-blocks of 16 or 32
 * (kquant_layout.h), and each sub-block first gets a float scale a (and, in
 * the affine types Q2_K, Q4_K and Q5_K, an offset -b, b >= 0) as follows:
 *   1. 25 trial grids: N' = N + j / 8 for j in [-16, 8], N the count of codes
 *      above zero (affine: qmax) or below it (symmetric: the bias).  A trial's
 *      codes are q = rint((x - lo) * N' / (max - lo)) clipped to [0, qmax],
 *      lo = min(x, 0) (affine), or q = rint(-x * N' / v) clipped to
 *      [-bias, qmax - bias], v the element of largest magnitude (symmetric):
 *      trials below N clip the extremes to refine the step of the rest.
 *   2. For a trial's codes the scale (and offset) of least squared error
 *      follow in closed form: a = sum(q x) / sum(q q) in the symmetric types;
 *      in the affine ones the two-parameter least squares, and when that
 *      offset would be positive (the format stores only -dmin * m <= 0) the
 *      offset 0 and a = sum(q x) / sum(q q).  A sub-block of one value c <= 0
 *      takes a = 0 and offset c.
 *   3. The trial whose a q - b leaves the least squared error wins (the first
 *      on ties).
 * Then the super-block scale d is the largest a over the largest scale code
 * (in Q3_K and Q6_K the a of largest magnitude, its sign kept, over the most
 * negative code), rounded to f16; each sub-block's scale code is rint(a / d)
 * clipped to its range, its min code likewise rint(b / dmin); and every
 * element takes the code nearest to it under its sub-block's final scale
 * d * sc and offset dmin * m.
 */
#include "dtype/quantize.h"

#include <math.h>
#include <string.h>

#include "base/numeric.h"
#include "dtype/dtype_quant.h"
#include "dtype/kquant_layout.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* The trials of the K-quant search: N + j / 8 for j in [TRIAL_LO, TRIAL_HI]. */
#define TRIAL_LO	(-16)
#define TRIAL_HI	8
#define N_TRIALS	(TRIAL_HI - TRIAL_LO + 1)

/* rint(v) for |v| <= 2^22 (to nearest, ties to even): adding 1.5 * 2^23 drops the fraction. */
static inline float
RoundSmall(float v)
{
	return (v + 12582912.0f) - 12582912.0f;
}

/* rint(v) clipped to [lo, hi] (integers, |lo|, |hi| small); 0 when v is not finite. */
static inline int
CodeOf(float v, int lo, int hi)
{
	if (!isfinite(v))
		return 0;
	v = v < (float) lo ? (float) lo : v > (float) hi ? (float) hi : v;
	return (int) RoundSmall(v);
}

/* v stored as f16 at p (little-endian); false when that is not finite (v too large, or NaN). */
static inline bool
PutHalf(uint8_t *p, float v)
{
	uint16_t	h = cbllm_f32_to_f16(v);

	p[0] = (uint8_t) h;
	p[1] = (uint8_t) (h >> 8);
	return (h & 0x7c00) != 0x7c00;
}

/* The element of largest magnitude among x[0, n), its sign kept (the first such). */
static float
FirstAbsMax(const float *x, int n)
{
	float		v = x[0];

	for (int i = 1; i < n; i++)
		if (fabsf(x[i]) > fabsf(v))
			v = x[i];
	return v;
}

/* v clipped to [lo, hi] and rounded to an integer (as numpy's rint then clip); NaN stays NaN. */
static inline float
ClipRound(float v, float lo, float hi)
{
	v = v < lo ? lo : v;
	v = v > hi ? hi : v;
	return RoundSmall(v);
}

/* The first trial of least error in err[0, N_TRIALS). */
static int
BestTrial(const float *err)
{
	int			best = 0;

	for (int t = 1; t < N_TRIALS; t++)
		if (err[t] < err[best])
			best = t;
	return best;
}

/*
 * A sub-block's scale *a_out >= 0 and offset *m_out of least squared error
 * over the trials (affine); with clamp the offset is <= 0 (the K-quants store
 * it as -dmin * m).  The trials run side by side in the inner loops,
 * each summing its elements in order, so that the compiler can vectorise
 * across them without changing any sum.
 */
static void
FitAffine(const float *x, int n, int qmax, bool clamp, float *a_out, float *m_out)
{
	float		lo = clamp ? 0.0f : x[0],
				hi = x[0],
				span,
				nf = (float) n,
				sx = 0.0f,
				iscale[N_TRIALS],
				q[32][N_TRIALS],	/* (element, trial) codes */
				sq[N_TRIALS] = {0},
				sqq[N_TRIALS] = {0},
				sqx[N_TRIALS] = {0},
				a[N_TRIALS],
				m[N_TRIALS],
				err[N_TRIALS] = {0};
	int			best;

	for (int i = 0; i < n; i++)
	{
		lo = x[i] < lo ? x[i] : lo;
		hi = x[i] > hi ? x[i] : hi;
	}
	span = hi - lo;
	for (int t = 0; t < N_TRIALS; t++)
		iscale[t] = span > 0.0f ? ((float) qmax + (float) (t + TRIAL_LO) * 0.125f) / span : 0.0f;
	for (int i = 0; i < n; i++)
	{
		float		xi = x[i],
					dx = xi - lo;

		sx += xi;
		for (int t = 0; t < N_TRIALS; t++)
		{
			float		c = ClipRound(dx * iscale[t], 0.0f, (float) qmax);

			q[i][t] = c;
			sq[t] += c;
			sqq[t] += c * c;
			sqx[t] += c * xi;
		}
	}
	for (int t = 0; t < N_TRIALS; t++)
	{
		float		det = nf * sqq[t] - sq[t] * sq[t];

		if (sqq[t] == 0.0f)
		{
			a[t] = 0.0f;
			m[t] = lo;
		}
		else if (det > 0.0f && (!clamp || (sqq[t] * sx - sq[t] * sqx[t]) / det <= 0.0f))
		{
			a[t] = (nf * sqx[t] - sq[t] * sx) / det;
			m[t] = (sqq[t] * sx - sq[t] * sqx[t]) / det;
		}
		else
		{
			a[t] = sqx[t] / sqq[t];
			m[t] = 0.0f;
		}
		a[t] = a[t] < 0.0f ? 0.0f : a[t];
	}
	for (int i = 0; i < n; i++)
		for (int t = 0; t < N_TRIALS; t++)
		{
			float		r = a[t] * q[i][t] + m[t] - x[i];

			err[t] += r * r;
		}
	best = BestTrial(err);
	*a_out = a[best];
	*m_out = m[best];
}

/* A sub-block's signed scale of least squared error over the trials, codes in [-bias, qmax - bias]. */
static float
FitSym(const float *x, int n, int bias, int qmax)
{
	float		vmax = FirstAbsMax(x, n),
				iscale[N_TRIALS],
				q[32][N_TRIALS],	/* (element, trial) codes */
				sqq[N_TRIALS] = {0},
				sqx[N_TRIALS] = {0},
				a[N_TRIALS],
				err[N_TRIALS] = {0};

	for (int t = 0; t < N_TRIALS; t++)
		iscale[t] = vmax != 0.0f ? -((float) bias + (float) (t + TRIAL_LO) * 0.125f) / vmax : 0.0f;
	for (int i = 0; i < n; i++)
		for (int t = 0; t < N_TRIALS; t++)
		{
			float		c = ClipRound(x[i] * iscale[t], (float) -bias, (float) (qmax - bias));

			q[i][t] = c;
			sqq[t] += c * c;
			sqx[t] += c * x[i];
		}
	for (int t = 0; t < N_TRIALS; t++)
		a[t] = sqq[t] > 0.0f ? sqx[t] / sqq[t] : 0.0f;
	for (int i = 0; i < n; i++)
		for (int t = 0; t < N_TRIALS; t++)
		{
			float		r = a[t] * q[i][t] - x[i];

			err[t] += r * r;
		}
	return a[BestTrial(err)];
}

/* The 32 codes q[0, 32) packed as the 4- and 5-bit types keep them (dtype_quant.c's header). */
static void
PackNibbles(const int *q, uint8_t *qs, uint8_t *qh)
{
	uint32_t	word = 0;

	for (int j = 0; j < CBLLM_QK / 2; j++)
		qs[j] = (uint8_t) ((q[j] & 0x0f) | (q[j + 16] & 0x0f) << 4);
	for (int j = 0; j < CBLLM_QK; j++)
		word |= (uint32_t) ((q[j] >> 4) & 1) << j;
	if (qh != NULL)
		for (int k = 0; k < 4; k++)
			qh[k] = (uint8_t) (word >> (8 * k));
}

/*
 * The f16 scale at b of a Q8_0, Q4_0 or Q5_0 block (the search's, rounded)
 * and its codes q[0, 32) less the bias; false if the scale overflows f16.
 */
static bool
QuantSym(const float *x, uint8_t *b, int bias, int qmax, int *q)
{
	bool		ok = PutHalf(b, FitSym(x, CBLLM_QK, bias, qmax));
	float		d = cbllm_f16_at(b);

	for (int j = 0; j < CBLLM_QK; j++)
		q[j] = CodeOf(x[j] / d, -bias, qmax - bias);
	return ok;
}

/* Q4_1 (qmax 15) or Q5_1 (31): the search's scale and offset (either sign); false if either overflows f16. */
static bool
QuantAffine(const float *x, uint8_t *b, int qmax)
{
	float		a,
				mm,
				d,
				m;
	int			q[CBLLM_QK];
	bool		d_ok,
				m_ok;

	FitAffine(x, CBLLM_QK, qmax, false, &a, &mm);
	d_ok = PutHalf(b, a);
	m_ok = PutHalf(b + 2, mm);
	d = cbllm_f16_at(b);
	m = cbllm_f16_at(b + 2);
	for (int j = 0; j < CBLLM_QK; j++)
		q[j] = d > 0.0f ? CodeOf((x[j] - m) / d, 0, qmax) : 0;
	PackNibbles(q, b + (qmax == 31 ? 8 : 4), qmax == 31 ? b + 4 : NULL);
	return d_ok && m_ok;
}

/* Q8_0: signed codes in [-128, 127]. */
bool
cbllm_q8_0_from_f32(const float *x, void *dst)
{
	uint8_t    *b = dst;
	int			q[CBLLM_QK];
	bool		ok = QuantSym(x, b, 128, 255, q);

	for (int j = 0; j < CBLLM_QK; j++)
		b[2 + j] = (uint8_t) (int8_t) q[j];
	return ok;
}

/* Q4_0 (bias 8) or Q5_0 (16): codes in [-bias, bias), stored + bias as nibbles (and fifth bits). */
static bool
QuantSymNibbles(const float *x, uint8_t *b, int bias)
{
	int			q[CBLLM_QK];
	bool		ok = QuantSym(x, b, bias, 2 * bias - 1, q);

	for (int j = 0; j < CBLLM_QK; j++)
		q[j] += bias;
	PackNibbles(q, b + (bias == 16 ? 6 : 2), bias == 16 ? b + 2 : NULL);
	return ok;
}

/* Q4_0: codes in [-8, 7]. */
bool
cbllm_q4_0_from_f32(const float *x, void *dst)
{
	return QuantSymNibbles(x, dst, 8);
}

/* Q5_0: codes in [-16, 15]. */
bool
cbllm_q5_0_from_f32(const float *x, void *dst)
{
	return QuantSymNibbles(x, dst, 16);
}

/* Q4_1: codes in [0, 15]. */
bool
cbllm_q4_1_from_f32(const float *x, void *dst)
{
	return QuantAffine(x, dst, 15);
}

/* Q5_1: codes in [0, 31]. */
bool
cbllm_q5_1_from_f32(const float *x, void *dst)
{
	return QuantAffine(x, dst, 31);
}

/* The MXFP4 code nearest v (v in units of the block's factor): ties to the smaller magnitude. */
static int
Fp4Code(float v)
{
	/* halfway between consecutive magnitudes of cbllm_mxfp4_values' first eight */
	static const float mid[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f};
	float		a = fabsf(v);
	int			i = 0;

	while (i < 7 && a > mid[i])
		i++;
	return i > 0 && v < 0.0f ? i | 8 : i;
}

/* MXFP4: the better of two exponents (the header), each element its nearest code; never fails. */
bool
cbllm_mxfp4_from_f32(const float *x, void *dst)
{
	uint8_t    *b = dst;
	float		amax = 0.0f,
				d,
				err[2] = {0.0f, 0.0f};
	int			q[2][CBLLM_QK],
				k2 = 0,
				e,
				best;

	for (int j = 0; j < CBLLM_QK; j++)
		amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
	if (amax > 0.0f)
		frexpf(amax, &k2);		/* amax = m 2^k2, m in [0.5, 1): k = k2 - 1 */
	e = amax > 0.0f ? k2 + 124 : 0;
	e = e < 0 ? 0 : e;
	d = cbllm_mxfp4_scale((uint8_t) e);
	for (int j = 0; j < CBLLM_QK; j++)
	{
		float		v = x[j] / d,
					r;

		q[0][j] = Fp4Code(v);
		q[1][j] = Fp4Code(v / 2.0f);
		r = (float) cbllm_mxfp4_values[q[0][j]] - v;
		err[0] += r * r;
		r = 2.0f * (float) cbllm_mxfp4_values[q[1][j]] - v;
		err[1] += r * r;
	}
	best = e + 1 <= 252 && err[1] < err[0] ? 1 : 0;
	b[0] = (uint8_t) (e + best);
	for (int j = 0; j < CBLLM_QK / 2; j++)
		b[1 + j] = (uint8_t) (q[best][j] | q[best][j + 16] << 4);
	return true;
}

/* One K-quant block of type l from x[0, 256) into b; false when d or dmin overflows f16. */
static bool
QuantK(const kquant_layout *l, const float *x, uint8_t *b)
{
	int			ns = CBLLM_QK_K / l->sub,
				sc[16],
				m[16] = {0};
	float		a[16] = {0},
				bo[16] = {0},
				d,
				dmin = 0.0f;
	bool		ok;

	memset(b, 0, (size_t) l->bytes);
	if (l->dmin_off < 0)
	{
		for (int s = 0; s < ns; s++)
			a[s] = FitSym(x + s * l->sub, l->sub, l->bias, l->qmax);
		ok = PutHalf(b + l->d_off, FirstAbsMax(a, ns) / (float) l->scale_min);
		d = cbllm_f16_at(b + l->d_off);
		for (int s = 0; s < ns; s++)
			sc[s] = d != 0.0f ? CodeOf(a[s] / d, l->scale_min, l->scale_max) : 0;
	}
	else
	{
		float		amax = 0.0f,
					bmax = 0.0f;

		for (int s = 0; s < ns; s++)
		{
			float		mm;

			FitAffine(x + s * l->sub, l->sub, l->qmax, true, &a[s], &mm);
			bo[s] = 0.0f - mm;
			amax = s == 0 || a[s] > amax ? a[s] : amax;
			bmax = s == 0 || bo[s] > bmax ? bo[s] : bmax;
		}
		ok = PutHalf(b + l->d_off, amax / (float) l->scale_max);
		ok = PutHalf(b + l->dmin_off, bmax / (float) l->scale_max) && ok;
		d = cbllm_f16_at(b + l->d_off);
		dmin = cbllm_f16_at(b + l->dmin_off);
		for (int s = 0; s < ns; s++)
		{
			sc[s] = d > 0.0f ? CodeOf(a[s] / d, 0, l->scale_max) : 0;
			m[s] = dmin > 0.0f ? CodeOf(bo[s] / dmin, 0, l->scale_max) : 0;
		}
	}
	for (int s = 0; s < ns; s++)
	{
		float		dl = d * (float) sc[s],
					ml = dmin * (float) m[s];

		cbllm_kquant_put_scale(l, b, s, sc[s], m[s]);
		for (int e = s * l->sub; e < (s + 1) * l->sub; e++)
		{
			int			q;

			if (l->dmin_off < 0)
				q = CodeOf(x[e] / dl, -l->bias, l->qmax - l->bias) + l->bias;
			else
				q = dl > 0.0f ? CodeOf((x[e] + ml) / dl, 0, l->qmax) : 0;
			cbllm_kquant_put_code(l, b, e, q);
		}
	}
	return ok;
}

/* Q2_K: the K-quant search with 2-bit codes. */
bool
cbllm_q2_k_from_f32(const float *x, void *dst)
{
	return QuantK(cbllm_kquant_layout(CBLLM_Q2_K), x, dst);
}

/* Q3_K: the K-quant search with 3-bit signed codes. */
bool
cbllm_q3_k_from_f32(const float *x, void *dst)
{
	return QuantK(cbllm_kquant_layout(CBLLM_Q3_K), x, dst);
}

/* Q4_K: the K-quant search with 4-bit codes. */
bool
cbllm_q4_k_from_f32(const float *x, void *dst)
{
	return QuantK(cbllm_kquant_layout(CBLLM_Q4_K), x, dst);
}

/* Q5_K: the K-quant search with 5-bit codes. */
bool
cbllm_q5_k_from_f32(const float *x, void *dst)
{
	return QuantK(cbllm_kquant_layout(CBLLM_Q5_K), x, dst);
}

/* Q6_K: the K-quant search with 6-bit signed codes. */
bool
cbllm_q6_k_from_f32(const float *x, void *dst)
{
	return QuantK(cbllm_kquant_layout(CBLLM_Q6_K), x, dst);
}

/* The checks, then the row's block quantizer over each block. */
int
cbllm_quantize_row(cbllm_dtype dt, const float *src, void *dst, int64_t n, cbllm_err *err)
{
	const cbllm_dtype_traits *t = cbllm_dtype_traits_of(dt);
	uint8_t    *out = dst;

	if (t->from_f32 == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cannot quantize to %s: the type has no quantizer", t->name);
	if (n < 0 || n % t->block_elems != 0)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cannot quantize %lld values to %s: not a whole number of "
						  "%d-element blocks", (long long) n, t->name, t->block_elems);
	for (int64_t i = 0; i < n; i++)
		if (!isfinite(src[i]))
			return cbllm_fail(err, CBLLM_ERR_INVALID, "cannot quantize to %s: element %lld is %s", t->name,
							  (long long) i, isnan(src[i]) ? "NaN" : "infinite");
	for (int64_t k = 0; k < n / t->block_elems; k++)
		if (!t->from_f32(src + k * t->block_elems, out + (size_t) k * t->block_bytes))
			return cbllm_fail(err, CBLLM_ERR_INVALID, "cannot quantize to %s: the values of block %lld (elements "
							  "%lld to %lld) exceed the range of its f16 scales", t->name, (long long) k,
							  (long long) (k * t->block_elems), (long long) ((k + 1) * t->block_elems - 1));
	return CBLLM_OK;
}
