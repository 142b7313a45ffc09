/*
 * test_longrope.c: longrope's factor set is chosen per sequence, by its whole
 * length, as HF transformers chooses it, and held to the float64 reference
 * (reference.py, which does the same and drops its cache where Phi-3's
 * generate does), on a Phi-3 128k checkpoint whose original context is 8:
 *
 *   - a 5-token prompt decodes with the short factors until its ninth
 *     token, where the sequence gives back its KV and computes all nine
 *     positions again with the long ones: its 16 greedy tokens are the
 *     reference's, with prompts chunked 4 tokens a step (the recompute
 *     too) and without chunking;
 *   - a 12-token prompt takes the long factors at every position, its
 *     first chunk included;
 *   - both, and a short sequence that never grows past 8, in one batch:
 *     each keeps its own set and its reference tokens;
 *   - the prefix cache keeps the sets apart: blocks an 8-token prompt
 *     computed with the short factors are never reused by the 12-token
 *     prompt that starts with the same 8 tokens, whose tokens stay the
 *     reference's, while a second long run reuses the long blocks.
 *
 * With a device argument the same runs on that device (bf16 weights and
 * KV) must give the CPU's tokens.  (The checkpoint is made decisive, so
 * that no near-tie of its random logits lets bf16 rounding pick another
 * token; each check was seen to fail without the recompute at the
 * crossing or without the factor set in the prefix cache's key.)
 *
 * usage: test_longrope DIR SHORT_GREEDY LONG_GREEDY [DEVICE]
 *   DIR           gen_model.py --family phi3-128k (original context 8), then
 *                 decisive_model.py --signal 0.2
 *   SHORT_GREEDY  reference.py DIR --greedy 16 --prompt-ids "<SHORT below>"
 *   LONG_GREEDY   reference.py DIR --greedy 16 --prompt-ids "<LONG below>"
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "ref_check.h"
#include "tap.h"

#define N_GEN 16
#define ORIGINAL_CONTEXT 8		/* the checkpoint's original_max_position_embeddings */

static const int32_t SHORT[] = {1, 15, 267, 42, 300};
static const int32_t LONG[] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};

#define N_SHORT ((int) (sizeof(SHORT) / sizeof(SHORT[0])))
#define N_LONG ((int) (sizeof(LONG) / sizeof(LONG[0])))

static const char *model_dir;

/* One request of a run: its prompt, how many tokens it makes, and what it made. */
typedef struct run_req
{
	const int32_t *prompt;
	int			n_prompt;
	int			max_tokens;
	int32_t		out[N_GEN];
	int			n_out;
	bool		failed;
} run_req;

/* Append request i's new tokens. */
static bool
Collect(void *arg, int i, const cbllm_output *o)
{
	run_req    *r = (run_req *) arg + i;

	for (int k = 0; k < o->n_tokens && r->n_out < N_GEN; k++)
		r->out[r->n_out++] = o->tokens[k];
	if (o->finish == CBLLM_FINISH_ERROR)
	{
		TAP_DIAG("request %d failed: %s", i, o->error ? o->error : "?");
		r->failed = true;
	}
	return true;
}

