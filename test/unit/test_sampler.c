/*
 * test_sampler.c: unit tests of token selection: argmax, greedy decoding,
 * the seeded generator, the sampler's exponential against libm,
 * temperature, top-k and top-p (small vocabularies that are sorted, and
 * 32000- and 151936-token ones where threshold passes and histograms decide
 * the set), and empirical frequencies against softmax probabilities
 * computed independently here.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"
#include "tap.h"

/* A test-side splitmix64 stream, a stream apart from the sampler's generator. */
static uint64_t
MixNext(uint64_t *x)
{
	return cbllm_splitmix64_next(x);
}

/* A test-side uniform double in [0, 1). */
static double
MixUniform(uint64_t *x)
{
	return (double) (MixNext(x) >> 11) / 9007199254740992.0;
}

/* A sampler for vocab tokens; NULL (and a failed check) when creation fails. */
static cbllm_sampler *
NewSampler(int vocab)
{
	cbllm_sampler *s = NULL;
	cbllm_err	err = {{0}};

	if (sampler_create(vocab, &s, &err) != CBLLM_OK)
	{
		TAP_OK(false, "sampler_create(%d): %s", vocab, err.msg);
		return NULL;
	}
	return s;
}

/* An index sort key: descending value, then ascending id. */
typedef struct ranked
{
	double		p;
	int			id;
} ranked;

/* qsort order for ranked: larger p first, then smaller id. */
static int
RankedCmp(const void *a, const void *b)
{
	const ranked *x = a,
			   *y = b;

	if (x->p != y->p)
		return x->p > y->p ? -1 : 1;
	return x->id - y->id;
}

/*
 * The reference distribution of sampling logits[0..n) with temperature t,
 * top_k k (0: off) and top_p p (1: off), by a naive full sort: q[i] is the
 * probability of token i.  *ambiguous is set when the nucleus boundary lies so
 * close to p that rounding may move it by one token; the next token is then
 * given a tiny probability so that it counts as allowed.
 */
static void
Reference(const float *logits, int n, double t, int k, double p, double *q, bool *ambiguous)
{
	ranked	   *r = malloc(sizeof(ranked) * n);
	double		mx = -INFINITY,
				total = 0,
				mass = 0,
				kept_total = 0;
	int			m = n,
				kept;

	*ambiguous = false;
	for (int i = 0; i < n; i++)
	{
		r[i].p = isnan(logits[i]) ? -INFINITY : logits[i];
		r[i].id = i;
	}
	qsort(r, n, sizeof(ranked), RankedCmp);
	if (k > 0 && k < n)
		m = k;
	mx = r[0].p;
	for (int i = 0; i < m; i++)
	{
		r[i].p = exp((r[i].p - mx) / t);
		total += r[i].p;
	}
	for (kept = 0; kept < m && mass < p * total; kept++)
		mass += r[kept].p;
	if (p < 1 && kept < m && fabs(mass - p * total) < 1e-6 * total)
		*ambiguous = true;
	for (int i = 0; i < kept; i++)
		kept_total += r[i].p;
	memset(q, 0, sizeof(double) * n);
	for (int i = 0; i < kept; i++)
		q[r[i].id] = r[i].p / kept_total;
	if (*ambiguous)
		q[r[kept].id] = 1e-12;
	free(r);
}

/* The naive argmax: the first index of the largest non-NaN value (0 if all NaN). */
static int
NaiveArgmax(const float *v, int n)
{
	int			best = -1;

	for (int i = 0; i < n; i++)
		if (!isnan(v[i]) && (best < 0 || v[i] > v[best]))
			best = i;
	return best < 0 ? 0 : best;
}

