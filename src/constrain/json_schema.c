/*
 * json_schema.c: a JSON Schema (the subset json_schema.h lists) compiled to
 * a regular expression in regex.h's dialect, whose matches are the documents
 * constrained decoding lets a model write for that schema.
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
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "constrain/json_schema.h"
#include "constrain/regex.h"

#define JS_MAX_NEST 64			/* subschemas on one path */
#define JS_MAX_OUT (1 << 20)	/* bytes of regex */
#define JS_MAX_WORK (32 << 20)	/* bytes of pattern made in all */
#define JS_BLOCK 16				/* optional properties told apart by nesting */
#define JS_IMPOSSIBLE 1			/* internal: the subschema admits no document */
#define JS_EXACT 9007199254740992.0 /* 2^53: numbers above lose integers */

/* one character of a JSON string: unescaped, or a short escape; a number's exponent has at
 * most 3 digits, so that every number generated is one PostgreSQL's numeric (jsonb) holds */
#define RE_CHAR "(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt])"
#define RE_STRING "\"" RE_CHAR "*\""
#define RE_INTEGER "-?(?:0|[1-9][0-9]*)"
#define RE_NUMBER RE_INTEGER "(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?"

/* the formats */
#define RE_YEAR "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
#define RE_LEAP_YEAR "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
#define RE_MONTH_DAY "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])" \
	"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define RE_DATE "(?:" RE_YEAR "-" RE_MONTH_DAY "|" RE_LEAP_YEAR "-02-29)"
#define RE_HOUR_MIN "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
#define RE_TIME RE_HOUR_MIN ":[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-]" RE_HOUR_MIN ")"
#define RE_HEX "[0-9a-fA-F]"
#define RE_UUID RE_HEX "{8}-" RE_HEX "{4}-" RE_HEX "{4}-" RE_HEX "{4}-" RE_HEX "{12}"
#define RE_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9][0-9]|[0-9])"
#define RE_IPV4 RE_OCTET "\\." RE_OCTET "\\." RE_OCTET "\\." RE_OCTET
#define RE_EMAIL "[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@" \
	"(?:[A-Za-z0-9]+(?:-+[A-Za-z0-9]+)*\\.)+[A-Za-z]{2,}"

/* the JSON types, as bits of a set */
enum
{
	T_NULL = 1,
	T_BOOLEAN = 2,
	T_OBJECT = 4,
	T_ARRAY = 8,
	T_NUMBER = 16,
	T_INTEGER = 32,
	T_STRING = 64,
	T_ALL = 127
};

static const char *const type_names[] = {"null", "boolean", "object", "array", "number", "integer",
"string"};

#define N_TYPES 7

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

/* the state of one compilation */
typedef struct js_ctx
{
	const cJSON *root;
	cbllm_err  *err;
	cbllm_buf	path;			/* JSON pointers: the current one starts at path_base */
	size_t		path_base;
	const cJSON *stack[JS_MAX_NEST];	/* the subschemas on the current path */
	int			depth;
	size_t		work;			/* bytes of pattern made so far */
	cbllm_buf	any[JSON_SCHEMA_ANY_DEPTH + 1]; /* any value nesting d deep, made once */
	char		why[CBLLM_ERR_MSG_LEN]; /* why the last impossible branch is */
} js_ctx;

static int	gen_schema(js_ctx *c, const cJSON *s, cbllm_buf *out);

/* ---------------------------------------------------------------- errors, output */

/* The JSON pointer of the subschema being compiled ("/" for the root). */
static const char *
path_str(const js_ctx *c)
{
	return c->path.len > c->path_base ? c->path.data + c->path_base : "/";
}

static int	utf8_len(const unsigned char *s, size_t n);

/*
 * Copy message src into dst (size bytes) as one line of UTF-8, whatever
 * the schema's keys and strings quoted in it hold: a control character
 * becomes \u00XX, a byte that is not UTF-8 '?'; a character that does not
 * fit whole ends the copy.
 */
static void
clean_message(char *dst, size_t size, const char *src)
{
	size_t		n = strlen(src),
				o = 0;

	for (size_t i = 0; i < n;)
	{
		const unsigned char *u = (const unsigned char *) src + i;
		int			len = u[0] < 0x20 ? 0 : utf8_len(u, n - i);
		char		esc[8];
		const char *piece = src + i;
		size_t		w = (size_t) len;

		if (u[0] < 0x20)
			w = (size_t) snprintf(esc, sizeof(esc), "\\u%04x", u[0]), piece = esc, len = 1;
		else if (len == 0)
			w = 1, piece = "?", len = 1;
		if (o + w + 1 > size)
			break;
		memcpy(dst + o, piece, w);
		o += w;
		i += (size_t) len;
	}
	dst[o] = '\0';
}

/* Format "json_schema: <message> at <pointer>" into dst (CBLLM_ERR_MSG_LEN bytes). */
static void
js_vformat(const js_ctx *c, char *dst, const char *fmt, va_list ap)
{
	char		msg[CBLLM_ERR_MSG_LEN],
				line[CBLLM_ERR_MSG_LEN];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	snprintf(line, sizeof(line), "json_schema: %.400s at %s", msg, path_str(c));
	clean_message(dst, CBLLM_ERR_MSG_LEN, line);
}

/* Fail with code and a message that says where; return code. */
static int
			js_fail(js_ctx *c, int code, const char *fmt,...) __attribute__((format(printf, 3, 4)));

static int
js_fail(js_ctx *c, int code, const char *fmt,...)
{
	char		msg[CBLLM_ERR_MSG_LEN];
	va_list		ap;

	va_start(ap, fmt);
	js_vformat(c, msg, fmt, ap);
	va_end(ap);
	return cbllm_fail(c->err, code, "%s", msg);
}

/* Note why the subschema admits no document; return JS_IMPOSSIBLE. */
static int
			js_impossible(js_ctx *c, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static int
js_impossible(js_ctx *c, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	js_vformat(c, c->why, fmt, ap);
	va_end(ap);
	return JS_IMPOSSIBLE;
}

/* Append n bytes to b, within the size limits. */
static int
emit(js_ctx *c, cbllm_buf *b, const char *s, size_t n)
{
	if (b->len + n > JS_MAX_OUT)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "the schema is too large: its regex would exceed %d bytes",
					   JS_MAX_OUT);
	if (c->work + n > JS_MAX_WORK)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED,
					   "the schema is too large: compiling it makes over %d bytes of patterns", JS_MAX_WORK);
	c->work += n;
	if (cbllm_buf_append(b, s, n) != CBLLM_OK)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	return CBLLM_OK;
}

/* Append a NUL-terminated string. */
static int
emits(js_ctx *c, cbllm_buf *b, const char *s)
{
	return emit(c, b, s, strlen(s));
}

