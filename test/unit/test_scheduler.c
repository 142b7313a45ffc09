/*
 * test_scheduler.c: iteration-level scheduling on a generated tiny model:
 * preemption by recompute and by swap under a KV pool a quarter of what the
 * workload needs (every request completes with the unconstrained greedy
 * output, and no block leaks), priorities, prefix caching, oversize
 * rejection, aborts in every state, chunked prefill beside decodes, and the
 * static batching baseline.
 *
 * usage: test_scheduler MODEL_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbllm.h"
#include "tap.h"

#define MAXR 16
#define MAXGEN 64

static const char *model_dir;
static int	vocab;

typedef struct run_result
{
	int32_t		tok[MAXR][MAXGEN];
	int			n[MAXR];
	int			first_step[MAXR];	/* step of the first generated token */
	int			done_step[MAXR];	/* step when it finished */
	cbllm_finish finish[MAXR];
	cbllm_stats st;
	int			steps;
} run_result;

typedef struct workload
{
	int			n;
	int			prompt_len[MAXR];
	int			gen[MAXR];
	int			priority[MAXR];
	int			prefix_seed[MAXR];	/* prompts with equal seeds share their start */
	int			shared_len[MAXR];	/* ... for this many tokens */
} workload;

/* Prompt k of a workload, deterministic. */
static void
MakePrompt(const workload *w, int k, int32_t *ids)
{
	for (int i = 0; i < w->prompt_len[k]; i++)
	{
		unsigned	s = i < w->shared_len[k] ? (unsigned) w->prefix_seed[k] : 1000u + k;

		ids[i] = i == 0 ? 1 : 3 + (int32_t) ((s * 2654435761u + i * 40503u) % (unsigned) (vocab - 3));
	}
}

/* An engine with block size 4 and the given limits and modes. */
static cbllm_engine *
NewEngine(int max_seqs, int budget, int kv_blocks, cbllm_preempt mode, int swap_blocks,
		  bool no_prefix, bool static_batching)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.model_dir = model_dir;
	p.n_threads = 2;
	p.max_num_seqs = max_seqs;
	p.max_num_batched_tokens = budget;
	p.num_kv_blocks = kv_blocks;
	p.block_size = 4;
	p.max_model_len = 256;
	p.preempt_mode = mode;
	p.num_swap_blocks = swap_blocks;
	p.swap_space_bytes = swap_blocks == 0 ? SIZE_MAX : 0;
	p.no_prefix_caching = no_prefix;
	p.static_batching = static_batching;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
		TAP_DIAG("engine_create: %s", err.msg);
	return e;
}

/* Submit request k of w; returns its id or 0. */
static int64_t
Submit(cbllm_engine *e, const workload *w, int k)
{
	int32_t		ids[256];
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_request_input in = {.ids = ids, .n_ids = w->prompt_len[k]};
	cbllm_err	err;
	int64_t		id = 0;

	sp.max_tokens = w->gen[k];
	sp.ignore_eos = true;
	sp.priority = w->priority[k];
	MakePrompt(w, k, ids);
	if (cbllm_engine_submit(e, &in, &sp, &id, &err) != CBLLM_OK)
		TAP_DIAG("submit %d: %s", k, err.msg);
	return id;
}

/* Step e until ids[] all finish, recording tokens and timings. */
static void
Drive(cbllm_engine *e, int64_t *ids, int n, run_result *res)
{
	int			active = 1;
	int			left = n;

	for (int k = 0; k < n; k++)
	{
		res->n[k] = 0;
		res->first_step[k] = res->done_step[k] = -1;
		res->finish[k] = CBLLM_FINISH_NONE;
	}
	for (res->steps = 0; left > 0 && res->steps < 20000; res->steps++)
	{
		cbllm_engine_step(e, &active, NULL);
		for (int k = 0; k < n; k++)
		{
			cbllm_output o;

			if (ids[k] == 0 || cbllm_engine_take(e, ids[k], &o, NULL) != CBLLM_OK)
				continue;
			if (o.n_tokens > 0 && res->first_step[k] < 0)
				res->first_step[k] = res->steps;
			for (int t = 0; t < o.n_tokens && res->n[k] < MAXGEN; t++)
				res->tok[k][res->n[k]++] = o.tokens[t];
			if (o.finish != CBLLM_FINISH_NONE)
			{
				res->finish[k] = o.finish;
				res->done_step[k] = res->steps;
				ids[k] = 0;
				left--;
			}
		}
	}
	cbllm_engine_stats(e, &res->st);
}

/* Run a whole workload submitted at once on e. */
static void
RunWorkload(cbllm_engine *e, const workload *w, run_result *res)
{
	int64_t		ids[MAXR];

	for (int k = 0; k < w->n; k++)
		ids[k] = Submit(e, w, k);
	Drive(e, ids, w->n, res);
}

