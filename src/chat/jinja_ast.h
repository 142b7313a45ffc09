/*
 * jinja_ast.h: the tokens the lexer produces and the syntax tree the parser
 * builds from them, shared by jinja_lex.c, jinja_parse.c, jinja_eval.c and
 * jinja_builtins.c.
 *
 * The lexer applies every whitespace rule (the "-" and "+" markers,
 * trim_blocks, lstrip_blocks, the removal of one trailing newline) so that
 * the text tokens it returns are printed exactly as they are.  The tree is
 * immutable once built: renders on several threads share it.
 */
#ifndef CBLLM_JINJA_AST_H
#define CBLLM_JINJA_AST_H

#include "chat/jinja_value.h"

typedef enum jtok_kind
{
	JT_TEXT,					/* template data, printed as it is */
	JT_VAR_BEGIN,				/* {{ */
	JT_VAR_END,					/* }} */
	JT_BLOCK_BEGIN,				/* {% */
	JT_BLOCK_END,				/* %} */
	JT_NAME,
	JT_STRING,					/* s/n: the decoded value */
	JT_INT,
	JT_FLOAT,
	JT_OP,						/* s/n: the operator text: "==", "(", "|"... */
	JT_EOF
} jtok_kind;

typedef struct jtok
{
	jtok_kind	kind;
	int			line;
	const char *s;				/* arena bytes (not NUL-terminated for JT_TEXT) */
	size_t		n;
	int64_t		i;				/* JT_INT */
	double		f;				/* JT_FLOAT */
} jtok;

/* Lex a template into x's arena; *toks ends with a JT_EOF token. Fails through x. */
void		jinja_lex(jctx *x, const char *src, size_t len, jtok **toks, size_t *ntoks);

typedef enum jnode_kind
{
	/* statements */
	JN_BODY,					/* kids: the statements in order */
	JN_TEXT,					/* lit: the text */
	JN_PRINT,					/* a: the expression */
	JN_IF,						/* a: condition, b: body, c: else body (an JN_IF for elif) or NULL */
	JN_FOR,						/* a: target, b: iterable, c: filter condition or NULL, d: body, e: else body */
	JN_SET,						/* a: target (name, tuple of names or attribute), b: value */
	JN_SET_BLOCK,				/* a: target name, d: body, b: filter chain applied (or NULL) */
	JN_MACRO,					/* s: name, kids: parameters (JN_NAME with a default in a, or NULL), d: body */
	JN_BREAK,
	JN_CONTINUE,
	JN_FILTER_BLOCK,			/* b: filter chain (its innermost input is NULL), d: body */
	/* expressions */
	JN_LIT,						/* lit */
	JN_NAME,					/* s: name */
	JN_LIST,					/* kids: items */
	JN_TUPLE,					/* kids: items */
	JN_DICT,					/* kids: key, value, key, value... */
	JN_ATTR,					/* a: object, s: attribute */
	JN_ITEM,					/* a: object, b: key */
	JN_SLICE,					/* a: object, b, c, d: start, stop, step (each may be NULL) */
	JN_CALL,					/* a: callee, kids: arguments (JN_KWARG for name=value) */
	JN_KWARG,					/* s: name, a: value */
	JN_FILTER,					/* a: input (NULL inside a filter block), s: name, kids: arguments */
	JN_TEST,					/* a: input, s: name, kids: arguments, op: 1 for "is not" */
	JN_BINOP,					/* op: a jop, a, b */
	JN_NEG,						/* a: operand (unary minus) */
	JN_POS,						/* a: operand (unary plus) */
	JN_NOT,						/* a */
	JN_AND,						/* a, b */
	JN_OR,						/* a, b */
	JN_COMPARE,					/* kids: operands, ops[nkids - 1]: jop of each comparison */
	JN_COND						/* a: value, b: condition, c: else value (NULL: undefined) */
} jnode_kind;

typedef enum jop
{
	JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
	JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOTIN
} jop;

typedef struct jnode
{
	jnode_kind	kind;
	int			line;
	int			op;
	const char *s;				/* NUL-terminated name */
	jv			lit;
	struct jnode *a,
			   *b,
			   *c,
			   *d,
			   *e;
	struct jnode **kids;		/* (nkids) */
	int			nkids;
	int		   *ops;			/* JN_COMPARE: (nkids - 1) */
	int			filter_id;		/* JN_FILTER / JN_TEST: index in the builtin tables */
} jnode;

/* Parse tokens into a JN_BODY tree in x's arena; fails through x naming the line. */
jnode	   *jinja_parse(jctx *x, const jtok *toks, size_t ntoks);

/* The builtin tables (jinja_builtins.c): index of a filter or test name, or -1. */
int			jinja_filter_id(const char *name);
int			jinja_test_id(const char *name);

#endif
