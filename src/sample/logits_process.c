/*
 * logits_process.c: penalties, logit bias, constraint mask and min-p over
 * one row of logits (logits_process.h).
 */
#include "sample/logits_process.h"

#include <math.h>
#include <string.h>

#include "constrain/constraint.h"

bool
logits_process_active(const cbllm_sampling *sp)
{
	return (sp->repetition_penalty > 0 && sp->repetition_penalty != 1) ||
		sp->frequency_penalty != 0 || sp->presence_penalty != 0 || sp->n_bias > 0 ||
		(sp->min_p > 0 && sp->temperature > 0);
}

/* Step 1: each distinct token of tokens[0..n) penalised once (seen[t] marks it). */
static void
Repetition(float *out, int n, float r, const int32_t *tokens, int n_tokens, uint32_t *seen)
{
	for (int i = 0; i < n_tokens; i++)
	{
		int32_t		t = tokens[i];

		if (t >= 0 && t < n)
			seen[t] = 0;
	}
	for (int i = 0; i < n_tokens; i++)
	{
		int32_t		t = tokens[i];

		if (t < 0 || t >= n || seen[t])
			continue;
		seen[t] = 1;
		out[t] = out[t] > 0 ? out[t] / r : out[t] * r;
	}
}

/* Step 2: each generated token loses count * f + p (seen[t] counts it). */
static void
FrequencyPresence(float *out, int n, float f, float p, const int32_t *gen, int n_gen, uint32_t *seen)
{
	for (int i = 0; i < n_gen; i++)
		if (gen[i] >= 0 && gen[i] < n)
			seen[gen[i]] = 0;
	for (int i = 0; i < n_gen; i++)
		if (gen[i] >= 0 && gen[i] < n)
			seen[gen[i]]++;
	for (int i = 0; i < n_gen; i++)
	{
		int32_t		t = gen[i];

		if (t < 0 || t >= n || seen[t] == 0)
			continue;
		out[t] -= (float) seen[t] * f + p;
		seen[t] = 0;			/* once per distinct token */
	}
}

/* Step 5: logits below max + temperature * ln(min_p) become -inf. */
static void
MinP(float *out, int n, float min_p, float temperature)
{
	float		mx = -INFINITY,
				floor;

	for (int i = 0; i < n; i++)
		mx = out[i] > mx ? out[i] : mx;
	if (!isfinite(mx))
		return;
	floor = mx + temperature * logf(min_p);
	for (int i = 0; i < n; i++)
		if (out[i] < floor)
			out[i] = -INFINITY;
}

void
logits_process(const float *in, int n, const cbllm_sampling *sp, const int32_t *tokens,
			   int n_prompt, int n_gen, const uint32_t *mask, uint32_t *seen, float *out)
{
	if (mask != NULL)
		constraint_apply(mask, in, n, out);
	else
		memcpy(out, in, sizeof(float) * n);
	if (sp->repetition_penalty > 0 && sp->repetition_penalty != 1)
		Repetition(out, n, sp->repetition_penalty, tokens, n_prompt + n_gen, seen);
	if (sp->frequency_penalty != 0 || sp->presence_penalty != 0)
		FrequencyPresence(out, n, sp->frequency_penalty, sp->presence_penalty, tokens + n_prompt,
						  n_gen, seen);
	for (int k = 0; k < sp->n_bias; k++)
		if (sp->bias_ids[k] >= 0 && sp->bias_ids[k] < n)
			out[sp->bias_ids[k]] += sp->bias_values[k];
}

void
logits_min_p(float *out, int n, const cbllm_sampling *sp)
{
	if (sp->min_p > 0 && sp->temperature > 0)
		MinP(out, n, sp->min_p, sp->temperature);
}
