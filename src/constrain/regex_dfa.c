/*
 * regex_dfa.c: the back of the regex compiler (regex.h): the tree that
 * regex_parse.c makes of a pattern (regex_internal.h) becomes a minimal
 * deterministic automaton over bytes, in four passes:
 *
 *   NFA       Thompson's construction over bytes, built backwards: a node is
 *             compiled with the state that follows it already known, so no
 *             state waits to be patched.  A class becomes a tree of the
 *             bytes of its UTF-8 encodings: per encoded length, the lead
 *             byte, then each continuation byte, a run of bytes that go on
 *             alike taking one byte range, and a block of code points
 *             wholly in the class going on to "any continuation bytes".  A
 *             byte-range state is shared whenever one with the same range
 *             and successor exists, which folds those chains into one.
 *   subset    the NFA's byte ranges cut 0..255 into intervals no range
 *             splits, and intervals that every range takes or leaves
 *             together form one byte class; the subset construction works
 *             per class, not per byte.  Sets of NFA states are closed over
 *             epsilon edges with a stack and generation-stamped marks, kept
 *             sorted, and looked up in a hash table.  The states, the NFA
 *             states their sets hold and the closures' work are bounded.
 *   prune     a breadth-first search over reversed edges from the accepting
 *             states gives each state its distance to a match; states
 *             without one are dropped.
 *   minimise  Hopcroft's partition refinement, starting from the partition
 *             by distance (equivalent states have equal distances).
 * Last, classes whose columns agree in every state merge into the byte
 * classes of the result.  Nothing recurses deeper than the nesting of the
 * tree's groups, which the parse bounds.
 */
#include "constrain/regex_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define REGEX_MAX_NFA (1 << 20)	/* NFA states */
#define REGEX_MAX_POOL (1 << 21)	/* NFA state ids held by the subset construction's sets */
#define REGEX_MAX_WORK ((int64_t) 1 << 23)	/* NFA states visited by its closures */

/* ------------------------------------------------------------- helpers */

/* Mix v into the hash h. */
static inline uint32_t
HashMix(uint32_t h, uint32_t v)
{
	h ^= v + 0x9E3779B9u + (h << 6) + (h >> 2);
	return h * 0x85EBCA6Bu;
}

/* The order of two int32_t for qsort. */
static int
CmpInt(const void *a, const void *b)
{
	int32_t		x = *(const int32_t *) a;
	int32_t		y = *(const int32_t *) b;

	return (x > y) - (x < y);
}

/* Sort v[0..n) ascending (the sets are mostly small: insertion sort below 25). */
static void
SortInts(int32_t *v, int32_t n)
{
	if (n > 24)
	{
		qsort(v, (size_t) n, sizeof(int32_t), CmpInt);
		return;
	}
	for (int32_t i = 1; i < n; i++)
	{
		int32_t		x = v[i];
		int32_t		j = i;

		for (; j > 0 && v[j - 1] > x; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
}

/* ------------------------------------------------------------------ NFA */

typedef enum
{
	S_MATCH,					/* the end of a full match (state 0) */
	S_RANGE,					/* consume a byte in [lo, hi], go to out */
	S_SPLIT						/* go to out and out2 without consuming (-1: nowhere) */
} state_kind;

typedef struct nstate
{
	uint8_t		kind;			/* state_kind */
	uint8_t		lo;
	uint8_t		hi;
	int32_t		out;
	int32_t		out2;
} nstate;

typedef struct nfa
{
	nstate	   *st;				/* (cap) */
	int32_t		n;
	int32_t		cap;
	int32_t    *slot;			/* (n_slot) the RANGE states by (lo, hi, out), -1 empty */
	int32_t		n_slot;			/* a power of 2, over twice the states */
	int64_t		work;			/* nodes compiled, a bound on the time spent */
	const ast  *a;
	cbllm_err  *err;
} nfa;

/* The refusal of a subset construction that would hold or visit too many NFA states. */
static int
TooCostly(cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
					  "regex: the pattern is too costly to compile (the states of its automaton "
					  "overlap too much); simplify the pattern");
}

/* The refusal of a pattern whose NFA would pass REGEX_MAX_NFA states. */
static int
TooLarge(cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
					  "regex: the pattern is too large (its automaton would exceed %d states); "
					  "simplify the pattern", REGEX_MAX_NFA);
}

/* Add a state; its index, or a negative status. */
static int32_t
NewState(nfa *m, state_kind kind, int lo, int hi, int32_t out, int32_t out2)
{
	if (m->n >= REGEX_MAX_NFA)
		return TooLarge(m->err);
	if (!GROW(m->st, m->cap, m->n + 1))
		return regex_nomem(m->err);
	m->st[m->n] = (nstate) {(uint8_t) kind, (uint8_t) lo, (uint8_t) hi, out, out2};
	return m->n++;
}

/* The slot of the RANGE state (lo, hi, out) in m->slot: where it is or where it goes. */
static int32_t
RangeSlot(const nfa *m, int lo, int hi, int32_t out)
{
	uint32_t	mask = (uint32_t) m->n_slot - 1;
	uint32_t	i = HashMix(HashMix((uint32_t) lo << 8 | (uint32_t) hi, (uint32_t) out), 7) & mask;

	for (;; i = (i + 1) & mask)
	{
		const nstate *t;

		if (m->slot[i] < 0)
			return (int32_t) i;
		t = &m->st[m->slot[i]];
		if (t->lo == lo && t->hi == hi && t->out == out)
			return (int32_t) i;
	}
}

