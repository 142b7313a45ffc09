/*
 * regex_minimise.c: the last passes of the regex back end (regex_dfa.c) over
 * the subset construction's table: prune (a breadth-first search over
 * reversed edges from the accepting states gives each state its distance to
 * a match; states without one are dropped) and minimise (Hopcroft's
 * partition refinement, starting from the partition by distance, since
 * equivalent states have equal distances).
 */
#include "constrain/regex_dfa_internal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Free t's arrays and empty it. */
void
regex_table_free(table *t)
{
	free(t->next);
	free(t->accept);
	free(t->dist);
	memset(t, 0, sizeof(*t));
}

/* Allocate t's arrays for n states of k columns. */
static bool
TableAlloc(table *t, int32_t n, int32_t k)
{
	t->n = n;
	t->k = k;
	t->next = malloc(sizeof(int32_t) * (size_t) n * k);
	t->accept = malloc(n);
	t->dist = malloc(sizeof(int32_t) * n);
	return t->next != NULL && t->accept != NULL && t->dist != NULL;
}

/* The target of t's edge (s, c), or -1 where it is missing or repeats that of column c - 1. */
static inline int32_t
NewEdge(const table *t, int32_t s, int32_t c)
{
	const int32_t *row = t->next + (size_t) s * t->k;

	return c > 0 && row[c] == row[c - 1] ? -1 : row[c];
}

/* Each state's distance to an accepting state (-1: none), by a search over reversed edges. */
static int
Distances(const table *t, int32_t *dist, cbllm_err *err)
{
	int32_t    *first = calloc((size_t) t->n + 1, sizeof(int32_t));
	int32_t    *from = NULL;
	int32_t    *queue = malloc(sizeof(int32_t) * t->n);
	int64_t		m = 0;
	int32_t		head = 0,
				tail = 0,
				x;

	for (int32_t s = 0; first != NULL && s < t->n; s++)
		for (int32_t c = 0; c < t->k; c++)
			if ((x = NewEdge(t, s, c)) >= 0)
				first[x + 1]++, m++;
	if (first == NULL || queue == NULL || (from = malloc(sizeof(int32_t) * (m + 1))) == NULL)
	{
		free(first);
		free(queue);
		return regex_nomem(err);
	}
	for (int32_t s = 0; s < t->n; s++)
		first[s + 1] += first[s];
	for (int32_t s = 0; s < t->n; s++)
		for (int32_t c = 0; c < t->k; c++)
			if ((x = NewEdge(t, s, c)) >= 0)
				from[first[x]++] = s;
	for (int32_t s = t->n; s > 0; s--)	/* first[s] was moved to the end of s's edges */
		first[s] = first[s - 1];
	first[0] = 0;
	for (int32_t s = 0; s < t->n; s++)
		if ((dist[s] = t->accept[s] ? 0 : -1) == 0)
			queue[tail++] = s;
	while (head < tail)
	{
		int32_t		s = queue[head++];

		for (int32_t i = first[s]; i < first[s + 1]; i++)
			if (dist[from[i]] < 0)
				dist[from[i]] = dist[s] + 1, queue[tail++] = from[i];
	}
	free(first);
	free(from);
	free(queue);
	return CBLLM_OK;
}

/* Keep the states of t that reach a match (the start must be one), in place; t->dist is set. */
int
regex_prune(table *t, cbllm_err *err)
{
	int32_t    *id = malloc(sizeof(int32_t) * t->n);
	int32_t		n = 0;
	int			rc = CBLLM_OK;

	if ((t->dist = malloc(sizeof(int32_t) * t->n)) == NULL || id == NULL ||
		(rc = Distances(t, t->dist, err)) < 0)
		rc = rc < 0 ? rc : regex_nomem(err);
	else if (t->n == 0 || t->dist[0] < 0)	/* t->n is at least 1 (the start): said for the compiler */
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "regex: the pattern matches nothing");
	for (int32_t s = 0; rc == CBLLM_OK && s < t->n; s++)
		id[s] = t->dist[s] >= 0 ? n++ : -1;
	for (int32_t s = 0; rc == CBLLM_OK && s < t->n; s++)	/* id[s] <= s: rows move up */
	{
		if (id[s] < 0)
			continue;
		for (int32_t c = 0; c < t->k; c++)
		{
			int32_t		x = t->next[(size_t) s * t->k + c];

			t->next[(size_t) id[s] * t->k + c] = x >= 0 ? id[x] : -1;
		}
		t->accept[id[s]] = t->accept[s];
		t->dist[id[s]] = t->dist[s];
	}
	if (rc == CBLLM_OK)
		t->n = n;
	free(id);
	return rc;
}

