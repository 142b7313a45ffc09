/*
 * launch.cuh: how the kernels are launched, how they declare dynamic
 * shared memory and how a launch's status is read, written once for nvcc
 * and for the CPU emulator that runs them in CI (test/cuda_emu/cuda_emu.h):
 * a launch there is a lambda that holds its arguments by value, as a device
 * launch does.
 */
#ifndef CBLLM_LAUNCH_CUH
#define CBLLM_LAUNCH_CUH

#include <cuda_runtime.h>

#include "base/util.h"

#ifdef CBLLM_CUDA_EMU
#define CBLLM_LAUNCH(kernel, grid, block, shmem, stream, ...) \
	cuda_emu::launch((grid), (block), (shmem), (stream), [=]() { kernel(__VA_ARGS__); })
#define CBLLM_DYN_SHARED(type, name) type *name = (type *) cuda_emu::dyn_shared()
#else
#define CBLLM_LAUNCH(kernel, grid, block, shmem, stream, ...) \
	kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define CBLLM_DYN_SHARED(type, name) extern __shared__ type name[]
#endif

/* Blocks of 256 threads for a grid-stride loop over n elements. */
static inline int
GridFor(int64_t n)
{
	int64_t		b = (n + 255) / 256;

	return (int) (b < 1 ? 1 : b > 65535 ? 65535 : b);
}

/* Status of the kernel just launched; what names it. */
static inline int
CheckLaunch(const char *what, cbllm_err *err)
{
	cudaError_t e = cudaGetLastError();

	if (e == cudaSuccess)
		return CBLLM_OK;
	return cbllm_fail(err, CBLLM_ERR_DEVICE, "CUDA %s failed: %s", what, cudaGetErrorString(e));
}

#endif
