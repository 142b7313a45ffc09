/*
 * test_engine_cuda.c: the whole engine on the CUDA backend against the CPU
 * backend on a tiny generated bf16 model: prompt logits agree within bf16
 * tolerance and greedy tokens are equal; concurrent requests (decode steps
 * replayed from CUDA graphs, padded to the graph sizes) give the same tokens
 * as with graphs off and as each request alone; swap preemption through
 * host memory gives the same tokens; seeded sampling on the device is
 * reproducible; dummy weights made on the device match the host's; weights
 * quantized at load run in their blocks and match the CPU's; the KV
 * pool follows gpu_memory_utilization, and too small a budget or too large a
 * pool fails with the status that says which engine parameter to change.
 *
 * Built against CUDA (run by test/gpu/check.sh; skipped without a GPU) and
 * against the CPU emulator of CUDA (test_engine_cuda_emu, run in CI).
 *
 * usage: test_engine_cuda BF16_MODEL_DIR DUMMY_MODEL_DIR
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "api/cbllm.h"
#include "compare.h"
#include "engine_run.h"
#include "constrain/regex.h"
#include "tap.h"

#define N_REQ 7
#define GEN 16

static const char *model_dir;

/*
 * Engine on a device with small limits; kv_blocks 0 sizes the pool from the
 * memory budget; weight_format NULL keeps the matrices as stored.
 */
static cbllm_engine *
NewEngineAs(const char *dir, const char *device, int kv_blocks, bool no_graphs, cbllm_preempt mode,
			const char *format, const char *weight_format, cbllm_err *err)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;

	p.model_dir = dir;
	p.device = device;
	p.load_format = format;
	p.weight_format = weight_format;
	p.n_threads = 2;
	p.max_num_seqs = 8;
	p.max_num_batched_tokens = 64;
	p.num_kv_blocks = kv_blocks;
	p.block_size = 4;
	p.max_model_len = 128;
	p.no_cuda_graphs = no_graphs;
	p.preempt_mode = mode;
	p.gpu_memory_utilization = 0.5;
	p.num_swap_blocks = 64;
	if (cbllm_engine_create(&p, &e, err) != CBLLM_OK)
		return NULL;
	return e;
}

static cbllm_engine *
NewEngine(const char *dir, const char *device, int kv_blocks, bool no_graphs, cbllm_preempt mode,
		  const char *format, cbllm_err *err)
{
	return NewEngineAs(dir, device, kv_blocks, no_graphs, mode, format, NULL, err);
}

/* Deterministic prompt ids of length n. */
static void
MakePrompt(int32_t *ids, int n, int k, int vocab)
{
	ids[0] = 1;
	for (int i = 1; i < n; i++)
		ids[i] = 3 + (int32_t) ((k * 7919u + i * 104729u) % (unsigned) (vocab - 3));
}

/* Where RunTogether collects each request's first GEN tokens. */
typedef struct collect
{
	int32_t		(*out)[GEN];
	int			got[N_REQ];
} collect;

/* Keep request i's new tokens, up to GEN; a failed request stops the run. */
static bool
CollectTokens(void *arg, int i, const cbllm_output *o)
{
	collect    *c = arg;

	for (int t = 0; t < o->n_tokens && c->got[i] < GEN; t++)
		c->out[i][c->got[i]++] = o->tokens[t];
	if (o->finish == CBLLM_FINISH_ERROR)
	{
		TAP_DIAG("request failed: %s", o->error);
		return false;
	}
	return true;
}

/*
 * Run requests 0..n-1 (prompt k has 5 + 3k tokens) together, sampling sp,
 * and collect GEN tokens each; false on an engine error.
 */
