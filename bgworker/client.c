/*
 * client.c: the backend's side of a request: wait for the engine, claim a
 * slot, submit, read framed text pieces, wait on the latch, cancel.
 *
 * Every slot a backend holds is also in a backend-local list, so that an
 * error, a cancelled query, the end of the (sub)transaction or the backend's
 * exit cancels whatever is still in flight (the worker then aborts it in
 * the engine and frees its blocks within one step).  The moves of a slot
 * themselves are all in slot.c.
 */
#include "cbllm_pg.h"

#include <math.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "libpq/libpq.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"

#include "api/cbllm.h"

#define MAX_OWNED 4096

/* The hint of a model that failed to load, when no setting is to blame. */
#define LOAD_FAILED_HINT "Fix cbllm.model or the files it names: the engine tries again by itself, at most every 30 seconds."

static CbllmHandle owned[MAX_OWNED];
static int	n_owned = 0;
static bool callbacks_registered = false;

/* Error out unless cbllm was loaded by shared_preload_libraries. */
void
CbllmCheckLoaded(void)
{
	if (cbllm_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cbllm is not loaded"),
				 errdetail("The cbllm engine runs in a background worker started at server start."),
				 errhint("Add cbllm to shared_preload_libraries and restart the server.")));
}

/* Raise a failure reported by the worker, with its sqlstate. */
void
CbllmRaiseFailure(int errcode_in, const char *msg)
{
	/* refused because the model does not load: the same error as a call that finds it so */
	if (errcode_in == ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)
	{
		char		hint[CBLLM_REASON_LEN];

		SpinLockAcquire(&cbllm_shared->info_lock);
		strlcpy(hint, cbllm_shared->fail_hint, CBLLM_REASON_LEN);
		SpinLockRelease(&cbllm_shared->info_lock);
		ereport(ERROR,
				(errcode(errcode_in),
				 errmsg("the cbllm engine failed to load its model"),
				 errdetail("%s", msg),
				 errhint("%s", hint[0] ? hint : LOAD_FAILED_HINT)));
	}
	ereport(ERROR,
			(errcode(errcode_in ? errcode_in : ERRCODE_INTERNAL_ERROR),
			 errmsg("cbllm request failed: %s", msg),
			 errcode_in == ERRCODE_PROGRAM_LIMIT_EXCEEDED ?
			 errhint("Shorten the prompt or raise cbllm.max_model_len (and the KV cache size).") :
			 errcode_in == ERRCODE_STRING_DATA_RIGHT_TRUNCATION ?
			 errhint("Raise max_tokens, or loosen the constraint.") :
			 errcode_in == ERRCODE_CONNECTION_FAILURE ?
			 errhint("The cbllm engine is restarted by itself; run the statement again.") : 0));
}

/* Check one request's parameters: the first problem's field, sqlstate and message; true when none. */
static bool
ArgsCheck(const CbllmRequestArgs *a, cbllm_request_field *field, int *errcode_out, char *errmsg_out)
{
	cbllm_request_limits lim = {.max_tokens_limit = cbllm_max_tokens_limit,
	.max_prompt_bytes = cbllm_max_prompt_bytes};

	switch (cbllm_request_check(&lim, &a->params, field, errmsg_out, CBLLM_ERROR_LEN))
	{
		case CBLLM_CHECK_OK:
			return true;
		case CBLLM_CHECK_TOO_LARGE:
			*errcode_out = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
			return false;
		default:
			*errcode_out = ERRCODE_INVALID_PARAMETER_VALUE;
			return false;
	}
}

/*
 * Check one request's parameters without raising: returns false with the
 * sqlstate and message of the first problem.  (The array form turns a bad
 * element into NULL with on_error => 'null', so nothing here may throw.)
 */
bool
CbllmArgsError(const CbllmRequestArgs *a, int *errcode_out, char *errmsg_out)
{
	return ArgsCheck(a, NULL, errcode_out, errmsg_out);
}

