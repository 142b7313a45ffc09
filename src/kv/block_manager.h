/*
 * block_manager.h: the KV block manager.  It owns the bookkeeping of the
 * paged KV cache and of the host swap area, and nothing else: which block
 * belongs to whom, which full blocks the prefix cache holds, which blocks a
 * sliding window has made useless, and which swap blocks hold a preempted
 * sequence's KV.  The keys and values themselves live elsewhere: on the CPU
 * in kv_cache (kv_cache.h), on a device in the backend's own memory, and in
 * swap_space (swap_space.h) on the host; the backend copies them.
 *
 * The pool.  Blocks of block_size positions carry reference counts, so that
 * sequences sharing a prefix can share its full blocks.  A full block can be
 * registered under a hash of (parent block's hash, its tokens).  When its
 * last owner releases it, a registered block is not freed but parked on an
 * LRU list, still findable by its hash; allocation takes free blocks first
 * and then evicts the least recently released cached block.  So "available"
 * = free + evictable.
 *
 * The hash only finds candidates; it is never trusted.  A block's keys and
 * values depend on every token before it, so a registration records what
 * they were computed from (a bm_block_key): the block's own tokens, the
 * registration of the block before it, and the scope it was computed in:
 * the cache salt of the request, and the RoPE factor set its sequence used
 * (rope.h: longrope's short and long factors rotate the same tokens'
 * keys differently).  A lookup hits only a block whose tokens, scope and
 * parent all equal the caller's, and the caller's parent is the block it
 * matched one position earlier (or none, for a first block).  By induction
 * the whole prefix then matches token for token, so a crafted prompt whose
 * hashes collide with another's can never read the other's cached KV, and
 * requests of different salts never share a block.  Colliding hashes only
 * cost probes: the table keeps every registration, equal hashes or not.
 *
 * Parents are named by serial, a number given to each registration and never
 * reused, not by block id: an evicted parent's id may be registered again
 * for other tokens, and its old children must not match under it.
 *
 * Sequences.  A sequence's blocks are a block_table (below): the ids of its
 * blocks in position order, the prefix hashes of its full blocks, and, while
 * it is swapped out, the swap blocks that hold its KV.  The table-level
 * functions (bm_allocate, bm_match_prefix, bm_cache_blocks, bm_drop_window,
 * bm_swap_out, bm_swap_in) are what the scheduler uses; the pool-level ones
 * are their parts, and what the pool's own tests use.
 */
#ifndef CBLLM_BLOCK_MANAGER_H
#define CBLLM_BLOCK_MANAGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct block_manager
{
	int			n_blocks;
	int			block_size;		/* positions per block */
	int			sliding_window; /* positions a token attends to; 0: all */
	bool		no_prefix_caching;	/* never look up or register full blocks */
	int32_t    *free_ids;		/* (n_blocks) stack of free block ids; top at n_free - 1 */
	int			n_free;
	int32_t    *refcount;		/* (n_blocks) owners of each block; 0 when free or evictable */
	uint64_t   *hash;			/* (n_blocks) prefix hash of a registered block, 0 when none */
	uint64_t   *serial;			/* (n_blocks) its registration's number, never reused; 0 when none */
	uint64_t   *parent;			/* (n_blocks) serial of the registration before it; 0 for a first block */
	uint64_t   *salt;			/* (n_blocks) cache salt of the request that registered it */
	uint8_t    *rope_set;		/* (n_blocks) RoPE factor set it was computed with */
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
	int			n_swap_blocks;	/* blocks of the host swap area; 0: swapping is off */
	int32_t    *swap_free_ids;	/* (n_swap_blocks) stack of free swap block ids */
	int			n_swap_free;
} block_manager;

typedef struct bm_params
{
	int			n_blocks;		/* blocks of the KV pool */
	int			block_size;		/* positions per block, 1 to 1024 */
	int			n_swap_blocks;	/* blocks of the host swap area; 0: none */
	int			sliding_window; /* the model's window; 0: none */
	bool		no_prefix_caching;
} bm_params;

/* The scope a sequence's KV is computed in: blocks are shared only within one. */
typedef struct bm_scope
{
	uint64_t	salt;			/* the request's cache salt (cbllm_request_input.cache_salt) */
	uint8_t		rope_set;		/* the RoPE factor set of its sequence (rope.h), 0 or 1 */
} bm_scope;

/* What a full block's keys and values were computed from: a cache hit must match all of it. */
typedef struct bm_block_key
{
	uint64_t	hash;			/* bm_block_hash(parent's hash, or bm_scope_seed for a first block) */
	uint64_t	salt;			/* the request's cache salt */
	uint8_t		rope_set;		/* its sequence's RoPE factor set */
	uint64_t	parent;			/* serial of the cached block before it; 0 for a first block */
	const int32_t *tokens;		/* (block_size) the block's token ids */
} bm_block_key;

