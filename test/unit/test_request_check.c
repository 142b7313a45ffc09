/*
 * test_request_check.c: the one check of a request's parameters: the
 * messages that quote the argument as given, the field each refusal names
 * (what the SQL layer's hint is chosen by), the same rules over an engine
 * API caller's sampling, and the translation to the engine's sampling.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "api/request_params.h"
#include "tap.h"

static const cbllm_request_limits lim = {.max_tokens_limit = 1000, .max_prompt_bytes = 65536};

/* A valid greedy generation request of n prompt bytes. */
static cbllm_request_params
Valid(int32_t n)
{
	cbllm_request_params a = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 16, .top_p = 1,
	.prompt_len = n};

	return a;
}

/* True when a is refused with result r, naming field f, with exactly the message want. */
static bool
Refused(const cbllm_request_params *a, cbllm_check_result r, cbllm_request_field f, const char *want,
		char *msg, size_t len)
{
	cbllm_request_field got = CBLLM_FIELD_NONE;

	return cbllm_request_check(&lim, a, &got, msg, len) == r && got == f && strcmp(msg, want) == 0;
}

/* A valid request with field f set to v (STOP_LEN: the second of two stop strings). */
static cbllm_request_params
With(cbllm_request_field f, double v)
{
	cbllm_request_params a = Valid(10);

	switch (f)
	{
		case CBLLM_FIELD_MAX_TOKENS:
			a.max_tokens = (int32_t) v;
			break;
		case CBLLM_FIELD_TEMPERATURE:
			a.temperature = v;
			break;
		case CBLLM_FIELD_TOP_P:
			a.top_p = v;
			break;
		case CBLLM_FIELD_TOP_K:
			a.top_k = (int32_t) v;
			break;
		case CBLLM_FIELD_PRIORITY:
			a.priority = (int32_t) v;
			break;
		case CBLLM_FIELD_DEFAULTS:
			a.defaults = (int32_t) v;
			break;
		case CBLLM_FIELD_N_STOP:
			a.n_stop = (int32_t) v;
			break;
		case CBLLM_FIELD_PROMPT_LEN:
		case CBLLM_FIELD_BYTES:
			a.prompt_len = (int32_t) v;
			break;
		case CBLLM_FIELD_CONSTRAINT_LEN:
			a.constraint_len = (int32_t) v;
			break;
		case CBLLM_FIELD_MIN_P:
			a.min_p = v;
			break;
		case CBLLM_FIELD_REPETITION_PENALTY:
			a.repetition_penalty = v;
			break;
		case CBLLM_FIELD_FREQUENCY_PENALTY:
			a.frequency_penalty = v;
			break;
		case CBLLM_FIELD_PRESENCE_PENALTY:
			a.presence_penalty = v;
			break;
		case CBLLM_FIELD_N_BIAS:
			a.n_bias = (int32_t) v;
			break;
		case CBLLM_FIELD_LOGPROBS:
			a.logprobs = 1;
			a.top_logprobs = (int32_t) v;
			break;
		case CBLLM_FIELD_STOP_LEN:
			a.n_stop = 2;
			a.stop_len[0] = 3;
			a.stop_len[1] = (int32_t) v;
			break;
		case CBLLM_FIELD_NONE:
			break;
	}
	return a;
}