/* sampler_argmax: first of equal maxima, NaN never wins, infinities order. */
static void
TestArgmax(void)
{
	const float nan = NAN;
	const float inf = INFINITY;
	float		a1[] = {1, 3, 3, 2};
	float		a2[] = {nan, 1, 2};
	float		a3[] = {1, nan, 0.5f};
	float		a4[] = {-inf, -inf, -5, nan};
	float		a5[] = {nan, nan, 7, nan, 7};
	float		a6[] = {-2};
	float		a7[] = {0, inf, 5, inf};
	uint64_t	x = 11;
	bool		ok = true;

	TAP_OK(sampler_argmax(a1, 4) == 1, "argmax of {1, 3, 3, 2} is the first 3 (index 1)");
	TAP_OK(sampler_argmax(a2, 3) == 2, "argmax of {NaN, 1, 2} is 2: a leading NaN never wins");
	TAP_OK(sampler_argmax(a3, 3) == 0, "argmax of {1, NaN, 0.5} is 0: a NaN in the middle never wins");
	TAP_OK(sampler_argmax(a4, 4) == 2, "argmax of {-inf, -inf, -5, NaN} is 2");
	TAP_OK(sampler_argmax(a5, 5) == 2, "argmax of {NaN, NaN, 7, NaN, 7} is 2");
	TAP_OK(sampler_argmax(a6, 1) == 0, "argmax of one element is 0");
	TAP_OK(sampler_argmax(a7, 4) == 1, "argmax of {0, inf, 5, inf} is the first inf");
	for (int trial = 0; trial < 500 && ok; trial++)
	{
		float		v[64];
		int			n = 1 + (int) (MixNext(&x) % 64);

		/* few distinct values so that ties are common, and some NaNs */
		for (int i = 0; i < n; i++)
			v[i] = MixNext(&x) % 9 == 0 ? nan : (float) (MixNext(&x) % 6);
		ok = sampler_argmax(v, n) == NaiveArgmax(v, n);
	}
	TAP_OK(ok, "argmax equals a naive first-max scan on 500 random vectors with ties and NaNs");
}

/* rng: the xoshiro256** step, splitmix64 seeding, and rng_uniform in [0, 1). */
static void
TestRng(void)
{
	cbllm_rng	r,
				r2;
	uint64_t	s[4] = {1, 2, 3, 4};
	bool		ok = true,
				in_range = true;
	double		sum = 0,
				lo = 1,
				hi = 0;
	int			bins[10] = {0};
	const int	n = 200000;
	bool		bins_ok = true;

	/* first output of xoshiro256** from state {1, 2, 3, 4}: rotl(2 * 5, 7) * 9 */
	memcpy(r.s, s, sizeof(s));
	TAP_OK(rng_next(&r) == 11520, "xoshiro256** from state {1,2,3,4} first yields 11520");
	/* later outputs against a reference implementation of xoshiro256** */
	for (int i = 0; i < 1000 && ok; i++)
	{
		uint64_t	res = ((s[1] * 5) << 7 | (s[1] * 5) >> 57) * 9,
					t = s[1] << 17;

		s[2] ^= s[0];
		s[3] ^= s[1];
		s[1] ^= s[2];
		s[0] ^= s[3];
		s[2] ^= t;
		s[3] = s[3] << 45 | s[3] >> 19;
		if (i > 0)
			ok = rng_next(&r) == res;
	}
	TAP_OK(ok, "rng_next matches a reference xoshiro256** for 1000 steps");

	rng_seed(&r, 0);
	TAP_OK(r.s[0] == 0xe220a8397b1dcdafULL && r.s[1] == 0x6e789e6aa1b965f4ULL &&
		   r.s[2] == 0x06c45d188009454fULL && r.s[3] == 0xf88bb8a8724c81ecULL,
		   "rng_seed(0) fills the state with the first four splitmix64 outputs of 0");
	rng_seed(&r, 12345);
	rng_seed(&r2, 12345);
	ok = true;
	for (int i = 0; i < 100; i++)
		ok = ok && rng_next(&r) == rng_next(&r2);
	TAP_OK(ok, "the same seed gives the same stream");

	rng_seed(&r, 7);
	for (int i = 0; i < n; i++)
	{
		double		u = rng_uniform(&r);

		if (!(u >= 0 && u < 1))
			in_range = false;
		else
			bins[(int) (u * 10)]++;
		sum += u;
		lo = u < lo ? u : lo;
		hi = u > hi ? u : hi;
	}
	TAP_OK(in_range, "rng_uniform: %d draws all lie in [0, 1)", n);
	TAP_OK(fabs(sum / n - 0.5) < 5 * sqrt(1.0 / 12 / n) && lo < 1e-4 && hi > 1 - 1e-4,
		   "rng_uniform: mean %.5f near 0.5, min %.2g and max %.6f reach the ends", sum / n, lo, hi);
	for (int b = 0; b < 10; b++)
		if (fabs(bins[b] - n / 10.0) > 5 * sqrt(n * 0.1 * 0.9))
			bins_ok = false;
	TAP_OK(bins_ok, "rng_uniform: each tenth of [0, 1) holds its share within 5 standard errors");

	/* the largest value rng_uniform can return is below 1 */
	memset(&r, 0, sizeof(r));
	{
		/* a state whose next output is all ones: rotl(s1 * 5, 7) * 9 == 2^64 - 1 */
		uint64_t	inv9 = 0x8e38e38e38e38e39ULL;	/* 9 * inv9 == 1 mod 2^64 */
		uint64_t	inv5 = 0xcccccccccccccccdULL;	/* 5 * inv5 == 1 mod 2^64 */
		uint64_t	want = ~0ULL * inv9;	/* rotl(s1 * 5, 7) */
		uint64_t	s1 = ((want >> 7) | (want << 57)) * inv5;

		TAP_OK(9 * inv9 == 1 && 5 * inv5 == 1, "modular inverses of 9 and 5 (test arithmetic)");
		r.s[1] = s1;
		r.s[0] = 1;
		TAP_OK(rng_uniform(&r) < 1.0, "rng_uniform is below 1 even when rng_next returns 2^64 - 1");
	}
}

