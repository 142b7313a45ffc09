/*
 * tokenizer_norm.c: the normalizers of a tokenizer.json: Prepend, Replace
 * (with a String pattern), the Unicode normal forms NFC, NFD, NFKC and NFKD
 * (through libutf8proc), and Sequence, which flattens into a list of steps.
 *
 * A normal form is applied to each maximal run of valid UTF-8: invalid bytes
 * pass through unchanged (HuggingFace never sees them, its strings being
 * valid), and a run of ASCII, which every normal form leaves alone, is copied
 * without calling the library.  Loading refuses a chain of steps that could
 * make a text more than TOK_MAX_GROWTH times longer.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define TOK_MAX_GROWTH	64			/* the most the normalizer may multiply a length by */

/* The normal forms: tokenizer.json name, utf8proc options, worst byte growth. */
static const struct
{
	const char *name;
	int			kind;
	utf8proc_option_t opts;
	double		growth;
}			norm_forms[] = {
	{.name = "NFC", .kind = NORM_NFC, .opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE, .growth = 3},
	{.name = "NFD", .kind = NORM_NFD, .opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, .growth = 3},
	{.name = "NFKC", .kind = NORM_NFKC, .opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
		.growth = 18},
	{.name = "NFKD", .kind = NORM_NFKD, .opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
		.growth = 18},
};

#define N_FORMS	(sizeof(norm_forms) / sizeof(norm_forms[0]))

