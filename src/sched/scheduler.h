/*
 * scheduler.h: the iteration-level scheduler.  scheduler_plan reads the
 * queues and the block manager and returns the plan of one step; the engine
 * executes it (the swap copies, the forward pass, sampling) and gives what
 * came of each sequence to scheduler_update, which applies it in one place.
 * Neither needs a model, a backend or an engine: the tests drive them with
 * a block manager and requests of their own.
 *
 * The plan, as the engine executes it:
 *
 *   field        meaning
 *   finished[]   requests the scheduler ended (they can never fit the pool): the engine finishes them
 *   swaps[]      copies between the pool and the swap area, in the order they must run, before the
 *                forward pass; swaps[i] copies copy_blocks[first + j] <-> copy_swap_ids[first + j]
 *   preempted[]  victims put back in the waiting queue, each by swap (its swap-out in swaps[]) or by
 *                recompute; for the engine's counters
 *   seqs[]       the step's sequences: request, tokens from req->n_computed on, whether it samples
 *
 * Longrope (rope.h) chooses its factor set per sequence by its whole length:
 * a sequence takes the long set (req->rope_set 1) when it is admitted longer
 * than long_rope_from (a prompt's length decides before its first chunk),
 * and one that grows past it by a generated token gives its KV back in
 * scheduler_update and, still running, computes every position again, its
 * generated tokens included, with the long set, as transformers drops its
 * cache at that length.  The factor set is part of the prefix cache's scope.
 */
#ifndef CBLLM_SCHEDULER_H
#define CBLLM_SCHEDULER_H

#include "kv/block_manager.h"
#include "sched/request.h"
#include "sched/sched_fair.h"
#include "sched/sched_static.h"

typedef struct sched_limits
{
	int			max_num_seqs;	/* most sequences in one step (and running at once) */
	int			max_num_batched_tokens; /* most tokens in one step */
	cbllm_preempt preempt_mode;
	cbllm_batching batching;	/* a static mode admits a batch only when nothing runs */
	size_t		block_bytes;	/* bytes of one block's K and V as the backend stores them */
	double		max_step_sec;	/* stall-free prefill: a step with decoding sequences takes prompt
								 * tokens only up to this predicted duration; 0: no limit but
								 * max_num_batched_tokens; SCHED_STEP_AUTO: twice the decode step */
	int			long_rope_from; /* a sequence longer than this computes with its RoPE's long factor
								 * set (longrope, rope.h); 0: the model has none */
} sched_limits;

#define SCHED_STEP_AUTO (-1.0)	/* max_step_sec: twice the measured decode step */
#define SCHED_MIN_PREFILL 16	/* prompt tokens a step may always take, so prompts progress */

typedef struct sched_params
{
	req_list   *waiting;		/* by rank; a preempted request keeps its place */
	req_list   *running;		/* by rank: the tail is the first preemption victim */
	block_manager *bm;
	sched_limits limits;
} sched_params;

/* One sequence of the step. */
typedef struct sched_seq
{
	cbllm_request *req;
	int			start;			/* it computes positions [start, start + n_tokens): from
								 * req->n_computed, or from 0 in a padding pass */
	int			n_tokens;
	bool		sample;			/* they end its known tokens: the step samples its next token */
	bool		pad;			/* a padding pass (padded static batching): positions it computed
								 * before, computed again for the cost of padding, recorded nowhere */
} sched_seq;

/* One request's blocks copied out to the swap area or back in. */
typedef struct sched_swap
{
	cbllm_request *req;
	bool		out;			/* pool to swap area (a preemption), else back (a resumption) */
	int			first;			/* its copies in copy_blocks and copy_swap_ids */
	int			n;
} sched_swap;

/* A request put back in the waiting queue. */
typedef struct sched_preempt
{
	cbllm_request *req;
	int			swap;			/* the index of its swap-out in swaps[]; -1: by recompute */
} sched_preempt;

/* A request the scheduler took out of the queues; the engine finishes it. */
typedef struct sched_finished
{
	cbllm_request *req;
	cbllm_finish why;
	const char *error;			/* with CBLLM_FINISH_ERROR */
} sched_finished;

