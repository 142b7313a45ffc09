/*
 * request.h: a request as the scheduler holds it (its state, tokens,
 * blocks, rank and tenant), and the ordered lists the scheduler keeps
 * requests in.  Nothing here needs an engine or a model: the scheduler
 * (scheduler.h) and its tests work on these alone.  The engine's part of a
 * request (its sampling, output text, stop strings, constraint, logprobs)
 * is struct engine_request (engine/engine_internal.h), which r->eng points
 * to, and the functions that need an engine are there too.
 */
#ifndef CBLLM_REQUEST_H
#define CBLLM_REQUEST_H

#include "api/cbllm.h"
#include "kv/block_manager.h"

/*
 * A request's state: the one place its phase is kept (what callers see as
 * cbllm_output.phase), changed only by request_enter (request.c), which
 * holds the transitions that may happen:
 *
 *   QUEUED -> PREFILL | DECODE | FINISHED      admitted (DECODE: one token to compute), ended
 *   PREFILL -> DECODE | PREEMPTED | SWAPPED | FINISHED | PREFILL
 *   DECODE -> PREFILL | PREEMPTED | SWAPPED | FINISHED
 *                      (PREFILL: its KV was dropped to be computed again, as longrope's
 *                       crossing does; PREEMPTED: by recompute; SWAPPED: its blocks in swap)
 *   PREEMPTED | SWAPPED -> PREFILL | DECODE | FINISHED   admitted again, or ended
 *   SWAPPED -> PREEMPTED                       its swap copy did not happen: recomputed instead
 *
 * Waiting states (QUEUED, PREEMPTED, SWAPPED) are in the waiting list and
 * hold no KV blocks in the pool (SWAPPED holds swap blocks); running ones
 * (PREFILL, DECODE) are in the running list; FINISHED is in neither.
 */
typedef cbllm_phase req_state;

#define REQ_QUEUED CBLLM_PHASE_QUEUED
#define REQ_PREFILL CBLLM_PHASE_PREFILL
#define REQ_DECODE CBLLM_PHASE_DECODE
#define REQ_PREEMPTED CBLLM_PHASE_PREEMPTED
#define REQ_SWAPPED CBLLM_PHASE_SWAPPED
#define REQ_FINISHED CBLLM_PHASE_FINISHED

/* What padded static batching (CBLLM_BATCH_STATIC_PADDED, sched_static.c) keeps of a request. */
typedef struct req_static
{
	int			pad_owed;		/* prompt positions still to compute again, standing for the
								 * padding up to the batch's longest prompt; -1 while the
								 * scheduler is still sizing it */
	bool		lingering;		/* ended, computed on until its batch's last sequence ends */
	int			linger_tokens;	/* n_tokens when it ended: the tokens past it are not output */
	cbllm_finish linger_finish; /* how it ended, delivered when the batch ends */
} req_static;

typedef struct cbllm_request
{
	int64_t		id;
	req_state	state;
	int64_t		arrival;		/* submission order */
	double		t_submit;		/* engine_now() at submit */
	double		t_admitted;		/* engine_now() at first admission */
	bool		admitted;		/* admitted at least once (t_admitted is set) */
	int			n_preemptions;	/* times it was preempted */
	double		rank;			/* priority - priority_aging * t_submit: its queue order for life */
	uint64_t	cache_salt;		/* prefix-cache scope: blocks are shared only within one salt */
	uint64_t	tenant;			/* fair-share group (cbllm_request_input.tenant) */
	uint64_t	plan_mark;		/* the scheduler's plan number when it was last put in a plan */
	int32_t    *tokens;			/* (cap_tokens) prompt, then generated tokens */
	int			n_tokens;
	int			cap_tokens;
	int			n_prompt;
	int			n_computed;		/* positions [0, n_computed) have KV in the cache (or, swapped, in
								 * swap space) */
	uint8_t		rope_set;		/* the RoPE factor set its KV is computed with (rope.h): 1, longrope's
								 * long factors, once it is longer than sched_limits.long_rope_from */
	block_table table;			/* its KV blocks, changed only by the block manager */
	struct engine_request *eng; /* the engine's part: its sampling, output text and constraint
								 * (engine/engine_internal.h); NULL in the scheduler's own tests */
	struct cbllm_request *leader;	/* waiting for this request to compute the prompt they share
									 * (share_prompt_with); NULL: free to be admitted */
	struct cbllm_request **followers;	/* (n_followers) requests waiting for this one's prompt */
	int			n_followers;
	req_static	stat;			/* padded static batching's bookkeeping (sched_static.c) */
	struct cbllm_request *prev; /* in the waiting or running list */
	struct cbllm_request *next;
	struct cbllm_request *hnext;	/* in the id hash chain */
} cbllm_request;

/* Whether r waits (QUEUED, PREEMPTED or SWAPPED). */
static inline bool
request_waiting(const cbllm_request *r)
{
	return r->state == REQ_QUEUED || r->state == REQ_PREEMPTED || r->state == REQ_SWAPPED;
}

/* Whether r runs (PREFILL or DECODE). */
static inline bool
request_running(const cbllm_request *r)
{
	return r->state == REQ_PREFILL || r->state == REQ_DECODE;
}

typedef struct req_list
{
	cbllm_request *head;
	cbllm_request *tail;
	int			n;
} req_list;

/*
 * Move r to state to (the table above).  The one place a state changes;
 * false, the state unchanged, for a move the table does not hold (a bug of
 * its caller, which the scheduler's tests count).
 */
bool		request_enter(cbllm_request *r, req_state to);

/* The running state of r by its tokens: PREFILL while more than its next token is to compute. */
req_state	request_running_state(const cbllm_request *r);

/* req_list operations; lists are kept in (rank desc, arrival asc) order */
void		req_list_insert(req_list *l, cbllm_request *r);
void		req_list_remove(req_list *l, cbllm_request *r);

/* Give back r's KV blocks; unless it is swapped out, its KV must then be recomputed. */
void		request_release_blocks(block_manager *bm, cbllm_request *r);

/* Give back r's swap blocks, if any; its KV is then gone. */
void		request_release_swap(block_manager *bm, cbllm_request *r);

/* Free a request that holds no blocks any more. */
void		request_free(cbllm_request *r);

/* Make r wait for leader's prompt (share_prompt_with); CBLLM_ERR_NOMEM when it cannot. */
int			request_follow(cbllm_request *r, cbllm_request *leader);

/* Let every request waiting for r's prompt go (it is computed, or r ended). */
void		request_release_followers(cbllm_request *r);

/* Stop r waiting for its leader (r ended first). */
void		request_unfollow(cbllm_request *r);


#endif
