/*
 * vec_math.h: sixteen floats at a time in the compiler's vector types, for
 * the passes over long float arrays outside the kernel sets (the sampler's
 * passes over the logits, the attention softmax).
 *
 * Functions using them are compiled for AVX-512, AVX2 and plain x86-64
 * (VEC_CLONES, chosen at load by the C library).  Every lane computes the
 * same IEEE operations as the scalar code beside it, and sums run in a
 * fixed order, so each version gives the same results bit for bit.
 */
#ifndef CBLLM_VEC_MATH_H
#define CBLLM_VEC_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VEC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VEC_CLONES
#endif

#define VL 16
#if defined(__GNUC__) && !defined(__clang__)
/* the vector helpers below are static inline: no call passes a vector across an ABI */
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float vf16 __attribute__((vector_size(VL * 4)));
typedef int32_t vi16 __attribute__((vector_size(VL * 4)));

static inline vf16
LoadV(const float *p)
{
	vf16		v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Whether any lane of a comparison's mask is set. */
static inline int
AnyV(vi16 mask)
{
	uint64_t	w[VL / 2],
				any = 0;

	memcpy(w, &mask, sizeof(w));
	for (int j = 0; j < VL / 2; j++)
		any |= w[j];
	return any != 0;
}

/* Lanes of a where mask is set (all ones), else lanes of b. */
static inline vf16
SelectV(vi16 mask, vf16 a, vf16 b)
{
	return (vf16) (((vi16) a & mask) | ((vi16) b & ~mask));
}

/*
 * The largest of l[0, n), NaN skipped (-inf when every one is NaN or -inf);
 * inlined into each caller's clone.
 */
static inline float
MaxV(const float *l, int n)
{
	vf16		m = (vf16) {0} - __builtin_inff();
	float		best = -__builtin_inff();
	int			i = 0;

	/* a comparison with NaN is false, so NaN never enters */
	for (; i + VL <= n; i += VL)
	{
		vf16		x = LoadV(l + i);

		m = SelectV(x > m, x, m);
	}
	for (int j = 0; j < VL; j++)
		best = m[j] > best ? m[j] : best;
	for (; i < n; i++)
		best = l[i] > best ? l[i] : best;
	return best;
}

/*
 * exp(x) for x <= 0 in float, within 2 ulp: x = n ln 2 + r with |r| <=
 * ln 2 / 2, a degree-7 polynomial for exp(r), and 2^n put into the exponent
 * bits.  Below -87 (where floats turn denormal), and for NaN, it is 0.
 * ExpV is the same arithmetic on sixteen lanes.
 */
#define EXP_FLOOR (-87.0f)
#define EXP_ROUND 12582912.0f	/* 1.5 * 2^23: adding it rounds to an integer */
#define EXP_POLY(p, r) \
	((((((((1.0f / 5040) * (r) + 1.0f / 720) * (r) + 1.0f / 120) * (r) + 1.0f / 24) * (r) + \
		 1.0f / 6) * (r) + 0.5f) * (r) + 1.0f) * (r) + 1.0f)

static inline float
ExpNonPositive(float x)
{
	float		y = x > EXP_FLOOR ? x : EXP_FLOOR;
	float		k = y * 1.44269504f + EXP_ROUND;
	float		n = k - EXP_ROUND;
	float		r = (y - n * 0.693359375f) + n * 2.12194440e-4f;	/* ln 2 in two parts */
	uint32_t	kb,
				e;
	float		scale;

	memcpy(&kb, &k, sizeof(kb));
	e = (kb - 0x4b400000u + 127u) << 23;	/* n + 127 in the exponent field */
	memcpy(&scale, &e, sizeof(scale));
	return x >= EXP_FLOOR ? EXP_POLY(p, r) * scale : 0.0f;
}

static inline vf16
ExpV(vf16 x)
{
	vi16		ok = x >= EXP_FLOOR;
	vf16		y = SelectV(ok, x, (vf16) {0} + EXP_FLOOR);
	vf16		k = y * 1.44269504f + EXP_ROUND;
	vf16		n = k - EXP_ROUND;
	vf16		r = (y - n * 0.693359375f) + n * 2.12194440e-4f;
	vi16		e = ((vi16) k - 0x4b400000 + 127) << 23;

	return (vf16) ((vi16) (EXP_POLY(p, r) * (vf16) e) & ok);
}

#endif
