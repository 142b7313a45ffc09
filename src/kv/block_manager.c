/*
 * block_manager.c: the bookkeeping of the KV blocks and of the swap area.
 *
 * Design.  The block manager answers every question about who holds which
 * block, and it never touches a key or a value: the scheduler asks it for
 * room and tells it what a step computed, the engine has the backend copy
 * the blocks that bm_swap_out and bm_swap_in list.  Three structures:
 *
 *  - the pool: a stack of free ids and a reference count per block;
 *  - the prefix cache: an open-addressing table from prefix hash to the
 *    registered blocks (every hit verified against the block's tokens, scope
 *    and parent: block_manager.h), and an LRU list of registered blocks that
 *    no one owns, evicted oldest first when the free stack is empty;
 *  - the swap area's free stack.
 *
 * A sequence's block_table is owned by the sequence (a request) and changed
 * only here.  Its lifecycle: bm_match_prefix shares cached blocks when it is
 * fresh, bm_allocate grows it for the tokens of a step, bm_cache_blocks
 * registers the blocks a step filled, bm_drop_window gives back the blocks a
 * sliding window has passed, bm_swap_out / bm_swap_in move it to the swap
 * area and back, bm_release_table and bm_release_swap end it.  Every call
 * either succeeds or changes nothing, so a failed step of the scheduler
 * never leaves a half-built table.
 */
#include "kv/block_manager.h"

#include <stdlib.h>
#include <string.h>

#define SLOT_EMPTY 0
#define SLOT_DELETED 1

/* Create a pool of p->n_blocks blocks and a swap area of p->n_swap_blocks, all free. */
int
bm_create(const bm_params *p, block_manager **out, cbllm_err *err)
{
	block_manager *bm;
	int			n_swap = p->n_swap_blocks > 0 ? p->n_swap_blocks : 0;

	if (p->n_blocks < 1 || p->block_size < 1 || p->block_size > 1024)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "block manager: %d blocks of %d positions is not a valid pool",
						  p->n_blocks, p->block_size);
	bm = calloc(1, sizeof(*bm));
	if (bm == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	bm->n_blocks = p->n_blocks;
	bm->block_size = p->block_size;
	bm->sliding_window = p->sliding_window > 0 ? p->sliding_window : 0;
	bm->no_prefix_caching = p->no_prefix_caching;
	bm->free_ids = malloc(sizeof(int32_t) * p->n_blocks);
	bm->refcount = calloc(p->n_blocks, sizeof(int32_t));
	bm->hash = calloc(p->n_blocks, sizeof(uint64_t));
	bm->serial = calloc(p->n_blocks, sizeof(uint64_t));
	bm->parent = calloc(p->n_blocks, sizeof(uint64_t));
	bm->salt = calloc(p->n_blocks, sizeof(uint64_t));
	bm->rope_set = calloc(p->n_blocks, sizeof(uint8_t));
	bm->tokens = calloc((size_t) p->n_blocks * p->block_size, sizeof(int32_t));
	bm->next_serial = 1;
	bm->lru_prev = malloc(sizeof(int32_t) * p->n_blocks);
	bm->lru_next = malloc(sizeof(int32_t) * p->n_blocks);
	bm->table_cap = 16;
	while (bm->table_cap < 2 * p->n_blocks)
		bm->table_cap *= 2;
	bm->table_key = calloc(bm->table_cap, sizeof(uint64_t));
	bm->table_block = calloc(bm->table_cap, sizeof(int32_t));
	bm->lru_head = bm->lru_tail = -1;
	bm->n_swap_blocks = n_swap;
	bm->swap_free_ids = malloc(sizeof(int32_t) * (n_swap > 0 ? n_swap : 1));
	if (bm->free_ids == NULL || bm->refcount == NULL || bm->hash == NULL || bm->serial == NULL ||
		bm->parent == NULL || bm->salt == NULL || bm->rope_set == NULL || bm->tokens == NULL ||
		bm->lru_prev == NULL || bm->lru_next == NULL || bm->table_key == NULL || bm->table_block == NULL ||
		bm->swap_free_ids == NULL)
	{
		bm_free(bm);
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "block manager: cannot allocate the bookkeeping of %d blocks; lower the KV cache size",
						  p->n_blocks);
	}
	/* lowest ids on top of the stacks, so allocation order is predictable */
	for (int i = 0; i < p->n_blocks; i++)
		bm->free_ids[i] = p->n_blocks - 1 - i;
	bm->n_free = p->n_blocks;
	for (int i = 0; i < n_swap; i++)
		bm->swap_free_ids[i] = n_swap - 1 - i;
	bm->n_swap_free = n_swap;
	*out = bm;
	return CBLLM_OK;
}

