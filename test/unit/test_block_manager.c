/*
 * test_block_manager.c: unit tests of the KV block manager, with no model
 * and no K or V memory: parameter checks, allocation until empty, release,
 * reference counts, double release, the prefix cache (hits verified by
 * tokens, parent and salt with every hash forced equal, a registration table
 * that survives churn, salts), and the block tables of sequences: all-or-
 * nothing growth, prefix matching that leaves the last token to compute,
 * registration of filled blocks, sliding-window drops, and the swap
 * bookkeeping (which swap block holds which block, and back).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv/block_manager.h"
#include "tap.h"

/* A manager of n_blocks blocks of block_size (and p's other fields); NULL (a failed check) when creation fails. */
static block_manager *
NewBmWith(bm_params p)
{
	block_manager *bm = NULL;
	cbllm_err	err = {{0}};

	if (bm_create(&p, &bm, &err) != CBLLM_OK)
	{
		TAP_OK(false, "bm_create(%d blocks of %d): %s", p.n_blocks, p.block_size, err.msg);
		return NULL;
	}
	return bm;
}

/* A manager of n_blocks blocks of block_size, no swap area, no window, prefix caching on. */
static block_manager *
NewBm(int n_blocks, int block_size)
{
	return NewBmWith((bm_params) {n_blocks, block_size, 0, 0, false});
}

/* Invalid parameters fail as CBLLM_ERR_INVALID with a message, creating nothing. */
static void
TestInvalidParams(void)
{
	struct
	{
		const char *what;
		bm_params	p;
	}			cases[] = {
		{"0 blocks", {0, 16, 0, 0, false}},
		{"-3 blocks", {-3, 16, 0, 0, false}},
		{"block_size 0", {4, 0, 0, 0, false}},
		{"block_size -16", {4, -16, 0, 0, false}},
		{"block_size 2048 (above 1024)", {4, 2048, 0, 0, false}},
	};

	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		block_manager *bm = NULL;
		cbllm_err	err = {{0}};
		int			rc = bm_create(&cases[i].p, &bm, &err);

		TAP_OK(rc == CBLLM_ERR_INVALID && bm == NULL && err.msg[0] != '\0',
			   "bm_create with %s fails as invalid (%s): %s", cases[i].what,
			   cbllm_status_name(rc), err.msg);
		if (rc == CBLLM_OK)
			bm_free(bm);
	}
	bm_free(NULL);				/* a no-op; a crash here fails the plan */
}

/* A new manager: every block free with reference count 0, the swap area all free. */
static void
TestCreate(void)
{
	block_manager *bm = NewBmWith((bm_params) {5, 16, 3, 0, false});
	bool		zero = true;

	if (bm == NULL)
		return;
	TAP_OK(bm->n_blocks == 5 && bm->block_size == 16, "the manager records its pool's geometry");
	TAP_OK(bm->n_free == 5 && bm_available(bm) == 5, "all 5 blocks start free");
	for (int b = 0; b < 5; b++)
		zero = zero && bm->refcount[b] == 0;
	TAP_OK(zero, "all reference counts start at 0");
	TAP_OK(bm->n_swap_blocks == 3 && bm->n_swap_free == 3, "all 3 swap blocks start free");
	bm_free(bm);
}

/* Whether ids[0..n) are distinct and all in [0, n_blocks). */
static bool
DistinctIds(const int32_t *ids, int n, int n_blocks)
{
	bool	   *seen = calloc(n_blocks, sizeof(bool));
	bool		ok = true;

	for (int i = 0; i < n && ok; i++)
	{
		if (ids[i] < 0 || ids[i] >= n_blocks || seen[ids[i]])
			ok = false;
		else
			seen[ids[i]] = true;
	}
	free(seen);
	return ok;
}

