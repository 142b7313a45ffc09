/*
 * test_weight_format.c: load-time quantization of float checkpoints
 * (model_load_params.weight_format, cbllm.weight_format, --weight-format).
 *
 *   test_weight_format HF_DIR HF256_DIR GGUF_Q8_0_DIR
 *
 * HF_DIR is a 64-wide llama checkpoint (F32, tied), HF256_DIR a 256-wide one
 * and GGUF_Q8_0_DIR hf_to_gguf.py's Q8_0 conversion of it (quant.py's
 * quantizer, the same algorithm as the engine's).  Checks: the format names;
 * HF256 loaded as q8_0 holds, row for row, the bytes of the GGUF file (q and
 * k rows permuted there), each matrix the model's own, the same weight
 * counts, and gives the GGUF model's prompt logits; as q4_k the layer
 * matrices are Q4_K and the LM head (the tied embedding) Q6_K; the 64-wide
 * model's rows are no whole 256-block, so q4_k falls back to Q8_0; dummy
 * weights convert too; the q4_k_m and q5_k_m mixes give Q6_K to the value
 * and down projections of the layers they favour; an unknown format fails
 * naming the accepted ones.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model_rows.h"
#include "ref_check.h"
#include "tap.h"

static const int32_t PROMPT[] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};

#define N_PROMPT ((int) (sizeof(PROMPT) / sizeof(PROMPT[0])))

/* Load dir with weight format fmt (load format lfmt: NULL or "dummy"). */
static cbllm_model *
Load(const char *dir, const char *lfmt, const char *fmt, cbllm_err *err)
{
	model_load_params p = {.dir = dir, .format = lfmt, .dummy_on_host = true, .weight_format = fmt,
	.threads = 2};
	cbllm_model *m = NULL;

	if (model_load_ex(&p, &m, err) != CBLLM_OK)
		return NULL;
	return m;
}

/* What a walk over a quantized model finds. */
typedef struct type_walk
{
	const cbllm_model *m;
	const cbllm_model *gg;		/* the GGUF model to compare bytes with, or NULL */
	cbllm_dtype layer_type;		/* the layer matrices' expected type */
	cbllm_dtype head_type;		/* the LM head's (and a tied embedding's) */
	cbllm_dtype embed_type;		/* an untied embedding's */
	cbllm_dtype more_type;		/* an _M mix's: wv and w_down of the layers in more_layers */
	uint64_t	more_layers;	/* bit l: layer l */
	int			n_matrices;
	int			right_type;
	int			owned;
	int			same_bytes;
	char		first_bad[128];
} type_walk;

/* model_visit: each matrix's type, ownership and (with gg) bytes. */
static int
CheckMatrix(void *arg, const model_tensor *mt, cbllm_err *err)
{
	type_walk  *w = arg;
	const cbllm_weight *a = mt->matrix;
	bool		head = a == &w->m->lm_head || (a == &w->m->embed && w->m->lm_head_tied);
	cbllm_dtype want = head ? w->head_type : a == &w->m->embed ? w->embed_type : w->layer_type;
	bool		ok;

	if (a == NULL || mt->tied)
		return CBLLM_OK;
	if (mt->layer >= 0 && mt->layer < 64 && (w->more_layers >> mt->layer & 1) &&
		(strcmp(mt->t->role, "wv") == 0 || strcmp(mt->t->role, "w_down") == 0))
		want = w->more_type;
	w->n_matrices++;
	w->right_type += a->dtype == want;
	w->owned += a->owned;
	ok = a->dtype == want;
	if (w->gg != NULL)
	{
		const cbllm_weight *b = (const cbllm_weight *) (model_rows_field(w->gg, mt) + mt->t->offset);
		size_t		rb = cbllm_dtype_row_bytes(a->dtype, a->cols);
		bool		qk = strcmp(mt->t->role, "wq") == 0 || strcmp(mt->t->role, "wk") == 0;
		bool		same = b->dtype == a->dtype && b->rows == a->rows && b->cols == a->cols;

		for (int64_t r = 0; same && r < b->rows; r++)
			same = memcmp((const char *) b->data + r * rb,
						  (const char *) a->data + (qk ? model_rows_source(r, w->m->cfg.head_dim, true) : r) * rb,
						  rb) == 0;
		w->same_bytes += same;
		ok = ok && same;
	}
	if (!ok && w->first_bad[0] == '\0')
		snprintf(w->first_bad, sizeof(w->first_bad), "%s of layer %d (%s)", mt->t->role, mt->layer,
				 cbllm_dtype_name(a->dtype));
	return CBLLM_OK;
}

