/*
 * request_params.c: the check of a request's parameters and their
 * translation to and from the engine API (see request_params.h).  Every
 * message quotes the argument as the caller gave it: a double is printed
 * with the fewest digits that read back as the same value, never rounded to
 * what the engine's floats would make of it.
 */
#include "api/request_params.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"

const cbllm_request_limits cbllm_engine_limits = {.max_tokens_limit = INT32_MAX,
.max_prompt_bytes = INT64_MAX};

/*
 * The shortest decimal that reads back as x, laid out as PostgreSQL lays
 * out a float8: fixed-point for decimal exponents in [-4, 15), else d.ddde+XX.
 */
const char *
cbllm_format_double(double x, char *buf, size_t len)
{
	const char *e;
	int			prec,
				exp;

	if (isnan(x) || isinf(x))
	{
		snprintf(buf, len, "%s", isnan(x) ? "NaN" : x > 0 ? "Infinity" : "-Infinity");
		return buf;
	}
	for (prec = 0;; prec++)		/* digits after the first; 17 in all always read back */
	{
		snprintf(buf, len, "%.*e", prec, x);
		if (prec == 16 || strtod(buf, NULL) == x)
			break;
	}
	e = strchr(buf, 'e');
	exp = e ? atoi(e + 1) : 0;
	if (exp >= -4 && exp < 15)
		snprintf(buf, len, "%.*f", prec > exp ? prec - exp : 0, x);
	return buf;
}

/* Record the refused field, fill msg and return r. */
static cbllm_check_result
Fail(cbllm_check_result r, cbllm_request_field f, cbllm_request_field *field, char *msg, size_t len,
	 const char *fmt,...)
{
	va_list		ap;

	if (field)
		*field = f;
	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
	return r;
}

/* Bytes of prompt and stop strings that follow p: int32 lengths, so the sum cannot wrap. */
int64_t
cbllm_request_params_bytes(const cbllm_request_params *p)
{
	int64_t		bytes = p->prompt_len;

	for (int k = 0; k < p->n_stop; k++)
		bytes += p->stop_len[k];
	return bytes + p->constraint_len + (int64_t) p->n_bias * (int64_t) sizeof(cbllm_bias_entry);
}

