/*
 * test_logits_process.c: the sampling controls (logits_process.h):
 * repetition, frequency and presence penalties, logit_bias, min_p.
 *
 *   - on recorded logits (the test model's own rows for a prompt) and on
 *     random ones, with random histories and controls, the processed rows
 *     go to OUT_FILE, which test/logits_process_test.py recomputes with its
 *     own reference in Python and compares;
 *   - in the engine: a large positive bias makes greedy decoding choose its
 *     token every time, min_p 1 at any temperature is greedy decoding, a
 *     penalised greedy run repeats fewer tokens than a plain one, and a
 *     token id past the vocabulary is refused with a message naming it.
 *
 * usage: test_logits_process MODEL_DIR OUT_FILE
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "base/rng.h"
#include "sample/logits_process.h"
#include "tap.h"

#define N_CASES 200

/* Write n floats as a JSON array (-inf as null). */
static void
Floats(FILE *f, const float *x, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
	{
		if (isinf(x[i]) && x[i] < 0)
			fprintf(f, "%snull", i ? "," : "");
		else
			fprintf(f, "%s%.9g", i ? "," : "", x[i]);
	}
	fputc(']', f);
}

/* Write n ids as a JSON array. */
static void
Ids(FILE *f, const int32_t *x, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? "," : "", x[i]);
	fputc(']', f);
}

/* Random controls: each one on about half the time. */
static void
RandomControls(cbllm_rng *g, cbllm_sampling *sp, int32_t *bias_ids, float *bias_values, int vocab)
{
	*sp = cbllm_sampling_default();
	sp->temperature = rng_uniform(g) < 0.8 ? (float) (0.2 + 1.5 * rng_uniform(g)) : 0;
	if (rng_uniform(g) < 0.5)
		sp->repetition_penalty = (float) (0.5 + 2 * rng_uniform(g));
	if (rng_uniform(g) < 0.5)
		sp->frequency_penalty = (float) (4 * rng_uniform(g) - 2);
	if (rng_uniform(g) < 0.5)
		sp->presence_penalty = (float) (4 * rng_uniform(g) - 2);
	if (rng_uniform(g) < 0.5)
		sp->min_p = (float) (rng_uniform(g) * 0.5);
	if (rng_uniform(g) < 0.5)
	{
		sp->n_bias = 1 + (int) (rng_next(g) % 6);
		for (int k = 0; k < sp->n_bias; k++)
		{
			bias_ids[k] = (int32_t) (rng_next(g) % (uint64_t) vocab);
			bias_values[k] = (float) (200 * rng_uniform(g) - 100);
		}
		sp->bias_ids = bias_ids;
		sp->bias_values = bias_values;
	}
}

/* Cases over rows of logits (recorded or random): written for the Python reference. */
static void
TestCases(const float *rows, int n_rows, int vocab, const char *out_path)
{
	FILE	   *f = fopen(out_path, "w");
	float	   *out = malloc(sizeof(float) * vocab);
	uint32_t   *seen = malloc(sizeof(uint32_t) * vocab);
	uint32_t   *mask = malloc(sizeof(uint32_t) * ((vocab + 31) / 32));
	cbllm_rng	g;
	int			changed = 0;

	TAP_OK(f != NULL, "the cases are written to %s", out_path);
	if (f == NULL)
		return;
	rng_seed(&g, 2024);
	for (int c = 0; c < N_CASES; c++)
	{
		const float *in = rows + (size_t) (c % n_rows) * vocab;
		int32_t		tokens[48],
					bias_ids[8];
		float		bias_values[8];
		int			n_prompt = 1 + (int) (rng_next(&g) % 16),
					n_gen = (int) (rng_next(&g) % 32);
		bool		masked = rng_uniform(&g) < 0.3;
		cbllm_sampling sp;

		/* histories with repeats: ids from a small range of the vocabulary */
		for (int i = 0; i < n_prompt + n_gen; i++)
			tokens[i] = (int32_t) (rng_next(&g) % (uint64_t) (vocab < 40 ? vocab : 40));
		for (int w = 0; w < (vocab + 31) / 32; w++)
			mask[w] = (uint32_t) rng_next(&g) | 1u;
		RandomControls(&g, &sp, bias_ids, bias_values, vocab);
		logits_process(in, vocab, &sp, tokens, n_prompt, n_gen, masked ? mask : NULL, seen, out);
		logits_min_p(out, vocab, &sp);
		changed += memcmp(in, out, sizeof(float) * vocab) != 0;
		fprintf(f, "{\"temperature\":%.9g,\"min_p\":%.9g,\"repetition_penalty\":%.9g,"
				"\"frequency_penalty\":%.9g,\"presence_penalty\":%.9g,\"bias\":[",
				sp.temperature, sp.min_p, sp.repetition_penalty, sp.frequency_penalty,
				sp.presence_penalty);
		for (int k = 0; k < sp.n_bias; k++)
			fprintf(f, "%s[%d,%.9g]", k ? "," : "", sp.bias_ids[k], sp.bias_values[k]);
		fprintf(f, "],\"n_prompt\":%d,\"tokens\":", n_prompt);
		Ids(f, tokens, n_prompt + n_gen);
		fprintf(f, ",\"mask\":");
		if (masked)
		{
			fputc('[', f);
			for (int i = 0; i < vocab; i++)
				fprintf(f, "%s%d", i ? "," : "", (mask[i >> 5] >> (i & 31)) & 1);
			fputc(']', f);
		}
		else
			fprintf(f, "null");
		fprintf(f, ",\"logits\":");
		Floats(f, in, vocab);
		fprintf(f, ",\"out\":");
		Floats(f, out, vocab);
		fputs("}\n", f);
	}
	fclose(f);
	TAP_OK(changed > N_CASES / 2, "%d of %d random controls change their logits", changed, N_CASES);
	free(out);
	free(seen);
	free(mask);
}

