/*
 * jinja_value.h: the values of the chat-template interpreter, the arena that
 * owns them, and the error exit every phase shares.
 *
 * Every value, string and tree node lives in an arena (jarena): a template's
 * syntax tree in the arena of its compiled template, a render's values in an
 * arena of that render, freed whole when it ends.  Nothing is refcounted and
 * nothing is freed one by one, so an error may leave at any point: the lexer,
 * parser and evaluator report one with jx_fail, which writes the message
 * ("chat template line 7: ...") and longjmps to the entry point that set up
 * the jctx.  The arena has a byte cap, so a hostile template that builds ever
 * longer strings fails with a message instead of exhausting memory.
 *
 * A jv is a small value passed by copy.  Strings are UTF-8 byte ranges (not
 * NUL-terminated); lists (also tuples), dicts (keys in insertion order, also
 * namespaces) are pointers to arena records, so two copies of a jv share them
 * as Python names share an object.  Booleans count as integers in arithmetic
 * and comparison, as in Python.
 */
#ifndef CBLLM_JINJA_VALUE_H
#define CBLLM_JINJA_VALUE_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef enum jv_type
{
	JV_UNDEF,					/* Jinja2's Undefined: prints empty, is false */
	JV_NONE,
	JV_BOOL,
	JV_INT,
	JV_FLOAT,
	JV_STR,
	JV_LIST,					/* a list, or a tuple when l->tuple */
	JV_DICT,					/* a dict, or a namespace when d->ns */
	JV_MACRO,					/* a {% macro %}: u.node is its definition */
	JV_FUNC,					/* a global function: u.i is its jfunc_id */
	JV_METHOD,					/* a bound method: u.m */
	JV_LOOP						/* a for loop's "loop": u.l its items, n the index */
} jv_type;

struct jlist;
struct jdict;
struct jmethod;
struct jnode;

typedef struct jv
{
	jv_type		type;
	size_t		n;				/* JV_STR: byte length */
	union
	{
		bool		b;
		int64_t		i;
		double		f;
		const char *s;			/* JV_STR bytes; JV_UNDEF: the name it stands for, or NULL */
		struct jlist *l;
		struct jdict *d;
		const struct jnode *node;
		struct jmethod *m;
	}			u;
} jv;

typedef struct jlist
{
	jv		   *items;			/* (n) */
	size_t		n;
	size_t		cap;
	bool		tuple;
} jlist;

typedef struct jdict
{
	jv		   *keys;			/* (n), in insertion order */
	jv		   *vals;			/* (n) */
	size_t		n;
	size_t		cap;
	bool		ns;				/* a namespace(): attributes may be assigned */
} jdict;

typedef struct jmethod
{
	jv			self;			/* the string, list or dict it is bound to */
	const char *name;			/* the method's name (NUL-terminated) */
} jmethod;

/* Arena blocks; the cap bounds the sum of every block. */
typedef struct jblock
{
	struct jblock *next;
	size_t		used;
	size_t		size;
	char		data[];
} jblock;

typedef struct jarena
{
	jblock	   *head;
	size_t		total;			/* bytes of every block */
	size_t		cap;			/* refuse to grow beyond this */
} jarena;

/* The error exit shared by the lexer, parser and evaluator. */
typedef struct jctx
{
	jmp_buf		jb;
	cbllm_err  *err;
	int			code;			/* the status jx_fail stored */
	jarena	   *arena;
} jctx;

/* Fail: write "chat template line LINE: <fmt>" (no line part when line <= 0) and longjmp. */
_Noreturn void jx_fail(jctx *x, int line, int code, const char *fmt,...)
			__attribute__((format(printf, 4, 5)));

/* Allocate n zeroed bytes from x's arena, failing through x when its cap is reached. */
void	   *jx_alloc(jctx *x, size_t n);
/* Free every block of an arena. */
void		jarena_free(jarena *a);

/* Copy n bytes into the arena as a string value. */
jv			jv_str(jctx *x, const char *s, size_t n);
/* A string value of a NUL-terminated literal that outlives the render. */
jv			jv_cstr(const char *s);
jv			jv_int(int64_t i);
jv			jv_float(double f);
jv			jv_bool(bool b);
jv			jv_none(void);
/* An undefined value standing for name (may be NULL). */
jv			jv_undef(const char *name);
jv			jv_new_list(jctx *x, bool tuple);
jv			jv_new_dict(jctx *x, bool ns);
void		jv_list_push(jctx *x, jlist *l, jv v);
/* Set key to v in d, keeping the key's first position. */
void		jv_dict_set(jctx *x, jdict *d, jv key, jv v);
/* The value of key in d, or NULL. */
jv		   *jv_dict_get(const jdict *d, jv key);
/* The value of a string key in d, or NULL. */
jv		   *jv_dict_gets(const jdict *d, const char *key);

/* Python truthiness. */
bool		jv_truthy(jv v);
/* Python ==. */
bool		jv_equal(jv a, jv b);
/* Compare for ordering (<0, 0, >0); fails through x on types Python cannot order. */
int			jv_compare(jctx *x, int line, jv a, jv b);
/* Python's type name of a value ("str", "int", "dict"...). */
const char *jv_type_name(jv v);
/* Whether a value is a number (int, float or bool). */
bool		jv_is_number(jv v);
/* A number as a double. */
double		jv_num(jv v);

/* A growable output string in the arena (or in malloc'd memory when x->arena is NULL). */
typedef struct jbuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
	size_t		limit;			/* fail beyond this many bytes */
} jbuf;

void		jbuf_add(jctx *x, int line, jbuf *b, const char *s, size_t n);
void		jbuf_addc(jctx *x, int line, jbuf *b, const char *s);

/* Append str(v) as Python prints it (the {{ }} form: None, True, 1.5, [1, 'a']). */
void		jv_to_str(jctx *x, int line, jbuf *b, jv v);
/* Append repr(v). */
void		jv_repr(jctx *x, int line, jbuf *b, jv v);
/* str(v) as a string value. */
jv			jv_stringify(jctx *x, int line, jv v);
/* Append json.dumps(v, ensure_ascii, indent (<0: none), separators, sort_keys). */
void		jv_to_json(jctx *x, int line, jbuf *b, jv v, int indent, bool ascii,
					   const char *item_sep, const char *key_sep, bool sort_keys);
/* Append a double as Python's repr does (shortest round trip, 1e+16, 1.0). */
void		jv_float_repr(jctx *x, int line, jbuf *b, double f);

/*
 * Decode one UTF-8 code point at s[*i] (advancing *i): a well-formed
 * character (base/utf8.h), or a byte that starts none, standing for itself.
 */
uint32_t	ju_next(const char *s, size_t n, size_t *i);
/* Python's str.isspace for one code point. */
bool		ju_isspace(uint32_t cp);
/* Number of code points in a string. */
size_t		ju_len(const char *s, size_t n);
/* Byte offset of code point index cp (clamped to n). */
size_t		ju_offset(const char *s, size_t n, size_t cp);

#endif
