/*
 * test_moe.c: mixture-of-experts models (Qwen3-MoE, Mixtral) on a small
 * random checkpoint of the family's real config.json layout (gen_model.py
 * --family qwen3_moe or mixtral), held to the float64 reference
 * (reference.py, written from HF's modeling code, sharing nothing with the
 * engine):
 *
 *   - routing (moe.h): the k largest probabilities in order, the lower
 *     expert first on ties, NaN never before a number, weights the softmax's
 *     or renormalised to sum 1;
 *   - the loader: the config's experts, their count and width, which layers
 *     have them (decoder_sparse_step, mlp_only_layers), a router and every
 *     expert bound on those and the dense MLP on the others, each expert's
 *     matrices pointing into the checkpoint's mapping (nothing copied); a
 *     GGUF file's stacked expert tensors bound expert by expert in place;
 *   - the prompt's logits within 1e-4 of the reference and its 16 greedy
 *     tokens equal, on the CPU; a GGUF file of the model too: its logits
 *     against the reference on the weights the file holds, within 1e-4 for
 *     F32 and within test_model_gguf's 4% for the quantized types (whose
 *     activations are quantized too); gpt-oss's checkpoint with its experts
 *     as MXFP4 blocks and scales, as the released one stores them, likewise;
 *     and on those files, each prompt's tokens in a batch of four and
 *     chunked equal to its own alone;
 *   - what continuous batching does around the experts changes no token:
 *     the prompt beside three others in one batch (each expert then reads
 *     rows of several sequences at once), its prompt split over steps
 *     (chunked prefill), preempted by recompute and by swap in a KV pool too
 *     small for all four, and served again from the prefix cache.
 *
 * With --device D (test_moe_emu: the emulated CUDA device), the same
 * model on D: its logits against the CPU's within the bf16 path's
 * tolerance, and its tokens in a batch of four, chunked, and preempted by
 * swap, each equal to its own alone on D (a device computes in bf16, so
 * its tokens are held to its own, not to the CPU's); given a GGUF file, its
 * logits on D against the CPU's too.
 *
 * usage: test_moe [--device D] FAMILY DIR REF_LOGITS REF_GREEDY [GGUF GGUF_REF_LOGITS TOLERANCE]
 *   FAMILY            a row of the table below
 *   DIR               gen_model.py --family ... (f32)
 *   REF_LOGITS        reference.py DIR --logits --prompt-ids "<PROMPT below>"
 *   REF_GREEDY        reference.py DIR --greedy 16 --prompt-ids "<PROMPT below>"
 *   GGUF              the model as a GGUF file (hf_to_gguf.py; a path ending .gguf), or as
 *                     a checkpoint directory with MXFP4 experts (mxfp4_checkpoint.py: the
 *                     blocks and scales stored apart, as gpt-oss's released one) ...
 *   GGUF_REF_LOGITS   ... reference.py's logits on the weights it holds (gguf_to_hf.py)
 *   TOLERANCE         ... the largest relative error of a logit row allowed
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "batch_check.h"
#include "engine_run.h"
#include "model/model.h"
#include "model/moe.h"
#include "ref_check.h"
#include "tap.h"

#define PROMPT BATCH_PROMPT
#define N_PROMPT BATCH_PROMPT_LEN
#define N_GREEDY BATCH_GREEDY
#define N_BATCH BATCH_N

/* One family's checkpoint as test/run-tests makes it. */
typedef struct moe_family
{
	const char *name;
	const char *arch;			/* what the loader names it */
	int			n_experts;
	int			n_used;
	bool		norm;			/* renormalised weights */
	const char *layers;			/* per layer: 1 with experts, 0 dense */
} moe_family;

