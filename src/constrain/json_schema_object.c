/*
 * json_schema_object.c: "object" of a JSON Schema as a pattern: declared
 * properties in the schema's order, required ones always there, optional
 * ones present or absent (EmitSome keeps that pattern near linear in
 * their number); required keys not declared after them; an object with
 * neither "properties" nor "required" a map of string keys.
 */
#include "constrain/json_schema_internal.h"

#include <stdlib.h>
#include <string.h>

#define JS_BLOCK 16				/* optional properties told apart by nesting */

/* A property of an object: its pattern "KEY":[ ]?VALUE and whether it is required. */
typedef struct js_prop
{
	cbllm_buf	pat;
	bool		required;
} js_prop;

/* Whether array a holds the string name. */
static bool
HoldsString(const cJSON *a, const char *name)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, a)
		if (cJSON_IsString(e) && strcmp(e->valuestring, name) == 0)
		return true;
	return false;
}

/*
 * Make one property's pattern: its key, then its value under schema v
 * (NULL: any value) at the pointer tokens key, name (name NULL: key alone).
 */
static int
GenProperty(js_ctx *c, const char *name, const cJSON *v, const char *tok1, const char *tok2,
			 cbllm_buf *pat)
{
	cbllm_buf	key = {0};
	size_t		saved = c->path.len;
	int			rc = js_ser_string(c, name, &key);

	if (rc == CBLLM_OK)
		rc = js_emit_literal(c, pat, &key);
	if (rc == CBLLM_OK)
		rc = js_emits(c, pat, ":[ ]?");
	if (rc == CBLLM_OK && (rc = js_path_push(c, tok1)) == CBLLM_OK && (tok2 == NULL || (rc = js_path_push(c, tok2)) == CBLLM_OK))
		rc = v != NULL ? js_gen_schema(c, v, pat) : js_emit_any(c, pat, JSON_SCHEMA_ANY_DEPTH - 1);
	js_path_pop(c, saved);
	cbllm_buf_free(&key);
	return rc;
}

/*
 * Add the property name (schema v) to props[*n], unless it admits no value
 * and is optional; a required one that admits no value makes the object
 * impossible.
 */
static int
AddProperty(js_ctx *c, js_prop *props, int *n, const char *name, const cJSON *v, bool required,
			 const char *tok1, const char *tok2)
{
	js_prop    *p = &props[*n];
	int			rc;

	memset(p, 0, sizeof(*p));
	p->required = required;
	rc = GenProperty(c, name, v, tok1, tok2, &p->pat);
	if (rc == CBLLM_OK)
		(*n)++;
	else
		cbllm_buf_free(&p->pat);
	return rc == JS_IMPOSSIBLE && !required ? CBLLM_OK : rc;
}

/*
 * Append the non-empty ordered selections of the optional properties
 * p[0..m), comma-separated.  Within a block of JS_BLOCK, going left to
 * right, "some property so far" N grows as "(?:N(?:,P)?|P)", each pattern
 * twice; the blocks are told apart by the first one present, each followed
 * by the later properties, each optional.  The groups nest at most
 * JS_BLOCK deep (the regex parser bounds that); the pattern grows with the
 * square of m only past JS_BLOCK, by m^2 / (2 JS_BLOCK).
 */
static int
EmitSome(js_ctx *c, const js_prop *p, int m, cbllm_buf *out)
{
	int			n_blocks = (m + JS_BLOCK - 1) / JS_BLOCK,
				rc = n_blocks > 1 ? js_emits(c, out, "(?:") : CBLLM_OK;

	for (int b = 0; b < n_blocks && rc == CBLLM_OK; b++)
	{
		int			start = b * JS_BLOCK,
					end = start + JS_BLOCK < m ? start + JS_BLOCK : m;

		if (b > 0)
			rc = js_emits(c, out, "|");
		for (int j = start + 1; j < end && rc == CBLLM_OK; j++)
			rc = js_emits(c, out, "(?:");
		if (rc == CBLLM_OK)
			rc = js_emitb(c, out, &p[start].pat);
		for (int j = start + 1; j < m && rc == CBLLM_OK; j++)
		{
			if ((rc = js_emits(c, out, "(?:,[ ]?")) == CBLLM_OK && (rc = js_emitb(c, out, &p[j].pat)) == CBLLM_OK)
				rc = js_emits(c, out, ")?");
			if (rc == CBLLM_OK && j < end && (rc = js_emits(c, out, "|")) == CBLLM_OK &&
				(rc = js_emitb(c, out, &p[j].pat)) == CBLLM_OK)
				rc = js_emits(c, out, ")");
		}
	}
	if (rc == CBLLM_OK && n_blocks > 1)
		rc = js_emits(c, out, ")");
	return rc;
}

/*
 * Append the object of properties props[0..n), in order, required ones
 * always there: the optional ones before the first required one as
 * EmitSome makes them, then the first required one (with a comma when
 * one came before), then the rest, each with its comma.
 */