static bool
RunTogether(cbllm_engine *e, int first, int n, const cbllm_sampling *sp, int32_t out[][GEN])
{
	cbllm_engine_info info;
	int64_t		ids[N_REQ];
	collect		c = {out, {0}};
	cbllm_err	err;

	cbllm_engine_get_info(e, &info);
	for (int i = 0; i < n; i++)
	{
		int32_t		prompt[64];
		int			len = 5 + 3 * (first + i);
		cbllm_request_input in = {0};

		MakePrompt(prompt, len, first + i, info.vocab_size);
		in.ids = prompt;
		in.n_ids = len;
		if (cbllm_engine_submit(e, &in, sp, &ids[i], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			return false;
		}
	}
	if (engine_run_to_end(e, ids, n, INT_MAX, CollectTokens, &c) < 0)
		return false;
	for (int i = 0; i < n; i++)
		if (c.got[i] != GEN)
			return false;
	return true;
}

/* Greedy, GEN tokens, EOS ignored. */
static cbllm_sampling
Greedy(void)
{
	cbllm_sampling sp = cbllm_sampling_default();

	sp.max_tokens = GEN;
	sp.ignore_eos = true;
	return sp;
}

/* Relative error between two engines' prompt logits for ids (n of them); -1 when one fails. */
static double
LogitsGap(cbllm_engine *cpu, cbllm_engine *gpu, const int32_t *ids, int n)
{
	cbllm_engine_info info;
	cbllm_err	err;
	float	   *a,
			   *b;
	double		gap = -1;

	cbllm_engine_get_info(cpu, &info);
	a = malloc(sizeof(float) * n * info.vocab_size);
	b = malloc(sizeof(float) * n * info.vocab_size);
	if (cbllm_engine_prompt_logits(cpu, ids, n, a, &err) == CBLLM_OK &&
		cbllm_engine_prompt_logits(gpu, ids, n, b, &err) == CBLLM_OK)
		gap = RelErr(b, a, (size_t) n * info.vocab_size);
	else
		TAP_DIAG("prompt logits: %s", err.msg);
	free(a);
	free(b);
	return gap;
}

/* Prompt logits and greedy tokens on both devices. */
static void
TestAgainstCpu(void)
{
	cbllm_err	err;
	cbllm_engine *cpu = NewEngine(model_dir, "cpu", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine *gpu = cpu ? NewEngine(model_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err) : NULL;
	cbllm_engine_info info,
				cinfo;
	cbllm_sampling sp = Greedy();
	int32_t		ids[12] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};
	int32_t		a_tok[1][GEN],
				b_tok[1][GEN];
	double		gap;
	int			rc;

	TAP_OK(gpu != NULL, "the engine starts on the CPU and on the GPU%s%s", gpu ? "" : ": ",
		   gpu ? "" : err.msg);
	if (gpu == NULL)
	{
		cbllm_engine_destroy(cpu);
		return;
	}
	cbllm_engine_get_info(gpu, &info);
	cbllm_engine_get_info(cpu, &cinfo);
	TAP_OK(strcmp(info.device, "cuda") == 0 && info.kv_bytes_per_token == cinfo.kv_bytes_per_token,
		   "the engine reports the cuda device and a bf16 KV cache, as many bytes as the CPU's f16 (%zu per position)",
		   info.kv_bytes_per_token);
	gap = LogitsGap(cpu, gpu, ids, 12);
	TAP_OK(gap >= 0 && gap < 5e-2, "GPU prompt logits match the CPU within bf16 tolerance (rel err %.2g)",
		   gap);
	rc = RunTogether(cpu, 2, 1, &sp, a_tok) && RunTogether(gpu, 2, 1, &sp, b_tok);
	{
		int			same = 0;

		while (rc && same < GEN && a_tok[0][same] == b_tok[0][same])
			same++;
		TAP_OK(rc && same == GEN, "greedy tokens on the GPU equal the CPU's for %d steps (%d equal)",
			   GEN, same);
	}
	cbllm_engine_destroy(cpu);
	cbllm_engine_destroy(gpu);
}

/* Collect each request's whole text (a cbllm_buf per request). */
static bool
CollectText(void *arg, int i, const cbllm_output *o)
{
	cbllm_buf  *t = arg;

	if (o->finish == CBLLM_FINISH_ERROR)
	{
		TAP_DIAG("request failed: %s", o->error);
		return false;
	}
	return cbllm_buf_append(&t[i], o->text, o->text_len) == CBLLM_OK;
}

/*
 * Run three requests together: an unconstrained one beside two under re,
 * with sp; their texts into t[3].
 */
static bool
RunConstrained(cbllm_engine *e, const char *re, cbllm_sampling sp, cbllm_buf *t)
{
	int64_t		ids[3];
	cbllm_err	err;

	for (int i = 0; i < 3; i++)
	{
		int32_t		prompt[16];
		cbllm_request_input in = {.ids = prompt, .n_ids = 6 + i};
		cbllm_sampling s = sp;

		MakePrompt(prompt, 6 + i, i, 400);
		s.constraint = i > 0 ? re : NULL;
		s.constraint_len = i > 0 ? strlen(re) : 0;
		s.seed = sp.seed + (uint64_t) i;
		if (cbllm_engine_submit(e, &in, &s, &ids[i], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			return false;
		}
	}
	return engine_run_to_end(e, ids, 3, INT_MAX, CollectText, t) >= 0;
}

/*
 * Constrained decoding with the mask applied on the device: greedy texts
 * equal the CPU's, sampled ones all match, and the device counted its
 * masked tokens (the CPU engine samples them on the host and counts none).
 */
static void
TestConstrainedOnDevice(void)
{
	static const char re[] = "[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?\\.";
	cbllm_err	err;
	cbllm_engine *cpu = NewEngine(model_dir, "cpu", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine *gpu = cpu ? NewEngine(model_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err) : NULL;
	cbllm_buf	a[3] = {{0}},
				b[3] = {{0}},
				c[3] = {{0}};
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_stats st,
				cst;
	cbllm_dfa  *d = NULL;
	bool		ok,
				valid = true;

	sp.max_tokens = 24;
	ok = gpu != NULL && regex_compile(re, strlen(re), &d, &err) == CBLLM_OK &&
		RunConstrained(cpu, re, sp, a) && RunConstrained(gpu, re, sp, b);
	for (int i = 1; ok && i < 3; i++)
		ok &= a[i].len == b[i].len && memcmp(a[i].data, b[i].data, a[i].len) == 0 &&
			dfa_match(d, b[i].data, b[i].len);
	TAP_OK(ok, "greedy constrained texts with the mask applied on the GPU equal the CPU's (\"%s\", \"%s\")",
		   b[1].data ? b[1].data : "", b[2].data ? b[2].data : "");
	sp.temperature = 1;
	sp.has_seed = true;
	sp.seed = 11;
	for (int k = 0; ok && k < 2; k++)
	{
		for (int i = 0; i < 3; i++)
			cbllm_buf_free(&c[i]);
		sp.seed = 11 + 10 * (uint64_t) k;
		ok &= RunConstrained(gpu, re, sp, c);
		for (int i = 1; ok && i < 3; i++)
			valid &= dfa_match(d, c[i].data, c[i].len);
	}
	if (gpu != NULL)
	{
		cbllm_engine_stats(gpu, &st);
		cbllm_engine_stats(cpu, &cst);
	}
	TAP_OK(ok && valid, "sampled constrained texts on the GPU all match (\"%s\")",
		   c[1].data ? c[1].data : "");
	TAP_OK(ok && st.tokens_masked_device > 0 && cst.tokens_masked_device == 0,
		   "the GPU applied the masks itself (%lld tokens)", (long long) (gpu ? st.tokens_masked_device : 0));
	for (int i = 0; i < 3; i++)
	{
		cbllm_buf_free(&a[i]);
		cbllm_buf_free(&b[i]);
		cbllm_buf_free(&c[i]);
	}
	dfa_free(d);
	cbllm_engine_destroy(cpu);
	cbllm_engine_destroy(gpu);
}

/* Count the requests whose tokens differ between two runs. */
static int
Differ(int32_t a[][GEN], int32_t b[][GEN], int n)
{
	int			d = 0;

	for (int i = 0; i < n; i++)
		d += memcmp(a[i], b[i], sizeof(int32_t) * GEN) != 0;
	return d;
}

/* Concurrency with and without graphs, and each request alone; then swap preemption. */
static void
TestBatchesGraphsSwap(void)
{
	cbllm_err	err;
	cbllm_sampling sp = Greedy();
	int32_t		graphs[N_REQ][GEN],
				eager[N_REQ][GEN],
				alone[N_REQ][GEN],
				swapped[N_REQ][GEN];
	cbllm_engine *e = NewEngine(model_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine *x = NewEngine(model_dir, "cuda", 64, true, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine *s;
	cbllm_stats st,
				ste;
	bool		ok;

	if (e == NULL || x == NULL)
	{
		TAP_OK(false, "engines with and without graphs start: %s", err.msg);
		cbllm_engine_destroy(e);
		cbllm_engine_destroy(x);
		return;
	}
	ok = RunTogether(e, 0, N_REQ, &sp, graphs) && RunTogether(x, 0, N_REQ, &sp, eager);
	cbllm_engine_stats(e, &st);
	cbllm_engine_stats(x, &ste);
	TAP_OK(ok && st.graph_steps > 0 && ste.graph_steps == 0,
		   "decode steps are replayed from graphs (%lld of %lld steps), and never with graphs off",
		   (long long) st.graph_steps, (long long) st.steps);
	for (int i = 0; ok && i < N_REQ; i++)
		ok = RunTogether(e, i, 1, &sp, &alone[i]);
	TAP_OK(ok && Differ(graphs, eager, N_REQ) == 0,
		   "%d concurrent requests give the same greedy tokens with decode graphs as without (%d differ)",
		   N_REQ, ok ? Differ(graphs, eager, N_REQ) : -1);
	TAP_OK(ok && Differ(graphs, alone, N_REQ) == 0,
		   "each request gives the same tokens alone as in the batch (%d differ)",
		   ok ? Differ(graphs, alone, N_REQ) : -1);
	cbllm_engine_destroy(e);
	cbllm_engine_destroy(x);
	/* a pool of 14 blocks of 4: the batch cannot all fit, so some are swapped out and back */
	s = NewEngine(model_dir, "cuda", 14, false, CBLLM_PREEMPT_SWAP, NULL, &err);
	ok = s != NULL && RunTogether(s, 0, N_REQ, &sp, swapped);
	if (s != NULL)
		cbllm_engine_stats(s, &st);
	TAP_OK(ok && st.preemptions_swap > 0 && Differ(graphs, swapped, N_REQ) == 0,
		   "with a pool too small for the batch, swap preemption through host memory (%lld swaps) keeps every request's tokens (%d differ)",
		   ok ? (long long) st.preemptions_swap : -1LL, ok ? Differ(graphs, swapped, N_REQ) : -1);
	TAP_OK(ok && st.kv_blocks_free == st.kv_blocks_total && st.swap_blocks_free == st.swap_blocks_total,
		   "every KV and swap block is free again afterwards");
	cbllm_engine_destroy(s);
}

/* Seeded sampling on the device repeats; another seed differs; tokens stay in the vocabulary. */
static void
TestSeededSampling(void)
{
	cbllm_err	err;
	cbllm_engine *e = NewEngine(model_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine_info info;
	cbllm_sampling sp = Greedy();
	int32_t		a[3][GEN],
				b[3][GEN],
				c[3][GEN];
	bool		ok,
				in_vocab = true;

	if (e == NULL)
	{
		TAP_OK(false, "engine starts: %s", err.msg);
		return;
	}
	cbllm_engine_get_info(e, &info);
	sp.temperature = 0.9f;
	sp.top_p = 0.95f;
	sp.top_k = 50;
	sp.has_seed = true;
	sp.seed = 42;
	ok = RunTogether(e, 0, 3, &sp, a) && RunTogether(e, 0, 3, &sp, b);
	sp.seed = 43;
	ok = ok && RunTogether(e, 0, 3, &sp, c);
	for (int i = 0; i < 3; i++)
		for (int t = 0; t < GEN; t++)
			in_vocab = in_vocab && a[i][t] >= 0 && a[i][t] < info.vocab_size;
	TAP_OK(ok && Differ(a, b, 3) == 0 && in_vocab,
		   "seeded sampling on the device gives the same tokens twice");
	TAP_OK(ok && Differ(a, c, 3) > 0, "another seed gives other tokens");
	cbllm_engine_destroy(e);
}

/* Dummy weights generated on the device give the logits of the same dummy weights on the CPU. */
static void
TestDummyWeights(const char *dummy_dir)
{
	cbllm_err	err;
	cbllm_engine *cpu = NewEngine(dummy_dir, "cpu", 64, false, CBLLM_PREEMPT_AUTO, "dummy", &err);
	cbllm_engine *gpu = cpu ? NewEngine(dummy_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, "dummy", &err) : NULL;
	int32_t		ids[6] = {1, 5, 9, 33, 7, 2};
	double		gap;

	TAP_OK(gpu != NULL, "a model directory without weights loads with load_format dummy on both devices%s%s",
		   gpu ? "" : ": ", gpu ? "" : err.msg);
	if (gpu == NULL)
	{
		cbllm_engine_destroy(cpu);
		return;
	}
	gap = LogitsGap(cpu, gpu, ids, 6);
	TAP_OK(gap >= 0 && gap < 5e-2, "dummy weights made on the device give the CPU's logits (rel err %.2g)",
		   gap);
	cbllm_engine_destroy(cpu);
	cbllm_engine_destroy(gpu);
}

/*
 * Weights quantized at load (weight_format q8_0) run on the GPU in their
 * blocks: the checkpoint's and dummy weights (made on the host to be
 * quantized there) give the CPU's logits on the same blocks, and concurrent
 * requests decode (the fused kernel, in graphs) to the same tokens with
 * graphs on and off.
 */
static void
TestQuantizedAtLoad(const char *dummy_dir)
{
	static const struct
	{
		const char **dir;
		const char *format;
	}			runs[] = {{&model_dir, NULL}, {NULL, "dummy"}};
	int32_t		ids[12] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};
	cbllm_err	err;

	for (int i = 0; i < 2; i++)
	{
		const char *dir = runs[i].dir != NULL ? *runs[i].dir : dummy_dir;
		const char *what = runs[i].format != NULL ? "dummy weights" : "the checkpoint";
		cbllm_engine *cpu = NewEngineAs(dir, "cpu", 64, false, CBLLM_PREEMPT_AUTO, runs[i].format,
										"q8_0", &err);
		cbllm_engine *gpu = cpu ? NewEngineAs(dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO,
											  runs[i].format, "q8_0", &err) : NULL;
		cbllm_engine_info info;
		double		gap;

		TAP_OK(gpu != NULL, "%s quantized at load to q8_0 starts on the GPU%s%s", what,
			   gpu ? "" : ": ", gpu ? "" : err.msg);
		if (gpu == NULL)
		{
			cbllm_engine_destroy(cpu);
			continue;
		}
		cbllm_engine_get_info(gpu, &info);
		TAP_OK(strcmp(info.device, "cuda") == 0 && strstr(info.weight_types, "Q8_0") != NULL,
			   "%s: the GPU engine runs Q8_0 matrices (%s)", what, info.weight_types);
		gap = LogitsGap(cpu, gpu, ids, 12);
		TAP_OK(gap >= 0 && gap < 5e-2,
			   "%s in Q8_0: the GPU's prompt logits match the CPU's on the same blocks (rel err %.2g)",
			   what, gap);
		if (runs[i].format == NULL)
		{
			cbllm_engine *eager = NewEngineAs(dir, "cuda", 64, true, CBLLM_PREEMPT_AUTO, NULL, "q8_0",
											  &err);
			cbllm_sampling sp = Greedy();
			int32_t		a[N_REQ][GEN],
						b[N_REQ][GEN];
			bool		ok = eager != NULL && RunTogether(gpu, 0, N_REQ, &sp, a) &&
				RunTogether(eager, 0, N_REQ, &sp, b);

			TAP_OK(ok && Differ(a, b, N_REQ) == 0,
				   "Q8_0 on the GPU: %d concurrent requests decode to the same tokens with CUDA graphs and without",
				   N_REQ);
			cbllm_engine_destroy(eager);
		}
		cbllm_engine_destroy(cpu);
		cbllm_engine_destroy(gpu);
	}
}

/* The KV pool follows gpu_memory_utilization; too small a budget or too large a pool has its own status. */
static void
TestMemoryBudget(void)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_engine_info info;
	cbllm_err	err;
	size_t		free_b = 0,
				total_b = 0;
	int			rc;

	cuda_mem_info(&free_b, &total_b, NULL);
	p.model_dir = model_dir;
	p.device = "cuda";
	p.max_num_seqs = 8;
	p.max_num_batched_tokens = 64;
	p.max_model_len = 128;
	p.num_swap_blocks = 16;		/* a small page-locked swap area, whatever the pool */
	p.gpu_memory_utilization = 0.25;
	rc = cbllm_engine_create(&p, &e, &err);
	if (rc == CBLLM_OK)
		cbllm_engine_get_info(e, &info);
	TAP_OK(rc == CBLLM_OK && info.num_kv_blocks > 0 &&
		   (double) info.num_kv_blocks * info.block_size * info.kv_bytes_per_token <= 0.25 * total_b,
		   "gpu_memory_utilization 0.25 sizes the KV pool within a quarter of the device (%d blocks)",
		   rc == CBLLM_OK ? info.num_kv_blocks : -1);
	cbllm_engine_destroy(e);
	e = NULL;
	p.gpu_memory_utilization = 1e-6;
	rc = cbllm_engine_create(&p, &e, &err);
	TAP_OK(rc == CBLLM_ERR_KV_BUDGET && strstr(err.msg, "gpu_memory_utilization 1e-06") != NULL &&
		   strstr(err.msg, "cbllm.") == NULL,
		   "a budget with no room for the KV cache fails with the status that names gpu_memory_utilization, and the message names no host setting: %s",
		   rc ? err.msg : "(it started)");
	cbllm_engine_destroy(e);
	e = NULL;
	p.gpu_memory_utilization = 0.25;
	p.kv_cache_bytes = 2 * total_b;
	rc = cbllm_engine_create(&p, &e, &err);
	TAP_OK(rc == CBLLM_ERR_KV_SIZE && strstr(err.msg, "does not fit on the GPU") != NULL &&
		   strstr(err.msg, "cbllm.") == NULL,
		   "a KV cache size twice the device fails with the status that names kv_cache_bytes, and the message names no host setting: %s",
		   rc ? err.msg : "(it started)");
	cbllm_engine_destroy(e);
	e = NULL;
	p.kv_cache_bytes = 0;
	p.gpu_memory_utilization = 1.5;
	rc = cbllm_engine_create(&p, &e, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID, "gpu_memory_utilization above 1 is rejected: %s",
		   rc ? err.msg : "(it started)");
	cbllm_engine_destroy(e);
}

#ifdef CBLLM_CUDA_EMU
void		cuda_emu_fail_device(void);
void		cuda_emu_fail_captures(int on);
void		cuda_emu_fail_copies_2d(int n);

/*
 * When a swap-out copy fails (a non-sticky error), its victim recomputes
 * instead: nothing is lost, every request keeps its tokens.
 */
static void
TestSwapCopyFailure(void)
{
	cbllm_err	err;
	cbllm_sampling sp = Greedy();
	int32_t		roomy[N_REQ][GEN],
				failed[N_REQ][GEN];
	cbllm_engine *x = NewEngine(model_dir, "cuda", 64, true, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine *s = NewEngine(model_dir, "cuda", 14, true, CBLLM_PREEMPT_SWAP, NULL, &err);
	cbllm_stats st = {0};
	bool		ok;

	ok = x != NULL && s != NULL && RunTogether(x, 0, N_REQ, &sp, roomy);
	cuda_emu_fail_copies_2d(1 << 20);
	ok = ok && RunTogether(s, 0, N_REQ, &sp, failed);
	cuda_emu_fail_copies_2d(0);
	if (s != NULL)
		cbllm_engine_stats(s, &st);
	TAP_OK(ok && st.preemptions > 0 && st.preemptions_swap == 0 &&
		   st.preemptions_recompute == st.preemptions && Differ(roomy, failed, N_REQ) == 0,
		   "when every swap copy fails, the %lld preemptions recompute instead and no request fails or changes its tokens (%d differ)",
		   (long long) st.preemptions, ok ? Differ(roomy, failed, N_REQ) : -1);
	cbllm_engine_destroy(x);
	cbllm_engine_destroy(s);
}

/* When recording a graph fails, the step runs again eagerly and nothing is lost. */
static void
TestCaptureFailure(void)
{
	cbllm_err	err;
	cbllm_sampling sp = Greedy();
	int32_t		a[3][GEN],
				b[3][GEN];
	cbllm_engine *x = NewEngine(model_dir, "cuda", 64, true, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_engine *e = NewEngine(model_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_stats st;
	bool		ok;

	ok = x != NULL && e != NULL && RunTogether(x, 0, 3, &sp, a);
	cuda_emu_fail_captures(1);
	ok = ok && RunTogether(e, 0, 3, &sp, b);
	cuda_emu_fail_captures(0);
	if (e != NULL)
		cbllm_engine_stats(e, &st);
	TAP_OK(ok && Differ(a, b, 3) == 0 && st.graph_steps == 0,
		   "when graph capture fails, steps run eagerly with the same tokens and no request fails");
	cbllm_engine_destroy(x);
	cbllm_engine_destroy(e);
}

/*
 * A fault that poisons the device mid-run (the emulator's stand-in for an
 * illegal address): the running requests fail with a message naming it,
 * the step says the device is lost, and later steps and submits fail fast.
 */
static void
TestDeviceLost(void)
{
	cbllm_err	err;
	cbllm_engine *e = NewEngine(model_dir, "cuda", 64, false, CBLLM_PREEMPT_AUTO, NULL, &err);
	cbllm_sampling sp = Greedy();
	int32_t		prompt[5] = {1, 20, 30, 40, 50};
	cbllm_request_input in = {0};
	cbllm_output o;
	int64_t		id = 0,
				id2;
	int			active,
				rc,
				rc2,
				rc3;

	if (e == NULL)
	{
		TAP_OK(false, "engine starts: %s", err.msg);
		return;
	}
	in.ids = prompt;
	in.n_ids = 5;
	cbllm_engine_submit(e, &in, &sp, &id, &err);
	cbllm_engine_step(e, &active, &err);
	cbllm_engine_step(e, &active, &err);
	cuda_emu_fail_device();
	rc = cbllm_engine_step(e, &active, &err);
	cbllm_engine_take(e, id, &o, NULL);
	TAP_OK(rc == CBLLM_ERR_DEVICE_LOST && o.finish == CBLLM_FINISH_ERROR && o.error != NULL &&
		   strstr(o.error, "illegal memory access") != NULL,
		   "a sticky device fault fails the running request with the device's message and reports the device lost: %s",
		   o.error ? o.error : "(no error)");
	rc2 = cbllm_engine_submit(e, &in, &sp, &id2, &err);
	rc3 = cbllm_engine_step(e, &active, &err);
	TAP_OK(rc2 == CBLLM_ERR_DEVICE_LOST && rc3 == CBLLM_ERR_DEVICE_LOST && active == 0,
		   "after that, submits and steps fail at once instead of hanging");
	cbllm_engine_destroy(e);
}
#endif

int
main(int argc, char **argv)
{
	char		dev[300];

	if (argc < 3)
	{
		fprintf(stderr, "usage: test_engine_cuda BF16_MODEL_DIR DUMMY_MODEL_DIR\n");
		return 2;
	}
	if (cuda_device_count() == 0)
	{
		printf("1..0 # SKIP no CUDA device here: the engine's GPU checks need one (test/gpu/check.sh runs them; test_engine_cuda_emu runs them on the CPU emulator)\n");
		return 0;
	}
	model_dir = argv[1];
	cuda_device_describe(dev, sizeof(dev));
	TAP_DIAG("device: %s", dev);
	TestAgainstCpu();
	TestConstrainedOnDevice();
	TestBatchesGraphsSwap();
	TestSeededSampling();
	TestDummyWeights(argv[2]);
	TestQuantizedAtLoad(argv[2]);
	TestMemoryBudget();
#ifdef CBLLM_CUDA_EMU
	TestCaptureFailure();
	TestSwapCopyFailure();
	TestDeviceLost();			/* last: the emulated device stays broken */
#endif
	return tap_done();
}
