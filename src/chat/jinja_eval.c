/*
 * jinja_eval.c: the tree-walking evaluator of chat templates.
 *
 * Statements print into the render's current output buffer (a set block or
 * filter block swaps in a buffer of its own); expressions return values.
 * Operators follow Python: "+" adds numbers and concatenates two strings or
 * two lists, "/" always gives a float, "//" and "%" floor, integers are 64
 * bits and an overflow is an error (never a wrong number), "and"/"or" return
 * an operand, "~" concatenates the str() of both sides.  Undefined values
 * print empty, are false and iterate as empty, but using one in arithmetic,
 * taking its attribute or item, or calling it fails like Jinja2's
 * UndefinedError, naming the variable.
 */
#include "chat/jinja_eval.h"

#include <math.h>
#include <string.h>

static jv	Eval(jrender *r, jframe *f, const jnode *n);
static int	Exec(jrender *r, jframe *f, const jnode *n);

enum
{
	EXEC_NEXT, EXEC_BREAK, EXEC_CONTINUE
};

/* Count n steps of work. */
void
jr_steps(jrender *r, int line, size_t n)
{
	r->steps += n > (size_t) JINJA_MAX_STEPS ? JINJA_MAX_STEPS : (long) n;
	if (r->steps > JINJA_MAX_STEPS)
		jx_fail(&r->x, line, CBLLM_ERR_TOO_LONG, "the render takes more than %ld steps",
				JINJA_MAX_STEPS);
}

/* Count one step of work. */
void
jr_step(jrender *r, int line)
{
	jr_steps(r, line, 1);
}

/* Fail on use of an undefined value; a hint with a space is a whole message, else a name. */
_Noreturn void
jr_undefined(jrender *r, int line, jv v)
{
	if (v.u.s != NULL && strchr(v.u.s, ' ') != NULL)
		jx_fail(&r->x, line, CBLLM_ERR_INVALID, "%s", v.u.s);
	if (v.u.s != NULL)
		jx_fail(&r->x, line, CBLLM_ERR_INVALID, "'%s' is undefined", v.u.s);
	jx_fail(&r->x, line, CBLLM_ERR_INVALID, "use of an undefined value");
}

/* An argument by position or keyword. */
jv
jr_arg(jrender *r, const jargs *a, int i, const char *name, jv dflt)
{
	if (i >= 0 && i < a->n)
		return a->pos[i];
	for (int k = 0; name != NULL && k < a->nkw; k++)
		if (!strcmp(a->kwn[k], name))
			return a->kwv[k];
	return dflt;
}

/* A variable's value: the nearest frame holding it, then the globals, else undefined. */
static jv
Lookup(jrender *r, jframe *f, const char *name)
{
	int			g;

	for (; f != NULL; f = f->parent)
	{
		jv		   *v = jv_dict_gets(&f->vars, name);

		if (v != NULL)
			return *v;
	}
	g = jinja_global_id(name);
	if (g >= 0)
	{
		jv			v = {JV_FUNC, 0, {0}};

		v.u.i = g;
		return v;
	}
	return jv_undef(name);
}

/* Bind a name in a frame. */
static void
Bind(jrender *r, jframe *f, const char *name, jv v)
{
	jv_dict_set(&r->x, &f->vars, jv_cstr(name), v);
}

/* A new frame under parent. */
static jframe *
NewFrame(jrender *r, jframe *parent)
{
	jframe	   *f = jx_alloc(&r->x, sizeof(jframe));

	f->parent = parent;
	return f;
}

/* The items of an iterable. */
jlist *
jr_iter(jrender *r, int line, jv v)
{
	jlist	   *l;

	switch (v.type)
	{
		case JV_UNDEF:
			return jx_alloc(&r->x, sizeof(jlist));
		case JV_LIST:
			return v.u.l;
		case JV_DICT:
			if (v.u.d->ns)
				break;
			l = jx_alloc(&r->x, sizeof(jlist));
			for (size_t i = 0; i < v.u.d->n; i++)
				jv_list_push(&r->x, l, v.u.d->keys[i]);
			return l;
		case JV_STR:
			l = jx_alloc(&r->x, sizeof(jlist));
			for (size_t i = 0; i < v.n;)
			{
				size_t		at = i;

				ju_next(v.u.s, v.n, &i);
				jv_list_push(&r->x, l, jv_str(&r->x, v.u.s + at, i - at));
			}
			return l;
		default:
			break;
	}
	jx_fail(&r->x, line, CBLLM_ERR_INVALID, "'%s' object is not iterable", jv_type_name(v));
}

