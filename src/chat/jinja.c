/*
 * jinja.c: compile and render entry points of the chat-template interpreter,
 * and the conversion of JSON variables into template values.
 *
 * cJSON gives the structure of a JSON text but keeps every number as a
 * double, where Python's json module keeps 1 (an int) apart from 1.0 (a
 * float) and an integer of any size exactly; tojson and printing show the
 * difference.  So when the text is known, a scan of it lists each number's
 * lexeme in document order (the order a depth-first walk of cJSON's tree
 * visits them), and the walk takes from that list whether each number is an
 * int, and its exact value.  An integer beyond 64 bits is an error, and so
 * is a string holding U+0000, which cJSON would cut short.
 */
#include "chat/jinja.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_eval.h"

#define JINJA_MAX_SOURCE (4u << 20)		/* bytes of template text */
#define JINJA_MAX_AST (64u << 20)		/* bytes of a compiled template's arena */

struct jinja_template
{
	jarena		arena;			/* owns body and every node and literal */
	const jnode *body;
};

/* Compile a template. */
int
jinja_compile(const char *src, size_t len, jinja_template **out, cbllm_err *err)
{
	jinja_template *t = calloc(1, sizeof(jinja_template));
	jctx		x;
	jtok	   *toks;
	size_t		ntoks;

	*out = NULL;
	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
	if (len > JINJA_MAX_SOURCE)
	{
		free(t);
		return cbllm_fail(err, CBLLM_ERR_TOO_LONG, "chat template: longer than %u bytes", JINJA_MAX_SOURCE);
	}
	t->arena.cap = JINJA_MAX_AST;
	x.err = err;
	x.code = CBLLM_OK;
	x.arena = &t->arena;
	if (setjmp(x.jb) != 0)
	{
		jarena_free(&t->arena);
		free(t);
		return x.code;
	}
	jinja_lex(&x, src, len, &toks, &ntoks);
	t->body = jinja_parse(&x, toks, ntoks);
	*out = t;
	return CBLLM_OK;
}

/* Free a compiled template. */
void
jinja_free(jinja_template *t)
{
	if (t == NULL)
		return;
	jarena_free(&t->arena);
	free(t);
}

/* The numbers of a JSON text in document order: whether each is an int, and its value. */
typedef struct numscan
{
	bool	   *isint;			/* (n) */
	int64_t    *ival;			/* (n) */
	size_t		n;
	size_t		next;			/* the next one the walk takes */
} numscan;

/* Scan a JSON text's number lexemes (and refuse \u0000 in strings). */
static void
ScanNumbers(jctx *x, const char *s, size_t len, numscan *ns)
{
	size_t		cap = 0;

	for (size_t i = 0; i < len; i++)
		if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9'))
			cap++;
	ns->isint = jx_alloc(x, (cap + 1) * sizeof(bool));
	ns->ival = jx_alloc(x, (cap + 1) * sizeof(int64_t));
	ns->n = ns->next = 0;
	for (size_t i = 0; i < len; i++)
	{
		if (s[i] == '"')
		{
			for (i++; i < len && s[i] != '"'; i++)
				if (s[i] == '\\' && i + 1 < len)
				{
					if (i + 5 < len && !memcmp(s + i + 1, "u0000", 5))
						jx_fail(x, 0, CBLLM_ERR_UNSUPPORTED, "JSON strings holding U+0000 are not supported");
					i++;
				}
		}
		else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9'))
		{
			size_t		j = i;
			bool		isint = true;
			char		buf[32];

			while (j < len && (strchr("+-0123456789.eE", s[j]) != NULL) && s[j] != '\0')
			{
				if (s[j] == '.' || s[j] == 'e' || s[j] == 'E')
					isint = false;
				j++;
			}
			ns->isint[ns->n] = isint;
			if (isint)
			{
				char	   *end;

				if (j - i >= sizeof(buf))
					jx_fail(x, 0, CBLLM_ERR_UNSUPPORTED, "JSON integer beyond 64 bits");
				memcpy(buf, s + i, j - i);
				buf[j - i] = '\0';
				errno = 0;
				ns->ival[ns->n] = strtoll(buf, &end, 10);
				if (errno == ERANGE)
					jx_fail(x, 0, CBLLM_ERR_UNSUPPORTED, "JSON integer beyond 64 bits");
			}
			ns->n++;
			i = j - 1;
		}
	}
}

