/*
 * client.c: the backend's side of a request: wait for the engine, claim a
 * slot, submit, read framed text pieces, wait on the latch, cancel.
 *
 * Every slot a backend holds is also in a backend-local list, so that an
 * error, a cancelled query, the end of the transaction or the backend's exit
 * cancels whatever is still in flight (the worker then aborts it in the
 * engine and frees its blocks within one step).
 */
#include "cbllm_pg.h"

#include <math.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "libpq/libpq.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"

#include "../src/cbllm.h"

#define MAX_OWNED 4096

static CbllmHandle owned[MAX_OWNED];
static int	n_owned = 0;
static bool callbacks_registered = false;
static int	next_slot_hint = -1;

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
	ereport(ERROR,
			(errcode(errcode_in ? errcode_in : ERRCODE_INTERNAL_ERROR),
			 errmsg("cbllm request failed: %s", msg),
			 errcode_in == ERRCODE_PROGRAM_LIMIT_EXCEEDED ?
			 errhint("Shorten the prompt or raise cbllm.max_model_len (and the KV cache size).") :
			 errcode_in == ERRCODE_CONNECTION_FAILURE ?
			 errhint("The engine worker restarted; run the statement again.") : 0));
}

/* Check one request's parameters, with the errors a user sees. */
void
CbllmCheckArgs(const CbllmRequestArgs *a)
{
	int			bytes = a->prompt_len;

	if (a->params.max_tokens < 1 || a->params.max_tokens > cbllm_max_tokens_limit)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_tokens must be between 1 and %d, not %d", cbllm_max_tokens_limit,
						a->params.max_tokens),
				 errhint("The upper limit is cbllm.max_tokens_limit.")));
	if (!(a->params.temperature >= 0) || isinf(a->params.temperature))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("temperature must be a finite number >= 0, not %g", a->params.temperature),
				 errhint("Use 0 for greedy decoding.")));
	if (!(a->params.top_p > 0 && a->params.top_p <= 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("top_p must be in (0, 1], not %g", a->params.top_p),
				 errhint("Use 1 to turn nucleus sampling off.")));
	if (a->params.top_k < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("top_k must be >= 0, not %d", a->params.top_k),
				 errhint("Use 0 to turn top-k sampling off.")));
	if (a->params.priority < -1000 || a->params.priority > 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority must be between -1000 and 1000, not %d", a->params.priority),
				 errhint("Higher priorities are served first.")));
	for (int k = 0; k < a->params.n_stop; k++)
	{
		if (a->params.stop_len[k] == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("stop strings must not be empty"),
					 errhint("Remove empty strings from the stop array.")));
		bytes += a->params.stop_len[k];
	}
	if (bytes > cbllm_max_prompt_bytes)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("prompt is too large: %d bytes with its stop strings, the limit is %d",
						bytes, cbllm_max_prompt_bytes),
				 errhint("Raise cbllm.max_prompt_bytes (requires a restart).")));
}

/* Read the engine state and reason. */
static CbllmEngineState
EngineState(char *reason, int *worker_pid)
{
	CbllmEngineState st;

	SpinLockAcquire(&cbllm_shared->info_lock);
	st = cbllm_shared->state;
	if (reason)
		strlcpy(reason, cbllm_shared->reason, CBLLM_REASON_LEN);
	if (worker_pid)
		*worker_pid = cbllm_shared->worker_pid;
	SpinLockRelease(&cbllm_shared->info_lock);
	return st;
}

/* Wait (up to cbllm.load_timeout) until the engine is ready, or raise why not. */
void
CbllmWaitReady(void)
{
	TimestampTz start = GetCurrentTimestamp();
	char		reason[CBLLM_REASON_LEN];

	CbllmCheckLoaded();
	for (;;)
	{
		CbllmEngineState st = EngineState(reason, NULL);

		if (st == ENGINE_READY)
			return;
		if (st == ENGINE_FAILED)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the cbllm engine failed to load its model"),
					 errdetail("%s", reason),
					 errhint("Fix cbllm.model (or the files it names) and restart the server.")));
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

