/*
 * model_dummy.c: the "dummy" load format: a model of config.json's geometry
 * whose weights are generated, not read, so that a 7B model can be benchmarked
 * without 13 GB of safetensors files (vLLM's load_format=dummy).
 *
 * Every matrix is BF16 of the shape the checkpoint loader would bind.  Its
 * values come from a seed alone: element i is dummy_value(seed, i) * scale,
 * multiplied in f32 and rounded to bf16 nearest-even, with scale = 1/sqrt(cols)
 * so that a matmul keeps activations of order one.  The seed of each matrix
 * is a bijective hash of a fixed base plus its index in the order embed,
 * layer 0 (wq wk wv wo w_gate w_up w_down), layer 1, ..., lm_head, so seeds
 * are distinct, nonzero and the same on every load.  With on_host the values
 * are written now into malloc'd buffers the model owns; otherwise data stays
 * NULL and a device backend generates them from dummy_seed and dummy_scale.
 * Norm weights are all ones either way.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>

#include "numeric.h"

/*
 * Seeds are DummySeedMix(DUMMY_SEED_BASE + index): the mix is a bijection of
 * the 64-bit integers with 0 its only preimage of 0, and base + index never
 * wraps to 0 for the index of any tensor, so no seed is 0.
 */
#define DUMMY_SEED_BASE 0x63626c6c6d000000ULL

/* The splitmix64 finalizer: a bijection of the 64-bit integers fixing 0. */
static uint64_t
DummySeedMix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Fill w's bf16 buffer of rows * cols elements with its dummy values. */
static void
FillDummy(uint16_t *buf, const cbllm_weight *w)
{
	int64_t		n = w->rows * w->cols;

	for (int64_t i = 0; i < n; i++)
		buf[i] = cbllm_f32_to_bf16(dummy_value(w->dummy_seed, (uint64_t) i) * w->dummy_scale);
}

/*
 * Make w the dummy matrix number index of shape (rows, cols), filled when
 * on_host; name (with layer when >= 0) is for the error message.
 */
static int
MakeDummy(cbllm_model *m, int layer, const char *name, uint64_t index, int64_t rows,
		  int64_t cols, bool on_host, cbllm_weight *w, cbllm_err *err)
{
	size_t		bytes = cbllm_dtype_row_bytes(CBLLM_BF16, rows * cols);

	w->dtype = CBLLM_BF16;
	w->rows = rows;
	w->cols = cols;
	w->data = NULL;
	w->dummy_seed = DummySeedMix(DUMMY_SEED_BASE + index);
	w->dummy_scale = 1.0f / sqrtf((float) cols);
	m->weight_bytes += bytes;
	if (on_host)
	{
		uint16_t   *buf = malloc(bytes);

		if (buf == NULL && layer >= 0)
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "out of memory for the dummy weights of layer %d's %s (%zu bytes)",
							  layer, name, bytes);
		if (buf == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "out of memory for the dummy weights of %s (%zu bytes)",
							  name, bytes);
		FillDummy(buf, w);
		w->data = buf;
	}
	return CBLLM_OK;
}

/* A malloc'd f32 norm vector of n ones, or NULL when out of memory. */
static float *
UnitNorm(int64_t n)
{
	float	   *v = malloc(sizeof(float) * n);

	if (v != NULL)
		for (int64_t i = 0; i < n; i++)
			v[i] = 1.0f;
	return v;
}

/* Give layer i its dummy matrices (indices 1 + 7 i ...) and unit norms. */
static int
DummyLayer(cbllm_model *m, int i, bool on_host, cbllm_err *err)
{
	const cbllm_model_config *c = &m->cfg;
	cbllm_layer *l = &m->layers[i];
	int64_t		q = (int64_t) c->n_heads * c->head_dim;
	int64_t		kv = (int64_t) c->n_kv_heads * c->head_dim;
	uint64_t	base = 1 + 7 * (uint64_t) i;
	int			rc;

	l->attn_norm = UnitNorm(c->hidden);
	l->mlp_norm = UnitNorm(c->hidden);
	if (l->attn_norm == NULL || l->mlp_norm == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the norms of layer %d", i);
	if ((rc = MakeDummy(m, i, "wq", base + 0, q, c->hidden, on_host, &l->wq, err)) ||
		(rc = MakeDummy(m, i, "wk", base + 1, kv, c->hidden, on_host, &l->wk, err)) ||
		(rc = MakeDummy(m, i, "wv", base + 2, kv, c->hidden, on_host, &l->wv, err)) ||
		(rc = MakeDummy(m, i, "wo", base + 3, c->hidden, q, on_host, &l->wo, err)) ||
		(rc = MakeDummy(m, i, "w_gate", base + 4, c->intermediate, c->hidden, on_host,
						&l->w_gate, err)) ||
		(rc = MakeDummy(m, i, "w_up", base + 5, c->intermediate, c->hidden, on_host,
						&l->w_up, err)) ||
		(rc = MakeDummy(m, i, "w_down", base + 6, c->hidden, c->intermediate, on_host,
						&l->w_down, err)))
		return rc;
	return CBLLM_OK;
}

/* Give m (its cfg loaded) dummy matrices and unit norms; model_free undoes a partial one. */
int
model_load_dummy(cbllm_model *m, bool on_host, cbllm_err *err)
{
	const cbllm_model_config *c = &m->cfg;
	int			rc;

	m->owns_matrices = on_host;
	m->layers = calloc(c->n_layers, sizeof(cbllm_layer));
	if (m->layers == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the dummy layers");
	if ((rc = MakeDummy(m, -1, "the embeddings", 0, c->vocab_size, c->hidden, on_host,
						&m->embed, err)))
		return rc;
	for (int i = 0; i < c->n_layers; i++)
		if ((rc = DummyLayer(m, i, on_host, err)))
			return rc;
	m->final_norm = UnitNorm(c->hidden);
	if (m->final_norm == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the final norm");
	if (c->tie_embeddings)
	{
		m->lm_head = m->embed;
		return CBLLM_OK;
	}
	return MakeDummy(m, -1, "lm_head", 1 + 7 * (uint64_t) c->n_layers, c->vocab_size,
					 c->hidden, on_host, &m->lm_head, err);
}
