/*
 * model.c: load a model: bind a checkpoint's tensors to the Llama layer
 * structure, checking every name, shape and dtype against config.json, or
 * hand the layers to the dummy loader (model_dummy.c).
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numeric.h"

/* Look up name and check that it is a matrix of (rows, cols). */
static int
BindWeight(cbllm_model *m, const char *name, int64_t rows, int64_t cols,
		   cbllm_weight *w, cbllm_err *err)
{
	const st_tensor *t = st_find(m->st, name);

	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model weights: missing tensor \"%s\"",
						  m->dir, name);
	if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
	{
		char		found[96] = "[";

		for (int d = 0; d < t->ndim; d++)
			snprintf(found + strlen(found), sizeof(found) - strlen(found), "%s%lld",
					 d ? ", " : "", (long long) t->shape[d]);
		strcat(found, "]");
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" has the wrong shape: expected [%lld, %lld] from config.json, found %s",
						  m->st->files[t->file].path, name, (long long) rows, (long long) cols,
						  found);
	}
	w->dtype = t->dtype;
	w->rows = rows;
	w->cols = cols;
	w->data = t->data;
	m->weight_bytes += t->nbytes;
	return CBLLM_OK;
}

/* Look up a norm vector of length n and convert it to a malloc'd f32 array. */
static int
BindNorm(cbllm_model *m, const char *name, int64_t n, float **out, cbllm_err *err)
{
	const st_tensor *t = st_find(m->st, name);
	float	   *v;

	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model weights: missing tensor \"%s\"",
						  m->dir, name);
	if (t->ndim != 1 || t->shape[0] != n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" has the wrong shape: expected [%lld] from config.json",
						  m->st->files[t->file].path, name, (long long) n);
	v = malloc(sizeof(float) * n);
	if (v == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	cbllm_to_f32(t->dtype, t->data, v, n);
	*out = v;
	return CBLLM_OK;
}

/* Bind the tensors of layer i. */
static int
BindLayer(cbllm_model *m, int i, cbllm_err *err)
{
	const cbllm_model_config *c = &m->cfg;
	cbllm_layer *l = &m->layers[i];
	int64_t		q = (int64_t) c->n_heads * c->head_dim;
	int64_t		kv = (int64_t) c->n_kv_heads * c->head_dim;
	char		n[9][128];
	int			rc;

#define LNAME(k, s) snprintf(n[k], sizeof(n[k]), "model.layers.%d.%s", i, s)
	LNAME(0, "input_layernorm.weight");
	LNAME(1, "self_attn.q_proj.weight");
	LNAME(2, "self_attn.k_proj.weight");
	LNAME(3, "self_attn.v_proj.weight");
	LNAME(4, "self_attn.o_proj.weight");
	LNAME(5, "post_attention_layernorm.weight");
	LNAME(6, "mlp.gate_proj.weight");
	LNAME(7, "mlp.up_proj.weight");
	LNAME(8, "mlp.down_proj.weight");
#undef LNAME
	if ((rc = BindNorm(m, n[0], c->hidden, &l->attn_norm, err)) ||
		(rc = BindWeight(m, n[1], q, c->hidden, &l->wq, err)) ||
		(rc = BindWeight(m, n[2], kv, c->hidden, &l->wk, err)) ||
		(rc = BindWeight(m, n[3], kv, c->hidden, &l->wv, err)) ||
		(rc = BindWeight(m, n[4], c->hidden, q, &l->wo, err)) ||
		(rc = BindNorm(m, n[5], c->hidden, &l->mlp_norm, err)) ||
		(rc = BindWeight(m, n[6], c->intermediate, c->hidden, &l->w_gate, err)) ||
		(rc = BindWeight(m, n[7], c->intermediate, c->hidden, &l->w_up, err)) ||
		(rc = BindWeight(m, n[8], c->hidden, c->intermediate, &l->w_down, err)))
		return rc;
	return CBLLM_OK;
}

/* Count a matrix that every forward step reads. */
static void
AddStepWeight(cbllm_model *m, const cbllm_weight *w)
{
	m->matmul_params += w->rows * w->cols;
	m->step_weight_bytes += cbllm_dtype_row_bytes(w->dtype, w->rows * w->cols);
}