/* Wake the worker (after a submit, a cancel or a read). */
static void
WakeWorker(void)
{
	Latch	   *l;

	SpinLockAcquire(&cbllm_shared->info_lock);
	l = cbllm_shared->worker_latch;
	SpinLockRelease(&cbllm_shared->info_lock);
	if (l)
		SetLatch(l);
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

/* Cancel the request of h (or free its slot if it is finished). */
void
CbllmCancel(CbllmHandle *h)
{
	CbllmSlot  *s;
	bool		wake = false;

	if (h->slot < 0 || cbllm_shared == NULL)
		return;
	s = CbllmGetSlot(h->slot);
	SpinLockAcquire(&s->mutex);
	if (s->serial == h->serial && s->owner_pid == MyProcPid)
	{
		switch (s->state)
		{
			case SLOT_SUBMITTED:
			case SLOT_RUNNING:
				s->state = SLOT_CANCELLED;
				wake = true;
				break;
			case SLOT_CLAIMED:
			case SLOT_DONE:
			case SLOT_FAILED:
				s->state = SLOT_FREE;
				s->owner_pid = 0;
				s->owner_latch = NULL;
				break;
			default:
				break;
		}
	}
	SpinLockRelease(&s->mutex);
	Disown(h);
	h->slot = -1;
	if (wake)
		WakeWorker();
}

/* Free the slot of a finished request. */
void
CbllmRelease(CbllmHandle *h)
{
	CbllmCancel(h);
}

/* Cancel every request this backend still holds (or only the transaction's). */
static void
CancelAllOwned(bool include_session)
{
	for (int i = n_owned - 1; i >= 0; i--)
	{
		CbllmHandle h;

		if (i >= n_owned || (owned[i].session && !include_session))
			continue;
		h = owned[i];
		CbllmCancel(&h);		/* removes it from owned[] */
	}
}

/* The owned request with this slot and serial, if this backend holds it. */
bool
CbllmFindOwned(int slot, uint64 serial, CbllmHandle *h)
{
	for (int i = 0; i < n_owned; i++)
		if (owned[i].slot == slot && owned[i].serial == serial)
		{
			*h = owned[i];
			return true;
		}
	return false;
}

/*
 * Transaction end: the transaction's requests do not survive it (streams are
 * closed with their portals); requests submitted with llm_submit live on
 * until collected or until the session ends.
 */
static void
CbllmXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_COMMIT ||
		event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_PREPARE)
		CancelAllOwned(false);
}

/* Backend exit: cancel everything in flight. */
static void
CbllmExitCallback(int code, Datum arg)
{
	CancelAllOwned(true);
}

/* Register the cleanup callbacks once per backend. */
static void
RegisterCallbacks(void)
{
	if (callbacks_registered)
		return;
	RegisterXactCallback(CbllmXactCallback, NULL);
	before_shmem_exit(CbllmExitCallback, (Datum) 0);
	callbacks_registered = true;
}

/*
 * Claim a free slot and submit a request.  Returns false when every slot is
 * taken and wait_for_slot is false; raises an error when the engine is not
 * available.
 */