/* The hint that goes with a refused argument, by its field. */
static const char *
ArgsHint(cbllm_request_field field)
{
	switch (field)
	{
		case CBLLM_FIELD_MAX_TOKENS:
			return "The upper limit is cbllm.max_tokens_limit.";
		case CBLLM_FIELD_TEMPERATURE:
			return "Use 0 for greedy decoding.";
		case CBLLM_FIELD_TOP_P:
			return "Use 1 to turn nucleus sampling off.";
		case CBLLM_FIELD_TOP_K:
			return "Use 0 to turn top-k sampling off.";
		case CBLLM_FIELD_PRIORITY:
			return "Higher priorities are served first.";
		case CBLLM_FIELD_N_STOP:
			return "Keep the most specific stop strings.";
		case CBLLM_FIELD_STOP_LEN:
			return "Remove empty strings from the stop array.";
		case CBLLM_FIELD_BYTES:
			return "Raise cbllm.max_prompt_bytes (requires a restart).";
		case CBLLM_FIELD_NONE:
		case CBLLM_FIELD_PROMPT_LEN:
		case CBLLM_FIELD_MIN_P:
			return "Use 0 to turn min-p filtering off.";
		case CBLLM_FIELD_REPETITION_PENALTY:
			return "Use 1 to turn the repetition penalty off.";
		case CBLLM_FIELD_FREQUENCY_PENALTY:
		case CBLLM_FIELD_PRESENCE_PENALTY:
			return "Use 0 to turn the penalty off.";
		case CBLLM_FIELD_LOGPROBS:
			return "Give NULL for no logprobs, 0 for the chosen tokens' only.";
		case CBLLM_FIELD_N_BIAS:
		case CBLLM_FIELD_CONSTRAINT_LEN:
		case CBLLM_FIELD_DEFAULTS:
			break;
	}
	return NULL;
}

/* Check one request's parameters, with the errors a user sees. */
void
CbllmCheckArgs(const CbllmRequestArgs *a)
{
	cbllm_request_field field;
	int			code;
	char		msg[CBLLM_ERROR_LEN];

	if (!ArgsCheck(a, &field, &code, msg))
	{
		const char *hint = ArgsHint(field);

		ereport(ERROR, (errcode(code), errmsg("%s", msg), hint ? errhint("%s", hint) : 0));
	}
}

/* Defaults for a request of this kind (generation options as the SQL defaults give them). */
void
CbllmDefaultParams(cbllm_request_params *p, int kind)
{
	memset(p, 0, sizeof(*p));
	p->kind = kind;
	p->max_tokens = kind == CBLLM_REQ_GENERATE ? 256 : 1;
	p->temperature = 0;
	p->top_p = 1;
}

/* Read the engine state and reason (and the hint of a failure, if hint is given). */
static CbllmEngineState
EngineStateHint(char *reason, char *hint, int *worker_pid)
{
	CbllmEngineState st;

	SpinLockAcquire(&cbllm_shared->info_lock);
	st = cbllm_shared->state;
	if (reason)
		strlcpy(reason, cbllm_shared->reason, CBLLM_REASON_LEN);
	if (hint)
		strlcpy(hint, cbllm_shared->fail_hint, CBLLM_REASON_LEN);
	if (worker_pid)
		*worker_pid = cbllm_shared->worker_pid;
	SpinLockRelease(&cbllm_shared->info_lock);
	return st;
}

/* Read the engine state and reason. */
static CbllmEngineState
EngineState(char *reason, int *worker_pid)
{
	return EngineStateHint(reason, NULL, worker_pid);
}

