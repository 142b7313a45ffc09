/*
 * cuda_dtype_traits.h: what the CUDA backend does with each weight type, one
 * row a type (cuda_dtype_traits.c), beside the table of what is true of a
 * type everywhere (dtype/dtype.h).  The backend's upload, its count of device
 * bytes and its products ask the row, never the type.
 *
 * A row's path says how the type runs and which of the kernels' tables must
 * have an entry for it:
 *   CBLLM_CUDA_GEMM     an entry in cuda_gemm.cu's gemm_types
 *   CBLLM_CUDA_QUANT    an entry in cuda_quant.cu's quant_types
 *   CBLLM_CUDA_AS_BF16  none: its matrices are uploaded through the type's
 *                       to_f32 (dtype.h) as BF16, and run as BF16
 * and the type an embedding table has on the device needs an entry in
 * cuda_ops.cu's embed_types.  A type whose row is CBLLM_CUDA_NONE (and a
 * value that is no type) is loaded and then refused by the CUDA backend,
 * naming the type.
 *
 * Plain data and no CUDA: every build compiles cuda_dtype_traits.c (the
 * Makefile), so what the CUDA backend would run can be asked, and tested, in
 * a build without that backend.
 */
#ifndef CBLLM_CUDA_DTYPE_TRAITS_H
#define CBLLM_CUDA_DTYPE_TRAITS_H

#include "dtype/dtype.h"

#ifdef __cplusplus
extern "C"
{
#endif

/* How the CUDA backend runs the matrices of a type. */
typedef enum cbllm_cuda_path
{
	CBLLM_CUDA_NONE = 0,		/* it does not */
	CBLLM_CUDA_GEMM,			/* stored as is; activations converted to the type, cuBLAS GEMM
								 * accumulating in f32 */
	CBLLM_CUDA_AS_BF16,			/* uploaded converted to bf16, then run as BF16 */
	CBLLM_CUDA_QUANT			/* stored as is in its blocks: fused dequantize-and-dot for
								 * decode, bf16 tiles for cuBLAS above (cuda_quant.cu) */
} cbllm_cuda_path;

/* One weight type on the GPU. */
typedef struct cuda_dtype_traits
{
	cbllm_cuda_path path;		/* how the backend runs its matrices */
} cuda_dtype_traits;

/* The CUDA backend's row of dt; for a value that is no type, a row that runs nothing. */
const cuda_dtype_traits *cuda_dtype_traits_of(cbllm_dtype dt);

#ifdef __cplusplus
}
#endif

#endif
