/*
 * cuda_moe.cu: the two kernels of a mixture-of-experts layer on the device
 * (cuda_experts.c runs the layer): routing, one thread per token, by moe.h's
 * rule (its host-device function); and the combine, one block per token, its
 * experts' output rows weighted and added in the token's order of experts,
 * so a token's result does not depend on the others in the step.
 */
#include <cuda_runtime.h>

#include <math.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "model/moe.h"

#define ROUTE_THREADS 64
#define COMBINE_THREADS 256

/* One thread a token: moe.h's rule, the one every backend routes by. */
__global__ static void
RouteKernel(const float *logits, int T, int E, int k, bool renormalise, const float *scale,
			int32_t *ids, float *weights)
{
	int			t = blockIdx.x * blockDim.x + threadIdx.x;

	if (t < T)
		moe_route(logits + (int64_t) t * E, E, k, renormalise, scale, ids + (int64_t) t * k,
				  weights + (int64_t) t * k);
}

extern "C" int
cuda_moe_route(const float *d_logits, int T, int E, int k, bool renormalise,
			   const float *d_scale, int32_t *d_ids, float *d_weights, cuda_stream s,
			   cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(RouteKernel, (T + ROUTE_THREADS - 1) / ROUTE_THREADS, ROUTE_THREADS, 0, s,
				 d_logits, T, E, k, renormalise, d_scale, d_ids, d_weights);
	return CheckLaunch("moe_route", err);
}

__global__ static void
CombineKernel(const float *y, const int32_t *slot, const float *weights, int k, int H,
			  float *out)
{
	int			t = blockIdx.x;
	float	   *o = out + (int64_t) t * H;

	for (int h = threadIdx.x; h < H; h += blockDim.x)
	{
		float		acc = 0;

		for (int j = 0; j < k; j++)
			acc += weights[(int64_t) t * k + j] * y[(int64_t) slot[(int64_t) t * k + j] * H + h];
		o[h] = acc;
	}
}

extern "C" int
cuda_moe_combine(const float *d_y, const int32_t *d_slot, const float *d_weights, int T, int k,
				 int H, float *d_out, cuda_stream s, cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(CombineKernel, T, COMBINE_THREADS, 0, s, d_y, d_slot, d_weights, k, H, d_out);
	return CheckLaunch("moe_combine", err);
}
