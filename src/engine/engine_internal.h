/*
 * engine_internal.h: the engine's private structure, shared by engine.c
 * (the facade) and request.c (a request's tokens and text).  The request
 * itself and its queues are in request.h, the scheduler that orders them in
 * scheduler.h, the block manager in block_manager.h: none of those need an
 * engine.
 */
#ifndef CBLLM_ENGINE_INTERNAL_H
#define CBLLM_ENGINE_INTERNAL_H

#include "api/cbllm.h"
#include "backend/backend.h"
#include "backend/backend_registry.h"
#include "base/threadpool.h"
#include "chat/reasoning.h"
#include "constrain/constraint.h"
#include "engine/forward.h"
#include "kv/block_manager.h"
#include "kv/kv_cache.h"
#include "model/generation_config.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sched/request.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

/*
 * The engine's part of a request (cbllm_request.eng): what the scheduler
 * never reads.  Made and freed with the request (engine_request.c).
 */
typedef struct engine_request
{
	cbllm_sampling sp;			/* stop[] point into stop_strings */
	char	   *stop_strings[CBLLM_MAX_STOP];
	size_t		max_stop_len;
	cbllm_rng	rng;
	tokenizer_stream detok;
	cbllm_buf	text;			/* generated text so far */
	size_t		text_ready;		/* text[0, text_ready) can no longer change */
	size_t		text_taken;		/* text[0, text_taken) was returned by take */
	bool		split;			/* a chat answer split into reasoning and content (text) */
	reasoning_split splitter;	/* split: where the answer is */
	cbllm_buf	reasoning;		/* split: the reasoning so far (none is held back) */
	size_t		reasoning_taken;	/* reasoning[0, reasoning_taken) was returned by take */
	cbllm_buf	piece;			/* split: one token's text on its way to its part */
	int			gen_taken;		/* generated tokens returned by take */
	cbllm_finish finish;
	char		error[CBLLM_ERR_MSG_LEN];
	/* constrained decoding: */
	struct engine_constraint *cons; /* the compiled constraint it holds a reference to; NULL: none */
	int32_t		cstate;			/* its automaton's state after the text so far */
	bool		cons_dead;		/* the last sampling found no token to continue with */
	bool		controlled;		/* a constraint, logits controls (logits_process.h) or logprobs:
								 * sampled by engine_sample_controlled on the host */
	bool		host_only;		/* logits controls or logprobs: never sampled on a device (a
								 * constraint alone is: its mask goes with the row) */
	cbllm_logprob lp_next;		/* sp.logprobs: the step's record, written by the sampling (on a
								 * compute thread) and kept by request_append_token */
	cbllm_logprob *lp;			/* (cap_lp) sp.logprobs: one record per generated token */
	int			cap_lp;
	int32_t    *bias_ids;		/* (sp.n_bias) its logit_bias, owned (sp points here) */
	float	   *bias_values;	/* (sp.n_bias) */
	/* a hybrid model's linear-attention state (engine_state.c): */
	int32_t		state_slot;		/* its slot in e->states while it runs; -1: none */
	float	   *state_saved;	/* its state copied out when it was preempted by swap; NULL:
								 * none (it starts from position 0 or holds a slot) */
} engine_request;

#define ENGINE_HASH_BUCKETS 4096
#define ENGINE_MAX_CONSTRAINTS 64	/* compiled constraints kept; the least recently used unheld
									 * one goes first */

/* A compiled constraint the engine keeps (engine_constraint.c). */
typedef struct engine_constraint
{
	constraint *c;
	int			refs;			/* requests holding it */
	int64_t		last_used;		/* constraint_clock when last acquired */
	struct engine_constraint *next;
} engine_constraint;

struct cbllm_engine
{
	cbllm_engine_params params; /* limits resolved to their final values */
	const backend_reg *reg;	/* the registry entry of the backend that runs the steps */
	backend_kv_layout kv_layout;	/* how that backend stores a KV block */
	bool		kv_size_given;	/* the caller sized the KV pool (num_kv_blocks or kv_cache_bytes) */
	bool		lost;			/* the device failed for good: every step and submit fails */
	char		lost_msg[CBLLM_ERR_MSG_LEN];
	cbllm_model *model;
	char		weight_types[MODEL_WEIGHT_TYPES_LEN];	/* model_weight_types of model */
	cbllm_tokenizer *tok;
	cbllm_threadpool *pool;
	cbllm_backend *be;
	block_manager *bm;			/* who holds which KV and swap block, and the prefix cache */
	kv_cache   *kv;				/* K and V on the host (only the geometry for a device backend) */
	state_cache *states;		/* a hybrid model's linear-attention states; NULL otherwise */
	int64_t		state_saved_bytes;	/* host memory holding swapped-out requests' states */
	swap_space *swap;			/* the host swap area's memory */
	scheduler	sched;			/* over waiting, running and bm */
	cbllm_forward *fwd;
	cbllm_sampler **samplers;	/* (n_samplers) one per compute thread */
	int			n_samplers;
	int			n_sample_ids;	/* ids sampling may draw: the tokenizer's, when the model's
								 * vocab_size pads beyond them (ids without a token) */
	cbllm_request *hash[ENGINE_HASH_BUCKETS];	/* every live request by id */
	req_list	waiting;		/* by rank; a preempted request keeps its place */
	req_list	running;		/* by rank: the tail is the first preemption victim */
	int64_t		next_id;
	int64_t		n_live;			/* requests waiting, running or finished-but-not-taken */
	cbllm_request *taken;		/* a finished request returned by take, freed on the next call */
	fwd_seq    *step_seqs;		/* (max_num_seqs) the plan's sequences, for the forward pass */
	int32_t    *step_tokens;	/* (max_num_seqs) token sampled for each step sequence */
	sched_result *step_results; /* (max_num_seqs) what each step sequence's token decided */
	int32_t		eos_id;			/* the tokenizer's eos, else config.json's first; -1 when none */
	cbllm_generation_config gen;	/* every end-of-turn id (eos_id among them) and the
									 * sampling defaults of generation_config.json */
	struct cbllm_chat *chat;	/* the model's chat template; NULL when it has none or it failed */
	reasoning_markers reasoning;	/* the vocabulary's reasoning format and its marker ids */
	char		chat_error[CBLLM_ERR_MSG_LEN];	/* why chat is NULL ("" when the model has none) */
	cbllm_stats stats;
	/* constrained decoding (engine_constraint.c), made at the first constrained request: */
	constraint_vocab *cvocab;	/* the byte trie of the tokenizer's texts over n_sample_ids */
	engine_constraint *constraints; /* compiled constraints, newest first */
	int			n_constraints;
	int64_t		constraint_clock;	/* acquisitions so far */
	float	  **c_logits;		/* (n_samplers) (n_sample_ids) a thread's processed logits */
	uint32_t  **c_mask;			/* (n_samplers) (mask words) a thread's budgeted mask */
	uint32_t  **c_seen;			/* (n_samplers) (n_sample_ids) a thread's penalty marks */
	uint32_t   *dev_masks;		/* (max_num_seqs, mask words) a step's constraint masks for a
								 * backend that samples on its device; made on first use */
};

