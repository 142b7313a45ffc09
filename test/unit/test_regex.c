/*
 * test_regex.c: the regular expressions of constrained decoding
 * (regex_parse.c, regex_dfa.c): what each construct matches (UTF-8 classes
 * included), the negated shorthand classes as Python's Unicode ones, the
 * refusals with their codes and messages, the distances and sizes of the
 * automata, the agreement with Python's re.fullmatch over every short
 * string of small alphabets, the JSON string bodies (checked against the
 * pattern over every short string), regex_escape, and the compile time of a
 * pattern of the size a JSON schema gives (a diagnostic, not a check).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "constrain/regex.h"
#include "tap.h"

/* Whether d keeps the promises of regex.h: rows in range, dist exact, every state live and reachable. */
static bool
DfaSane(const cbllm_dfa *d)
{
	int32_t    *seen = calloc(d->n_states, sizeof(int32_t));
	int32_t    *queue = malloc(sizeof(int32_t) * d->n_states);
	int32_t		head = 0,
				tail = 0;
	bool		ok = seen != NULL && queue != NULL && d->n_states >= 1 && d->n_classes >= 1 &&
		d->n_classes <= 256;

	for (int b = 0; ok && b < 256; b++)
		ok = d->byte_class[b] < d->n_classes;
	for (int32_t s = 0; ok && s < d->n_states; s++)
	{
		int32_t		best = -1;

		for (int32_t c = 0; ok && c < d->n_classes; c++)
		{
			int32_t		t = d->next[(size_t) s * d->n_classes + c];

			ok = t >= -1 && t < d->n_states;
			if (ok && t >= 0 && (best < 0 || d->dist[t] < best))
				best = d->dist[t];
		}
		ok = ok && (d->accept[s] ? d->dist[s] == 0 : best >= 0 && d->dist[s] == best + 1);
	}
	if (ok)
		seen[0] = 1, queue[tail++] = 0;
	while (ok && head < tail)
	{
		int32_t		s = queue[head++];

		for (int32_t c = 0; c < d->n_classes; c++)
		{
			int32_t		t = d->next[(size_t) s * d->n_classes + c];

			if (t >= 0 && !seen[t])
				seen[t] = 1, queue[tail++] = t;
		}
	}
	ok = ok && tail == d->n_states;
	free(seen);
	free(queue);
	return ok;
}

/* Compile pattern (or NULL on failure, err filled). */
static cbllm_dfa *
Compile(const char *pattern, cbllm_err *err)
{
	cbllm_dfa  *d = NULL;

	memset(err, 0, sizeof(*err));
	if (regex_compile(pattern, strlen(pattern), &d, err) != CBLLM_OK)
		return NULL;
	return d;
}

typedef struct match_case
{
	const char *pattern;
	const char *text;
	bool		match;
} match_case;

