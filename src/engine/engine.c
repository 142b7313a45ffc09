/*
 * engine.c: the engine facade: create, submit, take, abort, stats, destroy.
 * A step (engine_step.c) asks the scheduler for a plan, executes it and
 * gives the results to the scheduler's update.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_internal.h"

#define DEFAULT_MAX_SEQS 64
#define DEFAULT_MAX_BATCHED 2048
#define DEFAULT_BLOCK_SIZE 16
#define DEFAULT_MAX_QUEUED 4096
#define DEFAULT_SWAP_CAP_BYTES ((size_t) 4 << 30)
#define DEFAULT_GPU_MEMORY_UTILIZATION 0.9

/*
 * Priority aging, in priority points per second since submission.  One
 * point per second makes a priority point worth one second of queueing: a
 * request ten points above another overtakes it only if it arrived less
 * than ten seconds later.  Interactive requests run for seconds, so small
 * priority gaps still order them as the caller asked, while the widest gap
 * the SQL interface allows (-1000 to 1000) bounds a request's extra wait
 * behind a flood of fresher higher-priority work to about half an hour.
 */
#define DEFAULT_PRIORITY_AGING 1.0

/* A name for a finish reason. */
const char *
cbllm_finish_name(cbllm_finish f)
{
	switch (f)
	{
		case CBLLM_FINISH_NONE:
			return "running";
		case CBLLM_FINISH_STOP:
			return "stop";
		case CBLLM_FINISH_LENGTH:
			return "length";
		case CBLLM_FINISH_ABORT:
			return "abort";
		case CBLLM_FINISH_ERROR:
			return "error";
		case CBLLM_FINISH_CONSTRAINT:
			return "constraint";
	}
	return "?";
}

/* Parse a preemption mode name. */
int
cbllm_preempt_mode_parse(const char *name)
{
	if (name == NULL || strcmp(name, "auto") == 0)
		return CBLLM_PREEMPT_AUTO;
	if (strcmp(name, "recompute") == 0)
		return CBLLM_PREEMPT_RECOMPUTE;
	if (strcmp(name, "swap") == 0)
		return CBLLM_PREEMPT_SWAP;
	return -1;
}

/* The name of a preemption mode. */
const char *
cbllm_batching_name(cbllm_batching b)
{
	return b == CBLLM_BATCH_STATIC_ADMISSION ? "static-admission" :
		b == CBLLM_BATCH_STATIC_PADDED ? "static" : "continuous";
}

const char *
cbllm_preempt_mode_name(cbllm_preempt m)
{
	return m == CBLLM_PREEMPT_RECOMPUTE ? "recompute" : m == CBLLM_PREEMPT_SWAP ? "swap" : "auto";
}

/* Greedy decoding of up to 16 tokens. */
cbllm_sampling
cbllm_sampling_default(void)
{
	cbllm_sampling s;

	memset(&s, 0, sizeof(s));
	s.top_p = 1.0f;
	s.max_tokens = 16;
	return s;
}

/*
 * Resolve defaults and check the limits against the model; a KV size given
 * in bytes becomes blocks of the backend's layout.  With no size given the
 * backend sizes the pool once it exists (SizeKvPool).
 */