/* Allocation: distinct ids until empty, then -1; release returns blocks. */
static void
TestAllocRelease(void)
{
	const int	nb = 8;
	block_manager *bm = NewBm(nb, 4);
	int32_t		ids[8];
	int32_t		again;
	bool		counts = true;

	if (bm == NULL)
		return;
	for (int i = 0; i < nb; i++)
	{
		ids[i] = bm_alloc(bm);
		counts = counts && bm->n_free == nb - 1 - i && ids[i] >= 0 && bm->refcount[ids[i]] == 1;
	}
	TAP_OK(DistinctIds(ids, nb, nb), "8 allocations return 8 distinct ids in [0, 8)");
	TAP_OK(counts, "each allocation takes one free block and gives it reference count 1");
	TAP_OK(bm_alloc(bm) == -1 && bm_alloc(bm) == -1 && bm->n_free == 0,
		   "the empty pool returns -1, repeatedly, without going negative");

	bm_release(bm, ids[3]);
	TAP_OK(bm->n_free == 1 && bm->refcount[ids[3]] == 0, "release frees the block");
	again = bm_alloc(bm);
	TAP_OK(again == ids[3] && bm_alloc(bm) == -1,
		   "the released block is the one handed out next, and only it");
	for (int i = 0; i < nb; i++)
		bm_release(bm, ids[i]);
	TAP_OK(bm->n_free == nb, "releasing every block frees the whole pool");
	for (int i = 0; i < nb; i++)
		ids[i] = bm_alloc(bm);
	TAP_OK(DistinctIds(ids, nb, nb) && bm_alloc(bm) == -1,
		   "after a full release the pool hands out 8 distinct ids again");
	bm_free(bm);
}

/* Reference counts: a shared block is free only after every owner releases it. */
static void
TestRefcount(void)
{
	block_manager *bm = NewBm(2, 4);
	int32_t		a,
				b;

	if (bm == NULL)
		return;
	a = bm_alloc(bm);
	b = bm_alloc(bm);
	bm_ref(bm, a);
	TAP_OK(bm->refcount[a] == 2 && bm->refcount[b] == 1, "ref raises the count to 2");
	bm_release(bm, a);
	TAP_OK(bm->refcount[a] == 1 && bm->n_free == 0 && bm_alloc(bm) == -1,
		   "the first of two releases keeps the block in use");
	bm_release(bm, a);
	TAP_OK(bm->refcount[a] == 0 && bm->n_free == 1, "the second release frees it");
	TAP_OK(bm_alloc(bm) == a && bm->refcount[a] == 1, "and it can be allocated again");
	bm_ref(bm, b);
	bm_ref(bm, b);
	bm_release(bm, b);
	bm_release(bm, b);
	TAP_OK(bm->refcount[b] == 1 && bm->n_free == 0, "three owners: two releases leave one");
	bm_release(bm, b);
	TAP_OK(bm->refcount[b] == 0 && bm->n_free == 1, "the third release frees it");
	bm_free(bm);
}

/* A double release (or a bogus id) does not corrupt the free list. */
static void
TestDoubleRelease(void)
{
	const int	nb = 6;
	block_manager *bm = NewBm(nb, 4);
	int32_t		ids[7];
	int32_t		a;
	int			n = 0;
	bool		bounded = true;

	if (bm == NULL)
		return;
	a = bm_alloc(bm);
	bm_release(bm, a);
	bm_release(bm, a);
	bounded = bm->n_free == nb;
	bm_release(bm, a);
	bm_release(bm, -1);
	bm_release(bm, nb);
	bm_release(bm, 1 << 30);
	bounded = bounded && bm->n_free == nb && bm->refcount[a] == 0;
	TAP_OK(bounded, "double and triple release and out-of-range ids leave n_free at n_blocks (%d)",
		   bm->n_free);
	while (n < 7 && (ids[n] = bm_alloc(bm)) >= 0)
		n++;
	TAP_OK(n == nb && DistinctIds(ids, n, nb),
		   "after the double release the pool hands out %d distinct ids, then -1 (got %d)", nb, n);

	/* a double release of a block while the others are in use */
	bm_release(bm, ids[2]);
	bm_release(bm, ids[2]);
	TAP_OK(bm->n_free == 1, "a double release of one block in a full pool frees one slot (%d)",
		   bm->n_free);
	a = bm_alloc(bm);
	TAP_OK(a == ids[2] && bm_alloc(bm) == -1,
		   "that block comes back once, and the pool is then empty");
	bm_free(bm);
}

#define PBS 4					/* positions per block in the prefix-cache tests */

/* The key of tokens after the cached block (parent_hash, parent serial; 0: a first block) in salt. */
static bm_block_key
KeyFor(const block_manager *bm, const int32_t *tokens, uint64_t parent_hash, uint64_t parent,
		uint64_t salt)
{
	bm_block_key k = {0};

	k.tokens = tokens;
	k.salt = salt;
	k.parent = parent;
	k.hash = bm_block_hash(bm, parent == 0 ? salt : parent_hash, tokens);
	return k;
}

