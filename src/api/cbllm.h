/*
 * cbllm.h: the engine facade, the one interface the PostgreSQL worker, the
 * command-line tool and the tests drive.
 *
 *   cbllm_engine_create   load a model and size the KV cache from a params struct
 *   cbllm_engine_submit   queue a request (prompt text or token ids) and get its id
 *   cbllm_engine_step     one iteration over every active request
 *   cbllm_engine_take     a request's new tokens, new text and finish reason
 *   cbllm_engine_abort    drop a request and free what it holds
 *   cbllm_engine_stats    counters
 *   cbllm_engine_destroy
 *
 * Every function returns a cbllm_status (0 ok, negative error) and fills a
 * cbllm_err with a one-line message; none exits or aborts the process.
 * An engine is used from one thread at a time.
 */
#ifndef CBLLM_H
#define CBLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/request_kind.h"
#include "api/stats.h"
#include "base/util.h"

typedef struct cbllm_engine cbllm_engine;

typedef enum cbllm_preempt
{
	CBLLM_PREEMPT_AUTO = 0,		/* per victim: swap when copying is cheaper than recomputing */
	CBLLM_PREEMPT_RECOMPUTE,	/* drop the victim's KV and rebuild it by prefill */
	CBLLM_PREEMPT_SWAP			/* copy its blocks to host swap space and back */
} cbllm_preempt;

/* How requests share the engine's steps: the product, or one of two static-batching baselines. */
typedef enum cbllm_batching
{
	CBLLM_BATCH_CONTINUOUS = 0,	/* iteration-level: sequences join and leave at every step */
	CBLLM_BATCH_STATIC_ADMISSION,	/* a batch is admitted only when nothing runs; a sequence that
									 * finishes leaves at once */
	CBLLM_BATCH_STATIC_PADDED	/* as a padded generate() call: a batch admitted when nothing
								 * runs, each prompt computed for as many positions as the
								 * batch's longest, each sequence computed until the batch's
								 * last one ends, and every result delivered then */
} cbllm_batching;

/* "continuous", "static-admission", "static". */
const char *cbllm_batching_name(cbllm_batching b);

/* "auto", "recompute", "swap"; -1 for an unknown name. */
int			cbllm_preempt_mode_parse(const char *name);
const char *cbllm_preempt_mode_name(cbllm_preempt m);

/* A clock in seconds, monotonic, that the engine reads instead of its own (tests inject one). */
typedef double (*cbllm_clock) (void *arg);

#define CBLLM_PRIORITY_AGING_OFF (-1.0)	/* priority_aging: strict priority, no aging */
#define CBLLM_MAX_STEP_AUTO (-1.0)	/* max_step_ms: twice the decode step the engine measures */

