/*
 * sched_harness.h: a test harness for the scheduler alone (no model, no
 * backend, no engine): a real block manager, requests made here, and a fake
 * device whose "KV" is a tag per position (a hash of the sequence's tokens
 * up to it).  Step executes each plan as the engine does (swap copies in
 * plan order, then the step's writes), and before a sequence computes it
 * checks that every position it would attend to holds its own tag: a block
 * handed out twice, a swap copied from the wrong place or a prefix shared
 * wrongly shows up as a wrong tag (memory_ok false).  Included by one test
 * program each (its functions are static).
 */
#ifndef CBLLM_TEST_SCHED_HARNESS_H
#define CBLLM_TEST_SCHED_HARNESS_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler.h"
#include "tap.h"

#define BS 4					/* positions per block in every test */
#define MAXR 64
#define MAX_BLOCKS 128

typedef struct harness
{
	req_list	waiting;
	req_list	running;
	block_manager *bm;
	scheduler	s;
	cbllm_request *req[MAXR];
	int			gen[MAXR];		/* tokens it generates before it ends */
	int			first_step[MAXR];	/* first step it computed in; -1 */
	int			done_step[MAXR];	/* step it ended in; -1 */
	cbllm_finish why[MAXR];		/* how it ended, as reported to the "engine" */
	int			n;
	int			step;
	double		now;
	uint64_t	dev[MAX_BLOCKS][BS];	/* the fake device pool: a tag per slot */
	uint64_t	swp[MAX_BLOCKS][BS];	/* the fake swap area */
	bool		memory_ok;		/* every position attended to held its own tag */
	int			n_swap_out;		/* preemptions by swap, by recompute */
	int			n_recompute;
	int			n_never_fit;	/* requests the plan reported as ending */
	sched_result res[MAXR];
} harness;

/* Limits for the tests: the budgets given, recompute, no static batching, no long RoPE set. */
static sched_limits
Limits(int max_seqs, int budget)
{
	return (sched_limits) {max_seqs, budget, CBLLM_PREEMPT_RECOMPUTE, false, 1024, 0, 0};
}

/* The preemption modes every workload test runs in: recompute and swap, with and without prefix caching. */
typedef struct preempt_case
{
	const char *name;
	cbllm_preempt mode;
	int			n_swap;			/* swap blocks */
	bool		prefix;			/* prefix caching on */
} preempt_case;

static const preempt_case PREEMPT_CASES[] = {
	{"recompute", CBLLM_PREEMPT_RECOMPUTE, 0, false},
	{"swap", CBLLM_PREEMPT_SWAP, 64, false},
	{"swap with a 3-block swap area", CBLLM_PREEMPT_SWAP, 3, false},
	{"recompute with prefix caching", CBLLM_PREEMPT_RECOMPUTE, 0, true},
	{"swap with prefix caching", CBLLM_PREEMPT_SWAP, 64, true},
};
#define N_PREEMPT_CASES ((int) (sizeof(PREEMPT_CASES) / sizeof(PREEMPT_CASES[0])))

static harness the_harness;	/* one test at a time: Init, then Done */

/*
 * The harness, set up over a pool of n_blocks blocks of BS, n_swap swap
 * blocks and a window; NULL (with a failed check) when that fails.
 */
static harness *
Init(sched_limits lim, int n_blocks, int n_swap, int window, bool prefix)
{
	harness    *h = &the_harness;
	bm_params	bp = {n_blocks, BS, n_swap, window, !prefix};
	sched_params sp = {&h->waiting, &h->running, NULL, lim};
	cbllm_err	err = {{0}};

	memset(h, 0, sizeof(*h));
	h->memory_ok = true;
	h->now = 100.0;
	if (bm_create(&bp, &h->bm, &err) == CBLLM_OK)
	{
		sp.bm = h->bm;
		if (scheduler_init(&h->s, &sp, &err) == CBLLM_OK)
			return h;
	}
	TAP_OK(false, "harness set-up: %s", err.msg);
	return NULL;
}

/* Free every request and the harness's parts; the harness is empty again. */
static void
Done(void)
{
	harness    *h = &the_harness;

	if (h->s.bad_transitions != 0)
		TAP_OK(false, "the scheduler made %lld state moves that request_enter refuses",
			   (long long) h->s.bad_transitions);
	for (int k = 0; k < h->n; k++)
		request_free(h->req[k]);
	scheduler_free(&h->s);
	bm_free(h->bm);
	memset(h, 0, sizeof(*h));
}

/* Whether every KV and swap block is free (cached blocks count as free). */
static bool
AllFree(const harness *h)
{
	return bm_available(h->bm) == h->bm->n_blocks && h->bm->n_swap_free == h->bm->n_swap_blocks;
}

/*
 * Queue a request with an n_prompt-token prompt (prompts of equal seed share
 * their tokens), at rank, that generates gen tokens; its index.
 */
