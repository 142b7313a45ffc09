/*
 * regex_dfa.c: the back of the regex compiler (regex.h): the tree that
 * regex_parse.c makes of a pattern (regex_internal.h) becomes a minimal
 * deterministic automaton over bytes, in four passes, each in a file of its
 * own (regex_dfa_internal.h is what they share), which this file runs:
 *
 *   NFA       (regex_nfa.c) Thompson's construction over bytes, built
 *             backwards: a node is compiled with the state that follows it
 *             already known, so no state waits to be patched.  A class
 *             becomes a tree of the bytes of its UTF-8 encodings: per
 *             encoded length, the lead byte, then each continuation byte, a
 *             run of bytes that go on alike taking one byte range, and a
 *             block of code points wholly in the class going on to "any
 *             continuation bytes".  A byte-range state is shared whenever
 *             one with the same range and successor exists, which folds
 *             those chains into one.
 *   subset    (regex_byteclass.c, regex_subset.c) the NFA's byte ranges cut
 *             0..255 into intervals no range splits, and intervals that
 *             every range takes or leaves together form one byte class; the
 *             subset construction works per class, not per byte.  Sets of
 *             NFA states are closed over epsilon edges with a stack and
 *             generation-stamped marks, kept sorted, and looked up in a hash
 *             table.  The states, the NFA states their sets hold and the
 *             closures' work are bounded.
 *   prune     (regex_minimise.c) a breadth-first search over reversed edges
 *             from the accepting states gives each state its distance to a
 *             match; states without one are dropped.
 *   minimise  (regex_minimise.c) Hopcroft's partition refinement, starting
 *             from the partition by distance (equivalent states have equal
 *             distances).
 * Last, classes whose columns agree in every state merge into the byte
 * classes of the result (regex_byteclass.c).  Nothing recurses deeper than
 * the nesting of the tree's groups, which the parse bounds.
 */
#include "constrain/regex_dfa_internal.h"

#include <stdbool.h>
#include <stdlib.h>

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

	if ((rc = regex_nfa_new_state(&m, S_MATCH, 0, 0, -1, -1)) >= 0 &&
		(start = regex_nfa_build(&m, a->root, 0)) >= 0)
		rc = regex_subset(&sb, start);
	else
		rc = rc < 0 ? rc : start;
	free(m.slot);
	free(m.st);
	live = sb.out;				/* the table is the caller's now */
	for (int b = 0; b < 256; b++)
		map[b] = sb.bc_of[sb.ic_of[b]];
	regex_subset_free(&sb);
	if (rc == CBLLM_OK)
		rc = regex_prune(&live, err);
	if (rc == CBLLM_OK)
	{
		rc = regex_minimise(&live, err);
	}
	if (rc == CBLLM_OK)
	{
		regex_merge_columns(&live, map, 256);
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
		regex_table_free(&live);
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
