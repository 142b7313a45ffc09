/*
 * test_kv_cache.c: unit tests of the paged KV cache's block pool: parameter
 * checks, allocation until empty, release, reference counts, double release,
 * the layout of K and V (every (layer, block, slot) has its own memory), and
 * the prefix cache: hits verified by tokens, parent and salt with every hash
 * forced equal, and a registration table that survives churn.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv_cache.h"
#include "tap.h"

/* Create a cache; NULL (with a failed check) when creation fails. */
static kv_cache *
new_cache(int n_blocks, int block_size, int n_layers, int n_kv_heads, int head_dim)
{
	kv_cache_params p = {n_blocks, block_size, n_layers, n_kv_heads, head_dim, false};
	kv_cache   *kv = NULL;
	cbllm_err	err = {{0}};

	if (kv_cache_create(&p, &kv, &err) != CBLLM_OK)
	{
		TAP_OK(false, "kv_cache_create(%d, %d, %d, %d, %d): %s", n_blocks, block_size,
			   n_layers, n_kv_heads, head_dim, err.msg);
		return NULL;
	}
	return kv;
}

/* Invalid parameters fail as CBLLM_ERR_INVALID with a message, creating nothing. */
static void
test_invalid_params(void)
{
	struct
	{
		const char *what;
		kv_cache_params p;
	}			cases[] = {
		{"0 blocks", {0, 16, 2, 2, 8, false}},
		{"-3 blocks", {-3, 16, 2, 2, 8, false}},
		{"block_size 0", {4, 0, 2, 2, 8, false}},
		{"block_size -16", {4, -16, 2, 2, 8, false}},
		{"block_size 2048 (above 1024)", {4, 2048, 2, 2, 8, false}},
		{"0 layers", {4, 16, 0, 2, 8, false}},
		{"0 KV heads", {4, 16, 2, 0, 8, false}},
		{"head_dim 0", {4, 16, 2, 2, 0, false}},
		{"-1 layers", {4, 16, -1, 2, 8, false}},
		{"-2 KV heads and head_dim -4 (a positive product)", {4, 16, 2, -2, -4, false}},
	};

	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		kv_cache   *kv = NULL;
		cbllm_err	err = {{0}};
		int			rc = kv_cache_create(&cases[i].p, &kv, &err);

		TAP_OK(rc == CBLLM_ERR_INVALID && kv == NULL && err.msg[0] != '\0',
			   "kv_cache_create with %s fails as invalid (%s): %s", cases[i].what,
			   cbllm_status_name(rc), err.msg);
		if (rc == CBLLM_OK)
			kv_cache_free(kv);
	}
	kv_cache_free(NULL);		/* a no-op; a crash here fails the plan */
}

/* A new pool: fields, all blocks free, block_bytes. */
static void
test_create(void)
{
	kv_cache   *kv = new_cache(5, 16, 3, 2, 8);
	bool		zero = true;

	TAP_OK(kv_cache_block_bytes(16, 3, 2, 8) == (size_t) 2 * 16 * 3 * 2 * 8 * 4,
		   "block_bytes of (16 positions, 3 layers, 2 heads, dim 8) is K + V in f32: 6144");
	if (kv == NULL)
		return;
	TAP_OK(kv->n_blocks == 5 && kv->block_size == 16 && kv->n_layers == 3 &&
		   kv->n_kv_heads == 2 && kv->head_dim == 8 && kv->block_floats == 16 * 2 * 8,
		   "the pool records its geometry; a block holds 256 floats per layer");
	TAP_OK(kv->n_free == 5, "all 5 blocks start free");
	for (int b = 0; b < 5; b++)
		zero = zero && kv->refcount[b] == 0;
	TAP_OK(zero, "all reference counts start at 0");
	kv_cache_free(kv);
}

