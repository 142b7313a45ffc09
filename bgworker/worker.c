/*
 * worker.c: the supervisor, a background worker that keeps an engine
 * process for the cluster.
 *
 * The engine (cbllm-engine, see engine_proc.c and src/engine_server.c) runs
 * in a process of its own, started by this worker and not by the
 * postmaster, and talks to it through a shared-memory region of its own
 * (src/ipc.h): it holds the model, the KV cache, the threads and the GPU
 * context.  So the engine can die of anything (a signal, the out-of-memory
 * killer, SIGBUS on a model file truncated under it, a device fault) and
 * the postmaster never knows: this worker notices at once (the engine's
 * doorbell pipe closes, waitpid says how it ended), fails the requests the
 * engine was running with that cause, and starts a new engine after a
 * backoff (0.5 s, doubling up to 30 s while it keeps dying young).  Requests
 * still waiting in their slots wait for the new engine.
 *
 * The loop: start the engine when there is none (and it may), follow its
 * state (loading, ready, failed), take its events, take new SUBMITTED slots
 * to it and abort cancelled ones (worker_requests.c), move output into the
 * slots' rings, publish counters, and sleep on the latch and the engine's
 * doorbell.  A heartbeat from the engine at every pass of its loop lets
 * cbllm_status() report a stalled engine, and, with
 * cbllm.restart_stalled_engine, this worker kills and restarts it.
 *
 * A request's failure travels back to its backend as a message in its slot;
 * nothing here raises an ERROR for one request.
 */
#include "worker_internal.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

#define BACKOFF_FIRST_MS 500
#define BACKOFF_MAX_MS 30000
#define RAN_LONG_ENOUGH_MS 60000	/* an engine that lived this long restarts at the first backoff */

static CbllmEngineProc proc = {.pid = 0, .region_fd = -1, .bell_to_engine = -1, .bell_from_engine = -1};
static bool bell_closed = false;	/* the engine's doorbell pipe reached EOF: it is exiting */
static bool model_failed = false;	/* the last engine could not load the model: refuse requests */
static int	young_deaths = 0;	/* deaths in a row of engines that did not run long */
static TimestampTz next_spawn_at = 0;
static cbllm_ipc_status last_status;	/* the engine's last consistent status block */
static bool have_status = false;

/* Register the supervisor (from _PG_init). */
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

/*
 * The setting to change for a load failure of this kind: the engine names
 * its own parameters, the PostgreSQL settings that feed them are named here.
 */
static void
SetFailHint(int load_status)
{
	const char *hint = "";

	if (load_status == CBLLM_ERR_KV_BUDGET)
		hint = "Raise cbllm.gpu_memory_utilization, or lower cbllm.max_num_batched_tokens (its workspace comes first).";
	else if (load_status == CBLLM_ERR_KV_SIZE)
		hint = "Lower cbllm.kv_cache_size, or set it to 0 to size the KV cache from cbllm.gpu_memory_utilization.";
	SpinLockAcquire(&cbllm_shared->info_lock);
	strlcpy(cbllm_shared->fail_hint, hint, CBLLM_REASON_LEN);
	SpinLockRelease(&cbllm_shared->info_lock);
}

/* The engine state as published. */
static CbllmEngineState
GetState(void)
{
	CbllmEngineState st;

	SpinLockAcquire(&cbllm_shared->info_lock);
	st = cbllm_shared->state;
	SpinLockRelease(&cbllm_shared->info_lock);
	return st;
}

/* Wake every backend that has a slot, so that waiters re-check. */
static void
WakeAllOwners(void)
{
	for (int i = 0; i < cbllm_shared->n_slots; i++)
		CbllmWakeOwner(i);
}

/* on_shmem_exit: take the engine down with us, say that no worker runs, and wake the waiters. */
static void
WorkerExit(int code, Datum arg)
{
	CbllmEngineKill(&proc);
	CbllmEngineRelease(&proc);
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->worker_pid = 0;
	cbllm_shared->worker_latch = NULL;
	cbllm_shared->engine_pid = 0;
	if (cbllm_shared->state == ENGINE_READY || cbllm_shared->state == ENGINE_LOADING)
		cbllm_shared->state = ENGINE_STOPPED;
	SpinLockRelease(&cbllm_shared->info_lock);
	pg_atomic_write_u64(&cbllm_shared->heartbeat, 0);
	pg_atomic_write_u64(&cbllm_shared->engine_heartbeat, 0);
	WakeAllOwners();
}

