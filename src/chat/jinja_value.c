/*
 * jinja_value.c: the interpreter's arena, values, Python-style printing
 * (str, repr, json.dumps) and comparison, and the UTF-8 helpers.
 *
 * Printing follows CPython: str(None) is "None", str(True) "True", floats
 * print their shortest round-trip form with Python's choice of exponent
 * notation, containers print their items' repr.  json.dumps follows the
 * json module with the given separators; non-ASCII text passes through
 * unless ensure_ascii.
 */
#include "chat/jinja_value.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

#define JBLOCK_MIN (64 * 1024)

/* Fail: format the message with its line and leave through the jctx's jump. */
_Noreturn void
jx_fail(jctx *x, int line, int code, const char *fmt,...)
{
	char		msg[CBLLM_ERR_MSG_LEN];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line > 0)
		cbllm_fail(x->err, code, "chat template line %d: %s", line, msg);
	else
		cbllm_fail(x->err, code, "chat template: %s", msg);
	x->code = code;
	longjmp(x->jb, 1);
}

/* Allocate zeroed arena memory. */
void *
jx_alloc(jctx *x, size_t n)
{
	jarena	   *a = x->arena;
	jblock	   *b = a->head;
	void	   *p;

	n = (n + 15) & ~(size_t) 15;
	if (b == NULL || b->size - b->used < n)
	{
		size_t		size = n > JBLOCK_MIN ? n : JBLOCK_MIN;

		if (a->total + size > a->cap)
			jx_fail(x, 0, CBLLM_ERR_TOO_LONG, "the render needs more than %zu MiB of memory",
					a->cap >> 20);
		b = malloc(sizeof(jblock) + size);
		if (b == NULL)
			jx_fail(x, 0, CBLLM_ERR_NOMEM, "out of memory");
		b->next = a->head;
		b->used = 0;
		b->size = size;
		a->head = b;
		a->total += size;
	}
	p = b->data + b->used;
	b->used += n;
	memset(p, 0, n);
	return p;
}

/* Free an arena's blocks. */
void
jarena_free(jarena *a)
{
	while (a->head != NULL)
	{
		jblock	   *n = a->head->next;

		free(a->head);
		a->head = n;
	}
	a->total = 0;
}

/* A string value copied into the arena. */
jv
jv_str(jctx *x, const char *s, size_t n)
{
	jv			v = {JV_STR, n, {0}};
	char	   *p = jx_alloc(x, n + 1);

	if (n > 0)
		memcpy(p, s, n);
	v.u.s = p;
	return v;
}

/* A string value of a static literal. */
jv
jv_cstr(const char *s)
{
	jv			v = {JV_STR, strlen(s), {0}};

	v.u.s = s;
	return v;
}

/* An integer value. */
jv
jv_int(int64_t i)
{
	jv			v = {JV_INT, 0, {0}};

	v.u.i = i;
	return v;
}

/* A float value. */
jv
jv_float(double f)
{
	jv			v = {JV_FLOAT, 0, {0}};

	v.u.f = f;
	return v;
}

/* A boolean value. */
jv
jv_bool(bool b)
{
	jv			v = {JV_BOOL, 0, {0}};

	v.u.b = b;
	return v;
}

/* None. */
jv
jv_none(void)
{
	jv			v = {JV_NONE, 0, {0}};

	return v;
}

/* An undefined value. */
jv
jv_undef(const char *name)
{
	jv			v = {JV_UNDEF, 0, {0}};

	v.u.s = name;
	return v;
}

/* An empty list (or tuple). */
jv
jv_new_list(jctx *x, bool tuple)
{
	jv			v = {JV_LIST, 0, {0}};

	v.u.l = jx_alloc(x, sizeof(jlist));
	v.u.l->tuple = tuple;
	return v;
}

/* An empty dict (or namespace). */
jv
jv_new_dict(jctx *x, bool ns)
{
	jv			v = {JV_DICT, 0, {0}};

	v.u.d = jx_alloc(x, sizeof(jdict));
	v.u.d->ns = ns;
	return v;
}

