/*
 * test_model_load.c: unit tests of binding a checkpoint's weights to the
 * Llama layer structure (model_load): a tiny untied GQA checkpoint with F32,
 * F16 and BF16 tensors binds every matrix to its bytes and converts every
 * norm exactly, with the byte and parameter counts; tied embeddings, an
 * explicit head_dim with one KV head, and a two-shard checkpoint (the same
 * bytes as the single file); and the errors: no config.json, no weights,
 * missing tensors, wrong shapes, damaged safetensors data, each message
 * naming the tensor or the file.  The fixtures (fixture.h) go into a
 * mkdtemp() directory, removed at the end.
 *
 * usage: test_model_load
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "fixture.h"
#include "model/model.h"
#include "tap.h"

/* Whether a bound weight is the given tensor spec: dtype, shape and bytes. */
static bool
WeightIs(const cbllm_weight *w, const fixture_tensor *t)
{
	const char *dt = cbllm_dtype_name(w->dtype);

	return t != NULL && w->data != NULL && strcmp(dt, t->dtype) == 0 && t->ndim == 2 &&
		w->rows == t->shape[0] && w->cols == t->shape[1] &&
		memcmp(w->data, t->data, t->nbytes) == 0;
}

/* Whether a converted norm holds the values written for the tensor spec. */
static bool
NormIs(const float *v, const fixture_tensor *t)
{
	if (v == NULL || t == NULL)
		return false;
	for (int64_t i = 0; i < t->shape[0]; i++)
		if (v[i] != fixture_value(t->seed, i))
			return false;
	return true;
}

/* Check every layer's bound weights and norms against the specs. */
static bool
LayersMatch(const cbllm_model *m, fixture_tensors *s)
{
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		const cbllm_layer *L = &m->layers[l];
		const cbllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
		const char *wn[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
		"self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
		char		n[128];

		for (int k = 0; k < 7; k++)
		{
			snprintf(n, sizeof(n), "model.layers.%d.%s.weight", l, wn[k]);
			if (!WeightIs(ws[k], fixture_find_tensor(s, n)))
			{
				TAP_DIAG("layer %d: %s is not bound to its tensor", l, n);
				return false;
			}
		}
		snprintf(n, sizeof(n), "model.layers.%d.input_layernorm.weight", l);
		if (!NormIs(L->attn_norm, fixture_find_tensor(s, n)))
			return false;
		snprintf(n, sizeof(n), "model.layers.%d.post_attention_layernorm.weight", l);
		if (!NormIs(L->mlp_norm, fixture_find_tensor(s, n)))
			return false;
	}
	return true;
}

/* Bytes and elements of the layer matrices (and lm_head) as written. */
static void
CountSpecs(const fixture_tensors *s, size_t *layer_bytes, int64_t *layer_elems)
{
	*layer_bytes = 0;
	*layer_elems = 0;
	for (int i = 0; i < s->n; i++)
		if (s->t[i].ndim == 2 && strncmp(s->t[i].name, "model.layers.", 13) == 0)
		{
			*layer_bytes += s->t[i].nbytes;
			*layer_elems += fixture_tensor_elems(&s->t[i]);
		}
}

