/*
 * json_schema_value.c: the JSON values of the JSON Schema compiler: reading
 * a schema's members (a keyword's value, its types, a count), writing a
 * value as compact JSON and as the pattern of exactly its text (enum,
 * const, property keys), and the pattern of any value nesting a few levels
 * deep ({} and true).
 */
#include "constrain/json_schema_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "constrain/regex.h"

/* ---------------------------------------------------------------- JSON values */

/* The member key of object s, or NULL. */
const cJSON *
js_get(const cJSON *s, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(s, key);
}

/* Whether v is a schema: an object or a boolean. */
bool
js_is_schema(const cJSON *v)
{
	return cJSON_IsObject(v) || cJSON_IsBool(v);
}

/* Whether number v is a whole number. */
bool
js_is_integral(const cJSON *v)
{
	return isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

/* The types value v has (a whole number is an integer and a number). */
int
js_value_types(const cJSON *v)
{
	if (cJSON_IsNull(v))
		return T_NULL;
	if (cJSON_IsBool(v))
		return T_BOOLEAN;
	if (cJSON_IsNumber(v))
		return js_is_integral(v) ? T_INTEGER | T_NUMBER : T_NUMBER;
	if (cJSON_IsString(v))
		return T_STRING;
	if (cJSON_IsArray(v))
		return T_ARRAY;
	return T_OBJECT;
}

/* The value of count keyword key of s, or dflt when absent. */
int64_t
js_count_of(const cJSON *s, const char *key, int64_t dflt)
{
	const cJSON *v = js_get(s, key);

	if (v == NULL)
		return dflt;
	return v->valuedouble > 1e15 ? (int64_t) 1e15 : (int64_t) v->valuedouble;
}

/*
 * Append s as a JSON string literal: only the escapes the string rule
 * allows (\" \\ \b \f \n \r \t), other characters raw.  A control
 * character without a short escape would need \u: unsupported.
 */
int
js_ser_string(js_ctx *c, const char *s, cbllm_buf *out)
{
	size_t		n = strlen(s);
	int			rc = js_emits(c, out, "\"");

	for (size_t i = 0; i < n && rc == CBLLM_OK;)
	{
		unsigned char ch = (unsigned char) s[i];
		const char *e = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\b' ? "\\b" :
			ch == '\f' ? "\\f" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
		int			len;

		if (e != NULL)
		{
			rc = js_emits(c, out, e);
			i++;
			continue;
		}
		if (ch < 0x20)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED,
						   "the string \"%.40s\" holds control character U+%04X, which needs a \\u escape",
						   s, ch);
		len = utf8_len(s + i, n - i);
		if (len == 0)
			return js_fail(c, CBLLM_ERR_INVALID, "a string is not valid UTF-8");
		rc = js_emit(c, out, s + i, (size_t) len);
		i += (size_t) len;
	}
	return rc != CBLLM_OK ? rc : js_emits(c, out, "\"");
}

/* Append number v as JSON: shortest text that reads back as the same double. */
static int
SerNumber(js_ctx *c, double v, cbllm_buf *out)
{
	char		s[40];

	if (!isfinite(v))
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "a number out of range");
	if (v == floor(v))
	{
		if (fabs(v) > JS_EXACT)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "the integer %.17g is beyond 2^53", v);
		snprintf(s, sizeof(s), "%.0f", v == 0 ? 0.0 : v);
		return js_emits(c, out, s);
	}
	for (int prec = 15; prec <= 17; prec++)
	{
		snprintf(s, sizeof(s), "%.*g", prec, v);
		if (strtod(s, NULL) == v)
			break;
	}
	return js_emits(c, out, s);
}

/* Append value v as compact JSON (enum and const values). */
int
js_ser_value(js_ctx *c, const cJSON *v, cbllm_buf *out)
{
	const cJSON *e;
	int			rc = CBLLM_OK;

	if (cJSON_IsNull(v))
		return js_emits(c, out, "null");
	if (cJSON_IsBool(v))
		return js_emits(c, out, cJSON_IsTrue(v) ? "true" : "false");
	if (cJSON_IsNumber(v))
		return SerNumber(c, v->valuedouble, out);
	if (cJSON_IsString(v))
		return js_ser_string(c, v->valuestring, out);
	rc = js_emits(c, out, cJSON_IsArray(v) ? "[" : "{");
	cJSON_ArrayForEach(e, v)
	{
		if (rc == CBLLM_OK && e != v->child)
			rc = js_emits(c, out, ",");
		if (rc == CBLLM_OK && cJSON_IsObject(v))
			rc = js_ser_string(c, e->string, out);
		if (rc == CBLLM_OK && cJSON_IsObject(v))
			rc = js_emits(c, out, ":");
		if (rc == CBLLM_OK)
			rc = js_ser_value(c, e, out);
	}
	return rc != CBLLM_OK ? rc : js_emits(c, out, cJSON_IsArray(v) ? "]" : "}");
}

/* Append the pattern that matches exactly the bytes of lit. */
int
js_emit_literal(js_ctx *c, cbllm_buf *out, const cbllm_buf *lit)
{
	cbllm_buf	esc = {0};
	int			rc;

	if ((rc = regex_escape(lit->data ? lit->data : "", lit->len, &esc)) != CBLLM_OK)
		rc = rc == CBLLM_ERR_NOMEM ? js_fail(c, rc, "out of memory") :
			js_fail(c, CBLLM_ERR_INVALID, "a string is not valid UTF-8");
	else
		rc = js_emitb(c, out, &esc);
	cbllm_buf_free(&esc);
	return rc;
}

/* ---------------------------------------------------------------- any value */

/*
 * Append the pattern of any value nesting at most d levels deep: scalars,
 * and for d > 0 arrays and maps of values nesting d - 1 deep.
 */
static int
BuildAny(js_ctx *c, int d, cbllm_buf *out)
{
	const cbllm_buf *a = d > 0 ? &c->any[d - 1] : NULL;
	int			rc = js_emits(c, out, "(?:null|true|false|" RE_NUMBER "|" RE_STRING);

	if (rc == CBLLM_OK && a != NULL)
	{
		if ((rc = js_emits(c, out, "|\\[(?:")) == CBLLM_OK && (rc = js_emitb(c, out, a)) == CBLLM_OK &&
			(rc = js_emits(c, out, "(?:,[ ]?")) == CBLLM_OK && (rc = js_emitb(c, out, a)) == CBLLM_OK &&
			(rc = js_emits(c, out, ")*)?\\]|\\{(?:" RE_STRING ":[ ]?")) == CBLLM_OK &&
			(rc = js_emitb(c, out, a)) == CBLLM_OK &&
			(rc = js_emits(c, out, "(?:,[ ]?" RE_STRING ":[ ]?")) == CBLLM_OK &&
			(rc = js_emitb(c, out, a)) == CBLLM_OK)
			rc = js_emits(c, out, ")*)?\\}");
	}
	return rc != CBLLM_OK ? rc : js_emits(c, out, ")");
}

/* Append any value nesting at most d levels deep (d >= 0). */
int
js_emit_any(js_ctx *c, cbllm_buf *out, int d)
{
	for (int i = 0; i <= d; i++)
	{
		int			rc;

		if (c->any[i].len == 0 && (rc = BuildAny(c, i, &c->any[i])) != CBLLM_OK)
			return rc;
	}
	return js_emitb(c, out, &c->any[d]);
}