static const match_case matches[] = {
	{"abc", "abc", true}, {"abc", "ab", false}, {"abc", "abcd", false}, {"", "", true}, {"", "a", false},
	{"[a-c]x", "bx", true}, {"[a-c]x", "dx", false}, {"[^a]", "b", true}, {"[^a]", "a", false},
	{"[^a]", "\xC3\xA9", true}, {"[^a]", "\xF0\x9F\x98\x80", true}, {"[^a]", "\xC3", false},
	{"[^a]", "\xED\xA0\x80", false}, {"[^a]", "\xC0\xAF", false}, {"[^a]", "\xF4\x90\x80\x80", false},
	{"[^a]", "\n", true}, {"[^a]", "", false}, {"[^a]", "bc", false},
	{".", "\n", false}, {".", "\r", true}, {".", "\xE2\x82\xAC", true}, {".", "\xEF\xBF\xBF", true},
	{".", "\xF4\x8F\xBF\xBF", true}, {".", "\xE0\x80\x80", false}, {".*", "any\ttext", true},
	{"[\xC3\xA0-\xC3\xBF]", "\xC3\xA9", true}, {"[\xC3\xA0-\xC3\xBF]", "e", false},
	{"[\\x{100}-\\x{10FFFF}]", "\xC4\x80", true}, {"[\\x{100}-\\x{10FFFF}]", "\xC3\xBF", false},
	{"[\\x{100}-\\x{10FFFF}]", "\xF4\x8F\xBF\xBF", true}, {"[\\x{100}-\\x{10FFFF}]", "\xEE\x80\x80", true},
	{"a*", "", true}, {"a*", "aaaa", true}, {"a+", "", false}, {"a+", "aa", true}, {"ab?c", "ac", true},
	{"ab?c", "abbc", false}, {"a{3}", "aaa", true}, {"a{3}", "aa", false}, {"a{2,4}", "aaaa", true},
	{"a{2,4}", "aaaaa", false}, {"a{2,}", "aaaaaaa", true}, {"a{2,}", "a", false}, {"a{,2}", "", true},
	{"a{,2}", "aaa", false}, {"a{0}b", "b", true}, {"a*?b", "aab", true}, {"a{1,2}?", "aa", true},
	{"x{", "x{", true}, {"x{a}", "x{a}", true}, {"x{1,2", "x{1,2", true}, {"x{}", "x{}", true},
	{"a|", "", true}, {"a|", "a", true}, {"|b", "b", true}, {"a|b|cd", "cd", true}, {"a|b|cd", "c", false},
	{"(a|b)*c", "ababc", true}, {"(?:ab)+", "abab", true}, {"(?:ab)+", "aba", false},
	{"((a)(b(c)))", "abc", true}, {"(?P<x>a)(?<y>b)", "ab", true}, {"(?:(?:a|)b)*", "bab", true},
	{"(?#note)ab", "ab", true}, {"^ab$", "ab", true}, {"^a|b$", "b", true}, {"\\Aab\\Z", "ab", true},
	{"ab\\z", "ab", true}, {"^$", "", true}, {"\\d+", "0123456789", true}, {"\\d", "a", false},
	{"\\D", "a", true}, {"\\D", "5", false}, {"\\w+", "az_AZ09", true}, {"\\w", "-", false},
	{"\\W", "\xC3\xA9", false}, {"\\s", "\x0B", true}, {"\\s", "\f", true}, {"\\s", "a", false},
	{"\\S", "a", true}, {"\\S", " ", false}, {"[\\d\\s]+", "1 2\t3", true}, {"[\\W]", "a", false},
	{"\\n\\r\\t\\f\\v", "\n\r\t\f\v", true}, {"\\x41\\u00e9", "A\xC3\xA9", true},
	{"\\x{1F600}", "\xF0\x9F\x98\x80", true}, {"\\U0001F600", "\xF0\x9F\x98\x80", true},
	{"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-", ".*+?()[]{}|^$\\/-", true},
	{"[]a]", "]", true}, {"[a-]", "-", true}, {"[-a]", "-", true}, {"[\\]]", "]", true},
	{"[\\b]", "\b", true}, {"[a\\-z]", "b", false}, {"[\\x{1F600}-\\x{1F64F}]", "\xF0\x9F\x99\x8F", true},
	{"\xC3\xA9+", "\xC3\xA9\xC3\xA9", true}, {"\xC3\xA9+", "\xC3\xA9\xA9", false},
	{"[^\\x00-\\x7F]", "\xE2\x82\xAC", true}, {"[^\\x00-\\x7F]", "~", false},
	{"[\\uD7FF-\\uE000]", "\xED\x9F\xBF", true}, {"[\\uD7FF-\\uE000]", "\xED\xA0\x80", false},
	{"[\\uD7FF-\\uE000]", "\xEE\x80\x80", true},
};

/* Each row of matches[]: what dfa_match says, and that the automaton keeps its promises. */
static void
TestMatches(void)
{
	int			wrong = 0,
				insane = 0,
				failed = 0;

	for (size_t i = 0; i < sizeof(matches) / sizeof(matches[0]); i++)
	{
		const match_case *m = &matches[i];
		cbllm_err	err;
		cbllm_dfa  *d = Compile(m->pattern, &err);

		if (d == NULL)
		{
			failed++;
			TAP_DIAG("%s: %s", m->pattern, err.msg);
			continue;
		}
		if (dfa_match(d, m->text, strlen(m->text)) != m->match)
		{
			wrong++;
			TAP_DIAG("/%s/ on \"%s\": expected %s", m->pattern, m->text, m->match ? "a match" : "none");
		}
		insane += !DfaSane(d);
		dfa_free(d);
	}
	TAP_OK(failed == 0, "every pattern of the match table compiles");
	TAP_OK(wrong == 0, "dfa_match agrees with all %zu cases of literals, classes, UTF-8, quantifiers, "
		   "groups, anchors and escapes", sizeof(matches) / sizeof(matches[0]));
	TAP_OK(insane == 0, "every automaton of the table has rows in range, exact distances and only live, "
		   "reachable states");
}

/* A NUL in the pattern (as \0 and raw) and in the text. */
static void
TestNul(void)
{
	cbllm_dfa  *d = NULL;
	cbllm_err	err;
	bool		ok = regex_compile("a\\0", 3, &d, &err) == CBLLM_OK && dfa_match(d, "a\0", 2) &&
		!dfa_match(d, "a", 1);

	dfa_free(d);
	d = NULL;
	ok = ok && regex_compile("a\0b", 3, &d, &err) == CBLLM_OK && dfa_match(d, "a\0b", 3);
	dfa_free(d);
	TAP_OK(ok, "\\0 and a raw NUL byte in the pattern match a NUL");
}

/* Whether pattern compiles and matches each of the NUL-separated texts in yes and none of those in no. */
static bool
Admits(const char *pattern, const char *yes, const char *no)
{
	cbllm_err	err;
	cbllm_dfa  *d = Compile(pattern, &err);
	bool		ok = d != NULL;

	for (const char *t = yes; ok && *t; t += strlen(t) + 1)
		ok = dfa_match(d, t, strlen(t));
	for (const char *t = no; ok && *t; t += strlen(t) + 1)
		ok = !dfa_match(d, t, strlen(t));
	if (d == NULL)
		TAP_DIAG("/%s/: %s", pattern, err.msg);
	dfa_free(d);
	return ok;
}