/*
 * Hopcroft's partition refinement over a table's states.  Blocks are runs
 * of elems; the marked states of a block are moved to its front.  Missing
 * transitions go to an implicit dead state that is never a splitter (all
 * the other blocks are), which is enough.
 */
typedef struct refiner
{
	int32_t    *elems;			/* (n) the states, each block's contiguous */
	int32_t    *loc;			/* (n) the position of each state in elems */
	int32_t    *blk;			/* (n) the block of each state */
	int32_t    *first;			/* (n) per block: its first position in elems */
	int32_t    *end;			/* (n) per block: one past its last */
	int32_t    *marked;			/* (n) per block: how many of its states are marked */
	int32_t    *work;			/* (n) blocks still to split the others by */
	int32_t    *touched;		/* (n) blocks with marked states */
	int32_t    *in_first;		/* (n + 1) where each state's incoming edges start */
	int32_t    *in_src;			/* (m) the source of each incoming edge, */
	uint8_t    *in_cls;			/* (m) and its class */
	int32_t    *group;			/* (m) a splitter's predecessors, grouped by class */
	int32_t    *snap;			/* (n) a splitter's states */
	int32_t		nb;				/* blocks */
	int32_t		n_work;
} refiner;

/* Free r's arrays. */
static void
RefinerFree(refiner *r)
{
	free(r->elems);
	free(r->loc);
	free(r->blk);
	free(r->first);
	free(r->end);
	free(r->marked);
	free(r->work);
	free(r->touched);
	free(r->in_first);
	free(r->in_src);
	free(r->in_cls);
	free(r->group);
	free(r->snap);
}

/* Allocate r for t and fill the incoming edges and the partition by distance; false when out of memory. */
static bool
RefinerInit(refiner *r, const table *t)
{
	size_t		n = (size_t) t->n;
	int64_t		m = 0;

	for (size_t x = 0; x < n * t->k; x++)
		m += t->next[x] >= 0;
	r->elems = malloc(sizeof(int32_t) * n), r->loc = malloc(sizeof(int32_t) * n);
	r->blk = malloc(sizeof(int32_t) * n), r->first = calloc(n + 1, sizeof(int32_t));
	r->end = malloc(sizeof(int32_t) * n), r->marked = calloc(n, sizeof(int32_t));
	r->work = malloc(sizeof(int32_t) * n), r->touched = malloc(sizeof(int32_t) * n);
	r->in_first = calloc(n + 1, sizeof(int32_t)), r->snap = malloc(sizeof(int32_t) * n);
	r->in_src = malloc(sizeof(int32_t) * (m + 1)), r->in_cls = malloc(m + 1);
	r->group = malloc(sizeof(int32_t) * (m + 1));
	if (!r->elems || !r->loc || !r->blk || !r->first || !r->end || !r->marked || !r->work ||
		!r->touched || !r->in_first || !r->snap || !r->in_src || !r->in_cls || !r->group)
		return false;
	for (size_t x = 0; x < n * t->k; x++)
		if (t->next[x] >= 0)
			r->in_first[t->next[x] + 1]++;
	for (size_t s = 0; s < n; s++)
		r->in_first[s + 1] += r->in_first[s];
	for (size_t x = 0; x < n * t->k; x++)	/* loc counts the edges placed per target for now */
		if (t->next[x] >= 0)
		{
			int32_t		e = r->in_first[t->next[x]] + r->marked[t->next[x]]++;

			r->in_src[e] = (int32_t) (x / t->k);
			r->in_cls[e] = (uint8_t) (x % t->k);
		}
	memset(r->marked, 0, sizeof(int32_t) * n);
	/* the blocks of equal distance, by a counting sort (distances are below n; marked counts) */
	for (size_t s = 0; s < n; s++)
		r->first[t->dist[s] + 1]++;
	for (size_t d = 0; d < n; d++)
		r->first[d + 1] += r->first[d];
	for (size_t s = 0; s < n; s++)
	{
		int32_t		d = t->dist[s];

		r->loc[s] = r->first[d] + r->marked[d]++;
		r->elems[r->loc[s]] = (int32_t) s;
	}
	for (size_t d = 0; d < n; d++)	/* block nb <= d: first[nb] is read as a start no more */
		if (r->marked[d] > 0)
		{
			r->end[r->nb] = r->first[d] + r->marked[d];
			r->first[r->nb] = r->first[d];
			r->marked[d] = 0;
			r->work[r->n_work++] = r->nb++;
		}
	for (int32_t b = 0; b < r->nb; b++)
		for (int32_t i = r->first[b]; i < r->end[b]; i++)
			r->blk[r->elems[i]] = b;
	return true;
}

