/*
 * test_model_dummy.c: unit tests of the dummy load format (model_load_ex
 * with format "dummy"), whose weights come from config.json alone:
 * dummy_value's pinned values and distribution; a dummy load has the
 * checkpoint loader's shapes and counts, unit norms, distinct seeds and
 * bf16(dummy_value * scale) elements on the host, and the same seeds and
 * counts without data for a device backend; tied embeddings, a Llama-2-7b
 * geometry, an unknown format, and bad or huge configs.  The fixtures
 * (fixture.h) go into a mkdtemp() directory, removed at the end.
 *
 * usage: test_model_dummy
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "fixture.h"
#include "model/model.h"
#include "tap.h"

/* bf16 bits nearest to v, ties to even, by comparing the dropped half (not numeric.h's trick). */
static uint16_t
Bf16Nearest(float v)
{
	uint32_t	u;
	uint32_t	low;
	uint16_t	h;

	memcpy(&u, &v, 4);
	h = (uint16_t) (u >> 16);
	low = u & 0xffff;
	if (low > 0x8000 || (low == 0x8000 && (h & 1)))
		h++;
	return h;
}

/* The dummy matrices of a model in seed order: embed, each layer's seven, lm_head. */
static int
DummyMatrices(const cbllm_model *m, const cbllm_weight **ws)
{
	int			n = 0;

	ws[n++] = &m->embed;
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		const cbllm_layer *L = &m->layers[l];

		ws[n++] = &L->wq;
		ws[n++] = &L->wk;
		ws[n++] = &L->wv;
		ws[n++] = &L->wo;
		ws[n++] = &L->w_gate;
		ws[n++] = &L->w_up;
		ws[n++] = &L->w_down;
	}
	ws[n++] = &m->lm_head;
	return n;
}

/* Whether the norms of a model are all ones. */
static bool
NormsAreOnes(const cbllm_model *m)
{
	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int i = 0; i < m->cfg.hidden; i++)
			if (m->layers[l].attn_norm[i] != 1.0f || m->layers[l].mlp_norm[i] != 1.0f)
				return false;
	for (int i = 0; i < m->cfg.hidden; i++)
		if (m->final_norm[i] != 1.0f)
			return false;
	return true;
}

/* Whether element i of a filled dummy matrix is cbllm_dummy_value * scale rounded to bf16. */
static bool
DummyElemOk(const cbllm_weight *w, int64_t i)
{
	uint16_t	want = Bf16Nearest(cbllm_dummy_value(w->dummy_seed, (uint64_t) i) * w->dummy_scale);
	uint16_t	got = ((const uint16_t *) w->data)[i];

	if (got != want)
		TAP_DIAG("seed %llu element %lld: bf16 0x%04x, expected 0x%04x",
				 (unsigned long long) w->dummy_seed, (long long) i, got, want);
	return got == want;
}

/* Load dir with format, dummy weights on the host or not. */
static int
LoadFormat(const char *dir, const char *format, bool on_host, cbllm_model **m, cbllm_err *err)
{
	model_load_params p = {.dir = dir, .format = format, .dummy_on_host = on_host};

	return model_load_ex(&p, m, err);
}