/* Look key up and give the reference back at once; the block found or -1. */
static int32_t
Probe(block_manager *bm, const bm_block_key *key)
{
	int32_t		b = bm_lookup(bm, key);

	bm_release(bm, b);
	return b;
}

/*
 * With every hash forced equal, a hit still needs the block's own tokens, its
 * registered parent and its salt; colliding registrations coexist; a parent
 * is named by its registration, so a reused block id adopts no old children.
 */
static void
TestPrefixForcedCollisions(void)
{
	static const int32_t X[PBS] = {1, 2, 3, 4},
				Y[PBS] = {5, 6, 7, 8},
				X2[PBS] = {1, 2, 3, 9},
				Z[PBS] = {10, 11, 12, 13},
				Q[PBS] = {20, 21, 22, 23};
	block_manager *bm = NewBm(6, PBS);
	int32_t		a0,
				a1,
				b0,
				b1,
				dup,
				reused;
	uint64_t	sa0,
				sa1,
				sb0,
				sb1,
				sq;
	bm_block_key ka0,
				ka1,
				kb0,
				kb1,
				k;

	if (bm == NULL)
		return;
	bm->test_hash = 42;
	TAP_OK(bm_block_hash(bm, 0, X) == bm_block_hash(bm, 99, Y),
		   "the test hook forces every block hash equal");
	/* prompt A = X Y and prompt B = X2 Z, all four blocks under one hash */
	a0 = bm_alloc(bm);
	a1 = bm_alloc(bm);
	b0 = bm_alloc(bm);
	b1 = bm_alloc(bm);
	ka0 = KeyFor(bm, X, 0, 0, 0);
	sa0 = bm_register(bm, a0, &ka0);
	ka1 = KeyFor(bm, Y, ka0.hash, sa0, 0);
	sa1 = bm_register(bm, a1, &ka1);
	kb0 = KeyFor(bm, X2, 0, 0, 0);
	sb0 = bm_register(bm, b0, &kb0);
	kb1 = KeyFor(bm, Z, kb0.hash, sb0, 0);
	sb1 = bm_register(bm, b1, &kb1);
	TAP_OK(sa0 != 0 && sa1 != 0 && sb0 != 0 && sb1 != 0 && sa0 != sa1 && sa0 != sb0 &&
		   sa0 != sb1 && sa1 != sb0 && sa1 != sb1 && sb0 != sb1,
		   "four blocks of one hash are all registered, with four distinct serials");
	TAP_OK(Probe(bm, &ka0) == a0 && Probe(bm, &ka1) == a1 && Probe(bm, &kb0) == b0 &&
		   Probe(bm, &kb1) == b1,
		   "identical prefixes still hit: each key finds its own block among the colliding ones");
	k = KeyFor(bm, (const int32_t[PBS]) {1, 2, 3, 5}, 0, 0, 0);
	TAP_OK(Probe(bm, &k) == -1, "a first block that differs in its last token misses");
	k = KeyFor(bm, Y, kb0.hash, sb0, 0);
	TAP_OK(Probe(bm, &k) == -1,
		   "A's second-block tokens after B's first block miss: the registered parent must match too");
	k = KeyFor(bm, Z, ka0.hash, sa0, 0);
	TAP_OK(Probe(bm, &k) == -1, "B's second-block tokens after A's first block miss");
	k = KeyFor(bm, Y, 0, 0, 0);
	TAP_OK(Probe(bm, &k) == -1, "a second block's tokens looked up as a first block miss");
	k = KeyFor(bm, X, 0, 0, 7);
	TAP_OK(Probe(bm, &k) == -1, "A's first block looked up under another salt misses");
	k = KeyFor(bm, Q, 0, 0, 0);
	TAP_OK(Probe(bm, &k) == -1, "tokens never registered miss");
	TAP_OK(bm->prefix_queries == 10 && bm->prefix_hits == 4,
		   "the counters saw 10 lookups and 4 hits (%lld, %lld)", (long long) bm->prefix_queries,
		   (long long) bm->prefix_hits);

	/* a second block with A's first block's content: the first registration holds it */
	dup = bm_alloc(bm);
	TAP_OK(bm_register(bm, dup, &ka0) == sa0 && bm_serial(bm, dup) == 0,
		   "registering an equal block returns the existing serial and leaves the copy unregistered");
	bm_release(bm, dup);

	/* evict A's first block and register its id again for other tokens */
	bm_release(bm, a0);
	bm_release(bm, a1);
	bm_release(bm, b0);
	bm_release(bm, b1);
	bm_alloc(bm);
	bm_alloc(bm);			/* the two free blocks */
	reused = bm_alloc(bm);	/* the least recently released cached block: a0 */
	TAP_OK(reused == a0 && bm_serial(bm, a0) == 0 && Probe(bm, &ka0) == -1,
		   "allocation evicts the least recently released cached block, which then misses");
	k = KeyFor(bm, Q, 0, 0, 0);
	sq = bm_register(bm, reused, &k);
	TAP_OK(sq != 0 && sq != sa0, "the reused block id gets a new serial (%llu, was %llu)",
		   (unsigned long long) sq, (unsigned long long) sa0);
	k = KeyFor(bm, Y, k.hash, sq, 0);
	TAP_OK(Probe(bm, &k) == -1,
		   "A's second block does not match after the new tokens in its old parent's block id");
	TAP_OK(Probe(bm, &kb0) == b0 && Probe(bm, &kb1) == b1,
		   "B's blocks are still found after a colliding registration was deleted");
	bm_reset_prefix(bm);
	TAP_OK(Probe(bm, &kb0) == -1 && Probe(bm, &ka1) == -1 && bm->n_evictable == 0 &&
		   bm_serial(bm, b0) == 0, "reset_prefix forgets every registration");
	bm_free(bm);
}

