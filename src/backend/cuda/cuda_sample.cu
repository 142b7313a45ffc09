/*
 * cuda_sample.cu: choosing each row's next token on the device, so that only
 * token ids come back to the host.  One block per logits row.
 *
 * Logits are compared through an order-preserving 32-bit key (NaN counts as
 * -inf), and probabilities are fixed-point integers (exp(...) * 2^40), so
 * every sum is exact and the choice is the same on every run: a seeded
 * request stays reproducible.  Without sorting, the row is cut by two radix
 * selections (four passes of 8 bits over the keys, with shared-memory
 * histograms):
 *
 *   top-k: the largest key K whose count of keys >= K reaches k; of the
 *          tokens exactly at K, the lowest ids make up the count;
 *   top-p: among those, the largest key P whose probability mass of keys
 *          >= P reaches top_p of the total; again the lowest ids at P fill
 *          up the mass, so the set is the smallest one of most likely tokens;
 *
 * and the draw u * mass is located by one pass in id order: each thread sums
 * a contiguous range, a block scan finds the range, and its thread walks it.
 */
#include <cuda_runtime.h>

#include <math.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"

#define SAMPLE_THREADS 256
#define FIXED_ONE 1099511627776.0	/* 2^40: probability 1 in fixed point */

typedef unsigned long long u64;

/* An unsigned key with the order of the floats; NaN sorts as -inf. */
__device__ static inline unsigned
Key(float x)
{
	unsigned	u;

	if (isnan(x))
		x = -INFINITY;
	u = __float_as_uint(x);
	return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Shared state of one row's selection. */
struct SampleShared
{
	u64			hist[256];
	u64			scan[SAMPLE_THREADS];
	u64			best;			/* packed (key, ~id) maximum */
	u64			total;
	u64			above;
	u64			at;				/* weight exactly at the selected key */
	unsigned	prefix;
	int			found;
};

/* The row's argmax: the largest key, the lowest id among equals. */
__device__ static int
RowArgmax(SampleShared *sh, const float *x, int n)
{
	u64			best = 0;

	if (threadIdx.x == 0)
		sh->best = 0;
	__syncthreads();
	for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS)
	{
		u64			v = ((u64) Key(x[i]) << 32) | (u64) (0xffffffffu - (unsigned) i);

		best = v > best ? v : best;
	}
	atomicMax(&sh->best, best);
	__syncthreads();
	best = sh->best;
	__syncthreads();
	return (int) (0xffffffffu - (unsigned) (best & 0xffffffffu));
}

/* The weight of token i in a pass: selects and weighs the tokens. */
struct Weigher
{
	const float *x;
	float		mx;
	float		inv_temp;
	unsigned	k_key;			/* top-k cut: keys above, or at it with id <= k_cut */
	int			k_cut;
	unsigned	p_key;			/* top-p cut, likewise */
	int			p_cut;
	int			mode;			/* 0: count all; 1: ties at k_key; 2: kept mass; 3: kept mass at p_key; 4: nucleus mass */

	__device__ u64
	operator() (int i) const
	{
		unsigned	k = Key(x[i]);
		bool		kept = k > k_key || (k == k_key && i <= k_cut);
		u64			p;

		if (mode == 0)
			return 1;
		if (mode == 1)
			return k == k_key ? 1 : 0;
		if (!kept)
			return 0;
		if (mode == 3 && k != p_key)
			return 0;
		if (mode == 4 && !(k > p_key || (k == p_key && i <= p_cut)))
			return 0;
		if (isnan(x[i]))
			return 0;			/* as -inf: no mass */
		p = (u64) ((double) expf((x[i] - mx) * inv_temp) * FIXED_ONE);
		return p;
	}
};

/* Sum of the weights over the row, to every thread. */
__device__ static u64
RowSum(SampleShared *sh, const Weigher &w, int n)
{
	u64			s = 0,
				r;

	if (threadIdx.x == 0)
		sh->total = 0;
	__syncthreads();
	for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS)
		s += w(i);
	atomicAdd(&sh->total, s);
	__syncthreads();
	r = sh->total;
	__syncthreads();
	return r;
}

/*
 * The largest key K with weight(keys >= K) >= target; sets sh->above to
 * weight(keys > K) and sh->at to weight(key == K).
 */
__device__ static unsigned
RadixSelect(SampleShared *sh, const Weigher &w, int n, u64 target)
{
	unsigned	prefix = 0,
				mask = 0;
	u64			above = 0;

	for (int shift = 24; shift >= 0; shift -= 8)
	{
		for (int b = threadIdx.x; b < 256; b += SAMPLE_THREADS)
			sh->hist[b] = 0;
		__syncthreads();
		for (int i = threadIdx.x; i < n; i += SAMPLE_THREADS)
		{
			unsigned	k = Key(w.x[i]);

			if ((k & mask) == prefix)
			{
				u64			v = w(i);

				if (v != 0)
					atomicAdd(&sh->hist[(k >> shift) & 255u], v);
			}
		}
		__syncthreads();
		if (threadIdx.x == 0)
		{
			int			b = 255;

			while (b > 0 && above + sh->hist[b] < target)
				above += sh->hist[b--];
			sh->prefix = prefix | ((unsigned) b << shift);
			sh->above = above;
			sh->at = sh->hist[b];
		}
		__syncthreads();
		prefix = sh->prefix;
		mask |= 255u << shift;
		__syncthreads();
	}
	return prefix;
}

/*
 * The smallest id c whose prefix sum of weights (ids <= c) reaches target;
 * n - 1 when the total stays below it.
 */
