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
 * session never stalls the others.
 */
#include "cbllm_pg.h"

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
	{
		CbllmSlot  *s = CbllmGetSlot(i);
		Latch	   *l = NULL;

		SpinLockAcquire(&s->mutex);
		if (s->state != SLOT_FREE)
			l = s->owner_latch;
		SpinLockRelease(&s->mutex);
		if (l)
			SetLatch(l);
	}
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

/* Finish slot i with a failure (unless its owner already gave up). */
static void
FailSlot(int i, uint64 serial, int errcode_in, const char *msg)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	Latch	   *l = NULL;

	SpinLockAcquire(&s->mutex);
	if (s->serial == serial && (s->state == SLOT_SUBMITTED || s->state == SLOT_RUNNING))
	{
		s->state = SLOT_FAILED;
		s->errcode = errcode_in;
		strlcpy(s->error, msg, CBLLM_ERROR_LEN);
		l = s->owner_latch;
	}
	else if (s->serial == serial && s->state == SLOT_CANCELLED)
	{
		s->state = SLOT_FREE;
		s->owner_pid = 0;
		s->owner_latch = NULL;
	}
	SpinLockRelease(&s->mutex);
	if (l)
		SetLatch(l);
}

/* Read slot i's state and serial under its lock. */
static CbllmSlotState
ReadSlot(int i, uint64 *serial)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	CbllmSlotState st;

	SpinLockAcquire(&s->mutex);
	st = s->state;
	*serial = s->serial;
	SpinLockRelease(&s->mutex);
	return st;
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

/* Take a SUBMITTED slot into the engine. */
static void
StartSlot(int i)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	WorkerSlot *w = &wslots[i];
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_request_input in = {0};
	cbllm_err	err;
	char	   *buf;
	const char *src;
	uint64		serial;
	int			total,
				off,
				rc;

	/* the request is read-only once SUBMITTED; copy it out under the lock */
	SpinLockAcquire(&s->mutex);
	if (s->state != SLOT_SUBMITTED)
	{
		SpinLockRelease(&s->mutex);
		return;
	}
	serial = s->serial;
	sp.max_tokens = s->params.max_tokens;
	sp.temperature = (float) s->params.temperature;
	sp.top_p = (float) s->params.top_p;
	sp.top_k = s->params.top_k;
	sp.has_seed = s->params.has_seed;
	sp.seed = (uint64_t) s->params.seed;
	sp.priority = s->params.priority;
	sp.n_stop = s->params.n_stop;
	in.text_len = s->prompt_len;
	w->submitted_at = s->submitted_at;
	total = s->prompt_len;
	for (int k = 0; k < s->params.n_stop; k++)
		total += s->params.stop_len[k];
	/* layout: prompt, NUL, then each stop string with its NUL */
	buf = palloc(total + s->params.n_stop + 1);
	src = CbllmSlotPrompt(s);
	memcpy(buf, src, s->prompt_len);
	buf[s->prompt_len] = '\0';
	off = s->prompt_len + 1;
	src += s->prompt_len;
	for (int k = 0; k < s->params.n_stop; k++)
	{
		memcpy(buf + off, src, s->params.stop_len[k]);
		buf[off + s->params.stop_len[k]] = '\0';
		sp.stop[k] = buf + off;
		off += s->params.stop_len[k] + 1;
		src += s->params.stop_len[k];
	}
	s->state = SLOT_RUNNING;
	SpinLockRelease(&s->mutex);

	in.text = buf;
	in.add_bos = true;
	resetStringInfo(&w->pending);
	w->serial = serial;
	w->finished = false;
	w->n_prompt = w->n_generated = 0;
	w->phase = CBLLM_PHASE_QUEUED;
	w->queue_seconds = -1;
	w->first_token_at = w->last_token_at = 0;
	rc = cbllm_engine_submit(engine, &in, &sp, &w->engine_id, &err);
	pfree(buf);
	if (rc != CBLLM_OK)
	{
		w->engine_id = 0;
		FailSlot(i, serial, StatusErrcode(rc), err.msg);
		return;
	}
	w->active = true;
}