static const moe_family Families[] = {
	{.name = "qwen3_moe", .arch = "Qwen3MoeForCausalLM", .n_experts = 8, .n_used = 2,
	.norm = true, .layers = "1 1"},
	{.name = "qwen3_moe-sparse", .arch = "Qwen3MoeForCausalLM", .n_experts = 8, .n_used = 3,
	.norm = false, .layers = "0 1 0 0"},
	{.name = "mixtral", .arch = "MixtralForCausalLM", .n_experts = 4, .n_used = 2, .norm = true,
	.layers = "1 1"},
	/* 256 wide, the K-quants' block, for its GGUF files in the quantized types */
	{.name = "qwen3_moe-wide", .arch = "Qwen3MoeForCausalLM", .n_experts = 4, .n_used = 2,
	.norm = true, .layers = "1 1"},
	/* sinks, biases, the clamped SwiGLU, stacked interleaved experts, YaRN unrounded, windows */
	{.name = "gpt_oss", .arch = "GptOssForCausalLM", .n_experts = 8, .n_used = 4, .norm = true,
	.layers = "1 1 1"},
	/* its windows not alternating: the GGUF file's per-layer sliding_window_pattern */
	{.name = "gpt_oss-windows", .arch = "GptOssForCausalLM", .n_experts = 8, .n_used = 4,
	.norm = true, .layers = "1 1 1"},
};

/* The layers of f that have experts. */
static int
MoeLayers(const moe_family *f)
{
	int			n = 0;

	for (const char *c = f->layers; *c; c++)
		n += *c == '1';
	return n;
}

/* ------------------------------------------------------------------ routing */

/* moe_route's rule on hand-made logits. */
static void
TestRoute(void)
{
	const float tie[5] = {0.5f, 2.0f, 1.0f, 2.0f, 1.0f};
	const float with_nan[4] = {NAN, -3.0f, NAN, -4.0f};
	int32_t		ids[5];
	float		w[5];
	double		p[5],
				total = 0;

	moe_route(tie, 5, 3, false, NULL, ids, w);
	TAP_OK(ids[0] == 1 && ids[1] == 3 && ids[2] == 2,
		   "routing: the k largest logits in order, the lower expert first on a tie (got %d %d %d)",
		   ids[0], ids[1], ids[2]);
	for (int e = 0; e < 5; e++)
		total += p[e] = exp(tie[e]);
	TAP_OK(fabs(w[0] - p[1] / total) < 1e-6 && fabs(w[2] - p[2] / total) < 1e-6,
		   "routing: without renormalisation a weight is the expert's softmax probability over all");
	moe_route(tie, 5, 3, true, NULL, ids, w);
	TAP_OK(fabs(w[0] + w[1] + w[2] - 1.0) < 1e-6 &&
		   fabs(w[0] - p[1] / (p[1] + p[3] + p[2])) < 1e-6,
		   "routing: renormalised, the chosen weights are their share of the chosen probabilities");
	moe_route(with_nan, 4, 2, true, NULL, ids, w);
	TAP_OK(ids[0] == 1 && ids[1] == 3 && w[0] > w[1] && fabs(w[0] + w[1] - 1.0) < 1e-6,
		   "routing: a NaN logit is never chosen before a number (got %d %d)", ids[0], ids[1]);
	moe_route(tie, 5, 5, true, NULL, ids, w);
	TAP_OK(ids[0] == 1 && ids[1] == 3 && ids[2] == 2 && ids[3] == 4 && ids[4] == 0,
		   "routing: k = every expert orders them all");
}

/* ------------------------------------------------------------------ loading */

/* Whether every layer of m has what f's layer string says: a router and experts, or the dense MLP. */
static bool
LayersMatch(const cbllm_model *m, const moe_family *f)
{
	if ((int) strlen(f->layers) != 2 * m->cfg.n_layers - 1)
		return false;
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		bool		moe = f->layers[2 * l] == '1';
		const cbllm_layer *L = &m->layers[l];

		if (m->cfg.layer_moe[l] != moe)
			return false;
		if (moe && (L->router.data == NULL || L->experts == NULL || L->w_gate.data != NULL ||
					L->router.rows != m->cfg.n_experts))
			return false;
		for (int e = 0; moe && e < m->cfg.n_experts; e++)
			if (L->experts[e].w_gate.data == NULL || L->experts[e].w_up.data == NULL ||
				L->experts[e].w_down.data == NULL ||
				L->experts[e].w_down.rows != m->cfg.hidden ||
				L->experts[e].w_down.cols != m->cfg.expert_intermediate)
				return false;
		if (!moe && (L->experts != NULL || L->w_gate.data == NULL || L->w_down.data == NULL))
			return false;
	}
	return true;
}

/*
 * Each expert matrix points at the start of its own tensor in the
 * checkpoint's mapping; one of a stacked tensor (gpt-oss's, stored [in,
 * out]) is the model's own copy of its part.
 */
