/*
 * dtype_kquant.c: the GGUF K-quant types' block layouts and reference
 * dequantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
 *
 * Every block holds 256 weights, little-endian, with no padding:
 *
 *   type  bytes  layout (byte offsets)                                    sub-blocks
 *   Q2_K  84     scales:u8[16]@0 qs:u8[64]@16 d:f16@80 dmin:f16@82         16 of 16
 *   Q3_K  110    hmask:u8[32]@0 qs:u8[64]@32 scales:u8[12]@96 d:f16@108    16 of 16
 *   Q4_K  144    d:f16@0 dmin:f16@2 scales:u8[12]@4 qs:u8[128]@16          8 of 32
 *   Q5_K  176    d:f16@0 dmin:f16@2 scales:u8[12]@4 qh:u8[32]@16 qs@48     8 of 32
 *   Q6_K  210    ql:u8[128]@0 qh:u8[64]@128 scales:i8[16]@192 d:f16@208    16 of 16
 *
 * Element e (sub-block s = e / 16 or e / 32) is
 *   Q2_K  (d * sc) * q - dmin * m    q 2 bits (0..3), sc and m 4 bits
 *   Q3_K  (d * sc) * (q - 4)         q 3 bits, sc 6 bits stored + 32 (-32..31)
 *   Q4_K  (d * sc) * q - dmin * m    q 4 bits, sc and m 6 bits
 *   Q5_K  (d * sc) * q - dmin * m    q 5 bits, sc and m 6 bits
 *   Q6_K  (d * sc) * (q - 32)        q 6 bits, sc int8
 *
 * Where the code bits lie (kquant_layout.h's planes; byte from the plane's
 * start):
 *   crumbs (2 bits: Q2_K's qs, Q3_K's qs = q's low bits, Q6_K's qh = q's
 *     bits 4-5): byte 32 (e / 128) + e % 32, shift 2 ((e / 32) % 4)
 *   bits (1 bit: Q3_K's hmask = q's bit 2, Q5_K's qh = q's bit 4):
 *     byte e % 32, bit e / 32
 *   nibbles (Q4_K's and Q5_K's qs, q's low bits): byte 32 (e / 64) + e % 32,
 *     shift 4 ((e / 32) % 2)
 *   Q6_K's nibbles (ql, q's low bits): byte 64 (e / 128) + e % 64,
 *     shift 4 ((e % 128) / 64)
 *
 * The scales:
 *   Q2_K   byte s: sc = low nibble, m = high nibble.
 *   Q3_K   twelve bytes hold 16 6-bit values v: bits 0-3 of v[s] are the
 *          nibble s / 8 (low, then high) of byte s % 8, bits 4-5 are bits
 *          2 (s / 4) and up of byte 8 + s % 4; sc = v - 32.
 *   Q4_K, Q5_K  twelve bytes hold 8 6-bit scales and 8 6-bit mins: for
 *          s < 4, sc = byte s & 63 and m = byte s + 4 & 63; for s >= 4 the
 *          low four bits come from byte s + 4 (sc its low nibble, m its high)
 *          and the top two from the spare top bits of byte s - 4 (sc) and
 *          byte s (m).
 *   Q6_K   byte s is sc as int8.
 *
 * The arithmetic is f32 with d and dmin widened from f16 exactly.  Every
 * product is exact: d * sc needs at most 11 + 7 significant bits and times q
 * at most 6 more, within f32's 24 and far from its subnormals; so the only
 * rounding is the subtraction of dmin * m in the affine types, and fusing a
 * multiply with it gives the same bits.  test/tools/quant.py computes the same
 * values in numpy.
 */
#include "dtype/dtype_quant.h"
#include "dtype/kquant_layout.h"

#include <stddef.h>
#include <string.h>

#include "base/numeric.h"