/*
 * \d \w \s are ASCII, but a negated one (\D \W \S, or a member of [^...])
 * leaves out Python's whole Unicode set, so that it admits nothing Python's
 * negation refuses: U+0660 ARABIC-INDIC DIGIT ZERO is in Python's \d, e-acute
 * in its \w, U+00A0 and U+2028 in its \s.  Negated twice (\W in [^...]) they
 * are ASCII again.  The compile time of \W+ is a diagnostic.
 */
static void
TestShorthandUnicode(void)
{
	cbllm_err	err;
	double		t0 = cbllm_now();
	cbllm_dfa  *d = Compile("\\W+", &err);
	double		t1 = cbllm_now();

	if (d != NULL)
		TAP_DIAG("compile of \\W+: %.2f ms, %d states, %d byte classes", (t1 - t0) * 1e3, d->n_states,
				 d->n_classes);
	dfa_free(d);
	TAP_OK(Admits("\\D", "a\0\xC3\xA9\0", "\xD9\xA0\0" "5\0"),
		   "\\D accepts a and e-acute, rejects U+0660 (Arabic-Indic zero) and 5");
	TAP_OK(Admits("[^\\w]", "-\0\xF0\x9F\x98\x80\0", "\xC3\xA9\0\xD9\xA0\0_\0") &&
		   Admits("[^\\d_]", "a\0\xC3\xA9\0", "\xD9\xA0\0" "7\0_\0"),
		   "[^\\w] rejects e-acute and U+0660 and accepts - and an emoji; [^\\d_] rejects U+0660");
	TAP_OK(Admits("\\S", "a\0\xC3\xA9\0", "\xC2\xA0\0\xE2\x80\xA8\0\xC2\x85\0\xE3\x80\x80\0 \0") &&
		   Admits("[^\\s]", "a\0", "\xC2\xA0\0\xE2\x80\xA8\0\x1C\0"),
		   "\\S and [^\\s] reject U+00A0, U+2028, U+0085, U+3000 and U+001C");
	TAP_OK(Admits("\\W", "-\0 \0\xF0\x9F\x98\x80\0", "_\0a\0\xC3\xA9\0\xE2\x85\xA0\0"),
		   "\\W accepts - and rejects _, a, e-acute and U+2160 (Roman numeral one)");
	TAP_OK(Admits("\\d", "0\0", "\xD9\xA0\0") && Admits("\\w", "_\0", "\xC3\xA9\0") &&
		   Admits("\\s", " \0", "\xC2\xA0\0") && Admits("[^\\W]", "_\0a\0", "\xC3\xA9\0-\0") &&
		   Admits("[^\\D\\s]", "7\0", "\xD9\xA0\0 \0"),
		   "\\d \\w \\s stay ASCII, and so do \\D \\W \\S negated again in a [^...]");
}

typedef struct error_case
{
	const char *pattern;
	int			code;
	const char *msg;			/* a substring of the message */
} error_case;