static bool
ExpertsInPlace(const cbllm_model *m)
{
	int			n;
	const arch_tensor *t = arch_tensors(&n);

	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int e = 0; m->cfg.layer_moe[l] && e < m->cfg.n_experts; e++)
			for (int i = 0; i < n; i++)
			{
				char		name[160];
				const st_tensor *st;
				const cbllm_weight *w;

				if (t[i].scope != ARCH_EXPERT || !arch_has_tensor(&t[i], m->cfg.features))
					continue;
				arch_tensor_name(&t[i], l, e, false, name, sizeof(name));
				st = st_find(m->st, name);
				w = (const cbllm_weight *) ((const char *) &m->layers[l].experts[e] + t[i].offset);
				if (t[i].kind != ARCH_MATRIX)
					continue;
				if (st == NULL && t[i].hf_layout != ARCH_HF_OWN && w->dtype == CBLLM_MXFP4)
				{
					/* gpt-oss's released layout: the matrix's MXFP4 blocks and scales stored apart */
					strncat(name, "_blocks", sizeof(name) - strlen(name) - 1);
					st = st_find(m->st, name);
				}
				if (t[i].hf_layout != ARCH_HF_OWN ? st == NULL || !w->owned :
					st == NULL || w->data != st->data || w->owned)
				{
					TAP_DIAG("layer %d expert %d: %s not bound in place", l, e, name);
					return false;
				}
			}
	return true;
}

/* GGUF: expert e's matrices are e whole matrices into the stacked tensor of its layer. */
static bool
StackedInPlace(const cbllm_model *m)
{
	static const char *const names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int k = 0; m->cfg.layer_moe[l] && k < 3; k++)
		{
			char		name[64];
			const gguf_tensor *t;

			snprintf(name, sizeof(name), "blk.%d.%s.weight", l, names[k]);
			if ((t = gguf_find_tensor(m->gguf, name)) == NULL)
				return false;
			for (int e = 0; e < m->cfg.n_experts; e++)
			{
				const cbllm_expert *x = &m->layers[l].experts[e];
				const cbllm_weight *w = k == 0 ? &x->w_gate : k == 1 ? &x->w_up : &x->w_down;
				size_t		bytes = cbllm_dtype_row_bytes(w->dtype, w->cols) * w->rows;

				if (w->data != (const char *) t->data + bytes * e || w->owned)
				{
					TAP_DIAG("%s expert %d is not its matrix of the stack", name, e);
					return false;
				}
			}
		}
	return true;
}