/* One sequence's blocks: on the device (ids) or, swapped out, in the swap area (swap_ids). */
typedef struct block_table
{
	int32_t    *ids;			/* (cap) block ids in position order; -1 for a block dropped behind a
								 * sliding window */
	uint64_t   *hashes;			/* (cap) prefix hashes of its full blocks */
	uint64_t   *serials;		/* (cap) serial of the cached registration holding each hashed block's
								 * content; 0 when none */
	int			n;				/* blocks in the table */
	int			n_dropped;		/* leading blocks dropped: every position in them is behind the window */
	int			n_hashed;		/* full blocks hashed (and offered to the cache) */
	int			cap;
	bool		swapped;		/* its KV is in swap space (swap_ids); it holds no device block */
	int32_t    *swap_ids;		/* (cap) swap blocks of its first n_swap blocks, in table order */
	int			n_swap;
} block_table;

int			bm_create(const bm_params *p, block_manager **out, cbllm_err *err);
void		bm_free(block_manager *bm);

/* ---- the pool */

/* Take a free block, else evict a cached one (reference count 1); -1 when none. */
int32_t		bm_alloc(block_manager *bm);

/* Blocks that bm_alloc can still hand out (free + evictable). */
static inline int
bm_available(const block_manager *bm)
{
	return bm->n_free + bm->n_evictable;
}

/* Add an owner to a block in use. */
void		bm_ref(block_manager *bm, int32_t block);

/* Drop an owner; with none left the block returns to the pool (or the LRU list if registered). */
void		bm_release(block_manager *bm, int32_t block);

/* The hash of a full block: its parent's hash (bm_scope_seed for a first block) and its tokens. */
uint64_t	bm_block_hash(const block_manager *bm, uint64_t parent, const int32_t *tokens);

/* What a first block's hash chains from: its scope's salt, and its factor set mixed in. */
static inline uint64_t
bm_scope_seed(bm_scope scope)
{
	return scope.salt ^ (scope.rope_set != 0 ? 0x9e3779b97f4a7c15ULL : 0);
}

/* A registered block matching all of key, now owned once more by the caller; -1 when none. */
int32_t		bm_lookup(block_manager *bm, const bm_block_key *key);

/*
 * Register a full block under key.  Returns the serial of the registration
 * that now holds key's content: the block's own, or that of an equal block
 * registered before (this one then stays unregistered); 0 when none.
 */
uint64_t	bm_register(block_manager *bm, int32_t block, const bm_block_key *key);

/* The serial of a block's registration, 0 when it is not registered. */
static inline uint64_t
bm_serial(const block_manager *bm, int32_t block)
{
	return block >= 0 && block < bm->n_blocks ? bm->serial[block] : 0;
}

/* Drop every registered hash (cached blocks become plain free blocks). */
void		bm_reset_prefix(block_manager *bm);

/* ---- sequences */

/* Blocks needed to hold n positions. */
static inline int
bm_blocks_for(const block_manager *bm, int n)
{
	return (n + bm->block_size - 1) / bm->block_size;
}

/* Make room in t for n block entries; CBLLM_ERR_NOMEM (t unchanged in use) when that fails. */
int			bm_reserve(block_table *t, int n);

/* Grow t to cover n_positions; CBLLM_ERR_FULL (taking none) when the pool runs dry. */
int			bm_allocate(block_manager *bm, block_table *t, int n_positions);

/* Give back every device block of t (full ones stay in the prefix cache); its swap blocks stay. */
void		bm_release_table(block_manager *bm, block_table *t);

/* Give back t's swap blocks, if any: its swapped KV is gone. */
void		bm_release_swap(block_manager *bm, block_table *t);

/* Free t's arrays (its blocks must have been released). */
void		bm_table_free(block_table *t);

/* The prefix-cache key of block b of a sequence of tokens in scope (t's hashes and serials before b). */
void		bm_block_key_of(const block_manager *bm, const block_table *t, const int32_t *tokens,
							bm_scope scope, int b, bm_block_key *key);

/*
 * Share the cached full blocks that begin a fresh sequence of n_tokens
 * tokens in scope (t empty), leaving its last token to compute; the
 * positions now covered (0 with prefix caching off).
 */
int			bm_match_prefix(block_manager *bm, block_table *t, const int32_t *tokens, int n_tokens,
							bm_scope scope);

/* Offer t's blocks that n_computed positions (computed in scope) have filled to the prefix cache. */
void		bm_cache_blocks(block_manager *bm, block_table *t, const int32_t *tokens, bm_scope scope,
							int n_computed);

/* Sliding window: give back t's blocks that no token after n_computed - 1 can see. */
void		bm_drop_window(block_manager *bm, block_table *t, int n_computed);

/*
 * Move t's KV to the swap area: takes a swap block for each of t's blocks,
 * writes the copies to make (blocks[i] to swap_ids[i], t->n of them) and
 * gives the device blocks back.  CBLLM_ERR_FULL, with nothing changed, when
 * the swap area cannot take them; CBLLM_ERR_INVALID for an empty or
 * swapped table.
 */
int			bm_swap_out(block_manager *bm, block_table *t, int32_t *blocks, int32_t *swap_ids);

/*
 * Bring swapped t back into device blocks covering n_positions (at least
 * its swapped blocks): writes the copies to make (swap_ids[i] to blocks[i])
 * and gives the swap blocks back; returns how many copies.  CBLLM_ERR_FULL
 * or CBLLM_ERR_NOMEM, with nothing changed, when the pool cannot take them.
 */
int			bm_swap_in(block_manager *bm, block_table *t, int n_positions, int32_t *blocks,
					   int32_t *swap_ids);

#endif