/* The RANGE state (lo, hi, out): an existing one, or a new one. */
static int32_t
RangeState(nfa *m, int lo, int hi, int32_t out)
{
	int32_t		i,
				s;

	if ((int64_t) m->n * 2 >= m->n_slot)
	{
		int32_t		n = m->n_slot > 0 ? m->n_slot * 2 : 1024;
		int32_t    *slot = malloc(sizeof(int32_t) * n);

		if (slot == NULL)
			return regex_nomem(m->err);
		free(m->slot);
		m->slot = slot;
		m->n_slot = n;
		memset(slot, 0xFF, sizeof(int32_t) * n);
		for (s = 0; s < m->n; s++)
			if (m->st[s].kind == S_RANGE)
				m->slot[RangeSlot(m, m->st[s].lo, m->st[s].hi, m->st[s].out)] = s;
	}
	i = RangeSlot(m, lo, hi, out);
	if (m->slot[i] >= 0)
		return m->slot[i];
	if ((s = NewState(m, S_RANGE, lo, hi, out, -1)) >= 0)
		m->slot[i] = s;
	return s;
}

/* Join *acc (a start, or -1 for none yet) and start s into one start. */
static int
JoinStart(nfa *m, int32_t *acc, int32_t s)
{
	if (*acc >= 0 && (s = NewState(m, S_SPLIT, 0, 0, s, *acc)) < 0)
		return s;
	*acc = s;
	return CBLLM_OK;
}

/* The state that takes e continuation bytes, whatever they are, and goes on to next. */
static int32_t
AnyContinuation(nfa *m, int e, int32_t next)
{
	int32_t		s = next;

	for (int i = 0; i < e && s >= 0; i++)
		s = RangeState(m, 0x80, 0xBF, s);
	return s;
}

/*
 * Add to *acc the UTF-8 encodings, each going on to next, of the code
 * points of r[0..n) (sorted, disjoint) that are in [wlo, whi] (one encoded
 * length) and in the count blocks of 64^e code points from base, block i
 * being told by byte b0 + i and then by the e continuation bytes of the
 * code point's place in the block.  A block wholly in the class goes on to
 * "any e continuation bytes", one partly in it to its own blocks of
 * 64^(e-1), and a run of bytes whose blocks go on alike is one byte range:
 * the class becomes a tree with a handful of alternatives per node, which
 * keeps the closures of the subset construction short even for a class of
 * hundreds of ranges.  Empty blocks are skipped, not visited.
 */
static int
ClassBlocks(nfa *m, const cprange *r, int32_t n, uint32_t wlo, uint32_t whi, uint32_t base, int count,
			int e, int b0, int32_t next, int32_t *acc)
{
	uint32_t	size = (uint32_t) 1 << (6 * e);
	uint32_t	end = base + (uint32_t) count * size - 1;	/* the last code point of the blocks */
	int32_t		j = 0,
				run = -1,
				child;
	int			run_from = 0,
				rc;

	if (e == 0)					/* blocks of one code point: each range is a run */
	{
		for (; j < n && r[j].lo <= whi && r[j].lo <= end; j++)
		{
			uint32_t	lo = r[j].lo > wlo ? r[j].lo : wlo,
						hi = r[j].hi < whi ? r[j].hi : whi;

			lo = lo > base ? lo : base;
			hi = hi < end ? hi : end;
			if (lo <= hi && ((rc = RangeState(m, b0 + (int) (lo - base), b0 + (int) (hi - base), next)) < 0 ||
							 (rc = JoinStart(m, acc, rc)) < 0))
				return rc;
		}
		return CBLLM_OK;
	}
	for (int i = 0; i <= count; i++)
	{
		uint32_t	lo = base + (uint32_t) i * size,
					hi = lo + size - 1,
					clo = lo > wlo ? lo : wlo,
					chi = hi < whi ? hi : whi;

		child = -1;				/* -1 while the block holds no code point of the class */
		while (i < count && j < n && r[j].hi < clo)
			j++;
		if (i < count && clo <= chi && j < n && r[j].lo <= chi)
		{
			int32_t		k = j;

			if (lo >= wlo && hi <= whi && r[j].lo <= lo && r[j].hi >= hi)
			{
				if ((child = AnyContinuation(m, e, next)) < 0)
					return child;
			}
			else
			{
				while (k < n && r[k].lo <= chi)
					k++;
				if ((rc = ClassBlocks(m, r + j, k - j, wlo, whi, lo, 64, e - 1, 0x80, next, &child)) < 0)
					return rc;
			}
		}
		if (child != run && run >= 0 && ((rc = RangeState(m, b0 + run_from, b0 + i - 1, run)) < 0 ||
										 (rc = JoinStart(m, acc, rc)) < 0))
			return rc;
		if (child != run)
			run = child, run_from = i;
		if (child < 0 && i < count)	/* on to the block of the next code point of the class */
		{
			uint32_t	cp = j < n && r[j].lo > wlo ? r[j].lo : wlo;
			int			to = j >= n || cp > whi || cp > end ? count : (int) ((cp - base) / size);

			if (to > i + 1)
				i = to - 1;
		}
	}
	return CBLLM_OK;
}