/* What the loader makes of the checkpoint (gguf: a GGUF file of it). */
static void
TestLoad(const moe_family *f, const char *path, bool gguf)
{
	cbllm_model *m = NULL;
	cbllm_err	err;
	const char *what = gguf ? "GGUF" : "checkpoint";

	if (model_load(path, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: the %s loads (%s)", f->name, what, err.msg);
		return;
	}
	TAP_OK(strcmp(m->cfg.arch, f->arch) == 0 && m->cfg.n_experts == f->n_experts &&
		   m->cfg.n_experts_used == f->n_used && m->cfg.moe_norm_topk == f->norm &&
		   (m->cfg.features & ARCH_MOE),
		   "%s %s: %s, %d experts, %d per token, %s (got %s, %d, %d, %s)", f->name, what, f->arch,
		   f->n_experts, f->n_used, f->norm ? "renormalised" : "softmax weights",
		   m->cfg.arch, m->cfg.n_experts, m->cfg.n_experts_used,
		   m->cfg.moe_norm_topk ? "renormalised" : "softmax weights");
	TAP_OK(LayersMatch(m, f), "%s %s: layers with experts \"%s\" bound a router and %d experts, the others a dense MLP",
		   f->name, what, f->layers, f->n_experts);
	if (gguf)
		TAP_OK(StackedInPlace(m), "%s GGUF: each expert is its matrix of the stacked tensor, in the mapping",
			   f->name);
	else
		TAP_OK(ExpertsInPlace(m), "%s checkpoint: each expert's matrices point into the mapping (a stacked tensor's, copied out of it)",
			   f->name);
	model_free(m);
}

/* --------------------------------------------------------------- the numbers */

/* The prompt's logits against ref_path within tol (relative, per row). */
static void
TestLogits(const char *name, const char *path, const char *ref_path, double tol, const char *what)
{
	int			vocab = 0;
	float	   *got = ref_engine_logits(path, NULL, PROMPT, N_PROMPT, &vocab);
	float	   *ref = got != NULL ? ref_read_numbers(ref_path, (size_t) N_PROMPT * vocab) : NULL;
	double		worst = ref != NULL ? ref_worst_row(got, ref, N_PROMPT, vocab) : INFINITY;

	TAP_OK(worst < tol, "%s %s: the prompt's logits match the float64 reference (worst row rel err %.2g < %.0e)",
		   name, what, worst, tol);
	free(got);
	free(ref);
}

/*
 * The greedy tokens alone against the reference, then in a batch (each
 * request's tokens as alone), with chunked prefill, under preemption by
 * recompute and by swap, and from the prefix cache.
 */
static void
TestGreedyAndBatching(const moe_family *f, const char *path, const char *ref_greedy)
{
	int32_t		got[N_GREEDY];
	float	   *ref = ref_read_numbers(ref_greedy, N_GREEDY);
	int			n = ref != NULL ? ref_engine_greedy(path, NULL, PROMPT, N_PROMPT, N_GREEDY, got) : -1;
	bool		same = n == N_GREEDY;
	batch_tokens alone,
				b;
	cbllm_stats st;

	for (int i = 0; same && i < N_GREEDY; i++)
		same = got[i] == (int32_t) ref[i];
	TAP_OK(same, "%s: %d greedy tokens equal the float64 reference's", f->name, N_GREEDY);
	free(ref);

	batch_alone(path, NULL, &alone);
	TAP_OK(alone.n[0] == N_GREEDY && memcmp(alone.ids[0], got, sizeof(got)) == 0,
		   "%s: the prompts run alone", f->name);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {N_BATCH, 256, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s: four prompts in one batch each make their tokens alone (experts read rows of several sequences)",
		   f->name);
	TAP_OK(st.expert_pairs > 0 && st.expert_pairs % f->n_used == 0 &&
		   st.expert_runs < st.expert_pairs &&
		   st.expert_runs <= st.steps * (int64_t) MoeLayers(f) * f->n_experts,
		   "%s: the batch read %lld experts for %lld (token, expert) pairs in %lld steps: each expert at most once a step and layer, for all its tokens",
		   f->name, (long long) st.expert_runs, (long long) st.expert_pairs, (long long) st.steps);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {N_BATCH, 5, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s: with prompts split over steps of 5 tokens (chunked prefill) the tokens are the same",
		   f->name);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {N_BATCH, 256, 14, 64, NULL, CBLLM_PREEMPT_RECOMPUTE, 0},
					&b, &st) && batch_same(&alone, &b) && st.preemptions_recompute > 0,
		   "%s: preempted by recompute in a pool of 14 blocks, the tokens are the same (%lld preemptions)",
		   f->name, (long long) st.preemptions_recompute);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {N_BATCH, 256, 14, 64, NULL, CBLLM_PREEMPT_SWAP, 64}, &b,
					&st) && batch_same(&alone, &b) && st.preemptions_swap > 0,
		   "%s: preempted by swap in a pool of 14 blocks, the tokens are the same (%lld preemptions)",
		   f->name, (long long) st.preemptions_swap);
}

/*
 * A quantized file or checkpoint (experts in integer products, every
 * expert's products of a stage in one dispatch): each prompt's tokens in a
 * batch of four and chunked equal to its own alone.
 */