/* Same generated tokens for every request of w. */
static bool
SameTokens(const workload *w, const run_result *a, const run_result *b)
{
	for (int k = 0; k < w->n; k++)
		if (a->n[k] != b->n[k] || a->n[k] != w->gen[k] ||
			memcmp(a->tok[k], b->tok[k], sizeof(int32_t) * a->n[k]) != 0)
		{
			TAP_DIAG("request %d differs (%d vs %d tokens)", k, a->n[k], b->n[k]);
			return false;
		}
	return true;
}

/* Every KV and swap block is available again. */
static bool
NoLeaks(const cbllm_stats *st)
{
	return st->kv_blocks_free == st->kv_blocks_total && st->n_running == 0 &&
		st->n_waiting == 0 && st->swap_blocks_free == st->swap_blocks_total;
}

static workload base;			/* 8 requests, prompts 20..55, 40 tokens each */
static run_result ref;			/* its unconstrained run */

/* A quarter-sized pool completes the workload identically in each preemption mode. */
static void
TestPreemption(void)
{
	int			need = 0,
				quarter;
	cbllm_engine *e;
	struct
	{
		const char *name;
		cbllm_preempt mode;
		int			swap_blocks;
	}			modes[] = {
		{"recompute", CBLLM_PREEMPT_RECOMPUTE, 0},
		{"swap", CBLLM_PREEMPT_SWAP, 256},
		{"auto", CBLLM_PREEMPT_AUTO, 256},
		{"swap with a 3-block swap area (falls back to recompute)", CBLLM_PREEMPT_SWAP, 3},
	};

	for (int k = 0; k < base.n; k++)
		need += (base.prompt_len[k] + base.gen[k] + 3) / 4;
	quarter = need / 4;
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_RECOMPUTE, 0, true, false);
	RunWorkload(e, &base, &ref);
	cbllm_engine_destroy(e);
	TAP_OK(ref.st.preemptions == 0, "unconstrained run needs no preemption");
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
	{
		run_result *res = calloc(1, sizeof(run_result));

		e = NewEngine(8, 256, quarter, modes[m].mode, modes[m].swap_blocks, true, false);
		RunWorkload(e, &base, res);
		TAP_OK(SameTokens(&base, res, &ref),
			   "%s: with %d of the %d blocks the workload needs, every request completes with the unconstrained greedy output",
			   modes[m].name, quarter, need);
		TAP_OK(res->st.preemptions > 0, "%s: requests were preempted (%lld: %lld recompute, %lld swap)",
			   modes[m].name, (long long) res->st.preemptions,
			   (long long) res->st.preemptions_recompute, (long long) res->st.preemptions_swap);
		if (modes[m].mode == CBLLM_PREEMPT_RECOMPUTE)
			TAP_OK(res->st.preemptions_swap == 0, "recompute mode never swaps");
		else if (modes[m].swap_blocks >= 256)
			TAP_OK(res->st.preemptions_swap > 0, "%s mode swapped blocks out", modes[m].name);
		else
			TAP_OK(res->st.preemptions_recompute > 0, "a full swap area falls back to recompute");
		TAP_OK(NoLeaks(&res->st), "%s: every KV and swap block is free at the end", modes[m].name);
		free(res);
		cbllm_engine_destroy(e);
	}
}

/* Higher priority is admitted first; equal priority is first come, first served. */
static void
TestPriorityAdmission(void)
{
	workload	w = {.n = 4};
	run_result *res = calloc(1, sizeof(run_result));
	cbllm_engine *e = NewEngine(1, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, false);

	for (int k = 0; k < 4; k++)
	{
		w.prompt_len[k] = 10;
		w.gen[k] = 5;
	}
	w.priority[2] = 5;			/* submitted third, runs first */
	RunWorkload(e, &w, res);
	TAP_OK(res->done_step[2] < res->first_step[0] && res->done_step[0] < res->first_step[1] &&
		   res->done_step[1] < res->first_step[3],
		   "one sequence at a time: priority 5 runs first, then the equal priorities in arrival order");
	free(res);
	cbllm_engine_destroy(e);
}