typedef struct cbllm_engine_params
{
	const char *model_dir;		/* HuggingFace model directory */
	const char *device;			/* "cpu", "cuda" or "auto" (NULL: cpu) */
	const char *load_format;	/* "auto" (NULL: safetensors) or "dummy": random weights from config.json alone, for benchmarks */
	const char *weight_format;	/* "auto" (NULL): matrices as stored; "q8_0", "q4_k", ...: float
								 * matrices quantized at load (model.h's model_quantize) */
	const char *chat_template;	/* a Jinja chat template file used instead of the model's own (NULL: the
								 * model's); one that does not compile fails the engine's creation */
	double		gpu_memory_utilization;	/* cuda: fraction of the device's memory for weights, workspace and KV pool; 0: 0.9 */
	bool		no_cuda_graphs;	/* cuda: launch decode steps kernel by kernel instead of replaying graphs */
	const char *cpu_isa;		/* CPU kernel set: NULL/"auto", "avx512", "avx2", "generic" */
	int			n_threads;		/* compute threads; 0: one per online CPU */
	int			max_num_seqs;	/* most sequences in one step; 0: 64 */
	int			max_num_batched_tokens; /* most tokens in one step; 0: 2048 */
	int			max_model_len;	/* longest sequence (prompt + output); 0: the model's */
	int			block_size;		/* KV positions per block; 0: 16 */
	int			num_kv_blocks;	/* KV pool size in blocks; 0: from kv_cache_bytes */
	size_t		kv_cache_bytes; /* KV pool size in bytes; 0: room for max_num_seqs full sequences, at most 4 GiB */
	const char *kv_cache_dtype;	/* the KV cache's elements: "auto" (NULL; f16 on the cpu, bf16 on
								 * cuda), "f32" (the cpu: exact, twice the memory), "f16" or "bf16" */
	int			max_queued;		/* most requests waiting or running; 0: 4096 */
	cbllm_preempt preempt_mode;	/* when the KV pool runs out; default auto */
	int			num_swap_blocks;	/* host swap area in blocks; 0: from swap_space_bytes */
	size_t		swap_space_bytes;	/* host swap area in bytes; 0: a quarter of the KV pool; SIZE_MAX: none */
	bool		no_prefix_caching;	/* turn automatic prefix caching off */
	cbllm_batching batching;	/* continuous, or a static-batching baseline */
	double		max_step_ms;	/* stall-free prefill: while sequences decode, a step takes prompt
								 * tokens only up to this predicted duration (the engine measures
								 * its cost per prompt token and per decode step); 0: no limit but
								 * max_num_batched_tokens; CBLLM_MAX_STEP_AUTO (any negative):
								 * twice the measured decode step */
	double		priority_aging;	/* priority points a request gains per second since its submission;
								 * 0: 1 per second; CBLLM_PRIORITY_AGING_OFF (any negative): strict
								 * priority, a steady stream of higher priorities starves lower ones */
	cbllm_clock clock;			/* the clock of queue times and aging; NULL: CLOCK_MONOTONIC */
	void	   *clock_arg;		/* passed to clock */
} cbllm_engine_params;

typedef enum cbllm_finish
{
	CBLLM_FINISH_NONE = 0,		/* still running */
	CBLLM_FINISH_STOP,			/* EOS or a stop string */
	CBLLM_FINISH_LENGTH,		/* max_tokens or max_model_len reached */
	CBLLM_FINISH_ABORT,			/* aborted by the caller */
	CBLLM_FINISH_ERROR,			/* failed; see cbllm_output.error */
	CBLLM_FINISH_CONSTRAINT		/* the text completed its constraint and nothing can follow it
								 * (or max_tokens came with the text complete) */
} cbllm_finish;

const char *cbllm_finish_name(cbllm_finish f);

typedef struct cbllm_sampling
{
	float		temperature;	/* 0: greedy */
	float		top_p;			/* (0, 1] */
	int			top_k;			/* 0: off */
	bool		has_seed;
	uint64_t	seed;
	int			max_tokens;		/* >= 1 */
	int			n_stop;
	const char *stop[CBLLM_MAX_STOP];	/* stop strings (copied at submit) */
	bool		ignore_eos;
	int			priority;		/* higher runs first; aging adds priority_aging points per second
								 * since submission, so every request is eventually served */
	uint32_t	model_defaults;	/* CBLLM_DEFAULT_* bits: temperature, top_p or top_k left to the
								 * model's generation_config.json (used where it gives them) */
	const char *constraint;		/* a regex (regex.h) the output must fully match, compiled at
								 * submit; NULL: none.  The end-of-turn tokens are allowed exactly
								 * when the text matches; max_tokens with the text incomplete
								 * finishes LENGTH */
	size_t		constraint_len;
	/* what the logits go through before top_k and top_p (logits_process.h has the order): */
	float		min_p;			/* [0, 1]: drop tokens below min_p times the top one's
								 * probability; 0: off */
	float		repetition_penalty; /* [0, CBLLM_MAX_REPETITION_PENALTY] over prompt and output
									 * tokens; 0 or 1: off */
	float		frequency_penalty;	/* [-2, 2]: times each output token's count */
	float		presence_penalty;	/* [-2, 2]: once for each output token */
	int			n_bias;			/* [0, CBLLM_MAX_LOGIT_BIAS] */
	const int32_t *bias_ids;	/* (n_bias) token ids, copied at submit */
	const float *bias_values;	/* (n_bias) added to their logits, each in [-100, 100] */
	bool		logprobs;		/* report each generated token's log-probability (cbllm_logprob) */
	int			top_logprobs;	/* [0, CBLLM_MAX_TOP_LOGPROBS]: and that many most likely
								 * alternatives at each step */
} cbllm_sampling;

