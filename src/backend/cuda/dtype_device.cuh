/*
 * dtype_device.cuh: the weight types (src/dtype/dtype.h) in the kernels: the
 * device element of each float type with its conversions, and the lookup of
 * a kernel family's per-type row.  A .cu file that runs a type keeps a table
 * of rows, each beginning with its cbllm_dtype dt, and finds the row of a
 * type with DtypeRow; a type without a row is refused by that operation.
 */
#ifndef CBLLM_DTYPE_DEVICE_CUH
#define CBLLM_DTYPE_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stddef.h>

#include "dtype/dtype.h"

/* An element read as f32. */
__device__ static inline float
ElemToFloat(float v)
{
	return v;
}

__device__ static inline float
ElemToFloat(__half v)
{
	return __half2float(v);
}

__device__ static inline float
ElemToFloat(__nv_bfloat16 v)
{
	return __bfloat162float(v);
}

/* *p = f rounded to nearest even in p's type. */
__device__ static inline void
StoreFloat(__half *p, float f)
{
	*p = __float2half(f);
}

__device__ static inline void
StoreFloat(__nv_bfloat16 *p, float f)
{
	*p = __float2bfloat16(f);
}

/* The row of dt in rows, whose entries each begin with their dt; NULL when dt has none. */
template <typename Row, size_t N>
static inline const Row *
DtypeRow(const Row (&rows)[N], cbllm_dtype dt)
{
	for (size_t i = 0; i < N; i++)
		if (rows[i].dt == dt)
			return &rows[i];
	return NULL;
}

#endif
