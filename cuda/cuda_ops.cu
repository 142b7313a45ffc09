/*
 * cuda_ops.cu: elementwise and row kernels of the CUDA backend: RMSNorm,
 * SiLU-and-multiply, residual add, RoPE, embedding lookup, argmax.  One
 * block per row for the row kernels (a warp-shuffle tree then shared memory
 * across warps); a grid-stride loop for the elementwise ones.  Every CUDA
 * call is checked and turned into a status code with a message.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>

#include "block_reduce.cuh"
#include "cuda_ops.h"

#define ROW_THREADS 256

/* Turn the last CUDA error into a status; what names the call. */
static int
Check(cudaError_t e, const char *what, cbllm_err *err)
{
	if (e == cudaSuccess)
		return CBLLM_OK;
	return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA %s failed: %s", what, cudaGetErrorString(e));
}

/* Status of the kernel just launched. */
static int
CheckLaunch(const char *what, cbllm_err *err)
{
	return Check(cudaGetLastError(), what, err);
}

/* Blocks for a grid-stride loop over n elements. */
static int
GridFor(int64_t n)
{
	int64_t		b = (n + 255) / 256;

	return (int) (b < 1 ? 1 : b > 65535 ? 65535 : b);
}

extern "C" int
cuda_device_count(void)
{
	int			n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
	{
		(void) cudaGetLastError();	/* clear it: no device or no driver */
		return 0;
	}
	return n;
}

extern "C" int
cuda_alloc(void **d_ptr, size_t bytes, cbllm_err *err)
{
	size_t		free_b = 0,
				total_b = 0;
	cudaError_t e = cudaMalloc(d_ptr, bytes);

	if (e == cudaSuccess)
		return CBLLM_OK;
	(void) cudaGetLastError();
	(void) cudaMemGetInfo(&free_b, &total_b);
	return cbllm_fail(err, CBLLM_ERR_NOMEM,
					  "CUDA out of memory: %zu MiB needed, %zu MiB free of %zu MiB (%s)",
					  bytes >> 20, free_b >> 20, total_b >> 20, cudaGetErrorString(e));
}

extern "C" void
cuda_free(void *d_ptr)
{
	if (d_ptr != NULL)
		(void) cudaFree(d_ptr);
}

extern "C" int
cuda_upload(void *d_dst, const void *src, size_t bytes, cbllm_err *err)
{
	return Check(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice), "upload", err);
}

extern "C" int
cuda_download(void *dst, const void *d_src, size_t bytes, cbllm_err *err)
{
	return Check(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost), "download", err);
}

extern "C" int
cuda_copy(void *d_dst, const void *d_src, size_t bytes, cbllm_err *err)
{
	return Check(cudaMemcpy(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice), "copy", err);
}

__global__ static void
RmsnormKernel(const float *x, const float *w, int dim, float eps, float *out)
{
	const float *xr = x + (int64_t) blockIdx.x * dim;
	float	   *o = out + (int64_t) blockIdx.x * dim;
	float		ss = 0;
	float		scale;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		ss += xr[i] * xr[i];
	ss = BlockReduce<ROW_THREADS, false>(ss);
	scale = rsqrtf(ss / dim + eps);
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		o[i] = xr[i] * scale * w[i];
}

extern "C" int
cuda_rmsnorm(const float *d_x, const float *d_w, int T, int dim, float eps, float *d_out,
			 cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	RmsnormKernel<<<T, ROW_THREADS>>>(d_x, d_w, dim, eps, d_out);
	return CheckLaunch("rmsnorm", err);
}

__global__ static void
SiluMulKernel(float *gate, const float *up, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		float		g = gate[i];

		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

extern "C" int
cuda_silu_mul(float *d_gate, const float *d_up, int64_t n, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	SiluMulKernel<<<GridFor(n), 256>>>(d_gate, d_up, n);
	return CheckLaunch("silu_mul", err);
}

__global__ static void
AddKernel(float *x, const float *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] += y[i];
}

extern "C" int
cuda_add(float *d_x, const float *d_y, int64_t n, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	AddKernel<<<GridFor(n), 256>>>(d_x, d_y, n);
	return CheckLaunch("add", err);
}

