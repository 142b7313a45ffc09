/*
 * dtype_quant.c: the GGUF block-quantized types' reference dequantizers.
 *
 * Each type packs 32 weights in one block, little-endian, with no padding:
 *
 *   type  bytes  layout                                  element j
 *   Q8_0  34     d:f16, qs:int8[32]                      qs[j] * d
 *   Q4_0  18     d:f16, qs:u8[16]                        (q - 8) * d
 *   Q4_1  20     d:f16, m:f16, qs:u8[16]                 q * d + m
 *   Q5_0  22     d:f16, qh:u8[4], qs:u8[16]              (q - 16) * d
 *   Q5_1  24     d:f16, m:f16, qh:u8[4], qs:u8[16]       q * d + m
 *
 * In the 4- and 5-bit types element j < 16 takes the low nibble of qs[j] and
 * element j + 16 its high nibble.  The 5-bit types read qh as one
 * little-endian 32-bit word whose bit j is the fifth (value 16) bit of
 * element j, for j in [0, 32).
 *
 * The arithmetic is f32: the scale d and the offset m are widened from f16
 * exactly and the small integer q converted exactly.  The product q * d is
 * then exact too (at most 7 + 11 significant bits, and far from f32's
 * subnormals), so the only rounding is the sum with m in the _1 types, and
 * a compiler that fuses q * d + m into one multiply-add gives the same bits.
 *
 * MXFP4 (ggml's type 39; gpt-oss stores its experts so) has no f16 at all:
 *
 *   MXFP4 17     e:u8, qs:u8[16]                         K[q] * 2^(e - 128)
 *
 * e is an E8M0 exponent (a power of two, no sign, no mantissa) and each
 * nibble q an E2M1 code, in the same two halves as Q4_0's.  K
 * (cbllm_mxfp4_values) holds twice each code's value, so the block's factor
 * is half of 2^(e - 127): cbllm_mxfp4_scale builds it exactly, subnormal for
 * e < 2.  K[q] has at most two significant bits and the factor is a power
 * of two at least 2^-128, so the product is exact too, subnormal or not; K
 * is an integer, so codes 0 and 8 both give +0.
 *
 * test/tools/quant.py computes the same values in numpy.
 */
#include "dtype/dtype_quant.h"

#include <stdbool.h>

#include "base/numeric.h"

/* The little-endian 32-bit word at p. */
static inline uint32_t
WordAt(const uint8_t *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

/* Q8_0: signed bytes times the scale. */
void
cbllm_q8_0_to_f32(const void *src, float *dst, int64_t n)
{
	const uint8_t *b = src;

	for (int64_t i = 0; i < n / CBLLM_QK; i++, b += CBLLM_Q8_0_BYTES, dst += CBLLM_QK)
	{
		float		d = cbllm_f16_at(b);

		for (int j = 0; j < CBLLM_QK; j++)
			dst[j] = (float) (int8_t) b[2 + j] * d;
	}
}

/* Where a 4- or 5-bit type keeps its parts, and what it subtracts from q. */
typedef struct nibble_layout
{
	int			bytes;			/* bytes per block */
	bool		has_m;			/* an f16 offset m follows d: x = q * d + m */
	bool		has_qh;			/* a 32-bit word of fifth bits follows */
	int			bias;			/* subtracted from q when there is no m: 8 or 16 */
} nibble_layout;

/* The 5-bit value of element j: nibble of qs, fifth bit from qh (0 for the 4-bit types). */
static inline int
Five(const uint8_t *qs, uint32_t qh, int j)
{
	int			nib = j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;

	return nib | (int) ((qh >> j) & 1) << 4;
}

/* dst[0, n) = the n / 32 blocks at src of the 4- or 5-bit type laid out as l. */
static void
NibblesToF32(const uint8_t *b, float *dst, int64_t n, const nibble_layout *l)
{
	for (int64_t i = 0; i < n / CBLLM_QK; i++, b += l->bytes, dst += CBLLM_QK)
	{
		float		d = cbllm_f16_at(b),
					m = l->has_m ? cbllm_f16_at(b + 2) : 0.0f;
		const uint8_t *p = b + (l->has_m ? 4 : 2);
		uint32_t	qh = l->has_qh ? WordAt(p) : 0;
		const uint8_t *qs = p + (l->has_qh ? 4 : 0);

		for (int j = 0; j < CBLLM_QK; j++)
		{
			/* no "+ 0" for the _0 types: it would turn a -0 product into +0 */
			float		x = (float) (Five(qs, qh, j) - l->bias) * d;

			dst[j] = l->has_m ? x + m : x;
		}
	}
}

static const nibble_layout q4_0_layout = {CBLLM_Q4_0_BYTES, false, false, 8};
static const nibble_layout q4_1_layout = {CBLLM_Q4_1_BYTES, true, false, 0};
static const nibble_layout q5_0_layout = {CBLLM_Q5_0_BYTES, false, true, 16};
static const nibble_layout q5_1_layout = {CBLLM_Q5_1_BYTES, true, true, 0};

/* Q4_0: nibbles less 8 times the scale. */
void
cbllm_q4_0_to_f32(const void *src, float *dst, int64_t n)
{
	NibblesToF32(src, dst, n, &q4_0_layout);
}

/* Q4_1: nibbles times the scale plus the offset. */
void
cbllm_q4_1_to_f32(const void *src, float *dst, int64_t n)
{
	NibblesToF32(src, dst, n, &q4_1_layout);
}

/* Q5_0: 5-bit values less 16 times the scale. */
void
cbllm_q5_0_to_f32(const void *src, float *dst, int64_t n)
{
	NibblesToF32(src, dst, n, &q5_0_layout);
}

/* Q5_1: 5-bit values times the scale plus the offset. */
void
cbllm_q5_1_to_f32(const void *src, float *dst, int64_t n)
{
	NibblesToF32(src, dst, n, &q5_1_layout);
}

const int8_t cbllm_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4: each nibble's doubled E2M1 value times half the block's power of two. */
void
cbllm_mxfp4_to_f32(const void *src, float *dst, int64_t n)
{
	const uint8_t *b = src;

	for (int64_t i = 0; i < n / CBLLM_QK; i++, b += CBLLM_MXFP4_BYTES, dst += CBLLM_QK)
	{
		float		d = cbllm_mxfp4_scale(b[0]);

		for (int j = 0; j < CBLLM_QK / 2; j++)
		{
			dst[j] = (float) cbllm_mxfp4_values[b[1 + j] & 0x0f] * d;
			dst[j + 16] = (float) cbllm_mxfp4_values[b[1 + j] >> 4] * d;
		}
	}
}