/* An integer index value (bools count), or false. */
static bool
AsIndex(jv k, int64_t *out)
{
	if (k.type == JV_INT)
		*out = k.u.i;
	else if (k.type == JV_BOOL)
		*out = k.u.b;
	else
		return false;
	return true;
}

/* obj[key]. */
jv
jr_getitem(jrender *r, int line, jv obj, jv key)
{
	int64_t		i;

	if (obj.type == JV_UNDEF)
		jr_undefined(r, line, obj);
	if (obj.type == JV_DICT && !obj.u.d->ns)
	{
		jv		   *v = jv_dict_get(obj.u.d, key);

		if (v != NULL)
			return *v;
	}
	else if ((obj.type == JV_LIST || obj.type == JV_STR) && AsIndex(key, &i))
	{
		int64_t		len = obj.type == JV_LIST ? (int64_t) obj.u.l->n : (int64_t) ju_len(obj.u.s, obj.n);

		if (i < 0)
			i += len;
		if (i >= 0 && i < len)
		{
			size_t		at,
						end;

			if (obj.type == JV_LIST)
				return obj.u.l->items[i];
			at = ju_offset(obj.u.s, obj.n, (size_t) i);
			end = at;
			ju_next(obj.u.s, obj.n, &end);
			return jv_str(&r->x, obj.u.s + at, end - at);
		}
	}
	if (key.type == JV_STR)
	{
		char	   *name = jx_alloc(&r->x, key.n + 1);

		memcpy(name, key.u.s, key.n);
		return jinja_getattr(r, line, obj, name);
	}
	{
		jbuf		b = {0};

		jbuf_addc(&r->x, line, &b, "'");
		jbuf_addc(&r->x, line, &b, jv_type_name(obj));
		jbuf_addc(&r->x, line, &b, " object' has no item ");
		jv_repr(&r->x, line, &b, key);
		return jv_undef(b.data);
	}
}

/* Resolve a slice bound (Python's rules for a step's sign). */
static int64_t
SliceBound(const jv *b, int64_t len, int64_t step, bool start)
{
	int64_t		v;

	if (b == NULL || b->type == JV_NONE)
		return step > 0 ? (start ? 0 : len) : (start ? len - 1 : -1);
	v = b->type == JV_BOOL ? b->u.b : b->u.i;
	if (v < 0)
	{
		v += len;
		if (v < 0)
			v = step > 0 ? 0 : -1;
	}
	else if (v >= len)
		v = step > 0 ? len : len - 1;
	return v;
}

/* obj[start:stop:step] for lists, tuples and strings. */
static jv
Slice(jrender *r, jframe *f, const jnode *n)
{
	jv			obj = Eval(r, f, n->a);
	jv			b[3];
	const jnode *parts[3] = {n->b, n->c, n->d};
	int64_t		step = 1,
				len,
				lo,
				hi;
	jv			out;

	for (int k = 0; k < 3; k++)
	{
		b[k] = parts[k] ? Eval(r, f, parts[k]) : jv_none();
		if (b[k].type != JV_NONE && b[k].type != JV_INT && b[k].type != JV_BOOL)
			jx_fail(&r->x, n->line, CBLLM_ERR_INVALID, "slice indices must be integers or None");
	}
	if (b[2].type != JV_NONE)
		step = b[2].type == JV_BOOL ? b[2].u.b : b[2].u.i;
	if (step == 0)
		jx_fail(&r->x, n->line, CBLLM_ERR_INVALID, "slice step cannot be zero");
	if (obj.type == JV_UNDEF)
		jr_undefined(r, n->line, obj);
	if (obj.type != JV_LIST && obj.type != JV_STR)
		jx_fail(&r->x, n->line, CBLLM_ERR_INVALID, "'%s' object is not subscriptable", jv_type_name(obj));
	len = obj.type == JV_LIST ? (int64_t) obj.u.l->n : (int64_t) ju_len(obj.u.s, obj.n);
	lo = SliceBound(parts[0] ? &b[0] : NULL, len, step, true);
	hi = SliceBound(parts[1] ? &b[1] : NULL, len, step, false);
	if (obj.type == JV_LIST)
	{
		out = jv_new_list(&r->x, obj.u.l->tuple);
		for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
			jv_list_push(&r->x, out.u.l, obj.u.l->items[i]);
		return out;
	}
	{
		jbuf		o = {0};
		size_t	   *offs = jx_alloc(&r->x, (size_t) (len + 1) * sizeof(size_t));
		size_t		at = 0;

		for (int64_t i = 0; i < len; i++)
		{
			offs[i] = at;
			ju_next(obj.u.s, obj.n, &at);
		}
		offs[len] = obj.n;
		for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step)
			jbuf_add(&r->x, n->line, &o, obj.u.s + offs[i], offs[i + 1] - offs[i]);
		return o.len ? jv_str(&r->x, o.data, o.len) : jv_cstr("");
	}
}