typedef struct sched_plan
{
	sched_seq  *seqs;			/* (max_num_seqs) */
	int			n_seqs;
	int			n_tokens;		/* sum of seqs[].n_tokens */
	sched_swap *swaps;			/* (cap_swaps) */
	int			n_swaps;
	int			cap_swaps;
	int32_t    *copy_blocks;	/* (cap_copies) pool blocks of the swaps */
	int32_t    *copy_swap_ids;	/* (cap_copies) swap blocks of the swaps */
	int			n_copies;
	int			cap_copies;
	sched_preempt *preempted;	/* (max_num_seqs) */
	int			n_preempted;
	sched_finished *finished;	/* (cap_finished) */
	int			n_finished;
	int			cap_finished;
} sched_plan;

/* What came of plan->seqs[i], from the engine: the finish its sampled token decided. */
typedef struct sched_result
{
	cbllm_finish finish;		/* CBLLM_FINISH_NONE: it goes on */
	const char *error;			/* with CBLLM_FINISH_ERROR */
} sched_result;

/* What scheduler_update did. */
typedef struct sched_update
{
	sched_finished *finished;	/* (max_num_seqs) requests that ended: the engine finishes them */
	int			n_finished;
	int			n_tokens;		/* positions computed in the step */
	int			n_prompt_tokens;	/* of those, prompt positions computed for the first time */
	int			n_pad_tokens;	/* of those, positions of padding passes */
} sched_update;

typedef struct scheduler
{
	req_list   *waiting;
	req_list   *running;
	block_manager *bm;
	sched_limits lim;
	double		sec_per_prefill_token;	/* measured by the engine: the auto preemption choice and
										 * the stall-free prefill budget */
	double		sec_decode_step;	/* measured by the engine: a step of decodes only; 0 until one ran */
	bool		prefill_measured;	/* sec_per_prefill_token is a measurement, no longer the default */
	double		swap_bytes_per_sec; /* measured by the engine, for the auto preemption choice */
	const sched_batch_policy *batch;	/* a static-batching baseline's hooks; NULL: continuous */
	sched_static_state stat;	/* what a static mode remembers of its batch */
	int64_t		bad_transitions;	/* state moves request_enter refused: 0 unless a bug */
	uint64_t	plan_no;		/* plans made so far: a request planned in this one has
								 * plan_mark == plan_no */
	bool		fair_on;		/* this plan shares between tenants (more than one has work) */
	sched_fair	fair;			/* the tenants' counts and the fair order, kept current through
								 * the plan while fair_on */
	sched_plan	plan;			/* scheduler_plan's output */
	sched_update update;		/* scheduler_update's output */
} scheduler;

/* Set s up over p's queues and block manager; its output buffers are allocated here. */
int			scheduler_init(scheduler *s, const sched_params *p, cbllm_err *err);
void		scheduler_free(scheduler *s);

/*
 * Plan the next step at time now (the engine's clock: first admissions are
 * stamped with it).  Preemptions, admissions, prefix hits and swaps are done
 * in the queues and the block manager when this returns; what the engine
 * must carry out is in the plan, valid until the next call.
 */
const sched_plan *scheduler_plan(scheduler *s, double now);

/*
 * Retire r from its queue into u's list of finished requests, ending with
 * why (the static-batching hooks' end of a batch); false when the list is
 * full (it ends at a later update).
 */
bool		scheduler_retire_in_update(scheduler *s, cbllm_request *r, sched_update *u, cbllm_finish why);

/*
 * Apply a step's results (results[i] for plan->seqs[i]): each sequence's
 * computed positions, the prefix-cache registration of the blocks they
 * filled, sliding-window drops, and the end of the requests whose finish is
 * set (out of the queues, their blocks given back; the engine finishes
 * them).  The output is valid until the next call.
 */
const sched_update *scheduler_update(scheduler *s, const sched_plan *plan,
									 const sched_result *results);

#endif
