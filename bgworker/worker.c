/*
 * worker.c: the supervisor, a background worker that keeps an engine
 * process for the cluster.
 *
 * The engine (cbllm-engine, see engine_proc.c and src/ipc/engine_server.c) runs
 * in a process of its own, started by this worker and not by the
 * postmaster, and talks to it through a shared-memory region of its own
 * (src/ipc/ipc.h): it holds the model, the KV cache, the threads and the GPU
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
 * With cbllm.engines > 1 it keeps that many engines, each its own process
 * with its own copy of the model and KV cache (data parallel; engine k takes
 * GPU k where there are GPUs): each lives, dies and restarts on its own, a
 * new request goes to the ready engine with the fewest requests
 * (worker_requests.c) and stays there, and an engine's death fails only the
 * requests it was running.  cbllm_status() sums them; cbllm.engines shows
 * each.
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

/* One engine process and what the supervisor knows of it; all of it is this process's alone. */
typedef struct EngineRun
{
	CbllmEngineProc proc;
	bool		bell_closed;	/* its doorbell pipe reached EOF: it is exiting */
	bool		model_failed;	/* its last process could not load the model */
	int			young_deaths;	/* deaths in a row of processes that did not run long */
	TimestampTz next_spawn_at;
	cbllm_ipc_status last_status;	/* its last consistent status block */
	bool		have_status;
	CbllmEngineState state;
	char		reason[CBLLM_REASON_LEN];
	int64		restarts;
	TimestampTz heartbeat;		/* when it last passed its loop; 0: unknown */
} EngineRun;

static EngineRun runs[CBLLM_MAX_ENGINES];
static int	n_runs = 1;

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

/* Whether any engine is ready. */
static bool
AnyReady(void)
{
	for (int k = 0; k < n_runs; k++)
		if (runs[k].state == ENGINE_READY)
			return true;
	return false;
}

/*
 * Publish every engine and the whole under the info lock: cbllm.engines
 * reads each, cbllm_status() the whole.  The whole is ready when any engine
 * is (else loading when any loads, else as the first engine is), with the
 * reason of the first engine in that state; its counters are the sums of
 * the engines that last said them; its engine_pid is the first engine's.
 */
static void
Publish(void)
{
	static const CbllmEngineState order[] = {ENGINE_READY, ENGINE_LOADING, ENGINE_STOPPED,
	ENGINE_FAILED, ENGINE_NO_MODEL};
	int			lead = 0;
	bool		found = false;
	CbllmShared *sh = cbllm_shared;
	TimestampTz oldest = 0;
	bool		facts = false;
	int			requests[CBLLM_MAX_ENGINES];

	for (int o = 0; o < (int) lengthof(order) && !found; o++)
		for (int k = 0; k < n_runs && !found; k++)
			if (runs[k].state == order[o])
			{
				lead = k;
				found = true;
			}
	for (int k = 0; k < n_runs; k++)
		requests[k] = CbllmRequestsInEngine(k);	/* counted outside the lock */
	SpinLockAcquire(&sh->info_lock);
	sh->n_engines = n_runs;
	sh->state = runs[lead].state;
	strlcpy(sh->reason, runs[lead].reason, CBLLM_REASON_LEN);
	sh->engine_pid = runs[0].proc.pid;
	sh->engine_restarts = 0;
	memset(&sh->stats, 0, sizeof(sh->stats));
	for (int k = 0; k < n_runs; k++)
	{
		EngineRun  *r = &runs[k];
		CbllmEngineInfo *in = &sh->engines[k];
		const cbllm_stats *st = &r->last_status.stats;
		bool		counts = r->have_status && r->last_status.state == CBLLM_IPC_READY;

		in->state = r->state;
		strlcpy(in->reason, r->reason, CBLLM_REASON_LEN);
		strlcpy(in->device, counts ? r->last_status.device : "", sizeof(in->device));
		in->pid = r->proc.pid;
		in->restarts = r->restarts;
		in->requests = requests[k];
		in->heartbeat = r->proc.pid != 0 ? r->heartbeat : 0;
		if (counts)
			in->stats = *st;
		else
			memset(&in->stats, 0, sizeof(in->stats));
		sh->engine_restarts += r->restarts;
		if (in->heartbeat != 0 && (oldest == 0 || in->heartbeat < oldest))
			oldest = in->heartbeat;
		if (!counts)
			continue;
		if (!facts)
		{
			facts = true;
			strlcpy(sh->device, r->last_status.device, sizeof(sh->device));
			strlcpy(sh->cpu_isa, r->last_status.cpu_isa, sizeof(sh->cpu_isa));
			strlcpy(sh->weight_types, r->last_status.weight_types, sizeof(sh->weight_types));
			sh->max_model_len = r->last_status.max_model_len;
		}
		cbllm_stats_add(&sh->stats, st);
	}
	SpinLockRelease(&sh->info_lock);
	pg_atomic_write_u64(&sh->engine_heartbeat, (uint64) oldest);
}