/* Every refusal's message (as the SQL tests assert them) and the field it names. */
static void
TestMessagesAndFields(void)
{
	static const struct
	{
		cbllm_request_field f;
		double		v;
		cbllm_check_result r;
		const char *msg;
	}			cases[] = {
		{CBLLM_FIELD_MAX_TOKENS, 0, CBLLM_CHECK_INVALID, "max_tokens must be between 1 and 1000, not 0"},
		{CBLLM_FIELD_MAX_TOKENS, 1001, CBLLM_CHECK_INVALID, "max_tokens must be between 1 and 1000, not 1001"},
		{CBLLM_FIELD_TEMPERATURE, -1, CBLLM_CHECK_INVALID, "temperature must be between 0 and 100, not -1"},
		{CBLLM_FIELD_TEMPERATURE, NAN, CBLLM_CHECK_INVALID, "temperature must be between 0 and 100, not NaN"},
		{CBLLM_FIELD_TEMPERATURE, 1e300, CBLLM_CHECK_INVALID,
		"temperature must be between 0 and 100, not 1e+300"},
		{CBLLM_FIELD_TEMPERATURE, 150, CBLLM_CHECK_INVALID, "temperature must be between 0 and 100, not 150"},
		{CBLLM_FIELD_TOP_P, 0, CBLLM_CHECK_INVALID, "top_p must be in (0, 1], not 0"},
		{CBLLM_FIELD_TOP_P, 1.5, CBLLM_CHECK_INVALID, "top_p must be in (0, 1], not 1.5"},
		{CBLLM_FIELD_TOP_K, -1, CBLLM_CHECK_INVALID, "top_k must be >= 0, not -1"},
		{CBLLM_FIELD_PRIORITY, 5000, CBLLM_CHECK_INVALID, "priority must be between -1000 and 1000, not 5000"},
		{CBLLM_FIELD_DEFAULTS, 8, CBLLM_CHECK_INVALID, "unknown defaults bits 0x8"},
		{CBLLM_FIELD_N_STOP, 9, CBLLM_CHECK_INVALID, "at most 8 stop strings are allowed, not 9"},
		{CBLLM_FIELD_N_STOP, -1, CBLLM_CHECK_INVALID, "at most 8 stop strings are allowed, not -1"},
		{CBLLM_FIELD_PROMPT_LEN, -5, CBLLM_CHECK_INVALID, "the prompt has a negative length"},
		{CBLLM_FIELD_STOP_LEN, 0, CBLLM_CHECK_INVALID, "stop strings must not be empty"},
		{CBLLM_FIELD_CONSTRAINT_LEN, -1, CBLLM_CHECK_INVALID, "the constraint has a negative length"},
		{CBLLM_FIELD_MIN_P, 1.5, CBLLM_CHECK_INVALID, "min_p must be between 0 and 1, not 1.5"},
		{CBLLM_FIELD_MIN_P, -0.25, CBLLM_CHECK_INVALID, "min_p must be between 0 and 1, not -0.25"},
		{CBLLM_FIELD_REPETITION_PENALTY, -1, CBLLM_CHECK_INVALID,
		"repetition_penalty must be between 0 and 100, not -1"},
		{CBLLM_FIELD_REPETITION_PENALTY, 101, CBLLM_CHECK_INVALID,
		"repetition_penalty must be between 0 and 100, not 101"},
		{CBLLM_FIELD_FREQUENCY_PENALTY, 2.5, CBLLM_CHECK_INVALID,
		"frequency_penalty must be between -2 and 2, not 2.5"},
		{CBLLM_FIELD_PRESENCE_PENALTY, -3, CBLLM_CHECK_INVALID,
		"presence_penalty must be between -2 and 2, not -3"},
		{CBLLM_FIELD_N_BIAS, 1025, CBLLM_CHECK_INVALID, "logit_bias may hold at most 1024 entries, not 1025"},
		{CBLLM_FIELD_N_BIAS, -1, CBLLM_CHECK_INVALID, "logit_bias may hold at most 1024 entries, not -1"},
		{CBLLM_FIELD_LOGPROBS, 21, CBLLM_CHECK_INVALID, "logprobs must be between 0 and 20, not 21"},
		{CBLLM_FIELD_LOGPROBS, -1, CBLLM_CHECK_INVALID, "logprobs must be between 0 and 20, not -1"},
		{CBLLM_FIELD_BYTES, 70000, CBLLM_CHECK_TOO_LARGE, "prompt is too large: 70000 bytes, the limit is 65536"}};
	char		msg[256];
	cbllm_request_field f = CBLLM_FIELD_MAX_TOKENS;
	cbllm_request_params a;

	a = Valid(10);
	TAP_OK(cbllm_request_check(&lim, &a, &f, msg, sizeof(msg)) == CBLLM_CHECK_OK && f == CBLLM_FIELD_NONE,
		   "a plain request passes and names no field");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		a = With(cases[i].f, cases[i].v);
		TAP_OK(Refused(&a, cases[i].r, cases[i].f, cases[i].msg, msg, sizeof(msg)),
			   "refused, naming the field it set, with the message: %s", msg);
	}
	a = With(CBLLM_FIELD_TOP_P, 1e-300);
	TAP_OK(cbllm_request_check(&lim, &a, NULL, msg, sizeof(msg)) == CBLLM_CHECK_OK,
		   "a tiny positive top_p is valid (the engine keeps the top token)");

	/* the order: the first field out of its range is the one named */
	a = With(CBLLM_FIELD_TOP_K, -1);
	a.prompt_len = 70000;
	a.n_stop = 9;
	TAP_OK(Refused(&a, CBLLM_CHECK_INVALID, CBLLM_FIELD_TOP_K, "top_k must be >= 0, not -1", msg,
				   sizeof(msg)), "with several problems the first is named (top_k before stop count and size)");
}

