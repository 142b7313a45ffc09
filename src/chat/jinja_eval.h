/*
 * jinja_eval.h: the state of one render, shared by the evaluator
 * (jinja_eval.c) and the builtin filters, tests, methods and globals
 * (jinja_builtins.c).
 *
 * Variables live in frames: the root frame holds the render's variables
 * (messages, the special tokens, the caller's kwargs), each iteration of a
 * for loop gets a child frame of the frame around the loop (so a set inside
 * a loop is not seen after it, as in Jinja2), a macro call gets a child of
 * the root.  Every render counts its steps (loop iterations, calls) against a
 * budget, and the nesting of its macro calls, so no template can hang.
 */
#ifndef CBLLM_JINJA_EVAL_H
#define CBLLM_JINJA_EVAL_H

#include "chat/jinja_ast.h"

#define JINJA_MAX_OUTPUT (16u << 20)	/* bytes a render may print */
#define JINJA_MAX_MEMORY (256u << 20)	/* bytes a render's arena may hold */
#define JINJA_MAX_STEPS 10000000L		/* loop iterations, calls and filter items */
#define JINJA_MAX_CALL_DEPTH 64			/* nested macro calls */
#define JINJA_MAX_RANGE 100000			/* items of range(), as Jinja2's sandbox */

typedef struct jframe
{
	struct jframe *parent;
	jdict		vars;
} jframe;

typedef struct jrender
{
	jctx		x;
	jframe	   *root;
	jbuf	   *out;			/* where output goes now (set and filter blocks capture) */
	long		steps;
	int			calls;			/* macro calls in progress */
} jrender;

/* Arguments of a call, filter or test. */
typedef struct jargs
{
	int			line;
	int			n;				/* positional */
	jv		   *pos;			/* (n) */
	int			nkw;			/* keyword */
	const char **kwn;			/* (nkw) names */
	jv		   *kwv;			/* (nkw) values */
} jargs;

/* Count one step of work, failing beyond the budget. */
void		jr_step(jrender *r, int line);
/* Count n steps (a pass over n items, or over 16 to 64 bytes each). */
void		jr_steps(jrender *r, int line, size_t n);
/* Argument i by position, or by keyword name, or the default. */
jv			jr_arg(jrender *r, const jargs *a, int i, const char *name, jv dflt);

/* Apply filter id to in. */
jv			jinja_filter(jrender *r, int id, jv in, const jargs *a);
/* Apply test id to in. */
bool		jinja_test(jrender *r, int id, jv in, const jargs *a);
/* obj.name: a method of a string, list or dict, else the dict's key, else undefined. */
jv			jinja_getattr(jrender *r, int line, jv obj, const char *name);
/* Call a bound method. */
jv			jinja_call_method(jrender *r, const jmethod *m, const jargs *a);
/* The id of a global function name (range, namespace...), or -1. */
int			jinja_global_id(const char *name);
/* Call a global function. */
jv			jinja_call_global(jrender *r, int id, const jargs *a);

/* Python's obj[key] for lists, tuples, strings and dicts (undefined when absent). */
jv			jr_getitem(jrender *r, int line, jv obj, jv key);
/* Python's "needle in hay" (substring, list item, dict key). */
bool		jr_contains(jrender *r, int line, jv needle, jv hay);
/* The items of an iterable (list, tuple, dict keys, string characters). */
jlist	   *jr_iter(jrender *r, int line, jv v);
/* Fail on use of an undefined value ("'x' is undefined"). */
_Noreturn void jr_undefined(jrender *r, int line, jv v);

/* String helpers of jinja_methods.c that the filters share. */
/* Change case: 'u' upper, 'l' lower, 't' str.title, 'c' capitalize, 'w' Jinja2's title filter. */
jv			jr_case(jrender *r, int line, jv s, char mode);
/* str.strip with chars (NULL: whitespace) at the left and/or right end. */
jv			jr_strip(jrender *r, jv s, const jv *chars, bool left, bool right);
/* str.split / rsplit (sep NULL: whitespace runs; maxsplit < 0: no limit). */
jv			jr_split(jrender *r, int line, jv s, const jv *sep, int64_t maxsplit, bool rev);
/* str.replace (count < 0: all). */
jv			jr_replace(jrender *r, int line, jv s, jv old, jv rep, int64_t count);
/* str.splitlines(keepends): the lines of s, with their line breaks when keepends. */
jv			jr_splitlines(jrender *r, jv s, bool keepends);

/* Run a template body in the render's root frame (its variables already bound). */
void		jinja_exec_root(jrender *r, const jnode *body);

#endif