/* Mark the states list[0..n) and split each block they partly fill; the smaller part is a new block. */
static void
SplitBy(refiner *r, const int32_t *list, int32_t n)
{
	int32_t		n_touched = 0;

	for (int32_t i = 0; i < n; i++)
	{
		int32_t		s = list[i],
					b = r->blk[s],
					j = r->first[b] + r->marked[b],
					o = r->elems[j];

		if (r->loc[s] < j)
			continue;			/* marked already */
		r->elems[r->loc[s]] = o, r->loc[o] = r->loc[s];
		r->elems[j] = s, r->loc[s] = j;
		if (r->marked[b]++ == 0)
			r->touched[n_touched++] = b;
	}
	for (int32_t i = 0; i < n_touched; i++)
	{
		int32_t		b = r->touched[i],
					m = r->marked[b],
					size = r->end[b] - r->first[b],
					nb = r->nb;

		r->marked[b] = 0;
		if (m == size)
			continue;
		if (m <= size - m)
			r->first[nb] = r->first[b], r->end[nb] = r->first[b] + m, r->first[b] += m;
		else
			r->first[nb] = r->first[b] + m, r->end[nb] = r->end[b], r->end[b] = r->first[b] + m;
		r->marked[nb] = 0;
		for (int32_t j = r->first[nb]; j < r->end[nb]; j++)
			r->blk[r->elems[j]] = nb;
		r->work[r->n_work++] = nb;
		r->nb++;
	}
}

/* Refine until no block splits another: the blocks are then the classes of equivalent states. */
static void
Refine(refiner *r, int32_t k)
{
	int32_t		count[256],
				pos[256];

	while (r->n_work > 0)
	{
		int32_t		b = r->work[--r->n_work],
					ns = r->end[b] - r->first[b],
					total = 0;

		memcpy(r->snap, r->elems + r->first[b], sizeof(int32_t) * ns);
		memset(count, 0, sizeof(int32_t) * k);
		for (int32_t i = 0; i < ns; i++)
			for (int32_t e = r->in_first[r->snap[i]]; e < r->in_first[r->snap[i] + 1]; e++)
				count[r->in_cls[e]]++;
		for (int32_t c = 0; c < k; c++)
			pos[c] = total, total += count[c];
		for (int32_t i = 0; i < ns; i++)
			for (int32_t e = r->in_first[r->snap[i]]; e < r->in_first[r->snap[i] + 1]; e++)
				r->group[pos[r->in_cls[e]]++] = r->in_src[e];
		for (int32_t c = 0; c < k; c++)
			if (count[c] > 0)
				SplitBy(r, r->group + pos[c] - count[c], count[c]);
	}
}

/* Merge the equivalent states of t; blocks are renumbered in the order of their first state (start 0). */
int
regex_minimise(table *t, cbllm_err *err)
{
	refiner		r = {0};
	table		m = {0};
	int32_t    *id = NULL;
	int32_t		n = 0;
	int			rc = CBLLM_OK;

	if (!RefinerInit(&r, t) || (id = malloc(sizeof(int32_t) * t->n)) == NULL)
		rc = regex_nomem(err);
	if (rc == CBLLM_OK)
		Refine(&r, t->k);
	if (rc == CBLLM_OK && r.nb < t->n)
	{
		for (int32_t b = 0; b < r.nb; b++)
			id[b] = -1;
		for (int32_t s = 0; s < t->n; s++)
			if (id[r.blk[s]] < 0)
				id[r.blk[s]] = n++;
		if (!TableAlloc(&m, n, t->k))
			rc = regex_nomem(err);
		for (int32_t s = t->n - 1; rc == CBLLM_OK && s >= 0; s--)	/* any state of a block will do */
		{
			int32_t		b = id[r.blk[s]];

			for (int32_t c = 0; c < t->k; c++)
			{
				int32_t		x = t->next[(size_t) s * t->k + c];

				m.next[(size_t) b * t->k + c] = x < 0 ? -1 : id[r.blk[x]];
			}
			m.accept[b] = t->accept[s];
			m.dist[b] = t->dist[s];
		}
		if (rc == CBLLM_OK)
		{
			regex_table_free(t);
			*t = m;
		}
		else
			regex_table_free(&m);
	}
	free(id);
	RefinerFree(&r);
	return rc;
}
