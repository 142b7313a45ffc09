/*
 * cli_perplexity.c: cbllm-cli perplexity -m MODEL --context N < TEXT
 *
 * The perplexity of a text as llama.cpp's llama-perplexity measures it, so
 * that the two can be compared on one file: the whole text is tokenized once
 * (the model's BOS added where its tokenizer adds one, special-token text
 * left as text), cut into as many whole chunks of N tokens as it holds (a
 * tail shorter than N is dropped), and each chunk is computed from an empty
 * cache with its first token replaced by BOS (where the model adds BOS).
 * Only the second half of a chunk is scored: the logits at positions N/2 to
 * N-2 predict the tokens after them, so every scored token has at least N/2
 * tokens of context.  The perplexity is exp of the mean negative
 * log-likelihood over all scored tokens, summed in double precision.
 *
 * Prints "tokens T", "chunks C", "scored S" and "perplexity P", one a line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_score.h"
#include "tokenizer/tokenizer.h"

/* Print an error line and return the exit status 1. */
static int
PplFail(const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s\n", msg);
	return 1;
}

/* Read all of standard input into b. */
static int
ReadInput(cbllm_buf *b)
{
	char		chunk[65536];
	size_t		n;

	while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
		if (cbllm_buf_append(b, chunk, n) != CBLLM_OK)
			return -1;
	return ferror(stdin) ? -1 : 0;
}

/* The negative log-likelihood of token next under one row of logits, in double. */
static double
TokenNll(const float *logits, int vocab, int32_t next)
{
	double		max = logits[0],
				sum = 0;

	for (int v = 1; v < vocab; v++)
		if (logits[v] > max)
			max = logits[v];
	for (int v = 0; v < vocab; v++)
		sum += exp((double) logits[v] - max);
	return log(sum) - ((double) logits[next] - max);
}

/* Whether encoding with add_bos puts the tokenizer's BOS first (it adds one). */
static int
AddsBos(const cbllm_tokenizer *tok, bool *adds, cbllm_err *err)
{
	tokenizer_encode_opts with = {.add_bos = true, .parse_special = false};
	int32_t    *ids = NULL;
	int			n = 0;
	int			rc = tokenizer_encode(tok, "a", 1, with, &ids, &n, err);

	*adds = rc == CBLLM_OK && n > 1 && ids[0] == tokenizer_bos_id(tok);
	free(ids);
	return rc;
}

/* perplexity: see the file's comment. */
int
cli_perplexity_run(const cbllm_engine_params *ep_in, int context)
{
	cbllm_engine_params ep = *ep_in;
	cbllm_engine *e = NULL;
	cbllm_engine_info info;
	cbllm_err	err;
	cbllm_buf	text = {0};
	const cbllm_tokenizer *tok;
	tokenizer_encode_opts eo = {.add_bos = true, .parse_special = false};
	int32_t    *ids = NULL;
	float	   *logits = NULL;
	int			n = 0,
				chunks,
				status = 0;
	long		scored = 0;
	double		nll = 0;
	bool		adds_bos;

	if (context < 4)
		return PplFail("perplexity needs --context N with N >= 4");
	if (ReadInput(&text) != 0)
		return PplFail("cannot read standard input");
	if (ep.max_model_len == 0)
		ep.max_model_len = context;
	if (cbllm_engine_create(&ep, &e, &err) != CBLLM_OK)
	{
		cbllm_buf_free(&text);
		return PplFail(err.msg);
	}
	cbllm_engine_get_info(e, &info);
	tok = cbllm_engine_tokenizer(e);
	if (AddsBos(tok, &adds_bos, &err) != CBLLM_OK ||
		tokenizer_encode(tok, text.data ? text.data : "", text.len, eo, &ids, &n, &err) != CBLLM_OK)
		status = PplFail(err.msg);
	chunks = n / context;
	if (status == 0 && chunks < 1)
		status = PplFail("the text is shorter than one chunk of --context tokens");
	if (status == 0 && (logits = malloc(sizeof(float) * (size_t) context * info.vocab_size)) == NULL)
		status = PplFail("out of memory");
	for (int c = 0; status == 0 && c < chunks; c++)
	{
		int32_t    *chunk = ids + (size_t) c * context;
		int32_t		first = chunk[0];

		if (adds_bos)
			chunk[0] = tokenizer_bos_id(tok);
		if (cbllm_engine_prompt_logits(e, chunk, context, logits, &err) != CBLLM_OK)
			status = PplFail(err.msg);
		chunk[0] = first;
		for (int p = context / 2; status == 0 && p < context - 1; p++, scored++)
			nll += TokenNll(logits + (size_t) p * info.vocab_size, info.vocab_size, chunk[p + 1]);
	}
	if (status == 0)
		printf("tokens %d\nchunks %d\nscored %ld\nperplexity %.6f\n", n, chunks, scored, exp(nll / scored));
	free(logits);
	free(ids);
	cbllm_buf_free(&text);
	cbllm_engine_destroy(e);
	return status;
}
