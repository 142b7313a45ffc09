/*
 * jinja.h: the chat-template interpreter's API: compile a Jinja template
 * once, render it many times (from several threads at once) with variables
 * given as JSON.
 *
 * The language is the subset of Jinja2 that chat templates use, rendered as
 * transformers renders them (trim_blocks, lstrip_blocks, loop controls, no
 * autoescape, a sandbox that refuses mutating methods, raise_exception and
 * strftime_now).  Every error names the template line: "chat template line
 * 7: unsupported filter 'wordwrap'".  A render is bounded in output
 * (JINJA_MAX_OUTPUT), memory, steps and macro nesting (jinja_eval.h).
 */
#ifndef CBLLM_JINJA_H
#define CBLLM_JINJA_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/util.h"

typedef struct jinja_template jinja_template;

/* One variable (or, with spread, every key of an object) bound for a render. */
typedef struct jinja_var
{
	const char *name;			/* the variable's name (ignored with spread) */
	const cJSON *json;			/* its value */
	const char *text;			/* the JSON text json was parsed from, or NULL: it tells 1 from
								 * 1.0 and gives integers beyond 2^53 exactly */
	size_t		len;
	bool		spread;			/* json is an object whose keys become variables */
} jinja_var;

/* Compile a template; fails (CBLLM_ERR_FORMAT or _UNSUPPORTED) naming the line. */
int			jinja_compile(const char *src, size_t len, jinja_template **out, cbllm_err *err);

/* Render with vars bound in order (a later one replaces an earlier one); out's contents are replaced. */
int			jinja_render(const jinja_template *t, const jinja_var *vars, int nvars, cbllm_buf *out,
						 cbllm_err *err);

void		jinja_free(jinja_template *t);

#endif
