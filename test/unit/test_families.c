/*
 * test_families.c: the model families that differ from Llama in their layers
 * (arch.c's Qwen2, Qwen3 and Gemma-3 rows), each on a small random
 * checkpoint with the family's real config.json layout (gen_model.py
 * --family), held to the float64 reference (reference.py, which follows
 * the families' HF definitions and shares no code with the engine): the
 * prompt's logits within 1e-4 and the same greedy tokens on the CPU, and on
 * a device (the emulated one in CI) logits within the bf16 tolerance of the
 * CPU's.  Also what the loader binds for each family: its tensors, Gemma's
 * (1 + w) norms folded and its dummy norms left ones.
 *
 * Half-precision KV caches: the largest difference an f16 or bf16 KV cache
 * makes to any prompt logit, against the float64 reference, stays within the
 * family's bound in the table, measured with 30% of margin.  Keys and values
 * are rounded relative to their size, so the difference grows with how sharp
 * the attention is and how wide the logits are: a random checkpoint's
 * scores are about N(0, 1) and its logits a few units, a trained model's
 * scores reach tens and its logits span tens.  So each family also runs
 * (--realistic) on its checkpoint rewritten by realistic_model.py (scores 8
 * times larger, logits 6 times wider: within 25 of zero), where the bounds
 * are 10 to 80 times larger and of the size a real checkpoint shows (0.136
 * with f16 on a Phi-3 one).
 *
 * What each family's model makes matter, so that its logits check fails
 * without it (each was checked by removing the piece from the engine):
 *   qwen2   the q, k, v biases (drawn ~ N(0, 0.5));
 *   qwen3   the per-head q and k RMSNorm, head_dim 32 with hidden 64;
 *   gemma3  the (1 + w) norms (w ~ N(0, 0.1)), the post-attention and
 *           post-feedforward norms, the sqrt(hidden) embedding scale,
 *           GELU-tanh and query_pre_attn_scalar (not head_dim); and, as
 *           test/run-tests makes it (5 layers, sliding_window 4 below the
 *           prompt's 12 tokens, sliding_window_pattern 3), its local layers'
 *           window and rope_local_base_freq beside the global layer's
 *           rope_theta (a reference without either differs by 0.14 or more);
 *   gemma3-bf16  bf16 weights, whose sqrt(hidden) embedding scale is rounded
 *           to bf16 as HF casts it (unrounded: 1.2e-3 off the reference).
 *
 * The positional variants (rope.h, model_config_rope.c), each on a model whose
 * prompt and greedy tokens reach where the variant differs from plain RoPE:
 *   llama3         llama3 RoPE scaling, factor 32, with head_dim 16 spread
 *                  over its three frequency bands (original context 64),
 *                  tied, an eos_token_id list (Llama-3.2-1B's layout);
 *   llama3.1       the same, factor 8, untied (Llama-3.1-8B's);
 *   phi3           Phi-3's fused qkv_proj and gate_up_proj (bound as row
 *                  blocks, checked to point into the stored tensor) and its
 *                  sliding_window (7, shorter than the prompt);
 *   phi3-128k      longrope: the 12-token prompt, longer than the original
 *                  context 8, takes long_factor at every position (the
 *                  sequence's length chooses the set: test_longrope checks
 *                  the short set and the switch), attention factor
 *                  sqrt(1 + ln 32 / ln 8);
 *   qwen2-yarn     YaRN factor 4 (original context 16) on Qwen2.5's layout;
 *   qwen2-window   Qwen2 with use_sliding_window true and max_window_layers
 *                  1: layer 0 global, layer 1 windowed (5), a mixed model
 *                  whose KV blocks are kept and masked per layer;
 *   llama-dynamic  dynamic NTK, factor 4 (the static base of rope.h);
 *   gemma3-local   Gemma-3's local layer (window 5, rope_local_base_freq)
 *                  and global layer (rope_theta with linear factor 8).
 * Each was checked once by hand to fail without its piece.
 *
 * usage: test_families [--realistic] FAMILY DIR REF_LOGITS REF_GREEDY [DEVICE]
 *   --realistic DIR was made realistic (realistic_model.py): the kv_real bounds
 *   FAMILY      a name of the table below
 *   DIR         gen_model.py --family FAMILY (f32 weights, but gemma3-bf16)
 *   REF_LOGITS  reference.py DIR --logits --prompt-ids "<PROMPT below>"
 *   REF_GREEDY  reference.py DIR --greedy 16 --prompt-ids "<PROMPT below>"
 *   DEVICE      also run the model on this device ("cuda") against the CPU
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/numeric.h"
#include "model/model.h"
#include "ref_check.h"
#include "tap.h"
#include "visit_count.h"

static const int32_t PROMPT[] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};

#define N_PROMPT ((int) (sizeof(PROMPT) / sizeof(PROMPT[0])))
#define N_GREEDY 16

/* The largest logit difference each half-precision KV cache makes against the float64 reference. */
typedef struct kv_bounds
{
	double		f16;
	double		bf16;
} kv_bounds;

