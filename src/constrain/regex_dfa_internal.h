/*
 * regex_dfa_internal.h: what the passes of the regex back end share
 * (regex_dfa.c's opening comment tells the passes; regex_internal.h is what
 * the front and the back share).  regex_nfa.c builds the NFA,
 * regex_byteclass.c cuts the bytes into classes, regex_subset.c makes the
 * DFA from the NFA, regex_minimise.c prunes and minimises it; regex_dfa.c
 * runs them in order.  Private to those files.
 */
#ifndef CBLLM_REGEX_DFA_INTERNAL_H
#define CBLLM_REGEX_DFA_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "constrain/regex_internal.h"

#define REGEX_MAX_NFA (1 << 20)	/* NFA states */
#define REGEX_MAX_POOL (1 << 21)	/* NFA state ids held by the subset construction's sets */
#define REGEX_MAX_WORK ((int64_t) 1 << 23)	/* NFA states visited by its closures */

/* Mix v into the hash h. */
static inline uint32_t
HashMix(uint32_t h, uint32_t v)
{
	h ^= v + 0x9E3779B9u + (h << 6) + (h >> 2);
	return h * 0x85EBCA6Bu;
}

/* ------------------------------------------------------------------ NFA */

/* The kinds of NFA state. */
typedef enum
{
	S_MATCH,					/* the end of a full match (state 0) */
	S_RANGE,					/* consume a byte in [lo, hi], go to out */
	S_SPLIT						/* go to out and out2 without consuming (-1: nowhere) */
} state_kind;

/* An NFA state. */
typedef struct nstate
{
	uint8_t		kind;			/* state_kind */
	uint8_t		lo;
	uint8_t		hi;
	int32_t		out;
	int32_t		out2;
} nstate;

/* An NFA under construction: its states and the index that shares RANGE states. */
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

/* The subset construction under way: byte classes, DFA states, their sets, the closure's work arrays. */
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

/* ---------------------------------------------------------------- regex_nfa.c */

/* Add a state to m; its index, or a negative status. */
int32_t		regex_nfa_new_state(nfa *m, state_kind kind, int lo, int hi, int32_t out, int32_t out2);

/* Compile node so that a match of it goes on to state next; its start state, or a negative status. */
int32_t		regex_nfa_build(nfa *m, int32_t node, int32_t next);

/* ---------------------------------------------------------------- regex_byteclass.c */

/* Cut the bytes into intervals that no RANGE state of sb->m splits (sb->ic_of, sb->n_ic). */
void		regex_interval_classes(subset *sb);

/* Group the intervals into byte classes (sb->bc_of, sb->rep, sb->n_bc). */
void		regex_byte_classes(subset *sb);

/* Merge t's identical columns in place; map[b] (a column of t before) becomes the column after. */
void		regex_merge_columns(table *t, int32_t *map, int n_map);

/* ---------------------------------------------------------------- regex_subset.c */

/* The subset construction from NFA state start: sb->out (taken by the caller on success). */
int			regex_subset(subset *sb, int32_t start);

/* Free the subset construction's work arrays (not its table, sb->out). */
void		regex_subset_free(subset *sb);

/* ---------------------------------------------------------------- regex_minimise.c */

/* Free t's arrays and empty it. */
void		regex_table_free(table *t);

/* Keep the states of t that reach a match (the start must be one), in place; t->dist is set. */
int			regex_prune(table *t, cbllm_err *err);

/* Merge the equivalent states of t; blocks are renumbered in the order of their first state (start 0). */
int			regex_minimise(table *t, cbllm_err *err);

#endif