/*
 * One generated token's log-probability and the most likely tokens at its
 * step.  The distribution is the one after the request's penalties,
 * logit_bias and constraint mask (logits_process.h, steps 1-4), at
 * temperature 1 and before min_p, top_k and top_p: what the model with the
 * request's rules makes of the step, not how the sampler then narrowed it.
 * A token the constraint forbids has no probability and is never listed.
 */
typedef struct cbllm_logprob
{
	int32_t		id;				/* the generated token */
	float		logprob;		/* its natural log-probability (<= 0) */
	int32_t		n_top;			/* [0, top_logprobs]: fewer when fewer tokens are possible */
	int32_t		top_ids[CBLLM_MAX_TOP_LOGPROBS];	/* (n_top) most likely first; ties by id */
	float		top_logprobs[CBLLM_MAX_TOP_LOGPROBS];	/* (n_top) */
} cbllm_logprob;

/* Greedy, 16 tokens, no stop strings. */
cbllm_sampling cbllm_sampling_default(void);

typedef struct cbllm_request_input
{
	const char *text;			/* prompt text, or NULL to use ids */
	size_t		text_len;
	const int32_t *ids;			/* prompt token ids when text is NULL */
	int			n_ids;
	bool		add_bos;		/* text only: prepend BOS as the tokenizer config says */
	bool		split_reasoning;	/* a chat answer: its reasoning goes to cbllm_output.reasoning,
									 * apart from its content (text), by the format of the model's
									 * vocabulary (chat/reasoning.h: harmony channels or think
									 * blocks); stop strings apply to the content */
	uint64_t	cache_salt;		/* prefix-cache scope: see below; 0 is one scope like any other */
	uint64_t	tenant;			/* fair-share group: while requests of several tenants wait or
								 * run, each tenant gets an equal share of the running sequences
								 * and goes in turn for prompt work (scheduler.c, "Fair share");
								 * the PostgreSQL worker gives the role's OID; 0 is a tenant
								 * like any other */
	int64_t		share_prompt_with;	/* a live request of the same prompt (0: none): this one waits
									 * until that one has computed its prompt, then takes every
									 * full block of it from the prefix cache (shared, counted by
									 * reference) and computes only the positions of its last
									 * partial block: n completions of one prompt hold its KV
									 * once.  Needs the prefix cache (no_prefix_caching off) */
} cbllm_request_input;

/*
 * Prefix-cache scope.  Cached KV blocks are shared only between requests of
 * equal cache_salt: the salt seeds the chain of block hashes (it is the
 * first block's parent) and is stored with every cached block and compared
 * on every hit, so not even a hash collision lets a block cross salts.  Give
 * requests that must not observe each other's prompts different salts (for
 * the PostgreSQL worker: the role's OID, or the database's, or 0 for one
 * cluster-wide cache, as a setting chooses).  Within a salt a hit is
 * also verified token by token along the whole prefix, never trusted to the
 * hash alone.
 */

typedef enum cbllm_phase
{
	CBLLM_PHASE_QUEUED = 0,		/* waiting for its first admission */
	CBLLM_PHASE_PREFILL,		/* computing its prompt (or recomputing after preemption) */
	CBLLM_PHASE_DECODE,			/* generating */
	CBLLM_PHASE_PREEMPTED,		/* waiting again after preemption by recompute */
	CBLLM_PHASE_SWAPPED,		/* waiting with its KV in swap space */
	CBLLM_PHASE_FINISHED
} cbllm_phase;

const char *cbllm_phase_name(cbllm_phase p);

typedef struct cbllm_output
{
	const int32_t *tokens;		/* tokens generated since the last take */
	int			n_tokens;
	const cbllm_logprob *logprobs;	/* (n_logprobs) one per token of tokens when the request
									 * asked for logprobs; NULL otherwise */
	int			n_logprobs;
	const char *text;			/* text completed since the last take (with split_reasoning: the
								 * content) */
	size_t		text_len;
	const char *reasoning;		/* split_reasoning: reasoning completed since the last take */
	size_t		reasoning_len;
	cbllm_finish finish;		/* NONE while running */
	int			n_prompt;		/* prompt tokens */
	int			n_generated;	/* tokens generated so far */
	cbllm_phase phase;			/* where the request is now */
	double		queue_seconds;	/* submit to first admission; -1 while still queued */
	int			n_preemptions;	/* times it was preempted (recompute or swap) */
	const char *error;			/* message when finish is ERROR */
} cbllm_output;


