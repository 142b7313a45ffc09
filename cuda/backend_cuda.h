/*
 * backend_cuda.h: the compute backend table on an NVIDIA GPU (backend.h),
 * built from the kernels of cuda_ops.h.  Weights are uploaded once (F32
 * checkpoints as BF16, F16 and BF16 as stored); the KV pool lives on the
 * device with the same block layout as the engine's kv_cache; the swap area
 * stays in host memory.
 */
#ifndef CBLLM_BACKEND_CUDA_H
#define CBLLM_BACKEND_CUDA_H

#include "../src/backend.h"

typedef struct cuda_backend_params
{
	const cbllm_model *model;
	int			max_tokens;		/* most tokens in one step */
	int			max_seqs;		/* most sequences in one step */
	int			max_ctx;		/* longest sequence */
	int			n_kv_blocks;	/* KV pool size, as the engine's kv_cache */
	int			block_size;
} cuda_backend_params;

int			cuda_backend_create(const cuda_backend_params *p, cbllm_backend **out, cbllm_err *err);

#endif
