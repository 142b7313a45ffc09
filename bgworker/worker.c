/*
 * worker.c: the background worker that hosts the engine for the cluster.
 *
 * The loop: take new requests from SUBMITTED slots into the engine, abort the
 * ones whose backends cancelled, run one engine step, and move each request's
 * new text into its slot's output ring (framed piece by piece), setting the
 * owner's latch; finished requests become DONE or FAILED.  When nothing is
 * active it sleeps on its latch, which backends set on submit and cancel.
 *
 * A request's failure travels back to its backend as a message in its slot;
 * nothing here raises an ERROR for one request.  Text that does not fit a
 * slow reader's ring waits in worker memory (per request), so one slow
 * session never stalls the others.  Tokenizer requests (llm_tokenize and
 * friends) are answered at once, between steps, with the engine's tokenizer.
 * Every move of a slot is made through slot.c.
 */
#include "cbllm_pg.h"

#include <float.h>
#include <signal.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "../src/cbllm.h"
#include "../src/tokenizer.h"

/* What the worker remembers about each slot it has in the engine. */
typedef struct WorkerSlot
{
	bool		active;			/* the slot's request is in the engine or draining */
	uint64		serial;			/* the slot's serial when taken */
	int64		engine_id;		/* 0 once the engine forgot it */
	StringInfoData pending;		/* framed text not yet in the ring */
	bool		finished;		/* the engine reported its end */
	int			finish;
	int			n_prompt;
	int			n_generated;
	int			phase;			/* cbllm_phase from the latest take */
	double		queue_seconds;	/* from the latest take */
	TimestampTz submitted_at;	/* from the slot */
	TimestampTz first_token_at; /* 0 until the first token */
	TimestampTz last_token_at;
	int			errcode;
	char		error[CBLLM_ERROR_LEN];
} WorkerSlot;

static cbllm_engine *engine = NULL;
static WorkerSlot *wslots = NULL;

/* Register the engine worker (from _PG_init). */
void
CbllmRegisterWorker(void)
{
	BackgroundWorker w;

	memset(&w, 0, sizeof(w));
	w.bgw_flags = BGWORKER_SHMEM_ACCESS;
	w.bgw_start_time = BgWorkerStart_PostmasterStart;
	w.bgw_restart_time = 5;
	snprintf(w.bgw_library_name, BGW_MAXLEN, "cbllm");
	snprintf(w.bgw_function_name, BGW_MAXLEN, "cbllm_worker_main");
	snprintf(w.bgw_name, BGW_MAXLEN, "cbllm engine");
	snprintf(w.bgw_type, BGW_MAXLEN, "cbllm engine");
	RegisterBackgroundWorker(&w);
}

/* Publish the engine state (and a reason) under the info lock. */
static void
SetState(CbllmEngineState st, const char *reason)
{
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->state = st;
	strlcpy(cbllm_shared->reason, reason ? reason : "", CBLLM_REASON_LEN);
	SpinLockRelease(&cbllm_shared->info_lock);
}

/* Wake every backend that has a slot, so that waiters re-check the worker. */
static void
WakeAllOwners(void)
{
	for (int i = 0; i < cbllm_shared->n_slots; i++)
		CbllmWakeOwner(i);
}

/* on_shmem_exit: say that no worker runs, and wake the waiters. */
static void
WorkerExit(int code, Datum arg)
{
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->worker_pid = 0;
	cbllm_shared->worker_latch = NULL;
	if (cbllm_shared->state == ENGINE_READY || cbllm_shared->state == ENGINE_LOADING)
		cbllm_shared->state = ENGINE_STOPPED;
	SpinLockRelease(&cbllm_shared->info_lock);
	pg_atomic_write_u64(&cbllm_shared->heartbeat, 0);
	WakeAllOwners();
	if (engine)
		cbllm_engine_destroy(engine);
	engine = NULL;
}

