/*
 * test_cuda_sample.c: the device sampler against the distribution it must
 * draw from: greedy rows and top_k 1 take the argmax and a NaN logit is
 * never drawn; rows of one logits row drawn with evenly spread uniforms give
 * each token its share of the host's filtered distribution (temperature,
 * top-k, top-p, ties); constraint masks leave only allowed tokens, greedy or
 * sampled, and a row without a mask beside them untouched.
 *
 * Built twice, as test_cuda_ops.c is: against CUDA (run on a GPU by
 * test/gpu/check.sh; skipped, and saying so, without one) and against the
 * CPU emulator of CUDA (test/cuda_emu), which runs it in CI.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "device_buf.h"
#include "tap.h"

/* Draw one token per (row params) on the device for rows sharing one logits row. */
static int
DrawMany(const float *logits, int n, const sampler_row *p, int rows, int32_t *out)
{
	float	   *all = malloc(sizeof(float) * (size_t) n * rows);
	float	   *dl;
	void	   *dp,
			   *dout = NULL;
	cbllm_err	err;
	int			rc;

	for (int r = 0; r < rows; r++)
		memcpy(all + (size_t) r * n, logits, sizeof(float) * n);
	dl = Up(all, (size_t) n * rows);
	dp = UpBytes(p, sizeof(sampler_row) * rows);
	cuda_alloc(&dout, sizeof(int32_t) * rows, NULL);
	rc = cuda_sample(dl, rows, n, n, dp, dout, NULL, &err);
	if (rc == CBLLM_OK)
		rc = cuda_download(out, dout, sizeof(int32_t) * rows, &err);
	if (rc != CBLLM_OK)
		TAP_DIAG("sampling failed: %s", err.msg);
	free(all);
	cuda_free(dl), cuda_free(dp), cuda_free(dout);
	return rc;
}

/*
 * The distribution device sampling must draw from, by the host's rules:
 * top-k by logit (ties to the lower id), softmax at the temperature, then
 * the smallest most-likely set reaching top_p.  prob[i] is 0 outside it.
 */
static void
RefDistribution(const float *l, int n, float temp, int top_k, float top_p, double *prob)
{
	int		   *ord = malloc(sizeof(int) * n);
	double		mx = -INFINITY,
				total = 0,
				mass = 0;
	int			keep;

	for (int i = 0; i < n; i++)
		ord[i] = i;
	/* insertion sort by (logit desc, id asc): n is small */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && (l[ord[j]] > l[ord[j - 1]] ||
								  (l[ord[j]] == l[ord[j - 1]] && ord[j] < ord[j - 1])); j--)
		{
			int			t = ord[j];

			ord[j] = ord[j - 1];
			ord[j - 1] = t;
		}
	keep = top_k > 0 && top_k < n ? top_k : n;
	for (int i = 0; i < n; i++)
		prob[i] = 0;
	mx = l[ord[0]];
	for (int i = 0; i < keep; i++)
		total += exp((l[ord[i]] - mx) / temp);
	for (int i = 0; i < keep && (top_p >= 1 || mass < top_p * total); i++)
	{
		prob[ord[i]] = exp((l[ord[i]] - mx) / temp);
		mass += prob[ord[i]];
	}
	for (int i = 0; i < n; i++)
		prob[i] /= mass;
	free(ord);
}

/*
 * Sampling on a grid of G uniform draws: the share of the grid each token
 * gets equals its probability (within 2 / G: the grid's resolution), and no
 * token outside the set is ever drawn.
 */
static void
CheckGrid(const char *what, const float *l, int n, float temp, int top_k, float top_p)
{
	enum
	{
		G = 200
	};
	sampler_row p[G];
	int32_t		got[G];
	double		prob[64],
				worst = 0;
	int			count[64] = {0},
				outside = 0;

	for (int g = 0; g < G; g++)
		p[g] = (sampler_row) {{temp, top_p, top_k}, (g + 0.5f) / G, 0};
	RefDistribution(l, n, temp, top_k, top_p, prob);
	if (DrawMany(l, n, p, G, got) != CBLLM_OK)
	{
		TAP_OK(false, "%s: sampling ran", what);
		return;
	}
	for (int g = 0; g < G; g++)
	{
		if (got[g] < 0 || got[g] >= n || prob[got[g]] == 0)
			outside++;
		else
			count[got[g]]++;
	}
	for (int i = 0; i < n; i++)
		worst = fmax(worst, fabs((double) count[i] / G - prob[i]));
	TAP_OK(outside == 0 && worst <= 2.0 / G,
		   "sampling (%s): draws follow the filtered distribution (worst share error %.3f, %d outside the set)",
		   what, worst, outside);
}

/*
 * Constraint masks on the device: a greedy row whose mask leaves out its
 * argmax takes the best allowed token; sampled rows draw only allowed
 * tokens, in the shares of the masked softmax; a row without a mask beside
 * them is untouched.
 */