/* The format names: auto and NULL keep, types in either case convert, others fail listing. */
static void
TestNames(void)
{
	bool		q = true;
	model_weight_mix dt = {CBLLM_F32, CBLLM_F32},
				m4 = dt;
	cbllm_err	err;

	TAP_OK(model_weight_format(NULL, &q, &dt, &err) == CBLLM_OK && !q &&
		   model_weight_format("auto", &q, &dt, &err) == CBLLM_OK && !q,
		   "weight format NULL and \"auto\" keep the matrices as stored");
	TAP_OK(model_weight_format("q4_k", &q, &dt, &err) == CBLLM_OK && q && dt.base == CBLLM_Q4_K &&
		   dt.more == CBLLM_Q4_K &&
		   model_weight_format("Q8_0", &q, &dt, &err) == CBLLM_OK && q && dt.base == CBLLM_Q8_0,
		   "weight formats \"q4_k\" and \"Q8_0\" name Q4_K and Q8_0");
	TAP_OK(model_weight_format("q4_k_m", &q, &m4, &err) == CBLLM_OK && q && m4.base == CBLLM_Q4_K &&
		   m4.more == CBLLM_Q6_K &&
		   model_weight_format("Q5_K_M", &q, &dt, &err) == CBLLM_OK && q && dt.base == CBLLM_Q5_K &&
		   dt.more == CBLLM_Q6_K,
		   "the mixes \"q4_k_m\" and \"Q5_K_M\" name Q4_K and Q5_K with Q6_K for the favoured matrices");
	TAP_OK(model_weight_format("int4", &q, &dt, &err) == CBLLM_ERR_INVALID &&
		   strstr(err.msg, "unknown weight format \"int4\"") != NULL && strstr(err.msg, "\"q4_k\"") != NULL &&
		   strstr(err.msg, "\"auto\"") != NULL,
		   "an unknown weight format fails, listing the accepted names: %s", err.msg);
	TAP_OK(model_weight_format("f16", &q, &dt, &err) == CBLLM_ERR_INVALID,
		   "a float type is no weight format (only quantized types are)");
}