/* Map an engine status to a sqlstate for the backend's error. */
static int
StatusErrcode(int status)
{
	switch (status)
	{
		case CBLLM_ERR_TOO_LONG:
			return ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		case CBLLM_ERR_INVALID:
			return ERRCODE_INVALID_PARAMETER_VALUE;
		case CBLLM_ERR_FULL:
			return ERRCODE_INSUFFICIENT_RESOURCES;
		case CBLLM_ERR_NOMEM:
			return ERRCODE_OUT_OF_MEMORY;
		default:
			return ERRCODE_INTERNAL_ERROR;
	}
}

/* Forget the worker's record of slot i (aborting its request if the engine has it). */
static void
DropWorkerSlot(int i)
{
	WorkerSlot *w = &wslots[i];

	if (w->engine_id != 0 && engine != NULL)
		cbllm_engine_abort(engine, w->engine_id, NULL);
	w->engine_id = 0;
	w->active = false;
	resetStringInfo(&w->pending);
}

/* Append len bytes as frames of at most CBLLM_FRAME_MAX bytes, cut only at multiples of unit. */
static void
AppendFrames(StringInfo pending, const char *data, size_t len, int unit)
{
	while (len > 0)
	{
		uint32		n = len > CBLLM_FRAME_MAX ? CBLLM_FRAME_MAX - CBLLM_FRAME_MAX % unit : (uint32) len;

		appendBinaryStringInfo(pending, (const char *) &n, sizeof(n));
		appendBinaryStringInfo(pending, data, n);
		data += n;
		len -= n;
	}
}

/*
 * Append one piece of text as frames.  A long piece is cut only between
 * UTF-8 characters, so that every frame (a row of a stream) is whole text;
 * a NUL byte (a model can generate <0x00>) cannot be in a text value: it
 * becomes U+FFFD.
 */
static void
AppendPiece(StringInfo pending, const char *text, size_t len)
{
	if (memchr(text, '\0', len) != NULL)
	{
		StringInfoData clean;

		initStringInfo(&clean);
		for (size_t i = 0; i < len; i++)
		{
			if (text[i] == '\0')
				appendBinaryStringInfo(&clean, "\xEF\xBF\xBD", 3);
			else
				appendStringInfoChar(&clean, text[i]);
		}
		AppendPiece(pending, clean.data, clean.len);
		pfree(clean.data);
		return;
	}
	while (len > 0)
	{
		uint32		n = len > CBLLM_FRAME_MAX ? CBLLM_FRAME_MAX : (uint32) len;

		/* back up to the start of a character (at most 3 continuation bytes) */
		if (n < len)
			for (int k = 0; k < 3 && n > 1 && ((unsigned char) text[n] & 0xC0) == 0x80; k++)
				n--;
		appendBinaryStringInfo(pending, (const char *) &n, sizeof(n));
		appendBinaryStringInfo(pending, text, n);
		text += n;
		len -= n;
	}
}

/* Record that slot i's request ended (its output may still be pending). */
static void
EndWorkerSlot(WorkerSlot *w, int finish, int errcode_in, const char *msg)
{
	w->finished = true;
	w->finish = finish;
	w->errcode = errcode_in;
	strlcpy(w->error, msg ? msg : "", CBLLM_ERROR_LEN);
	w->engine_id = 0;
}