/* Grow an arena array of jv to hold one more (old contents copied). */
static jv *
GrowArray(jctx *x, jv *old, size_t n, size_t *cap)
{
	jv		   *p;

	if (n < *cap)
		return old;
	*cap = *cap ? *cap * 2 : 8;
	p = jx_alloc(x, *cap * sizeof(jv));
	if (n > 0)
		memcpy(p, old, n * sizeof(jv));
	return p;
}

/* Append to a list. */
void
jv_list_push(jctx *x, jlist *l, jv v)
{
	l->items = GrowArray(x, l->items, l->n, &l->cap);
	l->items[l->n++] = v;
}

/* Insert or replace a dict entry. */
void
jv_dict_set(jctx *x, jdict *d, jv key, jv v)
{
	jv		   *old = jv_dict_get(d, key);
	size_t		cap = d->cap;

	if (old != NULL)
	{
		*old = v;
		return;
	}
	d->keys = GrowArray(x, d->keys, d->n, &cap);
	cap = d->cap;
	d->vals = GrowArray(x, d->vals, d->n, &cap);
	d->cap = cap;
	d->keys[d->n] = key;
	d->vals[d->n++] = v;
}

/* Find a key's value. */
jv *
jv_dict_get(const jdict *d, jv key)
{
	for (size_t i = 0; i < d->n; i++)
		if (jv_equal(d->keys[i], key))
			return &d->vals[i];
	return NULL;
}

/* Find a string key's value. */
jv *
jv_dict_gets(const jdict *d, const char *key)
{
	size_t		n = strlen(key);

	for (size_t i = 0; i < d->n; i++)
		if (d->keys[i].type == JV_STR && d->keys[i].n == n && memcmp(d->keys[i].u.s, key, n) == 0)
			return &d->vals[i];
	return NULL;
}

/* Whether v is int, float or bool. */
bool
jv_is_number(jv v)
{
	return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL;
}

/* A number as a double. */
double
jv_num(jv v)
{
	return v.type == JV_FLOAT ? v.u.f : v.type == JV_BOOL ? (double) v.u.b : (double) v.u.i;
}

/* Python truthiness. */
bool
jv_truthy(jv v)
{
	switch (v.type)
	{
		case JV_UNDEF:
		case JV_NONE:
			return false;
		case JV_BOOL:
			return v.u.b;
		case JV_INT:
			return v.u.i != 0;
		case JV_FLOAT:
			return v.u.f != 0;
		case JV_STR:
			return v.n > 0;
		case JV_LIST:
			return v.u.l->n > 0;
		case JV_DICT:
			return v.u.d->ns || v.u.d->n > 0;
		default:
			return true;
	}
}

/* Python ==. */
bool
jv_equal(jv a, jv b)
{
	if (jv_is_number(a) && jv_is_number(b))
	{
		if (a.type != JV_FLOAT && b.type != JV_FLOAT)
			return (a.type == JV_BOOL ? a.u.b : a.u.i) == (b.type == JV_BOOL ? b.u.b : b.u.i);
		return jv_num(a) == jv_num(b);
	}
	if (a.type != b.type)
		return false;
	switch (a.type)
	{
		case JV_UNDEF:
		case JV_NONE:
			return true;
		case JV_STR:
			return a.n == b.n && memcmp(a.u.s, b.u.s, a.n) == 0;
		case JV_LIST:
			if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n)
				return false;
			for (size_t i = 0; i < a.u.l->n; i++)
				if (!jv_equal(a.u.l->items[i], b.u.l->items[i]))
					return false;
			return true;
		case JV_DICT:
			if (a.u.d->ns || b.u.d->ns)
				return a.u.d == b.u.d;
			if (a.u.d->n != b.u.d->n)
				return false;
			for (size_t i = 0; i < a.u.d->n; i++)
			{
				jv		   *o = jv_dict_get(b.u.d, a.u.d->keys[i]);

				if (o == NULL || !jv_equal(a.u.d->vals[i], *o))
					return false;
			}
			return true;
		case JV_MACRO:
			return a.u.node == b.u.node;
		case JV_FUNC:
			return a.u.i == b.u.i;
		case JV_LOOP:
			return a.u.l == b.u.l && a.n == b.n;
		default:
			return false;
	}
}

