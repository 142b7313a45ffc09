/*
 * request_params.h: a request's parameters as a SQL call gives them, in
 * one plain struct that travels unchanged from the backend through the
 * shared-memory slot and the engine channel's submit frame to the engine
 * process; the one check of them, with the messages a user sees; and their
 * translation to and from the engine API's cbllm_sampling.
 *
 *   SQL call -> cbllm_request_params (slot) -> cbllm_cmd_submit.params (frame)
 *            -> cbllm_request_params_to_engine -> cbllm_engine_submit
 *
 * The one check applies the same rules in three places: in the backend
 * with the server's limits (cbllm.max_tokens_limit, cbllm.max_prompt_bytes);
 * in the engine process on every submit frame, with cbllm_engine_limits (a
 * refusal there means a corrupt channel, ipc.c); and in the engine over
 * whatever a caller of the engine API gave (cbllm_request_params_from_sampling,
 * request.c).  PostgreSQL-free, so that the rules are unit-tested and fuzzed
 * (test/fuzz/fuzz_request_check.c).
 */
#ifndef CBLLM_REQUEST_PARAMS_H
#define CBLLM_REQUEST_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "api/request_kind.h"

/* cbllm.h, the engine API: not included here, since every PostgreSQL-side file reads this header */
struct cbllm_request_input;
struct cbllm_sampling;

#define CBLLM_MAX_TEMPERATURE 100	/* the distribution is flat long before */
#define CBLLM_MAX_PRIORITY 1000 /* priorities lie in [-CBLLM_MAX_PRIORITY, CBLLM_MAX_PRIORITY] */

/*
 * A request's parameters, as given.  Plain data of fixed-size integers and
 * doubles (no bool: any bytes a corrupt frame holds are some value): the
 * slot and the submit frame hold it as it is.  The prompt_len bytes of the
 * prompt, then the stop strings back to back (stop_len[k] bytes each, no
 * NULs), then the constraint_len bytes of the constraint, then n_bias
 * logit_bias entries (cbllm_bias_entry, unaligned) follow it in the slot's
 * prompt buffer and in the frame.
 */
typedef struct cbllm_request_params
{
	int32_t		kind;			/* a cbllm_request_kind; the fields up to seed matter for kinds that generate */
	int32_t		max_tokens;		/* [1, the server's max_tokens_limit] */
	double		temperature;	/* [0, CBLLM_MAX_TEMPERATURE]; 0: greedy */
	double		top_p;			/* (0, 1]; 1: off */
	int32_t		top_k;			/* >= 0; 0: off */
	int32_t		priority;		/* [-CBLLM_MAX_PRIORITY, CBLLM_MAX_PRIORITY]; higher runs first */
	int32_t		has_seed;		/* nonzero: the request's generator starts from seed */
	int32_t		defaults;		/* CBLLM_DEFAULT_* bits: options left to the model's generation_config.json */
	uint64_t	seed;			/* the bits of the SQL bigint */
	uint64_t	cache_salt;		/* prefix-cache scope: requests share cached KV only with equal salts */
	uint64_t	tenant;			/* fair-share group (the PostgreSQL role): the scheduler shares
								 * running sequences and prompt work equally between groups */
	int32_t		prompt_len;		/* bytes of prompt text (of int32 ids for DETOKENIZE) */
	int32_t		n_stop;			/* [0, CBLLM_MAX_STOP] */
	int32_t		stop_len[CBLLM_MAX_STOP];	/* bytes of each stop string, > 0 */
	int32_t		constraint_len; /* >= 0: bytes of the constraint's regex (regex.h) after the
								 * stop strings; 0: unconstrained */
	double		min_p;			/* [0, 1]; 0: off */
	double		repetition_penalty; /* [0, CBLLM_MAX_REPETITION_PENALTY]; 0 or 1: off */
	double		frequency_penalty;	/* [-CBLLM_MAX_FREQ_PENALTY, CBLLM_MAX_FREQ_PENALTY] */
	double		presence_penalty;	/* likewise */
	int32_t		n_bias;			/* [0, CBLLM_MAX_LOGIT_BIAS]: logit_bias entries after the
								 * constraint, each an int32 token id then a float32 bias */
	int32_t		report_finish;	/* nonzero: the caller reads the finish reason itself, so an
								 * output cut short of its constraint ends as "length" rather
								 * than failing */
	int32_t		share_slot;		/* > 0: the request of slot share_slot - 1 (of serial
								 * share_serial) has the same prompt, and this one shares its
								 * KV (cbllm_request_input.share_prompt_with); 0: none */
	uint64_t	share_serial;
	int32_t		logprobs;		/* nonzero: report each generated token's log-probability */
	int32_t		top_logprobs;	/* [0, CBLLM_MAX_TOP_LOGPROBS]: alternatives with each
								 * (ignored without logprobs) */
} cbllm_request_params;