/* Submit the n requests at once (greedy, never stopping at EOS) and run them to their ends. */
static bool
Run(cbllm_engine *e, run_req *reqs, int n)
{
	int64_t		ids[8];
	cbllm_err	err;

	for (int i = 0; i < n; i++)
	{
		cbllm_request_input in = {0};
		cbllm_sampling sp = cbllm_sampling_default();

		in.ids = reqs[i].prompt;
		in.n_ids = reqs[i].n_prompt;
		sp.max_tokens = reqs[i].max_tokens;
		sp.ignore_eos = true;
		reqs[i].n_out = 0;
		reqs[i].failed = false;
		if (cbllm_engine_submit(e, &in, &sp, &ids[i], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			return false;
		}
	}
	return engine_run_to_end(e, ids, n, INT_MAX, Collect, reqs) >= 0;
}

/* Whether r made want's n tokens; how many of them agree goes to *same. */
static bool
Same(const run_req *r, const int32_t *want, int n, int *same)
{
	*same = 0;
	for (int i = 0; i < r->n_out && i < n; i++)
		*same += r->out[i] == want[i];
	return !r->failed && r->n_out == n && *same == n;
}

/* An engine over the model on device, taking at most max_tokens tokens a step. */
static cbllm_engine *
NewEngine(const char *device, int max_tokens)
{
	return ref_engine_sized(model_dir, device, (ref_engine_size) {4, max_tokens, 64, 64, NULL, 0, 0});
}

/* The prefix-cache lookups that hit so far. */
static int64_t
Hits(const cbllm_engine *e)
{
	cbllm_stats st;

	cbllm_engine_stats(e, &st);
	return st.prefix_hits;
}

/*
 * The runs on device (NULL: the CPU), each held to want_short and
 * want_long: the reference's tokens on the CPU, the CPU's on a device.
 */
static void
TestRuns(const char *device, const int32_t *want_short, const int32_t *want_long,
		 int32_t *got_short, int32_t *got_long)
{
	const char *name = device ? device : "cpu";
	run_req		r[3];
	int			same,
				same2,
				same3;
	int64_t		hits;
	bool		ok;
	cbllm_engine *e;

	for (int chunk = 0; chunk < 2; chunk++)
	{
		int			max_tokens = chunk ? 4 : 64;

		if ((e = NewEngine(device, max_tokens)) == NULL)
		{
			TAP_OK(false, "%s: the engine starts", name);
			return;
		}
		r[0] = (run_req) {.prompt = SHORT, .n_prompt = N_SHORT, .max_tokens = N_GEN};
		TAP_OK(Run(e, r, 1) && Same(&r[0], want_short, N_GEN, &same),
			   "%s, %d tokens a step: a %d-token prompt decodes past %d, recomputed with the long factors there: %d of %d tokens are the %s's",
			   name, max_tokens, N_SHORT, ORIGINAL_CONTEXT, same, N_GEN, device ? "CPU" : "reference");
		if (got_short != NULL && chunk == 1)
			memcpy(got_short, r[0].out, sizeof(r[0].out));
		r[0] = (run_req) {.prompt = LONG, .n_prompt = N_LONG, .max_tokens = N_GEN};
		TAP_OK(Run(e, r, 1) && Same(&r[0], want_long, N_GEN, &same),
			   "%s, %d tokens a step: a %d-token prompt takes the long factors from its first chunk: %d of %d tokens are the %s's",
			   name, max_tokens, N_LONG, same, N_GEN, device ? "CPU" : "reference");
		if (got_long != NULL && chunk == 1)
			memcpy(got_long, r[0].out, sizeof(r[0].out));
		cbllm_engine_destroy(e);
	}

	/* one batch: a sequence that crosses, one long from the start, one that stays short */
	if ((e = NewEngine(device, 16)) == NULL)
		return;
	r[0] = (run_req) {.prompt = SHORT, .n_prompt = N_SHORT, .max_tokens = N_GEN};
	r[1] = (run_req) {.prompt = LONG, .n_prompt = N_LONG, .max_tokens = N_GEN};
	r[2] = (run_req) {.prompt = SHORT, .n_prompt = N_SHORT, .max_tokens = 3};
	ok = Run(e, r, 3);
	ok &= Same(&r[0], want_short, N_GEN, &same);
	ok &= Same(&r[1], want_long, N_GEN, &same2);
	ok &= Same(&r[2], want_short, 3, &same3);
	TAP_OK(ok,
		   "%s: in one batch the crossing sequence (%d), the long one (%d) and one that stays short (%d of 3) keep their sets",
		   name, same, same2, same3);
	cbllm_engine_destroy(e);

	/* the prefix cache: short-factor blocks of LONG's first 8 tokens, then LONG itself */
	if ((e = NewEngine(device, 64)) == NULL)
		return;
	r[0] = (run_req) {.prompt = LONG, .n_prompt = ORIGINAL_CONTEXT, .max_tokens = 1};
	(void) Run(e, r, 1);
	hits = Hits(e);
	r[0] = (run_req) {.prompt = LONG, .n_prompt = N_LONG, .max_tokens = N_GEN};
	TAP_OK(Run(e, r, 1) && Same(&r[0], want_long, N_GEN, &same) && Hits(e) == hits,
		   "%s: blocks cached by an %d-token prompt (short factors) are not reused by the %d-token prompt that starts with it (%d hits; %d of %d tokens the %s's)",
		   name, ORIGINAL_CONTEXT, N_LONG, (int) (Hits(e) - hits), same, N_GEN, device ? "CPU" : "reference");
	hits = Hits(e);
	r[0] = (run_req) {.prompt = LONG, .n_prompt = N_LONG, .max_tokens = N_GEN};
	TAP_OK(Run(e, r, 1) && Same(&r[0], want_long, N_GEN, &same) && Hits(e) > hits,
		   "%s: a second run of the %d-token prompt reuses its long-factor blocks (%d hits) and keeps its tokens (%d of %d)",
		   name, N_LONG, (int) (Hits(e) - hits), same, N_GEN);
	cbllm_engine_destroy(e);
}

/* n ids from a reference file, as int32; NULL with a diagnostic. */
static int32_t *
ReadIds(const char *path, int n)
{
	float	   *v = ref_read_numbers(path, n);
	int32_t    *ids = v != NULL ? malloc(sizeof(int32_t) * n) : NULL;

	for (int i = 0; ids != NULL && i < n; i++)
		ids[i] = (int32_t) v[i];
	free(v);
	return ids;
}

int
main(int argc, char **argv)
{
	int32_t    *ref_short,
			   *ref_long,
				cpu_short[N_GEN],
				cpu_long[N_GEN];

	if (argc < 4)
	{
		fprintf(stderr, "usage: test_longrope DIR SHORT_GREEDY LONG_GREEDY [DEVICE]\n");
		return 2;
	}
	model_dir = argv[1];
	ref_short = ReadIds(argv[2], N_GEN);
	ref_long = ReadIds(argv[3], N_GEN);
	if (ref_short == NULL || ref_long == NULL)
	{
		TAP_OK(false, "the reference's tokens are read");
		return tap_done();
	}
	TestRuns(NULL, ref_short, ref_long, cpu_short, cpu_long);
	if (argc > 4)
		TestRuns(argv[4], cpu_short, cpu_long, NULL, NULL);
	free(ref_short);
	free(ref_long);
	return tap_done();
}