/* Python ordering of two values. */
int
jv_compare(jctx *x, int line, jv a, jv b)
{
	if (jv_is_number(a) && jv_is_number(b))
	{
		if (a.type != JV_FLOAT && b.type != JV_FLOAT)
		{
			int64_t		p = a.type == JV_BOOL ? a.u.b : a.u.i,
						q = b.type == JV_BOOL ? b.u.b : b.u.i;

			return p < q ? -1 : p > q;
		}
		return jv_num(a) < jv_num(b) ? -1 : jv_num(a) > jv_num(b);
	}
	if (a.type == JV_STR && b.type == JV_STR)
	{
		size_t		n = a.n < b.n ? a.n : b.n;
		int			c = n ? memcmp(a.u.s, b.u.s, n) : 0;

		return c ? (c < 0 ? -1 : 1) : (a.n < b.n ? -1 : a.n > b.n);
	}
	if (a.type == JV_LIST && b.type == JV_LIST && a.u.l->tuple == b.u.l->tuple)
	{
		for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++)
			if (!jv_equal(a.u.l->items[i], b.u.l->items[i]))
				return jv_compare(x, line, a.u.l->items[i], b.u.l->items[i]);
		return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
	}
	jx_fail(x, line, CBLLM_ERR_INVALID, "'<' not supported between instances of '%s' and '%s'",
			jv_type_name(a), jv_type_name(b));
}

/* Python's type name. */
const char *
jv_type_name(jv v)
{
	switch (v.type)
	{
		case JV_UNDEF:
			return "Undefined";
		case JV_NONE:
			return "NoneType";
		case JV_BOOL:
			return "bool";
		case JV_INT:
			return "int";
		case JV_FLOAT:
			return "float";
		case JV_STR:
			return "str";
		case JV_LIST:
			return v.u.l->tuple ? "tuple" : "list";
		case JV_DICT:
			return v.u.d->ns ? "Namespace" : "dict";
		case JV_MACRO:
			return "Macro";
		case JV_LOOP:
			return "LoopContext";
		default:
			return "function";
	}
}