/* Tokenize, count or detokenize now (no engine step needed): the whole answer goes to pending. */
static void
RunTokenizerRequest(WorkerSlot *w, int kind, const char *in, int len)
{
	const cbllm_tokenizer *tok = cbllm_engine_tokenizer(engine);
	cbllm_err	err;

	if (kind == REQ_TOKENIZE || kind == REQ_TOKEN_COUNT)
	{
		tokenizer_encode_opts o = {.add_bos = true, .parse_special = true};
		int32_t    *ids = NULL;
		int			n = 0;

		if (tokenizer_encode(tok, in, len, o, &ids, &n, &err) != CBLLM_OK)
		{
			EndWorkerSlot(w, CBLLM_FINISH_ERROR, ERRCODE_INTERNAL_ERROR, err.msg);
			return;
		}
		if (kind == REQ_TOKENIZE)
			AppendFrames(&w->pending, (const char *) ids, (size_t) n * sizeof(int32_t), sizeof(int32_t));
		else
		{
			int32		count = n;

			AppendFrames(&w->pending, (const char *) &count, sizeof(count), sizeof(int32));
		}
		free(ids);
		w->n_prompt = n;
	}
	else
	{
		int			n = len / (int) sizeof(int32_t);
		int			vocab = tokenizer_vocab_size(tok);
		int32_t    *ids = palloc(sizeof(int32_t) * (n > 0 ? n : 1));
		cbllm_buf	out = {0};

		memcpy(ids, in, (size_t) n * sizeof(int32_t));
		for (int k = 0; k < n; k++)
			if (ids[k] < 0 || ids[k] >= vocab)
			{
				char		msg[CBLLM_ERROR_LEN];

				snprintf(msg, sizeof(msg), "token id %d is outside the vocabulary of %d", ids[k], vocab);
				EndWorkerSlot(w, CBLLM_FINISH_ERROR, ERRCODE_INVALID_PARAMETER_VALUE, msg);
				pfree(ids);
				return;
			}
		if (tokenizer_decode(tok, ids, n, true, &out, &err) != CBLLM_OK)
		{
			cbllm_buf_free(&out);
			EndWorkerSlot(w, CBLLM_FINISH_ERROR, ERRCODE_INTERNAL_ERROR, err.msg);
			pfree(ids);
			return;
		}
		if (out.len > 0)
			AppendPiece(&w->pending, out.data, out.len);
		cbllm_buf_free(&out);
		pfree(ids);
	}
	EndWorkerSlot(w, CBLLM_FINISH_STOP, 0, NULL);
}

/* Take a SUBMITTED slot: into the engine, or answered at once (tokenizer requests). */
static void
StartSlot(int i)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	WorkerSlot *w = &wslots[i];
	CbllmParams prm;
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_request_input in = {0};
	cbllm_err	err;
	char	   *buf;
	const char *src;
	uint64		serial;
	int			total,
				off,
				rc;

	if (!CbllmSlotTake(i, &serial))
		return;
	/* the request is read-only from SUBMITTED on and stays until we free the slot: copy it unlocked */
	prm = s->params;
	w->submitted_at = s->submitted_at;
	total = s->prompt_len;
	for (int k = 0; k < prm.n_stop; k++)
		total += prm.stop_len[k];
	/* layout: prompt, NUL, then each stop string with its NUL */
	buf = palloc(total + prm.n_stop + 1);
	src = CbllmSlotPrompt(s);
	memcpy(buf, src, s->prompt_len);
	buf[s->prompt_len] = '\0';
	off = s->prompt_len + 1;
	src += s->prompt_len;
	for (int k = 0; k < prm.n_stop; k++)
	{
		memcpy(buf + off, src, prm.stop_len[k]);
		buf[off + prm.stop_len[k]] = '\0';
		sp.stop[k] = buf + off;
		off += prm.stop_len[k] + 1;
		src += prm.stop_len[k];
	}

	resetStringInfo(&w->pending);
	w->serial = serial;
	w->finished = false;
	w->n_prompt = w->n_generated = 0;
	w->phase = CBLLM_PHASE_QUEUED;
	w->queue_seconds = -1;
	w->first_token_at = w->last_token_at = 0;
	w->engine_id = 0;
	w->active = true;
	if (prm.kind != REQ_GENERATE)
	{
		RunTokenizerRequest(w, prm.kind, buf, s->prompt_len);
		pfree(buf);
		return;
	}
	sp.max_tokens = prm.max_tokens;
	sp.temperature = (float) prm.temperature;
	/* a top_p below float's range means "the top token only", which FLT_MIN keeps */
	sp.top_p = prm.top_p < FLT_MIN ? FLT_MIN : (float) prm.top_p;
	sp.top_k = prm.top_k;
	sp.has_seed = prm.has_seed;
	sp.seed = (uint64_t) prm.seed;
	sp.priority = prm.priority;
	sp.n_stop = prm.n_stop;
	in.text = buf;
	in.text_len = s->prompt_len;
	in.add_bos = true;
	in.cache_salt = prm.cache_salt;
	rc = cbllm_engine_submit(engine, &in, &sp, &w->engine_id, &err);
	pfree(buf);
	if (rc != CBLLM_OK)
		EndWorkerSlot(w, CBLLM_FINISH_ERROR, StatusErrcode(rc), err.msg);
}

