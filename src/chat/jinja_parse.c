/*
 * jinja_parse.c: the recursive-descent parser of the chat-template language.
 *
 * It follows Jinja2's grammar and precedence: a conditional expression
 * ("a if c else b") over or, and, not, comparisons (chained, with in and not
 * in), "+ -", "~", "* / // %", "**", then unary minus and plus, whose operand
 * takes postfix subscripts and calls but not filters: Jinja2 applies the
 * filters and tests that follow ("-x|abs", "x is defined") to the whole
 * unary expression.  Filters and tests are looked up in the builtin tables at
 * parse time, as Jinja2 does when it compiles, so a template naming one that
 * cbllm lacks fails to load: "chat template line 7: unsupported filter
 * 'wordwrap'".  Nesting is bounded so a hostile template cannot exhaust the
 * stack.
 */
#include "chat/jinja_ast.h"

#include <stdio.h>
#include <string.h>

#define JPARSE_MAX_DEPTH 200

typedef struct parser
{
	jctx	   *x;
	const jtok *t;
	size_t		n;
	size_t		pos;
	int			depth;
	int			loops;			/* enclosing for loops, for break/continue */
} parser;

static jnode *ParseExpr(parser *P, bool condexpr);
static jnode *ParseTuple(parser *P, bool condexpr);
static jnode *ParseUnary(parser *P, bool with_filter);
static jnode *ParseBody(parser *P, const char *const *ends);

/* The current token. */
static const jtok *
Cur(parser *P)
{
	return &P->t[P->pos];
}

/* Consume and return the current token (never past EOF). */
static const jtok *
Next(parser *P)
{
	const jtok *t = Cur(P);

	if (t->kind != JT_EOF)
		P->pos++;
	return t;
}

