/*
 * jinja_builtins.c: the filters and tests of the chat-template language, as
 * Jinja2 defines them, in two tables that the parser consults by name.
 *
 * String filters apply to str() of their input, as Jinja2's do (so
 * "None|trim" is "None" and an undefined value is ""); no output is
 * autoescaped (transformers renders without autoescape), so "safe" is the
 * identity and "escape" returns the HTML-escaped text as a plain string.
 * "tojson" is transformers' json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False).  sort, unique, min and max compare
 * strings case-insensitively unless case_sensitive=true, as in Jinja2.
 */
#include "chat/jinja_eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

typedef jv	(*filter_fn) (jrender *r, jv in, const jargs *a);
typedef bool (*test_fn) (jrender *r, jv in, const jargs *a);

/* str() of a filter's input (undefined gives ""). */
static jv
Str(jrender *r, const jargs *a, jv v)
{
	return v.type == JV_UNDEF ? jv_cstr("") : jv_stringify(&r->x, a->line, v);
}

/* A boolean argument. */
static bool
BoolArg(jrender *r, const jargs *a, int i, const char *name, bool dflt)
{
	jv			v = jr_arg(r, a, i, name, jv_bool(dflt));

	return jv_truthy(v);
}

/* Follow a dotted attribute path ("a.b", "0") with Jinja2's getitem. */
static jv
AttrPath(jrender *r, int line, jv v, jv path)
{
	size_t		lo = 0;

	if (path.type == JV_INT)
		return jr_getitem(r, line, v, path);
	if (path.type != JV_STR)
		jx_fail(&r->x, line, CBLLM_ERR_INVALID, "attribute must be a string");
	while (lo <= path.n)
	{
		size_t		hi = lo;
		bool		digits = true;
		jv			part;

		while (hi < path.n && path.u.s[hi] != '.')
			digits &= path.u.s[hi] >= '0' && path.u.s[hi] <= '9', hi++;
		part = jv_str(&r->x, path.u.s + lo, hi - lo);
		if (digits && hi > lo && hi - lo < 18)
			part = jv_int(strtoll(part.u.s, NULL, 10));
		v = jr_getitem(r, line, v, part);
		lo = hi + 1;
	}
	return v;
}

/* The sort key of a value: lower-cased when case-insensitive, after an attribute path. */
static jv
SortKey(jrender *r, int line, jv v, jv attr, bool cs)
{
	if (attr.type != JV_NONE)
		v = AttrPath(r, line, v, attr);
	if (!cs && v.type == JV_STR)
		v = jr_case(r, line, v, 'l');
	return v;
}

/* Stable merge sort of items[0..n) by keys[0..n). */
static void
MergeSort(jrender *r, int line, jv *items, jv *keys, size_t n, bool rev)
{
	jv		   *ti,
			   *tk;
	size_t		h = n / 2,
				i = 0,
				j = h,
				k = 0;

	if (n < 2)
		return;
	MergeSort(r, line, items, keys, h, rev);
	MergeSort(r, line, items + h, keys + h, n - h, rev);
	ti = jx_alloc(&r->x, n * sizeof(jv));
	tk = jx_alloc(&r->x, n * sizeof(jv));
	while (i < h || j < n)
	{
		bool		left;

		jr_step(r, line);
		if (i == h)
			left = false;
		else if (j == n)
			left = true;
		else
		{
			int			c = jv_compare(&r->x, line, keys[i], keys[j]);

			left = rev ? c >= 0 : c <= 0;
		}
		ti[k] = left ? items[i] : items[j];
		tk[k++] = left ? keys[i++] : keys[j++];
	}
	memcpy(items, ti, n * sizeof(jv));
	memcpy(keys, tk, n * sizeof(jv));
}

/* A copy of an iterable's items as a new list. */
static jv
ListOf(jrender *r, int line, jv in)
{
	jlist	   *src = jr_iter(r, line, in);
	jv			out = jv_new_list(&r->x, false);

	for (size_t i = 0; i < src->n; i++)
		jv_list_push(&r->x, out.u.l, src->items[i]);
	return out;
}

/* Sorted copy of an iterable by keys made with attr and case sensitivity. */
static jv
Sorted(jrender *r, int line, jv in, jv attr, bool cs, bool rev)
{
	jv			out = ListOf(r, line, in);
	jlist	   *l = out.u.l;
	jv		   *keys = jx_alloc(&r->x, (l->n + 1) * sizeof(jv));

	for (size_t i = 0; i < l->n; i++)
		keys[i] = SortKey(r, line, l->items[i], attr, cs);
	MergeSort(r, line, l->items, keys, l->n, rev);
	return out;
}

