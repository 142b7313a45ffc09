/*
 * request.c: one request's life inside the engine: its tokens, its block
 * table, and its output text.
 *
 * Output text and stop strings: generated tokens are detokenised into
 * r->text as they arrive.  Text that could still turn out to be the start of
 * a stop string is held back (text_ready stays max_stop_len - 1 bytes behind
 * and on a character boundary), so a caller never sees text that a stop
 * string later removes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "request_params.h"

/* True when a runs before b: higher rank (effective priority), then earlier arrival. */
static inline bool
RunsBefore(const cbllm_request *a, const cbllm_request *b)
{
	return a->rank != b->rank ? a->rank > b->rank : a->arrival < b->arrival;
}

/* Insert r in (rank desc, arrival asc) order, searching from the back. */
void
req_list_insert(req_list *l, cbllm_request *r)
{
	cbllm_request *after = l->tail;

	while (after != NULL && RunsBefore(r, after))
		after = after->prev;
	r->prev = after;
	r->next = after ? after->next : l->head;
	if (r->next)
		r->next->prev = r;
	else
		l->tail = r;
	if (after)
		after->next = r;
	else
		l->head = r;
	l->n++;
}

/* Unlink r from l. */
void
req_list_remove(req_list *l, cbllm_request *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		l->head = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		l->tail = r->prev;
	r->prev = r->next = NULL;
	l->n--;
}

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

/* The prompt's token ids, from text through the tokenizer or copied. */
static int
PromptTokens(cbllm_engine *e, const cbllm_request_input *in, int32_t **ids, int *n,
			 cbllm_err *err)
{
	if (in->text != NULL)
	{
		tokenizer_encode_opts o = {.add_bos = in->add_bos, .parse_special = true};

		return tokenizer_encode(e->tok, in->text, in->text_len, o, ids, n, err);
	}
	if (in->n_ids < 0 || (in->n_ids > 0 && in->ids == NULL))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "prompt ids are missing");
	*ids = malloc(sizeof(int32_t) * (in->n_ids > 0 ? in->n_ids : 1));
	if (*ids == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	for (int i = 0; i < in->n_ids; i++)
	{
		if (in->ids[i] < 0 || in->ids[i] >= e->model->cfg.vocab_size)
		{
			free(*ids);
			return cbllm_fail(err, CBLLM_ERR_INVALID,
							  "prompt token %d is outside the vocabulary of %d", in->ids[i],
							  e->model->cfg.vocab_size);
		}
		(*ids)[i] = in->ids[i];
	}
	*n = in->n_ids;
	return CBLLM_OK;
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

	if ((rc = CheckSampling(sp, err)) != CBLLM_OK ||
		(rc = PromptTokens(e, in, &ids, &n, err)) != CBLLM_OK)
		return rc;
	if (n == 0)
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "the prompt is empty");
	else if (n + 1 > max_len)
		rc = cbllm_fail(err, CBLLM_ERR_TOO_LONG,
						"the prompt has %d tokens, more than max_model_len %d allows (prompt + 1 generated token)",
						n, max_len);
	else if ((n + 1 + bs - 1) / bs > e->kv->n_blocks)
		rc = cbllm_fail(err, CBLLM_ERR_TOO_LONG,
						"the prompt has %d tokens and can never fit in the KV cache of %d blocks of %d",
						n, e->kv->n_blocks, bs);
	if (rc != CBLLM_OK)
	{
		free(ids);
		return rc;
	}
	r = calloc(1, sizeof(*r));
	if (r == NULL)
	{
		free(ids);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	r->tokens = ids;
	r->n_tokens = r->n_prompt = n;
	r->cap_tokens = n > 0 ? n : 1;
	r->sp = *sp;
	r->cache_salt = in->cache_salt;
	for (int i = 0; i < sp->n_stop; i++)
	{
		r->stop_strings[i] = strdup(sp->stop[i]);
		if (r->stop_strings[i] == NULL)
		{
			r->sp.n_stop = i;
			request_free(r);
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		}
		r->sp.stop[i] = r->stop_strings[i];
		if (strlen(sp->stop[i]) > r->max_stop_len)
			r->max_stop_len = strlen(sp->stop[i]);
	}
	for (int i = sp->n_stop; i < CBLLM_MAX_STOP; i++)
		r->sp.stop[i] = NULL;
	rng_seed(&r->rng, sp->has_seed ? sp->seed :
			 (uint64_t) (cbllm_now() * 1e9) ^ ((uint64_t) e->next_id << 32));
	tokenizer_stream_init(&r->detok, false, true);
	*out = r;
	return CBLLM_OK;
}