/* Add to *acc the UTF-8 encodings of the class r[0..n), each going on to next: per encoded length. */
static int
ClassStates(nfa *m, const cprange *r, int32_t n, int32_t next, int32_t *acc)
{
	int			rc;

	if ((rc = ClassBlocks(m, r, n, 0, 0x7F, 0, 128, 0, 0x00, next, acc)) < 0 ||
		(rc = ClassBlocks(m, r, n, 0x80, 0x7FF, 0, 32, 1, 0xC0, next, acc)) < 0 ||
		(rc = ClassBlocks(m, r, n, 0x800, 0xFFFF, 0, 16, 2, 0xE0, next, acc)) < 0)
		return rc;
	return ClassBlocks(m, r, n, 0x10000, CP_MAX, 0, 5, 3, 0xF0, next, acc);
}

static int32_t Build(nfa *m, int32_t node, int32_t next);

/* Compile a repeat of child min..max times (max INF_REPEAT: no bound), going on to next. */
static int32_t
BuildRepeat(nfa *m, int32_t child, int32_t min, int32_t max, int32_t next)
{
	int32_t		cur = next,
				s;

	if (max == INF_REPEAT)
	{
		/* a loop state: into the child (set below) or on to next; min > 0 enters the child first */
		int32_t		loop = NewState(m, S_SPLIT, 0, 0, -1, next);

		if (loop < 0 || (s = Build(m, child, loop)) < 0)
			return loop < 0 ? loop : s;
		m->st[loop].out = s;
		cur = min > 0 ? s : loop;
		min = min > 0 ? min - 1 : 0;
	}
	else
		for (int32_t i = 0; i < max - min; i++)
			if ((s = Build(m, child, cur)) < 0 || (cur = NewState(m, S_SPLIT, 0, 0, s, next)) < 0)
				return s < 0 ? s : cur;
	for (int32_t i = 0; i < min; i++)
		if ((cur = Build(m, child, cur)) < 0)
			return cur;
	return cur;
}

/* Compile node so that a match of it goes on to state next; its start state, or a negative status. */
static int32_t
Build(nfa *m, int32_t node, int32_t next)
{
	const rnode *t = &m->a->nodes[node];
	int32_t		acc = -1;
	int			rc = CBLLM_OK;

	if (++m->work > 4 * (int64_t) REGEX_MAX_NFA)
		return TooLarge(m->err);
	switch (t->kind)
	{
		case N_EMPTY:
			return next;
		case N_CLASS:
			rc = ClassStates(m, t->b > 0 ? m->a->ranges.r + t->a : NULL, t->b, next, &acc);
			/* an empty class: a state that leads nowhere */
			return rc < 0 ? rc : acc >= 0 ? acc : NewState(m, S_SPLIT, 0, 0, -1, -1);
		case N_CAT:
			for (int32_t i = t->b - 1; i >= 0 && next >= 0; i--)
				next = Build(m, m->a->kids[t->a + i], next);
			return next;
		case N_ALT:
			for (int32_t i = t->b - 1; i >= 0 && rc >= 0; i--)
			{
				int32_t		s = Build(m, m->a->kids[t->a + i], next);

				rc = s < 0 ? s : JoinStart(m, &acc, s);
			}
			return rc < 0 ? rc : acc;
		case N_REPEAT:
			return BuildRepeat(m, t->child, t->a, t->b, next);
	}
	return CBLLM_ERR_INTERNAL;
}

/* --------------------------------------------------- subset construction */

/* A DFA state during the subset construction: a sorted set of NFA RANGE and MATCH states. */
typedef struct dset
{
	int32_t		off;			/* where its NFA states start in subset.pool */
	int32_t		len;
	uint32_t	hash;
} dset;

/* A DFA over interval classes. */
typedef struct table
{
	int32_t		n;				/* states; 0 is the start */
	int32_t		k;				/* columns */
	int32_t    *next;			/* (n, k) the next state or -1 */
	uint8_t    *accept;			/* (n) */
	int32_t    *dist;			/* (n) bytes to a match, or NULL */
} table;

typedef struct subset
{
	const nfa  *m;
	int32_t		n_ic;			/* intervals: runs of bytes no NFA range splits */
	uint8_t		ic_of[256];		/* the interval of each byte */
	int32_t		n_bc;			/* byte classes: intervals every NFA range takes or leaves together */
	uint8_t		bc_of[256];		/* the byte class of each interval */
	uint8_t		rep[256];		/* the first interval of each byte class */
	dset	   *sets;			/* (cap_sets) */
	int32_t		n;				/* DFA states made */
	int32_t		cap_sets;
	int32_t		cap_next;		/* of out.next */
	int32_t		cap_accept;		/* of out.accept */
	table		out;			/* the transitions made */
	int32_t    *pool;			/* (cap_pool) the sets, one after another */
	int32_t		n_pool;
	int32_t		cap_pool;
	int32_t    *slot;			/* (n_slot) DFA states by set, -1 empty; a power of 2 */
	int32_t		n_slot;
	int32_t    *seen;			/* (m->n) the closure that last reached each NFA state */
	int32_t		gen;
	int32_t    *stack;			/* (m->n) the closure's depth-first search */
	int32_t    *cur;			/* (m->n) the closure's RANGE and MATCH states */
	int32_t    *bucket;			/* (cap_bucket) successors, grouped by interval class */
	int32_t		cap_bucket;
	int32_t		count[256];		/* successors per interval class */
	int32_t		start[256];		/* where they start in bucket */
	int64_t		work;
	cbllm_err  *err;
} subset;