/* Append another buffer's bytes. */
static int
emitb(js_ctx *c, cbllm_buf *b, const cbllm_buf *src)
{
	return emit(c, b, src->data, src->len);
}

/* Append a formatted string (short). */
static int
			emitf(js_ctx *c, cbllm_buf *b, const char *fmt,...) __attribute__((format(printf, 3, 4)));

static int
emitf(js_ctx *c, cbllm_buf *b, const char *fmt,...)
{
	char		s[64];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(s, sizeof(s), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(s))
		return js_fail(c, CBLLM_ERR_INTERNAL, "a formatted pattern piece is too long");
	return emit(c, b, s, (size_t) n);
}

/*
 * Append a quantifier for {lo,hi} (hi < 0: unbounded) to what precedes it,
 * which must be an atom; {1,1} appends nothing.  The caller leaves out the
 * atom altogether for {0,0}.
 */
static int
emit_quant(js_ctx *c, cbllm_buf *b, int64_t lo, int64_t hi)
{
	if (hi < 0)
		return lo == 0 ? emits(c, b, "*") : lo == 1 ? emits(c, b, "+") :
			emitf(c, b, "{%lld,}", (long long) lo);
	if (lo == 1 && hi == 1)
		return CBLLM_OK;
	if (lo == 0 && hi == 1)
		return emits(c, b, "?");
	if (lo == hi)
		return emitf(c, b, "{%lld}", (long long) lo);
	return emitf(c, b, "{%lld,%lld}", (long long) lo, (long long) hi);
}

/* ---------------------------------------------------------------- the pointer */

/* Append one reference token to the pointer, escaped (~0, ~1). */
static int
path_push(js_ctx *c, const char *seg)
{
	if (cbllm_buf_append(&c->path, "/", 1) != CBLLM_OK)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	for (const char *p = seg; *p; p++)
	{
		const char *e = *p == '~' ? "~0" : *p == '/' ? "~1" : NULL;

		if (cbllm_buf_append(&c->path, e ? e : p, e ? 2 : 1) != CBLLM_OK)
			return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	}
	return CBLLM_OK;
}

/* Append two tokens: a keyword and an array index. */
static int
path_push_index(js_ctx *c, const char *key, int i)
{
	char		s[16];
	int			rc = path_push(c, key);

	snprintf(s, sizeof(s), "%d", i);
	return rc != CBLLM_OK ? rc : path_push(c, s);
}

/* Cut the pointer back to len bytes. */
static void
path_pop(js_ctx *c, size_t len)
{
	c->path.len = len;
	if (c->path.data != NULL)
		c->path.data[len] = '\0';
}

/* ---------------------------------------------------------------- JSON values */

/* The member key of object s, or NULL. */
static const cJSON *
get(const cJSON *s, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(s, key);
}

/* Whether v is a schema: an object or a boolean. */
static bool
is_schema(const cJSON *v)
{
	return cJSON_IsObject(v) || cJSON_IsBool(v);
}

/* Whether number v is a whole number. */
static bool
is_integral(const cJSON *v)
{
	return isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
}

/* The types value v has (a whole number is an integer and a number). */
static int
value_types(const cJSON *v)
{
	if (cJSON_IsNull(v))
		return T_NULL;
	if (cJSON_IsBool(v))
		return T_BOOLEAN;
	if (cJSON_IsNumber(v))
		return is_integral(v) ? T_INTEGER | T_NUMBER : T_NUMBER;
	if (cJSON_IsString(v))
		return T_STRING;
	if (cJSON_IsArray(v))
		return T_ARRAY;
	return T_OBJECT;
}

/* The length of the UTF-8 sequence at s (n bytes left), or 0 when it is not UTF-8. */
static int
utf8_len(const unsigned char *s, size_t n)
{
	int			len;
	uint32_t	cp;

	if (s[0] < 0x80)
		return 1;
	len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3 :
		s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
	if (len == 0 || (size_t) len > n)
		return 0;
	cp = s[0] & (0xff >> (len + 1));
	for (int i = 1; i < len; i++)
	{
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
		(len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/*
 * Append s as a JSON string literal: only the escapes the string rule
 * allows (\" \\ \b \f \n \r \t), other characters raw.  A control
 * character without a short escape would need \u: unsupported.
 */
static int
ser_string(js_ctx *c, const char *s, cbllm_buf *out)
{
	size_t		n = strlen(s);
	int			rc = emits(c, out, "\"");

	for (size_t i = 0; i < n && rc == CBLLM_OK;)
	{
		unsigned char ch = (unsigned char) s[i];
		const char *e = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\b' ? "\\b" :
			ch == '\f' ? "\\f" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t" : NULL;
		int			len;

		if (e != NULL)
		{
			rc = emits(c, out, e);
			i++;
			continue;
		}
		if (ch < 0x20)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED,
						   "the string \"%.40s\" holds control character U+%04X, which needs a \\u escape",
						   s, ch);
		len = utf8_len((const unsigned char *) s + i, n - i);
		if (len == 0)
			return js_fail(c, CBLLM_ERR_INVALID, "a string is not valid UTF-8");
		rc = emit(c, out, s + i, (size_t) len);
		i += (size_t) len;
	}
	return rc != CBLLM_OK ? rc : emits(c, out, "\"");
}

/* Append number v as JSON: shortest text that reads back as the same double. */
static int
ser_number(js_ctx *c, double v, cbllm_buf *out)
{
	char		s[40];

	if (!isfinite(v))
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "a number out of range");
	if (v == floor(v))
	{
		if (fabs(v) > JS_EXACT)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "the integer %.17g is beyond 2^53", v);
		snprintf(s, sizeof(s), "%.0f", v == 0 ? 0.0 : v);
		return emits(c, out, s);
	}
	for (int prec = 15; prec <= 17; prec++)
	{
		snprintf(s, sizeof(s), "%.*g", prec, v);
		if (strtod(s, NULL) == v)
			break;
	}
	return emits(c, out, s);
}

/* Append value v as compact JSON (enum and const values). */
static int
ser_value(js_ctx *c, const cJSON *v, cbllm_buf *out)
{
	const cJSON *e;
	int			rc = CBLLM_OK;

	if (cJSON_IsNull(v))
		return emits(c, out, "null");
	if (cJSON_IsBool(v))
		return emits(c, out, cJSON_IsTrue(v) ? "true" : "false");
	if (cJSON_IsNumber(v))
		return ser_number(c, v->valuedouble, out);
	if (cJSON_IsString(v))
		return ser_string(c, v->valuestring, out);
	rc = emits(c, out, cJSON_IsArray(v) ? "[" : "{");
	cJSON_ArrayForEach(e, v)
	{
		if (rc == CBLLM_OK && e != v->child)
			rc = emits(c, out, ",");
		if (rc == CBLLM_OK && cJSON_IsObject(v))
			rc = ser_string(c, e->string, out);
		if (rc == CBLLM_OK && cJSON_IsObject(v))
			rc = emits(c, out, ":");
		if (rc == CBLLM_OK)
			rc = ser_value(c, e, out);
	}
	return rc != CBLLM_OK ? rc : emits(c, out, cJSON_IsArray(v) ? "]" : "}");
}