/* One logit_bias entry as the payload holds it. */
typedef struct cbllm_bias_entry
{
	int32_t		id;				/* >= 0; below the vocabulary (the engine checks that) */
	float		bias;			/* [-CBLLM_MAX_BIAS, CBLLM_MAX_BIAS] */
} cbllm_bias_entry;

/* The limits a server sets. */
typedef struct cbllm_request_limits
{
	int			max_tokens_limit;	/* cbllm.max_tokens_limit */
	int64_t		max_prompt_bytes;	/* cbllm.max_prompt_bytes: prompt plus stop strings plus
									 * constraint */
} cbllm_request_limits;

/* The engine API's own limits: any positive max_tokens, prompts of any size (max_model_len rules). */
extern const cbllm_request_limits cbllm_engine_limits;

typedef enum cbllm_check_result
{
	CBLLM_CHECK_OK = 0,
	CBLLM_CHECK_INVALID,		/* a parameter out of its range */
	CBLLM_CHECK_TOO_LARGE		/* the prompt with its stop strings is over the limit */
} cbllm_check_result;

/* The field a check refused (what a caller's hint is chosen by). */
typedef enum cbllm_request_field
{
	CBLLM_FIELD_NONE = 0,		/* nothing refused */
	CBLLM_FIELD_MAX_TOKENS,
	CBLLM_FIELD_TEMPERATURE,
	CBLLM_FIELD_TOP_P,
	CBLLM_FIELD_TOP_K,
	CBLLM_FIELD_PRIORITY,
	CBLLM_FIELD_DEFAULTS,		/* unknown CBLLM_DEFAULT_* bits */
	CBLLM_FIELD_N_STOP,			/* too many stop strings (or a negative count) */
	CBLLM_FIELD_PROMPT_LEN,		/* a negative prompt length */
	CBLLM_FIELD_STOP_LEN,		/* an empty stop string */
	CBLLM_FIELD_CONSTRAINT_LEN, /* a negative constraint length */
	CBLLM_FIELD_MIN_P,
	CBLLM_FIELD_REPETITION_PENALTY,
	CBLLM_FIELD_FREQUENCY_PENALTY,
	CBLLM_FIELD_PRESENCE_PENALTY,
	CBLLM_FIELD_N_BIAS,			/* too many logit_bias entries (or a negative count) */
	CBLLM_FIELD_LOGPROBS,		/* top_logprobs out of range */
	CBLLM_FIELD_BYTES			/* prompt and stop strings together over the limit: CBLLM_CHECK_TOO_LARGE */
} cbllm_request_field;

/*
 * Check p against lim, field by field in a fixed order; on the first
 * problem set *field (which may be NULL) and fill msg (len bytes, a
 * lower-case sentence quoting the argument as given).
 */
cbllm_check_result cbllm_request_check(const cbllm_request_limits *lim,
									   const cbllm_request_params *p, cbllm_request_field *field,
									   char *msg, size_t len);

/* Bytes of prompt, stop strings and constraint that follow p (its n_stop in range). */
int64_t		cbllm_request_params_bytes(const cbllm_request_params *p);

/*
 * The engine's input and sampling for a GENERATE request p whose prompt,
 * stop strings, constraint and logit_bias lie at bytes.  The stop strings
 * and the constraint (with their NULs) and the bias entries are copied into
 * one malloc'd block, *held, which the caller frees once the engine has the
 * request (it copies them); CBLLM_ERR_NOMEM when that fails.
 */
int			cbllm_request_params_to_engine(const cbllm_request_params *p, const char *bytes,
										   struct cbllm_request_input *in,
										   struct cbllm_sampling *sp, char **held);

/* The parameters an engine API caller's sampling gives, for the same check (prompt_len 0). */
void		cbllm_request_params_from_sampling(const struct cbllm_sampling *sp,
											   cbllm_request_params *p);

/* The shortest decimal that reads back as x (as PostgreSQL prints a float8), into buf. */
const char *cbllm_format_double(double x, char *buf, size_t len);

#endif
