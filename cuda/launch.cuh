/*
 * launch.cuh: how the kernels are launched and how they declare dynamic
 * shared memory, written once for nvcc and for the CPU emulator that runs
 * them in CI (test/cuda_emu/cuda_emu.h): a launch there is a lambda that
 * holds its arguments by value, as a device launch does.
 */
#ifndef CBLLM_LAUNCH_CUH
#define CBLLM_LAUNCH_CUH

#ifdef CBLLM_CUDA_EMU
#define CBLLM_LAUNCH(kernel, grid, block, shmem, stream, ...) \
	cuda_emu::launch((grid), (block), (shmem), (stream), [=]() { kernel(__VA_ARGS__); })
#define CBLLM_DYN_SHARED(type, name) type *name = (type *) cuda_emu::dyn_shared()
#else
#define CBLLM_LAUNCH(kernel, grid, block, shmem, stream, ...) \
	kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define CBLLM_DYN_SHARED(type, name) extern __shared__ type name[]
#endif

#endif
