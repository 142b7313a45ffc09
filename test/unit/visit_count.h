/* visit_count.h: what model_visit shows of a model, counted by kind, for the architecture tests. */
#ifndef CBLLM_TEST_VISIT_COUNT_H
#define CBLLM_TEST_VISIT_COUNT_H

#include "model/model.h"

/* Counts of what model_visit shows. */
typedef struct visit_count
{
	int			matrices;
	int			norms;
	int			biases;
	int			tied;
	int			bad_index;		/* matrices whose index is not the running count */
	int			biases_set;		/* bias vectors with data */
} visit_count;

/* Count one visited tensor. */
static inline int
CountTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	visit_count *c = arg;

	if (mt->tied)
		c->tied++;
	else if (mt->matrix != NULL)
		c->bad_index += mt->index != (uint64_t) c->matrices++;
	else if (mt->t->kind == ARCH_NORM)
		c->norms++;
	else
	{
		c->biases++;
		c->biases_set += *mt->vector != NULL;
	}
	return CBLLM_OK;
}

#endif
