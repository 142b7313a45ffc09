/*
 * json_schema.c: a JSON Schema (the subset json_schema.h lists) compiled to
 * a regular expression in regex.h's dialect, whose matches are the documents
 * constrained decoding lets a model write for that schema.  This file walks
 * the schema (its types, enum and const, $ref, anyOf, allOf) and reads its
 * text; each type is compiled in a file of its own (json_schema_internal.h
 * lists them).
 *
 * The documents admitted:
 *   - compact JSON: nothing between tokens but exactly one optional space
 *     ("[ ]?") after each ':' and each ','; none after '{' or '[' nor before
 *     '}' or ']'; maps, arrays and any-values follow the same rule;
 *   - an object with "properties" holds only those keys (whatever
 *     additionalProperties says), in the schema's order; each required one
 *     always, each optional one present or absent (emit_properties);
 *   - a key in "required" that "properties" does not declare is generated
 *     after the declared ones, in "required"'s order, with the value schema
 *     of additionalProperties (where that is absent or true, any value one
 *     level less deep; where it is false the object admits nothing);
 *   - an object with neither "properties" nor "required" is a map: any
 *     string keys (duplicates not excluded), values under
 *     additionalProperties (any value one level less deep when absent or
 *     true, "{}" only when false);
 *   - any value ({}, true): null, booleans, numbers, strings, and arrays and
 *     maps of any values, nesting JSON_SCHEMA_ANY_DEPTH levels deep;
 *   - strings use no \u escape (PostgreSQL's jsonb refuses \u0000 and lone
 *     surrogates); other characters go as raw UTF-8; minLength and
 *     maxLength count characters, an escape such as \n being one;
 *   - "pattern" has JSON Schema's search semantics: in each top-level
 *     alternative a leading "^" or trailing "$" anchors, otherwise ".*"
 *     pads that side; the string body then fully matches that
 *     (regex_json_string_body: no character that needs an escape);
 *   - formats: date (month lengths and Feb 29 of leap years exact, years
 *     0001-9999, as Python's date.fromisoformat), time (RFC 3339 full-time,
 *     draft 2020-12's meaning: HH:MM:SS, an optional fraction of 1-9
 *     digits, then Z or +HH:MM / -HH:MM; no leap second), date-time (date
 *     "T" time), uuid (8-4-4-4-12 hex digits), ipv4 (dotted decimal, no
 *     leading zero), email (ASCII local@label.label.tld);
 *   - integers without a leading zero or "-0"; bounds (numbers, the
 *     non-integral rounded inward) give an exact range, within +-2^53;
 *     "number" takes no bound;
 *   - prefixItems without items: no item past the tuple unless minItems
 *     needs one (those are any values); tuples may stop short where
 *     minItems allows;
 *   - enum and const values serialised compactly, no space anywhere; with
 *     "type" beside them, only the values of those types.
 * A branch that admits no document (the false schema, a $ref recursing past
 * JSON_SCHEMA_MAX_DEPTH, an empty range...) is dropped where it is
 * optional: an optional property, an anyOf alternative, a type of a list,
 * the items of an array or map that may be empty.  Elsewhere the schema
 * admits nothing: CBLLM_ERR_INVALID, saying why and where.  A $ref target
 * counts as one level each time it is on the current path ("#": the root
 * itself is the first).
 *
 * Refused as unsupported beyond the unknown keywords: $ref, anyOf or allOf
 * beside a keyword that constrains; enum or const beside one other than
 * "type"; allOf of more than one schema; format beside pattern or a length,
 * pattern beside a length; $id below the root; a string that would need a
 * \u escape; "\u0000" anywhere in the text (cJSON ends strings there).
 * Refused as malformed: a key twice in one object (readers differ on which
 * wins), a raw control character in a string, text after the schema.
 *
 * Limits: subschemas nest at most JS_MAX_NEST deep on one path ($ref hops
 * included), the regex is at most JS_MAX_OUT bytes, and all the pattern
 * text made on the way (dropped branches included) at most JS_MAX_WORK.
 * Messages quoting the schema's keys and strings are one line of UTF-8.
 */
