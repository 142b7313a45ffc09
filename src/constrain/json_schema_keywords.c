/*
 * json_schema_keywords.c: the keywords the JSON Schema compiler knows, in
 * one table: what each does (an annotation, type, enum and const, a
 * keyword that constrains the values of some types, a combinator that
 * stands alone) and what its value must be.  A schema object's keywords
 * are checked here before anything is compiled from them: an unknown one
 * is refused by name, a value of the wrong kind says what it must be.
 */
#include "constrain/json_schema_internal.h"

#include <math.h>
#include <string.h>

/* the names of the type bits, in their order (N_TYPES) */
static const char *const type_names[] = {"null", "boolean", "object", "array", "number", "integer",
"string"};

/* what a keyword's value must be */
typedef enum js_value_kind
{
	VK_NONE,					/* an annotation: anything */
	VK_ANY,						/* any JSON value (const) */
	VK_TYPE,					/* a type name or a list of them */
	VK_ARRAY,					/* an array (enum) */
	VK_OBJECT,					/* an object */
	VK_STRINGS,					/* an array of strings */
	VK_SCHEMA,					/* a schema: an object or a boolean */
	VK_SCHEMAS,					/* a non-empty array of schemas */
	VK_COUNT,					/* a non-negative integer */
	VK_STRING,					/* a string */
	VK_NUMBER					/* a number */
} js_value_kind;

/* what a keyword does */
typedef enum js_role
{
	R_ANNOTATION,				/* constrains nothing */
	R_TYPE,						/* type */
	R_ENUM,						/* enum, const */
	R_TYPED,					/* constrains the values of the types it names */
	R_COMBINE					/* $ref, anyOf, allOf: stands alone */
} js_role;

typedef struct js_keyword
{
	const char *name;
	js_role		role;
	js_value_kind kind;
	int			types;			/* R_TYPED: the types it applies to (and implies) */
} js_keyword;

static const js_keyword keywords[] = {
	{.name = "title", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "description", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "$schema", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "$id", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "$comment", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "default", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "examples", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "deprecated", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "readOnly", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "writeOnly", .role = R_ANNOTATION, .kind = VK_NONE},
	{.name = "$defs", .role = R_ANNOTATION, .kind = VK_OBJECT},
	{.name = "definitions", .role = R_ANNOTATION, .kind = VK_OBJECT},
	{.name = "type", .role = R_TYPE, .kind = VK_TYPE},
	{.name = "enum", .role = R_ENUM, .kind = VK_ARRAY},
	{.name = "const", .role = R_ENUM, .kind = VK_ANY},
	{.name = "properties", .role = R_TYPED, .kind = VK_OBJECT, .types = T_OBJECT},
	{.name = "required", .role = R_TYPED, .kind = VK_STRINGS, .types = T_OBJECT},
	{.name = "additionalProperties", .role = R_TYPED, .kind = VK_SCHEMA, .types = T_OBJECT},
	{.name = "items", .role = R_TYPED, .kind = VK_SCHEMA, .types = T_ARRAY},
	{.name = "prefixItems", .role = R_TYPED, .kind = VK_SCHEMAS, .types = T_ARRAY},
	{.name = "minItems", .role = R_TYPED, .kind = VK_COUNT, .types = T_ARRAY},
	{.name = "maxItems", .role = R_TYPED, .kind = VK_COUNT, .types = T_ARRAY},
	{.name = "minLength", .role = R_TYPED, .kind = VK_COUNT, .types = T_STRING},
	{.name = "maxLength", .role = R_TYPED, .kind = VK_COUNT, .types = T_STRING},
	{.name = "pattern", .role = R_TYPED, .kind = VK_STRING, .types = T_STRING},
	{.name = "format", .role = R_TYPED, .kind = VK_STRING, .types = T_STRING},
	{.name = "minimum", .role = R_TYPED, .kind = VK_NUMBER, .types = T_INTEGER},
	{.name = "maximum", .role = R_TYPED, .kind = VK_NUMBER, .types = T_INTEGER},
	{.name = "exclusiveMinimum", .role = R_TYPED, .kind = VK_NUMBER, .types = T_INTEGER},
	{.name = "exclusiveMaximum", .role = R_TYPED, .kind = VK_NUMBER, .types = T_INTEGER},
	{.name = "$ref", .role = R_COMBINE, .kind = VK_STRING},
	{.name = "anyOf", .role = R_COMBINE, .kind = VK_SCHEMAS},
	{.name = "allOf", .role = R_COMBINE, .kind = VK_SCHEMAS},
};

#define N_KEYWORDS (sizeof(keywords) / sizeof(keywords[0]))


/* The keyword named name, or NULL. */
static const js_keyword *
Keyword(const char *name)
{
	for (size_t i = 0; i < N_KEYWORDS; i++)
		if (strcmp(keywords[i].name, name) == 0)
			return &keywords[i];
	return NULL;
}