/* Fill logits with uniform values in [lo, hi) from a test-side seed. */
static void
RandomLogits(float *v, int n, uint64_t seed, double lo, double hi)
{
	for (int i = 0; i < n; i++)
		v[i] = (float) (lo + (hi - lo) * MixUniform(&seed));
}

/* Greedy (temperature 0) and top_k 1 are argmax; seeded sampling is reproducible. */
static void
TestGreedyAndSeeds(void)
{
	cbllm_sampler *s = NewSampler(100);
	float		v[100];
	cbllm_rng	r,
				r2;
	sampler_params greedy = {0.0f, 1.0f, 0};
	sampler_params k1 = {1.0f, 1.0f, 1};
	sampler_params k1p = {5.0f, 0.5f, 1};
	sampler_params mixed = {1.0f, 0.9f, 50};
	int32_t		a[200],
				b[200];
	bool		ok = true,
				ok_k = true;
	int			diff = 0,
				distinct = 0;
	bool		seen[100] = {false};

	if (s == NULL)
		return;
	rng_seed(&r, 1);
	for (int trial = 0; trial < 200; trial++)
	{
		RandomLogits(v, 100, 1000 + trial, -3, 3);
		if (trial % 7 == 0)
			v[trial % 100] = v[(trial + 1) % 100];	/* a tie somewhere */
		ok = ok && sampler_sample(s, v, &greedy, &r) == NaiveArgmax(v, 100);
		ok_k = ok_k && sampler_sample(s, v, &k1, &r) == NaiveArgmax(v, 100) &&
			sampler_sample(s, v, &k1p, &r) == NaiveArgmax(v, 100);
	}
	TAP_OK(ok, "temperature 0 returns the argmax on 200 random vocabularies");
	TAP_OK(ok_k, "top_k 1 returns the argmax whatever the temperature and top_p");

	RandomLogits(v, 100, 77, -1, 1);
	rng_seed(&r, 42);
	for (int i = 0; i < 200; i++)
		a[i] = sampler_sample(s, v, &mixed, &r);
	rng_seed(&r, 42);
	for (int i = 0; i < 200; i++)
		b[i] = sampler_sample(s, v, &mixed, &r);
	TAP_OK(memcmp(a, b, sizeof(a)) == 0, "seed 42 twice gives the same 200 draws");
	for (int i = 0; i < 200; i++)
		if (!seen[a[i]])
		{
			seen[a[i]] = true;
			distinct++;
		}
	TAP_OK(distinct > 20, "those 200 draws are not degenerate (%d distinct tokens)", distinct);
	rng_seed(&r, 43);
	for (int i = 0; i < 200; i++)
		diff += sampler_sample(s, v, &mixed, &r) != a[i];
	TAP_OK(diff > 100, "seed 43 gives a different sequence (%d of 200 draws differ)", diff);

	/* a seeded stream is unaffected by another request sampling in between */
	rng_seed(&r, 42);
	rng_seed(&r2, 99);
	ok = true;
	for (int i = 0; i < 200; i++)
	{
		float		w[100];

		RandomLogits(w, 100, 5000 + i, -8, 8);
		(void) sampler_sample(s, w, &mixed, &r2);
		ok = ok && sampler_sample(s, v, &mixed, &r) == a[i];
	}
	TAP_OK(ok, "seed 42 interleaved with another stream still gives the same 200 draws");
	sampler_free(s);
}

/*
 * Draw n tokens and compare counts with the reference probabilities: each
 * count within 5 standard errors, and no token of probability 0 ever drawn.
 */
