/*
 * test_completions.c: n completions of one prompt (share_prompt_with).
 * Followers wait for their leader's prompt, then take its full blocks from
 * the prefix cache: at no step do n completions hold more KV blocks than
 * one prompt's full blocks plus each completion's own, and each completion
 * is exactly what it would be alone (same seed, same text).
 *
 * usage: test_completions MODEL_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "tap.h"

#define N 4
#define PROMPT 30
#define GEN 10
#define BLOCK 4

typedef struct run
{
	cbllm_engine *e;
	int32_t		tokens[N][GEN];
	int			n[N];
	int			peak_used;		/* the most KV blocks in use at the end of a step */
} run;

/* Collect tokens and the blocks in use. */
static bool
Collect(void *arg, int i, const cbllm_output *o)
{
	run		   *r = arg;
	cbllm_stats st;

	for (int k = 0; k < o->n_tokens && r->n[i] < GEN; k++)
		r->tokens[i][r->n[i]++] = o->tokens[k];
	cbllm_engine_stats(r->e, &st);
	if (st.kv_blocks_total - st.kv_blocks_free > r->peak_used)
		r->peak_used = st.kv_blocks_total - st.kv_blocks_free;
	return true;
}

/* An engine with the prefix cache (or without). */
static cbllm_engine *
NewEngine(const char *dir, bool prefix_cache)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.model_dir = dir;
	p.n_threads = 2;
	p.block_size = BLOCK;
	p.num_kv_blocks = 256;
	p.max_model_len = 128;
	p.no_prefix_caching = !prefix_cache;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
		TAP_DIAG("engine_create: %s", err.msg);
	return e;
}

/* Submit the N completions (shared: each after the first follows it) and run them. */
static bool
RunN(cbllm_engine *e, bool shared, int only, run *r)
{
	int32_t		prompt[PROMPT];
	int64_t		ids[N] = {0};
	cbllm_err	err;

	memset(r, 0, sizeof(*r));
	r->e = e;
	for (int i = 0; i < PROMPT; i++)
		prompt[i] = 3 + (i * 37) % 300;
	for (int i = 0; i < N; i++)
	{
		cbllm_request_input in = {.ids = prompt, .n_ids = PROMPT};
		cbllm_sampling sp = cbllm_sampling_default();

		if (only >= 0 && i != only)
			continue;
		sp.temperature = 1;
		sp.has_seed = true;
		sp.seed = 100 + i;
		sp.max_tokens = GEN;
		sp.ignore_eos = true;
		in.share_prompt_with = shared && i > 0 ? ids[0] : 0;
		if (cbllm_engine_submit(e, &in, &sp, &ids[i], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			return false;
		}
	}
	return engine_run_to_end(e, ids, N, 10000, Collect, r) >= 0;
}

int
main(int argc, char **argv)
{
	cbllm_engine *e;
	run			shared,
				apart,
				alone;
	/* one prompt's full blocks, then each completion's own: its partial prompt block and output */
	int			bound = PROMPT / BLOCK + N * ((PROMPT % BLOCK + GEN + BLOCK - 1) / BLOCK);
	bool		same = true;

	if (argc != 2)
	{
		fprintf(stderr, "usage: test_completions MODEL_DIR\n");
		return 2;
	}
	e = NewEngine(argv[1], true);
	TAP_OK(e != NULL && RunN(e, true, -1, &shared), "%d completions of one prompt run", N);
	cbllm_engine_destroy(e);
	e = NewEngine(argv[1], false);
	TAP_OK(e != NULL && RunN(e, false, -1, &apart), "the same %d as separate requests run", N);
	cbllm_engine_destroy(e);
	TAP_OK(shared.peak_used <= bound,
		   "shared: at most %d KV blocks held at once (one prompt's %d full blocks plus %d each), "
		   "held %d", bound, PROMPT / BLOCK, (bound - PROMPT / BLOCK) / N, shared.peak_used);
	TAP_OK(apart.peak_used > bound, "separate requests hold more: %d blocks", apart.peak_used);
	for (int i = 0; i < N; i++)
	{
		e = NewEngine(argv[1], false);
		if (e == NULL || !RunN(e, false, i, &alone))
			same = false;
		else
			same &= shared.n[i] == GEN && alone.n[i] == GEN &&
				memcmp(shared.tokens[i], alone.tokens[i], sizeof(int32_t) * GEN) == 0;
		cbllm_engine_destroy(e);
	}
	TAP_OK(same, "each shared completion is token for token what its seed gives alone");
	return tap_done();
}
