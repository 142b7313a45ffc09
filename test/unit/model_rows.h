/*
 * model_rows.h: where a tensor of one loaded model is in another, for the
 * tests that compare a GGUF model with its checkpoint.
 */
#ifndef CBLLM_TEST_MODEL_ROWS_H
#define CBLLM_TEST_MODEL_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

/* The struct holding mt's role in model m: its layer, or the model itself. */
static inline const char *
model_rows_field(const cbllm_model *m, const model_tensor *mt)
{
	return mt->layer >= 0 ? (const char *) &m->layers[mt->layer] : (const char *) m;
}

/*
 * The checkpoint row of GGUF row r of a q or k matrix: r itself, or with
 * llama's permutation (permuted) the row it came from: row 2i of a head is
 * HF row i, row 2i + 1 is HF row i + head_dim / 2.
 */
static inline int64_t
model_rows_source(int64_t r, int head_dim, bool permuted)
{
	int64_t		h = r / head_dim,
				j = r % head_dim;

	if (!permuted)
		return r;
	return h * head_dim + (j % 2 == 0 ? j / 2 : j / 2 + head_dim / 2);
}

#endif
