/*
 * regex.c: a regular expression compiled to a minimal deterministic
 * automaton over bytes (regex.h), in five passes:
 *
 *   parse     the pattern (UTF-8, checked whole first) becomes a tree of
 *             five kinds of node: the empty string, a class (a sorted set
 *             of code-point ranges without surrogates: a literal is a class
 *             of one), a sequence, an alternation and a counted repeat.
 *             Anchors leave no node: they are only accepted where a full
 *             match makes them true anyway.
 *   NFA       Thompson's construction over bytes, built backwards: a node is
 *             compiled with the state that follows it already known, so no
 *             state waits to be patched.  A class becomes the alternation
 *             of the byte-range sequences of its UTF-8 encodings (each
 *             range split at the encoded-length boundaries and at the
 *             continuation-byte boundaries until every byte position is one
 *             range), and a byte-range state is shared whenever one with
 *             the same range and successor exists, which folds the common
 *             continuation bytes of a class into one chain.
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
 * classes of the result.
 *
 * Nothing recurses deeper than the nesting of groups (REGEX_MAX_DEPTH).
 * regex_json_string_body reuses the parse: it removes the characters a JSON
 * string needs escaped from every class and writes the tree back out.
 */
#include "regex.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGEX_MAX_DEPTH 256		/* groups nested in groups */
#define REGEX_MAX_PATTERN (1 << 24)	/* pattern bytes */
#define REGEX_MAX_NFA (1 << 20)	/* NFA states */
#define REGEX_MAX_POOL (1 << 21)	/* NFA state ids held by the subset construction's sets */
#define REGEX_MAX_WORK ((int64_t) 1 << 23)	/* NFA states visited by its closures */
#define CP_MAX 0x10FFFF
#define INF_REPEAT (-1)			/* the max of an unbounded repeat */

/* ------------------------------------------------------------- helpers */

/* Grow the array at *arrp (cap elements of size sz) to hold need elements; false when out of memory. */
static bool
Grow(void *arrp, int32_t *cap, int64_t need, size_t sz)
{
	void	   *arr;
	void	   *p;
	int64_t		c = *cap > 0 ? *cap : 16;

	if (need <= *cap)
		return true;
	while (c < need)
		c *= 2;
	if (c > INT32_MAX)
		return false;
	memcpy(&arr, arrp, sizeof(arr));
	p = realloc(arr, (size_t) c * sz);
	if (p == NULL)
		return false;
	memcpy(arrp, &p, sizeof(p));
	*cap = (int32_t) c;
	return true;
}

#define GROW(arr, cap, need) Grow(&(arr), &(cap), (need), sizeof(*(arr)))

/* The length of the valid UTF-8 character at s[0..n) and its code point in *cp; 0 when invalid. */
static int
Utf8Decode(const uint8_t *s, size_t n, uint32_t *cp)
{
	static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
	int			len = s[0] < 0x80 ? 1 : s[0] < 0xC2 ? 0 : s[0] < 0xE0 ? 2 : s[0] < 0xF0 ? 3 :
		s[0] < 0xF5 ? 4 : 0;
	uint32_t	c;

	if (len == 0 || (size_t) len > n)
		return 0;
	c = len == 1 ? s[0] : s[0] & (0x3F >> (len - 1));
	for (int i = 1; i < len; i++)
	{
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3F);
	}
	if (c < min_cp[len] || c > CP_MAX || (c >= 0xD800 && c <= 0xDFFF))
		return 0;
	*cp = c;
	return len;
}

/* Encode cp (a scalar value) into b; the number of bytes. */
static int
Utf8Encode(uint32_t cp, uint8_t *b)
{
	if (cp < 0x80)
		return b[0] = (uint8_t) cp, 1;
	if (cp < 0x800)
		return b[0] = (uint8_t) (0xC0 | cp >> 6), b[1] = (uint8_t) (0x80 | (cp & 0x3F)), 2;
	if (cp < 0x10000)
	{
		b[0] = (uint8_t) (0xE0 | cp >> 12);
		b[1] = (uint8_t) (0x80 | (cp >> 6 & 0x3F));
		b[2] = (uint8_t) (0x80 | (cp & 0x3F));
		return 3;
	}
	b[0] = (uint8_t) (0xF0 | cp >> 18);
	b[1] = (uint8_t) (0x80 | (cp >> 12 & 0x3F));
	b[2] = (uint8_t) (0x80 | (cp >> 6 & 0x3F));
	b[3] = (uint8_t) (0x80 | (cp & 0x3F));
	return 4;
}

/* The offset of the first byte of s[0..n) that is not UTF-8, or n. */
static size_t
Utf8Check(const uint8_t *s, size_t n)
{
	size_t		i = 0;
	uint32_t	cp;
	int			k;

	while (i < n && (k = Utf8Decode(s + i, n - i, &cp)) > 0)
		i += k;
	return i;
}

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

/* --------------------------------------------------- code-point ranges */

typedef struct cprange
{
	uint32_t	lo;
	uint32_t	hi;
} cprange;

