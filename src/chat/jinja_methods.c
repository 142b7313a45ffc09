/*
 * jinja_methods.c: attribute access, the Python methods templates call on
 * strings, dicts and lists, the global functions (range, namespace, dict,
 * raise_exception, strftime_now) and the case mapping they share with the
 * filters.
 *
 * Attribute access is Jinja2's: obj.name is the object's method first, then
 * its key; a missing one is undefined.  As in transformers'
 * ImmutableSandboxedEnvironment, methods that mutate a list or dict (append,
 * pop, update...) are refused: they resolve to an undefined value, so calling
 * one fails and names it.
 *
 * Case mapping covers ASCII, Latin-1, Latin Extended-A, the Vietnamese
 * letters, Latin Extended Additional, Greek, Cyrillic and the full-width
 * Latin letters, and knows the scripts without case (CJK, Hangul, Arabic,
 * Hebrew, Indic, Thai, symbols, emoji).  A cased letter of any other script
 * is an error, never a silently wrong prompt.
 */
#include "chat/jinja_eval.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/utf8.h"

/* Whether cp is in a range known to have no case. */
static bool
Caseless(uint32_t c)
{
	return c < 0x41 || (c > 0x5a && c < 0x61) || (c > 0x7a && c < 0xaa) || (c >= 0x2b0 && c < 0x370) ||
		(c >= 0x590 && c < 0x1000) || (c >= 0x2000 && c < 0x2160) || (c >= 0x2190 && c < 0x24b6) ||
		(c >= 0x2500 && c < 0x2c00) || (c >= 0x2e80 && c < 0xa640) || (c >= 0xac00 && c < 0xd7b0) ||
		(c >= 0xf900 && c < 0xff21) || (c >= 0xff5b && c < 0x10000) || (c >= 0x1f000 && c < 0x1fb00) ||
		(c >= 0x20000 && c < 0x40000) || c == 0xd7 || c == 0xf7 || (c >= 0xab && c < 0xb5) ||
		(c > 0xb5 && c < 0xc0);
}

/* One code point's lower (upper == false) or upper case; *ok false when not known. */
static uint32_t
MapCase(uint32_t c, bool upper, bool *ok)
{
	*ok = true;
	if (c < 0x80)
		return upper ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c);
	if (c == 0xdf)
		return c;				/* upper case is "SS", title case "Ss": PutCase */
	if (c >= 0xc0 && c <= 0xfe && c != 0xd7 && c != 0xf7)
		return upper ? (c >= 0xe0 ? c - 32 : c) : (c < 0xe0 ? c + 32 : c);
	if (c == 0xb5)
		return upper ? 0x39c : c;
	if (c == 0xff)
		return upper ? 0x178 : c;
	if (c == 0x178)
		return upper ? c : 0xff;
	if (c == 0x17f)
		return upper ? 'S' : c;
	if ((c >= 0x100 && c < 0x130) || (c >= 0x132 && c < 0x138) || (c >= 0x14a && c < 0x178) ||
		(c >= 0x1e00 && c < 0x1e96) || (c >= 0x1ea0 && c < 0x1f00) || (c >= 0x460 && c < 0x482) ||
		(c >= 0x48a && c < 0x4c0) || (c >= 0x4d0 && c < 0x530) || c == 0x1a0 || c == 0x1a1 ||
		c == 0x1af || c == 0x1b0)
		return upper ? (c & ~1u) : (c | 1u);
	if ((c >= 0x139 && c < 0x149) || (c >= 0x179 && c < 0x17f) || (c >= 0x4c1 && c < 0x4cf))
		return upper ? ((c & 1) ? c : c - 1) : ((c & 1) ? c + 1 : c);
	if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2)
		return upper ? c : c + 32;
	if (c >= 0x3b1 && c <= 0x3c9)
		return upper ? (c == 0x3c2 ? 0x3a3 : c - 32) : c;
	if (c == 0x386)
		return upper ? c : 0x3ac;
	if (c == 0x3ac)
		return upper ? 0x386 : c;
	if (c >= 0x388 && c <= 0x38a)
		return upper ? c : c + 37;
	if (c >= 0x3ad && c <= 0x3af)
		return upper ? c - 37 : c;
	if (c == 0x38c)
		return upper ? c : 0x3cc;
	if (c == 0x3cc)
		return upper ? 0x38c : c;
	if (c == 0x38e || c == 0x38f)
		return upper ? c : c + 63;
	if (c == 0x3cd || c == 0x3ce)
		return upper ? c - 63 : c;
	if (c >= 0x410 && c < 0x430)
		return upper ? c : c + 32;
	if (c >= 0x430 && c < 0x450)
		return upper ? c - 32 : c;
	if (c >= 0x400 && c < 0x410)
		return upper ? c : c + 80;
	if (c >= 0x450 && c < 0x460)
		return upper ? c - 80 : c;
	if (c >= 0xff21 && c <= 0xff3a)
		return upper ? c : c + 32;
	if (c >= 0xff41 && c <= 0xff5a)
		return upper ? c - 32 : c;
	if (Caseless(c))
		return c;
	*ok = false;
	return c;
}