#include "constrain/json_schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- types, enum */

/* Append the values of type t (one bit) the schema admits. */
static int
GenType(js_ctx *c, const cJSON *s, int t, cbllm_buf *out)
{
	switch (t)
	{
		case T_NULL:
			return js_emits(c, out, "null");
		case T_BOOLEAN:
			return js_emits(c, out, "(?:true|false)");
		case T_OBJECT:
			return js_gen_object(c, s, out);
		case T_ARRAY:
			return js_gen_array(c, s, out);
		case T_NUMBER:
			return js_gen_number(c, s, out);
		case T_INTEGER:
			return js_gen_integer(c, s, out);
		default:
			return js_gen_string(c, s, out);
	}
}

/*
 * Append the alternation of the patterns in alts (count n, joined by '|'):
 * nothing admitted when n is 0.
 */
static int
EmitAlternatives(js_ctx *c, const cbllm_buf *alts, int n, cbllm_buf *out)
{
	int			rc;

	if (n == 0)
		return JS_IMPOSSIBLE;
	if (n == 1)
		return js_emitb(c, out, alts);
	if ((rc = js_emits(c, out, "(?:")) == CBLLM_OK && (rc = js_emitb(c, out, alts)) == CBLLM_OK)
		rc = js_emits(c, out, ")");
	return rc;
}

/* Add pattern p to the alternatives alts (n of them so far). */
static int
AddAlternative(js_ctx *c, cbllm_buf *alts, int *n, const cbllm_buf *p)
{
	int			rc = *n > 0 ? js_emits(c, alts, "|") : CBLLM_OK;

	if (rc == CBLLM_OK)
		rc = js_emitb(c, alts, p);
	*n += rc == CBLLM_OK;
	return rc;
}

/* Append the values of the types in types that the schema admits. */
static int
GenTypes(js_ctx *c, const cJSON *s, int types, cbllm_buf *out)
{
	cbllm_buf	alts = {0};
	int			n = 0,
				rc = CBLLM_OK;

	if (types & T_NUMBER)
		types &= ~T_INTEGER;	/* numbers hold the integers */
	for (int i = 0; i < N_TYPES && rc == CBLLM_OK; i++)
	{
		cbllm_buf	one = {0};

		if (!(types & (1 << i)))
			continue;
		rc = GenType(c, s, 1 << i, &one);
		if (rc == CBLLM_OK)
			rc = AddAlternative(c, &alts, &n, &one);
		else if (rc == JS_IMPOSSIBLE)
			rc = CBLLM_OK;
		cbllm_buf_free(&one);
	}
	if (rc == CBLLM_OK)
		rc = EmitAlternatives(c, &alts, n, out);
	cbllm_buf_free(&alts);
	return rc;
}

/* Append the values of enum or const that have a type in types. */
static int
GenEnum(js_ctx *c, const cJSON *s, int types, cbllm_buf *out)
{
	static const char *const allowed[] = {"type", NULL};
	const cJSON *en = js_get(s, "enum"),
			   *e;
	cbllm_buf	alts = {0};
	int			n = 0,
				rc;

	if ((rc = js_check_alone(c, s, en != NULL ? "enum" : "const", allowed)) != CBLLM_OK)
		return rc;
	for (e = en != NULL ? en->child : js_get(s, "const"); e != NULL && rc == CBLLM_OK; e = en != NULL ? e->next : NULL)
	{
		cbllm_buf	lit = {0},
					pat = {0};

		if (!(js_value_types(e) & types))
			continue;
		if ((rc = js_ser_value(c, e, &lit)) == CBLLM_OK && (rc = js_emit_literal(c, &pat, &lit)) == CBLLM_OK)
			rc = AddAlternative(c, &alts, &n, &pat);
		cbllm_buf_free(&lit);
		cbllm_buf_free(&pat);
	}
	if (rc == CBLLM_OK && n == 0)
		rc = js_impossible(c, "no value of %s has the type asked", en != NULL ? "enum" : "const");
	if (rc == CBLLM_OK)
		rc = EmitAlternatives(c, &alts, n, out);
	cbllm_buf_free(&alts);
	return rc;
}