/* The RANGE and MATCH states reached from seeds[0..n) by epsilon moves, sorted into sb->cur. */
static int32_t
Closure(subset *sb, const int32_t *seeds, int32_t n)
{
	const nstate *st = sb->m->st;
	int32_t		top = 0,
				k = 0;

	sb->gen++;
	for (int32_t i = 0; i < n; i++)
		if (sb->seen[seeds[i]] != sb->gen)
			sb->seen[seeds[i]] = sb->gen, sb->stack[top++] = seeds[i];
	while (top > 0)
	{
		int32_t		s = sb->stack[--top];

		sb->work++;
		if (st[s].kind != S_SPLIT)
		{
			sb->cur[k++] = s;
			continue;
		}
		if (st[s].out2 >= 0 && sb->seen[st[s].out2] != sb->gen)
			sb->seen[st[s].out2] = sb->gen, sb->stack[top++] = st[s].out2;
		if (st[s].out >= 0 && sb->seen[st[s].out] != sb->gen)
			sb->seen[st[s].out] = sb->gen, sb->stack[top++] = st[s].out;
	}
	SortInts(sb->cur, k);
	return k;
}

/* Whether DFA state d holds the set cur[0..k) of hash h. */
static bool
SameSet(const subset *sb, int32_t d, const int32_t *cur, int32_t k, uint32_t h)
{
	const dset *s = &sb->sets[d];

	return s->hash == h && s->len == k && memcmp(sb->pool + s->off, cur, sizeof(int32_t) * k) == 0;
}

/* Rebuild the hash table of DFA states at twice the size. */
static int
Rehash(subset *sb)
{
	int32_t		n = sb->n_slot > 0 ? sb->n_slot * 2 : 1024;
	int32_t    *slot = malloc(sizeof(int32_t) * n);

	if (slot == NULL)
		return regex_nomem(sb->err);
	memset(slot, 0xFF, sizeof(int32_t) * n);
	for (int32_t d = 0; d < sb->n; d++)
	{
		uint32_t	i = sb->sets[d].hash & (uint32_t) (n - 1);

		while (slot[i] >= 0)
			i = (i + 1) & (uint32_t) (n - 1);
		slot[i] = d;
	}
	free(sb->slot);
	sb->slot = slot;
	sb->n_slot = n;
	return CBLLM_OK;
}

/* The DFA state of the set sb->cur[0..k): an existing one, or a new one; a negative status on error. */
static int32_t
Intern(subset *sb, int32_t k)
{
	uint32_t	h = 0x2545F491u;
	uint32_t	i;
	int32_t		d = sb->n;

	for (int32_t j = 0; j < k; j++)
		h = HashMix(h, (uint32_t) sb->cur[j]);
	if ((int64_t) sb->n * 2 >= sb->n_slot && Rehash(sb) < 0)
		return CBLLM_ERR_NOMEM;
	for (i = h & (uint32_t) (sb->n_slot - 1); sb->slot[i] >= 0; i = (i + 1) & (uint32_t) (sb->n_slot - 1))
		if (SameSet(sb, sb->slot[i], sb->cur, k, h))
			return sb->slot[i];
	if (d >= REGEX_MAX_STATES)
		return cbllm_fail(sb->err, CBLLM_ERR_UNSUPPORTED,
						  "regex: the automaton exceeds %d states; simplify the pattern", REGEX_MAX_STATES);
	if ((int64_t) sb->n_pool + k > REGEX_MAX_POOL)
		return TooCostly(sb->err);
	if (!GROW(sb->sets, sb->cap_sets, d + 1) || !GROW(sb->pool, sb->cap_pool, (int64_t) sb->n_pool + k + 1) ||
		!GROW(sb->out.accept, sb->cap_accept, d + 1) ||
		!GROW(sb->out.next, sb->cap_next, (int64_t) (d + 1) * sb->n_bc))
		return regex_nomem(sb->err);
	memcpy(sb->pool + sb->n_pool, sb->cur, sizeof(int32_t) * k);
	sb->sets[d] = (dset) {sb->n_pool, k, h};
	sb->out.accept[d] = k > 0 && sb->cur[0] == 0;	/* the MATCH state is NFA state 0 */
	sb->n_pool += k;
	sb->slot[i] = d;
	sb->n++;
	return d;
}

/* Group the successors of DFA state d's RANGE states by interval class into sb->bucket. */
static int
Successors(subset *sb, int32_t d)
{
	const nstate *st = sb->m->st;
	const int32_t *set = sb->pool + sb->sets[d].off;
	int32_t		len = sb->sets[d].len;
	int64_t		total = 0;

	memset(sb->count, 0, sizeof(int32_t) * sb->n_ic);
	for (int32_t j = 0; j < len; j++)
		if (st[set[j]].kind == S_RANGE)
			for (int c = sb->ic_of[st[set[j]].lo]; c <= sb->ic_of[st[set[j]].hi]; c++)
				sb->count[c]++;
	for (int c = 0; c < sb->n_ic; c++)
		sb->start[c] = (int32_t) total, total += sb->count[c];
	if (!GROW(sb->bucket, sb->cap_bucket, total + 1))
		return regex_nomem(sb->err);
	for (int32_t j = 0; j < len; j++)
		if (st[set[j]].kind == S_RANGE)
			for (int c = sb->ic_of[st[set[j]].lo]; c <= sb->ic_of[st[set[j]].hi]; c++)
				sb->bucket[sb->start[c]++] = st[set[j]].out;
	for (int c = 0; c < sb->n_ic; c++)
		sb->start[c] -= sb->count[c];
	return CBLLM_OK;
}

