/* kv_cache.c: the host memory of the paged KV cache's keys and values. */
#include "kv_cache.h"

#include <stdlib.h>

/* Bytes of K and V for one block across all layers. */
size_t
kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim)
{
	return (size_t) 2 * block_size * n_layers * n_kv_heads * head_dim * sizeof(float);
}

/* Create the K and V arrays of p->n_blocks blocks, zeroed (only the geometry with no_data). */
int
kv_cache_create(const kv_cache_params *p, kv_cache **out, cbllm_err *err)
{
	kv_cache   *kv;
	size_t		n;

	if (p->n_blocks < 1 || p->block_size < 1 || p->block_size > 1024 ||
		p->n_layers < 1 || p->n_kv_heads < 1 || p->head_dim < 1)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "kv cache: %d blocks of %d positions, %d layers, %d KV heads of dimension %d is not a valid pool",
						  p->n_blocks, p->block_size, p->n_layers, p->n_kv_heads, p->head_dim);
	kv = calloc(1, sizeof(*kv));
	if (kv == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	kv->n_blocks = p->n_blocks;
	kv->block_size = p->block_size;
	kv->n_layers = p->n_layers;
	kv->n_kv_heads = p->n_kv_heads;
	kv->head_dim = p->head_dim;
	kv->block_floats = (int64_t) p->block_size * p->n_kv_heads * p->head_dim;
	n = (size_t) p->n_layers * p->n_blocks * kv->block_floats;
	if (!p->no_data)
	{
		kv->k = cbllm_map_zeroed(n * sizeof(float));
		kv->v = cbllm_map_zeroed(n * sizeof(float));
		if (kv->k == NULL || kv->v == NULL)
		{
			size_t		mb = kv_cache_block_bytes(p->block_size, p->n_layers, p->n_kv_heads,
												  p->head_dim) * p->n_blocks >> 20;

			kv_cache_free(kv);
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "kv cache: cannot allocate %zu MiB for %d blocks; lower the KV cache size",
							  mb, p->n_blocks);
		}
	}
	*out = kv;
	return CBLLM_OK;
}

/* Release the pool's memory. */
void
kv_cache_free(kv_cache *kv)
{
	size_t		n;

	if (kv == NULL)
		return;
	n = (size_t) kv->n_layers * kv->n_blocks * kv->block_floats * sizeof(float);
	cbllm_unmap(kv->k, n);
	cbllm_unmap(kv->v, n);
	free(kv);
}