/* The tiny untied GQA checkpoint loads with every field and tensor bound. */
static void
TestValidModel(void)
{
	char	   *dir = fixture_case_dir("valid");
	fixture_tensors s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	size_t		lb;
	int64_t		le;

	fixture_build_llama(&s, &fixture_tiny);
	TAP_OK(fixture_write_model(dir, &fixture_tiny, &s, false), "write the tiny model fixture");

	rc = model_load(dir, &m, &err);
	TAP_OK(rc == CBLLM_OK, "model_load of the tiny model succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(m->cfg.hidden == 16 && m->cfg.n_kv_heads == 2 && m->cfg.head_dim == 4,
			   "model_load fills the config");
		TAP_OK(WeightIs(&m->embed, fixture_find_tensor(&s, "model.embed_tokens.weight")) &&
			   m->embed.dtype == CBLLM_BF16 && m->embed.rows == 32 && m->embed.cols == 16,
			   "embed is the BF16 (vocab 32, hidden 16) model.embed_tokens.weight");
		TAP_OK(WeightIs(&m->lm_head, fixture_find_tensor(&s, "lm_head.weight")) &&
			   m->lm_head.dtype == CBLLM_F32 && m->lm_head.data != m->embed.data,
			   "untied: lm_head is the F32 lm_head.weight, not the embedding");
		TAP_OK(m->layers[1].wq.rows == 16 && m->layers[1].wq.cols == 16 &&
			   m->layers[1].wk.rows == 8 && m->layers[1].wk.cols == 16 &&
			   m->layers[1].wv.rows == 8 && m->layers[1].wo.rows == 16 &&
			   m->layers[1].wo.cols == 16,
			   "GQA shapes: q (4 heads x 4, 16), k and v (2 heads x 4 = 8, 16), o (16, 16)");
		TAP_OK(m->layers[0].w_gate.rows == 24 && m->layers[0].w_gate.cols == 16 &&
			   m->layers[0].w_up.rows == 24 && m->layers[0].w_down.rows == 16 &&
			   m->layers[0].w_down.cols == 24,
			   "MLP shapes: gate and up (24, 16), down (16, 24)");
		TAP_OK(LayersMatch(m, &s),
			   "every layer matrix is bound to its tensor's bytes; F16/BF16 norms convert exactly");
		TAP_OK(NormIs(m->final_norm, fixture_find_tensor(&s, "model.norm.weight")),
			   "the F32 final norm holds the written values");
		CountSpecs(&s, &lb, &le);
		TAP_OK(m->weight_bytes == lb + 32 * 16 * 2 + 32 * 16 * 4,
			   "weight_bytes counts layer matrices, embedding and lm_head (%zu)", m->weight_bytes);
		TAP_OK(m->step_weight_bytes == lb + 32 * 16 * 4 && m->matmul_params == le + 32 * 16,
			   "step_weight_bytes and matmul_params count layer matrices and lm_head");
		model_free(m);
	}
	fixture_free_tensors(&s);
	free(dir);
}

/* Tied embeddings: without lm_head.weight the embedding serves; untied it is required. */
static void
TestTied(void)
{
	fixture_geom g = fixture_tiny;
	char	   *dir = fixture_case_dir("tied");
	fixture_tensors s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	size_t		lb;
	int64_t		le;

	g.tie = true;
	g.lm_head = false;
	fixture_build_llama(&s, &g);
	fixture_write_model(dir, &g, &s, false);
	rc = model_load(dir, &m, &err);
	TAP_OK(rc == CBLLM_OK, "tied model without lm_head.weight loads %s", err.msg);
	if (rc == CBLLM_OK)
	{
		CountSpecs(&s, &lb, &le);
		TAP_OK(m->cfg.tie_embeddings && m->lm_head.data == m->embed.data &&
			   m->lm_head.dtype == m->embed.dtype && m->lm_head.rows == 32 &&
			   m->lm_head.cols == 16, "tied: lm_head is the embedding matrix");
		TAP_OK(m->weight_bytes == lb + 32 * 16 * 2,
			   "tied: weight_bytes counts the shared embedding once");
		TAP_OK(m->step_weight_bytes == lb + 32 * 16 * 2 && m->matmul_params == le + 32 * 16,
			   "tied: the step still reads the embedding as lm_head");
		model_free(m);
	}
	fixture_free_tensors(&s);
	free(dir);

	/* untied and without lm_head.weight: an error naming the tensor */
	g.tie = false;
	dir = fixture_case_dir("untied-no-head");
	fixture_build_llama(&s, &g);
	fixture_write_model(dir, &g, &s, false);
	m = NULL;
	rc = model_load(dir, &m, &err);
	expect_fail("untied model without lm_head.weight", rc, &err, "lm_head.weight", "missing", NULL);
	TAP_OK(m == NULL, "a failed model_load leaves the output untouched");
	fixture_free_tensors(&s);
	free(dir);
}