/* Whether ids[0..n) are distinct and all in [0, n_blocks). */
static bool
distinct_ids(const int32_t *ids, int n, int n_blocks)
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
test_alloc_release(void)
{
	const int	nb = 8;
	kv_cache   *kv = new_cache(nb, 4, 1, 1, 2);
	int32_t		ids[8];
	int32_t		again;
	bool		counts = true;

	if (kv == NULL)
		return;
	for (int i = 0; i < nb; i++)
	{
		ids[i] = kv_cache_alloc(kv);
		counts = counts && kv->n_free == nb - 1 - i && ids[i] >= 0 && kv->refcount[ids[i]] == 1;
	}
	TAP_OK(distinct_ids(ids, nb, nb), "8 allocations return 8 distinct ids in [0, 8)");
	TAP_OK(counts, "each allocation takes one free block and gives it reference count 1");
	TAP_OK(kv_cache_alloc(kv) == -1 && kv_cache_alloc(kv) == -1 && kv->n_free == 0,
		   "the empty pool returns -1, repeatedly, without going negative");

	kv_cache_release(kv, ids[3]);
	TAP_OK(kv->n_free == 1 && kv->refcount[ids[3]] == 0, "release frees the block");
	again = kv_cache_alloc(kv);
	TAP_OK(again == ids[3] && kv_cache_alloc(kv) == -1,
		   "the released block is the one handed out next, and only it");
	for (int i = 0; i < nb; i++)
		kv_cache_release(kv, ids[i]);
	TAP_OK(kv->n_free == nb, "releasing every block frees the whole pool");
	for (int i = 0; i < nb; i++)
		ids[i] = kv_cache_alloc(kv);
	TAP_OK(distinct_ids(ids, nb, nb) && kv_cache_alloc(kv) == -1,
		   "after a full release the pool hands out 8 distinct ids again");
	kv_cache_free(kv);
}

/* Reference counts: a shared block is free only after every owner releases it. */
static void
test_refcount(void)
{
	kv_cache   *kv = new_cache(2, 4, 1, 1, 2);
	int32_t		a,
				b;

	if (kv == NULL)
		return;
	a = kv_cache_alloc(kv);
	b = kv_cache_alloc(kv);
	kv_cache_ref(kv, a);
	TAP_OK(kv->refcount[a] == 2 && kv->refcount[b] == 1, "ref raises the count to 2");
	kv_cache_release(kv, a);
	TAP_OK(kv->refcount[a] == 1 && kv->n_free == 0 && kv_cache_alloc(kv) == -1,
		   "the first of two releases keeps the block in use");
	kv_cache_release(kv, a);
	TAP_OK(kv->refcount[a] == 0 && kv->n_free == 1, "the second release frees it");
	TAP_OK(kv_cache_alloc(kv) == a && kv->refcount[a] == 1, "and it can be allocated again");
	kv_cache_ref(kv, b);
	kv_cache_ref(kv, b);
	kv_cache_release(kv, b);
	kv_cache_release(kv, b);
	TAP_OK(kv->refcount[b] == 1 && kv->n_free == 0, "three owners: two releases leave one");
	kv_cache_release(kv, b);
	TAP_OK(kv->refcount[b] == 0 && kv->n_free == 1, "the third release frees it");
	kv_cache_free(kv);
}

/* A double release (or a bogus id) does not corrupt the free list. */
static void
test_double_release(void)
{
	const int	nb = 6;
	kv_cache   *kv = new_cache(nb, 4, 1, 1, 2);
	int32_t		ids[7];
	int32_t		a;
	int			n = 0;
	bool		bounded = true;

	if (kv == NULL)
		return;
	a = kv_cache_alloc(kv);
	kv_cache_release(kv, a);
	kv_cache_release(kv, a);
	bounded = kv->n_free == nb;
	kv_cache_release(kv, a);
	kv_cache_release(kv, -1);
	kv_cache_release(kv, nb);
	kv_cache_release(kv, 1 << 30);
	bounded = bounded && kv->n_free == nb && kv->refcount[a] == 0;
	TAP_OK(bounded, "double and triple release and out-of-range ids leave n_free at n_blocks (%d)",
		   kv->n_free);
	while (n < 7 && (ids[n] = kv_cache_alloc(kv)) >= 0)
		n++;
	TAP_OK(n == nb && distinct_ids(ids, n, nb),
		   "after the double release the pool hands out %d distinct ids, then -1 (got %d)", nb, n);

	/* a double release of a block while the others are in use */
	kv_cache_release(kv, ids[2]);
	kv_cache_release(kv, ids[2]);
	TAP_OK(kv->n_free == 1, "a double release of one block in a full pool frees one slot (%d)",
		   kv->n_free);
	a = kv_cache_alloc(kv);
	TAP_OK(a == ids[2] && kv_cache_alloc(kv) == -1,
		   "that block comes back once, and the pool is then empty");
	kv_cache_free(kv);
}

/* One (pointer, length) span of K or V memory. */
typedef struct span
{
	const float *p;
	int			n;
	int			kind;			/* 0: K, 1: V */
} span;

/* qsort order of spans by address. */
static int
span_cmp(const void *a, const void *b)
{
	const span *x = a,
			   *y = b;

	return x->p < y->p ? -1 : x->p > y->p;
}

