/*
 * device_buf.h: device buffers for the GPU tests, filled from host data
 * through cuda_ops.h (on a GPU or on the emulated device).
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

#endif