/* A growable list of code-point ranges. */
typedef struct rangeset
{
	cprange    *r;				/* (cap) */
	int32_t		n;
	int32_t		cap;
} rangeset;

/* Append [lo, hi] less the surrogates (nothing when lo > hi); false when out of memory. */
static bool
RangeAdd(rangeset *s, uint32_t lo, uint32_t hi)
{
	if (lo <= hi && lo < 0xD800)
	{
		if (!GROW(s->r, s->cap, s->n + 1))
			return false;
		s->r[s->n++] = (cprange) {lo, hi < 0xD800 ? hi : 0xD7FF};
	}
	if (lo <= hi && hi > 0xDFFF)
	{
		if (!GROW(s->r, s->cap, s->n + 1))
			return false;
		s->r[s->n++] = (cprange) {lo > 0xE000 ? lo : 0xE000, hi};
	}
	return true;
}

/* Append the scalar values outside r[0..n) (sorted, disjoint); false when out of memory. */
static bool
RangeAddComplement(rangeset *s, const cprange *r, int32_t n)
{
	uint32_t	from = 0;

	for (int32_t i = 0; i < n; i++)
	{
		if (r[i].lo > from && !RangeAdd(s, from, r[i].lo - 1))
			return false;
		from = r[i].hi + 1;
	}
	return RangeAdd(s, from, CP_MAX);
}

/* The order of two ranges by their first code point, for qsort. */
static int
CmpRange(const void *a, const void *b)
{
	const cprange *x = a;
	const cprange *y = b;

	return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sort and merge s's ranges in place. */
static void
RangeNormalise(rangeset *s)
{
	int32_t		n = 0;

	if (s->n > 1)
		qsort(s->r, (size_t) s->n, sizeof(cprange), CmpRange);
	for (int32_t i = 0; i < s->n; i++)
	{
		if (n > 0 && s->r[i].lo <= s->r[n - 1].hi + 1)
		{
			if (s->r[i].hi > s->r[n - 1].hi)
				s->r[n - 1].hi = s->r[i].hi;
		}
		else
			s->r[n++] = s->r[i];
	}
	s->n = n;
}

/* ---------------------------------------------------------------- parse */

typedef enum
{
	N_EMPTY,					/* the empty string */
	N_CLASS,					/* one character of a set */
	N_CAT,						/* children in sequence */
	N_ALT,						/* one of the children */
	N_REPEAT					/* the child, min to max times */
} node_kind;

typedef struct rnode
{
	node_kind	kind;
	int32_t		a;				/* CLASS: first range in ast.ranges; CAT, ALT: first child in
								 * ast.kids; REPEAT: min */
	int32_t		b;				/* CLASS: ranges; CAT, ALT: children; REPEAT: max or INF_REPEAT */
	int32_t		child;			/* REPEAT: the node repeated */
} rnode;

/* A parsed pattern.  Children are created before their parents. */
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
	int32_t		root;
} ast;

typedef struct parser
{
	const uint8_t *s;
	size_t		len;
	size_t		pos;
	int			depth;			/* groups open */
	int64_t		end_at;			/* the offset of an end anchor in this top-level branch, or -1 */
	int			end_len;		/* its length in bytes */
	ast		   *a;
	cbllm_err  *err;
} parser;

/* What an escape stands for. */
enum
{
	ESC_CHAR, ESC_SET, ESC_START, ESC_END
};

#define ATOM_ANCHOR (-1)		/* ParseAtom read an anchor */
#define ATOM_SKIP (-2)			/* ParseAtom read a comment */

static int	ParseAlt(parser *p, int32_t *out);

/* Free what a parse allocated (a itself is the caller's). */
static void
AstFree(ast *a)
{
	free(a->nodes);
	free(a->kids);
	free(a->stack);
	free(a->ranges.r);
	free(a->tmp.r);
}

/* The refusal of a failed allocation. */
static int
NoMem(cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_NOMEM, "regex: out of memory");
}

/* Add a node; its index in *out. */
static int
NewNode(parser *p, node_kind kind, int32_t a, int32_t b, int32_t child, int32_t *out)
{
	ast		   *t = p->a;

	if (!GROW(t->nodes, t->cap_nodes, t->n_nodes + 1))
		return NoMem(p->err);
	t->nodes[t->n_nodes] = (rnode) {kind, a, b, child};
	*out = t->n_nodes++;
	return CBLLM_OK;
}

/* A CLASS node of the members in a->tmp (or the scalar values outside them); tmp is emptied. */
static int
ClassNode(parser *p, bool negate, int32_t *out)
{
	ast		   *a = p->a;
	int32_t		first = a->ranges.n;
	bool		ok = true;

	RangeNormalise(&a->tmp);
	if (negate)
		ok = RangeAddComplement(&a->ranges, a->tmp.r, a->tmp.n);
	else
		for (int32_t i = 0; i < a->tmp.n && ok; i++)
			ok = RangeAdd(&a->ranges, a->tmp.r[i].lo, a->tmp.r[i].hi);
	a->tmp.n = 0;
	if (!ok)
		return NoMem(p->err);
	return NewNode(p, N_CLASS, first, a->ranges.n - first, -1, out);
}