/*
 * engine_chat.c: load the chat template: the file given (template_file; a
 * failure is the engine's), else the model's own (a failure is kept for chat
 * requests, and the model still serves plain prompts).
 */
int			engine_chat_load(cbllm_engine *e, const char *dir, const char *template_file, cbllm_err *err);
/* the same from texts in memory (a GGUF file's template, NULL when none); name says where from */
int			engine_chat_load_texts(cbllm_engine *e, const char *config, const char *jinja,
								   size_t jinja_len, const char *name, const char *template_file,
								   cbllm_err *err);
void		engine_chat_free(cbllm_engine *e);

/*
 * engine_gguf.c: a GGUF model's tokenizer (tokenizer.ggml.*), stop ids and
 * chat template (tokenizer.chat_template), from its file alone.
 */
int			engine_gguf_load_text(cbllm_engine *e, const char *template_file, cbllm_err *err);

/* request.c */
/* The controls r samples with, as the host sampler and a device's read them. */
sampler_params request_sampler_params(const cbllm_request *r);

/* Free r, its engine part first (request_free frees the scheduler's). */
void		engine_request_free(cbllm_request *r);

int			request_create(cbllm_engine *e, const cbllm_request_input *in,
						   const cbllm_sampling *sp, cbllm_request **out, cbllm_err *err);
int			request_append_token(cbllm_engine *e, cbllm_request *r, int32_t token, cbllm_finish *why);
/* A token a lingering request decoded past its end (padded static batching); never output. */
int			request_append_padding(cbllm_engine *e, cbllm_request *r, int32_t token, cbllm_finish *why);
void		request_finish(cbllm_engine *e, cbllm_request *r, cbllm_finish why, const char *error);

/* engine_constraint.c */
int			engine_constraint_acquire(cbllm_engine *e, const char *text, size_t len,
									  engine_constraint **out, cbllm_err *err);
void		engine_constraint_release(cbllm_engine *e, engine_constraint *x);
void		engine_constraints_free(cbllm_engine *e);

/* engine_sample.c */
int			engine_sample_scratch(cbllm_engine *e, cbllm_err *err);
bool		engine_constraint_mask(cbllm_engine *e, cbllm_request *r, uint32_t *scratch,
								   constraint_step *st);
void		engine_sample_scratch_free(cbllm_engine *e);
int32_t		engine_sample_controlled(cbllm_engine *e, cbllm_request *r, const float *logits,
									 int thread);

/*
 * engine_state.c: a hybrid model's linear-attention states.  A request
 * holds a slot of e->states while it runs: taken when it is put in a step
 * (restoring the copy a swap preemption saved), given back when it is
 * preempted (saved first when its KV went to the swap area) or finishes.
 */
int			engine_state_create(cbllm_engine *e, cbllm_err *err);
void		engine_state_free(cbllm_engine *e);
/* After the plan's swaps ran: save and release the preempted requests' states. */
void		engine_state_preempted(cbllm_engine *e, const sched_plan *plan);
/* Give each sequence of the plan its slot; an error fails the step. */
int			engine_state_assign(cbllm_engine *e, const sched_plan *plan, cbllm_err *err);
/* r ends or is freed: its slot and saved copy go. */
void		engine_state_release(cbllm_engine *e, cbllm_request *r);
/* Bytes of one sequence's state; 0 without linear layers. */
size_t		engine_state_bytes_per_seq(const cbllm_engine *e);

/* engine.c: the engine's clock in seconds (the injected one, else CLOCK_MONOTONIC) */
double		engine_now(const cbllm_engine *e);

/* Free the request the last take returned (engine.c). */
void		engine_drop_taken(cbllm_engine *e);

/*
 * engine.c: bytes of K and V of n_positions positions over all layers, as
 * the backend stores them (its kv_layout); every pool, swap area and copy
 * rate is sized with it.
 */
size_t		engine_kv_bytes(const cbllm_engine *e, int n_positions);

/* The length past which a sequence takes its RoPE's long factor set (rope.h); 0: no such RoPE. */
int			engine_long_rope_from(const cbllm_engine *e);

#endif