/* Python's "in". */
bool
jr_contains(jrender *r, int line, jv needle, jv hay)
{
	jr_steps(r, line, hay.type == JV_STR ? hay.n / 16 : hay.type == JV_LIST ? hay.u.l->n : 0);
	if (hay.type == JV_STR)
	{
		if (needle.type != JV_STR)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "'in <string>' requires string as left operand, not %s",
					jv_type_name(needle));
		if (needle.n == 0)
			return true;
		for (size_t i = 0; i + needle.n <= hay.n; i++)
			if (memcmp(hay.u.s + i, needle.u.s, needle.n) == 0)
				return true;
		return false;
	}
	if (hay.type == JV_DICT && !hay.u.d->ns)
		return jv_dict_get(hay.u.d, needle) != NULL;
	if (hay.type == JV_LIST)
	{
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jv_equal(hay.u.l->items[i], needle))
				return true;
		return false;
	}
	if (hay.type == JV_UNDEF)
		return false;
	jx_fail(&r->x, line, CBLLM_ERR_INVALID, "argument of type '%s' is not iterable", jv_type_name(hay));
}

/* Fail for an operator on unsupported operand types. */
static _Noreturn void
BadOperands(jrender *r, int line, const char *op, jv a, jv b)
{
	jx_fail(&r->x, line, CBLLM_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'", op,
			jv_type_name(a), jv_type_name(b));
}

/* Repeat a string or list count times. */
static jv
Repeat(jrender *r, int line, jv seq, int64_t count)
{
	jv			out;

	if (count < 0)
		count = 0;
	if (seq.type == JV_STR)
	{
		jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};

		for (int64_t i = 0; i < count && seq.n > 0; i++)
			jbuf_add(&r->x, line, &b, seq.u.s, seq.n);
		return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
	}
	out = jv_new_list(&r->x, seq.u.l->tuple);
	for (int64_t i = 0; i < count; i++)
		for (size_t k = 0; k < seq.u.l->n; k++)
		{
			jr_step(r, line);
			jv_list_push(&r->x, out.u.l, seq.u.l->items[k]);
		}
	return out;
}

/* Integer arithmetic with overflow detection. */
static jv
IntOp(jrender *r, int line, int op, int64_t a, int64_t b)
{
	int64_t		v;

	switch (op)
	{
		case JOP_ADD:
			if (__builtin_add_overflow(a, b, &v))
				break;
			return jv_int(v);
		case JOP_SUB:
			if (__builtin_sub_overflow(a, b, &v))
				break;
			return jv_int(v);
		case JOP_MUL:
			if (__builtin_mul_overflow(a, b, &v))
				break;
			return jv_int(v);
		case JOP_FLOORDIV:
		case JOP_MOD:
			if (b == 0)
				jx_fail(&r->x, line, CBLLM_ERR_INVALID, "integer division or modulo by zero");
			if (a == INT64_MIN && b == -1)
				break;
			{
				int64_t		q = a / b,
							m = a % b;

				if (m != 0 && ((m < 0) != (b < 0)))
				{
					q--;
					m += b;
				}
				return jv_int(op == JOP_MOD ? m : q);
			}
		case JOP_POW:
			if (b < 0)
				return jv_float(pow((double) a, (double) b));
			v = 1;
			for (int64_t i = 0; i < b; i++)
			{
				if (__builtin_mul_overflow(v, a, &v))
					jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "integer result beyond 64 bits");
				if (v == 0 || v == 1)
					break;
				if (v == -1)
				{
					v = (b % 2) ? -1 : 1;
					break;
				}
			}
			return jv_int(v);
	}
	jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "integer result beyond 64 bits");
}