typedef struct run_out
{
	int32_t		tokens[64];
	int			n;
} run_out;

/* Collect a request's tokens. */
static bool
Collect(void *arg, int i, const cbllm_output *o)
{
	run_out    *r = (run_out *) arg + i;

	for (int k = 0; k < o->n_tokens && r->n < 64; k++)
		r->tokens[r->n++] = o->tokens[k];
	return true;
}

/* Generate n tokens from a fixed prompt with sp; false on an engine failure (with err). */
static bool
Generate(cbllm_engine *e, cbllm_sampling sp, run_out *out, cbllm_err *err)
{
	static const int32_t prompt[] = {1, 17, 42, 99, 7, 300, 5};
	cbllm_request_input in = {.ids = prompt, .n_ids = 7};
	int64_t		id;

	memset(out, 0, sizeof(*out));
	if (cbllm_engine_submit(e, &in, &sp, &id, err) != CBLLM_OK)
		return false;
	return engine_run_to_end(e, &id, 1, 1000, Collect, out) >= 0;
}

/* Distinct tokens among r's. */
static int
Distinct(const run_out *r)
{
	int			n = 0;

	for (int i = 0; i < r->n; i++)
	{
		bool		dup = false;

		for (int j = 0; j < i; j++)
			dup |= r->tokens[j] == r->tokens[i];
		n += !dup;
	}
	return n;
}

/* The controls in the engine. */
static void
TestEngine(cbllm_engine *e, int vocab)
{
	cbllm_sampling sp = cbllm_sampling_default();
	run_out		a,
				b;
	cbllm_err	err;
	int32_t		id = 123;
	float		plus = 100;
	bool		all = true;

	sp.max_tokens = 24;
	sp.ignore_eos = true;
	sp.n_bias = 1;
	sp.bias_ids = &id;
	sp.bias_values = &plus;
	if (Generate(e, sp, &a, &err))
		for (int i = 0; i < a.n; i++)
			all &= a.tokens[i] == id;
	TAP_OK(a.n == 24 && all, "logit_bias +100 on token 123: greedy decoding chooses it 24 times of 24");

	sp = cbllm_sampling_default();
	sp.max_tokens = 24;
	sp.ignore_eos = true;
	Generate(e, sp, &a, &err);
	sp.temperature = 1.5f;
	sp.min_p = 1;
	sp.has_seed = true;
	sp.seed = 9;
	Generate(e, sp, &b, &err);
	TAP_OK(a.n == 24 && b.n == 24 && memcmp(a.tokens, b.tokens, sizeof(int32_t) * 24) == 0,
		   "min_p 1 at temperature 1.5 keeps only the top token: the greedy output");

	sp = cbllm_sampling_default();
	sp.max_tokens = 48;
	sp.ignore_eos = true;
	Generate(e, sp, &a, &err);
	sp.repetition_penalty = 3;
	sp.presence_penalty = 2;
	Generate(e, sp, &b, &err);
	TAP_OK(Distinct(&b) > Distinct(&a),
		   "penalties make greedy decoding repeat less: %d distinct tokens of 48 against %d plain",
		   Distinct(&b), Distinct(&a));

	sp = cbllm_sampling_default();
	id = vocab;
	sp.n_bias = 1;
	sp.bias_ids = &id;
	sp.bias_values = &plus;
	{
		int64_t		rid;
		static const int32_t p[] = {1, 2};
		cbllm_request_input in = {.ids = p, .n_ids = 2};
		int			rc = cbllm_engine_submit(e, &in, &sp, &rid, &err);

		TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "logit_bias names token") != NULL,
			   "a logit_bias token past the vocabulary is refused: %s", err.msg);
	}
}

int
main(int argc, char **argv)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_engine_info info;
	cbllm_err	err;
	static const int32_t prompt[] = {1, 15, 27, 88, 3, 64, 12, 9};
	float	   *rows;

	if (argc != 3)
	{
		fprintf(stderr, "usage: test_logits_process MODEL_DIR OUT_FILE\n");
		return 2;
	}
	p.model_dir = argv[1];
	p.n_threads = 2;
	p.max_model_len = 128;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
	{
		TAP_OK(false, "the engine starts (%s)", err.msg);
		return tap_done();
	}
	cbllm_engine_get_info(e, &info);
	rows = malloc(sizeof(float) * 8 * info.vocab_size);
	/* recorded logits: the model's own rows for a prompt */
	TAP_OK(cbllm_engine_prompt_logits(e, prompt, 8, rows, &err) == CBLLM_OK,
		   "the model's logits are recorded for 8 positions");
	TestCases(rows, 8, info.vocab_size, argv[2]);
	TestEngine(e, info.vocab_size);
	free(rows);
	cbllm_engine_destroy(e);
	return tap_done();
}