/*
 * Many rounds of register, release and evict, with real and with forced
 * hashes: the table's deleted slots and rebuilds never lose or confuse a
 * registration.
 */
static void
TestPrefixChurn(void)
{
	const int	nb = 8;

	for (int forced = 0; forced < 2; forced++)
	{
		block_manager *bm = NewBm(nb, PBS);
		int32_t		tok[2][8][PBS];
		int32_t		blk[8];
		bool		own = true,
					old_gone = true;

		if (bm == NULL)
			return;
		bm->test_hash = forced ? 7 : 0;
		for (int round = 0; round < 60; round++)
		{
			int32_t    (*cur)[PBS] = tok[round % 2];
			int32_t    (*prev)[PBS] = tok[(round + 1) % 2];

			for (int i = 0; i < nb; i++)
			{
				bm_block_key k;

				for (int t = 0; t < PBS; t++)
					cur[i][t] = round * 1000 + i * 10 + t;
				blk[i] = bm_alloc(bm);	/* evicts the previous round's blocks */
				k = KeyFor(bm, cur[i], 0, 0, (uint64_t) i);
				bm_register(bm, blk[i], &k);
			}
			for (int i = 0; i < nb; i++)
				bm_release(bm, blk[i]);
			for (int i = 0; i < nb; i++)
			{
				bm_block_key k = KeyFor(bm, cur[i], 0, 0, (uint64_t) i);

				own = own && Probe(bm, &k) == blk[i];
				if (round > 0)
				{
					k = KeyFor(bm, prev[i], 0, 0, (uint64_t) i);
					old_gone = old_gone && Probe(bm, &k) == -1;
				}
			}
		}
		TAP_OK(own && old_gone,
			   "%s hashes: over 60 rounds of 8 registrations and evictions every block is found, every evicted one missed",
			   forced ? "forced-equal" : "real");
		TAP_OK(bm->n_evictable == nb && bm->table_deleted <= bm->table_cap / 4,
			   "%s hashes: all 8 blocks stay cached and deleted slots stay bounded (%d of %d)",
			   forced ? "forced-equal" : "real", bm->table_deleted, bm->table_cap);
		bm_free(bm);
	}
}

