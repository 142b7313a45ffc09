/*
 * regex_subset.c: the second pass of the regex back end (regex_dfa.c): the
 * subset construction of a DFA from the NFA, one byte class at a time
 * (regex_byteclass.c makes the classes).  Sets of NFA states are closed
 * over epsilon edges with a stack and generation-stamped marks, kept
 * sorted, and looked up in a hash table; the states, the NFA states their
 * sets hold and the closures' work are bounded.
 */
#include "constrain/regex_dfa_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

/* The refusal of a subset construction that would hold or visit too many NFA states. */
static int
TooCostly(cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
					  "regex: the pattern is too costly to compile (the states of its automaton "
					  "overlap too much); simplify the pattern");
}

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

/* The subset construction from NFA state start: sb->out (taken by the caller on success). */
int
regex_subset(subset *sb, int32_t start)
{
	int32_t		k;
	int			rc;

	regex_interval_classes(sb);
	regex_byte_classes(sb);
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
void
regex_subset_free(subset *sb)
{
	free(sb->sets);
	free(sb->pool);
	free(sb->slot);
	free(sb->seen);
	free(sb->stack);
	free(sb->cur);
	free(sb->bucket);
}
