/*
 * batch_check.h: what continuous batching must not change, for the model
 * tests (test_moe, test_hybrid).  Four prompts (the tests' prompt and three
 * of other lengths and ids) run alone, each on an engine of its own, and
 * then together on one engine sized to force a behaviour (one batch,
 * chunked prefill, preemption); at temperature 0 each must make the same
 * tokens either way.
 */
#ifndef CBLLM_TEST_BATCH_CHECK_H
#define CBLLM_TEST_BATCH_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "ref_check.h"

#define BATCH_N 4				/* the prompt and three others */
#define BATCH_GREEDY 16			/* tokens each makes */

/* The tests' prompt, whose logits and tokens the references hold. */
static const int32_t BATCH_PROMPT[] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};

#define BATCH_PROMPT_LEN ((int) (sizeof(BATCH_PROMPT) / sizeof(BATCH_PROMPT[0])))

/* Where each of the requests' tokens go. */
typedef struct batch_tokens
{
	int32_t		ids[BATCH_N][BATCH_GREEDY];
	int			n[BATCH_N];
	bool		error;
} batch_tokens;

/* Append request i's new tokens. */
static inline bool
batch_collect(void *arg, int i, const cbllm_output *o)
{
	batch_tokens *b = arg;

	for (int k = 0; k < o->n_tokens && b->n[i] < BATCH_GREEDY; k++)
		b->ids[i][b->n[i]++] = o->tokens[k];
	b->error |= o->finish == CBLLM_FINISH_ERROR;
	return o->finish != CBLLM_FINISH_ERROR;
}

/* Prompt i into ids (room for 64): the tests' prompt first, then three of 11, 17 and 23 ids below 393. */
static inline int
batch_prompt(int i, int32_t *ids)
{
	int			n = i == 0 ? BATCH_PROMPT_LEN : 5 + 6 * i;

	for (int t = 0; t < n; t++)
		ids[t] = i == 0 ? BATCH_PROMPT[t] : t == 0 ? 1 : 3 + (int32_t) ((i * 7919u + t * 104729u) % 390u);
	return n;
}

/* Run the BATCH_N prompts at once on an engine of size sz; false on an error. */
static inline bool
batch_run(const char *path, const char *device, ref_engine_size sz, batch_tokens *out,
		  cbllm_stats *st)
{
	cbllm_engine *e = ref_engine_sized(path, device, sz);
	cbllm_sampling sp = cbllm_sampling_default();
	int64_t		id[BATCH_N];
	cbllm_err	err;
	bool		ok = e != NULL;

	memset(out, 0, sizeof(*out));
	memset(st, 0, sizeof(*st));
	sp.max_tokens = BATCH_GREEDY;
	sp.ignore_eos = true;
	for (int i = 0; i < BATCH_N && ok; i++)
	{
		int32_t		ids[64];
		cbllm_request_input in = {.ids = ids, .n_ids = batch_prompt(i, ids)};

		ok = cbllm_engine_submit(e, &in, &sp, &id[i], &err) == CBLLM_OK;
	}
	ok = ok && engine_run_to_end(e, id, BATCH_N, 10000, batch_collect, out) >= 0 && !out->error;
	if (e != NULL)
	{
		cbllm_engine_stats(e, st);
		cbllm_engine_destroy(e);
	}
	return ok;
}

/* Whether every request of a made the tokens of b. */
static inline bool
batch_same(const batch_tokens *a, const batch_tokens *b)
{
	for (int i = 0; i < BATCH_N; i++)
		if (a->n[i] != BATCH_GREEDY || b->n[i] != BATCH_GREEDY ||
			memcmp(a->ids[i], b->ids[i], sizeof(a->ids[i])) != 0)
			return false;
	return true;
}

/* Each of the BATCH_N prompts alone (an engine of one sequence) on device (NULL: the CPU). */
static inline void
batch_alone(const char *path, const char *device, batch_tokens *alone)
{
	memset(alone, 0, sizeof(*alone));
	for (int i = 0; i < BATCH_N; i++)
	{
		int32_t		ids[64];
		int			len = batch_prompt(i, ids);

		if (ref_engine_greedy(path, device, ids, len, BATCH_GREEDY, alone->ids[i]) == BATCH_GREEDY)
			alone->n[i] = BATCH_GREEDY;
	}
}

#endif