int			cbllm_engine_create(const cbllm_engine_params *p, cbllm_engine **out, cbllm_err *err);
void		cbllm_engine_destroy(cbllm_engine *e);

int			cbllm_engine_submit(cbllm_engine *e, const cbllm_request_input *in,
								const cbllm_sampling *sp, int64_t *id, cbllm_err *err);

/* One iteration; *n_active is the number of requests still waiting or running. */
int			cbllm_engine_step(cbllm_engine *e, int *n_active, cbllm_err *err);

/*
 * What request id produced since the last take.  Pointers stay valid until
 * the next call on the engine.  A finished request is forgotten once taken.
 */
int			cbllm_engine_take(cbllm_engine *e, int64_t id, cbllm_output *out, cbllm_err *err);

/* Abort a request: it finishes with CBLLM_FINISH_ABORT and frees its KV blocks now. */
int			cbllm_engine_abort(cbllm_engine *e, int64_t id, cbllm_err *err);

void		cbllm_engine_stats(const cbllm_engine *e, cbllm_stats *st);

/* Logits (n, vocab) of every position of a prompt; for tests and tools. */
int			cbllm_engine_prompt_logits(cbllm_engine *e, const int32_t *ids, int n, float *out,
									   cbllm_err *err);

/* Model facts for callers. */
typedef struct cbllm_engine_info
{
	int			vocab_size;
	int			max_model_len;
	int			n_layers;
	int			hidden;
	size_t		weight_bytes;	/* matrices as stored */
	size_t		step_weight_bytes;	/* bytes of the matrices a forward step reads (layers and lm_head) */
	int64_t		matmul_params;	/* their elements: a token costs 2 * matmul_params FLOPs in them */
	const char *weight_types;	/* the tensors by weight type, "F32 7, Q8_0 14" (model_weight_types) */
	double		quantize_seconds;	/* spent quantizing the weights at load (weight_format); 0: none */
	int			block_size;
	int			num_kv_blocks;
	size_t		kv_bytes_per_token;	/* K and V of one position over all layers, as the backend stores them */
	size_t		state_bytes_per_seq;	/* a hybrid model's linear-attention state of one sequence
										 * (max_num_seqs of them are allocated); 0 for others */
	int			n_linear_layers;	/* a hybrid model's linear-attention layers; 0 for others */
	bool		prefix_caching; /* automatic prefix caching is on (off when asked, and always
								 * for hybrid models: a cached prefix has no state to resume) */
	int			n_threads;
	const char *device;
	const char *cpu_isa;
	int32_t		eos_id;
	int32_t		bos_id;
} cbllm_engine_info;

void		cbllm_engine_get_info(const cbllm_engine *e, cbllm_engine_info *info);

/* The engine's tokenizer, for tokenize/detokenize helpers. */
struct cbllm_tokenizer;
const struct cbllm_tokenizer *cbllm_engine_tokenizer(const cbllm_engine *e);

/*
 * The ids of a prompt text as the engine reads it (*ids malloc'd): special
 * tokens' text recognised; with add_bos the tokenizer's BOS, once (a text
 * that starts with the BOS token's own text gets no second one).
 */
int			cbllm_engine_tokenize(const cbllm_engine *e, const char *text, size_t len, bool add_bos,
								  int32_t **ids, int *n, cbllm_err *err);

/*
 * Render a chat payload (CBLLM_CHAT_PAYLOAD, request_kind.h: the messages'
 * JSON, a NUL, the template variables' JSON object) with the model's chat
 * template, appending the prompt to out.  add_generation_prompt is true
 * unless the variables say otherwise.  CBLLM_ERR_UNSUPPORTED when the model
 * has no usable template (the message says why), CBLLM_ERR_INVALID for bad
 * messages or a template that refuses them (the message names the element
 * or the template's line).  Safe from any one thread at a time per call;
 * calls do not change the engine.
 */
int			cbllm_engine_render_chat(const cbllm_engine *e, const char *payload, size_t len,
									 cbllm_buf *out, cbllm_err *err);

#endif