/* The salt seeds the hash chain and is checked on a hit: equal tokens never cross salts. */
static void
TestPrefixSalt(void)
{
	static const int32_t X[PBS] = {1, 2, 3, 4};
	block_manager *bm = NewBm(2, PBS);
	bm_block_key k1,
				k2;
	int32_t		b;

	if (bm == NULL)
		return;
	k1 = KeyFor(bm, X, 0, 0, 1);
	k2 = KeyFor(bm, X, 0, 0, 2);
	TAP_OK(k1.hash != k2.hash, "the same first block hashes differently under salts 1 and 2");
	b = bm_alloc(bm);
	bm_register(bm, b, &k1);
	bm_release(bm, b);
	TAP_OK(Probe(bm, &k2) == -1 && Probe(bm, &k1) == b,
		   "a block cached under salt 1 misses under salt 2 and hits under salt 1");
	k2.hash = k1.hash;			/* a salt-2 key whose hash collides with salt 1's */
	TAP_OK(Probe(bm, &k2) == -1, "even with a colliding hash, the salt-2 lookup misses");
	bm_free(bm);
}

/* Tokens 100 + i * 7 + seed, i in [0, n): a deterministic prompt. */
static void
FillTokens(int32_t *tok, int n, int seed)
{
	for (int i = 0; i < n; i++)
		tok[i] = 100 + i * 7 + seed;
}

/* A table grows to cover the positions asked for, or not at all when the pool cannot. */
static void
TestTableAllocateAllOrNothing(void)
{
	block_manager *bm = NewBm(4, 4);
	block_table t = {0};

	if (bm == NULL)
		return;
	TAP_OK(bm_allocate(bm, &t, 10) == CBLLM_OK && t.n == 3 && bm_available(bm) == 1 &&
		   DistinctIds(t.ids, t.n, 4),
		   "10 positions in blocks of 4 take 3 distinct blocks");
	TAP_OK(bm_allocate(bm, &t, 12) == CBLLM_OK && t.n == 3 && bm_available(bm) == 1,
		   "growing to 12 positions takes nothing more: the 3 blocks hold them");
	TAP_OK(bm_allocate(bm, &t, 20) == CBLLM_ERR_FULL && t.n == 3 && bm_available(bm) == 1,
		   "20 positions (5 blocks) in a pool of 4 fail as full and take none of the last block");
	TAP_OK(bm_allocate(bm, &t, 16) == CBLLM_OK && t.n == 4 && bm_available(bm) == 0,
		   "16 positions take the last block");
	bm_release_table(bm, &t);
	TAP_OK(t.n == 0 && bm_available(bm) == 4, "releasing the table frees all 4 blocks");
	bm_table_free(&t);
	bm_free(bm);
}

/*
 * Run a fresh sequence of n tokens through the pool as a step would: match
 * its prefix, allocate the rest, mark every position computed and offer its
 * full blocks, then release it.  Returns the positions the prefix match
 * covered.
 */
static int
RunSequence(block_manager *bm, const int32_t *tok, int n, bm_scope scope)
{
	block_table t = {0};
	int			hit = bm_match_prefix(bm, &t, tok, n, scope);

	if (bm_allocate(bm, &t, n) != CBLLM_OK)
		hit = -1;
	else
		bm_cache_blocks(bm, &t, tok, scope, n);
	bm_release_table(bm, &t);
	bm_table_free(&t);
	return hit;
}

/*
 * A second run of a prompt shares its full blocks, never its last token;
 * salts, RoPE factor sets and the switch are honoured.
 */
static void
TestTablePrefixMatch(void)
{
	block_manager *bm = NewBm(16, 4);
	block_manager *off = NewBmWith((bm_params) {16, 4, 0, 0, true});
	int32_t		tok[9],
				other[9];

	if (bm == NULL || off == NULL)
		return;
	FillTokens(tok, 9, 0);
	FillTokens(other, 9, 0);
	other[5] = 1;				/* differs in the second block */
	TAP_OK(RunSequence(bm, tok, 9, (bm_scope) {0, 0}) == 0, "a first 9-token run finds nothing cached");
	TAP_OK(bm->n_evictable == 2, "its 2 full blocks stay cached after release, the partial third does not (%d)",
		   bm->n_evictable);
	TAP_OK(RunSequence(bm, tok, 9, (bm_scope) {0, 0}) == 8, "the same 9 tokens again reuse both full blocks: 8 positions");
	TAP_OK(RunSequence(bm, tok, 8, (bm_scope) {0, 0}) == 4,
		   "an 8-token prompt reuses only its first block: its last token is always computed");
	TAP_OK(RunSequence(bm, other, 9, (bm_scope) {0, 0}) == 4,
		   "a prompt that differs in its second block reuses only the first");
	TAP_OK(RunSequence(bm, tok, 9, (bm_scope) {5, 0}) == 0, "the same tokens under another salt reuse nothing");
	TAP_OK(RunSequence(bm, tok, 9, (bm_scope) {0, 1}) == 0 &&
		   RunSequence(bm, tok, 9, (bm_scope) {0, 1}) == 8 && RunSequence(bm, tok, 9, (bm_scope) {0, 0}) == 8,
		   "the same tokens and salt computed with the other RoPE factor set reuse nothing, and each set reuses its own");
	TAP_OK(RunSequence(off, tok, 9, (bm_scope) {0, 0}) == 0 && RunSequence(off, tok, 9, (bm_scope) {0, 0}) == 0 &&
		   off->n_evictable == 0 && off->prefix_queries == 0,
		   "with prefix caching off nothing is registered or looked up");
	TAP_OK(bm_available(bm) == 16 && bm_available(off) == 16, "no block is held after the runs");
	bm_free(bm);
	bm_free(off);
}

