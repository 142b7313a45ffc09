/*
 * fuzz_request_check.c: the check of a request's parameters
 * (request_params.c), over arbitrary values of every option and length,
 * and the translation of what it accepts to the engine API.  The input is
 * the limits, then the parameters struct, then the bytes of the prompt and
 * its stop strings.  Promised: a request it accepts is within every limit
 * (sizes summed without wrapping), names no field, and, where its bytes are
 * in the input and its stop strings hold no NUL (as SQL text never does),
 * translates to a sampling that the engine's own check accepts, with stop
 * strings of the lengths given; a refusal names its field (the size one
 * exactly when too large) and has a message, a NUL-terminated line.
 */
#include <math.h>

#include "fuzz.h"
#include "api/cbllm.h"
#include "api/request_params.h"

/* Translate an accepted GENERATE request whose bytes are at b and check what the engine makes of it. */
static void
CheckEngineSide(const cbllm_request_params *a, const char *b)
{
	cbllm_request_input in;
	cbllm_sampling sp;
	cbllm_request_params back;
	char	   *held;
	char		msg[256];

	for (int64_t i = a->prompt_len; i < cbllm_request_params_bytes(a); i++)
		if (b[i] == '\0')
			return;				/* SQL text holds no NUL */
	if (cbllm_request_params_to_engine(a, b, &in, &sp, &held) != CBLLM_OK)
		return;
	FUZZ_CHECK(sp.n_stop == a->n_stop && in.text_len == (size_t) a->prompt_len, "the lengths carry over");
	for (int k = 0; k < sp.n_stop; k++)
		FUZZ_CHECK(strlen(sp.stop[k]) == (size_t) a->stop_len[k], "a stop string of the length given");
	FUZZ_CHECK(sp.top_p > 0 && sp.top_p <= 1 && sp.temperature >= 0, "the floats stay in range");
	cbllm_request_params_from_sampling(&sp, &back);
	FUZZ_CHECK(cbllm_request_check(&cbllm_engine_limits, &back, NULL, msg, sizeof(msg)) == CBLLM_CHECK_OK,
			   "the engine accepts what the SQL check accepted");
	free(held);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cbllm_request_limits lim;
	cbllm_request_params a;
	cbllm_request_field field;
	char		msg[256];
	cbllm_check_result r;
	size_t		fixed = sizeof(lim) + sizeof(a);

	if (size < fixed)
		return 0;
	memcpy(&lim, data, sizeof(lim));
	memcpy(&a, data + sizeof(lim), sizeof(a));
	if (lim.max_prompt_bytes < 0 || lim.max_prompt_bytes > ((int64_t) 1 << 40) || lim.max_tokens_limit < 1)
		return 0;				/* the server's own settings are in range (a GUC caps them far lower) */
	memset(msg, 'x', sizeof(msg));
	r = cbllm_request_check(&lim, &a, &field, msg, sizeof(msg));
	if (r == CBLLM_CHECK_OK)
	{
		int64_t		sum = a.prompt_len;

		FUZZ_CHECK(field == CBLLM_FIELD_NONE, "an accepted request names no field");
		FUZZ_CHECK(a.n_stop >= 0 && a.n_stop <= CBLLM_MAX_STOP, "a stop count in range");
		for (int k = 0; k < a.n_stop; k++)
		{
			FUZZ_CHECK(a.stop_len[k] > 0 && a.stop_len[k] <= lim.max_prompt_bytes, "a stop length in range");
			sum += a.stop_len[k];
		}
		FUZZ_CHECK(a.prompt_len >= 0 && sum <= lim.max_prompt_bytes, "the total within the limit");
		FUZZ_CHECK(cbllm_request_params_bytes(&a) == sum, "the bytes after the parameters are the total");
		if (CBLLM_KIND_GENERATES(a.kind))
		{
			FUZZ_CHECK(a.max_tokens >= 1 && a.max_tokens <= lim.max_tokens_limit &&
					   a.temperature >= 0 && a.temperature <= CBLLM_MAX_TEMPERATURE &&
					   a.top_p > 0 && a.top_p <= 1 && a.top_k >= 0 &&
					   a.priority >= -CBLLM_MAX_PRIORITY && a.priority <= CBLLM_MAX_PRIORITY,
					   "generation options in range");
			if ((uint64_t) sum <= size - fixed)
				CheckEngineSide(&a, (const char *) data + fixed);
		}
	}
	else
	{
		FUZZ_CHECK(memchr(msg, '\0', sizeof(msg)) != NULL && msg[0] != '\0', "a message for a refusal");
		FUZZ_CHECK(field != CBLLM_FIELD_NONE && (field == CBLLM_FIELD_BYTES) == (r == CBLLM_CHECK_TOO_LARGE),
				   "a refusal names its field");
	}
	return 0;
}
