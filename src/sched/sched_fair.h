/*
 * sched_fair.h: fair shares between tenants, for the scheduler.
 *
 * A tenant is a group of requests that must not take the engine from the
 * others (the PostgreSQL worker makes each role one).  While requests of
 * several tenants wait or run, each tenant's fair share of the running
 * sequences is max_num_seqs divided by the tenants that have work, and the
 * step's candidates are visited in turn across tenants: every tenant's
 * first candidate, then every tenant's second, ... (within a round the
 * tenants running fewer requests first; within a tenant running ones before
 * waiting ones, each in rank order).  With one tenant that order is the
 * scheduler's plain order: running, then waiting, by rank.
 *
 * This file only counts and orders; scheduler.c decides and preempts.
 */
#ifndef CBLLM_SCHED_FAIR_H
#define CBLLM_SCHED_FAIR_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/request.h"

/* One tenant's requests in the queues. */
typedef struct sched_tenant
{
	uint64_t	id;
	int			running;		/* requests in the running list */
	int			waiting;		/* requests in the waiting list that could be admitted (no leader) */
	int			visits;			/* candidates of it placed so far while ordering */
} sched_tenant;

/* One candidate of the step, as the fair order visits it. */
typedef struct sched_candidate
{
	cbllm_request *req;
	bool		running;		/* it was running when the order was made */
} sched_candidate;

typedef struct sched_fair
{
	sched_tenant *tenants;		/* (cap_tenants) the tenants with requests, n_tenants of them */
	int			n_tenants;
	int			cap_tenants;
	sched_candidate *order;		/* (cap_order) the step's candidates in fair order */
	int			n_order;
	int			cap_order;
} sched_fair;

void		sched_fair_free(sched_fair *f);

/*
 * Count the tenants of the running and waiting lists; returns how many
 * there are, or -1 when out of memory (the caller then plans without
 * fairness).
 */
int			sched_fair_count(sched_fair *f, const req_list *running, const req_list *waiting);

/* The entry of tenant id (NULL: none has requests), after sched_fair_count. */
sched_tenant *sched_fair_tenant(sched_fair *f, uint64_t id);

/* Each tenant's fair share of max_num_seqs running sequences (at least 1), after sched_fair_count. */
int			sched_fair_share(const sched_fair *f, int max_num_seqs);

/*
 * The tenant running the most requests above share, not counting skip
 * (NULL: none runs more than share).
 */
sched_tenant *sched_fair_most_over(sched_fair *f, int share, const sched_tenant *skip);

/*
 * Build f->order from the running and waiting lists (after
 * sched_fair_count): round by round across tenants, see above.  Returns
 * false when out of memory.
 */
bool		sched_fair_order(sched_fair *f, const req_list *running, const req_list *waiting);

#endif