/* HF256 as q8_0 is the GGUF Q8_0 file, byte for byte, and runs as it does. */
static void
TestQ8(const char *hf256, const char *gguf)
{
	cbllm_err	err;
	cbllm_model *m = Load(hf256, NULL, "q8_0", &err);
	cbllm_model *gg = m != NULL ? Load(gguf, NULL, NULL, &err) : NULL;
	type_walk	w = {.m = m, .gg = gg, .layer_type = CBLLM_Q8_0, .head_type = CBLLM_Q8_0, .embed_type = CBLLM_Q8_0};

	if (m == NULL || gg == NULL)
	{
		TAP_OK(false, "the 256-wide checkpoint as q8_0 and its GGUF file load (%s)", err.msg);
		model_free(m);
		return;
	}
	model_visit(m, CheckMatrix, &w, &err);
	TAP_OK(w.n_matrices > 0 && w.same_bytes == w.n_matrices,
		   "as q8_0, all %d matrices hold the GGUF Q8_0 file's bytes row for row (%d do; first differing: %s)",
		   w.n_matrices, w.same_bytes, w.first_bad[0] ? w.first_bad : "none");
	TAP_OK(w.owned == w.n_matrices, "each converted matrix is the model's own buffer (%d of %d)", w.owned,
		   w.n_matrices);
	TAP_OK(m->weight_bytes == gg->weight_bytes && m->step_weight_bytes == gg->step_weight_bytes &&
		   m->matmul_params == gg->matmul_params,
		   "the weight bytes (%zu), step bytes (%zu) and matmul parameters are counted as stored now, as the file's",
		   m->weight_bytes, m->step_weight_bytes);
	TAP_OK(m->quantize_seconds > 0 && gg->quantize_seconds == 0,
		   "the load's quantization time is recorded (%.3f s), and none for a file loaded as it is",
		   m->quantize_seconds);
	model_free(m);
	model_free(gg);
	{
		cbllm_engine_params p = {0};
		cbllm_engine *e;
		float	   *a = NULL,
				   *b = ref_engine_logits(gguf, "cpu", PROMPT, N_PROMPT, &(int) {0});
		int			vocab = 0;
		double		gap = INFINITY;

		p.model_dir = hf256;
		p.device = "cpu";
		p.weight_format = "q8_0";
		p.kv_cache_dtype = "f32";	/* as ref_engine_logits: the same bytes, exactly */
		p.n_threads = 2;
		p.max_num_seqs = 4;
		if (cbllm_engine_create(&p, &e, &err) == CBLLM_OK)
		{
			cbllm_engine_info info;

			cbllm_engine_get_info(e, &info);
			vocab = info.vocab_size;
			a = malloc(sizeof(float) * N_PROMPT * vocab);
			if (cbllm_engine_prompt_logits(e, PROMPT, N_PROMPT, a, &err) == CBLLM_OK && b != NULL)
				gap = ref_worst_row(a, b, N_PROMPT, vocab);
			cbllm_engine_destroy(e);
		}
		else
			TAP_DIAG("engine: %s", err.msg);
		TAP_OK(gap <= 1e-5,
			   "an engine over the checkpoint with weight_format q8_0 gives the GGUF file's prompt logits (rel err %.2g <= 1e-5)",
			   gap);
		free(a);
		free(b);
	}
}

/* HF256 as q4_k: Q4_K layers, Q6_K for the tied LM head; HF (64 wide) falls back to Q8_0. */
static void
TestQ4K(const char *hf, const char *hf256)
{
	cbllm_err	err;
	cbllm_model *m = Load(hf256, NULL, "q4_k", &err);
	type_walk	w = {.m = m, .gg = NULL, .layer_type = CBLLM_Q4_K, .head_type = CBLLM_Q6_K, .embed_type = CBLLM_Q4_K};

	if (m == NULL)
	{
		TAP_OK(false, "the 256-wide checkpoint loads as q4_k (%s)", err.msg);
		return;
	}
	model_visit(m, CheckMatrix, &w, &err);
	TAP_OK(w.right_type == w.n_matrices && m->lm_head.dtype == CBLLM_Q6_K,
		   "as q4_k: the layer matrices are Q4_K, the %s LM head Q6_K (first not: %s)",
		   m->lm_head_tied ? "tied" : "untied", w.first_bad[0] ? w.first_bad : "none");
	model_free(m);

	m = Load(hf, NULL, "q4_k", &err);
	w = (type_walk) {.m = m, .gg = NULL, .layer_type = CBLLM_Q8_0, .head_type = CBLLM_Q8_0, .embed_type = CBLLM_Q8_0};
	if (m != NULL)
		model_visit(m, CheckMatrix, &w, &err);
	TAP_OK(m != NULL && w.n_matrices > 0 && w.right_type == w.n_matrices,
		   "as q4_k, rows of 64 and 160 (no whole 256-block) become Q8_0 (first not: %s)",
		   w.first_bad[0] ? w.first_bad : m == NULL ? err.msg : "none");
	model_free(m);

	m = Load(hf256, "dummy", "q5_k", &err);
	w = (type_walk) {.m = m, .gg = NULL, .layer_type = CBLLM_Q5_K, .head_type = CBLLM_Q6_K, .embed_type = CBLLM_Q5_K};
	if (m != NULL)
		model_visit(m, CheckMatrix, &w, &err);
	TAP_OK(m != NULL && w.right_type == w.n_matrices && w.owned == w.n_matrices &&
		   m->embed.dummy_seed == 0,
		   "dummy weights convert as q5_k, each matrix its own buffer and no longer a dummy (first not: %s)",
		   w.first_bad[0] ? w.first_bad : m == NULL ? err.msg : "none");
	model_free(m);

	m = Load(hf256, NULL, "q3", &err);
	TAP_OK(m == NULL && strstr(err.msg, "unknown weight format \"q3\"") != NULL,
		   "a load with an unknown weight format fails: %s", err.msg);
	model_free(m);
}

