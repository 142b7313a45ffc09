/*
 * scheduler.c: which requests run in the next step, and how many tokens each
 * contributes (iteration-level scheduling).
 *
 * Running requests go first, oldest first: a decoding request contributes its
 * one new token, a request still prefilling contributes the next chunk of its
 * prompt that fits the step's token budget.  Then waiting requests are
 * admitted first come, first served while sequences, tokens and KV blocks
 * last; the head of the queue is never skipped for a smaller one behind it.
 *
 * When a running request needs a block and the pool is empty, the most
 * recently admitted running request is preempted by recompute: its blocks
 * are freed and it returns to the front of the queue with the tokens it has
 * generated, to be prefilled again when there is room.
 */
#include "engine_internal.h"

/* Tokens r still has to compute, capped by budget. */
static int
ChunkFor(const cbllm_request *r, int budget)
{
	int			left = r->n_tokens - r->n_computed;

	return left < budget ? left : budget;
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

/* Preempt a running request by recompute: free its blocks, requeue it at the front. */
static void
Preempt(cbllm_engine *e, cbllm_request *victim)
{
	req_list_remove(&e->running, victim);
	request_release_blocks(e, victim);
	victim->state = REQ_WAITING;
	req_list_push_front(&e->waiting, victim);
	e->stats.preemptions++;
}

/* Fill e->step_seqs for the next step; returns the number of sequences. */
int
scheduler_plan(cbllm_engine *e)
{
	int			budget = e->params.max_num_batched_tokens;
	int			n_seqs = 0;
	int			max_seqs = e->params.max_num_seqs;
	cbllm_request *r = e->running.head;

	while (r != NULL && n_seqs < max_seqs && budget > 0)
	{
		int			n = ChunkFor(r, budget);
		bool		preempted_self = false;

		while (request_ensure_blocks(e, r, r->n_computed + n) == CBLLM_ERR_FULL)
		{
			cbllm_request *victim = e->running.tail;

			Preempt(e, victim);
			if (victim == r)
			{
				preempted_self = true;
				break;
			}
		}
		if (preempted_self)
			break;
		Schedule(e, &n_seqs, r, n);
		budget -= n;
		r = r->next;			/* read after preemption, which may have cut the tail */
	}
	while (e->waiting.head != NULL && n_seqs < max_seqs && budget > 0 &&
		   e->running.n < max_seqs)
	{
		int			n;

		r = e->waiting.head;
		n = ChunkFor(r, budget);
		if (request_ensure_blocks(e, r, r->n_computed + n) != CBLLM_OK)
		{
			request_release_blocks(e, r);
			break;
		}
		req_list_remove(&e->waiting, r);
		r->state = REQ_RUNNING;
		req_list_push_back(&e->running, r);
		Schedule(e, &n_seqs, r, n);
		budget -= n;
	}
	return n_seqs;
}