/*
 * Append one framed piece (4-byte length, then bytes) to a pending buffer.
 * A NUL byte (a model can generate <0x00>) cannot be in a text value: it
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
		uint32		n = len > 4096 ? 4096 : (uint32) len;

		appendBinaryStringInfo(pending, (const char *) &n, sizeof(n));
		appendBinaryStringInfo(pending, text, n);
		text += n;
		len -= n;
	}
}

/*
 * Move whole pieces from pending into slot i's ring; mark it DONE/FAILED when
 * the engine has finished and everything was delivered.  Returns false when
 * the owner cancelled (the caller drops the slot).
 */
static bool
Deliver(int i)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	WorkerSlot *w = &wslots[i];
	Latch	   *l = NULL;
	int			cap = cbllm_shared->out_cap;
	int			used = 0;
	bool		alive = true;

	SpinLockAcquire(&s->mutex);
	if (s->serial != w->serial || s->state != SLOT_RUNNING)
	{
		if (s->serial == w->serial && s->state == SLOT_CANCELLED)
		{
			s->state = SLOT_FREE;
			s->owner_pid = 0;
			s->owner_latch = NULL;
		}
		SpinLockRelease(&s->mutex);
		return false;
	}
	while (used + (int) sizeof(uint32) <= w->pending.len)
	{
		uint32		n;
		int			frame;

		memcpy(&n, w->pending.data + used, sizeof(n));
		frame = (int) sizeof(uint32) + (int) n;
		if ((int) (s->out_head - s->out_tail) + frame > cap)
			break;
		for (int b = 0; b < frame; b++)
			CbllmSlotOut(s)[(s->out_head + b) % cap] = w->pending.data[used + b];
		s->out_head += frame;
		used += frame;
	}
	s->n_prompt_tokens = w->n_prompt;
	s->n_generated = w->n_generated;
	s->phase = w->phase;
	s->queue_seconds = w->queue_seconds;
	s->first_token_at = w->first_token_at;
	if (used > 0)
		l = s->owner_latch;
	if (w->finished && used == w->pending.len)
	{
		if (w->finish == CBLLM_FINISH_ERROR)
		{
			s->state = SLOT_FAILED;
			s->errcode = w->errcode;
			strlcpy(s->error, w->error, CBLLM_ERROR_LEN);
		}
		else
		{
			s->state = SLOT_DONE;
			s->finish = w->finish;
		}
		l = s->owner_latch;
		alive = false;
	}
	SpinLockRelease(&s->mutex);
	if (used > 0)
	{
		memmove(w->pending.data, w->pending.data + used, w->pending.len - used);
		w->pending.len -= used;
	}
	if (l)
		SetLatch(l);
	if (!alive)
	{
		w->active = false;
		w->engine_id = 0;
		resetStringInfo(&w->pending);
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
		w->finished = true;
		w->finish = CBLLM_FINISH_ERROR;
		w->errcode = ERRCODE_INTERNAL_ERROR;
		strlcpy(w->error, err.msg, CBLLM_ERROR_LEN);
		w->engine_id = 0;
		return;
	}
	if (o.text_len > 0)
		AppendPiece(&w->pending, o.text, o.text_len);
	w->n_prompt = o.n_prompt;
	w->n_generated = o.n_generated;
	w->phase = o.phase;
	w->queue_seconds = o.queue_seconds;
	RecordTimings(w, &o);
	if (o.finish != CBLLM_FINISH_NONE)
	{
		w->finished = true;
		w->finish = o.finish;
		if (o.finish == CBLLM_FINISH_ERROR)
		{
			w->errcode = ERRCODE_SYSTEM_ERROR;
			strlcpy(w->error, o.error ? o.error : "generation failed", CBLLM_ERROR_LEN);
		}
		w->engine_id = 0;		/* the engine forgot it with this take */
	}
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
		CbllmSlotState st = ReadSlot(i, &serial);

		if (st == SLOT_SUBMITTED || st == SLOT_CANCELLED)
			FailSlot(i, serial, errcode_in, msg);
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
		CbllmSlotState st = ReadSlot(i, &serial);

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
			FailSlot(i, serial, 0, "");
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

	/* requests a previous worker was running are lost: fail them */
	for (int i = 0; i < cbllm_shared->n_slots; i++)
	{
		uint64		serial;

		if (ReadSlot(i, &serial) == SLOT_RUNNING)
			FailSlot(i, serial, ERRCODE_CONNECTION_FAILURE,
					 "the cbllm worker restarted while this request was running");
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
