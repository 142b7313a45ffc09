/*
 * engine_step.c: one engine step.  It asks the scheduler for a plan
 * (scheduler.c), executes it (the swap copies on the backend, one forward
 * pass over the batch, a token sampled for every sequence that finished its
 * prompt or decoded, recorded in its request by request.c), gives the
 * results to the scheduler's update, and finishes the requests that ended.
 * The step's counters are recorded here.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Fail every waiting and running request: the device is gone. */
static void
FailAll(cbllm_engine *e)
{
	while (e->running.head != NULL)
		request_finish(e, e->running.head, CBLLM_FINISH_ERROR, e->lost_msg);
	while (e->waiting.head != NULL)
		request_finish(e, e->waiting.head, CBLLM_FINISH_ERROR, e->lost_msg);
}

/* The request of step sequence i. */
static inline cbllm_request *
StepRequest(const cbllm_engine *e, int i)
{
	return e->sched.plan.seqs[i].req;
}

typedef struct sample_job
{
	cbllm_engine *e;
	const float *logits;		/* (rows, vocab) */
	const int32_t *seq_of_row;	/* (rows) index into the step's sequences */
} sample_job;

/* One task: sample the token of one logits row with the thread's own scratch. */
static void
SampleTask(void *arg, int row, int thread)
{
	sample_job *j = arg;
	cbllm_engine *e = j->e;
	int			i = j->seq_of_row[row];
	cbllm_request *r = StepRequest(e, i);
	const float *logits = j->logits + (size_t) row * e->model->cfg.vocab_size;
	sampler_params spp = request_sampler_params(r);

	e->step_tokens[i] = r->eng->controlled ? engine_sample_controlled(e, r, logits, thread) :
		sampler_sample(e->samplers[thread], logits, &spp, &r->eng->rng);
}

/* Whether any of the n step sequences rows[] samples through controls the device lacks. */
static bool
AnyHostOnly(const cbllm_engine *e, const int32_t *rows, int n)
{
	for (int r = 0; r < n; r++)
		if (StepRequest(e, rows[r])->eng->host_only)
			return true;
	return false;
}

typedef struct mask_job
{
	cbllm_engine *e;
	const int32_t *rows;		/* (n) the step's sampled sequences */
	const sampler_row *p;		/* (n) their mask numbers */
	int			words;
} mask_job;

/* One task: the constraint mask of sampled row idx, if it has one, into its place in dev_masks. */
static void
MaskTask(void *arg, int idx, int thread)
{
	mask_job   *j = arg;
	cbllm_request *r = StepRequest(j->e, j->rows[idx]);
	uint32_t   *dst;
	constraint_step st;

	(void) thread;
	if (j->p[idx].mask <= 0)
		return;
	dst = j->e->dev_masks + (size_t) (j->p[idx].mask - 1) * j->words;
	if (!engine_constraint_mask(j->e, r, dst, &st))
		memset(dst, 0, sizeof(uint32_t) * j->words);	/* dead: it ends whatever is drawn */
	else if (st.mask != dst)
		memcpy(dst, st.mask, sizeof(uint32_t) * j->words);
}

/*
 * Sample every sequence that has logits this step: on the backend when it
 * can (only ids come back, and a constrained sequence's mask goes up with
 * it) and no sequence has penalties, logit bias, min_p or logprobs, else on
 * the host in parallel (such a step takes its logits to the host).  Each
 * request draws from its own generator in both cases, one uniform per
 * sampled (non-greedy) token.
 */