/* Whether a code point is a cased letter (it has another case or is one of a pair). */
static bool
IsCased(uint32_t c)
{
	bool		ok;

	return c == 0xdf || MapCase(c, true, &ok) != c || MapCase(c, false, &ok) != c;
}

/* Append one code point in a case (mode 'u' upper, 'l' lower, 'T' title), failing when unknown. */
static void
PutCase(jrender *r, int line, jbuf *b, uint32_t cp, char mode)
{
	char		o[4];
	bool		ok;
	uint32_t	m;

	if (cp == 0xdf && (mode == 'u' || mode == 'T'))
	{
		jbuf_addc(&r->x, line, b, mode == 'u' ? "SS" : "Ss");
		return;
	}
	if (mode == 'T')
		mode = 'u';
	if (cp == 0x130 && mode == 'l')
	{
		jbuf_addc(&r->x, line, b, "i\xcc\x87");
		return;
	}
	m = MapCase(cp, mode == 'u', &ok);
	if (!ok || cp == 0x130 || cp == 0x131 || cp == 0x149)
	{
		if (cp == 0x131 && mode == 'u')
			m = 'I';
		else if (cp == 0x131 || (cp == 0x130 && mode == 'u'))
			m = cp;
		else
			jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "case mapping of U+%04X is not supported", cp);
	}
	jbuf_add(&r->x, line, b, o, (size_t) utf8_encode(m, o));
}

/* Change a string's case: 'u' upper, 'l' lower, 't' str.title, 'c' str.capitalize, 'w' Jinja2's title filter. */
jv
jr_case(jrender *r, int line, jv s, char mode)
{
	jbuf		b = {0};
	bool		prev_cased = false,
				word_start = true;

	jr_steps(r, line, s.n / 16);
	for (size_t i = 0; i < s.n;)
	{
		uint32_t	cp = ju_next(s.u.s, s.n, &i);
		char		m = mode;

		if (mode == 't')
			m = prev_cased ? 'l' : 'T';
		else if (mode == 'c')
			m = word_start ? 'T' : 'l';
		else if (mode == 'w')
		{
			bool		sep = ju_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';

			m = sep ? 'l' : word_start ? 'u' : 'l';
			word_start = sep;
			PutCase(r, line, &b, cp, m);
			continue;
		}
		word_start = false;
		prev_cased = IsCased(cp);
		PutCase(r, line, &b, cp, m);
	}
	return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
}

