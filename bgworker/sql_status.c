/*
 * sql_status.c: cbllm_status(), the engine's state and counters as one row,
 * and cbllm.requests, one row per live request.
 *
 * What a role may see follows pg_stat_activity: superusers and members of
 * pg_read_all_stats see everything; other roles see the engine's state and
 * throughput, and their own requests in full, but not the model's path, the
 * prefix-cache counters (which would tell whether some prompt was sent
 * before) or the details of other roles' requests.
 */
#include "cbllm_pg.h"

#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(cbllm_status);
PG_FUNCTION_INFO_V1(cbllm_engines_status);
PG_FUNCTION_INFO_V1(cbllm_requests);

/* True when the caller may see every counter and every request (as pg_stat_activity decides). */
static bool
SeesAll(void)
{
	return superuser() || has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
}

/*
 * True when the supervisor, or the engine process it runs, has shown no
 * sign of life (a heartbeat at every pass of its loop) for
 * cbllm.stall_timeout.
 */
bool
CbllmEngineStalled(void)
{
	TimestampTz now = GetCurrentTimestamp();
	uint64		sup = pg_atomic_read_u64(&cbllm_shared->heartbeat);
	uint64		eng = pg_atomic_read_u64(&cbllm_shared->engine_heartbeat);

	return (sup != 0 && TimestampDifferenceExceeds((TimestampTz) sup, now, cbllm_stall_timeout_ms)) ||
		(eng != 0 && TimestampDifferenceExceeds((TimestampTz) eng, now, cbllm_stall_timeout_ms));
}

/* The name of an engine state. */
static const char *
StateName(CbllmEngineState st)
{
	switch (st)
	{
		case ENGINE_STOPPED:
			return "starting";
		case ENGINE_LOADING:
			return "loading";
		case ENGINE_READY:
			return "ready";
		case ENGINE_FAILED:
			return "failed";
		case ENGINE_NO_MODEL:
			return "no model";
	}
	return "unknown";
}

/* cbllm_status() returns one row; a copy under the info lock, never blocking the worker. */
Datum
cbllm_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	CbllmShared snap;
	Datum		v[32];
	bool		n[32] = {0};
	bool		all;

	CbllmCheckLoaded();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "cbllm_status must return a composite type");
	/* the engine fields only (not the latency histograms behind them) */
	SpinLockAcquire(&cbllm_shared->info_lock);
	memcpy(&snap, cbllm_shared, offsetof(CbllmShared, stats_reset_at));
	SpinLockRelease(&cbllm_shared->info_lock);
	all = SeesAll();
	v[0] = CStringGetTextDatum(snap.state == ENGINE_READY && CbllmEngineStalled() ? "stalled" :
							   StateName(snap.state));
	v[1] = CStringGetTextDatum(snap.reason);
	n[1] = snap.reason[0] == '\0';
	v[2] = CStringGetTextDatum(snap.model);
	n[2] = !all;
	v[3] = CStringGetTextDatum(snap.device[0] ? snap.device : "cpu");
	v[4] = CStringGetTextDatum(snap.cpu_isa);
	n[4] = snap.cpu_isa[0] == '\0';
	v[5] = Int32GetDatum(snap.stats.kv_blocks_total);
	v[6] = Int32GetDatum(snap.stats.kv_blocks_total - snap.stats.kv_blocks_free);
	v[7] = Int32GetDatum(snap.stats.n_running);
	v[8] = Int32GetDatum(snap.stats.n_waiting);
	v[9] = Int64GetDatum(snap.stats.tokens_prompt);
	n[9] = !all;				/* a prefix-cache hit computes fewer prompt tokens */
	v[10] = Int64GetDatum(snap.stats.tokens_generated);
	v[11] = Int64GetDatum(snap.stats.steps);
	v[12] = Float8GetDatum(snap.stats.steps ? (double) snap.stats.batch_seqs_sum / snap.stats.steps : 0.0);
	v[13] = Int64GetDatum(snap.stats.preemptions);
	v[14] = Int32GetDatum(snap.worker_pid);
	n[14] = snap.worker_pid == 0;
	v[15] = Int32GetDatum(snap.max_model_len);
	v[16] = Int32GetDatum(snap.stats.kv_blocks_cached);
	n[16] = !all;
	v[17] = Int32GetDatum(snap.stats.swap_blocks_total);
	v[18] = Int32GetDatum(snap.stats.swap_blocks_total - snap.stats.swap_blocks_free);
	v[19] = Int32GetDatum(snap.stats.n_swapped);
	v[20] = Int64GetDatum(snap.stats.preemptions_recompute);
	v[21] = Int64GetDatum(snap.stats.preemptions_swap);
	v[22] = Float8GetDatum(snap.stats.prefix_queries ? (double) snap.stats.prefix_hits / snap.stats.prefix_queries : 0.0);
	n[22] = !all;
	v[23] = TimestampTzGetDatum(snap.started_at);
	n[23] = snap.started_at == 0;
	v[24] = Int64GetDatum(snap.stats.batch_seqs_sum);
	v[25] = Int32GetDatum(CbllmParkedCount());
	v[26] = Int32GetDatum(snap.engine_pid);
	n[26] = snap.engine_pid == 0;
	v[27] = Int64GetDatum(snap.engine_restarts);
	v[28] = CStringGetTextDatum(snap.weight_types);
	n[28] = snap.weight_types[0] == '\0';
	/* a hybrid model's linear-attention states; 0 for other models */
	v[29] = Int32GetDatum(snap.stats.state_slots_total);
	v[30] = Int32GetDatum(snap.stats.state_slots_used);
	v[31] = Int64GetDatum(snap.stats.state_bytes);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), v, n)));
}

