/*
 * test_engine.c: the engine facade on a generated tiny model: batching gives
 * the same greedy tokens as running alone (also with chunked prefill and
 * with preemption), abort frees everything, errors are clean, stop strings,
 * seeds, lengths, and the kernel sets agree.
 *
 * usage: test_engine MODEL_DIR [SLIDING_WINDOW_MODEL_DIR]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

#define N_PROMPTS 6
#define GEN 24

static const char *model_dir;

/* Deterministic prompt ids of length n. */
static void
MakePrompt(int32_t *ids, int n, int k, int vocab)
{
	ids[0] = 1;
	for (int i = 1; i < n; i++)
		ids[i] = 3 + (int32_t) ((k * 7919u + i * 104729u) % (unsigned) (vocab - 3));
}

/* Engine with small defaults and the given overrides. */
static cbllm_engine *
NewEngine(int max_seqs, int max_batched, int kv_blocks, const char *isa)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.model_dir = model_dir;
	p.n_threads = 2;
	p.max_num_seqs = max_seqs;
	p.max_num_batched_tokens = max_batched;
	p.num_kv_blocks = kv_blocks;
	p.block_size = 4;
	p.max_model_len = 256;
	p.cpu_isa = isa;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
		TAP_DIAG("engine_create: %s", err.msg);
	return e;
}

/* Where RunAll collects each request's first GEN tokens. */
typedef struct collect
{
	int32_t		(*out)[GEN];
	int		   *n_out;
} collect;

/* Keep request i's new tokens, up to GEN. */
static bool
CollectTokens(void *arg, int i, const cbllm_output *o)
{
	collect    *c = arg;

	for (int t = 0; t < o->n_tokens && c->n_out[i] < GEN; t++)
		c->out[i][c->n_out[i]++] = o->tokens[t];
	return true;
}

/* Step until no request is active; returns steps taken or -1. */
static int
RunAll(cbllm_engine *e, int64_t *ids, int n, int32_t out[][GEN], int *n_out)
{
	collect		c = {out, n_out};

	for (int i = 0; i < n; i++)
		n_out[i] = 0;
	return engine_run_to_end(e, ids, n, 100000, CollectTokens, &c);
}