/* Append bytes to an output string, failing beyond its limit. */
void
jbuf_add(jctx *x, int line, jbuf *b, const char *s, size_t n)
{
	if (n == 0)
		return;
	if (b->limit && b->len + n > b->limit)
		jx_fail(x, line, CBLLM_ERR_TOO_LONG, "the output exceeds %zu bytes", b->limit);
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap * 2 : 256;
		char	   *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = jx_alloc(x, cap);
		if (b->len)
			memcpy(p, b->data, b->len);
		b->data = p;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

/* Append a NUL-terminated string. */
void
jbuf_addc(jctx *x, int line, jbuf *b, const char *s)
{
	jbuf_add(x, line, b, s, strlen(s));
}

/* Python's float repr. */
void
jv_float_repr(jctx *x, int line, jbuf *b, double f)
{
	char		t[40],
				o[48];
	int			prec,
				exp10;
	char	   *e;

	if (isnan(f))
	{
		jbuf_addc(x, line, b, "nan");
		return;
	}
	if (isinf(f))
	{
		jbuf_addc(x, line, b, f < 0 ? "-inf" : "inf");
		return;
	}
	for (prec = 1; prec <= 17; prec++)
	{
		snprintf(t, sizeof(t), "%.*e", prec - 1, f);
		if (strtod(t, NULL) == f)
			break;
	}
	/* t is d.ddde[+-]XX: split digits and exponent */
	e = strchr(t, 'e');
	exp10 = atoi(e + 1);
	*e = '\0';
	{
		char		dig[24];
		int			nd = 0;
		bool		neg = t[0] == '-';

		for (char *p = t + neg; *p; p++)
			if (*p != '.')
				dig[nd++] = *p;
		while (nd > 1 && dig[nd - 1] == '0')
			nd--;
		dig[nd] = '\0';
		if (exp10 < -4 || exp10 >= 16)
		{
			int			k = 0;

			k += snprintf(o + k, sizeof(o) - k, "%s%c", neg ? "-" : "", dig[0]);
			if (nd > 1)
				k += snprintf(o + k, sizeof(o) - k, ".%s", dig + 1);
			snprintf(o + k, sizeof(o) - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
		}
		else if (exp10 < 0)
		{
			int			k = snprintf(o, sizeof(o), "%s0.", neg ? "-" : "");

			for (int i = 0; i < -exp10 - 1; i++)
				o[k++] = '0';
			snprintf(o + k, sizeof(o) - k, "%s", dig);
		}
		else
		{
			int			k = snprintf(o, sizeof(o), "%s", neg ? "-" : "");

			for (int i = 0; i <= exp10; i++)
				o[k++] = i < nd ? dig[i] : '0';
			o[k++] = '.';
			if (nd > exp10 + 1)
				k += snprintf(o + k, sizeof(o) - k, "%s", dig + exp10 + 1);
			else
				o[k++] = '0';
			o[k] = '\0';
		}
	}
	jbuf_addc(x, line, b, o);
}

/* Whether Python's str.isprintable is false for a code point repr escapes (controls, separators other
 * than space, format characters, private use, noncharacters). */
static bool
NonPrintable(uint32_t c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad || c == 0x1680 || c == 0x180e ||
		(c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f) ||
		c == 0x3000 || (c >= 0xe000 && c <= 0xf8ff) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) ||
		c == 0xfffe || c == 0xffff || (c >= 0xe0000 && c <= 0xe007f) || c >= 0xf0000 ||
		(c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x110bd;
}

/* Append a string's Python repr. */
static void
StrRepr(jctx *x, int line, jbuf *b, const char *s, size_t n)
{
	bool		sq = memchr(s, '\'', n) != NULL,
				dq = memchr(s, '"', n) != NULL;
	char		q = (sq && !dq) ? '"' : '\'';

	jbuf_add(x, line, b, &q, 1);
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];
		char		esc[16];

		if (c >= 0x80)
		{
			size_t		at = i;
			uint32_t	cp = ju_next(s, n, &i);

			if (NonPrintable(cp))
			{
				snprintf(esc, sizeof(esc), cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
				jbuf_addc(x, line, b, esc);
			}
			else
				jbuf_add(x, line, b, s + at, i - at);
			i--;
			continue;
		}

		if (c == '\\' || c == (unsigned char) q)
		{
			esc[0] = '\\';
			esc[1] = (char) c;
			jbuf_add(x, line, b, esc, 2);
		}
		else if (c == '\n')
			jbuf_addc(x, line, b, "\\n");
		else if (c == '\r')
			jbuf_addc(x, line, b, "\\r");
		else if (c == '\t')
			jbuf_addc(x, line, b, "\\t");
		else if (c < 0x20 || c == 0x7f)
		{
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			jbuf_addc(x, line, b, esc);
		}
		else
			jbuf_add(x, line, b, (const char *) &s[i], 1);
	}
	jbuf_add(x, line, b, &q, 1);
}

/* Append the items of a list or dict as Python prints them. */
static void
ContainerRepr(jctx *x, int line, jbuf *b, jv v)
{
	if (v.type == JV_LIST)
	{
		jlist	   *l = v.u.l;

		jbuf_addc(x, line, b, l->tuple ? "(" : "[");
		for (size_t i = 0; i < l->n; i++)
		{
			if (i)
				jbuf_addc(x, line, b, ", ");
			jv_repr(x, line, b, l->items[i]);
		}
		jbuf_addc(x, line, b, l->tuple ? (l->n == 1 ? ",)" : ")") : "]");
		return;
	}
	jbuf_addc(x, line, b, v.u.d->ns ? "<Namespace {" : "{");
	for (size_t i = 0; i < v.u.d->n; i++)
	{
		if (i)
			jbuf_addc(x, line, b, ", ");
		jv_repr(x, line, b, v.u.d->keys[i]);
		jbuf_addc(x, line, b, ": ");
		jv_repr(x, line, b, v.u.d->vals[i]);
	}
	jbuf_addc(x, line, b, v.u.d->ns ? "}>" : "}");
}

/* Append repr(v). */
void
jv_repr(jctx *x, int line, jbuf *b, jv v)
{
	if (v.type == JV_STR)
		StrRepr(x, line, b, v.u.s, v.n);
	else if (v.type == JV_UNDEF)
		jbuf_addc(x, line, b, "Undefined");
	else
		jv_to_str(x, line, b, v);
}

/* Append str(v). */
void
jv_to_str(jctx *x, int line, jbuf *b, jv v)
{
	char		t[32];

	switch (v.type)
	{
		case JV_UNDEF:
			return;
		case JV_NONE:
			jbuf_addc(x, line, b, "None");
			return;
		case JV_BOOL:
			jbuf_addc(x, line, b, v.u.b ? "True" : "False");
			return;
		case JV_INT:
			snprintf(t, sizeof(t), "%lld", (long long) v.u.i);
			jbuf_addc(x, line, b, t);
			return;
		case JV_FLOAT:
			jv_float_repr(x, line, b, v.u.f);
			return;
		case JV_STR:
			jbuf_add(x, line, b, v.u.s, v.n);
			return;
		case JV_LIST:
		case JV_DICT:
			ContainerRepr(x, line, b, v);
			return;
		default:
			jx_fail(x, line, CBLLM_ERR_UNSUPPORTED, "cannot print a %s", jv_type_name(v));
	}
}

/* str(v) as a new string value (strings are returned as they are). */
jv
jv_stringify(jctx *x, int line, jv v)
{
	jbuf		b = {0};

	if (v.type == JV_STR)
		return v;
	jv_to_str(x, line, &b, v);
	return jv_str(x, b.data ? b.data : "", b.len);
}

/* Append a JSON string literal. */
static void
JsonString(jctx *x, int line, jbuf *b, const char *s, size_t n, bool ascii)
{
	jbuf_addc(x, line, b, "\"");
	for (size_t i = 0; i < n;)
	{
		size_t		at = i;
		uint32_t	cp = ju_next(s, n, &i);
		char		esc[16];

		if (cp == '"' || cp == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) cp;
			jbuf_add(x, line, b, esc, 2);
		}
		else if (cp == '\n')
			jbuf_addc(x, line, b, "\\n");
		else if (cp == '\r')
			jbuf_addc(x, line, b, "\\r");
		else if (cp == '\t')
			jbuf_addc(x, line, b, "\\t");
		else if (cp == '\b')
			jbuf_addc(x, line, b, "\\b");
		else if (cp == '\f')
			jbuf_addc(x, line, b, "\\f");
		else if (cp < 0x20 || (ascii && cp > 0x7e))
		{
			if (cp >= 0x10000)
			{
				uint32_t	c = cp - 0x10000;

				snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xd800 + (c >> 10), 0xdc00 + (c & 0x3ff));
			}
			else
				snprintf(esc, sizeof(esc), "\\u%04x", cp);
			jbuf_addc(x, line, b, esc);
		}
		else
			jbuf_add(x, line, b, s + at, i - at);
	}
	jbuf_addc(x, line, b, "\"");
}