static int
ResolveParams(cbllm_engine *e, const cbllm_engine_params *in, cbllm_err *err)
{
	cbllm_engine_params *p = &e->params;
	const cbllm_model_config *c = &e->model->cfg;
	size_t		block_bytes;
	int			rc;

	*p = *in;
	p->max_num_seqs = p->max_num_seqs > 0 ? p->max_num_seqs : DEFAULT_MAX_SEQS;
	p->max_num_batched_tokens = p->max_num_batched_tokens > 0 ? p->max_num_batched_tokens :
		DEFAULT_MAX_BATCHED;
	p->block_size = p->block_size > 0 ? p->block_size : DEFAULT_BLOCK_SIZE;
	p->max_queued = p->max_queued > 0 ? p->max_queued : DEFAULT_MAX_QUEUED;
	if (!isfinite(p->priority_aging))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "priority_aging must be a finite number, not %g",
						  p->priority_aging);
	p->priority_aging = p->priority_aging == 0 ? DEFAULT_PRIORITY_AGING :
		p->priority_aging < 0 ? 0 : p->priority_aging;	/* resolved: 0 is off */
	if (!isfinite(p->max_step_ms))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "max_step_ms must be a finite number, not %g",
						  p->max_step_ms);
	p->max_step_ms = p->max_step_ms < 0 ? CBLLM_MAX_STEP_AUTO : p->max_step_ms;
	if (p->n_threads <= 0)
		p->n_threads = (int) sysconf(_SC_NPROCESSORS_ONLN);
	if (p->n_threads <= 0)
		p->n_threads = 1;
	if (p->max_model_len <= 0)
		p->max_model_len = c->max_pos;
	if (p->max_model_len > c->max_pos)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "max_model_len %d exceeds the model's max_position_embeddings %d",
						  p->max_model_len, c->max_pos);
	if (p->max_num_seqs > p->max_num_batched_tokens)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "max_num_seqs %d exceeds max_num_batched_tokens %d",
						  p->max_num_seqs, p->max_num_batched_tokens);
	if (p->block_size > 1024)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "block_size %d is above 1024", p->block_size);
	if (p->gpu_memory_utilization == 0)
		p->gpu_memory_utilization = DEFAULT_GPU_MEMORY_UTILIZATION;
	if (!(p->gpu_memory_utilization > 0 && p->gpu_memory_utilization <= 1))
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "gpu_memory_utilization %g is not in (0, 1]", p->gpu_memory_utilization);
	if (c->n_linear_layers > 0)
	{
		/* a state sums up every position before it: a cached prefix has none to resume (state_cache.h) */
		p->no_prefix_caching = true;
		if (p->batching == CBLLM_BATCH_STATIC_PADDED)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
							  "padded static batching recomputes finished positions, which a model with linear-attention layers (%s) cannot do without corrupting its state; use continuous or static-admission batching",
							  c->arch);
	}
	if ((rc = e->reg->kv_layout(c, p->block_size, p->kv_cache_dtype, &e->kv_layout, err)))
		return rc;
	block_bytes = e->kv_layout.block_bytes;
	e->kv_size_given = in->num_kv_blocks > 0 || in->kv_cache_bytes > 0;
	if (p->num_kv_blocks <= 0 && p->kv_cache_bytes > 0)
	{
		p->num_kv_blocks = (int) (p->kv_cache_bytes / block_bytes);
		if (p->num_kv_blocks < 1)
			return cbllm_fail(err, CBLLM_ERR_INVALID,
							  "the KV cache of %zu bytes holds no block of %zu bytes",
							  p->kv_cache_bytes, block_bytes);
	}
	return CBLLM_OK;
}

/* The engine's clock: the caller's when given, else CLOCK_MONOTONIC. */
double
engine_now(const cbllm_engine *e)
{
	return e->params.clock != NULL ? e->params.clock(e->params.clock_arg) : cbllm_now();
}

/* Bytes of K and V of n positions over all layers, as the backend's KV layout stores them. */
size_t
engine_kv_bytes(const cbllm_engine *e, int n_positions)
{
	return e->kv_layout.block_bytes / (size_t) e->params.block_size * (size_t) n_positions;
}

/* Once the pool size is known: its bytes and the swap area (default a quarter of it, at most 4 GiB). */
static int
ResolveSwap(cbllm_engine *e, cbllm_err *err)
{
	cbllm_engine_params *p = &e->params;
	size_t		dev_block_bytes = engine_kv_bytes(e, p->block_size);

	p->kv_cache_bytes = (size_t) p->num_kv_blocks * dev_block_bytes;
	if (p->preempt_mode > CBLLM_PREEMPT_SWAP)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "unknown preemption mode %d", p->preempt_mode);
	if (p->num_swap_blocks <= 0)
	{
		if (p->swap_space_bytes == SIZE_MAX)
			p->num_swap_blocks = 0;
		else if (p->swap_space_bytes > 0)
			p->num_swap_blocks = (int) (p->swap_space_bytes / dev_block_bytes);
		else
		{
			p->num_swap_blocks = p->num_kv_blocks / 4;
			if ((size_t) p->num_swap_blocks * dev_block_bytes > DEFAULT_SWAP_CAP_BYTES)
				p->num_swap_blocks = (int) (DEFAULT_SWAP_CAP_BYTES / dev_block_bytes);
		}
	}
	p->swap_space_bytes = (size_t) p->num_swap_blocks * dev_block_bytes;
	return CBLLM_OK;
}