static void
CheckFrequencies(const char *label, const float *logits, int vocab, sampler_params p,
				  int n, uint64_t seed)
{
	cbllm_sampler *s = NewSampler(vocab);
	double	   *q = malloc(sizeof(double) * vocab);
	int		   *count = calloc(vocab, sizeof(int));
	cbllm_rng	r;
	bool		amb,
				ok = true;
	double		worst = 0;

	if (s == NULL)
		return;
	Reference(logits, vocab, p.temperature, p.top_k, p.top_p, q, &amb);
	rng_seed(&r, seed);
	for (int i = 0; i < n; i++)
	{
		int32_t		t = sampler_sample(s, logits, &p, &r);

		if (t < 0 || t >= vocab)
		{
			ok = false;
			break;
		}
		count[t]++;
	}
	for (int i = 0; ok && i < vocab; i++)
	{
		double		e = n * q[i],
					sd = sqrt(n * q[i] * (1 - q[i]));

		if (q[i] == 0 && count[i] > 0)
		{
			TAP_DIAG("%s: token %d has probability 0 but was drawn %d times", label, i, count[i]);
			ok = false;
		}
		else if (q[i] > 0 && fabs(count[i] - e) > 5 * sd + 1)
		{
			TAP_DIAG("%s: token %d drawn %d times, expected %.1f +- %.1f", label, i, count[i], e, sd);
			ok = false;
		}
		if (sd > 0 && fabs(count[i] - e) / sd > worst)
			worst = fabs(count[i] - e) / sd;
	}
	TAP_OK(ok, "%s: frequencies of %d draws match the reference (worst %.2f standard errors)",
		   label, n, worst);
	free(q);
	free(count);
	sampler_free(s);
}

/* Empirical frequencies match softmax(logits / T), after top-k and top-p. */
static void
TestFrequencies(void)
{
	const float l5[5] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
	float		l7[7] = {0.3f, -0.2f, 1.1f, 0.9f, -2.0f, 0.0f, 1.0f};
	sampler_params p;

	p = (sampler_params) {1.0f, 1.0f, 0};
	CheckFrequencies("T 1, vocab 5", l5, 5, p, 20000, 1);
	p = (sampler_params) {0.5f, 1.0f, 0};
	CheckFrequencies("T 0.5, vocab 5", l5, 5, p, 20000, 2);
	p = (sampler_params) {2.0f, 1.0f, 0};
	CheckFrequencies("T 2, vocab 5", l5, 5, p, 20000, 3);
	p = (sampler_params) {1.5f, 1.0f, 3};
	CheckFrequencies("T 1.5, top_k 3, vocab 5", l5, 5, p, 20000, 4);
	p = (sampler_params) {1.0f, 0.8f, 0};
	CheckFrequencies("T 1, top_p 0.8, vocab 7", l7, 7, p, 20000, 5);
	p = (sampler_params) {0.7f, 0.8f, 4};
	CheckFrequencies("T 0.7, top_k 4, top_p 0.8, vocab 7", l7, 7, p, 20000, 6);
	p = (sampler_params) {1.0f, 1.0f, 100};
	CheckFrequencies("top_k larger than the vocabulary", l7, 7, p, 20000, 7);
}

/* Draw n tokens; count how many fall outside allowed[] and how often each token came. */
static int
DrawOutside(cbllm_sampler *s, const float *logits, sampler_params p, const bool *allowed,
			 int n, uint64_t seed, int *count)
{
	cbllm_rng	r;
	int			bad = 0;

	rng_seed(&r, seed);
	for (int i = 0; i < n; i++)
	{
		int32_t		t = sampler_sample(s, logits, &p, &r);

		if (!allowed[t])
			bad++;
		if (count)
			count[t]++;
	}
	return bad;
}

/* Top-p on hand-made distributions. */
static void
TestTopPSmall(void)
{
	cbllm_sampler *s4 = NewSampler(4);
	cbllm_sampler *s5 = NewSampler(5);
	float		one[4],
				hand[5];
	bool		allowed[5];
	int			count[5] = {0};
	int			bad;
	sampler_params p;
	const double p1[4] = {0.02, 0.9, 0.05, 0.03};

	/* masses 0.06, 0.5, 0.04, 0.1, 0.3: the 0.95 nucleus is {1, 4, 3, 0} (0.96) */
	const double ph[5] = {0.06, 0.5, 0.04, 0.1, 0.3};

	if (s4 == NULL || s5 == NULL)
		return;
	for (int i = 0; i < 4; i++)
		one[i] = (float) log(p1[i]);
	for (int i = 0; i < 5; i++)
		hand[i] = (float) log(ph[i]) + 3.0f;	/* a shift does not change softmax */

	memset(allowed, 0, sizeof(allowed));
	allowed[1] = true;
	p = (sampler_params) {1.0f, 0.5f, 0};
	bad = DrawOutside(s4, one, p, allowed, 5000, 10, NULL);
	TAP_OK(bad == 0, "top_p 0.5 with one token of mass 0.9: only that token is drawn (%d others)", bad);
	p = (sampler_params) {1.0f, 0.92f, 0};
	allowed[0] = allowed[2] = allowed[3] = true;
	DrawOutside(s4, one, p, allowed, 5000, 11, count);
	TAP_OK(count[2] > 0 && count[0] == 0 && count[3] == 0,
		   "top_p 0.92 over masses 0.9, 0.05, 0.03, 0.02: the 0.05 token joins, no other (%d, %d, %d)",
		   count[2], count[3], count[0]);

	memset(count, 0, sizeof(count));
	for (int i = 0; i < 5; i++)
		allowed[i] = i != 2;
	p = (sampler_params) {1.0f, 0.95f, 0};
	bad = DrawOutside(s5, hand, p, allowed, 20000, 12, count);
	TAP_OK(bad == 0 && count[2] == 0,
		   "top_p 0.95: token 2 (mass 0.04, outside the nucleus) never appears in 20000 draws");
	TAP_OK(count[0] > 0 && count[1] > count[4] && count[4] > count[3] && count[3] > count[0],
		   "top_p 0.95: every nucleus token appears, in the order of its mass (%d %d %d %d)",
		   count[1], count[4], count[3], count[0]);
	sampler_free(s4);
	sampler_free(s5);
}