static int
SampleStep(cbllm_engine *e, int n_seqs, cbllm_err *err)
{
	int32_t		rows[n_seqs > 0 ? n_seqs : 1];
	int			n = 0,
				rc;
	const float *logits;

	for (int i = 0; i < n_seqs; i++)
		if (e->step_seqs[i].logits != FWD_LOGITS_NONE)
			rows[n++] = i;
	if (forward_can_sample(e->fwd) && !AnyHostOnly(e, rows, n))
	{
		sampler_row p[n > 0 ? n : 1];
		int32_t		tok[n > 0 ? n : 1];
		int			n_masks = 0,
					words = (e->n_sample_ids + 31) / 32;

		for (int r = 0; r < n; r++)
		{
			const cbllm_sampling *sp = &StepRequest(e, rows[r])->eng->sp;

			p[r].controls = request_sampler_params(StepRequest(e, rows[r]));
			p[r].u = sp->temperature > 0 && sp->top_k != 1 ?
				(float) rng_uniform(&StepRequest(e, rows[r])->eng->rng) : 0.0f;
			if (p[r].u >= 1.0f)
				p[r].u = 0.99999994f;	/* a double just below 1 rounds up to 1 as a float */
			p[r].mask = StepRequest(e, rows[r])->eng->cons != NULL ? ++n_masks : 0;
		}
		if (n_masks > 0)
		{
			mask_job	j = {e, rows, p, words};

			if (e->dev_masks == NULL &&
				(e->dev_masks = malloc(sizeof(uint32_t) * words * e->params.max_num_seqs)) == NULL)
				return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the constraint masks");
			threadpool_run(e->pool, n, MaskTask, &j);
			e->stats.tokens_masked_device += n_masks;
		}
		if ((rc = forward_sample(e->fwd, e->n_sample_ids, p, e->dev_masks, n_masks, tok,
								 err)) != CBLLM_OK)
			return rc;
		for (int r = 0; r < n; r++)
			e->step_tokens[rows[r]] = tok[r];
		return CBLLM_OK;
	}
	if ((rc = forward_logits(e->fwd, &logits, err)) != CBLLM_OK)
		return rc;
	{
		sample_job	j = {e, logits, rows};

		threadpool_run(e->pool, n, SampleTask, &j);
	}
	return CBLLM_OK;
}

/* Finish the requests the scheduler took out of the queues. */
static void
FinishRetired(cbllm_engine *e, const sched_finished *f, int n)
{
	for (int i = 0; i < n; i++)
		request_finish(e, f[i].req, f[i].why, f[i].error);
}

/* Whether the plan brings swaps[i]'s request back in a later swap. */
static bool
SwappedBackLater(const sched_plan *plan, int i)
{
	for (int j = i + 1; j < plan->n_swaps; j++)
		if (!plan->swaps[j].out && plan->swaps[j].req == plan->swaps[i].req)
			return true;
	return false;
}

/*
 * Copy the plan's swaps in plan order; *n_done says how many were tried
 * (all, or up to the failed one).  A swap-out that fails costs only its
 * victim's copy: the victim recomputes its KV later, as when the swap area
 * has no room, and the step goes on (no block of the step depends on it).
 * A failed swap-in (or a swap-out whose request the plan swaps back in)
 * fails the step.  The auto preemption choice learns the copy rate from
 * the swap-outs: the backend's measurement when it has one (its copies run
 * asynchronously), else their timing.
 */
static int
RunSwaps(cbllm_engine *e, const sched_plan *plan, int *n_done, cbllm_err *err)
{
	scheduler  *s = &e->sched;

	for (*n_done = 0; *n_done < plan->n_swaps; (*n_done)++)
	{
		const sched_swap *w = &plan->swaps[*n_done];
		const int32_t *blocks = plan->copy_blocks + w->first;
		const int32_t *ids = plan->copy_swap_ids + w->first;
		double		t0 = cbllm_now();
		int			rc = w->out ?
			e->be->swap_out(e->be, e->kv, e->swap, blocks, ids, w->n, err) :
			e->be->swap_in(e->be, e->kv, e->swap, blocks, ids, w->n, err);

		if (rc != CBLLM_OK && (!w->out || SwappedBackLater(plan, *n_done)))
			return rc;
		if (rc != CBLLM_OK)
		{
			request_release_swap(e->bm, w->req);	/* recompute instead */
			continue;
		}
		if (!w->out)
			continue;
		if (e->be->swap_bytes_per_sec > 0)
			s->swap_bytes_per_sec = e->be->swap_bytes_per_sec;
		else
			s->swap_bytes_per_sec = 0.8 * s->swap_bytes_per_sec + 0.2 *
				(w->n * (double) engine_kv_bytes(e, e->params.block_size) /
				 (cbllm_now() - t0 + 1e-9));
	}
	return CBLLM_OK;
}