/* The value stored in element e of (layer, block, slot) of K (kind 0) or V (kind 1). */
static float
cell_value(int kind, int layer, int block, int slot, int e)
{
	return (float) (((((kind * 7 + layer) * 11 + block) * 13 + slot) * 17 + e) + 1) *
		(kind ? -1.0f : 1.0f);
}

/* K and V of distinct (layer, block, slot) never overlap, and hold what was written. */
static void
test_layout(void)
{
	const int	nb = 3,
				bs = 4,
				nl = 2,
				nh = 2,
				hd = 3;
	const int	row = nh * hd;
	const int64_t per = (int64_t) nl * nb * bs * row;	/* floats of K (or V) */
	kv_cache   *kv = new_cache(nb, bs, nl, nh, hd);
	span	   *sp = malloc(sizeof(span) * 2 * nl * nb * bs);
	int			n = 0;
	bool		inside = true,
				disjoint = true,
				intact = true;

	if (kv == NULL)
		return;
	for (int kind = 0; kind < 2; kind++)
		for (int l = 0; l < nl; l++)
			for (int b = 0; b < nb; b++)
				for (int s = 0; s < bs; s++)
				{
					const float *p = kind ? kv_cache_v(kv, l, b, s) : kv_cache_k(kv, l, b, s);
					const float *base = kind ? kv->v : kv->k;

					if (p < base || p + row > base + per)
						inside = false;
					sp[n].p = p;
					sp[n].n = row;
					sp[n].kind = kind;
					n++;
				}
	TAP_OK(inside, "every K and V row of (layer, block, slot) lies inside its %lld-float array",
		   (long long) per);
	qsort(sp, n, sizeof(span), span_cmp);
	for (int i = 0; i + 1 < n; i++)
		if (sp[i].p + sp[i].n > sp[i + 1].p)
			disjoint = false;
	TAP_OK(disjoint, "the %d K and V rows (2 x 2 layers x 3 blocks x 4 slots) never overlap", n);

	/* write every element of every row, then read all of them back */
	for (int kind = 0; kind < 2; kind++)
		for (int l = 0; l < nl; l++)
			for (int b = 0; b < nb; b++)
				for (int s = 0; s < bs; s++)
				{
					float	   *p = kind ? kv_cache_v(kv, l, b, s) : kv_cache_k(kv, l, b, s);

					for (int e = 0; e < row; e++)
						p[e] = cell_value(kind, l, b, s, e);
				}
	for (int kind = 0; kind < 2; kind++)
		for (int l = 0; l < nl; l++)
			for (int b = 0; b < nb; b++)
				for (int s = 0; s < bs; s++)
				{
					const float *p = kind ? kv_cache_v(kv, l, b, s) : kv_cache_k(kv, l, b, s);

					for (int e = 0; e < row; e++)
						if (p[e] != cell_value(kind, l, b, s, e))
							intact = false;
				}
	TAP_OK(intact, "distinct values written to every element of K and V read back intact");

	/* allocation and release never touch the stored keys and values */
	{
		int32_t		a = kv_cache_alloc(kv),
					b = kv_cache_alloc(kv);

		kv_cache_release(kv, a);
		kv_cache_release(kv, b);
		kv_cache_release(kv, a);
		TAP_OK(kv_cache_k(kv, 1, 2, 3)[5] == cell_value(0, 1, 2, 3, 5) &&
			   kv_cache_v(kv, 0, 0, 0)[0] == cell_value(1, 0, 0, 0, 0),
			   "alloc and release leave the stored K and V alone");
	}
	free(sp);
	kv_cache_free(kv);
}

#define PBS 4					/* positions per block in the prefix-cache tests */

/* The key of tokens after the cached block (parent_hash, parent serial; 0: a first block) in salt. */
static kv_block_key
key_for(const kv_cache *kv, const int32_t *tokens, uint64_t parent_hash, uint64_t parent,
		uint64_t salt)
{
	kv_block_key k;

	k.tokens = tokens;
	k.salt = salt;
	k.parent = parent;
	k.hash = kv_cache_block_hash(kv, parent == 0 ? salt : parent_hash, tokens);
	return k;
}

/* Look key up and give the reference back at once; the block found or -1. */
static int32_t
probe(kv_cache *kv, const kv_block_key *key)
{
	int32_t		b = kv_cache_lookup(kv, key);

	kv_cache_release(kv, b);
	return b;
}

/*
 * With every hash forced equal, a hit still needs the block's own tokens, its
 * registered parent and its salt; colliding registrations coexist; a parent
 * is named by its registration, so a reused block id adopts no old children.
 */
