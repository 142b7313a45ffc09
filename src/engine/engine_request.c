/*
 * engine_request.c: one request's life inside the engine: made from a
 * caller's input (its prompt tokenized and checked), its generated tokens,
 * and its output text.  Its place in the queues is sched/request.c's.
 *
 * Output text and stop strings: generated tokens are detokenised into
 * r->eng->text as they arrive.  Text that could still turn out to be the start of
 * a stop string is held back (text_ready stays max_stop_len - 1 bytes behind
 * and on a character boundary), so a caller never sees text that a stop
 * string later removes.
 *
 * A chat answer (split_reasoning) goes token by token through the
 * vocabulary's splitter (chat/reasoning.h): its content becomes the text
 * above, stop strings and all, and its reasoning a second text that is
 * ready as soon as it is made.  A marker token is never decoded; bytes of
 * an unfinished character before it are flushed to the part they belong to.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/request_params.h"
#include "base/utf8.h"
#include "engine/engine_internal.h"
#include "sample/logits_process.h"
/* Check the sampling parameters a caller gave, by the rules of every request (request_params.h). */
static int
CheckSampling(const cbllm_sampling *sp, cbllm_err *err)
{
	cbllm_request_params p;
	char		msg[CBLLM_ERR_MSG_LEN];

	cbllm_request_params_from_sampling(sp, &p);
	if (cbllm_request_check(&cbllm_engine_limits, &p, NULL, msg, sizeof(msg)) != CBLLM_CHECK_OK)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "%s", msg);
	return CBLLM_OK;
}

/*
 * A prompt's ids as the engine reads it: special-token text recognised, and
 * with add_bos the tokenizer's own special tokens (its BOS), but one BOS
 * only: a prompt that starts with the BOS token's text (a Llama-2 "<s>[INST]"
 * prompt) does not get a second one, which HuggingFace's encode would add.
 */
int
cbllm_engine_tokenize(const cbllm_engine *e, const char *text, size_t len, bool add_bos,
					  int32_t **ids, int *n, cbllm_err *err)
{
	tokenizer_encode_opts o = {.add_bos = add_bos, .parse_special = true};
	int32_t		bos = tokenizer_bos_id(e->tok);
	int			rc = tokenizer_encode(e->tok, text, len, o, ids, n, err);

	if (rc == CBLLM_OK && add_bos && bos >= 0 && *n >= 2 && (*ids)[0] == bos && (*ids)[1] == bos)
	{
		memmove(*ids, *ids + 1, sizeof(int32_t) * (size_t) (*n - 1));
		(*n)--;
	}
	return rc;
}

/*
 * Fail for a prompt id with no row in the embeddings.  The tokenizer may
 * have such ids (Gemma-3's <image_soft_token> = 262144 over 262144 rows),
 * and special-token parsing turns their text into them: the request is
 * refused naming the token, and the engine serves every other.
 */
static int
CheckPromptIds(const cbllm_engine *e, const int32_t *ids, int n, cbllm_err *err)
{
	int			rows = e->model->cfg.vocab_size;

	for (int i = 0; i < n; i++)
	{
		const char *piece;

		if (ids[i] >= 0 && ids[i] < rows)
			continue;
		if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(e->tok) ||
			(piece = tokenizer_piece(e->tok, ids[i])) == NULL)
			return cbllm_fail(err, CBLLM_ERR_INVALID, "prompt token %d is outside the vocabulary of %d",
							  ids[i], rows);
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "prompt token %d (\"%.64s\") is the tokenizer's but past the model's %d embedding rows (vocab_size): the model cannot read it",
						  ids[i], piece, rows);
	}
	return CBLLM_OK;
}

