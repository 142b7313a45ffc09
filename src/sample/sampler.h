/*
 * sampler.h: choosing the next token from logits, per sequence: greedy,
 * temperature, top-k, top-p, with a per-request seeded generator so that a
 * seeded request is reproducible whatever else runs beside it.  A sampled
 * token costs a few vectorised passes over the logits and no sort of the
 * vocabulary (sampler.c).
 */
#ifndef CBLLM_SAMPLER_H
#define CBLLM_SAMPLER_H

#include <stdint.h>

#include "base/rng.h"
#include "base/util.h"

/* How a request samples: the one set of controls the host sampler and a device's read. */
typedef struct sampler_params
{
	float		temperature;	/* <= 0: greedy */
	float		top_p;			/* (0, 1]; 1: off */
	int32_t		top_k;			/* 0: off */
} sampler_params;

/*
 * One logits row to sample on a device: the request's controls, its
 * uniform draw in [0, 1) from the request's generator (the host sampler
 * draws from the generator itself) and its constraint's mask, if any.  Plain data: copied to the device as is.
 */
typedef struct sampler_row
{
	sampler_params controls;
	float		u;
	int32_t		mask;			/* 0: none; k > 0: row k - 1 of the step's constraint masks
								 * (bit t of (n_ids + 31) / 32 words: token t may be drawn) */
} sampler_row;

typedef struct cbllm_sampler cbllm_sampler;

int			sampler_create(int vocab_size, cbllm_sampler **out, cbllm_err *err);
void		sampler_free(cbllm_sampler *s);

/* The index of the largest logit (the first of equal ones). */
int32_t		sampler_argmax(const float *logits, int n);

/*
 * exp(x) for x <= 0 as the sampler computes it (within 2 ulp of the exact
 * value; 0 below -87 and for NaN).  Exposed for its tests.
 */
float		sampler_exp_nonpositive(float x);

/*
 * The log-probabilities of logits (vocab_size floats) at temperature 1: the
 * log-sum-exp is returned (-inf when no logit is finite), and the k most
 * likely tokens (largest first, ties by smaller id; never an impossible one)
 * go to ids and lps, *n_top of them.
 */
float		sampler_logprobs(cbllm_sampler *s, const float *logits, int k, int32_t *ids, float *lps,
							 int *n_top);

/* Choose a token from logits (vocab_size floats). */
int32_t		sampler_sample(cbllm_sampler *s, const float *logits, const sampler_params *p,
						   cbllm_rng *rng);

#endif
