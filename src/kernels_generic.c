/* kernels_generic.c: portable scalar kernels for CPUs without AVX2. */
#include "numeric.h"

/* One bf16 or f16 value widened, read through a pointer like a vector load. */
static inline float
LoadBf16(const uint16_t *p)
{
	return cbllm_bf16_to_f32(*p);
}

static inline float
LoadF16(const uint16_t *p)
{
	return cbllm_f16_to_f32(*p);
}

#define V float
#define VW 1
#define V_ZERO() 0.0f
#define V_SET1(f) (f)
#define V_LOAD(p) (*(p))
#define V_STORE(p, v) (*(p) = (v))
#define V_LOAD_BF16(p) LoadBf16(p)
#define V_LOAD_F16(p) LoadF16(p)
#define V_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#define V_PREFETCH(p) ((void) (p))
#define V_HSUM(v) (v)
#define MICRO_RO 4
#define MICRO_RT 4
#define KERNELS_NAME cpu_kernels_generic
#define KERNELS_ISA "generic"

#include "kernels_simd.inc"