static int
EmitProperties(js_ctx *c, const js_prop *props, int n, cbllm_buf *out)
{
	int			f = 0,
				rc = js_emits(c, out, "\\{");

	while (f < n && !props[f].required)
		f++;
	if (rc == CBLLM_OK && f > 0 && (rc = js_emits(c, out, "(?:")) == CBLLM_OK)
		rc = EmitSome(c, props, f, out);
	if (rc == CBLLM_OK && f > 0 && f == n)
		rc = js_emits(c, out, ")?");
	if (rc == CBLLM_OK && f > 0 && f < n)
	{
		/* (?:SOME,P|P): the first required one, after some or alone */
		if ((rc = js_emits(c, out, ",[ ]?")) == CBLLM_OK && (rc = js_emitb(c, out, &props[f].pat)) == CBLLM_OK)
			rc = js_emits(c, out, "|");
	}
	if (rc == CBLLM_OK && f < n && (rc = js_emitb(c, out, &props[f].pat)) == CBLLM_OK && f > 0)
		rc = js_emits(c, out, ")");
	for (int j = f + 1; j < n && rc == CBLLM_OK; j++)
	{
		rc = js_emits(c, out, props[j].required ? ",[ ]?" : "(?:,[ ]?");
		if (rc == CBLLM_OK && (rc = js_emitb(c, out, &props[j].pat)) == CBLLM_OK && !props[j].required)
			rc = js_emits(c, out, ")?");
	}
	return rc != CBLLM_OK ? rc : js_emits(c, out, "\\}");
}

/*
 * Collect the properties of s: the declared ones, then the required ones
 * not declared (value schema additionalProperties), into props (room for
 * all), counting them in *n.
 */
static int
CollectProperties(js_ctx *c, const cJSON *s, js_prop *props, int *n)
{
	const cJSON *decl = js_get(s, "properties"),
			   *req = js_get(s, "required"),
			   *ap = js_get(s, "additionalProperties"),
			   *e;
	int			rc = CBLLM_OK;

	cJSON_ArrayForEach(e, decl)
	{
		if (!js_is_schema(e))
		{
			size_t		saved = c->path.len;

			if ((rc = js_path_push(c, "properties")) == CBLLM_OK && (rc = js_path_push(c, e->string)) == CBLLM_OK)
				rc = js_fail(c, CBLLM_ERR_INVALID, "a schema must be an object or a boolean");
			js_path_pop(c, saved);
			return rc;
		}
		if ((rc = AddProperty(c, props, n, e->string, e, req != NULL && HoldsString(req, e->string),
							   "properties", e->string)) != CBLLM_OK)
			return rc;
	}
	cJSON_ArrayForEach(e, req)
	{
		const cJSON *prev;
		bool		seen = decl != NULL && js_get(decl, e->valuestring) != NULL;

		for (prev = req->child; !seen && prev != e; prev = prev->next)
			seen = strcmp(prev->valuestring, e->valuestring) == 0;
		if (seen)
			continue;
		if (cJSON_IsFalse(ap))
			return js_impossible(c, "required property \"%.60s\" is not declared and additionalProperties is false",
								 e->valuestring);
		if ((rc = AddProperty(c, props, n, e->valuestring, cJSON_IsObject(ap) ? ap : NULL, true,
							   "additionalProperties", NULL)) != CBLLM_OK)
			return rc;
	}
	return CBLLM_OK;
}

/* Append an object with properties (declared or required). */
static int
GenObjectProperties(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	int			room = cJSON_GetArraySize(js_get(s, "properties")) + cJSON_GetArraySize(js_get(s, "required"));
	js_prop    *props = calloc((size_t) room + 1, sizeof(js_prop));
	int			n = 0,
				rc;

	if (props == NULL)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	rc = CollectProperties(c, s, props, &n);
	if (rc == CBLLM_OK)
		rc = EmitProperties(c, props, n, out);
	for (int i = 0; i < n; i++)
		cbllm_buf_free(&props[i].pat);
	free(props);
	return rc;
}

/* Append a map: string keys, values under additionalProperties. */
static int
GenMap(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	const cJSON *ap = js_get(s, "additionalProperties");
	cbllm_buf	val = {0};
	size_t		saved = c->path.len;
	int			rc;

	if (cJSON_IsFalse(ap))
		return js_emits(c, out, "\\{\\}");
	if (!cJSON_IsObject(ap))
		rc = js_emit_any(c, &val, JSON_SCHEMA_ANY_DEPTH - 1);
	else if ((rc = js_path_push(c, "additionalProperties")) == CBLLM_OK)
		rc = js_gen_schema(c, ap, &val);
	js_path_pop(c, saved);
	if (rc == JS_IMPOSSIBLE)
		rc = js_emits(c, out, "\\{\\}");
	else if (rc == CBLLM_OK &&
			 (rc = js_emits(c, out, "\\{(?:" RE_STRING ":[ ]?")) == CBLLM_OK &&
			 (rc = js_emitb(c, out, &val)) == CBLLM_OK &&
			 (rc = js_emits(c, out, "(?:,[ ]?" RE_STRING ":[ ]?")) == CBLLM_OK &&
			 (rc = js_emitb(c, out, &val)) == CBLLM_OK)
		rc = js_emits(c, out, ")*)?\\}");
	cbllm_buf_free(&val);
	return rc;
}

/* Append the objects the schema admits. */
int
js_gen_object(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	const cJSON *req = js_get(s, "required");

	if (js_get(s, "properties") != NULL || (req != NULL && req->child != NULL))
		return GenObjectProperties(c, s, out);
	return GenMap(c, s, out);
}