/*
 * Move slot i's pending frames into its ring; once the request has ended and
 * everything is out, finish the slot (DONE or FAILED), or park an llm_submit
 * result.  Returns false when the owner cancelled (the caller drops the slot).
 */
static bool
Deliver(int i)
{
	WorkerSlot *w = &wslots[i];
	bool		cancelled = false;
	bool		failed = w->finish == CBLLM_FINISH_ERROR;
	int			used;

	if (w->finished &&
		CbllmSlotPark(i, w->serial, w->pending.data, w->pending.len, failed, w->errcode, w->error))
	{
		w->active = false;
		resetStringInfo(&w->pending);
		return true;			/* parked (or found cancelled and freed) */
	}
	used = CbllmSlotDeliver(i, w->serial, w->pending.data, w->pending.len, &cancelled);
	if (cancelled)
		return false;
	if (used > 0)
	{
		memmove(w->pending.data, w->pending.data + used, w->pending.len - used);
		w->pending.len -= used;
	}
	CbllmSlotProgress(i, w->serial, w->phase, w->n_prompt, w->n_generated, w->queue_seconds,
					  w->first_token_at);
	if (w->finished && w->pending.len == 0)
	{
		(void) CbllmSlotFinish(i, w->serial, failed, w->finish, w->errcode, w->error);
		w->active = false;
	}
	return true;
}

/* Seconds from a to b. */
static double
Seconds(TimestampTz a, TimestampTz b)
{
	return (double) (b - a) / USECS_PER_SEC;
}

/* Add the latencies new output reveals: first token, gaps between tokens, queue time, the end. */
static void
RecordTimings(WorkerSlot *w, const cbllm_output *o)
{
	TimestampTz now;

	if (o->n_tokens == 0 && o->finish == CBLLM_FINISH_NONE)
		return;
	now = GetCurrentTimestamp();
	if (o->n_tokens > 0)
	{
		int			gaps = o->n_tokens;

		if (w->first_token_at == 0)
		{
			w->first_token_at = now;
			CbllmRecordLatency(0, Seconds(w->submitted_at, now));
			if (o->queue_seconds >= 0)
				CbllmRecordLatency(2, o->queue_seconds);
			gaps--;
		}
		else
			for (int k = 0; k < gaps; k++)
				CbllmRecordLatency(1, Seconds(w->last_token_at, now) / gaps);
		w->last_token_at = now;
	}
	if (o->finish != CBLLM_FINISH_NONE && o->finish != CBLLM_FINISH_ERROR)
		CbllmRecordLatency(3, Seconds(w->submitted_at, now));
}

/* Collect the engine's output for slot i into its pending pieces. */
static void
Collect(int i)
{
	WorkerSlot *w = &wslots[i];
	cbllm_output o;
	cbllm_err	err;

	if (w->engine_id == 0 || w->finished)
		return;
	if (cbllm_engine_take(engine, w->engine_id, &o, &err) != CBLLM_OK)
	{
		EndWorkerSlot(w, CBLLM_FINISH_ERROR, ERRCODE_INTERNAL_ERROR, err.msg);
		return;
	}
	if (o.text_len > 0)
		AppendPiece(&w->pending, o.text, o.text_len);
	w->n_prompt = o.n_prompt;
	w->n_generated = o.n_generated;
	w->phase = o.phase;
	w->queue_seconds = o.queue_seconds;
	RecordTimings(w, &o);
	if (o.finish != CBLLM_FINISH_NONE)	/* the engine forgot it with this take */
		EndWorkerSlot(w, o.finish, o.finish == CBLLM_FINISH_ERROR ? ERRCODE_SYSTEM_ERROR : 0,
					  o.finish == CBLLM_FINISH_ERROR ? (o.error ? o.error : "generation failed") : NULL);
}

