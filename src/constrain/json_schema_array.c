/*
 * json_schema_array.c: "array" of a JSON Schema as a pattern: the
 * prefixItems tuple (which may stop short where minItems allows), then the
 * items after it, the length held to minItems and maxItems.
 */
#include "constrain/json_schema_internal.h"

#include <stdlib.h>

#include "constrain/regex.h"

/* The shape of an array: item patterns and length bounds. */
typedef struct js_array
{
	cbllm_buf  *prefix;			/* patterns of the first n_prefix items */
	int			n_prefix;
	cbllm_buf	rest;			/* the pattern of the items after them */
	bool		has_rest;		/* whether there may be items after them */
	int64_t		min;			/* minItems */
	int64_t		max;			/* the most items made (-1: unbounded) */
	bool		dropped;		/* an item schema admitted nothing */
} js_array;

/* Make the patterns of the prefixItems of s, stopping at one that admits nothing. */
static int
GenPrefix(js_ctx *c, const cJSON *s, js_array *a)
{
	const cJSON *pre = js_get(s, "prefixItems"),
			   *e;
	int			i = 0;

	a->prefix = calloc((size_t) cJSON_GetArraySize(pre) + 1, sizeof(cbllm_buf));
	if (a->prefix == NULL)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(e, pre)
	{
		size_t		saved = c->path.len;
		int			rc;

		if (a->max >= 0 && i >= a->max)
			break;				/* maxItems cuts the tuple */
		rc = js_path_push_index(c, "prefixItems", i);

		if (rc == CBLLM_OK)
			rc = js_gen_schema(c, e, &a->prefix[i]);
		js_path_pop(c, saved);
		if (rc == JS_IMPOSSIBLE)
		{
			a->dropped = true;
			break;
		}
		if (rc != CBLLM_OK)
			return rc;
		a->n_prefix = ++i;
	}
	return CBLLM_OK;
}

/* Make the pattern of the items after the prefix, and bound the length. */
static int
GenRest(js_ctx *c, const cJSON *s, js_array *a)
{
	const cJSON *items = js_get(s, "items"),
			   *pre = js_get(s, "prefixItems");
	int			k = cJSON_GetArraySize(pre);
	size_t		saved = c->path.len;
	int			rc = CBLLM_OK;

	if (a->dropped || a->n_prefix < k)
	{
		a->max = a->n_prefix;	/* an item admits nothing, or maxItems cut the tuple */
		return CBLLM_OK;
	}
	if (cJSON_IsFalse(items))
		a->max = a->max >= 0 && a->max < k ? a->max : k;
	else if (cJSON_IsObject(items))
	{
		if ((rc = js_path_push(c, "items")) == CBLLM_OK)
			rc = js_gen_schema(c, items, &a->rest);
		js_path_pop(c, saved);
		if (rc == JS_IMPOSSIBLE)
		{
			a->dropped = true;
			a->max = k;
			return CBLLM_OK;
		}
	}
	else
	{
		if (items == NULL && pre != NULL)
		{
			int64_t		want = a->min > k ? a->min : k;	/* no extra item unless minItems needs it */

			a->max = a->max >= 0 && a->max < want ? a->max : want;
		}
		rc = js_emit_any(c, &a->rest, JSON_SCHEMA_ANY_DEPTH - 1);
	}
	a->has_rest = rc == CBLLM_OK && (a->max < 0 || a->max > k);
	return rc;
}

/* Append the array of the shape a. */
static int
EmitArray(js_ctx *c, const js_array *a, cbllm_buf *out)
{
	int			k = a->n_prefix,
				opens = 0,
				rc = js_emits(c, out, "\\[");

	for (int i = 0; i < k && rc == CBLLM_OK; i++)
	{
		if (i >= a->min && (rc = js_emits(c, out, "(?:")) == CBLLM_OK)
			opens++;
		if (rc == CBLLM_OK && i > 0)
			rc = js_emits(c, out, ",[ ]?");
		if (rc == CBLLM_OK)
			rc = js_emitb(c, out, &a->prefix[i]);
	}
	if (rc == CBLLM_OK && a->has_rest)
	{
		int64_t		lo = a->min > k ? a->min - k : 0,
					hi = a->max < 0 ? -1 : a->max - k;

		if (k == 0)
		{
			/* the first item has no comma before it */
			if ((lo == 0 && (rc = js_emits(c, out, "(?:")) != CBLLM_OK) || (rc = js_emitb(c, out, &a->rest)) != CBLLM_OK)
				return rc;
			lo = lo > 0 ? lo - 1 : 0;
			hi = hi < 0 ? -1 : hi - 1;
		}
		if (hi != 0 && ((rc = js_emits(c, out, "(?:,[ ]?")) != CBLLM_OK || (rc = js_emitb(c, out, &a->rest)) != CBLLM_OK ||
						(rc = js_emits(c, out, ")")) != CBLLM_OK || (rc = js_emit_quant(c, out, lo, hi)) != CBLLM_OK))
			return rc;
		if (k == 0 && a->min == 0 && (rc = js_emits(c, out, ")?")) != CBLLM_OK)
			return rc;
	}
	for (int i = 0; i < opens && rc == CBLLM_OK; i++)
		rc = js_emits(c, out, ")?");
	return rc != CBLLM_OK ? rc : js_emits(c, out, "\\]");
}

/* Check the length bounds of an array shape against the repetition limit. */
static int
CheckArrayCounts(js_ctx *c, const js_array *a)
{
	if (a->min > REGEX_MAX_REPEAT)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "minItems %lld exceeds %d", (long long) a->min,
					   REGEX_MAX_REPEAT);
	if (a->max > REGEX_MAX_REPEAT)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "maxItems %lld exceeds %d", (long long) a->max,
					   REGEX_MAX_REPEAT);
	return CBLLM_OK;
}

/* Append the arrays the schema admits. */
int
js_gen_array(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	js_array	a = {.min = js_count_of(s, "minItems", 0), .max = js_count_of(s, "maxItems", -1)};
	int			rc = CBLLM_OK;

	if (a.max >= 0 && a.min > a.max)
		return js_impossible(c, "minItems %lld exceeds maxItems %lld", (long long) a.min,
							 (long long) a.max);
	if ((rc = CheckArrayCounts(c, &a)) == CBLLM_OK && (rc = GenPrefix(c, s, &a)) == CBLLM_OK &&
		(rc = GenRest(c, s, &a)) == CBLLM_OK)
	{
		if (!a.has_rest && (a.max < 0 || a.max > a.n_prefix))
			a.max = a.n_prefix;
		if (a.max >= 0 && a.min > a.max)
			rc = a.dropped ? JS_IMPOSSIBLE :
				js_impossible(c, "minItems %lld asks more items than the schema allows", (long long) a.min);
		else
			rc = EmitArray(c, &a, out);
	}
	for (int i = 0; a.prefix != NULL && i < a.n_prefix; i++)
		cbllm_buf_free(&a.prefix[i]);
	free(a.prefix);
	cbllm_buf_free(&a.rest);
	return rc;
}