/* Whether the current token is the operator op. */
static bool
IsOp(parser *P, const char *op)
{
	const jtok *t = Cur(P);

	return t->kind == JT_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

/* Whether the current token is the name nm. */
static bool
IsName(parser *P, const char *nm)
{
	const jtok *t = Cur(P);

	return t->kind == JT_NAME && strcmp(t->s, nm) == 0;
}

/* A printable description of the current token for error messages. */
static const char *
Describe(parser *P)
{
	const jtok *t = Cur(P);
	static const char *const kinds[] = {"text", "'{{'", "'}}'", "'{%'", "'%}'", "name", "string",
	"integer", "float", "operator", "end of template"};

	if (t->kind == JT_NAME)
		return t->s;
	return kinds[t->kind];
}

/* Fail at the current token. */
static _Noreturn void
Unexpected(parser *P, const char *want)
{
	jx_fail(P->x, Cur(P)->line, CBLLM_ERR_FORMAT, "expected %s, got %s", want, Describe(P));
}

/* Consume the operator op or fail. */
static void
ExpectOp(parser *P, const char *op)
{
	char		want[16];

	if (!IsOp(P, op))
	{
		snprintf(want, sizeof(want), "'%s'", op);
		Unexpected(P, want);
	}
	Next(P);
}

/* Consume a token of a kind or fail. */
static const jtok *
Expect(parser *P, jtok_kind kind, const char *want)
{
	if (Cur(P)->kind != kind)
		Unexpected(P, want);
	return Next(P);
}

/* A new node at a line. */
static jnode *
Node(parser *P, jnode_kind kind, int line)
{
	jnode	   *n = jx_alloc(P->x, sizeof(jnode));

	n->kind = kind;
	n->line = line;
	return n;
}

/* Append a child to a node's kids. */
static void
AddKid(parser *P, jnode *n, jnode *kid)
{
	if ((n->nkids & (n->nkids - 1)) == 0)
	{
		jnode	  **k = jx_alloc(P->x, (size_t) (n->nkids ? n->nkids * 2 : 1) * sizeof(jnode *));

		if (n->nkids)
			memcpy(k, n->kids, (size_t) n->nkids * sizeof(jnode *));
		n->kids = k;
	}
	n->kids[n->nkids++] = kid;
}

/* Enter one level of nesting, failing beyond the limit. */
static void
Enter(parser *P)
{
	if (++P->depth > JPARSE_MAX_DEPTH)
		jx_fail(P->x, Cur(P)->line, CBLLM_ERR_TOO_LONG, "nesting deeper than %d", JPARSE_MAX_DEPTH);
}

/* Call arguments after '(' up to ')': positional and name=value. */
static void
ParseArgs(parser *P, jnode *call)
{
	ExpectOp(P, "(");
	while (!IsOp(P, ")"))
	{
		if (call->nkids > 0)
			ExpectOp(P, ",");
		if (IsOp(P, ")"))
			break;
		if (IsOp(P, "*") || IsOp(P, "**"))
			jx_fail(P->x, Cur(P)->line, CBLLM_ERR_UNSUPPORTED, "unsupported *args or **kwargs in a call");
		if (Cur(P)->kind == JT_NAME && P->t[P->pos + 1].kind == JT_OP && P->t[P->pos + 1].n == 1 &&
			P->t[P->pos + 1].s[0] == '=')
		{
			jnode	   *kw = Node(P, JN_KWARG, Cur(P)->line);

			kw->s = Next(P)->s;
			Next(P);
			kw->a = ParseExpr(P, true);
			AddKid(P, call, kw);
		}
		else
			AddKid(P, call, ParseExpr(P, true));
	}
	Next(P);
}

/* A literal node. */
static jnode *
Lit(parser *P, int line, jv v)
{
	jnode	   *n = Node(P, JN_LIT, line);

	n->lit = v;
	return n;
}

/* A primary: a name, literal, parenthesised expression or tuple, list or dict. */
static jnode *
ParsePrimary(parser *P)
{
	const jtok *t = Cur(P);
	int			line = t->line;
	jnode	   *n;

	if (t->kind == JT_NAME)
	{
		Next(P);
		if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
			return Lit(P, line, jv_bool(true));
		if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
			return Lit(P, line, jv_bool(false));
		if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
			return Lit(P, line, jv_none());
		n = Node(P, JN_NAME, line);
		n->s = t->s;
		return n;
	}
	if (t->kind == JT_STRING)
	{
		jbuf		b = {0};

		while (Cur(P)->kind == JT_STRING)
		{
			t = Next(P);
			jbuf_add(P->x, line, &b, t->s, t->n);
		}
		return Lit(P, line, b.len ? jv_str(P->x, b.data, b.len) : jv_cstr(""));
	}
	if (t->kind == JT_INT || t->kind == JT_FLOAT)
	{
		Next(P);
		return Lit(P, line, t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f));
	}
	if (IsOp(P, "("))
	{
		Next(P);
		if (IsOp(P, ")"))
		{
			Next(P);
			return Node(P, JN_TUPLE, line);
		}
		n = ParseTuple(P, true);
		ExpectOp(P, ")");
		return n;
	}
	if (IsOp(P, "["))
	{
		n = Node(P, JN_LIST, line);
		Next(P);
		while (!IsOp(P, "]"))
		{
			if (n->nkids > 0)
				ExpectOp(P, ",");
			if (IsOp(P, "]"))
				break;
			AddKid(P, n, ParseExpr(P, true));
		}
		Next(P);
		return n;
	}
	if (IsOp(P, "{"))
	{
		n = Node(P, JN_DICT, line);
		Next(P);
		while (!IsOp(P, "}"))
		{
			if (n->nkids > 0)
				ExpectOp(P, ",");
			if (IsOp(P, "}"))
				break;
			AddKid(P, n, ParseExpr(P, true));
			ExpectOp(P, ":");
			AddKid(P, n, ParseExpr(P, true));
		}
		Next(P);
		return n;
	}
	Unexpected(P, "an expression");
}

/* A subscript after '[': an index or a slice. */
static jnode *
ParseSubscript(parser *P, jnode *obj)
{
	int			line = Cur(P)->line;
	jnode	   *parts[3] = {NULL, NULL, NULL};
	int			np = 0;

	Next(P);
	for (;;)
	{
		if (!IsOp(P, ":") && !IsOp(P, "]"))
			parts[np] = ParseExpr(P, true);
		if (IsOp(P, ":") && np < 2)
		{
			Next(P);
			np++;
			continue;
		}
		break;
	}
	ExpectOp(P, "]");
	if (np == 0)
	{
		jnode	   *n = Node(P, JN_ITEM, line);

		if (parts[0] == NULL)
			Unexpected(P, "a subscript");
		n->a = obj;
		n->b = parts[0];
		return n;
	}
	{
		jnode	   *n = Node(P, JN_SLICE, line);

		n->a = obj;
		n->b = parts[0];
		n->c = parts[1];
		n->d = parts[2];
		return n;
	}
}

