/*
 * cuda_attention.cu: causal attention over the paged KV cache, for decode
 * tokens and prefill chunks alike.  One block per (token, head): its threads
 * score every visible key (read through the sequence's block table) into
 * shared memory, the block takes the max and the sum, and then each thread
 * accumulates some of the head's dimensions over the keys.  GQA: head h
 * reads KV head h / (n_heads / n_kv_heads).
 */
#include <cuda_runtime.h>

#include <math.h>

#include "block_reduce.cuh"
#include "cuda_ops.h"

#define ATT_THREADS 128

__global__ static void
AttentionKernel(const float *q, const float *k_cache, const float *v_cache,
				const int32_t *tables, int max_blocks, const int32_t *pos, const int32_t *seq,
				int n_heads, int n_kv_heads, int head_dim, int block_size, int window,
				float scale, float *out)
{
	extern __shared__ float scores[];	/* (max_ctx) */
	int			t = blockIdx.x / n_heads,
				h = blockIdx.x % n_heads;
	int			kvh = h / (n_heads / n_kv_heads);
	int			p = pos[t];
	int			first = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const int32_t *table = tables + (int64_t) seq[t] * max_blocks;
	const float *qv = q + ((int64_t) t * n_heads + h) * head_dim;
	int64_t		stride = (int64_t) n_kv_heads * head_dim;	/* floats between positions */
	float		mx = -INFINITY,
				sum = 0;

	for (int j = first + threadIdx.x; j <= p; j += blockDim.x)
	{
		const float *kr = k_cache + ((int64_t) table[j / block_size] * block_size + j % block_size) *
			stride + (int64_t) kvh * head_dim;
		float		s = 0;

		for (int d = 0; d < head_dim; d++)
			s += qv[d] * kr[d];
		scores[j - first] = s * scale;
		mx = fmaxf(mx, s * scale);
	}
	mx = BlockReduce<ATT_THREADS, true>(mx);
	for (int j = first + threadIdx.x; j <= p; j += blockDim.x)
	{
		float		e = expf(scores[j - first] - mx);

		scores[j - first] = e;
		sum += e;
	}
	sum = BlockReduce<ATT_THREADS, false>(sum);
	for (int d = threadIdx.x; d < head_dim; d += blockDim.x)
	{
		float		acc = 0;

		for (int j = first; j <= p; j++)
			acc += scores[j - first] *
				v_cache[((int64_t) table[j / block_size] * block_size + j % block_size) * stride +
						(int64_t) kvh * head_dim + d];
		out[((int64_t) t * n_heads + h) * head_dim + d] = acc / sum;
	}
}

extern "C" int
cuda_attention(const float *d_q, const float *d_k_cache, const float *d_v_cache,
			   const int32_t *d_tables, int max_blocks, const int32_t *d_pos,
			   const int32_t *d_seq, int T, int n_heads, int n_kv_heads, int head_dim,
			   int block_size, int sliding_window, int max_ctx, float *d_out, cbllm_err *err)
{
	size_t		shared = sizeof(float) * (size_t) (sliding_window > 0 && sliding_window < max_ctx ?
													sliding_window : max_ctx);
	cudaError_t e;

	if (T <= 0)
		return CBLLM_OK;
	if (shared > 200 * 1024)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "cuda_attention: a context of %d positions exceeds the kernel's shared memory",
						  max_ctx);
	if (shared > 48 * 1024 &&
		(e = cudaFuncSetAttribute(AttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
								  (int) shared)) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA attention set-up failed: %s",
						  cudaGetErrorString(e));
	AttentionKernel<<<T * n_heads, ATT_THREADS, shared>>>(d_q, d_k_cache, d_v_cache, d_tables,
														  max_blocks, d_pos, d_seq, n_heads,
														  n_kv_heads, head_dim, block_size,
														  sliding_window,
														  1.0f / sqrtf((float) head_dim), d_out);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA attention failed: %s", cudaGetErrorString(e));
	return CBLLM_OK;
}