/* Filter abs: the absolute value of a number. */
static jv F_abs(jrender *r, jv in, const jargs *a)
{
	if (in.type == JV_FLOAT)
		return jv_float(fabs(in.u.f));
	if (in.type == JV_INT || in.type == JV_BOOL)
	{
		int64_t		v = in.type == JV_BOOL ? in.u.b : in.u.i;

		if (v == INT64_MIN)
			jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "integer result beyond 64 bits");
		return jv_int(v < 0 ? -v : v);
	}
	jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "bad operand type for abs(): '%s'", jv_type_name(in));
}

/* Filter attr: an attribute by name. */
static jv F_attr(jrender *r, jv in, const jargs *a)
{
	jv			name = jr_arg(r, a, 0, NULL, jv_none());

	if (name.type != JV_STR)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "attr name must be a string");
	return jinja_getattr(r, a->line, in, jv_str(&r->x, name.u.s, name.n).u.s);
}

/* Filter capitalize: str() with its first letter upper case, the rest lower. */
static jv F_capitalize(jrender *r, jv in, const jargs *a)
{
	return jr_case(r, a->line, Str(r, a, in), 'c');
}

/* Filter default: the default when the value is undefined (or false, with boolean=true). */
static jv F_default(jrender *r, jv in, const jargs *a)
{
	if (in.type == JV_UNDEF || (BoolArg(r, a, 1, "boolean", false) && !jv_truthy(in)))
		return jr_arg(r, a, 0, "default_value", jv_cstr(""));
	return in;
}

/* Filter dictsort: a dict's (key, value) pairs sorted by key or value. */
static jv F_dictsort(jrender *r, jv in, const jargs *a)
{
	jv			by = jr_arg(r, a, 1, "by", jv_cstr("key"));
	jv			pairs = jv_new_list(&r->x, false);
	int			idx;

	if (in.type != JV_DICT || in.u.d->ns)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "dictsort needs a dict");
	if (by.type != JV_STR || (!jv_equal(by, jv_cstr("key")) && !jv_equal(by, jv_cstr("value"))))
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "You can only sort by either \"key\" or \"value\"");
	idx = by.u.s[0] == 'k' ? 0 : 1;
	for (size_t i = 0; i < in.u.d->n; i++)
	{
		jv			t = jv_new_list(&r->x, true);

		jv_list_push(&r->x, t.u.l, in.u.d->keys[i]);
		jv_list_push(&r->x, t.u.l, in.u.d->vals[i]);
		jv_list_push(&r->x, pairs.u.l, t);
	}
	return Sorted(r, a->line, pairs, jv_int(idx), BoolArg(r, a, 0, "case_sensitive", false),
				  BoolArg(r, a, 2, "reverse", false));
}

/* Filter escape: HTML-escaped str() (a plain string: nothing is autoescaped). */
static jv F_escape(jrender *r, jv in, const jargs *a)
{
	jv			s = Str(r, a, in);
	jbuf		b = {0};

	for (size_t i = 0; i < s.n; i++)
	{
		const char *rep = NULL;

		switch (s.u.s[i])
		{
			case '&': rep = "&amp;"; break;
			case '<': rep = "&lt;"; break;
			case '>': rep = "&gt;"; break;
			case '"': rep = "&#34;"; break;
			case '\'': rep = "&#39;"; break;
		}
		if (rep)
			jbuf_addc(&r->x, a->line, &b, rep);
		else
			jbuf_add(&r->x, a->line, &b, s.u.s + i, 1);
	}
	return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
}

/* Filter first: the first item. */
static jv F_first(jrender *r, jv in, const jargs *a)
{
	jlist	   *l = jr_iter(r, a->line, in);

	return l->n ? l->items[0] : jv_undef(NULL);
}

/* Filter last: the last item. */
static jv F_last(jrender *r, jv in, const jargs *a)
{
	jlist	   *l = jr_iter(r, a->line, in);

	return l->n ? l->items[l->n - 1] : jv_undef(NULL);
}