/* Set engine k's state (and a reason), and publish. */
static void
SetState(int k, CbllmEngineState st, const char *reason)
{
	runs[k].state = st;
	strlcpy(runs[k].reason, reason ? reason : "", CBLLM_REASON_LEN);
	Publish();
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

/* Wake every backend that has a slot, so that waiters re-check. */
static void
WakeAllOwners(void)
{
	for (int i = 0; i < cbllm_shared->n_slots; i++)
		CbllmWakeOwner(i);
}

/* on_shmem_exit: take the engines down with us, say that no worker runs, and wake the waiters. */
static void
WorkerExit(int code, Datum arg)
{
	for (int k = 0; k < n_runs; k++)
	{
		CbllmEngineKill(&runs[k].proc);
		CbllmEngineRelease(&runs[k].proc);
	}
	SpinLockAcquire(&cbllm_shared->info_lock);
	cbllm_shared->worker_pid = 0;
	cbllm_shared->worker_latch = NULL;
	cbllm_shared->engine_pid = 0;
	if (cbllm_shared->state == ENGINE_READY || cbllm_shared->state == ENGINE_LOADING)
		cbllm_shared->state = ENGINE_STOPPED;
	for (int k = 0; k < n_runs; k++)
	{
		cbllm_shared->engines[k].pid = 0;
		if (cbllm_shared->engines[k].state == ENGINE_READY ||
			cbllm_shared->engines[k].state == ENGINE_LOADING)
			cbllm_shared->engines[k].state = ENGINE_STOPPED;
	}
	SpinLockRelease(&cbllm_shared->info_lock);
	pg_atomic_write_u64(&cbllm_shared->heartbeat, 0);
	pg_atomic_write_u64(&cbllm_shared->engine_heartbeat, 0);
	WakeAllOwners();
}

/* Engine k's parameters, from the GUCs. */
static void
EngineParams(cbllm_ipc_params *p, int k)
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
	p->engine_index = k;
	p->n_engines = n_runs;
}

/* The name of engine k in messages: "" when there is only one. */
static const char *
EngineName(int k)
{
	static char buf[32];

	if (n_runs == 1)
		return "";
	snprintf(buf, sizeof(buf), " %d", k + 1);
	return buf;
}

/* Start engine k's process; on failure to start, its state says why. */
static void
Spawn(int k)
{
	EngineRun  *r = &runs[k];
	cbllm_ipc_params p;
	char		err[CBLLM_REASON_LEN];
	char		reason[CBLLM_REASON_LEN];

	EngineParams(&p, k);
	if (!CbllmEngineSpawn(&r->proc, &p, CBLLM_MAX_MSG(cbllm_shared->prompt_cap), err))
	{
		elog(LOG, "cbllm: %s", err);
		r->model_failed = true;
		SetState(k, ENGINE_FAILED, err);
		r->young_deaths++;
		r->next_spawn_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), BACKOFF_MAX_MS);
		return;
	}
	r->bell_closed = false;
	r->have_status = false;
	r->heartbeat = 0;
	strlcpy(reason, r->reason, sizeof(reason));
	elog(LOG, "cbllm: engine%s process %d started for model \"%s\"", EngineName(k), (int) r->proc.pid,
		 cbllm_model);
	/* keep the reason of a restart visible while the new engine loads; a failed load stays failed */
	if (!r->model_failed)
		SetState(k, ENGINE_LOADING, r->state == ENGINE_LOADING ? reason : NULL);
	else
		Publish();
}

/*
 * Follow engine k's state, facts and heartbeat.  A change of state is
 * published at once; counters and heartbeats once a pass, by the loop.
 */
static void
Observe(int k)
{
	EngineRun  *r = &runs[k];
	cbllm_ipc_status es;
	uint64		beat = atomic_load(&r->proc.rg->heartbeat_ns);
	uint64		now_ns = cbllm_ipc_now_ns();

	if (beat != 0)
		r->heartbeat = GetCurrentTimestamp() -
			(TimestampTz) ((now_ns > beat ? now_ns - beat : 0) / 1000);
	if (!cbllm_ipc_status_read(r->proc.rg, &es))
		return;					/* being written: next pass */
	r->last_status = es;
	r->have_status = true;
	if (es.state == CBLLM_IPC_READY)
	{
		if (r->state != ENGINE_READY)
		{
			elog(LOG, "cbllm: model loaded; engine%s ready", EngineName(k));
			if (es.stats.state_slots_total > 0)
				elog(LOG, "cbllm: the model has linear-attention layers: %d state slots of %lld bytes each; prefix caching is off, as a cached prefix has no recurrent state to resume",
					 es.stats.state_slots_total,
					 (long long) (es.stats.state_bytes / es.stats.state_slots_total));
			r->model_failed = false;
			SetState(k, ENGINE_READY, NULL);
			WakeAllOwners();
		}
	}
	else if (es.state == CBLLM_IPC_FAILED)
	{
		if (!r->model_failed || r->state != ENGINE_FAILED)
			elog(LOG, "cbllm: model failed to load in engine%s: %s", EngineName(k), es.reason);
		r->model_failed = true;
		SetState(k, ENGINE_FAILED, es.reason);
		SetFailHint(es.load_status);
		WakeAllOwners();
	}
}