/* ---------------------------------------------------------------- combinators */

/*
 * Resolve $ref r ("#", "#/$defs/NAME", "#/definitions/NAME") to its schema
 * in *target; unsupported otherwise.
 */
static int
ResolveRef(js_ctx *c, const char *r, const cJSON **target)
{
	const char *name;
	const cJSON *defs;
	char	   *key;
	size_t		n = 0;

	*target = NULL;
	if (strcmp(r, "#") == 0)
	{
		*target = c->root;
		return CBLLM_OK;
	}
	if (strncmp(r, "#/$defs/", 8) == 0)
		name = r + 8;
	else if (strncmp(r, "#/definitions/", 14) == 0)
		name = r + 14;
	else
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported $ref \"%.100s\" (only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\")", r);
	if (strchr(name, '/') != NULL || strchr(name, '%') != NULL)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported $ref \"%.100s\" (only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\")", r);
	if ((key = malloc(strlen(name) + 1)) == NULL)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	for (const char *p = name; *p; p++)
	{
		if (*p == '~' && (p[1] == '0' || p[1] == '1'))
			key[n++] = *++p == '0' ? '~' : '/';
		else if (*p == '~')
		{
			free(key);
			return js_fail(c, CBLLM_ERR_INVALID, "$ref \"%.100s\" is not a JSON pointer (a ~ not followed by 0 or 1)", r);
		}
		else
			key[n++] = *p;
	}
	key[n] = '\0';
	defs = js_get(c->root, name == r + 8 ? "$defs" : "definitions");
	*target = cJSON_IsObject(defs) ? js_get(defs, key) : NULL;
	free(key);
	if (*target == NULL)
		return js_fail(c, CBLLM_ERR_INVALID, "$ref \"%.100s\" names no schema", r);
	return CBLLM_OK;
}

/*
 * Append the schema that $ref r names, unrolling recursion
 * JSON_SCHEMA_MAX_DEPTH deep.  Below it the pointer is the target's (the
 * reference without its "#"), kept after the caller's in the same buffer.
 */
static int
GenRef(js_ctx *c, const char *r, cbllm_buf *out)
{
	const cJSON *target;
	int			on_path = 0,
				rc = ResolveRef(c, r, &target);
	size_t		saved = c->path.len,
				base = c->path_base;

	if (rc != CBLLM_OK)
		return rc;
	for (int i = 0; i < c->depth; i++)
		on_path += c->stack[i] == target;
	if (on_path >= JSON_SCHEMA_MAX_DEPTH)
		return js_impossible(c, "recursive $ref \"%.100s\" has no finite document within depth %d", r,
							 JSON_SCHEMA_MAX_DEPTH);
	if (cbllm_buf_append(&c->path, r + 1, strlen(r + 1)) != CBLLM_OK)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	c->path_base = saved;
	rc = js_gen_schema(c, target, out);
	c->path_base = base;
	js_path_pop(c, saved);
	return rc;
}

/* Append the alternatives of anyOf (those that admit nothing dropped). */
static int
GenAnyof(js_ctx *c, const cJSON *list, cbllm_buf *out)
{
	cbllm_buf	alts = {0};
	const cJSON *e;
	int			n = 0,
				i = 0,
				rc = CBLLM_OK;

	cJSON_ArrayForEach(e, list)
	{
		cbllm_buf	one = {0};
		size_t		saved = c->path.len;

		if ((rc = js_path_push_index(c, "anyOf", i++)) == CBLLM_OK)
			rc = js_gen_schema(c, e, &one);
		js_path_pop(c, saved);
		if (rc == CBLLM_OK)
			rc = AddAlternative(c, &alts, &n, &one);
		else if (rc == JS_IMPOSSIBLE)
			rc = CBLLM_OK;
		cbllm_buf_free(&one);
		if (rc != CBLLM_OK)
			break;
	}
	if (rc == CBLLM_OK)
		rc = EmitAlternatives(c, &alts, n, out);
	cbllm_buf_free(&alts);
	return rc;
}