/* An explicit head_dim with q width unlike hidden, and a single KV head (MQA). */
static void
TestHeadDim(void)
{
	fixture_geom g = {16, 1, 4, 1, 6, 20, 24, false, true};
	char	   *dir = fixture_case_dir("head-dim");
	fixture_tensors s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_build_llama(&s, &g);
	fixture_write_model(dir, &g, &s, false);
	rc = model_load(dir, &m, &err);
	TAP_OK(rc == CBLLM_OK, "model with head_dim 6 (4 heads, hidden 16) and 1 KV head loads %s",
		   err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(m->cfg.head_dim == 6 && m->cfg.n_kv_heads == 1, "head_dim 6 from config.json");
		TAP_OK(m->layers[0].wq.rows == 24 && m->layers[0].wq.cols == 16 &&
			   m->layers[0].wk.rows == 6 && m->layers[0].wv.rows == 6 &&
			   m->layers[0].wo.rows == 16 && m->layers[0].wo.cols == 24,
			   "q (24, 16), k and v (6, 16), o (16, 24)");
		TAP_OK(LayersMatch(m, &s), "every tensor of the head_dim model is bound");
		model_free(m);
	}
	fixture_free_tensors(&s);
	free(dir);

	/* the transposed o_proj: same byte count, wrong shape */
	dir = fixture_case_dir("head-dim-transposed");
	fixture_build_llama(&s, &g);
	fixture_find_tensor(&s, "model.layers.0.self_attn.o_proj.weight")->shape[0] = 24;
	fixture_find_tensor(&s, "model.layers.0.self_attn.o_proj.weight")->shape[1] = 16;
	fixture_write_model(dir, &g, &s, false);
	rc = model_load(dir, &m, &err);
	expect_fail("o_proj stored transposed (24, 16)", rc, &err, "wrong shape",
				"model.layers.0.self_attn.o_proj.weight", "[16, 24]");
	fixture_free_tensors(&s);
	free(dir);
}

/* A two-shard checkpoint with an index binds the same bytes as the single file. */
static void
TestSharded(void)
{
	fixture_pair p;
	cbllm_model *m1 = NULL,
			   *m2 = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_pair_write(&p);
	rc = model_load(p.single, &m1, &err);
	if (rc == CBLLM_OK)
		rc = model_load(p.sharded, &m2, &err);
	TAP_OK(rc == CBLLM_OK, "model_load of the sharded model succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(memcmp(m1->embed.data, m2->embed.data, 32 * 16 * 2) == 0 &&
			   memcmp(m1->lm_head.data, m2->lm_head.data, 32 * 16 * 4) == 0 &&
			   memcmp(m1->layers[1].w_down.data, m2->layers[1].w_down.data, 16 * 24 * 2) == 0 &&
			   memcmp(m1->final_norm, m2->final_norm, 16 * 4) == 0 &&
			   m1->weight_bytes == m2->weight_bytes && LayersMatch(m2, &p.s),
			   "sharded and single-file models bind the same bytes");
	}
	model_free(m1);
	model_free(m2);
	fixture_pair_free(&p);
}

/* model_load without config.json or without weights fails naming what is missing. */
static void
TestMissingFiles(void)
{
	char	   *dir;
	char	   *cfg;
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	/* model_load reports config errors too, before touching the weights */
	dir = fixture_case_dir("model-load-no-config");
	rc = model_load(dir, &m, &err);
	expect_fail("model_load without config.json", rc, &err, "config.json", "cannot open", NULL);
	TAP_OK(m == NULL, "model_load without config.json leaves the output untouched");
	free(dir);

	/* no weights at all */
	dir = fixture_case_dir("no-weights");
	cfg = fixture_config_json(&fixture_tiny, "LlamaForCausalLM", "silu", NULL);
	fixture_write_text(dir, "config.json", cfg);
	free(cfg);
	rc = model_load(dir, &m, &err);
	expect_fail("missing weights (no model.safetensors, no index)", rc, &err, dir,
				"model.safetensors", "no model weights");
	free(dir);
}

/* Write the tiny model, let mangle change the specs, and expect model_load to fail. */
static void
WeightsCase(const char *label, void (*mangle) (fixture_tensors *s), size_t drop_tail,
			 const char *n1, const char *n2, bool name_file)
{
	char	   *dir = fixture_case_dir(label);
	char	   *path = cbllm_path_join(dir, "model.safetensors");
	char	   *cfg = fixture_config_json(&fixture_tiny, "LlamaForCausalLM", "silu", NULL);
	fixture_tensors s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_build_llama(&s, &fixture_tiny);
	if (mangle)
		mangle(&s);
	fixture_write_text(dir, "config.json", cfg);
	fixture_write_safetensors(dir, "model.safetensors", &s, -1, drop_tail);
	rc = model_load(dir, &m, &err);
	if (rc >= 0)
		TAP_DIAG("%s: returned %d", label, rc);
	TAP_OK(rc < 0 && m == NULL && msg_has(&err, name_file ? path : NULL, n1, n2),
		   "%s fails (%s): %s", label, cbllm_status_name(rc), err.msg);
	fixture_free_tensors(&s);
	free(cfg);
	free(path);
	free(dir);
}

