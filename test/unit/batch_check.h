/*
 * batch_check.h: what continuous batching must not change, for the model
 * tests (test_moe, test_hybrid, test_gemma4).  Four prompts (the tests' prompt and three
 * of other lengths and ids) run alone, each on an engine of its own, and
 * then together on one engine sized to force a behaviour (one batch,
 * chunked prefill, preemption); at temperature 0 each must make the same
 * tokens either way.
 */
#ifndef CBLLM_TEST_BATCH_CHECK_H
#define CBLLM_TEST_BATCH_CHECK_H

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "ref_check.h"
#include "tap.h"

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

/*
 * The greedy tokens alone against the reference, then in a batch, chunked,
 * and preempted by recompute and by swap: each request's tokens as alone
 * (a hybrid model's state and an attention model's KV carried alike).
 */
static inline void
batch_check_greedy(const char *path, const char *ref_greedy, const char *what)
{
	int32_t		got[BATCH_GREEDY];
	float	   *ref = ref_greedy != NULL ? ref_read_numbers(ref_greedy, BATCH_GREEDY) : NULL;
	batch_tokens alone,
				b;
	cbllm_stats st;

	if (ref_greedy != NULL)
	{
		int			n = ref != NULL ? ref_engine_greedy(path, NULL, BATCH_PROMPT, BATCH_PROMPT_LEN,
														BATCH_GREEDY, got) : -1;
		bool		same = n == BATCH_GREEDY;

		for (int i = 0; same && i < BATCH_GREEDY; i++)
			same = got[i] == (int32_t) ref[i];
		TAP_OK(same, "%s: %d greedy tokens equal the float64 reference's", what, BATCH_GREEDY);
		free(ref);
	}
	batch_alone(path, NULL, &alone);
	TAP_OK(alone.n[0] == BATCH_GREEDY && alone.n[3] == BATCH_GREEDY, "%s: the prompts run alone",
		   what);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {BATCH_N, 256, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s: four prompts in one batch each make their tokens alone (each continues its own sequence)",
		   what);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {BATCH_N, 5, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s: with prompts split over steps of 5 tokens (KV and state carried between chunks) the tokens are the same",
		   what);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {BATCH_N, 256, 14, 64, NULL, CBLLM_PREEMPT_RECOMPUTE, 0},
					 &b, &st) && batch_same(&alone, &b) && st.preemptions_recompute > 0,
		   "%s: preempted by recompute in a pool of 14 blocks (rebuilt from position 0), the tokens are the same (%lld preemptions)",
		   what, (long long) st.preemptions_recompute);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {BATCH_N, 256, 14, 64, NULL, CBLLM_PREEMPT_SWAP, 64},
					 &b, &st) && batch_same(&alone, &b) && st.preemptions_swap > 0,
		   "%s: preempted by swap in a pool of 14 blocks (copied out and back), the tokens are the same (%lld preemptions)",
		   what, (long long) st.preemptions_swap);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {BATCH_N, 5, 14, 64, NULL, CBLLM_PREEMPT_SWAP, 64},
					 &b, &st) && batch_same(&alone, &b),
		   "%s: chunked prefill and swap preemption together, the tokens are the same (%lld preemptions)",
		   what, (long long) st.preemptions);
}

/*
 * The prompt twice on one engine of path, tok[r] its tokens each time; *st
 * and *info the engine's afterwards.  False when a run failed.
 */
static inline bool
batch_run_twice(const char *path, int32_t tok[2][BATCH_GREEDY], cbllm_stats *st,
				cbllm_engine_info *info)
{
	cbllm_engine *e = ref_engine(path, NULL);
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_request_input in = {.ids = BATCH_PROMPT, .n_ids = BATCH_PROMPT_LEN};
	bool		ok = e != NULL;

	sp.max_tokens = BATCH_GREEDY;
	sp.ignore_eos = true;
	for (int r = 0; r < 2 && ok; r++)
	{
		ref_tokens	t = {tok[r], 0, BATCH_GREEDY};
		int64_t		id;
		cbllm_err	err;

		ok = cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_OK &&
			engine_run_to_end(e, &id, 1, INT_MAX, ref_collect, &t) >= 0 && t.n == BATCH_GREEDY;
	}
	if (e != NULL)
	{
		cbllm_engine_stats(e, st);
		cbllm_engine_get_info(e, info);
		cbllm_engine_destroy(e);
	}
	return ok;
}

