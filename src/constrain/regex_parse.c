/*
 * regex_parse.c: the front of the regex compiler (regex.h): the pattern
 * (UTF-8, checked whole first) becomes a tree of five kinds of node
 * (regex_internal.h): the empty string, a class (a sorted set of
 * code-point ranges without surrogates: a literal is a class of one), a
 * sequence, an alternation and a counted repeat.  Anchors leave no node:
 * they are only accepted where a full match makes them true anyway.
 * Errors name the construct and its byte offset.  regex_dfa.c compiles the
 * tree.
 *
 * \d \w \s are ASCII, a part of what Python's str patterns match; where
 * one is negated (\D \W \S, or a member of [^...]) the set taken away is
 * Python's Unicode one (built once from utf8proc's categories, in
 * regex_class.c, which holds the sets of code points), so that a
 * negation admits no character Python's would refuse, and where negated
 * twice (\D in [^...]) it is ASCII again: every string a pattern matches
 * here, Python's re.fullmatch matches too.
 *
 * Nothing recurses deeper than the nesting of groups (REGEX_MAX_DEPTH).
 * The tree is also written back out (regex_write.c): regex_json_string_body
 * removes the characters a JSON string needs escaped from every class and
 * writes the rest; regex_escape quotes a string.
 */
#include "constrain/regex_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

#define REGEX_MAX_DEPTH 256		/* groups nested in groups */
#define REGEX_MAX_PATTERN (1 << 24)	/* pattern bytes */

/* ------------------------------------------------------------- helpers */

/* Grow the array at *arrp (cap elements of size sz) to hold need elements; false when out of memory. */
bool
regex_grow(void *arrp, int32_t *cap, int64_t need, size_t sz)
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

/* ---------------------------------------------------------------- parse */

/* A parse under way. */
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
void
regex_ast_free(ast *a)
{
	free(a->nodes);
	free(a->kids);
	free(a->stack);
	free(a->ranges.r);
	free(a->tmp.r);
}

/* The refusal of a failed allocation. */
int
regex_nomem(cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_NOMEM, "regex: out of memory");
}

/* Add a node; its index in *out. */
static int
NewNode(parser *p, node_kind kind, int32_t a, int32_t b, int32_t child, int32_t *out)
{
	ast		   *t = p->a;

	if (!GROW(t->nodes, t->cap_nodes, t->n_nodes + 1))
		return regex_nomem(p->err);
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

	regex_range_normalise(&a->tmp);
	if (negate)
		ok = regex_range_add_complement(&a->ranges, a->tmp.r, a->tmp.n);
	else
		for (int32_t i = 0; i < a->tmp.n && ok; i++)
			ok = regex_range_add(&a->ranges, a->tmp.r[i].lo, a->tmp.r[i].hi);
	a->tmp.n = 0;
	if (!ok)
		return regex_nomem(p->err);
	return NewNode(p, N_CLASS, first, a->ranges.n - first, -1, out);
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
		k = utf8_decode((const char *) p->s + at + 1, p->len - at - 1, cp);
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
	k = utf8_decode((const char *) p->s + p->pos, p->len - p->pos, cp);
	p->pos += (size_t) k;
	return CBLLM_OK;
}

/* Add a class member read by ParseClassItem to a->tmp; negate: the class is a [^...]. */
static int
AddItem(parser *p, uint32_t cp, uint8_t set, bool negate)
{
	if (!(set ? regex_add_named_set(p->a, set, negate) : regex_range_add(&p->a->tmp, cp, cp)))
		return regex_nomem(p->err);
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
			rc = AddItem(p, lo, set1, negate);
		else if (++p->pos < p->len && p->s[p->pos] == ']')
			rc = AddItem(p, lo, set1, negate) < 0 ? CBLLM_ERR_NOMEM : AddItem(p, '-', 0, negate);
		else if (p->pos >= p->len)
			continue;			/* unterminated: reported above */
		else if ((rc = ParseClassItem(p, &hi, &set2)) < 0)
			return rc;
		else if (set1 || set2 || lo > hi)
			return cbllm_fail(p->err, CBLLM_ERR_INVALID, "regex: bad character range %.*s at offset %zu",
							  (int) (p->pos - from), (const char *) p->s + from, from);
		else if (!regex_range_add(&p->a->tmp, lo, hi))
			rc = CBLLM_ERR_NOMEM;
		if (rc < 0)
			return regex_nomem(p->err);
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
		return regex_range_add(&p->a->tmp, '\n', '\n') ? ClassNode(p, true, out) : regex_nomem(p->err);
	}
	if (c != '\\')
	{
		p->pos += (size_t) utf8_decode((const char *) p->s + at, p->len - at, &cp);
		return regex_range_add(&p->a->tmp, cp, cp) ? ClassNode(p, false, out) : regex_nomem(p->err);
	}
	if ((k = ParseEscape(p, false, &cp)) < 0)
		return k;
	if (k == ESC_START || k == ESC_END)
		return Anchor(p, at, 2, k == ESC_START, first, out);
	if (!(k == ESC_SET ? regex_add_named_set(p->a, (uint8_t) cp, false) : regex_range_add(&p->a->tmp, cp, cp)))
		return regex_nomem(p->err);
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
		return regex_nomem(p->err);
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
			return regex_nomem(p->err);
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
			return regex_nomem(p->err);
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
int
regex_parse(const char *pattern, size_t len, ast *a, cbllm_err *err)
{
	parser		p = {.s = (const uint8_t *) pattern, .len = len, .end_at = -1, .a = a, .err = err};
	size_t		bad;
	int			rc;

	memset(a, 0, sizeof(*a));
	if (len > REGEX_MAX_PATTERN)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "regex: the pattern is longer than %d bytes",
						  REGEX_MAX_PATTERN);
	if ((bad = utf8_valid_prefix(pattern, len)) < len)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "regex: invalid UTF-8 at offset %zu", bad);
	if ((rc = ParseAlt(&p, &a->root)) < 0)
		return rc;
	if (p.pos < len)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "regex: unbalanced ) at offset %zu", p.pos);
	return CBLLM_OK;
}