static const kquant_layout kquant_layouts[] = {
	{.dt = CBLLM_Q2_K, .bytes = CBLLM_Q2_K_BYTES, .sub = 16, .d_off = 80, .dmin_off = 82, .scales_off = 0,
		.scales = KQ_SCALES_NIBBLES, .scale_max = 15, .scale_min = 0,
	.parts = {{KQ_PLANE_CRUMBS, 16, 2}}, .bias = 0, .qmax = 3},
	{.dt = CBLLM_Q3_K, .bytes = CBLLM_Q3_K_BYTES, .sub = 16, .d_off = 108, .dmin_off = -1, .scales_off = 96,
		.scales = KQ_SCALES_SIX_3, .scale_max = 31, .scale_min = -32,
	.parts = {{KQ_PLANE_CRUMBS, 32, 2}, {KQ_PLANE_BITS, 0, 1}}, .bias = 4, .qmax = 7},
	{.dt = CBLLM_Q4_K, .bytes = CBLLM_Q4_K_BYTES, .sub = 32, .d_off = 0, .dmin_off = 2, .scales_off = 4,
		.scales = KQ_SCALES_SIX_MIN, .scale_max = 63, .scale_min = 0,
	.parts = {{KQ_PLANE_NIBBLES, 16, 4}}, .bias = 0, .qmax = 15},
	{.dt = CBLLM_Q5_K, .bytes = CBLLM_Q5_K_BYTES, .sub = 32, .d_off = 0, .dmin_off = 2, .scales_off = 4,
		.scales = KQ_SCALES_SIX_MIN, .scale_max = 63, .scale_min = 0,
	.parts = {{KQ_PLANE_NIBBLES, 48, 4}, {KQ_PLANE_BITS, 16, 1}}, .bias = 0, .qmax = 31},
	{.dt = CBLLM_Q6_K, .bytes = CBLLM_Q6_K_BYTES, .sub = 16, .d_off = 208, .dmin_off = -1, .scales_off = 192,
		.scales = KQ_SCALES_INT8, .scale_max = 127, .scale_min = -128,
	.parts = {{KQ_PLANE_NIBBLES_6, 0, 4}, {KQ_PLANE_CRUMBS, 128, 2}}, .bias = 32, .qmax = 63},
};

#define N_LAYOUTS ((int) (sizeof(kquant_layouts) / sizeof(kquant_layouts[0])))

/* The row of dt in kquant_layouts. */
const kquant_layout *
cbllm_kquant_layout(cbllm_dtype dt)
{
	for (int i = 0; i < N_LAYOUTS; i++)
		if (kquant_layouts[i].dt == dt)
			return &kquant_layouts[i];
	return NULL;
}

/* The code's planes, low bits first, gathered into q. */
int
cbllm_kquant_code(const kquant_layout *l, const uint8_t *b, int e)
{
	int			q = 0,
				low = 0;

	for (int p = 0; p < 2 && l->parts[p].plane != KQ_PLANE_NONE; p++)
	{
		const kquant_part *part = &l->parts[p];
		int			byte,
					shift;

		kquant_loc(part->plane, e, &byte, &shift);
		q |= ((b[part->offset + byte] >> shift) & ((1 << part->bits) - 1)) << low;
		low += part->bits;
	}
	return q;
}

/* q scattered over the code's planes, low bits first. */
void
cbllm_kquant_put_code(const kquant_layout *l, uint8_t *b, int e, int q)
{
	int			low = 0;

	for (int p = 0; p < 2 && l->parts[p].plane != KQ_PLANE_NONE; p++)
	{
		const kquant_part *part = &l->parts[p];
		int			byte,
					shift;

		kquant_loc(part->plane, e, &byte, &shift);
		b[part->offset + byte] |= (uint8_t) (((q >> low) & ((1 << part->bits) - 1)) << shift);
		low += part->bits;
	}
}

/* Where the 6-bit scale (or, with mins, min) values of the twelve-byte packings are written. */
static void
SixBitPlaces(kquant_scales kind, int s, bool min, int place[2][3])
{
	/* place[k] = {byte, shift, bits}: the low bits first, then the high */
	if (kind == KQ_SCALES_SIX_3)
	{
		place[0][0] = s % 8, place[0][1] = 4 * (s / 8), place[0][2] = 4;
		place[1][0] = 8 + s % 4, place[1][1] = 2 * (s / 4), place[1][2] = 2;
	}
	else if (s < 4)
	{
		place[0][0] = s + (min ? 4 : 0), place[0][1] = 0, place[0][2] = 6;
		place[1][0] = 0, place[1][1] = 0, place[1][2] = 0;
	}
	else
	{
		place[0][0] = s + 4, place[0][1] = min ? 4 : 0, place[0][2] = 4;
		place[1][0] = min ? s : s - 4, place[1][1] = 6, place[1][2] = 2;
	}
}