/* Append the one schema of allOf. */
static int
GenAllof(js_ctx *c, const cJSON *list, cbllm_buf *out)
{
	size_t		saved = c->path.len;
	int			rc;

	if (cJSON_GetArraySize(list) != 1)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED,
					   "unsupported keyword \"allOf\" (only with a single schema)");
	if ((rc = js_path_push_index(c, "allOf", 0)) == CBLLM_OK)
		rc = js_gen_schema(c, list->child, out);
	js_path_pop(c, saved);
	return rc;
}

/* ---------------------------------------------------------------- schemas */

/* Append the documents the schema object s admits (its keywords checked). */
static int
GenObjectSchema(js_ctx *c, const cJSON *s, int implied, cbllm_buf *out)
{
	static const char *const none[] = {NULL};
	static const char *const combinators[] = {"$ref", "anyOf", "allOf"};
	const cJSON *type = js_get(s, "type");
	int			types = T_ALL,
				rc;

	for (int i = 0; i < 3; i++)
	{
		const cJSON *v = js_get(s, combinators[i]);

		if (v == NULL)
			continue;
		if ((rc = js_check_alone(c, s, combinators[i], none)) != CBLLM_OK)
			return rc;
		return i == 0 ? GenRef(c, v->valuestring, out) : i == 1 ? GenAnyof(c, v, out) : GenAllof(c, v, out);
	}
	if (type != NULL && (rc = js_check_type(c, type, &types)) != CBLLM_OK)
		return rc;
	if (js_get(s, "enum") != NULL || js_get(s, "const") != NULL)
		return GenEnum(c, s, types, out);
	if (type == NULL && implied == 0)
		return js_emit_any(c, out, JSON_SCHEMA_ANY_DEPTH);
	return GenTypes(c, s, type != NULL ? types : implied, out);
}

/* Append the documents schema s admits; s's pointer is c->path. */
int
js_gen_schema(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	int			implied,
				rc;

	if (!js_is_schema(s))
		return js_fail(c, CBLLM_ERR_INVALID, "a schema must be an object or a boolean");
	if (c->depth >= JS_MAX_NEST)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "the schema nests deeper than %d levels", JS_MAX_NEST);
	if (cJSON_IsTrue(s))
		return js_emit_any(c, out, JSON_SCHEMA_ANY_DEPTH);
	if (cJSON_IsFalse(s))
		return js_impossible(c, "the schema false admits no value");
	if ((rc = js_check_keywords(c, s, &implied)) != CBLLM_OK)
		return rc;
	c->stack[c->depth++] = s;
	rc = GenObjectSchema(c, s, implied, out);
	c->depth--;
	return rc;
}

/* ---------------------------------------------------------------- the text */

/*
 * Refuse what cJSON lets through but the schema's reader (and PostgreSQL)
 * would see differently: a raw control character in a string, and \u0000,
 * which cJSON reads as the end of the string.
 */
static int
CheckStrings(const char *s, size_t len, cbllm_err *err)
{
	bool		in = false;

	for (size_t i = 0; i < len; i++)
	{
		unsigned char ch = (unsigned char) s[i];

		if (!in)
			in = ch == '"';
		else if (ch == '"')
			in = false;
		else if (ch < 0x20)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "json_schema: the schema is not valid JSON (a raw control character in a string at byte %zu)",
							  i);
		else if (ch == '\\')
		{
			if (i + 5 < len && memcmp(s + i + 1, "u0000", 5) == 0)
				return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
								  "json_schema: \\u0000 in a string (at byte %zu) is not supported", i);
			i++;
		}
	}
	return CBLLM_OK;
}

