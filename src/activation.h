/*
 * activation.h: the MLP activations that have a formula of their own, written
 * once for the CPU backend and the CUDA kernels (and the CPU emulator of
 * CUDA): CBLLM_HOST_DEVICE marks them for both.
 */
#ifndef CBLLM_ACTIVATION_H
#define CBLLM_ACTIVATION_H

#include <math.h>

#include "rng.h"				/* CBLLM_HOST_DEVICE */

/* GELU's tanh form (PyTorch's gelu(approximate="tanh")): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline CBLLM_HOST_DEVICE float
cbllm_gelu_tanh(float x)
{
	const float sqrt_2_over_pi = 0.7978845608028654f;

	return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
}

#endif