/*
 * One family: its architecture's name and flags, the vectors a layer has,
 * and the KV caches' bounds, measured on the run-tests checkpoint and on it
 * at realistic magnitudes, each with 30% of margin (rounded up).
 */
typedef struct family
{
	const char *name;			/* gen_model.py --family */
	const char *arch;			/* config.json's architecture */
	uint32_t	features;
	int			layer_vectors;	/* norms and biases per layer */
	int			layer_biases;	/* of those, biases */
	bool		untied;			/* lm_head is a tensor of its own */
	rope_type	rope;			/* the type of rope[0] */
	const char *layers;			/* per layer "R:W": its RoPE index and window (0: none) */
	kv_bounds	kv;				/* on the checkpoint test/run-tests makes */
	kv_bounds	kv_real;		/* on it made realistic (realistic_model.py); 0: no such run */
} family;

#define GEMMA3 \
	(ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_SANDWICH_NORM | ARCH_EMBED_SCALE | ARCH_TIED_DEFAULT)
#define PHI3 (ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP)

static const family Families[] = {
	{.name = "qwen2", .arch = "Qwen2ForCausalLM", .features = ARCH_QKV_BIAS, .layer_vectors = 5,
	.layer_biases = 3, .rope = ROPE_DEFAULT, .layers = "0:0 0:0",
	.kv = {0.0017, 0.018}, .kv_real = {0.048, 0.45}},
	{.name = "qwen3", .arch = "Qwen3ForCausalLM", .features = ARCH_QK_NORM, .layer_vectors = 4,
	.rope = ROPE_DEFAULT, .layers = "0:0 0:0", .kv = {0.0024, 0.02}, .kv_real = {0.065, 0.34}},
	{.name = "gemma3", .arch = "Gemma3ForCausalLM", .features = GEMMA3, .layer_vectors = 6,
	.rope = ROPE_DEFAULT, .layers = "1:4 1:4 0:0 1:4 1:4", .kv = {0.0023, 0.013},
	.kv_real = {0.1, 0.42}},
	{.name = "gemma3-bf16", .arch = "Gemma3ForCausalLM", .features = GEMMA3, .layer_vectors = 6,
	.rope = ROPE_DEFAULT, .layers = "0:0 0:0", .kv = {0.0022, 0.018}},
	{.name = "llama3", .arch = "LlamaForCausalLM", .layer_vectors = 2, .rope = ROPE_LLAMA3,
	.layers = "0:0 0:0", .kv = {0.0027, 0.034}, .kv_real = {0.03, 0.3}},
	{.name = "llama3.1", .arch = "LlamaForCausalLM", .layer_vectors = 2, .untied = true,
	.rope = ROPE_LLAMA3, .layers = "0:0 0:0", .kv = {0.0013, 0.0083}, .kv_real = {0.027, 0.3}},
	{.name = "phi3", .arch = "Phi3ForCausalLM", .features = PHI3, .layer_vectors = 2, .untied = true,
	.rope = ROPE_DEFAULT, .layers = "0:7 0:7", .kv = {0.0014, 0.0063}, .kv_real = {0.032, 0.16}},
	{.name = "phi3-128k", .arch = "Phi3ForCausalLM", .features = PHI3, .layer_vectors = 2,
	.untied = true, .rope = ROPE_LONGROPE, .layers = "0:512 0:512", .kv = {0.0031, 0.019},
	.kv_real = {0.24, 0.92}},
	{.name = "qwen2-yarn", .arch = "Qwen2ForCausalLM", .features = ARCH_QKV_BIAS, .layer_vectors = 5,
	.layer_biases = 3, .rope = ROPE_YARN, .layers = "0:0 0:0", .kv = {0.0023, 0.027},
	.kv_real = {0.041, 0.43}},
	{.name = "qwen2-window", .arch = "Qwen2ForCausalLM", .features = ARCH_QKV_BIAS, .layer_vectors = 5,
	.layer_biases = 3, .rope = ROPE_DEFAULT, .layers = "0:0 0:5", .kv = {0.0018, 0.0098},
	.kv_real = {0.055, 0.28}},
	{.name = "llama-dynamic", .arch = "LlamaForCausalLM", .layer_vectors = 2, .untied = true,
	.rope = ROPE_DYNAMIC, .layers = "0:0 0:0", .kv = {0.0014, 0.01}, .kv_real = {0.026, 0.14}},
	{.name = "gemma3-local", .arch = "Gemma3ForCausalLM", .features = GEMMA3, .layer_vectors = 6,
	.rope = ROPE_LINEAR, .layers = "1:5 0:0", .kv = {0.0029, 0.022}, .kv_real = {0.035, 0.33}},
};