/* Add the members of \d \w \s (or, upper case, their complements) to a->tmp. */
static bool
AddNamedSet(ast *a, uint8_t letter)
{
	static const cprange d[] = {{'0', '9'}};
	static const cprange w[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
	static const cprange s[] = {{'\t', '\r'}, {' ', ' '}};
	const cprange *r = letter == 'd' || letter == 'D' ? d : letter == 'w' || letter == 'W' ? w : s;
	int32_t		n = r == d ? 1 : r == w ? 4 : 2;

	if (letter >= 'A' && letter <= 'Z')
		return RangeAddComplement(&a->tmp, r, n);
	for (int32_t i = 0; i < n; i++)
		if (!RangeAdd(&a->tmp, r[i].lo, r[i].hi))
			return false;
	return true;
}

/* The value of hex digit c, or -1. */
static int
HexValue(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
		return (c | 0x20) - 'a' + 10;
	return -1;
}

/* Read n hex digits at s[i..] (n == 0: one to eight, up to a '}'); false when malformed. */
static bool
ReadHex(const parser *p, size_t i, int n, uint32_t *cp, size_t *end)
{
	uint32_t	v = 0;
	int			k = 0;

	for (; i < p->len && HexValue(p->s[i]) >= 0 && (n == 0 ? k < 8 : k < n); i++, k++)
		v = v << 4 | (uint32_t) HexValue(p->s[i]);
	if (k == 0 || (n > 0 && k < n) || (n == 0 && (i >= p->len || p->s[i++] != '}')))
		return false;
	*cp = v;
	*end = i;
	return true;
}

/* The refusal of an escape of another dialect at offset at. */
static int
EscapeUnsupported(parser *p, size_t at)
{
	uint8_t		c = p->s[at + 1];
	const char *what = c == 'b' || c == 'B' ? "word boundary" : (c >= '1' && c <= '9') ||
		c == 'k' || c == 'g' ? "backreference" : c == 'p' || c == 'P' ? "Unicode property" :
		c == 'A' || c == 'Z' || c == 'z' ? "anchor" : c == '0' ? "octal escape" : "escape";

	return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED,
					  "regex: %s \\%c at offset %zu is not supported%s", what, c, at,
					  c == 'A' || c == 'Z' || c == 'z' ? " in a character class" : "");
}

/*
 * Read the escape at p->pos (a backslash): ESC_CHAR with the code point in
 * *cp, ESC_SET with the letter of \d \w \s \D \W \S in *cp, or an anchor
 * (outside classes); a negative status for an error.
 */