/* Append the pattern that matches exactly the bytes of lit. */
static int
emit_literal(js_ctx *c, cbllm_buf *out, const cbllm_buf *lit)
{
	cbllm_buf	esc = {0};
	int			rc;

	if ((rc = regex_escape(lit->data ? lit->data : "", lit->len, &esc)) != CBLLM_OK)
		rc = rc == CBLLM_ERR_NOMEM ? js_fail(c, rc, "out of memory") :
			js_fail(c, CBLLM_ERR_INVALID, "a string is not valid UTF-8");
	else
		rc = emitb(c, out, &esc);
	cbllm_buf_free(&esc);
	return rc;
}

/* ---------------------------------------------------------------- keywords */

/* The keyword named name, or NULL. */
static const js_keyword *
keyword(const char *name)
{
	for (size_t i = 0; i < N_KEYWORDS; i++)
		if (strcmp(keywords[i].name, name) == 0)
			return &keywords[i];
	return NULL;
}

/* The type bit of a type name, or 0. */
static int
type_bit(const char *name)
{
	for (int i = 0; i < N_TYPES; i++)
		if (strcmp(type_names[i], name) == 0)
			return 1 << i;
	return 0;
}

/* Check the value of "type"; set *types to the set it names. */
static int
check_type(js_ctx *c, const cJSON *v, int *types)
{
	const cJSON *e;

	*types = 0;
	if (cJSON_IsString(v))
	{
		*types = type_bit(v->valuestring);
		return *types ? CBLLM_OK : js_fail(c, CBLLM_ERR_INVALID, "unknown type \"%s\"", v->valuestring);
	}
	if (!cJSON_IsArray(v) || v->child == NULL)
		return js_fail(c, CBLLM_ERR_INVALID, "\"type\" must be a type name or a non-empty array of them");
	cJSON_ArrayForEach(e, v)
	{
		int			bit = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;

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
check_value(js_ctx *c, const js_keyword *k, const cJSON *v)
{
	const cJSON *e;
	int			types;

	switch (k->kind)
	{
		case VK_NONE:
		case VK_ANY:
			return CBLLM_OK;
		case VK_TYPE:
			return check_type(c, v, &types);
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
			return is_schema(v) ? CBLLM_OK :
				js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a schema (an object or a boolean)", k->name);
		case VK_SCHEMAS:
			if (cJSON_IsArray(v) && v->child != NULL)
				return CBLLM_OK;
			return js_fail(c, CBLLM_ERR_INVALID, "\"%s\" must be a non-empty array of schemas", k->name);
		case VK_COUNT:
			if (cJSON_IsNumber(v) && is_integral(v) && v->valuedouble >= 0)
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
static int
check_keywords(js_ctx *c, const cJSON *s, int *implied)
{
	const cJSON *e;

	*implied = 0;
	cJSON_ArrayForEach(e, s)
	{
		const js_keyword *k = keyword(e->string);
		int			rc;

		if (k == NULL || (strcmp(e->string, "$id") == 0 && s != c->root))
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported keyword \"%s\"", e->string);
		if ((rc = check_value(c, k, e)) != CBLLM_OK)
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
static int
check_alone(js_ctx *c, const cJSON *s, const char *key, const char *const *allowed)
{
	const cJSON *e;

	cJSON_ArrayForEach(e, s)
	{
		bool		ok = strcmp(e->string, key) == 0 || keyword(e->string)->role == R_ANNOTATION;

		for (const char *const *a = allowed; !ok && *a; a++)
			ok = strcmp(e->string, *a) == 0;
		if (!ok)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported combination of \"%s\" and \"%s\"",
						   key, e->string);
	}
	return CBLLM_OK;
}

/* ---------------------------------------------------------------- any value */

/*
 * Append the pattern of any value nesting at most d levels deep: scalars,
 * and for d > 0 arrays and maps of values nesting d - 1 deep.
 */
static int
build_any(js_ctx *c, int d, cbllm_buf *out)
{
	const cbllm_buf *a = d > 0 ? &c->any[d - 1] : NULL;
	int			rc = emits(c, out, "(?:null|true|false|" RE_NUMBER "|" RE_STRING);

	if (rc == CBLLM_OK && a != NULL)
	{
		if ((rc = emits(c, out, "|\\[(?:")) == CBLLM_OK && (rc = emitb(c, out, a)) == CBLLM_OK &&
			(rc = emits(c, out, "(?:,[ ]?")) == CBLLM_OK && (rc = emitb(c, out, a)) == CBLLM_OK &&
			(rc = emits(c, out, ")*)?\\]|\\{(?:" RE_STRING ":[ ]?")) == CBLLM_OK &&
			(rc = emitb(c, out, a)) == CBLLM_OK &&
			(rc = emits(c, out, "(?:,[ ]?" RE_STRING ":[ ]?")) == CBLLM_OK &&
			(rc = emitb(c, out, a)) == CBLLM_OK)
			rc = emits(c, out, ")*)?\\}");
	}
	return rc != CBLLM_OK ? rc : emits(c, out, ")");
}

/* Append any value nesting at most d levels deep (d >= 0). */
static int
emit_any(js_ctx *c, cbllm_buf *out, int d)
{
	for (int i = 0; i <= d; i++)
	{
		int			rc;

		if (c->any[i].len == 0 && (rc = build_any(c, i, &c->any[i])) != CBLLM_OK)
			return rc;
	}
	return emitb(c, out, &c->any[d]);
}

/* ---------------------------------------------------------------- integers */

static const char zeros[] = "00000000000000000000";
static const char nines[] = "99999999999999999999";

/* Whether the n chars at s are all ch. */
static bool
all_are(const char *s, int n, char ch)
{
	for (int i = 0; i < n; i++)
		if (s[i] != ch)
			return false;
	return true;
}

/* Append the digits from..to as a class (one digit alone). */
static int
emit_digit_class(js_ctx *c, cbllm_buf *out, char from, char to)
{
	return from == to ? emit(c, out, &from, 1) : emitf(c, out, "[%c-%c]", from, to);
}

/*
 * Append the pattern of the n-digit strings between lo and hi (n digits
 * each, lo <= hi): the usual decomposition by the first digit that
 * differs, each alternative starting with its own digits.
 */
static int
emit_digit_range(js_ctx *c, cbllm_buf *out, const char *lo, const char *hi, int n)
{
	bool		lo_min,
				hi_max,
				sep = false;
	char		from,
				to;
	int			rc;

	for (; n > 0 && *lo == *hi; lo++, hi++, n--)
		if ((rc = emit(c, out, lo, 1)) != CBLLM_OK)
			return rc;
	if (n == 0)
		return CBLLM_OK;
	lo_min = all_are(lo + 1, n - 1, '0');
	hi_max = all_are(hi + 1, n - 1, '9');
	from = lo_min ? lo[0] : (char) (lo[0] + 1);
	to = hi_max ? hi[0] : (char) (hi[0] - 1);
	if ((rc = emits(c, out, "(?:")) != CBLLM_OK)
		return rc;
	if (!lo_min)
	{
		if ((rc = emit(c, out, lo, 1)) != CBLLM_OK ||
			(rc = emit_digit_range(c, out, lo + 1, nines, n - 1)) != CBLLM_OK)
			return rc;
		sep = true;
	}
	if (from <= to)
	{
		if ((sep && (rc = emits(c, out, "|")) != CBLLM_OK) ||
			(rc = emit_digit_class(c, out, from, to)) != CBLLM_OK)
			return rc;
		if (n > 1 && (rc = emits(c, out, "[0-9]")) == CBLLM_OK)
			rc = emit_quant(c, out, n - 1, n - 1);
		if (rc != CBLLM_OK)
			return rc;
		sep = true;
	}
	if (!hi_max)
	{
		if ((sep && (rc = emits(c, out, "|")) != CBLLM_OK) || (rc = emit(c, out, hi, 1)) != CBLLM_OK ||
			(rc = emit_digit_range(c, out, zeros, hi + 1, n - 1)) != CBLLM_OK)
			return rc;
	}
	return emits(c, out, ")");
}

/*
 * Append the pattern of the integers a..b written without sign or leading
 * zero (0 <= a, a <= b unless bounded is false: then a and above).
 */
static int
emit_nonneg_range(js_ctx *c, cbllm_buf *out, int64_t a, int64_t b, bool bounded)
{
	char		sa[24],
				sb[24],
				lo[24],
				hi[24];
	int			la = snprintf(sa, sizeof(sa), "%lld", (long long) a);
	int			lb = bounded ? snprintf(sb, sizeof(sb), "%lld", (long long) b) : la;
	int			rc = emits(c, out, "(?:");

	for (int len = la; len <= lb && rc == CBLLM_OK; len++)
	{
		memcpy(lo, len == la ? sa : zeros, (size_t) len);
		if (len > la)
			lo[0] = '1';
		memcpy(hi, bounded && len == lb ? sb : nines, (size_t) len);
		if (len > la)
			rc = emits(c, out, "|");
		if (rc == CBLLM_OK)
			rc = emit_digit_range(c, out, lo, hi, len);
	}
	if (rc == CBLLM_OK && !bounded)
		rc = emitf(c, out, "|[1-9][0-9]{%d,}", la);
	return rc != CBLLM_OK ? rc : emits(c, out, ")");
}

/*
 * Read the bounds of an integer: *lo and *hi (has_lo, has_hi when given),
 * non-integral and exclusive ones rounded inward.
 */
static int
integer_bounds(js_ctx *c, const cJSON *s, int64_t *lo, bool *has_lo, int64_t *hi, bool *has_hi)
{
	static const char *const names[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

	*has_lo = *has_hi = false;
	for (int i = 0; i < 4; i++)
	{
		const cJSON *v = get(s, names[i]);
		double		x,
					r;

		if (v == NULL)
			continue;
		x = v->valuedouble;
		if (fabs(x) > JS_EXACT)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "%s %.17g is beyond +-2^53", names[i], x);
		r = i == 0 ? ceil(x) : i == 1 ? floor(x) + 1 : i == 2 ? floor(x) : ceil(x) - 1;
		if (i < 2 && (!*has_lo || (int64_t) r > *lo))
			*lo = (int64_t) r;
		if (i >= 2 && (!*has_hi || (int64_t) r < *hi))
			*hi = (int64_t) r;
		*has_lo |= i < 2;
		*has_hi |= i >= 2;
	}
	return CBLLM_OK;
}

/* Append the integers within the schema's bounds. */
static int
gen_integer(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	int64_t		lo = 0,
				hi = 0;
	bool		has_lo,
				has_hi,
				neg,
				pos;
	int			rc = integer_bounds(c, s, &lo, &has_lo, &hi, &has_hi);

	if (rc != CBLLM_OK)
		return rc;
	if (!has_lo && !has_hi)
		return emits(c, out, RE_INTEGER);
	if (has_lo && has_hi && lo > hi)
		return js_impossible(c, "no integer lies between the bounds (%lld > %lld)",
							 (long long) lo, (long long) hi);
	neg = !has_lo || lo < 0;
	pos = !has_hi || hi >= 0;
	if ((rc = emits(c, out, "(?:")) != CBLLM_OK)
		return rc;
	if (neg)
	{
		int64_t		top = has_hi && hi < 0 ? -hi : 1;	/* the smallest magnitude */

		if ((rc = emits(c, out, "-")) != CBLLM_OK ||
			(rc = emit_nonneg_range(c, out, top, has_lo ? -lo : 0, has_lo)) != CBLLM_OK)
			return rc;
	}
	if (pos)
	{
		if ((neg && (rc = emits(c, out, "|")) != CBLLM_OK) ||
			(rc = emit_nonneg_range(c, out, has_lo && lo > 0 ? lo : 0, hi, has_hi)) != CBLLM_OK)
			return rc;
	}
	return emits(c, out, ")");
}

/* Append any number ("number" takes no bound). */
static int
gen_number(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	static const char *const names[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

	for (int i = 0; i < 4; i++)
		if (get(s, names[i]) != NULL)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "%s is supported for integers only", names[i]);
	return emits(c, out, RE_NUMBER);
}

/* ---------------------------------------------------------------- strings */

/* The value of count keyword key of s, or dflt when absent. */
static int64_t
count_of(const cJSON *s, const char *key, int64_t dflt)
{
	const cJSON *v = get(s, key);

	if (v == NULL)
		return dflt;
	return v->valuedouble > 1e15 ? (int64_t) 1e15 : (int64_t) v->valuedouble;
}

/* Append a string of a format. */
static int
gen_format(js_ctx *c, const char *name, cbllm_buf *out)
{
	static const char *const formats[][2] = {
		{"date", RE_DATE}, {"time", RE_TIME}, {"date-time", RE_DATE "T" RE_TIME},
		{"uuid", RE_UUID}, {"ipv4", RE_IPV4}, {"email", RE_EMAIL},
	};

	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (strcmp(formats[i][0], name) == 0)
		{
			int			rc = emits(c, out, "\"(?:");

			if (rc == CBLLM_OK)
				rc = emits(c, out, formats[i][1]);
			return rc != CBLLM_OK ? rc : emits(c, out, ")\"");
		}
	return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported format \"%s\"", name);
}

/*
 * The length of the top-level alternative at p[0..n): up to the first '|'
 * outside groups, classes and escapes (n when none).
 */
static size_t
alternative_len(const char *p, size_t n)
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
emit_search_alternative(js_ctx *c, cbllm_buf *full, const char *p, size_t n)
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
	rc = emits(c, full, head ? "(?:" : "(?:.*");
	if (rc == CBLLM_OK && n > start && (rc = emits(c, full, "(?:")) == CBLLM_OK &&
		(rc = emit(c, full, p + start, n - start)) == CBLLM_OK)
		rc = emits(c, full, ")");
	return rc != CBLLM_OK ? rc : emits(c, full, tail ? ")" : ".*)");
}

/*
 * Append a string whose body matches pattern p as JSON Schema reads it (a
 * search): each top-level alternative padded as its anchors say, the
 * characters that need an escape taken out (regex_json_string_body).
 */
static int
gen_pattern(js_ctx *c, const char *p, cbllm_buf *out)
{
	cbllm_buf	full = {0},
				body = {0};
	size_t		n = strlen(p),
				i = 0;
	int			rc = CBLLM_OK;
	cbllm_err	e;

	do
	{
		size_t		len = alternative_len(p + i, n - i);

		if (i > 0)
			rc = emits(c, &full, "|");
		if (rc == CBLLM_OK)
			rc = emit_search_alternative(c, &full, p + i, len);
		i += len + 1;
	} while (rc == CBLLM_OK && i <= n);
	if (rc == CBLLM_OK && (rc = regex_json_string_body(full.data, full.len, &body, &e)) != CBLLM_OK)
		rc = js_fail(c, rc, "pattern \"%.60s\": %s", p, e.msg);
	if (rc == CBLLM_OK && (rc = emits(c, out, "\"(?:")) == CBLLM_OK &&
		(rc = emitb(c, out, &body)) == CBLLM_OK)
		rc = emits(c, out, ")\"");
	cbllm_buf_free(&full);
	cbllm_buf_free(&body);
	return rc;
}

/* Refuse keyword a beside keyword b of s, when both are there. */
static int
check_not_both(js_ctx *c, const cJSON *s, const char *a, const char *b)
{
	if (get(s, a) != NULL && get(s, b) != NULL)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "unsupported combination of %s and %s", a, b);
	return CBLLM_OK;
}

/* Append the strings the schema admits. */
static int
gen_string(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	const cJSON *fmt = get(s, "format"),
			   *pat = get(s, "pattern");
	int64_t		lo = count_of(s, "minLength", 0),
				hi = count_of(s, "maxLength", -1);
	int			rc;

	if ((rc = check_not_both(c, s, "format", "pattern")) != CBLLM_OK ||
		(rc = check_not_both(c, s, "format", "minLength")) != CBLLM_OK ||
		(rc = check_not_both(c, s, "format", "maxLength")) != CBLLM_OK ||
		(rc = check_not_both(c, s, "pattern", "minLength")) != CBLLM_OK ||
		(rc = check_not_both(c, s, "pattern", "maxLength")) != CBLLM_OK)
		return rc;
	if (fmt != NULL)
		return gen_format(c, fmt->valuestring, out);
	if (pat != NULL)
		return gen_pattern(c, pat->valuestring, out);
	if (hi >= 0 && lo > hi)
		return js_impossible(c, "minLength %lld exceeds maxLength %lld", (long long) lo, (long long) hi);
	if (lo > REGEX_MAX_REPEAT || hi > REGEX_MAX_REPEAT)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "%s %lld exceeds %d",
					   lo > REGEX_MAX_REPEAT ? "minLength" : "maxLength",
					   (long long) (lo > REGEX_MAX_REPEAT ? lo : hi), REGEX_MAX_REPEAT);
	if ((rc = emits(c, out, "\"")) != CBLLM_OK)
		return rc;
	if (hi != 0 && ((rc = emits(c, out, RE_CHAR)) != CBLLM_OK || (rc = emit_quant(c, out, lo, hi)) != CBLLM_OK))
		return rc;
	return emits(c, out, "\"");
}