/* Engine k is gone (why says how): fail its running requests and plan its next process. */
static void
OnDeath(int k, const char *why, int status)
{
	EngineRun  *r = &runs[k];
	TimestampTz now = GetCurrentTimestamp();
	bool		ran_long = TimestampDifferenceExceeds(r->proc.started_at, now, RAN_LONG_ENOUGH_MS);
	int			backoff;

	/* an engine that could not load the model says why in its status block */
	if (WIFEXITED(status) && WEXITSTATUS(status) == CBLLM_SERVER_LOAD_FAILED && r->proc.rg != NULL)
	{
		Observe(k);
		if (!r->model_failed)
		{
			r->model_failed = true;
			SetState(k, ENGINE_FAILED,
					 r->have_status && r->last_status.reason[0] ? r->last_status.reason : why);
			WakeAllOwners();
		}
	}
	/* output it posted before it died is good: take it first */
	if (r->proc.rg != NULL && (!CbllmRequestsTakeEvents(&r->proc, k)))
		elog(LOG, "cbllm: the dead engine's last events were corrupt; dropped");
	CbllmEngineRelease(&r->proc);
	if (!r->model_failed)
		r->restarts++;
	r->have_status = false;
	r->heartbeat = 0;
	CbllmRequestsFailRunning(k, why);
	/* a new engine after a backoff; one that failed to load is retried too (its files may be fixed) */
	r->young_deaths = ran_long ? 1 : r->young_deaths + 1;
	backoff = Min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS << Min(r->young_deaths - 1, 6));
	r->next_spawn_at = TimestampTzPlusMilliseconds(now, backoff);
	if (r->model_failed)
	{
		/* the state says why; the loop refuses what waits meanwhile */
		elog(LOG, "cbllm: a new engine%s tries to load the model in %d ms", EngineName(k), backoff);
		Publish();
		return;
	}
	ereport(LOG,
			(errmsg("cbllm: %s; its running requests failed, a new engine%s starts in %d ms", why,
					EngineName(k), backoff)));
	{
		char		reason[CBLLM_REASON_LEN];

		snprintf(reason, sizeof(reason), "restarting: %s", why);
		SetState(k, ENGINE_LOADING, reason);
	}
	WakeAllOwners();
}

/* Kill engine k (stalled, or its channel corrupt) and handle its death. */
static void
KillEngine(int k, const char *why)
{
	CbllmEngineKill(&runs[k].proc);
	OnDeath(k, why, 0);
}

/* Whether engine k shows no sign of life for cbllm.stall_timeout. */
static bool
Stalled(int k)
{
	return runs[k].heartbeat != 0 &&
		TimestampDifferenceExceeds(runs[k].heartbeat, GetCurrentTimestamp(), cbllm_stall_timeout_ms);
}

/* One pass with engine k's live process: its death, its state, its events, a stall. */
static void
WithEngine(int k)
{
	EngineRun  *r = &runs[k];
	char		why[CBLLM_REASON_LEN];
	int			status;

	if (CbllmEngineExited(&r->proc, why, sizeof(why), &status))
	{
		OnDeath(k, why, status);
		return;
	}
	Observe(k);
	if (r->state != ENGINE_READY)
		return;
	if (!CbllmRequestsTakeEvents(&r->proc, k))
	{
		KillEngine(k, "the cbllm engine process wrote a corrupt event and was restarted");
		return;
	}
	Observe(k);					/* the counters that came with those events */
	if (cbllm_restart_stalled_engine && CbllmRequestsInEngine(k) > 0 && Stalled(k))
	{
		snprintf(why, sizeof(why),
				 "the cbllm engine process made no progress for %d ms with requests waiting and was killed (cbllm.restart_stalled_engine)",
				 cbllm_stall_timeout_ms);
		KillEngine(k, why);
	}
}