/* A high-priority arrival preempts low-priority requests when memory is short. */
static void
TestPriorityPreemption(void)
{
	workload	w = {.n = 3};
	run_result *res = calloc(1, sizeof(run_result));
	run_result *solo = calloc(1, sizeof(run_result));
	cbllm_engine *e = NewEngine(8, 256, 30, CBLLM_PREEMPT_RECOMPUTE, 0, true, false);
	int64_t		ids[3];
	int			active;

	for (int k = 0; k < 3; k++)
	{
		w.prompt_len[k] = 30;
		w.gen[k] = 40;
	}
	w.priority[2] = 10;
	ids[0] = Submit(e, &w, 0);
	ids[1] = Submit(e, &w, 1);
	for (int s = 0; s < 5; s++)
		cbllm_engine_step(e, &active, NULL);
	ids[2] = Submit(e, &w, 2);
	Drive(e, ids, 3, res);
	TAP_OK(res->done_step[2] < res->done_step[0] && res->done_step[2] < res->done_step[1] &&
		   res->st.preemptions > 0,
		   "the priority-10 arrival preempts the two running priority-0 requests and finishes first (%lld preemptions)",
		   (long long) res->st.preemptions);
	cbllm_engine_destroy(e);
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_RECOMPUTE, 0, true, false);
	RunWorkload(e, &w, solo);
	TAP_OK(SameTokens(&w, res, solo), "the preempted and the preempting requests keep their greedy output");
	TAP_OK(NoLeaks(&res->st), "no block is left held after priority preemption");
	free(res);
	free(solo);
	cbllm_engine_destroy(e);
}

/* Shared prompt prefixes hit the cache and give the same tokens as without it. */
static void
TestPrefixCache(void)
{
	workload	w = {.n = 4};
	run_result *on = calloc(1, sizeof(run_result));
	run_result *off = calloc(1, sizeof(run_result));
	cbllm_engine *e;
	int64_t		ids[4];

	for (int k = 0; k < 4; k++)
	{
		w.prompt_len[k] = 40 + k;
		w.gen[k] = 20;
		w.prefix_seed[k] = 77;
		w.shared_len[k] = 33;	/* 8 full blocks of 4 in common */
	}
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_AUTO, 64, false, false);
	/* the first request fills the cache; the others arrive after it finished */
	ids[0] = Submit(e, &w, 0);
	Drive(e, ids, 1, on);
	for (int k = 1; k < 4; k++)
		ids[k] = Submit(e, &w, k);
	{
		run_result *rest = calloc(1, sizeof(run_result));

		Drive(e, ids + 1, 3, rest);
		for (int k = 1; k < 4; k++)
		{
			on->n[k] = rest->n[k - 1];
			memcpy(on->tok[k], rest->tok[k - 1], sizeof(on->tok[k]));
		}
		on->st = rest->st;
		free(rest);
	}
	cbllm_engine_destroy(e);
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, false);
	RunWorkload(e, &w, off);
	cbllm_engine_destroy(e);
	TAP_OK(on->st.prefix_hits >= 3 * 8,
		   "requests sharing a 33-token prefix reuse its 8 cached blocks (%lld hits of %lld queries)",
		   (long long) on->st.prefix_hits, (long long) on->st.prefix_queries);
	TAP_OK(SameTokens(&w, on, off), "prefix-cache hits give the same greedy tokens as no cache");
	TAP_OK(NoLeaks(&on->st) && on->st.kv_blocks_cached > 0,
		   "finished requests leave their full blocks cached and nothing held (%d cached)",
		   on->st.kv_blocks_cached);
	free(on);
	free(off);
}

/* A prompt that can never fit the pool is refused at submit. */
static void
TestOversize(void)
{
	cbllm_engine *e = NewEngine(4, 256, 10, CBLLM_PREEMPT_AUTO, 8, true, false);
	int32_t		ids[64];
	cbllm_request_input in = {.ids = ids, .n_ids = 40};
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;
	int64_t		id;

	for (int i = 0; i < 64; i++)
		ids[i] = 5 + i;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_TOO_LONG &&
		   strstr(err.msg, "KV cache") != NULL,
		   "a 40-token prompt is refused by a 10-block pool of 4 at submit: %s", err.msg);
	in.n_ids = 39;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_OK,
		   "a 39-token prompt (40 positions with its first token) is accepted");
	cbllm_engine_destroy(e);
}