/* The engine's parameters, from the GUCs. */
static void
EngineParams(cbllm_ipc_params *p)
{
	memset(p, 0, sizeof(*p));
	strlcpy(p->model_dir, cbllm_model, sizeof(p->model_dir));
	strlcpy(p->device, cbllm_device ? cbllm_device : "", sizeof(p->device));
	strlcpy(p->load_format, cbllm_load_format == 1 ? "dummy" : "auto", sizeof(p->load_format));
	strlcpy(p->weight_format, cbllm_weight_formats[cbllm_weight_format], sizeof(p->weight_format));
	strlcpy(p->kv_cache_dtype, cbllm_kv_cache_dtypes[cbllm_kv_cache_dtype], sizeof(p->kv_cache_dtype));
	strlcpy(p->chat_template, cbllm_chat_template ? cbllm_chat_template : "", sizeof(p->chat_template));
	p->n_threads = cbllm_threads;
	p->max_num_seqs = cbllm_max_num_seqs;
	p->max_num_batched_tokens = cbllm_max_num_batched_tokens;
	p->max_model_len = cbllm_max_model_len;
	p->block_size = cbllm_block_size;
	p->kv_cache_bytes = (uint64_t) cbllm_kv_cache_size_mb << 20;
	p->max_queued = cbllm_shared->n_slots;
	p->preempt_mode = cbllm_preempt_mode;
	p->swap_space_bytes = (uint64_t) cbllm_swap_space_mb << 20;
	p->no_prefix_caching = !cbllm_enable_prefix_caching;
	p->gpu_memory_utilization = cbllm_gpu_memory_utilization;
	p->no_cuda_graphs = !cbllm_cuda_graphs;
	p->priority_aging = cbllm_priority_aging > 0 ? cbllm_priority_aging : CBLLM_PRIORITY_AGING_OFF;
	p->max_step_ms = cbllm_max_step_ms < 0 ? CBLLM_MAX_STEP_AUTO : cbllm_max_step_ms;
	p->n_slots = cbllm_shared->n_slots;
}

/* Start an engine process; on failure to start, the state says why. */
static void
Spawn(void)
{
	cbllm_ipc_params p;
	char		err[CBLLM_REASON_LEN];
	char		reason[CBLLM_REASON_LEN];

	EngineParams(&p);
	if (!CbllmEngineSpawn(&proc, &p, CBLLM_MAX_MSG(cbllm_shared->prompt_cap), err))
	{
		elog(LOG, "cbllm: %s", err);
		model_failed = true;
		SetState(ENGINE_FAILED, err);
		young_deaths++;
		next_spawn_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), BACKOFF_MAX_MS);
		return;
	}
	bell_closed = false;
	have_status = false;
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->engine_pid = proc.pid;
	strlcpy(reason, cbllm_shared->reason, sizeof(reason));
	SpinLockRelease(&cbllm_shared->info_lock);
	elog(LOG, "cbllm: engine process %d started for model \"%s\"", (int) proc.pid, cbllm_model);
	/* keep the reason of a restart visible while the new engine loads; a failed load stays failed */
	if (!model_failed)
		SetState(ENGINE_LOADING, GetState() == ENGINE_LOADING ? reason : NULL);
}