/* A 6-bit value v written into its places in the scale bytes sb. */
static void
SixBitPut(uint8_t *sb, kquant_scales kind, int s, bool min, int v)
{
	int			place[2][3];

	SixBitPlaces(kind, s, min, place);
	sb[place[0][0]] |= (uint8_t) ((v & ((1 << place[0][2]) - 1)) << place[0][1]);
	sb[place[1][0]] |= (uint8_t) (((v >> place[0][2]) & ((1 << place[1][2]) - 1)) << place[1][1]);
}

/* Sub-block s's scale and min codes packed as the type packs them. */
void
cbllm_kquant_put_scale(const kquant_layout *l, uint8_t *b, int s, int sc, int m)
{
	uint8_t    *sb = b + l->scales_off;

	switch (l->scales)
	{
		case KQ_SCALES_NIBBLES:
			sb[s] = (uint8_t) ((sc & 0x0f) | (m & 0x0f) << 4);
			return;
		case KQ_SCALES_SIX_3:
			SixBitPut(sb, l->scales, s, false, sc + 32);
			return;
		case KQ_SCALES_SIX_MIN:
			SixBitPut(sb, l->scales, s, false, sc);
			SixBitPut(sb, l->scales, s, true, m);
			return;
		case KQ_SCALES_INT8:
			sb[s] = (uint8_t) (int8_t) sc;
			return;
	}
}

/* dst[0, n) = the n / 256 blocks at src of the K-quant type laid out as l. */
static void
KquantToF32(const kquant_layout *l, const uint8_t *b, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n / CBLLM_QK_K; i++, b += l->bytes, dst += CBLLM_QK_K)
	{
		float		d = cbllm_f16_at(b + l->d_off),
					dmin = l->dmin_off >= 0 ? cbllm_f16_at(b + l->dmin_off) : 0.0f;

		for (int s = 0; s < CBLLM_QK_K / l->sub; s++)
		{
			int			sc,
						m;
			float		dl,
						ml;

			cbllm_kquant_scale(l, b, s, &sc, &m);
			dl = d * (float) sc;
			ml = dmin * (float) m;
			for (int e = s * l->sub; e < (s + 1) * l->sub; e++)
			{
				float		x = dl * (float) (cbllm_kquant_code(l, b, e) - l->bias);

				/* the symmetric types subtract nothing, keeping a -0 product */
				dst[e] = l->dmin_off >= 0 ? x - ml : x;
			}
		}
	}
}

/* Q2_K: 2-bit codes, 4-bit scales and mins. */
void
cbllm_q2_k_to_f32(const void *src, float *dst, int64_t n)
{
	KquantToF32(cbllm_kquant_layout(CBLLM_Q2_K), src, dst, n);
}

/* Q3_K: 3-bit codes less 4, 6-bit signed scales. */
void
cbllm_q3_k_to_f32(const void *src, float *dst, int64_t n)
{
	KquantToF32(cbllm_kquant_layout(CBLLM_Q3_K), src, dst, n);
}

/* Q4_K: 4-bit codes, 6-bit scales and mins. */
void
cbllm_q4_k_to_f32(const void *src, float *dst, int64_t n)
{
	KquantToF32(cbllm_kquant_layout(CBLLM_Q4_K), src, dst, n);
}

/* Q5_K: 5-bit codes, 6-bit scales and mins. */
void
cbllm_q5_k_to_f32(const void *src, float *dst, int64_t n)
{
	KquantToF32(cbllm_kquant_layout(CBLLM_Q5_K), src, dst, n);
}

/* Q6_K: 6-bit codes less 32, int8 scales. */
void
cbllm_q6_k_to_f32(const void *src, float *dst, int64_t n)
{
	KquantToF32(cbllm_kquant_layout(CBLLM_Q6_K), src, dst, n);
}