/*
 * After a failed copy: a victim whose swap-out did not run lost its swapped
 * KV and recomputes it (one swapped back in by the same plan is in the
 * failed step and fails with it).
 */
static void
DropUncopiedSwaps(cbllm_engine *e, const sched_plan *plan, int n_done)
{
	for (int i = n_done; i < plan->n_swaps; i++)
	{
		cbllm_request *r = plan->swaps[i].req;

		if (plan->swaps[i].out && r->state == REQ_SWAPPED && r->table.swapped)
		{
			request_release_swap(e->bm, r);
			(void) request_enter(r, REQ_PREEMPTED);	/* its KV is recomputed instead */
		}
	}
}

/*
 * Count the plan's preemptions: by swap when its swap-out copy ran and the
 * victim's KV is in the swap area, else by recompute.
 */
static void
RecordPreemptions(cbllm_engine *e, const sched_plan *plan, int n_swaps_done)
{
	for (int i = 0; i < plan->n_preempted; i++)
	{
		int			w = plan->preempted[i].swap;

		if (w >= 0 && w < n_swaps_done && plan->preempted[i].req->table.swapped)
			e->stats.preemptions_swap++;
		else
			e->stats.preemptions_recompute++;
		e->stats.preemptions++;
	}
}

/*
 * A step that could not run: its requests fail with the message; a sticky
 * device fault fails everything, for good.
 */
static int
FailStep(cbllm_engine *e, const sched_plan *plan, int rc, cbllm_err *err)
{
	for (int i = 0; i < plan->n_seqs; i++)
		request_finish(e, plan->seqs[i].req, CBLLM_FINISH_ERROR, err->msg);
	if (rc == CBLLM_ERR_DEVICE && e->be->healthy != NULL && !e->be->healthy(e->be))
	{
		/* a sticky fault: nothing will run on this device again */
		e->lost = true;
		snprintf(e->lost_msg, sizeof(e->lost_msg),
				 "the %s device failed and cannot continue (%.400s); the engine must be recreated",
				 e->be->name, err->msg);
		FailAll(e);
		rc = cbllm_fail(err, CBLLM_ERR_DEVICE_LOST, "%s", e->lost_msg);
	}
	return rc;
}

/* The forward pass's view of the plan's sequences. */
static void
BuildBatch(cbllm_engine *e, const sched_plan *plan)
{
	for (int i = 0; i < plan->n_seqs; i++)
	{
		const sched_seq *q = &plan->seqs[i];
		fwd_seq    *f = &e->step_seqs[i];

		f->tokens = q->req->tokens + q->start;
		f->n_tokens = q->n_tokens;
		f->pos0 = q->start;
		f->block_table = q->req->table.ids;
		f->logits = q->sample ? FWD_LOGITS_LAST : FWD_LOGITS_NONE;
		f->rope_set = q->req->rope_set;
		f->state_slot = -1;
	}
}

/* Record each sampled token in its request; what it decided goes to step_results. */
static void
RecordTokens(cbllm_engine *e, const sched_plan *plan)
{
	for (int i = 0; i < plan->n_seqs; i++)
	{
		sched_result *res = &e->step_results[i];

		res->finish = CBLLM_FINISH_NONE;
		res->error = NULL;
		if (plan->seqs[i].sample &&
			(plan->seqs[i].req->stat.lingering ?
			 request_append_padding(e, plan->seqs[i].req, e->step_tokens[i], &res->finish) :
			 request_append_token(e, plan->seqs[i].req, e->step_tokens[i], &res->finish)) != CBLLM_OK)
		{
			res->finish = CBLLM_FINISH_ERROR;
			res->error = "out of memory recording output";
		}
	}
}