/* Make DFA state d's transitions, adding the states they reach. */
static int
Expand(subset *sb, int32_t d)
{
	int			rc;

	if ((rc = Successors(sb, d)) < 0)
		return rc;
	for (int f = 0; f < sb->n_bc; f++)
	{
		int			c = sb->rep[f],
					p = f > 0 ? sb->rep[f - 1] : 0;
		const int32_t *b = sb->bucket + sb->start[c];
		int32_t		t = -1;

		if (f > 0 && sb->count[c] == sb->count[p] &&
			memcmp(b, sb->bucket + sb->start[p], sizeof(int32_t) * sb->count[c]) == 0)
			t = sb->out.next[(size_t) d * sb->n_bc + f - 1];
		else if (sb->count[c] > 0)
		{
			int32_t		k = Closure(sb, b, sb->count[c]);

			if (sb->work > REGEX_MAX_WORK)
				return TooCostly(sb->err);
			if (k > 0 && (t = Intern(sb, k)) < 0)
				return t;
		}
		sb->out.next[(size_t) d * sb->n_bc + f] = t;
	}
	return CBLLM_OK;
}

/* Cut the bytes into intervals that no RANGE state of m splits. */
static void
IntervalClasses(subset *sb)
{
	bool		cut[257] = {false};
	int			c = 0;

	for (int32_t s = 0; s < sb->m->n; s++)
		if (sb->m->st[s].kind == S_RANGE)
			cut[sb->m->st[s].lo] = cut[sb->m->st[s].hi + 1] = true;
	for (int b = 0; b < 256; b++)
	{
		c += b > 0 && cut[b];
		sb->ic_of[b] = (uint8_t) c;
	}
	sb->n_ic = c + 1;
}

/*
 * Group the intervals into byte classes: start from one class and split
 * every class that a distinct byte range of the NFA partly covers.
 */
static void
ByteClasses(subset *sb)
{
	uint64_t	seen[256][4] = {{0}};	/* the (lo, hi) ranges done */
	int32_t		size[256] = {sb->n_ic},
				inside[256],
				moved[256],
				id[256];
	int			n = 1,
				f = 0;

	memset(sb->bc_of, 0, sizeof(sb->bc_of));
	for (int32_t s = 0; s < sb->m->n; s++)
	{
		const nstate *t = &sb->m->st[s];
		int			a = sb->ic_of[t->lo],
					z = sb->ic_of[t->hi],
					old = n;

		if (t->kind != S_RANGE || (seen[t->lo][t->hi >> 6] >> (t->hi & 63) & 1))
			continue;
		seen[t->lo][t->hi >> 6] |= (uint64_t) 1 << (t->hi & 63);
		memset(inside, 0, sizeof(int32_t) * old);
		for (int i = a; i <= z; i++)
			inside[sb->bc_of[i]]++;
		for (int c = 0; c < old; c++)
		{
			moved[c] = inside[c] > 0 && inside[c] < size[c] ? n++ : -1;
			if (moved[c] >= 0)
				size[moved[c]] = inside[c], size[c] -= inside[c];
		}
		for (int i = a; i <= z; i++)
			if (moved[sb->bc_of[i]] >= 0)
				sb->bc_of[i] = (uint8_t) moved[sb->bc_of[i]];
	}
	for (int c = 0; c < n; c++)	/* number the classes in the order of their first interval */
		id[c] = -1;
	for (int i = 0; i < sb->n_ic; i++)
	{
		if (id[sb->bc_of[i]] < 0)
			sb->rep[f] = (uint8_t) i, id[sb->bc_of[i]] = f++;
		sb->bc_of[i] = (uint8_t) id[sb->bc_of[i]];
	}
	sb->n_bc = n;
}

/* The subset construction from NFA state start: sb->out (taken by the caller on success). */
static int
Subset(subset *sb, int32_t start)
{
	int32_t		k;
	int			rc;

	IntervalClasses(sb);
	ByteClasses(sb);
	sb->out.k = sb->n_bc;
	sb->seen = malloc(sizeof(int32_t) * sb->m->n);
	sb->stack = malloc(sizeof(int32_t) * sb->m->n);
	sb->cur = malloc(sizeof(int32_t) * sb->m->n);
	if (sb->seen == NULL || sb->stack == NULL || sb->cur == NULL)
		return regex_nomem(sb->err);
	memset(sb->seen, 0, sizeof(int32_t) * sb->m->n);
	k = Closure(sb, &start, 1);
	if ((rc = Intern(sb, k)) < 0)
		return rc;
	for (int32_t d = 0; d < sb->n; d++)
		if ((rc = Expand(sb, d)) < 0)
			return rc;
	sb->out.n = sb->n;
	return CBLLM_OK;
}

/* Free the subset construction's work arrays (not its table, sb->out). */
static void
SubsetFree(subset *sb)
{
	free(sb->sets);
	free(sb->pool);
	free(sb->slot);
	free(sb->seen);
	free(sb->stack);
	free(sb->cur);
	free(sb->bucket);
}

/* ------------------------------------------------ prune and minimise */

/* Free t's arrays and empty it. */
static void
TableFree(table *t)
{
	free(t->next);
	free(t->accept);
	free(t->dist);
	memset(t, 0, sizeof(*t));
}

/* Allocate t's arrays for n states of k columns. */
static bool
TableAlloc(table *t, int32_t n, int32_t k)
{
	t->n = n;
	t->k = k;
	t->next = malloc(sizeof(int32_t) * (size_t) n * k);
	t->accept = malloc(n);
	t->dist = malloc(sizeof(int32_t) * n);
	return t->next != NULL && t->accept != NULL && t->dist != NULL;
}

