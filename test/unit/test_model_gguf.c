/*
 * test_model_gguf.c: a model loaded from a GGUF file (test/tools/hf_to_gguf.py's
 * conversion of a gen_model.py checkpoint) is the checkpoint's model.
 *
 *   test_model_gguf FAMILY HF_DIR GGUF_DIR [DEVICE]
 *   test_model_gguf --type TYPE FAMILY HF_DIR GGUF_DIR [LOGITS [DEVICE]]
 *   test_model_gguf --errors BAD_DIR
 *
 * GGUF_DIR holds model.gguf beside the checkpoint's tokenizer files and no
 * safetensors, so the engine runs it with the tokenizer of tokenizer.json.
 * The first form checks what the loader binds against model_load of HF_DIR:
 * every configuration field, the RoPE frequencies, the interleaved flag
 * (set exactly for llama, whose q and k rows the converter permutes), every
 * matrix pointing into the mapping with the checkpoint's shape and values
 * (permuted rows for llama's q and k), the norms, tied or untied; then that
 * the prompt's logits equal the checkpoint's within 1e-5 on the CPU and the
 * engine's greedy tokens are the checkpoint's, and on DEVICE the logits are
 * within the bf16 path's tolerance.  The second form checks a
 * conversion to TYPE the same way, each matrix dequantized within the
 * type's own rounding (Tolerance); given LOGITS, reference.py's float64
 * logits of the file's weights dequantized (gguf_to_hf.py), it also runs
 * the model on the CPU against them (QUANT_LOGITS_TOL); given DEVICE too, it
 * runs the model there instead, through both of the GPU's quantized paths,
 * and skips the binding checks (the CPU's run did them).  The third loads each
 * broken file of BAD_DIR (hf_to_gguf.py --break) and a directory of two
 * GGUF files and a split one, and checks each error names what is wrong.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "model_rows.h"
#include "ref_check.h"
#include "tap.h"

static const int32_t PROMPT[] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};

#define N_PROMPT ((int) (sizeof(PROMPT) / sizeof(PROMPT[0])))
#define N_GREEDY 16

static const char *family;

/* Whether two configurations agree on every field the forward pass reads. */
static bool
SameConfig(const cbllm_model_config *a, const cbllm_model_config *b, const char **field)
{
#define SAME(f) if (a->f != b->f) { *field = #f; return false; }
	SAME(features);
	SAME(activation);
	SAME(hidden);
	SAME(n_layers);
	SAME(n_heads);
	SAME(n_kv_heads);
	SAME(head_dim);
	SAME(intermediate);
	SAME(vocab_size);
	SAME(max_pos);
	SAME(sliding_window);
	SAME(n_rope);
	SAME(rms_eps);
	SAME(embed_scale);
	SAME(q_scale);
	SAME(tie_embeddings);
	SAME(bos_id);
	SAME(eos_id);
#undef SAME
	for (int l = 0; l < a->n_layers; l++)
		if (a->layer_window[l] != b->layer_window[l] || a->layer_rope[l] != b->layer_rope[l])
		{
			*field = "layer_window or layer_rope";
			return false;
		}
	return true;				/* not arch: GGUF's "llama" is Mistral's too */
}

/* The largest relative gap between the two models' RoPE frequencies and attention factors. */
static double
RopeGap(const cbllm_model_config *hf, const cbllm_model_config *gg)
{
	rope_freqs *a = malloc(sizeof(*a)),
			   *b = malloc(sizeof(*b));
	double		worst = INFINITY;
	cbllm_err	err;

	if (a == NULL || b == NULL)
		goto done;
	worst = 0;
	for (int r = 0; r < hf->n_rope; r++)
	{
		if (rope_freqs_build(&hf->rope[r], hf->head_dim, a, &err) != CBLLM_OK ||
			rope_freqs_build(&gg->rope[r], gg->head_dim, b, &err) != CBLLM_OK ||
			a->long_from != b->long_from)
		{
			worst = INFINITY;
			goto done;
		}
		worst = fmax(worst, fabs(a->attn - b->attn) / a->attn);
		for (int s = 0; s < 2; s++)
			for (int i = 0; i < a->half; i++)
				worst = fmax(worst, fabs(a->inv_freq[s][i] - b->inv_freq[s][i]) / a->inv_freq[s][i]);
	}
done:
	free(a);
	free(b);
	return worst;
}