/*
 * One sampler scratch per compute thread, over the ids that are both a token
 * and a row of the embeddings.  A checkpoint whose vocab_size pads the
 * embeddings beyond the tokenizer's ids (Qwen, Phi-3) has rows no token
 * stands for; one whose tokenizer has ids past the rows (Gemma-3's
 * <image_soft_token> = 262144 over 262144 rows, which transformers, vLLM and
 * llama.cpp load) has tokens with no logit.  Neither kind is ever drawn, and
 * a prompt holding the second is refused when submitted (request.c).
 */
static int
CreateSamplers(cbllm_engine *e, cbllm_err *err)
{
	int			n = threadpool_size(e->pool);
	int			rc;

	e->n_sample_ids = tokenizer_vocab_size(e->tok);
	if (e->n_sample_ids > e->model->cfg.vocab_size)
		e->n_sample_ids = e->model->cfg.vocab_size;

	e->samplers = calloc(n, sizeof(cbllm_sampler *));
	if (e->samplers == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	e->n_samplers = n;
	for (int i = 0; i < n; i++)
		if ((rc = sampler_create(e->n_sample_ids, &e->samplers[i], err)) != CBLLM_OK)
			return rc;
	return CBLLM_OK;
}

/* Fail for a matrix the engine's backend cannot run in its stored type. */
static int
CheckWeightType(void *arg, const model_tensor *mt, cbllm_err *err)
{
	const cbllm_engine *e = arg;

	if (mt->matrix != NULL && !e->reg->supports_weight(mt->matrix->dtype))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "the %s backend does not run %s weights",
						  e->reg->name, cbllm_dtype_name(mt->matrix->dtype));
	return CBLLM_OK;
}

/* Whether the chosen backend runs every matrix of the model in its stored type. */
static int
CheckWeightTypes(const cbllm_engine *e, cbllm_err *err)
{
	return model_visit(e->model, CheckWeightType, (void *) e, err);
}

/*
 * The KV pool in blocks: as given, else as many as the backend fits in the
 * memory budget (CBLLM_ERR_KV_BUDGET when none fit); a backend that keeps K
 * and V itself allocates them.  A pool that cannot be allocated fails with
 * CBLLM_ERR_KV_SIZE when its size was given, else CBLLM_ERR_KV_BUDGET.
 */
static int
SizeKvPool(cbllm_engine *e, cbllm_err *err)
{
	cbllm_engine_params *p = &e->params;
	backend_kv_budget b = {p->gpu_memory_utilization, p->max_num_seqs, p->block_size,
		e->states != NULL && e->states->conv != NULL ?
	engine_state_bytes_per_seq(e) * (size_t) e->states->p.n_slots : 0};
	int			rc;

	if (p->num_kv_blocks <= 0 && (rc = e->be->kv_blocks(e->be, &b, &p->num_kv_blocks, err)))
		return rc;
	if (e->be->alloc_kv != NULL && (rc = e->be->alloc_kv(e->be, p->num_kv_blocks, err)))
		return rc != CBLLM_ERR_NOMEM ? rc : e->kv_size_given ? CBLLM_ERR_KV_SIZE :
			CBLLM_ERR_KV_BUDGET;
	return CBLLM_OK;
}

/* The block manager over the KV pool and the swap area, and the scheduler over it and the queues. */
static int
CreateScheduler(cbllm_engine *e, cbllm_err *err)
{
	const cbllm_engine_params *p = &e->params;
	bm_params	bp = {p->num_kv_blocks, p->block_size, p->num_swap_blocks,
	model_kv_drop_window(&e->model->cfg), p->no_prefix_caching};
	sched_params sp = {&e->waiting, &e->running, NULL,
	{p->max_num_seqs, p->max_num_batched_tokens, p->preempt_mode, p->batching,
	engine_kv_bytes(e, p->block_size), p->max_step_ms < 0 ? SCHED_STEP_AUTO : p->max_step_ms / 1e3,
	engine_long_rope_from(e)}};
	int			rc;

	if ((rc = bm_create(&bp, &e->bm, err)) != CBLLM_OK)
		return rc;
	sp.bm = e->bm;
	return scheduler_init(&e->sched, &sp, err);
}