static const error_case errors[] = {
	{"a(?=b)", CBLLM_ERR_UNSUPPORTED, "regex: lookahead (?= at offset 1 is not supported"},
	{"(?!a)b", CBLLM_ERR_UNSUPPORTED, "negative lookahead (?! at offset 0"},
	{"(?<=a)b", CBLLM_ERR_UNSUPPORTED, "lookbehind (?<= at offset 0"},
	{"(?<!a)b", CBLLM_ERR_UNSUPPORTED, "negative lookbehind (?<! at offset 0"},
	{"(a)\\1", CBLLM_ERR_UNSUPPORTED, "backreference \\1 at offset 3"},
	{"(?P<x>a)(?P=x)", CBLLM_ERR_UNSUPPORTED, "backreference (?P= at offset 8"},
	{"(?<x>a)\\k<x>", CBLLM_ERR_UNSUPPORTED, "backreference \\k at offset 7"},
	{"\\bfoo", CBLLM_ERR_UNSUPPORTED, "word boundary \\b at offset 0"},
	{"a\\B", CBLLM_ERR_UNSUPPORTED, "word boundary \\B at offset 1"},
	{"\\p{L}", CBLLM_ERR_UNSUPPORTED, "Unicode property \\p at offset 0"},
	{"x\\q", CBLLM_ERR_UNSUPPORTED, "escape \\q at offset 1"},
	{"(?i)a", CBLLM_ERR_UNSUPPORTED, "inline flags (?i at offset 0"},
	{"(?>a)", CBLLM_ERR_UNSUPPORTED, "atomic group (?> at offset 0"},
	{"a*+", CBLLM_ERR_UNSUPPORTED, "possessive quantifier at offset 2"},
	{"a{1001}", CBLLM_ERR_UNSUPPORTED, "repeat count 1001 at offset 1"},
	{"a{2,5000}", CBLLM_ERR_UNSUPPORTED, "repeat count 5000 at offset 1"},
	{"a^b", CBLLM_ERR_UNSUPPORTED, "anchor ^ at offset 1"},
	{"a$b", CBLLM_ERR_UNSUPPORTED, "anchor $ at offset 1"},
	{"(^a)", CBLLM_ERR_UNSUPPORTED, "anchor ^ at offset 1"},
	{"a\\Zb", CBLLM_ERR_UNSUPPORTED, "anchor \\Z at offset 1"},
	{"[\\A]", CBLLM_ERR_UNSUPPORTED, "anchor \\A at offset 1 is not supported in a character class"},
	{"[z-a]", CBLLM_ERR_INVALID, "regex: bad character range z-a at offset 1"},
	{"[\\d-z]", CBLLM_ERR_INVALID, "bad character range \\d-z at offset 1"},
	{"(ab", CBLLM_ERR_INVALID, "missing ) for the group opened at offset 0"},
	{"ab)", CBLLM_ERR_INVALID, "unbalanced ) at offset 2"},
	{"*a", CBLLM_ERR_INVALID, "nothing to repeat at offset 0"},
	{"a|+", CBLLM_ERR_INVALID, "nothing to repeat at offset 2"},
	{"(?:{2})", CBLLM_ERR_INVALID, "nothing to repeat at offset 3"},
	{"^*", CBLLM_ERR_INVALID, "nothing to repeat at offset 1"},
	{"a**", CBLLM_ERR_INVALID, "multiple repeat at offset 2"},
	{"a{3,2}", CBLLM_ERR_INVALID, "maximum below its minimum"},
	{"[ab", CBLLM_ERR_INVALID, "unterminated character class at offset 0"},
	{"[]", CBLLM_ERR_INVALID, "unterminated character class at offset 0"},
	{"ab\\", CBLLM_ERR_INVALID, "ends with a backslash"},
	{"\\xZZ", CBLLM_ERR_INVALID, "bad escape \\x at offset 0"},
	{"\\u12", CBLLM_ERR_INVALID, "bad escape \\u at offset 0"},
	{"\\x{110000}", CBLLM_ERR_INVALID, "above U+10FFFF"},
	{"(?P<1x>a)", CBLLM_ERR_INVALID, "bad group name at offset 0"},
	{"a\xC3", CBLLM_ERR_INVALID, "regex: invalid UTF-8 at offset 1"},
	{"\xED\xA0\x80", CBLLM_ERR_INVALID, "invalid UTF-8 at offset 0"},
	{"ab\xFF", CBLLM_ERR_INVALID, "invalid UTF-8 at offset 2"},
	{"[^\\x00-\\x{10FFFF}]", CBLLM_ERR_INVALID, "regex: the pattern matches nothing"},
	{"a[^\\s\\S]|[^\\d\\D]", CBLLM_ERR_INVALID, "the pattern matches nothing"},
	{"[ab]*a[ab]{16}", CBLLM_ERR_UNSUPPORTED,
	"regex: the automaton exceeds 65536 states; simplify the pattern"},
	{"(?:(?:a{1000}){1000}){1000}", CBLLM_ERR_UNSUPPORTED, "too large"},
};

/* Each refusal: its status code and the construct and offset its message names. */
static void
TestErrors(void)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
	{
		const error_case *e = &errors[i];
		cbllm_dfa  *d = (cbllm_dfa *) &errors;	/* must become NULL */
		cbllm_err	err = {{0}};
		int			rc = regex_compile(e->pattern, strlen(e->pattern), &d, &err);

		TAP_OK(rc == e->code && d == NULL && strstr(err.msg, e->msg) != NULL,
			   "/%s/ is refused as %s: %s", e->pattern, cbllm_status_name(e->code), e->msg);
		if (rc != e->code || strstr(err.msg, e->msg) == NULL)
			TAP_DIAG("got %d: %s", rc, err.msg);
		if (rc == CBLLM_OK)
			dfa_free(d);
	}
}

/* Groups nested past the limit are refused, not recursed into; nested up to it they compile. */
static void
TestNesting(void)
{
	char		p[1024];
	int			depth[2] = {256, 300};

	for (int k = 0; k < 2; k++)
	{
		cbllm_dfa  *d = NULL;
		cbllm_err	err = {{0}};
		int			n = 0,
					rc;

		for (int i = 0; i < depth[k]; i++)
			p[n++] = '(';
		p[n++] = 'a';
		for (int i = 0; i < depth[k]; i++)
			p[n++] = ')';
		rc = regex_compile(p, (size_t) n, &d, &err);
		if (k == 0)
			TAP_OK(rc == CBLLM_OK && dfa_match(d, "a", 1), "groups nested 256 deep compile");
		else
			TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "nested deeper than 256") != NULL,
				   "groups nested 300 deep are refused: %s", err.msg);
		dfa_free(d);
	}
}

typedef struct size_case
{
	const char *pattern;
	int32_t		dist0;			/* dist of the start */
	int32_t		max_states;
	int32_t		max_classes;
} size_case;

static const size_case sizes[] = {
	{"abc|de", 2, 5, 6}, {"[0-9]{3}", 3, 4, 2}, {"[a-z]+", 1, 2, 3}, {"a*", 0, 1, 2},
	{"(?:ab)+c", 3, 4, 4}, {"\xC3\xA9", 2, 3, 3}, {"\\x{1F600}", 4, 5, 5}, {"(?:a|b)*abb", 3, 4, 3},
	{"a{2,3}", 2, 4, 2}, {"[^a]", 1, 9, 12}, {"(?:a|ab)(?:c|bcd)", 2, 7, 5},
	{"(?:0|[1-9][0-9]*)", 1, 3, 4},
};

