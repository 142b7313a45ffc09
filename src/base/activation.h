/*
 * activation.h: the activations that have a formula of their own (the MLPs',
 * and the sigmoid and softplus of the hybrid models' gates and decays),
 * written once for the CPU backend and the CUDA kernels (and the CPU emulator
 * of CUDA): CBLLM_HOST_DEVICE marks them for both.
 */
#ifndef CBLLM_ACTIVATION_H
#define CBLLM_ACTIVATION_H

#include <math.h>

#include "base/rng.h"				/* CBLLM_HOST_DEVICE */

/*
 * GELU's tanh form (PyTorch's gelu(approximate="tanh")):
 * 0.5 x (1 + tanh(z)) with z = sqrt(2/pi) (x + 0.044715 x^3), computed as
 * x / (1 + exp(-2z)), the same value (0.5 (1 + tanh z) is the logistic of
 * 2z) at the cost of one expf, about a fifth of tanhf's, and without the
 * cancellation of 1 + tanh(z) for negative z.  exp overflowing to infinity
 * gives -0, the limit.
 */
static inline CBLLM_HOST_DEVICE float
cbllm_gelu_tanh(float x)
{
	const float two_sqrt_2_over_pi = 1.5957691216057308f;

	return x / (1.0f + expf(-two_sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
}

/* SiLU: x / (1 + exp(-x)). */
static inline CBLLM_HOST_DEVICE float
cbllm_silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* The logistic sigmoid: 1 / (1 + exp(-x)). */
static inline CBLLM_HOST_DEVICE float
cbllm_sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

/* softplus as PyTorch computes it: log(1 + exp(x)), x itself above 20. */
static inline CBLLM_HOST_DEVICE float
cbllm_softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

/*
 * gpt-oss's gated activation of a gate value g and an up value u: g clamped
 * from above and u on both sides at limit, then g * sigmoid(1.702 g) *
 * (u + 1), as its modeling code computes it.
 */
static inline CBLLM_HOST_DEVICE float
cbllm_swiglu_oai(float g, float u, float limit)
{
	g = g < limit ? g : limit;
	u = u < -limit ? -limit : u > limit ? limit : u;
	return g / (1.0f + expf(-1.702f * g)) * (u + 1.0f);
}

#endif