/* The target of t's edge (s, c), or -1 where it is missing or repeats that of column c - 1. */
static inline int32_t
NewEdge(const table *t, int32_t s, int32_t c)
{
	const int32_t *row = t->next + (size_t) s * t->k;

	return c > 0 && row[c] == row[c - 1] ? -1 : row[c];
}

/* Each state's distance to an accepting state (-1: none), by a search over reversed edges. */
static int
Distances(const table *t, int32_t *dist, cbllm_err *err)
{
	int32_t    *first = calloc((size_t) t->n + 1, sizeof(int32_t));
	int32_t    *from = NULL;
	int32_t    *queue = malloc(sizeof(int32_t) * t->n);
	int64_t		m = 0;
	int32_t		head = 0,
				tail = 0,
				x;

	for (int32_t s = 0; first != NULL && s < t->n; s++)
		for (int32_t c = 0; c < t->k; c++)
			if ((x = NewEdge(t, s, c)) >= 0)
				first[x + 1]++, m++;
	if (first == NULL || queue == NULL || (from = malloc(sizeof(int32_t) * (m + 1))) == NULL)
	{
		free(first);
		free(queue);
		return regex_nomem(err);
	}
	for (int32_t s = 0; s < t->n; s++)
		first[s + 1] += first[s];
	for (int32_t s = 0; s < t->n; s++)
		for (int32_t c = 0; c < t->k; c++)
			if ((x = NewEdge(t, s, c)) >= 0)
				from[first[x]++] = s;
	for (int32_t s = t->n; s > 0; s--)	/* first[s] was moved to the end of s's edges */
		first[s] = first[s - 1];
	first[0] = 0;
	for (int32_t s = 0; s < t->n; s++)
		if ((dist[s] = t->accept[s] ? 0 : -1) == 0)
			queue[tail++] = s;
	while (head < tail)
	{
		int32_t		s = queue[head++];

		for (int32_t i = first[s]; i < first[s + 1]; i++)
			if (dist[from[i]] < 0)
				dist[from[i]] = dist[s] + 1, queue[tail++] = from[i];
	}
	free(first);
	free(from);
	free(queue);
	return CBLLM_OK;
}

/* Keep the states of t that reach a match (the start must be one), in place; t->dist is set. */
static int
Prune(table *t, cbllm_err *err)
{
	int32_t    *id = malloc(sizeof(int32_t) * t->n);
	int32_t		n = 0;
	int			rc = CBLLM_OK;

	if ((t->dist = malloc(sizeof(int32_t) * t->n)) == NULL || id == NULL ||
		(rc = Distances(t, t->dist, err)) < 0)
		rc = rc < 0 ? rc : regex_nomem(err);
	else if (t->dist[0] < 0)
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "regex: the pattern matches nothing");
	for (int32_t s = 0; rc == CBLLM_OK && s < t->n; s++)
		id[s] = t->dist[s] >= 0 ? n++ : -1;
	for (int32_t s = 0; rc == CBLLM_OK && s < t->n; s++)	/* id[s] <= s: rows move up */
	{
		if (id[s] < 0)
			continue;
		for (int32_t c = 0; c < t->k; c++)
		{
			int32_t		x = t->next[(size_t) s * t->k + c];

			t->next[(size_t) id[s] * t->k + c] = x >= 0 ? id[x] : -1;
		}
		t->accept[id[s]] = t->accept[s];
		t->dist[id[s]] = t->dist[s];
	}
	if (rc == CBLLM_OK)
		t->n = n;
	free(id);
	return rc;
}

/*
 * Hopcroft's partition refinement over a table's states.  Blocks are runs
 * of elems; the marked states of a block are moved to its front.  Missing
 * transitions go to an implicit dead state that is never a splitter (all
 * the other blocks are), which is enough.
 */
typedef struct refiner
{
	int32_t    *elems;			/* (n) the states, each block's contiguous */
	int32_t    *loc;			/* (n) the position of each state in elems */
	int32_t    *blk;			/* (n) the block of each state */
	int32_t    *first;			/* (n) per block: its first position in elems */
	int32_t    *end;			/* (n) per block: one past its last */
	int32_t    *marked;			/* (n) per block: how many of its states are marked */
	int32_t    *work;			/* (n) blocks still to split the others by */
	int32_t    *touched;		/* (n) blocks with marked states */
	int32_t    *in_first;		/* (n + 1) where each state's incoming edges start */
	int32_t    *in_src;			/* (m) the source of each incoming edge, */
	uint8_t    *in_cls;			/* (m) and its class */
	int32_t    *group;			/* (m) a splitter's predecessors, grouped by class */
	int32_t    *snap;			/* (n) a splitter's states */
	int32_t		nb;				/* blocks */
	int32_t		n_work;
} refiner;

/* Free r's arrays. */
static void
RefinerFree(refiner *r)
{
	free(r->elems);
	free(r->loc);
	free(r->blk);
	free(r->first);
	free(r->end);
	free(r->marked);
	free(r->work);
	free(r->touched);
	free(r->in_first);
	free(r->in_src);
	free(r->in_cls);
	free(r->group);
	free(r->snap);
}

