/*
 * test_hybrid.c: hybrid models (Qwen3.5: Gated DeltaNet linear-attention
 * layers beside gated attention ones; Qwen3.5-MoE: the same with every MLP
 * routed experts and a shared expert) on a small random checkpoint of the
 * family's real layout (gen_model.py --family qwen3_5 or qwen3_5_moe), held to the float64
 * reference (reference.py, written from HF's modeling code, sharing nothing
 * with the engine):
 *
 *   - the loader: which layers are linear (layer_types), each layer's
 *     tensors (the linear ones' projections, conv, decay and gated norm; the
 *     attention ones' doubled q; a MoE one's router, experts and shared
 *     expert with its gate), the layers' places in the KV cache (the
 *     attention layers only) and the state cache;
 *   - the prompt's logits within 1e-4 of the reference and its 16 greedy
 *     tokens equal, on the CPU; a GGUF file of the model too (llama.cpp's
 *     layout: value heads tiled, A as -exp(A_log), norms with their 1);
 *   - what the engine does around the recurrent state changes no token:
 *     the prompt beside three others in one batch (each continuing its own
 *     state), prompts split over steps (chunked prefill: the state carried
 *     from chunk to chunk), preemption by recompute (the state rebuilt from
 *     position 0) and by swap (the state copied out and back) in a KV pool
 *     too small for all four;
 *   - with --long, a prompt over several chunks of the delta rule: its
 *     logits at every position against the reference, and the same bits
 *     whether its steps take 64 tokens, 7 or one;
 *   - prefix caching is off for the model, and the prompt served twice by
 *     one engine makes the same tokens with no prefix hit;
 *   - a state slot is held from a sequence's first step to its end, and an
 *     aborted request gives its slot back at once;
 *   - the state cache's size: one state per sequence of max_num_seqs, its
 *     bytes as the geometry says.
 *
 * With --device D (test_hybrid_emu: the emulated CUDA device), the same
 * model on D: its logits against the CPU's within the bf16 path's
 * tolerance, and its tokens in a batch of four, chunked, and preempted by
 * swap and by recompute, each equal to its own alone on D; with --long, the
 * long prompt's logits against the CPU's and the same bits in any steps.
 *
 * usage: test_hybrid [--device D] [--long IDS REF_LOGITS] DIR REF_LOGITS REF_GREEDY LAYERS
 *                    [GGUF GGUF_REF_LOGITS TOLERANCE]
 *   IDS          the long prompt: 100 token ids (LONG_LEN); REF_LOGITS reference.py's logits of it
 *   DIR          gen_model.py --family qwen3_5 ... (f32)
 *   REF_LOGITS   reference.py DIR --logits --prompt-ids "<batch_check.h's prompt>"
 *   REF_GREEDY   reference.py DIR --greedy 16 --prompt-ids "<the same>"
 *   LAYERS       per layer, 1 linear, 0 attention: "1 1 1 0"
 *   GGUF ...     the model as a GGUF file, the reference's logits on its weights, the
 *                largest relative error of a logit row allowed
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "api/cbllm.h"
#include "batch_check.h"
#include "engine_run.h"
#include "kv/state_cache.h"
#include "model/model.h"
#include "ref_check.h"
#include "tap.h"

/* Whether m's layers are linear as layers says ("1 1 1 0"), each with its own tensors bound. */
static bool
LayersMatch(const cbllm_model *m, const char *layers)
{
	const cbllm_model_config *c = &m->cfg;
	int			n_lin = 0;

	if ((int) strlen(layers) != 2 * c->n_layers - 1)
		return false;
	for (int l = 0; l < c->n_layers; l++)
	{
		bool		lin = layers[2 * l] == '1';
		const cbllm_layer *L = &m->layers[l];

		if (c->layer_linear[l] != lin)
			return false;
		if (lin && (L->w_lin_qkv.data == NULL || L->w_lin_z.data == NULL ||
					L->w_lin_b.data == NULL || L->w_lin_a.data == NULL || L->lin_conv == NULL ||
					L->lin_dt_bias == NULL || L->lin_a == NULL || L->lin_norm == NULL ||
					L->w_lin_out.data == NULL || L->wq.data != NULL || L->q_norm != NULL ||
					c->state_layer[l] != n_lin || c->kv_layer[l] != -1))
			return false;
		if (!lin && (L->wq.data == NULL || L->wq.rows != 2 * c->n_heads * c->head_dim ||
					 L->q_norm == NULL || L->w_lin_qkv.data != NULL || c->state_layer[l] != -1 ||
					 c->kv_layer[l] != l - n_lin))
			return false;
		n_lin += lin;
		/* every layer has both norms and its MLP: dense, or experts (with a shared one) */
		if (L->attn_norm == NULL || L->mlp_norm == NULL)
			return false;
		if (c->layer_moe[l] ? L->experts == NULL || L->router.rows != c->n_experts ||
			L->w_down.data != NULL ||
			((c->features & ARCH_SHARED_EXPERT) &&
			 (L->w_sh_down.data == NULL || L->w_sh_router.rows != 1 ||
			  L->w_sh_gate.rows != c->shared_intermediate)) :
			L->w_down.data == NULL)
			return false;
	}
	/* A is stored as log(-A) in a checkpoint, as -A in a GGUF file: negative either way */
	for (int l = 0; l < c->n_layers; l++)
		for (int h = 0; c->layer_linear[l] && h < c->lin_v_heads; h++)
			if (!(m->layers[l].lin_a[h] < 0))
				return false;
	return n_lin == c->n_linear_layers && c->n_kv_layers == c->n_layers - n_lin;
}

