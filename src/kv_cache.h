/*
 * kv_cache.h: the paged KV cache.  Keys and values live in fixed-size blocks
 * of block_size positions taken from one pool; a sequence owns a block table
 * (the ids of its blocks in position order), so memory grows with the tokens
 * actually held, not with the maximum length.  Blocks carry reference counts
 * so that sequences sharing a prefix can share its full blocks.
 */
#ifndef CBLLM_KV_CACHE_H
#define CBLLM_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct kv_cache
{
	int			n_blocks;
	int			block_size;		/* positions per block */
	int			n_layers;
	int			n_kv_heads;
	int			head_dim;
	int64_t		block_floats;	/* floats of one block in one layer: block_size * n_kv_heads * head_dim */
	float	   *k;				/* (n_layers, n_blocks, block_size, n_kv_heads, head_dim) */
	float	   *v;				/* (n_layers, n_blocks, block_size, n_kv_heads, head_dim) */
	int32_t    *free_ids;		/* (n_blocks) stack of free block ids; top at n_free - 1 */
	int			n_free;
	int32_t    *refcount;		/* (n_blocks) owners of each block; 0 when free */
} kv_cache;

typedef struct kv_cache_params
{
	int			n_blocks;
	int			block_size;
	int			n_layers;
	int			n_kv_heads;
	int			head_dim;
} kv_cache_params;

/* Bytes of K and V for one block across all layers. */
size_t		kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim);

int			kv_cache_create(const kv_cache_params *p, kv_cache **out, cbllm_err *err);
void		kv_cache_free(kv_cache *kv);

/* Take a free block (reference count 1), or -1 when the pool is empty. */
int32_t		kv_cache_alloc(kv_cache *kv);

/* Add an owner to a block in use. */
void		kv_cache_ref(kv_cache *kv, int32_t block);

/* Drop an owner; the block returns to the pool when none are left. */
void		kv_cache_release(kv_cache *kv, int32_t block);

/* Keys of (layer, block, slot): n_kv_heads * head_dim floats. */
static inline float *
kv_cache_k(const kv_cache *kv, int layer, int32_t block, int slot)
{
	return kv->k + ((int64_t) layer * kv->n_blocks + block) * kv->block_floats +
		(int64_t) slot * kv->n_kv_heads * kv->head_dim;
}

/* Values of (layer, block, slot): n_kv_heads * head_dim floats. */
static inline float *
kv_cache_v(const kv_cache *kv, int layer, int32_t block, int slot)
{
	return kv->v + ((int64_t) layer * kv->n_blocks + block) * kv->block_floats +
		(int64_t) slot * kv->n_kv_heads * kv->head_dim;
}

#endif
