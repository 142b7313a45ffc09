/*
 * scheduler.c: which requests run in the next step, and how many tokens each
 * contributes (iteration-level scheduling).
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
 * clock is the engine's (engine_now): CLOCK_MONOTONIC, or one a test injects.
 *
 * Prefix caching.  Before a fresh request is admitted, its prompt's full
 * blocks are looked up by chained hash within its cache salt, each hit
 * verified against the block's tokens and parent (kv_cache.h); every hit is
 * shared (reference counted) and skips that block's prefill.  At least one
 * prompt token is always computed, for the logits.
 *
 * Static batching (a baseline for comparison): a batch is admitted only when
 * nothing runs, and runs until all of its members finish.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine_internal.h"

/* Tokens r still has to compute, capped by budget. */
static int
ChunkFor(const cbllm_request *r, int budget)
{
	int			left = r->n_tokens - r->n_computed;

	return left < budget ? left : budget;
}

/* Blocks needed to hold n positions. */
static inline int
BlocksFor(const cbllm_engine *e, int n)
{
	return (n + e->kv->block_size - 1) / e->kv->block_size;
}

/* Add r to the step with n tokens. */
static void
Schedule(cbllm_engine *e, int *n_seqs, cbllm_request *r, int n)
{
	fwd_seq    *s = &e->step_seqs[*n_seqs];

	r->step_tokens = n;
	s->tokens = r->tokens + r->n_computed;
	s->n_tokens = n;
	s->pos0 = r->n_computed;
	s->block_table = r->blocks;
	s->logits = r->n_computed + n == r->n_tokens ? FWD_LOGITS_LAST : FWD_LOGITS_NONE;
	e->step_reqs[(*n_seqs)++] = r;
}

/* Should this victim be swapped rather than recomputed? */
static bool
ChooseSwap(cbllm_engine *e, const cbllm_request *v)
{
	double		bytes,
				t_swap,
				t_recompute;

	if (e->swap->n_blocks == 0 || v->n_blocks == 0 || v->n_dropped > 0 ||
		e->params.preempt_mode == CBLLM_PREEMPT_RECOMPUTE)
		return false;			/* a table with dropped blocks is rebuilt by recompute */
	if (e->params.preempt_mode == CBLLM_PREEMPT_SWAP)
		return true;
	/* auto: copy out and back in, against prefilling its computed tokens again */
	bytes = 2.0 * v->n_blocks * (double) engine_kv_bytes(e, e->kv->block_size);
	t_swap = bytes / e->swap_bytes_per_sec;
	t_recompute = v->n_computed * e->sec_per_prefill_token;
	return t_swap < t_recompute;
}

/* Copy v's blocks to swap space; false (nothing changed) when it does not fit. */
static bool
SwapOut(cbllm_engine *e, cbllm_request *v)
{
	int32_t    *ids = realloc(v->swap_ids, sizeof(int32_t) * (v->n_blocks > 0 ? v->n_blocks : 1));
	cbllm_err	err;
	double		t0 = cbllm_now();

	if (ids == NULL)
		return false;
	v->swap_ids = ids;
	if (swap_space_alloc(e->swap, v->n_blocks, ids) != CBLLM_OK)
		return false;
	if (e->be->swap_out(e->be, e->kv, e->swap, v->blocks, ids, v->n_blocks, &err) != CBLLM_OK)
	{
		swap_space_release(e->swap, v->n_blocks, ids);
		return false;
	}
	if (e->be->swap_bytes_per_sec > 0)
		e->swap_bytes_per_sec = e->be->swap_bytes_per_sec;	/* the copies run asynchronously */
	else
		e->swap_bytes_per_sec = 0.8 * e->swap_bytes_per_sec + 0.2 *
			(v->n_blocks * (double) engine_kv_bytes(e, e->kv->block_size) /
			 (cbllm_now() - t0 + 1e-9));
	v->n_swap = v->n_blocks;
	v->swapped = true;
	return true;
}

/* Preempt a running request: swap or recompute, then back to the waiting queue. */
static void
Preempt(cbllm_engine *e, cbllm_request *victim)
{
	req_list_remove(&e->running, victim);
	if (ChooseSwap(e, victim) && SwapOut(e, victim))
		e->stats.preemptions_swap++;
	else
		e->stats.preemptions_recompute++;
	request_release_blocks(e, victim);	/* keeps n_computed when swapped */
	victim->state = REQ_WAITING;
	req_list_insert(&e->waiting, victim);
	victim->n_preemptions++;
	e->stats.preemptions++;
}

/*
 * Bring a swapped request's blocks back, with room for n_positions; false
 * (still swapped, nothing taken) when they do not fit now.
 */
static bool
SwapIn(cbllm_engine *e, cbllm_request *r, int n_positions)
{
	cbllm_err	err;
	int			n = r->n_swap;

	if (n_positions < n * e->kv->block_size)
		n_positions = n * e->kv->block_size;
	if (request_ensure_blocks(e, r, n_positions) != CBLLM_OK)
	{
		request_release_blocks(e, r);
		return false;
	}
	if (e->be->swap_in(e->be, e->kv, e->swap, r->blocks, r->swap_ids, n, &err) != CBLLM_OK)
	{
		request_release_blocks(e, r);
		return false;
	}
	swap_space_release(e->swap, n, r->swap_ids);
	r->n_swap = 0;
	r->swapped = false;
	return true;
}

