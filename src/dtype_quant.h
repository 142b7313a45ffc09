/*
 * dtype_quant.h: the reference dequantizers of the GGUF block-quantized
 * types, rows of the weight-type table (dtype.c).  dtype_quant.c gives each
 * block's layout.
 */
#ifndef CBLLM_DTYPE_QUANT_H
#define CBLLM_DTYPE_QUANT_H

#include <stdint.h>

/* Bytes of one 32-element block of each type. */
#define CBLLM_QK			32
#define CBLLM_Q8_0_BYTES	34
#define CBLLM_Q4_0_BYTES	18
#define CBLLM_Q4_1_BYTES	20
#define CBLLM_Q5_0_BYTES	22
#define CBLLM_Q5_1_BYTES	24

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

#endif
