/* kv_cache.c: the block pool of the paged KV cache. */
#include "kv_cache.h"

#include <stdlib.h>
#include <sys/mman.h>

/* Bytes of K and V for one block across all layers. */
size_t
kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim)
{
	return (size_t) 2 * block_size * n_layers * n_kv_heads * head_dim * sizeof(float);
}

/* Map zero-filled memory for one of K or V (pages are touched lazily). */
static float *
MapFloats(size_t n)
{
	void	   *p = mmap(NULL, n * sizeof(float), PROT_READ | PROT_WRITE,
						 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Create a pool of p->n_blocks blocks, all free. */
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
	kv->k = MapFloats(n);
	kv->v = MapFloats(n);
	kv->free_ids = malloc(sizeof(int32_t) * p->n_blocks);
	kv->refcount = calloc(p->n_blocks, sizeof(int32_t));
	if (kv->k == NULL || kv->v == NULL || kv->free_ids == NULL || kv->refcount == NULL)
	{
		size_t		mb = kv_cache_block_bytes(p->block_size, p->n_layers, p->n_kv_heads,
											  p->head_dim) * p->n_blocks >> 20;

		kv_cache_free(kv);
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "kv cache: cannot allocate %zu MiB for %d blocks; lower the KV cache size",
						  mb, p->n_blocks);
	}
	/* lowest ids on top of the stack, so allocation order is predictable */
	for (int i = 0; i < p->n_blocks; i++)
		kv->free_ids[i] = p->n_blocks - 1 - i;
	kv->n_free = p->n_blocks;
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
	if (kv->k)
		munmap(kv->k, n);
	if (kv->v)
		munmap(kv->v, n);
	free(kv->free_ids);
	free(kv->refcount);
	free(kv);
}

/* Take a free block, or -1. */
int32_t
kv_cache_alloc(kv_cache *kv)
{
	int32_t		b;

	if (kv->n_free == 0)
		return -1;
	b = kv->free_ids[--kv->n_free];
	kv->refcount[b] = 1;
	return b;
}

/* Add an owner to a block in use. */
void
kv_cache_ref(kv_cache *kv, int32_t block)
{
	if (block >= 0 && block < kv->n_blocks && kv->refcount[block] > 0)
		kv->refcount[block]++;
}

/* Drop an owner; free the block when none remain. */
void
kv_cache_release(kv_cache *kv, int32_t block)
{
	if (block < 0 || block >= kv->n_blocks || kv->refcount[block] <= 0)
		return;					/* a double release is ignored, never corrupts the pool */
	if (--kv->refcount[block] == 0)
		kv->free_ids[kv->n_free++] = block;
}
