/*
 * regex_internal.h: what the two halves of the regex compiler share.
 * regex_parse.c turns a pattern into a tree whose leaves are classes of
 * code points (regex_class.c: the sets of code points), and regex_write.c
 * writes trees back out (regex_escape, regex_json_string_body);
 * regex_dfa.c compiles a tree to a minimal automaton over bytes
 * (regex_compile).  Private to them: nothing else includes it; the public
 * interface is regex.h.
 */
#ifndef CBLLM_REGEX_INTERNAL_H
#define CBLLM_REGEX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "constrain/regex.h"

#define CP_MAX 0x10FFFF			/* the largest code point */
#define INF_REPEAT (-1)			/* the max of an unbounded repeat */

/* The code points lo..hi, both included. */
typedef struct cprange
{
	uint32_t	lo;
	uint32_t	hi;
} cprange;

/* A growable list of code-point ranges. */
typedef struct rangeset
{
	cprange    *r;				/* (cap) */
	int32_t		n;				/* ranges in use */
	int32_t		cap;			/* ranges allocated */
} rangeset;

/* The kinds of node of a parsed pattern. */
typedef enum
{
	N_EMPTY,					/* the empty string */
	N_CLASS,					/* one character of a set */
	N_CAT,						/* children in sequence */
	N_ALT,						/* one of the children */
	N_REPEAT					/* the child, min to max times */
} node_kind;

/* A node of a parsed pattern. */
typedef struct rnode
{
	node_kind	kind;
	int32_t		a;				/* CLASS: first range in ast.ranges; CAT, ALT: first child in
								 * ast.kids; REPEAT: min */
	int32_t		b;				/* CLASS: ranges; CAT, ALT: children; REPEAT: max or INF_REPEAT */
	int32_t		child;			/* REPEAT: the node repeated */
} rnode;

/*
 * A parsed pattern.  Children are created before their parents.  A class's
 * ranges are sorted, disjoint and free of surrogates; a literal is a class
 * of one code point.  Anchors leave no node.
 */
typedef struct ast
{
	rnode	   *nodes;			/* (cap_nodes) */
	int32_t		n_nodes;
	int32_t		cap_nodes;
	int32_t    *kids;			/* (cap_kids) the children of CAT and ALT nodes, each run contiguous */
	int32_t		n_kids;
	int32_t		cap_kids;
	int32_t    *stack;			/* (cap_stack) the children of the sequences being parsed */
	int32_t		n_stack;
	int32_t		cap_stack;
	rangeset	ranges;			/* every class's ranges, each run contiguous */
	rangeset	tmp;			/* the members of the class being parsed */
	int32_t		root;			/* the node of the whole pattern */
} ast;

/* Grow the array at *arrp (cap elements of size sz) to hold need elements; false when out of memory. */
bool		regex_grow(void *arrp, int32_t *cap, int64_t need, size_t sz);

#define GROW(arr, cap, need) regex_grow(&(arr), &(cap), (need), sizeof(*(arr)))

/* The refusal of a failed allocation: CBLLM_ERR_NOMEM with its message. */
int			regex_nomem(cbllm_err *err);

/* Parse len bytes of pattern into a; the caller frees a with regex_ast_free, whatever the status. */
int			regex_parse(const char *pattern, size_t len, ast *a, cbllm_err *err);

/* Free what a parse allocated (a itself is the caller's). */
void		regex_ast_free(ast *a);

/* ---------------------------------------------------------------- regex_class.c */

/* Append [lo, hi] less the surrogates (nothing when lo > hi); false when out of memory. */
bool		regex_range_add(rangeset *s, uint32_t lo, uint32_t hi);

/* Append the scalar values outside r[0..n) (sorted, disjoint); false when out of memory. */
bool		regex_range_add_complement(rangeset *s, const cprange *r, int32_t n);

/* Sort and merge s's ranges in place. */
void		regex_range_normalise(rangeset *s);

/*
 * Add the members of \d \w \s (letter; upper case: their complements) to
 * a->tmp; in_negated: the set is a member of a [^...].  False when out of
 * memory.
 */
bool		regex_add_named_set(ast *a, uint8_t letter, bool in_negated);

#endif