/* Distances of starts, and that minimisation leaves the automata as small as they can be. */
static void
TestSizes(void)
{
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
	{
		const size_case *z = &sizes[i];
		cbllm_err	err;
		cbllm_dfa  *d = Compile(z->pattern, &err);

		TAP_OK(d != NULL && d->dist[0] == z->dist0 && d->n_states <= z->max_states &&
			   d->n_classes <= z->max_classes,
			   "/%s/: dist[0] %d, at most %d states and %d byte classes (got %d, %d, %d)",
			   z->pattern, z->dist0, z->max_states, z->max_classes, d ? d->dist[0] : -1,
			   d ? d->n_states : -1, d ? d->n_classes : -1);
		dfa_free(d);
	}
}

/* ------------------------------------------------ against Python's re */

/* Append to p a random pattern over {a, b, c} that Python and regex_compile both accept. */
static void
RandomPattern(uint64_t *rng, int depth, char *p, size_t *n, size_t cap)
{
	static const char *const atoms[] = {"a", "b", "c", ".", "[ab]", "[^a]", "[a-b]", "\\w", "\\D", "[b-c]"};
	static const char *const quants[] = {"*", "+", "?", "{2}", "{1,2}", "{0,2}", "{2,}", "*?", "{,1}"};
	int			r;

	*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
	r = (int) (*rng >> 33) % (depth > 2 ? 2 : 6);
	if (*n + 16 >= cap)
		return;
	if (r < 2)
	{
		const char *a = atoms[(*rng >> 40) % 10];

		memcpy(p + *n, a, strlen(a));
		*n += strlen(a);
	}
	else if (r < 4)				/* a sequence of two */
	{
		RandomPattern(rng, depth + 1, p, n, cap);
		RandomPattern(rng, depth + 1, p, n, cap);
	}
	else if (r == 4)			/* alternation in a group */
	{
		memcpy(p + *n, "(?:", 3), *n += 3;
		RandomPattern(rng, depth + 1, p, n, cap);
		p[(*n)++] = '|';
		if ((*rng >> 50) % 4 != 0)
			RandomPattern(rng, depth + 1, p, n, cap);
		p[(*n)++] = ')';
	}
	if (r == 5 || (r < 2 && (*rng >> 45) % 3 == 0))	/* a quantified group or atom */
	{
		const char *q = quants[(*rng >> 20) % 9];

		if (r == 5)
		{
			p[(*n)++] = '(';
			RandomPattern(rng, depth + 1, p, n, cap);
			p[(*n)++] = ')';
		}
		memcpy(p + *n, q, strlen(q));
		*n += strlen(q);
	}
	p[*n] = '\0';
}

#define MAX_PATTERNS 48

static const char *const py_script =
"import re, sys, itertools\n"
"alpha = sys.argv[2].split(',')\n"
"strs = [''.join(t) for n in range(int(sys.argv[3]) + 1) for t in itertools.product(alpha, repeat=n)]\n"
"for line in open(sys.argv[1], encoding='utf-8'):\n"
"    r = re.compile(line.rstrip('\\n'))\n"
"    print(''.join('1' if r.fullmatch(s) else '0' for s in strs))\n";

/* The text of string number idx of all strings over alpha[0..n_alpha) up to max_len, in Python's order. */
static size_t
NthString(const char *const *alpha, int n_alpha, int max_len, int64_t idx, char *out)
{
	int			len = 0;
	int64_t		count = 1;
	size_t		n = 0;
	int			digit[16];

	while (len < max_len && idx >= count)
		idx -= count, count *= n_alpha, len++;
	for (int i = len - 1; i >= 0; i--)
		digit[i] = (int) (idx % n_alpha), idx /= n_alpha;
	for (int i = 0; i < len; i++)
	{
		memcpy(out + n, alpha[digit[i]], strlen(alpha[digit[i]]));
		n += strlen(alpha[digit[i]]);
	}
	return n;
}

