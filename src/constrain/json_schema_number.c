/*
 * json_schema_number.c: "integer" and "number" of a JSON Schema as
 * patterns.  An integer's bounds (minimum, maximum and their exclusive
 * forms, the non-integral rounded inward) become an exact range written
 * digit by digit: per length, the usual decomposition by the first digit
 * that differs from the bound.  "number" takes no bound.
 */
#include "constrain/json_schema_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char zeros[] = "00000000000000000000";
static const char nines[] = "99999999999999999999";

/* Whether the n chars at s are all ch. */
static bool
AllAre(const char *s, int n, char ch)
{
	for (int i = 0; i < n; i++)
		if (s[i] != ch)
			return false;
	return true;
}

/* Append the digits from..to as a class (one digit alone). */
static int
EmitDigitClass(js_ctx *c, cbllm_buf *out, char from, char to)
{
	return from == to ? js_emit(c, out, &from, 1) : js_emitf(c, out, "[%c-%c]", from, to);
}

/*
 * Append the pattern of the n-digit strings between lo and hi (n digits
 * each, lo <= hi): the usual decomposition by the first digit that
 * differs, each alternative starting with its own digits.
 */
static int
EmitDigitRange(js_ctx *c, cbllm_buf *out, const char *lo, const char *hi, int n)
{
	bool		lo_min,
				hi_max,
				sep = false;
	char		from,
				to;
	int			rc;

	for (; n > 0 && *lo == *hi; lo++, hi++, n--)
		if ((rc = js_emit(c, out, lo, 1)) != CBLLM_OK)
			return rc;
	if (n == 0)
		return CBLLM_OK;
	lo_min = AllAre(lo + 1, n - 1, '0');
	hi_max = AllAre(hi + 1, n - 1, '9');
	from = lo_min ? lo[0] : (char) (lo[0] + 1);
	to = hi_max ? hi[0] : (char) (hi[0] - 1);
	if ((rc = js_emits(c, out, "(?:")) != CBLLM_OK)
		return rc;
	if (!lo_min)
	{
		if ((rc = js_emit(c, out, lo, 1)) != CBLLM_OK ||
			(rc = EmitDigitRange(c, out, lo + 1, nines, n - 1)) != CBLLM_OK)
			return rc;
		sep = true;
	}
	if (from <= to)
	{
		if ((sep && (rc = js_emits(c, out, "|")) != CBLLM_OK) ||
			(rc = EmitDigitClass(c, out, from, to)) != CBLLM_OK)
			return rc;
		if (n > 1 && (rc = js_emits(c, out, "[0-9]")) == CBLLM_OK)
			rc = js_emit_quant(c, out, n - 1, n - 1);
		if (rc != CBLLM_OK)
			return rc;
		sep = true;
	}
	if (!hi_max)
	{
		if ((sep && (rc = js_emits(c, out, "|")) != CBLLM_OK) || (rc = js_emit(c, out, hi, 1)) != CBLLM_OK ||
			(rc = EmitDigitRange(c, out, zeros, hi + 1, n - 1)) != CBLLM_OK)
			return rc;
	}
	return js_emits(c, out, ")");
}

/*
 * Append the pattern of the integers a..b written without sign or leading
 * zero (0 <= a, a <= b unless bounded is false: then a and above).
 */
static int
EmitNonnegRange(js_ctx *c, cbllm_buf *out, int64_t a, int64_t b, bool bounded)
{
	char		sa[24],
				sb[24],
				lo[24],
				hi[24];
	int			la = snprintf(sa, sizeof(sa), "%lld", (long long) a);
	int			lb = bounded ? snprintf(sb, sizeof(sb), "%lld", (long long) b) : la;
	int			rc = js_emits(c, out, "(?:");

	for (int len = la; len <= lb && rc == CBLLM_OK; len++)
	{
		memcpy(lo, len == la ? sa : zeros, (size_t) len);
		if (len > la)
			lo[0] = '1';
		memcpy(hi, bounded && len == lb ? sb : nines, (size_t) len);
		if (len > la)
			rc = js_emits(c, out, "|");
		if (rc == CBLLM_OK)
			rc = EmitDigitRange(c, out, lo, hi, len);
	}
	if (rc == CBLLM_OK && !bounded)
		rc = js_emitf(c, out, "|[1-9][0-9]{%d,}", la);
	return rc != CBLLM_OK ? rc : js_emits(c, out, ")");
}

/*
 * Read the bounds of an integer: *lo and *hi (has_lo, has_hi when given),
 * non-integral and exclusive ones rounded inward.
 */
static int
IntegerBounds(js_ctx *c, const cJSON *s, int64_t *lo, bool *has_lo, int64_t *hi, bool *has_hi)
{
	static const char *const names[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

	*has_lo = *has_hi = false;
	for (int i = 0; i < 4; i++)
	{
		const cJSON *v = js_get(s, names[i]);
		double		x,
					r;

		if (v == NULL)
			continue;
		x = v->valuedouble;
		if (fabs(x) > JS_EXACT)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "%s %.17g is beyond +-2^53", names[i], x);
		r = i == 0 ? ceil(x) : i == 1 ? floor(x) + 1 : i == 2 ? floor(x) : ceil(x) - 1;
		if (i < 2 && (!*has_lo || (int64_t) r > *lo))
			*lo = (int64_t) r;
		if (i >= 2 && (!*has_hi || (int64_t) r < *hi))
			*hi = (int64_t) r;
		*has_lo |= i < 2;
		*has_hi |= i >= 2;
	}
	return CBLLM_OK;
}

/* Append the integers within the schema's bounds. */
int
js_gen_integer(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	int64_t		lo = 0,
				hi = 0;
	bool		has_lo,
				has_hi,
				neg,
				pos;
	int			rc = IntegerBounds(c, s, &lo, &has_lo, &hi, &has_hi);

	if (rc != CBLLM_OK)
		return rc;
	if (!has_lo && !has_hi)
		return js_emits(c, out, RE_INTEGER);
	if (has_lo && has_hi && lo > hi)
		return js_impossible(c, "no integer lies between the bounds (%lld > %lld)",
							 (long long) lo, (long long) hi);
	neg = !has_lo || lo < 0;
	pos = !has_hi || hi >= 0;
	if ((rc = js_emits(c, out, "(?:")) != CBLLM_OK)
		return rc;
	if (neg)
	{
		int64_t		top = has_hi && hi < 0 ? -hi : 1;	/* the smallest magnitude */

		if ((rc = js_emits(c, out, "-")) != CBLLM_OK ||
			(rc = EmitNonnegRange(c, out, top, has_lo ? -lo : 0, has_lo)) != CBLLM_OK)
			return rc;
	}
	if (pos)
	{
		if ((neg && (rc = js_emits(c, out, "|")) != CBLLM_OK) ||
			(rc = EmitNonnegRange(c, out, has_lo && lo > 0 ? lo : 0, hi, has_hi)) != CBLLM_OK)
			return rc;
	}
	return js_emits(c, out, ")");
}

/* Append any number ("number" takes no bound). */
int
js_gen_number(js_ctx *c, const cJSON *s, cbllm_buf *out)
{
	static const char *const names[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};

	for (int i = 0; i < 4; i++)
		if (js_get(s, names[i]) != NULL)
			return js_fail(c, CBLLM_ERR_UNSUPPORTED, "%s is supported for integers only", names[i]);
	return js_emits(c, out, RE_NUMBER);
}