/* The engines as the requests' half sees them. */
static void
EngineSet(CbllmEngineSet *es)
{
	es->n = n_runs;
	for (int k = 0; k < n_runs; k++)
	{
		es->procs[k] = runs[k].proc.pid != 0 ? &runs[k].proc : NULL;
		es->ready[k] = runs[k].proc.pid != 0 && runs[k].state == ENGINE_READY;
		es->kv_free[k] = runs[k].have_status ? runs[k].last_status.stats.kv_blocks_free : 0;
	}
}

/* Sleep until a backend, an engine, or the timeout wakes us. */
static void
Sleep(bool busy)
{
	long		timeout = 1000;
	WaitEventSet *set = CreateWaitEventSet(CurrentMemoryContext, 2 + n_runs);
	WaitEvent	ev[1 + CBLLM_MAX_ENGINES];
	int			n;

	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int k = 0; k < n_runs; k++)
	{
		EngineRun  *r = &runs[k];

		if (r->proc.pid == 0 && r->next_spawn_at != 0)
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(), r->next_spawn_at, &secs, &usecs);
			timeout = Min(timeout, secs * 1000 + usecs / 1000 + 1);
		}
		if (r->proc.pid != 0 && r->bell_closed)
			timeout = 10;		/* it is exiting: reap it soon */
		else if (r->proc.pid != 0)
			AddWaitEventToSet(set, WL_SOCKET_READABLE, r->proc.bell_from_engine, NULL,
							  (void *) (intptr_t) (k + 1));
		if (busy && r->proc.pid == 0)
			timeout = Min(timeout, 100);
	}
	n = WaitEventSetWait(set, timeout, ev, lengthof(ev), PG_WAIT_EXTENSION);
	FreeWaitEventSet(set);
	ResetLatch(MyLatch);
	for (int i = 0; i < n; i++)
	{
		EngineRun  *r;
		char		buf[256];
		ssize_t		got;

		if (!(ev[i].events & WL_SOCKET_READABLE) || ev[i].user_data == NULL)
			continue;
		r = &runs[(intptr_t) ev[i].user_data - 1];
		while ((got = read(r->proc.bell_from_engine, buf, sizeof(buf))) > 0)
			;
		if (got == 0)
			r->bell_closed = true;
	}
}

/* Whether no engine can serve: no model, or every engine failed to load it. */
static bool
NoneCanServe(void)
{
	for (int k = 0; k < n_runs; k++)
		if (!runs[k].model_failed)
			return false;
	return true;
}

/* The supervisor's entry point. */
void
cbllm_worker_main(Datum arg)
{
	uint32		gen;
	bool		no_model = cbllm_model == NULL || cbllm_model[0] == '\0';

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	n_runs = Max(1, Min(cbllm_engines, CBLLM_MAX_ENGINES));
	for (int k = 0; k < n_runs; k++)
	{
		memset(&runs[k], 0, sizeof(runs[k]));
		runs[k].proc.region_fd = runs[k].proc.bell_to_engine = runs[k].proc.bell_from_engine = -1;
	}
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

	for (int k = 0; k < n_runs; k++)
	{
		runs[k].state = no_model ? ENGINE_NO_MODEL : ENGINE_LOADING;
		strlcpy(runs[k].reason, no_model ? "cbllm.model is not set" : "", CBLLM_REASON_LEN);
	}
	if (!no_model)
		elog(LOG, "cbllm: supervisor started (worker generation %u, %d engine%s)", gen, n_runs,
			 n_runs > 1 ? "s" : "");
	Publish();
	WakeAllOwners();

	while (!ShutdownRequestPending)
	{
		bool		busy;
		CbllmEngineSet es;

		pg_atomic_write_u64(&cbllm_shared->heartbeat, (uint64) GetCurrentTimestamp());
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (no_model || NoneCanServe())
		{
			char		reason[CBLLM_REASON_LEN];

			SpinLockAcquire(&cbllm_shared->info_lock);
			strlcpy(reason, cbllm_shared->reason, sizeof(reason));
			SpinLockRelease(&cbllm_shared->info_lock);
			CbllmRequestsRefuseAll(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, reason);
		}
		for (int k = 0; k < n_runs && !no_model; k++)
		{
			if (runs[k].proc.pid == 0 && GetCurrentTimestamp() >= runs[k].next_spawn_at)
				Spawn(k);
			if (runs[k].proc.pid != 0)
				WithEngine(k);
		}
		/* counters at least as new as the events just taken, before their requests are delivered */
		Publish();
		EngineSet(&es);
		if (AnyReady())
			CbllmRequestsDispatch(&es);
		busy = CbllmRequestsDeliver(&es);
		Sleep(busy);
	}
	/* exit status 1: the postmaster restarts the worker unless the server is stopping */
	for (int k = 0; k < n_runs; k++)
	{
		CbllmEngineStop(&runs[k].proc, 5000);
		CbllmEngineRelease(&runs[k].proc);
	}
	proc_exit(1);
}