/* Publish engine statistics for cbllm_status(). */
static void
PublishStats(void)
{
	cbllm_stats st;

	cbllm_engine_stats(engine, &st);
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->kv_blocks_total = st.kv_blocks_total;
	cbllm_shared->kv_blocks_free = st.kv_blocks_free;
	cbllm_shared->n_running = st.n_running;
	cbllm_shared->n_waiting = st.n_waiting;
	cbllm_shared->steps = st.steps;
	cbllm_shared->batch_seqs_sum = st.batch_seqs_sum;
	cbllm_shared->tokens_prompt = st.tokens_prompt;
	cbllm_shared->tokens_generated = st.tokens_generated;
	cbllm_shared->preemptions = st.preemptions;
	cbllm_shared->prefix_queries = st.prefix_queries;
	cbllm_shared->prefix_hits = st.prefix_hits;
	cbllm_shared->kv_blocks_cached = st.kv_blocks_cached;
	cbllm_shared->swap_blocks_total = st.swap_blocks_total;
	cbllm_shared->swap_blocks_free = st.swap_blocks_free;
	cbllm_shared->n_swapped = st.n_swapped;
	cbllm_shared->preemptions_recompute = st.preemptions_recompute;
	cbllm_shared->preemptions_swap = st.preemptions_swap;
	SpinLockRelease(&cbllm_shared->info_lock);
}

/* Fail new requests (the engine is not available) and free cancelled slots. */
static void
RefuseAll(int errcode_in, const char *msg)
{
	for (int i = 0; i < cbllm_shared->n_slots; i++)
	{
		uint64		serial;
		CbllmSlotState st = CbllmSlotPeek(i, &serial);

		if (st == SLOT_SUBMITTED)
			(void) CbllmSlotFinish(i, serial, true, CBLLM_FINISH_ERROR, errcode_in, msg);
		else if (st == SLOT_CANCELLED)
			CbllmSlotReapCancelled(i, serial);
	}
}

/* Build the engine parameters from the GUCs and load the model. */
static int
LoadEngine(cbllm_err *err)
{
	cbllm_engine_params p;
	cbllm_engine_info info;
	int			rc;

	memset(&p, 0, sizeof(p));
	p.model_dir = cbllm_model;
	p.device = cbllm_device;
	p.n_threads = cbllm_threads;
	p.max_num_seqs = cbllm_max_num_seqs;
	p.max_num_batched_tokens = cbllm_max_num_batched_tokens;
	p.max_model_len = cbllm_max_model_len;
	p.block_size = cbllm_block_size;
	p.kv_cache_bytes = (size_t) cbllm_kv_cache_size_mb << 20;
	p.max_queued = cbllm_shared->n_slots;
	p.preempt_mode = (cbllm_preempt) cbllm_preempt_mode;
	p.swap_space_bytes = (size_t) cbllm_swap_space_mb << 20;
	p.no_prefix_caching = !cbllm_enable_prefix_caching;
	p.gpu_memory_utilization = cbllm_gpu_memory_utilization;
	p.no_cuda_graphs = !cbllm_cuda_graphs;
	p.load_format = cbllm_load_format == 1 ? "dummy" : "auto";
	p.priority_aging = cbllm_priority_aging > 0 ? cbllm_priority_aging : CBLLM_PRIORITY_AGING_OFF;
	rc = cbllm_engine_create(&p, &engine, err);
	if (rc != CBLLM_OK)
		return rc;
	cbllm_engine_get_info(engine, &info);
	SpinLockAcquire(&cbllm_shared->info_lock);
	strlcpy(cbllm_shared->device, info.device, sizeof(cbllm_shared->device));
	strlcpy(cbllm_shared->cpu_isa, info.cpu_isa, sizeof(cbllm_shared->cpu_isa));
	cbllm_shared->max_model_len = info.max_model_len;
	SpinLockRelease(&cbllm_shared->info_lock);
	return CBLLM_OK;
}