/* Temperature: 0.1 sharpens to the max, 1000 flattens; NaN and -inf are never drawn. */
static void
TestTemperatureAndNan(void)
{
	cbllm_sampler *s4 = NewSampler(4);
	cbllm_sampler *s5 = NewSampler(5);
	float		l[4] = {1.0f, 2.0f, 0.5f, 0.0f};
	int			c01[4] = {0},
				c1[4] = {0},
				c1000[4] = {0};
	bool		all[4] = {true, true, true, true};
	float		ln[5] = {NAN, 0.0f, -INFINITY, 0.5f, NAN};
	bool		finite[5] = {false, true, false, true, false};
	float		allnan[5] = {NAN, NAN, NAN, NAN, NAN};
	sampler_params p;
	cbllm_rng	r;
	int			bad;
	int32_t		t;

	if (s4 == NULL || s5 == NULL)
		return;
	p = (sampler_params) {0.1f, 1.0f, 0};
	DrawOutside(s4, l, p, all, 5000, 13, c01);
	p = (sampler_params) {1.0f, 1.0f, 0};
	DrawOutside(s4, l, p, all, 5000, 14, c1);
	p = (sampler_params) {1000.0f, 1.0f, 0};
	DrawOutside(s4, l, p, all, 8000, 15, c1000);
	TAP_OK(c01[1] >= 4990, "T 0.1 picks the max logit in %d of 5000 draws", c01[1]);
	TAP_OK(c1[1] < 3500 && c1[0] > 500, "T 1 picks it in only %d of 5000 draws", c1[1]);
	TAP_OK(c1000[0] > 1800 && c1000[1] > 1800 && c1000[2] > 1800 && c1000[3] > 1800,
		   "T 1000 flattens to nearly uniform (%d %d %d %d of 8000)", c1000[0], c1000[1],
		   c1000[2], c1000[3]);

	p = (sampler_params) {1.0f, 1.0f, 0};
	bad = DrawOutside(s5, ln, p, finite, 5000, 16, NULL);
	p = (sampler_params) {2.0f, 0.99f, 3};
	bad += DrawOutside(s5, ln, p, finite, 5000, 17, NULL);
	TAP_OK(bad == 0, "NaN and -inf logits are never drawn, with or without top-k/top-p (%d times)",
		   bad);
	rng_seed(&r, 1);
	p = (sampler_params) {1.0f, 0.9f, 2};
	t = sampler_sample(s5, allnan, &p, &r);
	TAP_OK(t >= 0 && t < 5, "all-NaN logits still yield a valid token id (%d)", t);
	sampler_free(s4);
	sampler_free(s5);
}

