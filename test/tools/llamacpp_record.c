/*
 * llamacpp_record.c: ask llama.cpp (its libllama, built by test/tools/build_llamacpp.sh)
 * what test/tools/record_llamacpp.py records as the reference for cbllm.  Not part of cbllm
 * and never built by its Makefile.
 *
 *   llamacpp_record info MODEL
 *       one JSON object: the vocabulary's size, BOS and EOS ids, whether llama.cpp adds BOS
 *   llamacpp_record tokenize MODEL ADD_SPECIAL PARSE_SPECIAL
 *       each standard-input line a JSON string; each output line the JSON array of its ids
 *       (ADD_SPECIAL, PARSE_SPECIAL: 0 or 1, llama_tokenize's two flags)
 *   llamacpp_record greedy MODEL N THREADS
 *       each standard-input line a JSON array of prompt ids; each output line
 *       {"ids": [N greedy ids], "margins": [N top-1 minus top-2 logits]}: the argmax of the
 *       raw logits at every step, the end-of-generation token included and fed back like any
 *       other; each prompt in a fresh cache
 *   llamacpp_record logits MODEL THREADS
 *       each standard-input line a JSON array of prompt ids; each output line the logits of its
 *       last position (a diagnostic: how far each engine is from a float reference)
 *
 * Exits 1 with a message on standard error on any failure.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

#define CONTEXT_LEN	1024

/* Print a message and return the exit status 1. */
static int
Fail(const char *what)
{
	fprintf(stderr, "llamacpp_record: %s\n", what);
	return 1;
}

/* Quiet llama.cpp's log but for errors. */
static void
Log(enum ggml_log_level level, const char *text, void *user)
{
	(void) user;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

/* Print ids as one JSON array (no newline). */
static void
PutIds(const llama_token *ids, int n)
{
	putchar('[');
	for (int i = 0; i < n; i++)
		printf(i ? ", %d" : "%d", ids[i]);
	putchar(']');
}

/* info: the vocabulary's facts as JSON. */
static int
Info(const struct llama_model *model)
{
	const struct llama_vocab *v = llama_model_get_vocab(model);

	printf("{\"n_vocab\": %d, \"bos\": %d, \"eos\": %d, \"add_bos\": %s, \"add_eos\": %s}\n",
		   llama_vocab_n_tokens(v), llama_vocab_bos(v), llama_vocab_eos(v),
		   llama_vocab_get_add_bos(v) ? "true" : "false", llama_vocab_get_add_eos(v) ? "true" : "false");
	return 0;
}

/* tokenize: JSON string lines in, JSON id array lines out. */
static int
Tokenize(const struct llama_model *model, bool add_special, bool parse_special)
{
	const struct llama_vocab *v = llama_model_get_vocab(model);
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;

	while ((len = getline(&line, &cap, stdin)) >= 0)
	{
		cJSON	   *j = cJSON_ParseWithLength(line, (size_t) len);
		const char *s = cJSON_GetStringValue(j);
		int			max = s ? (int) strlen(s) + 8 : 0;
		llama_token *ids = s ? malloc(sizeof(llama_token) * (size_t) max) : NULL;
		int			n;

		if (ids == NULL)
			return Fail("a standard-input line is not a JSON string");
		n = llama_tokenize(v, s, (int) strlen(s), ids, max, add_special, parse_special);
		if (n < 0)
			return Fail("llama_tokenize failed");
		PutIds(ids, n);
		putchar('\n');
		free(ids);
		cJSON_Delete(j);
	}
	free(line);
	return 0;
}

/* The greedy continuation of one prompt: n ids and their top-2 margins, as one JSON line. */
static int
GreedyOne(struct llama_context *ctx, int n_vocab, llama_token *prompt, int n_prompt, int n)
{
	llama_token *ids = malloc(sizeof(llama_token) * (size_t) n);
	float	   *margins = malloc(sizeof(float) * (size_t) n);
	struct llama_batch batch = llama_batch_get_one(prompt, n_prompt);

	if (ids == NULL || margins == NULL)
		return Fail("out of memory");
	llama_memory_clear(llama_get_memory(ctx), true);
	for (int step = 0; step < n; step++)
	{
		const float *lg;
		int			best = 0,
					second = -1;

		if (llama_decode(ctx, batch) != 0)
			return Fail("llama_decode failed");
		lg = llama_get_logits_ith(ctx, -1);
		for (int t = 1; t < n_vocab; t++)
			if (lg[t] > lg[best])
				second = best, best = t;
			else if (second < 0 || lg[t] > lg[second])
				second = t;
		ids[step] = best;
		margins[step] = lg[best] - lg[second];
		batch = llama_batch_get_one(&ids[step], 1);
	}
	printf("{\"ids\": ");
	PutIds(ids, n);
	printf(", \"margins\": [");
	for (int i = 0; i < n; i++)
		printf(i ? ", %.5f" : "%.5f", margins[i]);
	printf("]}\n");
	free(ids);
	free(margins);
	return 0;
}

/* The logits of the last position of one prompt, as one JSON array line. */
static int
LastLogits(struct llama_context *ctx, int n_vocab, llama_token *prompt, int n_prompt)
{
	const float *lg;

	llama_memory_clear(llama_get_memory(ctx), true);
	if (llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) != 0)
		return Fail("llama_decode failed");
	lg = llama_get_logits_ith(ctx, -1);
	putchar('[');
	for (int t = 0; t < n_vocab; t++)
		printf(t ? ", %.6g" : "%.6g", lg[t]);
	printf("]\n");
	return 0;
}

