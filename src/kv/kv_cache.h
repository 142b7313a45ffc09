/*
 * kv_cache.h: the keys and values of the paged KV cache in host memory,
 * where the CPU backend reads and writes them.  The pool is cut into
 * n_blocks blocks of block_size positions; which block belongs to which
 * sequence, the prefix cache and the free lists are the block manager's
 * (block_manager.h), not this struct's.  A device backend keeps K and V in
 * memory of its own (backend alloc_kv); its kv_cache is created with
 * no_data and carries only the geometry.  The CPU keeps keys and values as
 * f32, or as f16 or bf16 (cbllm.kv_cache_dtype): half the memory, converted
 * with round to nearest even as they are stored.
 */
#ifndef CBLLM_KV_CACHE_H
#define CBLLM_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "dtype/dtype.h"

typedef struct kv_cache
{
	int			n_blocks;
	int			block_size;		/* positions per block */
	int			n_layers;
	int			n_kv_heads;
	int			head_dim;
	int64_t		block_floats;	/* elements of one block in one layer: block_size * n_kv_heads *
								 * head_dim (of a cache whose layers are alike; see row) */
	int32_t    *row;			/* (n_layers) elements per position of each layer: n_kv_heads
								 * * head_dim, or each layer's own (Gemma 4's differ) */
	int64_t    *base;			/* (n_layers + 1) element offset of each layer's block 0 in k
								 * and v; base[n_layers]: the elements of all of them */
	cbllm_dtype dtype;			/* of the elements: CBLLM_F32, CBLLM_F16 or CBLLM_BF16 */
	int			elem_bytes;		/* 4 or 2 */
	void	   *k;				/* per layer l (n_blocks, block_size, row[l]) of dtype, layer
								 * after layer; NULL with no_data */
	void	   *v;				/* the same for the values */
	const int16_t *layer_map;	/* (model layers) the cache layer of a model layer (a hybrid
								 * model's attention layers only: cfg.kv_layer); NULL: the same */
} kv_cache;

typedef struct kv_cache_params
{
	int			n_blocks;
	int			block_size;
	int			n_layers;
	int			n_kv_heads;
	int			head_dim;
	bool		no_data;		/* only the geometry: the keys and values live in a device backend */
	cbllm_dtype dtype;			/* CBLLM_F32 (0), CBLLM_F16 or CBLLM_BF16 */
	const int16_t *layer_map;	/* kv_cache.layer_map; NULL: model layer l is cache layer l */
	const int32_t *layer_row;	/* (n_layers) each cache layer's elements per position (its
								 * kv heads * head size); NULL: n_kv_heads * head_dim each */
} kv_cache_params;

/* Bytes of one element of dt in the cache: 4 for f32, 2 for f16 and bf16. */
int			kv_cache_elem_bytes(cbllm_dtype dt);

/* Bytes of K and V for one block across all layers, elements of dt. */
size_t		kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim,
								 cbllm_dtype dt);

/* Bytes of K and V for one block across layers of row_sum elements per position together. */
size_t		kv_cache_rows_block_bytes(int block_size, int64_t row_sum, cbllm_dtype dt);

/* Whether the host cache can hold elements of dt (f32, f16, bf16). */
bool		kv_cache_dtype_ok(cbllm_dtype dt);

/*
 * A cache type by name into *dt: "f32", "f16", "bf16" (any case); "auto",
 * "" and NULL give *dt = auto_dt.  False for any other name.
 */
bool		kv_cache_dtype_parse(const char *name, cbllm_dtype auto_dt, cbllm_dtype *dt);

/* kv_cache_dtype_parse, failing as CBLLM_ERR_INVALID with a message naming an unknown name. */
int			kv_cache_dtype_resolve(const char *name, cbllm_dtype auto_dt, cbllm_dtype *dt,
								   cbllm_err *err);

int			kv_cache_create(const kv_cache_params *p, kv_cache **out, cbllm_err *err);
void		kv_cache_free(kv_cache *kv);

/* The cache layer of model layer l (kv_cache_k and kv_cache_v take cache layers). */
static inline int
kv_cache_layer_of(const kv_cache *kv, int l)
{
	return kv->layer_map != NULL ? kv->layer_map[l] : l;
}

/* Element offset of (layer, block, slot) in k or v. */
static inline int64_t
kv_cache_offset(const kv_cache *kv, int layer, int32_t block, int slot)
{
	return kv->base[layer] + ((int64_t) block * kv->block_size + slot) * kv->row[layer];
}

/* Keys of (layer, block, slot): row[layer] elements of kv->dtype. */
static inline void *
kv_cache_k(const kv_cache *kv, int layer, int32_t block, int slot)
{
	return (char *) kv->k + kv_cache_offset(kv, layer, block, slot) * kv->elem_bytes;
}

/* Values of (layer, block, slot): row[layer] elements of kv->dtype. */
static inline void *
kv_cache_v(const kv_cache *kv, int layer, int32_t block, int slot)
{
	return (char *) kv->v + kv_cache_offset(kv, layer, block, slot) * kv->elem_bytes;
}

#endif
