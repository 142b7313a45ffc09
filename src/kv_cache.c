/* kv_cache.c: the block pool of the paged KV cache. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of K and V for one block across all layers. */
size_t
kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim)
{
	return (size_t) 2 * block_size * n_layers * n_kv_heads * head_dim * sizeof(float);
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
	if (!p->no_data)
	{
		kv->k = cbllm_map_zeroed(n * sizeof(float));
		kv->v = cbllm_map_zeroed(n * sizeof(float));
	}
	kv->free_ids = malloc(sizeof(int32_t) * p->n_blocks);
	kv->refcount = calloc(p->n_blocks, sizeof(int32_t));
	kv->hash = calloc(p->n_blocks, sizeof(uint64_t));
	kv->serial = calloc(p->n_blocks, sizeof(uint64_t));
	kv->parent = calloc(p->n_blocks, sizeof(uint64_t));
	kv->salt = calloc(p->n_blocks, sizeof(uint64_t));
	kv->tokens = calloc((size_t) p->n_blocks * p->block_size, sizeof(int32_t));
	kv->next_serial = 1;
	kv->lru_prev = malloc(sizeof(int32_t) * p->n_blocks);
	kv->lru_next = malloc(sizeof(int32_t) * p->n_blocks);
	kv->table_cap = 16;
	while (kv->table_cap < 2 * p->n_blocks)
		kv->table_cap *= 2;
	kv->table_key = calloc(kv->table_cap, sizeof(uint64_t));
	kv->table_block = calloc(kv->table_cap, sizeof(int32_t));
	kv->lru_head = kv->lru_tail = -1;
	if ((!p->no_data && (kv->k == NULL || kv->v == NULL)) || kv->free_ids == NULL || kv->refcount == NULL ||
		kv->hash == NULL || kv->serial == NULL || kv->parent == NULL || kv->salt == NULL ||
		kv->tokens == NULL || kv->lru_prev == NULL || kv->lru_next == NULL ||
		kv->table_key == NULL || kv->table_block == NULL)
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
	cbllm_unmap(kv->k, n);
	cbllm_unmap(kv->v, n);
	free(kv->free_ids);
	free(kv->refcount);
	free(kv->hash);
	free(kv->serial);
	free(kv->parent);
	free(kv->salt);
	free(kv->tokens);
	free(kv->lru_prev);
	free(kv->lru_next);
	free(kv->table_key);
	free(kv->table_block);
	free(kv);
}

#define SLOT_EMPTY 0
#define SLOT_DELETED 1

/* Whether registered block b was computed from exactly what key describes. */
static bool
Matches(const kv_cache *kv, int32_t b, const kv_block_key *key)
{
	return kv->hash[b] == key->hash && kv->salt[b] == key->salt && kv->parent[b] == key->parent &&
		memcmp(kv->tokens + (int64_t) b * kv->block_size, key->tokens,
			   sizeof(int32_t) * kv->block_size) == 0;
}

/*
 * The table slot of a block registered under hash: the one holding block
 * when block >= 0, else the first whose block matches key; -1 when none.
 * Every slot of an equal hash is probed, so colliding hashes coexist.
 */
static int
TableFind(const kv_cache *kv, uint64_t hash, int32_t block, const kv_block_key *key)
{
	int			mask = kv->table_cap - 1;

	for (int i = (int) (hash & mask), n = 0; n < kv->table_cap; i = (i + 1) & mask, n++)
	{
		if (kv->table_key[i] == SLOT_EMPTY)
			return -1;
		if (kv->table_key[i] != hash)
			continue;
		if (block >= 0 ? kv->table_block[i] == block : Matches(kv, kv->table_block[i], key))
			return i;
	}
	return -1;
}

/* Insert hash -> block (the caller checked that no equal block is registered). */
static void
TableInsert(kv_cache *kv, uint64_t hash, int32_t block)
{
	int			mask = kv->table_cap - 1;
	int			i = (int) (hash & mask);

	while (kv->table_key[i] != SLOT_EMPTY && kv->table_key[i] != SLOT_DELETED)
		i = (i + 1) & mask;
	if (kv->table_key[i] == SLOT_DELETED)
		kv->table_deleted--;
	kv->table_key[i] = hash;
	kv->table_block[i] = block;
}

/* Rebuild the table from the registered blocks, dropping deleted slots. */
static void
TableRebuild(kv_cache *kv)
{
	for (int i = 0; i < kv->table_cap; i++)
		kv->table_key[i] = SLOT_EMPTY;
	kv->table_deleted = 0;
	for (int b = 0; b < kv->n_blocks; b++)
		if (kv->hash[b] != 0)
			TableInsert(kv, kv->hash[b], b);
}

