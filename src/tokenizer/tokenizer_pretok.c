/*
 * tokenizer_pretok.c: the pre-tokenizers of a tokenizer.json, which cut a
 * normalized piece of text into the words that BPE encodes one by one.
 *
 * Steps (a Sequence flattens into a list of them, run in order):
 *   Split     a Regex pattern (PCRE2, UTF and Unicode properties, JIT when the
 *             library has it) or a String pattern; HuggingFace's behaviours
 *             Removed, Isolated, MergedWithPrevious, MergedWithNext and
 *             Contiguous say what happens to a match; invert swaps matches
 *             and gaps.
 *   ByteLevel the GPT-2 scheme: an optional space before a piece that lacks
 *             one, an optional split by the GPT-2 regex, then every byte
 *             becomes the printable character that stands for it
 *             (bytes_to_unicode: printable Latin-1 bytes stand for
 *             themselves, the rest for U+0100 onwards in byte order).
 *   Metaspace spaces become "▁", a "▁" goes before the text as its
 *             prepend_scheme says, and (split) each "▁" starts a word.
 * Each step hands each of its pieces to the next step, and the last one to
 * BPE (tok_bpe_word), so no list of pieces is ever built beyond one step's.
 *
 * HuggingFace's regexes are Oniguruma's; the patterns tokenizers ship use
 * only what PCRE2 reads the same way ((?i:...), \p{L}, \p{N}, \s, (?!\S),
 * counted repeats).  A compiled pattern is read-only and shared; each encode
 * call makes its own match data (tok_enc.md), so encoding is thread-safe.
 * Invalid UTF-8 is allowed in the text (PCRE2_MATCH_INVALID_UTF): no pattern
 * matches an invalid byte, so it stays in the gaps.
 */
#include "tokenizer/tokenizer_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#define TOK_GPT2_REGEX	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Split behaviours by their tokenizer.json names. */
static const char *const split_names[] = {
	[SPLIT_REMOVED] = "Removed", [SPLIT_ISOLATED] = "Isolated", [SPLIT_MERGED_PREV] = "MergedWithPrevious",
	[SPLIT_MERGED_NEXT] = "MergedWithNext", [SPLIT_CONTIGUOUS] = "Contiguous",
};

/* ------------------------------------------------------------- loading */

/* Fill the ByteLevel table: the character that stands for each byte. */
static void
ByteLevelTable(cbllm_tokenizer *tok)
{
	uint32_t	next = 256;

	for (int b = 0; b < 256; b++)
	{
		bool		self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		uint32_t	c = self ? (uint32_t) b : next++;

		tok->bl_len[b] = (uint8_t) utf8_encode(c, tok->bl_char[b]);
	}
}

/* Compile a pattern for a step; a bad one fails with PCRE2's message. */
static int
CompileRegex(tok_pretok *st, const char *pat, size_t len, const char *path, cbllm_err *err)
{
	int			code;
	PCRE2_SIZE	off;
	PCRE2_UCHAR msg[120];
	pcre2_code *re = pcre2_compile((PCRE2_SPTR) pat, len, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
								   &code, &off, NULL);

	if (re == NULL)
	{
		pcre2_get_error_message(code, msg, sizeof(msg));
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: pre_tokenizer regex \"%.64s\" at offset %zu: %s",
						  path, pat, (size_t) off, (const char *) msg);
	}
	(void) pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);	/* without JIT the interpreter runs it */
	st->re = re;
	return CBLLM_OK;
}