static int
ParseEscape(parser *p, bool in_class, uint32_t *cp)
{
	static const char controls[] = "n\nr\rt\tf\fv\v";
	size_t		at = p->pos;
	size_t		end = at + 2;
	uint8_t		c;
	const char *ctl;
	int			k;

	if (at + 1 >= p->len)
		return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: the pattern ends with a backslash");
	c = p->s[at + 1];
	if (c != 0 && (ctl = strchr(controls, c)) != NULL && (ctl - controls) % 2 == 0)
		*cp = (uint8_t) ctl[1];
	else if (c == '0' && !(at + 2 < p->len && p->s[at + 2] >= '0' && p->s[at + 2] <= '9'))
		*cp = 0;
	else if (c == 'x' || c == 'u' || c == 'U')
	{
		bool		brace = c == 'x' && at + 2 < p->len && p->s[at + 2] == '{';

		if (!ReadHex(p, at + 2 + brace, brace ? 0 : c == 'x' ? 2 : c == 'u' ? 4 : 8, cp, &end))
			return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: bad escape \\%c at offset %zu", c, at);
		if (*cp > CP_MAX)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID,
							  "regex: escape at offset %zu is above U+10FFFF", at);
	}
	else if (strchr("dDwWsS", c) != NULL && c != 0)
	{
		*cp = c;
		p->pos = end;
		return ESC_SET;
	}
	else if (c == 'b' && in_class)
		*cp = '\b';
	else if (!in_class && (c == 'A' || c == 'Z' || c == 'z'))
	{
		p->pos = end;
		return c == 'A' ? ESC_START : ESC_END;
	}
	else if (c < 0x80 && (((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9')))
		return EscapeUnsupported(p, at);
	else
	{
		k = Utf8Decode(p->s + at + 1, p->len - at - 1, cp);
		end = at + 1 + (size_t) k;
	}
	p->pos = end;
	return ESC_CHAR;
}

/* Read one member of a class at p->pos: a code point (*set 0) or a named set (*set its letter). */
static int
ParseClassItem(parser *p, uint32_t *cp, uint8_t *set)
{
	int			k;

	*set = 0;
	if (p->s[p->pos] == '\\')
	{
		k = ParseEscape(p, true, cp);
		if (k < 0)
			return k;
		if (k == ESC_SET)
			*set = (uint8_t) *cp;
		return CBLLM_OK;
	}
	k = Utf8Decode(p->s + p->pos, p->len - p->pos, cp);
	p->pos += (size_t) k;
	return CBLLM_OK;
}

/* Add a class member read by ParseClassItem to a->tmp. */
static int
AddItem(parser *p, uint32_t cp, uint8_t set)
{
	if (!(set ? AddNamedSet(p->a, set) : RangeAdd(&p->a->tmp, cp, cp)))
		return NoMem(p->err);
	return CBLLM_OK;
}

/* Parse [...] or [^...] at p->pos, with Python's rules for ']' first and '-' last. */
static int
ParseClass(parser *p, int32_t *out)
{
	size_t		open = p->pos++;
	bool		negate = p->pos < p->len && p->s[p->pos] == '^';
	size_t		first;
	int			rc = CBLLM_OK;

	p->pos += negate;
	first = p->pos;
	for (;;)
	{
		uint32_t	lo, hi;
		uint8_t		set1, set2;
		size_t		from = p->pos;

		if (p->pos >= p->len)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID,
							  "regex: unterminated character class at offset %zu", open);
		if (p->s[p->pos] == ']' && p->pos != first)
		{
			p->pos++;
			break;
		}
		if ((rc = ParseClassItem(p, &lo, &set1)) < 0)
			return rc;
		if (p->pos >= p->len || p->s[p->pos] != '-')
			rc = AddItem(p, lo, set1);
		else if (++p->pos < p->len && p->s[p->pos] == ']')
			rc = AddItem(p, lo, set1) < 0 ? CBLLM_ERR_NOMEM : AddItem(p, '-', 0);
		else if (p->pos >= p->len)
			continue;			/* unterminated: reported above */
		else if ((rc = ParseClassItem(p, &hi, &set2)) < 0)
			return rc;
		else if (set1 || set2 || lo > hi)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: bad character range %.*s at offset %zu",
							  (int) (p->pos - from), (const char *) p->s + from, from);
		else if (!RangeAdd(&p->a->tmp, lo, hi))
			rc = CBLLM_ERR_NOMEM;
		if (rc < 0)
			return NoMem(p->err);
	}
	return ClassNode(p, negate, out);
}

/* Read the group name at p->pos up to its '>'. */
static int
ParseGroupName(parser *p, size_t open)
{
	size_t		i = p->pos;

	while (i < p->len && p->s[i] != '>' &&
		   (p->s[i] == '_' || p->s[i] >= 0x80 || ((p->s[i] | 0x20) >= 'a' && (p->s[i] | 0x20) <= 'z') ||
			(i > p->pos && p->s[i] >= '0' && p->s[i] <= '9')))
		i++;
	if (i == p->pos || i >= p->len || p->s[i] != '>')
		return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: bad group name at offset %zu", open);
	p->pos = i + 1;
	return CBLLM_OK;
}

/* Read what follows "(?" at p->pos - 2: a group kind we take, or a refusal naming the construct. */
static int
ParseGroupKind(parser *p, size_t open, bool *comment)
{
	const uint8_t *s = p->s + p->pos;
	size_t		left = p->len - p->pos;
	const char *what = NULL;

	*comment = false;
	if (left >= 1 && s[0] == ':')
		return p->pos++, CBLLM_OK;
	if (left >= 2 && s[0] == 'P' && s[1] == '<')
		return p->pos += 2, ParseGroupName(p, open);
	if (left >= 2 && s[0] == '<' && s[1] != '=' && s[1] != '!')
		return p->pos += 1, ParseGroupName(p, open);
	if (left >= 1 && s[0] == '#')
	{
		const uint8_t *close = memchr(s, ')', left);

		if (close == NULL)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID,
							  "regex: missing ) for the comment opened at offset %zu", open);
		p->pos += (size_t) (close - s) + 1;
		*comment = true;
		return CBLLM_OK;
	}
	if (left == 0)
		return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: unterminated group at offset %zu", open);
	what = s[0] == '=' ? "lookahead (?=" : s[0] == '!' ? "negative lookahead (?!" :
		left >= 2 && s[0] == '<' && s[1] == '=' ? "lookbehind (?<=" :
		left >= 2 && s[0] == '<' ? "negative lookbehind (?<!" :
		left >= 2 && s[0] == 'P' && s[1] == '=' ? "backreference (?P=" :
		s[0] == '>' ? "atomic group (?>" : NULL;
	if (what != NULL)
		return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED, "regex: %s at offset %zu is not supported",
						  what, open);
	return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED, "regex: %s (?%c at offset %zu %s not supported",
					  s[0] != 0 && strchr("aiLmsux-", s[0]) != NULL ? "inline flags" : "group",
					  s[0] >= 0x20 && s[0] < 0x7F ? s[0] : '?', open,
					  s[0] != 0 && strchr("aiLmsux-", s[0]) != NULL ? "are" : "is");
}