/* Parse a Python int() or float() literal from a string; false when it is not one. */
static bool
ParseNumber(jv s, bool want_float, int64_t *iv, double *fv)
{
	char		t[128];
	size_t		k = 0;
	char	   *end;
	jv			st = s;

	while (st.n && ju_isspace((unsigned char) st.u.s[0]))
		st.u.s++, st.n--;
	while (st.n && ju_isspace((unsigned char) st.u.s[st.n - 1]))
		st.n--;
	if (st.n == 0 || st.n >= sizeof(t))
		return false;
	for (size_t i = 0; i < st.n; i++)
		if (st.u.s[i] != '_')
			t[k++] = st.u.s[i];
	t[k] = '\0';
	errno = 0;
	if (want_float)
		*fv = strtod(t, &end);
	else
		*iv = strtoll(t, &end, 10);
	return *end == '\0' && errno == 0 && !(want_float && (t[0] == '0' && (t[1] == 'x' || t[1] == 'X')));
}

/* Filter float: a number or numeric string as a float, else the default. */
static jv F_float(jrender *r, jv in, const jargs *a)
{
	double		f;
	int64_t		i;

	if (in.type == JV_FLOAT)
		return in;
	if (in.type == JV_INT || in.type == JV_BOOL)
		return jv_float(jv_num(in));
	if (in.type == JV_STR && ParseNumber(in, true, &i, &f))
		return jv_float(f);
	return jr_arg(r, a, 0, "default", jv_float(0.0));
}

/* Filter int: a number or numeric string as an int, else the default. */
static jv F_int(jrender *r, jv in, const jargs *a)
{
	double		f;
	int64_t		i;

	if (jr_arg(r, a, 1, "base", jv_int(10)).u.i != 10)
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "int filter with a base other than 10");
	if (in.type == JV_INT)
		return in;
	if (in.type == JV_BOOL)
		return jv_int(in.u.b);
	if (in.type == JV_FLOAT && isfinite(in.u.f) && fabs(in.u.f) < 9.2e18)
		return jv_int((int64_t) in.u.f);
	if (in.type == JV_STR && ParseNumber(in, false, &i, &f))
		return jv_int(i);
	if (in.type == JV_STR && ParseNumber(in, true, &i, &f) && isfinite(f) && fabs(f) < 9.2e18)
		return jv_int((int64_t) f);
	return jr_arg(r, a, 0, "default", jv_int(0));
}

/* Filter indent: every line but the first (or also the first, or blank ones) indented. */
static jv F_indent(jrender *r, jv in, const jargs *a)
{
	jv			w = jr_arg(r, a, 0, "width", jv_int(4)),
				ind,
				lines;
	bool		first = BoolArg(r, a, 1, "first", false),
				blank = BoolArg(r, a, 2, "blank", false);
	jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};
	jbuf		s = {0};

	if (w.type == JV_STR)
		ind = w;
	else if (w.type == JV_INT && w.u.i >= 0 && w.u.i <= 1000)
	{
		char	   *sp = jx_alloc(&r->x, (size_t) w.u.i + 1);

		memset(sp, ' ', (size_t) w.u.i);
		ind = (jv) {JV_STR, (size_t) w.u.i, {.s = sp}};
	}
	else
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "indent width must be a string or an int in 0..1000");
	jv_to_str(&r->x, a->line, &s, Str(r, a, in));
	jbuf_addc(&r->x, a->line, &s, "\n");
	lines = jr_splitlines(r, (jv) {JV_STR, s.len, {.s = s.data}}, false);
	for (size_t i = 0; i < lines.u.l->n; i++)
	{
		jv			ln = lines.u.l->items[i];

		if (i > 0)
			jbuf_addc(&r->x, a->line, &b, "\n");
		if ((i == 0 && first) || (i > 0 && (blank || ln.n > 0)))
			jbuf_add(&r->x, a->line, &b, ind.u.s, ind.n);
		jbuf_add(&r->x, a->line, &b, ln.u.s, ln.n);
	}
	return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
}

/* Filter items: a dict's (key, value) pairs. */
static jv F_items(jrender *r, jv in, const jargs *a)
{
	jmethod		m = {in, "items"};

	if (in.type == JV_UNDEF)
		return jv_new_list(&r->x, false);
	if (in.type != JV_DICT || in.u.d->ns)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "can only get item pairs from a mapping");
	return jinja_call_method(r, &m, a);
}

/* Filter join: str() of the items joined by a separator. */
static jv F_join(jrender *r, jv in, const jargs *a)
{
	jv			sep = Str(r, a, jr_arg(r, a, 0, "d", jv_cstr(""))),
				attr = jr_arg(r, a, 1, "attribute", jv_none());
	jlist	   *l = jr_iter(r, a->line, in);
	jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};

	for (size_t i = 0; i < l->n; i++)
	{
		jv			v = attr.type == JV_NONE ? l->items[i] : AttrPath(r, a->line, l->items[i], attr);

		if (i)
			jbuf_add(&r->x, a->line, &b, sep.u.s, sep.n);
		jv_to_str(&r->x, a->line, &b, v);
	}
	return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
}

