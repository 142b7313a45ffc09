/*
 * fuzz_request_check.c: the check of a SQL call's request options
 * (request_check.c), over arbitrary values of every option and length.
 * Promised: a request it accepts is within every limit (sizes summed without
 * wrapping), and its message is a NUL-terminated line whatever it refuses.
 */
#include <math.h>

#include "fuzz.h"
#include "request_check.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	cbllm_request_limits lim;
	cbllm_request_args_check a;
	char		msg[256];
	cbllm_check_result r;

	if (size < sizeof(lim) + sizeof(a))
		return 0;
	memcpy(&lim, data, sizeof(lim));
	memcpy(&a, data + sizeof(lim), sizeof(a));
	if (lim.max_prompt_bytes < 0 || lim.max_prompt_bytes > ((int64_t) 1 << 40) || lim.max_tokens_limit < 1)
		return 0;				/* the server's own settings are in range (a GUC caps them far lower) */
	memset(msg, 'x', sizeof(msg));
	r = cbllm_request_check(&lim, &a, msg, sizeof(msg));
	if (r == CBLLM_CHECK_OK)
	{
		int64_t		sum = a.prompt_len;

		FUZZ_CHECK(a.n_stop >= 0 && a.n_stop <= CBLLM_CHECK_MAX_STOP, "a stop count in range");
		for (int k = 0; k < a.n_stop; k++)
		{
			FUZZ_CHECK(a.stop_len[k] > 0 && a.stop_len[k] <= lim.max_prompt_bytes, "a stop length in range");
			sum += a.stop_len[k];
		}
		FUZZ_CHECK(a.prompt_len >= 0 && sum <= lim.max_prompt_bytes, "the total within the limit");
		if (a.kind == CBLLM_REQ_GENERATE)
			FUZZ_CHECK(a.max_tokens >= 1 && a.max_tokens <= lim.max_tokens_limit &&
					   a.temperature >= 0 && a.temperature <= CBLLM_CHECK_MAX_TEMPERATURE &&
					   a.top_p > 0 && a.top_p <= 1 && a.top_k >= 0 &&
					   a.priority >= -1000 && a.priority <= 1000, "generation options in range");
	}
	else
		FUZZ_CHECK(memchr(msg, '\0', sizeof(msg)) != NULL && msg[0] != '\0', "a message for a refusal");
	return 0;
}