/* cbllm_dummy_value: pinned values, exact multiples of 2^-23 in [-1, 1) with mean near 0. */
static void
TestDummyValue(void)
{
	double		sum = 0;
	bool		in_range = true,
				on_grid = true;
	float		lo = 1,
				hi = -1;

	/* pinned: the CUDA generator must reproduce these bits, so the formula may not change */
	TAP_OK(cbllm_dummy_value(1, 0) == (float) (5673494 - 8388608) / 8388608.0f &&
		   cbllm_dummy_value(1, 1) == (float) (9505325 - 8388608) / 8388608.0f &&
		   cbllm_dummy_value(0x0123456789abcdefULL, 1000000) == (float) (2096866 - 8388608) / 8388608.0f,
		   "cbllm_dummy_value matches three values computed independently (formula unchanged)");
	for (int i = 0; i < 100000; i++)
	{
		float		v = cbllm_dummy_value(0x5eedULL, (uint64_t) i);
		float		k = (v + 1.0f) * 8388608.0f;

		in_range = in_range && v >= -1.0f && v < 1.0f;
		on_grid = on_grid && k == floorf(k);
		lo = fminf(lo, v);
		hi = fmaxf(hi, v);
		sum += v;
	}
	TAP_OK(in_range && lo < -0.999f && hi > 0.999f,
		   "100000 dummy values lie in [-1, 1) and span it (min %g, max %g)", lo, hi);
	TAP_OK(fabs(sum / 100000) < 0.01, "100000 dummy values have |mean| < 0.01 (%g)",
		   sum / 100000);
	TAP_OK(on_grid, "every dummy value is exactly (k - 2^23) / 2^23 for an integer k");
	TAP_OK(cbllm_dummy_value(1, 7) != cbllm_dummy_value(2, 7) && cbllm_dummy_value(1, 7) != cbllm_dummy_value(1, 8),
		   "dummy values differ between seeds and between elements");
}

