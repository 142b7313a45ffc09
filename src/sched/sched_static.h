/*
 * sched_static.h: the static-batching baselines the benchmarks compare the
 * continuous scheduler with (cbllm_batching), as hooks the scheduler calls
 * only in those modes (scheduler.batch is NULL in continuous batching).
 *
 *   CBLLM_BATCH_STATIC_ADMISSION  a batch is admitted only when nothing runs;
 *   CBLLM_BATCH_STATIC_PADDED     the same, and what a padded generate() call
 *       computes is charged: each member whose prompt is shorter than the
 *       batch's longest owes that many prompt positions, computed again in
 *       padding passes (positions it already holds, so its KV and output are
 *       unchanged) before it decodes on; and a member that ends lingers,
 *       decoding on with its output discarded, until no member of the batch
 *       is live, when they all end together.
 */
#ifndef CBLLM_SCHED_STATIC_H
#define CBLLM_SCHED_STATIC_H

#include <stdbool.h>

#include "sched/request.h"

struct scheduler;
struct sched_update;

/* What a static mode remembers of the batch that runs. */
typedef struct sched_static_state
{
	int64_t		batch_last;		/* the newest arrival admitted into the batch */
	bool		new_batch;		/* nothing ran when this plan's admissions began */
	int			lmax;			/* padded: the batch's longest prompt */
} sched_static_state;

/* A static mode's hooks, in the order a plan and its update call them. */
typedef struct sched_batch_policy
{
	/* before admissions: a new batch starts when nothing runs */
	void		(*begin_admissions) (struct scheduler *s);
	/* whether r may not join the batch that runs (it waits for the next one) */
	bool		(*admission_closed) (const struct scheduler *s, const cbllm_request *r);
	/* r joined the batch (first_time: its first admission) */
	void		(*admitted) (struct scheduler *s, cbllm_request *r, bool first_time);
	/* after admissions: the padding each new member of this plan owes (from plan->seqs[first] on) */
	void		(*end_admissions) (struct scheduler *s, int first);
	/* whether r's step is a padding pass, added to the plan from *budget and *prefill */
	bool		(*pad_pass) (struct scheduler *s, cbllm_request *r, int *budget, int *prefill);
	/* a padding pass of n positions ran */
	void		(*padded) (cbllm_request *r, int n);
	/* r's step ended it with *why: true when it lingers instead; else *why is how it ends */
	bool		(*ending) (struct scheduler *s, cbllm_request *r, cbllm_finish *why);
	/* after an update: end the batch's lingering members once none is live */
	void		(*end_update) (struct scheduler *s, struct sched_update *u);
} sched_batch_policy;

/* The hooks of a batching mode; NULL for continuous batching. */
const sched_batch_policy *sched_static_policy(cbllm_batching batching);

#endif
