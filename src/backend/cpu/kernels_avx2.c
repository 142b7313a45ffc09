/* kernels_avx2.c: the CPU kernels for AVX2 with FMA and F16C. */
#include <immintrin.h>

/* The lanes of v summed pairwise in a fixed order. */
static inline float
Hsum256(__m256 v)
{
	__m128		s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

#define V __m256
#define VW 8
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(f) _mm256_set1_ps(f)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps((p), (v))
#define V_LOAD_BF16(p) _mm256_castsi256_ps(_mm256_slli_epi32( \
	_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *) (p))), 16))
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (p)))
#define V_STORE_F16(p, v) _mm_storeu_si128((__m128i *) (p), \
	_mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_PREFETCH(p) _mm_prefetch((const char *) (p), _MM_HINT_T0)
#define V_PREFETCH_L2(p) _mm_prefetch((const char *) (p), _MM_HINT_T1)
#define V_HSUM(v) Hsum256(v)
#define MICRO_RO 4
#define MICRO_RT 3

/* the integer words of kernels_quant.inc: 32 codes a step, 8 lanes of 4 (u < 128: no saturation) */
#define QU __m256i
#define QX __m256i
#define Q_STEP 32
#define Q_LOADU(p) _mm256_loadu_si256((const __m256i *) (p))
#define Q_LOADX(p) _mm256_loadu_si256((const __m256i *) (p))
#define Q_DOT_U(u, x) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1))
#define Q_DOT_S(w, x) Q_DOT_U(_mm256_sign_epi8((w), (w)), _mm256_sign_epi8((x), (w)))
#define Q_CVT(p) _mm256_cvtepi32_ps(p)
#define Q_RO 2
#define Q_RT 3
#define KERNELS_NAME cpu_kernels_avx2
#define KERNELS_ISA "avx2"

#include "backend/cpu/kernels_simd.inc"
