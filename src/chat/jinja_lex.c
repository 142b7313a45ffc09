/*
 * jinja_lex.c: the chat-template lexer, with Jinja2's whitespace rules as
 * transformers configures them (trim_blocks and lstrip_blocks on,
 * keep_trailing_newline off).
 *
 * Before lexing, every "\r\n" and "\r" becomes "\n" and one trailing newline
 * is dropped, as Jinja2 does.  Then text runs until the next "{{", "{%" or
 * "{#".  Around a tag:
 *   - "{{-", "{%-", "{#-" strip all whitespace (Python's str.isspace) at the
 *     end of the text before; "-}}", "-%}", "-#}" strip it after.
 *   - lstrip_blocks: before "{%" or "{#" (not "{{") without a "+" or "-",
 *     the spaces and tabs from the start of the line are removed, when
 *     nothing else stands between the line start and the tag.  The template
 *     start counts as a line start, and so does the end of a tag that
 *     consumed a newline.
 *   - trim_blocks: after "%}" or "#}" without a "+" or "-", one newline is
 *     removed.
 * Inside a tag the lexer tracks brackets, so "}}" closing a dict literal is
 * not taken for the tag's end.  {% raw %}...{% endraw %} becomes one text.
 */
#include "chat/jinja_ast.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

typedef struct lexer
{
	jctx	   *x;
	const char *s;				/* the normalised source */
	size_t		n;
	size_t		pos;
	int			line;
	jtok	   *toks;
	size_t		ntoks;
	size_t		cap;
} lexer;

/* Append a token. */
static jtok *
Emit(lexer *L, jtok_kind kind, int line, const char *s, size_t n)
{
	jtok	   *t;

	if (L->ntoks == L->cap)
	{
		size_t		cap = L->cap ? L->cap * 2 : 256;
		jtok	   *p = jx_alloc(L->x, cap * sizeof(jtok));

		if (L->ntoks)
			memcpy(p, L->toks, L->ntoks * sizeof(jtok));
		L->toks = p;
		L->cap = cap;
	}
	t = &L->toks[L->ntoks++];
	memset(t, 0, sizeof(*t));
	t->kind = kind;
	t->line = line;
	t->s = s;
	t->n = n;
	return t;
}