/* Submit the test prompts (lengths 5..40) to e. */
static int
SubmitPrompts(cbllm_engine *e, int64_t *ids, int vocab)
{
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;
	int32_t		p[64];

	sp.max_tokens = GEN;
	sp.ignore_eos = true;
	for (int k = 0; k < N_PROMPTS; k++)
	{
		cbllm_request_input in = {.ids = p, .n_ids = 5 + k * 7};

		MakePrompt(p, in.n_ids, k, vocab);
		if (cbllm_engine_submit(e, &in, &sp, &ids[k], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			return -1;
		}
	}
	return 0;
}

/* Batched, chunked and preempted runs all give the solo tokens. */
static void
TestBatchInvariance(int vocab)
{
	int32_t		solo[N_PROMPTS][GEN],
				got[N_PROMPTS][GEN];
	int			n_solo[N_PROMPTS],
				n_got[N_PROMPTS];
	int64_t		ids[N_PROMPTS];
	struct
	{
		const char *name;
		int			max_seqs,
					max_batched,
					kv_blocks;
	}			cfg[] = {
		{"all prompts in one batch", 8, 512, 0},
		{"chunked prefill (8-token budget)", 8, 8, 0},
		{"kv pool of 16 blocks forcing preemption", 8, 512, 16},
	};
	bool		solo_ok = true;

	for (int k = 0; k < N_PROMPTS; k++)
	{
		cbllm_engine *e = NewEngine(1, 512, 0, NULL);
		int64_t		one[1];
		int32_t		o1[1][GEN];
		int			n1[1];
		int32_t		p[64];
		cbllm_sampling sp = cbllm_sampling_default();
		cbllm_request_input in = {.ids = p, .n_ids = 5 + k * 7};

		sp.max_tokens = GEN;
		sp.ignore_eos = true;
		MakePrompt(p, in.n_ids, k, vocab);
		if (e == NULL || cbllm_engine_submit(e, &in, &sp, &one[0], NULL) != CBLLM_OK ||
			RunAll(e, one, 1, o1, n1) < 0 || n1[0] != GEN)
			solo_ok = false;
		else
			memcpy(solo[k], o1[0], sizeof(o1[0]));
		n_solo[k] = n1[0];
		cbllm_engine_destroy(e);
	}
	TAP_OK(solo_ok, "each prompt generates %d tokens alone", GEN);
	for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++)
	{
		cbllm_engine *e = NewEngine(cfg[c].max_seqs, cfg[c].max_batched, cfg[c].kv_blocks, NULL);
		bool		same = e != NULL;
		cbllm_stats st;

		if (e == NULL || SubmitPrompts(e, ids, vocab) != 0 || RunAll(e, ids, N_PROMPTS, got, n_got) < 0)
			same = false;
		for (int k = 0; same && k < N_PROMPTS; k++)
			if (n_got[k] != n_solo[k] || memcmp(got[k], solo[k], sizeof(int32_t) * GEN) != 0)
			{
				TAP_DIAG("prompt %d differs", k);
				same = false;
			}
		TAP_OK(same, "%s: greedy tokens identical to each prompt run alone", cfg[c].name);
		if (e != NULL)
		{
			cbllm_engine_stats(e, &st);
			if (c == 0)
				TAP_OK(st.batch_seqs_sum > st.steps,
					   "batched run has more than one sequence per step on average (%.2f)",
					   (double) st.batch_seqs_sum / (st.steps ? st.steps : 1));
			if (c == 2)
				TAP_OK(st.preemptions > 0, "small kv pool preempted (%lld preemptions)",
					   (long long) st.preemptions);
			TAP_OK(st.kv_blocks_free == st.kv_blocks_total,
				   "%s: every kv block is free at the end", cfg[c].name);
		}
		cbllm_engine_destroy(e);
	}
}

/* Aborting waiting and running requests frees every block. */
static void
TestAbort(int vocab)
{
	cbllm_engine *e = NewEngine(2, 512, 0, NULL);
	int64_t		ids[N_PROMPTS];
	cbllm_stats st;
	cbllm_output o;
	int			active;
	bool		ok = true;

	if (e == NULL || SubmitPrompts(e, ids, vocab) != 0)
	{
		TAP_OK(false, "abort test set-up");
		cbllm_engine_destroy(e);
		return;
	}
	for (int s = 0; s < 3; s++)
		ok &= cbllm_engine_step(e, &active, NULL) == CBLLM_OK;
	cbllm_engine_stats(e, &st);
	TAP_OK(ok && st.n_running == 2 && st.n_waiting == N_PROMPTS - 2 &&
		   st.kv_blocks_free < st.kv_blocks_total,
		   "two requests run and hold blocks while four wait");
	for (int k = 0; k < N_PROMPTS; k++)
		ok &= cbllm_engine_abort(e, ids[k], NULL) == CBLLM_OK;
	cbllm_engine_stats(e, &st);
	TAP_OK(ok && st.n_running == 0 && st.n_waiting == 0 &&
		   st.kv_blocks_free == st.kv_blocks_total,
		   "aborting running and queued requests frees every block");
	TAP_OK(cbllm_engine_take(e, ids[0], &o, NULL) == CBLLM_ERR_NOT_FOUND &&
		   cbllm_engine_abort(e, ids[0], NULL) == CBLLM_ERR_NOT_FOUND,
		   "an aborted request is forgotten (take and abort report not found)");
	cbllm_engine_destroy(e);
}