/* Allocate r for t and fill the incoming edges and the partition by distance; false when out of memory. */
static bool
RefinerInit(refiner *r, const table *t)
{
	size_t		n = (size_t) t->n;
	int64_t		m = 0;

	for (size_t x = 0; x < n * t->k; x++)
		m += t->next[x] >= 0;
	r->elems = malloc(sizeof(int32_t) * n), r->loc = malloc(sizeof(int32_t) * n);
	r->blk = malloc(sizeof(int32_t) * n), r->first = calloc(n + 1, sizeof(int32_t));
	r->end = malloc(sizeof(int32_t) * n), r->marked = calloc(n, sizeof(int32_t));
	r->work = malloc(sizeof(int32_t) * n), r->touched = malloc(sizeof(int32_t) * n);
	r->in_first = calloc(n + 1, sizeof(int32_t)), r->snap = malloc(sizeof(int32_t) * n);
	r->in_src = malloc(sizeof(int32_t) * (m + 1)), r->in_cls = malloc(m + 1);
	r->group = malloc(sizeof(int32_t) * (m + 1));
	if (!r->elems || !r->loc || !r->blk || !r->first || !r->end || !r->marked || !r->work ||
		!r->touched || !r->in_first || !r->snap || !r->in_src || !r->in_cls || !r->group)
		return false;
	for (size_t x = 0; x < n * t->k; x++)
		if (t->next[x] >= 0)
			r->in_first[t->next[x] + 1]++;
	for (size_t s = 0; s < n; s++)
		r->in_first[s + 1] += r->in_first[s];
	for (size_t x = 0; x < n * t->k; x++)	/* loc counts the edges placed per target for now */
		if (t->next[x] >= 0)
		{
			int32_t		e = r->in_first[t->next[x]] + r->marked[t->next[x]]++;

			r->in_src[e] = (int32_t) (x / t->k);
			r->in_cls[e] = (uint8_t) (x % t->k);
		}
	memset(r->marked, 0, sizeof(int32_t) * n);
	/* the blocks of equal distance, by a counting sort (distances are below n; marked counts) */
	for (size_t s = 0; s < n; s++)
		r->first[t->dist[s] + 1]++;
	for (size_t d = 0; d < n; d++)
		r->first[d + 1] += r->first[d];
	for (size_t s = 0; s < n; s++)
	{
		int32_t		d = t->dist[s];

		r->loc[s] = r->first[d] + r->marked[d]++;
		r->elems[r->loc[s]] = (int32_t) s;
	}
	for (size_t d = 0; d < n; d++)	/* block nb <= d: first[nb] is read as a start no more */
		if (r->marked[d] > 0)
		{
			r->end[r->nb] = r->first[d] + r->marked[d];
			r->first[r->nb] = r->first[d];
			r->marked[d] = 0;
			r->work[r->n_work++] = r->nb++;
		}
	for (int32_t b = 0; b < r->nb; b++)
		for (int32_t i = r->first[b]; i < r->end[b]; i++)
			r->blk[r->elems[i]] = b;
	return true;
}

/* Mark the states list[0..n) and split each block they partly fill; the smaller part is a new block. */
static void
SplitBy(refiner *r, const int32_t *list, int32_t n)
{
	int32_t		n_touched = 0;

	for (int32_t i = 0; i < n; i++)
	{
		int32_t		s = list[i],
					b = r->blk[s],
					j = r->first[b] + r->marked[b],
					o = r->elems[j];

		if (r->loc[s] < j)
			continue;			/* marked already */
		r->elems[r->loc[s]] = o, r->loc[o] = r->loc[s];
		r->elems[j] = s, r->loc[s] = j;
		if (r->marked[b]++ == 0)
			r->touched[n_touched++] = b;
	}
	for (int32_t i = 0; i < n_touched; i++)
	{
		int32_t		b = r->touched[i],
					m = r->marked[b],
					size = r->end[b] - r->first[b],
					nb = r->nb;

		r->marked[b] = 0;
		if (m == size)
			continue;
		if (m <= size - m)
			r->first[nb] = r->first[b], r->end[nb] = r->first[b] + m, r->first[b] += m;
		else
			r->first[nb] = r->first[b] + m, r->end[nb] = r->end[b], r->end[b] = r->first[b] + m;
		r->marked[nb] = 0;
		for (int32_t j = r->first[nb]; j < r->end[nb]; j++)
			r->blk[r->elems[j]] = nb;
		r->work[r->n_work++] = nb;
		r->nb++;
	}
}

/* Refine until no block splits another: the blocks are then the classes of equivalent states. */
static void
Refine(refiner *r, int32_t k)
{
	int32_t		count[256],
				pos[256];

	while (r->n_work > 0)
	{
		int32_t		b = r->work[--r->n_work],
					ns = r->end[b] - r->first[b],
					total = 0;

		memcpy(r->snap, r->elems + r->first[b], sizeof(int32_t) * ns);
		memset(count, 0, sizeof(int32_t) * k);
		for (int32_t i = 0; i < ns; i++)
			for (int32_t e = r->in_first[r->snap[i]]; e < r->in_first[r->snap[i] + 1]; e++)
				count[r->in_cls[e]]++;
		for (int32_t c = 0; c < k; c++)
			pos[c] = total, total += count[c];
		for (int32_t i = 0; i < ns; i++)
			for (int32_t e = r->in_first[r->snap[i]]; e < r->in_first[r->snap[i] + 1]; e++)
				r->group[pos[r->in_cls[e]]++] = r->in_src[e];
		for (int32_t c = 0; c < k; c++)
			if (count[c] > 0)
				SplitBy(r, r->group + pos[c] - count[c], count[c]);
	}
}