/* Create the compute parts: pool, backend, forward workspace, cache, swap area, samplers. */
static int
CreateCompute(cbllm_engine *e, cbllm_err *err)
{
	cbllm_engine_params *p = &e->params;
	const cbllm_model_config *c = &e->model->cfg;
	backend_params bp = {e->model, NULL, p->cpu_isa, p->max_num_batched_tokens, p->max_num_seqs,
	p->max_model_len, p->block_size, p->no_cuda_graphs, e->kv_layout.dtype};
	forward_params fp = {e->model, NULL, NULL, p->max_num_batched_tokens, p->max_num_seqs,
	p->max_num_seqs};
	kv_cache_params kp;
	int32_t		kv_rows[CBLLM_MAX_LAYERS];
	int			rc;

	if ((rc = threadpool_create(p->n_threads, &e->pool, err)))
		return rc;
	bp.pool = e->pool;
	if ((rc = e->reg->create(&bp, &e->be, err)) ||
		(e->be->pack_weights != NULL && (rc = e->be->pack_weights(e->be, e->model, err))))
		return rc;
	fp.backend = e->be;
	/* the workspace and the linear-attention states first: a device backend sizes the pool from what they leave */
	if ((rc = forward_create(&fp, &e->fwd, err)) || (rc = engine_state_create(e, err)) ||
		(rc = SizeKvPool(e, err)))
		return rc;
	kp.n_blocks = p->num_kv_blocks;
	kp.block_size = p->block_size;
	kp.n_layers = model_kv_layers(c);
	kp.layer_map = c->kv_layer;
	kp.n_kv_heads = c->n_kv_heads;
	kp.head_dim = c->head_dim;
	model_kv_rows(c, kv_rows);
	kp.layer_row = kv_rows;
	kp.no_data = e->be->alloc_kv != NULL;
	/* the host cache's elements; a device backend keeps its own (only the geometry here) */
	kp.dtype = kp.no_data ? CBLLM_F32 : e->kv_layout.dtype;
	/* a swap block holds the K (and the V) of one block over all layers, counted in floats */
	if ((rc = ResolveSwap(e, err)) ||
		(rc = kv_cache_create(&kp, &e->kv, err)) ||
		(rc = swap_space_create(p->num_swap_blocks,
								(int64_t) (e->kv_layout.block_bytes / (2 * sizeof(float))),
								&e->swap, err)) ||
		(e->be->prepare_swap != NULL && (rc = e->be->prepare_swap(e->be, e->swap, err))) ||
		(rc = CreateScheduler(e, err)))
		return rc;
	forward_set_kv(e->fwd, e->kv);
	if ((rc = CreateSamplers(e, err)))
		return rc;
	e->step_seqs = calloc(p->max_num_seqs, sizeof(fwd_seq));
	e->step_tokens = calloc(p->max_num_seqs, sizeof(int32_t));
	e->step_results = calloc(p->max_num_seqs, sizeof(sched_result));
	if (e->step_seqs == NULL || e->step_tokens == NULL || e->step_results == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	return CBLLM_OK;
}

/*
 * Load e's tokenizer, stop ids and chat template: from the GGUF file when
 * the model is one that has a tokenizer (or is a bare file), else from the
 * model directory's tokenizer.json, config.json, generation_config.json and
 * tokenizer_config.json.
 */
static int
LoadText(cbllm_engine *e, const cbllm_engine_params *p, cbllm_err *err)
{
	const gguf_file *g = e->model->gguf;
	struct stat st;
	int			rc;

	if (g != NULL && (gguf_find_key(g, "tokenizer.ggml.model") != NULL ||
					  stat(p->model_dir, &st) != 0 || !S_ISDIR(st.st_mode)))
	{
		if ((rc = engine_gguf_load_text(e, p->chat_template, err)) != CBLLM_OK)
		{
			char		msg[CBLLM_ERR_MSG_LEN];

			snprintf(msg, sizeof(msg), "%s", err->msg);
			rc = cbllm_fail(err, rc, "%s: %s", p->model_dir, msg);
		}
		return rc;
	}
	if ((rc = tokenizer_load(p->model_dir, &e->tok, err)) != CBLLM_OK)
		return rc;
	e->eos_id = tokenizer_eos_id(e->tok) >= 0 ? tokenizer_eos_id(e->tok) : e->model->cfg.eos_id;
	if ((rc = generation_config_load(p->model_dir, &e->gen, err)) ||
		(e->eos_id >= 0 && (rc = generation_config_add_eos(&e->gen, e->eos_id, err))))
		return rc;
	return engine_chat_load(e, p->model_dir, p->chat_template, err);
}

/* Load the model and tokenizer and set up everything a step needs. */
static int
CreateEngine(const cbllm_engine_params *p, cbllm_engine **out, cbllm_err *err)
{
	cbllm_engine *e;
	model_load_params lp = {0};
	const backend_reg *cpu;
	bool		quantize = false;
	model_weight_mix wmix;
	int			rc;

	if (p == NULL || p->model_dir == NULL || p->model_dir[0] == '\0')
		return cbllm_fail(err, CBLLM_ERR_INVALID, "no model directory given");
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	e->next_id = 1;
	if ((rc = backend_registry_choose(p->device, &e->reg, err)))
		goto fail;
	lp.dir = p->model_dir;
	lp.format = p->load_format;
	/* dummies quantized at load are made on the host, where the quantizers run */
	lp.dummy_on_host = !e->reg->dummies_on_device ||
		(model_weight_format(p->weight_format, &quantize, &wmix, NULL) == CBLLM_OK && quantize);
	lp.weight_format = p->weight_format;
	lp.threads = p->n_threads;
	if ((rc = model_load_ex(&lp, &e->model, err)))
		goto fail;
	rc = CheckWeightTypes(e, err);
	if (rc == CBLLM_OK && e->model->cfg.n_linear_layers > 0 && !e->reg->runs_linear_attention)
		rc = cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						"the %s backend does not run hybrid models yet (%s has %d linear-attention layers); use device 'cpu'",
						e->reg->name, e->model->cfg.arch, e->model->cfg.n_linear_layers);
	if (rc == CBLLM_OK && (e->model->cfg.features & ARCH_GEMMA4) && !e->reg->runs_per_layer_heads)
		rc = cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						"the %s backend does not run Gemma 4's layers yet (%s: head sizes per layer, KV shared between layers); use device 'cpu'",
						e->reg->name, e->model->cfg.arch);
	/*
	 * "auto" falls back to the CPU, which runs every type and layer, when
	 * the device does not run the weights, the linear attention or Gemma 4's
	 * layers
	 */
	if (rc == CBLLM_ERR_UNSUPPORTED && (p->device == NULL || strcmp(p->device, "auto") == 0) &&
		(lp.dummy_on_host || lp.format == NULL || strcmp(lp.format, "dummy") != 0) &&
		(cpu = backend_registry_find("cpu")) != NULL)
	{
		e->reg = cpu;
		rc = CheckWeightTypes(e, err);
	}
	if (rc || (rc = LoadText(e, p, err)))
		goto fail;
	model_weight_types(e->model, e->weight_types, sizeof(e->weight_types));
	if ((rc = ResolveParams(e, p, err)) || (rc = CreateCompute(e, err)))
		goto fail;
	e->stats.kv_blocks_total = e->bm->n_blocks;
	*out = e;
	return CBLLM_OK;