/* Release the manager's memory. */
void
bm_free(block_manager *bm)
{
	if (bm == NULL)
		return;
	free(bm->free_ids);
	free(bm->refcount);
	free(bm->hash);
	free(bm->serial);
	free(bm->parent);
	free(bm->salt);
	free(bm->rope_set);
	free(bm->tokens);
	free(bm->lru_prev);
	free(bm->lru_next);
	free(bm->table_key);
	free(bm->table_block);
	free(bm->swap_free_ids);
	free(bm);
}

/* Whether registered block b was computed from exactly what key describes. */
static bool
Matches(const block_manager *bm, int32_t b, const bm_block_key *key)
{
	return bm->hash[b] == key->hash && bm->salt[b] == key->salt && bm->rope_set[b] == key->rope_set &&
		bm->parent[b] == key->parent &&
		memcmp(bm->tokens + (int64_t) b * bm->block_size, key->tokens,
			   sizeof(int32_t) * bm->block_size) == 0;
}

/*
 * The table slot of a block registered under hash: the one holding block
 * when block >= 0, else the first whose block matches key; -1 when none.
 * Every slot of an equal hash is probed, so colliding hashes coexist.
 */
static int
TableFind(const block_manager *bm, uint64_t hash, int32_t block, const bm_block_key *key)
{
	int			mask = bm->table_cap - 1;

	for (int i = (int) (hash & mask), n = 0; n < bm->table_cap; i = (i + 1) & mask, n++)
	{
		if (bm->table_key[i] == SLOT_EMPTY)
			return -1;
		if (bm->table_key[i] != hash)
			continue;
		if (block >= 0 ? bm->table_block[i] == block : Matches(bm, bm->table_block[i], key))
			return i;
	}
	return -1;
}

/* Insert hash -> block (the caller checked that no equal block is registered). */
static void
TableInsert(block_manager *bm, uint64_t hash, int32_t block)
{
	int			mask = bm->table_cap - 1;
	int			i = (int) (hash & mask);

	while (bm->table_key[i] != SLOT_EMPTY && bm->table_key[i] != SLOT_DELETED)
		i = (i + 1) & mask;
	if (bm->table_key[i] == SLOT_DELETED)
		bm->table_deleted--;
	bm->table_key[i] = hash;
	bm->table_block[i] = block;
}

/* Rebuild the table from the registered blocks, dropping deleted slots. */
static void
TableRebuild(block_manager *bm)
{
	for (int i = 0; i < bm->table_cap; i++)
		bm->table_key[i] = SLOT_EMPTY;
	bm->table_deleted = 0;
	for (int b = 0; b < bm->n_blocks; b++)
		if (bm->hash[b] != 0)
			TableInsert(bm, bm->hash[b], b);
}

/* Forget a block's registration. */
static void
Unregister(block_manager *bm, int32_t block)
{
	int			i = TableFind(bm, bm->hash[block], block, NULL);

	if (i >= 0)
	{
		bm->table_key[i] = SLOT_DELETED;
		bm->table_deleted++;
	}
	bm->hash[block] = 0;
	bm->serial[block] = 0;
	if (bm->table_deleted > bm->table_cap / 4)
		TableRebuild(bm);
}

/* Unlink an evictable block from the LRU list. */
static void
LruRemove(block_manager *bm, int32_t b)
{
	if (bm->lru_prev[b] >= 0)
		bm->lru_next[bm->lru_prev[b]] = bm->lru_next[b];
	else
		bm->lru_head = bm->lru_next[b];
	if (bm->lru_next[b] >= 0)
		bm->lru_prev[bm->lru_next[b]] = bm->lru_prev[b];
	else
		bm->lru_tail = bm->lru_prev[b];
	bm->n_evictable--;
}