/*
 * greedy (n > 0): JSON prompt-id array lines in, {"ids": [...], "margins": [...]} lines out;
 * logits (n = 0): the same lines in, the last position's logits out.
 */
static int
Greedy(struct llama_model *model, int n, int threads)
{
	struct llama_context_params cp = llama_context_default_params();
	struct llama_context *ctx;
	int			n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;
	int			rc = 0;

	cp.n_ctx = CONTEXT_LEN;
	cp.n_batch = CONTEXT_LEN;
	cp.n_ubatch = CONTEXT_LEN;
	cp.n_threads = cp.n_threads_batch = threads;
	if ((ctx = llama_init_from_model(model, cp)) == NULL)
		return Fail("llama_init_from_model failed");
	while (rc == 0 && (len = getline(&line, &cap, stdin)) >= 0)
	{
		cJSON	   *j = cJSON_ParseWithLength(line, (size_t) len);
		int			k = cJSON_GetArraySize(j);
		llama_token *ids = malloc(sizeof(llama_token) * (size_t) (k > 0 ? k : 1));

		if (!cJSON_IsArray(j) || k == 0 || k + n > CONTEXT_LEN || ids == NULL)
			rc = Fail("a standard-input line is not a JSON array of prompt ids that fits the context");
		for (int i = 0; rc == 0 && i < k; i++)
			ids[i] = (llama_token) cJSON_GetArrayItem(j, i)->valueint;
		if (rc == 0)
			rc = n > 0 ? GreedyOne(ctx, n_vocab, ids, k, n) : LastLogits(ctx, n_vocab, ids, k);
		fflush(stdout);
		free(ids);
		cJSON_Delete(j);
	}
	free(line);
	llama_free(ctx);
	return rc;
}

int
main(int argc, char **argv)
{
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *model;
	int			rc;

	if (argc < 3)
		return Fail("usage: llamacpp_record info|tokenize|greedy MODEL ...");
	llama_log_set(Log, NULL);
	llama_backend_init();
	if ((model = llama_model_load_from_file(argv[2], mp)) == NULL)
		return Fail("cannot load the model");
	if (strcmp(argv[1], "info") == 0)
		rc = Info(model);
	else if (strcmp(argv[1], "tokenize") == 0 && argc == 5)
		rc = Tokenize(model, atoi(argv[3]) != 0, atoi(argv[4]) != 0);
	else if (strcmp(argv[1], "greedy") == 0 && argc == 5 && atoi(argv[3]) > 0)
		rc = Greedy(model, atoi(argv[3]), atoi(argv[4]));
	else if (strcmp(argv[1], "logits") == 0 && argc == 4)
		rc = Greedy(model, 0, atoi(argv[3]));
	else
		rc = Fail("usage: llamacpp_record info MODEL | tokenize MODEL ADD PARSE | greedy MODEL N THREADS | logits MODEL THREADS");
	llama_model_free(model);
	llama_backend_free();
	return rc;
}