/* Parse a group at p->pos ('('); *out is ATOM_SKIP for a comment. */
static int
ParseGroup(parser *p, int32_t *out)
{
	size_t		open = p->pos++;
	bool		comment = false;
	int			rc;

	if (p->pos < p->len && p->s[p->pos] == '?')
	{
		p->pos++;
		if ((rc = ParseGroupKind(p, open, &comment)) < 0)
			return rc;
		if (comment)
			return *out = ATOM_SKIP, CBLLM_OK;
	}
	if (++p->depth > REGEX_MAX_DEPTH)
		return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED,
						  "regex: groups nested deeper than %d at offset %zu are not supported",
						  REGEX_MAX_DEPTH, open);
	if ((rc = ParseAlt(p, out)) < 0)
		return rc;
	if (p->pos >= p->len || p->s[p->pos] != ')')
		return cbllm_fail(p->err, CBLLM_ERR_INVALID,
						  "regex: missing ) for the group opened at offset %zu", open);
	p->pos++;
	p->depth--;
	return CBLLM_OK;
}

/* Accept an anchor at offset at (len bytes) where a full match makes it true, else refuse it. */
static int
Anchor(parser *p, size_t at, size_t len, bool start, bool first, int32_t *out)
{
	if (p->depth > 0 || (start && !first))
		return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED,
						  "regex: anchor %.*s at offset %zu is not supported (only at the start or "
						  "end of the pattern or of a top-level alternative)",
						  (int) len, (const char *) p->s + at, at);
	if (!start && p->end_at < 0)
		p->end_at = (int64_t) at, p->end_len = (int) len;
	*out = ATOM_ANCHOR;
	return CBLLM_OK;
}

/* Parse one atom at p->pos; first: nothing precedes it in its branch.  *out a node or ATOM_*. */
static int
ParseAtom(parser *p, bool first, int32_t *out)
{
	size_t		at = p->pos;
	uint8_t		c = p->s[at];
	uint32_t	cp;
	int			k;

	if (c == '(')
		return ParseGroup(p, out);
	if (c == '[')
		return ParseClass(p, out);
	if (c == '^' || c == '$')
		return p->pos++, Anchor(p, at, 1, c == '^', first, out);
	if (c == '.')
	{
		p->pos++;
		return RangeAdd(&p->a->tmp, '\n', '\n') ? ClassNode(p, true, out) : NoMem(p->err);
	}
	if (c != '\\')
	{
		p->pos += (size_t) Utf8Decode(p->s + at, p->len - at, &cp);
		return RangeAdd(&p->a->tmp, cp, cp) ? ClassNode(p, false, out) : NoMem(p->err);
	}
	if ((k = ParseEscape(p, false, &cp)) < 0)
		return k;
	if (k == ESC_START || k == ESC_END)
		return Anchor(p, at, 2, k == ESC_START, first, out);
	if (!(k == ESC_SET ? AddNamedSet(p->a, (uint8_t) cp) : RangeAdd(&p->a->tmp, cp, cp)))
		return NoMem(p->err);
	return ClassNode(p, false, out);
}

/* Read decimal digits at s[*i..] (saturating); -1 when there are none. */
static int64_t
ReadCount(const parser *p, size_t *i)
{
	int64_t		v = -1;

	for (; *i < p->len && p->s[*i] >= '0' && p->s[*i] <= '9'; (*i)++)
		v = v < 0 ? p->s[*i] - '0' : v > 100000000 ? v : v * 10 + (p->s[*i] - '0');
	return v;
}

/* Read a quantifier at p->pos: 1 with its counts, 0 when there is none (a '{' is then a literal). */
static int
ParseQuantifier(parser *p, int32_t *min, int32_t *max)
{
	size_t		at = p->pos;
	size_t		i = at + 1;
	uint8_t		c = p->s[at];
	int64_t		lo = c == '+' ? 1 : 0;
	int64_t		hi = c == '?' ? 1 : INF_REPEAT;

	if (c == '{')
	{
		lo = ReadCount(p, &i);
		if (i < p->len && p->s[i] == ',')
		{
			i++;
			hi = ReadCount(p, &i);
			lo = lo < 0 ? 0 : lo;
		}
		else if ((hi = lo) < 0)
			return 0;
		if (i >= p->len || p->s[i] != '}')
			return 0;
		if (lo > REGEX_MAX_REPEAT || hi > REGEX_MAX_REPEAT)
			return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED,
							  "regex: repeat count %lld at offset %zu is over the limit of %d",
							  (long long) (lo > REGEX_MAX_REPEAT ? lo : hi), at, REGEX_MAX_REPEAT);
		if (hi >= 0 && hi < lo)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID,
							  "regex: repeat at offset %zu has its maximum below its minimum", at);
		i++;
	}
	else if (c != '*' && c != '+' && c != '?')
		return 0;
	if (i < p->len && p->s[i] == '+')
		return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED,
						  "regex: possessive quantifier at offset %zu is not supported", i);
	i += i < p->len && p->s[i] == '?';	/* lazy: the same strings */
	p->pos = i;
	*min = (int32_t) lo;
	*max = (int32_t) hi;
	return 1;
}

