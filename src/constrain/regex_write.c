/*
 * regex_write.c: patterns written back out from the regex compiler's tree
 * (regex.h): regex_escape quotes a string; regex_json_string_body parses a
 * pattern, removes from every class the characters a JSON string must
 * escape, and writes out what can still match.
 */
#include "constrain/regex_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

/* Append code point cp as a pattern character, escaped where it could mean something else. */
static int
PutChar(cbllm_buf *out, uint32_t cp)
{
	char		b[12];
	int			n;

	if (cp < 0x20 || cp == 0x7F)
		n = snprintf(b, sizeof(b), "\\x{%X}", (unsigned) cp);
	else if (cp < 0x80 && !((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') && !(cp >= '0' && cp <= '9'))
		n = 2, b[0] = '\\', b[1] = (char) cp;
	else
		n = utf8_encode(cp, b);
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

	if (!utf8_valid(s, n))
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
		if (!regex_range_add_complement(&c, r, n))
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
				if (!regex_range_add(&a->ranges, r.lo > allowed[k].lo ? r.lo : allowed[k].lo,
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
	int			rc = regex_parse(pattern, len, &a, err);

	if (rc == CBLLM_OK && (!JsonFilter(&a) || (possible = malloc(a.n_nodes + 1)) == NULL))
		rc = regex_nomem(err);
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
	{
		size_t		n = len > 64 ? 64 : len;	/* quoted up to a character's start */

		while (n < len && n > 0 && utf8_is_cont((uint8_t) pattern[n]))
			n--;
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "regex: the pattern %.*s%s matches no string a JSON "
						"string can hold without escapes", (int) n, pattern, n < len ? "..." : "");
	}
	else if (rc == CBLLM_OK && (rc = PutNode(out, &a, possible, a.root)) < 0)
		rc = regex_nomem(err);
	free(possible);
	regex_ast_free(&a);
	return rc;
}