/* A binary arithmetic operator. */
static jv
Arith(jrender *r, int line, int op, jv a, jv b)
{
	static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};

	if (a.type == JV_UNDEF)
		jr_undefined(r, line, a);
	if (b.type == JV_UNDEF)
		jr_undefined(r, line, b);
	if (jv_is_number(a) && jv_is_number(b))
	{
		if (a.type != JV_FLOAT && b.type != JV_FLOAT && op != JOP_DIV)
			return IntOp(r, line, op, a.type == JV_BOOL ? a.u.b : a.u.i, b.type == JV_BOOL ? b.u.b : b.u.i);
		{
			double		x = jv_num(a),
						y = jv_num(b);

			switch (op)
			{
				case JOP_ADD: return jv_float(x + y);
				case JOP_SUB: return jv_float(x - y);
				case JOP_MUL: return jv_float(x * y);
				case JOP_POW: return jv_float(pow(x, y));
				default:
					if (y == 0)
						jx_fail(&r->x, line, CBLLM_ERR_INVALID, "division by zero");
					if (op == JOP_DIV)
						return jv_float(x / y);
					{
						double		m = fmod(x, y),
									d = (x - m) / y,
									fd;

						if (m != 0 && ((m < 0) != (y < 0)))
						{
							m += y;
							d -= 1.0;
						}
						if (op == JOP_MOD)
							return jv_float(m);
						fd = floor(d);
						if (d - fd > 0.5)
							fd += 1.0;
						return jv_float(fd);
					}
			}
		}
	}
	if (op == JOP_ADD && a.type == JV_STR && b.type == JV_STR)
	{
		jbuf		o = {0};

		jr_steps(r, line, (a.n + b.n) / 64);
		jbuf_add(&r->x, line, &o, a.u.s, a.n);
		jbuf_add(&r->x, line, &o, b.u.s, b.n);
		return o.len ? (jv) {JV_STR, o.len, {.s = o.data}} : jv_cstr("");
	}
	if (op == JOP_ADD && a.type == JV_LIST && b.type == JV_LIST && a.u.l->tuple == b.u.l->tuple)
	{
		jv			out = jv_new_list(&r->x, a.u.l->tuple);

		for (size_t i = 0; i < a.u.l->n; i++)
			jv_list_push(&r->x, out.u.l, a.u.l->items[i]);
		for (size_t i = 0; i < b.u.l->n; i++)
			jv_list_push(&r->x, out.u.l, b.u.l->items[i]);
		return out;
	}
	if (op == JOP_MUL && (a.type == JV_STR || a.type == JV_LIST) && (b.type == JV_INT || b.type == JV_BOOL))
		return Repeat(r, line, a, b.type == JV_BOOL ? b.u.b : b.u.i);
	if (op == JOP_MUL && (b.type == JV_STR || b.type == JV_LIST) && (a.type == JV_INT || a.type == JV_BOOL))
		return Repeat(r, line, b, a.type == JV_BOOL ? a.u.b : a.u.i);
	if (op == JOP_MOD && a.type == JV_STR)
		jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported '%%' string formatting");
	BadOperands(r, line, names[op], a, b);
}

/* One comparison operator. */
static bool
CompareOp(jrender *r, int line, int op, jv a, jv b)
{
	switch (op)
	{
		case JOP_EQ: return jv_equal(a, b);
		case JOP_NE: return !jv_equal(a, b);
		case JOP_IN: return jr_contains(r, line, a, b);
		case JOP_NOTIN: return !jr_contains(r, line, a, b);
		default:
			{
				int			c;

				if (a.type == JV_UNDEF)
					jr_undefined(r, line, a);
				if (b.type == JV_UNDEF)
					jr_undefined(r, line, b);
				c = jv_compare(&r->x, line, a, b);
				return op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0;
			}
	}
}

