/*
 * kernels_avx512.c: the CPU kernels for AVX-512 (F, BW, VL, DQ) with FMA;
 * kernels_avx512vnni.c compiles it again with KERNELS_VNNI for vpdpbusd.
 */
#include <immintrin.h>

/*
 * The lanes of each of v[0..15] summed, into sums[0..15]: pairs of vectors
 * folded within 128-bit lanes (unpack, then shuffle), then across them
 * (shuffle_f32x4), 45 operations where sixteen reductions take about 130.
 * Each sum adds only its own vector's lanes, in a fixed tree.
 */
static inline void
Hsum16x512(const __m512 *v, float *sums)
{
	__m512		b[8],
				c[4],
				e0,
				e1;

	for (int i = 0; i < 8; i++)
		b[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
							 _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
	for (int j = 0; j < 4; j++)
		c[j] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
							 _mm512_shuffle_ps(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
	/* c[j], 128-bit lane g: keys 4j..4j+3 over lanes 4g..4g+3 of their vectors */
	e0 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
					   _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
	e1 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
					   _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
	_mm512_storeu_ps(sums, _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(2, 0, 2, 0)),
										 _mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(3, 1, 3, 1))));
}

#define V __m512
#define VW 16
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(f) _mm512_set1_ps(f)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_LOAD_BF16(p) _mm512_castsi512_ps(_mm512_slli_epi32( \
	_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *) (p))), 16))
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (p)))
#define V_STORE_F16(p, v) _mm256_storeu_si256((__m256i *) (p), \
	_mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_PREFETCH(p) _mm_prefetch((const char *) (p), _MM_HINT_T0)
#define V_PREFETCH_L2(p) _mm_prefetch((const char *) (p), _MM_HINT_T1)
#define V_HSUM(v) _mm512_reduce_add_ps(v)
#define V_HSUM16(v, sums) Hsum16x512((v), (sums))
#define MICRO_RO 4
#define MICRO_RT 6
#define F_PACKED 1				/* kernels_float_packed.inc: float matrices as panels */

/* the integer words of kernels_quant.inc: 64 codes a step, 16 lanes of 4 */
#define QU __m512i
#define QX __m512i
#define Q_STEP 64
#define Q_LOADU(p) _mm512_loadu_si512((const void *) (p))
#define Q_LOADX(p) _mm512_loadu_si512((const void *) (p))
#ifdef KERNELS_VNNI
#define Q_DOT_U(u, x) _mm512_dpbusd_epi32(_mm512_setzero_si512(), (u), (x))
#else
#define Q_DOT_U(u, x) _mm512_madd_epi16(_mm512_maddubs_epi16((u), (x)), _mm512_set1_epi16(1))
#endif
/* signed w: |w| times x with w's sign (|-128| is 128 unsigned) */
#define Q_DOT_S(w, x) Q_DOT_U(_mm512_abs_epi8(w), \
	_mm512_mask_sub_epi8((x), _mm512_movepi8_mask(w), _mm512_setzero_si512(), (x)))
#define Q_CVT(p) _mm512_cvtepi32_ps(p)
#define Q_RO 4
#define Q_RT 4
#define Q_FUSED 1				/* kernels_quant_fused.inc: Q4_K, Q5_K, Q6_K, Q8_0, Q4_0 decoded in
								 * registers; the K-quants also in integers over per-256 activations */

#ifndef KERNELS_NAME
#define KERNELS_NAME cpu_kernels_avx512
#define KERNELS_ISA "avx512"
#endif

#include "backend/cpu/kernels_simd.inc"
