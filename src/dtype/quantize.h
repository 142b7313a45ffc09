/*
 * quantize.h: f32 rows quantized into the GGUF block types (quantize.c),
 * for load-time quantization of float checkpoints.  Each producible type's
 * row in the weight-type table (dtype.h) names its block quantizer as
 * from_f32; cbllm_quantize_row is the checked entry point.
 */
#ifndef CBLLM_QUANTIZE_H
#define CBLLM_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"
#include "dtype/dtype.h"

/*
 * dst = the n values at src quantized as dt (cbllm_dtype_row_bytes(dt, n)
 * bytes).  CBLLM_ERR_INVALID, naming the cause, when dt has no quantizer, n
 * is not a whole number of blocks, a value is NaN or infinite, or a block's
 * values are too large for the type's f16 scales (MXFP4 takes every finite
 * value); dst is then unspecified.
 */
int			cbllm_quantize_row(cbllm_dtype dt, const float *src, void *dst, int64_t n, cbllm_err *err);

/*
 * The block quantizers of the table's from_f32: one block of finite values
 * at src into dst; false when a scale of the block exceeds f16's range
 * (MXFP4 has none: always true).
 */
bool		cbllm_q8_0_from_f32(const float *src, void *dst);
bool		cbllm_q4_0_from_f32(const float *src, void *dst);
bool		cbllm_q4_1_from_f32(const float *src, void *dst);
bool		cbllm_q5_0_from_f32(const float *src, void *dst);
bool		cbllm_q5_1_from_f32(const float *src, void *dst);
bool		cbllm_q2_k_from_f32(const float *src, void *dst);
bool		cbllm_q3_k_from_f32(const float *src, void *dst);
bool		cbllm_q4_k_from_f32(const float *src, void *dst);
bool		cbllm_q5_k_from_f32(const float *src, void *dst);
bool		cbllm_q6_k_from_f32(const float *src, void *dst);
bool		cbllm_mxfp4_from_f32(const float *src, void *dst);

#endif