/* Each bad submission fails with its status and leaves the engine usable. */
static void
TestSubmitErrors(int vocab)
{
	cbllm_engine *e = NewEngine(4, 512, 0, NULL);
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;
	int32_t		p[300];
	int64_t		id;
	cbllm_request_input in = {.ids = p, .n_ids = 4};

	if (e == NULL)
	{
		TAP_OK(false, "engine for error tests");
		return;
	}
	MakePrompt(p, 300, 1, vocab);
	in.n_ids = 0;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID &&
		   strstr(err.msg, "empty"), "empty prompt is rejected: %s", err.msg);
	in.n_ids = 256;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_TOO_LONG &&
		   strstr(err.msg, "256") && strstr(err.msg, "max_model_len"),
		   "prompt longer than max_model_len is rejected with both counts: %s", err.msg);
	in.n_ids = 4;
	p[2] = vocab + 5;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID,
		   "token id outside the vocabulary is rejected: %s", err.msg);
	p[2] = 7;
	sp.temperature = -1;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID,
		   "negative temperature is rejected: %s", err.msg);
	sp.temperature = NAN;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID,
		   "NaN temperature is rejected");
	sp = cbllm_sampling_default();
	sp.top_p = 0;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID,
		   "top_p 0 is rejected: %s", err.msg);
	sp = cbllm_sampling_default();
	sp.max_tokens = 0;
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID,
		   "max_tokens 0 is rejected: %s", err.msg);
	sp = cbllm_sampling_default();
	sp.n_stop = 1;
	sp.stop[0] = "";
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID,
		   "an empty stop string is rejected: %s", err.msg);
	sp = cbllm_sampling_default();
	TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_OK,
		   "a valid request is accepted after the rejected ones");
	cbllm_engine_destroy(e);
}

/* Generate text for a prompt with the given sampling; returns malloc'd text. */
static char *
GenerateText(cbllm_engine *e, const char *prompt, const cbllm_sampling *sp, cbllm_finish *fin,
			 int *n_gen, bool *pieces_utf8)
{
	cbllm_request_input in = {.text = prompt, .text_len = strlen(prompt), .add_bos = true};
	cbllm_buf	text = {0};
	int64_t		id;
	int			active = 1;
	cbllm_err	err;

	*pieces_utf8 = true;
	if (cbllm_engine_submit(e, &in, sp, &id, &err) != CBLLM_OK)
	{
		TAP_DIAG("submit: %s", err.msg);
		return NULL;
	}
	while (active > 0)
	{
		cbllm_output o;

		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK ||
			cbllm_engine_take(e, id, &o, &err) != CBLLM_OK)
			break;
		for (size_t i = 0; i < o.text_len;)
		{
			unsigned char c = (unsigned char) o.text[i];
			size_t		len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;

			if (len == 0 || i + len > o.text_len)
			{
				*pieces_utf8 = false;
				break;
			}
			i += len;
		}
		cbllm_buf_append(&text, o.text, o.text_len);
		if (o.finish != CBLLM_FINISH_NONE)
		{
			*fin = o.finish;
			*n_gen = o.n_generated;
			break;
		}
	}
	if (text.data == NULL)
		cbllm_buf_append(&text, "", 0);
	return text.data;
}

