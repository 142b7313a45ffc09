/*
 * test_scheduler.c: iteration-level scheduling on a generated tiny model:
 * preemption by recompute and by swap under a KV pool a quarter of what the
 * workload needs (every request completes with the unconstrained greedy
 * output, and no block leaks), priorities, prefix caching, oversize
 * rejection, aborts in every state, chunked prefill beside decodes, the
 * static batching baseline, prefix-cache hits that stay exact when every
 * block hash collides, and cache salts.  Priority aging against a flood is
 * test_scheduler_aging.c; the helpers both use are sched_engine.h.  The
 * clock never moves here, so every test sees strict priority order.
 *
 * usage: test_scheduler MODEL_DIR
 */
#include "sched_engine.h"

#define MAXGEN 64

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
		bool		prefix;		/* prefix caching on: blocks re-registered after preemption */
	}			modes[] = {
		{"recompute", CBLLM_PREEMPT_RECOMPUTE, 0, false},
		{"swap", CBLLM_PREEMPT_SWAP, 256, false},
		{"auto", CBLLM_PREEMPT_AUTO, 256, false},
		{"swap with a 3-block swap area (falls back to recompute)", CBLLM_PREEMPT_SWAP, 3, false},
		{"recompute with prefix caching", CBLLM_PREEMPT_RECOMPUTE, 0, true},
		{"swap with prefix caching", CBLLM_PREEMPT_SWAP, 256, true},
	};

	for (int k = 0; k < base.n; k++)
		need += (base.prompt_len[k] + base.gen[k] + 3) / 4;
	quarter = need / 4;
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_RECOMPUTE, 0, true, CBLLM_BATCH_CONTINUOUS);
	RunWorkload(e, &base, &ref);
	cbllm_engine_destroy(e);
	TAP_OK(ref.st.preemptions == 0, "unconstrained run needs no preemption");
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++)
	{
		run_result *res = calloc(1, sizeof(run_result));

		e = NewEngine(8, 256, quarter, modes[m].mode, modes[m].swap_blocks, !modes[m].prefix, CBLLM_BATCH_CONTINUOUS);
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
		if (modes[m].prefix && modes[m].mode == CBLLM_PREEMPT_RECOMPUTE)
			TAP_OK(res->st.prefix_hits > 0,
				   "%s: readmitted victims reuse their own cached blocks (%lld hits)", modes[m].name,
				   (long long) res->st.prefix_hits);
		free(res);
		cbllm_engine_destroy(e);
	}
}

/*
 * A KV cache of f16 or bf16 elements: the same pool bytes hold twice the
 * blocks of an f32 one, and under swap preemption (blocks copied out and
 * back in their 2-byte elements) and recompute every request still
 * completes with that cache's unconstrained output.
 */