/* Append the steps of a normalizer (recursing into Sequence). */
static int
LoadSteps(cbllm_tokenizer *tok, void *ctx, const cJSON *n, int depth, const char *path, cbllm_err *err)
{
	const char *t = JSTR(n, "type");
	tok_norm   *st = &tok->norm[tok->n_norm];

	if (n == NULL || cJSON_IsNull(n))
		return CBLLM_OK;
	if (!cJSON_IsObject(n) || t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: normalizer must be null or an object with a \"type\"", path);
	if (strcmp(t, "Sequence") == 0)
		return tok_load_sequence(tok, ctx, n, "normalizers", depth, LoadSteps, "normalizer", path, err);
	if (tok->n_norm == TOK_MAX_NORM)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: too many normalizer steps", path);
	for (size_t f = 0; f < N_FORMS; f++)
		if (strcmp(t, norm_forms[f].name) == 0)
		{
			*st = (tok_norm) {norm_forms[f].kind, NULL, NULL, 0, 0};
			tok->n_norm++;
			return CBLLM_OK;
		}
	if (strcmp(t, "Prepend") == 0)
		*st = (tok_norm) {NORM_PREPEND, JSTR(n, "prepend"), "", 0, 0};
	else if (strcmp(t, "Replace") == 0)
	{
		if (JGET(JGET(n, "pattern"), "Regex") != NULL)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Replace normalizer with a Regex pattern is not supported", path);
		*st = (tok_norm) {NORM_REPLACE, JSTR(JGET(n, "pattern"), "String"), JSTR(n, "content"), 0, 0};
	}
	else
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported normalizer type %.64s", path, t);
	if (st->a == NULL || st->b == NULL || (st->kind == NORM_REPLACE && *st->a == '\0'))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s normalizer lacks its strings", path, t);
	st->alen = strlen(st->a);
	st->blen = strlen(st->b);
	if ((st->a = tok_arena_dup(tok, st->a, st->alen)) == NULL || (st->b = tok_arena_dup(tok, st->b, st->blen)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	tok->n_norm++;
	return CBLLM_OK;
}

/*
 * Read the normalizer, then refuse one that can make a text more than
 * TOK_MAX_GROWTH times longer: steps multiply, so a few of them that each
 * lengthen what they touch would turn every prompt (and every added token)
 * into gigabytes.
 */
int
tok_load_normalizer(cbllm_tokenizer *tok, const cJSON *n, const char *path, cbllm_err *err)
{
	double		growth = 1;
	int			rc = LoadSteps(tok, NULL, n, 0, path, err);

	for (int k = 0; k < tok->n_norm && rc == CBLLM_OK; k++)
	{
		const tok_norm *st = &tok->norm[k];

		if (st->kind == NORM_REPLACE && st->blen > st->alen)
			growth *= (double) st->blen / (double) st->alen;
		for (size_t f = 0; f < N_FORMS; f++)
			growth *= st->kind == norm_forms[f].kind ? norm_forms[f].growth : 1;
	}
	if (rc == CBLLM_OK && growth > TOK_MAX_GROWTH)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: the normalizer can make a text %.3g times longer (at most %d is supported)",
						  path, growth, TOK_MAX_GROWTH);
	return rc;
}

/*
 * Append s[0..n) in the normal form of step kind to out.  ASCII is the same
 * in every form and never composes with what precedes it, so only each
 * stretch of non-ASCII characters goes through the library, with the ASCII
 * character before it (which a combining mark may compose with); an invalid
 * byte passes through.
 */
static int
NormalForm(int kind, const char *s, size_t n, cbllm_buf *out)
{
	utf8proc_option_t opts = 0;
	int			rc = CBLLM_OK;

	for (size_t f = 0; f < N_FORMS; f++)
		opts = kind == norm_forms[f].kind ? norm_forms[f].opts : opts;
	for (size_t i = 0, j, l; i < n && rc == CBLLM_OK; i = j)
	{
		utf8proc_uint8_t *dst = NULL;
		utf8proc_ssize_t m;

		if ((l = utf8_len(s + i, n - i)) == 0)
		{
			rc = cbllm_buf_append(out, s + i, 1);	/* an invalid byte */
			j = i + 1;
			continue;
		}
		if (l == 1)
		{
			for (j = i; j < n && (uint8_t) s[j] < 0x80; j++)
				;
			if (j < n && utf8_len(s + j, n - j) > 1)
				j--;			/* the last one goes with the stretch after it */
			if (j > i)
			{
				rc = cbllm_buf_append(out, s + i, j - i);
				continue;
			}
		}
		for (j = i + l; j < n && (l = utf8_len(s + j, n - j)) > 1; j += l)
			;
		if ((m = utf8proc_map((const utf8proc_uint8_t *) s + i, (utf8proc_ssize_t) (j - i), &dst, opts)) < 0)
			rc = m == UTF8PROC_ERROR_NOMEM ? CBLLM_ERR_NOMEM : cbllm_buf_append(out, s + i, j - i);
		else
			rc = cbllm_buf_append(out, (const char *) dst, (size_t) m);
		free(dst);
	}
	return rc;
}

/* Apply the normalizer to s[0..n), replacing the contents of out. */
int
tok_normalize(const cbllm_tokenizer *tok, const char *s, size_t n, cbllm_buf *out)
{
	cbllm_buf	cur = {0}, next = {0}, t;
	int			rc = cbllm_buf_append(&cur, s, n);

	for (int k = 0; k < tok->n_norm && rc == CBLLM_OK && cur.len > 0; k++)
	{
		const tok_norm *st = &tok->norm[k];
		size_t		run = 0;

		next.len = 0;
		if (st->kind != NORM_PREPEND && st->kind != NORM_REPLACE)
		{
			rc = NormalForm(st->kind, cur.data, cur.len, &next);
			t = cur, cur = next, next = t;
			continue;
		}
		if (st->kind == NORM_PREPEND)
			rc = cbllm_buf_append(&next, st->a, st->alen);
		for (size_t i = 0; st->kind == NORM_REPLACE && i < cur.len && rc == CBLLM_OK;)
		{
			if (cur.len - i >= st->alen && memcmp(cur.data + i, st->a, st->alen) == 0)
			{
				if ((rc = cbllm_buf_append(&next, cur.data + run, i - run)) == CBLLM_OK)
					rc = cbllm_buf_append(&next, st->b, st->blen);
				run = i += st->alen;
			}
			else
				i++;
		}
		if (rc == CBLLM_OK)
			rc = cbllm_buf_append(&next, cur.data + run, cur.len - run);
		t = cur, cur = next, next = t;
	}
	out->len = 0;
	if (rc == CBLLM_OK)
		rc = cbllm_buf_append(out, cur.data, cur.len);
	cbllm_buf_free(&cur);
	cbllm_buf_free(&next);
	return rc;
}