/* Whether every cased code point is of case mode ('l'/'u'), with at least one cased. */
static bool
IsCase(jrender *r, int line, jv s, char mode)
{
	bool		any = false;

	for (size_t i = 0; i < s.n;)
	{
		uint32_t	cp = ju_next(s.u.s, s.n, &i);
		bool		ok;

		if (!IsCased(cp))
		{
			MapCase(cp, true, &ok);
			if (!ok)
				jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "case of U+%04X is not known", cp);
			continue;
		}
		any = true;
		if (MapCase(cp, mode == 'u', &ok) != cp)
			return false;
	}
	return any;
}

/* Whether code point cp is in the code points of set (NULL set: Python whitespace). */
static bool
InSet(uint32_t cp, const jv *set)
{
	if (set == NULL)
		return ju_isspace(cp);
	for (size_t i = 0; i < set->n;)
		if (ju_next(set->u.s, set->n, &i) == cp)
			return true;
	return false;
}

/* str.strip/lstrip/rstrip with chars (NULL: whitespace); left/right say which ends. */
jv
jr_strip(jrender *r, jv s, const jv *chars, bool left, bool right)
{
	size_t		lo = 0,
				hi = s.n,
				i;

	if (left)
		while (lo < hi)
		{
			i = lo;
			if (!InSet(ju_next(s.u.s, s.n, &i), chars))
				break;
			lo = i;
		}
	if (right)
	{
		size_t		keep = lo;

		for (i = lo; i < hi;)
			if (!InSet(ju_next(s.u.s, hi, &i), chars))
				keep = i;
		hi = keep;
	}
	s.u.s += lo;
	s.n = hi - lo;
	return s;
}

/* Find needle in s at or after byte from (backwards when rev); return its byte offset or -1. */
static long
FindBytes(jv s, jv needle, size_t from, bool rev)
{
	if (needle.n > s.n)
		return -1;
	if (rev)
	{
		for (size_t i = s.n - needle.n + 1; i-- > from;)
			if (memcmp(s.u.s + i, needle.u.s, needle.n) == 0)
				return (long) i;
		return -1;
	}
	for (size_t i = from; i + needle.n <= s.n; i++)
		if (memcmp(s.u.s + i, needle.u.s, needle.n) == 0)
			return (long) i;
	return -1;
}

/* A substring value (shares the bytes). */
static jv
Sub(jv s, size_t at, size_t n)
{
	s.u.s += at;
	s.n = n;
	return s;
}