/* Wait (up to cbllm.load_timeout) until the engine is ready, or raise why not. */
void
CbllmWaitReady(void)
{
	TimestampTz start = GetCurrentTimestamp();
	char		reason[CBLLM_REASON_LEN];
	char		hint[CBLLM_REASON_LEN];

	CbllmCheckLoaded();
	for (;;)
	{
		CbllmEngineState st = EngineStateHint(reason, hint, NULL);

		if (st == ENGINE_READY)
			return;
		if (st == ENGINE_FAILED)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the cbllm engine failed to load its model"),
					 errdetail("%s", reason),
					 errhint("%s", hint[0] ? hint : LOAD_FAILED_HINT)));
		if (st == ENGINE_NO_MODEL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("no model is configured"),
					 errhint("Set cbllm.model to a HuggingFace model directory and restart the server.")));
		if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), cbllm_load_timeout_ms))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the cbllm engine is still loading"),
					 errdetail("The engine was not ready after %d ms.", cbllm_load_timeout_ms),
					 errhint("Try again later, or raise cbllm.load_timeout.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Drop h from the owned list. */
static void
Disown(const CbllmHandle *h)
{
	for (int i = 0; i < n_owned; i++)
		if (owned[i].slot == h->slot && owned[i].serial == h->serial)
		{
			owned[i] = owned[--n_owned];
			return;
		}
}

/* Cancel the request of h (or free its slot, or its parked result, if it is finished). */
void
CbllmCancel(CbllmHandle *h)
{
	if (h->slot < 0 || cbllm_shared == NULL)
		return;
	if (CbllmSlotGiveUp(h->slot, h->serial))
		CbllmWakeWorker();
	Disown(h);
	h->slot = -1;
}

/* Free the slot of a finished request. */
void
CbllmRelease(CbllmHandle *h)
{
	CbllmCancel(h);
}

/* Cancel the owned requests for which drop(h) is true. */
static void
CancelOwnedWhere(bool (*drop) (const CbllmHandle *h, SubTransactionId sub), SubTransactionId sub)
{
	for (int i = n_owned - 1; i >= 0; i--)
	{
		CbllmHandle h;

		if (i >= n_owned || !drop(&owned[i], sub))
			continue;
		h = owned[i];
		CbllmCancel(&h);		/* removes it from owned[] */
	}
}

/* Every request. */
static bool
DropAll(const CbllmHandle *h, SubTransactionId sub)
{
	return true;
}

/* The ones that do not outlive their transaction's commit. */
static bool
DropAtCommit(const CbllmHandle *h, SubTransactionId sub)
{
	return !h->session;
}

/* The ones an aborted transaction submitted (every scope), and the transaction's own. */
static bool
DropAtAbort(const CbllmHandle *h, SubTransactionId sub)
{
	return !h->session || h->subxact != InvalidSubTransactionId;
}

/* The ones an aborted subtransaction submitted (or inherited from committed children). */
static bool
DropAtSubAbort(const CbllmHandle *h, SubTransactionId sub)
{
	return h->subxact == sub;
}

/* The owned request with this slot and serial (an llm_submit one, if async), if this backend holds it. */
bool
CbllmFindOwned(int slot, uint64 serial, bool async, CbllmHandle *h)
{
	for (int i = 0; i < n_owned; i++)
		if (owned[i].slot == slot && owned[i].serial == serial && (!async || owned[i].async))
		{
			*h = owned[i];
			return true;
		}
	return false;
}

/*
 * Transaction end.  A request lives at most as long as the transaction that
 * submitted it, unless it is an llm_submit request of session scope and
 * that transaction commits: then it lives until collected or until the
 * session ends.  So an aborted transaction takes back everything it
 * submitted, and a committed one the requests of its own scope (streams are
 * closed with their portals).
 */
static void
CbllmXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			CancelOwnedWhere(DropAtAbort, InvalidSubTransactionId);
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			CancelOwnedWhere(DropAtCommit, InvalidSubTransactionId);
			for (int i = 0; i < n_owned; i++)
				owned[i].subxact = InvalidSubTransactionId;	/* committed: survives later aborts */
			break;
		default:
			break;
	}
}

/*
 * Subtransaction end: an aborted one (a ROLLBACK TO SAVEPOINT, a PL/pgSQL
 * EXCEPTION block) takes back the requests it submitted, as an aborted
 * transaction does; a committed one hands them to its parent.
 */
static void
CbllmSubXactCallback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid,
					 void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		CancelOwnedWhere(DropAtSubAbort, mySubid);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = 0; i < n_owned; i++)
			if (owned[i].subxact == mySubid)
				owned[i].subxact = parentSubid;
	}
}

/* Backend exit: cancel everything in flight and drop every parked result. */
static void
CbllmExitCallback(int code, Datum arg)
{
	CancelOwnedWhere(DropAll, InvalidSubTransactionId);
	CbllmParkedFreeOwnedBy(MyProcPid);
}

/* Register the cleanup callbacks once per backend. */
static void
RegisterCallbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(CbllmXactCallback, NULL);
	RegisterSubXactCallback(CbllmSubXactCallback, NULL);
	before_shmem_exit(CbllmExitCallback, (Datum) 0);
	callbacks_registered = true;
}

/* The prefix-cache salt of this session's requests, by cbllm.prefix_cache_scope. */
static uint64
CacheSalt(void)
{
	switch (cbllm_prefix_cache_scope)
	{
		case PREFIX_SCOPE_CLUSTER:
			return 0;
		case PREFIX_SCOPE_DATABASE:
			return ((uint64) 2 << 32) | MyDatabaseId;
		default:
			return ((uint64) 1 << 32) | GetUserId();
	}
}

