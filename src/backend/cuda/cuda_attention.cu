/*
 * cuda_attention.cu: causal attention over the paged bf16 KV cache, for
 * decode tokens and prefill chunks alike.  One block of ATT_WARPS warps per
 * (token, head), in one pass over the sequence's block table:
 *
 *   1. scores: the warps take turns over runs of ATT_UNROLL visible keys
 *      (whose loads are in flight together); a warp's lanes read each key
 *      row together (lane l holds dims l, l + 32, ...), and a shuffle tree
 *      sums each dot product into shared memory;
 *   2. softmax: a block-wide max and sum over the scores;
 *   3. values: each warp accumulates its keys' value rows weighted by the
 *      scores (lanes again over dims), and the warps' partial sums are added
 *      through shared memory.
 *
 * GQA: head h reads KV head h / (n_heads / n_kv_heads).  The shared memory
 * holds the scores of up to max_ctx keys, so one launch fits every batch of
 * the same token count, which lets CUDA graphs replay it.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"

#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_MAX_DPL 16			/* dims per lane: head_dim <= 512 (the kernel is built for 8
								 * and for 16, the smaller one taken when it fits) */
#define ATT_UNROLL 4			/* keys a warp reads at once */

/* Cache offset (in elements) of position j of a sequence with block table table. */
__device__ static inline int64_t
Slot(const int32_t *table, int j, int block_size)
{
	return (int64_t) table[j / block_size] * block_size + j % block_size;
}

template <int DPL>
__global__ static void
AttentionKernel(const float *q, const __nv_bfloat16 *k_cache, const __nv_bfloat16 *v_cache,
				const int32_t *tables, int max_blocks, const int32_t *pos, const int32_t *seq,
				int n_heads, int n_kv_heads, int head_dim, int block_size, int window,
				int score_cap, float scale, const float *sinks, float *out)
{
	CBLLM_DYN_SHARED(float, smem);
	float	   *scores = smem;	/* (score_cap) */
	float	   *partial = smem + score_cap; /* (ATT_WARPS, head_dim) */
	int			t = blockIdx.x / n_heads,
				h = blockIdx.x % n_heads;
	int			kvh = h / (n_heads / n_kv_heads);
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32;
	int			p = pos[t];
	int			first = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
	const int32_t *table = tables + (int64_t) seq[t] * max_blocks;
	const float *qv = q + ((int64_t) t * n_heads + h) * head_dim;
	int64_t		stride = (int64_t) n_kv_heads * head_dim;	/* elements between positions */
	float		qr[DPL],
				acc[DPL];
	float		mx = -INFINITY,
				sum = 0;

#pragma unroll
	for (int i = 0; i < DPL; i++)
	{
		int			d = lane + 32 * i;

		qr[i] = d < head_dim ? qv[d] * scale : 0.0f;
		acc[i] = 0.0f;
	}
	/* 1. scores of the visible keys, ATT_UNROLL keys per warp at a time so their loads overlap */
	for (int j0 = first + warp * ATT_UNROLL; j0 <= p; j0 += ATT_WARPS * ATT_UNROLL)
	{
		float		s[ATT_UNROLL];

#pragma unroll
		for (int u = 0; u < ATT_UNROLL; u++)
		{
			int			j = j0 + u;

			s[u] = 0;
			if (j <= p)
			{
				const __nv_bfloat16 *kr = k_cache + Slot(table, j, block_size) * stride +
					(int64_t) kvh * head_dim;

#pragma unroll
				for (int i = 0; i < DPL; i++)
				{
					int			d = lane + 32 * i;

					if (d < head_dim)
						s[u] += qr[i] * __bfloat162float(kr[d]);
				}
			}
		}
#pragma unroll
		for (int u = 0; u < ATT_UNROLL; u++)
		{
			for (int o = 16; o > 0; o /= 2)
				s[u] += __shfl_xor_sync(0xffffffff, s[u], o);
			if (lane == 0 && j0 + u <= p)
				scores[j0 + u - first] = s[u];
		}
	}
	__syncthreads();
	/* 2. softmax */
	for (int j = first + (int) threadIdx.x; j <= p; j += ATT_THREADS)
		mx = fmaxf(mx, scores[j - first]);
	mx = BlockReduce<ATT_THREADS, true>(mx);
	if (sinks != NULL)
		mx = fmaxf(mx, sinks[h]);	/* the sink's logit joins the maximum and the sum */
	for (int j = first + (int) threadIdx.x; j <= p; j += ATT_THREADS)
	{
		float		e = expf(scores[j - first] - mx);

		scores[j - first] = e;
		sum += e;
	}
	sum = BlockReduce<ATT_THREADS, false>(sum);	/* its barrier publishes the exponentials */
	if (sinks != NULL && sinks[h] > -INFINITY)
		sum += expf(sinks[h] - mx);
	/* 3. weighted values, each warp over its keys, ATT_UNROLL at a time */
	for (int j0 = first + warp * ATT_UNROLL; j0 <= p; j0 += ATT_WARPS * ATT_UNROLL)
	{
#pragma unroll
		for (int u = 0; u < ATT_UNROLL; u++)
		{
			int			j = j0 + u;

			if (j <= p)
			{
				const __nv_bfloat16 *vr = v_cache + Slot(table, j, block_size) * stride +
					(int64_t) kvh * head_dim;
				float		w = scores[j - first];

#pragma unroll
				for (int i = 0; i < DPL; i++)
				{
					int			d = lane + 32 * i;

					if (d < head_dim)
						acc[i] += w * __bfloat162float(vr[d]);
				}
			}
		}
	}
#pragma unroll
	for (int i = 0; i < DPL; i++)
	{
		int			d = lane + 32 * i;

		if (d < head_dim)
			partial[warp * head_dim + d] = acc[i];
	}
	__syncthreads();
	for (int d = threadIdx.x; d < head_dim; d += ATT_THREADS)
	{
		float		v = 0;

		for (int w = 0; w < ATT_WARPS; w++)
			v += partial[w * head_dim + d];
		out[((int64_t) t * n_heads + h) * head_dim + d] = v / sum;
	}
}