/* Count the newlines in s[0..n). */
static int
Lines(const char *s, size_t n)
{
	int			k = 0;

	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

/* Length of the Python whitespace run at s[i..n). */
static size_t
SpaceRun(const char *s, size_t n, size_t i)
{
	size_t		j = i;

	while (j < n)
	{
		size_t		k = j;

		if (!ju_isspace(ju_next(s, n, &k)))
			break;
		j = k;
	}
	return j - i;
}

/* Length of s[0..n) without its trailing Python whitespace. */
static size_t
RStripLen(const char *s, size_t n)
{
	size_t		keep = 0,
				i = 0;

	while (i < n)
	{
		uint32_t	cp = ju_next(s, n, &i);

		if (!ju_isspace(cp))
			keep = i;
	}
	return keep;
}

/* Whether s[i..n) begins with the NUL-terminated p. */
static bool
At(const char *s, size_t n, size_t i, const char *p)
{
	size_t		k = strlen(p);

	return i + k <= n && memcmp(s + i, p, k) == 0;
}

/* If a "{%" at i opens the named tag (e.g. "raw"), return the index after its "%}", else 0; *sign gets the closing sign. */
static size_t
TagNamed(const char *s, size_t n, size_t i, const char *name, char *open_sign, char *close_sign)
{
	size_t		j = i + 2;
	size_t		k = strlen(name);

	*open_sign = (j < n && (s[j] == '-' || s[j] == '+')) ? s[j++] : 0;
	while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n'))
		j++;
	if (j + k > n || memcmp(s + j, name, k) != 0)
		return 0;
	j += k;
	while (j < n && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n'))
		j++;
	*close_sign = (j < n && (s[j] == '-' || s[j] == '+')) ? s[j++] : 0;
	if (!At(s, n, j, "%}"))
		return 0;
	return j + 2;
}

/* Decode a string literal's escapes (Python's unicode-escape) into the arena. */
static void
StringToken(lexer *L, size_t start, size_t end, int line)
{
	const char *s = L->s;
	char	   *o = jx_alloc(L->x, end - start + 1);
	size_t		k = 0;

	for (size_t i = start; i < end; i++)
	{
		char		c = s[i];

		if (c != '\\' || i + 1 >= end)
		{
			o[k++] = c;
			continue;
		}
		c = s[++i];
		switch (c)
		{
			case 'n': o[k++] = '\n'; break;
			case 't': o[k++] = '\t'; break;
			case 'r': o[k++] = '\r'; break;
			case 'a': o[k++] = '\a'; break;
			case 'b': o[k++] = '\b'; break;
			case 'f': o[k++] = '\f'; break;
			case 'v': o[k++] = '\v'; break;
			case '\\': o[k++] = '\\'; break;
			case '\'': o[k++] = '\''; break;
			case '"': o[k++] = '"'; break;
			case '\n': break;
			case 'x':
			case 'u':
			case 'U':
				{
					int			w = c == 'x' ? 2 : c == 'u' ? 4 : 8;
					uint32_t	cp = 0;

					for (int d = 0; d < w; d++)
					{
						if (i + 1 + d >= end || !isxdigit((unsigned char) s[i + 1 + d]))
							jx_fail(L->x, line, CBLLM_ERR_FORMAT, "truncated \\%c escape in a string", c);
						cp = cp * 16 + (uint32_t) (isdigit((unsigned char) s[i + 1 + d]) ? s[i + 1 + d] - '0' :
												   (tolower((unsigned char) s[i + 1 + d]) - 'a' + 10));
					}
					if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
						jx_fail(L->x, line, CBLLM_ERR_UNSUPPORTED, "escape \\%c of a code point UTF-8 cannot hold", c);
					i += w;
					k += utf8_encode(cp, o + k);
					break;
				}
			default:
				if (c >= '0' && c <= '7')
				{
					uint32_t	cp = (uint32_t) (c - '0');

					for (int d = 0; d < 2 && i + 1 < end && s[i + 1] >= '0' && s[i + 1] <= '7'; d++)
						cp = cp * 8 + (uint32_t) (s[++i] - '0');
					k += utf8_encode(cp, o + k);
				}
				else if (c == 'N')
					jx_fail(L->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported \\N{...} escape in a string");
				else
				{
					o[k++] = '\\';
					o[k++] = c;
				}
		}
	}
	Emit(L, JT_STRING, line, o, k);
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
static const char OPS1[] = "+-/*%~[](){}<>=.:|,;";

/* Lex the inside of a tag up to its end; return the index after the end marker, *sign its '-'/'+'. */
static size_t
TagBody(lexer *L, bool var, char *sign)
{
	const char *s = L->s;
	size_t		n = L->n,
				i = L->pos;
	int			depth = 0;

	for (;;)
	{
		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
						 s[i] == '\f' || s[i] == '\v'))
			L->line += s[i++] == '\n';
		if (i >= n)
			jx_fail(L->x, L->line, CBLLM_ERR_FORMAT, "unexpected end of template, expected '%s'",
					var ? "}}" : "%}");
		if (depth == 0)
		{
			const char *end = var ? "}}" : "%}";

			if ((s[i] == '-' || s[i] == '+') && At(s, n, i + 1, end))
			{
				if (var && s[i] == '+')
					jx_fail(L->x, L->line, CBLLM_ERR_FORMAT, "unexpected '+'");
				*sign = s[i];
				Emit(L, var ? JT_VAR_END : JT_BLOCK_END, L->line, end, 2);
				return i + 3;
			}
			if (At(s, n, i, end))
			{
				*sign = 0;
				Emit(L, var ? JT_VAR_END : JT_BLOCK_END, L->line, end, 2);
				return i + 2;
			}
		}
		if (isalpha((unsigned char) s[i]) || s[i] == '_')
		{
			size_t		j = i;
			char	   *name;

			while (j < n && (isalnum((unsigned char) s[j]) || s[j] == '_'))
				j++;
			name = jx_alloc(L->x, j - i + 1);
			memcpy(name, s + i, j - i);
			Emit(L, JT_NAME, L->line, name, j - i);
			i = j;
		}
		else if (isdigit((unsigned char) s[i]))
		{
			size_t		j = i;
			bool		isf = false;
			char		num[64];
			size_t		k = 0;

			while (j < n && (isdigit((unsigned char) s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char) s[j + 1]))))
				j++;
			if (j + 1 < n && s[j] == '.' && isdigit((unsigned char) s[j + 1]) && !(i > 0 && s[i - 1] == '.'))
			{
				isf = true;
				j++;
				while (j < n && (isdigit((unsigned char) s[j]) || (s[j] == '_' && j + 1 < n && isdigit((unsigned char) s[j + 1]))))
					j++;
			}
			if (j < n && (s[j] == 'e' || s[j] == 'E') && !(i > 0 && s[i - 1] == '.'))
			{
				size_t		e = j + 1;

				if (e < n && (s[e] == '+' || s[e] == '-'))
					e++;
				if (e < n && isdigit((unsigned char) s[e]))
				{
					isf = true;
					j = e;
					while (j < n && isdigit((unsigned char) s[j]))
						j++;
				}
			}
			for (size_t p = i; p < j && k + 1 < sizeof(num); p++)
				if (s[p] != '_')
					num[k++] = s[p];
			num[k] = '\0';
			if (j - i >= sizeof(num) - 1)
				jx_fail(L->x, L->line, CBLLM_ERR_UNSUPPORTED, "number literal too long");
			{
				jtok	   *t = Emit(L, isf ? JT_FLOAT : JT_INT, L->line, NULL, 0);

				if (isf)
					t->f = strtod(num, NULL);
				else
				{
					char	   *endp;

					errno = 0;
					t->i = strtoll(num, &endp, 10);
					if (errno)
						jx_fail(L->x, L->line, CBLLM_ERR_UNSUPPORTED, "integer literal beyond 64 bits");
				}
			}
			i = j;
		}
		else if (s[i] == '\'' || s[i] == '"')
		{
			char		q = s[i];
			size_t		j = i + 1;
			int			line = L->line;

			while (j < n && s[j] != q)
				j += (s[j] == '\\' && j + 1 < n) ? 2 : 1;
			if (j >= n)
				jx_fail(L->x, line, CBLLM_ERR_FORMAT, "unterminated string");
			StringToken(L, i + 1, j, line);
			L->line += Lines(s + i, j - i);
			i = j + 1;
		}
		else
		{
			size_t		k = 0;

			for (int o = 0; OPS2[o] != NULL; o++)
				if (At(s, n, i, OPS2[o]))
					k = 2;
			if (k == 0 && strchr(OPS1, s[i]) != NULL && s[i] != '\0')
				k = 1;
			if (k == 0)
				jx_fail(L->x, L->line, CBLLM_ERR_FORMAT, "unexpected character '%c'", s[i]);
			if (s[i] == '(' || s[i] == '[' || s[i] == '{')
				depth++;
			else if ((s[i] == ')' || s[i] == ']' || s[i] == '}') && depth > 0)
				depth--;
			Emit(L, JT_OP, L->line, s + i, k);
			i += k;
		}
	}
}

