/*
 * dtype_quant.h: the reference dequantizers of the GGUF block-quantized
 * types, rows of the weight-type table (dtype.c).  dtype_quant.c gives the
 * layout of each 32-element block, dtype_kquant.c that of each 256-element
 * K-quant block.
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

/* Bytes of one 256-element block of each K-quant type. */
#define CBLLM_QK_K			256
#define CBLLM_Q2_K_BYTES	84
#define CBLLM_Q3_K_BYTES	110
#define CBLLM_Q4_K_BYTES	144
#define CBLLM_Q5_K_BYTES	176
#define CBLLM_Q6_K_BYTES	210

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
