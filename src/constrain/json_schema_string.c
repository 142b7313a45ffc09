/*
 * json_schema_string.c: "string" of a JSON Schema as a pattern: the
 * characters of a JSON string counted by minLength and maxLength, a
 * "pattern" read with JSON Schema's search semantics (each top-level
 * alternative padded by ".*" where no anchor holds it), or a "format"
 * (json_schema_format.c).
 */
#include "constrain/json_schema_internal.h"

#include <string.h>

#include "constrain/regex.h"

/*
 * The length of the top-level alternative at p[0..n): up to the first '|'
 * outside groups, classes and escapes (n when none).
 */
static size_t
AlternativeLen(const char *p, size_t n)
{
	int			depth = 0;
	bool		in_class = false;

	for (size_t i = 0; i < n; i++)
	{
		if (p[i] == '\\')
			i++;
		else if (in_class)
			in_class = p[i] != ']';
		else if (p[i] == '[')
		{
			in_class = true;
			if (i + 1 < n && p[i + 1] == '^')
				i++;
			if (i + 1 < n && p[i + 1] == ']')
				i++;			/* a ']' first in a class is itself */
		}
		else if (p[i] == '(')
			depth++;
		else if (p[i] == ')')
			depth--;
		else if (p[i] == '|' && depth == 0)
			return i;
	}
	return n;
}

/*
 * Append alternative p[0..n) of a pattern for a search: ".*" pads each
 * side that no anchor ('^' first, an unescaped '$' last) holds.
 */
static int
EmitSearchAlternative(js_ctx *c, cbllm_buf *full, const char *p, size_t n)
{
	bool		head = n > 0 && p[0] == '^',
				tail;
	size_t		start = head ? 1 : 0,
				bs = 0;
	int			rc;

	while (bs + 1 < n && p[n - 2 - bs] == '\\')
		bs++;
	tail = n > start && p[n - 1] == '$' && bs % 2 == 0;
	if (tail)
		n--;
	rc = js_emits(c, full, head ? "(?:" : "(?:.*");
	if (rc == CBLLM_OK && n > start && (rc = js_emits(c, full, "(?:")) == CBLLM_OK &&
		(rc = js_emit(c, full, p + start, n - start)) == CBLLM_OK)
		rc = js_emits(c, full, ")");
	return rc != CBLLM_OK ? rc : js_emits(c, full, tail ? ")" : ".*)");
}

/*
 * Append a string whose body matches pattern p as JSON Schema reads it (a
 * search): each top-level alternative padded as its anchors say, the
 * characters that need an escape taken out (regex_json_string_body).
 */
static int
GenPattern(js_ctx *c, const char *p, cbllm_buf *out)
{
	cbllm_buf	full = {0},
				body = {0};
	size_t		n = strlen(p),
				i = 0;
	int			rc = CBLLM_OK;
	cbllm_err	e;

	do
	{
		size_t		len = AlternativeLen(p + i, n - i);

		if (i > 0)
			rc = js_emits(c, &full, "|");
		if (rc == CBLLM_OK)
			rc = EmitSearchAlternative(c, &full, p + i, len);
		i += len + 1;
	} while (rc == CBLLM_OK && i <= n);
	if (rc == CBLLM_OK && (rc = regex_json_string_body(full.data, full.len, &body, &e)) != CBLLM_OK)
		rc = js_fail(c, rc, "pattern \"%.60s\": %s", p, e.msg);
	if (rc == CBLLM_OK && (rc = js_emits(c, out, "\"(?:")) == CBLLM_OK &&
		(rc = js_emitb(c, out, &body)) == CBLLM_OK)
		rc = js_emits(c, out, ")\"");
	cbllm_buf_free(&full);
	cbllm_buf_free(&body);
	return rc;
}

/* Refuse keyword a beside keyword b of s, when both are there. */
static int
CheckNotBoth(js_ctx *c, const cJSON *s, const char *a, const char *b)
{
	if (js_get(s, a) != NULL && js_get(s, b) != NULL)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported combination of %s and %s", a, b);
	return CBLLM_OK;
}

/* Append the strings the schema admits. */
int
js_gen_string(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	const cJSON *fmt = js_get(s, "format"),
			   *pat = js_get(s, "pattern");
	int64_t		lo = js_count_of(s, "minLength", 0),
				hi = js_count_of(s, "maxLength", -1);
	int			rc;

	if ((rc = CheckNotBoth(c, s, "format", "pattern")) != CBLLM_OK ||
		(rc = CheckNotBoth(c, s, "format", "minLength")) != CBLLM_OK ||
		(rc = CheckNotBoth(c, s, "format", "maxLength")) != CBLLM_OK ||
		(rc = CheckNotBoth(c, s, "pattern", "minLength")) != CBLLM_OK ||
		(rc = CheckNotBoth(c, s, "pattern", "maxLength")) != CBLLM_OK)
		return rc;
	if (fmt != NULL)
		return js_gen_format(c, fmt->valuestring, out);
	if (pat != NULL)
		return GenPattern(c, pat->valuestring, out);
	if (hi >= 0 && lo > hi)
		return js_impossible(c, "minLength %lld exceeds maxLength %lld", (long long) lo, (long long) hi);
	if (lo > REGEX_MAX_REPEAT || hi > REGEX_MAX_REPEAT)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "%s %lld exceeds %d",
					   lo > REGEX_MAX_REPEAT ? "minLength" : "maxLength",
					   (long long) (lo > REGEX_MAX_REPEAT ? lo : hi), REGEX_MAX_REPEAT);
	if ((rc = js_emits(c, out, "\"")) != CBLLM_OK)
		return rc;
	if (hi != 0 && ((rc = js_emits(c, out, RE_CHAR)) != CBLLM_OK || (rc = js_emit_quant(c, out, lo, hi)) != CBLLM_OK))
		return rc;
	return js_emits(c, out, "\"");
}