/* Random logits, top-k: draws come only from the k largest, and all k occur. */
static void
TestTopKRandom(void)
{
	const int	n = 1000;
	cbllm_sampler *s = NewSampler(n);
	float	   *v = malloc(sizeof(float) * n);
	bool	   *allowed = calloc(n, sizeof(bool));
	int		   *count = calloc(n, sizeof(int));
	int		   *perm = malloc(sizeof(int) * n);
	uint64_t	x = 2024;
	int			bad,
				hit = 0,
				kth;
	sampler_params p;

	if (s == NULL)
		return;
	/* distinct logits: a shuffled permutation of 0 .. n-1, scaled */
	for (int i = 0; i < n; i++)
		perm[i] = i;
	for (int i = n - 1; i > 0; i--)
	{
		int			j = (int) (MixNext(&x) % (uint64_t) (i + 1)),
					t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int i = 0; i < n; i++)
	{
		v[i] = perm[i] * 0.01f;
		allowed[i] = perm[i] >= n - 10;
	}
	p = (sampler_params) {3.0f, 1.0f, 10};
	bad = DrawOutside(s, v, p, allowed, 5000, 21, count);
	for (int i = 0; i < n; i++)
		hit += allowed[i] && count[i] > 0;
	TAP_OK(bad == 0, "top_k 10 of 1000 distinct logits: no draw outside the 10 largest (%d)", bad);
	TAP_OK(hit == 10, "top_k 10 at T 3: all 10 of the largest appear (%d)", hit);

	/* many ties: integer logits 0..99, about 10 each; the 50th largest falls inside a tie */
	for (int i = 0; i < n; i++)
		v[i] = (float) (MixNext(&x) % 100);
	{
		int			hist[100] = {0},
					above = 0,
					distinct = 0;

		for (int i = 0; i < n; i++)
			hist[(int) v[i]]++;
		for (kth = 99; kth >= 0 && above + hist[kth] < 50; kth--)
			above += hist[kth];
		for (int i = 0; i < n; i++)
			allowed[i] = v[i] >= kth;
		memset(count, 0, sizeof(int) * n);
		p = (sampler_params) {3.0f, 1.0f, 50};
		bad = DrawOutside(s, v, p, allowed, 5000, 22, count);
		TAP_OK(bad == 0, "top_k 50 over tied logits: every draw has logit >= %d (the 50th largest)",
			   kth);
		hit = 0;
		for (int i = 0; i < n; i++)
		{
			distinct += count[i] > 0;
			hit += v[i] > kth && count[i] > 0;
		}
		TAP_OK(hit == above, "top_k 50 over ties: all %d tokens above the tied 50th value appear (%d)",
			   above, hit);
		TAP_OK(distinct == 50, "top_k 50 over ties keeps exactly 50 candidates (%d distinct drawn,"
			   " %d tied at %d)", distinct, hist[kth], kth);
	}
	free(v);
	free(allowed);
	free(count);
	free(perm);
	sampler_free(s);
}

/*
 * A 32000-token vocabulary with top-p (and top-k above 512) takes the
 * histogram path: every draw must lie in the nucleus of a naive full sort,
 * and the draws must reach its least likely tokens.
 */
static void
CheckLarge(const char *label, const float *v, int n, sampler_params p, int draws, uint64_t seed)
{
	cbllm_sampler *s = NewSampler(n);
	double	   *q = malloc(sizeof(double) * n);
	bool	   *allowed = malloc(sizeof(bool) * n);
	ranked	   *r = malloc(sizeof(ranked) * n);
	int		   *count = calloc(n, sizeof(int));
	int		   *rank = malloc(sizeof(int) * n);
	bool		amb;
	int			bad,
				size = 0,
				above_floor = 0,
				deepest = 0,
				m = p.top_k > 0 && p.top_k < n ? p.top_k : n;
	double		total = 0,
				mx;

	if (s == NULL)
		return;
	Reference(v, n, p.temperature, p.top_k, p.top_p, q, &amb);
	if (amb)
		TAP_DIAG("%s: the nucleus boundary is within rounding of top_p", label);
	for (int i = 0; i < n; i++)
	{
		allowed[i] = q[i] > 0;
		size += q[i] > 1e-11;
		r[i].p = v[i];
		r[i].id = i;
	}
	/* tokens >= (1 - p) * total / m may be in the nucleus: check more than 512 are, too many to sort */
	qsort(r, n, sizeof(ranked), RankedCmp);
	mx = r[0].p;
	for (int i = 0; i < m; i++)
		total += exp((r[i].p - mx) / p.temperature);
	for (int i = 0; i < m; i++)
		above_floor += exp((r[i].p - mx) / p.temperature) >= (1 - p.top_p) * total / m;
	for (int i = 0; i < n; i++)
		rank[r[i].id] = i;
	TAP_OK(above_floor > 512 && size > 100 && size < m,
		   "%s: %d candidates above the floor (> 512: not a sort), nucleus of %d",
		   label, above_floor, size);
	bad = DrawOutside(s, v, p, allowed, draws, seed, count);
	for (int i = 0; i < n; i++)
		if (count[i] > 0 && rank[i] > deepest)
			deepest = rank[i];
	TAP_OK(bad == 0, "%s: all %d draws lie in the nucleus of a naive sort (%d outside)", label,
		   draws, bad);
	TAP_OK(deepest >= size * 9 / 10 && deepest < size,
		   "%s: draws reach the tail of the nucleus (deepest rank %d of %d)", label, deepest, size);
	{
		/* draws per tenth of the nucleus by rank against the reference mass */
		double		e[10] = {0};
		int			c[10] = {0};
		bool		ok = true;

		for (int i = 0; i < n; i++)
			if (q[i] > 1e-11)
			{
				e[rank[i] * 10 / size] += q[i] * draws;
				c[rank[i] * 10 / size] += count[i];
			}
		for (int d = 0; d < 10; d++)
			if (fabs(c[d] - e[d]) > 5 * sqrt(e[d]) + 1)
			{
				TAP_DIAG("%s: rank tenth %d drawn %d times, expected %.1f", label, d, c[d], e[d]);
				ok = false;
			}
		TAP_OK(ok, "%s: draws per tenth of the nucleus (by rank) match the reference mass", label);
	}
	free(q);
	free(allowed);
	free(r);
	free(count);
	free(rank);
	sampler_free(s);
}