static const family *fam;
static const char *model_dir;
static bool realistic;			/* --realistic: the checkpoint is realistic_model.py's */

/* Whether norm vector v (n) is the checkpoint's tensor name plus 1, exactly. */
static bool
FoldedPlusOne(const cbllm_model *m, const char *name, const float *v, int64_t n)
{
	const st_tensor *t = st_find(m->st, name);
	float	   *raw = t != NULL ? malloc(sizeof(float) * n) : NULL;
	bool		ok = raw != NULL && t->ndim == 1 && t->shape[0] == n;

	if (ok)
		cbllm_to_f32(t->dtype, t->data, raw, n);
	for (int64_t i = 0; ok && i < n; i++)
		ok = v[i] == raw[i] + 1.0f;
	free(raw);
	return ok;
}

/* Whether matrix part starts rows rows of whole's dtype after start (a block of a fused tensor). */
static bool
RowsAfter(const cbllm_weight *part, const cbllm_weight *start, int64_t rows)
{
	return (const char *) part->data ==
		(const char *) start->data + rows * cbllm_dtype_row_bytes(start->dtype, start->cols);
}

/* Each layer's RoPE and window as the family's table row says; Phi-3's fused blocks in place. */
static void
TestPositions(const cbllm_model *m)
{
	const cbllm_model_config *c = &m->cfg;
	const char *p = fam->layers;
	int			l = 0,
				r,
				w,
				n,
				windowed = 0;
	bool		ok = c->rope[0].type == fam->rope;

	for (; sscanf(p, "%d:%d%n", &r, &w, &n) == 2; p += n, l++)
	{
		ok = ok && l < c->n_layers && c->layer_rope[l] == r && c->layer_window[l] == w;
		windowed += w > 0;
	}
	TAP_OK(ok && l == c->n_layers &&
		   model_kv_drop_window(c) == (windowed == l ? c->layer_window[0] : 0),
		   "%s: rope_type %s, each layer's RoPE and window \"%s\", KV blocks dropped only when every layer is windowed",
		   fam->name, rope_type_name(c->rope[0].type), fam->layers);
	if (fam->features & ARCH_FUSED_QKV)
	{
		const cbllm_layer *y = &m->layers[c->n_layers - 1];

		TAP_OK(RowsAfter(&y->wk, &y->wq, y->wq.rows) && RowsAfter(&y->wv, &y->wk, y->wk.rows) &&
			   RowsAfter(&y->w_up, &y->w_gate, y->w_gate.rows) && y->wq.rows == c->n_heads * c->head_dim,
			   "%s: wq, wk, wv and w_gate, w_up point into qkv_proj and gate_up_proj at their row offsets",
			   fam->name);
	}
}