/* Evaluate call arguments. */
static void
EvalArgs(jrender *r, jframe *f, const jnode *n, jargs *a)
{
	a->line = n->line;
	a->n = a->nkw = 0;
	a->pos = jx_alloc(&r->x, (size_t) (n->nkids + 1) * sizeof(jv));
	a->kwv = jx_alloc(&r->x, (size_t) (n->nkids + 1) * sizeof(jv));
	a->kwn = jx_alloc(&r->x, (size_t) (n->nkids + 1) * sizeof(char *));
	for (int i = 0; i < n->nkids; i++)
	{
		const jnode *k = n->kids[i];

		if (k->kind == JN_KWARG)
		{
			a->kwn[a->nkw] = k->s;
			a->kwv[a->nkw++] = Eval(r, f, k->a);
		}
		else
		{
			if (a->nkw > 0)
				jx_fail(&r->x, n->line, CBLLM_ERR_FORMAT, "positional argument follows keyword argument");
			a->pos[a->n++] = Eval(r, f, k);
		}
	}
}

/* Render a body into a fresh buffer and return it as a string. */
static jv
Capture(jrender *r, jframe *f, const jnode *body)
{
	jbuf	   *saved = r->out;
	jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};

	r->out = &b;
	Exec(r, f, body);
	r->out = saved;
	return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
}

/* Call a macro. */
static jv
CallMacro(jrender *r, const jnode *m, const jargs *a, int line)
{
	jframe	   *f = NewFrame(r, r->root);
	jv			out;

	if (a->n > m->nkids)
		jx_fail(&r->x, line, CBLLM_ERR_INVALID, "macro '%s' takes not more than %d argument(s)", m->s, m->nkids);
	for (int k = 0; k < a->nkw; k++)
	{
		int			p;

		for (p = 0; p < m->nkids && strcmp(m->kids[p]->s, a->kwn[k]); p++)
			;
		if (p == m->nkids)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "macro '%s' has no argument '%s'", m->s, a->kwn[k]);
	}
	if (++r->calls > JINJA_MAX_CALL_DEPTH)
		jx_fail(&r->x, line, CBLLM_ERR_TOO_LONG, "macro calls nested deeper than %d", JINJA_MAX_CALL_DEPTH);
	jr_step(r, line);
	for (int p = 0; p < m->nkids; p++)
	{
		const jnode *prm = m->kids[p];
		jv			v = jr_arg(r, a, -1, prm->s, jv_undef(NULL));

		if (p < a->n)
			v = a->pos[p];
		else if (v.type == JV_UNDEF && prm->a != NULL)
			v = Eval(r, f, prm->a);
		else if (v.type == JV_UNDEF)
			v = jv_undef(prm->s);
		Bind(r, f, prm->s, v);
	}
	out = Capture(r, f, m->d);
	r->calls--;
	return out;
}

/* A call expression. */
static jv
Call(jrender *r, jframe *f, const jnode *n)
{
	jv			callee = Eval(r, f, n->a);
	jargs		a;

	EvalArgs(r, f, n, &a);
	switch (callee.type)
	{
		case JV_METHOD:
			return jinja_call_method(r, callee.u.m, &a);
		case JV_MACRO:
			return CallMacro(r, callee.u.node, &a, n->line);
		case JV_FUNC:
			return jinja_call_global(r, (int) callee.u.i, &a);
		case JV_UNDEF:
			jr_undefined(r, n->line, callee);
		default:
			jx_fail(&r->x, n->line, CBLLM_ERR_INVALID, "'%s' object is not callable", jv_type_name(callee));
	}
}

/* Apply a filter chain whose innermost input is NULL to a value. */
static jv
ApplyChain(jrender *r, jframe *f, const jnode *fn, jv in)
{
	jargs		a;
	jv			base = fn->a ? ApplyChain(r, f, fn->a, in) : in;

	EvalArgs(r, f, fn, &a);
	return jinja_filter(r, fn->filter_id, base, &a);
}