/* A dummy load of config.json alone: shapes and counts of the checkpoint, generated values. */
static void
TestDummyLoad(void)
{
	char	   *dir = fixture_case_dir("dummy");
	char	   *ckpt = fixture_case_dir("dummy-checkpoint");
	char	   *cfgtext = fixture_config_json(&fixture_tiny, "LlamaForCausalLM", "silu", NULL);
	fixture_tensors s = {0};
	cbllm_model *m = NULL,
			   *m2 = NULL,
			   *ref = NULL,
			   *dev = NULL;
	const cbllm_weight *ws[64],
			   *ws2[64],
			   *wr[64],
			   *wd[64];
	cbllm_err	err = {{0}};
	int			n = 0,
				rc;
	bool		ok;
	int64_t		elems = 0;

	TAP_OK(fixture_write_text(dir, "config.json", cfgtext),
		   "write a model directory with config.json only");
	rc = LoadFormat(dir, "dummy", true, &m, &err);
	TAP_OK(rc == CBLLM_OK && m != NULL, "dummy load of a directory without weights succeeds %s",
		   err.msg);
	if (rc != CBLLM_OK)
		goto done;
	TAP_OK(m->st == NULL && m->cfg.hidden == 16 && m->cfg.n_layers == 2 &&
		   m->cfg.vocab_size == 32, "dummy: config.json parsed, no safetensors archive");

	/* the same geometry from a checkpoint, to compare shapes and counts with */
	fixture_build_llama(&s, &fixture_tiny);
	fixture_write_model(ckpt, &fixture_tiny, &s, false);
	rc = model_load(ckpt, &ref, &err);
	TAP_OK(rc == CBLLM_OK, "the tiny checkpoint loads for comparison %s", err.msg);
	if (rc != CBLLM_OK)
		goto done;
	n = DummyMatrices(m, ws);
	DummyMatrices(ref, wr);
	ok = n == 16;
	for (int k = 0; ok && k < n; k++)
		ok = ws[k]->dtype == CBLLM_BF16 && ws[k]->rows == wr[k]->rows &&
			ws[k]->cols == wr[k]->cols && ws[k]->data != NULL;
	TAP_OK(ok, "dummy: all 16 matrices are BF16 with the checkpoint loader's (rows, cols)");
	ok = true;
	for (int k = 0; k < n; k++)
	{
		ok = ok && ws[k]->dummy_scale == 1.0f / sqrtf((float) ws[k]->cols);
		elems += ws[k]->rows * ws[k]->cols;
	}
	TAP_OK(ok && m->embed.dummy_scale == 0.25f,
		   "dummy: every scale is 1/sqrt(cols) (0.25 for the embedding)");
	TAP_OK(m->matmul_params == ref->matmul_params &&
		   m->step_weight_bytes == 2 * (size_t) m->matmul_params,
		   "dummy: matmul_params %lld as the checkpoint's, step_weight_bytes twice that in bf16",
		   (long long) m->matmul_params);
	TAP_OK(m->weight_bytes == 2 * (size_t) elems && elems == 9728 / 2,
		   "dummy: weight_bytes %zu counts every matrix, embedding and lm_head, in bf16",
		   m->weight_bytes);
	TAP_OK(NormsAreOnes(m), "dummy: every norm weight is 1");

	ok = true;
	for (int k = 0; k < n; k++)
	{
		int64_t		ne = ws[k]->rows * ws[k]->cols;

		for (int64_t i = 0; i < ne; i += 1 + i % 13)
			ok = ok && DummyElemOk(ws[k], i);
		ok = ok && DummyElemOk(ws[k], ne - 1);
	}
	TAP_OK(ok, "dummy on host: sampled elements are bf16(cbllm_dummy_value(seed, i) * scale)");

	ok = true;
	for (int k = 0; k < n; k++)
		for (int j = 0; j < n; j++)
			ok = ok && ws[k]->dummy_seed != 0 &&
				(j == k || ws[k]->dummy_seed != ws[j]->dummy_seed);
	TAP_OK(ok && memcmp(m->layers[0].wk.data, m->layers[0].wv.data, 8 * 16 * 2) != 0 &&
		   memcmp(m->layers[0].wq.data, m->layers[1].wq.data, 16 * 16 * 2) != 0,
		   "dummy: the 16 seeds are nonzero and distinct; same-shape matrices differ");

	rc = LoadFormat(dir, "dummy", true, &m2, &err);
	TAP_OK(rc == CBLLM_OK, "a second dummy load succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		DummyMatrices(m2, ws2);
		ok = true;
		for (int k = 0; k < n; k++)
			ok = ok && ws2[k]->dummy_seed == ws[k]->dummy_seed && ws2[k]->data != ws[k]->data &&
				memcmp(ws2[k]->data, ws[k]->data, (size_t) (ws[k]->rows * ws[k]->cols * 2)) == 0;
		TAP_OK(ok, "dummy loads are deterministic: same seeds and the same bytes");
		model_free(m2);
	}

	rc = LoadFormat(dir, "dummy", false, &dev, &err);
	TAP_OK(rc == CBLLM_OK, "dummy load for a device backend succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		DummyMatrices(dev, wd);
		ok = true;
		for (int k = 0; k < n; k++)
			ok = ok && wd[k]->data == NULL && wd[k]->dummy_seed == ws[k]->dummy_seed &&
				wd[k]->dummy_scale == ws[k]->dummy_scale && wd[k]->dtype == CBLLM_BF16 &&
				wd[k]->rows == ws[k]->rows && wd[k]->cols == ws[k]->cols;
		TAP_OK(ok, "dummy not on host: data NULL, seeds, scales and shapes as on the host");
		TAP_OK(NormsAreOnes(dev) && dev->weight_bytes == m->weight_bytes &&
			   dev->step_weight_bytes == m->step_weight_bytes &&
			   dev->matmul_params == m->matmul_params,
			   "dummy not on host: unit norms and the same byte counts");
		model_free(dev);
	}
done:
	model_free(m);
	model_free(ref);
	fixture_free_tensors(&s);
	free(cfgtext);
	free(ckpt);
	free(dir);
}

