/*
 * dtype_quant.h: the reference dequantizers of the GGUF block-quantized
 * types, rows of the weight-type table (dtype.c).  dtype_quant.c gives the
 * layout of each 32-element block (MXFP4's included), dtype_kquant.c that of
 * each 256-element K-quant block.
 */
#ifndef CBLLM_DTYPE_QUANT_H
#define CBLLM_DTYPE_QUANT_H

#include <stdint.h>
#include <string.h>

/* Bytes of one 32-element block of each type. */
#define CBLLM_QK			32
#define CBLLM_Q8_0_BYTES	34
#define CBLLM_Q4_0_BYTES	18
#define CBLLM_Q4_1_BYTES	20
#define CBLLM_Q5_0_BYTES	22
#define CBLLM_Q5_1_BYTES	24
#define CBLLM_MXFP4_BYTES	17		/* an odd size: a block may start at any byte */

/* Bytes of one 256-element block of each K-quant type. */
#define CBLLM_QK_K			256
#define CBLLM_Q2_K_BYTES	84
#define CBLLM_Q3_K_BYTES	110
#define CBLLM_Q4_K_BYTES	144
#define CBLLM_Q5_K_BYTES	176
#define CBLLM_Q6_K_BYTES	210

/*
 * MXFP4's 4-bit codes as the values they stand for, doubled: an E2M1 number
 * (sign, two exponent bits, one mantissa bit) is one of 0, 0.5, 1, 1.5, 2,
 * 3, 4, 6 with its sign, so twice it is a small integer.  Codes 0..7 are the
 * positive ones, 8..15 the same magnitudes negated (8 is a second zero).
 */
extern const int8_t cbllm_mxfp4_values[16];

/*
 * The factor an MXFP4 block's exponent byte e gives its doubled codes:
 * 2^(e - 128), that is half of the E8M0 scale 2^(e - 127), exactly, for
 * every e in [0, 255].  e = 0 and 1 give the subnormals 2^-128 and 2^-127;
 * e = 255 is no NaN here (ggml reads it as any other exponent: 2^127).
 * Built from its bits, so it costs no call to libm.
 */
static inline float
cbllm_mxfp4_scale(uint8_t e)
{
	uint32_t	bits = e >= 2 ? (uint32_t) (e - 1) << 23 : UINT32_C(0x00200000) << e;
	float		f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* dst[0, n) = the n / 32 Q8_0 blocks at src as f32. */
void		cbllm_q8_0_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 32 Q4_0 blocks at src as f32. */
void		cbllm_q4_0_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 32 Q4_1 blocks at src as f32. */
void		cbllm_q4_1_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 32 Q5_0 blocks at src as f32. */
void		cbllm_q5_0_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 32 Q5_1 blocks at src as f32. */
void		cbllm_q5_1_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 32 MXFP4 blocks at src as f32. */
void		cbllm_mxfp4_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 256 Q2_K blocks at src as f32. */
void		cbllm_q2_k_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 256 Q3_K blocks at src as f32. */
void		cbllm_q3_k_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 256 Q4_K blocks at src as f32. */
void		cbllm_q4_k_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 256 Q5_K blocks at src as f32. */
void		cbllm_q5_k_to_f32(const void *src, float *dst, int64_t n);

/* dst[0, n) = the n / 256 Q6_K blocks at src as f32. */
void		cbllm_q6_k_to_f32(const void *src, float *dst, int64_t n);

#endif