/* Append a block to the LRU list (most recently released). */
static void
LruAppend(block_manager *bm, int32_t b)
{
	bm->lru_prev[b] = bm->lru_tail;
	bm->lru_next[b] = -1;
	if (bm->lru_tail >= 0)
		bm->lru_next[bm->lru_tail] = b;
	else
		bm->lru_head = b;
	bm->lru_tail = b;
	bm->n_evictable++;
}

/* Take a free block, else evict the least recently released cached block; -1 when none. */
int32_t
bm_alloc(block_manager *bm)
{
	int32_t		b;

	if (bm->n_free > 0)
		b = bm->free_ids[--bm->n_free];
	else if (bm->lru_head >= 0)
	{
		b = bm->lru_head;
		LruRemove(bm, b);
		Unregister(bm, b);
	}
	else
		return -1;
	bm->refcount[b] = 1;
	return b;
}

/* Add an owner to a block in use. */
void
bm_ref(block_manager *bm, int32_t block)
{
	if (block >= 0 && block < bm->n_blocks && bm->refcount[block] > 0)
		bm->refcount[block]++;
}

/* Drop an owner; free the block (or park it on the LRU list if registered) when none remain. */
void
bm_release(block_manager *bm, int32_t block)
{
	if (block < 0 || block >= bm->n_blocks || bm->refcount[block] <= 0)
		return;					/* a double release is ignored, never corrupts the pool */
	if (--bm->refcount[block] > 0)
		return;
	if (bm->hash[block] != 0)
		LruAppend(bm, block);
	else
		bm->free_ids[bm->n_free++] = block;
}

/*
 * FNV-1a over the parent hash and the block's token ids, then a 64-bit
 * finaliser; never 0 or 1.  Not cryptographic: lookups verify the tokens.
 */