/* Only blocks whose every position is computed are offered; a block after an unoffered one is not. */
static void
TestTableCacheBlocks(void)
{
	block_manager *bm = NewBmWith((bm_params) {8, 4, 0, 4, false});
	block_table t = {0};
	int32_t		tok[12];

	if (bm == NULL)
		return;
	FillTokens(tok, 12, 3);
	bm_allocate(bm, &t, 12);
	bm_cache_blocks(bm, &t, tok, (bm_scope) {0}, 7);
	TAP_OK(t.n_hashed == 1 && bm_serial(bm, t.ids[0]) != 0 && bm_serial(bm, t.ids[1]) == 0,
		   "7 computed positions register block 0 only");
	bm_cache_blocks(bm, &t, tok, (bm_scope) {0}, 8);
	TAP_OK(t.n_hashed == 2 && bm_serial(bm, t.ids[1]) != 0 && t.serials[1] == bm_serial(bm, t.ids[1]),
		   "the 8th position registers block 1, and the table records its serial");
	bm_release_table(bm, &t);
	bm_table_free(&t);

	/* a window that drops block 0 before it is offered: no lookup could name it as a parent */
	bm_reset_prefix(bm);
	bm_allocate(bm, &t, 12);
	bm_drop_window(bm, &t, 9);
	bm_cache_blocks(bm, &t, tok, (bm_scope) {0}, 12);
	TAP_OK(t.ids[0] == -1 && t.n_hashed == 3 && bm_serial(bm, t.ids[1]) == 0 &&
		   bm_serial(bm, t.ids[2]) == 0 && bm->n_evictable == 0,
		   "after block 0 was dropped unoffered, blocks 1 and 2 are hashed but never registered");
	bm_release_table(bm, &t);
	TAP_OK(bm_available(bm) == 8, "the dropped block is not released twice: all 8 are free");
	bm_table_free(&t);
	bm_free(bm);
}

/* Sliding window: the blocks wholly before the window of the next token are given back. */
static void
TestTableDropWindow(void)
{
	block_manager *bm = NewBmWith((bm_params) {8, 4, 0, 8, false});
	block_manager *full = NewBm(8, 4);
	block_table t = {0},
				u = {0};

	if (bm == NULL || full == NULL)
		return;
	bm_allocate(bm, &t, 20);
	bm_drop_window(bm, &t, 8);
	TAP_OK(t.n_dropped == 0 && bm_available(bm) == 3,
		   "window 8 at 8 computed positions: the next token still sees position 1, nothing drops");
	bm_drop_window(bm, &t, 12);
	TAP_OK(t.n_dropped == 1 && t.ids[0] == -1 && bm_available(bm) == 4,
		   "at 12 computed the next token sees from position 5: block 0 (positions 0-3) drops");
	bm_drop_window(bm, &t, 16);
	TAP_OK(t.n_dropped == 2 && t.ids[1] == -1 && t.ids[2] >= 0 && bm_available(bm) == 5,
		   "at 16 computed block 1 drops too; block 2 (positions 8-11) is still seen");
	bm_drop_window(bm, &t, 16);
	TAP_OK(t.n_dropped == 2 && bm_available(bm) == 5, "dropping again at the same point changes nothing");
	bm_allocate(full, &u, 20);
	bm_drop_window(full, &u, 16);
	TAP_OK(u.n_dropped == 0 && bm_available(full) == 3, "a model without a window never drops a block");
	bm_release_table(bm, &t);
	bm_release_table(full, &u);
	TAP_OK(bm_available(bm) == 8 && bm_available(full) == 8 && t.n_dropped == 0,
		   "releasing the tables frees the rest once");
	bm_table_free(&t);
	bm_table_free(&u);
	bm_free(bm);
	bm_free(full);
}