/* Filter length: the number of items (code points of a string). */
static jv F_length(jrender *r, jv in, const jargs *a)
{
	switch (in.type)
	{
		case JV_UNDEF: return jv_int(0);
		case JV_STR: return jv_int((int64_t) ju_len(in.u.s, in.n));
		case JV_LIST: return jv_int((int64_t) in.u.l->n);
		case JV_DICT:
			if (!in.u.d->ns)
				return jv_int((int64_t) in.u.d->n);
			break;
		default: break;
	}
	jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "object of type '%s' has no len()", jv_type_name(in));
}

/* Filter list: the items as a list. */
static jv F_list(jrender *r, jv in, const jargs *a)
{
	return ListOf(r, a->line, in);
}

/* Filter lower: str() in lower case. */
static jv F_lower(jrender *r, jv in, const jargs *a)
{
	return jr_case(r, a->line, Str(r, a, in), 'l');
}

/* The arguments after the first (a filter's or test's own, in map and select). */
static jargs
Rest(const jargs *a)
{
	jargs		b = *a;

	b.n = a->n > 0 ? a->n - 1 : 0;
	b.pos = a->pos + (a->n > 0);
	return b;
}

/* Filter map: an attribute of each item, or a filter applied to each. */
static jv F_map(jrender *r, jv in, const jargs *a)
{
	jlist	   *l = jr_iter(r, a->line, in);
	jv			out = jv_new_list(&r->x, false),
				attr = jr_arg(r, a, -1, "attribute", jv_none()),
				dflt = jr_arg(r, a, -1, "default", jv_undef(NULL));
	int			fid = -1;
	jargs		rest = Rest(a);

	if (attr.type == JV_NONE)
	{
		jv			name = jr_arg(r, a, 0, NULL, jv_none());

		if (name.type != JV_STR || (fid = jinja_filter_id(jv_str(&r->x, name.u.s, name.n).u.s)) < 0)
			jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "map needs attribute= or a known filter name");
	}
	for (size_t i = 0; i < l->n; i++)
	{
		jv			v;

		jr_step(r, a->line);
		if (fid >= 0)
			v = jinja_filter(r, fid, l->items[i], &rest);
		else
		{
			v = AttrPath(r, a->line, l->items[i], attr);
			if (v.type == JV_UNDEF && dflt.type != JV_UNDEF)
				v = dflt;
		}
		jv_list_push(&r->x, out.u.l, v);
	}
	return out;
}

/* min or max of an iterable. */
static jv
Extreme(jrender *r, jv in, const jargs *a, int sign)
{
	jv			sorted = Sorted(r, a->line, in, jr_arg(r, a, 1, "attribute", jv_none()),
								BoolArg(r, a, 0, "case_sensitive", false), sign > 0);

	return sorted.u.l->n ? sorted.u.l->items[0] : jv_undef(NULL);
}

/* Filter max: the largest item. */
static jv F_max(jrender *r, jv in, const jargs *a)
{
	return Extreme(r, in, a, 1);
}

/* Filter min: the smallest item. */
static jv F_min(jrender *r, jv in, const jargs *a)
{
	return Extreme(r, in, a, -1);
}

/* Filter replace: str() with occurrences of a substring replaced. */
static jv F_replace(jrender *r, jv in, const jargs *a)
{
	jv			cnt = jr_arg(r, a, 2, "count", jv_none());

	if (cnt.type != JV_NONE && cnt.type != JV_INT)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "replace count must be an integer");
	return jr_replace(r, a->line, Str(r, a, in), Str(r, a, jr_arg(r, a, 0, "old", jv_cstr(""))),
					  Str(r, a, jr_arg(r, a, 1, "new", jv_cstr(""))), cnt.type == JV_INT ? cnt.u.i : -1);
}

/* Filter reverse: the items (or code points) in reverse order. */
static jv F_reverse(jrender *r, jv in, const jargs *a)
{
	jv			out;

	if (in.type == JV_STR)
	{
		jbuf		b = {0};
		size_t		i = in.n;

		while (i > 0)
		{
			size_t		at = i - 1;

			while (at > 0 && utf8_is_cont((uint8_t) in.u.s[at]) && i - at < 4)
				at--;
			jbuf_add(&r->x, a->line, &b, in.u.s + at, i - at);
			i = at;
		}
		return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
	}
	out = ListOf(r, a->line, in);
	for (size_t i = 0, j = out.u.l->n; i + 1 < j; i++, j--)
	{
		jv			t = out.u.l->items[i];

		out.u.l->items[i] = out.u.l->items[j - 1];
		out.u.l->items[j - 1] = t;
	}
	return out;
}