/* Compare dfa_match with re.fullmatch for patterns[0..n) over every string up to max_len. */
static void
ComparePython(const char *what, char patterns[][128], int n, const char *const *alpha, int n_alpha,
			  int max_len)
{
	char		file[] = "/tmp/cbllm_regex_XXXXXX";
	char		cmd[512];
	char		line[32768];
	char		text[256];
	int			fd = mkstemp(file);
	FILE	   *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	FILE	   *py;
	int			compared = 0,
				wrong = 0,
				rows = 0;
	int64_t		n_str = 0,
				count = 1;
	size_t		alen = 0;

	for (int l = 0; l <= max_len; l++, count *= n_alpha)
		n_str += count;
	for (int i = 0; f != NULL && i < n; i++)
		fprintf(f, "%s\n", patterns[i]);
	if (f != NULL)
		fclose(f);
	alen = (size_t) snprintf(cmd, sizeof(cmd), "python3 -c \"$CBLLM_PY\" %s '", file);
	for (int i = 0; i < n_alpha; i++)
		alen += (size_t) snprintf(cmd + alen, sizeof(cmd) - alen, "%s%s", i ? "," : "", alpha[i]);
	snprintf(cmd + alen, sizeof(cmd) - alen, "' %d 2>/dev/null", max_len);
	setenv("CBLLM_PY", py_script, 1);
	py = f != NULL ? popen(cmd, "r") : NULL;
	while (py != NULL && rows < n && fgets(line, sizeof(line), py) != NULL)
	{
		cbllm_err	err;
		cbllm_dfa  *d = Compile(patterns[rows], &err);

		if (d == NULL || (int64_t) strlen(line) < n_str)
		{
			TAP_DIAG("/%s/: %s", patterns[rows], d == NULL ? err.msg : "short line from python3");
			wrong++;
		}
		for (int64_t s = 0; d != NULL && s < n_str && (int64_t) strlen(line) >= n_str; s++)
		{
			size_t		len = NthString(alpha, n_alpha, max_len, s, text);

			compared++;
			if (dfa_match(d, text, len) != (line[s] == '1'))
			{
				if (wrong++ < 5)
					TAP_DIAG("/%s/ on \"%.*s\": python says %c", patterns[rows], (int) len, text, line[s]);
			}
		}
		dfa_free(d);
		rows++;
	}
	if (py != NULL)
		pclose(py);
	unlink(file);
	if (rows < n)
	{
		TAP_DIAG("python3 is not available (%d of %d rows): %s skipped", rows, n, what);
		return;
	}
	TAP_OK(wrong == 0 && compared > 0, "%s: dfa_match agrees with Python's re.fullmatch on %d of %d "
		   "(pattern, string) pairs", what, compared - wrong, compared);
}

/*
 * Random and chosen patterns over {a, b, c}; then Unicode ones over {a, é,
 * 😀, \n}; then negated shorthand classes over characters Python's Unicode
 * \d \w \s hold and ASCII's do not.
 */
static void
TestPython(void)
{
	static const char *const ascii[] = {"a", "b", "c"};
	static const char *const uni[] = {"a", "\xC3\xA9", "\xF0\x9F\x98\x80", "\n"};
	static const char *const fixed[] = {
		"(?:a|b)*abb", "a{2,3}|b{,2}c?", "(a|)+b", "(?:ab|a)(?:bc|c)", "^a|b$", "(?:a*b*)*c",
		"[^b]{2}", ".?.?", "(?:a|b|)c{0}", "a(?#c)b", "(?:(?:a)?b)+", "c|(?:b|(?:a|))",
	};
	static const char *const unicode[] = {
		".", "[^a]*", "[\xC3\xA0-\xC3\xBF]+", "\\U0001F600|\xC3\xA9", "[^\\n]{2}", "\\S\\D?", "[\\x00-\\xff]+",
		"(?:\xC3\xA9|a)\xF0\x9F\x98\x80?", ".*\\n",
	};
	static const char *const wide[] = {
		"a", "_", "-", "\xC3\xA9", "\xD9\xA0", "\xC2\xA0", "\xE2\x80\xA8", "\xF0\x9F\x98\x80",
	};
	/* equal to Python's: a set taken away is its whole Unicode one (one that adds is ASCII, a part) */
	static const char *const negated[] = {
		"\\D", "\\W", "\\S", "[^\\d]", "[^\\w]", "[^\\s]", "[^\\w\\s]+", "[^\\d_]*", "\\W\\S?", "[^\\w-]",
	};
	char		pats[MAX_PATTERNS][128];
	int			n = 0;
	uint64_t	rng = 20240607;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		snprintf(pats[n++], sizeof(pats[0]), "%s", fixed[i]);
	while (n < 36)
	{
		size_t		len = 0;
		cbllm_err	err;
		cbllm_dfa  *d;

		RandomPattern(&rng, 0, pats[n], &len, sizeof(pats[0]));
		if (len == 0)
			continue;
		d = Compile(pats[n], &err);
		if (d != NULL)			/* one matching nothing (such as [^a]{0}[^\w]) is left out */
			n++;
		dfa_free(d);
	}
	ComparePython("36 patterns over {a, b, c}, strings up to 6 long", pats, n, ascii, 3, 6);
	n = 0;
	for (size_t i = 0; i < sizeof(unicode) / sizeof(unicode[0]); i++)
		snprintf(pats[n++], sizeof(pats[0]), "%s", unicode[i]);
	ComparePython("9 UTF-8 patterns over {a, e-acute, emoji, newline}, strings up to 4 long", pats, n, uni,
				  4, 4);
	n = 0;
	for (size_t i = 0; i < sizeof(negated) / sizeof(negated[0]); i++)
		snprintf(pats[n++], sizeof(pats[0]), "%s", negated[i]);
	ComparePython("10 negated shorthand patterns over {a, _, -, e-acute, U+0660, U+00A0, U+2028, emoji}, "
				  "strings up to 3 long", pats, n, wide, 8, 3);
}

/* --------------------------------------------------- JSON string bodies */