/* Share the cached full blocks of r's prompt prefix; leaves one token to compute. */
static void
ReusePrefix(cbllm_engine *e, cbllm_request *r)
{
	int			bs = e->kv->block_size;
	int			n_full = (r->n_tokens - 1) / bs;

	if (e->params.no_prefix_caching || r->n_computed != 0 || r->n_blocks != 0 ||
		request_reserve_table(r, n_full) != CBLLM_OK)
		return;
	for (int b = 0; b < n_full; b++)
	{
		kv_block_key key;
		int32_t		blk;

		request_block_key(e, r, b, &key);
		if ((blk = kv_cache_lookup(e->kv, &key)) < 0)
			break;
		r->hashes[b] = key.hash;
		r->serials[b] = kv_cache_serial(e->kv, blk);
		r->blocks[r->n_blocks++] = blk;
		r->n_hashed = r->n_blocks;
		r->n_computed += bs;
	}
}

/* A request that needs more blocks than the whole pool can only end. */
static bool
CanNeverFit(const cbllm_engine *e, const cbllm_request *r)
{
	return BlocksFor(e, r->n_tokens + 1) > e->kv->n_blocks;
}

/* Preempt running requests that rank below the waiting head while it cannot be admitted. */
static void
PreemptForPriority(cbllm_engine *e)
{
	cbllm_request *head = e->waiting.head;
	int			need;

	if (head == NULL || e->running.tail == NULL)
		return;
	need = BlocksFor(e, head->swapped ? head->n_swap * e->kv->block_size :
					 (head->n_tokens < e->params.max_num_batched_tokens ?
					  head->n_tokens : e->params.max_num_batched_tokens));
	while (kv_cache_available(e->kv) < need && e->running.tail != NULL &&
		   e->running.tail->rank < head->rank)
		Preempt(e, e->running.tail);
}

/* Schedule the running requests, preempting from the back when blocks run out. */
static void
PlanRunning(cbllm_engine *e, int *n_seqs, int *budget)
{
	cbllm_request *r = e->running.head;

	while (r != NULL && *n_seqs < e->params.max_num_seqs && *budget > 0)
	{
		int			n = ChunkFor(r, *budget);
		bool		lost_self = false;

		while (request_ensure_blocks(e, r, r->n_computed + n) != CBLLM_OK)
		{
			cbllm_request *victim = e->running.tail;

			if (victim == r && e->running.n == 1 && CanNeverFit(e, r))
			{
				request_finish(e, r, CBLLM_FINISH_LENGTH, NULL);
				lost_self = true;
				break;
			}
			Preempt(e, victim);
			if (victim == r)
			{
				lost_self = true;
				break;
			}
		}
		if (lost_self)
			break;
		Schedule(e, n_seqs, r, n);
		*budget -= n;
		r = r->next;			/* read after preemption, which may have cut the tail */
	}
}

/* Admit waiting requests from the head of the queue. */
static void
PlanWaiting(cbllm_engine *e, int *n_seqs, int *budget)
{
	bool		static_mode = e->params.static_batching;
	bool		new_batch = e->running.n == 0;

	while (e->waiting.head != NULL && *n_seqs < e->params.max_num_seqs && *budget > 0 &&
		   e->running.n < e->params.max_num_seqs)
	{
		cbllm_request *r = e->waiting.head;
		int			n;

		if (static_mode && !new_batch && r->arrival > e->static_batch_last)
			break;
		if (CanNeverFit(e, r))
		{
			request_finish(e, r, CBLLM_FINISH_LENGTH, NULL);
			continue;
		}
		if (r->swapped)
		{
			n = ChunkFor(r, *budget);
			if (!SwapIn(e, r, r->n_computed + n))
				break;
		}
		else
		{
			ReusePrefix(e, r);
			n = ChunkFor(r, *budget);
			if (request_ensure_blocks(e, r, r->n_computed + n) != CBLLM_OK)
			{
				request_release_blocks(e, r);	/* shared blocks go back to the cache */
				break;
			}
		}
		req_list_remove(&e->waiting, r);
		r->state = REQ_RUNNING;
		if (!r->admitted)
		{
			r->t_admitted = engine_now(e);
			r->admitted = true;
		}
		req_list_insert(&e->running, r);
		if (static_mode && r->arrival > e->static_batch_last)
			e->static_batch_last = r->arrival;
		Schedule(e, n_seqs, r, n);
		*budget -= n;
	}
}

/* Fill e->step_seqs for the next step; returns the number of sequences. */
int
scheduler_plan(cbllm_engine *e)
{
	int			budget = e->params.max_num_batched_tokens;
	int			n_seqs = 0;

	PreemptForPriority(e);
	PlanRunning(e, &n_seqs, &budget);
	PlanWaiting(e, &n_seqs, &budget);
	return n_seqs;
}