__device__ static int
FindPrefix(SampleShared *sh, const Weigher &w, int n, u64 target)
{
	int			per = (n + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
	int			lo = threadIdx.x * per,
				hi = lo + per < n ? lo + per : n;
	u64			s = 0,
				excl;
	int			r;

	for (int i = lo; i < hi; i++)
		s += w(i);
	sh->scan[threadIdx.x] = s;
	if (threadIdx.x == 0)
		sh->found = n - 1;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		u64			acc = 0;

		for (int t = 0; t < SAMPLE_THREADS; t++)
		{
			u64			v = sh->scan[t];

			sh->scan[t] = acc;
			acc += v;
		}
	}
	__syncthreads();
	excl = sh->scan[threadIdx.x];
	if (excl < target && excl + s >= target)
		for (int i = lo; i < hi; i++)
		{
			excl += w(i);
			if (excl >= target)
			{
				sh->found = i;
				break;
			}
		}
	__syncthreads();
	r = sh->found;
	__syncthreads();
	return r;
}

__global__ static void
SampleKernel(const float *logits, int n, int stride, const sampler_row *params, int32_t *out)
{
	__shared__ SampleShared sh;
	const float *x = logits + (int64_t) blockIdx.x * stride;
	sampler_params pr = params[blockIdx.x].controls;
	float		pr_u = params[blockIdx.x].u;
	int			best = RowArgmax(&sh, x, n);
	Weigher		w;
	u64			total,
				r;

	if (pr.temperature <= 0.0f || pr.top_k == 1 || !isfinite(x[best]))
	{
		if (threadIdx.x == 0)
			out[blockIdx.x] = best;
		return;
	}
	w.x = x;
	w.mx = x[best];
	w.inv_temp = 1.0f / pr.temperature;
	w.k_key = 0;
	w.k_cut = n - 1;
	w.p_key = 0;
	w.p_cut = n - 1;
	if (pr.top_k > 0 && pr.top_k < n)
	{
		w.mode = 0;
		w.k_key = RadixSelect(&sh, w, n, (u64) pr.top_k);
		if (sh.above + sh.at > (u64) pr.top_k)
		{
			/* more tokens tie at the cut than are needed: the lowest ids */
			w.mode = 1;
			w.k_cut = FindPrefix(&sh, w, n, (u64) pr.top_k - sh.above);
		}
	}
	w.mode = 2;
	total = RowSum(&sh, w, n);
	if (pr.top_p < 1.0f)
	{
		u64			need = (u64) ((double) total * pr.top_p);

		need = need < 1 ? 1 : need;
		w.p_key = RadixSelect(&sh, w, n, need);
		if (sh.above + sh.at > need)
		{
			u64			rest = need - sh.above;

			w.mode = 3;
			w.p_cut = FindPrefix(&sh, w, n, rest);
		}
		w.mode = 4;
		total = RowSum(&sh, w, n);
	}
	r = (u64) ((double) pr_u * (double) total);
	r = r >= total ? total - 1 : r;
	best = FindPrefix(&sh, w, n, r + 1);
	if (threadIdx.x == 0)
		out[blockIdx.x] = best;
}

/* Greedy rows only. */
__global__ static void
ArgmaxKernel(const float *logits, int n, int32_t *out)
{
	__shared__ SampleShared sh;
	int			best = RowArgmax(&sh, logits + (int64_t) blockIdx.x * n, n);

	if (threadIdx.x == 0)
		out[blockIdx.x] = best;
}

extern "C" int
cuda_argmax(const float *d_logits, int rows, int n, int32_t *d_out, cuda_stream s, cbllm_err *err)
{
	cudaError_t e;

	if (rows <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(ArgmaxKernel, rows, SAMPLE_THREADS, 0, s, d_logits, n, d_out);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA argmax failed: %s", cudaGetErrorString(e));
	return CBLLM_OK;
}

/* One block per row: the ids its mask does not allow become -inf. */
__global__ static void
MaskKernel(float *logits, int n, int stride, const sampler_row *params, const uint32_t *masks,
		   int n_masks)
{
	int			k = params[blockIdx.x].mask;
	int			words = (n + 31) / 32;
	float	   *x = logits + (int64_t) blockIdx.x * stride;
	const uint32_t *m;

	if (k <= 0 || k > n_masks)
		return;
	m = masks + (int64_t) (k - 1) * words;
	for (int i = threadIdx.x; i < n; i += blockDim.x)
		if (!((m[i >> 5] >> (i & 31)) & 1u))
			x[i] = -INFINITY;
}

extern "C" int
cuda_apply_masks(float *d_logits, int rows, int n, int stride, const sampler_row *d_params,
				 const uint32_t *d_masks, int n_masks, cuda_stream s, cbllm_err *err)
{
	cudaError_t e;

	if (rows <= 0 || n_masks <= 0)
		return CBLLM_OK;
	if (n < 1 || n > stride)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cuda_apply_masks: %d ids of rows of %d", n, stride);
	CBLLM_LAUNCH(MaskKernel, rows, SAMPLE_THREADS, 0, s, d_logits, n, stride, d_params, d_masks,
				 n_masks);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA constraint masks failed: %s",
						  cudaGetErrorString(e));
	return CBLLM_OK;
}

extern "C" int
cuda_sample(const float *d_logits, int rows, int n, int stride, const sampler_row *d_params,
			int32_t *d_out, cuda_stream s, cbllm_err *err)
{
	cudaError_t e;

	if (rows <= 0)
		return CBLLM_OK;
	if (n < 1 || n > stride)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cuda_sample: %d ids of rows of %d", n, stride);
	CBLLM_LAUNCH(SampleKernel, rows, SAMPLE_THREADS, 0, s, d_logits, n, stride, d_params, d_out);
	if ((e = cudaGetLastError()) != cudaSuccess)
		return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA sampling failed: %s", cudaGetErrorString(e));
	return CBLLM_OK;
}