/* Check a request's parameters against the limits. */
cbllm_check_result
cbllm_request_check(const cbllm_request_limits *lim, const cbllm_request_params *p,
					cbllm_request_field *field, char *msg, size_t len)
{
	char		d[32];
	int64_t		bytes;

	if (field)
		*field = CBLLM_FIELD_NONE;
	if (CBLLM_KIND_GENERATES(p->kind))
	{
		if (p->max_tokens < 1 || p->max_tokens > lim->max_tokens_limit)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_MAX_TOKENS, field, msg, len,
						"max_tokens must be between 1 and %d, not %d", lim->max_tokens_limit,
						p->max_tokens);
		if (!(p->temperature >= 0 && p->temperature <= CBLLM_MAX_TEMPERATURE))
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_TEMPERATURE, field, msg, len,
						"temperature must be between 0 and %d, not %s", CBLLM_MAX_TEMPERATURE,
						cbllm_format_double(p->temperature, d, sizeof(d)));
		if (!(p->top_p > 0 && p->top_p <= 1))
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_TOP_P, field, msg, len,
						"top_p must be in (0, 1], not %s", cbllm_format_double(p->top_p, d, sizeof(d)));
		if (p->top_k < 0)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_TOP_K, field, msg, len,
						"top_k must be >= 0, not %d", p->top_k);
		if (p->priority < -CBLLM_MAX_PRIORITY || p->priority > CBLLM_MAX_PRIORITY)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_PRIORITY, field, msg, len,
						"priority must be between %d and %d, not %d", -CBLLM_MAX_PRIORITY,
						CBLLM_MAX_PRIORITY, p->priority);
		if (!(p->min_p >= 0 && p->min_p <= 1))
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_MIN_P, field, msg, len,
						"min_p must be between 0 and 1, not %s", cbllm_format_double(p->min_p, d, sizeof(d)));
		if (!(p->repetition_penalty >= 0 && p->repetition_penalty <= CBLLM_MAX_REPETITION_PENALTY))
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_REPETITION_PENALTY, field, msg, len,
						"repetition_penalty must be between 0 and %d, not %s", CBLLM_MAX_REPETITION_PENALTY,
						cbllm_format_double(p->repetition_penalty, d, sizeof(d)));
		if (!(p->frequency_penalty >= -CBLLM_MAX_FREQ_PENALTY &&
			  p->frequency_penalty <= CBLLM_MAX_FREQ_PENALTY))
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_FREQUENCY_PENALTY, field, msg, len,
						"frequency_penalty must be between -%d and %d, not %s", CBLLM_MAX_FREQ_PENALTY,
						CBLLM_MAX_FREQ_PENALTY, cbllm_format_double(p->frequency_penalty, d, sizeof(d)));
		if (!(p->presence_penalty >= -CBLLM_MAX_FREQ_PENALTY &&
			  p->presence_penalty <= CBLLM_MAX_FREQ_PENALTY))
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_PRESENCE_PENALTY, field, msg, len,
						"presence_penalty must be between -%d and %d, not %s", CBLLM_MAX_FREQ_PENALTY,
						CBLLM_MAX_FREQ_PENALTY, cbllm_format_double(p->presence_penalty, d, sizeof(d)));
		if (p->n_bias < 0 || p->n_bias > CBLLM_MAX_LOGIT_BIAS)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_N_BIAS, field, msg, len,
						"logit_bias may hold at most %d entries, not %d", CBLLM_MAX_LOGIT_BIAS, p->n_bias);
		if (p->top_logprobs < 0 || p->top_logprobs > CBLLM_MAX_TOP_LOGPROBS)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_LOGPROBS, field, msg, len,
						"logprobs must be between 0 and %d, not %d", CBLLM_MAX_TOP_LOGPROBS,
						p->top_logprobs);
		if ((p->defaults & ~(int32_t) CBLLM_DEFAULT_ALL) != 0)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_DEFAULTS, field, msg, len,
						"unknown defaults bits 0x%x", (unsigned) p->defaults);
	}
	if (p->n_stop < 0 || p->n_stop > CBLLM_MAX_STOP)
		return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_N_STOP, field, msg, len,
					"at most %d stop strings are allowed, not %d", CBLLM_MAX_STOP, p->n_stop);
	if (p->prompt_len < 0)
		return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_PROMPT_LEN, field, msg, len,
					"the prompt has a negative length");
	for (int k = 0; k < p->n_stop; k++)
		if (p->stop_len[k] <= 0)
			return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_STOP_LEN, field, msg, len,
						"stop strings must not be empty");
	if (p->constraint_len < 0)
		return Fail(CBLLM_CHECK_INVALID, CBLLM_FIELD_CONSTRAINT_LEN, field, msg, len,
					"the constraint has a negative length");
	bytes = cbllm_request_params_bytes(p);
	if (bytes > lim->max_prompt_bytes)
		return Fail(CBLLM_CHECK_TOO_LARGE, CBLLM_FIELD_BYTES, field, msg, len,
					"%s is too large: %lld bytes%s, the limit is %lld",
					p->kind == CBLLM_REQ_DETOKENIZE ? "the token array" : "prompt", (long long) bytes,
					p->n_stop > 0 && p->constraint_len > 0 ? " with its stop strings and constraint" :
					p->n_stop > 0 ? " with its stop strings" :
					p->constraint_len > 0 ? " with its constraint" : "",
					(long long) lim->max_prompt_bytes);
	return CBLLM_CHECK_OK;
}