fail:
	cbllm_engine_destroy(e);
	return rc;
}

/*
 * Create an engine with every signal blocked: the threads started meanwhile
 * (the compute pool, and the threads the CUDA runtime starts with its
 * context) inherit that mask, so the host process's signals (PostgreSQL's)
 * only ever reach the caller's thread.
 */
int
cbllm_engine_create(const cbllm_engine_params *p, cbllm_engine **out, cbllm_err *err)
{
	sigset_t	all,
				old;
	int			rc;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = CreateEngine(p, out, err);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* Free a request returned by the last take, now that its pointers may go. */
void
engine_drop_taken(cbllm_engine *e)
{
	if (e->taken != NULL)
	{
		engine_request_free(e->taken);
		e->taken = NULL;
	}
}

/* Find a live request by id. */
static cbllm_request *
Lookup(cbllm_engine *e, int64_t id)
{
	cbllm_request *r = e->hash[id & (ENGINE_HASH_BUCKETS - 1)];

	while (r != NULL && r->id != id)
		r = r->hnext;
	return r;
}

/* Remove r from the id hash. */
static void
Unhash(cbllm_engine *e, cbllm_request *r)
{
	cbllm_request **pp = &e->hash[r->id & (ENGINE_HASH_BUCKETS - 1)];

	while (*pp != r)
		pp = &(*pp)->hnext;
	*pp = r->hnext;
	e->n_live--;
}

/* Queue a request; it is admitted by a later step. */
int
cbllm_engine_submit(cbllm_engine *e, const cbllm_request_input *in, const cbllm_sampling *sp,
					int64_t *id, cbllm_err *err)
{
	cbllm_request *r;
	int			rc;

	engine_drop_taken(e);
	if (in == NULL || sp == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "missing request input or sampling parameters");
	if (e->lost)
		return cbllm_fail(err, CBLLM_ERR_DEVICE_LOST, "%s", e->lost_msg);
	if (e->n_live >= e->params.max_queued)
		return cbllm_fail(err, CBLLM_ERR_FULL,
						  "too many requests: %lld are queued or running (the limit is %d)",
						  (long long) e->n_live, e->params.max_queued);
	if ((rc = request_create(e, in, sp, &r, err)) != CBLLM_OK)
		return rc;
	r->id = e->next_id++;
	r->arrival = r->id;
	r->t_submit = engine_now(e);
	r->rank = r->eng->sp.priority - e->params.priority_aging * r->t_submit;
	if (in->share_prompt_with != 0 && !e->params.no_prefix_caching)
	{
		cbllm_request *leader = Lookup(e, in->share_prompt_with);

		/* a follower queues behind its leader (the queue is admitted from its head) */
		if (leader != NULL && leader->state != REQ_FINISHED && leader->n_computed < leader->n_prompt &&
			r->rank <= leader->rank && request_follow(r, leader) != CBLLM_OK)
		{
			engine_request_free(r);
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		}
	}
	r->state = REQ_QUEUED;
	r->hnext = e->hash[r->id & (ENGINE_HASH_BUCKETS - 1)];
	e->hash[r->id & (ENGINE_HASH_BUCKETS - 1)] = r;
	e->n_live++;
	req_list_insert(&e->waiting, r);
	*id = r->id;
	return CBLLM_OK;
}


/* The name of a phase. */
const char *
cbllm_phase_name(cbllm_phase p)
{
	static const char *const names[] = {"queued", "prefill", "decode", "preempted", "swapped",
	"finished"};

	return p <= CBLLM_PHASE_FINISHED ? names[p] : "?";
}

/* Return what a request produced since its last take. */
int
cbllm_engine_take(cbllm_engine *e, int64_t id, cbllm_output *out, cbllm_err *err)
{
	cbllm_request *r;
	int			n_gen;

	engine_drop_taken(e);
	r = Lookup(e, id);
	if (r == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOT_FOUND, "no request with id %lld", (long long) id);
	n_gen = (r->stat.lingering ? r->stat.linger_tokens : r->n_tokens) - r->n_prompt;
	out->tokens = r->tokens + r->n_prompt + r->eng->gen_taken;
	out->n_tokens = n_gen - r->eng->gen_taken;
	out->logprobs = r->eng->sp.logprobs && r->eng->lp != NULL ? r->eng->lp + r->eng->gen_taken : NULL;
	out->n_logprobs = out->logprobs != NULL ? out->n_tokens : 0;
	out->text = r->eng->text.data ? r->eng->text.data + r->eng->text_taken : "";
	out->text_len = r->eng->text_ready - r->eng->text_taken;
	out->reasoning = r->eng->reasoning.data ? r->eng->reasoning.data + r->eng->reasoning_taken : "";
	out->reasoning_len = r->eng->reasoning.len - r->eng->reasoning_taken;
	r->eng->reasoning_taken = r->eng->reasoning.len;
	out->finish = r->stat.lingering && r->state != REQ_FINISHED ? CBLLM_FINISH_NONE : r->eng->finish;
	out->n_prompt = r->n_prompt;
	out->n_generated = n_gen;
	out->phase = r->state;
	out->queue_seconds = r->admitted ? r->t_admitted - r->t_submit : -1;
	out->n_preemptions = r->n_preemptions;
	out->error = r->eng->finish == CBLLM_FINISH_ERROR ? r->eng->error : NULL;
	r->eng->gen_taken = n_gen;
	r->eng->text_taken = r->eng->text_ready;
	if (r->state == REQ_FINISHED)
	{
		Unhash(e, r);
		e->taken = r;
	}
	return CBLLM_OK;
}

/* Abort a request and forget it; its blocks are free when this returns. */
int
cbllm_engine_abort(cbllm_engine *e, int64_t id, cbllm_err *err)
{
	cbllm_request *r;

	engine_drop_taken(e);
	r = Lookup(e, id);
	if (r == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOT_FOUND, "no request with id %lld", (long long) id);
	request_finish(e, r, CBLLM_FINISH_ABORT, NULL);
	Unhash(e, r);
	engine_request_free(r);
	return CBLLM_OK;
}

/*
 * The length past which a sequence computes with its RoPE's long factor set
 * (longrope, rope.h), the shortest of the model's RoPE configurations that
 * have one; 0 when none has.
 */
int
engine_long_rope_from(const cbllm_engine *e)
{
	const cbllm_model_config *c = &e->model->cfg;
	int			from = 0;

	for (int r = 0; r < c->n_rope; r++)
	{
		int			f = rope_long_from(&c->rope[r]);

		if (f > 0 && (from == 0 || f < from))
			from = f;
	}
	return from;
}

/*
 * Logits of every position of a prompt, computed in chunks through a
 * temporary block table that takes blocks from the pool and gives them back,
 * in the RoPE factor set of the prompt's length (a scheduled sequence's).
 * out: (n, vocab).  For tests and tools; needs no other request running.
 */
int
cbllm_engine_prompt_logits(cbllm_engine *e, const int32_t *ids, int n, float *out,
						   cbllm_err *err)
{
	block_table t = {0};
	int			vocab = e->model->cfg.vocab_size;
	int			rc = CBLLM_OK;
	int32_t		slot = -1;

	engine_drop_taken(e);
	if (n < 1 || n > e->params.max_model_len)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "prompt of %d tokens is out of range", n);
	if (bm_allocate(e->bm, &t, n) != CBLLM_OK)
	{
		bm_table_free(&t);
		return cbllm_fail(err, CBLLM_ERR_FULL, "the KV cache has no room for %d positions", n);
	}
	if (e->states != NULL && (slot = state_cache_acquire(e->states)) < 0)
	{
		bm_release_table(e->bm, &t);
		bm_table_free(&t);
		return cbllm_fail(err, CBLLM_ERR_FULL, "every linear-attention state slot is in use");
	}
	for (int pos = 0; pos < n && rc == CBLLM_OK;)
	{
		fwd_seq		s;
		const float *lg;
		int			rows;
		int			chunk = n - pos < e->params.max_num_seqs ? n - pos : e->params.max_num_seqs;

		s.tokens = ids + pos;
		s.n_tokens = chunk;
		s.pos0 = pos;
		s.block_table = t.ids;
		s.logits = FWD_LOGITS_ALL;
		s.rope_set = engine_long_rope_from(e) > 0 && n > engine_long_rope_from(e);
		s.state_slot = slot;
		rc = forward_run(e->fwd, &s, 1, &rows, err);
		if (rc == CBLLM_OK)
			rc = forward_logits(e->fwd, &lg, err);
		if (rc == CBLLM_OK)
			memcpy(out + (size_t) pos * vocab, lg, sizeof(float) * rows * vocab);
		pos += chunk;
	}
	if (slot >= 0)
		state_cache_release(e->states, slot);
	bm_release_table(e->bm, &t);
	bm_table_free(&t);
	return rc;
}