/* ---------------------------------------------------------------- objects */

/* A property of an object: its pattern "KEY":[ ]?VALUE and whether it is required. */
typedef struct js_prop
{
	cbllm_buf	pat;
	bool		required;
} js_prop;

/* Whether array a holds the string name. */
static bool
holds_string(const cJSON *a, const char *name)
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
gen_property(js_ctx *c, const char *name, const cJSON *v, const char *tok1, const char *tok2,
			 cbllm_buf *pat)
{
	cbllm_buf	key = {0};
	size_t		saved = c->path.len;
	int			rc = ser_string(c, name, &key);

	if (rc == CBLLM_OK)
		rc = emit_literal(c, pat, &key);
	if (rc == CBLLM_OK)
		rc = emits(c, pat, ":[ ]?");
	if (rc == CBLLM_OK && (rc = path_push(c, tok1)) == CBLLM_OK && (tok2 == NULL || (rc = path_push(c, tok2)) == CBLLM_OK))
		rc = v != NULL ? gen_schema(c, v, pat) : emit_any(c, pat, JSON_SCHEMA_ANY_DEPTH - 1);
	path_pop(c, saved);
	cbllm_buf_free(&key);
	return rc;
}

/*
 * Add the property name (schema v) to props[*n], unless it admits no value
 * and is optional; a required one that admits no value makes the object
 * impossible.
 */