/* Stop strings cut the text, max_tokens ends with length, seeds reproduce. */
static void
TestTextAndSampling(void)
{
	cbllm_engine *e = NewEngine(4, 512, 0, NULL);
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_finish fin = CBLLM_FINISH_NONE;
	int			n_gen = 0;
	bool		utf8;
	char	   *full,
			   *cut,
			   *a,
			   *b,
			   *c;
	char		stop[8];

	if (e == NULL)
	{
		TAP_OK(false, "engine for text tests");
		return;
	}
	sp.max_tokens = 40;
	sp.ignore_eos = true;
	full = GenerateText(e, "the quick brown fox", &sp, &fin, &n_gen, &utf8);
	TAP_OK(full != NULL && fin == CBLLM_FINISH_LENGTH && n_gen == 40,
		   "max_tokens 40 finishes with reason length after exactly 40 tokens (%d)", n_gen);
	TAP_OK(utf8, "every streamed text piece is whole UTF-8 characters");
	if (full != NULL && strlen(full) > 12)
	{
		char	   *first;

		memcpy(stop, full + strlen(full) / 2, 3);
		stop[3] = '\0';
		first = strstr(full, stop);
		sp.n_stop = 1;
		sp.stop[0] = stop;
		cut = GenerateText(e, "the quick brown fox", &sp, &fin, &n_gen, &utf8);
		TAP_OK(cut != NULL && fin == CBLLM_FINISH_STOP &&
			   strlen(cut) == (size_t) (first - full) && strncmp(cut, full, strlen(cut)) == 0,
			   "stop string \"%s\" ends the text just before its first occurrence", stop);
		free(cut);
	}
	else
		TAP_OK(false, "stop string test needs generated text (got \"%s\")", full ? full : "");
	free(full);
	sp = cbllm_sampling_default();
	sp.max_tokens = 30;
	sp.ignore_eos = true;
	sp.temperature = 1.0f;
	sp.top_p = 0.95f;
	sp.has_seed = true;
	sp.seed = 42;
	a = GenerateText(e, "hello", &sp, &fin, &n_gen, &utf8);
	b = GenerateText(e, "hello", &sp, &fin, &n_gen, &utf8);
	sp.seed = 43;
	c = GenerateText(e, "hello", &sp, &fin, &n_gen, &utf8);
	TAP_OK(a && b && strcmp(a, b) == 0, "the same seed reproduces the same sampled text");
	TAP_OK(a && c && strcmp(a, c) != 0, "a different seed samples different text");
	free(a);
	free(b);
	free(c);
	cbllm_engine_destroy(e);
}

/* The avx512, avx2 and generic kernels give the same logits within float error. */
static void
TestKernelSets(int vocab)
{
	const char *isas[] = {"generic", "avx2", "avx512"};
	int32_t		p[20];
	float	   *ref = malloc(sizeof(float) * 20 * vocab);
	float	   *got = malloc(sizeof(float) * 20 * vocab);

	MakePrompt(p, 20, 3, vocab);
	for (int k = 0; k < 3; k++)
	{
		cbllm_engine *e = NewEngine(4, 512, 0, isas[k]);
		cbllm_err	err;
		double		worst = 0,
					scale = 0;

		if (e == NULL)
		{
			TAP_DIAG("kernel set %s is not supported on this CPU: skipped", isas[k]);
			continue;
		}
		if (cbllm_engine_prompt_logits(e, p, 20, k == 0 ? ref : got, &err) != CBLLM_OK)
		{
			TAP_OK(false, "%s logits: %s", isas[k], err.msg);
			cbllm_engine_destroy(e);
			continue;
		}
		cbllm_engine_destroy(e);
		if (k == 0)
			continue;
		for (int i = 0; i < 20 * vocab; i++)
		{
			double		d = fabs((double) got[i] - ref[i]);

			worst = d > worst ? d : worst;
			scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
		}
		TAP_OK(worst / scale < 1e-5, "%s kernels match the generic kernels (rel err %.2g)",
			   isas[k], worst / scale);
	}
	free(ref);
	free(got);
}

/* A missing model directory is a clean error naming it. */
static void
TestBadModel(void)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.model_dir = "/nonexistent/model";
	TAP_OK(cbllm_engine_create(&p, &e, &err) == CBLLM_ERR_IO && e == NULL &&
		   strstr(err.msg, "/nonexistent/model/config.json"),
		   "a missing model directory fails with a message naming config.json: %s", err.msg);
}