/* The type bit of a type name, or 0. */
static int
TypeBit(const char *name)
{
	for (int i = 0; i < N_TYPES; i++)
		if (strcmp(type_names[i], name) == 0)
			return 1 << i;
	return 0;
}

/* Check the value of "type"; set *types to the set it names. */
int
js_check_type(js_ctx *c, const cJSON *v, int *types)
{
	const cJSON *e;

	*types = 0;
	if (cJSON_IsString(v))
	{
		*types = TypeBit(v->valuestring);
		return *types ? CBLLM_OK : js_fail(c, CBLLM_ERR_INVALID, "unknown type \"%s\"", v->valuestring);
	}
	if (!cJSON_IsArray(v) || v->child == NULL)
		return js_fail(c, CBLLM_ERR_INVALID, "\"type\" must be a type name or a non-empty array of them");
	cJSON_ArrayForEach(e, v)
	{
		int			bit = cJSON_IsString(e) ? TypeBit(e->valuestring) : 0;

		if (bit == 0)
			return cJSON_IsString(e) ?
				js_fail(c, CBLLM_ERR_INVALID, "unknown type \"%s\"", e->valuestring) :
				js_fail(c, CBLLM_ERR_INVALID, "\"type\" must be a type name or a non-empty array of them");
		if (*types & bit)
			return js_fail(c, CBLLM_ERR_INVALID, "type \"%s\" is listed twice", e->valuestring);
		*types |= bit;
	}
	return CBLLM_OK;
}

/* Check that keyword k's value v has the kind k takes. */
static int
CheckValue(js_ctx *c, const js_keyword *k, const cJSON *v)
{
	const cJSON *e;
	int			types;

	switch (k->kind)
	{
		case VK_NONE:
		case VK_ANY:
			return CBLLM_OK;
		case VK_TYPE:
			return js_check_type(c, v, &types);
		case VK_ARRAY:
			return cJSON_IsArray(v) ? CBLLM_OK :
				js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be an array", k->name);
		case VK_OBJECT:
			return cJSON_IsObject(v) ? CBLLM_OK :
				js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be an object", k->name);
		case VK_STRINGS:
			if (cJSON_IsArray(v))
			{
				cJSON_ArrayForEach(e, v)
					if (!cJSON_IsString(e))
					break;
				if (e == NULL)
					return CBLLM_OK;
			}
			return js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be an array of strings", k->name);
		case VK_SCHEMA:
			if (cJSON_IsArray(v) && strcmp(k->name, "items") == 0)
				return js_fail(c, CBLLM_ERR_INVALID,
							   "\"items\" must be a schema (an array of them is \"prefixItems\" in draft 2020-12)");
			return js_is_schema(v) ? CBLLM_OK :
				js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a schema (an object or a boolean)", k->name);
		case VK_SCHEMAS:
			if (cJSON_IsArray(v) && v->child != NULL)
				return CBLLM_OK;
			return js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a non-empty array of schemas", k->name);
		case VK_COUNT:
			if (cJSON_IsNumber(v) && js_is_integral(v) && v->valuedouble >= 0)
				return CBLLM_OK;
			return js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a non-negative integer", k->name);
		case VK_STRING:
			return cJSON_IsString(v) ? CBLLM_OK :
				js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a string", k->name);
		case VK_NUMBER:
			return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? CBLLM_OK :
				js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a number", k->name);
	}
	return CBLLM_OK;
}

/*
 * Check every keyword of schema object s: known (else unsupported, named),
 * with a value of the right kind.  Set *implied to the types its typed
 * keywords apply to.
 */
int
js_check_keywords(js_ctx *c, const cJSON *s, int *implied)
{
	const cJSON *e;

	*implied = 0;
	cJSON_ArrayForEach(e, s)
	{
		const js_keyword *k = Keyword(e->string);
		int			rc;

		if (k == NULL || (strcmp(e->string, "$id") == 0 && s != c->root))
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported keyword \"%s\"", e->string);
		if ((rc = CheckValue(c, k, e)) != CBLLM_OK)
			return rc;
		if (k->role == R_TYPED)
			*implied |= k->types;
	}
	return CBLLM_OK;
}

/*
 * Refuse a keyword of s that constrains and that may not sit beside key
 * (the keywords in allowed, a list ending in NULL, may).
 */
int
js_check_alone(js_ctx *c, const cJSON *s, const char *key, const char *const *allowed)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, s)
	{
		bool		ok = strcmp(e->string, key) == 0 || Keyword(e->string)->role == R_ANNOTATION;

		for (const char *const *a = allowed; !ok && *a; a++)
			ok = strcmp(e->string, *a) == 0;
		if (!ok)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported combination of \"%s\" and \"%s\"",
						   key, e->string);
	}
	return CBLLM_OK;
}
