/*
 * sampler.c: token selection.  A sampled token costs a few passes over the
 * logits that the compiler vectorises (the largest logit, then the scaled
 * exponentials and their sum) and radix histograms instead of sorts:
 *
 *   top-k   the k largest logits: one histogram of counts over the top bits
 *           of each logit's order-preserving key finds the bucket holding
 *           the k-th largest; only the tokens at or above it are gathered,
 *           and a quickselect among those keeps exactly k;
 *   top-p   the smallest set of most likely tokens whose mass reaches p: a
 *           histogram of masses over the bits of each probability (8 bits of
 *           exponent and 3 of mantissa, then the next 11 bits, then the
 *           last 9) finds the bucket where the mass counted from the top
 *           crosses p; tokens above it are kept, the ones in it go to the
 *           next level, and the few left at the end are sorted.
 *
 * The order among tokens is a total one: larger probability (or logit)
 * first, then smaller id.  Nothing is allocated per call.
 */
#include "base/vec_math.h"
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HIST_BITS 11
#define SUM_BLOCK 256			/* probabilities per block sum: the draw skips whole blocks */
#define HIST_BUCKETS (1 << HIST_BITS)
#define SORT_BELOW 64			/* undecided tokens fewer than this are sorted */
#define BAND_MOST 16384			/* top-p threshold passes narrow the band to this many tokens */

typedef struct cand
{
	float		p;				/* logit, then probability */
	int32_t		id;
} cand;

struct cbllm_sampler
{
	int			vocab;
	float	   *prob;			/* (vocab) exp((logit - max) / temperature) of every token */
	double	   *bsum;			/* (vocab / SUM_BLOCK rounded up) sums of blocks of prob */
	cand	   *c;				/* (vocab) candidates */
	cand	   *tmp;			/* (vocab) */
	double		mass[HIST_BUCKETS]; /* probability mass per bucket of the histogram being built */
};

/* Allocate candidate buffers for a vocabulary. */
int
sampler_create(int vocab_size, cbllm_sampler **out, cbllm_err *err)
{
	cbllm_sampler *s = calloc(1, sizeof(*s));

	if (s == NULL || (s->c = malloc(sizeof(cand) * vocab_size)) == NULL ||
		(s->tmp = malloc(sizeof(cand) * vocab_size)) == NULL ||
		(s->prob = malloc(sizeof(float) * vocab_size)) == NULL ||
		(s->bsum = malloc(sizeof(double) * (vocab_size / SUM_BLOCK + 1))) == NULL)
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
	free(s->prob);
	free(s->bsum);
	free(s);
}

/*
 * The passes over the whole vocabulary use vec_math.h's sixteen-lane types,
 * compiled for AVX-512, AVX2 and plain x86-64 (chosen at load by the C
 * library); every version gives the same results bit for bit.
 */
/* The largest logit, NaN skipped (-inf when every one is NaN or -inf). */
static VEC_CLONES float
LogitsMax(const float *l, int n)
{
	return MaxV(l, n);
}

/* The first index i < n with l[i] == v, or n. */
static VEC_CLONES int
FindFirst(const float *l, int n, float v)
{
	int			i = 0;

	for (; i + VL <= n; i += VL)
	{
		if (AnyV(LoadV(l + i) == v))
			break;
	}
	for (; i < n; i++)
		if (l[i] == v)
			return i;
	return n;
}

/* The index of the largest logit, the first of equals; NaN never wins. */
int32_t
sampler_argmax(const float *logits, int n)
{
	float		mx = LogitsMax(logits, n);
	int32_t		best = 0;

	if (mx > -INFINITY)
		return FindFirst(logits, n, mx);
	/* every logit is -inf or NaN: the first -inf, or 0 */
	for (int i = 1; i < n; i++)
		if (isnan(logits[best]) && !isnan(logits[i]))
			best = i;
	return best;
}

/* exp(x) for x <= 0 as the sampler computes it. */
float
sampler_exp_nonpositive(float x)
{
	return ExpNonPositive(x);
}

/*
 * prob[i] = exp((l[i] - mx) * inv_t) for i < n, and the sum of each block
 * of SUM_BLOCK of them into bsum (sixteen lane sums added in lane order).
 */