/* Append a newline and depth levels of indentation (pretty JSON). */
static void
JsonIndent(jctx *x, int line, jbuf *b, int indent, int depth)
{
	jbuf_addc(x, line, b, "\n");
	for (int i = 0; i < indent * depth; i++)
		jbuf_addc(x, line, b, " ");
}

/* One JSON value at a nesting depth. */
static void
JsonValue(jctx *x, int line, jbuf *b, jv v, int indent, bool ascii, const char *isep,
		  const char *ksep, bool sort, int depth)
{
	size_t		n;

	if (depth > 200)
		jx_fail(x, line, CBLLM_ERR_TOO_LONG, "tojson: nesting deeper than 200");
	switch (v.type)
	{
		case JV_NONE:
			jbuf_addc(x, line, b, "null");
			return;
		case JV_BOOL:
			jbuf_addc(x, line, b, v.u.b ? "true" : "false");
			return;
		case JV_INT:
			jv_to_str(x, line, b, v);
			return;
		case JV_FLOAT:
			if (isnan(v.u.f))
				jbuf_addc(x, line, b, "NaN");
			else if (isinf(v.u.f))
				jbuf_addc(x, line, b, v.u.f < 0 ? "-Infinity" : "Infinity");
			else
				jv_float_repr(x, line, b, v.u.f);
			return;
		case JV_STR:
			JsonString(x, line, b, v.u.s, v.n, ascii);
			return;
		case JV_LIST:
		case JV_DICT:
			if (v.type == JV_DICT && v.u.d->ns)
				break;
			n = v.type == JV_LIST ? v.u.l->n : v.u.d->n;
			jbuf_addc(x, line, b, v.type == JV_LIST ? "[" : "{");
			if (n == 0)
			{
				jbuf_addc(x, line, b, v.type == JV_LIST ? "]" : "}");
				return;
			}
			{
				size_t	   *order = jx_alloc(x, n * sizeof(size_t));

				for (size_t i = 0; i < n; i++)
					order[i] = i;
				if (sort && v.type == JV_DICT)
					for (size_t i = 1; i < n; i++)	/* insertion sort by key */
						for (size_t j = i; j > 0 &&
							 jv_compare(x, line, v.u.d->keys[order[j - 1]], v.u.d->keys[order[j]]) > 0; j--)
						{
							size_t		t = order[j];

							order[j] = order[j - 1];
							order[j - 1] = t;
						}
				for (size_t i = 0; i < n; i++)
				{
					if (i)
						jbuf_addc(x, line, b, isep);
					if (indent >= 0)
						JsonIndent(x, line, b, indent, depth + 1);
					if (v.type == JV_LIST)
					{
						JsonValue(x, line, b, v.u.l->items[i], indent, ascii, isep, ksep, sort, depth + 1);
						continue;
					}
					{
						jv			k = v.u.d->keys[order[i]];

						if (k.type == JV_STR)
							JsonString(x, line, b, k.u.s, k.n, ascii);
						else if (k.type == JV_NONE || k.type == JV_BOOL || k.type == JV_INT || k.type == JV_FLOAT)
						{
							jbuf		t = {0};

							JsonValue(x, line, &t, k, -1, ascii, isep, ksep, sort, depth + 1);
							JsonString(x, line, b, t.data, t.len, ascii);
						}
						else
							jx_fail(x, line, CBLLM_ERR_INVALID, "tojson: keys must be str, int, float, bool or None");
						jbuf_addc(x, line, b, ksep);
						JsonValue(x, line, b, v.u.d->vals[order[i]], indent, ascii, isep, ksep, sort, depth + 1);
					}
				}
			}
			if (indent >= 0)
				JsonIndent(x, line, b, indent, depth);
			jbuf_addc(x, line, b, v.type == JV_LIST ? "]" : "}");
			return;
		default:
			break;
	}
	jx_fail(x, line, CBLLM_ERR_INVALID, "tojson: Object of type %s is not JSON serializable",
			jv_type_name(v));
}

/* Append json.dumps(v, ...). */
void
jv_to_json(jctx *x, int line, jbuf *b, jv v, int indent, bool ascii,
		   const char *item_sep, const char *key_sep, bool sort_keys)
{
	JsonValue(x, line, b, v, indent, ascii, item_sep, key_sep, sort_keys, 0);
}

/* Decode one UTF-8 code point (base/utf8.h); a byte that starts no character stands for itself. */
uint32_t
ju_next(const char *str, size_t n, size_t *i)
{
	uint32_t	cp = (unsigned char) str[*i];
	int			len = utf8_decode(str + *i, n - *i, &cp);

	*i += len > 0 ? (size_t) len : 1;
	return cp;
}

/* Python's str.isspace for one code point. */
bool
ju_isspace(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
		c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
		c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Count code points. */
size_t
ju_len(const char *s, size_t n)
{
	size_t		i = 0,
				k = 0;

	while (i < n)
	{
		ju_next(s, n, &i);
		k++;
	}
	return k;
}

/* Byte offset of a code point index. */
size_t
ju_offset(const char *s, size_t n, size_t cp)
{
	size_t		i = 0;

	while (i < n && cp > 0)
	{
		ju_next(s, n, &i);
		cp--;
	}
	return i;
}
