/* numeric.h: scalar conversions between the stored dtypes and f32. */
#ifndef CBLLM_NUMERIC_H
#define CBLLM_NUMERIC_H

#include <stdint.h>
#include <string.h>

/* bf16 to f32 is exact: the bf16 bits are the upper half of the f32. */
static inline float
cbllm_bf16_to_f32(uint16_t h)
{
	uint32_t	u = (uint32_t) h << 16;
	float		f;

	memcpy(&f, &u, 4);
	return f;
}

/* f32 to bf16, rounded to nearest even; NaN stays a (quiet) NaN. */
static inline uint16_t
cbllm_f32_to_bf16(float f)
{
	uint32_t	u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t) ((u >> 16) | 0x0040);
	return (uint16_t) ((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* IEEE half to f32 (exact, including subnormals, infinities and NaN). */
static inline float
cbllm_f16_to_f32(uint16_t h)
{
	uint32_t	sign = (uint32_t) (h & 0x8000) << 16;
	uint32_t	exp = (h >> 10) & 0x1f;
	uint32_t	man = h & 0x3ff;
	uint32_t	u;
	float		f;

	if (exp == 0x1f)
		u = sign | 0x7f800000 | (man << 13);
	else if (exp != 0)
		u = sign | ((exp + 112) << 23) | (man << 13);
	else if (man == 0)
		u = sign;
	else
	{
		/* subnormal: normalise the mantissa */
		exp = 113;
		while ((man & 0x400) == 0)
		{
			man <<= 1;
			exp--;
		}
		u = sign | (exp << 23) | ((man & 0x3ff) << 13);
	}
	memcpy(&f, &u, 4);
	return f;
}

/* The little-endian IEEE half at p (any alignment) widened to f32. */
static inline float
cbllm_f16_at(const uint8_t *p)
{
	return cbllm_f16_to_f32((uint16_t) (p[0] | (uint16_t) p[1] << 8));
}

/*
 * f32 to IEEE half, rounded to nearest even (as numpy's astype(float16)):
 * beyond the largest half to infinity, below the smallest subnormal to a
 * signed zero; NaN stays a (quiet) NaN.
 */
static inline uint16_t
cbllm_f32_to_f16(float f)
{
	uint32_t	u;
	uint32_t	sign,
				a,
				exp,
				man,
				shift,
				half,
				rest;

	memcpy(&u, &f, 4);
	sign = (u >> 16) & 0x8000;
	a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t) (sign | 0x7e00 | ((a >> 13) & 0x3ff));
	if (a >= 0x477ff000u)		/* rounds to or is beyond infinity */
		return (uint16_t) (sign | 0x7c00);
	exp = a >> 23;
	man = (a & 0x7fffff) | 0x800000;
	if (exp >= 113)
	{
		/* normal half: drop 13 bits, rounding to even; a carry bumps the exponent */
		uint32_t	h = ((exp - 112) << 10) | ((a >> 13) & 0x3ff);

		rest = a & 0x1fff;
		if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
			h++;
		return (uint16_t) (sign | h);
	}
	if (exp < 102)				/* below half the smallest subnormal: zero */
		return (uint16_t) sign;
	/* subnormal half: the value is man * 2^(exp - 150), in units of 2^-24 */
	shift = 126 - exp;
	half = man >> shift;
	rest = man & ((1u << shift) - 1);
	if (rest > (1u << (shift - 1)) || (rest == (1u << (shift - 1)) && (half & 1)))
		half++;
	return (uint16_t) (sign | half);
}

#endif