/* Filter round: a number rounded (common, ceil or floor) to a precision. */
static jv F_round(jrender *r, jv in, const jargs *a)
{
	int64_t		prec = jr_arg(r, a, 0, "precision", jv_int(0)).u.i;
	jv			method = jr_arg(r, a, 1, "method", jv_cstr("common"));
	double		v,
				p;
	char		t[400];

	if (!jv_is_number(in))
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "round needs a number, not %s", jv_type_name(in));
	if (prec < 0 || prec > 30 || method.type != JV_STR)
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "round precision outside 0..30");
	v = jv_num(in);
	p = pow(10, (double) prec);
	if (jv_equal(method, jv_cstr("ceil")))
		return jv_float(ceil(v * p) / p);
	if (jv_equal(method, jv_cstr("floor")))
		return jv_float(floor(v * p) / p);
	if (!jv_equal(method, jv_cstr("common")))
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "method must be common, ceil or floor");
	if (in.type != JV_FLOAT)
		return in.type == JV_BOOL ? jv_int(in.u.b) : in;	/* Python's round(int, n) is the int */
	if (!isfinite(v))
		return jv_float(v);
	snprintf(t, sizeof(t), "%.*f", (int) prec, v);
	return jv_float(strtod(t, NULL));
}

/* select/reject (attr false) and selectattr/rejectattr (attr true). */
static jv
Select(jrender *r, jv in, const jargs *a, bool attr, bool keep)
{
	jlist	   *l = jr_iter(r, a->line, in);
	jv			out = jv_new_list(&r->x, false),
				path = attr ? jr_arg(r, a, 0, NULL, jv_none()) : jv_none();
	jargs		rest = attr ? Rest(a) : *a;
	jv			test = jr_arg(r, &rest, 0, NULL, jv_none());
	int			tid = -1;
	jargs		targs = Rest(&rest);

	if (test.type == JV_STR && (tid = jinja_test_id(jv_str(&r->x, test.u.s, test.n).u.s)) < 0)
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "unsupported test '%.*s'", (int) test.n, test.u.s);
	for (size_t i = 0; i < l->n; i++)
	{
		jv			v = attr ? AttrPath(r, a->line, l->items[i], path) : l->items[i];
		bool		ok;

		jr_step(r, a->line);
		ok = tid >= 0 ? jinja_test(r, tid, v, &targs) : jv_truthy(v);
		if (ok == keep)
			jv_list_push(&r->x, out.u.l, l->items[i]);
	}
	return out;
}

/* Filter reject: the items that fail a test. */
static jv F_reject(jrender *r, jv in, const jargs *a)
{
	return Select(r, in, a, false, false);
}

/* Filter rejectattr: the items whose attribute fails a test. */
static jv F_rejectattr(jrender *r, jv in, const jargs *a)
{
	return Select(r, in, a, true, false);
}

/* Filter select: the items that pass a test. */
static jv F_select(jrender *r, jv in, const jargs *a)
{
	return Select(r, in, a, false, true);
}

/* Filter selectattr: the items whose attribute passes a test. */
static jv F_selectattr(jrender *r, jv in, const jargs *a)
{
	return Select(r, in, a, true, true);
}

/* Filter safe: the value unchanged (no autoescaping to disable). */
static jv F_safe(jrender *r, jv in, const jargs *a)
{
	return in;
}

/* Filter sort: the items sorted, stably. */
static jv F_sort(jrender *r, jv in, const jargs *a)
{
	return Sorted(r, a->line, in, jr_arg(r, a, 2, "attribute", jv_none()),
				  BoolArg(r, a, 1, "case_sensitive", false), BoolArg(r, a, 0, "reverse", false));
}

/* Filter string: str() of the value. */
static jv F_string(jrender *r, jv in, const jargs *a)
{
	return Str(r, a, in);
}