/* The kernel of DPL dims per lane, its shared memory raised where it needs more than 48 KiB. */
template <int DPL>
static cudaError_t
Launch(const float *d_q, const uint16_t *d_k_cache, const uint16_t *d_v_cache,
	   const int32_t *d_tables, int max_blocks, const int32_t *d_pos, const int32_t *d_seq, int T,
	   int n_heads, int n_kv_heads, int head_dim, int block_size, int sliding_window, int cap,
	   size_t shared, float scale, const float *d_sinks, float *d_out, cuda_stream s)
{
	cudaError_t e;

	if (shared > 48 * 1024 &&
		(e = cudaFuncSetAttribute(AttentionKernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
								  (int) shared)) != cudaSuccess)
		return e;
	CBLLM_LAUNCH(AttentionKernel<DPL>, T * n_heads, ATT_THREADS, shared, s, d_q,
				 (const __nv_bfloat16 *) d_k_cache, (const __nv_bfloat16 *) d_v_cache, d_tables,
				 max_blocks, d_pos, d_seq, n_heads, n_kv_heads, head_dim, block_size,
				 sliding_window, cap, scale, d_sinks, d_out);
	return cudaSuccess;
}

extern "C" int
cuda_attention(const float *d_q, const uint16_t *d_k_cache, const uint16_t *d_v_cache,
			   const int32_t *d_tables, int max_blocks, const int32_t *d_pos,
			   const int32_t *d_seq, int T, int n_heads, int n_kv_heads, int head_dim,
			   int block_size, int sliding_window, int max_ctx, float scale, const float *d_sinks,
			   float *d_out, cuda_stream s, cbllm_err *err)
{
	int			cap = sliding_window > 0 && sliding_window < max_ctx ? sliding_window : max_ctx;
	size_t		shared = sizeof(float) * ((size_t) cap + (size_t) ATT_WARPS * head_dim);
	cudaError_t e;

	if (T <= 0)
		return CBLLM_OK;
	if (head_dim > 32 * ATT_MAX_DPL || n_kv_heads <= 0 || n_heads % n_kv_heads != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "cuda_attention: head_dim %d with %d heads and %d KV heads is not supported (head_dim at most %d)",
						  head_dim, n_heads, n_kv_heads, 32 * ATT_MAX_DPL);
	if (shared > 200 * 1024)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "cuda_attention: a context of %d positions exceeds the kernel's shared memory; lower max_model_len",
						  max_ctx);
	if (head_dim <= 32 * 8)
		e = Launch<8>(d_q, d_k_cache, d_v_cache, d_tables, max_blocks, d_pos, d_seq, T, n_heads,
					  n_kv_heads, head_dim, block_size, sliding_window, cap, shared, scale,
					  d_sinks, d_out, s);
	else
		e = Launch<16>(d_q, d_k_cache, d_v_cache, d_tables, max_blocks, d_pos, d_seq, T, n_heads,
					   n_kv_heads, head_dim, block_size, sliding_window, cap, shared, scale,
					   d_sinks, d_out, s);
	if (e != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA attention set-up failed: %s",
						  cudaGetErrorString(e));
	if ((e = cudaGetLastError()) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA attention failed: %s", cudaGetErrorString(e));
	return CBLLM_OK;
}
