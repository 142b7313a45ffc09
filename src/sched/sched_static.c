/*
 * sched_static.c: the static-batching baselines' hooks (sched_static.h).
 * The continuous scheduler (scheduler.c) knows only that a mode may have
 * hooks; everything static batching does to a plan and its update is here.
 */
#include "sched/sched_static.h"

#include "sched/scheduler.h"

/* Whether r's prompt is in and only its next token is to compute. */
static inline bool
Decoding(const cbllm_request *r)
{
	return r->n_tokens - r->n_computed <= 1;
}

/* A new batch starts when nothing runs; the padded mode forgets the last batch's longest prompt. */
static void
BeginAdmissions(scheduler *s)
{
	s->stat.new_batch = s->running->n == 0;
	if (s->lim.batching == CBLLM_BATCH_STATIC_PADDED && s->stat.new_batch)
		s->stat.lmax = 0;
}

/* A request that arrived after the running batch's members waits for the next batch. */
static bool
AdmissionClosed(const scheduler *s, const cbllm_request *r)
{
	return !s->stat.new_batch && r->arrival > s->stat.batch_last;
}

/* r joined the batch: the batch's newest arrival, and in the padded mode its padding to size. */
static void
Admitted(scheduler *s, cbllm_request *r, bool first_time)
{
	if (first_time && s->lim.batching == CBLLM_BATCH_STATIC_PADDED)
	{
		r->stat.pad_owed = -1;	/* sized by EndAdmissions, once the batch's longest prompt is known */
		s->stat.lmax = r->n_prompt > s->stat.lmax ? r->n_prompt : s->stat.lmax;
	}
	if (r->arrival > s->stat.batch_last)
		s->stat.batch_last = r->arrival;
}

/* Each member admitted in this plan owes the batch's longest prompt less its own. */
static void
EndAdmissions(scheduler *s, int first)
{
	for (int i = first; i < s->plan.n_seqs; i++)
		if (s->plan.seqs[i].req->stat.pad_owed < 0)
			s->plan.seqs[i].req->stat.pad_owed = s->stat.lmax - s->plan.seqs[i].req->n_prompt;
}

/* Add a padding pass of r to the step: its prompt positions [0, n) again, sampling nothing. */
static void
SchedulePad(scheduler *s, cbllm_request *r, int n)
{
	sched_seq  *q = &s->plan.seqs[s->plan.n_seqs++];

	r->plan_mark = s->plan_no;
	q->req = r;
	q->start = 0;
	q->n_tokens = n;
	q->sample = false;
	q->pad = true;
	s->plan.n_tokens += n;
}

/* Once its prompt is in, a padded member computes the padding it owes before it decodes on. */
static bool
PadPass(scheduler *s, cbllm_request *r, int *budget, int *prefill)
{
	int			n;

	if (r->stat.pad_owed > 0 && Decoding(r) && r->table.n_dropped > 0)
		r->stat.pad_owed = 0;	/* its first blocks are gone behind a window: no padding pass */
	if (r->stat.pad_owed <= 0 || !Decoding(r))
		return false;
	n = r->stat.pad_owed < r->n_prompt ? r->stat.pad_owed : r->n_prompt;
	n = n < *budget ? n : *budget;
	n = n < *prefill ? n : *prefill;
	if (n > 0)
	{
		SchedulePad(s, r, n);
		*budget -= n;
		*prefill -= n;
	}
	return true;
}

/* A padding pass of n positions ran: that much less is owed. */
static void
Padded(cbllm_request *r, int n)
{
	r->stat.pad_owed -= n;
}

/*
 * A padded member that ended (stop, length, constraint) lingers, computed
 * on with its output discarded until its batch ends; one already lingering
 * that can go no further ends as it first ended.
 */
static bool
Ending(scheduler *s, cbllm_request *r, cbllm_finish *why)
{
	if (r->stat.lingering)
	{
		*why = r->stat.linger_finish;
		return false;
	}
	if (s->lim.batching == CBLLM_BATCH_STATIC_PADDED &&
		(*why == CBLLM_FINISH_STOP || *why == CBLLM_FINISH_LENGTH || *why == CBLLM_FINISH_CONSTRAINT))
	{
		r->stat.lingering = true;
		r->stat.linger_finish = *why;
		r->stat.linger_tokens = r->n_tokens;
		return true;
	}
	return false;
}

/*
 * Once no member of the batch is still live (admitted, not ended), the
 * ones computed on past their end (lingering, running or preempted) end
 * with how they ended, as many as the update's list takes (the rest at the
 * next update).
 */
static void
EndUpdate(scheduler *s, sched_update *u)
{
	req_list   *lists[2] = {s->running, s->waiting};
	bool		lingering = false;

	if (s->lim.batching != CBLLM_BATCH_STATIC_PADDED)
		return;
	for (int l = 0; l < 2; l++)
		for (cbllm_request *r = lists[l]->head; r != NULL; r = r->next)
		{
			if (r->admitted && !r->stat.lingering)
				return;
			lingering |= r->stat.lingering;
		}
	for (int l = 0; l < 2 && lingering; l++)
		for (cbllm_request *r = lists[l]->head, *next; r != NULL; r = next)
		{
			next = r->next;
			if (r->stat.lingering &&
				!scheduler_retire_in_update(s, r, u, r->stat.linger_finish))
				return;
		}
}

static const sched_batch_policy STATIC_POLICY = {
	.begin_admissions = BeginAdmissions,
	.admission_closed = AdmissionClosed,
	.admitted = Admitted,
	.end_admissions = EndAdmissions,
	.pad_pass = PadPass,
	.padded = Padded,
	.ending = Ending,
	.end_update = EndUpdate,
};

/* The hooks of a batching mode: both static modes share them (the padded one does more). */
const sched_batch_policy *
sched_static_policy(cbllm_batching batching)
{
	return batching == CBLLM_BATCH_CONTINUOUS ? NULL : &STATIC_POLICY;
}