/* The body of pattern, compiled; NULL (and *rc) when either step fails. */
static cbllm_dfa *
JsonBody(const char *pattern, int *rc, cbllm_err *err, char *text, size_t cap)
{
	cbllm_buf	b = {0};
	cbllm_dfa  *d = NULL;

	memset(err, 0, sizeof(*err));
	*rc = regex_json_string_body(pattern, strlen(pattern), &b, err);
	if (*rc == CBLLM_OK)
	{
		snprintf(text, cap, "%s", b.data ? b.data : "");
		*rc = regex_compile(b.data ? b.data : "", b.len, &d, err);
	}
	cbllm_buf_free(&b);
	return d;
}

/* Whether s[0..n) holds a character a JSON string must escape. */
static bool
NeedsEscape(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((uint8_t) s[i] < 0x20 || s[i] == '"' || s[i] == '\\')
			return true;
	return false;
}

/* The body matches exactly the strings the pattern matches that need no escapes (every short string). */
static void
TestJsonBodyExact(void)
{
	static const char *const pats[] = {
		"[a-z\"]+", ".*", "\"?a", "(?:\\\\n|x)+", "a\"|b", "[^\"]*\\\\?", "^(?:a|\\x01)*\\\\?$",
		"[\\x00-\\x{10FFFF}]{0,3}", "(?:\"|\\s)*a", "\\W+",
	};
	static const char *const alpha[] = {"a", "\"", "\\", "\x01", "\xC3\xA9", " ", "x", "n"};
	char		text[64],
				out[256];
	int			wrong = 0,
				failed = 0;

	for (size_t i = 0; i < sizeof(pats) / sizeof(pats[0]); i++)
	{
		cbllm_err	err;
		int			rc;
		cbllm_dfa  *orig = Compile(pats[i], &err);
		cbllm_dfa  *body = JsonBody(pats[i], &rc, &err, out, sizeof(out));

		if (orig == NULL || body == NULL)
		{
			failed++;
			TAP_DIAG("/%s/: %s", pats[i], err.msg);
		}
		for (int64_t s = 0; orig != NULL && body != NULL && s < 1 + 8 + 64 + 512 + 4096; s++)
		{
			size_t		n = NthString(alpha, 8, 4, s, text);
			bool		want = dfa_match(orig, text, n) && !NeedsEscape(text, n);

			if (dfa_match(body, text, n) != want && wrong++ < 5)
				TAP_DIAG("/%s/ -> /%s/ on \"%.*s\": expected %d", pats[i], out, (int) n, text, want);
		}
		dfa_free(orig);
		dfa_free(body);
	}
	TAP_OK(failed == 0 && wrong == 0, "for 10 patterns the JSON string body compiles and matches exactly "
		   "the pattern's matches without '\"', '\\\\' or control characters, over every string of up to "
		   "4 characters of 8");
}

/* Named cases of regex_json_string_body. */
static void
TestJsonBody(void)
{
	char		out[256];
	cbllm_err	err;
	int			rc;
	cbllm_dfa  *d = JsonBody("[a-z\"]+", &rc, &err, out, sizeof(out));

	TAP_OK(d != NULL && dfa_match(d, "abc", 3) && !dfa_match(d, "a\"b", 3) && !dfa_match(d, "\"", 1),
		   "body of [a-z\"]+ (%s) matches abc, not a\"b", out);
	dfa_free(d);
	d = JsonBody(".*", &rc, &err, out, sizeof(out));
	TAP_OK(d != NULL && dfa_match(d, "a b\xC3\xA9", 5) && !dfa_match(d, "a\\", 2) && !dfa_match(d, "\"", 1) &&
		   !dfa_match(d, "\t", 1) && !dfa_match(d, "\x7F\x1F", 2), "body of .* (%s) excludes \\, \" and "
		   "control characters", out);
	dfa_free(d);
	d = JsonBody("^\\d{3}-\\d{4}$", &rc, &err, out, sizeof(out));
	TAP_OK(d != NULL && dfa_match(d, "555-1234", 8) && strchr(out, '^') == NULL && strchr(out, '$') == NULL,
		   "body of ^\\d{3}-\\d{4}$ drops the anchors: %s", out);
	dfa_free(d);
	d = JsonBody("\"", &rc, &err, out, sizeof(out));
	TAP_OK(d == NULL && rc == CBLLM_ERR_INVALID && strstr(err.msg, "matches no string a JSON string can hold"),
		   "a pattern of only '\"' has no body: %s", err.msg);
	d = JsonBody("a(?:\\\\|\\x00)b", &rc, &err, out, sizeof(out));
	TAP_OK(d == NULL && rc == CBLLM_ERR_INVALID, "a pattern that needs a backslash or a NUL has no body");
	d = JsonBody("(?:a", &rc, &err, out, sizeof(out));
	TAP_OK(d == NULL && rc == CBLLM_ERR_INVALID && strstr(err.msg, "missing )"),
		   "a malformed pattern's body fails as regex_compile does: %s", err.msg);
	d = JsonBody("a(?=b)", &rc, &err, out, sizeof(out));
	TAP_OK(d == NULL && rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "lookahead"),
		   "an unsupported pattern's body is refused the same way");
}

/* ------------------------------------------------------------- escape */

