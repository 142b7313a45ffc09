/*
 * model_dummy.c: the "dummy" load format: a model of config.json's geometry
 * whose weights are generated, not read, so that a 7B model can be benchmarked
 * without 13 GB of safetensors files (vLLM's load_format=dummy).
 *
 * Every matrix is BF16 of the shape the checkpoint loader would bind.  Its
 * values come from a seed alone: element i is cbllm_dummy_value(seed, i) * scale,
 * multiplied in f32 and rounded to bf16 nearest-even, with scale = 1/sqrt(cols)
 * so that a matmul keeps activations of order one.  The seed of each matrix
 * is a bijective hash of a fixed base plus its index in model_visit's order
 * (for Llama: embed, layer 0 (wq wk wv wo w_gate w_up w_down), layer 1, ...,
 * lm_head), so seeds are distinct, nonzero and the same on every load.  With
 * on_host the values are written now into malloc'd buffers the model owns;
 * otherwise data stays NULL and a device backend generates them from
 * dummy_seed and dummy_scale.  Norm weights are all ones and biases zeros
 * either way.
 */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>

#include "base/numeric.h"

/*
 * Seeds are cbllm_mix64(DUMMY_SEED_BASE + index): the mix is a bijection of
 * the 64-bit integers with 0 its only preimage of 0, and base + index never
 * wraps to 0 for the index of any tensor, so no seed is 0.
 */
#define DUMMY_SEED_BASE 0x63626c6c6d000000ULL

/* Fill w's bf16 buffer of rows * cols elements with its dummy values. */
static void
FillDummy(uint16_t *buf, const cbllm_weight *w)
{
	int64_t		n = w->rows * w->cols;

	for (int64_t i = 0; i < n; i++)
		buf[i] = cbllm_f32_to_bf16(cbllm_dummy_value(w->dummy_seed, (uint64_t) i) * w->dummy_scale);
}

/* What DummyTensor works on. */
typedef struct dummy_walk
{
	cbllm_model *m;
	bool		on_host;		/* fill the matrices' host buffers now */
} dummy_walk;

/* Give one tensor its dummy: a seeded matrix (filled when on_host), ones for a norm, zeros for a bias. */
static int
DummyTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	cbllm_model *m = ((dummy_walk *) arg)->m;
	bool		on_host = ((dummy_walk *) arg)->on_host;
	cbllm_weight *w = mt->matrix;
	size_t		bytes;

	if (mt->vector != NULL)
	{
		float	   *v = malloc(sizeof(float) * mt->rows);

		if (v == NULL && mt->layer >= 0)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the %s of layer %d",
							  mt->t->role, mt->layer);
		if (v == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for %s", mt->t->role);
		for (int64_t i = 0; i < mt->rows; i++)
			v[i] = mt->t->kind == ARCH_NORM ? 1.0f : 0.0f;
		*mt->vector = v;
		return CBLLM_OK;
	}
	if (mt->tied)
	{
		*w = m->embed;
		w->owned = false;		/* the embedding's buffer */
		return CBLLM_OK;
	}
	bytes = cbllm_dtype_row_bytes(CBLLM_BF16, mt->rows * mt->cols);
	w->dtype = CBLLM_BF16;
	w->rows = mt->rows;
	w->cols = mt->cols;
	w->data = NULL;
	w->dummy_seed = cbllm_mix64(DUMMY_SEED_BASE + mt->index);
	w->dummy_scale = 1.0f / sqrtf((float) mt->cols);
	m->weight_bytes += bytes;
	if (on_host)
	{
		uint16_t   *buf = malloc(bytes);

		if (buf == NULL && mt->layer >= 0)
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "out of memory for the dummy weights of layer %d's %s (%zu bytes)",
							  mt->layer, mt->t->role, bytes);
		if (buf == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "out of memory for the dummy weights of %s (%zu bytes)",
							  mt->t->role, bytes);
		FillDummy(buf, w);
		w->data = buf;
		w->owned = true;
	}
	return CBLLM_OK;
}

/* Give m (its cfg loaded) dummy matrices and unit norms; model_free undoes a partial one. */
int
model_load_dummy(cbllm_model *m, bool on_host, cbllm_err *err)
{
	dummy_walk	walk = {m, on_host};
	int			rc;

	m->lm_head_tied = m->cfg.tie_embeddings;
	if ((rc = model_alloc_layers(m, err)))
		return rc;
	return model_visit(m, DummyTensor, &walk, err);
}