/* Large vocabularies: top-p alone and after a top-k above 512. */
static void
TestLargeVocab(void)
{
	const int	n = 32000;
	float	   *v = malloc(sizeof(float) * n);
	uint64_t	x = 31337;
	sampler_params p;

	RandomLogits(v, n, 4242, 0, 6);
	p = (sampler_params) {1.0f, 0.9f, 0};
	CheckLarge("vocab 32000, uniform logits, top_p 0.9", v, n, p, 3000, 31);

	/* roughly normal logits (sum of 4 uniforms), sharper temperature, top-k 4000 first */
	for (int i = 0; i < n; i++)
		v[i] = (float) (MixUniform(&x) + MixUniform(&x) + MixUniform(&x) + MixUniform(&x)) * 3.0f;
	p = (sampler_params) {0.7f, 0.8f, 4000};
	CheckLarge("vocab 32000, bell logits, T 0.7, top_k 4000, top_p 0.8", v, n, p, 3000, 32);
	free(v);
}

/* The sampler's exponential against libm's double exp over [-87, 0], and its ends. */
static void
TestExp(void)
{
	double		worst = 0;
	float		at_worst = 0;
	bool		monotone = true;
	float		prev = 0;

	for (int i = 0; i <= 2000000; i++)
	{
		float		x = -87.0f * (float) i / 2000000;
		float		got = sampler_exp_nonpositive(x);
		double		want = exp((double) x);
		double		ulp = nextafterf((float) want, INFINITY) - (float) want;
		double		err = fabs(got - want) / ulp;

		if (err > worst)
		{
			worst = err;
			at_worst = x;
		}
		if (i > 0 && got > prev)
			monotone = false;
		prev = got;
	}
	TAP_OK(worst <= 2.0, "exp over 2000001 points of [-87, 0] is within 2 ulp of libm (worst %.2f ulp"
		   " at %g)", worst, at_worst);
	TAP_OK(monotone, "exp does not rise as x falls over [-87, 0]");
	TAP_OK(sampler_exp_nonpositive(0.0f) == 1.0f, "exp(0) is exactly 1 (the largest logit's weight)");
	TAP_OK(sampler_exp_nonpositive(-88.0f) == 0.0f && sampler_exp_nonpositive(-INFINITY) == 0.0f &&
		   sampler_exp_nonpositive(NAN) == 0.0f, "exp below -87, of -inf and of NaN is 0");
}

/*
 * Qwen's 151936-token vocabulary: top-p alone over bell logits (the passes
 * of thresholds leave a band for the histograms), over nearly flat logits
 * (the nucleus holds most of the vocabulary), and after a top-k above 512.
 */
static void
TestQwenVocab(void)
{
	const int	n = 151936;
	float	   *v = malloc(sizeof(float) * n);
	uint64_t	x = 4711;
	sampler_params p;

	for (int i = 0; i < n; i++)
		v[i] = (float) (MixUniform(&x) + MixUniform(&x) + MixUniform(&x) + MixUniform(&x)) * 3.0f;
	p = (sampler_params) {0.7f, 0.95f, 0};
	CheckLarge("vocab 151936, bell logits, T 0.7, top_p 0.95", v, n, p, 3000, 41);
	RandomLogits(v, n, 99, 0, 0.5);
	p = (sampler_params) {1.0f, 0.9f, 0};
	CheckLarge("vocab 151936, nearly flat logits, top_p 0.9", v, n, p, 3000, 42);
	for (int i = 0; i < n; i++)
		v[i] = (float) (MixUniform(&x) + MixUniform(&x) + MixUniform(&x) + MixUniform(&x)) * 3.0f;
	p = (sampler_params) {0.8f, 0.9f, 3000};
	CheckLarge("vocab 151936, bell logits, T 0.8, top_k 3000, top_p 0.9", v, n, p, 3000, 43);
	free(v);
}