static void
TestQuantizedBatching(const moe_family *f, const char *path, const char *what)
{
	batch_tokens alone,
				b;
	cbllm_stats st;

	batch_alone(path, NULL, &alone);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {N_BATCH, 256, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b) && st.expert_runs < st.expert_pairs,
		   "%s %s: four prompts in one batch each make their tokens alone", f->name, what);
	TAP_OK(batch_run(path, NULL, (ref_engine_size) {N_BATCH, 5, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s %s: with prompts split over steps of 5 tokens the tokens are the same", f->name, what);
}

/*
 * On a device: the prompt's logits against the CPU's, and each prompt's
 * tokens in a batch, chunked and preempted by swap equal to its own alone
 * on the device.
 */
static void
TestDevice(const moe_family *f, const char *path, const char *device)
{
	int			vocab = 0;
	float	   *cpu = ref_engine_logits(path, NULL, PROMPT, N_PROMPT, &vocab);
	batch_tokens alone,
				b;
	cbllm_stats st;

	ref_check_device(path, device, PROMPT, N_PROMPT, cpu, vocab, f->name);
	free(cpu);
	batch_alone(path, device, &alone);
	TAP_OK(batch_run(path, device, (ref_engine_size) {N_BATCH, 256, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s on %s: four prompts in one batch each make their tokens alone on %s", f->name,
		   device, device);
	TAP_OK(batch_run(path, device, (ref_engine_size) {N_BATCH, 5, 64, 64, NULL, 0, 0}, &b, &st) &&
		   batch_same(&alone, &b),
		   "%s on %s: with chunked prefill (steps of 5 tokens) the tokens are the same", f->name,
		   device);
	TAP_OK(batch_run(path, device, (ref_engine_size) {N_BATCH, 256, 14, 64, NULL, CBLLM_PREEMPT_SWAP, 64},
					&b, &st) && batch_same(&alone, &b) && st.preemptions_swap > 0,
		   "%s on %s: preempted by swap in a pool of 14 blocks, the tokens are the same (%lld preemptions)",
		   f->name, device, (long long) st.preemptions_swap);
}

int
main(int argc, char **argv)
{
	const moe_family *f = NULL;
	const char *device = NULL;

	if (argc > 2 && strcmp(argv[1], "--device") == 0)
	{
		device = argv[2];
		argc -= 2;
		argv += 2;
	}
	if (argc != 5 && argc != 8)
	{
		fprintf(stderr, "usage: test_moe [--device D] FAMILY DIR REF_LOGITS REF_GREEDY [GGUF GGUF_REF_LOGITS TOLERANCE]\n");
		return 2;
	}
	for (int i = 0; i < (int) (sizeof(Families) / sizeof(Families[0])); i++)
		if (strcmp(Families[i].name, argv[1]) == 0)
			f = &Families[i];
	if (f == NULL)
	{
		fprintf(stderr, "test_moe: unknown family \"%s\"\n", argv[1]);
		return 2;
	}
	if (device != NULL)
	{
		TestDevice(f, argv[2], device);
		if (argc == 8 && strlen(argv[5]) >= 5 && strcmp(argv[5] + strlen(argv[5]) - 5, ".gguf") == 0)
		{
			int			vocab = 0;
			float	   *cpu = ref_engine_logits(argv[5], NULL, PROMPT, N_PROMPT, &vocab);

			/* a quantized file's experts through the device's fused and tiled products */
			ref_check_device(argv[5], device, PROMPT, N_PROMPT, cpu, vocab, "GGUF file's");
			free(cpu);
		}
		else if (argc == 8)
		{
			/*
			 * the MXFP4 checkpoint's experts, copied out at load, on the device:
			 * against the reference, as the CPU's are (each about 5% off it,
			 * the CPU's activations quantized to 8 bits, so they are held to it
			 * rather than to each other)
			 */
			int			vocab = 0;
			float	   *dev = ref_engine_logits(argv[5], device, PROMPT, N_PROMPT, &vocab);
			float	   *ref = dev != NULL ? ref_read_numbers(argv[6], (size_t) N_PROMPT * vocab) : NULL;
			double		worst = ref != NULL ? ref_worst_row(dev, ref, N_PROMPT, vocab) : INFINITY;

			TAP_OK(worst < atof(argv[7]),
				   "%s MXFP4 checkpoint on %s: the prompt's logits match the float64 reference (worst row rel err %.2g < %s)",
				   f->name, device, worst, argv[7]);
			free(dev);
			free(ref);
		}
		return tap_done();
	}
	TestRoute();
	TestLoad(f, argv[2], false);
	TestLogits(f->name, argv[2], argv[3], 1e-4, "checkpoint");
	TestGreedyAndBatching(f, argv[2], argv[4]);
	batch_check_prefix_hit(argv[2], f->name);
	if (argc == 8)
	{
		size_t		n = strlen(argv[5]);
		bool		gguf = n >= 5 && strcmp(argv[5] + n - 5, ".gguf") == 0;

		TestLoad(f, argv[5], gguf);
		TestLogits(f->name, argv[5], argv[6], atof(argv[7]), gguf ? "GGUF" : "MXFP4 checkpoint");
		TestQuantizedBatching(f, argv[5], gguf ? "GGUF" : "MXFP4 checkpoint");
	}
	return tap_done();
}
