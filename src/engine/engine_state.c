/*
 * engine_state.c: the engine's side of a hybrid model's state cache
 * (kv/state_cache.h): which request holds which slot.
 *
 * There are max_num_seqs slots, as many as sequences can run at once, so a
 * running request always finds one.  A request takes its slot the first
 * time a step computes it and keeps it while it runs.  Preempted by
 * recompute, it gives the slot back and, computing again from position 0,
 * starts from a zero state (the backend zeroes a sequence whose first
 * token of the step is at position 0).  Preempted by swap, its KV blocks go
 * to the swap area and its state to a host copy of its own; when it is
 * scheduled again it takes a free slot and the copy is loaded into it.  A
 * request that finishes, fails or is aborted gives back both.
 */
#include <stdlib.h>

#include "engine/engine_internal.h"

/* Bytes of one sequence's state. */
size_t
engine_state_bytes_per_seq(const cbllm_engine *e)
{
	return e->states != NULL ? state_cache_slot_bytes(&e->states->p) : 0;
}

/* One slot per sequence a step may hold, for a model with linear layers. */
int
engine_state_create(cbllm_engine *e, cbllm_err *err)
{
	const cbllm_model_config *c = &e->model->cfg;
	state_cache_params p = {
		.n_slots = e->params.max_num_seqs,
		.n_layers = c->n_linear_layers,
		.conv_rows = c->lin_conv - 1,
		.conv_dim = 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim,
		.n_heads = c->lin_v_heads,
		.k_dim = c->lin_k_dim,
		.v_dim = c->lin_v_dim,
	};
	int			rc;

	if (c->n_linear_layers == 0)
		return CBLLM_OK;
	p.no_data = e->be->alloc_state != NULL;
	if ((rc = state_cache_create(&p, &e->states, err)) != CBLLM_OK ||
		(p.no_data && (rc = e->be->alloc_state(e->be, &p, err)) != CBLLM_OK))
		return rc;
	forward_set_state(e->fwd, e->states);
	return CBLLM_OK;
}

/* Copy slot's state to host memory (to_host) or back: the cache's own, or the backend's. */
static int
CopyState(cbllm_engine *e, int32_t slot, float *host, bool to_host, cbllm_err *err)
{
	if (e->states->conv == NULL)
		return e->be->copy_state(e->be, slot, host, to_host, err);
	if (to_host)
		state_cache_save(e->states, slot, host);
	else
		state_cache_load(e->states, slot, host);
	return CBLLM_OK;
}

void
engine_state_free(cbllm_engine *e)
{
	state_cache_free(e->states);
	e->states = NULL;
}

/* Drop r's saved copy. */
static void
DropSaved(cbllm_engine *e, engine_request *q)
{
	if (q->state_saved != NULL)
	{
		free(q->state_saved);
		q->state_saved = NULL;
		e->state_saved_bytes -= (int64_t) engine_state_bytes_per_seq(e);
	}
}

/* r ends: its slot and its saved copy go. */
void
engine_state_release(cbllm_engine *e, cbllm_request *r)
{
	engine_request *q = r->eng;

	if (e->states == NULL || q == NULL)
		return;
	if (q->state_slot >= 0)
		state_cache_release(e->states, q->state_slot);
	q->state_slot = -1;
	DropSaved(e, q);
}

/*
 * The plan's victims: one whose KV is in the swap area keeps its state in a
 * host copy (out of memory for it: it recomputes, its swapped KV given
 * back); one preempted by recompute starts again from zero.
 */
void
engine_state_preempted(cbllm_engine *e, const sched_plan *plan)
{
	if (e->states == NULL)
		return;
	for (int i = 0; i < plan->n_preempted; i++)
	{
		cbllm_request *r = plan->preempted[i].req;
		engine_request *q = r->eng;

		if (q->state_slot < 0)
			continue;
		DropSaved(e, q);
		if (r->table.swapped && r->n_computed > 0)
		{
			cbllm_err	err;

			q->state_saved = malloc(engine_state_bytes_per_seq(e));
			if (q->state_saved != NULL &&
				CopyState(e, q->state_slot, q->state_saved, true, &err) == CBLLM_OK)
				e->state_saved_bytes += (int64_t) engine_state_bytes_per_seq(e);
			else
			{
				/* no room for the copy, or it failed: recompute instead */
				free(q->state_saved);
				q->state_saved = NULL;
				request_release_swap(e->bm, r);
				(void) request_enter(r, REQ_PREEMPTED);
			}
		}
		state_cache_release(e->states, q->state_slot);
		q->state_slot = -1;
	}
}

/*
 * Each sequence of the plan in its slot: one that has none takes a free
 * one, loading its saved copy when it resumes after a swap.  A sequence
 * that continues past position 0 with neither has lost its state: the step
 * fails (the engine keeps prefix caching off for hybrid models, so no hit
 * can skip positions).
 */
int
engine_state_assign(cbllm_engine *e, const sched_plan *plan, cbllm_err *err)
{
	if (e->states == NULL)
		return CBLLM_OK;
	for (int i = 0; i < plan->n_seqs; i++)
	{
		const sched_seq *sq = &plan->seqs[i];
		engine_request *q = sq->req->eng;

		if (q->state_slot < 0)
		{
			if (sq->start > 0 && q->state_saved == NULL)
				return cbllm_fail(err, CBLLM_ERR_INTERNAL,
								  "request %lld continues at position %d without its linear-attention state",
								  (long long) sq->req->id, sq->start);
			if ((q->state_slot = state_cache_acquire(e->states)) < 0)
				return cbllm_fail(err, CBLLM_ERR_INTERNAL,
								  "no free linear-attention state slot of %d for a step of %d sequences",
								  e->states->p.n_slots, plan->n_seqs);
			if (sq->start > 0)
			{
				int			rc = CopyState(e, q->state_slot, q->state_saved, false, err);

				if (rc != CBLLM_OK)
					return rc;
			}
		}
		if (sq->start == 0 || q->state_saved != NULL)
			DropSaved(e, q);
		e->step_seqs[i].state_slot = q->state_slot;
	}
	return CBLLM_OK;
}