/* What CompareTensor learns walking the GGUF model beside the HF one. */
typedef struct compare_walk
{
	const cbllm_model *hf;
	const cbllm_model *gg;
	int			n_matrices;		/* of the GGUF model's own (not tied) */
	int			in_mapping;		/* of those, pointing into the file */
	int			same_values;	/* matrices and vectors equal to the checkpoint's */
	int			n_tensors;
	cbllm_dtype want;			/* the type the matrices were converted to */
	char		first_bad[128];
} compare_walk;

/*
 * The largest gap (compare.h's RelErr over a row) a matrix of dtype may have
 * from the F32 values it was made from: 0 for F32; half an ulp for F16 (2^-11)
 * and BF16 (2^-8 / 2); half a step for Q8_0 (amax / 254) and the affine
 * Q4_1, Q5_1 ((max - min) / 2 (levels - 1) <= max / 15, / 31); a whole step
 * for the symmetric Q4_0, Q5_0, whose d = max / -8 (-16) leaves -max a step
 * short of its level (max / 8, / 16); each plus f16's rounding of the scale.
 * The quantizers (quant.py, quantize.c) search for the scale of least
 * squared error, which may shrink the grid so that the largest elements lie
 * up to one more step from their level: the quantized bounds are doubled.
 */
static double
Tolerance(cbllm_dtype dt)
{
	switch (dt)
	{
		case CBLLM_F32:
			return 0;
		case CBLLM_F16:
			return 6e-4;
		case CBLLM_BF16:
			return 4e-3;
		case CBLLM_Q8_0:
			return 1e-2;
		case CBLLM_Q4_1:
			return 0.14;
		case CBLLM_Q5_1:
			return 7e-2;
		case CBLLM_Q4_0:
			return 0.26;
		case CBLLM_Q5_0:
			return 0.13;
		/* the K-quants: twice the worst row measured (quant.py, 300 Gaussian rows of 256 with outliers) */
		case CBLLM_Q2_K:
			return 0.9;			/* 0.45: four levels, 4-bit sub-block scales and mins */
		case CBLLM_Q3_K:
			return 0.4;			/* 0.20 */
		case CBLLM_Q4_K:
			return 0.24;		/* 0.12 */
		case CBLLM_Q5_K:
			return 0.1;			/* 0.049 */
		case CBLLM_Q6_K:
			return 0.04;		/* 0.019 */
		/*
		 * MXFP4: at most a quarter of its block's largest magnitude, under
		 * either exponent its quantizer tries (the largest clipped from 16 to
		 * 12 times the factor, or a value halfway between codes 8 and 12)
		 */
		case CBLLM_MXFP4:
			return 0.26;
		default:
			return -1;
	}
}

/* Compare one tensor of the GGUF model (matrices of type want) with the F32 checkpoint's. */
static int
CompareTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	compare_walk *w = arg;
	const char *hf_base = model_rows_field(w->hf, mt);
	bool		same = true;

	w->n_tensors++;
	if (mt->matrix != NULL)
	{
		const cbllm_weight *a = (const cbllm_weight *) (hf_base + mt->t->offset);
		const cbllm_weight *b = mt->matrix;
		const uint8_t *lo = w->gg->gguf->base;
		size_t		row_bytes = cbllm_dtype_row_bytes(b->dtype, b->cols);
		bool		qk = strcmp(mt->t->role, "wq") == 0 || strcmp(mt->t->role, "wk") == 0;
		bool		permuted = qk && (w->gg->cfg.features & ARCH_GGUF_PERMUTED_QK);
		float	   *row = malloc(sizeof(float) * b->cols);

		if (!mt->tied)
		{
			w->n_matrices++;
			w->in_mapping += (const uint8_t *) b->data >= lo &&
				(const uint8_t *) b->data + b->rows * row_bytes <= lo + w->gg->gguf->size;
		}
		same = row != NULL && a->dtype == CBLLM_F32 && b->dtype == w->want &&
			a->rows == b->rows && a->cols == b->cols;
		for (int64_t r = 0; same && r < b->rows; r++)
		{
			const float *src = (const float *) a->data +
				model_rows_source(r, w->gg->cfg.head_dim, permuted) * a->cols;

			cbllm_to_f32(b->dtype, (const char *) b->data + r * row_bytes, row, b->cols);
			same = RelErr(row, src, b->cols) <= Tolerance(b->dtype);
		}
		free(row);
	}
	else
	{
		const float *a = *(float *const *) (hf_base + mt->t->offset);

		same = a != NULL && *mt->vector != NULL &&
			memcmp(a, *mt->vector, sizeof(float) * mt->rows) == 0;
	}
	if (same)
		w->same_values++;
	else if (w->first_bad[0] == '\0')
		arch_tensor_name(mt->t, mt->layer, mt->expert, true, w->first_bad, sizeof(w->first_bad));
	return CBLLM_OK;
}