/* The prompt's token ids, from text through the tokenizer or copied; each has an embedding row. */
static int
PromptTokens(cbllm_engine *e, const cbllm_request_input *in, int32_t **ids, int *n,
			 cbllm_err *err)
{
	int			rc;

	if (in->text != NULL)
		rc = cbllm_engine_tokenize(e, in->text, in->text_len, in->add_bos, ids, n, err);
	else if (in->n_ids < 0 || (in->n_ids > 0 && in->ids == NULL))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "prompt ids are missing");
	else if ((*ids = malloc(sizeof(int32_t) * (in->n_ids > 0 ? in->n_ids : 1))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	else
	{
		memcpy(*ids, in->ids, sizeof(int32_t) * in->n_ids);
		*n = in->n_ids;
		rc = CBLLM_OK;
	}
	if (rc == CBLLM_OK && (rc = CheckPromptIds(e, *ids, *n, err)) != CBLLM_OK)
	{
		free(*ids);
		*ids = NULL;
	}
	return rc;
}

/* Fill the options sp leaves to the model with generation_config.json's defaults. */
static void
ApplyModelDefaults(const cbllm_engine *e, cbllm_sampling *sp)
{
	const cbllm_generation_config *g = &e->gen;

	if (!g->do_sample)
		return;					/* the model's own defaults are greedy, as the engine's */
	if ((sp->model_defaults & CBLLM_DEFAULT_TEMPERATURE) && g->has_temperature)
		sp->temperature = (float) g->temperature;
	if ((sp->model_defaults & CBLLM_DEFAULT_TOP_P) && g->has_top_p)
		sp->top_p = (float) g->top_p;
	if ((sp->model_defaults & CBLLM_DEFAULT_TOP_K) && g->has_top_k)
		sp->top_k = g->top_k;
}

/* Copy sp's logit_bias into r, checking every id against the vocabulary and every value. */
static int
CopyBias(cbllm_engine *e, cbllm_request *r, const cbllm_sampling *sp, cbllm_err *err)
{
	r->eng->sp.bias_ids = NULL;
	r->eng->sp.bias_values = NULL;
	r->eng->sp.n_bias = 0;
	if (sp->n_bias == 0)
		return CBLLM_OK;
	if (sp->bias_ids == NULL || sp->bias_values == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "logit_bias has %d entries and no ids or values",
						  sp->n_bias);
	for (int k = 0; k < sp->n_bias; k++)
	{
		if (sp->bias_ids[k] < 0 || sp->bias_ids[k] >= e->n_sample_ids)
			return cbllm_fail(err, CBLLM_ERR_INVALID,
							  "logit_bias names token %d, and the vocabulary has ids 0 to %d",
							  sp->bias_ids[k], e->n_sample_ids - 1);
		if (!(sp->bias_values[k] >= -CBLLM_MAX_BIAS && sp->bias_values[k] <= CBLLM_MAX_BIAS))
			return cbllm_fail(err, CBLLM_ERR_INVALID,
							  "logit_bias for token %d must be between -%d and %d, not %g",
							  sp->bias_ids[k], CBLLM_MAX_BIAS, CBLLM_MAX_BIAS, sp->bias_values[k]);
	}
	r->eng->bias_ids = malloc(sizeof(int32_t) * sp->n_bias);
	r->eng->bias_values = malloc(sizeof(float) * sp->n_bias);
	if (r->eng->bias_ids == NULL || r->eng->bias_values == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	memcpy(r->eng->bias_ids, sp->bias_ids, sizeof(int32_t) * sp->n_bias);
	memcpy(r->eng->bias_values, sp->bias_values, sizeof(float) * sp->n_bias);
	r->eng->sp.bias_ids = r->eng->bias_ids;
	r->eng->sp.bias_values = r->eng->bias_values;
	r->eng->sp.n_bias = sp->n_bias;
	return CBLLM_OK;
}

/*
 * Whether the prompt leaves a <think> block open (its last think tag opens
 * one), so that the answer starts inside it.
 */
static bool
PromptOpensThink(const reasoning_markers *m, const int32_t *ids, int n)
{
	for (int i = n - 1; i >= 0; i--)
	{
		if (ids[i] == m->think_open)
			return true;
		if (ids[i] == m->think_close)
			return false;
	}
	return false;
}

/*
 * Split r's answer when its input asks and the vocabulary has a format; a
 * constrained answer never starts inside a think block (the constraint
 * shapes the content, and a JSON answer is no reasoning).
 */
static void
StartSplit(cbllm_engine *e, cbllm_request *r, const cbllm_request_input *in)
{
	bool		open_think;

	r->eng->split = in->split_reasoning && e->reasoning.format != REASONING_NONE;
	if (!r->eng->split)
		return;
	open_think = e->reasoning.format == REASONING_THINK && in->text != NULL && r->eng->cons == NULL &&
		PromptOpensThink(&e->reasoning, r->tokens, r->n_prompt);
	reasoning_split_init(&r->eng->splitter, &e->reasoning, open_think);
}

/* Build a waiting request from a caller's input, checking every limit. */
int
request_create(cbllm_engine *e, const cbllm_request_input *in, const cbllm_sampling *sp,
			   cbllm_request **out, cbllm_err *err)
{
	cbllm_request *r;
	int32_t    *ids = NULL;
	int			n = 0,
				rc,
				max_len = e->params.max_model_len;
	int			bs = e->params.block_size;
	cbllm_sampling own = *sp;

	ApplyModelDefaults(e, &own);
	sp = &own;
	if ((rc = CheckSampling(sp, err)) != CBLLM_OK ||
		(rc = PromptTokens(e, in, &ids, &n, err)) != CBLLM_OK)
		return rc;
	if (n == 0)
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "the prompt is empty");
	else if (n + 1 > max_len)
		rc = cbllm_fail(err, CBLLM_ERR_TOO_LONG,
						"the prompt has %d tokens, more than max_model_len %d allows (prompt + 1 generated token)",
						n, max_len);
	else if ((n + 1 + bs - 1) / bs > e->bm->n_blocks)
		rc = cbllm_fail(err, CBLLM_ERR_TOO_LONG,
						"the prompt has %d tokens and can never fit in the KV cache of %d blocks of %d",
						n, e->bm->n_blocks, bs);
	if (rc != CBLLM_OK)
	{
		free(ids);
		return rc;
	}
	r = calloc(1, sizeof(*r));
	if (r == NULL || (r->eng = calloc(1, sizeof(*r->eng))) == NULL)
	{
		free(r);
		free(ids);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	r->eng->state_slot = -1;
	r->tokens = ids;
	r->n_tokens = r->n_prompt = n;
	r->cap_tokens = n > 0 ? n : 1;
	r->eng->sp = *sp;
	r->cache_salt = in->cache_salt;
	r->tenant = in->tenant;
	for (int i = 0; i < sp->n_stop; i++)
	{
		r->eng->stop_strings[i] = strdup(sp->stop[i]);
		if (r->eng->stop_strings[i] == NULL)
		{
			r->eng->sp.n_stop = i;
			engine_request_free(r);
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		}
		r->eng->sp.stop[i] = r->eng->stop_strings[i];
		if (strlen(sp->stop[i]) > r->eng->max_stop_len)
			r->eng->max_stop_len = strlen(sp->stop[i]);
	}
	for (int i = sp->n_stop; i < CBLLM_MAX_STOP; i++)
		r->eng->sp.stop[i] = NULL;
	if ((rc = CopyBias(e, r, sp, err)) != CBLLM_OK)
	{
		engine_request_free(r);
		return rc;
	}
	r->eng->sp.constraint = NULL;	/* the compiled one is kept instead */
	r->eng->sp.constraint_len = 0;
	if (sp->constraint != NULL &&
		(rc = engine_constraint_acquire(e, sp->constraint, sp->constraint_len, &r->eng->cons, err)) != CBLLM_OK)
	{
		engine_request_free(r);
		return rc;
	}
	r->eng->cstate = CONSTRAINT_START;
	r->eng->host_only = logits_process_active(&r->eng->sp) || r->eng->sp.logprobs;
	r->eng->controlled = r->eng->cons != NULL || r->eng->host_only;
	if (r->eng->controlled && (rc = engine_sample_scratch(e, err)) != CBLLM_OK)
	{
		engine_constraint_release(e, r->eng->cons);
		engine_request_free(r);
		return rc;
	}
	rng_seed(&r->eng->rng, sp->has_seed ? sp->seed :
			 (uint64_t) (cbllm_now() * 1e9) ^ ((uint64_t) e->next_id << 32));
	tokenizer_stream_init(&r->eng->detok, false, true);
	StartSplit(e, r, in);
	*out = r;
	return CBLLM_OK;
}

/* Move text_ready forward to what no stop string can still remove. */
static void
AdvanceReady(cbllm_request *r)
{
	size_t		ready = r->eng->text.len;

	if (r->eng->finish == CBLLM_FINISH_NONE && r->eng->max_stop_len > 1)
	{
		ready = r->eng->text.len > r->eng->max_stop_len - 1 ? r->eng->text.len - (r->eng->max_stop_len - 1) : 0;
		while (ready > 0 && ready < r->eng->text.len && utf8_is_cont((uint8_t) r->eng->text.data[ready]))
			ready--;
	}
	if (ready > r->eng->text_ready)
		r->eng->text_ready = ready;
}

/* Search the new text for a stop string; truncate at it and return true when found. */
static bool
FindStop(cbllm_request *r, size_t old_len)
{
	size_t		from = old_len > r->eng->max_stop_len ? old_len - r->eng->max_stop_len : 0;
	size_t		best = (size_t) -1;

	for (int i = 0; i < r->eng->sp.n_stop; i++)
	{
		const char *hit = memmem(r->eng->text.data + from, r->eng->text.len - from, r->eng->sp.stop[i],
								 strlen(r->eng->sp.stop[i]));

		if (hit != NULL && (size_t) (hit - r->eng->text.data) < best)
			best = (size_t) (hit - r->eng->text.data);
	}
	if (best == (size_t) -1)
		return false;
	r->eng->text.len = best;
	if (r->eng->text.data)
		r->eng->text.data[best] = '\0';
	return true;
}

/* Append token to r's tokens, growing them. */
static int
PushToken(cbllm_request *r, int32_t token)
{
	if (r->n_tokens == r->cap_tokens)
	{
		int			cap = r->cap_tokens * 2;
		int32_t    *t = realloc(r->tokens, sizeof(int32_t) * cap);

		if (t == NULL)
			return CBLLM_ERR_NOMEM;
		r->tokens = t;
		r->cap_tokens = cap;
	}
	r->tokens[r->n_tokens++] = token;
	return CBLLM_OK;
}

/* Keep the step's logprobs record as generated token n_gen's (from 1). */
static int
PushLogprob(cbllm_request *r, int n_gen)
{
	if (n_gen > r->eng->cap_lp)
	{
		int			cap = r->eng->cap_lp > 0 ? r->eng->cap_lp * 2 : 16;
		cbllm_logprob *lp;

		cap = cap < n_gen ? n_gen : cap;
		if ((lp = realloc(r->eng->lp, sizeof(cbllm_logprob) * (size_t) cap)) == NULL)
			return CBLLM_ERR_NOMEM;
		r->eng->lp = lp;
		r->eng->cap_lp = cap;
	}
	r->eng->lp[n_gen - 1] = r->eng->lp_next;
	return CBLLM_OK;
}

/*
 * A constrained request with no token to go on with: ended complete when its
 * text is a full match (a vocabulary without an end-of-turn token), else
 * failed with a message that says why.
 */
static int
ConstraintDeadEnd(cbllm_request *r, cbllm_finish *why)
{
	if (constraint_complete(r->eng->cons->c, r->eng->cstate))
	{
		*why = CBLLM_FINISH_CONSTRAINT;
		return CBLLM_OK;
	}
	snprintf(r->eng->error, sizeof(r->eng->error),
			 "no token of the vocabulary continues the constraint after %d generated tokens",
			 r->n_tokens - r->n_prompt);
	*why = CBLLM_FINISH_ERROR;
	return CBLLM_OK;
}

/* Push the bytes r's decoder holds to the part they belong to (before a marker, or at the end). */
static int
FlushSplit(cbllm_request *r)
{
	engine_request *q = r->eng;

	q->piece.len = 0;
	if (tokenizer_stream_flush(&q->detok, &q->piece) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	return q->piece.len == 0 ? CBLLM_OK :
		reasoning_split_push(&q->splitter, -1, q->piece.data, q->piece.len, &q->reasoning, &q->text);
}

/* Decode token into r's reasoning or content, as the splitter says. */
static int
PushSplit(const cbllm_engine *e, cbllm_request *r, int32_t token)
{
	engine_request *q = r->eng;

	if (reasoning_split_is_marker(&q->splitter, token))
	{
		if (FlushSplit(r) != CBLLM_OK)
			return CBLLM_ERR_NOMEM;
		return reasoning_split_push(&q->splitter, token, "", 0, &q->reasoning, &q->text);
	}
	q->piece.len = 0;
	if (tokenizer_stream_push(e->tok, &q->detok, token, &q->piece) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	return reasoning_split_push(&q->splitter, token, q->piece.data ? q->piece.data : "", q->piece.len,
								&q->reasoning, &q->text);
}

/*
 * Record a sampled token and its text; *why says whether it ends the
 * request (the caller finishes it).  CBLLM_ERR_NOMEM when the token or its
 * text cannot be stored.
 */
int
request_append_token(cbllm_engine *e, cbllm_request *r, int32_t token, cbllm_finish *why)
{
	size_t		old_len = r->eng->text.len;
	bool		is_eos = generation_config_is_eos(&e->gen, token) &&
		(!r->eng->sp.ignore_eos || r->eng->cons != NULL);
	int			n_gen;

	*why = CBLLM_FINISH_NONE;
	if (r->eng->cons != NULL && (r->eng->cons_dead || constraint_advance(r->eng->cons->c, r->eng->cstate, token) < 0))
		return ConstraintDeadEnd(r, why);
	/* the record first: a token is never output without it */
	if (r->eng->sp.logprobs && PushLogprob(r, r->n_tokens - r->n_prompt + 1) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	if (PushToken(r, token) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	n_gen = r->n_tokens - r->n_prompt;
	e->stats.tokens_generated++;
	if (is_eos)
	{
		*why = CBLLM_FINISH_STOP;
		return CBLLM_OK;
	}
	if (r->eng->cons != NULL)
		r->eng->cstate = constraint_advance(r->eng->cons->c, r->eng->cstate, token);
	if (r->eng->split ? PushSplit(e, r, token) != CBLLM_OK :
		tokenizer_stream_push(e->tok, &r->eng->detok, token, &r->eng->text) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	if (r->eng->sp.n_stop > 0 && FindStop(r, old_len))
	{
		r->eng->text_ready = r->eng->text_ready < r->eng->text.len ? r->eng->text_ready : r->eng->text.len;
		r->eng->finish = CBLLM_FINISH_STOP;	/* no flush: the held bytes were cut */
		*why = CBLLM_FINISH_STOP;
		return CBLLM_OK;
	}
	if (r->eng->cons != NULL && constraint_final(r->eng->cons->c, r->eng->cstate))
		*why = CBLLM_FINISH_CONSTRAINT;
	else if (n_gen >= r->eng->sp.max_tokens || r->n_tokens >= e->params.max_model_len)
		*why = r->eng->cons != NULL && constraint_complete(r->eng->cons->c, r->eng->cstate) ?
			CBLLM_FINISH_CONSTRAINT : CBLLM_FINISH_LENGTH;
	else
		AdvanceReady(r);
	return CBLLM_OK;
}

/*
 * A token a lingering request (padded static batching) decoded past its
 * end: kept so that its next step has a position to compute, never output
 * or counted; *why is its own finish once it can go no further.
 */
int
request_append_padding(cbllm_engine *e, cbllm_request *r, int32_t token, cbllm_finish *why)
{
	*why = CBLLM_FINISH_NONE;
	if (PushToken(r, token) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	if (r->n_tokens >= e->params.max_model_len)
		*why = r->stat.linger_finish;
	return CBLLM_OK;
}

/*
 * End a request: leave the queues, free its blocks, make all its text
 * ready.  One the scheduler already took out of the queues (state
 * REQ_FINISHED, holding nothing) only gets its finish and its text.
 */
void
request_finish(cbllm_engine *e, cbllm_request *r, cbllm_finish why, const char *error)
{
	bool		stopped_by_string = r->eng->finish == CBLLM_FINISH_STOP && why == CBLLM_FINISH_STOP;

	if (request_running(r))
		req_list_remove(&e->running, r);
	else if (request_waiting(r))
		req_list_remove(&e->waiting, r);
	request_release_blocks(e->bm, r);
	request_release_swap(e->bm, r);
	engine_state_release(e, r);
	(void) request_enter(r, REQ_FINISHED);	/* from any state but FINISHED, where it stays */
	r->eng->finish = why;
	engine_constraint_release(e, r->eng->cons);
	r->eng->cons = NULL;
	request_unfollow(r);
	request_release_followers(r);
	if (error != NULL)
		snprintf(r->eng->error, sizeof(r->eng->error), "%s", error);
	if (r->eng->split)
	{
		/* out of memory here loses only the held bytes: the answer so far stands */
		if (!stopped_by_string)
			(void) FlushSplit(r);
		(void) reasoning_split_finish(&r->eng->splitter, &r->eng->reasoning, &r->eng->text);
	}
	else if (!stopped_by_string)
		tokenizer_stream_flush(&r->eng->detok, &r->eng->text);
	r->eng->text_ready = r->eng->text.len;
}

/* The controls r samples with, as the host sampler and a device's read them. */
sampler_params
request_sampler_params(const cbllm_request *r)
{
	sampler_params p = {r->eng->sp.temperature, r->eng->sp.top_p, r->eng->sp.top_k};

	return p;
}

/* Free r: its engine part (stop strings, bias, logprobs, text), then the scheduler's record. */
void
engine_request_free(cbllm_request *r)
{
	engine_request *q;

	if (r == NULL)
		return;
	if ((q = r->eng) != NULL)
	{
		for (int i = 0; i < q->sp.n_stop; i++)
			free(q->stop_strings[i]);
		free(q->bias_ids);
		free(q->bias_values);
		free(q->lp);
		free(q->state_saved);	/* a finished request's is gone already */
		cbllm_buf_free(&q->text);
		cbllm_buf_free(&q->reasoning);
		cbllm_buf_free(&q->piece);
		reasoning_split_free(&q->splitter);
		free(q);
		r->eng = NULL;
	}
	request_free(r);
}