/*
 * The counters of a step that ran, and the costs the scheduler plans with
 * (moving averages): a step of decodes only, and a prompt token, what a
 * step with prompt work took beyond the decode step.
 */
static void
RecordStep(cbllm_engine *e, const sched_plan *plan, const sched_update *u, double seconds)
{
	scheduler  *s = &e->sched;
	int			n_dec = 0,
				n_pre;

	e->stats.steps++;
	e->stats.batch_seqs_sum += plan->n_seqs;
	e->stats.tokens_prompt += u->n_prompt_tokens;
	e->stats.tokens_padding += u->n_pad_tokens;
	for (int i = 0; i < plan->n_seqs; i++)
		n_dec += plan->seqs[i].n_tokens == 1;
	n_pre = plan->n_tokens - n_dec;
	if (n_pre == 0)
		s->sec_decode_step = s->sec_decode_step > 0 ? 0.8 * s->sec_decode_step + 0.2 * seconds : seconds;
	else if (n_pre >= 16)
	{
		double		per = (seconds - (n_dec > 0 ? s->sec_decode_step : 0)) / n_pre;

		if (per > 0)
			s->sec_per_prefill_token = s->prefill_measured ? 0.8 * s->sec_per_prefill_token + 0.2 * per : per;
		s->prefill_measured |= per > 0;
	}
}

/* Run the plan's batch: forward pass, sampling, then the scheduler's update. */
static int
RunBatch(cbllm_engine *e, const sched_plan *plan, cbllm_err *err)
{
	const sched_update *u;
	int			n_rows,
				rc;
	double		t0 = cbllm_now();

	BuildBatch(e, plan);
	rc = engine_state_assign(e, plan, err);
	if (rc == CBLLM_OK)
		rc = forward_run(e->fwd, e->step_seqs, plan->n_seqs, &n_rows, err);
	if (rc == CBLLM_OK)
		rc = SampleStep(e, plan->n_seqs, err);
	t0 = cbllm_now() - t0;
	e->stats.forward_seconds += t0;
	if (rc != CBLLM_OK)
		return FailStep(e, plan, rc, err);
	RecordTokens(e, plan);
	u = scheduler_update(&e->sched, plan, e->step_results);
	FinishRetired(e, u->finished, u->n_finished);
	RecordStep(e, plan, u, t0);
	return CBLLM_OK;
}

/* One iteration: plan, execute the plan (swaps, forward pass, sampling), update. */
static int
StepOnce(cbllm_engine *e, int *n_active, cbllm_err *err)
{
	const sched_plan *plan;
	int			rc,
				n_swaps_done;
	cbllm_err	local;

	if (err == NULL)
		err = &local;
	engine_drop_taken(e);
	if (e->lost)
	{
		FailAll(e);
		if (n_active)
			*n_active = 0;
		return cbllm_fail(err, CBLLM_ERR_DEVICE_LOST, "%s", e->lost_msg);
	}
	plan = scheduler_plan(&e->sched, engine_now(e));
	FinishRetired(e, plan->finished, plan->n_finished);
	rc = RunSwaps(e, plan, &n_swaps_done, err);
	RecordPreemptions(e, plan, n_swaps_done);
	if (rc != CBLLM_OK)
		DropUncopiedSwaps(e, plan, n_swaps_done);
	engine_state_preempted(e, plan);
	if (rc != CBLLM_OK)
		rc = FailStep(e, plan, rc, err);
	else if (plan->n_seqs > 0)
		rc = RunBatch(e, plan, err);
	if (n_active)
		*n_active = e->waiting.n + e->running.n;
	return rc;
}

/*
 * One iteration.  On a backend whose runtime may start threads of its own
 * during a step (CUDA), with every signal blocked, as at creation.
 */
int
cbllm_engine_step(cbllm_engine *e, int *n_active, cbllm_err *err)
{
	sigset_t	all,
				old;
	int			rc;

	if (!e->reg->threads_in_step)
		return StepOnce(e, n_active, err);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = StepOnce(e, n_active, err);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}