/* Filter sum: the sum of numbers. */
static jv F_sum(jrender *r, jv in, const jargs *a)
{
	jlist	   *l = jr_iter(r, a->line, in);
	jv			attr = jr_arg(r, a, 0, "attribute", jv_none()),
				acc = jr_arg(r, a, 1, "start", jv_int(0));

	for (size_t i = 0; i < l->n; i++)
	{
		jv			v = attr.type == JV_NONE ? l->items[i] : AttrPath(r, a->line, l->items[i], attr);

		if (!jv_is_number(v) || !jv_is_number(acc))
			jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "sum of non-numbers");
		if (v.type == JV_FLOAT || acc.type == JV_FLOAT)
			acc = jv_float(jv_num(acc) + jv_num(v));
		else if (__builtin_add_overflow(acc.type == JV_BOOL ? acc.u.b : acc.u.i, v.type == JV_BOOL ? v.u.b : v.u.i,
										&acc.u.i))
			jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "integer result beyond 64 bits");
		else
			acc.type = JV_INT;
	}
	return acc;
}

/* Filter title: str() with each word capitalised (Jinja2's word boundaries). */
static jv F_title(jrender *r, jv in, const jargs *a)
{
	return jr_case(r, a->line, Str(r, a, in), 'w');
}

/* Filter tojson: json.dumps of the value as transformers defines it. */
static jv F_tojson(jrender *r, jv in, const jargs *a)
{
	jv			ascii = jr_arg(r, a, 0, "ensure_ascii", jv_bool(false)),
				indent = jr_arg(r, a, 1, "indent", jv_none()),
				seps = jr_arg(r, a, 2, "separators", jv_none());
	bool		sort = BoolArg(r, a, 3, "sort_keys", false);
	const char *isep = ", ",
			   *ksep = ": ";
	jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};
	int			ind = -1;

	if (indent.type == JV_INT && indent.u.i >= 0 && indent.u.i <= 64)
	{
		ind = (int) indent.u.i;
		isep = ",";
	}
	else if (indent.type != JV_NONE)
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "tojson indent must be none or an int in 0..64");
	if (seps.type == JV_LIST && seps.u.l->n == 2 && seps.u.l->items[0].type == JV_STR &&
		seps.u.l->items[1].type == JV_STR)
	{
		isep = jv_str(&r->x, seps.u.l->items[0].u.s, seps.u.l->items[0].n).u.s;
		ksep = jv_str(&r->x, seps.u.l->items[1].u.s, seps.u.l->items[1].n).u.s;
	}
	else if (seps.type != JV_NONE)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "tojson separators must be two strings");
	jv_to_json(&r->x, a->line, &b, in, ind, jv_truthy(ascii), isep, ksep, sort);
	return jv_str(&r->x, b.data, b.len);
}

/* Filter trim: str() without surrounding whitespace or the given characters. */
static jv F_trim(jrender *r, jv in, const jargs *a)
{
	jv			chars = jr_arg(r, a, 0, "chars", jv_none());

	if (chars.type != JV_NONE && chars.type != JV_STR)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "trim chars must be a string");
	return jr_strip(r, Str(r, a, in), chars.type == JV_STR ? &chars : NULL, true, true);
}

/* Filter unique: the items without repeats, first occurrence kept. */
static jv F_unique(jrender *r, jv in, const jargs *a)
{
	jlist	   *l = jr_iter(r, a->line, in);
	jv			out = jv_new_list(&r->x, false),
				seen = jv_new_list(&r->x, false),
				attr = jr_arg(r, a, 1, "attribute", jv_none());
	bool		cs = BoolArg(r, a, 0, "case_sensitive", false);

	for (size_t i = 0; i < l->n; i++)
	{
		jv			k = SortKey(r, a->line, l->items[i], attr, cs);
		bool		dup = false;

		for (size_t j = 0; j < seen.u.l->n && !dup; j++)
		{
			jr_step(r, a->line);
			dup = jv_equal(seen.u.l->items[j], k);
		}
		if (!dup)
		{
			jv_list_push(&r->x, seen.u.l, k);
			jv_list_push(&r->x, out.u.l, l->items[i]);
		}
	}
	return out;
}

/* Filter upper: str() in upper case. */
static jv F_upper(jrender *r, jv in, const jargs *a)
{
	return jr_case(r, a->line, Str(r, a, in), 'u');
}