static jv	ObjectFromJson(jctx *x, const cJSON *j, numscan *ns);

/* Convert a cJSON tree into a value (numbers told apart by ns when given). */
static jv
FromJson(jctx *x, const cJSON *j, numscan *ns)
{
	jv			v;

	if (cJSON_IsNull(j))
		return jv_none();
	if (cJSON_IsBool(j))
		return jv_bool(cJSON_IsTrue(j));
	if (cJSON_IsString(j))
		return jv_str(x, j->valuestring, strlen(j->valuestring));
	if (cJSON_IsNumber(j))
	{
		double		d = j->valuedouble;

		if (ns != NULL && ns->next < ns->n)
		{
			size_t		k = ns->next++;

			return ns->isint[k] ? jv_int(ns->ival[k]) : jv_float(d);
		}
		if (d == (double) (int64_t) d && d > -9.2e18 && d < 9.2e18)
			return jv_int((int64_t) d);
		return jv_float(d);
	}
	if (cJSON_IsArray(j))
	{
		v = jv_new_list(x, false);
		for (const cJSON *c = j->child; c != NULL; c = c->next)
			jv_list_push(x, v.u.l, FromJson(x, c, ns));
		return v;
	}
	return ObjectFromJson(x, j, ns);
}

/* A JSON object as a dict: a later duplicate key replaces the value in the first one's place, as
 * Python's json does; a hash of the keys keeps a large object linear. */
static jv
ObjectFromJson(jctx *x, const cJSON *j, numscan *ns)
{
	jv			v = jv_new_dict(x, false);
	jdict	   *d = v.u.d;
	size_t		n = 0,
				cap = 16;
	size_t	   *slot;

	for (const cJSON *c = j->child; c != NULL; c = c->next)
		n++;
	while (cap < 2 * n)
		cap *= 2;
	slot = jx_alloc(x, cap * sizeof(size_t));	/* 0: empty, else index + 1 */
	d->keys = jx_alloc(x, (n + 1) * sizeof(jv));
	d->vals = jx_alloc(x, (n + 1) * sizeof(jv));
	d->cap = n + 1;
	for (const cJSON *c = j->child; c != NULL; c = c->next)
	{
		jv			val = FromJson(x, c, ns);
		jv			key = jv_str(x, c->string, strlen(c->string));
		uint64_t	h = 1469598103934665603ull;

		for (size_t i = 0; i < key.n; i++)
			h = (h ^ (unsigned char) key.u.s[i]) * 1099511628211ull;
		h &= cap - 1;
		while (slot[h] != 0 && !jv_equal(d->keys[slot[h] - 1], key))
			h = (h + 1) & (cap - 1);
		if (slot[h] != 0)
			d->vals[slot[h] - 1] = val;
		else
		{
			d->keys[d->n] = key;
			d->vals[d->n++] = val;
			slot[h] = d->n;
		}
	}
	return v;
}

/* Render a template. */
int
jinja_render(const jinja_template *t, const jinja_var *vars, int nvars, cbllm_buf *out, cbllm_err *err)
{
	jarena		arena = {NULL, 0, JINJA_MAX_MEMORY};
	jrender		r;
	jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};

	memset(&r, 0, sizeof(r));
	r.x.err = err;
	r.x.arena = &arena;
	r.out = &b;
	if (setjmp(r.x.jb) != 0)
	{
		jarena_free(&arena);
		return r.x.code;
	}
	r.root = jx_alloc(&r.x, sizeof(jframe));
	for (int i = 0; i < nvars; i++)
	{
		numscan		ns;
		jv			v;

		if (vars[i].text != NULL)
			ScanNumbers(&r.x, vars[i].text, vars[i].len, &ns);
		v = FromJson(&r.x, vars[i].json, vars[i].text ? &ns : NULL);
		if (!vars[i].spread)
			jv_dict_set(&r.x, &r.root->vars, jv_cstr(vars[i].name), v);
		else if (v.type == JV_DICT)
			for (size_t k = 0; k < v.u.d->n; k++)
				jv_dict_set(&r.x, &r.root->vars, v.u.d->keys[k], v.u.d->vals[k]);
	}
	jinja_exec_root(&r, t->body);
	out->len = 0;
	if (cbllm_buf_append(out, b.data ? b.data : "", b.len) != CBLLM_OK)
	{
		jarena_free(&arena);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
	}
	jarena_free(&arena);
	return CBLLM_OK;
}