/* Forget a block's registration. */
static void
Unregister(kv_cache *kv, int32_t block)
{
	int			i = TableFind(kv, kv->hash[block], block, NULL);

	if (i >= 0)
	{
		kv->table_key[i] = SLOT_DELETED;
		kv->table_deleted++;
	}
	kv->hash[block] = 0;
	kv->serial[block] = 0;
	if (kv->table_deleted > kv->table_cap / 4)
		TableRebuild(kv);
}

/* Unlink an evictable block from the LRU list. */
static void
LruRemove(kv_cache *kv, int32_t b)
{
	if (kv->lru_prev[b] >= 0)
		kv->lru_next[kv->lru_prev[b]] = kv->lru_next[b];
	else
		kv->lru_head = kv->lru_next[b];
	if (kv->lru_next[b] >= 0)
		kv->lru_prev[kv->lru_next[b]] = kv->lru_prev[b];
	else
		kv->lru_tail = kv->lru_prev[b];
	kv->n_evictable--;
}

/* Append a block to the LRU list (most recently released). */
static void
LruAppend(kv_cache *kv, int32_t b)
{
	kv->lru_prev[b] = kv->lru_tail;
	kv->lru_next[b] = -1;
	if (kv->lru_tail >= 0)
		kv->lru_next[kv->lru_tail] = b;
	else
		kv->lru_head = b;
	kv->lru_tail = b;
	kv->n_evictable++;
}

/* Take a free block, else evict the least recently released cached block; -1 when none. */
int32_t
kv_cache_alloc(kv_cache *kv)
{
	int32_t		b;

	if (kv->n_free > 0)
		b = kv->free_ids[--kv->n_free];
	else if (kv->lru_head >= 0)
	{
		b = kv->lru_head;
		LruRemove(kv, b);
		Unregister(kv, b);
	}
	else
		return -1;
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

/* Drop an owner; free the block (or park it on the LRU list if registered) when none remain. */
void
kv_cache_release(kv_cache *kv, int32_t block)
{
	if (block < 0 || block >= kv->n_blocks || kv->refcount[block] <= 0)
		return;					/* a double release is ignored, never corrupts the pool */
	if (--kv->refcount[block] > 0)
		return;
	if (kv->hash[block] != 0)
		LruAppend(kv, block);
	else
		kv->free_ids[kv->n_free++] = block;
}

/*
 * FNV-1a over the parent hash and the block's token ids, then a 64-bit
 * finaliser; never 0 or 1.  Not cryptographic: lookups verify the tokens.
 */
uint64_t
kv_cache_block_hash(const kv_cache *kv, uint64_t parent, const int32_t *tokens)
{
	uint64_t	h = 0xcbf29ce484222325ULL;

	if (kv->test_hash != 0)
		return kv->test_hash > SLOT_DELETED ? kv->test_hash : SLOT_DELETED + 1;
	for (int i = 0; i < 8; i++)
		h = (h ^ ((parent >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
	for (int t = 0; t < kv->block_size; t++)
		for (int i = 0; i < 4; i++)
			h = (h ^ (((uint32_t) tokens[t] >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h > SLOT_DELETED ? h : h + 2;
}

/* Find a registered block matching key and take an owner's reference to it. */
int32_t
kv_cache_lookup(kv_cache *kv, const kv_block_key *key)
{
	int			i = TableFind(kv, key->hash, -1, key);
	int32_t		b;

	kv->prefix_queries++;
	if (i < 0)
		return -1;
	b = kv->table_block[i];
	if (kv->refcount[b] == 0)
		LruRemove(kv, b);
	kv->refcount[b]++;
	kv->prefix_hits++;
	return b;
}

/* Register a full block under key unless an equal block is registered; the serial holding it. */
uint64_t
kv_cache_register(kv_cache *kv, int32_t block, const kv_block_key *key)
{
	int			i;

	if (block < 0 || block >= kv->n_blocks || key->hash <= SLOT_DELETED)
		return 0;
	if (kv->hash[block] != 0)
		return Matches(kv, block, key) ? kv->serial[block] : 0;
	if ((i = TableFind(kv, key->hash, -1, key)) >= 0)
		return kv->serial[kv->table_block[i]];
	kv->hash[block] = key->hash;
	kv->serial[block] = kv->next_serial++;
	kv->parent[block] = key->parent;
	kv->salt[block] = key->salt;
	memcpy(kv->tokens + (int64_t) block * kv->block_size, key->tokens,
		   sizeof(int32_t) * kv->block_size);
	TableInsert(kv, key->hash, block);
	return kv->serial[block];
}

/* Drop every registration; evictable blocks become free. */
void
kv_cache_reset_prefix(kv_cache *kv)
{
	while (kv->lru_head >= 0)
	{
		int32_t		b = kv->lru_head;

		LruRemove(kv, b);
		kv->free_ids[kv->n_free++] = b;
	}
	for (int b = 0; b < kv->n_blocks; b++)
		kv->hash[b] = kv->serial[b] = 0;
	TableRebuild(kv);
}