/* Evaluate an expression. */
static jv
Eval(jrender *r, jframe *f, const jnode *n)
{
	jv			a,
				b;
	jargs		args;

	switch (n->kind)
	{
		case JN_LIT:
			return n->lit;
		case JN_NAME:
			return Lookup(r, f, n->s);
		case JN_LIST:
		case JN_TUPLE:
			a = jv_new_list(&r->x, n->kind == JN_TUPLE);
			for (int i = 0; i < n->nkids; i++)
				jv_list_push(&r->x, a.u.l, Eval(r, f, n->kids[i]));
			return a;
		case JN_DICT:
			a = jv_new_dict(&r->x, false);
			for (int i = 0; i + 1 < n->nkids; i += 2)
			{
				jv			k = Eval(r, f, n->kids[i]);

				if (k.type == JV_LIST && !k.u.l->tuple)
					jx_fail(&r->x, n->line, CBLLM_ERR_INVALID, "unhashable type: 'list'");
				jv_dict_set(&r->x, a.u.d, k, Eval(r, f, n->kids[i + 1]));
			}
			return a;
		case JN_ATTR:
			a = Eval(r, f, n->a);
			if (a.type == JV_UNDEF)
				jr_undefined(r, n->line, a);
			return jinja_getattr(r, n->line, a, n->s);
		case JN_ITEM:
			a = Eval(r, f, n->a);
			return jr_getitem(r, n->line, a, Eval(r, f, n->b));
		case JN_SLICE:
			return Slice(r, f, n);
		case JN_CALL:
			return Call(r, f, n);
		case JN_FILTER:
			a = Eval(r, f, n->a);
			EvalArgs(r, f, n, &args);
			return jinja_filter(r, n->filter_id, a, &args);
		case JN_TEST:
			a = Eval(r, f, n->a);
			EvalArgs(r, f, n, &args);
			return jv_bool(jinja_test(r, n->filter_id, a, &args) != (n->op == 1));
		case JN_BINOP:
			a = Eval(r, f, n->a);
			b = Eval(r, f, n->b);
			if (n->op == JOP_CONCAT)
			{
				jbuf		o = {0};

				jr_steps(r, n->line, (a.type == JV_STR ? a.n : 0) / 64 + (b.type == JV_STR ? b.n : 0) / 64);
				jv_to_str(&r->x, n->line, &o, a);
				jv_to_str(&r->x, n->line, &o, b);
				return o.len ? (jv) {JV_STR, o.len, {.s = o.data}} : jv_cstr("");
			}
			return Arith(r, n->line, n->op, a, b);
		case JN_NEG:
		case JN_POS:
			a = Eval(r, f, n->a);
			if (a.type == JV_UNDEF)
				jr_undefined(r, n->line, a);
			if (!jv_is_number(a))
				jx_fail(&r->x, n->line, CBLLM_ERR_INVALID, "bad operand type for unary %s: '%s'",
						n->kind == JN_NEG ? "-" : "+", jv_type_name(a));
			if (n->kind == JN_POS)
				return a.type == JV_BOOL ? jv_int(a.u.b) : a;
			return a.type == JV_FLOAT ? jv_float(-a.u.f) : IntOp(r, n->line, JOP_SUB, 0, a.type == JV_BOOL ? a.u.b : a.u.i);
		case JN_NOT:
			return jv_bool(!jv_truthy(Eval(r, f, n->a)));
		case JN_AND:
			a = Eval(r, f, n->a);
			return jv_truthy(a) ? Eval(r, f, n->b) : a;
		case JN_OR:
			a = Eval(r, f, n->a);
			return jv_truthy(a) ? a : Eval(r, f, n->b);
		case JN_COMPARE:
			a = Eval(r, f, n->kids[0]);
			for (int i = 1; i < n->nkids; i++)
			{
				b = Eval(r, f, n->kids[i]);
				if (!CompareOp(r, n->line, n->ops[i - 1], a, b))
					return jv_bool(false);
				a = b;
			}
			return jv_bool(true);
		case JN_COND:
			if (jv_truthy(Eval(r, f, n->b)))
				return Eval(r, f, n->a);
			return n->c ? Eval(r, f, n->c) : jv_undef(NULL);
		default:
			jx_fail(&r->x, n->line, CBLLM_ERR_INTERNAL, "statement used as an expression");
	}
}

