/*
 * swap_space.h: the bounded host area that preempted sequences' KV blocks
 * are copied into (swap preemption) and copied back from when they resume.
 * On a GPU it is pinned host memory; on the CPU it is ordinary memory, but
 * the copies go through the same backend operations.  This is only the
 * memory: which swap block holds what is the block manager's bookkeeping
 * (block_manager.h).
 */
#ifndef CBLLM_SWAP_SPACE_H
#define CBLLM_SWAP_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct swap_space
{
	int			n_blocks;
	int64_t		block_floats;	/* floats of K (or V) of one block over all layers */
	float	   *k;				/* (n_blocks, n_layers, block_size, n_kv_heads, head_dim) */
	float	   *v;				/* (n_blocks, n_layers, block_size, n_kv_heads, head_dim) */
} swap_space;

/* A swap area of n_blocks blocks of block_floats floats each (0 blocks: swapping disabled). */
int			swap_space_create(int n_blocks, int64_t block_floats, swap_space **out, cbllm_err *err);
void		swap_space_free(swap_space *sw);

#endif