static void
TestHalfKv(void)
{
	const char *types[2] = {"f16", "bf16"};
	int			need = 0;

	for (int k = 0; k < base.n; k++)
		need += (base.prompt_len[k] + base.gen[k] + 3) / 4;
	for (int t = 0; t < 2; t++)
	{
		cbllm_engine_params p = Params(8, 256, 0, CBLLM_PREEMPT_RECOMPUTE, 0, true,
									   CBLLM_BATCH_CONTINUOUS);
		run_result *full = calloc(1, sizeof(run_result));
		cbllm_engine *e;
		cbllm_stats st32,
					st16;

		/* the same bytes: an f32 pool, then a half one */
		p.num_kv_blocks = 0;
		p.kv_cache_bytes = 1 << 20;
		p.kv_cache_dtype = "f32";
		e = Create(&p);
		if (e == NULL)
			return;
		cbllm_engine_stats(e, &st32);
		cbllm_engine_destroy(e);
		p.kv_cache_dtype = types[t];
		e = Create(&p);
		if (e == NULL)
			return;
		cbllm_engine_stats(e, &st16);
		TAP_OK(st16.kv_blocks_total == 2 * st32.kv_blocks_total,
			   "kv_cache_dtype %s: 1 MiB of pool holds %d blocks, twice f32's %d", types[t],
			   (int) st16.kv_blocks_total, (int) st32.kv_blocks_total);
		RunWorkload(e, &base, full);
		cbllm_engine_destroy(e);
		for (int m = 0; m < 2; m++)
		{
			run_result *res = calloc(1, sizeof(run_result));

			p = Params(8, 256, need / 4, m ? CBLLM_PREEMPT_SWAP : CBLLM_PREEMPT_RECOMPUTE,
					   m ? 256 : 0, true, CBLLM_BATCH_CONTINUOUS);
			p.kv_cache_dtype = types[t];
			e = Create(&p);
			if (e == NULL)
				break;
			RunWorkload(e, &base, res);
			TAP_OK(SameTokens(&base, res, full) && res->st.preemptions > 0 &&
				   (m == 0 || res->st.preemptions_swap > 0) && NoLeaks(&res->st),
				   "kv_cache_dtype %s, %s: with a quarter of the blocks every request completes with"
				   " the unconstrained %s output (%lld preemptions, %lld by swap), nothing leaks",
				   types[t], m ? "swap" : "recompute", types[t], (long long) res->st.preemptions,
				   (long long) res->st.preemptions_swap);
			cbllm_engine_destroy(e);
			free(res);
		}
		free(full);
	}
}

/* Higher priority is admitted first; equal priority is first come, first served. */
static void
TestPriorityAdmission(void)
{
	workload	w = {.n = 4};
	run_result *res = calloc(1, sizeof(run_result));
	cbllm_engine *e = NewEngine(1, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, CBLLM_BATCH_CONTINUOUS);

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
	cbllm_engine *e = NewEngine(8, 256, 30, CBLLM_PREEMPT_RECOMPUTE, 0, true, CBLLM_BATCH_CONTINUOUS);
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
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_RECOMPUTE, 0, true, CBLLM_BATCH_CONTINUOUS);
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
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_AUTO, 64, false, CBLLM_BATCH_CONTINUOUS);
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
	e = NewEngine(8, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, CBLLM_BATCH_CONTINUOUS);
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
	cbllm_engine *e = NewEngine(4, 256, 10, CBLLM_PREEMPT_AUTO, 8, true, CBLLM_BATCH_CONTINUOUS);
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
	cbllm_engine *e = NewEngine(2, 8, 24, CBLLM_PREEMPT_SWAP, 64, true, CBLLM_BATCH_CONTINUOUS);
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
	cbllm_engine *e = NewEngine(4, 16, 0, CBLLM_PREEMPT_AUTO, 64, true, CBLLM_BATCH_CONTINUOUS);
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

/*
 * Static batching holds new requests until the whole batch is done;
 * continuous does not.  Padded static batching also computes each short
 * prompt as long as the batch's longest and each ended sequence until the
 * batch's last ends, which then ends them all; the tokens stay the same.
 */