static int
add_property(js_ctx *c, js_prop *props, int *n, const char *name, const cJSON *v, bool required,
			 const char *tok1, const char *tok2)
{
	js_prop    *p = &props[*n];
	int			rc;

	memset(p, 0, sizeof(*p));
	p->required = required;
	rc = gen_property(c, name, v, tok1, tok2, &p->pat);
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
emit_some(js_ctx *c, const js_prop *p, int m, cbllm_buf *out)
{
	int			n_blocks = (m + JS_BLOCK - 1) / JS_BLOCK,
				rc = n_blocks > 1 ? emits(c, out, "(?:") : CBLLM_OK;

	for (int b = 0; b < n_blocks && rc == CBLLM_OK; b++)
	{
		int			start = b * JS_BLOCK,
					end = start + JS_BLOCK < m ? start + JS_BLOCK : m;

		if (b > 0)
			rc = emits(c, out, "|");
		for (int j = start + 1; j < end && rc == CBLLM_OK; j++)
			rc = emits(c, out, "(?:");
		if (rc == CBLLM_OK)
			rc = emitb(c, out, &p[start].pat);
		for (int j = start + 1; j < m && rc == CBLLM_OK; j++)
		{
			if ((rc = emits(c, out, "(?:,[ ]?")) == CBLLM_OK && (rc = emitb(c, out, &p[j].pat)) == CBLLM_OK)
				rc = emits(c, out, ")?");
			if (rc == CBLLM_OK && j < end && (rc = emits(c, out, "|")) == CBLLM_OK &&
				(rc = emitb(c, out, &p[j].pat)) == CBLLM_OK)
				rc = emits(c, out, ")");
		}
	}
	if (rc == CBLLM_OK && n_blocks > 1)
		rc = emits(c, out, ")");
	return rc;
}

/*
 * Append the object of properties props[0..n), in order, required ones
 * always there: the optional ones before the first required one as
 * emit_some makes them, then the first required one (with a comma when
 * one came before), then the rest, each with its comma.
 */
static int
emit_properties(js_ctx *c, const js_prop *props, int n, cbllm_buf *out)
{
	int			f = 0,
				rc = emits(c, out, "\\{");

	while (f < n && !props[f].required)
		f++;
	if (rc == CBLLM_OK && f > 0 && (rc = emits(c, out, "(?:")) == CBLLM_OK)
		rc = emit_some(c, props, f, out);
	if (rc == CBLLM_OK && f > 0 && f == n)
		rc = emits(c, out, ")?");
	if (rc == CBLLM_OK && f > 0 && f < n)
	{
		/* (?:SOME,P|P): the first required one, after some or alone */
		if ((rc = emits(c, out, ",[ ]?")) == CBLLM_OK && (rc = emitb(c, out, &props[f].pat)) == CBLLM_OK)
			rc = emits(c, out, "|");
	}
	if (rc == CBLLM_OK && f < n && (rc = emitb(c, out, &props[f].pat)) == CBLLM_OK && f > 0)
		rc = emits(c, out, ")");
	for (int j = f + 1; j < n && rc == CBLLM_OK; j++)
	{
		rc = emits(c, out, props[j].required ? ",[ ]?" : "(?:,[ ]?");
		if (rc == CBLLM_OK && (rc = emitb(c, out, &props[j].pat)) == CBLLM_OK && !props[j].required)
			rc = emits(c, out, ")?");
	}
	return rc != CBLLM_OK ? rc : emits(c, out, "\\}");
}

/*
 * Collect the properties of s: the declared ones, then the required ones
 * not declared (value schema additionalProperties), into props (room for
 * all), counting them in *n.
 */
static int
collect_properties(js_ctx *c, const cJSON *s, js_prop *props, int *n)
{
	const cJSON *decl = get(s, "properties"),
			   *req = get(s, "required"),
			   *ap = get(s, "additionalProperties"),
			   *e;
	int			rc = CBLLM_OK;

	cJSON_ArrayForEach(e, decl)
	{
		if (!is_schema(e))
		{
			size_t		saved = c->path.len;

			if ((rc = path_push(c, "properties")) == CBLLM_OK && (rc = path_push(c, e->string)) == CBLLM_OK)
				rc = js_fail(c, CBLLM_ERR_INVALID, "a schema must be an object or a boolean");
			path_pop(c, saved);
			return rc;
		}
		if ((rc = add_property(c, props, n, e->string, e, req != NULL && holds_string(req, e->string),
							   "properties", e->string)) != CBLLM_OK)
			return rc;
	}
	cJSON_ArrayForEach(e, req)
	{
		const cJSON *prev;
		bool		seen = decl != NULL && get(decl, e->valuestring) != NULL;

		for (prev = req->child; !seen && prev != e; prev = prev->next)
			seen = strcmp(prev->valuestring, e->valuestring) == 0;
		if (seen)
			continue;
		if (cJSON_IsFalse(ap))
			return js_impossible(c, "required property \"%.60s\" is not declared and additionalProperties is false",
								 e->valuestring);
		if ((rc = add_property(c, props, n, e->valuestring, cJSON_IsObject(ap) ? ap : NULL, true,
							   "additionalProperties", NULL)) != CBLLM_OK)
			return rc;
	}
	return CBLLM_OK;
}

/* Append an object with properties (declared or required). */
static int
gen_object_properties(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	int			room = cJSON_GetArraySize(get(s, "properties")) + cJSON_GetArraySize(get(s, "required"));
	js_prop    *props = calloc((size_t) room + 1, sizeof(js_prop));
	int			n = 0,
				rc;

	if (props == NULL)
		return js_fail(c, CBLLM_ERR_NOMEM, "out of memory");
	rc = collect_properties(c, s, props, &n);
	if (rc == CBLLM_OK)
		rc = emit_properties(c, props, n, out);
	for (int i = 0; i < n; i++)
		cbllm_buf_free(&props[i].pat);
	free(props);
	return rc;
}

/* Append a map: string keys, values under additionalProperties. */
static int
gen_map(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	const cJSON *ap = get(s, "additionalProperties");
	cbllm_buf	val = {0};
	size_t		saved = c->path.len;
	int			rc;

	if (cJSON_IsFalse(ap))
		return emits(c, out, "\\{\\}");
	if (!cJSON_IsObject(ap))
		rc = emit_any(c, &val, JSON_SCHEMA_ANY_DEPTH - 1);
	else if ((rc = path_push(c, "additionalProperties")) == CBLLM_OK)
		rc = gen_schema(c, ap, &val);
	path_pop(c, saved);
	if (rc == JS_IMPOSSIBLE)
		rc = emits(c, out, "\\{\\}");
	else if (rc == CBLLM_OK &&
			 (rc = emits(c, out, "\\{(?:" RE_STRING ":[ ]?")) == CBLLM_OK &&
			 (rc = emitb(c, out, &val)) == CBLLM_OK &&
			 (rc = emits(c, out, "(?:,[ ]?" RE_STRING ":[ ]?")) == CBLLM_OK &&
			 (rc = emitb(c, out, &val)) == CBLLM_OK)
		rc = emits(c, out, ")*)?\\}");
	cbllm_buf_free(&val);
	return rc;
}

/* Append the objects the schema admits. */
static int
gen_object(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	const cJSON *req = get(s, "required");

	if (get(s, "properties") != NULL || (req != NULL && req->child != NULL))
		return gen_object_properties(c, s, out);
	return gen_map(c, s, out);
}

/* ---------------------------------------------------------------- arrays */

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
gen_prefix(js_ctx *c, const cJSON *s, js_array *a)
{
	const cJSON *pre = get(s, "prefixItems"),
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
		rc = path_push_index(c, "prefixItems", i);

		if (rc == CBLLM_OK)
			rc = gen_schema(c, e, &a->prefix[i]);
		path_pop(c, saved);
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
gen_rest(js_ctx *c, const cJSON *s, js_array *a)
{
	const cJSON *items = get(s, "items"),
			   *pre = get(s, "prefixItems");
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
		if ((rc = path_push(c, "items")) == CBLLM_OK)
			rc = gen_schema(c, items, &a->rest);
		path_pop(c, saved);
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
		rc = emit_any(c, &a->rest, JSON_SCHEMA_ANY_DEPTH - 1);
	}
	a->has_rest = rc == CBLLM_OK && (a->max < 0 || a->max > k);
	return rc;
}

/* Append the array of the shape a. */
static int
emit_array(js_ctx *c, const js_array *a, cbllm_buf *out)
{
	int			k = a->n_prefix,
				opens = 0,
				rc = emits(c, out, "\\[");

	for (int i = 0; i < k && rc == CBLLM_OK; i++)
	{
		if (i >= a->min && (rc = emits(c, out, "(?:")) == CBLLM_OK)
			opens++;
		if (rc == CBLLM_OK && i > 0)
			rc = emits(c, out, ",[ ]?");
		if (rc == CBLLM_OK)
			rc = emitb(c, out, &a->prefix[i]);
	}
	if (rc == CBLLM_OK && a->has_rest)
	{
		int64_t		lo = a->min > k ? a->min - k : 0,
					hi = a->max < 0 ? -1 : a->max - k;

		if (k == 0)
		{
			/* the first item has no comma before it */
			if ((lo == 0 && (rc = emits(c, out, "(?:")) != CBLLM_OK) || (rc = emitb(c, out, &a->rest)) != CBLLM_OK)
				return rc;
			lo = lo > 0 ? lo - 1 : 0;
			hi = hi < 0 ? -1 : hi - 1;
		}
		if (hi != 0 && ((rc = emits(c, out, "(?:,[ ]?")) != CBLLM_OK || (rc = emitb(c, out, &a->rest)) != CBLLM_OK ||
						(rc = emits(c, out, ")")) != CBLLM_OK || (rc = emit_quant(c, out, lo, hi)) != CBLLM_OK))
			return rc;
		if (k == 0 && a->min == 0 && (rc = emits(c, out, ")?")) != CBLLM_OK)
			return rc;
	}
	for (int i = 0; i < opens && rc == CBLLM_OK; i++)
		rc = emits(c, out, ")?");
	return rc != CBLLM_OK ? rc : emits(c, out, "\\]");
}

/* Check the length bounds of an array shape against the repetition limit. */
static int
check_array_counts(js_ctx *c, const js_array *a)
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
static int
gen_array(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	js_array	a = {.min = count_of(s, "minItems", 0), .max = count_of(s, "maxItems", -1)};
	int			rc = CBLLM_OK;

	if (a.max >= 0 && a.min > a.max)
		return js_impossible(c, "minItems %lld exceeds maxItems %lld", (long long) a.min,
							 (long long) a.max);
	if ((rc = check_array_counts(c, &a)) == CBLLM_OK && (rc = gen_prefix(c, s, &a)) == CBLLM_OK &&
		(rc = gen_rest(c, s, &a)) == CBLLM_OK)
	{
		if (!a.has_rest && (a.max < 0 || a.max > a.n_prefix))
			a.max = a.n_prefix;
		if (a.max >= 0 && a.min > a.max)
			rc = a.dropped ? JS_IMPOSSIBLE :
				js_impossible(c, "minItems %lld asks more items than the schema allows", (long long) a.min);
		else
			rc = emit_array(c, &a, out);
	}
	for (int i = 0; a.prefix != NULL && i < a.n_prefix; i++)
		cbllm_buf_free(&a.prefix[i]);
	free(a.prefix);
	cbllm_buf_free(&a.rest);
	return rc;
}

/* ---------------------------------------------------------------- types, enum */

/* Append the values of type t (one bit) the schema admits. */
static int
gen_type(js_ctx *c, const cJSON *s, int t, cbllm_buf *out)
{
	switch (t)
	{
		case T_NULL:
			return emits(c, out, "null");
		case T_BOOLEAN:
			return emits(c, out, "(?:true|false)");
		case T_OBJECT:
			return gen_object(c, s, out);
		case T_ARRAY:
			return gen_array(c, s, out);
		case T_NUMBER:
			return gen_number(c, s, out);
		case T_INTEGER:
			return gen_integer(c, s, out);
		default:
			return gen_string(c, s, out);
	}
}

/*
 * Append the alternation of the patterns in alts (count n, joined by '|'):
 * nothing admitted when n is 0.
 */
static int
emit_alternatives(js_ctx *c, const cbllm_buf *alts, int n, cbllm_buf *out)
{
	int			rc;

	if (n == 0)
		return JS_IMPOSSIBLE;
	if (n == 1)
		return emitb(c, out, alts);
	if ((rc = emits(c, out, "(?:")) == CBLLM_OK && (rc = emitb(c, out, alts)) == CBLLM_OK)
		rc = emits(c, out, ")");
	return rc;
}

/* Add pattern p to the alternatives alts (n of them so far). */
static int
add_alternative(js_ctx *c, cbllm_buf *alts, int *n, const cbllm_buf *p)
{
	int			rc = *n > 0 ? emits(c, alts, "|") : CBLLM_OK;

	if (rc == CBLLM_OK)
		rc = emitb(c, alts, p);
	*n += rc == CBLLM_OK;
	return rc;
}

/* Append the values of the types in types that the schema admits. */
static int
gen_types(js_ctx *c, const cJSON *s, int types, cbllm_buf *out)
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
		rc = gen_type(c, s, 1 << i, &one);
		if (rc == CBLLM_OK)
			rc = add_alternative(c, &alts, &n, &one);
		else if (rc == JS_IMPOSSIBLE)
			rc = CBLLM_OK;
		cbllm_buf_free(&one);
	}
	if (rc == CBLLM_OK)
		rc = emit_alternatives(c, &alts, n, out);
	cbllm_buf_free(&alts);
	return rc;
}