/* Open the safetensors checkpoint of m->dir and bind every weight to m's layers. */
static int
BindCheckpoint(cbllm_model *m, cbllm_err *err)
{
	const cbllm_model_config *c = &m->cfg;
	int			rc;

	if ((rc = st_open_dir(m->dir, &m->st, err)))
		return rc;
	m->layers = calloc(c->n_layers, sizeof(cbllm_layer));
	if (m->layers == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	if ((rc = BindWeight(m, "model.embed_tokens.weight", c->vocab_size, c->hidden, &m->embed, err)))
		return rc;
	for (int i = 0; i < c->n_layers; i++)
		if ((rc = BindLayer(m, i, err)))
			return rc;
	if ((rc = BindNorm(m, "model.norm.weight", c->hidden, &m->final_norm, err)))
		return rc;
	if (st_find(m->st, "lm_head.weight") != NULL || !c->tie_embeddings)
		return BindWeight(m, "lm_head.weight", c->vocab_size, c->hidden, &m->lm_head, err);
	m->lm_head = m->embed;
	return CBLLM_OK;
}

/* Whether a load format names the safetensors checkpoint. */
static bool
IsCheckpointFormat(const char *format)
{
	return format == NULL || strcmp(format, "auto") == 0 || strcmp(format, "safetensors") == 0;
}

/* Load config.json and bind every weight of the model in dir. */
int
model_load(const char *dir, cbllm_model **out, cbllm_err *err)
{
	model_load_params p = {.dir = dir, .format = NULL, .dummy_on_host = false};

	return model_load_ex(&p, out, err);
}

/* Load config.json, then the checkpoint's weights or dummy ones, as p->format says. */
int
model_load_ex(const model_load_params *p, cbllm_model **out, cbllm_err *err)
{
	bool		dummy = p->format != NULL && strcmp(p->format, "dummy") == 0;
	cbllm_model *m;
	int			rc;

	if (!dummy && !IsCheckpointFormat(p->format))
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "unknown load format \"%s\" (accepted: \"auto\", \"safetensors\", \"dummy\")",
						  p->format);
	m = calloc(1, sizeof(cbllm_model));
	if (m == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	m->dir = p->dir;
	if ((rc = model_config_load(p->dir, &m->cfg, err)) ||
		(rc = dummy ? model_load_dummy(m, p->dummy_on_host, err) : BindCheckpoint(m, err)))
	{
		model_free(m);
		return rc;
	}
	for (int i = 0; i < m->cfg.n_layers; i++)
	{
		const cbllm_weight *ws[7] = {&m->layers[i].wq, &m->layers[i].wk, &m->layers[i].wv,
			&m->layers[i].wo, &m->layers[i].w_gate, &m->layers[i].w_up, &m->layers[i].w_down};

		for (int k = 0; k < 7; k++)
			AddStepWeight(m, ws[k]);
	}
	AddStepWeight(m, &m->lm_head);
	m->dir = NULL;
	*out = m;
	return CBLLM_OK;
}

/* Release the model's converted norms, its own matrices and its mappings. */
void
model_free(cbllm_model *m)
{
	if (m == NULL)
		return;
	if (m->layers)
		for (int i = 0; i < m->cfg.n_layers; i++)
		{
			cbllm_layer *l = &m->layers[i];

			free(l->attn_norm);
			free(l->mlp_norm);
			if (m->owns_matrices)
			{
				free((void *) l->wq.data);
				free((void *) l->wk.data);
				free((void *) l->wv.data);
				free((void *) l->wo.data);
				free((void *) l->w_gate.data);
				free((void *) l->w_up.data);
				free((void *) l->w_down.data);
			}
		}
	if (m->owns_matrices)
	{
		if (m->lm_head.data != m->embed.data)
			free((void *) m->lm_head.data);
		free((void *) m->embed.data);
	}
	free(m->layers);
	free(m->final_norm);
	st_close(m->st);
	free(m);
}
