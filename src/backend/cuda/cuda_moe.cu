/*
 * cuda_moe.cu: the two kernels of a mixture-of-experts layer on the device
 * (cuda_experts.c runs the layer): routing, one thread per token, by moe.h's
 * rule written again for the device (a softmax over the experts in double,
 * the k largest logits with the lower expert first on ties and NaN last,
 * renormalised when asked); and the combine, one block per token, its
 * experts' output rows weighted and added in the token's order of experts,
 * so a token's result does not depend on the others in the step.
 */
#include <cuda_runtime.h>

#include <math.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"

#define ROUTE_THREADS 64
#define COMBINE_THREADS 256

/* Whether logit a ranks above b: larger, and any number above NaN. */
__device__ static bool
RanksAbove(float a, float b)
{
	return a > b || (isnan(b) && !isnan(a));
}

__global__ static void
RouteKernel(const float *logits, int T, int E, int k, bool renormalise, int32_t *ids,
			float *weights)
{
	int			t = blockIdx.x * blockDim.x + threadIdx.x;
	const float *l;
	float		mx = -INFINITY;
	double		total = 0,
				chosen = 0;

	if (t >= T)
		return;
	l = logits + (int64_t) t * E;
	for (int e = 0; e < E; e++)
		if (l[e] > mx)
			mx = l[e];
	for (int e = 0; e < E; e++)
		total += isnan(l[e]) ? 0 : exp((double) l[e] - mx);
	for (int j = 0; j < k; j++)
	{
		int			best = -1;

		for (int e = 0; e < E; e++)
		{
			bool		taken = false;

			for (int i = 0; i < j && !taken; i++)
				taken = ids[(int64_t) t * k + i] == e;
			if (!taken && (best < 0 || RanksAbove(l[e], l[best])))
				best = e;
		}
		ids[(int64_t) t * k + j] = best;
		weights[(int64_t) t * k + j] = isnan(l[best]) || !(total > 0 && isfinite(total)) ? 0.0f :
			(float) (exp((double) l[best] - mx) / total);
		chosen += weights[(int64_t) t * k + j];
	}
	if (renormalise && chosen > 0)
		for (int j = 0; j < k; j++)
			weights[(int64_t) t * k + j] = (float) (weights[(int64_t) t * k + j] / chosen);
}

extern "C" int
cuda_moe_route(const float *d_logits, int T, int E, int k, bool renormalise, int32_t *d_ids,
			   float *d_weights, cuda_stream s, cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(RouteKernel, (T + ROUTE_THREADS - 1) / ROUTE_THREADS, ROUTE_THREADS, 0, s,
				 d_logits, T, E, k, renormalise, d_ids, d_weights);
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