/* Append the values of enum or const that have a type in types. */
static int
gen_enum(js_ctx *c, const cJSON *s, int types, cbllm_buf *out)
{
	static const char *const allowed[] = {"type", NULL};
	const cJSON *en = get(s, "enum"),
			   *e;
	cbllm_buf	alts = {0};
	int			n = 0,
				rc;

	if ((rc = check_alone(c, s, en != NULL ? "enum" : "const", allowed)) != CBLLM_OK)
		return rc;
	for (e = en != NULL ? en->child : get(s, "const"); e != NULL && rc == CBLLM_OK; e = en != NULL ? e->next : NULL)
	{
		cbllm_buf	lit = {0},
					pat = {0};

		if (!(value_types(e) & types))
			continue;
		if ((rc = ser_value(c, e, &lit)) == CBLLM_OK && (rc = emit_literal(c, &pat, &lit)) == CBLLM_OK)
			rc = add_alternative(c, &alts, &n, &pat);
		cbllm_buf_free(&lit);
		cbllm_buf_free(&pat);
	}
	if (rc == CBLLM_OK && n == 0)
		rc = js_impossible(c, "no value of %s has the type asked", en != NULL ? "enum" : "const");
	if (rc == CBLLM_OK)
		rc = emit_alternatives(c, &alts, n, out);
	cbllm_buf_free(&alts);
	return rc;
}