/*
 * Top-k at a large vocabulary, its threshold passes against a full sort:
 * k = 20 and 40 of 151936 bell logits, k above the count of finite logits
 * (the rest -inf or NaN), and many ties at the k-th value.
 */
static void
TestTopKLarge(void)
{
	const int	n = 151936;
	cbllm_sampler *s = NewSampler(n);
	float	   *v = malloc(sizeof(float) * n);
	bool	   *allowed = calloc(n, sizeof(bool));
	int		   *count = calloc(n, sizeof(int));
	ranked	   *r = malloc(sizeof(ranked) * n);
	uint64_t	x = 808;
	const int	ks[2] = {20, 40};
	int			bad,
				hit;
	sampler_params p;

	if (s == NULL)
		return;
	for (int i = 0; i < n; i++)
		v[i] = (float) (MixUniform(&x) + MixUniform(&x) + MixUniform(&x) + MixUniform(&x)) * 3.0f;
	for (int i = 0; i < n; i++)
		r[i] = (ranked) {v[i], i};
	qsort(r, n, sizeof(ranked), RankedCmp);
	for (int t = 0; t < 2; t++)
	{
		memset(allowed, 0, sizeof(bool) * n);
		memset(count, 0, sizeof(int) * n);
		for (int i = 0; i < ks[t]; i++)
			allowed[r[i].id] = true;
		p = (sampler_params) {5.0f, 1.0f, ks[t]};
		bad = DrawOutside(s, v, p, allowed, 4000, 50 + t, count);
		hit = 0;
		for (int i = 0; i < n; i++)
			hit += allowed[i] && count[i] > 0;
		TAP_OK(bad == 0 && hit == ks[t], "vocab 151936, top_k %d: draws only among the %d largest of"
			   " a full sort (%d outside), and all of them appear (%d)", ks[t], ks[t], bad, hit);
	}

	/* 30 finite logits, the rest -inf or NaN: top_k 50 keeps the 30 and never draws the rest */
	for (int i = 0; i < n; i++)
	{
		v[i] = i % 3 ? -INFINITY : NAN;
		allowed[i] = false;
	}
	for (int i = 0; i < 30; i++)
	{
		int			at = (int) (MixNext(&x) % (uint64_t) n);

		v[at] = (float) i * 0.01f;
		allowed[at] = true;
	}
	memset(count, 0, sizeof(int) * n);
	p = (sampler_params) {1.0f, 1.0f, 50};
	bad = DrawOutside(s, v, p, allowed, 4000, 60, count);
	hit = 0;
	for (int i = 0; i < n; i++)
		hit += allowed[i] && count[i] > 0;
	TAP_OK(bad == 0 && hit > 0, "top_k 50 with 30 finite logits of 151936: no -inf or NaN drawn (%d),"
		   " %d of the finite ones drawn", bad, hit);

	/* integer logits 0..9: the 40th largest lies in a tie of about 15000 */
	for (int i = 0; i < n; i++)
		v[i] = (float) (MixNext(&x) % 10);
	memset(count, 0, sizeof(int) * n);
	for (int i = 0; i < n; i++)
		allowed[i] = v[i] == 9.0f;
	p = (sampler_params) {2.0f, 1.0f, 40};
	bad = DrawOutside(s, v, p, allowed, 4000, 61, count);
	{
		int			distinct = 0,
					first_ids = 0,
					seen9 = 0;

		for (int i = 0; i < n; i++)
		{
			distinct += count[i] > 0;
			/* ties go by id: the 40 kept are the 40 lowest ids of value 9 */
			if (v[i] == 9.0f && seen9++ < 40)
				first_ids += count[i] > 0;
		}
		TAP_OK(bad == 0 && distinct == 40 && first_ids == 40,
			   "top_k 40 inside a tie of the largest value: exactly the 40 lowest ids are drawn"
			   " (%d outside, %d distinct, %d of the lowest ids)", bad, distinct, first_ids);
	}
	free(v);
	free(allowed);
	free(count);
	free(r);
	sampler_free(s);
}

int
main(void)
{
	TestArgmax();
	TestRng();
	TestGreedyAndSeeds();
	TestFrequencies();
	TestTopPSmall();
	TestTemperatureAndNan();
	TestTopKRandom();
	TestLargeVocab();
	TestExp();
	TestQwenVocab();
	TestTopKLarge();
	return tap_done();
}