/*
 * The _M mixes: Q6_K for wv and w_down in the first and last eighth of the
 * layers and every third between, as llama.cpp's Q4_K_M and Q5_K_M files
 * have them: with 2 layers the last one; with 16 (dummy weights) layers 0, 1,
 * 4, 7, 10, 13, 14 and 15.
 */
static void
TestMixes(const char *hf256)
{
	char		dir[] = "/tmp/cbllm-mix-XXXXXX";
	char		path[600],
				src[600],
				*text = NULL;
	size_t		len = 0;
	FILE	   *f;
	cbllm_err	err;
	cbllm_model *m = Load(hf256, NULL, "q4_k_m", &err);
	type_walk	w = {.m = m, .layer_type = CBLLM_Q4_K, .head_type = CBLLM_Q6_K,
	.embed_type = CBLLM_Q4_K, .more_type = CBLLM_Q6_K, .more_layers = 1u << 1};

	if (m != NULL)
		model_visit(m, CheckMatrix, &w, &err);
	TAP_OK(m != NULL && w.n_matrices > 0 && w.right_type == w.n_matrices,
		   "as q4_k_m, 2 layers: layer 1's wv and w_down are Q6_K, the other layer matrices Q4_K, the LM head Q6_K (first not: %s)",
		   w.first_bad[0] ? w.first_bad : m == NULL ? err.msg : "none");
	model_free(m);

	/* the same geometry with 16 layers, as a config alone (dummy weights) */
	snprintf(src, sizeof(src), "%s/config.json", hf256);
	if (mkdtemp(dir) != NULL && (f = fopen(src, "r")) != NULL)
	{
		char	   *at;

		text = calloc(1, 1 << 16);
		len = fread(text, 1, (1 << 16) - 1, f);
		fclose(f);
		if ((at = strstr(text, "\"num_hidden_layers\": 2,")) != NULL)
			memcpy(at, "\"num_hidden_layers\":16,", 23);
		snprintf(path, sizeof(path), "%s/config.json", dir);
		if ((f = fopen(path, "w")) != NULL)
		{
			fwrite(text, 1, len, f);
			fclose(f);
		}
	}
	m = Load(dir, "dummy", "q5_k_m", &err);
	w = (type_walk) {.m = m, .layer_type = CBLLM_Q5_K, .head_type = CBLLM_Q6_K,
		.embed_type = CBLLM_Q5_K, .more_type = CBLLM_Q6_K,
	.more_layers = 1u << 0 | 1u << 1 | 1u << 4 | 1u << 7 | 1u << 10 | 1u << 13 | 1u << 14 | 1u << 15};
	if (m != NULL)
		model_visit(m, CheckMatrix, &w, &err);
	TAP_OK(m != NULL && m->cfg.n_layers == 16 && w.right_type == w.n_matrices,
		   "as q5_k_m, 16 layers: wv and w_down of layers 0, 1, 4, 7, 10, 13, 14, 15 are Q6_K, the rest Q5_K (first not: %s)",
		   w.first_bad[0] ? w.first_bad : m == NULL ? err.msg : "none");
	model_free(m);
	unlink(path);
	rmdir(dir);
	free(text);
}

int
main(int argc, char **argv)
{
	if (argc != 4)
	{
		fprintf(stderr, "usage: test_weight_format HF_DIR HF256_DIR GGUF_Q8_0_DIR\n");
		return 2;
	}
	TestNames();
	TestQ8(argv[2], argv[3]);
	TestQ4K(argv[1], argv[2]);
	TestMixes(argv[2]);
	return tap_done();
}
