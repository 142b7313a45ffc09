/*
 * sched_fair.c: tenants' counts, fair shares and the fair visiting order
 * (sched_fair.h).  A handful of tenants is the common case, so tenants are
 * found by a linear search.
 */
#include <stdlib.h>

#include "sched/sched_fair.h"

/* Free f's arrays. */
void
sched_fair_free(sched_fair *f)
{
	free(f->tenants);
	free(f->order);
	f->tenants = NULL;
	f->order = NULL;
	f->n_tenants = f->cap_tenants = f->n_order = f->cap_order = 0;
}

/* The entry of tenant id, or NULL when it has none. */
sched_tenant *
sched_fair_tenant(sched_fair *f, uint64_t id)
{
	for (int i = 0; i < f->n_tenants; i++)
		if (f->tenants[i].id == id)
			return &f->tenants[i];
	return NULL;
}

/* The entry of tenant id, added when new; NULL when out of memory. */
static sched_tenant *
TenantFor(sched_fair *f, uint64_t id)
{
	sched_tenant *t = sched_fair_tenant(f, id);

	if (t != NULL)
		return t;
	if (f->n_tenants == f->cap_tenants)
	{
		int			cap = f->cap_tenants > 0 ? 2 * f->cap_tenants : 8;
		sched_tenant *grown = realloc(f->tenants, sizeof(sched_tenant) * cap);

		if (grown == NULL)
			return NULL;
		f->tenants = grown;
		f->cap_tenants = cap;
	}
	t = &f->tenants[f->n_tenants++];
	t->id = id;
	t->running = t->waiting = t->visits = 0;
	return t;
}

/* Count the tenants of both lists. */
int
sched_fair_count(sched_fair *f, const req_list *running, const req_list *waiting)
{
	f->n_tenants = 0;
	for (const cbllm_request *r = running->head; r != NULL; r = r->next)
	{
		sched_tenant *t = TenantFor(f, r->tenant);

		if (t == NULL)
			return -1;
		t->running++;
	}
	for (const cbllm_request *r = waiting->head; r != NULL; r = r->next)
	{
		sched_tenant *t = TenantFor(f, r->tenant);

		if (t == NULL)
			return -1;
		t->waiting += r->leader == NULL;
	}
	return f->n_tenants;
}

/* max_num_seqs over the tenants with work, at least 1. */
int
sched_fair_share(const sched_fair *f, int max_num_seqs)
{
	int			share = f->n_tenants > 0 ? max_num_seqs / f->n_tenants : max_num_seqs;

	return share > 0 ? share : 1;
}

/* The tenant with the most running requests above share, other than skip. */
sched_tenant *
sched_fair_most_over(sched_fair *f, int share, const sched_tenant *skip)
{
	sched_tenant *best = NULL;

	for (int i = 0; i < f->n_tenants; i++)
	{
		sched_tenant *t = &f->tenants[i];

		if (t != skip && t->running > share && (best == NULL || t->running > best->running))
			best = t;
	}
	return best;
}

/*
 * A candidate with its round (its place within its tenant), its tenant's
 * running requests (fewer go first within a round) and its place in list
 * order.
 */
typedef struct Keyed
{
	int			round;
	int			load;
	int			seq;
	sched_candidate c;
} Keyed;

static int
CompareKeyed(const void *a, const void *b)
{
	const Keyed *x = a,
			   *y = b;

	if (x->round != y->round)
		return x->round < y->round ? -1 : 1;
	if (x->load != y->load)
		return x->load < y->load ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Append r to keys[*n] with its tenant's next round. */
static void
AddKeyed(sched_fair *f, Keyed *keys, int *n, cbllm_request *r, bool running)
{
	sched_tenant *t = sched_fair_tenant(f, r->tenant);	/* counted: never NULL */

	keys[*n].round = t->visits++;
	keys[*n].load = t->running;
	keys[*n].seq = *n;
	keys[*n].c.req = r;
	keys[*n].c.running = running;
	(*n)++;
}

/* Order the candidates round by round across tenants (sched_fair.h). */
bool
sched_fair_order(sched_fair *f, const req_list *running, const req_list *waiting)
{
	int			total = running->n + waiting->n,
				n = 0;
	Keyed	   *keys;

	f->n_order = 0;
	if (total == 0)
		return true;
	if (total > f->cap_order)
	{
		sched_candidate *grown = realloc(f->order, sizeof(sched_candidate) * total);

		if (grown == NULL)
			return false;
		f->order = grown;
		f->cap_order = total;
	}
	keys = malloc(sizeof(Keyed) * total);
	if (keys == NULL)
		return false;
	for (int i = 0; i < f->n_tenants; i++)
		f->tenants[i].visits = 0;
	for (cbllm_request *r = running->head; r != NULL; r = r->next)
		AddKeyed(f, keys, &n, r, true);
	for (cbllm_request *r = waiting->head; r != NULL; r = r->next)
		AddKeyed(f, keys, &n, r, false);
	qsort(keys, n, sizeof(Keyed), CompareKeyed);
	for (int i = 0; i < n; i++)
		f->order[i] = keys[i].c;
	f->n_order = n;
	free(keys);
	return true;
}
