/* kernels_avx512.c: the CPU kernels for AVX-512 (F, BW, VL, DQ) with FMA. */
#include <immintrin.h>

#define V __m512
#define VW 16
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(f) _mm512_set1_ps(f)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps((p), (v))
#define V_LOAD_BF16(p) _mm512_castsi512_ps(_mm512_slli_epi32( \
	_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *) (p))), 16))
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (p)))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_PREFETCH(p) _mm_prefetch((const char *) (p), _MM_HINT_T0)
#define V_HSUM(v) _mm512_reduce_add_ps(v)
#define MICRO_RO 4
#define MICRO_RT 6
#define KERNELS_NAME cpu_kernels_avx512
#define KERNELS_ISA "avx512"

#include "kernels_simd.inc"