/* Counters and occupancy. */
void
cbllm_engine_stats(const cbllm_engine *e, cbllm_stats *st)
{
	*st = e->stats;
	st->n_waiting = e->waiting.n;
	st->n_running = e->running.n;
	st->kv_blocks_total = e->bm->n_blocks;
	st->kv_blocks_free = bm_available(e->bm);
	if (e->states != NULL)
	{
		st->state_slots_total = e->states->p.n_slots;
		st->state_slots_used = e->states->p.n_slots - e->states->n_free;
		st->state_bytes = (int64_t) engine_state_bytes_per_seq(e) * e->states->p.n_slots +
			e->state_saved_bytes;
	}
	st->kv_blocks_cached = e->bm->n_evictable;
	st->prefix_queries = e->bm->prefix_queries;
	st->prefix_hits = e->bm->prefix_hits;
	st->swap_blocks_total = e->bm->n_swap_blocks;
	st->swap_blocks_free = e->bm->n_swap_free;
	st->n_swapped = 0;
	for (cbllm_request *r = e->waiting.head; r != NULL; r = r->next)
		st->n_swapped += r->table.swapped;
	st->graph_steps = e->be->graph_replays;
	st->expert_pairs = e->be->expert_pairs;
	st->expert_runs = e->be->expert_runs;
}