/* One pass of the loop with a loaded engine; returns true while the engine has work. */
static bool
Iterate(void)
{
	int			active = 0,
				rc;
	cbllm_err	err;

	for (int i = 0; i < cbllm_shared->n_slots; i++)
	{
		uint64		serial;
		CbllmSlotState st = CbllmSlotPeek(i, &serial);

		if (st == SLOT_SUBMITTED)
		{
			if (wslots[i].active)
				DropWorkerSlot(i);
			StartSlot(i);
		}
		else if (st == SLOT_CANCELLED)
		{
			if (wslots[i].active && wslots[i].serial == serial)
				DropWorkerSlot(i);
			CbllmSlotReapCancelled(i, serial);
		}
	}
	rc = cbllm_engine_step(engine, &active, &err);
	if (rc != CBLLM_OK)
		elog(LOG, "cbllm: engine step failed: %s", err.msg);
	for (int i = 0; i < cbllm_shared->n_slots; i++)
	{
		WorkerSlot *w = &wslots[i];

		if (!w->active)
			continue;
		Collect(i);
		if (!Deliver(i))
			DropWorkerSlot(i);
	}
	PublishStats();
	if (rc == CBLLM_ERR_DEVICE_LOST)
	{
		/* the failed requests have their errors; a fresh process gets a fresh device context */
		ereport(LOG, (errmsg("cbllm: restarting the worker: %s", err.msg)));
		proc_exit(1);
	}
	return active > 0;
}

/* The worker's entry point. */
void
cbllm_worker_main(Datum arg)
{
	cbllm_err	err;
	uint32		gen;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	gen = pg_atomic_add_fetch_u32(&cbllm_shared->worker_generation, 1);
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->worker_pid = MyProcPid;
	cbllm_shared->worker_latch = MyLatch;
	cbllm_shared->started_at = GetCurrentTimestamp();
	strlcpy(cbllm_shared->model, cbllm_model ? cbllm_model : "", MAXPGPATH);
	SpinLockRelease(&cbllm_shared->info_lock);
	on_shmem_exit(WorkerExit, (Datum) 0);
	wslots = palloc0(sizeof(WorkerSlot) * cbllm_shared->n_slots);
	for (int i = 0; i < cbllm_shared->n_slots; i++)
		initStringInfo(&wslots[i].pending);

	/* requests a previous worker was running (or parking) are lost: fail them */
	CbllmParkedRecover();
	for (int i = 0; i < cbllm_shared->n_slots; i++)
	{
		uint64		serial;
		CbllmSlotState st = CbllmSlotPeek(i, &serial);

		if (st == SLOT_RUNNING || st == SLOT_PARKING)
			(void) CbllmSlotFinish(i, serial, true, CBLLM_FINISH_ERROR, ERRCODE_CONNECTION_FAILURE,
								   "the cbllm worker restarted while this request was running");
		else if (st == SLOT_CANCELLED)
			CbllmSlotReapCancelled(i, serial);
	}

	if (cbllm_model == NULL || cbllm_model[0] == '\0')
		SetState(ENGINE_NO_MODEL, "cbllm.model is not set");
	else
	{
		SetState(ENGINE_LOADING, NULL);
		elog(LOG, "cbllm: loading model \"%s\" (worker generation %u)", cbllm_model, gen);
		if (LoadEngine(&err) != CBLLM_OK)
		{
			elog(LOG, "cbllm: model failed to load: %s", err.msg);
			SetState(ENGINE_FAILED, err.msg);
		}
		else
		{
			elog(LOG, "cbllm: model loaded; engine ready");
			SetState(ENGINE_READY, NULL);
		}
	}
	WakeAllOwners();

	while (!ShutdownRequestPending)
	{
		bool		busy = false;

		pg_atomic_write_u64(&cbllm_shared->heartbeat, (uint64) GetCurrentTimestamp());
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (engine != NULL)
			busy = Iterate();
		else
		{
			char		reason[CBLLM_REASON_LEN];

			SpinLockAcquire(&cbllm_shared->info_lock);
			strlcpy(reason, cbllm_shared->reason, sizeof(reason));
			SpinLockRelease(&cbllm_shared->info_lock);
			RefuseAll(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, reason);
		}
		if (!busy)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 1000L,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
	/* exit status 1: the postmaster restarts the worker unless the server is stopping */
	proc_exit(1);
}