/* Aborting in every state frees what the request held. */
static void
TestAborts(void)
{
	workload	w = {.n = 4};
	cbllm_engine *e = NewEngine(2, 8, 24, CBLLM_PREEMPT_SWAP, 64, true, false);
	int64_t		ids[4];
	cbllm_stats st;
	int			active;
	bool		swapped_seen = false;

	for (int k = 0; k < 4; k++)
	{
		w.prompt_len[k] = 30;
		w.gen[k] = 60;
	}
	for (int k = 0; k < 4; k++)
		ids[k] = Submit(e, &w, k);
	cbllm_engine_step(e, &active, NULL);
	cbllm_engine_stats(e, &st);
	TAP_OK(st.n_running == 1 && st.kv_blocks_free < st.kv_blocks_total,
		   "with an 8-token budget the first request is mid-prefill after one step");
	TAP_OK(cbllm_engine_abort(e, ids[0], NULL) == CBLLM_OK, "abort mid-prefill succeeds");
	TAP_OK(cbllm_engine_abort(e, ids[3], NULL) == CBLLM_OK, "abort while queued succeeds");
	cbllm_engine_stats(e, &st);
	TAP_OK(st.kv_blocks_free == st.kv_blocks_total && st.n_waiting == 2,
		   "after both aborts no block is held and two requests wait");
	/* run until one of the two remaining is swapped out */
	for (int s = 0; s < 400 && !swapped_seen; s++)
	{
		cbllm_engine_step(e, &active, NULL);
		cbllm_engine_stats(e, &st);
		swapped_seen = st.n_swapped > 0;
	}
	TAP_OK(swapped_seen, "the 24-block pool swaps one of two growing requests out");
	if (swapped_seen)
	{
		TAP_OK(st.swap_blocks_free < st.swap_blocks_total, "the swapped request holds swap blocks");
		cbllm_engine_abort(e, ids[1], NULL);
		cbllm_engine_abort(e, ids[2], NULL);
		cbllm_engine_stats(e, &st);
		TAP_OK(NoLeaks(&st), "aborting a decoding and a swapped request frees every KV and swap block");
	}
	cbllm_engine_destroy(e);
}

/* A long prompt is prefilled in chunks while a running request keeps decoding. */
static void
TestChunkedPrefill(void)
{
	workload	w = {.n = 2};
	cbllm_engine *e = NewEngine(4, 16, 0, CBLLM_PREEMPT_AUTO, 64, true, false);
	int64_t		a,
				b;
	int			active,
				decoded = 0,
				steps = 0;
	cbllm_output o;

	w.prompt_len[0] = 8;
	w.gen[0] = 40;
	w.prompt_len[1] = 120;
	w.gen[1] = 4;
	a = Submit(e, &w, 0);
	for (int s = 0; s < 3; s++)
		cbllm_engine_step(e, &active, NULL);
	cbllm_engine_take(e, a, &o, NULL);
	b = Submit(e, &w, 1);
	for (;;)
	{
		cbllm_output ob;

		cbllm_engine_step(e, &active, NULL);
		steps++;
		cbllm_engine_take(e, a, &o, NULL);
		decoded += o.n_tokens;
		cbllm_engine_take(e, b, &ob, NULL);
		if (ob.n_generated > 0 || steps > 100)
			break;
	}
	TAP_OK(steps >= 8 && decoded == steps,
		   "a 120-token prompt under a 16-token budget takes %d steps and the running request decodes a token in every one (%d)",
		   steps, decoded);
	cbllm_engine_destroy(e);
}

/* Static batching holds new requests until the whole batch is done; continuous does not. */
static void
TestStaticVersusContinuous(void)
{
	workload	w = {.n = 8};
	run_result *st = calloc(1, sizeof(run_result));
	run_result *ct = calloc(1, sizeof(run_result));
	cbllm_engine *e;
	int			last_of_first = 0;

	for (int k = 0; k < 8; k++)
	{
		w.prompt_len[k] = 10;
		w.gen[k] = k == 0 ? 60 : 8;	/* one long request heads the first batch */
	}
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, true);
	RunWorkload(e, &w, st);
	cbllm_engine_destroy(e);
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, false);
	RunWorkload(e, &w, ct);
	cbllm_engine_destroy(e);
	for (int k = 0; k < 4; k++)
		if (st->done_step[k] > last_of_first)
			last_of_first = st->done_step[k];
	TAP_OK(st->first_step[4] > last_of_first,
		   "static batching: request 5 starts (step %d) only after the first batch ends (step %d)",
		   st->first_step[4], last_of_first);
	TAP_OK(ct->done_step[7] < ct->done_step[0],
		   "continuous batching: the last short request (step %d) finishes before the long one (step %d)",
		   ct->done_step[7], ct->done_step[0]);
	TAP_OK(SameTokens(&w, st, ct), "static and continuous batching give the same greedy tokens");
	free(st);
	free(ct);
}

int
main(int argc, char **argv)
{
	cbllm_engine *e;
	cbllm_engine_info info;

	if (argc < 2)
	{
		fprintf(stderr, "usage: test_scheduler MODEL_DIR\n");
		return 2;
	}
	model_dir = argv[1];
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, false, false);
	TAP_OK(e != NULL, "engine loads %s", model_dir);
	if (e == NULL)
		return tap_done();
	cbllm_engine_get_info(e, &info);
	vocab = info.vocab_size;
	cbllm_engine_destroy(e);
	base.n = 8;
	for (int k = 0; k < 8; k++)
	{
		base.prompt_len[k] = 20 + 5 * k;
		base.gen[k] = 40;
	}
	TestPreemption();
	TestPriorityAdmission();
	TestPriorityPreemption();
	TestPrefixCache();
	TestOversize();
	TestAborts();
	TestChunkedPrefill();
	TestStaticVersusContinuous();
	return tap_done();
}
