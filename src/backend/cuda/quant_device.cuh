/*
 * quant_device.cuh: the GGUF block types (src/dtype/dtype.h) decoded on the device,
 * eight elements at a time.  One struct per type gives its block's elements
 * (QK) and bytes, and Decode8(b, g, v): v[0, 8) = elements [8g, 8g + 8) of
 * the block at b, as f32.
 *
 * Every value is the reference dequantizer's (dtype_quant.c, dtype_kquant.c,
 * with the byte places of kquant_layout.h's rows) bit for bit: the same
 * products and differences in the same order, rounded one by one (__fmul_rn,
 * __fsub_rn: nvcc would otherwise fuse them into one multiply-add).
 * test_cuda_quant compares every type with cbllm_to_f32.
 *
 * The types with f16 fields have even block sizes, so their blocks start at
 * even bytes and those fields are read as aligned halves; any wider field is
 * read byte by byte.  MXFP4's blocks are 17 bytes, so they start at any
 * byte: it has no field wider than a byte.
 */
#ifndef CBLLM_QUANT_DEVICE_CUH
#define CBLLM_QUANT_DEVICE_CUH

#include <cuda_fp16.h>

#include <stdint.h>

/* The f16 at byte off of a block (off even). */
__device__ static inline float
HalfAt(const uint8_t *b, int off)
{
	return __half2float(__ushort_as_half(*(const unsigned short *) (b + off)));
}

/* (q - bias) * d, and + m in the affine types (a product alone keeps its -0). */
__device__ static inline float
Affine(int q, float d)
{
	return __fmul_rn((float) q, d);
}

/* Q8_0: f16 d, 32 int8 codes; x = q * d. */
struct QBlockQ8_0
{
	static constexpr int QK = 32;
	static constexpr int BYTES = 34;

	__device__ static inline void Decode8(const uint8_t *b, int g, float *v)
	{
		float		d = HalfAt(b, 0);

		for (int i = 0; i < 8; i++)
			v[i] = Affine((int8_t) b[2 + 8 * g + i], d);
	}
};

/*
 * The 32-element nibble types: f16 d, [f16 m], [32 fifth bits, little
 * endian], 16 bytes of nibbles (element j < 16 the low nibble of byte j, j >=
 * 16 the high one of byte j - 16); x = (q - BIAS) * d, or q * d + m.
 */
template <int BYTES_, bool HAS_M, bool HAS_QH, int BIAS>
struct QBlockNibbles
{
	static constexpr int QK = 32;
	static constexpr int BYTES = BYTES_;

	__device__ static inline void Decode8(const uint8_t *b, int g, float *v)
	{
		float		d = HalfAt(b, 0),
					m = HAS_M ? HalfAt(b, 2) : 0.0f;
		const uint8_t *p = b + (HAS_M ? 4 : 2);
		const uint8_t *qs = p + (HAS_QH ? 4 : 0);
		int			j0 = 8 * g;
		/* the fifth bits of elements j0..j0+7: byte j0 / 8 of the word */
		unsigned	qh = HAS_QH ? p[j0 / 8] : 0;

		for (int i = 0; i < 8; i++)
		{
			int			j = j0 + i,
						q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int) ((qh >> i) & 1) << 4;
			float		x = Affine(q - BIAS, d);

			v[i] = HAS_M ? __fadd_rn(x, m) : x;
		}
	}
};

typedef QBlockNibbles<18, false, false, 8> QBlockQ4_0;
typedef QBlockNibbles<20, true, false, 0> QBlockQ4_1;
typedef QBlockNibbles<22, false, true, 16> QBlockQ5_0;
typedef QBlockNibbles<24, true, true, 0> QBlockQ5_1;

/*
 * MXFP4: an exponent byte e, then 16 bytes of 4-bit E2M1 codes in Q4_0's two
 * halves; x = K[q] * 2^(e - 128), K[q] twice the code's value (dtype_quant.h,
 * cbllm_mxfp4_values).  The factor is built from its bits as
 * cbllm_mxfp4_scale builds it (subnormal for e < 2), and K[q] times it is
 * exact, so the product is the reference's.
 */
struct QBlockMXFP4
{
	static constexpr int QK = 32;
	static constexpr int BYTES = 17;

	/* K[q]: the magnitudes 0, 1, 2, 3, 4, 6, 8, 12 of codes 0..7 a byte each, negated for codes 8..15 */
	__device__ static inline int Value(int q)
	{
		int			m = (int) ((0x0c08060403020100ull >> (8 * (q & 7))) & 0xff);

		return q & 8 ? -m : m;
	}
	__device__ static inline void Decode8(const uint8_t *b, int g, float *v)
	{
		unsigned	e = b[0];
		float		d = __uint_as_float(e >= 2 ? (e - 1) << 23 : 0x00200000u << e);

		for (int i = 0; i < 8; i++)
		{
			int			j = 8 * g + i,
						q = j < 16 ? b[1 + j] & 15 : b[1 + j - 16] >> 4;

			v[i] = __fmul_rn((float) Value(q), d);
		}
	}
};