static VEC_CLONES void
ExpScaled(const float *l, int n, float mx, float inv_t, float *prob, double *bsum)
{
	for (int b = 0; b * SUM_BLOCK < n; b++)
	{
		int			i = b * SUM_BLOCK,
					end = i + SUM_BLOCK < n ? i + SUM_BLOCK : n;
		vf16		acc = {0};
		double		sum = 0;

		for (; i + VL <= end; i += VL)
		{
			vf16		e = ExpV((LoadV(l + i) - mx) * inv_t);

			memcpy(prob + i, &e, sizeof(e));
			acc += e;
		}
		for (int j = 0; j < VL; j++)
			sum += acc[j];
		for (; i < end; i++)
			sum += prob[i] = ExpNonPositive((l[i] - mx) * inv_t);
		bsum[b] = sum;
	}
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

/*
 * For N_TH thresholds th[j] at once: count[j] = how many of x[0..n) are >=
 * th[j], and, when mass is not NULL, mass[j] = their sum (lane sums in
 * float over 256 values at a time, then in double: within 1e-5 of exact).
 * A comparison with NaN is false, so NaN is never counted.
 */
#define N_TH 16
#define FLUSH_EVERY 256

static VEC_CLONES void
CountAbove(const float *x, int n, const float *th, int64_t *count, double *mass)
{
	vi16		c[N_TH];
	vf16		m[N_TH];
	int			i = 0;

	for (int j = 0; j < N_TH; j++)
	{
		count[j] = 0;
		if (mass)
			mass[j] = 0;
	}
	while (i + VL <= n)
	{
		int			end = i + FLUSH_EVERY * VL < n ? i + FLUSH_EVERY * VL : n;

		for (int j = 0; j < N_TH; j++)
		{
			c[j] = (vi16) {0};
			m[j] = (vf16) {0};
		}
		if (mass)
			for (; i + VL <= end; i += VL)
			{
				vf16		v = LoadV(x + i);

				for (int j = 0; j < N_TH; j++)
				{
					vi16		ge = v >= th[j];

					c[j] -= ge;
					m[j] += (vf16) ((vi16) v & ge);
				}
			}
		else
			for (; i + VL <= end; i += VL)
			{
				vf16		v = LoadV(x + i);

				for (int j = 0; j < N_TH; j++)
					c[j] -= v >= th[j];
			}
		for (int j = 0; j < N_TH; j++)
			for (int l = 0; l < VL; l++)
			{
				count[j] += c[j][l];
				if (mass)
					mass[j] += m[j][l];
			}
	}
	for (; i < n; i++)
		for (int j = 0; j < N_TH; j++)
			if (x[i] >= th[j])
			{
				count[j]++;
				if (mass)
					mass[j] += x[i];
			}
}

/* The smallest finite logit (+inf when none is finite). */
static VEC_CLONES float
LogitsMinFinite(const float *l, int n)
{
	vf16		m = (vf16) {0} + INFINITY;
	float		best = INFINITY;
	int			i = 0;

	for (; i + VL <= n; i += VL)
	{
		vf16		x = LoadV(l + i);

		x = SelectV(x > -INFINITY, x, m);	/* -inf and NaN leave m as it is */
		m = SelectV(x < m, x, m);
	}
	for (int j = 0; j < VL; j++)
		best = m[j] < best ? m[j] : best;
	for (; i < n; i++)
		best = l[i] < best && l[i] > -INFINITY ? l[i] : best;
	return best;
}

/*
 * The k largest logits (ties by id) as candidates in s->c with their logits
 * (NaN as -inf); returns k.  Passes of N_TH thresholds between the smallest
 * finite logit and the largest (mx) narrow [lo, hi] while at least k lie at
 * or above lo, until few enough do; those are gathered and a quickselect
 * keeps k.  With fewer than k finite logits every token is a candidate.
 */
static int
TopKLogits(cbllm_sampler *s, const float *l, int n, int k, float mx)
{
	float		lo = LogitsMinFinite(l, n),
				hi = mx,
				th[N_TH];
	int64_t		count[N_TH],
				at_lo = -1;
	int			g = 0;
	cand	   *c = s->c;

	for (int pass = 0; pass < 4 && (at_lo < 0 || at_lo > 4 * k + 256) && lo < hi; pass++)
	{
		int			j;

		/* th descends from just below hi to lo */
		for (j = 0; j < N_TH; j++)
			th[j] = hi - (hi - lo) * (float) (j + 1) / N_TH;
		th[N_TH - 1] = lo;
		CountAbove(l, n, th, count, NULL);
		if (pass == 0 && count[N_TH - 1] < k)
			break;				/* fewer than k finite logits */
		for (j = 0; count[j] < k; j++)
			;
		if (j > 0)
			hi = th[j - 1];
		if (th[j] <= lo && at_lo >= 0)
			break;				/* no progress */
		lo = th[j];
		at_lo = count[j];
	}
	if (at_lo < k)
	{
		/* every token is a candidate */
		for (int i = 0; i < n; i++)
			c[g++] = (cand) {isnan(l[i]) ? -INFINITY : l[i], i};
	}
	else
		for (int i = 0; i < n; i++)
			if (l[i] >= lo)
				c[g++] = (cand) {l[i], i};
	return g > k ? SelectTopK(c, g, k) : g;
}

/* Bucket of probability p >= 0 at histogram level 0, 1 or 2 (bits 30-20, 19-9, 10-0). */
static inline int
ProbBucket(float p, int level)
{
	static const int shift[3] = {20, 9, 0};
	uint32_t	b;

	memcpy(&b, &p, sizeof(b));
	return (int) (b >> shift[level]) & (HIST_BUCKETS - 1);
}

/*
 * Histogram t[0..m) at a level and find the bucket where the mass from the
 * top, added to *mass, reaches need; *mass gains the mass above it.
 */
static int
CrossingBucket(cbllm_sampler *s, const cand *t, int m, int level, double need, double *mass)
{
	int			cross;

	memset(s->mass, 0, sizeof(s->mass));
	for (int i = 0; i < m; i++)
		s->mass[ProbBucket(t[i].p, level)] += t[i].p;
	for (cross = HIST_BUCKETS - 1; cross > 0 && *mass + s->mass[cross] < need; cross--)
		*mass += s->mass[cross];
	return cross;
}

/*
 * Finish a nucleus: s->c[0..kept) are in it with mass *mass, s->tmp[0..m)
 * are undecided.  Histogram levels move the tokens above the crossing
 * bucket into it, the few left are sorted, and the most likely of them join
 * until the mass reaches need; returns the nucleus's size.
 */
static int
NucleusRest(cbllm_sampler *s, int kept, int m, double mass, double need)
{
	cand	   *c = s->c,
			   *t = s->tmp;

	/* after level L, t[0..m) share the bits of levels 0..L */
	for (int level = 0; level < 3 && m >= SORT_BELOW; level++)
	{
		int			k = 0,
					cross = CrossingBucket(s, t, m, level, need, &mass);

		for (int i = 0; i < m; i++)
		{
			int			b = ProbBucket(t[i].p, level);

			if (b > cross)
				c[kept++] = t[i];
			else if (b == cross)
				t[k++] = t[i];
		}
		m = k;
	}
	qsort(t, m, sizeof(cand), CandCmp);
	for (int i = 0; i < m && mass < need; i++)
	{
		mass += t[i].p;
		c[kept++] = t[i];
	}
	return kept;
}

/* The tokens of prob[0..n) in [lo, hi) into t in id order; returns how many. */
static VEC_CLONES int
Band(const float *prob, int n, float lo, float hi, cand *t)
{
	int			i = 0,
				m = 0;

	for (; i + VL <= n; i += VL)
	{
		vf16		v = LoadV(prob + i);
		vi16		in = SelectV(v >= lo, v, (vf16) {0} + hi) < hi;

		if (AnyV(in))
			for (int k = 0; k < VL; k++)
			{
				/* stored always, kept when in the band: no branch to mispredict */
				t[m] = (cand) {v[k], i + k};
				m -= in[k];
			}
	}
	for (; i < n; i++)
		if (prob[i] >= lo && prob[i] < hi)
			t[m++] = (cand) {prob[i], i};
	return m;
}

/* The mass of prob[0..n) at or above hi, n <= SUM_BLOCK, always summed the same way. */
static VEC_CLONES double
BlockMassAbove(const float *prob, int n, float hi)
{
	vf16		acc = {0};
	double		sum = 0;
	int			i = 0;

	for (; i + VL <= n; i += VL)
	{
		vf16		v = LoadV(prob + i);

		acc += (vf16) ((vi16) v & (v >= hi));
	}
	for (int j = 0; j < VL; j++)
		sum += acc[j];
	for (; i < n; i++)
		sum += prob[i] >= hi ? prob[i] : 0;
	return sum;
}

/* The mass of prob[0..n) at or above hi: block masses added in order. */
static double
MassAbove(const float *prob, int n, float hi)
{
	double		sum = 0;

	for (int b = 0; b * SUM_BLOCK < n; b++)
		sum += BlockMassAbove(prob + b * SUM_BLOCK,
							  n - b * SUM_BLOCK < SUM_BLOCK ? n - b * SUM_BLOCK : SUM_BLOCK, hi);
	return sum;
}

/*
 * A token of prob[0..n) at or above hi, drawn in proportion to its
 * probability for r in [0, mass at or above hi): blocks are skipped by
 * their masses (computed as MassAbove computes them), then the block where
 * r falls is walked.
 */
static int32_t
DrawAbove(const float *prob, int n, float hi, double r)
{
	int32_t		last = -1;

	for (int b = 0; b * SUM_BLOCK < n; b++)
	{
		int			len = n - b * SUM_BLOCK < SUM_BLOCK ? n - b * SUM_BLOCK : SUM_BLOCK;
		const float *blk = prob + b * SUM_BLOCK;
		double		bm = BlockMassAbove(blk, len, hi);

		if (bm <= 0)
			continue;
		if (r >= bm)
		{
			r -= bm;
			for (int i = len - 1; last < b * SUM_BLOCK && i >= 0; i--)
				if (blk[i] >= hi)
					last = b * SUM_BLOCK + i;
			continue;
		}
		for (int i = 0; i < len; i++)
			if (blk[i] >= hi)
			{
				last = b * SUM_BLOCK + i;
				r -= blk[i];
				if (r < 0)
					return last;
			}
	}
	/* rounding: the last token at or above hi */
	return last;
}

/*
 * The top-p nucleus of prob[0..n) (token i has prob[i], the largest is 1,
 * total is their mass): every token of probability above a threshold plus,
 * of those at it, the most likely (then lowest ids) until the mass reaches
 * top_p.  It comes back in two parts: every token at or above *hi (mass
 * *mass_hi), and s->c[0..return value) below it.
 *
 * Passes of N_TH thresholds, spaced evenly in log(p), narrow a band
 * [lo, hi): every token at or above hi is in the nucleus (the mass at or
 * above hi is below the mass needed by a margin beyond rounding), none
 * below lo is (the mass at or above lo exceeds it).  To begin, lo is the
 * probability below which no token can be in it (all of them together weigh
 * less than (1 - top_p) * total), or the least probability (least) if that
 * is higher.  Only the band is gathered and decided by
 * the histograms.
 */
static int
Nucleus(cbllm_sampler *s, const float *prob, int n, double total, float top_p, float least,
		float *hi_out, double *mass_hi)
{
	double		need = top_p * total,
				margin = 1e-4 * total,
				mass_th[N_TH];
	float		lo = (float) ((1.0 - top_p) * total / n * (1 - 1e-6)),
				hi = 2.0f,
				th[N_TH];
	int64_t		count[N_TH],
				at_lo = n,
				at_hi = 0;
	int			m;

	lo = least > lo ? least : lo;
	for (int pass = 0; pass < 4 && at_lo - at_hi > BAND_MOST; pass++)
	{
		float		top = hi < 1.0f ? hi : 1.0f,
					new_lo = lo,
					new_hi = hi;

		for (int j = 0; j < N_TH; j++)
			th[j] = (float) (lo * pow((double) top / lo, (double) (N_TH - 1 - j) / N_TH));
		th[N_TH - 1] = lo;
		CountAbove(prob, n, th, count, mass_th);
		at_lo = count[N_TH - 1];
		for (int j = 0; j < N_TH; j++)
		{
			if (mass_th[j] <= need - margin && th[j] < new_hi)
				new_hi = th[j], at_hi = count[j];
			if (mass_th[j] >= need + margin && th[j] > new_lo)
			{
				new_lo = th[j], at_lo = count[j];
				break;
			}
		}
		if (new_lo == lo && new_hi == hi && pass > 0)
			break;				/* no progress */
		lo = new_lo;
		hi = new_hi;
	}
	*hi_out = hi;
	*mass_hi = hi <= 1.0f ? MassAbove(prob, n, hi) : 0;
	m = Band(prob, n, lo, hi, s->tmp);
	return NucleusRest(s, 0, m, *mass_hi, need);
}

/* A token drawn from c[0..n) with weights p (their sum total) at the uniform u. */
static int32_t
DrawCand(const cand *c, int n, double total, double u)
{
	double		r = u * total;

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

/*
 * A token drawn from prob[0..n) at the uniform u: whole blocks are skipped
 * by their sums bsum (total is their sum), then the block where u falls is
 * walked.
 */
static int32_t
DrawProb(const float *prob, const double *bsum, int n, double total, double u)
{
	double		r = u * total;

	for (int b = 0; b * SUM_BLOCK < n; b++)
	{
		int			end = (b + 1) * SUM_BLOCK < n ? (b + 1) * SUM_BLOCK : n;

		if (r >= bsum[b])
		{
			r -= bsum[b];
			continue;
		}
		for (int i = b * SUM_BLOCK; i < end; i++)
		{
			r -= prob[i];
			if (r < 0)
				return i;
		}
		/* rounding walked past the block's sum: go on into the next */
	}
	for (int i = n - 1; i > 0; i--)
		if (prob[i] > 0)
			return i;
	return 0;
}

/* The log-sum-exp of the logits and their k most likely tokens' log-probabilities. */
float
sampler_logprobs(cbllm_sampler *s, const float *logits, int k, int32_t *ids, float *lps, int *n_top)
{
	int			n = s->vocab,
				g;
	float		mx = LogitsMax(logits, n),
				lse;
	double		total = 0;

	*n_top = 0;
	if (!isfinite(mx))
		return -INFINITY;
	ExpScaled(logits, n, mx, 1.0f, s->prob, s->bsum);
	for (int b = 0; b * SUM_BLOCK < n; b++)
		total += s->bsum[b];
	lse = mx + (float) log(total);
	if (k <= 0)
		return lse;
	g = TopKLogits(s, logits, n, k < n ? k : n, mx);
	qsort(s->c, g, sizeof(cand), CandCmp);
	for (int i = 0; i < g && s->c[i].p > -INFINITY; i++)
	{
		ids[i] = s->c[i].id;
		lps[i] = s->c[i].p - lse;
		*n_top = i + 1;
	}
	return lse;
}

/* Choose a token: greedy when temperature is 0, else sample from the filtered softmax. */
int32_t
sampler_sample(cbllm_sampler *s, const float *logits, const sampler_params *p, cbllm_rng *rng)
{
	int			n = s->vocab;
	float		inv_t,
				mx;
	double		total;

	if (p->temperature <= 0 || p->top_k == 1)
		return sampler_argmax(logits, n);
	mx = LogitsMax(logits, n);
	if (!isfinite(mx))
		return sampler_argmax(logits, n);
	inv_t = 1.0f / p->temperature;
	if (p->top_k > 0 && p->top_k < n)
	{
		cand	   *c = s->c;
		int			k = TopKLogits(s, logits, n, p->top_k, mx);

		total = 0;
		for (int i = 0; i < k; i++)
		{
			c[i].p = ExpNonPositive((c[i].p - mx) * inv_t);
			total += c[i].p;
		}
		if (p->top_p < 1.0f)
		{
			memcpy(s->tmp, c, sizeof(cand) * k);
			k = NucleusRest(s, 0, k, 0, p->top_p * total);
			total = 0;
			for (int i = 0; i < k; i++)
				total += c[i].p;
		}
		return DrawCand(c, k, total, rng_uniform(rng));
	}
	ExpScaled(logits, n, mx, inv_t, s->prob, s->bsum);
	total = 0;
	for (int b = 0; b * SUM_BLOCK < n; b++)
		total += s->bsum[b];
	if (p->top_p < 1.0f)
	{
		float		hi;
		double		mass_hi,
					r;
		float		least = ExpNonPositive((LogitsMinFinite(logits, n) - mx) * inv_t);
		int			k = Nucleus(s, s->prob, n, total, p->top_p, least, &hi, &mass_hi);

		total = mass_hi;
		for (int i = 0; i < k; i++)
			total += s->c[i].p;
		r = rng_uniform(rng) * total;
		if (r < mass_hi)
			return DrawAbove(s->prob, n, hi, r);
		return DrawCand(s->c, k, total - mass_hi, (r - mass_hi) / (total - mass_hi));
	}
	return DrawProb(s->prob, s->bsum, n, total, rng_uniform(rng));
}
