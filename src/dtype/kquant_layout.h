/*
 * kquant_layout.h: where a GGUF K-quant block (256 weights) keeps each part,
 * one row per type (dtype_kquant.c), read by the reference dequantizers and
 * written by the quantizers (quantize.c), so the layout is stated once.
 *
 * A block holds an f16 scale d (and, in the affine types, an f16 dmin), the
 * small integer scales (and mins) of its sub-blocks, and each element's code
 * q split over one or two bit planes.  Element e of sub-block s = e / sub is
 *   affine types (Q2_K, Q4_K, Q5_K):    (d * sc[s]) * q - dmin * m[s]
 *   symmetric types (Q3_K, Q6_K):       (d * sc[s]) * (q - bias)
 * where sc[s] is signed in the symmetric types.  dtype_kquant.c's header
 * gives the bit positions.
 */
#ifndef CBLLM_KQUANT_LAYOUT_H
#define CBLLM_KQUANT_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype/dtype.h"

/* How a type packs its sub-block scales (and mins). */
typedef enum kquant_scales
{
	KQ_SCALES_NIBBLES,			/* Q2_K: byte s, scale in the low nibble, min in the high */
	KQ_SCALES_SIX_3,			/* Q3_K: 16 6-bit scales in 12 bytes, stored + 32 */
	KQ_SCALES_SIX_MIN,			/* Q4_K, Q5_K: 8 6-bit scales and 8 6-bit mins in 12 bytes */
	KQ_SCALES_INT8				/* Q6_K: 16 int8 scales */
} kquant_scales;

/* How a bit plane spreads 256 codes over its bytes (kquant_loc gives byte and shift). */
typedef enum kquant_plane
{
	KQ_PLANE_NONE = 0,			/* no such plane */
	KQ_PLANE_CRUMBS,			/* 2 bits: byte 32 (e / 128) + e % 32, shift 2 ((e / 32) % 4) */
	KQ_PLANE_BITS,				/* 1 bit: byte e % 32, shift e / 32 */
	KQ_PLANE_NIBBLES,			/* 4 bits: byte 32 (e / 64) + e % 32, shift 4 ((e / 32) % 2) */
	KQ_PLANE_NIBBLES_6			/* 4 bits (Q6_K): byte 64 (e / 128) + e % 64, shift 4 ((e % 128) / 64) */
} kquant_plane;

/* One bit plane of the codes: q's low bits from the first plane, the next from the second. */
typedef struct kquant_part
{
	kquant_plane plane;
	int			offset;			/* its first byte within the block */
	int			bits;			/* bits per element: 1, 2 or 4 */
} kquant_part;

/* One K-quant type's block. */
typedef struct kquant_layout
{
	cbllm_dtype dt;
	int			bytes;			/* bytes per block */
	int			sub;			/* elements per sub-block: 16 or 32 */
	int			d_off;			/* byte of the f16 d */
	int			dmin_off;		/* byte of the f16 dmin; -1 in the symmetric types */
	int			scales_off;		/* first byte of the packed sub-block scales */
	kquant_scales scales;		/* how they are packed */
	int			scale_max;		/* the largest scale (and min) code: 15, 31, 63 or 127 */
	int			scale_min;		/* the smallest scale code: 0, -32 or -128 */
	kquant_part parts[2];		/* the code's planes, low bits first */
	int			bias;			/* subtracted from the code: 0, 4 or 32 */
	int			qmax;			/* the largest code: 3, 7, 15, 31 or 63 */
} kquant_layout;

/* The layout of the K-quant type dt, or NULL when dt is not one. */
const kquant_layout *cbllm_kquant_layout(cbllm_dtype dt);

/* The byte (from the plane's start) and the shift of element e's bits in a plane. */
static inline void
kquant_loc(kquant_plane plane, int e, int *byte, int *shift)
{
	switch (plane)
	{
		case KQ_PLANE_CRUMBS:
			*byte = 32 * (e / 128) + e % 32;
			*shift = 2 * ((e / 32) % 4);
			return;
		case KQ_PLANE_BITS:
			*byte = e % 32;
			*shift = e / 32;
			return;
		case KQ_PLANE_NIBBLES:
			*byte = 32 * (e / 64) + e % 32;
			*shift = 4 * ((e / 32) % 2);
			return;
		case KQ_PLANE_NIBBLES_6:
			*byte = 64 * (e / 128) + e % 64;
			*shift = 4 * ((e % 128) / 64);
			return;
		case KQ_PLANE_NONE:
			break;
	}
	*byte = 0;
	*shift = 0;
}

/* Element e's code q (before the bias) in the block at b. */
int			cbllm_kquant_code(const kquant_layout *l, const uint8_t *b, int e);

/* Writes code q of element e into the block at b (whose code bytes start zeroed). */
void		cbllm_kquant_put_code(const kquant_layout *l, uint8_t *b, int e, int q);

/*
 * Sub-block s's scale code into *sc and min code into *m (0 in the symmetric
 * types), read straight from the packings dtype_kquant.c's header gives (the
 * CPU kernels unpack every block through it).
 */
static inline void
cbllm_kquant_scale(const kquant_layout *l, const uint8_t *b, int s, int *sc, int *m)
{
	const uint8_t *sb = b + l->scales_off;

	*sc = *m = 0;
	switch (l->scales)
	{
		case KQ_SCALES_NIBBLES:
			*sc = sb[s] & 15;
			*m = sb[s] >> 4;
			return;
		case KQ_SCALES_SIX_3:
			*sc = (((sb[s % 8] >> (4 * (s / 8))) & 15) | (((sb[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
			return;
		case KQ_SCALES_SIX_MIN:
			if (s < 4)
			{
				*sc = sb[s] & 63;
				*m = sb[s + 4] & 63;
			}
			else
			{
				*sc = (sb[s + 4] & 15) | ((sb[s - 4] >> 6) << 4);
				*m = (sb[s + 4] >> 4) | ((sb[s] >> 6) << 4);
			}
			return;
		case KQ_SCALES_INT8:
			*sc = (int8_t) sb[s];
			return;
	}
}

/* Writes sub-block s's scale code sc and min code m into the block at b (scale bytes start zeroed). */
void		cbllm_kquant_put_scale(const kquant_layout *l, uint8_t *b, int s, int sc, int m);

#endif
