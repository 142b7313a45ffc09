/* sql_status.c: cbllm_status(), the engine's state and counters as one row. */
#include "cbllm_pg.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(cbllm_status);

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
	Datum		v[16];
	bool		n[16] = {0};

	if (cbllm_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cbllm is not loaded"),
				 errhint("Add cbllm to shared_preload_libraries and restart the server.")));
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "cbllm_status must return a composite type");
	SpinLockAcquire(&cbllm_shared->info_lock);
	memcpy(&snap, cbllm_shared, sizeof(snap));
	SpinLockRelease(&cbllm_shared->info_lock);
	v[0] = CStringGetTextDatum(StateName(snap.state));
	v[1] = CStringGetTextDatum(snap.reason);
	n[1] = snap.reason[0] == '\0';
	v[2] = CStringGetTextDatum(snap.model);
	v[3] = CStringGetTextDatum(snap.device[0] ? snap.device : "cpu");
	v[4] = CStringGetTextDatum(snap.cpu_isa);
	n[4] = snap.cpu_isa[0] == '\0';
	v[5] = Int32GetDatum(snap.kv_blocks_total);
	v[6] = Int32GetDatum(snap.kv_blocks_total - snap.kv_blocks_free);
	v[7] = Int32GetDatum(snap.n_running);
	v[8] = Int32GetDatum(snap.n_waiting);
	v[9] = Int64GetDatum(snap.tokens_prompt);
	v[10] = Int64GetDatum(snap.tokens_generated);
	v[11] = Int64GetDatum(snap.steps);
	v[12] = Float8GetDatum(snap.steps ? (double) snap.batch_seqs_sum / snap.steps : 0.0);
	v[13] = Int64GetDatum(snap.preemptions);
	v[14] = Int32GetDatum(snap.worker_pid);
	n[14] = snap.worker_pid == 0;
	v[15] = Int32GetDatum(snap.max_model_len);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), v, n)));
}
