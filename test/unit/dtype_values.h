/*
 * dtype_values.h: small integers stored in each weight type by the tests'
 * own encoders (not the engine's table), so that products and sums of them
 * are exact and a kernel's result can be compared bit for bit.
 */
#ifndef CBLLM_TEST_DTYPE_VALUES_H
#define CBLLM_TEST_DTYPE_VALUES_H

#include <stdint.h>
#include <string.h>

#include "dtype/dtype.h"

/* The IEEE half bits of the integer k, |k| <= 1024 (exact). */
static inline uint16_t
SmallIntF16(int k)
{
	uint16_t	sign = k < 0 ? 0x8000 : 0;
	unsigned	m = (unsigned) (k < 0 ? -k : k);
	int			e = 0;

	if (m == 0)
		return sign;
	while ((m >> (e + 1)) != 0)
		e++;
	return (uint16_t) (sign | (e + 15) << 10 | ((m << (10 - e)) & 0x3ff));
}

/* Element i of an array of dt (F32, F16 or BF16) = the integer k, |k| <= 256. */
static inline void
StoreSmallInt(cbllm_dtype dt, void *base, int64_t i, int k)
{
	float		f = (float) k;
	uint32_t	u;

	memcpy(&u, &f, 4);
	if (dt == CBLLM_F32)
		((float *) base)[i] = f;
	else if (dt == CBLLM_F16)
		((uint16_t *) base)[i] = SmallIntF16(k);
	else						/* bf16: the upper half, exact for small integers */
		((uint16_t *) base)[i] = (uint16_t) (u >> 16);
}

#endif