/* Whether an end anchor ($, \Z, \z) is at p->pos. */
static bool
AtEndAnchor(const parser *p)
{
	return p->s[p->pos] == '$' || (p->s[p->pos] == '\\' && p->pos + 1 < p->len &&
								   (p->s[p->pos + 1] == 'Z' || p->s[p->pos + 1] == 'z'));
}

/* Move the stack's entries from base up into a CAT or ALT node. */
static int
ListNode(parser *p, node_kind kind, int32_t base, int32_t *out)
{
	ast		   *a = p->a;
	int32_t		n = a->n_stack - base;

	if (!GROW(a->kids, a->cap_kids, a->n_kids + n))
		return NoMem(p->err);
	memcpy(a->kids + a->n_kids, a->stack + base, sizeof(int32_t) * n);
	a->n_stack = base;
	a->n_kids += n;
	return NewNode(p, kind, a->n_kids - n, n, -1, out);
}

/* Parse a branch: atoms and their quantifiers up to '|', ')' or the end. */
static int
ParseCat(parser *p, int32_t *out)
{
	ast		   *a = p->a;
	int32_t		base = a->n_stack;
	bool		can_repeat = false;
	bool		repeated = false;
	int			rc;

	while (p->pos < p->len && p->s[p->pos] != '|' && p->s[p->pos] != ')')
	{
		size_t		at = p->pos;
		int32_t		min = 0,
					max = 0,
					node;

		if (p->end_at >= 0 && !AtEndAnchor(p))
			return cbllm_fail(p->err, CBLLM_ERR_UNSUPPORTED,
							  "regex: anchor %.*s at offset %lld is not supported (only at the start or "
							  "end of the pattern or of a top-level alternative)", p->end_len,
							  (const char *) p->s + p->end_at, (long long) p->end_at);
		if ((rc = ParseQuantifier(p, &min, &max)) < 0)
			return rc;
		if (rc > 0 && !can_repeat)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: %s at offset %zu",
							  repeated ? "multiple repeat" : "nothing to repeat", at);
		if (rc > 0)
		{
			if ((rc = NewNode(p, N_REPEAT, min, max, a->stack[a->n_stack - 1], &node)) < 0)
				return rc;
			a->stack[a->n_stack - 1] = node;
			can_repeat = false;
			repeated = true;
			continue;
		}
		if ((rc = ParseAtom(p, a->n_stack == base, &node)) < 0)
			return rc;
		if (node == ATOM_SKIP)
			continue;
		can_repeat = node >= 0;
		repeated = false;
		if (node < 0)
			continue;
		if (!GROW(a->stack, a->cap_stack, a->n_stack + 1))
			return NoMem(p->err);
		a->stack[a->n_stack++] = node;
	}
	if (a->n_stack - base == 1)
		return *out = a->stack[--a->n_stack], CBLLM_OK;
	if (a->n_stack == base)
		return NewNode(p, N_EMPTY, 0, 0, -1, out);
	return ListNode(p, N_CAT, base, out);
}

/* Parse an alternation of branches at p->pos. */
static int
ParseAlt(parser *p, int32_t *out)
{
	ast		   *a = p->a;
	int32_t		base = a->n_stack;

	for (;;)
	{
		int32_t		node;
		int			rc;

		if ((rc = ParseCat(p, &node)) < 0)
			return rc;
		if (!GROW(a->stack, a->cap_stack, a->n_stack + 1))
			return NoMem(p->err);
		a->stack[a->n_stack++] = node;
		if (p->pos >= p->len || p->s[p->pos] != '|')
			break;
		p->pos++;
		if (p->depth == 0)
			p->end_at = -1;
	}
	if (a->n_stack - base == 1)
		return *out = a->stack[--a->n_stack], CBLLM_OK;
	return ListNode(p, N_ALT, base, out);
}

/* Parse the whole pattern into a (which the caller frees). */
static int
Parse(const char *pattern, size_t len, ast *a, cbllm_err *err)
{
	parser		p = {.s = (const uint8_t *) pattern, .len = len, .end_at = -1, .a = a, .err = err};
	size_t		bad;
	int			rc;

	memset(a, 0, sizeof(*a));
	if (len > REGEX_MAX_PATTERN)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "regex: the pattern is longer than %d bytes",
						  REGEX_MAX_PATTERN);
	if ((bad = Utf8Check(p.s, len)) < len)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "regex: invalid UTF-8 at offset %zu", bad);
	if ((rc = ParseAlt(&p, &a->root)) < 0)
		return rc;
	if (p.pos < len)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "regex: unbalanced ) at offset %zu", p.pos);
	return CBLLM_OK;
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
		return NoMem(m->err);
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
			return NoMem(m->err);
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

/*
 * Add to *acc the byte sequences of the UTF-8 encodings of [lo, hi] (scalar
 * values of one encoded length or more), each going on to next: split the
 * range until every byte position spans one range of bytes.
 */