/* Free a request that holds no blocks any more. */
void
request_free(cbllm_request *r)
{
	if (r == NULL)
		return;
	for (int i = 0; i < r->sp.n_stop; i++)
		free(r->stop_strings[i]);
	free(r->tokens);
	free(r->blocks);
	free(r->hashes);
	free(r->serials);
	free(r->swap_ids);
	cbllm_buf_free(&r->text);
	free(r);
}

/* Make room in r's block table (and its hashes and serials) for n entries. */
int
request_reserve_table(cbllm_request *r, int n)
{
	int			cap = n > 2 * r->cap_blocks ? n : 2 * r->cap_blocks;
	int32_t    *b;
	uint64_t   *h,
			   *sr;

	if (n <= r->cap_blocks)
		return CBLLM_OK;
	b = realloc(r->blocks, sizeof(int32_t) * cap);
	if (b == NULL)
		return CBLLM_ERR_NOMEM;
	r->blocks = b;
	h = realloc(r->hashes, sizeof(uint64_t) * cap);
	if (h == NULL)
		return CBLLM_ERR_NOMEM;
	r->hashes = h;
	sr = realloc(r->serials, sizeof(uint64_t) * cap);
	if (sr == NULL)
		return CBLLM_ERR_NOMEM;
	r->serials = sr;
	r->cap_blocks = cap;
	return CBLLM_OK;
}

