/* block_reduce.cuh: a sum or max over all THREADS threads of a block, returned to every thread. */
#ifndef CBLLM_BLOCK_REDUCE_CUH
#define CBLLM_BLOCK_REDUCE_CUH

/* Warp shuffles, then one value per warp through shared memory; every thread must call it. */
template <int THREADS, bool IS_MAX>
__device__ static float
BlockReduce(float v)
{
	__shared__ float part[THREADS / 32];
	int			lane = threadIdx.x % 32,
				warp = threadIdx.x / 32;

	for (int o = 16; o > 0; o /= 2)
	{
		float		u = __shfl_down_sync(0xffffffff, v, o);

		v = IS_MAX ? fmaxf(v, u) : v + u;
	}
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	if (threadIdx.x == 0)
	{
		float		r = part[0];

		for (int w = 1; w < THREADS / 32; w++)
			r = IS_MAX ? fmaxf(r, part[w]) : r + part[w];
		part[0] = r;
	}
	__syncthreads();
	v = part[0];
	__syncthreads();
	return v;
}

#endif
