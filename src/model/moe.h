/*
 * moe.h: how a mixture of experts routes one token, and how a step's
 * (token, expert) pairs are grouped by expert.  The router's logits (one
 * per expert) become probabilities by a softmax over all the experts; the
 * token goes to the k experts of highest probability (of equal ones, the
 * lower index first), in that order, each weighted by its probability, or,
 * when the model renormalises (cfg.moe_norm_topk), by its share of the k
 * chosen probabilities.  This is HF's Qwen3-MoE and Mixtral routing (and,
 * renormalised, a softmax over the k chosen logits alone, as gpt-oss has
 * it).  Written once for every backend: CBLLM_HOST_DEVICE makes the rule a
 * device function too (the CUDA routing kernel runs it a thread a token).
 */
#ifndef CBLLM_MOE_H
#define CBLLM_MOE_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"				/* CBLLM_HOST_DEVICE */

/* Whether logit a ranks above b: larger, and any number above NaN. */
static inline CBLLM_HOST_DEVICE bool
moe_ranks_above(float a, float b)
{
	return a > b || (isnan(b) && !isnan(a));
}

/*
 * ids (k) and weights (k) of the token whose router logits are logits
 * (n_experts), 1 <= k <= n_experts; each weight then times scale[its
 * expert] when scale (n_experts) is given.  A NaN logit is never chosen before a
 * number; with no finite logit (all NaN or -inf) the experts are still
 * chosen, with weight 0.  The softmax's sum is taken in double.
 */
static inline CBLLM_HOST_DEVICE void
moe_route(const float *logits, int n_experts, int k, bool renormalise, const float *scale,
		  int32_t *ids, float *weights)
{
	float		mx = -INFINITY;
	double		total = 0,
				chosen = 0;

	for (int e = 0; e < n_experts; e++)
		if (logits[e] > mx)
			mx = logits[e];
	for (int e = 0; e < n_experts; e++)
		total += isnan(logits[e]) ? 0 : exp((double) logits[e] - mx);
	/* k passes of a selection: the best expert not yet taken, the lower index on ties */
	for (int j = 0; j < k; j++)
	{
		int			best = -1;

		for (int e = 0; e < n_experts; e++)
		{
			bool		taken = false;

			for (int i = 0; i < j && !taken; i++)
				taken = ids[i] == e;
			if (!taken && (best < 0 || moe_ranks_above(logits[e], logits[best])))
				best = e;
		}
		ids[j] = best;
		weights[j] = isnan(logits[best]) || !(total > 0 && isfinite(total)) ? 0.0f :
			(float) (exp((double) logits[best] - mx) / total);
		chosen += weights[j];
	}
	if (renormalise && chosen > 0)
		for (int j = 0; j < k; j++)
			weights[j] = (float) (weights[j] / chosen);
	for (int j = 0; scale != NULL && j < k; j++)
		weights[j] *= scale[ids[j]];	/* Gemma 4's per-expert scale */
}

/*
 * Group the n pairs whose experts are ids (n, each in [0, n_experts)) by
 * expert, a stable counting sort: start (n_experts + 1) gets each expert's
 * first row (start[n_experts] = n), slot (n) each pair's row, so that an
 * expert's pairs are one block of rows in pair order; fill (n_experts) is
 * scratch.
 */
void		moe_group(const int32_t *ids, int n, int n_experts, int32_t *start, int32_t *fill,
					  int32_t *slot);

#endif