uint64_t
bm_block_hash(const block_manager *bm, uint64_t parent, const int32_t *tokens)
{
	uint64_t	h = 0xcbf29ce484222325ULL;

	if (bm->test_hash != 0)
		return bm->test_hash > SLOT_DELETED ? bm->test_hash : SLOT_DELETED + 1;
	for (int i = 0; i < 8; i++)
		h = (h ^ ((parent >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
	for (int t = 0; t < bm->block_size; t++)
		for (int i = 0; i < 4; i++)
			h = (h ^ (((uint32_t) tokens[t] >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h > SLOT_DELETED ? h : h + 2;
}

/* Find a registered block matching key and take an owner's reference to it. */
int32_t
bm_lookup(block_manager *bm, const bm_block_key *key)
{
	int			i = TableFind(bm, key->hash, -1, key);
	int32_t		b;

	bm->prefix_queries++;
	if (i < 0)
		return -1;
	b = bm->table_block[i];
	if (bm->refcount[b] == 0)
		LruRemove(bm, b);
	bm->refcount[b]++;
	bm->prefix_hits++;
	return b;
}

/* Register a full block under key unless an equal block is registered; the serial holding it. */
uint64_t
bm_register(block_manager *bm, int32_t block, const bm_block_key *key)
{
	int			i;

	if (block < 0 || block >= bm->n_blocks || key->hash <= SLOT_DELETED)
		return 0;
	if (bm->hash[block] != 0)
		return Matches(bm, block, key) ? bm->serial[block] : 0;
	if ((i = TableFind(bm, key->hash, -1, key)) >= 0)
		return bm->serial[bm->table_block[i]];
	bm->hash[block] = key->hash;
	bm->serial[block] = bm->next_serial++;
	bm->parent[block] = key->parent;
	bm->salt[block] = key->salt;
	bm->rope_set[block] = key->rope_set;
	memcpy(bm->tokens + (int64_t) block * bm->block_size, key->tokens,
		   sizeof(int32_t) * bm->block_size);
	TableInsert(bm, key->hash, block);
	return bm->serial[block];
}

/* Drop every registration; evictable blocks become free. */
void
bm_reset_prefix(block_manager *bm)
{
	while (bm->lru_head >= 0)
	{
		int32_t		b = bm->lru_head;

		LruRemove(bm, b);
		bm->free_ids[bm->n_free++] = b;
	}
	for (int b = 0; b < bm->n_blocks; b++)
		bm->hash[b] = bm->serial[b] = 0;
	TableRebuild(bm);
}

/* Make room in t's table (its ids, hashes, serials and swap ids) for n entries. */
int
bm_reserve(block_table *t, int n)
{
	int			cap = n > 2 * t->cap ? n : 2 * t->cap;
	int32_t    *ids,
			   *sw;
	uint64_t   *h,
			   *sr;

	if (n <= t->cap)
		return CBLLM_OK;
	/* each array that grew is kept, so a failure leaves t consistent at its old capacity */
	if ((ids = realloc(t->ids, sizeof(int32_t) * cap)) != NULL)
		t->ids = ids;
	if ((h = realloc(t->hashes, sizeof(uint64_t) * cap)) != NULL)
		t->hashes = h;
	if ((sr = realloc(t->serials, sizeof(uint64_t) * cap)) != NULL)
		t->serials = sr;
	if ((sw = realloc(t->swap_ids, sizeof(int32_t) * cap)) != NULL)
		t->swap_ids = sw;
	if (ids == NULL || h == NULL || sr == NULL || sw == NULL)
		return CBLLM_ERR_NOMEM;
	t->cap = cap;
	return CBLLM_OK;
}

/* Grow t to cover n_positions, all or nothing. */
int
bm_allocate(block_manager *bm, block_table *t, int n_positions)
{
	int			need = bm_blocks_for(bm, n_positions);

	if (bm_reserve(t, need) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	if (need - t->n > bm_available(bm))
		return CBLLM_ERR_FULL;
	while (t->n < need)
		t->ids[t->n++] = bm_alloc(bm);
	return CBLLM_OK;
}

/* Return every device block of t to the pool. */
void
bm_release_table(block_manager *bm, block_table *t)
{
	for (int i = 0; i < t->n; i++)
		if (t->ids[i] >= 0)
			bm_release(bm, t->ids[i]);
	t->n = 0;
	t->n_dropped = 0;
	t->n_hashed = 0;
}

/* Take n swap blocks into ids, all or none. */
static int
SwapAlloc(block_manager *bm, int n, int32_t *ids)
{
	if (n > bm->n_swap_free)
		return CBLLM_ERR_FULL;
	for (int i = 0; i < n; i++)
		ids[i] = bm->swap_free_ids[--bm->n_swap_free];
	return CBLLM_OK;
}

/* Return t's swap blocks, if any. */
void
bm_release_swap(block_manager *bm, block_table *t)
{
	if (!t->swapped)
		return;
	for (int i = 0; i < t->n_swap && bm->n_swap_free < bm->n_swap_blocks; i++)
		bm->swap_free_ids[bm->n_swap_free++] = t->swap_ids[i];
	t->n_swap = 0;
	t->swapped = false;
}

/* Free t's arrays. */
void
bm_table_free(block_table *t)
{
	free(t->ids);
	free(t->hashes);
	free(t->serials);
	free(t->swap_ids);
	memset(t, 0, sizeof(*t));
}

/*
 * The prefix-cache key of full block b: its hash chained from block b - 1's
 * (from the scope's seed for the first), its tokens, its scope, and the
 * serial of the cached block that holds block b - 1's content.
 */
void
bm_block_key_of(const block_manager *bm, const block_table *t, const int32_t *tokens,
				bm_scope scope, int b, bm_block_key *key)
{
	key->tokens = tokens + (int64_t) b * bm->block_size;
	key->salt = scope.salt;
	key->rope_set = scope.rope_set;
	key->parent = b > 0 ? t->serials[b - 1] : 0;
	key->hash = bm_block_hash(bm, b > 0 ? t->hashes[b - 1] : bm_scope_seed(scope), key->tokens);
}

/* Share the cached full blocks of a fresh sequence's prefix; the positions they cover. */
int
bm_match_prefix(block_manager *bm, block_table *t, const int32_t *tokens, int n_tokens,
				bm_scope scope)
{
	int			n_full = (n_tokens - 1) / bm->block_size;

	if (bm->no_prefix_caching || t->n != 0 || bm_reserve(t, n_full) != CBLLM_OK)
		return 0;
	for (int b = 0; b < n_full; b++)
	{
		bm_block_key key;
		int32_t		blk;

		bm_block_key_of(bm, t, tokens, scope, b, &key);
		if ((blk = bm_lookup(bm, &key)) < 0)
			break;
		t->hashes[b] = key.hash;
		t->serials[b] = bm_serial(bm, blk);
		t->ids[t->n++] = blk;
		t->n_hashed = t->n;
	}
	return t->n * bm->block_size;
}

/*
 * Offer t's newly filled blocks to the prefix cache.  A block whose parent
 * has no serial (it was never cached: dropped behind a sliding window before
 * it was offered) is not offered either: no lookup could name that parent.
 */
void
bm_cache_blocks(block_manager *bm, block_table *t, const int32_t *tokens, bm_scope scope,
				int n_computed)
{
	if (bm->no_prefix_caching)
		return;
	while (t->n_hashed < t->n && (t->n_hashed + 1) * bm->block_size <= n_computed)
	{
		int			b = t->n_hashed;
		bm_block_key key;

		bm_block_key_of(bm, t, tokens, scope, b, &key);
		t->hashes[b] = key.hash;
		t->serials[b] = 0;
		if (t->ids[b] >= 0 && (b == 0 || t->serials[b - 1] != 0))
			t->serials[b] = bm_register(bm, t->ids[b], &key);
		t->n_hashed++;
	}
}

/*
 * Sliding-window models: the next token (position n_computed) attends to
 * positions from n_computed - window + 1 on, and later ones to positions
 * after that, so every block wholly before that position goes back to the
 * pool (or, registered, to the prefix cache) and its table entry becomes
 * -1, which attention never reads.
 */
void
bm_drop_window(block_manager *bm, block_table *t, int n_computed)
{
	int			window = bm->sliding_window;
	int			lim;

	if (window <= 0 || n_computed - window + 1 <= 0)
		return;
	lim = (n_computed - window + 1) / bm->block_size;	/* blocks [0, lim) end before it */
	lim = lim < t->n ? lim : t->n;
	for (; t->n_dropped < lim; t->n_dropped++)
	{
		bm_release(bm, t->ids[t->n_dropped]);
		t->ids[t->n_dropped] = -1;
	}
}

/* Move t's KV to swap blocks in the bookkeeping; the copies to make go to blocks and swap_ids. */
int
bm_swap_out(block_manager *bm, block_table *t, int32_t *blocks, int32_t *swap_ids)
{
	int			n = t->n,
				rc;

	if (t->swapped || n == 0)
		return CBLLM_ERR_INVALID;
	if ((rc = SwapAlloc(bm, n, t->swap_ids)) != CBLLM_OK)	/* swap_ids has t->cap entries */
		return rc;
	memcpy(blocks, t->ids, sizeof(int32_t) * n);
	memcpy(swap_ids, t->swap_ids, sizeof(int32_t) * n);
	t->n_swap = n;
	bm_release_table(bm, t);
	t->swapped = true;
	return CBLLM_OK;
}

/* Bring swapped t back into device blocks covering n_positions; the copies to make. */
int
bm_swap_in(block_manager *bm, block_table *t, int n_positions, int32_t *blocks,
		   int32_t *swap_ids)
{
	int			n = t->n_swap,
				rc;

	if (!t->swapped)
		return CBLLM_ERR_INVALID;
	if (n_positions < n * bm->block_size)
		n_positions = n * bm->block_size;
	if ((rc = bm_allocate(bm, t, n_positions)) != CBLLM_OK)
		return rc;
	memcpy(blocks, t->ids, sizeof(int32_t) * n);
	memcpy(swap_ids, t->swap_ids, sizeof(int32_t) * n);
	bm_release_swap(bm, t);
	return n;
}