/* Merge the equivalent states of t; blocks are renumbered in the order of their first state (start 0). */
static int
Minimise(table *t, cbllm_err *err)
{
	refiner		r = {0};
	table		m = {0};
	int32_t    *id = NULL;
	int32_t		n = 0;
	int			rc = CBLLM_OK;

	if (!RefinerInit(&r, t) || (id = malloc(sizeof(int32_t) * t->n)) == NULL)
		rc = regex_nomem(err);
	if (rc == CBLLM_OK)
		Refine(&r, t->k);
	if (rc == CBLLM_OK && r.nb < t->n)
	{
		for (int32_t b = 0; b < r.nb; b++)
			id[b] = -1;
		for (int32_t s = 0; s < t->n; s++)
			if (id[r.blk[s]] < 0)
				id[r.blk[s]] = n++;
		if (!TableAlloc(&m, n, t->k))
			rc = regex_nomem(err);
		for (int32_t s = t->n - 1; rc == CBLLM_OK && s >= 0; s--)	/* any state of a block will do */
		{
			int32_t		b = id[r.blk[s]];

			for (int32_t c = 0; c < t->k; c++)
			{
				int32_t		x = t->next[(size_t) s * t->k + c];

				m.next[(size_t) b * t->k + c] = x < 0 ? -1 : id[r.blk[x]];
			}
			m.accept[b] = t->accept[s];
			m.dist[b] = t->dist[s];
		}
		if (rc == CBLLM_OK)
		{
			TableFree(t);
			*t = m;
		}
		else
			TableFree(&m);
	}
	free(id);
	RefinerFree(&r);
	return rc;
}

/* Merge t's identical columns in place; map[b] (a column of t before) becomes the column after. */
static void
MergeColumns(table *t, int32_t *map, int n_map)
{
	uint32_t	hash[256];
	int32_t		col[256];		/* the new column of each old column */
	int32_t		rep[256];		/* the old column each new column is */
	int32_t		k = 0;

	for (int32_t c = 0; c < t->k; c++)
		hash[c] = 1;
	for (int32_t s = 0; s < t->n; s++)
		for (int32_t c = 0; c < t->k; c++)
			hash[c] = HashMix(hash[c], (uint32_t) t->next[(size_t) s * t->k + c]);
	for (int32_t c = 0; c < t->k; c++)
	{
		col[c] = -1;
		for (int32_t f = 0; f < k && col[c] < 0; f++)
		{
			int32_t		r = rep[f],
						s = 0;

			if (hash[r] != hash[c])
				continue;
			while (s < t->n && t->next[(size_t) s * t->k + r] == t->next[(size_t) s * t->k + c])
				s++;
			col[c] = s == t->n ? f : -1;
		}
		if (col[c] < 0)
			rep[k] = c, col[c] = k++;
	}
	for (int32_t s = 0; s < t->n; s++)	/* row s moves left: k <= t->k */
		for (int32_t f = 0; f < k; f++)
			t->next[(size_t) s * k + f] = t->next[(size_t) s * t->k + rep[f]];
	t->k = k;
	for (int b = 0; b < n_map; b++)
		map[b] = col[map[b]];
}

/* ------------------------------------------------------------ compile */

/* The automaton of a parsed pattern: NFA, subsets, pruning, minimisation, byte classes. */
static int
CompileAst(const ast *a, cbllm_dfa **out, cbllm_err *err)
{
	nfa			m = {.a = a, .err = err};
	subset		sb = {.m = &m, .err = err};
	table		live;
	int32_t		map[256];
	int32_t		start;
	cbllm_dfa  *d = NULL;
	int			rc;

	if ((rc = NewState(&m, S_MATCH, 0, 0, -1, -1)) >= 0 && (start = Build(&m, a->root, 0)) >= 0)
		rc = Subset(&sb, start);
	else
		rc = rc < 0 ? rc : start;
	free(m.slot);
	free(m.st);
	live = sb.out;				/* the table is the caller's now */
	for (int b = 0; b < 256; b++)
		map[b] = sb.bc_of[sb.ic_of[b]];
	SubsetFree(&sb);
	if (rc == CBLLM_OK)
		rc = Prune(&live, err);
	if (rc == CBLLM_OK)
	{
		rc = Minimise(&live, err);
	}
	if (rc == CBLLM_OK)
	{
		MergeColumns(&live, map, 256);
		if ((d = calloc(1, sizeof(*d))) == NULL)
			rc = regex_nomem(err);
	}
	if (rc == CBLLM_OK)
	{
		d->n_states = live.n;
		d->n_classes = live.k;
		for (int b = 0; b < 256; b++)
			d->byte_class[b] = (uint8_t) map[b];
		d->next = live.next;
		d->accept = live.accept;
		d->dist = live.dist;
		*out = d;
	}
	else
		TableFree(&live);
	return rc;
}

/* Parse, then compile (regex.h). */
int
regex_compile(const char *pattern, size_t len, cbllm_dfa **out, cbllm_err *err)
{
	ast			a;
	int			rc;

	*out = NULL;
	if ((rc = regex_parse(pattern, len, &a, err)) == CBLLM_OK)
		rc = CompileAst(&a, out, err);
	regex_ast_free(&a);
	return rc;
}

/* Free d and its arrays; NULL is fine. */
void
dfa_free(cbllm_dfa *d)
{
	if (d == NULL)
		return;
	free(d->next);
	free(d->accept);
	free(d->dist);
	free(d);
}

/* Walk d over s[0..n): a full match when the walk ends in an accepting state. */
bool
dfa_match(const cbllm_dfa *d, const char *s, size_t n)
{
	int32_t		state = 0;

	for (size_t i = 0; i < n && state >= 0; i++)
		state = dfa_next(d, state, (uint8_t) s[i]);
	return state >= 0 && d->accept[state];
}
