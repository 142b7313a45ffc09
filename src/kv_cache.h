/*
 * kv_cache.h: the keys and values of the paged KV cache in host memory,
 * where the CPU backend reads and writes them.  The pool is cut into
 * n_blocks blocks of block_size positions; which block belongs to which
 * sequence, the prefix cache and the free lists are the block manager's
 * (block_manager.h), not this struct's.  A device backend keeps K and V in
 * memory of its own (backend alloc_kv); its kv_cache is created with
 * no_data and carries only the geometry.
 */
#ifndef CBLLM_KV_CACHE_H
#define CBLLM_KV_CACHE_H

#include <stdbool.h>
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
	float	   *k;				/* (n_layers, n_blocks, block_size, n_kv_heads, head_dim); NULL with no_data */
	float	   *v;				/* (n_layers, n_blocks, block_size, n_kv_heads, head_dim) */
} kv_cache;

typedef struct kv_cache_params
{
	int			n_blocks;
	int			block_size;
	int			n_layers;
	int			n_kv_heads;
	int			head_dim;
	bool		no_data;		/* only the geometry: the keys and values live in a device backend */
} kv_cache_params;

/* Bytes of K and V for one block across all layers. */
size_t		kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim);

int			kv_cache_create(const kv_cache_params *p, kv_cache **out, cbllm_err *err);
void		kv_cache_free(kv_cache *kv);

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