/* The prompt and its stop strings together, with no sum that can wrap. */
static void
TestSizes(void)
{
	char		msg[256];
	cbllm_request_field f;
	cbllm_request_params a;

	a = Valid(65536);
	TAP_OK(cbllm_request_check(&lim, &a, NULL, msg, sizeof(msg)) == CBLLM_CHECK_OK,
		   "a prompt of exactly the limit passes");
	a.n_stop = 1;
	a.stop_len[0] = 1;
	TAP_OK(Refused(&a, CBLLM_CHECK_TOO_LARGE, CBLLM_FIELD_BYTES,
				   "prompt is too large: 65537 bytes with its stop strings, the limit is 65536", msg, sizeof(msg)),
		   "one more byte of stop string is too large: %s", msg);
	TAP_OK(cbllm_request_params_bytes(&a) == 65537, "the bytes after the parameters count the stop string");
	a = Valid(INT32_MAX);
	a.n_stop = CBLLM_MAX_STOP;
	for (int k = 0; k < CBLLM_MAX_STOP; k++)
		a.stop_len[k] = INT32_MAX;
	TAP_OK(cbllm_request_check(&lim, &a, &f, msg, sizeof(msg)) == CBLLM_CHECK_TOO_LARGE &&
		   f == CBLLM_FIELD_BYTES && strstr(msg, "19327352823 bytes") != NULL,
		   "the largest lengths sum without wrapping: %s", msg);

	/* tokenizer requests carry no sampling options */
	a = (cbllm_request_params) {.kind = CBLLM_REQ_TOKENIZE, .prompt_len = 100};
	TAP_OK(cbllm_request_check(&lim, &a, NULL, msg, sizeof(msg)) == CBLLM_CHECK_OK,
		   "a tokenize request needs no sampling options");
	a = (cbllm_request_params) {.kind = CBLLM_REQ_DETOKENIZE, .prompt_len = 70000};
	TAP_OK(Refused(&a, CBLLM_CHECK_TOO_LARGE, CBLLM_FIELD_BYTES,
				   "the token array is too large: 70000 bytes, the limit is 65536", msg, sizeof(msg)),
		   "a detokenize array over the limit: %s", msg);
}