/* Shorten the data of the last layer's down_proj by one element. */
static void
MangleShortBytes(fixture_tensors *s)
{
	fixture_find_tensor(s, "model.layers.1.mlp.down_proj.weight")->nbytes -= 2;
}

/* Declare the first layer's gate_proj as I64 (with 8-byte elements). */
static void
MangleI64(fixture_tensors *s)
{
	fixture_tensor *t = fixture_find_tensor(s, "model.layers.0.mlp.gate_proj.weight");

	free(t->data);
	t->dtype = "I64";
	t->nbytes = (size_t) fixture_tensor_elems(t) * 8;
	t->data = calloc(1, t->nbytes);
}

/* Declare the first layer's gate_proj as U8 (bytes: only MXFP4 blocks and scales may be). */
static void
MangleU8(fixture_tensors *s)
{
	fixture_tensor *t = fixture_find_tensor(s, "model.layers.0.mlp.gate_proj.weight");

	free(t->data);
	t->dtype = "U8";
	t->nbytes = (size_t) fixture_tensor_elems(t);
	t->data = calloc(1, t->nbytes);
}

/* Remove the first layer's up_proj. */
static void
MangleMissing(fixture_tensors *s)
{
	fixture_remove_tensor(s, "model.layers.0.mlp.up_proj.weight");
}

/* Store the second layer's k_proj as (16, 8) instead of (8, 16). */
static void
MangleShape(fixture_tensors *s)
{
	fixture_tensor *t = fixture_find_tensor(s, "model.layers.1.self_attn.k_proj.weight");

	t->shape[0] = 16;
	t->shape[1] = 8;
}

/* Store the final norm as a (1, 16) matrix. */
static void
MangleNorm2d(fixture_tensors *s)
{
	fixture_tensor *t = fixture_find_tensor(s, "model.norm.weight");

	t->ndim = 2;
	t->shape[0] = 1;
	t->shape[1] = 16;
}

/* Remove the second layer's input norm. */
static void
MangleMissingNorm(fixture_tensors *s)
{
	fixture_remove_tensor(s, "model.layers.1.input_layernorm.weight");
}

/* Add an unused tensor whose shape overflows 64 bits to almost no bytes. */
static void
MangleOverflow(fixture_tensors *s)
{
	fixture_tensor *t = fixture_add_tensor(s, "model.huge", "F32", 1, 1, 0);

	t->ndim = 4;
	t->shape[0] = t->shape[1] = t->shape[2] = t->shape[3] = 65536;	/* 2^64 elements */
	t->nbytes = 0;
}

/* Checkpoints that do not match config.json, or whose safetensors data is damaged. */
static void
TestBadWeights(void)
{
	WeightsCase("truncated data (last tensor short by 10 bytes)", NULL, 10, "truncated",
				 "lm_head.weight", true);
	WeightsCase("byte count unlike shape x dtype", MangleShortBytes, 0,
				 "model.layers.1.mlp.down_proj.weight", "bytes", true);
	WeightsCase("dtype I64", MangleI64, 0, "model.layers.0.mlp.gate_proj.weight", "I64", true);
	WeightsCase("a matrix of bytes (U8)", MangleU8, 0, "model.layers.0.mlp.gate_proj.weight", "is U8", true);
	WeightsCase("missing tensor", MangleMissing, 0, "model.layers.0.mlp.up_proj.weight",
				 "missing", false);
	WeightsCase("missing norm", MangleMissingNorm, 0,
				 "model.layers.1.input_layernorm.weight", "missing", false);
	WeightsCase("k_proj of wrong shape", MangleShape, 0, "wrong shape",
				 "model.layers.1.self_attn.k_proj.weight", true);
	WeightsCase("final norm stored 2-D", MangleNorm2d, 0, "wrong shape",
				 "model.norm.weight", true);
	WeightsCase("shape whose element count overflows", MangleOverflow, 0, "model.huge",
				 NULL, true);
}

int
main(void)
{
	void		(*const tests[]) (void) = {
		TestValidModel,
		TestTied,
		TestHeadDim,
		TestSharded,
		TestMissingFiles,
		TestBadWeights
	};

	return run_in_fixture_root("model_load", tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
