/*
 * test_gemma4.c: Gemma 4's text decoder on a small random checkpoint
 * (gen_model.py --family gemma4: E2B's layout, or the flat layout with
 * attention_k_eq_v and one global kv head, with or without 26B-A4B's
 * experts beside the dense MLP), held to the float64
 * reference (reference.py, written from HF's modeling_gemma4.py and sharing
 * no code with the engine):
 *   - what loads: sliding and full layers with their own head sizes and
 *     RoPE, the KV-shared last layers with no k or v projection of their
 *     own reading the cache layer of the last earlier layer of their kind,
 *     their double-wide MLP, full layers without v_proj under
 *     attention_k_eq_v, the per-layer embeddings, each layer's scalar, and
 *     the experts' router, scales and norms;
 *   - the prompt's logits within 1e-4, the 16 greedy tokens equal, and each
 *     of four prompts' tokens the same alone, batched, chunked and
 *     preempted (by recompute and by swap) with the sliding window (4)
 *     shorter than the prompts;
 *   - a prefix-cache hit gives the tokens a miss gives;
 *   - the same checkpoint as a GGUF file (F32): its logits within the given
 *     tolerance of the reference, its tokens as alone when batched;
 *   - with --gguf, a quantized GGUF file alone: its logits within the given
 *     tolerance of the reference on the weights it holds (gguf_to_hf.py),
 *     its tokens as alone when batched;
 *   - with --device D (the emulated CUDA device in CI): the prompt's logits
 *     within the device's bf16 tolerance of the CPU's, and each prompt's
 *     tokens the same alone, batched, chunked and preempted on the device.
 *
 * usage: test_gemma4 DIR REF_LOGITS REF_GREEDY [GGUF GGUF_REF_LOGITS TOLERANCE]
 *        test_gemma4 --gguf GGUF GGUF_REF_LOGITS TOLERANCE
 *        test_gemma4 --device D DIR
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "batch_check.h"
#include "engine_run.h"
#include "model/model.h"
#include "ref_check.h"
#include "tap.h"

/* The layers' geometry as config.json (or the GGUF keys) describe it. */
static bool
LayersMatch(const cbllm_model *m)
{
	const cbllm_model_config *c = &m->cfg;
	bool		ple = (c->features & ARCH_PLE) != 0;
	int			first_shared = c->n_layers - c->n_kv_shared;
	int			own = 0;

	if (c->attn_scale != 1.0f || c->rope[0].head_dim <= c->head_dim ||
		(ple && (m->embed_ple.data == NULL || m->w_ple_model_proj.data == NULL ||
				 m->ple_proj_norm == NULL)))
		return false;
	for (int l = 0; l < c->n_layers; l++)
	{
		const cbllm_layer *L = &m->layers[l];
		bool		full = c->layer_window[l] == 0;
		int			src = c->layer_kv_source[l];

		if (c->layer_head_dim[l] != (full ? c->rope[0].head_dim : c->head_dim) ||
			L->wq.rows != (int64_t) c->n_heads * c->layer_head_dim[l] || L->layer_scalar == NULL ||
			L->w_gate.rows != c->layer_ff[l] ||
			(c->layer_ff[l] != c->intermediate && c->layer_ff[l] != 2 * c->intermediate) ||
			(ple && (L->w_ple_gate.data == NULL || L->w_ple_proj.data == NULL || L->ple_norm == NULL)))
			return false;
		if (c->layer_moe[l] &&
			(L->experts == NULL || L->router.rows != c->n_experts || L->router_scale == NULL ||
			 L->expert_scale == NULL || L->moe_in_norm == NULL || L->dense_out_norm == NULL ||
			 L->moe_out_norm == NULL || L->w_down.data == NULL ||
			 L->experts[c->n_experts - 1].w_up.rows != c->expert_intermediate))
			return false;
		if (l < first_shared)
		{
			if (src != l || L->wk.data == NULL || L->k_norm == NULL ||
				L->wk.rows != (int64_t) c->layer_kv_heads[l] * c->layer_head_dim[l] ||
				(L->wv.data == NULL) != (c->layer_v_is_k[l] != 0) || (c->layer_v_is_k[l] && !full) ||
				c->kv_layer[l] != own++ || c->layer_ff[l] != c->intermediate)
				return false;
		}
		else if (src >= first_shared || (c->layer_window[src] == 0) != full ||
				 L->wk.data != NULL || L->wv.data != NULL || L->k_norm != NULL ||
				 c->kv_layer[l] != c->kv_layer[src])
			return false;
	}
	return own == c->n_kv_layers && c->n_kv_layers == first_shared;
}

/* The model at path loads with Gemma 4's layers. */
static void
TestLoad(const char *path, const char *what)
{
	cbllm_model *m = NULL;
	cbllm_err	err;
	int			v_is_k = 0;

	if (model_load(path, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: loads (%s)", what, err.msg);
		return;
	}
	for (int l = 0; l < m->cfg.n_layers; l++)
		v_is_k += m->cfg.layer_v_is_k[l];
	TAP_OK((m->cfg.features & ARCH_GEMMA4) && LayersMatch(m),
		   "%s: full layers with heads of %d, sliding ones of %d; k and v projections in all but the last %d (KV-shared) layers, values from the keys in %d; MLPs as wide as configured, %d experts beside each; %s",
		   what, m->cfg.rope[0].head_dim, m->cfg.head_dim, m->cfg.n_kv_shared, v_is_k,
		   m->cfg.n_experts,
		   (m->cfg.features & ARCH_PLE) ? "per-layer embeddings" : "no per-layer embeddings");
	TAP_OK(m->cfg.logit_softcap > 0 && m->cfg.rope[1].head_dim == m->cfg.head_dim,
		   "%s: soft-capping %g, full layers' RoPE over heads of %d, sliding ones' over %d", what,
		   (double) m->cfg.logit_softcap, m->cfg.rope[0].head_dim, m->cfg.rope[1].head_dim);
	model_free(m);
}

int
main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "--device") == 0)
	{
		if (argc != 4)
			return 2;
		batch_check_device(argv[3], argv[2], "gemma4");
		return tap_done();
	}
	if (argc == 5 && strcmp(argv[1], "--gguf") == 0)
	{
		/* a quantized file against the reference on the weights it holds */
		batch_check_logits(argv[2], argv[3], atof(argv[4]), "GGUF file");
		batch_check_greedy(argv[2], NULL, "GGUF file");
		return tap_done();
	}
	if (argc != 4 && argc != 7)
	{
		fprintf(stderr, "usage: test_gemma4 [--device D] DIR REF_LOGITS REF_GREEDY [GGUF GGUF_REF_LOGITS TOLERANCE]\n"
				"       test_gemma4 --gguf GGUF GGUF_REF_LOGITS TOLERANCE\n");
		return 2;
	}
	TestLoad(argv[1], "checkpoint");
	batch_check_logits(argv[1], argv[2], 1e-4, "checkpoint");
	batch_check_greedy(argv[1], argv[3], "checkpoint");
	batch_check_prefix_hit(argv[1], "checkpoint");
	if (argc == 7)
	{
		TestLoad(argv[4], "GGUF file");
		batch_check_logits(argv[4], argv[5], atof(argv[6]), "GGUF file");
		batch_check_greedy(argv[4], NULL, "GGUF file");
	}
	return tap_done();
}