/* ---------------------------------------------------------------- combinators */

/*
 * Resolve $ref r ("#", "#/$defs/NAME", "#/definitions/NAME") to its schema
 * in *target; unsupported otherwise.
 */
static int
resolve_ref(js_ctx *c, const char *r, const cJSON **target)
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
	defs = get(c->root, name == r + 8 ? "$defs" : "definitions");
	*target = cJSON_IsObject(defs) ? get(defs, key) : NULL;
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
gen_ref(js_ctx *c, const char *r, cbllm_buf *out)
{
	const cJSON *target;
	int			on_path = 0,
				rc = resolve_ref(c, r, &target);
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
	rc = gen_schema(c, target, out);
	c->path_base = base;
	path_pop(c, saved);
	return rc;
}

/* Append the alternatives of anyOf (those that admit nothing dropped). */
static int
gen_anyof(js_ctx *c, const cJSON *list, cbllm_buf *out)
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

		if ((rc = path_push_index(c, "anyOf", i++)) == CBLLM_OK)
			rc = gen_schema(c, e, &one);
		path_pop(c, saved);
		if (rc == CBLLM_OK)
			rc = add_alternative(c, &alts, &n, &one);
		else if (rc == JS_IMPOSSIBLE)
			rc = CBLLM_OK;
		cbllm_buf_free(&one);
		if (rc != CBLLM_OK)
			break;
	}
	if (rc == CBLLM_OK)
		rc = emit_alternatives(c, &alts, n, out);
	cbllm_buf_free(&alts);
	return rc;
}