/*
 * cbllm_engines_status(): one row per engine process of the supervisor
 * (cbllm.engines), copied under the info lock.
 */
Datum
cbllm_engines_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CbllmEngineInfo snap[CBLLM_MAX_ENGINES];
	TimestampTz now = GetCurrentTimestamp();
	bool		sees_all = SeesAll();
	int			n;

	CbllmCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	SpinLockAcquire(&cbllm_shared->info_lock);
	n = Min(cbllm_shared->n_engines, CBLLM_MAX_ENGINES);
	memcpy(snap, cbllm_shared->engines, sizeof(CbllmEngineInfo) * n);
	SpinLockRelease(&cbllm_shared->info_lock);
	for (int k = 0; k < n; k++)
	{
		const CbllmEngineInfo *e = &snap[k];
		Datum		v[14];
		bool		nulls[14] = {0};
		bool		stalled = e->state == ENGINE_READY && e->heartbeat != 0 &&
			TimestampDifferenceExceeds(e->heartbeat, now, cbllm_stall_timeout_ms);

		v[0] = Int32GetDatum(k + 1);
		v[1] = CStringGetTextDatum(stalled ? "stalled" : StateName(e->state));
		v[2] = CStringGetTextDatum(e->reason);
		nulls[2] = e->reason[0] == '\0';
		v[3] = CStringGetTextDatum(e->device);
		nulls[3] = e->device[0] == '\0';
		v[4] = Int32GetDatum(e->pid);
		nulls[4] = e->pid == 0;
		v[5] = Int64GetDatum(e->restarts);
		v[6] = Int32GetDatum(e->requests);
		v[7] = Int32GetDatum(e->stats.kv_blocks_total);
		v[8] = Int32GetDatum(e->stats.kv_blocks_total - e->stats.kv_blocks_free);
		v[9] = Int32GetDatum(e->stats.n_running);
		v[10] = Int32GetDatum(e->stats.n_waiting);
		v[11] = Int64GetDatum(e->stats.steps);
		v[12] = Int64GetDatum(e->stats.tokens_prompt);
		nulls[12] = !sees_all;	/* prompt tokens computed tell prefix-cache hits, as in cbllm_status() */
		v[13] = Int64GetDatum(e->stats.tokens_generated);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
	}
	return (Datum) 0;
}

/*
 * The name of a slot state, as cbllm.requests shows it (with the engine phase).
 * A request the engine has finished whose output is still on its way through
 * the ring (its slot still RUNNING) is "done", as it is once the output is out.
 */
static const char *
RequestState(CbllmSlotState st, int phase)
{
	static const char *const phases[] = {"queued", "prefill", "decode", "preempted", "swapped",
	"done"};

	switch (st)
	{
		case SLOT_CLAIMED:
		case SLOT_SUBMITTED:
			return "submitted";
		case SLOT_RUNNING:
			return phase >= 0 && phase <= 5 ? phases[phase] : "running";
		case SLOT_DONE:
		case SLOT_PARKING:
			return "done";
		case SLOT_FAILED:
			return "failed";
		case SLOT_CANCELLED:
			return "cancelled";
		default:
			return "free";
	}
}

/* cbllm_requests(): one row per live request, each copied under its slot's lock. */
Datum
cbllm_requests(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	bool		all;
	Oid			me = GetUserId();

	CbllmCheckLoaded();
	all = SeesAll();
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < cbllm_shared->n_slots; i++)
	{
		CbllmSlot  *s = CbllmGetSlot(i);
		CbllmSlot	c;
		Datum		v[11];
		bool		n[11] = {0};
		bool		mine;

		/* the fields shown, copied under the lock (a few words; the slot's buffers are never read) */
		SpinLockAcquire(&s->mutex);
		c.state = s->state;
		c.serial = s->serial;
		c.owner_pid = s->owner_pid;
		c.owner_role = s->owner_role;
		c.params.priority = s->params.priority;
		c.progress = s->progress;
		c.submitted_at = s->submitted_at;
		c.first_token_at = s->first_token_at;
		SpinLockRelease(&s->mutex);
		if (c.state == SLOT_FREE || c.state == SLOT_CLAIMED)
			continue;
		mine = all || c.owner_role == me;
		v[0] = Int64GetDatum((int64) ((c.serial << 16) | (uint64) i));
		v[1] = Int32GetDatum(c.owner_pid);
		v[2] = ObjectIdGetDatum(c.owner_role);
		v[3] = CStringGetTextDatum(RequestState(c.state, c.progress.phase));
		v[4] = Int32GetDatum(c.params.priority);
		v[5] = Int32GetDatum(c.progress.n_prompt);
		v[6] = Int32GetDatum(c.progress.n_generated);
		v[7] = TimestampTzGetDatum(c.submitted_at);
		v[8] = Float8GetDatum((double) (now - c.submitted_at) / 1000.0);
		v[9] = Float8GetDatum((double) (c.first_token_at - c.submitted_at) / 1000.0);
		v[10] = Float8GetDatum(c.progress.queue_seconds * 1000.0);
		n[5] = c.progress.n_prompt == 0 || !mine;
		n[6] = !mine;
		n[9] = c.first_token_at == 0 || !mine;
		n[10] = c.progress.queue_seconds < 0 || !mine;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
	}
	return (Datum) 0;
}
