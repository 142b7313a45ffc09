/*
 * test_request_check.c: the checks of a request's parameters, and the
 * messages that quote the argument as given.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "request_check.h"
#include "tap.h"

static const cbllm_request_limits lim = {.max_tokens_limit = 1000, .max_prompt_bytes = 65536};

/* A valid greedy generation request of n prompt bytes. */
static cbllm_request_args_check
Valid(int64_t n)
{
	cbllm_request_args_check a = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 16, .top_p = 1,
	.prompt_len = n};

	return a;
}

int
main(void)
{
	char		msg[256];
	char		d[32];
	cbllm_request_args_check a;

	a = Valid(10);
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_OK, "a plain request passes");

	a = Valid(10);
	a.temperature = 1e300;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   strstr(msg, "not 1e+300") != NULL,
		   "temperature 1e300 is refused, quoted as given (%s)", msg);
	a.temperature = NAN;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   strstr(msg, "not NaN") != NULL, "temperature NaN is refused (%s)", msg);
	a = Valid(10);
	a.top_p = 1e-300;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_OK,
		   "a tiny positive top_p is valid (the engine keeps the top token)");
	a.top_p = 0;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   strstr(msg, "not 0") != NULL, "top_p 0 is refused (%s)", msg);
	a = Valid(10);
	a.max_tokens = 1001;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   strstr(msg, "between 1 and 1000, not 1001") != NULL, "max_tokens over the limit (%s)", msg);

	/* sizes: the prompt and its stop strings together, with no sum that can wrap */
	a = Valid(65536);
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_OK, "a prompt of exactly the limit passes");
	a.n_stop = 1;
	a.stop_len[0] = 1;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_TOO_LARGE &&
		   strstr(msg, "65537 bytes with its stop strings") != NULL,
		   "one more byte of stop string is too large (%s)", msg);
	a = Valid(1);
	a.n_stop = 8;
	for (int k = 0; k < 8; k++)
		a.stop_len[k] = INT64_MAX / 4;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_TOO_LARGE,
		   "stop strings whose lengths would overflow a sum are too large, not wrapped to small");
	a = Valid(10);
	a.n_stop = 1;
	a.stop_len[0] = 0;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   strstr(msg, "empty") != NULL, "an empty stop string is refused");
	a = Valid(-5);
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID,
		   "a negative length is refused");
	a = Valid(10);
	a.n_stop = 9;
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_INVALID,
		   "more than 8 stop strings are refused");

	/* tokenizer requests carry no sampling options */
	a = (cbllm_request_args_check) {.kind = CBLLM_REQ_TOKENIZE, .prompt_len = 100};
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_OK,
		   "a tokenize request needs no sampling options");
	a = (cbllm_request_args_check) {.kind = CBLLM_REQ_DETOKENIZE, .prompt_len = 70000};
	TAP_OK(cbllm_request_check(&lim, &a, msg, sizeof(msg)) == CBLLM_CHECK_TOO_LARGE &&
		   strstr(msg, "the token array is too large") != NULL, "a detokenize array over the limit (%s)", msg);

	/* the shortest decimal that reads back */
	TAP_OK(strcmp(cbllm_format_double(0.1 + 0.2, d, sizeof(d)), "0.30000000000000004") == 0,
		   "0.1 + 0.2 prints as %s", d);
	TAP_OK(strcmp(cbllm_format_double(1e-300, d, sizeof(d)), "1e-300") == 0, "1e-300 prints as %s", d);
	TAP_OK(strcmp(cbllm_format_double(-1, d, sizeof(d)), "-1") == 0, "-1 prints as %s", d);
	TAP_OK(strcmp(cbllm_format_double(INFINITY, d, sizeof(d)), "Infinity") == 0, "infinity prints as %s", d);
	return tap_done();
}
