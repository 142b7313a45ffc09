/*
 * backend_cuda.h: the compute backend table on an NVIDIA GPU (backend.h),
 * built from the kernels of cuda_ops.h, and its registry entry
 * (cuda_backend_reg, backend_registry.h), through which the engine finds it.
 *
 *   cuda_backend_create     upload the weights (F32 checkpoints as BF16, F16
 *                           and BF16 as stored, dummy weights generated on
 *                           the device) and allocate the step workspace
 *   kv_blocks (table)       how many KV blocks fit the memory budget
 *   alloc_kv (table)        allocate the KV pool (bf16, the engine's block
 *                           layout, plus one pad block for graph padding)
 *
 * Steps run on one stream; decode steps are recorded once per padded batch
 * size as CUDA graphs and replayed.  Swap copies run on their own stream
 * between the device pool and the page-locked host swap area, ordered
 * against the compute stream with events.
 */
#ifndef CBLLM_BACKEND_CUDA_H
#define CBLLM_BACKEND_CUDA_H

#include "backend/backend.h"
#include "backend/backend_registry.h"

typedef struct cuda_backend_params
{
	const cbllm_model *model;
	int			max_tokens;		/* most tokens in one step */
	int			max_seqs;		/* most sequences in one step */
	int			max_ctx;		/* longest sequence */
	int			block_size;
	bool		no_graphs;		/* run decode steps eagerly */
} cuda_backend_params;

int			cuda_backend_create(const cuda_backend_params *p, cbllm_backend **out, cbllm_err *err);

#endif
