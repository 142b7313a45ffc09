/*
 * sampler.c: token selection.  Sampling works on a candidate list: all
 * tokens, or the top k found by selection in linear time; softmax with the
 * temperature; for top-p, the smallest set of most likely tokens whose mass
 * reaches p.  Only tokens that can belong to that set are considered: those
 * with probability below (1 - p) / n together weigh less than 1 - p, so the
 * set lies among the others; then histograms narrow the sort to a handful.
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HIST_BUCKETS 256

typedef struct cand
{
	float		p;				/* logit, then probability */
	int32_t		id;
} cand;

struct cbllm_sampler
{
	int			vocab;
	cand	   *c;				/* (vocab) candidates */
	cand	   *tmp;			/* (vocab) */
};

/* Allocate candidate buffers for a vocabulary. */
int
sampler_create(int vocab_size, cbllm_sampler **out, cbllm_err *err)
{
	cbllm_sampler *s = calloc(1, sizeof(*s));

	if (s == NULL || (s->c = malloc(sizeof(cand) * vocab_size)) == NULL ||
		(s->tmp = malloc(sizeof(cand) * vocab_size)) == NULL)
	{
		sampler_free(s);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	s->vocab = vocab_size;
	*out = s;
	return CBLLM_OK;
}

void
sampler_free(cbllm_sampler *s)
{
	if (s == NULL)
		return;
	free(s->c);
	free(s->tmp);
	free(s);
}

/* The index of the largest logit, the first of equals; NaN never wins. */
int32_t
sampler_argmax(const float *logits, int n)
{
	int32_t		best = 0;

	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i])))
			best = i;
	return best;
}

/* Descending probability, then ascending id: a total order. */
static int
CandCmp(const void *a, const void *b)
{
	const cand *x = a,
			   *y = b;

	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Keep the k largest candidates (by value, ties by id) at the front of c[0..n); returns k. */
static int
SelectTopK(cand *c, int n, int k)
{
	int			lo = 0,
				hi = n - 1;

	/* quickselect: partition until position k-1 holds the k-th candidate */
	while (lo < hi)
	{
		cand		pivot = c[(lo + hi) / 2];
		int			i = lo,
					j = hi;

		while (i <= j)
		{
			while (CandCmp(&c[i], &pivot) < 0)
				i++;
			while (CandCmp(&c[j], &pivot) > 0)
				j--;
			if (i <= j)
			{
				cand		t = c[i];

				c[i++] = c[j];
				c[j--] = t;
			}
		}
		if (k - 1 <= j)
			hi = j;
		else if (k - 1 >= i)
			lo = i;
		else
			break;
	}
	return k;
}

/* Bucket of probability p in a histogram of HIST_BUCKETS over [lo, hi]. */
static inline int
Bucket(float p, double lo, double hi)
{
	int			b = (int) ((p - lo) / (hi - lo) * HIST_BUCKETS);

	return b < 0 ? 0 : b >= HIST_BUCKETS ? HIST_BUCKETS - 1 : b;
}

/*
 * Reduce c[0..n) (probabilities summing to total) to the top-p nucleus;
 * returns its size.  The nucleus is every token above a threshold plus, from
 * the tokens at the threshold, the most likely ones until the mass reaches
 * top_p.  The threshold is found by histograms that zoom into the bucket
 * where the mass from the top crosses top_p, so only a handful of tokens are
 * ever sorted, even for a nearly flat distribution.
 */
static int
Nucleus(cbllm_sampler *s, cand *c, int n, double total, float top_p)
{
	double		need = top_p * total;
	double		lo = (1.0 - top_p) * total / n;	/* below this a token cannot be in it */
	double		hi = 0,
				mass = 0;			/* mass of the tokens already kept */
	int			m = 0,
				kept = 0;
	cand	   *t = s->tmp;

	for (int i = 0; i < n; i++)
		if (c[i].p >= lo)
		{
			t[m++] = c[i];
			hi = c[i].p > hi ? c[i].p : hi;
		}
	/* t[0..m) are the undecided tokens, all with p in [lo, hi] */
	while (m > 64 && hi > lo)
	{
		double		bmass[HIST_BUCKETS] = {0};
		int			cross,
					k = 0,
					moved = 0;

		for (int i = 0; i < m; i++)
			bmass[Bucket(t[i].p, lo, hi)] += t[i].p;
		for (cross = HIST_BUCKETS - 1; cross > 0 && mass + bmass[cross] < need; cross--)
			mass += bmass[cross];
		/* keep buckets above the crossing one, leave only the crossing bucket undecided */
		for (int i = 0; i < m; i++)
		{
			int			b = Bucket(t[i].p, lo, hi);

			if (b > cross)
				c[kept++] = t[i];
			else if (b == cross)
				t[k++] = t[i];
		}
		moved = m - k;
		m = k;
		{
			double		nlo = lo + (hi - lo) * cross / HIST_BUCKETS;
			double		nhi = lo + (hi - lo) * (cross + 1) / HIST_BUCKETS;

			if (moved == 0 && nhi - nlo >= hi - lo)
				break;			/* no progress: equal probabilities */
			lo = nlo;
			hi = nhi;
		}
	}
	qsort(t, m, sizeof(cand), CandCmp);
	for (int i = 0; i < m && mass < need; i++)
	{
		mass += t[i].p;
		c[kept++] = t[i];
	}
	return kept > 0 ? kept : 1;
}

/* Choose a token: greedy when temperature is 0, else sample from the filtered softmax. */
int32_t
sampler_sample(cbllm_sampler *s, const float *logits, const sampler_params *p, cbllm_rng *rng)
{
	cand	   *c = s->c;
	int			n = s->vocab;
	float		mx = -INFINITY;
	double		total = 0,
				r;

	if (p->temperature <= 0 || p->top_k == 1)
		return sampler_argmax(logits, n);
	for (int i = 0; i < n; i++)
	{
		c[i].p = isnan(logits[i]) ? -INFINITY : logits[i];
		c[i].id = i;
	}
	if (p->top_k > 0 && p->top_k < n)
		n = SelectTopK(c, n, p->top_k);
	for (int i = 0; i < n; i++)
		if (c[i].p > mx)
			mx = c[i].p;
	if (!isfinite(mx))
		return sampler_argmax(logits, s->vocab);
	for (int i = 0; i < n; i++)
	{
		c[i].p = expf((c[i].p - mx) / p->temperature);
		total += c[i].p;
	}
	if (p->top_p < 1.0f)
	{
		n = Nucleus(s, c, n, total, p->top_p);
		total = 0;
		for (int i = 0; i < n; i++)
			total += c[i].p;
	}
	r = rng_uniform(rng) * total;
	for (int i = 0; i < n; i++)
	{
		r -= c[i].p;
		if (r < 0)
			return c[i].id;
	}
	/* rounding left r >= 0: the last candidate that has any mass */
	for (int i = n - 1; i > 0; i--)
		if (c[i].p > 0)
			return c[i].id;
	return c[0].id;
}