/* Copy the engine's statistics and facts for cbllm_status(). */
static void
PublishStats(const cbllm_ipc_status *es)
{
	const cbllm_stats *st = &es->stats;

	SpinLockAcquire(&cbllm_shared->info_lock);
	strlcpy(cbllm_shared->device, es->device, sizeof(cbllm_shared->device));
	strlcpy(cbllm_shared->cpu_isa, es->cpu_isa, sizeof(cbllm_shared->cpu_isa));
	strlcpy(cbllm_shared->weight_types, es->weight_types, sizeof(cbllm_shared->weight_types));
	cbllm_shared->max_model_len = es->max_model_len;
	cbllm_shared->kv_blocks_total = st->kv_blocks_total;
	cbllm_shared->kv_blocks_free = st->kv_blocks_free;
	cbllm_shared->n_running = st->n_running;
	cbllm_shared->n_waiting = st->n_waiting;
	cbllm_shared->steps = st->steps;
	cbllm_shared->batch_seqs_sum = st->batch_seqs_sum;
	cbllm_shared->tokens_prompt = st->tokens_prompt;
	cbllm_shared->tokens_generated = st->tokens_generated;
	cbllm_shared->preemptions = st->preemptions;
	cbllm_shared->prefix_queries = st->prefix_queries;
	cbllm_shared->prefix_hits = st->prefix_hits;
	cbllm_shared->kv_blocks_cached = st->kv_blocks_cached;
	cbllm_shared->swap_blocks_total = st->swap_blocks_total;
	cbllm_shared->swap_blocks_free = st->swap_blocks_free;
	cbllm_shared->n_swapped = st->n_swapped;
	cbllm_shared->preemptions_recompute = st->preemptions_recompute;
	cbllm_shared->preemptions_swap = st->preemptions_swap;
	SpinLockRelease(&cbllm_shared->info_lock);
}

/* Follow the engine's state, facts and heartbeat. */
static void
Observe(void)
{
	cbllm_ipc_status es;
	uint64		beat = atomic_load(&proc.rg->heartbeat_ns);
	uint64		now_ns = cbllm_ipc_now_ns();

	if (beat != 0)
		pg_atomic_write_u64(&cbllm_shared->engine_heartbeat,
							(uint64) (GetCurrentTimestamp() -
									  (TimestampTz) ((now_ns > beat ? now_ns - beat : 0) / 1000)));
	if (!cbllm_ipc_status_read(proc.rg, &es))
		return;					/* being written: next pass */
	last_status = es;
	have_status = true;
	if (es.state == CBLLM_IPC_READY)
	{
		PublishStats(&es);
		if (GetState() != ENGINE_READY)
		{
			elog(LOG, "cbllm: model loaded; engine ready");
			model_failed = false;
			SetState(ENGINE_READY, NULL);
			WakeAllOwners();
		}
	}
	else if (es.state == CBLLM_IPC_FAILED)
	{
		if (!model_failed || GetState() != ENGINE_FAILED)
			elog(LOG, "cbllm: model failed to load: %s", es.reason);
		model_failed = true;
		SetState(ENGINE_FAILED, es.reason);
		SetFailHint(es.load_status);
		WakeAllOwners();
	}
}

/* The engine is gone (why says how): fail its running requests and plan the next one. */
static void
OnDeath(const char *why, int status)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		ran_long = TimestampDifferenceExceeds(proc.started_at, now, RAN_LONG_ENOUGH_MS);
	int			backoff;

	/* an engine that could not load the model says why in its status block */
	if (WIFEXITED(status) && WEXITSTATUS(status) == CBLLM_SERVER_LOAD_FAILED && proc.rg != NULL)
	{
		Observe();
		if (!model_failed)
		{
			model_failed = true;
			SetState(ENGINE_FAILED, have_status && last_status.reason[0] ? last_status.reason : why);
			WakeAllOwners();
		}
	}
	/* output it posted before it died is good: take it first */
	if (proc.rg != NULL && (!CbllmRequestsTakeEvents(&proc)))
		elog(LOG, "cbllm: the dead engine's last events were corrupt; dropped");
	CbllmEngineRelease(&proc);
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->engine_pid = 0;
	if (!model_failed)
		cbllm_shared->engine_restarts++;
	SpinLockRelease(&cbllm_shared->info_lock);
	pg_atomic_write_u64(&cbllm_shared->engine_heartbeat, 0);
	CbllmRequestsFailRunning(why);
	/* a new engine after a backoff; one that failed to load is retried too (its files may be fixed) */
	young_deaths = ran_long ? 1 : young_deaths + 1;
	backoff = Min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS << Min(young_deaths - 1, 6));
	next_spawn_at = TimestampTzPlusMilliseconds(now, backoff);
	if (model_failed)
	{
		/* the state says why; the loop refuses what waits meanwhile */
		elog(LOG, "cbllm: a new engine tries to load the model in %d ms", backoff);
		return;
	}
	ereport(LOG,
			(errmsg("cbllm: %s; its running requests failed, a new engine starts in %d ms", why,
					backoff)));
	{
		char		reason[CBLLM_REASON_LEN];

		snprintf(reason, sizeof(reason), "restarting: %s", why);
		SetState(ENGINE_LOADING, reason);
	}
	WakeAllOwners();
}