/* The checkpoint loads as the family's architecture with the family's tensors bound. */
static void
TestLoads(void)
{
	cbllm_model *m = NULL;
	cbllm_err	err;
	visit_count c = {0};
	int			L;

	if (model_load(model_dir, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: the checkpoint loads (%s)", fam->name, err.msg);
		return;
	}
	L = m->cfg.n_layers;
	model_visit(m, CountTensor, &c, &err);
	TAP_OK(strcmp(m->cfg.arch, fam->arch) == 0 &&
		   (m->cfg.features & ~ARCH_GGUF_PERMUTED_QK) == fam->features,
		   "%s: config.json names %s, whose table row gives the features", fam->name, fam->arch);
	TAP_OK(c.matrices == 1 + 7 * L + fam->untied && c.tied == !fam->untied &&
		   m->lm_head_tied == !fam->untied && c.bad_index == 0 &&
		   c.norms + c.biases == 1 + fam->layer_vectors * L && c.biases == fam->layer_biases * L &&
		   c.biases_set == c.biases,
		   "%s: %s lm_head, %d matrices, %d norms and %d biases (%d vectors a layer)",
		   fam->name, fam->untied ? "untied" : "tied", c.matrices, c.norms, c.biases,
		   fam->layer_vectors);
	TestPositions(m);
	if (fam->features & ARCH_QKV_BIAS)
		TAP_OK(m->layers[0].bq != NULL && m->layers[L - 1].bv != NULL && m->layers[0].bo == NULL,
			   "%s: q, k and v have biases and o has none", fam->name);
	if (fam->features & ARCH_QK_NORM)
		TAP_OK(m->cfg.head_dim == 32 && m->cfg.head_dim * m->cfg.n_heads != m->cfg.hidden &&
			   m->layers[L - 1].q_norm != NULL && m->layers[L - 1].k_norm != NULL,
			   "%s: explicit head_dim %d (hidden %d, %d heads) and per-head q_norm, k_norm",
			   fam->name, m->cfg.head_dim, m->cfg.hidden, m->cfg.n_heads);
	if (fam->features & ARCH_NORM_PLUS_ONE)
	{
		int64_t		hd = m->cfg.head_dim,
					hid = m->cfg.hidden;

		TAP_OK(FoldedPlusOne(m, "model.layers.0.input_layernorm.weight", m->layers[0].attn_norm, hid) &&
			   FoldedPlusOne(m, "model.layers.0.post_attention_layernorm.weight",
							 m->layers[0].attn_out_norm, hid) &&
			   FoldedPlusOne(m, "model.layers.0.pre_feedforward_layernorm.weight",
							 m->layers[0].mlp_norm, hid) &&
			   FoldedPlusOne(m, "model.layers.1.post_feedforward_layernorm.weight",
							 m->layers[1].mlp_out_norm, hid) &&
			   FoldedPlusOne(m, "model.layers.1.self_attn.k_norm.weight", m->layers[1].k_norm, hd) &&
			   FoldedPlusOne(m, "model.norm.weight", m->final_norm, hid),
			   "%s: every norm vector is the checkpoint's w plus 1, bound to its own role",
			   fam->name);
		bool		bf16 = m->embed.dtype == CBLLM_BF16;
		float		want = bf16 ? cbllm_bf16_to_f32(cbllm_f32_to_bf16(sqrtf((float) hid))) :
			sqrtf((float) hid);

		TAP_OK(m->cfg.embed_scale == want && m->cfg.q_scale != 1.0f,
			   "%s: %s embeddings scaled by sqrt(%lld) %s (%g); q scaled by %g", fam->name,
			   bf16 ? "bf16" : "f32", (long long) hid, bf16 ? "rounded to bf16" : "unrounded",
			   m->cfg.embed_scale, m->cfg.q_scale);
	}
	model_free(m);
}

/* The dummy format gives the family's vectors multipliers of one (no +1 on top) and bf16 scales. */
static void
TestDummy(void)
{
	model_load_params p = {.dir = model_dir, .format = "dummy", .dummy_on_host = true};
	cbllm_model *m = NULL;
	cbllm_err	err;
	bool		ones = true;

	if (model_load_ex(&p, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: the dummy format loads (%s)", fam->name, err.msg);
		return;
	}
	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int i = 0; i < m->cfg.hidden; i++)
		{
			const cbllm_layer *w = &m->layers[l];

			ones = ones && w->attn_norm[i] == 1.0f && w->mlp_norm[i] == 1.0f &&
				(w->attn_out_norm == NULL || (w->attn_out_norm[i] == 1.0f &&
											  w->mlp_out_norm[i] == 1.0f)) &&
				(w->q_norm == NULL || i >= m->cfg.head_dim ||
				 (w->q_norm[i] == 1.0f && w->k_norm[i] == 1.0f)) &&
				(w->bq == NULL || w->bq[i] == 0.0f);
		}
	TAP_OK(ones && m->lm_head_tied == !fam->untied,
		   "%s: dummy norms are ones, biases zeros, lm_head %s", fam->name,
		   fam->untied ? "untied" : "tied");
	if (fam->features & ARCH_EMBED_SCALE)
		TAP_OK(m->cfg.embed_scale == cbllm_bf16_to_f32(cbllm_f32_to_bf16(sqrtf((float) m->cfg.hidden))) &&
			   m->cfg.embed_scale != sqrtf((float) m->cfg.hidden),
			   "%s: bf16 (dummy) embeddings are scaled by sqrt(%d) rounded to bf16 (%g), as HF casts it",
			   fam->name, m->cfg.hidden, m->cfg.embed_scale);
	model_free(m);
}

/* The largest |a[i] - b[i]| of n numbers. */
static double
MaxAbsDiff(const float *a, const float *b, size_t n)
{
	double		m = 0;

	for (size_t i = 0; i < n; i++)
		m = fmax(m, fabs((double) a[i] - b[i]));
	return m;
}

/* The CPU's logits and greedy tokens match the reference; a device's logits match the CPU's. */
static void
TestNumerics(const char *ref_logits, const char *ref_greedy, const char *device)
{
	int			vocab = 0,
				n = -1,
				same = 0;
	float	   *got = ref_engine_logits(model_dir, NULL, PROMPT, N_PROMPT, &vocab);
	float	   *ref = got != NULL ? ref_read_numbers(ref_logits, (size_t) N_PROMPT * vocab) : NULL;
	float	   *refg = ref_read_numbers(ref_greedy, N_GREEDY);
	double		worst = ref != NULL ? ref_worst_row(got, ref, N_PROMPT, vocab) : INFINITY;
	int32_t		toks[N_GREEDY];

	TAP_OK(worst <= 1e-4, "%s: prompt logits match the float64 reference (worst row rel err %.2g <= 1e-4)",
		   fam->name, worst);
	/*
	 * a half-precision KV cache: the largest logit difference it makes,
	 * within the family's measured bound (the README states them)
	 */
	for (int t = 0; ref != NULL && t < 2; t++)
	{
		const char *kvt = t ? "bf16" : "f16";
		const kv_bounds *kb = realistic ? &fam->kv_real : &fam->kv;
		double		bound = t ? kb->bf16 : kb->f16;
		int			hv = 0;
		float	   *half = ref_engine_logits_kv(model_dir, NULL, kvt, PROMPT, N_PROMPT, &hv);
		double		d = half != NULL && hv == vocab ? MaxAbsDiff(half, ref, (size_t) N_PROMPT * vocab) :
			INFINITY;

		TAP_OK(d <= bound, "%s%s: a %s KV cache moves the prompt logits at most %.3g from the float64 reference (bound %.2g)",
			   fam->name, realistic ? " at realistic magnitudes" : "", kvt, d, bound);
		free(half);
	}
	if (refg != NULL)
		n = ref_engine_greedy(model_dir, NULL, PROMPT, N_PROMPT, N_GREEDY, toks);
	for (int i = 0; i < n; i++)
		same += toks[i] == (int32_t) refg[i];
	TAP_OK(n == N_GREEDY && same == N_GREEDY,
		   "%s: %d greedy tokens on the CPU are the reference's (%d of %d equal)", fam->name,
		   N_GREEDY, same, n);
	if (device != NULL)
	{
		ref_check_device(model_dir, device, PROMPT, N_PROMPT, got, vocab, fam->name);
		n = refg != NULL ? ref_engine_greedy(model_dir, device, PROMPT, N_PROMPT, N_GREEDY, toks) : -1;
		same = 0;
		for (int i = 0; i < n; i++)
			same += toks[i] == (int32_t) refg[i];
		TAP_DIAG("%s: on %s, %d of %d greedy tokens are the reference's (bf16 weights and KV)",
				 fam->name, device, same, N_GREEDY);
	}
	free(got);
	free(ref);
	free(refg);
}

int
main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--realistic") == 0)
	{
		realistic = true;
		argv++;
		argc--;
	}
	if (argc < 5)
	{
		fprintf(stderr, "usage: test_families [--realistic] FAMILY DIR REF_LOGITS REF_GREEDY [DEVICE]\n");
		return 2;
	}
	for (int i = 0; i < (int) (sizeof(Families) / sizeof(Families[0])); i++)
		if (strcmp(Families[i].name, argv[1]) == 0)
			fam = &Families[i];
	if (fam == NULL || (realistic && fam->kv_real.f16 == 0))
	{
		fprintf(stderr, "test_families: unknown family \"%s\"%s\n", argv[1],
				fam != NULL ? " (it has no realistic run)" : "");
		return 2;
	}
	model_dir = argv[2];
	TestLoads();
	TestDummy();
	TestNumerics(argv[3], argv[4], argc > 5 ? argv[5] : NULL);
	return tap_done();
}