/* str.split / str.rsplit (sep NULL: runs of whitespace). */
jv
jr_split(jrender *r, int line, jv s, const jv *sep, int64_t maxsplit, bool rev)
{
	jv			out = jv_new_list(&r->x, false);
	jlist	   *l = out.u.l;
	size_t		lo = 0,
				hi = s.n;

	if (sep != NULL && sep->n == 0)
		jx_fail(&r->x, line, CBLLM_ERR_INVALID, "empty separator");
	if (sep == NULL)
	{
		jv			t = jr_strip(r, s, NULL, !rev || maxsplit < 0, rev || maxsplit < 0);
		jv			parts = jv_new_list(&r->x, false);

		s = t;
		hi = s.n;
		while (lo < hi)
		{
			size_t		i = lo,
						j;

			jr_step(r, line);
			if (maxsplit >= 0 && (int64_t) parts.u.l->n == maxsplit)
			{
				jv_list_push(&r->x, parts.u.l, Sub(s, lo, hi - lo));
				break;
			}
			while (i < hi)
			{
				j = i;
				if (ju_isspace(ju_next(s.u.s, hi, &j)))
					break;
				i = j;
			}
			jv_list_push(&r->x, parts.u.l, Sub(s, lo, i - lo));
			while (i < hi)
			{
				j = i;
				if (!ju_isspace(ju_next(s.u.s, hi, &j)))
					break;
				i = j;
			}
			lo = i;
		}
		if (!rev || maxsplit < 0)
			return parts;
		/* rsplit with maxsplit on whitespace: split from the right */
		{
			jv			rparts = jv_new_list(&r->x, false);

			hi = s.n;
			while (hi > 0)
			{
				size_t		i = hi;

				jr_step(r, line);
				if ((int64_t) rparts.u.l->n == maxsplit)
				{
					jv_list_push(&r->x, rparts.u.l, jr_strip(r, Sub(s, 0, hi), NULL, false, true));
					break;
				}
				while (i > 0 && !ju_isspace((unsigned char) s.u.s[i - 1]))
					i--;
				jv_list_push(&r->x, rparts.u.l, Sub(s, i, hi - i));
				while (i > 0 && ju_isspace((unsigned char) s.u.s[i - 1]))
					i--;
				hi = i;
			}
			for (size_t a = 0, b = rparts.u.l->n; a < b; a++)
				jv_list_push(&r->x, l, rparts.u.l->items[b - 1 - a]);
			return out;
		}
	}
	if (!rev)
	{
		for (;;)
		{
			long		at = (maxsplit >= 0 && (int64_t) l->n >= maxsplit) ? -1 : FindBytes(s, *sep, lo, false);

			jr_step(r, line);
			if (at < 0)
			{
				jv_list_push(&r->x, l, Sub(s, lo, s.n - lo));
				return out;
			}
			jv_list_push(&r->x, l, Sub(s, lo, (size_t) at - lo));
			lo = (size_t) at + sep->n;
		}
	}
	{
		jv			rparts = jv_new_list(&r->x, false);

		for (;;)
		{
			jv			head = Sub(s, 0, hi);
			long		at = (maxsplit >= 0 && (int64_t) rparts.u.l->n >= maxsplit) ? -1 : FindBytes(head, *sep, 0, true);

			jr_step(r, line);
			if (at < 0)
			{
				jv_list_push(&r->x, rparts.u.l, head);
				break;
			}
			jv_list_push(&r->x, rparts.u.l, Sub(s, (size_t) at + sep->n, hi - (size_t) at - sep->n));
			hi = (size_t) at;
		}
		for (size_t a = 0, b = rparts.u.l->n; a < b; a++)
			jv_list_push(&r->x, l, rparts.u.l->items[b - 1 - a]);
		return out;
	}
}

/* str.replace(old, new, count). */
jv
jr_replace(jrender *r, int line, jv s, jv old, jv rep, int64_t count)
{
	jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};
	size_t		i = 0;
	int64_t		done = 0;

	jr_steps(r, line, s.n / 16);
	if (old.n == 0)
	{
		/* an empty pattern inserts rep before every code point and at the end */
		while (count < 0 || done < count)
		{
			jbuf_add(&r->x, line, &b, rep.u.s, rep.n);
			done++;
			if (i >= s.n)
				break;
			{
				size_t		at = i;

				ju_next(s.u.s, s.n, &i);
				jbuf_add(&r->x, line, &b, s.u.s + at, i - at);
			}
		}
		jbuf_add(&r->x, line, &b, s.u.s + i, s.n - i);
		return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
	}
	while (count < 0 || done < count)
	{
		long		at = FindBytes(s, old, i, false);

		if (at < 0)
			break;
		jbuf_add(&r->x, line, &b, s.u.s + i, (size_t) at - i);
		jbuf_add(&r->x, line, &b, rep.u.s, rep.n);
		i = (size_t) at + old.n;
		done++;
	}
	jbuf_add(&r->x, line, &b, s.u.s + i, s.n - i);
	return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
}

/* str.splitlines: the lines of s, with their line breaks when keepends. */
jv
jr_splitlines(jrender *r, jv s, bool keepends)
{
	jv			out = jv_new_list(&r->x, false);
	size_t		lo = 0,
				i = 0;

	while (i < s.n)
	{
		size_t		at = i;
		uint32_t	cp = ju_next(s.u.s, s.n, &i);

		if (cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
			cp == 0x85 || cp == 0x2028 || cp == 0x2029)
		{
			if (cp == '\r' && i < s.n && s.u.s[i] == '\n')
				i++;
			jv_list_push(&r->x, out.u.l, Sub(s, lo, (keepends ? i : at) - lo));
			lo = i;
		}
	}
	if (lo < s.n)
		jv_list_push(&r->x, out.u.l, Sub(s, lo, s.n - lo));
	return out;
}