bool
CbllmSubmit(const CbllmRequestArgs *a, CbllmHandle *h, bool wait_for_slot)
{
	int			n;

	CbllmWaitReady();			/* raises first if cbllm was not preloaded */
	n = cbllm_shared->n_slots;
	RegisterCallbacks();
	if (n_owned >= MAX_OWNED)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("this session has %d cbllm requests in flight", n_owned),
				 errhint("Collect results before submitting more.")));
	if (next_slot_hint < 0)
		next_slot_hint = MyProcPid % n;
	for (int tries = 0;; tries++)
	{
		int			n_cancelled = 0;

		for (int k = 0; k < n; k++)
		{
			int			i = (next_slot_hint + k) % n;
			CbllmSlot  *s = CbllmGetSlot(i);
			char	   *p;

			SpinLockAcquire(&s->mutex);
			if (s->state != SLOT_FREE)
			{
				n_cancelled += s->state == SLOT_CANCELLED;
				SpinLockRelease(&s->mutex);
				continue;
			}
			s->state = SLOT_CLAIMED;
			s->serial++;
			s->owner_pid = MyProcPid;
			s->owner_role = GetUserId();
			s->owner_latch = MyLatch;
			h->slot = i;
			h->serial = s->serial;
			owned[n_owned++] = *h;
			SpinLockRelease(&s->mutex);

			/* fill the request; the slot is ours while CLAIMED */
			h->worker_generation = pg_atomic_read_u32(&cbllm_shared->worker_generation);
			owned[n_owned - 1] = *h;
			s->worker_generation = h->worker_generation;
			s->params = a->params;
			s->prompt_len = a->prompt_len;
			p = CbllmSlotPrompt(s);
			memcpy(p, a->prompt, a->prompt_len);
			p += a->prompt_len;
			for (int j = 0; j < a->params.n_stop; j++)
			{
				memcpy(p, a->stop[j], a->params.stop_len[j]);
				p += a->params.stop_len[j];
			}
			s->n_prompt_tokens = s->n_generated = 0;
			s->finish = 0;
			s->errcode = 0;
			s->error[0] = '\0';
			s->out_head = s->out_tail = 0;
			s->phase = 0;
			s->queue_seconds = -1;
			s->first_token_at = 0;
			SpinLockAcquire(&s->mutex);
			s->submitted_at = GetCurrentTimestamp();
			s->state = SLOT_SUBMITTED;
			SpinLockRelease(&s->mutex);
			next_slot_hint = (i + 1) % n;
			WakeWorker();
			return true;
		}
		/* cancelled slots are being freed by the worker: worth a short wait */
		if (!wait_for_slot && (n_cancelled == 0 || tries >= 200))
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
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
	CbllmSlot  *s = CbllmGetSlot(h->slot);
	int			cap = cbllm_shared->out_cap;
	int			taken = 0;
	bool		over = false,
				read_any = false;
	CbllmSlotState st;

	*failed = false;
	SpinLockAcquire(&s->mutex);
	if (s->serial != h->serial)
	{
		SpinLockRelease(&s->mutex);
		*failed = true;
		*errcode_out = ERRCODE_INTERNAL_ERROR;
		strlcpy(errmsg_out, "the request's slot was reclaimed", CBLLM_ERROR_LEN);
		return true;
	}
	while (s->out_head - s->out_tail >= sizeof(uint32) && (max_pieces == 0 || taken < max_pieces))
	{
		uint32		n;
		char		len[4];

		for (int b = 0; b < 4; b++)
			len[b] = CbllmSlotOut(s)[(s->out_tail + b) % cap];
		memcpy(&n, len, 4);
		enlargeStringInfo(buf, n);
		for (uint32 b = 0; b < n; b++)
			buf->data[buf->len + b] = CbllmSlotOut(s)[(s->out_tail + 4 + b) % cap];
		buf->len += n;
		buf->data[buf->len] = '\0';
		s->out_tail += 4 + n;
		taken++;
		read_any = true;
	}
	st = s->state;
	if ((st == SLOT_DONE || st == SLOT_FAILED) && s->out_head == s->out_tail)
	{
		over = true;
		*failed = st == SLOT_FAILED;
		*errcode_out = s->errcode;
		strlcpy(errmsg_out, s->error, CBLLM_ERROR_LEN);
	}
	SpinLockRelease(&s->mutex);
	if (read_any && !over)
		WakeWorker();			/* room in the ring for pieces the worker holds */
	return over;
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

/* Raise an error if the worker that has h's unfinished request is gone. */
void
CbllmCheckWorker(const CbllmHandle *h)
{
	char		reason[CBLLM_REASON_LEN];
	int			pid;
	CbllmEngineState st = EngineState(reason, &pid);
	CbllmSlot  *s = CbllmGetSlot(h->slot);
	CbllmSlotState ss;

	SpinLockAcquire(&s->mutex);
	ss = s->state;
	SpinLockRelease(&s->mutex);
	if (ss == SLOT_DONE || ss == SLOT_FAILED)
		return;					/* finished before the worker went away */
	if (pid == 0 || st != ENGINE_READY ||
		pg_atomic_read_u32(&cbllm_shared->worker_generation) != h->worker_generation)
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
