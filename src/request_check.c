/*
 * request_check.c: the checks of a request's parameters (see
 * request_check.h).  Every message quotes the argument as the caller gave
 * it: a double is printed with the fewest digits that read back as the same
 * value, never rounded to what the engine's floats would make of it.
 */
#include "request_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The shortest decimal that reads back as x. */
const char *
cbllm_format_double(double x, char *buf, size_t len)
{
	if (isnan(x))
		snprintf(buf, len, "NaN");
	else if (isinf(x))
		snprintf(buf, len, x > 0 ? "Infinity" : "-Infinity");
	else
		for (int prec = 1; prec <= 17; prec++)
		{
			snprintf(buf, len, "%.*g", prec, x);
			if (strtod(buf, NULL) == x)
				break;
		}
	return buf;
}

/* Fill msg and return r. */
static cbllm_check_result
Fail(cbllm_check_result r, char *msg, size_t len, const char *fmt, ...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
	return r;
}

/* Check a request's parameters against the server's limits. */
cbllm_check_result
cbllm_request_check(const cbllm_request_limits *lim, const cbllm_request_args_check *a, char *msg,
					size_t len)
{
	char		d[32];
	int64_t		bytes = a->prompt_len;

	if (a->kind == CBLLM_REQ_GENERATE)
	{
		if (a->max_tokens < 1 || a->max_tokens > lim->max_tokens_limit)
			return Fail(CBLLM_CHECK_INVALID, msg, len, "max_tokens must be between 1 and %d, not %d",
						lim->max_tokens_limit, a->max_tokens);
		if (!(a->temperature >= 0 && a->temperature <= CBLLM_CHECK_MAX_TEMPERATURE))
			return Fail(CBLLM_CHECK_INVALID, msg, len, "temperature must be between 0 and %d, not %s",
						CBLLM_CHECK_MAX_TEMPERATURE, cbllm_format_double(a->temperature, d, sizeof(d)));
		if (!(a->top_p > 0 && a->top_p <= 1))
			return Fail(CBLLM_CHECK_INVALID, msg, len, "top_p must be in (0, 1], not %s",
						cbllm_format_double(a->top_p, d, sizeof(d)));
		if (a->top_k < 0)
			return Fail(CBLLM_CHECK_INVALID, msg, len, "top_k must be >= 0, not %d", a->top_k);
		if (a->priority < -1000 || a->priority > 1000)
			return Fail(CBLLM_CHECK_INVALID, msg, len,
						"priority must be between -1000 and 1000, not %d", a->priority);
	}
	if (a->n_stop < 0 || a->n_stop > CBLLM_CHECK_MAX_STOP)
		return Fail(CBLLM_CHECK_INVALID, msg, len, "at most %d stop strings are allowed, not %d",
					CBLLM_CHECK_MAX_STOP, a->n_stop);
	if (a->prompt_len < 0)
		return Fail(CBLLM_CHECK_INVALID, msg, len, "the prompt has a negative length");
	for (int k = 0; k < a->n_stop; k++)
	{
		if (a->stop_len[k] <= 0)
			return Fail(CBLLM_CHECK_INVALID, msg, len, "stop strings must not be empty");
		/* a saturating sum: no total can wrap to look small */
		bytes = a->stop_len[k] > INT64_MAX - bytes ? INT64_MAX : bytes + a->stop_len[k];
	}
	if (bytes > lim->max_prompt_bytes)
		return Fail(CBLLM_CHECK_TOO_LARGE, msg, len, "%s is too large: %lld bytes%s, the limit is %lld",
					a->kind == CBLLM_REQ_DETOKENIZE ? "the token array" : "prompt", (long long) bytes,
					a->n_stop > 0 ? " with its stop strings" : "", (long long) lim->max_prompt_bytes);
	return CBLLM_CHECK_OK;
}