static void
TestStaticVersusContinuous(void)
{
	workload	w = {.n = 8};
	run_result *st = calloc(1, sizeof(run_result));
	run_result *ct = calloc(1, sizeof(run_result));
	run_result *pd = calloc(1, sizeof(run_result));
	cbllm_engine *e;
	int			last_of_first = 0;
	bool		together = true;

	for (int k = 0; k < 8; k++)
	{
		w.prompt_len[k] = 10 + 2 * (k % 4);	/* each batch pads 6 + 4 + 2 positions */
		w.gen[k] = k == 0 ? 60 : 8;	/* one long request heads the first batch */
	}
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, CBLLM_BATCH_STATIC_ADMISSION);
	RunWorkload(e, &w, st);
	cbllm_engine_destroy(e);
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, CBLLM_BATCH_CONTINUOUS);
	RunWorkload(e, &w, ct);
	cbllm_engine_destroy(e);
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 64, true, CBLLM_BATCH_STATIC_PADDED);
	RunWorkload(e, &w, pd);
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
	TAP_OK(SameTokens(&w, pd, ct), "padded static and continuous batching give the same greedy tokens");
	for (int k = 1; k < 4; k++)
		together = together && pd->done_step[k] == pd->done_step[0];
	for (int k = 5; k < 8; k++)
		together = together && pd->done_step[k] == pd->done_step[4];
	TAP_OK(together && pd->first_step[4] > pd->done_step[0],
		   "padded static: each batch's short requests end with its longest (step %d), and the next "
		   "batch starts after (step %d)", pd->done_step[0], pd->first_step[4]);
	TAP_OK(pd->st.tokens_padding == 24 && st->st.tokens_padding == 0,
		   "padded static: the prompts are computed as long as their batch's longest (24 padding "
		   "positions: %lld); the other modes pad nothing", (long long) pd->st.tokens_padding);
	TAP_OK(pd->st.batch_seqs_sum >= st->st.batch_seqs_sum + 3 * 50 &&
		   pd->st.tokens_generated == st->st.tokens_generated,
		   "padded static: the ended requests are computed on (%lld sequence-steps against %lld) "
		   "without counting as generated (%lld tokens)", (long long) pd->st.batch_seqs_sum,
		   (long long) st->st.batch_seqs_sum, (long long) pd->st.tokens_generated);
	free(st);
	free(ct);
	free(pd);
}

#define PLEN 21					/* prefix-test prompts: 5 full blocks of 4 are looked up */
#define PGEN 12
/*
 * Run one greedy request of PLEN ids in salt to its end on e (nothing else
 * running); its PGEN tokens go to out.  Returns the prefix-cache hits it got.
 */
static int64_t
RunAlone(cbllm_engine *e, const int32_t *ids, uint64_t salt, int32_t *out)
{
	cbllm_request_input in = {.ids = ids, .n_ids = PLEN, .cache_salt = salt};
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_stats before,
				after;
	cbllm_output o;
	int64_t		id = 0;
	int			n = 0,
				active;

	sp.max_tokens = PGEN;
	sp.ignore_eos = true;
	cbllm_engine_stats(e, &before);
	if (cbllm_engine_submit(e, &in, &sp, &id, NULL) != CBLLM_OK)
		return -1;
	for (int s = 0; s < 1000; s++)
	{
		cbllm_engine_step(e, &active, NULL);
		if (cbllm_engine_take(e, id, &o, NULL) != CBLLM_OK)
			break;
		for (int t = 0; t < o.n_tokens && n < PGEN; t++)
			out[n++] = o.tokens[t];
		if (o.finish != CBLLM_FINISH_NONE)
			break;
	}
	cbllm_engine_stats(e, &after);
	return n == PGEN ? after.prefix_hits - before.prefix_hits : -1;
}

/*
 * Prompts that share some blocks, run one after another with every block
 * hash forced equal (and, as a control, with real hashes): each request hits
 * exactly the blocks it truly shares, and generates what it generates alone.
 */
