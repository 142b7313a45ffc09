/*
 * regex_nfa.c: the first pass of the regex back end (regex_dfa.c): the
 * pattern's tree becomes an NFA over bytes by Thompson's construction,
 * built backwards: a node is compiled with the state that follows it
 * already known, so no state waits to be patched.  A class becomes a tree
 * of the bytes of its UTF-8 encodings (ClassBlocks says how), and a
 * byte-range state is shared whenever one with the same range and
 * successor exists.
 */
#include "constrain/regex_dfa_internal.h"

#include <stdlib.h>
#include <string.h>

/* The refusal of a pattern whose NFA would pass REGEX_MAX_NFA states. */
static int
TooLarge(cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
					  "regex: the pattern is too large (its automaton would exceed %d states); "
					  "simplify the pattern", REGEX_MAX_NFA);
}

/* Add a state; its index, or a negative status. */
int32_t
regex_nfa_new_state(nfa *m, state_kind kind, int lo, int hi, int32_t out, int32_t out2)
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
	if ((s = regex_nfa_new_state(m, S_RANGE, lo, hi, out, -1)) >= 0)
		m->slot[i] = s;
	return s;
}

/* Join *acc (a start, or -1 for none yet) and start s into one start. */
static int
JoinStart(nfa *m, int32_t *acc, int32_t s)
{
	if (*acc >= 0 && (s = regex_nfa_new_state(m, S_SPLIT, 0, 0, s, *acc)) < 0)
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

/* Compile a repeat of child min..max times (max INF_REPEAT: no bound), going on to next. */
static int32_t
BuildRepeat(nfa *m, int32_t child, int32_t min, int32_t max, int32_t next)
{
	int32_t		cur = next,
				s;

	if (max == INF_REPEAT)
	{
		/* a loop state: into the child (set below) or on to next; min > 0 enters the child first */
		int32_t		loop = regex_nfa_new_state(m, S_SPLIT, 0, 0, -1, next);

		if (loop < 0 || (s = regex_nfa_build(m, child, loop)) < 0)
			return loop < 0 ? loop : s;
		m->st[loop].out = s;
		cur = min > 0 ? s : loop;
		min = min > 0 ? min - 1 : 0;
	}
	else
		for (int32_t i = 0; i < max - min; i++)
			if ((s = regex_nfa_build(m, child, cur)) < 0 || (cur = regex_nfa_new_state(m, S_SPLIT, 0, 0, s, next)) < 0)
				return s < 0 ? s : cur;
	for (int32_t i = 0; i < min; i++)
		if ((cur = regex_nfa_build(m, child, cur)) < 0)
			return cur;
	return cur;
}

/* Compile node so that a match of it goes on to state next; its start state, or a negative status. */
int32_t
regex_nfa_build(nfa *m, int32_t node, int32_t next)
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
			return rc < 0 ? rc : acc >= 0 ? acc : regex_nfa_new_state(m, S_SPLIT, 0, 0, -1, -1);
		case N_CAT:
			for (int32_t i = t->b - 1; i >= 0 && next >= 0; i--)
				next = regex_nfa_build(m, m->a->kids[t->a + i], next);
			return next;
		case N_ALT:
			for (int32_t i = t->b - 1; i >= 0 && rc >= 0; i--)
			{
				int32_t		s = regex_nfa_build(m, m->a->kids[t->a + i], next);

				rc = s < 0 ? s : JoinStart(m, &acc, s);
			}
			return rc < 0 ? rc : acc;
		case N_REPEAT:
			return BuildRepeat(m, t->child, t->a, t->b, next);
	}
	return CBLLM_ERR_INTERNAL;
}
