/*
 * request_check.h: the checks of a request's parameters as a SQL call gives
 * them, with the messages a user sees.  PostgreSQL-free, so that the same
 * rules are unit-tested and fuzzed (test/fuzz/fuzz_request_check.c).
 */
#ifndef CBLLM_REQUEST_CHECK_H
#define CBLLM_REQUEST_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "request_kind.h"

#define CBLLM_CHECK_MAX_STOP 8
#define CBLLM_CHECK_MAX_TEMPERATURE 100	/* the distribution is flat long before */

/* The limits a server sets. */
typedef struct cbllm_request_limits
{
	int			max_tokens_limit;	/* cbllm.max_tokens_limit */
	int64_t		max_prompt_bytes;	/* cbllm.max_prompt_bytes: prompt plus stop strings */
} cbllm_request_limits;

/* A request's parameters as given. */
typedef struct cbllm_request_args_check
{
	int			kind;			/* a cbllm_request_kind */
	int			max_tokens;
	double		temperature;
	double		top_p;
	int			top_k;
	int			priority;
	int64_t		prompt_len;		/* bytes (of int32 ids for DETOKENIZE) */
	int			n_stop;
	int64_t		stop_len[CBLLM_CHECK_MAX_STOP];
} cbllm_request_args_check;

typedef enum cbllm_check_result
{
	CBLLM_CHECK_OK = 0,
	CBLLM_CHECK_INVALID,		/* a parameter out of its range */
	CBLLM_CHECK_TOO_LARGE		/* the prompt with its stop strings is over the limit */
} cbllm_check_result;

/* Check a; on a problem fill msg (len bytes, a lower-case sentence quoting the argument as given). */
cbllm_check_result cbllm_request_check(const cbllm_request_limits *lim,
									   const cbllm_request_args_check *a, char *msg, size_t len);

/* The shortest decimal that reads back as x (as PostgreSQL prints a float8), into buf. */
const char *cbllm_format_double(double x, char *buf, size_t len);

#endif