static void
test_prefix_forced_collisions(void)
{
	static const int32_t X[PBS] = {1, 2, 3, 4},
				Y[PBS] = {5, 6, 7, 8},
				X2[PBS] = {1, 2, 3, 9},
				Z[PBS] = {10, 11, 12, 13},
				Q[PBS] = {20, 21, 22, 23};
	kv_cache   *kv = new_cache(6, PBS, 1, 1, 2);
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
	kv_block_key ka0,
				ka1,
				kb0,
				kb1,
				k;

	if (kv == NULL)
		return;
	kv->test_hash = 42;
	TAP_OK(kv_cache_block_hash(kv, 0, X) == kv_cache_block_hash(kv, 99, Y),
		   "the test hook forces every block hash equal");
	/* prompt A = X Y and prompt B = X2 Z, all four blocks under one hash */
	a0 = kv_cache_alloc(kv);
	a1 = kv_cache_alloc(kv);
	b0 = kv_cache_alloc(kv);
	b1 = kv_cache_alloc(kv);
	ka0 = key_for(kv, X, 0, 0, 0);
	sa0 = kv_cache_register(kv, a0, &ka0);
	ka1 = key_for(kv, Y, ka0.hash, sa0, 0);
	sa1 = kv_cache_register(kv, a1, &ka1);
	kb0 = key_for(kv, X2, 0, 0, 0);
	sb0 = kv_cache_register(kv, b0, &kb0);
	kb1 = key_for(kv, Z, kb0.hash, sb0, 0);
	sb1 = kv_cache_register(kv, b1, &kb1);
	TAP_OK(sa0 != 0 && sa1 != 0 && sb0 != 0 && sb1 != 0 && sa0 != sa1 && sa0 != sb0 &&
		   sa0 != sb1 && sa1 != sb0 && sa1 != sb1 && sb0 != sb1,
		   "four blocks of one hash are all registered, with four distinct serials");
	TAP_OK(probe(kv, &ka0) == a0 && probe(kv, &ka1) == a1 && probe(kv, &kb0) == b0 &&
		   probe(kv, &kb1) == b1,
		   "identical prefixes still hit: each key finds its own block among the colliding ones");
	k = key_for(kv, (const int32_t[PBS]) {1, 2, 3, 5}, 0, 0, 0);
	TAP_OK(probe(kv, &k) == -1, "a first block that differs in its last token misses");
	k = key_for(kv, Y, kb0.hash, sb0, 0);
	TAP_OK(probe(kv, &k) == -1,
		   "A's second-block tokens after B's first block miss: the registered parent must match too");
	k = key_for(kv, Z, ka0.hash, sa0, 0);
	TAP_OK(probe(kv, &k) == -1, "B's second-block tokens after A's first block miss");
	k = key_for(kv, Y, 0, 0, 0);
	TAP_OK(probe(kv, &k) == -1, "a second block's tokens looked up as a first block miss");
	k = key_for(kv, X, 0, 0, 7);
	TAP_OK(probe(kv, &k) == -1, "A's first block looked up under another salt misses");
	k = key_for(kv, Q, 0, 0, 0);
	TAP_OK(probe(kv, &k) == -1, "tokens never registered miss");
	TAP_OK(kv->prefix_queries == 10 && kv->prefix_hits == 4,
		   "the counters saw 10 lookups and 4 hits (%lld, %lld)", (long long) kv->prefix_queries,
		   (long long) kv->prefix_hits);

	/* a second block with A's first block's content: the first registration holds it */
	dup = kv_cache_alloc(kv);
	TAP_OK(kv_cache_register(kv, dup, &ka0) == sa0 && kv_cache_serial(kv, dup) == 0,
		   "registering an equal block returns the existing serial and leaves the copy unregistered");
	kv_cache_release(kv, dup);

	/* evict A's first block and register its id again for other tokens */
	kv_cache_release(kv, a0);
	kv_cache_release(kv, a1);
	kv_cache_release(kv, b0);
	kv_cache_release(kv, b1);
	kv_cache_alloc(kv);
	kv_cache_alloc(kv);			/* the two free blocks */
	reused = kv_cache_alloc(kv);	/* the least recently released cached block: a0 */
	TAP_OK(reused == a0 && kv_cache_serial(kv, a0) == 0 && probe(kv, &ka0) == -1,
		   "allocation evicts the least recently released cached block, which then misses");
	k = key_for(kv, Q, 0, 0, 0);
	sq = kv_cache_register(kv, reused, &k);
	TAP_OK(sq != 0 && sq != sa0, "the reused block id gets a new serial (%llu, was %llu)",
		   (unsigned long long) sq, (unsigned long long) sa0);
	k = key_for(kv, Y, k.hash, sq, 0);
	TAP_OK(probe(kv, &k) == -1,
		   "A's second block does not match after the new tokens in its old parent's block id");
	TAP_OK(probe(kv, &kb0) == b0 && probe(kv, &kb1) == b1,
		   "B's blocks are still found after a colliding registration was deleted");
	kv_cache_reset_prefix(kv);
	TAP_OK(probe(kv, &kb0) == -1 && probe(kv, &ka1) == -1 && kv->n_evictable == 0 &&
		   kv_cache_serial(kv, b0) == 0, "reset_prefix forgets every registration");
	kv_cache_free(kv);
}

