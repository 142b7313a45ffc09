/*
 * kv_cache.h: the paged KV cache.  Keys and values live in fixed-size blocks
 * of block_size positions taken from one pool; a sequence owns a block table
 * (the ids of its blocks in position order), so memory grows with the tokens
 * actually held, not with the maximum length.  Blocks carry reference counts
 * so that sequences sharing a prefix can share its full blocks.
 *
 * Prefix caching: a full block can be registered under a hash of (parent
 * block's hash, its tokens).  When its last owner releases it, a registered
 * block is not freed but parked on an LRU list, still findable by its hash;
 * allocation takes free blocks first and then evicts the least recently
 * released cached block.  So "available" = free + evictable.
 *
 * The hash only finds candidates; it is never trusted.  A block's keys and
 * values depend on every token before it, so a registration records what
 * they were computed from (a kv_block_key): the block's own tokens, the
 * registration of the block before it, and the cache scope (salt) of the
 * request that computed it.  A lookup hits only a block whose tokens, salt
 * and parent all equal the caller's, and the caller's parent is the block it
 * matched one position earlier (or none, for a first block).  By induction
 * the whole prefix then matches token for token, so a crafted prompt whose
 * hashes collide with another's can never read the other's cached KV, and
 * requests of different salts never share a block.  Colliding hashes only
 * cost probes: the table keeps every registration, equal hashes or not.
 *
 * Parents are named by serial, a number given to each registration and never
 * reused, not by block id: an evicted parent's id may be registered again
 * for other tokens, and its old children must not match under it.
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
	int32_t    *free_ids;		/* (n_blocks) stack of free block ids; top at n_free - 1 */
	int			n_free;
	int32_t    *refcount;		/* (n_blocks) owners of each block; 0 when free or evictable */
	uint64_t   *hash;			/* (n_blocks) prefix hash of a registered block, 0 when none */
	uint64_t   *serial;			/* (n_blocks) its registration's number, never reused; 0 when none */
	uint64_t   *parent;			/* (n_blocks) serial of the registration before it; 0 for a first block */
	uint64_t   *salt;			/* (n_blocks) cache scope of the request that registered it */
	int32_t    *tokens;			/* (n_blocks, block_size) token ids of each registered block */
	uint64_t	next_serial;	/* the next registration's serial, from 1 */
	int32_t    *lru_prev;		/* (n_blocks) evictable list links, -1 at the ends */
	int32_t    *lru_next;		/* (n_blocks) */
	int32_t		lru_head;		/* least recently released evictable block, -1 when none */
	int32_t		lru_tail;
	int			n_evictable;
	uint64_t   *table_key;		/* (table_cap) open-addressing hash -> block; 0 empty, 1 deleted */
	int32_t    *table_block;	/* (table_cap) */
	int			table_cap;		/* a power of two >= 2 * n_blocks */
	int			table_deleted;	/* deleted slots; the table is rebuilt past cap / 4 */
	int64_t		prefix_queries; /* blocks looked up */
	int64_t		prefix_hits;	/* blocks found */
	uint64_t	test_hash;		/* tests only: when not 0, every block hashes to it (forced collisions) */
} kv_cache;

/* What a full block's keys and values were computed from: a cache hit must match all of it. */
typedef struct kv_block_key
{
	uint64_t	hash;			/* kv_cache_block_hash(parent's hash, or the salt for a first block) */
	uint64_t	salt;			/* the request's cache scope */
	uint64_t	parent;			/* serial of the cached block before it; 0 for a first block */
	const int32_t *tokens;		/* (block_size) the block's token ids */
} kv_block_key;

typedef struct kv_cache_params
{
	int			n_blocks;
	int			block_size;
	int			n_layers;
	int			n_kv_heads;
	int			head_dim;
	bool		no_data;		/* only the bookkeeping: the keys and values live in a device backend */
} kv_cache_params;

/* Bytes of K and V for one block across all layers. */
size_t		kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim);

int			kv_cache_create(const kv_cache_params *p, kv_cache **out, cbllm_err *err);
void		kv_cache_free(kv_cache *kv);

/* Take a free block, else evict a cached one (reference count 1); -1 when none. */
int32_t		kv_cache_alloc(kv_cache *kv);

/* Blocks that kv_cache_alloc can still hand out (free + evictable). */
static inline int
kv_cache_available(const kv_cache *kv)
{
	return kv->n_free + kv->n_evictable;
}

/* The hash of a full block: its parent's hash (the salt for a first block) and its tokens. */
uint64_t	kv_cache_block_hash(const kv_cache *kv, uint64_t parent, const int32_t *tokens);

/* A registered block matching all of key, now owned once more by the caller; -1 when none. */
int32_t		kv_cache_lookup(kv_cache *kv, const kv_block_key *key);

/*
 * Register a full block under key.  Returns the serial of the registration
 * that now holds key's content: the block's own, or that of an equal block
 * registered before (this one then stays unregistered); 0 when none.
 */
uint64_t	kv_cache_register(kv_cache *kv, int32_t block, const kv_block_key *key);

/* The serial of a block's registration, 0 when it is not registered. */
static inline uint64_t
kv_cache_serial(const kv_cache *kv, int32_t block)
{
	return block >= 0 && block < kv->n_blocks ? kv->serial[block] : 0;
}

/* Drop every registered hash (cached blocks become plain free blocks). */
void		kv_cache_reset_prefix(kv_cache *kv);

/* Add an owner to a block in use. */
void		kv_cache_ref(kv_cache *kv, int32_t block);

/* Drop an owner; with none left the block returns to the pool (or the LRU list if registered). */
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