/* Swap out lists each block's swap block and frees the pool's; swap in lists them back. */
static void
TestTableSwap(void)
{
	block_manager *bm = NewBmWith((bm_params) {6, 4, 4, 0, false});
	block_table a = {0},
				b = {0};
	int32_t		blocks[8],
				ids[8],
				held[3],
				in_blocks[8],
				in_ids[8];
	int			n;

	if (bm == NULL)
		return;
	bm_allocate(bm, &a, 12);
	bm_allocate(bm, &b, 8);
	memcpy(held, a.ids, sizeof(held));
	TAP_OK(bm_swap_out(bm, &a, blocks, ids) == CBLLM_OK && a.swapped && a.n == 0 && a.n_swap == 3,
		   "a 3-block table swaps out: it holds 3 swap blocks and no pool block");
	TAP_OK(memcmp(blocks, held, sizeof(held)) == 0 && DistinctIds(ids, 3, 4) &&
		   memcmp(ids, a.swap_ids, sizeof(int32_t) * 3) == 0,
		   "the copies to make are its 3 blocks, in table order, to 3 distinct swap blocks");
	TAP_OK(bm_available(bm) == 4 && bm->n_swap_free == 1, "its pool blocks are free again, 1 swap block is left");
	TAP_OK(bm_swap_out(bm, &b, blocks, ids) == CBLLM_ERR_FULL && !b.swapped && b.n == 2 &&
		   bm->n_swap_free == 1,
		   "a 2-block table does not fit the last swap block: nothing changes");
	TAP_OK(bm_swap_out(bm, &a, blocks, ids) == CBLLM_ERR_INVALID, "a swapped table cannot swap out again");

	/* the pool full: the swap-in fails and changes nothing */
	{
		block_table fill = {0};

		bm_allocate(bm, &fill, 16);
		TAP_OK(bm_swap_in(bm, &a, 12, in_blocks, in_ids) == CBLLM_ERR_FULL && a.swapped &&
			   a.n == 0 && bm->n_swap_free == 1,
			   "with the pool full the swap-in fails, taking nothing and keeping the swap blocks");
		bm_release_table(bm, &fill);
		bm_table_free(&fill);
	}
	n = bm_swap_in(bm, &a, 14, in_blocks, in_ids);
	TAP_OK(n == 3 && !a.swapped && a.n == 4 && bm->n_swap_free == 4 &&
		   memcmp(in_ids, ids, sizeof(int32_t) * 3) == 0 &&
		   memcmp(in_blocks, a.ids, sizeof(int32_t) * 3) == 0,
		   "the swap-in takes 4 blocks for 14 positions and lists 3 copies from the same swap blocks into its first 3");
	TAP_OK(bm_swap_in(bm, &a, 14, in_blocks, in_ids) == CBLLM_ERR_INVALID,
		   "a table that is not swapped cannot swap in");
	bm_swap_out(bm, &b, blocks, ids);
	bm_release_swap(bm, &b);
	TAP_OK(!b.swapped && b.n_swap == 0 && bm->n_swap_free == 4,
		   "releasing a swapped table's swap blocks gives them all back");
	bm_release_table(bm, &a);
	TAP_OK(bm_available(bm) == 6, "every pool block is free at the end");
	bm_table_free(&a);
	bm_table_free(&b);
	bm_free(bm);
}

int
main(void)
{
	TestInvalidParams();
	TestCreate();
	TestAllocRelease();
	TestRefcount();
	TestDoubleRelease();
	TestPrefixForcedCollisions();
	TestPrefixChurn();
	TestPrefixSalt();
	TestTableAllocateAllOrNothing();
	TestTablePrefixMatch();
	TestTableCacheBlocks();
	TestTableDropWindow();
	TestTableSwap();
	return tap_done();
}
