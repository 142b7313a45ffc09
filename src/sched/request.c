/*
 * request.c: a request's place in the scheduler's queues and what it holds
 * there: the ordered lists, its blocks and swap blocks given back, the
 * requests that wait for its prompt, and its memory freed at the end.  The
 * engine's part of a request's life (made from a caller's input, its tokens
 * and output text) is in engine/engine_request.c.
 */
#include <stdlib.h>

#include "sched/request.h"
/* True when a runs before b: higher rank (effective priority), then earlier arrival. */
static inline bool
RunsBefore(const cbllm_request *a, const cbllm_request *b)
{
	return a->rank != b->rank ? a->rank > b->rank : a->arrival < b->arrival;
}

/* Insert r in (rank desc, arrival asc) order, searching from the back. */
void
req_list_insert(req_list *l, cbllm_request *r)
{
	cbllm_request *after = l->tail;

	while (after != NULL && RunsBefore(r, after))
		after = after->prev;
	r->prev = after;
	r->next = after ? after->next : l->head;
	if (r->next)
		r->next->prev = r;
	else
		l->tail = r;
	if (after)
		after->next = r;
	else
		l->head = r;
	l->n++;
}

/* Unlink r from l. */
void
req_list_remove(req_list *l, cbllm_request *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		l->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		l->tail = r->prev;
	r->prev = r->next = NULL;
	l->n--;
}

/* Free a request that holds no blocks any more (its engine part must be gone: engine_request_free). */
void
request_free(cbllm_request *r)
{
	if (r == NULL)
		return;
	request_unfollow(r);
	request_release_followers(r);
	free(r->followers);
	free(r->tokens);
	bm_table_free(&r->table);
	free(r);
}

/* Return every block of r to the pool; unless it is swapped out, its KV must be recomputed. */
void
request_release_blocks(block_manager *bm, cbllm_request *r)
{
	bm_release_table(bm, &r->table);
	if (!r->table.swapped)
		r->n_computed = 0;
}

/* Make r wait for leader's prompt. */
int
request_follow(cbllm_request *r, cbllm_request *leader)
{
	cbllm_request **f = realloc(leader->followers, sizeof(*f) * (leader->n_followers + 1));

	if (f == NULL)
		return CBLLM_ERR_NOMEM;
	leader->followers = f;
	f[leader->n_followers++] = r;
	r->leader = leader;
	return CBLLM_OK;
}

/* Let r's followers go. */
void
request_release_followers(cbllm_request *r)
{
	for (int i = 0; i < r->n_followers; i++)
		r->followers[i]->leader = NULL;
	r->n_followers = 0;
}

/* Take r off its leader's list. */
void
request_unfollow(cbllm_request *r)
{
	cbllm_request *l = r->leader;

	if (l == NULL)
		return;
	for (int i = 0; i < l->n_followers; i++)
		if (l->followers[i] == r)
		{
			l->followers[i] = l->followers[--l->n_followers];
			break;
		}
	r->leader = NULL;
}

/* Return r's swap blocks, if any; its KV is then gone. */
void
request_release_swap(block_manager *bm, cbllm_request *r)
{
	if (!r->table.swapped)
		return;
	bm_release_swap(bm, &r->table);
	r->n_computed = 0;
}

/* The moves request_enter allows, by state (request.h): a bit per state a request may enter. */
static const unsigned ALLOWED[] = {
	[REQ_QUEUED] = 1u << REQ_PREFILL | 1u << REQ_DECODE | 1u << REQ_FINISHED,
	[REQ_PREFILL] = 1u << REQ_PREFILL | 1u << REQ_DECODE | 1u << REQ_PREEMPTED | 1u << REQ_SWAPPED |
	1u << REQ_FINISHED,
	[REQ_DECODE] = 1u << REQ_DECODE | 1u << REQ_PREFILL | 1u << REQ_PREEMPTED | 1u << REQ_SWAPPED |
	1u << REQ_FINISHED,
	[REQ_PREEMPTED] = 1u << REQ_PREFILL | 1u << REQ_DECODE | 1u << REQ_FINISHED,
	[REQ_SWAPPED] = 1u << REQ_PREFILL | 1u << REQ_DECODE | 1u << REQ_PREEMPTED | 1u << REQ_FINISHED,
	[REQ_FINISHED] = 0,
};

/* Move r to state to, when the table allows it. */
bool
request_enter(cbllm_request *r, req_state to)
{
	if ((unsigned) r->state >= sizeof(ALLOWED) / sizeof(ALLOWED[0]) || (ALLOWED[r->state] & (1u << to)) == 0)
		return false;
	r->state = to;
	return true;
}

/* PREFILL while more than r's next token is still to compute, else DECODE. */
req_state
request_running_state(const cbllm_request *r)
{
	return r->n_tokens - r->n_computed > 1 ? REQ_PREFILL : REQ_DECODE;
}