/* Raise the error for a claim that waited cbllm.slot_wait_timeout in vain. */
static void
RaiseRefusal(CbllmClaimRefusal why, int held)
{
	if (why == CLAIM_SESSION_QUOTA)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("too many cbllm requests in this session"),
				 errdetail("This session holds %d requests, the most cbllm.max_requests_per_session allows.", held),
				 errhint("Let this session's other requests finish (collect llm_submit results with llm_result, close streams), or raise cbllm.max_requests_per_session.")));
	if (why == CLAIM_ROLE_QUOTA)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("too many cbllm requests for role \"%s\"", GetUserNameFromId(GetUserId(), false)),
				 errdetail("The role's sessions hold %d requests, the most cbllm.max_requests_per_role allows.", held),
				 errhint("Wait for the role's other requests to finish, or raise cbllm.max_requests_per_role.")));
	if (why == CLAIM_RESERVED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("too many queued cbllm requests"),
				 errdetail("%d of %d request slots stayed in use for %d ms; the other %d are reserved for superusers (cbllm.superuser_reserved_requests).",
						   held, cbllm_shared->n_slots, cbllm_slot_wait_timeout_ms, cbllm_shared->n_slots - held),
				 errhint("Retry later, raise cbllm.slot_wait_timeout, or raise cbllm.max_queued_requests (requires a restart).")));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
			 errmsg("too many queued cbllm requests"),
			 errdetail("All %d request slots stayed in use for %d ms.", held, cbllm_slot_wait_timeout_ms),
			 errhint("Retry later, raise cbllm.slot_wait_timeout, or raise cbllm.max_queued_requests (requires a restart).")));
}

/*
 * Claim a slot and submit a request.  With wait_for_slot, waits (at most
 * cbllm.slot_wait_timeout, cancellably) for a slot within the quotas and
 * raises an error when none comes; without, returns false at once.  Raises
 * an error when the engine is not available.
 */
bool
CbllmSubmit(const CbllmRequestArgs *a, CbllmHandle *h, bool wait_for_slot)
{
	TimestampTz start = 0;
	CbllmSlot  *s;
	char	   *p;
	int			slot,
				held;
	uint64		serial;

	CbllmWaitReady();			/* raises first if cbllm was not preloaded */
	RegisterCallbacks();
	if (n_owned >= MAX_OWNED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("this session has %d cbllm requests in flight", n_owned),
				 errhint("Collect results before submitting more.")));
	for (;;)
	{
		CbllmClaimRefusal why = CbllmSlotClaim(h->async, &slot, &serial, &held);

		if (why == CLAIM_OK)
			break;
		if (!wait_for_slot)
			return false;
		if (start == 0)
			start = GetCurrentTimestamp();
		else if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), cbllm_slot_wait_timeout_ms))
			RaiseRefusal(why, held);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 20L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	h->slot = slot;
	h->serial = serial;
	h->worker_generation = pg_atomic_read_u32(&cbllm_shared->worker_generation);
	h->subxact = GetCurrentSubTransactionId();
	owned[n_owned++] = *h;

	/* fill the request: the slot is ours alone while CLAIMED */
	s = CbllmGetSlot(slot);
	s->params = a->params;
	s->params.cache_salt = CacheSalt();
	s->params.tenant = GetUserId();
	p = CbllmSlotPrompt(s);
	memcpy(p, a->prompt, a->params.prompt_len);
	p += a->params.prompt_len;
	for (int j = 0; j < a->params.n_stop; j++)
	{
		memcpy(p, a->stop[j], a->params.stop_len[j]);
		p += a->params.stop_len[j];
	}
	if (a->params.constraint_len > 0)
		memcpy(p, a->constraint, a->params.constraint_len);
	p += a->params.constraint_len;
	if (a->params.n_bias > 0)
		memcpy(p, a->bias, sizeof(cbllm_bias_entry) * a->params.n_bias);
	CbllmSlotSubmit(slot, h->worker_generation);
	CbllmWakeWorker();
	return true;
}

/* Submit a, waiting for a slot (cbllm.slot_wait_timeout) and raising a clear error when none comes. */
void
CbllmSubmitOrFail(const CbllmRequestArgs *a, CbllmHandle *h)
{
	(void) CbllmSubmit(a, h, true);
}

/*
 * Move new pieces into buf (each piece appended whole).  max_pieces limits
 * how many are taken (0: all).  Returns true once the request is over and
 * every piece has been read; *failed then says whether it failed.
 */