/* A string argument or fail naming the method. */
static jv
StrArg(jrender *r, const jargs *a, int i, const char *what)
{
	jv			v = jr_arg(r, a, i, NULL, jv_undef(NULL));

	if (v.type != JV_STR)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "%s() argument %d must be str, not %s", what, i + 1,
				jv_type_name(v));
	return v;
}

/* An optional integer argument. */
static int64_t
IntArg(jrender *r, const jargs *a, int i, const char *name, int64_t dflt)
{
	jv			v = jr_arg(r, a, i, name, jv_none());

	if (v.type == JV_NONE)
		return dflt;
	if (v.type != JV_INT && v.type != JV_BOOL)
		jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "'%s' object cannot be interpreted as an integer",
				jv_type_name(v));
	return v.type == JV_BOOL ? v.u.b : v.u.i;
}

/* startswith/endswith with a string or a tuple of strings. */
static bool
Affix(jrender *r, const jargs *a, jv s, bool end)
{
	jv			p = jr_arg(r, a, 0, NULL, jv_undef(NULL));
	size_t		n = p.type == JV_LIST ? p.u.l->n : 1;

	if (a->n > 1)
		jx_fail(&r->x, a->line, CBLLM_ERR_UNSUPPORTED, "start and end arguments of startswith/endswith");
	for (size_t i = 0; i < n; i++)
	{
		jv			x = p.type == JV_LIST ? p.u.l->items[i] : p;

		if (x.type != JV_STR)
			jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "%s first arg must be str or a tuple of str, not %s",
					end ? "endswith" : "startswith", jv_type_name(x));
		if (x.n <= s.n && memcmp(s.u.s + (end ? s.n - x.n : 0), x.u.s, x.n) == 0)
			return true;
	}
	return false;
}

/* Whether every code point satisfies a class ('d' digit, 'a' alpha, 'n' alnum, 's' space); false when empty. */
static bool
AllClass(jv s, char cls)
{
	if (s.n == 0)
		return false;
	for (size_t i = 0; i < s.n;)
	{
		uint32_t	c = ju_next(s.u.s, s.n, &i);
		bool		digit = c >= '0' && c <= '9',
					alpha = (c < 0x80 && ((c | 32) >= 'a' && (c | 32) <= 'z')) || IsCased(c);

		if ((cls == 'd' && !digit) || (cls == 'a' && !alpha) || (cls == 'n' && !digit && !alpha) ||
			(cls == 's' && !ju_isspace(c)))
			return false;
	}
	return true;
}

