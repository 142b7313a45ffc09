/*
 * engine_internal.h: the engine's private structures, shared by engine.c
 * (the facade), request.c (a request's tokens and text) and scheduler.c
 * (which requests run in a step).
 */
#ifndef CBLLM_ENGINE_INTERNAL_H
#define CBLLM_ENGINE_INTERNAL_H

#include "backend.h"
#include "backend_registry.h"
#include "cbllm.h"
#include "forward.h"
#include "kv_cache.h"
#include "model.h"
#include "sampler.h"
#include "threadpool.h"
#include "tokenizer.h"

typedef enum req_state
{
	REQ_WAITING,				/* queued, holds no KV blocks */
	REQ_RUNNING,				/* admitted: prefilling or decoding, holds blocks */
	REQ_FINISHED				/* done; waits for its last take */
} req_state;

typedef struct cbllm_request
{
	int64_t		id;
	req_state	state;
	int64_t		arrival;		/* submission order */
	double		t_submit;		/* engine_now() at submit */
	double		t_admitted;		/* engine_now() at first admission */
	bool		admitted;		/* admitted at least once (t_admitted is set) */
	int			n_preemptions;	/* times it was preempted */
	double		rank;			/* priority - priority_aging * t_submit: its queue order for life */
	uint64_t	cache_salt;		/* prefix-cache scope: blocks are shared only within one salt */
	int32_t    *tokens;			/* (cap_tokens) prompt, then generated tokens */
	int			n_tokens;
	int			cap_tokens;
	int			n_prompt;
	int			n_computed;		/* positions [0, n_computed) have KV in the cache */
	int32_t    *blocks;			/* (cap_blocks) block table; -1 for a block dropped behind a sliding window */
	int			n_blocks;
	int			n_dropped;		/* leading blocks dropped: every position in them is behind the window */
	int			cap_blocks;
	cbllm_sampling sp;			/* stop[] point into stop_strings */
	char	   *stop_strings[CBLLM_MAX_STOP];
	size_t		max_stop_len;
	cbllm_rng	rng;
	tokenizer_stream detok;
	cbllm_buf	text;			/* generated text so far */
	size_t		text_ready;		/* text[0, text_ready) can no longer change */
	size_t		text_taken;		/* text[0, text_taken) was returned by take */
	int			gen_taken;		/* generated tokens returned by take */
	cbllm_finish finish;
	char		error[CBLLM_ERR_MSG_LEN];
	int			step_tokens;	/* tokens scheduled in the current step */
	bool		swapped;		/* its KV is in swap space (swap_ids), n_computed kept */
	int32_t    *swap_ids;		/* (n_swap) swap blocks, in block-table order */
	int			n_swap;
	uint64_t   *hashes;			/* (cap_blocks) prefix hashes of its full blocks */
	uint64_t   *serials;		/* (cap_blocks) serial of the cached registration holding each hashed
								 * block's content; 0 when none */
	int			n_hashed;		/* full blocks hashed (and offered to the cache) */
	struct cbllm_request *prev; /* in the waiting or running list */
	struct cbllm_request *next;
	struct cbllm_request *hnext;	/* in the id hash chain */
} cbllm_request;

typedef struct req_list
{
	cbllm_request *head;
	cbllm_request *tail;
	int			n;
} req_list;

#define ENGINE_HASH_BUCKETS 4096

struct cbllm_engine
{
	cbllm_engine_params params; /* limits resolved to their final values */
	const backend_reg *reg;	/* the registry entry of the backend that runs the steps */
	backend_kv_layout kv_layout;	/* how that backend stores a KV block */
	bool		kv_size_given;	/* the caller sized the KV pool (num_kv_blocks or kv_cache_bytes) */
	bool		lost;			/* the device failed for good: every step and submit fails */
	char		lost_msg[CBLLM_ERR_MSG_LEN];
	cbllm_model *model;
	cbllm_tokenizer *tok;
	cbllm_threadpool *pool;
	cbllm_backend *be;
	kv_cache   *kv;
	swap_space *swap;
	cbllm_forward *fwd;
	cbllm_sampler **samplers;	/* (n_samplers) one per compute thread */
	int			n_samplers;
	cbllm_request *hash[ENGINE_HASH_BUCKETS];	/* every live request by id */
	req_list	waiting;		/* by rank; a preempted request keeps its place */
	req_list	running;		/* by rank: the tail is the first preemption victim */
	int64_t		next_id;
	int64_t		n_live;			/* requests waiting, running or finished-but-not-taken */
	cbllm_request *taken;		/* a finished request returned by take, freed on the next call */
	fwd_seq    *step_seqs;		/* (max_num_seqs) */
	cbllm_request **step_reqs;	/* (max_num_seqs) */
	int32_t    *step_tokens;	/* (max_num_seqs) token sampled for each step sequence */
	int32_t		eos_id;			/* -1 when the model has none */
	int64_t		static_batch_last;	/* static batching: newest arrival of the batch */
	double		sec_per_prefill_token;	/* measured, for the auto preemption choice */
	double		swap_bytes_per_sec; /* measured, for the auto preemption choice */
	cbllm_stats stats;
};

/* req_list operations; lists are kept in (rank desc, arrival asc) order */
void		req_list_insert(req_list *l, cbllm_request *r);
void		req_list_remove(req_list *l, cbllm_request *r);

/* request.c */
int			request_create(cbllm_engine *e, const cbllm_request_input *in,
						   const cbllm_sampling *sp, cbllm_request **out, cbllm_err *err);
void		request_free(cbllm_request *r);
int			request_reserve_table(cbllm_request *r, int n);
int			request_ensure_blocks(cbllm_engine *e, cbllm_request *r, int n_positions);
void		request_release_blocks(cbllm_engine *e, cbllm_request *r);
void		request_release_swap(cbllm_engine *e, cbllm_request *r);
void		request_block_key(const cbllm_engine *e, const cbllm_request *r, int b, kv_block_key *key);
void		request_register_blocks(cbllm_engine *e, cbllm_request *r);
void		request_drop_window_blocks(cbllm_engine *e, cbllm_request *r);
int			request_append_token(cbllm_engine *e, cbllm_request *r, int32_t token);
void		request_finish(cbllm_engine *e, cbllm_request *r, cbllm_finish why, const char *error);

/* engine.c: the engine's clock in seconds (the injected one, else CLOCK_MONOTONIC) */
double		engine_now(const cbllm_engine *e);

/*
 * engine.c: bytes of K and V of n_positions positions over all layers, as
 * the backend stores them (its kv_layout); every pool, swap area and copy
 * rate is sized with it.
 */
size_t		engine_kv_bytes(const cbllm_engine *e, int n_positions);

/* scheduler.c: choose the step's sequences; returns how many */
int			scheduler_plan(cbllm_engine *e);

#endif