static bool
PollPieces(CbllmHandle *h, StringInfo buf, int max_pieces, bool *failed, int *errcode_out,
		   char *errmsg_out)
{
	CbllmReadResult res;

	(void) CbllmSlotRead(h->slot, h->serial, buf, NULL, max_pieces, &res);
	*failed = res.failed;
	*errcode_out = res.errcode;
	if (res.over)
		strlcpy(errmsg_out, res.error, CBLLM_ERROR_LEN);
	return res.over;
}

/* All new output (see PollPieces). */
bool
CbllmPoll(CbllmHandle *h, StringInfo buf, bool *failed, int *errcode_out, char *errmsg_out)
{
	return PollPieces(h, buf, 0, failed, errcode_out, errmsg_out);
}

/* One new piece, or the end (see PollPieces). */
bool
CbllmPollPiece(CbllmHandle *h, StringInfo buf, bool *failed, int *errcode_out, char *errmsg_out)
{
	return PollPieces(h, buf, 1, failed, errcode_out, errmsg_out);
}

/* Wait for h to finish, collecting all its output into buf; raises on failure. */
void
CbllmCollect(CbllmHandle *h, StringInfo buf)
{
	bool		failed;
	int			code;
	char		msg[CBLLM_ERROR_LEN];

	while (!CbllmPoll(h, buf, &failed, &code, msg))
		CbllmWait(h);
	CbllmRelease(h);
	if (failed)
		CbllmRaiseFailure(code, msg);
}

/*
 * Wait for h to finish, collecting its output into buf, its logprobs stream
 * and reasoning into side's (NULL: dropped) and its finish and token counts
 * into res; raises on failure.
 */
void
CbllmCollectResult(CbllmHandle *h, StringInfo buf, const CbllmSideParts *side, CbllmReadResult *res)
{
	bool		failed;
	int			code;
	char		msg[CBLLM_ERROR_LEN];
	CbllmReadResult r;

	for (;;)
	{
		(void) CbllmSlotRead(h->slot, h->serial, buf, side, 0, &r);
		if (r.over)
			break;
		CbllmWait(h);
	}
	failed = r.failed;
	code = r.errcode;
	strlcpy(msg, r.error, sizeof(msg));
	CbllmRelease(h);
	if (failed)
		CbllmRaiseFailure(code, msg);
	*res = r;
}

/* Raise an error if the worker that has h's unfinished request is gone. */
void
CbllmCheckWorker(const CbllmHandle *h)
{
	char		reason[CBLLM_REASON_LEN];
	int			pid;
	CbllmSlotState ss = CbllmSlotStateOf(h->slot, h->serial);

	if (ss == SLOT_DONE || ss == SLOT_FAILED || ss == SLOT_FREE)
		return;					/* finished (or parked) before the worker went away */
	(void) EngineState(reason, &pid);
	/* the engine process restarting is not enough: its supervisor fails what it loses */
	if (pid == 0 || pg_atomic_read_u32(&cbllm_shared->worker_generation) != h->worker_generation)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("the cbllm engine worker stopped while this request was waiting"),
				 errhint("The worker restarts by itself; run the statement again.")));
}

/*
 * A client that went away while we wait: PostgreSQL only notices at the next
 * write, or with client_connection_check_interval; a generation can take
 * minutes, so look at the socket ourselves, at most every 250 ms.
 */
static void
CheckClientConnection(void)
{
#if PG_VERSION_NUM >= 140000
	static TimestampTz last_check = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (MyProcPort == NULL || whereToSendOutput != DestRemote ||
		!TimestampDifferenceExceeds(last_check, now, 250))
		return;
	last_check = now;
	if (!pq_check_connection())
	{
		ClientConnectionLost = true;
		InterruptPending = true;
		CHECK_FOR_INTERRUPTS(); /* FATAL: connection to client lost */
	}
#endif
}

/*
 * Send the rows already produced to the client now (a streaming SRF in the
 * target list otherwise reaches the client only when the output buffer fills).
 */
void
CbllmFlushClient(void)
{
	if (whereToSendOutput == DestRemote)
		pq_flush();
}

/* Check the worker, then sleep until it sets our latch (or a second passes); stays cancellable. */
void
CbllmWait(CbllmHandle *h)
{
	CbllmCheckWorker(h);
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 250L,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	CheckClientConnection();
}