static const struct
{
	const char *name;
	filter_fn	fn;
}			FILTERS[] = {
	{"abs", F_abs}, {"attr", F_attr}, {"capitalize", F_capitalize}, {"count", F_length},
	{"d", F_default}, {"default", F_default}, {"dictsort", F_dictsort}, {"e", F_escape},
	{"escape", F_escape}, {"first", F_first}, {"float", F_float}, {"forceescape", F_escape},
	{"indent", F_indent}, {"int", F_int}, {"items", F_items}, {"join", F_join}, {"last", F_last},
	{"length", F_length}, {"list", F_list}, {"lower", F_lower}, {"map", F_map}, {"max", F_max},
	{"min", F_min}, {"reject", F_reject}, {"rejectattr", F_rejectattr}, {"replace", F_replace},
	{"reverse", F_reverse}, {"round", F_round}, {"safe", F_safe}, {"select", F_select},
	{"selectattr", F_selectattr}, {"sort", F_sort}, {"string", F_string}, {"sum", F_sum},
	{"title", F_title}, {"tojson", F_tojson}, {"trim", F_trim}, {"unique", F_unique},
	{"upper", F_upper},
};

/* The index of a filter. */
int
jinja_filter_id(const char *name)
{
	for (size_t i = 0; i < sizeof(FILTERS) / sizeof(FILTERS[0]); i++)
		if (!strcmp(FILTERS[i].name, name))
			return (int) i;
	return -1;
}

/* Apply a filter. */
jv
jinja_filter(jrender *r, int id, jv in, const jargs *a)
{
	jr_step(r, a->line);
	return FILTERS[id].fn(r, in, a);
}

/* The one argument of a comparison test. */
static jv
Other(jrender *r, const jargs *a)
{
	if (a->n < 1)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "the test needs an argument");
	return a->pos[0];
}

/* Test boolean: whether the value is a bool. */
static bool T_boolean(jrender *r, jv in, const jargs *a) { return in.type == JV_BOOL; }
/* Test callable: whether the value is a macro, function or method. */
static bool T_callable(jrender *r, jv in, const jargs *a) { return in.type >= JV_MACRO; }
/* Test defined: whether the value is not undefined. */
static bool T_defined(jrender *r, jv in, const jargs *a) { return in.type != JV_UNDEF; }
/* Test undefined: whether the value is undefined. */
static bool T_undefined(jrender *r, jv in, const jargs *a) { return in.type == JV_UNDEF; }
/* Test none: whether the value is None. */
static bool T_none(jrender *r, jv in, const jargs *a) { return in.type == JV_NONE; }
/* Test true: whether the value is True itself. */
static bool T_true(jrender *r, jv in, const jargs *a) { return in.type == JV_BOOL && in.u.b; }
/* Test false: whether the value is False itself. */
static bool T_false(jrender *r, jv in, const jargs *a) { return in.type == JV_BOOL && !in.u.b; }
/* Test integer: whether the value is an int (not a bool). */
static bool T_integer(jrender *r, jv in, const jargs *a) { return in.type == JV_INT; }
/* Test float: whether the value is a float. */
static bool T_float(jrender *r, jv in, const jargs *a) { return in.type == JV_FLOAT; }
/* Test number: whether the value is an int, float or bool. */
static bool T_number(jrender *r, jv in, const jargs *a) { return jv_is_number(in); }
/* Test string: whether the value is a string. */
static bool T_string(jrender *r, jv in, const jargs *a) { return in.type == JV_STR; }
/* Test mapping: whether the value is a dict. */
static bool T_mapping(jrender *r, jv in, const jargs *a) { return in.type == JV_DICT && !in.u.d->ns; }

/* Test iterable: whether the value is something a for loop can walk. */
static bool T_iterable(jrender *r, jv in, const jargs *a)
{
	return in.type == JV_UNDEF || in.type == JV_STR || in.type == JV_LIST || (in.type == JV_DICT && !in.u.d->ns);
}

/* Test sequence: whether the value is a string, list, tuple or dict. */
static bool T_sequence(jrender *r, jv in, const jargs *a)
{
	return in.type == JV_STR || in.type == JV_LIST || (in.type == JV_DICT && !in.u.d->ns);
}

/* An integer test input or fail. */
static int64_t
IntIn(jrender *r, jv in, const jargs *a)
{
	if (in.type != JV_INT && in.type != JV_BOOL)
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "odd/even/divisibleby of a %s", jv_type_name(in));
	return in.type == JV_BOOL ? in.u.b : in.u.i;
}

/* Test odd: whether the value is an odd integer. */
static bool T_odd(jrender *r, jv in, const jargs *a) { return IntIn(r, in, a) % 2 != 0; }
/* Test even: whether the value is an even integer. */
static bool T_even(jrender *r, jv in, const jargs *a) { return IntIn(r, in, a) % 2 == 0; }

