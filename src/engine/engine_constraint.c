/*
 * engine_constraint.c: the engine's compiled constraints (constraint.h),
 * kept by their text so that every request with the same JSON schema,
 * regex or choices shares one automaton and its cached masks, and the
 * vocabulary's trie, made at the first constrained request.  They are
 * applied in engine_sample.c.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

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
	engine_sample_scratch_free(e);
	constraint_vocab_free(e->cvocab);
	e->cvocab = NULL;
}
