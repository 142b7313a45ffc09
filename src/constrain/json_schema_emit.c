/*
 * json_schema_emit.c: how the JSON Schema compiler writes, for every file
 * of it: a failure's message, which says where in the schema (its JSON
 * pointer) and is one line of UTF-8; the appends to a pattern, held to the
 * size limits (JS_MAX_OUT, JS_MAX_WORK); quantifiers; the JSON pointer of
 * the subschema being compiled.
 */
#include "constrain/json_schema_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/utf8.h"

/* ---------------------------------------------------------------- errors, output */

/* The JSON pointer of the subschema being compiled ("/" for the root). */
static const char *
PathStr(const js_ctx *c)
{
	return c->path.len > c->path_base ? c->path.data + c->path_base : "/";
}

/*
 * Copy message src into dst (size bytes) as one line of UTF-8, whatever
 * the schema's keys and strings quoted in it hold: a control character
 * becomes \u00XX, a byte that is not UTF-8 '?'; a character that does not
 * fit whole ends the copy.
 */
void
js_clean_message(char *dst, size_t size, const char *src)
{
	size_t		n = strlen(src),
				o = 0;

	for (size_t i = 0; i < n;)
	{
		const unsigned char *u = (const unsigned char *) src + i;
		int			len = u[0] < 0x20 ? 0 : utf8_len(src + i, n - i);
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
JsVformat(const js_ctx *c, char *dst, const char *fmt, va_list ap)
{
	char		msg[CBLLM_ERR_MSG_LEN],
				line[CBLLM_ERR_MSG_LEN];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	snprintf(line, sizeof(line), "json_schema: %.400s at %s", msg, PathStr(c));
	js_clean_message(dst, CBLLM_ERR_MSG_LEN, line);
}

/* Fail with code and a message that says where; return code. */
int
js_fail(js_ctx *c, int code, const char *fmt,...)
{
	char		msg[CBLLM_ERR_MSG_LEN];
	va_list		ap;

	va_start(ap, fmt);
	JsVformat(c, msg, fmt, ap);
	va_end(ap);
	return cbllm_fail(c->err, code, "%s", msg);
}

/* Note why the subschema admits no document; return JS_IMPOSSIBLE. */
int
js_impossible(js_ctx *c, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	JsVformat(c, c->why, fmt, ap);
	va_end(ap);
	return JS_IMPOSSIBLE;
}

/* Append n bytes to b, within the size limits. */
int
js_emit(js_ctx *c, cbllm_buf *b, const char *s, size_t n)
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
int
js_emits(js_ctx *c, cbllm_buf *b, const char *s)
{
	return js_emit(c, b, s, strlen(s));
}

/* Append another buffer's bytes. */
int
js_emitb(js_ctx *c, cbllm_buf *b, const cbllm_buf *src)
{
	return js_emit(c, b, src->data, src->len);
}

/* Append a formatted string (short). */
int
js_emitf(js_ctx *c, cbllm_buf *b, const char *fmt,...)
{
	char		s[64];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(s, sizeof(s), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(s))
		return js_fail(c, CBLLM_ERR_INTERNAL, "a formatted pattern piece is too long");
	return js_emit(c, b, s, (size_t) n);
}

/*
 * Append a quantifier for {lo,hi} (hi < 0: unbounded) to what precedes it,
 * which must be an atom; {1,1} appends nothing.  The caller leaves out the
 * atom altogether for {0,0}.
 */
int
js_emit_quant(js_ctx *c, cbllm_buf *b, int64_t lo, int64_t hi)
{
	if (hi < 0)
		return lo == 0 ? js_emits(c, b, "*") : lo == 1 ? js_emits(c, b, "+") :
			js_emitf(c, b, "{%lld,}", (long long) lo);
	if (lo == 1 && hi == 1)
		return CBLLM_OK;
	if (lo == 0 && hi == 1)
		return js_emits(c, b, "?");
	if (lo == hi)
		return js_emitf(c, b, "{%lld}", (long long) lo);
	return js_emitf(c, b, "{%lld,%lld}", (long long) lo, (long long) hi);
}

/* ---------------------------------------------------------------- the pointer */

/* Append one reference token to the pointer, escaped (~0, ~1). */
int
js_path_push(js_ctx *c, const char *seg)
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
int
js_path_push_index(js_ctx *c, const char *key, int i)
{
	char		s[16];
	int			rc = js_path_push(c, key);

	snprintf(s, sizeof(s), "%d", i);
	return rc != CBLLM_OK ? rc : js_path_push(c, s);
}

/* Cut the pointer back to len bytes. */
void
js_path_pop(js_ctx *c, size_t len)
{
	c->path.len = len;
	if (c->path.data != NULL)
		c->path.data[len] = '\0';
}
