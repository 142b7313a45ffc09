/*
 * sampler.h: choosing the next token from logits, per sequence: greedy,
 * temperature, top-k, top-p, with a per-request seeded generator so that a
 * seeded request is reproducible whatever else runs beside it.
 */
#ifndef CBLLM_SAMPLER_H
#define CBLLM_SAMPLER_H

#include <stdint.h>

#include "rng.h"
#include "util.h"

typedef struct sampler_params
{
	float		temperature;	/* 0: greedy */
	float		top_p;			/* (0, 1]; 1: off */
	int			top_k;			/* 0: off */
} sampler_params;

typedef struct cbllm_sampler cbllm_sampler;

int			sampler_create(int vocab_size, cbllm_sampler **out, cbllm_err *err);
void		sampler_free(cbllm_sampler *s);

/* The index of the largest logit (the first of equal ones). */
int32_t		sampler_argmax(const float *logits, int n);

/* Choose a token from logits (vocab_size floats). */
int32_t		sampler_sample(cbllm_sampler *s, const float *logits, const sampler_params *p,
						   cbllm_rng *rng);

#endif