/* Run requests with prompts of 10 and 14 tokens for 60 tokens; track the most KV blocks in use. */
static bool
RunWindowed(cbllm_engine *e, int n, int vocab, int32_t out[][60], int *peak)
{
	cbllm_sampling sp = cbllm_sampling_default();
	int64_t		ids[2];
	int			got[2] = {0, 0},
				active = 1;
	cbllm_err	err;

	sp.max_tokens = 60;
	sp.ignore_eos = true;
	*peak = 0;
	for (int i = 0; i < n; i++)
	{
		int32_t		prompt[14];
		cbllm_request_input in = {0};

		MakePrompt(prompt, 10 + 4 * i, i, vocab);
		in.ids = prompt;
		in.n_ids = 10 + 4 * i;
		if (cbllm_engine_submit(e, &in, &sp, &ids[i], &err) != CBLLM_OK)
			return false;
	}
	while (active > 0)
	{
		cbllm_stats st;

		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
			return false;
		cbllm_engine_stats(e, &st);
		if (st.kv_blocks_total - st.kv_blocks_free > *peak)
			*peak = st.kv_blocks_total - st.kv_blocks_free;
		for (int i = 0; i < n; i++)
		{
			cbllm_output o;

			if (ids[i] == 0 || cbllm_engine_take(e, ids[i], &o, &err) != CBLLM_OK)
				continue;
			for (int t = 0; t < o.n_tokens && got[i] < 60; t++)
				out[i][got[i]++] = o.tokens[t];
			if (o.finish != CBLLM_FINISH_NONE)
				ids[i] = 0;
		}
	}
	return got[0] == 60 && (n < 2 || got[1] == 60);
}

/*
 * Sliding window (8 positions, blocks of 4): blocks wholly behind the window
 * go back to the pool as the sequence grows, so a 70-token sequence holds a
 * handful of blocks, and a second sequence reusing the freed blocks changes
 * nothing in the first one's tokens.
 */
static void
TestSlidingWindow(const char *swa_dir)
{
	const char *saved = model_dir;
	cbllm_engine *e;
	cbllm_engine_info info;
	cbllm_stats st;
	int32_t		alone[2][60],
				both[2][60];
	int			peak_alone = 0,
				peak_both = 0;
	bool		ok;

	model_dir = swa_dir;
	e = NewEngine(4, 64, 64, NULL);
	model_dir = saved;
	if (e == NULL)
	{
		TAP_OK(false, "the sliding-window model loads");
		return;
	}
	cbllm_engine_get_info(e, &info);
	ok = RunWindowed(e, 1, info.vocab_size, alone, &peak_alone) &&
		RunWindowed(e, 2, info.vocab_size, both, &peak_both);
	TAP_OK(ok && peak_alone <= 4,
		   "a 70-token sequence with an 8-position window holds at most 4 blocks of 4 (peak %d)",
		   peak_alone);
	TAP_OK(ok && memcmp(alone[0], both[0], sizeof(alone[0])) == 0,
		   "its tokens are the same while another sequence takes the blocks it gave back");
	cbllm_engine_stats(e, &st);
	TAP_OK(ok && st.kv_blocks_free == st.kv_blocks_total, "every block is free afterwards");
	cbllm_engine_destroy(e);
}

int
main(int argc, char **argv)
{
	cbllm_engine *e;
	cbllm_engine_info info;

	if (argc < 2)
	{
		fprintf(stderr, "usage: test_engine MODEL_DIR\n");
		return 2;
	}
	model_dir = argv[1];
	e = NewEngine(4, 512, 0, NULL);
	TAP_OK(e != NULL, "engine loads the generated model %s", model_dir);
	if (e == NULL)
		return tap_done();
	cbllm_engine_get_info(e, &info);
	cbllm_engine_destroy(e);
	TestBatchInvariance(info.vocab_size);
	TestAbort(info.vocab_size);
	TestSubmitErrors(info.vocab_size);
	TestTextAndSampling();
	TestKernelSets(info.vocab_size);
	TestBadModel();
	if (argc > 2)
		TestSlidingWindow(argv[2]);
	return tap_done();
}