/* Grow r's block table to cover n_positions; CBLLM_ERR_FULL when the pool runs dry. */
int
request_ensure_blocks(cbllm_engine *e, cbllm_request *r, int n_positions)
{
	int			need = (n_positions + e->kv->block_size - 1) / e->kv->block_size;

	if (request_reserve_table(r, need) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	if (need - r->n_blocks > kv_cache_available(e->kv))
		return CBLLM_ERR_FULL;
	while (r->n_blocks < need)
		r->blocks[r->n_blocks++] = kv_cache_alloc(e->kv);
	return CBLLM_OK;
}

/* Return every block of r to the pool; its KV must be recomputed to run again. */
void
request_release_blocks(cbllm_engine *e, cbllm_request *r)
{
	for (int i = 0; i < r->n_blocks; i++)
		if (r->blocks[i] >= 0)
			kv_cache_release(e->kv, r->blocks[i]);
	r->n_blocks = 0;
	r->n_dropped = 0;
	r->n_hashed = 0;
	if (!r->swapped)
		r->n_computed = 0;
}

/* Return r's swap blocks, if any; its KV is then gone. */
void
request_release_swap(cbllm_engine *e, cbllm_request *r)
{
	if (!r->swapped)
		return;
	swap_space_release(e->swap, r->n_swap, r->swap_ids);
	r->n_swap = 0;
	r->swapped = false;
	r->n_computed = 0;
}

/*
 * The prefix-cache key of r's full block b: its hash chained from block b -
 * 1's (from the salt for the first), its tokens, and the serial of the
 * cached block that holds block b - 1's content.  r->hashes and r->serials
 * must be filled for the blocks before b.
 */
void
request_block_key(const cbllm_engine *e, const cbllm_request *r, int b, kv_block_key *key)
{
	key->tokens = r->tokens + (int64_t) b * e->kv->block_size;
	key->salt = r->cache_salt;
	key->parent = b > 0 ? r->serials[b - 1] : 0;
	key->hash = kv_cache_block_hash(e->kv, b > 0 ? r->hashes[b - 1] : r->cache_salt, key->tokens);
}

/*
 * Offer r's newly filled blocks to the prefix cache.  A block whose parent
 * has no serial (it was never cached: dropped behind a sliding window before
 * it was offered) is not offered either: no lookup could name that parent.
 */
void
request_register_blocks(cbllm_engine *e, cbllm_request *r)
{
	int			bs = e->kv->block_size;

	if (e->params.no_prefix_caching)
		return;
	while (r->n_hashed < r->n_blocks && (r->n_hashed + 1) * bs <= r->n_computed)
	{
		int			b = r->n_hashed;
		kv_block_key key;

		request_block_key(e, r, b, &key);
		r->hashes[b] = key.hash;
		r->serials[b] = 0;
		if (r->blocks[b] >= 0 && (b == 0 || r->serials[b - 1] != 0))
			r->serials[b] = kv_cache_register(e->kv, r->blocks[b], &key);
		r->n_hashed++;
	}
}

/*
 * Sliding-window models: give back the blocks no future token can see.  The
 * next token (position n_computed) attends to positions from n_computed -
 * window + 1 on, and later ones to positions after that, so every block
 * wholly before that position goes back to the pool (or, registered, to the
 * prefix cache) and its table entry becomes -1, which attention never reads.
 */
void
request_drop_window_blocks(cbllm_engine *e, cbllm_request *r)
{
	int			window = e->model->cfg.sliding_window;
	int			bs = e->kv->block_size;
	int			lim;

	if (window <= 0 || r->n_computed - window + 1 <= 0)
		return;
	lim = (r->n_computed - window + 1) / bs;	/* blocks [0, lim) end before it */
	lim = lim < r->n_blocks ? lim : r->n_blocks;
	for (; r->n_dropped < lim; r->n_dropped++)
	{
		kv_cache_release(e->kv, r->blocks[r->n_dropped]);
		r->blocks[r->n_dropped] = -1;
	}
}

/* Move text_ready forward to what no stop string can still remove. */
static void
AdvanceReady(cbllm_request *r)
{
	size_t		ready = r->text.len;

	if (r->finish == CBLLM_FINISH_NONE && r->max_stop_len > 1)
	{
		ready = r->text.len > r->max_stop_len - 1 ? r->text.len - (r->max_stop_len - 1) : 0;
		while (ready > 0 && ready < r->text.len && ((unsigned char) r->text.data[ready] & 0xC0) == 0x80)
			ready--;
	}
	if (ready > r->text_ready)
		r->text_ready = ready;
}

/* Search the new text for a stop string; truncate at it and return true when found. */
static bool
FindStop(cbllm_request *r, size_t old_len)
{
	size_t		from = old_len > r->max_stop_len ? old_len - r->max_stop_len : 0;
	size_t		best = (size_t) -1;

	for (int i = 0; i < r->sp.n_stop; i++)
	{
		const char *hit = memmem(r->text.data + from, r->text.len - from, r->sp.stop[i],
								 strlen(r->sp.stop[i]));

		if (hit != NULL && (size_t) (hit - r->text.data) < best)
			best = (size_t) (hit - r->text.data);
	}
	if (best == (size_t) -1)
		return false;
	r->text.len = best;
	if (r->text.data)
		r->text.data[best] = '\0';
	return true;
}

/* Record a sampled token: its text, and whether it ends the request. */
int
request_append_token(cbllm_engine *e, cbllm_request *r, int32_t token)
{
	size_t		old_len = r->text.len;
	bool		is_eos = token == e->eos_id && !r->sp.ignore_eos;
	int			n_gen;

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
	n_gen = r->n_tokens - r->n_prompt;
	e->stats.tokens_generated++;
	if (is_eos)
	{
		request_finish(e, r, CBLLM_FINISH_STOP, NULL);
		return CBLLM_OK;
	}
	if (tokenizer_stream_push(e->tok, &r->detok, token, &r->text) != CBLLM_OK)
		return CBLLM_ERR_NOMEM;
	if (r->sp.n_stop > 0 && FindStop(r, old_len))
	{
		r->text_ready = r->text_ready < r->text.len ? r->text_ready : r->text.len;
		r->finish = CBLLM_FINISH_STOP;	/* no flush: the held bytes were cut */
		request_finish(e, r, CBLLM_FINISH_STOP, NULL);
		return CBLLM_OK;
	}
	if (n_gen >= r->sp.max_tokens || r->n_tokens >= e->params.max_model_len)
		request_finish(e, r, CBLLM_FINISH_LENGTH, NULL);
	else
		AdvanceReady(r);
	return CBLLM_OK;
}

/* End a request: free its blocks, leave the queues, make all its text ready. */
void
request_finish(cbllm_engine *e, cbllm_request *r, cbllm_finish why, const char *error)
{
	bool		stopped_by_string = r->finish == CBLLM_FINISH_STOP && why == CBLLM_FINISH_STOP;

	if (r->state == REQ_RUNNING)
		req_list_remove(&e->running, r);
	else if (r->state == REQ_WAITING)
		req_list_remove(&e->waiting, r);
	request_release_blocks(e, r);
	request_release_swap(e, r);
	r->state = REQ_FINISHED;
	r->finish = why;
	if (error != NULL)
		snprintf(r->error, sizeof(r->error), "%s", error);
	if (!stopped_by_string)
		tokenizer_stream_flush(&r->detok, &r->text);
	r->text_ready = r->text.len;
}