/*
 * The K-quants: 256 elements; sub-block s = e / SUB has scale sc and (affine
 * types) min m; x = (d * sc) * (q - bias) [- dmin * m].  The eight elements of
 * a group share their sub-block and sit in consecutive bytes of every plane.
 */
template <typename K>
struct QBlockK
{
	static constexpr int QK = 256;
	static constexpr int BYTES = K::BYTES;

	__device__ static inline void Decode8(const uint8_t *b, int g, float *v)
	{
		int			e0 = 8 * g,
					sc,
					m;
		float		dl,
					ml;

		K::Scale(b, e0 / K::SUB, &sc, &m);
		dl = __fmul_rn(HalfAt(b, K::D_OFF), (float) sc);
		ml = K::AFFINE ? __fmul_rn(HalfAt(b, K::DMIN_OFF), (float) m) : 0.0f;
		for (int i = 0; i < 8; i++)
		{
			float		x = __fmul_rn(dl, (float) (K::Code(b, e0 + i) - K::BIAS));

			v[i] = K::AFFINE ? __fsub_rn(x, ml) : x;
		}
	}
};

/* 2 bits of element e in a plane of crumbs at off: byte 32 (e / 128) + e % 32, shift 2 ((e / 32) % 4). */
__device__ static inline int
Crumb(const uint8_t *b, int off, int e)
{
	return (b[off + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
}

/* 1 bit of element e in a plane of bits at off: byte e % 32, shift e / 32. */
__device__ static inline int
Bit(const uint8_t *b, int off, int e)
{
	return (b[off + e % 32] >> (e / 32)) & 1;
}

/* 4 bits of element e in a plane of nibbles at off: byte 32 (e / 64) + e % 32, shift 4 ((e / 32) % 2). */
__device__ static inline int
Nibble(const uint8_t *b, int off, int e)
{
	return (b[off + 32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 15;
}

/* 8 6-bit scales and 8 6-bit mins in 12 bytes at b + 4 (Q4_K, Q5_K). */
__device__ static inline void
SixWithMin(const uint8_t *b, int s, int *sc, int *m)
{
	const uint8_t *sb = b + 4;

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
}

struct KQ2
{
	static constexpr int BYTES = 84, SUB = 16, D_OFF = 80, DMIN_OFF = 82, BIAS = 0;
	static constexpr bool AFFINE = true;

	__device__ static inline void Scale(const uint8_t *b, int s, int *sc, int *m)
	{
		*sc = b[s] & 15;
		*m = b[s] >> 4;
	}
	__device__ static inline int Code(const uint8_t *b, int e)
	{
		return Crumb(b, 16, e);
	}
};

struct KQ3
{
	static constexpr int BYTES = 110, SUB = 16, D_OFF = 108, DMIN_OFF = -1, BIAS = 4;
	static constexpr bool AFFINE = false;

	__device__ static inline void Scale(const uint8_t *b, int s, int *sc, int *m)
	{
		const uint8_t *sb = b + 96;

		*sc = (((sb[s % 8] >> (4 * (s / 8))) & 15) | (((sb[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
		*m = 0;
	}
	__device__ static inline int Code(const uint8_t *b, int e)
	{
		return Crumb(b, 32, e) | Bit(b, 0, e) << 2;
	}
};

struct KQ4
{
	static constexpr int BYTES = 144, SUB = 32, D_OFF = 0, DMIN_OFF = 2, BIAS = 0;
	static constexpr bool AFFINE = true;

	__device__ static inline void Scale(const uint8_t *b, int s, int *sc, int *m)
	{
		SixWithMin(b, s, sc, m);
	}
	__device__ static inline int Code(const uint8_t *b, int e)
	{
		return Nibble(b, 16, e);
	}
};

struct KQ5
{
	static constexpr int BYTES = 176, SUB = 32, D_OFF = 0, DMIN_OFF = 2, BIAS = 0;
	static constexpr bool AFFINE = true;

	__device__ static inline void Scale(const uint8_t *b, int s, int *sc, int *m)
	{
		SixWithMin(b, s, sc, m);
	}
	__device__ static inline int Code(const uint8_t *b, int e)
	{
		return Nibble(b, 48, e) | Bit(b, 16, e) << 4;
	}
};

struct KQ6
{
	static constexpr int BYTES = 210, SUB = 16, D_OFF = 208, DMIN_OFF = -1, BIAS = 32;
	static constexpr bool AFFINE = false;

	__device__ static inline void Scale(const uint8_t *b, int s, int *sc, int *m)
	{
		*sc = (int8_t) b[192 + s];
		*m = 0;
	}
	/* the low nibbles: byte 64 (e / 128) + e % 64, shift 4 ((e % 128) / 64); the high crumbs at 128 */
	__device__ static inline int Code(const uint8_t *b, int e)
	{
		int			lo = (b[64 * (e / 128) + e % 64] >> (4 * ((e % 128) / 64))) & 15;

		return lo | Crumb(b, 128, e) << 4;
	}
};

typedef QBlockK<KQ2> QBlockQ2_K;
typedef QBlockK<KQ3> QBlockQ3_K;
typedef QBlockK<KQ4> QBlockQ4_K;
typedef QBlockK<KQ5> QBlockQ5_K;
typedef QBlockK<KQ6> QBlockQ6_K;

#endif