/* The prompt twice on one engine: the second run hits the prefix cache and makes the same tokens. */
static inline void
batch_check_prefix_hit(const char *path, const char *what)
{
	int32_t		tok[2][BATCH_GREEDY];
	cbllm_stats st = {0};
	cbllm_engine_info info = {0};
	bool		ok = batch_run_twice(path, tok, &st, &info);

	TAP_OK(ok && st.prefix_hits > 0 && memcmp(tok[0], tok[1], sizeof(tok[0])) == 0,
		   "%s: served again from the prefix cache (%lld blocks hit), the tokens are the same",
		   what, (long long) st.prefix_hits);
}

/* The prompt's logits from an engine of path against the reference's in ref_path, within tol. */
static inline void
batch_check_logits(const char *path, const char *ref_path, double tol, const char *what)
{
	int			vocab = 0;
	float	   *got = ref_engine_logits(path, NULL, BATCH_PROMPT, BATCH_PROMPT_LEN, &vocab);
	float	   *ref = got != NULL ? ref_read_numbers(ref_path, (size_t) BATCH_PROMPT_LEN * vocab) : NULL;
	double		worst = ref != NULL ? ref_worst_row(got, ref, BATCH_PROMPT_LEN, vocab) : INFINITY;

	TAP_OK(worst < tol, "%s: the prompt's logits match the float64 reference (worst row rel err %.2g < %.0e)",
		   what, worst, tol);
	free(got);
	free(ref);
}

/*
 * On a device: the prompt's logits against the CPU's (within the device's
 * bf16 tolerance), and each prompt's tokens in a batch, chunked, and
 * preempted by swap (its state copied out of the device's memory and back)
 * and by recompute, equal to its own alone on the device.
 */
static inline void
batch_check_device(const char *path, const char *device, const char *what)
{
	int			vocab = 0;
	float	   *cpu = ref_engine_logits(path, NULL, BATCH_PROMPT, BATCH_PROMPT_LEN, &vocab);
	batch_tokens alone,
				b;
	cbllm_stats st;

	ref_check_device(path, device, BATCH_PROMPT, BATCH_PROMPT_LEN, cpu, vocab, what);
	free(cpu);
	batch_alone(path, device, &alone);
	TAP_OK(alone.n[0] == BATCH_GREEDY && alone.n[3] == BATCH_GREEDY, "on %s: the prompts run alone",
		   device);
	TAP_OK(batch_run(path, device, (ref_engine_size) {BATCH_N, 256, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "on %s: four prompts in one batch each make their tokens alone", device);
	TAP_OK(batch_run(path, device, (ref_engine_size) {BATCH_N, 5, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "on %s: with chunked prefill (steps of 5 tokens) the tokens are the same", device);
	TAP_OK(batch_run(path, device, (ref_engine_size) {BATCH_N, 256, 14, 64, NULL, CBLLM_PREEMPT_SWAP, 64},
					 &b, &st) && batch_same(&alone, &b) && st.preemptions_swap > 0,
		   "on %s: preempted by swap (KV and state copied from the device and back), the tokens are the same (%lld preemptions)",
		   device, (long long) st.preemptions_swap);
	TAP_OK(batch_run(path, device, (ref_engine_size) {BATCH_N, 256, 14, 64, NULL, CBLLM_PREEMPT_RECOMPUTE, 0},
					 &b, &st) && batch_same(&alone, &b) && st.preemptions_recompute > 0,
		   "on %s: preempted by recompute, the tokens are the same (%lld preemptions)", device,
		   (long long) st.preemptions_recompute);
}

#endif