/* Skip what follows a tag's end: all whitespace after '-', one newline (trim_blocks) unless '+'. */
static void
AfterTag(lexer *L, size_t end, char sign, bool block)
{
	L->pos = end;
	if (sign == '-')
	{
		size_t		k = SpaceRun(L->s, L->n, end);

		L->line += Lines(L->s + end, k);
		L->pos = end + k;
	}
	else if (sign != '+' && block && end < L->n && L->s[end] == '\n')
	{
		L->pos = end + 1;
		L->line++;
	}
}

/* Lex a whole template. */
void
jinja_lex(jctx *x, const char *src, size_t len, jtok **toks, size_t *ntoks)
{
	lexer		L = {x, NULL, 0, 0, 1, NULL, 0, 0};
	char	   *norm = jx_alloc(x, len + 1);
	size_t		k = 0;
	bool		line_starting = true;

	for (size_t i = 0; i < len; i++)
	{
		if (src[i] == '\r')
		{
			norm[k++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		}
		else
			norm[k++] = src[i];
	}
	if (k > 0 && norm[k - 1] == '\n')
		k--;
	L.s = norm;
	L.n = k;
	while (L.pos < L.n)
	{
		const char *s = L.s;
		size_t		n = L.n,
					t = L.pos,
					text_end,
					keep;
		char		kind = 0,
					sign;

		while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')))
			t++;
		if (t + 1 >= n)
			t = n;
		else
			kind = s[t + 1];
		text_end = t;
		keep = text_end - L.pos;
		sign = (kind && t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+')) ? s[t + 2] : 0;
		if (kind && sign == '-')
			keep = RStripLen(s + L.pos, keep);
		else if (kind && kind != '{' && sign != '+')
		{
			/* lstrip_blocks: spaces and tabs alone between the line start and the tag */
			size_t		l = keep;

			while (l > 0 && s[L.pos + l - 1] != '\n')
				l--;
			if ((l > 0 || line_starting) && l < keep &&
				SpaceRun(s + L.pos, keep, l) == keep - l)
				keep = l;
		}
		if (keep > 0)
			Emit(&L, JT_TEXT, L.line, s + L.pos, keep);
		L.line += Lines(s + L.pos, text_end - L.pos);
		if (!kind)
			break;
		if (kind == '#')
		{
			size_t		e = t + 2;
			char		csign = 0;

			while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}'))
				e++;
			if (e + 1 >= n)
				jx_fail(x, L.line, CBLLM_ERR_FORMAT, "unterminated comment");
			if (e > t + 2 && (s[e - 1] == '-' || s[e - 1] == '+'))
				csign = s[e - 1];
			L.line += Lines(s + t, e - t);
			AfterTag(&L, e + 2, csign, true);
		}
		else if (kind == '%')
		{
			char		osign = 0,
						csign = 0;
			size_t		body = TagNamed(s, n, t, "raw", &osign, &csign);

			if (body)
			{
				size_t		e = body,
							close = 0;
				char		esign = 0,
							ecsign = 0;

				if (csign == '-')
					body += SpaceRun(s, n, body);
				for (e = body; e + 1 < n; e++)
					if (s[e] == '{' && s[e + 1] == '%' && (close = TagNamed(s, n, e, "endraw", &esign, &ecsign)))
						break;
				if (!close)
					jx_fail(x, L.line, CBLLM_ERR_FORMAT, "missing endraw for raw");
				keep = esign == '-' ? RStripLen(s + body, e - body) : e - body;
				if (keep > 0)
					Emit(&L, JT_TEXT, L.line, s + body, keep);
				L.line += Lines(s + t, close - t);
				AfterTag(&L, close, ecsign, true);
			}
			else
			{
				size_t		end;

				Emit(&L, JT_BLOCK_BEGIN, L.line, s + t, 2);
				L.pos = t + 2 + (sign != 0);
				end = TagBody(&L, false, &csign);
				AfterTag(&L, end, csign, true);
			}
		}
		else
		{
			char		csign = 0;
			size_t		end;

			Emit(&L, JT_VAR_BEGIN, L.line, s + t, 2);
			L.pos = t + 2 + (sign == '-');
			end = TagBody(&L, true, &csign);
			AfterTag(&L, end, csign, false);
		}
		line_starting = L.pos > 0 && s[L.pos - 1] == '\n';
	}
	Emit(&L, JT_EOF, L.line, NULL, 0);
	*toks = L.toks;
	*ntoks = L.ntoks;
}