static void
TestMaskedSampling(void)
{
	enum
	{
		N = 70,					/* three mask words, the last one partial */
		G = 300
	};
	static const int allowed[] = {3, 9, 33, 64, 69};
	float		l[N],
			   *all = malloc(sizeof(float) * N * (G + 2));
	uint32_t	masks[2][3] = {{0}};
	sampler_row p[G + 2];
	int32_t		got[G + 2];
	double		w[N] = {0},
				total = 0,
				worst = 0;
	int			count[N] = {0},
				outside = 0,
				best = -1,
				rc;
	float	   *dl;
	void	   *dp,
			   *dm,
			   *dout = NULL;
	cbllm_err	err;

	for (int i = 0; i < N; i++)
		l[i] = 1.5f * Rand();
	l[20] = 6;					/* the argmax, never allowed */
	for (size_t k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
	{
		int			t = allowed[k];

		masks[0][t / 32] |= 1u << (t % 32);
		w[t] = exp(l[t]);
		total += w[t];
		if (best < 0 || l[t] > l[best])
			best = t;
	}
	masks[1][best / 32] |= 1u << (best % 32);	/* a second mask: one token */
	for (int r = 0; r < G + 2; r++)
		memcpy(all + (size_t) r * N, l, sizeof(l));
	p[0] = (sampler_row) {{0, 1, 0}, 0, 1};	/* greedy within mask 1 */
	p[1] = (sampler_row) {{0, 1, 0}, 0, 0};	/* greedy, no mask */
	for (int g = 0; g < G; g++)
		p[g + 2] = (sampler_row) {{1, 1, 0}, (g + 0.5f) / G, g % 2 ? 1 : 2};
	dl = Up(all, (size_t) N * (G + 2));
	dp = UpBytes(p, sizeof(p));
	dm = UpBytes(masks, sizeof(masks));
	cuda_alloc(&dout, sizeof(got), NULL);
	rc = cuda_apply_masks(dl, G + 2, N, N, dp, dm, 2, NULL, &err);
	if (rc == CBLLM_OK)
		rc = cuda_sample(dl, G + 2, N, N, dp, dout, NULL, &err);
	if (rc == CBLLM_OK)
		rc = cuda_download(got, dout, sizeof(got), &err);
	TAP_OK(rc == CBLLM_OK && got[0] == best && got[1] == 20,
		   "masked greedy row takes the best allowed token (%d, want %d); the unmasked row its argmax (%d)",
		   got[0], best, got[1]);
	for (int g = 0; g < G; g += 2)
	{
		if (w[got[g + 3]] == 0)
			outside++;
		else
			count[got[g + 3]]++;
		outside += got[g + 2] != best;
	}
	for (int i = 0; i < N; i++)
		worst = fmax(worst, fabs((double) count[i] / (G / 2) - w[i] / total));
	TAP_OK(rc == CBLLM_OK && outside == 0 && worst <= 2.0 / (G / 2),
		   "masked sampled rows draw only allowed tokens, in the masked softmax's shares "
		   "(worst share error %.3f, %d outside)", worst, outside);
	free(all);
	cuda_free(dl), cuda_free(dp), cuda_free(dm), cuda_free(dout);
}

static void
TestSampling(void)
{
	float		l[40],
				flat[24],
				probs4[4] = {0.5f, 0.3f, 0.15f, 0.05f},
				lp[4];
	sampler_row gp[3] = {{{0, 1, 0}, 0.3f, 0}, {{0.8f, 0.9f, 1}, 0.7f, 0}, {{1.0f, 1.0f, 0}, 0.999f, 0}};
	int32_t		got[3];
	float		rows3[3 * 40];

	for (int i = 0; i < 40; i++)
		l[i] = 2.0f * Rand();
	l[17] = 3.5f;
	for (int i = 0; i < 24; i++)
		flat[i] = i % 3 == 0 ? 1.0f : -1.0f;	/* ties: ids 0, 3, 6, ... share the top */
	for (int i = 0; i < 4; i++)
		lp[i] = logf(probs4[i]);
	/* greedy rows and top_k 1 take the argmax, whatever u */
	memcpy(rows3, l, sizeof(l));
	memcpy(rows3 + 40, l, sizeof(l));
	memcpy(rows3 + 80, l, sizeof(l));
	rows3[80 + 17] = NAN;
	{
		float	   *dl = Up(rows3, 120);
		void	   *dp = UpBytes(gp, sizeof(gp)),
				   *dout = NULL;
		cbllm_err	err;
		int			rc;

		cuda_alloc(&dout, sizeof(got), NULL);
		rc = cuda_sample(dl, 3, 40, 40, dp, dout, NULL, &err);
		cuda_download(got, dout, sizeof(got), NULL);
		TAP_OK(rc == CBLLM_OK && got[0] == 17 && got[1] == 17 && got[2] != 17 && got[2] >= 0 &&
			   got[2] < 40,
			   "sampling: temperature 0 and top_k 1 give the argmax; a NaN logit is never drawn (got %d %d %d)", got[0], got[1], got[2]);
		cuda_free(dl), cuda_free(dp), cuda_free(dout);
	}
	CheckGrid("temperature 1", lp, 4, 1.0f, 0, 1.0f);
	CheckGrid("top_p 0.75 keeps the two most likely", lp, 4, 1.0f, 0, 0.75f);
	CheckGrid("temperature 0.7, top_p 0.95", l, 40, 0.7f, 0, 0.95f);
	CheckGrid("top_k 5", l, 40, 1.0f, 5, 1.0f);
	CheckGrid("top_k 5, top_p 0.6, temperature 1.3", l, 40, 1.3f, 5, 0.6f);
	CheckGrid("top_k 3 among 8 tied maxima takes the lowest ids", flat, 24, 1.0f, 3, 1.0f);
	CheckGrid("top_p 0.2 among tied maxima takes the lowest ids", flat, 24, 1.0f, 0, 0.2f);
}

int
main(int argc, char **argv)
{
	int			n = cuda_device_count();
	char		dev[300];

	if (n == 0)
	{
		printf("1..0 # SKIP no CUDA device here: the device sampler's checks need one (test/gpu/check.sh runs them; test_cuda_sample_emu runs them on the CPU emulator)\n");
		return 0;
	}
	cuda_device_describe(dev, sizeof(dev));
	TAP_DIAG("device: %s", dev);
	TestSampling();
	TestMaskedSampling();
	return tap_done();
}
