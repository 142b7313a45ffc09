/*
 * cuda_dtype_traits.c: the CUDA backend's table of weight types
 * (cuda_dtype_traits.h says what a row must give).
 */
#include "backend/cuda/cuda_dtype_traits.h"

static const cuda_dtype_traits cuda_dtype_table[CBLLM_DTYPE_COUNT] = {
	[CBLLM_F32] = {.path = CBLLM_CUDA_AS_BF16},
	[CBLLM_F16] = {.path = CBLLM_CUDA_GEMM},
	[CBLLM_BF16] = {.path = CBLLM_CUDA_GEMM},
	[CBLLM_Q8_0] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q4_0] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q4_1] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q5_0] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q5_1] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q2_K] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q3_K] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q4_K] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q5_K] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_Q6_K] = {.path = CBLLM_CUDA_QUANT},
	[CBLLM_MXFP4] = {.path = CBLLM_CUDA_QUANT},
};

/* What a value that is no type answers with. */
static const cuda_dtype_traits cuda_dtype_unknown = {.path = CBLLM_CUDA_NONE};

/* The row of dt, or the unknown row. */
const cuda_dtype_traits *
cuda_dtype_traits_of(cbllm_dtype dt)
{
	return (unsigned) dt < CBLLM_DTYPE_COUNT ? &cuda_dtype_table[dt] : &cuda_dtype_unknown;
}