/* One block per token, threads over (head, pair). */
__global__ static void
RopeKernel(float *x, const float *cs, const float *sn, int n_heads, int head_dim)
{
	int			t = blockIdx.x,
				half = head_dim / 2;
	const float *c = cs + (int64_t) t * half;
	const float *s = sn + (int64_t) t * half;

	for (int k = threadIdx.x; k < n_heads * half; k += blockDim.x)
	{
		int			h = k / half,
					i = k % half;
		float	   *v = x + ((int64_t) t * n_heads + h) * head_dim;
		float		a = v[i],
					b = v[i + half];

		v[i] = a * c[i] - b * s[i];
		v[i + half] = b * c[i] + a * s[i];
	}
}

extern "C" int
cuda_rope(float *d_x, const float *d_cos, const float *d_sin, int T, int n_heads, int head_dim,
		  cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	RopeKernel<<<T, ROW_THREADS>>>(d_x, d_cos, d_sin, n_heads, head_dim);
	return CheckLaunch("rope", err);
}

__global__ static void
EmbedKernel(const void *emb, int dtype, int dim, const int32_t *tokens, float *x)
{
	int64_t		row = tokens[blockIdx.x];
	float	   *o = x + (int64_t) blockIdx.x * dim;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
	{
		int64_t		k = row * dim + i;

		o[i] = dtype == 0 ? ((const float *) emb)[k] :
			dtype == 1 ? __half2float(((const __half *) emb)[k]) :
			__bfloat162float(((const __nv_bfloat16 *) emb)[k]);
	}
}

extern "C" int
cuda_embed(const void *d_emb, int dtype, int dim, const int32_t *d_tokens, int T, float *d_x,
		   cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	if (dtype < 0 || dtype > 2)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "embed: unknown dtype %d", dtype);
	EmbedKernel<<<T, ROW_THREADS>>>(d_emb, dtype, dim, d_tokens, d_x);
	return CheckLaunch("embed", err);
}

/* One block per row: each thread scans a strided slice, then a shared-memory tree; ties keep the lower index. */
__global__ static void
ArgmaxKernel(const float *logits, int n, int32_t *out)
{
	__shared__ float best_v[ROW_THREADS];
	__shared__ int best_i[ROW_THREADS];
	const float *row = logits + (int64_t) blockIdx.x * n;
	float		bv = -INFINITY;
	int			bi = n;

	for (int i = threadIdx.x; i < n; i += blockDim.x)
		if (row[i] > bv || (row[i] == bv && i < bi))
		{
			bv = row[i];
			bi = i;
		}
	best_v[threadIdx.x] = bv;
	best_i[threadIdx.x] = bi;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s /= 2)
	{
		if (threadIdx.x < s)
		{
			float		ov = best_v[threadIdx.x + s];
			int			oi = best_i[threadIdx.x + s];

			if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x]))
			{
				best_v[threadIdx.x] = ov;
				best_i[threadIdx.x] = oi;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[blockIdx.x] = best_i[0] < n ? best_i[0] : 0;
}

extern "C" int
cuda_argmax(const float *d_logits, int rows, int n, int32_t *d_out, cbllm_err *err)
{
	if (rows <= 0)
		return CBLLM_OK;
	ArgmaxKernel<<<rows, ROW_THREADS>>>(d_logits, n, d_out);
	return CheckLaunch("argmax", err);
}

/* One block per token: copy its k and v rows into their cache slots. */
__global__ static void
KvStoreKernel(float *k_cache, float *v_cache, const float *k, const float *v,
			  const int64_t *slots, int64_t row)
{
	int64_t		dst = slots[blockIdx.x] * row;
	int64_t		src = (int64_t) blockIdx.x * row;

	for (int64_t i = threadIdx.x; i < row; i += blockDim.x)
	{
		k_cache[dst + i] = k[src + i];
		v_cache[dst + i] = v[src + i];
	}
}

extern "C" int
cuda_kv_store(float *d_k_cache, float *d_v_cache, const float *d_k, const float *d_v,
			  const int64_t *d_slots, int T, int64_t row, cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	KvStoreKernel<<<T, ROW_THREADS>>>(d_k_cache, d_v_cache, d_k, d_v, d_slots, row);
	return CheckLaunch("kv_store", err);
}