/* An engine API caller's sampling is held to the same rules, with the same messages. */
static void
TestEngineSampling(void)
{
	char		msg[256];
	cbllm_request_field f;
	cbllm_request_params a;
	cbllm_sampling sp = {.temperature = 0.5f, .top_p = 1, .max_tokens = 100000, .n_stop = 1,
	.stop = {"END"}};

	cbllm_request_params_from_sampling(&sp, &a);
	TAP_OK(cbllm_request_check(&cbllm_engine_limits, &a, NULL, msg, sizeof(msg)) == CBLLM_CHECK_OK &&
		   a.kind == CBLLM_REQ_GENERATE && a.stop_len[0] == 3 && a.temperature == 0.5,
		   "a sampling becomes a generation request with its stop lengths; the engine's limits take any max_tokens");
	sp.temperature = 150;
	cbllm_request_params_from_sampling(&sp, &a);
	TAP_OK(cbllm_request_check(&cbllm_engine_limits, &a, &f, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   f == CBLLM_FIELD_TEMPERATURE && strcmp(msg, "temperature must be between 0 and 100, not 150") == 0,
		   "the engine refuses a temperature over the limit with the SQL message: %s", msg);
	sp.temperature = 0;
	sp.stop[0] = NULL;
	cbllm_request_params_from_sampling(&sp, &a);
	TAP_OK(cbllm_request_check(&cbllm_engine_limits, &a, &f, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   f == CBLLM_FIELD_STOP_LEN, "a NULL stop string is refused as empty: %s", msg);
	sp.n_stop = CBLLM_MAX_STOP + 1;
	cbllm_request_params_from_sampling(&sp, &a);
	TAP_OK(cbllm_request_check(&cbllm_engine_limits, &a, &f, msg, sizeof(msg)) == CBLLM_CHECK_INVALID &&
		   f == CBLLM_FIELD_N_STOP, "too many stop strings are refused without reading past the array: %s", msg);
}

/* The translation to the engine: every option, the stop strings cut out of the bytes after the prompt. */
static void
TestToEngine(void)
{
	static const char bytes[] = "promptENDstop";
	cbllm_request_params a = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 7, .temperature = 0.25,
		.top_p = 1e-300, .top_k = 3, .priority = -4, .has_seed = true, .seed = UINT64_MAX,
	.cache_salt = 99, .prompt_len = 6, .n_stop = 2, .stop_len = {3, 4}};
	cbllm_request_input in;
	cbllm_sampling sp;
	char	   *held;

	TAP_OK(cbllm_request_params_to_engine(&a, bytes, &in, &sp, &held) == CBLLM_OK, "a request translates");
	TAP_OK(in.text == bytes && in.text_len == 6 && in.add_bos && in.cache_salt == 99,
		   "its input is the prompt, with BOS, in its cache scope");
	TAP_OK(sp.max_tokens == 7 && sp.temperature == 0.25f && sp.top_k == 3 && sp.priority == -4 &&
		   sp.has_seed && sp.seed == UINT64_MAX && !sp.ignore_eos, "its options carry over");
	TAP_OK(sp.top_p == FLT_MIN, "a top_p below float's range becomes the smallest float (the top token only)");
	TAP_OK(sp.n_stop == 2 && strcmp(sp.stop[0], "END") == 0 && strcmp(sp.stop[1], "stop") == 0,
		   "its stop strings are cut from the bytes after the prompt");
	free(held);
}

int
main(void)
{
	char		d[32];

	TestMessagesAndFields();
	TestSizes();
	TestEngineSampling();
	TestToEngine();

	/* the shortest decimal that reads back, laid out as PostgreSQL prints a float8 */
	{
		static const struct
		{
			double		x;
			const char *want;
		}			cases[] = {
			{0.1 + 0.2, "0.30000000000000004"}, {1e-300, "1e-300"}, {-1, "-1"}, {INFINITY, "Infinity"},
			{-INFINITY, "-Infinity"}, {NAN, "NaN"}, {0, "0"}, {150, "150"}, {1.5, "1.5"},
			{0.0001, "0.0001"}, {0.00001, "1e-05"}, {123456789012345, "123456789012345"},
			{1e15, "1e+15"}, {1234567890123456.8, "1.2345678901234568e+15"}, {-0.7, "-0.7"},
			{DBL_MAX, "1.7976931348623157e+308"}, {1e300, "1e+300"}};

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
			TAP_OK(strcmp(cbllm_format_double(cases[i].x, d, sizeof(d)), cases[i].want) == 0,
				   "%s prints as %s", cases[i].want, d);
	}
	return tap_done();
}
