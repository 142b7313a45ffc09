/*
 * scheduler.c: which requests run in the next step, and how many tokens each
 * contributes (iteration-level scheduling).
 *
 * Plan, execute, update.  scheduler_plan decides the step and does its
 * bookkeeping at once (queues, blocks, prefix hits, swap blocks), so that
 * later decisions of the same plan see the blocks earlier ones freed; it
 * never copies a block, runs the model or finishes a request: the plan lists
 * the copies, the sequences and the requests that ended, and the engine
 * carries them out.  The copies must run in plan order, before the forward
 * pass: a block a victim gives up may be handed to another request in the
 * same plan, which first writes it in that forward pass, and a swap-in
 * follows the swap-outs planned before it.  scheduler_update then applies
 * the step's results in one place.
 *
 * Order.  Both queues are kept in (effective priority desc, arrival asc)
 * order (see Priority aging below).  Running requests go first: a decoding
 * request contributes its one new token, one still prefilling contributes
 * the next chunk of its prompt that fits the step's token budget (chunked
 * prefill), so decodes keep flowing while a long prompt is processed.  Then
 * waiting requests are admitted from the head of the queue while sequences,
 * tokens and KV blocks last; the head is never skipped for a smaller request
 * behind it.
 *
 * Stall-free prefill.  A long prompt's chunk in the same step as decoding
 * sequences makes each of them wait for the whole chunk: a 2048-token chunk
 * is a two-second gap between two tokens on a CPU.  So when anything decodes
 * and a step-time target is set, the prompt tokens of a step (chunks of
 * running and of newly admitted requests together) are capped at what the
 * engine's measured cost per prompt token fits in the target beyond the
 * measured decode step, never below SCHED_MIN_PREFILL, as Sarathi-Serve's
 * stall-free batching does.  With nothing decoding a step takes the whole
 * token budget: nobody waits, and a burst of prompts starts at full speed.
 *
 * Static baselines.  The benchmarks' static-batching modes are hooks of
 * their own (sched_static.c, scheduler.batch); in continuous batching there
 * are none, and nothing below depends on them.
 *
 * Memory.  Blocks are taken only for the tokens of this step.  When a running
 * request needs a block and none is available, the last running request
 * (lowest effective priority, then latest arrival) is preempted, by
 * recompute (its blocks are freed and its KV rebuilt by prefill later) or by
 * swap (its blocks are copied to host swap space and back when it resumes),
 * or by whichever an estimate says is cheaper.  A preempted request keeps its
 * arrival, so it returns ahead of everything that came after it.  A waiting
 * request of higher effective priority than some running ones preempts them
 * when it cannot otherwise be admitted.
 *
 * Priority aging.  Strict priority lets a steady stream of high-priority
 * requests starve the rest, so a request's effective priority is
 *
 *     priority + priority_aging * (now - t_submit)
 *
 * for its whole life, waiting and running alike.  The rate is common to all
 * requests, so comparing two effective priorities at any moment is the same
 * as comparing their ranks, priority - priority_aging * t_submit, which
 * never change: both lists stay sorted by rank with no re-sorting, and the
 * order of two requests never flips.  Hence:
 *  - every request is eventually served: one submitted at t0 with priority
 *    p outranks every request of priority q submitted after
 *    t0 + (q - p) / rate, so only finitely many can ever be ahead of it;
 *  - a request that aged its way to the front is never preempted by the
 *    flood it overtook, because every later arrival of that flood ranks
 *    below it whether it waits or runs.  Freezing a running request's
 *    effective priority at admission would not give this: the waiting
 *    requests it just overtook keep aging, would soon outrank it and
 *    preempt it, and once waiting again it would age past them in turn: a
 *    cycle of recomputation;
 *  - preemption cannot cycle at all: a victim always ranks below the
 *    request that displaced it (or below the one that needed its blocks).
 * With aging off (CBLLM_PRIORITY_AGING_OFF, a resolved rate of 0) the rank
 * is the priority: strict priority, first come first served within it.  The
 * engine computes the rank at submission from its clock.
 *
 * Fair share.  Requests carry a tenant (the PostgreSQL role), and while
 * more than one tenant has work the engine is shared between them
 * (sched_fair.h): a tenant's fair share is max_num_seqs over the tenants
 * with work.  Before a step is planned, a tenant that waits with fewer
 * running requests than its share gets sequences (and blocks for its head's
 * first chunk) by preempting the latest-ranked requests of whichever tenant
 * runs the most above its share; then the step's candidates are visited in
 * turn across tenants (each tenant's first, then each one's second, ...,
 * within a round the tenants running fewer first), so
 * that its prompt work and admissions do not wait behind another tenant's.
 * A victim for blocks is likewise taken from the tenant running the most,
 * never from a request already in the plan.  Priority orders a tenant's own
 * requests: a waiting head preempts for priority only requests of its own
 * tenant.  Without fairness a flood of one role holds every running
 * sequence until it ends, and another role's four-token question waits
 * behind all of it.  Preemption only ever moves the running shares towards
 * equal, so it cannot cycle; with one tenant, and in the static baselines,
 * none of this applies and the order is the plain one.
 *
 * Prefix caching.  Before a fresh request is admitted, its prompt's full
 * blocks are looked up by chained hash within its cache salt, each hit
 * verified against the block's tokens and parent (block_manager.h); every
 * hit is shared (reference counted) and skips that block's prefill.  At
 * least one prompt token is always computed, for the logits.
 *
 * Static batching (a baseline for comparison): a batch is admitted only when
 * nothing runs, and runs until all of its members finish.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler.h"

/* Allocate the plan's and the update's buffers for at most max_seqs sequences. */
int
scheduler_init(scheduler *s, const sched_params *p, cbllm_err *err)
{
	int			n = p->limits.max_num_seqs > 0 ? p->limits.max_num_seqs : 1;

	memset(s, 0, sizeof(*s));
	s->waiting = p->waiting;
	s->running = p->running;
	s->bm = p->bm;
	s->lim = p->limits;
	s->batch = sched_static_policy(p->limits.batching);
	s->sec_per_prefill_token = 1e-3;	/* replaced by the engine's measurements */
	s->swap_bytes_per_sec = 4e9;
	s->plan.seqs = calloc(n, sizeof(sched_seq));
	s->plan.swaps = calloc(2 * n, sizeof(sched_swap));	/* each request swaps out or in once */
	s->plan.cap_swaps = 2 * n;
	s->plan.preempted = calloc(n, sizeof(sched_preempt));
	s->update.finished = calloc(n, sizeof(sched_finished));
	if (s->plan.seqs == NULL || s->plan.swaps == NULL || s->plan.preempted == NULL ||
		s->update.finished == NULL)
	{
		scheduler_free(s);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	return CBLLM_OK;
}

/* Free the output buffers (the queues and the block manager are the caller's). */
void
scheduler_free(scheduler *s)
{
	sched_fair_free(&s->fair);
	free(s->plan.seqs);
	free(s->plan.swaps);
	free(s->plan.copy_blocks);
	free(s->plan.copy_swap_ids);
	free(s->plan.preempted);
	free(s->plan.finished);
	free(s->update.finished);
	memset(s, 0, sizeof(*s));
}

/* Tokens r still has to compute, capped by budget. */
static int
ChunkFor(const cbllm_request *r, int budget)
{
	int			left = r->n_tokens - r->n_computed;

	return left < budget ? left : budget;
}

/* Whether r's next chunk is prompt work (more than its one next token): what the prefill cap limits. */
static inline bool
Prefilling(const cbllm_request *r)
{
	return r->n_tokens - r->n_computed > 1;
}

/*
 * The prompt tokens this step may take (see Stall-free prefill): budget
 * when nothing decodes or no target applies.
 */
static int
PrefillCap(const scheduler *s, int budget)
{
	double		target = s->lim.max_step_sec,
				cap;
	bool		decoding = false;

	if (target == 0)
		return budget;
	for (const cbllm_request *r = s->running->head; r != NULL && !decoding; r = r->next)
		decoding = !Prefilling(r);
	if (!decoding)
		return budget;
	if (target < 0)
	{
		if (s->sec_decode_step <= 0)
			return budget;		/* nothing measured yet */
		target = 2 * s->sec_decode_step;
	}
	cap = (target - s->sec_decode_step) / s->sec_per_prefill_token;
	if (cap < SCHED_MIN_PREFILL)
		return SCHED_MIN_PREFILL < budget ? SCHED_MIN_PREFILL : budget;
	return cap < budget ? (int) cap : budget;
}

/* The tokens r may take of the step's budget: its prompt work also within prefill. */
static inline int
Room(const cbllm_request *r, int budget, int prefill)
{
	return Prefilling(r) && prefill < budget ? prefill : budget;
}

/* Add r to the step with n tokens. */
static void
Schedule(scheduler *s, cbllm_request *r, int n)
{
	sched_plan *plan = &s->plan;
	sched_seq  *q = &plan->seqs[plan->n_seqs++];

	r->plan_mark = s->plan_no;

	q->req = r;
	q->start = r->n_computed;
	q->n_tokens = n;
	q->sample = r->n_computed + n == r->n_tokens;
	q->pad = false;
	plan->n_tokens += n;
}

/* Keep the fair counts current as r moves by d_running and d_waiting (fair plans only). */
static void
FairMove(scheduler *s, const cbllm_request *r, int d_running, int d_waiting)
{
	sched_tenant *t;

	if (s->fair_on && (t = sched_fair_tenant(&s->fair, r->tenant)) != NULL)
	{
		t->running += d_running;
		t->waiting += d_waiting;
	}
}

/* Move r to state to (request_enter), counting a move the table refuses. */
static void
Enter(scheduler *s, cbllm_request *r, req_state to)
{
	if (!request_enter(r, to))
		s->bad_transitions++;
}

/* Take r out of its queue and give back all it holds; the engine finishes it. */
static void
Retire(scheduler *s, cbllm_request *r, sched_finished *slot, cbllm_finish why, const char *error)
{
	if (request_running(r))
	{
		req_list_remove(s->running, r);
		FairMove(s, r, -1, 0);
	}
	else if (request_waiting(r))
	{
		req_list_remove(s->waiting, r);
		FairMove(s, r, 0, r->leader == NULL ? -1 : 0);
	}
	request_release_blocks(s->bm, r);
	request_release_swap(s->bm, r);
	Enter(s, r, REQ_FINISHED);
	slot->req = r;
	slot->why = why;
	slot->error = error;
}

/* Retire r into the plan's finished list; false (nothing changed) when the list cannot grow. */
static bool
RetireInPlan(scheduler *s, cbllm_request *r, cbllm_finish why)
{
	sched_plan *plan = &s->plan;

	if (plan->n_finished == plan->cap_finished)
	{
		int			cap = plan->cap_finished > 0 ? 2 * plan->cap_finished : 8;
		sched_finished *f = realloc(plan->finished, sizeof(sched_finished) * cap);

		if (f == NULL)
			return false;
		plan->finished = f;
		plan->cap_finished = cap;
	}
	Retire(s, r, &plan->finished[plan->n_finished++], why, NULL);
	return true;
}

/* Room for n more copies in the plan; false when it cannot grow. */
static bool
ReserveCopies(sched_plan *plan, int n)
{
	int			cap = plan->cap_copies > 0 ? plan->cap_copies : 64;
	int32_t    *b,
			   *w;

	if (plan->n_copies + n <= plan->cap_copies)
		return true;
	while (cap < plan->n_copies + n)
		cap *= 2;
	if ((b = realloc(plan->copy_blocks, sizeof(int32_t) * cap)) != NULL)
		plan->copy_blocks = b;
	if ((w = realloc(plan->copy_swap_ids, sizeof(int32_t) * cap)) != NULL)
		plan->copy_swap_ids = w;
	if (b == NULL || w == NULL)
		return false;
	plan->cap_copies = cap;
	return true;
}

/* Record the n copies just written at the end of the copy arrays as r's swap. */
static int
AddSwap(sched_plan *plan, cbllm_request *r, bool out, int n)
{
	sched_swap *w = &plan->swaps[plan->n_swaps];

	w->req = r;
	w->out = out;
	w->first = plan->n_copies;
	w->n = n;
	plan->n_copies += n;
	return plan->n_swaps++;
}

/* Should this victim be swapped rather than recomputed? */
static bool
ChooseSwap(const scheduler *s, const cbllm_request *v)
{
	double		bytes,
				t_swap,
				t_recompute;

	if (s->bm->n_swap_blocks == 0 || v->table.n == 0 || v->table.n_dropped > 0 ||
		s->lim.preempt_mode == CBLLM_PREEMPT_RECOMPUTE)
		return false;			/* a table with dropped blocks is rebuilt by recompute */
	if (s->lim.preempt_mode == CBLLM_PREEMPT_SWAP)
		return true;
	/* auto: copy out and back in, against prefilling its computed tokens again */
	bytes = 2.0 * v->table.n * (double) s->lim.block_bytes;
	t_swap = bytes / s->swap_bytes_per_sec;
	t_recompute = v->n_computed * s->sec_per_prefill_token;
	return t_swap < t_recompute;
}

/* Swap v's blocks out in the bookkeeping; the index of its swap in the plan, -1 when it does not fit. */
static int
SwapOut(scheduler *s, cbllm_request *v)
{
	sched_plan *plan = &s->plan;
	int			n = v->table.n;

	if (plan->n_swaps == plan->cap_swaps || !ReserveCopies(plan, n) ||
		bm_swap_out(s->bm, &v->table, plan->copy_blocks + plan->n_copies,
					plan->copy_swap_ids + plan->n_copies) != CBLLM_OK)
		return -1;
	return AddSwap(plan, v, true, n);
}

/* Preempt a running request: swap or recompute, then back to the waiting queue. */
static void
Preempt(scheduler *s, cbllm_request *victim)
{
	sched_plan *plan = &s->plan;
	int			swap = -1;

	req_list_remove(s->running, victim);
	FairMove(s, victim, -1, 1);
	if (ChooseSwap(s, victim))
		swap = SwapOut(s, victim);
	request_release_blocks(s->bm, victim);	/* keeps n_computed when swapped */
	Enter(s, victim, swap >= 0 ? REQ_SWAPPED : REQ_PREEMPTED);
	req_list_insert(s->waiting, victim);
	victim->n_preemptions++;
	if (plan->n_preempted < s->lim.max_num_seqs)	/* victims are running requests: always */
	{
		plan->preempted[plan->n_preempted].req = victim;
		plan->preempted[plan->n_preempted++].swap = swap;
	}
}

/*
 * Bring a swapped request's blocks back, with room for n_positions; false
 * (still swapped, nothing taken) when they do not fit now.
 */
static bool
SwapIn(scheduler *s, cbllm_request *r, int n_positions)
{
	sched_plan *plan = &s->plan;
	int			n;

	if (plan->n_swaps == plan->cap_swaps || !ReserveCopies(plan, r->table.n_swap))
		return false;
	n = bm_swap_in(s->bm, &r->table, n_positions, plan->copy_blocks + plan->n_copies,
				   plan->copy_swap_ids + plan->n_copies);
	if (n < 0)
		return false;
	AddSwap(plan, r, false, n);
	return true;
}

/* The prefix-cache scope of r's KV: its salt and its RoPE factor set. */
static inline bm_scope
Scope(const cbllm_request *r)
{
	return (bm_scope) {r->cache_salt, r->rope_set};
}

/* Whether r, at its length now, computes with the long RoPE factor set (see scheduler.h). */
static inline bool
LongRope(const scheduler *s, const cbllm_request *r)
{
	return s->lim.long_rope_from > 0 && r->n_tokens > s->lim.long_rope_from;
}

/*
 * Share the cached full blocks of the prefix of a request that holds no KV
 * (fresh, recomputing, or past the RoPE switch), after choosing its factor
 * set by its whole length; leaves one token to compute.
 */
static void
ReusePrefix(scheduler *s, cbllm_request *r)
{
	if (r->n_computed != 0 || r->table.n != 0)
		return;
	r->rope_set = LongRope(s, r);
	r->n_computed = bm_match_prefix(s->bm, &r->table, r->tokens, r->n_tokens, Scope(r));
}

/* A request that needs more blocks than the whole pool can only end. */
static bool
CanNeverFit(const scheduler *s, const cbllm_request *r)
{
	return bm_blocks_for(s->bm, r->n_tokens + 1) > s->bm->n_blocks;
}

/* The latest-ranked running request of tenant that is not in this plan and ranks below rank; NULL: none. */
static cbllm_request *
LastRunningOf(const scheduler *s, uint64_t tenant, double rank)
{
	for (cbllm_request *r = s->running->tail; r != NULL; r = r->prev)
		if (r->tenant == tenant && r->plan_mark != s->plan_no && r->rank < rank)
			return r;
	return NULL;
}

/*
 * Preempt running requests that rank below the waiting head while it cannot
 * be admitted: from the back of the running list, or in a fair plan from the
 * back of the head's own tenant's requests.
 */
static void
PreemptForPriority(scheduler *s)
{
	cbllm_request *head = s->waiting->head;
	int			budget = s->lim.max_num_batched_tokens;
	int			need;

	if (head == NULL || s->running->tail == NULL)
		return;
	need = bm_blocks_for(s->bm, head->table.swapped ? head->table.n_swap * s->bm->block_size :
						 (head->n_tokens < budget ? head->n_tokens : budget));
	while (bm_available(s->bm) < need)
	{
		cbllm_request *victim = s->fair_on ? LastRunningOf(s, head->tenant, head->rank) :
			s->running->tail;

		if (victim == NULL || victim->rank >= head->rank)
			break;
		Preempt(s, victim);
	}
}

/*
 * The victim when r needs blocks: the back of the running list, or in a fair
 * plan the latest-ranked request, not yet in the plan, of the tenant running
 * the most (r itself when there is none).
 */
static cbllm_request *
Victim(scheduler *s, cbllm_request *r)
{
	sched_tenant *most = NULL;
	cbllm_request *v;

	if (!s->fair_on)
		return s->running->tail;
	for (int i = 0; i < s->fair.n_tenants; i++)
	{
		sched_tenant *t = &s->fair.tenants[i];

		if (t->running > 0 && (most == NULL || t->running > most->running) &&
			LastRunningOf(s, t->id, INFINITY) != NULL)
			most = t;
	}
	v = most != NULL ? LastRunningOf(s, most->id, INFINITY) : NULL;
	return v != NULL ? v : r;
}

/*
 * Give tenants that wait below their fair share their sequences, and
 * blocks for the first chunk of their best-ranked waiting request, by
 * preempting the tenants that run the most above theirs (see Fair share).
 */
static void
PreemptForFairness(scheduler *s)
{
	int			share = sched_fair_share(&s->fair, s->lim.max_num_seqs),
				free_seqs = s->lim.max_num_seqs - s->running->n,
				budget = s->lim.max_num_batched_tokens;

	for (int i = 0; i < s->fair.n_tenants; i++)
		s->fair.tenants[i].visits = 0;	/* here: 1 once the tenant has had its turn */
	for (cbllm_request *r = s->waiting->head; r != NULL; r = r->next)
	{
		sched_tenant *t = sched_fair_tenant(&s->fair, r->tenant);
		int			want,
					need;

		if (r->leader != NULL || t == NULL || t->visits > 0)
			continue;
		t->visits = 1;
		want = t->waiting < share - t->running ? t->waiting : share - t->running;
		if (want <= 0)
			continue;
		need = bm_blocks_for(s->bm, r->table.swapped ? r->table.n_swap * s->bm->block_size :
							 (r->n_tokens < budget ? r->n_tokens : budget));
		while (free_seqs < want || bm_available(s->bm) < need)
		{
			sched_tenant *over = sched_fair_most_over(&s->fair, share, t);
			cbllm_request *victim = over != NULL ? LastRunningOf(s, over->id, INFINITY) : NULL;

			if (victim == NULL)
				break;
			Preempt(s, victim);
			free_seqs++;
		}
		free_seqs -= want < free_seqs ? want : free_seqs;
	}
}

/* What planning one request came to. */
typedef enum PlanOutcome
{
	PLAN_DONE,					/* it is in the plan, or has nothing to do in it */
	PLAN_LOST_SELF,				/* a running request gave itself up for blocks */
	PLAN_STOP					/* a waiting request cannot be admitted now: admit no more */
} PlanOutcome;

/*
 * Schedule running request r, preempting when blocks run out; its prompt
 * chunk takes from *prefill too, and one that finds it spent waits for a
 * later step.
 */
static PlanOutcome
PlanOneRunning(scheduler *s, cbllm_request *r, int *budget, int *prefill)
{
	bool		pre = Prefilling(r);
	int			n = ChunkFor(r, Room(r, *budget, *prefill));

	if (s->batch != NULL && s->batch->pad_pass(s, r, budget, prefill))
		return PLAN_DONE;
	if (n == 0)
		return PLAN_DONE;
	if (r->n_computed == 0)
	{
		ReusePrefix(s, r);		/* its KV was given back at the RoPE switch */
		n = ChunkFor(r, Room(r, *budget, *prefill));
	}

	while (bm_allocate(s->bm, &r->table, r->n_computed + n) != CBLLM_OK)
	{
		cbllm_request *victim = Victim(s, r);

		if (victim == r && s->running->n == 1 && CanNeverFit(s, r) &&
			RetireInPlan(s, r, CBLLM_FINISH_LENGTH))
			return PLAN_LOST_SELF;
		Preempt(s, victim);
		if (victim == r)
			return PLAN_LOST_SELF;
	}
	Schedule(s, r, n);
	*budget -= n;
	*prefill -= pre ? n : 0;
	return PLAN_DONE;
}

/* Schedule the running requests in rank order while the step has room. */
static void
PlanRunning(scheduler *s, int *budget, int *prefill)
{
	cbllm_request *r = s->running->head;

	while (r != NULL && s->plan.n_seqs < s->lim.max_num_seqs && *budget > 0)
	{
		if (PlanOneRunning(s, r, budget, prefill) == PLAN_LOST_SELF)
			break;				/* it was the back of the list: nothing follows it */
		r = r->next;			/* read after preemption, which may have cut the tail */
	}
}

/*
 * Admit waiting request r with its first chunk, if the step's tokens,
 * prompt budget and the KV blocks allow.
 */
static PlanOutcome
AdmitOne(scheduler *s, cbllm_request *r, double now, int *budget, int *prefill)
{
	bool		first_time = !r->admitted;
	int			n;

	if (s->batch != NULL && s->batch->admission_closed(s, r))
		return PLAN_STOP;
	if (r->leader != NULL)
		return PLAN_STOP;		/* its prompt's KV comes from the leader's, once computed */
	if (CanNeverFit(s, r))
		return RetireInPlan(s, r, CBLLM_FINISH_LENGTH) ? PLAN_DONE : PLAN_STOP;
	if (r->table.swapped)
	{
		n = ChunkFor(r, Room(r, *budget, *prefill));
		if (n == 0 || !SwapIn(s, r, r->n_computed + n))
			return PLAN_STOP;
	}
	else
	{
		ReusePrefix(s, r);
		n = ChunkFor(r, Room(r, *budget, *prefill));
		if (n == 0 || bm_allocate(s->bm, &r->table, r->n_computed + n) != CBLLM_OK)
		{
			request_release_blocks(s->bm, r);	/* shared blocks go back to the cache */
			return PLAN_STOP;
		}
	}
	req_list_remove(s->waiting, r);
	Enter(s, r, request_running_state(r));
	FairMove(s, r, 1, -1);
	if (first_time)
	{
		r->t_admitted = now;
		r->admitted = true;
	}
	req_list_insert(s->running, r);
	if (s->batch != NULL)
		s->batch->admitted(s, r, first_time);
	*prefill -= Prefilling(r) ? n : 0;
	Schedule(s, r, n);
	*budget -= n;
	return PLAN_DONE;
}

/* Admit waiting requests from the head of the queue while *budget and *prefill last. */
static void
PlanWaiting(scheduler *s, double now, int *budget, int *prefill)
{
	sched_plan *plan = &s->plan;
	int			first = plan->n_seqs;

	if (s->batch != NULL)
		s->batch->begin_admissions(s);
	while (s->waiting->head != NULL && plan->n_seqs < s->lim.max_num_seqs && *budget > 0 &&
		   s->running->n < s->lim.max_num_seqs &&
		   AdmitOne(s, s->waiting->head, now, budget, prefill) == PLAN_DONE)
		;
	if (s->batch != NULL)
		s->batch->end_admissions(s, first);
}

/*
 * Plan the step's candidates in fair order (see Fair share): running ones
 * take their chunks, waiting ones are admitted until one cannot be (or a
 * tenant's requests wait for a shared prompt, which only skips them).
 */
static void
PlanFair(scheduler *s, double now, int *budget, int *prefill)
{
	bool		admitting = true;

	for (int i = 0; i < s->fair.n_order; i++)
	{
		sched_candidate *c = &s->fair.order[i];
		cbllm_request *r = c->req;

		if (s->plan.n_seqs >= s->lim.max_num_seqs || *budget <= 0)
			break;
		if (c->running)
		{
			if (request_running(r) && r->plan_mark != s->plan_no)
				(void) PlanOneRunning(s, r, budget, prefill);
		}
		else if (admitting && request_waiting(r) && r->leader == NULL)
		{
			if (s->running->n >= s->lim.max_num_seqs ||
				AdmitOne(s, r, now, budget, prefill) == PLAN_STOP)
				admitting = false;
		}
	}
}

/* Plan the next step: preemptions, the running requests' chunks, then admissions. */
const sched_plan *
scheduler_plan(scheduler *s, double now)
{
	sched_plan *plan = &s->plan;
	int			budget = s->lim.max_num_batched_tokens,
				prefill;

	plan->n_seqs = plan->n_tokens = 0;
	plan->n_swaps = plan->n_copies = 0;
	plan->n_preempted = plan->n_finished = 0;
	s->plan_no++;
	s->fair_on = s->lim.batching == CBLLM_BATCH_CONTINUOUS &&
		sched_fair_count(&s->fair, s->running, s->waiting) > 1;
	PreemptForPriority(s);
	if (s->fair_on)
		PreemptForFairness(s);
	prefill = PrefillCap(s, budget);
	if (s->fair_on && sched_fair_order(&s->fair, s->running, s->waiting))
		PlanFair(s, now, &budget, &prefill);
	else
	{
		PlanRunning(s, &budget, &prefill);
		PlanWaiting(s, now, &budget, &prefill);
	}
	return plan;
}

/* Retire r into the update's list, ending with why (the batching hooks' end of a batch). */
bool
scheduler_retire_in_update(scheduler *s, cbllm_request *r, sched_update *u, cbllm_finish why)
{
	if (u->n_finished >= s->lim.max_num_seqs)
		return false;
	Retire(s, r, &u->finished[u->n_finished++], why, NULL);
	return true;
}

/*
 * A sequence that has just grown past long_rope_from holds KV computed with
 * the short RoPE factors: it gives it back (its full blocks stay cached in
 * their scope) and takes the long set, and its next steps compute all its
 * positions again (see scheduler.h).
 */
static void
SwitchToLongRope(scheduler *s, cbllm_request *r)
{
	if (r->rope_set != 0 || !LongRope(s, r) || !request_running(r))
		return;
	request_release_blocks(s->bm, r);
	r->rope_set = 1;
}

/*
 * Apply the step's results sequence by sequence, in plan order: positions
 * computed, full blocks offered to the prefix cache, blocks behind the
 * window dropped, and a request whose result ends it taken out.
 */
const sched_update *
scheduler_update(scheduler *s, const sched_plan *plan, const sched_result *results)
{
	sched_update *u = &s->update;

	u->n_finished = u->n_tokens = u->n_prompt_tokens = u->n_pad_tokens = 0;
	for (int i = 0; i < plan->n_seqs; i++)
	{
		const sched_seq *q = &plan->seqs[i];
		cbllm_request *r = q->req;
		cbllm_finish why;

		u->n_tokens += q->n_tokens;
		if (q->pad)
		{
			s->batch->padded(r, q->n_tokens);	/* only a static mode plans padding passes */
			u->n_pad_tokens += q->n_tokens;
			continue;
		}
		if (r->n_computed < r->n_prompt)
			u->n_prompt_tokens += q->n_tokens;
		r->n_computed += q->n_tokens;
		if (r->n_followers > 0 && r->n_computed >= r->n_prompt)
			request_release_followers(r);	/* admitted from the next plan on, once
											 * bm_cache_blocks below has registered its blocks */
		bm_cache_blocks(s->bm, &r->table, r->tokens, Scope(r), r->n_computed);
		bm_drop_window(s->bm, &r->table, r->n_computed);
		why = results[i].finish;
		if (why == CBLLM_FINISH_NONE || (s->batch != NULL && s->batch->ending(s, r, &why)))
		{
			if (why == CBLLM_FINISH_NONE)
				SwitchToLongRope(s, r);
			if (request_running(r))
				Enter(s, r, request_running_state(r));	/* its prompt done, or dropped */
			continue;
		}
		Retire(s, r, &u->finished[u->n_finished++], why, results[i].error);
	}
	if (s->batch != NULL)
		s->batch->end_update(s, u);
	return u;
}