static int
Utf8Ranges(nfa *m, uint32_t lo, uint32_t hi, int32_t next, int32_t *acc)
{
	static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF};
	uint8_t		a[4],
				b[4];
	int			n,
				rc;
	int32_t		s = next;

	for (int i = 0; i < 3; i++)
		if (lo <= len_max[i] && hi > len_max[i])
			return (rc = Utf8Ranges(m, lo, len_max[i], next, acc)) < 0 ? rc :
				Utf8Ranges(m, len_max[i] + 1, hi, next, acc);
	n = Utf8Encode(lo, a);
	for (int i = 1; i < n; i++)
	{
		uint32_t	low = (1u << (6 * i)) - 1;	/* the bits of the last i bytes */

		if ((lo & ~low) == (hi & ~low))
			continue;
		if ((lo & low) != 0)
			return (rc = Utf8Ranges(m, lo, lo | low, next, acc)) < 0 ? rc :
				Utf8Ranges(m, (lo | low) + 1, hi, next, acc);
		if ((hi & low) != low)
			return (rc = Utf8Ranges(m, lo, (hi & ~low) - 1, next, acc)) < 0 ? rc :
				Utf8Ranges(m, hi & ~low, hi, next, acc);
	}
	Utf8Encode(hi, b);
	for (int i = n - 1; i >= 0; i--)
		if ((s = RangeState(m, a[i], b[i], s)) < 0)
			return s;
	return JoinStart(m, acc, s);
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
			for (int32_t i = 0; i < t->b && rc >= 0; i++)
				rc = Utf8Ranges(m, m->a->ranges.r[t->a + i].lo, m->a->ranges.r[t->a + i].hi, next, &acc);
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
		return NoMem(sb->err);
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
		return NoMem(sb->err);
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
		return NoMem(sb->err);
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
		return NoMem(sb->err);
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
		return NoMem(err);
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
		rc = rc < 0 ? rc : NoMem(err);
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
		rc = NoMem(err);
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
			rc = NoMem(err);
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
			rc = NoMem(err);
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
	if ((rc = Parse(pattern, len, &a, err)) == CBLLM_OK)
		rc = CompileAst(&a, out, err);
	AstFree(&a);
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

/* ------------------------------------------------------------- writing */

