/*
 * engine_sample.c: sampling one row of logits under a request's controls
 * (the constraint's mask, penalties, logit bias, min_p; logits_process.h),
 * with its per-token logprobs when it asked for them, on the host; a
 * constrained request's mask for a device that samples (engine_step.c);
 * and the scratch that sampling writes into, made at the first request that
 * needs it.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "sample/logits_process.h"

/* Free the scratch of controlled sampling. */
void
engine_sample_scratch_free(cbllm_engine *e)
{
	for (int i = 0; i < e->n_samplers; i++)
	{
		if (e->c_logits)
			free(e->c_logits[i]);
		if (e->c_mask)
			free(e->c_mask[i]);
		if (e->c_seen)
			free(e->c_seen[i]);
	}
	free(e->c_logits);
	free(e->c_mask);
	free(e->c_seen);
	free(e->dev_masks);
	e->c_logits = NULL;
	e->c_mask = NULL;
	e->c_seen = NULL;
	e->dev_masks = NULL;
}

/*
 * The per-thread scratch of controlled sampling, made on first use: the
 * processed logits, a budgeted mask and the penalties' token marks.
 */
int
engine_sample_scratch(cbllm_engine *e, cbllm_err *err)
{
	int			words = (e->n_sample_ids + 31) / 32;

	if (e->c_logits != NULL)
		return CBLLM_OK;
	e->c_logits = calloc(e->n_samplers, sizeof(float *));
	e->c_mask = calloc(e->n_samplers, sizeof(uint32_t *));
	e->c_seen = calloc(e->n_samplers, sizeof(uint32_t *));
	if (e->c_logits == NULL || e->c_mask == NULL || e->c_seen == NULL)
		goto nomem;
	for (int i = 0; i < e->n_samplers; i++)
		if ((e->c_logits[i] = malloc(sizeof(float) * e->n_sample_ids)) == NULL ||
			(e->c_mask[i] = malloc(sizeof(uint32_t) * words)) == NULL ||
			(e->c_seen[i] = malloc(sizeof(uint32_t) * e->n_sample_ids)) == NULL)
			goto nomem;
	return CBLLM_OK;
nomem:
	engine_sample_scratch_free(e);
	return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the sampling controls");
}

/*
 * The tokens constrained request r may generate next, within the tokens it
 * may still generate (the budget rule): st->mask is the cached mask or
 * scratch (constraint_mask_words words).  false when no token can continue
 * the constraint (a vocabulary without the bytes it needs, or a complete
 * text and no end-of-turn token): r is marked dead, and
 * request_append_token ends it whatever token is drawn.
 */
bool
engine_constraint_mask(cbllm_engine *e, cbllm_request *r, uint32_t *scratch, constraint_step *st)
{
	int			remaining = r->eng->sp.max_tokens - (r->n_tokens - r->n_prompt);
	int			room = e->params.max_model_len - r->n_tokens;

	remaining = room < remaining ? room : remaining;
	constraint_next(r->eng->cons->c, r->eng->cstate, remaining, scratch, st);
	if (st->n_allowed == 0 && (!st->complete || e->gen.n_eos == 0))
	{
		r->eng->cons_dead = true;
		return false;
	}
	return true;
}

/*
 * Sample r's next token from logits through its controls on compute thread
 * thread: penalties, logit bias, and under a constraint only the tokens
 * that keep the text on a path to a full match (within the tokens r may
 * still generate); then, when r asked for logprobs, the distribution's
 * log-sum-exp and top tokens (before min_p), kept in r->eng->lp_next for
 * request_append_token; then min_p and the draw.  A request whose
 * constraint cannot go on (engine_constraint_mask) draws nothing.
 */
int32_t
engine_sample_controlled(cbllm_engine *e, cbllm_request *r, const float *logits, int thread)
{
	constraint_step st = {0};
	sampler_params spp = request_sampler_params(r);
	float	   *x = e->c_logits[thread];
	float		lse = 0;
	int32_t		tok;

	if (r->eng->cons != NULL && !engine_constraint_mask(e, r, e->c_mask[thread], &st))
		return 0;
	logits_process(logits, e->n_sample_ids, &r->eng->sp, r->tokens, r->n_prompt,
				   r->n_tokens - r->n_prompt, st.mask, e->c_seen[thread], x);
	if (r->eng->sp.logprobs)
		lse = sampler_logprobs(e->samplers[thread], x, r->eng->sp.top_logprobs, r->eng->lp_next.top_ids,
							   r->eng->lp_next.top_logprobs, &r->eng->lp_next.n_top);
	logits_min_p(x, e->n_sample_ids, &r->eng->sp);
	tok = sampler_sample(e->samplers[thread], x, &spp, &r->eng->rng);
	if (r->eng->sp.logprobs)
	{
		/* min_p never lowers a token it keeps, so x[tok] is still the step-4 logit */
		r->eng->lp_next.id = tok;
		r->eng->lp_next.logprob = x[tok] - lse;
	}
	return tok;
}