/* What the loader binds equals the checkpoint's model. */
static void
TestBinds(const char *hf_dir, const char *gguf_dir, cbllm_dtype want)
{
	cbllm_model *hf = NULL,
			   *gg = NULL;
	cbllm_err	err;
	const char *field = "";
	compare_walk w = {0};
	bool		llama = strncmp(family, "llama", 5) == 0 || strcmp(family, "mistral") == 0;

	if (model_load(hf_dir, &hf, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: the checkpoint loads (%s)", family, err.msg);
		return;
	}
	if (model_load(gguf_dir, &gg, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: the GGUF file loads (%s)", family, err.msg);
		model_free(hf);
		return;
	}
	TAP_OK(gg->gguf != NULL && gg->st == NULL, "%s: a directory holding one .gguf file loads it",
		   family);
	TAP_OK(SameConfig(&hf->cfg, &gg->cfg, &field),
		   "%s: every configuration field equals config.json's (first differing: %s)", family,
		   field);
	TAP_OK(RopeGap(&hf->cfg, &gg->cfg) < 1e-6,
		   "%s: the RoPE frequencies (rope %s from GGUF) are config.json's (rel gap %.2g < 1e-6)",
		   family, rope_type_name(gg->cfg.rope[0].type), RopeGap(&hf->cfg, &gg->cfg));
	TAP_OK(gg->cfg.rope[0].interleaved == llama && !hf->cfg.rope[0].interleaved &&
		   (gg->cfg.n_rope < 2 || gg->cfg.rope[1].interleaved == llama),
		   "%s: the GGUF file's RoPE is %s", family,
		   llama ? "interleaved (llama: q and k permuted)" : "not interleaved (NEOX layout, not permuted)");
	TAP_OK(gg->lm_head_tied == hf->lm_head_tied, "%s: lm_head is %s, as in the checkpoint",
		   family, hf->lm_head_tied ? "tied" : "untied");
	w.hf = hf;
	w.gg = gg;
	w.want = want;
	model_visit(gg, CompareTensor, &w, &err);
	TAP_OK(w.n_matrices > 0 && w.in_mapping == w.n_matrices,
		   "%s: all %d matrices point into the file's mapping (%d do)", family, w.n_matrices,
		   w.in_mapping);
	TAP_OK(w.same_values == w.n_tensors,
		   "%s: %d of %d tensors equal the checkpoint's F32 values (matrices as %s within %g)%s (first differing: %s)",
		   family, w.same_values, w.n_tensors, cbllm_dtype_name(want), Tolerance(want),
		   llama ? ", q and k rows permuted" : "",
		   w.first_bad[0] ? w.first_bad : "none");
	{
		char		got[MODEL_WEIGHT_TYPES_LEN],
					expect[MODEL_WEIGHT_TYPES_LEN];
		int			n_vectors = w.n_tensors - w.n_matrices - (gg->lm_head_tied ? 1 : 0);

		model_weight_types(gg, got, sizeof(got));
		if (want == CBLLM_F32)
			snprintf(expect, sizeof(expect), "F32 %d", w.n_matrices + n_vectors);
		else
			snprintf(expect, sizeof(expect), "F32 %d, %s %d", n_vectors, cbllm_dtype_name(want),
					 w.n_matrices);
		TAP_OK(strcmp(got, expect) == 0, "%s: the weight types are described as \"%s\" (\"%s\")",
			   family, expect, got);
	}
	model_free(gg);
	model_free(hf);
}

/* The GGUF model's logits are the checkpoint's on the CPU, and on device within bf16's tolerance. */
static void
TestLogits(const char *hf_dir, const char *gguf_dir, const char *device)
{
	int			vocab = 0,
				gvocab = 0;
	float	   *ref = ref_engine_logits(hf_dir, NULL, PROMPT, N_PROMPT, &vocab);
	float	   *got = ref != NULL ? ref_engine_logits(gguf_dir, NULL, PROMPT, N_PROMPT, &gvocab) : NULL;
	double		worst = got != NULL && gvocab == vocab ?
		ref_worst_row(got, ref, N_PROMPT, vocab) : INFINITY;

	TAP_OK(worst <= 1e-5,
		   "%s: the GGUF model's prompt logits on the CPU are the checkpoint's (worst row rel err %.2g <= 1e-5)",
		   family, worst);
	if (device != NULL)
		ref_check_device(gguf_dir, device, PROMPT, N_PROMPT, ref, vocab, family);
	else
	{
		int32_t		a[N_GREEDY],
					b[N_GREEDY];
		int			na = ref_engine_greedy(hf_dir, NULL, PROMPT, N_PROMPT, N_GREEDY, a),
					nb = ref_engine_greedy(gguf_dir, NULL, PROMPT, N_PROMPT, N_GREEDY, b);

		TAP_OK(na == N_GREEDY && nb == N_GREEDY && memcmp(a, b, sizeof(a)) == 0,
			   "%s: the engine's %d greedy tokens from the GGUF model are the checkpoint's",
			   family, N_GREEDY);
	}
	free(ref);
	free(got);
}

/*
 * The bound on a quantized model's prompt logits against the float64
 * reference run on the very weights the file holds (gguf_to_hf.py
 * dequantizes them): what is left is the CPU's quantization of each
 * matmul's activations to 8 bits per block of 32 (kernels_quant.inc; per
 * 256 for the K-quants' integer products on AVX-512), a relative error of
 * about 1 / (127 sqrt 12) = 0.23% of a block's largest value per element,
 * which grows through the layers' matmuls.  Measured on the 2-layer test
 * model of width 256 (worst row, RelErr): 1.25% (Q8_0) to 2.03% (Q4_1)
 * with blocks of 32, 1.96% to 2.33% (Q6_K, Q5_K) for the K-quants with
 * blocks of 256, whose scale follows the larger block's largest value;
 * the activations' share dominates every type.  The bound is 4%, 1.7
 * times the worst.
 */
#define QUANT_LOGITS_TOL 4e-2

/*
 * A quantized model's logits against the reference on its dequantized
 * weights (LOGITS), on the CPU, or on a device twice: with the prompt in
 * steps of 4 tokens (the GPU's fused decode product) and in one step of 12
 * (its bf16 tiles through cuBLAS).  What is left on the GPU is its bf16 KV
 * cache and, in the tiles, bf16 activations and weights, each value rounded
 * by at most 2^-9: measured on the same model, 0.17% to 0.20% (fused) and
 * 0.58% to 0.68% (tiles) for Q8_0, Q2_K, Q4_K and Q6_K; the bound,
 * QUANT_LOGITS_TOL_DEVICE, is three times the worst.
 */
#define QUANT_LOGITS_TOL_DEVICE 2e-2

static void
TestQuantLogits(const char *gguf_dir, const char *logits, cbllm_dtype dt, const char *device)
{
	static const struct
	{
		int			step;		/* prompt tokens per step: the engine's max_num_seqs */
		const char *path;
	}			runs[] = {{4, "the fused decode product"}, {16, "bf16 tiles through cuBLAS"}};
	int			n_runs = device != NULL ? 2 : 1;

	for (int i = 0; i < n_runs; i++)
	{
		int			vocab = 0;
		cbllm_engine *e = ref_engine_sized(gguf_dir, device != NULL ? device : "cpu",
										   (ref_engine_size) {runs[i].step, 64, 32, 64, NULL, 0, 0});
		cbllm_engine_info info;
		cbllm_err	err;
		float	   *got = NULL,
				   *ref = NULL;
		double		worst = INFINITY;

		if (e != NULL)
		{
			cbllm_engine_get_info(e, &info);
			vocab = info.vocab_size;
			got = malloc(sizeof(float) * N_PROMPT * vocab);
			if (cbllm_engine_prompt_logits(e, PROMPT, N_PROMPT, got, &err) != CBLLM_OK)
			{
				TAP_DIAG("prompt_logits: %s", err.msg);
				free(got);
				got = NULL;
			}
			cbllm_engine_destroy(e);
		}
		ref = got != NULL ? ref_read_numbers(logits, (size_t) N_PROMPT * vocab) : NULL;
		if (ref != NULL)
			worst = ref_worst_row(got, ref, N_PROMPT, vocab);
		double		tol = device != NULL ? QUANT_LOGITS_TOL_DEVICE : QUANT_LOGITS_TOL;

		TAP_OK(worst <= tol,
			   "%s %s on %s%s%s: the prompt logits are the float64 reference's on the dequantized weights (worst row rel err %.3g <= %g)",
			   family, cbllm_dtype_name(dt), device != NULL ? device : "the CPU",
			   device != NULL ? ", " : "", device != NULL ? runs[i].path : "", worst, tol);
		free(got);
		free(ref);
	}
}

/* Loading path fails with a message holding want. */
static void
ExpectError(const char *path, const char *want, const char *what)
{
	cbllm_model *m = NULL;
	cbllm_err	err = {0};
	int			rc = model_load(path, &m, &err);

	TAP_OK(rc != CBLLM_OK && strstr(err.msg, want) != NULL, "%s: refused naming \"%s\" (%s)",
		   what, want, rc == CBLLM_OK ? "it loaded" : err.msg);
	model_free(m);
}

/* Write an empty file at dir/name. */
static void
Touch(const char *dir, const char *name)
{
	char	   *p = cbllm_path_join(dir, name);
	FILE	   *f = p != NULL ? fopen(p, "w") : NULL;

	if (f != NULL)
		fclose(f);
	free(p);
}

/* Every broken file and directory is refused with an error naming what is wrong. */
static void
TestErrors(const char *bad_dir)
{
	static const struct
	{
		const char *file;
		const char *want;
		const char *what;
	}			cases[] = {
		{"missing-key.gguf", "llama.block_count: missing", "a missing key"},
		{"key-type.gguf", "llama.embedding_length: must be an integer, found string",
		"a key of the wrong type"},
		{"absurd-value.gguf", "llama.attention.head_count: 2147483648 is out of range",
		"an absurd value"},
		{"missing-tensor.gguf", "missing tensor \"blk.0.attn_k.weight\"", "a missing tensor"},
		{"rank.gguf", "tensor \"blk.0.attn_norm.weight\" has the wrong shape: expected [64]",
		"a tensor of the wrong rank"},
		{"shape.gguf", "tensor \"blk.1.ffn_down.weight\" has the wrong shape",
		"a tensor of the wrong shape"},
		{"type-id.gguf", "tensor \"blk.0.attn_v.weight\" has ggml type 9",
		"a tensor of a ggml type cbllm does not load"},
		{"ragged.gguf", "tensor \"blk.0.ffn_gate.weight\": row length 63 is not a multiple of Q8_0's block of 32",
		"rows that are not whole blocks"},
	};
	char		dir[512];

	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		char	   *p = cbllm_path_join(bad_dir, cases[i].file);

		ExpectError(p, cases[i].want, cases[i].what);
		free(p);
	}
	snprintf(dir, sizeof(dir), "%s/two", bad_dir);
	mkdir(dir, 0755);
	Touch(dir, "a.gguf");
	Touch(dir, "b.gguf");
	ExpectError(dir, "2 GGUF files found", "a directory of two .gguf files");
	snprintf(dir, sizeof(dir), "%s/split", bad_dir);
	mkdir(dir, 0755);
	Touch(dir, "m-00001-of-00002.gguf");
	ExpectError(dir, "split GGUF file", "a directory holding a split GGUF file");
	snprintf(dir, sizeof(dir), "%s/split/m-00001-of-00002.gguf", bad_dir);
	ExpectError(dir, "split GGUF file", "a split GGUF file named directly");
}

/* The weight type a --type name stands for ("q8_0" is Q8_0). */
static bool
TypeByName(const char *name, cbllm_dtype *dt)
{
	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
		if (strcasecmp(cbllm_dtype_name((cbllm_dtype) i), name) == 0)
		{
			*dt = (cbllm_dtype) i;
			return true;
		}
	return false;
}

int
main(int argc, char **argv)
{
	cbllm_dtype want = CBLLM_F32;

	if (argc == 3 && strcmp(argv[1], "--errors") == 0)
	{
		family = "llama";
		TestErrors(argv[2]);
		return tap_done();
	}
	/* --type T: a conversion to T, whose values and binding are checked; with LOGITS also run */
	if (argc >= 6 && argc <= 8 && strcmp(argv[1], "--type") == 0 && TypeByName(argv[2], &want))
	{
		family = argv[3];
		if (argc < 8)
			TestBinds(argv[4], argv[5], want);
		if (argc >= 7)
			TestQuantLogits(argv[5], argv[6], want, argc == 8 ? argv[7] : NULL);
		return tap_done();
	}
	if (argc < 4)
	{
		fprintf(stderr, "usage: test_model_gguf FAMILY HF_DIR GGUF_DIR [DEVICE]\n"
				"       test_model_gguf --type TYPE FAMILY HF_DIR GGUF_DIR [LOGITS [DEVICE]]\n"
				"       test_model_gguf --errors BAD_DIR\n");
		return 2;
	}
	family = argv[1];
	if (argc == 4 || strcmp(argv[4], "cpu") == 0)
		TestBinds(argv[2], argv[3], CBLLM_F32);
	TestLogits(argv[2], argv[3], argc > 4 && strcmp(argv[4], "cpu") != 0 ? argv[4] : NULL);
	return tap_done();
}