/* A string method. */
static jv
StrMethod(jrender *r, const char *m, jv s, const jargs *a)
{
	int			line = a->line;

	jr_steps(r, line, s.n / 16);
	if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip"))
	{
		jv			c = jr_arg(r, a, 0, NULL, jv_none());

		if (c.type != JV_NONE && c.type != JV_STR)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "%s arg must be None or str", m);
		return jr_strip(r, s, c.type == JV_STR ? &c : NULL, m[0] != 'r', m[0] != 'l');
	}
	if (!strcmp(m, "split") || !strcmp(m, "rsplit"))
	{
		jv			sep = jr_arg(r, a, 0, "sep", jv_none());

		if (sep.type != JV_NONE && sep.type != JV_STR)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "must be str or None, not %s", jv_type_name(sep));
		return jr_split(r, line, s, sep.type == JV_STR ? &sep : NULL, IntArg(r, a, 1, "maxsplit", -1), m[0] == 'r');
	}
	if (!strcmp(m, "splitlines"))
		return jr_splitlines(r, s, IntArg(r, a, 0, "keepends", 0) != 0);
	if (!strcmp(m, "startswith") || !strcmp(m, "endswith"))
		return jv_bool(Affix(r, a, s, m[0] == 'e'));
	if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") || !strcmp(m, "capitalize"))
		return jr_case(r, line, s, m[0] == 'u' ? 'u' : m[0] == 'l' ? 'l' : m[0] == 't' ? 't' : 'c');
	if (!strcmp(m, "islower") || !strcmp(m, "isupper"))
		return jv_bool(IsCase(r, line, s, m[2] == 'l' ? 'l' : 'u'));
	if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isalnum") || !strcmp(m, "isspace"))
		return jv_bool(AllClass(s, m[3] == 'i' ? 'd' : m[4] == 'p' ? 'a' : m[4] == 'n' ? 'n' : 's'));
	if (!strcmp(m, "replace"))
		return jr_replace(r, line, s, StrArg(r, a, 0, m), StrArg(r, a, 1, m), IntArg(r, a, 2, "count", -1));
	if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count"))
	{
		jv			sub = StrArg(r, a, 0, m);
		long		at;
		int64_t		k = 0;

		if (a->n > 1)
			jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "start and end arguments of %s", m);
		if (m[0] == 'c')
		{
			size_t		from = 0;

			if (sub.n == 0)
				return jv_int((int64_t) ju_len(s.u.s, s.n) + 1);
			while ((at = FindBytes(s, sub, from, false)) >= 0)
			{
				k++;
				from = (size_t) at + sub.n;
			}
			return jv_int(k);
		}
		at = FindBytes(s, sub, 0, m[0] == 'r');
		return jv_int(at < 0 ? -1 : (int64_t) ju_len(s.u.s, (size_t) at));
	}
	if (!strcmp(m, "join"))
	{
		jlist	   *items = jr_iter(r, line, jr_arg(r, a, 0, NULL, jv_undef(NULL)));
		jbuf		b = {0, 0, 0, JINJA_MAX_OUTPUT};

		for (size_t i = 0; i < items->n; i++)
		{
			if (items->items[i].type != JV_STR)
				jx_fail(&r->x, line, CBLLM_ERR_INVALID, "sequence item %zu: expected str instance, %s found",
						i, jv_type_name(items->items[i]));
			if (i)
				jbuf_add(&r->x, line, &b, s.u.s, s.n);
			jbuf_add(&r->x, line, &b, items->items[i].u.s, items->items[i].n);
		}
		return b.len ? jv_str(&r->x, b.data, b.len) : jv_cstr("");
	}
	jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "unsupported string method '%s'", m);
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines",
	"startswith", "endswith", "upper", "lower", "title", "capitalize", "islower", "isupper", "isdigit",
"isalpha", "isalnum", "isspace", "replace", "find", "rfind", "count", "join", "format", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};
static const char *const LIST_METHODS[] = {"index", "count", NULL};
/* methods of list and dict that the sandbox refuses because they mutate */
static const char *const MUTATING[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort",
"clear", "update", "setdefault", "popitem", "copy", NULL};

/* Whether name is in a NULL-terminated list. */
static bool
InList(const char *const *list, const char *name)
{
	for (int i = 0; list[i] != NULL; i++)
		if (!strcmp(list[i], name))
			return true;
	return false;
}

/* A bound method value. */
static jv
Method(jrender *r, jv self, const char *name)
{
	jv			v = {JV_METHOD, 0, {0}};

	v.u.m = jx_alloc(&r->x, sizeof(jmethod));
	v.u.m->self = self;
	v.u.m->name = name;
	return v;
}