/* regex_escape: the pattern matches the string and nothing else; invalid UTF-8 is refused. */
static void
TestEscape(void)
{
	static const char s[] = "a.b*c(d)[e]{f}|g^h$i\\j?k+l/m-n \xC3\xA9\x01\n\x7F#";
	cbllm_buf	b = {0};
	cbllm_dfa  *d = NULL;
	cbllm_err	err;
	size_t		n = sizeof(s) - 1;
	bool		ok = regex_escape(s, n, &b) == CBLLM_OK &&
		regex_compile(b.data, b.len, &d, &err) == CBLLM_OK;

	TAP_OK(ok && dfa_match(d, s, n) && d->dist[0] == (int32_t) n && d->n_states == (int32_t) n + 1,
		   "regex_escape of every metacharacter, a control byte and UTF-8 matches exactly that string: %s",
		   b.data ? b.data : "");
	dfa_free(d);
	b.len = 0;
	TAP_OK(regex_escape("a\xC3", 2, &b) == CBLLM_ERR_INVALID, "regex_escape refuses invalid UTF-8");
	cbllm_buf_free(&b);
}

/* ------------------------------------------------------------- timing */

#define JSON_STR "\"(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4})*\""
#define JSON_INT "-?(?:0|[1-9][0-9]{0,15})"
#define JSON_NUM "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
#define JSON_ENUM "(?:\"red\"|\"green\"|\"blue\"|\"cyan\"|\"magenta\")"

/* The value patterns of ObjectPattern's properties, and a value of each. */
static const char *const value_pattern[] = {
	JSON_STR, JSON_INT, JSON_ENUM, JSON_NUM,
	"\\[(?:" JSON_STR "(?:,[ ]?" JSON_STR ")*)?\\]",
	"\\{\"id\":[ ]?" JSON_INT ",[ ]?\"name\":[ ]?" JSON_STR ",[ ]?\"tag\":[ ]?" JSON_ENUM ",[ ]?\"w\":[ ]?"
	JSON_NUM "\\}",
	"\"(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]){0,32}\"",
};
static const char *const value_text[] = {
	"\"x\\n\xC3\xA9\\u00E9\"", "-120", "\"cyan\"", "3.25e-7", "[\"a\", \"b\"]",
	"{\"id\": 7, \"name\": \"n\", \"tag\": \"red\", \"w\": 0.5}", "\"short\"",
};

/* Append a JSON-object-like pattern of n properties (cycling through value_pattern) to b. */
static void
ObjectPattern(cbllm_buf *b, int n, bool optional)
{
	char		key[64];

	cbllm_buf_append(b, "\\{", 2);
	for (int i = 0; i < n; i++)
	{
		const char *v = value_pattern[i % 7];
		int			k = snprintf(key, sizeof(key), "%s%s\"property_%d\":[ ]?", optional ? "(?:" : "",
								 i > 0 ? ",[ ]?" : "", i);

		cbllm_buf_append(b, key, (size_t) k);
		cbllm_buf_append(b, v, strlen(v));
		if (optional)
			cbllm_buf_append(b, ")?", 2);
	}
	cbllm_buf_append(b, "\\}", 2);
}

/* Append a document that ObjectPattern(n) matches to b. */
static void
ObjectDocument(cbllm_buf *b, int n)
{
	char		key[64];

	cbllm_buf_append(b, "{", 1);
	for (int i = 0; i < n; i++)
	{
		int			k = snprintf(key, sizeof(key), "%s\"property_%d\": ", i > 0 ? ", " : "", i);

		cbllm_buf_append(b, key, (size_t) k);
		cbllm_buf_append(b, value_text[i % 7], strlen(value_text[i % 7]));
	}
	cbllm_buf_append(b, "}", 1);
}

/* The compile time of object patterns of 20 properties, and that they accept a document. */
static void
TestTiming(void)
{
	for (int optional = 0; optional < 2; optional++)
	{
		cbllm_buf	b = {0},
					doc = {0};
		cbllm_dfa  *d = NULL;
		cbllm_err	err;
		double		t0,
					t1;
		int			rc;

		ObjectPattern(&b, 20, optional);
		t0 = cbllm_now();
		rc = regex_compile(b.data, b.len, &d, &err);
		t1 = cbllm_now();
		doc.len = 0;
		ObjectDocument(&doc, 20);
		TAP_OK(rc == CBLLM_OK && DfaSane(d) && dfa_match(d, doc.data, doc.len) &&
			   !dfa_match(d, doc.data, doc.len - 1),
			   "a 20-property object pattern%s (%zu bytes) compiles and matches a document of it",
			   optional ? " of optional properties" : "", b.len);
		if (rc == CBLLM_OK)
			TAP_DIAG("compile of %zu bytes: %.2f ms, %d states, %d byte classes", b.len, (t1 - t0) * 1e3,
					 d->n_states, d->n_classes);
		else
			TAP_DIAG("%s", err.msg);
		dfa_free(d);
		cbllm_buf_free(&b);
		cbllm_buf_free(&doc);
	}
}

int
main(void)
{
	TestMatches();
	TestNul();
	TestShorthandUnicode();
	TestErrors();
	TestNesting();
	TestSizes();
	TestPython();
	TestJsonBodyExact();
	TestJsonBody();
	TestEscape();
	TestTiming();
	return tap_done();
}