/* Postfix operations: .attr, [subscript], (call). */
static jnode *
ParsePostfix(parser *P, jnode *n, bool filters)
{
	for (;;)
	{
		int			line = Cur(P)->line;

		if (!filters && IsOp(P, "."))
		{
			jnode	   *a;

			Next(P);
			if (Cur(P)->kind == JT_INT)
			{
				a = Node(P, JN_ITEM, line);
				a->a = n;
				a->b = Lit(P, line, jv_int(Next(P)->i));
			}
			else
			{
				a = Node(P, JN_ATTR, line);
				a->a = n;
				a->s = Expect(P, JT_NAME, "an attribute name")->s;
			}
			n = a;
		}
		else if (!filters && IsOp(P, "["))
			n = ParseSubscript(P, n);
		else if (IsOp(P, "("))
		{
			jnode	   *c = Node(P, JN_CALL, line);

			c->a = n;
			ParseArgs(P, c);
			n = c;
		}
		else if (filters && IsOp(P, "|"))
		{
			jnode	   *f = Node(P, JN_FILTER, line);

			Next(P);
			f->a = n;
			f->s = Expect(P, JT_NAME, "a filter name")->s;
			f->filter_id = jinja_filter_id(f->s);
			if (f->filter_id < 0)
				jx_fail(P->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported filter '%s'", f->s);
			if (IsOp(P, "("))
				ParseArgs(P, f);
			n = f;
		}
		else if (filters && IsName(P, "is"))
		{
			jnode	   *t = Node(P, JN_TEST, line);
			const jtok *c;

			Next(P);
			if (IsName(P, "not"))
			{
				Next(P);
				t->op = 1;
			}
			t->a = n;
			t->s = Expect(P, JT_NAME, "a test name")->s;
			t->filter_id = jinja_test_id(t->s);
			if (t->filter_id < 0)
				jx_fail(P->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported test '%s'", t->s);
			c = Cur(P);
			if (IsOp(P, "("))
				ParseArgs(P, t);
			else if ((c->kind == JT_NAME && strcmp(c->s, "else") && strcmp(c->s, "or") &&
					  strcmp(c->s, "and") && strcmp(c->s, "is")) ||
					 c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
					 IsOp(P, "[") || IsOp(P, "{"))
				AddKid(P, t, ParsePostfix(P, ParsePrimary(P), false));
			n = t;
		}
		else
			return n;
	}
}

/* unary minus/plus over a primary with its postfix operations, then filters and tests. */
static jnode *
ParseUnary(parser *P, bool with_filter)
{
	int			line = Cur(P)->line;
	jnode	   *n;

	Enter(P);
	if (IsOp(P, "-") || IsOp(P, "+"))
	{
		n = Node(P, IsOp(P, "-") ? JN_NEG : JN_POS, line);
		Next(P);
		n->a = ParseUnary(P, false);
	}
	else
		n = ParsePrimary(P);
	n = ParsePostfix(P, n, false);
	if (with_filter)
		n = ParsePostfix(P, n, true);
	P->depth--;
	return n;
}

/* A binary operator table level: operators and the jop each stands for. */
typedef struct binlevel
{
	const char *ops[5];
	int			jops[5];
} binlevel;

static const binlevel LEVELS[] = {
	{{"+", "-"}, {JOP_ADD, JOP_SUB}},
	{{"~"}, {JOP_CONCAT}},
	{{"*", "/", "//", "%"}, {JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD}},
	{{"**"}, {JOP_POW}},
};

/* One level of left-associative binary operators (level 4 is the unary level). */
static jnode *
ParseBinary(parser *P, int level)
{
	jnode	   *n;

	if (level == 4)
		return ParseUnary(P, true);
	n = ParseBinary(P, level + 1);
	for (;;)
	{
		int			k;

		for (k = 0; LEVELS[level].ops[k] != NULL && !IsOp(P, LEVELS[level].ops[k]); k++)
			;
		if (LEVELS[level].ops[k] == NULL)
			return n;
		{
			jnode	   *b = Node(P, JN_BINOP, Cur(P)->line);

			Next(P);
			b->op = LEVELS[level].jops[k];
			b->a = n;
			b->b = ParseBinary(P, level + 1);
			n = b;
		}
	}
}

/* Comparisons, chained as in Python. */
static jnode *
ParseCompare(parser *P)
{
	static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
	int			line = Cur(P)->line;
	jnode	   *first = ParseBinary(P, 0),
			   *n = NULL;
	int			nops = 0;

	for (;;)
	{
		int			op = -1;

		for (int k = 0; k < 6; k++)
			if (IsOp(P, ops[k]))
				op = JOP_EQ + k;
		if (op < 0 && IsName(P, "in"))
			op = JOP_IN;
		else if (op < 0 && IsName(P, "not") && P->t[P->pos + 1].kind == JT_NAME &&
				 !strcmp(P->t[P->pos + 1].s, "in"))
		{
			Next(P);
			op = JOP_NOTIN;
		}
		if (op < 0)
			break;
		Next(P);
		if (n == NULL)
		{
			n = Node(P, JN_COMPARE, line);
			AddKid(P, n, first);
			n->ops = jx_alloc(P->x, 8 * sizeof(int));
		}
		if (nops == 8)
			jx_fail(P->x, line, CBLLM_ERR_UNSUPPORTED, "more than 8 chained comparisons");
		n->ops[nops++] = op;
		AddKid(P, n, ParseBinary(P, 0));
	}
	return n ? n : first;
}

/* not, and, or. */
static jnode *
ParseLogic(parser *P, int level)
{
	jnode	   *n;

	if (level == 2)
	{
		if (IsName(P, "not"))
		{
			jnode	   *t = Node(P, JN_NOT, Cur(P)->line);

			Next(P);
			Enter(P);
			t->a = ParseLogic(P, 2);
			P->depth--;
			return t;
		}
		return ParseCompare(P);
	}
	n = ParseLogic(P, level + 1);
	while (IsName(P, level == 0 ? "or" : "and"))
	{
		jnode	   *b = Node(P, level == 0 ? JN_OR : JN_AND, Cur(P)->line);

		Next(P);
		b->a = n;
		b->b = ParseLogic(P, level + 1);
		n = b;
	}
	return n;
}

/* An expression, with "a if c else b" when condexpr. */
static jnode *
ParseExpr(parser *P, bool condexpr)
{
	jnode	   *n;

	Enter(P);
	n = ParseLogic(P, 0);
	while (condexpr && IsName(P, "if"))
	{
		jnode	   *c = Node(P, JN_COND, Cur(P)->line);

		Next(P);
		c->a = n;
		c->b = ParseLogic(P, 0);
		if (IsName(P, "else"))
		{
			Next(P);
			c->c = ParseExpr(P, true);
		}
		n = c;
	}
	P->depth--;
	return n;
}

/* An expression or an unparenthesised tuple "a, b". */
static jnode *
ParseTuple(parser *P, bool condexpr)
{
	int			line = Cur(P)->line;
	jnode	   *first = ParseExpr(P, condexpr),
			   *t;

	if (!IsOp(P, ","))
		return first;
	t = Node(P, JN_TUPLE, line);
	AddKid(P, t, first);
	while (IsOp(P, ","))
	{
		Next(P);
		if (IsOp(P, ")") || Cur(P)->kind == JT_BLOCK_END || Cur(P)->kind == JT_VAR_END || IsName(P, "in"))
			break;
		AddKid(P, t, ParseExpr(P, condexpr));
	}
	return t;
}

/* An assignment target: a name, names separated by commas, or name.attr. */
static jnode *
ParseTarget(parser *P, bool attr_ok)
{
	int			line = Cur(P)->line;
	bool		paren = IsOp(P, "(");
	jnode	   *t = NULL,
			   *n;

	if (paren)
		Next(P);
	for (;;)
	{
		n = Node(P, JN_NAME, Cur(P)->line);
		n->s = Expect(P, JT_NAME, "a variable name")->s;
		if (attr_ok && !paren && t == NULL && IsOp(P, "."))
		{
			jnode	   *a = Node(P, JN_ATTR, line);

			Next(P);
			a->a = n;
			a->s = Expect(P, JT_NAME, "an attribute name")->s;
			return a;
		}
		if (!IsOp(P, ",") && t == NULL)
			break;
		if (t == NULL)
			t = Node(P, JN_TUPLE, line);
		AddKid(P, t, n);
		if (!IsOp(P, ","))
			break;
		Next(P);
	}
	if (paren)
		ExpectOp(P, ")");
	return t ? t : n;
}

/* A filter chain after a filter block's or block set's name ("upper | trim"). */
static jnode *
ParseFilterChain(parser *P)
{
	jnode	   *n = NULL;

	do
	{
		jnode	   *f = Node(P, JN_FILTER, Cur(P)->line);

		f->a = n;
		f->s = Expect(P, JT_NAME, "a filter name")->s;
		f->filter_id = jinja_filter_id(f->s);
		if (f->filter_id < 0)
			jx_fail(P->x, f->line, CBLLM_ERR_UNSUPPORTED, "unsupported filter '%s'", f->s);
		if (IsOp(P, "("))
			ParseArgs(P, f);
		n = f;
	} while (IsOp(P, "|") && Next(P));
	return n;
}

/* Consume "%}". */
static void
EndTag(parser *P)
{
	Expect(P, JT_BLOCK_END, "'%}'");
}

/* Consume an end tag name (the current token) and its "%}". */
static void
EndBlock(parser *P)
{
	Next(P);
	EndTag(P);
}

static const char *const ENDS_FOR[] = {"endfor", "else", NULL};
static const char *const ENDS_FOR_ELSE[] = {"endfor", NULL};
static const char *const ENDS_IF[] = {"elif", "else", "endif", NULL};
static const char *const ENDS_IF_ELSE[] = {"endif", NULL};
static const char *const ENDS_SET[] = {"endset", NULL};
static const char *const ENDS_MACRO[] = {"endmacro", NULL};
static const char *const ENDS_FILTER[] = {"endfilter", NULL};
static const char *const ENDS_GENERATION[] = {"endgeneration", NULL};

/* The rest of an if after its keyword (also an elif). */
static jnode *
ParseIf(parser *P, int line)
{
	jnode	   *n = Node(P, JN_IF, line);

	n->a = ParseTuple(P, true);
	EndTag(P);
	n->b = ParseBody(P, ENDS_IF);
	if (IsName(P, "elif"))
	{
		int			l = Next(P)->line;

		n->c = ParseIf(P, l);
		return n;
	}
	if (IsName(P, "else"))
	{
		EndBlock(P);
		n->c = ParseBody(P, ENDS_IF_ELSE);
	}
	EndBlock(P);
	return n;
}

/* A statement after "{%". */
static jnode *
ParseStatement(parser *P)
{
	const jtok *kw = Expect(P, JT_NAME, "a tag name");
	int			line = kw->line;
	jnode	   *n;

	if (!strcmp(kw->s, "if"))
		return ParseIf(P, line);
	if (!strcmp(kw->s, "for"))
	{
		n = Node(P, JN_FOR, line);
		n->a = ParseTarget(P, false);
		if (!IsName(P, "in"))
			Unexpected(P, "'in'");
		Next(P);
		n->b = ParseTuple(P, false);
		if (IsName(P, "if"))
		{
			Next(P);
			n->c = ParseExpr(P, true);
		}
		if (IsName(P, "recursive"))
			jx_fail(P->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported recursive for loop");
		EndTag(P);
		P->loops++;
		n->d = ParseBody(P, ENDS_FOR);
		P->loops--;
		if (IsName(P, "else"))
		{
			EndBlock(P);
			n->e = ParseBody(P, ENDS_FOR_ELSE);
		}
		EndBlock(P);
		return n;
	}
	if (!strcmp(kw->s, "set"))
	{
		jnode	   *target = ParseTarget(P, true);

		if (IsOp(P, "="))
		{
			Next(P);
			n = Node(P, JN_SET, line);
			n->a = target;
			n->b = ParseTuple(P, true);
			EndTag(P);
			return n;
		}
		if (target->kind != JN_NAME)
			Unexpected(P, "'='");
		n = Node(P, JN_SET_BLOCK, line);
		n->a = target;
		if (IsOp(P, "|"))
		{
			Next(P);
			n->b = ParseFilterChain(P);
		}
		EndTag(P);
		n->d = ParseBody(P, ENDS_SET);
		EndBlock(P);
		return n;
	}
	if (!strcmp(kw->s, "macro"))
	{
		int			loops = P->loops;

		n = Node(P, JN_MACRO, line);
		n->s = Expect(P, JT_NAME, "a macro name")->s;
		ExpectOp(P, "(");
		while (!IsOp(P, ")"))
		{
			jnode	   *p;

			if (n->nkids > 0)
				ExpectOp(P, ",");
			p = Node(P, JN_NAME, Cur(P)->line);
			p->s = Expect(P, JT_NAME, "a parameter name")->s;
			if (IsOp(P, "="))
			{
				Next(P);
				p->a = ParseExpr(P, true);
			}
			AddKid(P, n, p);
		}
		Next(P);
		EndTag(P);
		P->loops = 0;
		n->d = ParseBody(P, ENDS_MACRO);
		P->loops = loops;
		EndBlock(P);
		return n;
	}
	if (!strcmp(kw->s, "break") || !strcmp(kw->s, "continue"))
	{
		if (P->loops == 0)
			jx_fail(P->x, line, CBLLM_ERR_FORMAT, "'%s' outside a for loop", kw->s);
		n = Node(P, kw->s[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
		EndTag(P);
		return n;
	}
	if (!strcmp(kw->s, "filter"))
	{
		n = Node(P, JN_FILTER_BLOCK, line);
		n->b = ParseFilterChain(P);
		EndTag(P);
		n->d = ParseBody(P, ENDS_FILTER);
		EndBlock(P);
		return n;
	}
	if (!strcmp(kw->s, "generation"))
	{
		/* transformers' assistant-mask tag: renders its body */
		EndTag(P);
		n = ParseBody(P, ENDS_GENERATION);
		EndBlock(P);
		return n;
	}
	jx_fail(P->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported tag '%s'", kw->s);
}

/* Statements and text up to one of the end tags (NULL: the end of the template). */
static jnode *
ParseBody(parser *P, const char *const *ends)
{
	jnode	   *body = Node(P, JN_BODY, Cur(P)->line);

	Enter(P);
	for (;;)
	{
		const jtok *t = Cur(P);

		if (t->kind == JT_EOF)
		{
			if (ends != NULL)
				jx_fail(P->x, t->line, CBLLM_ERR_FORMAT, "unexpected end of template, expected '%s'",
						ends[0]);
			break;
		}
		if (t->kind == JT_TEXT)
		{
			jnode	   *n = Node(P, JN_TEXT, t->line);

			n->lit.type = JV_STR;
			n->lit.u.s = t->s;
			n->lit.n = t->n;
			AddKid(P, body, n);
			Next(P);
		}
		else if (t->kind == JT_VAR_BEGIN)
		{
			jnode	   *n = Node(P, JN_PRINT, t->line);

			Next(P);
			n->a = ParseTuple(P, true);
			Expect(P, JT_VAR_END, "'}}'");
			AddKid(P, body, n);
		}
		else if (t->kind == JT_BLOCK_BEGIN)
		{
			const jtok *nm = &P->t[P->pos + 1];

			if (nm->kind == JT_NAME && ends != NULL)
			{
				for (int k = 0; ends[k] != NULL; k++)
					if (!strcmp(nm->s, ends[k]))
					{
						Next(P);
						P->depth--;
						return body;
					}
			}
			if (nm->kind == JT_NAME && (!strncmp(nm->s, "end", 3) || !strcmp(nm->s, "else") ||
										!strcmp(nm->s, "elif")))
				jx_fail(P->x, nm->line, CBLLM_ERR_FORMAT, "unexpected '%s'%s%s%s", nm->s,
						ends ? ", expected '" : "", ends ? ends[0] : "", ends ? "'" : "");
			Next(P);
			AddKid(P, body, ParseStatement(P));
		}
		else
			Unexpected(P, "text or a tag");
	}
	P->depth--;
	return body;
}

/* Parse a whole template. */
jnode *
jinja_parse(jctx *x, const jtok *toks, size_t ntoks)
{
	parser		P = {x, toks, ntoks, 0, 0, 0};

	return ParseBody(&P, NULL);
}
