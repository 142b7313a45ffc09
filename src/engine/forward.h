/*
 * forward.h: the Llama forward pass over one step's flat token batch.
 *
 * Each sequence of the step contributes n_tokens new tokens at positions
 * [pos0, pos0 + n_tokens): a whole prompt, a chunk of one, or one decode
 * token.  Its block table must already cover those positions; the pass
 * writes their keys and values into the cache and returns logits for the
 * positions asked for.  A hybrid model's sequence also names its slot in
 * the state cache, which the pass continues (from zero at position 0).
 */
#ifndef CBLLM_FORWARD_H
#define CBLLM_FORWARD_H

#include "backend/backend.h"

typedef enum fwd_logits
{
	FWD_LOGITS_NONE = 0,		/* prefill chunk that does not end the prompt */
	FWD_LOGITS_LAST = 1,		/* the last new token only */
	FWD_LOGITS_ALL = 2			/* every new token */
} fwd_logits;

typedef struct fwd_seq
{
	const int32_t *tokens;		/* (n_tokens) new tokens */
	int			n_tokens;
	int			pos0;			/* position of tokens[0]; the cache holds [0, pos0) */
	const int32_t *block_table; /* blocks covering [0, pos0 + n_tokens) */
	fwd_logits	logits;
	uint8_t		rope_set;		/* its RoPE factor set (fwd_batch.rope_set): the one its cached
								 * positions were computed with */
	int32_t		state_slot;		/* a hybrid model's: its slot in the state cache, holding the
								 * state after position pos0 - 1 (none at pos0 0) */
} fwd_seq;

typedef struct cbllm_forward cbllm_forward;

typedef struct forward_params
{
	const cbllm_model *model;
	cbllm_backend *backend;
	kv_cache   *kv;				/* may be NULL until forward_set_kv */
	int			max_tokens;		/* most tokens in one step */
	int			max_seqs;		/* most sequences in one step */
	int			max_logit_rows; /* most logit rows in one step; 0: max_seqs */
} forward_params;

int			forward_create(const forward_params *p, cbllm_forward **out, cbllm_err *err);

/*
 * Run one step; its logits (*n_rows of them, in sequence order) stay in
 * backend memory for forward_logits or forward_sample.
 */
int			forward_run(cbllm_forward *f, const fwd_seq *seqs, int n_seqs, int *n_rows,
						cbllm_err *err);

/* The last step's logits (n_rows, vocab) on the host, valid until the next step. */
int			forward_logits(cbllm_forward *f, const float **logits, cbllm_err *err);

/* Whether the backend samples on the device (forward_sample). */
bool		forward_can_sample(const cbllm_forward *f);

/*
 * tokens[r] = a token drawn from the first n_ids ids of row r of the last
 * step's logits with p[r] (the ids of a padded vocabulary beyond them
 * never), within the constraint mask p[r].mask names among masks (n_masks
 * rows of (n_ids + 31) / 32 words, host memory), if any.
 */
int			forward_sample(cbllm_forward *f, int n_ids, const sampler_row *p,
						   const uint32_t *masks, int n_masks, int32_t *tokens, cbllm_err *err);

/* Attach the KV cache when forward_create was given none. */
void		forward_set_kv(cbllm_forward *f, kv_cache *kv);

/* Attach a hybrid model's state cache (kv/state_cache.h) before the first step. */
void		forward_set_state(cbllm_forward *f, state_cache *sc);

void		forward_free(cbllm_forward *f);

#endif
