/*
 * json_schema_internal.h: what the files of the JSON Schema compiler share;
 * json_schema.h is its public interface and nothing else includes this.
 *
 * json_schema.c walks a schema (types, enum and const, $ref, anyOf, allOf)
 * and its opening comment says what the documents admitted are.  The
 * keywords are checked in json_schema_keywords.c; each type has a file of
 * its own: json_schema_number.c, json_schema_string.c (with the formats in
 * json_schema_format.c), json_schema_object.c, json_schema_array.c.  They
 * all write through json_schema_emit.c (messages that say where, appends
 * within the limits, the JSON pointer) and read and write JSON values
 * through json_schema_value.c (a keyword's value, literals, any value).
 *
 * Every function here that compiles returns CBLLM_OK, a failure status
 * (err set), or JS_IMPOSSIBLE: the subschema admits no document, c->why
 * says why, and the caller drops the branch where it is optional.
 */
#ifndef CBLLM_JSON_SCHEMA_INTERNAL_H
#define CBLLM_JSON_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "constrain/json_schema.h"

#define JS_MAX_NEST 64			/* subschemas on one path */
#define JS_MAX_OUT (1 << 20)	/* bytes of regex */
#define JS_MAX_WORK (32 << 20)	/* bytes of pattern made in all */
#define JS_IMPOSSIBLE 1			/* internal: the subschema admits no document */
#define JS_EXACT 9007199254740992.0 /* 2^53: numbers above lose integers */

/* one character of a JSON string: unescaped, or a short escape; a number's exponent has at
 * most 3 digits, so that every number generated is one PostgreSQL's numeric (jsonb) holds */
#define RE_CHAR "(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt])"
#define RE_STRING "\"" RE_CHAR "*\""
#define RE_INTEGER "-?(?:0|[1-9][0-9]*)"
#define RE_NUMBER RE_INTEGER "(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?"

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

#define N_TYPES 7

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

/* ---------------------------------------------------------------- json_schema_emit.c */

/* Copy message src into dst (size bytes) as one line of UTF-8. */
void		js_clean_message(char *dst, size_t size, const char *src);

/* Fail with code and a message that says where; return code. */
int			js_fail(js_ctx *c, int code, const char *fmt,...) __attribute__((format(printf, 3, 4)));

/* Note why the subschema admits no document; return JS_IMPOSSIBLE. */
int			js_impossible(js_ctx *c, const char *fmt,...) __attribute__((format(printf, 2, 3)));

/* Append n bytes to b, within the size limits. */
int			js_emit(js_ctx *c, cbllm_buf *b, const char *s, size_t n);

/* Append a NUL-terminated string. */
int			js_emits(js_ctx *c, cbllm_buf *b, const char *s);

/* Append another buffer's bytes. */
int			js_emitb(js_ctx *c, cbllm_buf *b, const cbllm_buf *src);

/* Append a formatted string (short). */
int			js_emitf(js_ctx *c, cbllm_buf *b, const char *fmt,...) __attribute__((format(printf, 3, 4)));

/* Append a quantifier for {lo,hi} (hi < 0: unbounded) to the atom before it. */
int			js_emit_quant(js_ctx *c, cbllm_buf *b, int64_t lo, int64_t hi);

/* Append one reference token to the pointer, escaped (~0, ~1). */
int			js_path_push(js_ctx *c, const char *seg);

/* Append two tokens: a keyword and an array index. */
int			js_path_push_index(js_ctx *c, const char *key, int i);

/* Cut the pointer back to len bytes. */
void		js_path_pop(js_ctx *c, size_t len);

/* ---------------------------------------------------------------- json_schema_value.c */

/* The member key of object s, or NULL. */
const cJSON *js_get(const cJSON *s, const char *key);

/* Whether v is a schema: an object or a boolean. */
bool		js_is_schema(const cJSON *v);

/* Whether number v is a whole number. */
bool		js_is_integral(const cJSON *v);

/* The types value v has (a whole number is an integer and a number). */
int			js_value_types(const cJSON *v);

/* The value of count keyword key of s, or dflt when absent. */
int64_t		js_count_of(const cJSON *s, const char *key, int64_t dflt);

/* Append s as a JSON string literal (the escapes the string rule allows). */
int			js_ser_string(js_ctx *c, const char *s, cbllm_buf *out);

/* Append value v as compact JSON (enum and const values). */
int			js_ser_value(js_ctx *c, const cJSON *v, cbllm_buf *out);

/* Append the pattern that matches exactly the bytes of lit. */
int			js_emit_literal(js_ctx *c, cbllm_buf *out, const cbllm_buf *lit);

/* Append any value nesting at most d levels deep (d >= 0). */
int			js_emit_any(js_ctx *c, cbllm_buf *out, int d);

/* ---------------------------------------------------------------- json_schema_keywords.c */

/* Check the value of "type"; set *types to the set it names. */
int			js_check_type(js_ctx *c, const cJSON *v, int *types);

/* Check every keyword of schema object s; set *implied to the types its typed keywords apply to. */
int			js_check_keywords(js_ctx *c, const cJSON *s, int *implied);

/* Refuse a keyword of s that constrains and may not sit beside key (allowed: a NULL-ended list that may). */
int			js_check_alone(js_ctx *c, const cJSON *s, const char *key, const char *const *allowed);

/* ---------------------------------------------------------------- the types' files */

/* Append the integers within the schema's bounds (json_schema_number.c). */
int			js_gen_integer(js_ctx *c, const cJSON *s, cbllm_buf *out);

/* Append any number: "number" takes no bound (json_schema_number.c). */
int			js_gen_number(js_ctx *c, const cJSON *s, cbllm_buf *out);

/* Append the strings the schema admits (json_schema_string.c). */
int			js_gen_string(js_ctx *c, const cJSON *s, cbllm_buf *out);

/* Append a string of the format name (json_schema_format.c). */
int			js_gen_format(js_ctx *c, const char *name, cbllm_buf *out);

/* Append the objects the schema admits (json_schema_object.c). */
int			js_gen_object(js_ctx *c, const cJSON *s, cbllm_buf *out);

/* Append the arrays the schema admits (json_schema_array.c). */
int			js_gen_array(js_ctx *c, const cJSON *s, cbllm_buf *out);

/* ---------------------------------------------------------------- json_schema.c */

/* Append the documents schema s admits; s's pointer is c->path. */
int			js_gen_schema(js_ctx *c, const cJSON *s, cbllm_buf *out);

#endif
