/* kernels_generic.c: portable scalar kernels for CPUs without AVX2. */
#include "base/numeric.h"

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

/* Lane sums of four codes each for kernels_quant.inc: unsigned and signed weights. */
static inline int32_t
DotU4(const uint8_t *u, const int8_t *x)
{
	return u[0] * x[0] + u[1] * x[1] + u[2] * x[2] + u[3] * x[3];
}

static inline int32_t
DotS4(const uint8_t *w, const int8_t *x)
{
	return (int8_t) w[0] * x[0] + (int8_t) w[1] * x[1] + (int8_t) w[2] * x[2] + (int8_t) w[3] * x[3];
}

#define V float
#define VW 1
#define V_ZERO() 0.0f
#define V_SET1(f) (f)
#define V_LOAD(p) (*(p))
#define V_STORE(p, v) (*(p) = (v))
#define V_LOAD_BF16(p) LoadBf16(p)
#define V_LOAD_F16(p) LoadF16(p)
#define V_STORE_F16(p, v) (*(p) = cbllm_f32_to_f16(v))
#define V_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#define V_MUL(a, b) ((a) * (b))
#define V_PREFETCH(p) ((void) (p))
#define V_PREFETCH_L2(p) ((void) (p))
#define V_HSUM(v) (v)
#define MICRO_RO 4
#define MICRO_RT 4
#define QU const uint8_t *
#define QX const int8_t *
#define Q_STEP 4
#define Q_LOADU(p) (p)
#define Q_LOADX(p) (p)
#define Q_DOT_U(u, x) DotU4((u), (x))
#define Q_DOT_S(w, x) DotS4((w), (x))
#define Q_CVT(p) ((float) (p))
#define Q_RO 4
#define Q_RT 4
#define KERNELS_NAME cpu_kernels_generic
#define KERNELS_ISA "generic"

#include "backend/cpu/kernels_simd.inc"