/* The engine's input and sampling for a GENERATE request; its stop strings copied into *held. */
int
cbllm_request_params_to_engine(const cbllm_request_params *p, const char *bytes,
							   cbllm_request_input *in, cbllm_sampling *sp, char **held)
{
	const char *src = bytes + p->prompt_len;
	char	   *dst;

	memset(in, 0, sizeof(*in));
	memset(sp, 0, sizeof(*sp));
	in->text = bytes;
	in->text_len = (size_t) p->prompt_len;
	in->add_bos = p->kind != CBLLM_REQ_CHAT;	/* a chat template writes its own BOS */
	in->split_reasoning = p->kind == CBLLM_REQ_CHAT;
	in->cache_salt = p->cache_salt;
	in->tenant = p->tenant;
	sp->max_tokens = p->max_tokens;
	sp->temperature = (float) p->temperature;
	/* a top_p below float's range means "the top token only", which FLT_MIN keeps */
	sp->top_p = p->top_p < FLT_MIN ? FLT_MIN : (float) p->top_p;
	sp->top_k = p->top_k;
	sp->has_seed = p->has_seed != 0;
	sp->seed = p->seed;
	sp->priority = p->priority;
	sp->model_defaults = (uint32_t) p->defaults;
	*held = dst = malloc((size_t) (cbllm_request_params_bytes(p) - p->prompt_len) + CBLLM_MAX_STOP + 1 +
						 sizeof(cbllm_bias_entry));	/* room to align the bias entries */
	if (dst == NULL)
		return CBLLM_ERR_NOMEM;
	for (int k = 0; k < p->n_stop; k++)
	{
		memcpy(dst, src, (size_t) p->stop_len[k]);
		dst[p->stop_len[k]] = '\0';
		sp->stop[k] = dst;
		src += p->stop_len[k];
		dst += p->stop_len[k] + 1;
	}
	sp->n_stop = p->n_stop;
	if (p->constraint_len > 0)
	{
		memcpy(dst, src, (size_t) p->constraint_len);
		dst[p->constraint_len] = '\0';
		sp->constraint = dst;
		sp->constraint_len = (size_t) p->constraint_len;
		dst += p->constraint_len + 1;
	}
	src += p->constraint_len;
	sp->min_p = (float) p->min_p;
	sp->repetition_penalty = (float) p->repetition_penalty;
	sp->frequency_penalty = (float) p->frequency_penalty;
	sp->presence_penalty = (float) p->presence_penalty;
	sp->logprobs = p->logprobs != 0;
	sp->top_logprobs = p->top_logprobs;
	if (p->n_bias > 0)
	{
		/* ids then values, each an aligned array in the block */
		int32_t    *ids = (int32_t *) (((uintptr_t) dst + 3) & ~(uintptr_t) 3);
		float	   *vals = (float *) (ids + p->n_bias);

		for (int k = 0; k < p->n_bias; k++)
		{
			cbllm_bias_entry b;

			memcpy(&b, src + (size_t) k * sizeof(b), sizeof(b));
			ids[k] = b.id;
			vals[k] = b.bias;
		}
		sp->n_bias = p->n_bias;
		sp->bias_ids = ids;
		sp->bias_values = vals;
	}
	return CBLLM_OK;
}

/* The parameters of an engine API caller's sampling: its floats widened, its stop strings measured. */
void
cbllm_request_params_from_sampling(const cbllm_sampling *sp, cbllm_request_params *p)
{
	memset(p, 0, sizeof(*p));
	p->kind = CBLLM_REQ_GENERATE;
	p->max_tokens = sp->max_tokens;
	p->temperature = sp->temperature;
	p->top_p = sp->top_p;
	p->top_k = sp->top_k;
	p->priority = sp->priority;
	p->has_seed = sp->has_seed;
	p->seed = sp->seed;
	p->defaults = (int32_t) sp->model_defaults;
	p->n_stop = sp->n_stop;
	for (int k = 0; k < sp->n_stop && k < CBLLM_MAX_STOP; k++)
	{
		size_t		n = sp->stop[k] ? strlen(sp->stop[k]) : 0;	/* NULL: as empty */

		p->stop_len[k] = n > INT32_MAX ? INT32_MAX : (int32_t) n;
	}
	if (sp->constraint != NULL)
		p->constraint_len = sp->constraint_len > INT32_MAX ? INT32_MAX : (int32_t) sp->constraint_len;
	p->min_p = sp->min_p;
	p->repetition_penalty = sp->repetition_penalty;
	p->frequency_penalty = sp->frequency_penalty;
	p->presence_penalty = sp->presence_penalty;
	p->n_bias = sp->n_bias;
	p->logprobs = sp->logprobs;
	p->top_logprobs = sp->top_logprobs;
}