/* Order two member names (for qsort). */
static int
CmpNames(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/*
 * Refuse an object anywhere in v with a key twice: cJSON finds the first,
 * other readers the last.
 */
static int
CheckDuplicates(const cJSON *v, cbllm_err *err)
{
	int			n = cJSON_GetArraySize(v),
				rc = CBLLM_OK;
	const cJSON *e;

	if (cJSON_IsObject(v) && n > 1)
	{
		const char **names = malloc((size_t) n * sizeof(char *));
		int			i = 0;

		if (names == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "json_schema: out of memory");
		cJSON_ArrayForEach(e, v)
			names[i++] = e->string;
		qsort(names, (size_t) n, sizeof(char *), CmpNames);
		for (i = 1; i < n && rc == CBLLM_OK; i++)
			if (strcmp(names[i - 1], names[i]) == 0)
			{
				char		line[CBLLM_ERR_MSG_LEN];

				snprintf(line, sizeof(line), "json_schema: the key \"%.100s\" appears twice in an object",
						 names[i]);
				if (err != NULL)
					js_clean_message(err->msg, sizeof(err->msg), line);
				rc = CBLLM_ERR_FORMAT;
			}
		free(names);
	}
	cJSON_ArrayForEach(e, v)
		if (rc == CBLLM_OK)
		rc = CheckDuplicates(e, err);
	return rc;
}

/* Parse the schema text: one JSON value, nothing after it but spaces. */
static int
ParseSchema(const char *schema, size_t len, cJSON **root, cbllm_err *err)
{
	const char *end = NULL;
	int			rc;

	if (schema != NULL && json_too_deep(schema, len, CBLLM_JSON_MAX_DEPTH))
		return cbllm_fail(err, CBLLM_ERR_TOO_LONG, "json_schema: the schema is nested too deeply (more than %d levels)",
						  CBLLM_JSON_MAX_DEPTH);
	*root = schema != NULL && len > 0 ? cJSON_ParseWithLengthOpts(schema, len, &end, false) : NULL;
	if (*root == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "json_schema: the schema is not valid JSON (at byte %zu)",
						  end != NULL && end >= schema && end <= schema + len ? (size_t) (end - schema) : (size_t) 0);
	for (size_t i = (size_t) (end - schema); i < len; i++)
		if (schema[i] != ' ' && schema[i] != '\t' && schema[i] != '\n' && schema[i] != '\r')
		{
			cJSON_Delete(*root);
			*root = NULL;
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "json_schema: the schema is not valid JSON (text after it at byte %zu)", i);
		}
	if ((rc = CheckStrings(schema, (size_t) (end - schema), err)) != CBLLM_OK ||
		(rc = CheckDuplicates(*root, err)) != CBLLM_OK)
	{
		cJSON_Delete(*root);
		*root = NULL;
	}
	return rc;
}

/*
 * Append to out the regex of the schema in schema[0..len).  out is left as
 * it was on failure.
 */
int
json_schema_to_regex(const char *schema, size_t len, cbllm_buf *out, cbllm_err *err)
{
	js_ctx		c;
	cJSON	   *root;
	cbllm_buf	re = {0};
	int			rc = ParseSchema(schema, len, &root, err);

	if (rc != CBLLM_OK)
		return rc;
	memset(&c, 0, sizeof(c));
	c.root = root;
	c.err = err;
	rc = js_gen_schema(&c, root, &re);
	if (rc == JS_IMPOSSIBLE)
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "%s", c.why);
	else if (rc == CBLLM_OK && cbllm_buf_append(out, re.data, re.len) != CBLLM_OK)
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "json_schema: out of memory");
	cbllm_buf_free(&re);
	cbllm_buf_free(&c.path);
	for (int i = 0; i <= JSON_SCHEMA_ANY_DEPTH; i++)
		cbllm_buf_free(&c.any[i]);
	cJSON_Delete(root);
	return rc;
}