/* Test divisibleby: whether the value is an integer divisible by the argument. */
static bool T_divisibleby(jrender *r, jv in, const jargs *a)
{
	jv			d = Other(r, a);
	int64_t		n = IntIn(r, in, a),
				k = IntIn(r, d, a);

	if (k == 0)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "integer division or modulo by zero");
	return k == -1 || n % k == 0;
}

/* Test eq: whether the value is equal to the argument. */
static bool T_eq(jrender *r, jv in, const jargs *a) { return jv_equal(in, Other(r, a)); }
/* Test ne: whether the value is not equal to the argument. */
static bool T_ne(jrender *r, jv in, const jargs *a) { return !jv_equal(in, Other(r, a)); }
/* Test lt: whether the value is less than the argument. */
static bool T_lt(jrender *r, jv in, const jargs *a) { return jv_compare(&r->x, a->line, in, Other(r, a)) < 0; }
/* Test le: whether the value is at most the argument. */
static bool T_le(jrender *r, jv in, const jargs *a) { return jv_compare(&r->x, a->line, in, Other(r, a)) <= 0; }
/* Test gt: whether the value is greater than the argument. */
static bool T_gt(jrender *r, jv in, const jargs *a) { return jv_compare(&r->x, a->line, in, Other(r, a)) > 0; }
/* Test ge: whether the value is at least the argument. */
static bool T_ge(jrender *r, jv in, const jargs *a) { return jv_compare(&r->x, a->line, in, Other(r, a)) >= 0; }

/* Test in: whether the value is contained in the argument. */
static bool T_in(jrender *r, jv in, const jargs *a)
{
	return jr_contains(r, a->line, in, Other(r, a));
}

/* Test sameas: whether the value is the same object as the argument (where Python's answer is certain). */
static bool T_sameas(jrender *r, jv in, const jargs *a)
{
	jv			o = Other(r, a);

	if (in.type != o.type)
		return false;
	if (in.type == JV_LIST)
		return in.u.l == o.u.l;
	if (in.type == JV_DICT)
		return in.u.d == o.u.d;
	/* Python's identity of equal strings, floats and large ints depends on the interpreter */
	if (in.type == JV_STR || in.type == JV_FLOAT || (in.type == JV_INT && (in.u.i < -5 || in.u.i > 256)))
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "'sameas' on a %s", jv_type_name(in));
	return jv_equal(in, o);
}

/* Test lower: whether the value is a lower-case string. */
static bool T_lower(jrender *r, jv in, const jargs *a)
{
	jv			s = Str(r, a, in);

	return in.type != JV_UNDEF && jv_equal(jr_case(r, a->line, s, 'l'), s) && s.n > 0;
}

/* Test upper: whether the value is an upper-case string. */
static bool T_upper(jrender *r, jv in, const jargs *a)
{
	jv			s = Str(r, a, in);

	return in.type != JV_UNDEF && jv_equal(jr_case(r, a->line, s, 'u'), s) && s.n > 0;
}

static const struct
{
	const char *name;
	test_fn		fn;
}			TESTS[] = {
	{"boolean", T_boolean}, {"callable", T_callable}, {"defined", T_defined}, {"divisibleby", T_divisibleby},
	{"eq", T_eq}, {"equalto", T_eq}, {"==", T_eq}, {"even", T_even}, {"false", T_false}, {"float", T_float},
	{"ge", T_ge}, {">=", T_ge}, {"gt", T_gt}, {"greaterthan", T_gt}, {">", T_gt}, {"in", T_in},
	{"integer", T_integer}, {"iterable", T_iterable}, {"le", T_le}, {"<=", T_le}, {"lower", T_lower},
	{"lt", T_lt}, {"lessthan", T_lt}, {"<", T_lt}, {"mapping", T_mapping}, {"ne", T_ne}, {"!=", T_ne},
	{"none", T_none}, {"number", T_number}, {"odd", T_odd}, {"sameas", T_sameas}, {"sequence", T_sequence},
	{"string", T_string}, {"true", T_true}, {"undefined", T_undefined}, {"upper", T_upper},
};

/* The index of a test. */
int
jinja_test_id(const char *name)
{
	for (size_t i = 0; i < sizeof(TESTS) / sizeof(TESTS[0]); i++)
		if (!strcmp(TESTS[i].name, name))
			return (int) i;
	return -1;
}

/* Apply a test. */
bool
jinja_test(jrender *r, int id, jv in, const jargs *a)
{
	jr_step(r, a->line);
	return TESTS[id].fn(r, in, a);
}
