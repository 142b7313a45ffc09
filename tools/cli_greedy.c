/*
 * cli_greedy.c: cbllm-cli greedy -m MODEL -n N < PROMPTS
 *
 * Each standard-input line is a JSON array of prompt token ids; each output
 * line, in the same order, is {"ids": [...], "margins": [...], "seconds": [...]}:
 * the N tokens greedy decoding gives (end-of-generation tokens included and
 * decoded past, as a reference engine that takes the argmax of the raw logits
 * at every step does) and, at each step, the top token's logit minus the
 * second's, and that second token.  All the
 * prompts are submitted together, so they share the engine's steps as served
 * requests do.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_score.h"

/* One prompt's request: its ids, and what it generated. */
typedef struct greedy_req
{
	int32_t    *prompt;
	int			n_prompt;
	int64_t		id;
	int32_t    *ids;			/* (n) generated */
	float	   *margins;		/* (n) top-1 minus top-2 logit at each step */
	int32_t    *seconds;		/* (n) the top-2 token at each step */
	int			n_done;
	bool		finished;
} greedy_req;

/* Print an error line and return the exit status 1. */
static int
GreedyFail(const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s\n", msg);
	return 1;
}

/* Parse one line, a JSON array of ids, into r->prompt; -1 if it is not one. */
static int
ParsePrompt(const char *line, size_t len, greedy_req *r)
{
	cJSON	   *v = cJSON_ParseWithLength(line, len);
	const cJSON *it;
	int			k = 0;

	if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0 ||
		(r->prompt = malloc(sizeof(int32_t) * (size_t) cJSON_GetArraySize(v))) == NULL)
	{
		cJSON_Delete(v);
		return -1;
	}
	cJSON_ArrayForEach(it, v)
	{
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX)
		{
			cJSON_Delete(v);
			return -1;
		}
		r->prompt[k++] = (int32_t) it->valuedouble;
	}
	r->n_prompt = k;
	cJSON_Delete(v);
	return 0;
}

/* Read every prompt line of standard input into *reqs. */
static int
ReadPrompts(greedy_req **reqs, int *n_reqs, int n)
{
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;
	int			k = 0,
				room = 0;

	*reqs = NULL;
	while ((len = getline(&line, &cap, stdin)) >= 0)
	{
		greedy_req *r;

		if (k == room)
		{
			greedy_req *grown = realloc(*reqs, sizeof(greedy_req) * (size_t) (room = room ? 2 * room : 16));

			if (grown == NULL)
				break;
			*reqs = grown;
		}
		r = &(*reqs)[k];
		memset(r, 0, sizeof(*r));
		r->ids = malloc(sizeof(int32_t) * (size_t) n);
		r->margins = malloc(sizeof(float) * (size_t) n);
		r->seconds = malloc(sizeof(int32_t) * (size_t) n);
		k++;
		if (r->ids == NULL || r->margins == NULL || r->seconds == NULL || ParsePrompt(line, (size_t) len, r) != 0)
		{
			fprintf(stderr, "cbllm-cli: error: standard input line %d is not a JSON array of token ids\n", k);
			free(line);
			*n_reqs = k;
			return -1;
		}
	}
	free(line);
	*n_reqs = k;
	return 0;
}

/* Take what request r produced, into its arrays. */
static int
Collect(cbllm_engine *e, greedy_req *r, int n, cbllm_err *err)
{
	cbllm_output out;

	if (cbllm_engine_take(e, r->id, &out, err) != CBLLM_OK)
		return -1;
	for (int i = 0; i < out.n_tokens && r->n_done < n; i++, r->n_done++)
	{
		const cbllm_logprob *lp = &out.logprobs[i];

		r->ids[r->n_done] = out.tokens[i];
		r->margins[r->n_done] = lp->n_top >= 2 ? lp->top_logprobs[0] - lp->top_logprobs[1] : 0;
		r->seconds[r->n_done] = lp->n_top >= 2 ? lp->top_ids[1] : -1;
	}
	if (out.finish == CBLLM_FINISH_ERROR)
	{
		snprintf(err->msg, sizeof(err->msg), "%s", out.error);
		return -1;
	}
	r->finished = out.finish != CBLLM_FINISH_NONE;
	return 0;
}

/* Print r as one JSON line. */
static void
PutResult(const greedy_req *r)
{
	printf("{\"ids\": [");
	for (int i = 0; i < r->n_done; i++)
		printf(i ? ", %d" : "%d", r->ids[i]);
	printf("], \"margins\": [");
	for (int i = 0; i < r->n_done; i++)
		printf(i ? ", %.5f" : "%.5f", r->margins[i]);
	printf("], \"seconds\": [");
	for (int i = 0; i < r->n_done; i++)
		printf(i ? ", %d" : "%d", r->seconds[i]);
	printf("]}\n");
}

/* greedy: see the file's comment. */
int
cli_greedy_run(const cbllm_engine_params *ep_in, int n)
{
	cbllm_engine_params ep = *ep_in;
	cbllm_engine *e = NULL;
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;
	greedy_req *reqs = NULL;
	int			n_reqs = 0,
				active = 1,
				status = 0;

	if (n < 1)
		return GreedyFail("greedy needs -n N with N >= 1");
	if (ReadPrompts(&reqs, &n_reqs, n) != 0)
		status = 1;
	sp.temperature = 0;
	sp.max_tokens = n;
	sp.ignore_eos = true;
	sp.logprobs = true;
	sp.top_logprobs = 2;
	if (status == 0 && ep.max_num_seqs == 0)
		ep.max_num_seqs = n_reqs > 0 ? n_reqs : 1;
	if (status == 0 && cbllm_engine_create(&ep, &e, &err) != CBLLM_OK)
		status = GreedyFail(err.msg);
	for (int i = 0; status == 0 && i < n_reqs; i++)
	{
		cbllm_request_input in = {.ids = reqs[i].prompt, .n_ids = reqs[i].n_prompt};

		if (cbllm_engine_submit(e, &in, &sp, &reqs[i].id, &err) != CBLLM_OK)
			status = GreedyFail(err.msg);
	}
	while (status == 0 && active > 0)
	{
		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
			status = GreedyFail(err.msg);
		for (int i = 0; status == 0 && i < n_reqs; i++)
			if (!reqs[i].finished && Collect(e, &reqs[i], n, &err) != 0)
				status = GreedyFail(err.msg);
	}
	for (int i = 0; status == 0 && i < n_reqs; i++)
		PutResult(&reqs[i]);
	for (int i = 0; i < n_reqs; i++)
	{
		free(reqs[i].prompt);
		free(reqs[i].ids);
		free(reqs[i].margins);
		free(reqs[i].seconds);
	}
	free(reqs);
	if (e != NULL)
		cbllm_engine_destroy(e);
	return status;
}
