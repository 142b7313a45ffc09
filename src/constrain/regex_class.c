/*
 * regex_class.c: the sets of code points a class of a pattern holds
 * (regex_internal.h's rangeset): ranges added without the surrogates,
 * complements, sorting and merging; and the named sets \d \w \s, ASCII
 * where they add to a class and Python's Unicode sets (built once from
 * utf8proc's categories) where they take away from one (regex_parse.c's
 * opening comment says why).
 */
#include "constrain/regex_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <utf8proc.h>

/* --------------------------------------------------- code-point ranges */

/* Append [lo, hi] less the surrogates (nothing when lo > hi); false when out of memory. */
bool
regex_range_add(rangeset *s, uint32_t lo, uint32_t hi)
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
bool
regex_range_add_complement(rangeset *s, const cprange *r, int32_t n)
{
	uint32_t	from = 0;

	for (int32_t i = 0; i < n; i++)
	{
		if (r[i].lo > from && !regex_range_add(s, from, r[i].lo - 1))
			return false;
		from = r[i].hi + 1;
	}
	return regex_range_add(s, from, CP_MAX);
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
void
regex_range_normalise(rangeset *s)
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

/* ------------------------------------------------- Python's Unicode sets */

/* Python's \d \w \s for str patterns, built once (PythonSet). */
enum
{
	PY_DIGIT, PY_WORD, PY_SPACE, N_PY_SETS
};

static rangeset py_sets[N_PY_SETS];	/* each sorted, disjoint, without surrogates */
static bool py_sets_ok;			/* false: building them ran out of memory */
static pthread_once_t py_sets_once = PTHREAD_ONCE_INIT;

/*
 * Whether cp is in Python's \d (set PY_DIGIT: category Nd), \w (PY_WORD:
 * str.isalnum(), letters and numbers, or '_') or \s (PY_SPACE:
 * str.isspace(), separators, U+0009..U+000D, U+001C..U+001F, U+0085), given
 * its category cat.
 */
static bool
PyMember(int set, uint32_t cp, utf8proc_category_t cat)
{
	switch (set)
	{
		case PY_DIGIT:
			return cat == UTF8PROC_CATEGORY_ND;
		case PY_WORD:
			return cp == '_' || (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
				(cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
		default:
			return (cat >= UTF8PROC_CATEGORY_ZS && cat <= UTF8PROC_CATEGORY_ZP) ||
				(cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85;
	}
}

/* Build py_sets in one pass over the scalar values, extending each set's last range or opening one. */
static void
BuildPySets(void)
{
	bool		ok = true;

	for (uint32_t cp = 0; cp <= CP_MAX && ok; cp = cp == 0xD7FF ? 0xE000 : cp + 1)
	{
		utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t) cp);

		for (int k = 0; k < N_PY_SETS && ok; k++)
		{
			rangeset   *s = &py_sets[k];

			if (!PyMember(k, cp, cat))
				continue;
			if (s->n > 0 && s->r[s->n - 1].hi + 1 == cp)
				s->r[s->n - 1].hi = cp;
			else if ((ok = GROW(s->r, s->cap, s->n + 1)))
				s->r[s->n++] = (cprange) {cp, cp};
		}
	}
	py_sets_ok = ok;
}

/* Python's Unicode set of \d (letter 'd' or 'D'), \w or \s; NULL when out of memory. */
static const rangeset *
PythonSet(uint8_t letter)
{
	uint8_t		c = letter | 0x20;

	pthread_once(&py_sets_once, BuildPySets);
	if (!py_sets_ok)
		return NULL;
	return &py_sets[c == 'd' ? PY_DIGIT : c == 'w' ? PY_WORD : PY_SPACE];
}

/* ------------------------------------------------------ the named sets */

/*
 * Add the members of \d \w \s (or, upper case, their complements) to
 * a->tmp; in_negated: the set is a member of a [^...].  A set that adds to
 * what matches is ASCII (\d \w \s, and \D \W \S in a [^...]), one that
 * takes away is Python's whole Unicode set (\D \W \S, and \d \w \s in a
 * [^...]): either way nothing matches that Python's re would refuse.
 */
bool
regex_add_named_set(ast *a, uint8_t letter, bool in_negated)
{
	static const cprange d[] = {{'0', '9'}};
	static const cprange w[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
	static const cprange s[] = {{'\t', '\r'}, {' ', ' '}};
	const cprange *r = letter == 'd' || letter == 'D' ? d : letter == 'w' || letter == 'W' ? w : s;
	int32_t		n = r == d ? 1 : r == w ? 4 : 2;
	bool		upper = letter >= 'A' && letter <= 'Z';

	if (upper != in_negated)	/* it takes away: Python's set */
	{
		const rangeset *py = PythonSet(letter);

		if (py == NULL)
			return false;
		r = py->r;
		n = py->n;
	}
	if (upper)
		return regex_range_add_complement(&a->tmp, r, n);
	for (int32_t i = 0; i < n; i++)
		if (!regex_range_add(&a->tmp, r[i].lo, r[i].hi))
			return false;
	return true;
}