/*
 * Many rounds of register, release and evict, with real and with forced
 * hashes: the table's deleted slots and rebuilds never lose or confuse a
 * registration.
 */
static void
test_prefix_churn(void)
{
	const int	nb = 8;

	for (int forced = 0; forced < 2; forced++)
	{
		kv_cache   *kv = new_cache(nb, PBS, 1, 1, 2);
		int32_t		tok[2][8][PBS];
		int32_t		blk[8];
		bool		own = true,
					old_gone = true;

		if (kv == NULL)
			return;
		kv->test_hash = forced ? 7 : 0;
		for (int round = 0; round < 60; round++)
		{
			int32_t    (*cur)[PBS] = tok[round % 2];
			int32_t    (*prev)[PBS] = tok[(round + 1) % 2];

			for (int i = 0; i < nb; i++)
			{
				kv_block_key k;

				for (int t = 0; t < PBS; t++)
					cur[i][t] = round * 1000 + i * 10 + t;
				blk[i] = kv_cache_alloc(kv);	/* evicts the previous round's blocks */
				k = key_for(kv, cur[i], 0, 0, (uint64_t) i);
				kv_cache_register(kv, blk[i], &k);
			}
			for (int i = 0; i < nb; i++)
				kv_cache_release(kv, blk[i]);
			for (int i = 0; i < nb; i++)
			{
				kv_block_key k = key_for(kv, cur[i], 0, 0, (uint64_t) i);

				own = own && probe(kv, &k) == blk[i];
				if (round > 0)
				{
					k = key_for(kv, prev[i], 0, 0, (uint64_t) i);
					old_gone = old_gone && probe(kv, &k) == -1;
				}
			}
		}
		TAP_OK(own && old_gone,
			   "%s hashes: over 60 rounds of 8 registrations and evictions every block is found, every evicted one missed",
			   forced ? "forced-equal" : "real");
		TAP_OK(kv->n_evictable == nb && kv->table_deleted <= kv->table_cap / 4,
			   "%s hashes: all 8 blocks stay cached and deleted slots stay bounded (%d of %d)",
			   forced ? "forced-equal" : "real", kv->table_deleted, kv->table_cap);
		kv_cache_free(kv);
	}
}

/* The salt seeds the hash chain and is checked on a hit: equal tokens never cross salts. */
static void
test_prefix_salt(void)
{
	static const int32_t X[PBS] = {1, 2, 3, 4};
	kv_cache   *kv = new_cache(2, PBS, 1, 1, 2);
	kv_block_key k1,
				k2;
	int32_t		b;

	if (kv == NULL)
		return;
	k1 = key_for(kv, X, 0, 0, 1);
	k2 = key_for(kv, X, 0, 0, 2);
	TAP_OK(k1.hash != k2.hash, "the same first block hashes differently under salts 1 and 2");
	b = kv_cache_alloc(kv);
	kv_cache_register(kv, b, &k1);
	kv_cache_release(kv, b);
	TAP_OK(probe(kv, &k2) == -1 && probe(kv, &k1) == b,
		   "a block cached under salt 1 misses under salt 2 and hits under salt 1");
	k2.hash = k1.hash;			/* a salt-2 key whose hash collides with salt 1's */
	TAP_OK(probe(kv, &k2) == -1, "even with a colliding hash, the salt-2 lookup misses");
	kv_cache_free(kv);
}

int
main(void)
{
	test_invalid_params();
	test_create();
	test_alloc_release();
	test_refcount();
	test_double_release();
	test_layout();
	test_prefix_forced_collisions();
	test_prefix_churn();
	test_prefix_salt();
	return tap_done();
}