/* The model at path loads as the hybrid layers says. */
static void
TestLoad(const char *path, const char *layers, const char *what)
{
	cbllm_model *m = NULL;
	cbllm_err	err;

	if (model_load(path, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: loads (%s)", what, err.msg);
		return;
	}
	TAP_OK((m->cfg.features & ARCH_LINEAR_ATTN) && LayersMatch(m, layers),
		   "%s: layers \"%s\" are linear attention and attention as layer_types says, each with its tensors and its cache index",
		   what, layers);
	TAP_OK(m->cfg.rope[0].rot_dim > 0 && m->cfg.rope[0].rot_dim < m->cfg.head_dim,
		   "%s: RoPE rotates %d of the head's %d dimensions (partial_rotary_factor)", what,
		   m->cfg.rope[0].rot_dim, m->cfg.head_dim);
	model_free(m);
}

#define LONG_LEN 100			/* positions of the long prompt: three chunks of the delta rule and
								 * part of a fourth */

/* The long prompt's logits (LONG_LEN, vocab) from an engine whose steps take step tokens of it, or NULL. */
static float *
LongLogits(const char *path, const char *device, const int32_t *ids, int step, int *vocab)
{
	return ref_engine_logits_sized(path, device, (ref_engine_size) {step, 64, 32, 128, NULL, 0, 0},
								   ids, LONG_LEN, vocab);
}

/*
 * A prompt over several chunks of the delta rule (kv/state_cache.h): its
 * logits at every position within 1e-4 of the float64 reference (on a
 * device, of the CPU's within the bf16 path's tolerance), and the same bits
 * whether the steps take 64 of its tokens, 7 (steps ending inside chunks)
 * or one at a time (every position a step of its own, as in decoding).
 */
static void
TestLongPrompt(const char *path, const char *device, const char *ids_path, const char *ref_path)
{
	float	   *idf = ref_read_numbers(ids_path, LONG_LEN);
	int32_t		ids[LONG_LEN];
	int			vocab = 0,
				v7 = 0,
				v1 = 0;
	float	   *whole = NULL,
			   *by7 = NULL,
			   *by1 = NULL;
	const char *where = device != NULL ? device : "cpu";

#if defined(__x86_64__)
	unsigned	csr = _mm_getcsr() & ~0x8040u;	/* subnormals kept (FTZ and DAZ clear) */

	_mm_setcsr(csr);
#endif

	for (int i = 0; idf != NULL && i < LONG_LEN; i++)
		ids[i] = (int32_t) idf[i];
	if (idf != NULL)
	{
		whole = LongLogits(path, device, ids, 64, &vocab);
		by7 = LongLogits(path, device, ids, 7, &v7);
		/* a step a token: on the emulated device (slow) test_cuda_ops' steps of one stand for it */
		by1 = device == NULL ? LongLogits(path, device, ids, 1, &v1) : NULL;
	}
#if defined(__x86_64__)
	/* the calling thread runs tasks of the step too, the delta rule's among them */
	if (device == NULL)
		TAP_OK((_mm_getcsr() & 0x8040u) == 0,
			   "the delta rule, which flushes subnormals while it runs, puts the thread's floating-point mode back (MXCSR %#x, FTZ and DAZ clear)",
			   _mm_getcsr());
#endif
	if (device == NULL)
	{
		float	   *ref = whole != NULL ? ref_read_numbers(ref_path, (size_t) LONG_LEN * vocab) : NULL;
		double		worst = ref != NULL ? ref_worst_row(whole, ref, LONG_LEN, vocab) : INFINITY;

		TAP_OK(worst < 1e-4,
			   "a %d-token prompt (%d chunks of the delta rule and part of one): its logits match the float64 reference (worst row rel err %.2g < 1e-4)",
			   LONG_LEN, LONG_LEN / STATE_CHUNK_ROWS, worst);
		free(ref);
	}
	else if (idf != NULL)
	{
		int			vc = 0;
		float	   *cpu = LongLogits(path, NULL, ids, 64, &vc);
		double		gap = cpu != NULL && whole != NULL && vc == vocab ?
			RelErr(whole, cpu, (size_t) LONG_LEN * vocab) : INFINITY;

		TAP_OK(gap < 5e-2, "on %s the %d-token prompt's logits match the CPU's (rel err %.2g < 5e-2)",
			   device, LONG_LEN, gap);
		free(cpu);
	}
	TAP_OK(whole != NULL && by7 != NULL && v7 == vocab &&
		   memcmp(whole, by7, sizeof(float) * LONG_LEN * vocab) == 0 &&
		   (device != NULL ||
			(by1 != NULL && v1 == vocab && memcmp(whole, by1, sizeof(float) * LONG_LEN * vocab) == 0)),
		   "on %s the %d-token prompt's logits are the same bits in steps of %s tokens (chunks kept whole across steps)",
		   where, LONG_LEN, device != NULL ? "64 and 7" : "64, 7 and 1");
	free(idf);
	free(whole);
	free(by7);
	free(by1);
}

/* Prefix caching is off, said so, and a second run of the prompt makes its tokens again. */
static void
TestNoPrefixCache(const char *path)
{
	int32_t		tok[2][BATCH_GREEDY];
	cbllm_stats st = {0};
	cbllm_engine_info info = {0};
	bool		ok = batch_run_twice(path, tok, &st, &info);

	TAP_OK(ok && !info.prefix_caching && st.prefix_hits == 0 &&
		   memcmp(tok[0], tok[1], sizeof(tok[0])) == 0,
		   "prefix caching is off for a hybrid model (a cached prefix has no state): the prompt again makes the same tokens with no hit");
}

/*
 * A slot is held from a sequence's first step to its end: two requests
 * running hold two, an aborted one gives its slot back at once, and none is
 * held when both have ended.
 */
static void
TestSlotsHeld(const char *path)
{
	cbllm_engine *e = ref_engine(path, NULL);
	cbllm_sampling sp = cbllm_sampling_default();
	int64_t		id[2];
	int32_t		ids[64];
	cbllm_stats running = {0},
				aborted = {0},
				ended = {0};
	cbllm_err	err;
	int			active = 1;
	bool		ok = e != NULL;

	sp.max_tokens = 12;
	sp.ignore_eos = true;
	for (int i = 0; i < 2 && ok; i++)
	{
		cbllm_request_input in = {.ids = ids, .n_ids = batch_prompt(i, ids)};

		ok = cbllm_engine_submit(e, &in, &sp, &id[i], &err) == CBLLM_OK;
	}
	ok = ok && cbllm_engine_step(e, NULL, &err) == CBLLM_OK;
	if (ok)
		cbllm_engine_stats(e, &running);
	ok = ok && cbllm_engine_abort(e, id[0], &err) == CBLLM_OK;
	if (ok)
		cbllm_engine_stats(e, &aborted);
	for (int s = 0; ok && active > 0 && s < 100; s++)
		ok = cbllm_engine_step(e, &active, &err) == CBLLM_OK;
	if (ok)
		cbllm_engine_stats(e, &ended);
	cbllm_engine_destroy(e);
	TAP_OK(ok && running.state_slots_used == 2 && aborted.state_slots_used == 1 &&
		   ended.state_slots_used == 0 && ended.state_slots_total == 4,
		   "state slots held: %d by two running requests, %d after one is aborted, %d when both ended (of %d)",
		   running.state_slots_used, aborted.state_slots_used, ended.state_slots_used,
		   ended.state_slots_total);
}

/* One state per sequence, its bytes as the geometry says. */
static void
TestStateBytes(const char *path)
{
	cbllm_engine *e = ref_engine_sized(path, NULL, (ref_engine_size) {3, 64, 32, 64, NULL, 0, 0});
	cbllm_model *m = NULL;
	cbllm_engine_info info = {0};
	cbllm_err	err;
	size_t		want = 0;

	if (e != NULL)
		cbllm_engine_get_info(e, &info);
	if (model_load(path, &m, &err) == CBLLM_OK)
	{
		const cbllm_model_config *c = &m->cfg;
		size_t		conv = (size_t) (c->lin_conv - 1) *
			(2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim);

		/* per value head: the state, and the chunk under way's keys, new values and decays */
		want = sizeof(float) * c->n_linear_layers *
			(conv + (size_t) c->lin_v_heads *
			 ((size_t) c->lin_k_dim * c->lin_v_dim +
			  (size_t) STATE_CHUNK_ROWS * (c->lin_k_dim + c->lin_v_dim + 1)));
	}
	TAP_OK(e != NULL && want > 0 && info.state_bytes_per_seq == want && info.n_linear_layers > 0,
		   "a sequence's state is %zu bytes (the conv's last inputs, a matrix per value head and its chunk's rows, over %d linear layers)",
		   info.state_bytes_per_seq, info.n_linear_layers);
	cbllm_engine_destroy(e);
	model_free(m);
}

int
main(int argc, char **argv)
{
	const char *device = NULL,
			   *long_ids = NULL,
			   *long_ref = NULL;

	if (argc > 2 && strcmp(argv[1], "--device") == 0)
	{
		device = argv[2];
		argc -= 2;
		argv += 2;
	}
	if (argc > 3 && strcmp(argv[1], "--long") == 0)
	{
		long_ids = argv[2];
		long_ref = argv[3];
		argc -= 3;
		argv += 3;
	}
	if (argc != 5 && argc != 8)
	{
		fprintf(stderr, "usage: test_hybrid [--device D] [--long IDS REF_LOGITS] DIR REF_LOGITS REF_GREEDY LAYERS [GGUF GGUF_REF_LOGITS TOLERANCE]\n");
		return 2;
	}
	if (device != NULL)
	{
		batch_check_device(argv[1], device, "qwen3_5");
		if (long_ids != NULL)
			TestLongPrompt(argv[1], device, long_ids, long_ref);
		return tap_done();
	}
	TestLoad(argv[1], argv[4], "checkpoint");
	batch_check_logits(argv[1], argv[2], 1e-4, "checkpoint");
	batch_check_greedy(argv[1], argv[3], "checkpoint");
	if (long_ids != NULL)
		TestLongPrompt(argv[1], NULL, long_ids, long_ref);
	TestNoPrefixCache(argv[1]);
	TestSlotsHeld(argv[1]);
	TestStateBytes(argv[1]);
	if (argc == 8)
	{
		TestLoad(argv[5], argv[4], "GGUF file");
		batch_check_logits(argv[5], argv[6], atof(argv[7]), "GGUF file");
		batch_check_greedy(argv[5], NULL, "GGUF file");
	}
	return tap_done();
}
