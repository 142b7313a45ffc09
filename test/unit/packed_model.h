/*
 * packed_model.h: a model of dummy weights loaded twice, once packed by the
 * CPU backend at load and once as stored, and a model_visit that checks
 * every matrix of the packed one against its twin (test_weight_pack.c,
 * test_float_pack.c).
 */
#ifndef CBLLM_TEST_PACKED_MODEL_H
#define CBLLM_TEST_PACKED_MODEL_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_registry.h"
#include "dtype/dtype.h"
#include "fixture.h"
#include "backend/cpu/kernels.h"
#include "model/model.h"
#include "tap.h"
#include "backend/cpu/weight_pack.h"
#include "base/threadpool.h"

typedef struct packed_model
{
	cbllm_model *m;				/* packed by be */
	cbllm_model *stored;		/* the same model loaded again, not packed */
	cbllm_threadpool *pool;
	cbllm_backend *be;
	char	   *dir;
	char	   *cfg;
} packed_model;

/*
 * Load the llama of geometry g and dummy weights (weight_format NULL: as
 * the config says) twice under the fixture root named root, and pack the
 * first with a CPU backend of kernel set isa taking steps of max_tokens.
 */
static inline int
packed_model_open(packed_model *pm, const char *root, const char *isa, const fixture_geom *g,
				  const char *weight_format, int max_tokens, cbllm_err *err)
{
	model_load_params lp = {.format = "dummy", .dummy_on_host = true, .weight_format = weight_format,
	.threads = 2};
	backend_params bp = {.cpu_isa = isa, .max_tokens = max_tokens, .max_seqs = 2, .max_ctx = 64,
	.block_size = 16};
	int			rc = CBLLM_ERR_IO;

	memset(pm, 0, sizeof(*pm));
	pm->cfg = fixture_config_json(g, "LlamaForCausalLM", "silu", NULL);
	if (fixture_root_create(root) != NULL && (pm->dir = fixture_case_dir("model")) != NULL &&
		fixture_write_text(pm->dir, "config.json", pm->cfg))
	{
		lp.dir = pm->dir;
		rc = model_load_ex(&lp, &pm->m, err);
	}
	if (rc == CBLLM_OK && (rc = model_load_ex(&lp, &pm->stored, err)) == CBLLM_OK &&
		(rc = threadpool_create(2, &pm->pool, err)) == CBLLM_OK)
	{
		bp.model = pm->m;
		bp.pool = pm->pool;
		if ((rc = cpu_backend_reg.create(&bp, &pm->be, err)) == CBLLM_OK)
			rc = pm->be->pack_weights(pm->be, pm->m, err);
	}
	return rc;
}

static inline void
packed_model_close(packed_model *pm)
{
	if (pm->be != NULL)
		pm->be->destroy(pm->be);
	threadpool_destroy(pm->pool);
	model_free(pm->m);
	model_free(pm->stored);
	free(pm->dir);
	free(pm->cfg);
	fixture_root_remove();
}

/* What packed_model_check_rows counts over the packed model. */
typedef struct pack_walk
{
	const cbllm_model *m;		/* the packed model */
	const cbllm_model *stored;	/* its twin as stored */
	int			matrices;
	int			packed;			/* with every whole group packed */
	int			rows_back;		/* whose every row unpacks to the stored bytes */
} pack_walk;

/* The field of model b that stands where f stands in model a. */
static inline const cbllm_weight *
packed_model_twin(const cbllm_model *a, const cbllm_model *b, const cbllm_weight *f)
{
	const char *p = (const char *) f;

	if (p >= (const char *) a && p < (const char *) (a + 1))
		return (const cbllm_weight *) ((const char *) b + (p - (const char *) a));
	for (int l = 0; l < a->cfg.n_layers; l++)
		if (p >= (const char *) &a->layers[l] && p < (const char *) &a->layers[l + 1])
			return (const cbllm_weight *) ((const char *) &b->layers[l] + (p - (const char *) &a->layers[l]));
	return NULL;
}

/* model_visit over the packed model: is each matrix packed, and does each row come back? */
static inline int
packed_model_check_rows(void *arg, const model_tensor *mt, cbllm_err *err)
{
	pack_walk  *pw = arg;
	const cbllm_weight *w = mt->matrix,
			   *s;
	int64_t		rb;
	uint8_t    *row;
	bool		same = true;

	if (w == NULL || mt->tied)
		return 0;
	pw->matrices++;
	if (w->packed_rows == 0 || w->packed_rows != w->rows / WEIGHT_PACK_ROWS * WEIGHT_PACK_ROWS)
		return 0;
	pw->packed++;
	s = packed_model_twin(pw->m, pw->stored, w);
	rb = (int64_t) cbllm_dtype_row_bytes(w->dtype, w->cols);
	row = malloc(rb);
	for (int64_t r = 0; s != NULL && r < w->rows && same; r++)
		same = memcmp(weight_row(w, r, row), (const uint8_t *) s->data + r * rb, rb) == 0;
	pw->rows_back += s != NULL && same;
	free(row);
	return 0;
}

/* Walk pm's packed model with packed_model_check_rows. */
static inline pack_walk
packed_model_walk(const packed_model *pm)
{
	pack_walk	pw = {pm->m, pm->stored, 0, 0, 0};
	cbllm_err	err = {0};

	model_visit(pm->m, packed_model_check_rows, &pw, &err);
	return pw;
}

/*
 * Whether the backend's embedding lookup of tokens 0, the last and a middle
 * one in pm's packed model gives the stored rows' values.
 */
static inline bool
packed_model_embed_matches(const packed_model *pm)
{
	const cbllm_weight *e = &pm->stored->embed;
	int64_t		dim = e->cols;
	int32_t		tokens[3] = {0, (int32_t) e->rows - 1, (int32_t) e->rows / 3},
				pos[3] = {0, 1, 2},
				seq[3] = {0};
	int64_t		slot[3] = {0, 1, 2};
	fwd_batch	b = {.n_tokens = 3, .tokens = tokens, .pos = pos, .seq = seq, .slot = slot, .n_seqs = 1};
	float	   *x = malloc(sizeof(float) * 3 * dim),
			   *want = malloc(sizeof(float) * dim);
	bool		same = true;

	pm->be->embed(pm->be, &pm->m->embed, &b, x);
	for (int t = 0; t < 3; t++)
	{
		cbllm_to_f32(e->dtype, (const char *) e->data + tokens[t] * cbllm_dtype_row_bytes(e->dtype, dim),
					 want, dim);
		same = same && memcmp(want, x + t * dim, sizeof(float) * dim) == 0;
	}
	free(x);
	free(want);
	return same;
}

/*
 * each(ks, i) for the AVX-512 kernel sets this CPU has (the ones that pack;
 * i counts them from 0), saying which are missing; the number run.
 */
static inline int
packed_model_for_sets(void (*each) (const cpu_kernels *ks, int i))
{
	const char *isas[] = {"avx512", "avx512vnni"};
	int			ran = 0;

	for (int i = 0; i < 2; i++)
	{
		const cpu_kernels *ks = cpu_kernels_select(isas[i]);

		if (ks == NULL)
			TAP_DIAG("this CPU has no %s: its packed products are not run", isas[i]);
		else
			each(ks, ran++);
	}
	if (ran == 0)
		TAP_DIAG("no AVX-512 here: nothing is packed, the products over stored rows serve every batch");
	return ran;
}

#endif
