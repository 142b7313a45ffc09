/*
 * cuda_gemm.cu: the linear layers on cuBLAS.  y (T, rows) = x (T, cols) @ W^T
 * with W (rows, cols) row-major in bf16 or f16 as stored; x is converted to
 * the weights' type and cuBLAS accumulates in f32 (tensor cores).
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdlib.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dtype_device.cuh"
#include "backend/cuda/launch.cuh"

#define BLAS_WORKSPACE (32u << 20)

/* A cuBLAS handle with a workspace of its own: no allocation happens inside a graph capture. */
typedef struct BlasCtx
{
	cublasHandle_t h;
	void	   *ws;
	cuda_stream stream;			/* the stream last set; setting one resets the workspace */
	bool		stream_set;
} BlasCtx;

/* f32 -> T (bf16 or f16), grid-stride. */
template <typename T>
__global__ static void
ToHalfKernel(const float *x, void *out, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		StoreFloat((T *) out + i, x[i]);
}

/* A weight type that cuBLAS multiplies as stored (CBLLM_CUDA_GEMM in cuda_dtype_traits.c). */
typedef struct gemm_type
{
	cbllm_dtype dt;
	void		(*to_type) (const float *x, void *out, int64_t n);	/* activations into dt */
	cudaDataType_t blas;		/* dt as cuBLAS names it */
} gemm_type;

static const gemm_type gemm_types[] = {
	{CBLLM_F16, ToHalfKernel<__half>, CUDA_R_16F},
	{CBLLM_BF16, ToHalfKernel<__nv_bfloat16>, CUDA_R_16BF},
};

/* A cuBLAS status as a cbllm status. */
static int
CheckBlas(cublasStatus_t s, const char *what, cbllm_err *err)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return CBLLM_OK;
	return cbllm_fail(err, CBLLM_ERR_DEVICE, "cuBLAS %s failed with status %d", what, (int) s);
}

extern "C" void
cuda_blas_destroy(void *handle)
{
	BlasCtx    *b = (BlasCtx *) handle;

	if (b == NULL)
		return;
	if (b->h != NULL)
		(void) cublasDestroy(b->h);
	cuda_free(b->ws);
	free(b);
}

extern "C" int
cuda_blas_create(void **handle, cbllm_err *err)
{
	BlasCtx    *b = (BlasCtx *) calloc(1, sizeof(BlasCtx));
	int			rc;

	if (b == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	if ((rc = CheckBlas(cublasCreate(&b->h), "create", err)) ||
		(rc = cuda_alloc(&b->ws, BLAS_WORKSPACE, err)) ||
		(rc = CheckBlas(cublasSetWorkspace(b->h, b->ws, BLAS_WORKSPACE), "workspace", err)))
	{
		cuda_blas_destroy(b);
		return rc;
	}
	*handle = b;
	return CBLLM_OK;
}

/* d_xh (n elements of dtype) = d_x (n floats). */
extern "C" int
cuda_to_half(const float *d_x, int64_t n, cbllm_dtype dtype, void *d_xh, cuda_stream s,
			 cbllm_err *err)
{
	const gemm_type *g = DtypeRow(gemm_types, dtype);
	void		(*kernel) (const float *, void *, int64_t);
	int			blocks = (int) ((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535);
	cudaError_t e;

	if (n <= 0)
		return CBLLM_OK;
	if (g == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "cuda_to_half: dtype %d is not one cuBLAS multiplies as stored",
						  (int) dtype);
	kernel = g->to_type;
	CBLLM_LAUNCH(kernel, blocks < 1 ? 1 : blocks, 256, 0, s, d_x, d_xh, n);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA convert failed: %s", cudaGetErrorString(e));
	return CBLLM_OK;
}

/*
 * y = x @ W^T.  cuBLAS is column-major: W row-major (rows, cols) is W^T
 * column-major (cols, rows), so y^T (rows, T) = W (rows x cols, read as op T
 * of the column-major (cols, rows)) @ x^T (cols, T); ldy, y's row stride,
 * is y^T's leading dimension.
 */
extern "C" int
cuda_gemm_half_ld(void *handle, const void *d_w, cbllm_dtype dtype, int rows, int cols,
				  const void *d_xh, int T, float *d_y, int ldy, cuda_stream s, cbllm_err *err)
{
	const float alpha = 1.0f,
				beta = 0.0f;
	const gemm_type *g = DtypeRow(gemm_types, dtype);
	BlasCtx    *b = (BlasCtx *) handle;
	int			rc;

	if (T <= 0)
		return CBLLM_OK;
	if (g == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "cuda_matmul: weights of dtype %d are not ones cuBLAS multiplies as stored",
						  (int) dtype);
	if (ldy < rows)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cuda_gemm_half_ld: a row stride of %d under %d rows",
						  ldy, rows);
	if ((!b->stream_set || b->stream != s) &&
		((rc = CheckBlas(cublasSetStream(b->h, s), "SetStream", err)) ||
		 (rc = CheckBlas(cublasSetWorkspace(b->h, b->ws, BLAS_WORKSPACE), "workspace", err))))
		return rc;
	b->stream = s;
	b->stream_set = true;
	return CheckBlas(cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N,
								  rows, T, cols, &alpha,
								  d_w, g->blas, cols,
								  d_xh, g->blas, cols,
								  &beta, d_y, CUDA_R_32F, ldy,
								  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
					 "GemmEx", err);
}

extern "C" int
cuda_gemm_half(void *handle, const void *d_w, cbllm_dtype dtype, int rows, int cols,
			   const void *d_xh, int T, float *d_y, cuda_stream s, cbllm_err *err)
{
	return cuda_gemm_half_ld(handle, d_w, dtype, rows, cols, d_xh, T, d_y, rows, s, err);
}

extern "C" int
cuda_matmul(void *handle, const void *d_w, cbllm_dtype dtype, int rows, int cols,
			const float *d_x, int T, void *d_xh, float *d_y, cuda_stream s, cbllm_err *err)
{
	int			rc = cuda_to_half(d_x, (int64_t) T * cols, dtype, d_xh, s, err);

	return rc ? rc : cuda_gemm_half(handle, d_w, dtype, rows, cols, d_xh, T, d_y, s, err);
}