/* An attribute of a for loop's "loop" (index, first, previtem...). */
static jv
LoopAttr(jv loop, const char *name)
{
	int64_t		i = (int64_t) loop.n,
				len = (int64_t) loop.u.l->n;

	if (!strcmp(name, "index"))
		return jv_int(i + 1);
	if (!strcmp(name, "index0"))
		return jv_int(i);
	if (!strcmp(name, "revindex"))
		return jv_int(len - i);
	if (!strcmp(name, "revindex0"))
		return jv_int(len - i - 1);
	if (!strcmp(name, "first"))
		return jv_bool(i == 0);
	if (!strcmp(name, "last"))
		return jv_bool(i == len - 1);
	if (!strcmp(name, "length"))
		return jv_int(len);
	if (!strcmp(name, "depth"))
		return jv_int(1);
	if (!strcmp(name, "depth0"))
		return jv_int(0);
	if (!strcmp(name, "previtem"))
		return i > 0 ? loop.u.l->items[i - 1] : jv_undef("previtem");
	if (!strcmp(name, "nextitem"))
		return i + 1 < len ? loop.u.l->items[i + 1] : jv_undef("nextitem");
	return jv_undef(name);
}

/* The undefined value of a missing attribute, its hint the message Jinja2 gives. */
static jv
Missing(jrender *r, jv obj, const char *name, bool unsafe)
{
	char		msg[200];

	if (unsafe)
		snprintf(msg, sizeof(msg), "access to attribute '%.60s' of '%s' object is unsafe", name, jv_type_name(obj));
	else
		snprintf(msg, sizeof(msg), "'%s object' has no attribute '%.60s'", jv_type_name(obj), name);
	return jv_undef(jv_str(&r->x, msg, strlen(msg)).u.s);
}

/* obj.name. */
jv
jinja_getattr(jrender *r, int line, jv obj, const char *name)
{
	if (obj.type == JV_LOOP)
		return !strcmp(name, "cycle") ? Method(r, obj, "cycle") : LoopAttr(obj, name);
	if (obj.type == JV_DICT && obj.u.d->ns)
	{
		jv		   *v = jv_dict_gets(obj.u.d, name);

		return v ? *v : Missing(r, obj, name, false);
	}
	if (obj.type == JV_DICT)
	{
		jv		   *v;

		if (InList(DICT_METHODS, name))
			return Method(r, obj, name);
		if (InList(MUTATING, name))
			return Missing(r, obj, name, true);
		v = jv_dict_gets(obj.u.d, name);
		return v ? *v : Missing(r, obj, name, false);
	}
	if (obj.type == JV_STR && InList(STR_METHODS, name))
		return Method(r, obj, name);
	if (obj.type == JV_LIST && InList(LIST_METHODS, name))
		return Method(r, obj, name);
	return Missing(r, obj, name, obj.type == JV_LIST && InList(MUTATING, name));
}

/* Call a bound method. */
jv
jinja_call_method(jrender *r, const jmethod *m, const jargs *a)
{
	jv			self = m->self;

	jr_step(r, a->line);
	if (self.type == JV_STR)
		return StrMethod(r, m->name, self, a);
	if (self.type == JV_LOOP)
	{
		if (a->n == 0)
			jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "no items for cycling given");
		return a->pos[self.n % (size_t) a->n];
	}
	if (self.type == JV_DICT)
	{
		jdict	   *d = self.u.d;
		jv			out;

		if (!strcmp(m->name, "get"))
		{
			jv		   *v = jv_dict_get(d, jr_arg(r, a, 0, NULL, jv_none()));

			return v ? *v : jr_arg(r, a, 1, NULL, jv_none());
		}
		out = jv_new_list(&r->x, false);
		for (size_t i = 0; i < d->n; i++)
		{
			jv			item = d->keys[i];

			if (m->name[0] == 'v')
				item = d->vals[i];
			else if (m->name[0] == 'i')
			{
				item = jv_new_list(&r->x, true);
				jv_list_push(&r->x, item.u.l, d->keys[i]);
				jv_list_push(&r->x, item.u.l, d->vals[i]);
			}
			jv_list_push(&r->x, out.u.l, item);
		}
		return out;
	}
	{
		jv			x = jr_arg(r, a, 0, NULL, jv_undef(NULL));
		int64_t		k = 0;

		for (size_t i = 0; i < self.u.l->n; i++)
			if (jv_equal(self.u.l->items[i], x))
			{
				if (m->name[0] == 'i')
					return jv_int((int64_t) i);
				k++;
			}
		if (m->name[0] == 'i')
			jx_fail(&r->x, a->line, CBLLM_ERR_INVALID, "list.index(x): x not in list");
		return jv_int(k);
	}
}