/* Read a Split step: its pattern, behaviour and invert flag. */
static int
LoadSplit(cbllm_tokenizer *tok, tok_pretok *st, const cJSON *p, const char *path, cbllm_err *err)
{
	const cJSON *pat = JGET(p, "pattern");
	const char *re = JSTR(pat, "Regex"),
			   *str = JSTR(pat, "String"),
			   *beh = JSTR(p, "behavior");
	int			rc;

	st->behavior = -1;
	for (int b = 0; beh && b < (int) (sizeof(split_names) / sizeof(split_names[0])); b++)
		st->behavior = strcmp(beh, split_names[b]) == 0 ? b : st->behavior;
	if (st->behavior < 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported Split behavior %.64s", path, beh ? beh : "(none)");
	if ((rc = tok_get_bool(p, "invert", &st->invert, path, "Split: ", err)) != CBLLM_OK)
		return rc;
	if (re != NULL)
		return CompileRegex(st, re, strlen(re), path, err);
	if (str == NULL || *str == '\0')
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: Split needs a non-empty String or a Regex pattern", path);
	st->slen = strlen(str);
	if ((st->str = tok_arena_dup(tok, str, st->slen)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	return CBLLM_OK;
}

/* Read a Metaspace step (replacement "▁", prepend_scheme or add_prefix_space, split). */
static int
LoadMetaspace(cbllm_tokenizer *tok, const cJSON *p, const char *path, cbllm_err *err)
{
	const char *rep = JSTR(p, "replacement"),
			   *scheme = JSTR(p, "prepend_scheme");
	bool		add_prefix = true;
	int			rc;

	if (rep != NULL && strcmp(rep, TOK_META) != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Metaspace replacement must be \"" TOK_META "\"", path);
	tok->meta_split = true;
	if ((rc = tok_get_bool(p, "split", &tok->meta_split, path, "pre_tokenizer: ", err)) != CBLLM_OK ||
		(rc = tok_get_bool(p, "add_prefix_space", &add_prefix, path, "pre_tokenizer: ", err)) != CBLLM_OK)
		return rc;
	tok->meta = scheme == NULL ? (add_prefix ? META_ALWAYS : META_NEVER) :
		strcmp(scheme, "always") == 0 ? META_ALWAYS : strcmp(scheme, "first") == 0 ? META_FIRST :
		strcmp(scheme, "never") == 0 ? META_NEVER : META_NONE;
	if (tok->meta == META_NONE)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: bad Metaspace prepend_scheme %.32s", path, scheme);
	return CBLLM_OK;
}

/* Append the steps of a pre-tokenizer (recursing into Sequence). */
static int
LoadSteps(cbllm_tokenizer *tok, void *ctx, const cJSON *p, int depth, const char *path, cbllm_err *err)
{
	const char *t = JSTR(p, "type");
	tok_pretok *st = &tok->pretok[tok->n_pretok];
	int			rc = CBLLM_OK;

	if (p == NULL || cJSON_IsNull(p))
		return CBLLM_OK;
	if (t != NULL && strcmp(t, "Sequence") == 0)
		return tok_load_sequence(tok, ctx, p, "pretokenizers", depth, LoadSteps, "pre_tokenizer", path, err);
	if (tok->n_pretok == TOK_MAX_PRETOK)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: too many pre_tokenizer steps", path);
	*st = (tok_pretok) {0};
	if (t != NULL && strcmp(t, "Split") == 0)
		st->kind = PRE_SPLIT, rc = LoadSplit(tok, st, p, path, err);
	else if (t != NULL && strcmp(t, "ByteLevel") == 0)
	{
		bool		use_regex = true;

		st->kind = PRE_BYTELEVEL;
		st->behavior = SPLIT_ISOLATED;
		st->add_prefix_space = true;
		if ((rc = tok_get_bool(p, "add_prefix_space", &st->add_prefix_space, path, "ByteLevel: ", err)) == CBLLM_OK &&
			(rc = tok_get_bool(p, "use_regex", &use_regex, path, "ByteLevel: ", err)) == CBLLM_OK && use_regex)
			rc = CompileRegex(st, TOK_GPT2_REGEX, strlen(TOK_GPT2_REGEX), path, err);
	}
	else if (t != NULL && strcmp(t, "Metaspace") == 0)
		st->kind = PRE_METASPACE, rc = LoadMetaspace(tok, p, path, err);
	else
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported pre_tokenizer type %.64s", path, t ? t : "(none)");
	tok->n_pretok++;			/* counted even on failure, so its pattern is freed */
	return rc;
}

/* Read the pre-tokenizer steps. */
int
tok_load_pretokenizer(cbllm_tokenizer *tok, const cJSON *p, const char *path, cbllm_err *err)
{
	ByteLevelTable(tok);
	return LoadSteps(tok, NULL, p, 0, path, err);
}

/* Release the compiled patterns of the pre-tokenizer steps. */
void
tok_free_pretokenizer(cbllm_tokenizer *tok)
{
	for (int k = 0; k < tok->n_pretok; k++)
		pcre2_code_free(tok->pretok[k].re);
}

/* Release what the pre-tokenizer made for one encode call. */
void
tok_enc_done(tok_enc *e)
{
	pcre2_match_data_free(e->md);
	e->md = NULL;
}

/* ------------------------------------------------------------ encoding */

typedef struct seg				/* a stretch of a piece; match: the pattern matched it */
{
	size_t		start, end;
	bool		match;
} seg;

typedef struct seg_list
{
	seg		   *a;
	size_t		n, cap;
} seg_list;

/* Append a non-empty stretch to a list. */
static int
SegPush(seg_list *l, size_t start, size_t end, bool match)
{
	if (end <= start)
		return CBLLM_OK;
	if (l->n == l->cap)
	{
		size_t		cap = l->cap ? l->cap * 2 : 16;
		seg		   *a = realloc(l->a, cap * sizeof(seg));

		if (a == NULL)
			return CBLLM_ERR_NOMEM;
		l->a = a;
		l->cap = cap;
	}
	l->a[l->n++] = (seg) {start, end, match};
	return CBLLM_OK;
}

/* Cut s[0..n) into matches of the step's pattern and the gaps between them. */
static int
FindMatches(tok_enc *e, const tok_pretok *st, const char *s, size_t n, seg_list *out)
{
	size_t		prev = 0, off = 0;
	int			rc = CBLLM_OK;

	if (st->re == NULL)
	{
		for (const char *m; rc == CBLLM_OK && off < n && (m = memmem(s + off, n - off, st->str, st->slen)) != NULL;)
		{
			size_t		a = (size_t) (m - s);

			if ((rc = SegPush(out, prev, a, false)) == CBLLM_OK)
				rc = SegPush(out, a, a + st->slen, true);
			prev = off = a + st->slen;
		}
	}
	else if (e->md == NULL && (e->md = pcre2_match_data_create(1, NULL)) == NULL)
		rc = CBLLM_ERR_NOMEM;
	while (st->re != NULL && rc == CBLLM_OK && off <= n)
	{
		int			m = pcre2_match(st->re, (PCRE2_SPTR) s, n, off, 0, e->md, NULL);
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		size_t		l;

		if (m == PCRE2_ERROR_JIT_STACKLIMIT)	/* the interpreter keeps its state on the heap */
			m = pcre2_match(st->re, (PCRE2_SPTR) s, n, off, PCRE2_NO_JIT, e->md, NULL);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0)
			return cbllm_fail(e->err, CBLLM_ERR_UNSUPPORTED, "%s: pre_tokenizer regex failed (PCRE2 error %d)",
							  e->tok->path, m);
		if ((rc = SegPush(out, prev, ov[0], false)) == CBLLM_OK)
			rc = SegPush(out, ov[0], ov[1], true);
		prev = ov[1];
		l = ov[1] < n ? (size_t) utf8_len(s + ov[1], n - ov[1]) : 1;
		off = ov[1] > ov[0] ? ov[1] : ov[1] + (l ? l : 1);	/* past an empty match */
	}
	if (rc == CBLLM_OK)
		rc = SegPush(out, prev, n, false);
	return rc == CBLLM_ERR_NOMEM ? cbllm_fail(e->err, rc, "tokenizer_encode: out of memory") : rc;
}

/* Merge the stretches into the pieces the behaviour makes, in place. */
static void
ApplyBehavior(int behavior, bool invert, seg_list *l)
{
	size_t		k = 0;
	bool		prev_match = false;

	for (size_t i = 0; i < l->n; i++)
		l->a[i].match ^= invert;
	if (behavior == SPLIT_MERGED_NEXT)	/* a match joins the gap after it */
	{
		for (size_t i = l->n; i-- > 0;)
		{
			seg			s = l->a[i];

			if (s.match && !prev_match && k > 0)
				l->a[l->n - k].start = s.start;
			else
				l->a[l->n - ++k] = s;
			prev_match = s.match;
		}
		memmove(l->a, l->a + l->n - k, k * sizeof(seg));
		l->n = k;
		return;
	}
	for (size_t i = 0; i < l->n; i++)
	{
		seg			s = l->a[i];
		bool		join = k > 0 && ((behavior == SPLIT_MERGED_PREV && s.match && !prev_match) ||
									 (behavior == SPLIT_CONTIGUOUS && s.match == prev_match));

		prev_match = s.match;
		if (behavior == SPLIT_REMOVED && s.match)
			continue;
		if (join)
			l->a[k - 1].end = s.end;
		else
			l->a[k++] = s;
	}
	l->n = k;
}

/* Hand a piece to step k + 1; a ByteLevel step first turns its bytes into their characters. */
static int
NextStep(tok_enc *e, int k, const char *s, size_t n, bool at_start)
{
	const cbllm_tokenizer *tok = e->tok;
	char		local[512],
			   *m = local;
	size_t		len = 0;
	int			rc;

	if (tok->pretok[k].kind != PRE_BYTELEVEL)
		return tok_pretokenize(e, k + 1, s, n, at_start);
	if (2 * n > sizeof(local) && (m = calloc(2, n)) == NULL)
		return cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
	m[0] = '\0';				/* (n > 0: the loop below fills it) */
	for (size_t i = 0; i < n; i++)
	{
		uint8_t		b = (uint8_t) s[i];

		memcpy(m + len, tok->bl_char[b], tok->bl_len[b]);
		len += tok->bl_len[b];
	}
	rc = tok_pretokenize(e, k + 1, m, len, at_start);
	if (m != local)
		free(m);
	return rc;
}

/* Split by the step's pattern and hand each piece on. */
static int
SplitStep(tok_enc *e, int k, const char *s, size_t n, bool at_start)
{
	const tok_pretok *st = &e->tok->pretok[k];
	seg_list	l = {0};
	int			rc = FindMatches(e, st, s, n, &l);

	if (rc == CBLLM_OK)
		ApplyBehavior(st->behavior, st->invert, &l);
	for (size_t i = 0; i < l.n && rc == CBLLM_OK; i++)
		rc = NextStep(e, k, s + l.a[i].start, l.a[i].end - l.a[i].start, at_start && l.a[i].start == 0);
	free(l.a);
	return rc;
}

/* ByteLevel: an optional leading space, the GPT-2 split if configured, then the byte characters. */
static int
ByteLevelStep(tok_enc *e, int k, const char *s, size_t n, bool at_start)
{
	const tok_pretok *st = &e->tok->pretok[k];
	cbllm_buf	b = {0};
	int			rc;

	if (st->add_prefix_space && s[0] != ' ')
	{
		if (cbllm_buf_append(&b, " ", 1) != CBLLM_OK || cbllm_buf_append(&b, s, n) != CBLLM_OK)
		{
			cbllm_buf_free(&b);
			return cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
		}
		s = b.data, n = b.len;
	}
	rc = st->re ? SplitStep(e, k, s, n, at_start) : NextStep(e, k, s, n, at_start);
	cbllm_buf_free(&b);
	return rc;
}

/* Metaspace: spaces become "▁", a prefix "▁" as the scheme says, and each "▁" starts a word. */
static int
MetaspaceStep(tok_enc *e, int k, const char *s, size_t n, bool at_start)
{
	const cbllm_tokenizer *tok = e->tok;
	cbllm_buf	b = {0};
	int			rc = CBLLM_OK;

	if ((tok->meta == META_ALWAYS || (tok->meta == META_FIRST && at_start)) &&
		!(s[0] == ' ' || (n >= 3 && memcmp(s, TOK_META, 3) == 0)))
		rc = cbllm_buf_append(&b, TOK_META, 3);
	for (size_t i = 0; i < n && rc == CBLLM_OK; i++)
		rc = s[i] == ' ' ? cbllm_buf_append(&b, TOK_META, 3) : cbllm_buf_append(&b, s + i, 1);
	if (rc != CBLLM_OK)
		rc = cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
	for (size_t i = 1, start = 0; i <= b.len && rc == CBLLM_OK; i++)
	{
		/* with split, each "▁" starts a new word */
		if (i == b.len || (tok->meta_split && b.len - i >= 3 && memcmp(b.data + i, TOK_META, 3) == 0))
		{
			rc = tok_pretokenize(e, k + 1, b.data + start, i - start, at_start && start == 0);
			start = i;
		}
	}
	cbllm_buf_free(&b);
	return rc;
}

/* Pre-tokenize a normalized piece from step k on and encode its words. */
int
tok_pretokenize(tok_enc *e, int k, const char *s, size_t n, bool at_start)
{
	if (n == 0)
		return CBLLM_OK;
	if (k == e->tok->n_pretok)
		return tok_bpe_word(e, s, n);
	switch (e->tok->pretok[k].kind)
	{
		case PRE_SPLIT:
			return SplitStep(e, k, s, n, at_start);
		case PRE_BYTELEVEL:
			return ByteLevelStep(e, k, s, n, at_start);
		default:
			return MetaspaceStep(e, k, s, n, at_start);
	}
}