/* Model and configuration facts. */
void
cbllm_engine_get_info(const cbllm_engine *e, cbllm_engine_info *info)
{
	const cbllm_model_config *c = &e->model->cfg;

	info->vocab_size = c->vocab_size;
	info->max_model_len = e->params.max_model_len;
	info->n_layers = c->n_layers;
	info->hidden = c->hidden;
	info->weight_bytes = e->model->weight_bytes;
	info->step_weight_bytes = e->model->step_weight_bytes;
	info->matmul_params = e->model->matmul_params;
	info->weight_types = e->weight_types;
	info->quantize_seconds = e->model->quantize_seconds;
	info->block_size = e->params.block_size;
	info->num_kv_blocks = e->params.num_kv_blocks;
	info->kv_bytes_per_token = engine_kv_bytes(e, 1);
	info->state_bytes_per_seq = engine_state_bytes_per_seq(e);
	info->n_linear_layers = e->model->cfg.n_linear_layers;
	info->prefix_caching = !e->params.no_prefix_caching;
	info->n_threads = threadpool_size(e->pool);
	info->device = e->be->name;
	info->cpu_isa = e->be->cpu_isa != NULL ? e->be->cpu_isa : "none";
	info->eos_id = e->eos_id;
	info->bos_id = tokenizer_bos_id(e->tok);
}