/* Kill the engine (stalled, or its channel corrupt) and handle its death. */
static void
KillEngine(const char *why)
{
	CbllmEngineKill(&proc);
	OnDeath(why, 0);
}

/* One pass with a live engine: its death, its state, its events, new requests, a stall. */
static void
WithEngine(void)
{
	char		why[CBLLM_REASON_LEN];
	int			status;

	if (CbllmEngineExited(&proc, why, sizeof(why), &status))
	{
		OnDeath(why, status);
		return;
	}
	Observe();
	if (GetState() != ENGINE_READY)
		return;
	if (!CbllmRequestsTakeEvents(&proc))
	{
		KillEngine("the cbllm engine process wrote a corrupt event and was restarted");
		return;
	}
	/* counters at least as new as the events just taken, before their requests are delivered */
	Observe();
	CbllmRequestsDispatch(&proc);
	if (cbllm_restart_stalled_engine && CbllmRequestsInEngine() > 0 && CbllmEngineStalled())
	{
		snprintf(why, sizeof(why),
				 "the cbllm engine process made no progress for %d ms with requests waiting and was killed (cbllm.restart_stalled_engine)",
				 cbllm_stall_timeout_ms);
		KillEngine(why);
	}
}

/* Sleep until a backend, the engine, or the timeout wakes us. */
static void
Sleep(bool busy)
{
	long		timeout = 1000;
	int			events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
	int			rc;

	if (proc.pid == 0 && next_spawn_at != 0)
	{
		long		secs;
		int			usecs;

		TimestampDifference(GetCurrentTimestamp(), next_spawn_at, &secs, &usecs);
		timeout = Min(timeout, secs * 1000 + usecs / 1000 + 1);
	}
	if (proc.pid != 0 && bell_closed)
		timeout = 10;			/* it is exiting: reap it soon */
	else if (proc.pid != 0)
		events |= WL_SOCKET_READABLE;
	if (busy && proc.pid == 0)
		timeout = Min(timeout, 100);
	rc = WaitLatchOrSocket(MyLatch, events, events & WL_SOCKET_READABLE ? proc.bell_from_engine : PGINVALID_SOCKET,
						   timeout, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	if (rc & WL_SOCKET_READABLE)
	{
		char		buf[256];
		ssize_t		n;

		while ((n = read(proc.bell_from_engine, buf, sizeof(buf))) > 0)
			;
		if (n == 0)
			bell_closed = true;
	}
}

/* The supervisor's entry point. */
void
cbllm_worker_main(Datum arg)
{
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
	CbllmRequestsInit(cbllm_shared->n_slots);
	/* requests a previous worker was running (or parking) are lost: fail them */
	CbllmRequestsRecover();

	if (cbllm_model == NULL || cbllm_model[0] == '\0')
		SetState(ENGINE_NO_MODEL, "cbllm.model is not set");
	else
	{
		elog(LOG, "cbllm: supervisor started (worker generation %u)", gen);
		SetState(ENGINE_LOADING, NULL);
	}
	WakeAllOwners();

	while (!ShutdownRequestPending)
	{
		bool		busy;
		CbllmEngineState st;

		pg_atomic_write_u64(&cbllm_shared->heartbeat, (uint64) GetCurrentTimestamp());
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		st = GetState();
		if (st == ENGINE_NO_MODEL || model_failed)
		{
			char		reason[CBLLM_REASON_LEN];

			SpinLockAcquire(&cbllm_shared->info_lock);
			strlcpy(reason, cbllm_shared->reason, sizeof(reason));
			SpinLockRelease(&cbllm_shared->info_lock);
			CbllmRequestsRefuseAll(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, reason);
		}
		if (st != ENGINE_NO_MODEL && proc.pid == 0 && GetCurrentTimestamp() >= next_spawn_at)
			Spawn();
		if (proc.pid != 0)
			WithEngine();
		busy = CbllmRequestsDeliver(proc.pid != 0 ? &proc : NULL);
		Sleep(busy);
	}
	/* exit status 1: the postmaster restarts the worker unless the server is stopping */
	CbllmEngineStop(&proc, 5000);
	CbllmEngineRelease(&proc);
	proc_exit(1);
}