static int
Submit(harness *h, int n_prompt, double rank, int gen, int seed)
{
	cbllm_request *r = calloc(1, sizeof(*r));
	int			k = h->n++;

	r->id = r->arrival = k + 1;
	r->rank = rank;
	r->cap_tokens = n_prompt + gen + 1;
	r->tokens = malloc(sizeof(int32_t) * r->cap_tokens);
	for (int i = 0; i < n_prompt; i++)
		r->tokens[i] = seed * 1000 + i + 1;
	r->n_tokens = r->n_prompt = n_prompt;
	r->state = REQ_QUEUED;
	h->req[k] = r;
	h->gen[k] = gen;
	h->first_step[k] = h->done_step[k] = -1;
	req_list_insert(&h->waiting, r);
	return k;
}

/* The index of request r in the harness. */
static int
IndexOf(const harness *h, const cbllm_request *r)
{
	return (int) r->id - 1;
}

/* The tag of position p of r: its salt, its RoPE factor set and tokens [0, p]. */
static uint64_t
Tag(const cbllm_request *r, int p)
{
	uint64_t	t = 0x9e3779b97f4a7c15ULL ^ r->cache_salt ^ ((uint64_t) r->rope_set << 62);

	for (int i = 0; i <= p; i++)
		t = (t ^ (uint64_t) (uint32_t) r->tokens[i]) * 0x100000001b3ULL;
	return t;
}

/* Copy the blocks of one planned swap between the fake pool and the fake swap area. */
static void
CopySwap(harness *h, const sched_plan *p, const sched_swap *w)
{
	for (int j = 0; j < w->n; j++)
	{
		int32_t		b = p->copy_blocks[w->first + j],
					s = p->copy_swap_ids[w->first + j];

		if (w->out)
			memcpy(h->swp[s], h->dev[b], sizeof(h->dev[b]));
		else
			memcpy(h->dev[b], h->swp[s], sizeof(h->dev[b]));
	}
}

/*
 * The forward pass of one sequence on the fake device: check what it
 * attends to (positions before its chunk that no window has dropped), then
 * write the tags of its chunk.
 */
static void
FakeForward(harness *h, const sched_seq *q)
{
	const cbllm_request *r = q->req;
	const block_table *t = &r->table;
	int			window = h->bm->sliding_window;

	for (int p = 0; p < r->n_computed + q->n_tokens; p++)
	{
		int32_t		b = p / BS < t->n ? t->ids[p / BS] : -2;

		if (b == -1)
		{
			/* dropped: no token of this chunk may still see it */
			if (window <= 0 || p >= r->n_computed - window + 1)
				h->memory_ok = false;
			continue;
		}
		if (b < 0)
			h->memory_ok = false;
		else if (p >= r->n_computed)
			h->dev[b][p % BS] = Tag(r, p);
		else if (h->dev[b][p % BS] != Tag(r, p))
			h->memory_ok = false;
	}
}

/* Sample for r: a deterministic token; whether it has generated all it should. */
static cbllm_finish
FakeSample(harness *h, cbllm_request *r)
{
	int			k = IndexOf(h, r);

	r->tokens[r->n_tokens] = 3 + (int32_t) ((r->id * 31 + r->n_tokens * 7) % 97);
	r->n_tokens++;
	return r->n_tokens - r->n_prompt >= h->gen[k] ? CBLLM_FINISH_LENGTH : CBLLM_FINISH_NONE;
}

/* Note that r ended at this step with why. */
static void
Ended(harness *h, const sched_finished *f)
{
	int			k = IndexOf(h, f->req);

	h->done_step[k] = h->step;
	h->why[k] = f->why;
}

/* One step as the engine runs it: plan, copies in order, forward, sample, update. */
static const sched_plan *
Step(harness *h)
{
	const sched_plan *p = scheduler_plan(&h->s, h->now);
	const sched_update *u;

	for (int i = 0; i < p->n_finished; i++)
	{
		Ended(h, &p->finished[i]);
		h->n_never_fit++;
	}
	for (int i = 0; i < p->n_swaps; i++)
		CopySwap(h, p, &p->swaps[i]);
	for (int i = 0; i < p->n_preempted; i++)
	{
		if (p->preempted[i].swap >= 0)
			h->n_swap_out++;
		else
			h->n_recompute++;
	}
	for (int i = 0; i < p->n_seqs; i++)
	{
		int			k = IndexOf(h, p->seqs[i].req);

		FakeForward(h, &p->seqs[i]);
		if (h->first_step[k] < 0)
			h->first_step[k] = h->step;
	}
	for (int i = 0; i < p->n_seqs; i++)
	{
		h->res[i].finish = p->seqs[i].sample ? FakeSample(h, p->seqs[i].req) : CBLLM_FINISH_NONE;
		h->res[i].error = NULL;
	}
	u = scheduler_update(&h->s, p, h->res);
	for (int i = 0; i < u->n_finished; i++)
		Ended(h, &u->finished[i]);
	h->step++;
	return p;
}

/* Step until every request ended (at most max_steps); whether they all did. */
static bool
RunAll(harness *h, int max_steps)
{
	for (int s = 0; s < max_steps; s++)
	{
		if (h->waiting.n == 0 && h->running.n == 0)
			return true;
		Step(h);
	}
	return h->waiting.n == 0 && h->running.n == 0;
}

#endif