/* Assign a value to a target: a name, a tuple of names (unpacking) or namespace.attr. */
static void
Assign(jrender *r, jframe *f, const jnode *t, jv v, int line)
{
	if (t->kind == JN_NAME)
	{
		Bind(r, f, t->s, v);
		return;
	}
	if (t->kind == JN_ATTR)
	{
		jv			ns = Lookup(r, f, t->a->s);

		if (ns.type != JV_DICT || !ns.u.d->ns)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "cannot assign attribute on non-namespace object");
		jv_dict_set(&r->x, ns.u.d, jv_cstr(t->s), v);
		return;
	}
	{
		jlist	   *items = jr_iter(r, line, v);

		if ((int) items->n != t->nkids)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "cannot unpack %zu values into %d names",
					items->n, t->nkids);
		for (int i = 0; i < t->nkids; i++)
			Bind(r, f, t->kids[i]->s, items->items[i]);
	}
}

/* A for loop. */
static int
ExecFor(jrender *r, jframe *f, const jnode *n)
{
	jlist	   *all = jr_iter(r, n->line, Eval(r, f, n->b)),
			   *items = all;
	jframe	   *it;
	size_t		len;

	if (n->c != NULL)
	{
		jframe	   *t = NewFrame(r, f);

		items = jx_alloc(&r->x, sizeof(jlist));
		for (size_t i = 0; i < all->n; i++)
		{
			jr_step(r, n->line);
			t->vars.n = 0;
			Assign(r, t, n->a, all->items[i], n->line);
			if (jv_truthy(Eval(r, t, n->c)))
				jv_list_push(&r->x, items, all->items[i]);
		}
	}
	len = items->n;
	it = NewFrame(r, f);
	for (size_t i = 0; i < len; i++)
	{
		jv			loop = {JV_LOOP, i, {.l = items}};
		int			rc;

		/* each iteration starts with no variables of its own, as in Jinja2 */
		jr_step(r, n->line);
		it->vars.n = 0;
		Bind(r, it, "loop", loop);
		Assign(r, it, n->a, items->items[i], n->line);
		rc = Exec(r, it, n->d);
		if (rc == EXEC_BREAK)
			break;
	}
	if (len == 0 && n->e != NULL)
		return Exec(r, f, n->e);
	return EXEC_NEXT;
}

/* Execute a statement. */
static int
Exec(jrender *r, jframe *f, const jnode *n)
{
	jv			v;

	switch (n->kind)
	{
		case JN_BODY:
			for (int i = 0; i < n->nkids; i++)
			{
				int			rc = Exec(r, f, n->kids[i]);

				if (rc != EXEC_NEXT)
					return rc;
			}
			return EXEC_NEXT;
		case JN_TEXT:
			jbuf_add(&r->x, n->line, r->out, n->lit.u.s, n->lit.n);
			return EXEC_NEXT;
		case JN_PRINT:
			v = Eval(r, f, n->a);
			if (v.type == JV_MACRO || v.type == JV_FUNC || v.type == JV_METHOD)
				jx_fail(&r->x, n->line, CBLLM_ERR_UNSUPPORTED, "printing a %s", jv_type_name(v));
			jv_to_str(&r->x, n->line, r->out, v);
			return EXEC_NEXT;
		case JN_IF:
			if (jv_truthy(Eval(r, f, n->a)))
				return Exec(r, f, n->b);
			return n->c ? Exec(r, f, n->c) : EXEC_NEXT;
		case JN_FOR:
			return ExecFor(r, f, n);
		case JN_SET:
			Assign(r, f, n->a, Eval(r, f, n->b), n->line);
			return EXEC_NEXT;
		case JN_SET_BLOCK:
			v = Capture(r, f, n->d);
			if (n->b != NULL)
				v = ApplyChain(r, f, n->b, v);
			Bind(r, f, n->a->s, v);
			return EXEC_NEXT;
		case JN_MACRO:
			v.type = JV_MACRO;
			v.n = 0;
			v.u.node = n;
			Bind(r, f, n->s, v);
			return EXEC_NEXT;
		case JN_FILTER_BLOCK:
			v = ApplyChain(r, f, n->b, Capture(r, f, n->d));
			jv_to_str(&r->x, n->line, r->out, v);
			return EXEC_NEXT;
		case JN_BREAK:
			return EXEC_BREAK;
		case JN_CONTINUE:
			return EXEC_CONTINUE;
		default:
			jx_fail(&r->x, n->line, CBLLM_ERR_INTERNAL, "expression used as a statement");
	}
}

/* Run the template body in the root frame. */
void
jinja_exec_root(jrender *r, const jnode *body)
{
	Exec(r, r->root, body);
}
