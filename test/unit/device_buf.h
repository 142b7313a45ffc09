/*
 * device_buf.h: device buffers for the GPU tests, filled from host data
 * through cuda_ops.h (on a GPU or on the emulated device), and the random
 * floats they are filled with.
 */
#ifndef CBLLM_TEST_DEVICE_BUF_H
#define CBLLM_TEST_DEVICE_BUF_H

#include <stddef.h>

#include "backend/cuda/cuda_ops.h"

/* Device buffer of n bytes copied from host data; NULL when the allocation fails. */
static inline void *
UpBytes(const void *h, size_t n)
{
	void	   *d = NULL;

	if (cuda_alloc(&d, n, NULL) != CBLLM_OK)
		return NULL;
	cuda_upload(d, h, n, NULL);
	return d;
}

/* Device copy of n floats of host data; NULL when the allocation fails. */
static inline float *
Up(const float *h, size_t n)
{
	return UpBytes(h, n * sizeof(float));
}

static unsigned rng_state = 12345;

/* Uniform in [-1, 1), from a fixed seed: every run draws the same numbers. */
static inline float
Rand(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return (float) ((rng_state >> 8) * (1.0 / 8388608.0) - 1.0);
}

#endif