/* Append code point cp as a pattern character, escaped where it could mean something else. */
static int
PutChar(cbllm_buf *out, uint32_t cp)
{
	uint8_t		b[12];
	int			n;

	if (cp < 0x20 || cp == 0x7F)
		n = snprintf((char *) b, sizeof(b), "\\x{%X}", (unsigned) cp);
	else if (cp < 0x80 && !((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') && !(cp >= '0' && cp <= '9'))
		n = 2, b[0] = '\\', b[1] = (uint8_t) cp;
	else
		n = Utf8Encode(cp, b);
	return cbllm_buf_append(out, b, (size_t) n);
}

/*
 * Escape each metacharacter with a backslash and each control byte as \xHH;
 * other bytes pass as they are.  CBLLM_ERR_INVALID (no message: there is no
 * err) for s that is not UTF-8, which no pattern can spell.
 */
int
regex_escape(const char *s, size_t n, cbllm_buf *out)
{
	const uint8_t *u = (const uint8_t *) s;
	int			rc = CBLLM_OK;

	if (Utf8Check(u, n) < n)
		return CBLLM_ERR_INVALID;
	for (size_t i = 0; i < n && rc == CBLLM_OK; i++)
	{
		char		x[5];

		if (u[i] < 0x20 || u[i] == 0x7F)
			rc = cbllm_buf_append(out, x, (size_t) snprintf(x, sizeof(x), "\\x%02X", u[i]));
		else if (strchr("\\.^$|?*+()[]{}", u[i]) != NULL)
			rc = cbllm_buf_append(out, (char[2]) {'\\', (char) u[i]}, 2);
		else
			rc = cbllm_buf_append(out, s + i, 1);
	}
	return rc;
}

/* Append the class of ranges r[0..n) (sorted, disjoint, not empty) in the form that is shorter. */
static int
PutClass(cbllm_buf *out, const cprange *r, int32_t n)
{
	rangeset	c = {0};
	int			rc = CBLLM_OK;

	if (n == 1 && r[0].lo == r[0].hi)
		return PutChar(out, r[0].lo);
	if (r[n - 1].hi == CP_MAX)	/* write [^...] of the complement */
	{
		if (!RangeAddComplement(&c, r, n))
			return CBLLM_ERR_NOMEM;
		if (c.n > 0)
			r = c.r, n = c.n;
	}
	rc = cbllm_buf_append(out, c.n > 0 ? "[^" : "[", c.n > 0 ? 2 : 1);
	for (int32_t i = 0; i < n && rc == CBLLM_OK; i++)
	{
		rc = PutChar(out, r[i].lo);
		if (rc == CBLLM_OK && r[i].hi > r[i].lo)
			rc = cbllm_buf_append(out, "-", 1) < 0 ? CBLLM_ERR_NOMEM : PutChar(out, r[i].hi);
	}
	free(c.r);
	return rc < 0 ? rc : cbllm_buf_append(out, "]", 1);
}

/* Append node of a (possible[] says which nodes match some string) as a pattern. */
static int
PutNode(cbllm_buf *out, const ast *a, const bool *possible, int32_t node)
{
	const rnode *t = &a->nodes[node];
	bool		first = true;
	int			rc = CBLLM_OK;
	char		q[32];

	switch (t->kind)
	{
		case N_EMPTY:
			return CBLLM_OK;
		case N_CLASS:
			return PutClass(out, a->ranges.r + t->a, t->b);
		case N_CAT:
		case N_ALT:
			for (int32_t i = 0; i < t->b && rc == CBLLM_OK; i++)
			{
				int32_t		kid = a->kids[t->a + i];
				bool		wrap = t->kind == N_CAT && a->nodes[kid].kind == N_ALT;

				if (t->kind == N_ALT && !possible[kid])
					continue;
				if (t->kind == N_ALT && !first)
					rc = cbllm_buf_append(out, "|", 1);
				first = false;
				if (rc == CBLLM_OK && wrap)
					rc = cbllm_buf_append(out, "(?:", 3);
				if (rc == CBLLM_OK)
					rc = PutNode(out, a, possible, kid);
				if (rc == CBLLM_OK && wrap)
					rc = cbllm_buf_append(out, ")", 1);
			}
			return rc;
		case N_REPEAT:
			if (!possible[t->child])
				return CBLLM_OK;	/* min is 0: only the empty string is left */
			if (a->nodes[t->child].kind == N_CLASS)
				rc = PutNode(out, a, possible, t->child);
			else if ((rc = cbllm_buf_append(out, "(?:", 3)) == CBLLM_OK &&
					 (rc = PutNode(out, a, possible, t->child)) == CBLLM_OK)
				rc = cbllm_buf_append(out, ")", 1);
			if (t->b == INF_REPEAT && t->a <= 1)
				snprintf(q, sizeof(q), "%s", t->a == 0 ? "*" : "+");
			else if (t->b == INF_REPEAT)
				snprintf(q, sizeof(q), "{%d,}", (int) t->a);
			else if (t->a == 0 && t->b == 1)
				snprintf(q, sizeof(q), "?");
			else if (t->a == t->b)
				snprintf(q, sizeof(q), "{%d}", (int) t->a);
			else
				snprintf(q, sizeof(q), "{%d,%d}", (int) t->a, (int) t->b);
			return rc < 0 ? rc : cbllm_buf_append(out, q, strlen(q));
	}
	return CBLLM_ERR_INTERNAL;
}

/* Remove from every class of a the characters a JSON string must escape. */
static bool
JsonFilter(ast *a)
{
	static const cprange allowed[] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, CP_MAX}};

	for (int32_t i = 0; i < a->n_nodes; i++)
	{
		rnode	   *t = &a->nodes[i];
		int32_t		first = a->ranges.n;

		if (t->kind != N_CLASS)
			continue;
		for (int32_t j = 0; j < t->b; j++)
		{
			cprange		r = a->ranges.r[t->a + j];

			for (int k = 0; k < 3; k++)
				if (!RangeAdd(&a->ranges, r.lo > allowed[k].lo ? r.lo : allowed[k].lo,
							  r.hi < allowed[k].hi ? r.hi : allowed[k].hi))
					return false;
		}
		t->a = first;
		t->b = a->ranges.n - first;
	}
	return true;
}

/*
 * Parse, drop the characters JSON must escape from every class, find which
 * nodes still match something (children come before parents, so one pass
 * does it), and write the possible part of the tree back out.
 */
int
regex_json_string_body(const char *pattern, size_t len, cbllm_buf *out, cbllm_err *err)
{
	ast			a;
	bool	   *possible = NULL;
	int			rc = Parse(pattern, len, &a, err);

	if (rc == CBLLM_OK && (!JsonFilter(&a) || (possible = malloc(a.n_nodes + 1)) == NULL))
		rc = NoMem(err);
	for (int32_t i = 0; rc == CBLLM_OK && i < a.n_nodes; i++)	/* children come first */
	{
		const rnode *t = &a.nodes[i];

		possible[i] = t->kind != N_ALT;
		if (t->kind == N_CLASS)
			possible[i] = t->b > 0;
		else if (t->kind == N_REPEAT)
			possible[i] = t->a == 0 || possible[t->child];
		for (int32_t j = 0; (t->kind == N_CAT || t->kind == N_ALT) && j < t->b; j++)
			possible[i] = t->kind == N_CAT ? possible[i] && possible[a.kids[t->a + j]] :
				possible[i] || possible[a.kids[t->a + j]];
	}
	if (rc == CBLLM_OK && !possible[a.root])
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "regex: the pattern %.*s%s matches no string a JSON "
						"string can hold without escapes", len > 64 ? 64 : (int) len, pattern,
						len > 64 ? "..." : "");
	else if (rc == CBLLM_OK && (rc = PutNode(out, &a, possible, a.root)) < 0)
		rc = NoMem(err);
	free(possible);
	AstFree(&a);
	return rc;
}
