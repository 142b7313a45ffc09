/*
 * engine_constraint.c: the engine's compiled constraints (constraint.h),
 * kept by their text so that every request with the same JSON schema,
 * regex or choices shares one automaton and its cached masks; the
 * vocabulary's trie and the per-thread scratch the constrained sampling
 * writes into, made at the first constrained request; and the sampling of
 * one row under its controls (constraint, penalties, logit bias, min_p).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "logits_process.h"

/* Free the scratch of controlled sampling. */
static void
FreeScratch(cbllm_engine *e)
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
	e->c_logits = NULL;
	e->c_mask = NULL;
	e->c_seen = NULL;
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
	FreeScratch(e);
	return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the sampling controls");
}

/* Build the trie and the scratch on first use. */
static int
EnsureVocab(cbllm_engine *e, cbllm_err *err)
{
	int			rc;

	if ((rc = engine_sample_scratch(e, err)) != CBLLM_OK || e->cvocab != NULL)
		return rc;
	return constraint_vocab_build(e->tok, e->n_sample_ids, e->gen.eos_ids, e->gen.n_eos,
								  &e->cvocab, err);
}

/* Drop the least recently used constraint no request holds, if any. */
static void
EvictOne(cbllm_engine *e)
{
	engine_constraint **victim = NULL;

	for (engine_constraint **p = &e->constraints; *p != NULL; p = &(*p)->next)
		if ((*p)->refs == 0 && (victim == NULL || (*p)->last_used < (*victim)->last_used))
			victim = p;
	if (victim != NULL)
	{
		engine_constraint *x = *victim;

		*victim = x->next;
		constraint_free(x->c);
		free(x);
		e->n_constraints--;
	}
}

/* The compiled constraint of text[0..len), compiled now unless kept; one reference more. */
int
engine_constraint_acquire(cbllm_engine *e, const char *text, size_t len, engine_constraint **out,
						  cbllm_err *err)
{
	engine_constraint *x;
	int			rc;

	*out = NULL;
	if ((rc = EnsureVocab(e, err)) != CBLLM_OK)
		return rc;
	for (x = e->constraints; x != NULL; x = x->next)
	{
		size_t		n;
		const char *t = constraint_text(x->c, &n);

		if (n == len && memcmp(t, text, len) == 0)
			break;
	}
	if (x == NULL)
	{
		if (e->n_constraints >= ENGINE_MAX_CONSTRAINTS)
			EvictOne(e);
		if ((x = calloc(1, sizeof(*x))) == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		if ((rc = constraint_compile(e->cvocab, text, len, &x->c, err)) != CBLLM_OK)
		{
			free(x);
			return rc;
		}
		if (constraint_final(x->c, CONSTRAINT_START))
		{
			constraint_free(x->c);
			free(x);
			return cbllm_fail(err, CBLLM_ERR_INVALID,
							  "the constraint admits only the empty text: there is nothing to generate");
		}
		x->next = e->constraints;
		e->constraints = x;
		e->n_constraints++;
	}
	x->refs++;
	x->last_used = ++e->constraint_clock;
	*out = x;
	return CBLLM_OK;
}

/* One reference fewer (the entry stays cached). */
void
engine_constraint_release(cbllm_engine *e, engine_constraint *x)
{
	if (x != NULL && x->refs > 0)
		x->refs--;
}

/* Free every compiled constraint, the trie and the scratch. */
void
engine_constraints_free(cbllm_engine *e)
{
	while (e->constraints != NULL)
	{
		engine_constraint *x = e->constraints;

		e->constraints = x->next;
		constraint_free(x->c);
		free(x);
	}
	e->n_constraints = 0;
	FreeScratch(e);
	constraint_vocab_free(e->cvocab);
	e->cvocab = NULL;
}

/*
 * Sample r's next token from logits through its controls (logits_process.h)
 * on compute thread thread: penalties, logit bias, and under a constraint
 * only the tokens that keep the text on a path to a full match (within the
 * tokens r may still generate).  When no token can continue a constraint
 * (a vocabulary without the bytes it needs, or a complete text and no
 * end-of-turn token), r is marked dead and request_append_token ends it.
 */
int32_t
engine_sample_controlled(cbllm_engine *e, cbllm_request *r, const float *logits, int thread)
{
	constraint_step st = {0};
	sampler_params spp = request_sampler_params(r);

	if (r->cons != NULL)
	{
		int			remaining = r->sp.max_tokens - (r->n_tokens - r->n_prompt);
		int			room = e->params.max_model_len - r->n_tokens;

		remaining = room < remaining ? room : remaining;
		constraint_next(r->cons->c, r->cstate, remaining, e->c_mask[thread], &st);
		if (st.n_allowed == 0 && (!st.complete || e->gen.n_eos == 0))
		{
			r->cons_dead = true;
			return 0;
		}
	}
	logits_process(logits, e->n_sample_ids, &r->sp, r->tokens, r->n_prompt,
				   r->n_tokens - r->n_prompt, st.mask, e->c_seen[thread], e->c_logits[thread]);
	return sampler_sample(e->samplers[thread], e->c_logits[thread], &spp, &r->rng);
}