enum
{
	G_RANGE, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME
};
static const char *const GLOBALS[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

/* The id of a global function. */
int
jinja_global_id(const char *name)
{
	for (int i = 0; GLOBALS[i] != NULL; i++)
		if (!strcmp(GLOBALS[i], name))
			return i;
	return -1;
}

/* Call a global function. */
jv
jinja_call_global(jrender *r, int id, const jargs *a)
{
	int			line = a->line;

	jr_step(r, line);
	if (id == G_RANGE)
	{
		int64_t		start = 0,
					stop,
					step = 1;
		jv			out = jv_new_list(&r->x, false);

		if (a->n < 1 || a->n > 3 || a->nkw)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "range expected 1 to 3 integer arguments");
		stop = IntArg(r, a, 0, NULL, 0);
		if (a->n > 1)
		{
			start = stop;
			stop = IntArg(r, a, 1, NULL, 0);
		}
		if (a->n > 2)
			step = IntArg(r, a, 2, NULL, 1);
		if (step == 0)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "range() arg 3 must not be zero");
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
		{
			if (out.u.l->n >= JINJA_MAX_RANGE)
				jx_fail(&r->x, line, CBLLM_ERR_TOO_LONG, "range too big, maximum size for range is %d",
						JINJA_MAX_RANGE);
			jv_list_push(&r->x, out.u.l, jv_int(i));
			if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
				break;
		}
		return out;
	}
	if (id == G_NAMESPACE || id == G_DICT)
	{
		jv			out = jv_new_dict(&r->x, id == G_NAMESPACE);

		for (int i = 0; i < a->n; i++)
		{
			jv			src = a->pos[i];

			if (src.type != JV_DICT || i > 0)
				jx_fail(&r->x, line, CBLLM_ERR_UNSUPPORTED, "%s() takes keyword arguments or one dict",
						GLOBALS[id]);
			for (size_t k = 0; k < src.u.d->n; k++)
				jv_dict_set(&r->x, out.u.d, src.u.d->keys[k], src.u.d->vals[k]);
		}
		for (int i = 0; i < a->nkw; i++)
			jv_dict_set(&r->x, out.u.d, jv_cstr(a->kwn[i]), a->kwv[i]);
		return out;
	}
	if (id == G_RAISE)
	{
		jbuf		b = {0};

		jv_to_str(&r->x, line, &b, jr_arg(r, a, 0, NULL, jv_cstr("")));
		jx_fail(&r->x, line, CBLLM_ERR_INVALID, "%s", b.data ? b.data : "");
	}
	{
		jv			fmt = StrArg(r, a, 0, "strftime_now");
		char		f[256],
					out[1024];
		time_t		now = time(NULL);
		struct tm	tm;
		size_t		n;

		if (fmt.n >= sizeof(f) || memchr(fmt.u.s, '\0', fmt.n) != NULL)
			jx_fail(&r->x, line, CBLLM_ERR_INVALID, "strftime_now: format too long");
		memcpy(f, fmt.u.s, fmt.n);
		f[fmt.n] = '\0';
		localtime_r(&now, &tm);
		n = strftime(out, sizeof(out), f, &tm);
		return jv_str(&r->x, out, n);
	}
}