static void
TestPrefixCollisionsNeverShareKV(void)
{
	enum
	{
		NP = 5
	};
	const char *name[NP] = {"A", "B (A's first 2 blocks)", "C (unrelated)",
	"D (C's first block, then A's tokens)", "A again"};
	const int64_t expect_hits[NP] = {0, 2, 0, 1, 5};
	int32_t		ids[NP][PLEN],
				solo[NP][PGEN],
				got[PGEN];
	cbllm_engine *e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, true, CBLLM_BATCH_CONTINUOUS);
	bool		solo_ok = e != NULL;

	for (int i = 0; i < PLEN; i++)
	{
		ids[0][i] = SeedToken(11, i);
		ids[1][i] = i < 8 ? ids[0][i] : SeedToken(12, i);
		ids[2][i] = SeedToken(13, i);
		ids[3][i] = i < 4 ? ids[2][i] : ids[0][i];
		ids[4][i] = ids[0][i];
	}
	for (int k = 0; k < NP && solo_ok; k++)
		solo_ok = RunAlone(e, ids[k], 0, solo[k]) == 0;	/* no prefix caching: each alone */
	cbllm_engine_destroy(e);
	TAP_OK(solo_ok, "each prefix-test prompt generates %d tokens alone", PGEN);
	for (int forced = 0; forced < 2 && solo_ok; forced++)
	{
		const char *mode = forced ? "every block hash forced equal" : "real hashes";
		bool		all = true;

		e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, false, CBLLM_BATCH_CONTINUOUS);
		if (e == NULL)
			return;
		e->bm->test_hash = forced ? 0x5eed : 0;
		for (int k = 0; k < NP; k++)
		{
			int64_t		hits = RunAlone(e, ids[k], 0, got);
			bool		same = memcmp(got, solo[k], sizeof(got)) == 0;

			TAP_OK(hits == expect_hits[k] && same,
				   "%s: %s hits %lld cached blocks (exactly the %lld it shares) and generates its solo tokens (%s)",
				   mode, name[k], (long long) hits, (long long) expect_hits[k], same ? "same" : "differ");
			all = all && hits == expect_hits[k] && same;
		}
		if (forced)
			TAP_OK(all, "with all hashes colliding, no two different prefixes share KV and identical ones still do");
		cbllm_engine_destroy(e);
	}
}

/* The same prompt under two cache salts: no hits across salts, hits within each. */
static void
TestCacheSaltScopes(void)
{
	int32_t		ids[PLEN],
				solo[PGEN],
				got[PGEN];
	cbllm_engine *e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, true, CBLLM_BATCH_CONTINUOUS);
	bool		solo_ok;

	for (int i = 0; i < PLEN; i++)
		ids[i] = SeedToken(21, i);
	solo_ok = e != NULL && RunAlone(e, ids, 0, solo) == 0;
	cbllm_engine_destroy(e);
	for (int forced = 0; forced < 2 && solo_ok; forced++)
	{
		const char *mode = forced ? "forced-equal hashes" : "real hashes";
		const uint64_t salt[4] = {1, 2, 1, 2};
		const int64_t expect[4] = {0, 0, 5, 5};
		int64_t		hits[4];
		bool		same = true;

		e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, false, CBLLM_BATCH_CONTINUOUS);
		if (e == NULL)
			return;
		e->bm->test_hash = forced ? 0x5a17 : 0;
		for (int k = 0; k < 4; k++)
		{
			hits[k] = RunAlone(e, ids, salt[k], got);
			same = same && memcmp(got, solo, sizeof(got)) == 0;
		}
		TAP_OK(hits[0] == expect[0] && hits[1] == expect[1],
			   "%s: the prompt cached under salt 1 gets no hit under salt 2 (%lld, %lld hits)", mode,
			   (long long) hits[0], (long long) hits[1]);
		TAP_OK(hits[2] == expect[2] && hits[3] == expect[3],
			   "%s: run again, it hits all 5 of its blocks within salt 1 and within salt 2 (%lld, %lld)",
			   mode, (long long) hits[2], (long long) hits[3]);
		TAP_OK(same, "%s: every run under either salt generates the solo tokens", mode);
		cbllm_engine_destroy(e);
	}
}

int
main(int argc, char **argv)
{
	if (argc < 2)
	{
		fprintf(stderr, "usage: test_scheduler MODEL_DIR\n");
		return 2;
	}
	if (!LoadVocab(argv[1]))
		return tap_done();
	base.n = 8;
	for (int k = 0; k < 8; k++)
	{
		base.prompt_len[k] = 20 + 5 * k;
		base.gen[k] = 40;
	}
	TestPreemption();
	TestHalfKv();
	TestPriorityAdmission();
	TestPriorityPreemption();
	TestPrefixCache();
	TestOversize();
	TestAborts();
	TestChunkedPrefill();
	TestStaticVersusContinuous();
	TestPrefixCollisionsNeverShareKV();
	TestCacheSaltScopes();
	return tap_done();
}