/* Dummy loads: tied embeddings, a 7B geometry, bad formats and bad directories. */
static void
TestDummyCases(void)
{
	fixture_geom g = fixture_tiny;
	char	   *dir = fixture_case_dir("dummy-tied");
	char	   *text;
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}},
				err2 = {{0}};
	int			rc,
				rc2;

	g.tie = true;
	text = fixture_config_json(&g, "LlamaForCausalLM", "silu", NULL);
	fixture_write_text(dir, "config.json", text);
	free(text);
	for (int on_host = 0; on_host < 2; on_host++)
	{
		rc = LoadFormat(dir, "dummy", on_host, &m, &err);
		TAP_OK(rc == CBLLM_OK && m->lm_head.data == m->embed.data &&
			   m->lm_head.dummy_seed == m->embed.dummy_seed && m->lm_head.rows == 32 &&
			   m->weight_bytes == 2 * (size_t) (32 * 16 + 2 * 1920) &&
			   m->step_weight_bytes == 2 * (size_t) (32 * 16 + 2 * 1920),
			   "dummy tied (%s): lm_head is the embedding, counted once in weight_bytes %s",
			   on_host ? "on host" : "not on host", err.msg);
		if (rc == CBLLM_OK)
			model_free(m);		/* frees the shared buffer once */
		m = NULL;
	}
	free(dir);

	dir = fixture_case_dir("dummy-llama2-7b");
	fixture_write_text(dir, "config.json", fixture_llama2_7b_chat);
	rc = LoadFormat(dir, "dummy", false, &m, &err);
	TAP_OK(rc == CBLLM_OK && m->weight_bytes == 13476298752ULL &&
		   m->matmul_params == 6607077376LL && m->step_weight_bytes == 13214154752ULL &&
		   m->layers[31].w_down.rows == 4096 && m->layers[31].w_down.cols == 11008 &&
		   m->lm_head.data == NULL && m->lm_head.dummy_seed != m->embed.dummy_seed,
		   "dummy Llama-2-7b config alone: 6.74e9 matrix weights, 13476298752 bf16 bytes %s",
		   err.msg);
	if (rc == CBLLM_OK)
		model_free(m);
	m = NULL;

	rc = LoadFormat(dir, "gguf", true, &m, &err);
	expect_fail("load format \"gguf\"", rc, &err, "\"gguf\"", "\"dummy\"", "\"safetensors\"");
	TAP_OK(m == NULL, "an unknown format leaves the output untouched");
	rc = LoadFormat(dir, "auto", false, &m, &err);
	expect_fail("format auto on a directory without weights", rc, &err, dir, NULL, NULL);
	free(dir);

	dir = fixture_case_dir("dummy-no-config");
	rc = LoadFormat(dir, "dummy", true, &m, &err);
	rc2 = model_load(dir, &m, &err2);
	expect_fail("dummy load without config.json", rc, &err, "config.json", NULL, NULL);
	TAP_OK(rc == rc2 && strcmp(err.msg, err2.msg) == 0 && m == NULL,
		   "dummy and checkpoint loads fail alike without config.json");
	fixture_write_text(dir, "config.json",
					   "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": \"gelu\"}");
	rc = LoadFormat(dir, "dummy", false, &m, &err);
	expect_fail("dummy load of a config with hidden_act gelu", rc, &err, "gelu", NULL, NULL);
	free(dir);

	/* a (2^24, 2^24) embedding is 512 TiB: its allocation fails cleanly */
	dir = fixture_case_dir("dummy-huge");
	fixture_write_text(dir, "config.json",
					   "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16777216,"
					   " \"num_hidden_layers\": 1, \"num_attention_heads\": 4096, \"intermediate_size\": 2,"
					   " \"vocab_size\": 16777216}");
	rc = LoadFormat(dir, "dummy", true, &m, &err);
	expect_fail("dummy on host of a 512 TiB embedding", rc, &err,
				"out of memory for the dummy weights of the embeddings", NULL, NULL);
	rc = LoadFormat(dir, "dummy", false, &m, &err2);
	TAP_OK(rc == CBLLM_OK && m->embed.data == NULL && m->weight_bytes > ((size_t) 1 << 50),
		   "the same model not on host allocates nothing and counts its bytes %s", err2.msg);
	if (rc == CBLLM_OK)
		model_free(m);
	free(dir);
}

int
main(void)
{
	void		(*const tests[]) (void) = {
		TestDummyValue,
		TestDummyLoad,
		TestDummyCases
	};

	return run_in_fixture_root("dummy", tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