/* Append the one schema of allOf. */
static int
gen_allof(js_ctx *c, const cJSON *list, cbllm_buf *out)
{
	size_t		saved = c->path.len;
	int			rc;

	if (cJSON_GetArraySize(list) != 1)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED,
					   "unsupported keyword \"allOf\" (only with a single schema)");
	if ((rc = path_push_index(c, "allOf", 0)) == CBLLM_OK)
		rc = gen_schema(c, list->child, out);
	path_pop(c, saved);
	return rc;
}

/* ---------------------------------------------------------------- schemas */

/* Append the documents the schema object s admits (its keywords checked). */
static int
gen_object_schema(js_ctx *c, const cJSON *s, int implied, cbllm_buf *out)
{
	static const char *const none[] = {NULL};
	static const char *const combinators[] = {"$ref", "anyOf", "allOf"};
	const cJSON *type = get(s, "type");
	int			types = T_ALL,
				rc;

	for (int i = 0; i < 3; i++)
	{
		const cJSON *v = get(s, combinators[i]);

		if (v == NULL)
			continue;
		if ((rc = check_alone(c, s, combinators[i], none)) != CBLLM_OK)
			return rc;
		return i == 0 ? gen_ref(c, v->valuestring, out) : i == 1 ? gen_anyof(c, v, out) : gen_allof(c, v, out);
	}
	if (type != NULL && (rc = check_type(c, type, &types)) != CBLLM_OK)
		return rc;
	if (get(s, "enum") != NULL || get(s, "const") != NULL)
		return gen_enum(c, s, types, out);
	if (type == NULL && implied == 0)
		return emit_any(c, out, JSON_SCHEMA_ANY_DEPTH);
	return gen_types(c, s, type != NULL ? types : implied, out);
}

/* Append the documents schema s admits; s's pointer is c->path. */
static int
gen_schema(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	int			implied,
				rc;

	if (!is_schema(s))
		return js_fail(c, CBLLM_ERR_INVALID, "a schema must be an object or a boolean");
	if (c->depth >= JS_MAX_NEST)
		return js_fail(c, CBLLM_ERR_UNSUPPORTED, "the schema nests deeper than %d levels", JS_MAX_NEST);
	if (cJSON_IsTrue(s))
		return emit_any(c, out, JSON_SCHEMA_ANY_DEPTH);
	if (cJSON_IsFalse(s))
		return js_impossible(c, "the schema false admits no value");
	if ((rc = check_keywords(c, s, &implied)) != CBLLM_OK)
		return rc;
	c->stack[c->depth++] = s;
	rc = gen_object_schema(c, s, implied, out);
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
check_strings(const char *s, size_t len, cbllm_err *err)
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
cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/*
 * Refuse an object anywhere in v with a key twice: cJSON finds the first,
 * other readers the last.
 */
static int
check_duplicates(const cJSON *v, cbllm_err *err)
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
		qsort(names, (size_t) n, sizeof(char *), cmp_names);
		for (i = 1; i < n && rc == CBLLM_OK; i++)
			if (strcmp(names[i - 1], names[i]) == 0)
			{
				char		line[CBLLM_ERR_MSG_LEN];

				snprintf(line, sizeof(line), "json_schema: the key \"%.100s\" appears twice in an object",
						 names[i]);
				if (err != NULL)
					clean_message(err->msg, sizeof(err->msg), line);
				rc = CBLLM_ERR_FORMAT;
			}
		free(names);
	}
	cJSON_ArrayForEach(e, v)
		if (rc == CBLLM_OK)
		rc = check_duplicates(e, err);
	return rc;
}

/* Parse the schema text: one JSON value, nothing after it but spaces. */
static int
parse_schema(const char *schema, size_t len, cJSON **root, cbllm_err *err)
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
	if ((rc = check_strings(schema, (size_t) (end - schema), err)) != CBLLM_OK ||
		(rc = check_duplicates(*root, err)) != CBLLM_OK)
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
	int			rc = parse_schema(schema, len, &root, err);

	if (rc != CBLLM_OK)
		return rc;
	memset(&c, 0, sizeof(c));
	c.root = root;
	c.err = err;
	rc = gen_schema(&c, root, &re);
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