/* The tokenizer of the loaded model. */
const struct cbllm_tokenizer *
cbllm_engine_tokenizer(const cbllm_engine *e)
{
	return e->tok;
}

/* Free every request and every part of the engine. */
void
cbllm_engine_destroy(cbllm_engine *e)
{
	if (e == NULL)
		return;
	engine_drop_taken(e);
	for (int b = 0; b < ENGINE_HASH_BUCKETS; b++)
	{
		cbllm_request *r = e->hash[b];

		while (r != NULL)
		{
			cbllm_request *next = r->hnext;

			engine_request_free(r);
			r = next;
		}
	}
	free(e->step_seqs);
	free(e->step_results);
	engine_constraints_free(e);
	for (int i = 0; i < e->n_samplers; i++)
		sampler_free(e->samplers[i]);
	free(e->samplers);
	free(e->step_tokens);
	forward_free(e->fwd);
	if (e->be)
		e->be->destroy(e->be);	/* first: it waits for copies into the swap area and releases it */
	scheduler_free(&e->sched);
	bm_free(e->bm);
	kv_cache_free(e->kv);
	swap_space_free(e->swap);
	engine_state_free(e);
	threadpool_destroy(e->pool);
	tokenizer_free(e->tok);
	engine_chat_free(e);
	model_free(e->model);
	free(e);
}
