/*
 * worker_requests.c: the supervisor's half of each request: it takes a
 * SUBMITTED slot's request to the engine process as a command, applies the
 * engine's events (new text, progress, the end) to the request, and moves
 * its output into the slot's ring as the backend makes room, so that a slow
 * reader holds up only its own request.  When the engine dies, the requests
 * it was running fail with what killed it; requests still waiting in their
 * slots simply wait for the next engine.
 *
 * Nothing here raises an ERROR for one request: a failure travels back to
 * its backend as a message in its slot.  Every move of a slot is made
 * through slot.c.
 */
#include "worker_internal.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "base/utf8.h"

/* What the supervisor keeps of each slot's request. */
typedef struct WorkerSlot
{
	bool		active;			/* taken from its slot; its output flows or waits here */
	int			engine;			/* the engine it went to (an index of the engine set) */
	bool		in_engine;		/* that engine has it and has not said it ended */
	bool		abort_pending;	/* the owner gave up; the engine is still to be told */
	uint64		serial;			/* the slot's serial when taken */
	int			kind;			/* a cbllm_request_kind */
	bool		constrained;	/* under a constraint, its caller not reading the finish
								 * reason: running out of tokens before the text completes it
								 * is a failure, never an invalid text */
	StringInfoData pending;		/* framed output not yet in the ring */
	bool		finished;		/* the end is known */
	int			finish;
	int			errcode;
	char		error[CBLLM_ERROR_LEN];
	cbllm_request_progress progress;	/* the engine's last word */
	TimestampTz submitted_at;	/* from the slot */
	TimestampTz first_token_at; /* 0 until the first token */
	TimestampTz last_token_at;
} WorkerSlot;

static WorkerSlot *wslots = NULL;
static int	next_engine = 0;	/* where ChooseEngine's round starts */
static int	n_wslots = 0;
static char *msgbuf = NULL;		/* one message in or out */
static size_t msgbuf_cap = 0;

/* Set up the table of n_slots requests (once, at start). */
void
CbllmRequestsInit(int n_slots)
{
	n_wslots = n_slots;
	wslots = MemoryContextAllocZero(TopMemoryContext, sizeof(WorkerSlot) * n_slots);
	for (int i = 0; i < n_slots; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&wslots[i].pending);
		MemoryContextSwitchTo(old);
	}
	msgbuf_cap = CBLLM_MAX_MSG(cbllm_shared->prompt_cap);
	msgbuf = MemoryContextAlloc(TopMemoryContext, msgbuf_cap);
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
		case CBLLM_ERR_DEVICE_LOST:
			return ERRCODE_SYSTEM_ERROR;
		default:
			return ERRCODE_INTERNAL_ERROR;
	}
}

/*
 * Append len bytes as frames of at most CBLLM_FRAME_MAX bytes, cut only at
 * multiples of unit; flags (CBLLM_FRAME_LOGPROBS, CBLLM_FRAME_REASONING or
 * 0) go in each length.
 */
static void
AppendFrames(StringInfo pending, const char *data, size_t len, int unit, uint32 flags)
{
	while (len > 0)
	{
		uint32		n = len > CBLLM_FRAME_MAX ? CBLLM_FRAME_MAX - CBLLM_FRAME_MAX % unit : (uint32) len;
		uint32		h = n | flags;

		appendBinaryStringInfo(pending, (const char *) &h, sizeof(h));
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
			for (int k = 0; k < 3 && n > 1 && utf8_is_cont((uint8_t) text[n]); k++)
				n--;
		appendBinaryStringInfo(pending, (const char *) &n, sizeof(n));
		appendBinaryStringInfo(pending, text, n);
		text += n;
		len -= n;
	}
}

/* Record that w's request ended (its output may still be pending). */
static void
EndWorkerSlot(WorkerSlot *w, int finish, int errcode_in, const char *msg)
{
	w->finished = true;
	w->in_engine = false;
	w->finish = finish;
	w->errcode = errcode_in;
	strlcpy(w->error, msg ? msg : "", CBLLM_ERROR_LEN);
}

/* Forget slot i's request here (the caller has told the engine, if it had it). */
static void
DropWorkerSlot(int i)
{
	WorkerSlot *w = &wslots[i];

	w->active = false;
	w->in_engine = false;
	w->abort_pending = false;
	resetStringInfo(&w->pending);
}

/* The engine slot i's request went to, when one runs. */
static CbllmEngineProc *
EngineOf(const CbllmEngineSet *es, int i)
{
	int			k = wslots[i].engine;

	return k >= 0 && k < es->n && es->procs[k] != NULL && es->procs[k]->rg != NULL ?
		es->procs[k] : NULL;
}

/* Tell its engine to drop slot i's request; false when the command ring is full. */
static bool
PostAbort(const CbllmEngineSet *es, int i)
{
	cbllm_cmd_abort a = {.slot = i, .serial = wslots[i].serial};
	CbllmEngineProc *ep = EngineOf(es, i);

	if (!wslots[i].in_engine || ep == NULL)
		return true;
	return cbllm_ring_put(cbllm_ipc_cmd_ring(ep->rg), CBLLM_CMD_ABORT, &a, sizeof(a), NULL, 0);
}

/*
 * Take SUBMITTED slot i to the engine if the command ring has room for it;
 * false when it has not (the slot stays SUBMITTED for the next pass).
 */
static bool
StartSlot(CbllmEngineProc *ep, int k, int i)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	WorkerSlot *w = &wslots[i];
	cbllm_ring *r = cbllm_ipc_cmd_ring(ep->rg);
	cbllm_cmd_submit c = {0};
	size_t		need;
	uint64		serial;
	int			payload;

	/* the request is read-only from SUBMITTED on: its size first, then take it */
	c.params = s->params;
	payload = (int) cbllm_request_params_bytes(&c.params);
	need = sizeof(cbllm_msg_header) + sizeof(c) + (size_t) payload;
	if (need > msgbuf_cap || need > cbllm_ring_space(r))
		return false;
	if (!CbllmSlotTake(i, &serial))
		return true;			/* cancelled meanwhile */
	c.slot = i;
	c.serial = serial;
	memcpy(msgbuf, &c, sizeof(c));
	memcpy(msgbuf + sizeof(c), CbllmSlotPrompt(s), payload);	/* prompt, then the stop strings */
	if (!cbllm_ring_put(r, CBLLM_CMD_SUBMIT, msgbuf, sizeof(c) + payload, NULL, 0))
		elog(ERROR, "cbllm: the command ring refused a command that fits");

	resetStringInfo(&w->pending);
	w->active = true;
	w->engine = k;
	w->in_engine = true;
	w->serial = serial;
	w->kind = c.params.kind;
	w->constrained = c.params.constraint_len > 0 && !c.params.report_finish;
	w->finished = false;
	w->progress = cbllm_progress_queued();
	w->submitted_at = s->submitted_at;
	w->first_token_at = w->last_token_at = 0;
	return true;
}

/*
 * The engine SUBMITTED slot i goes to: a request that shares another's
 * prompt (n completions) goes where that one runs, and waits while that
 * engine's ring is full; any other to the ready engine with the fewest
 * requests, then the most free KV blocks, then the next in turn after the
 * last one chosen (so that requests arriving one at a time alternate).
 * -1: none can take it now.
 */
static int
ChooseEngine(const CbllmEngineSet *es, int i, const int *load, const bool *full)
{
	CbllmSlot  *s = CbllmGetSlot(i);
	int			lead = s->params.share_slot - 1,
				best = -1;

	if (lead >= 0 && lead < n_wslots && wslots[lead].active && wslots[lead].in_engine &&
		wslots[lead].serial == s->params.share_serial && es->ready[wslots[lead].engine])
		return full[wslots[lead].engine] ? -1 : wslots[lead].engine;
	for (int j = 0; j < es->n; j++)
	{
		int			k = (next_engine + j) % es->n;

		if (!es->ready[k] || full[k])
			continue;
		if (best < 0 || load[k] < load[best] ||
			(load[k] == load[best] && es->kv_free[k] > es->kv_free[best]))
			best = k;
	}
	if (best >= 0)
		next_engine = best + 1;
	return best;
}

/*
 * Take SUBMITTED slots to the engines (ChooseEngine) and abort cancelled
 * ones; ring each engine that was sent anything.  An engine whose command
 * ring is full takes nothing more this pass; the others go on.
 */
void
CbllmRequestsDispatch(const CbllmEngineSet *es)
{
	bool		sent[CBLLM_MAX_ENGINES] = {false};
	bool		full[CBLLM_MAX_ENGINES] = {false};
	int			load[CBLLM_MAX_ENGINES] = {0};

	for (int k = 0; k < es->n; k++)
		load[k] = CbllmRequestsInEngine(k);
	/* aborts that did not fit a ring last time */
	for (int i = 0; i < n_wslots; i++)
		if (wslots[i].abort_pending)
		{
			if (!PostAbort(es, i))
			{
				full[wslots[i].engine] = true;
				continue;
			}
			sent[wslots[i].engine] = true;
			DropWorkerSlot(i);
		}
	for (int i = 0; i < n_wslots; i++)
	{
		uint64		serial;
		CbllmSlotState st = CbllmSlotPeek(i, &serial);
		int			k;

		if (st == SLOT_SUBMITTED)
		{
			if (wslots[i].active)
			{
				if (!PostAbort(es, i))
				{
					full[wslots[i].engine] = true;
					continue;
				}
				DropWorkerSlot(i);
			}
			if ((k = ChooseEngine(es, i, load, full)) < 0)
				continue;		/* waits for the next pass */
			if (!StartSlot(es->procs[k], k, i))
			{
				full[k] = true;	/* its ring is full: it takes nothing more this pass */
				continue;
			}
			load[k]++;
			sent[k] = true;
		}
		else if (st == SLOT_CANCELLED)
		{
			if (wslots[i].active && wslots[i].serial == serial)
			{
				if (!PostAbort(es, i))
				{
					full[wslots[i].engine] = true;
					continue;	/* freed once the abort is sent */
				}
				sent[wslots[i].engine] |= wslots[i].in_engine;
				DropWorkerSlot(i);
			}
			CbllmSlotReapCancelled(i, serial);
		}
	}
	for (int k = 0; k < es->n; k++)
		if (sent[k] && es->procs[k] != NULL)
			CbllmEngineRing(es->procs[k]);
}

/* Seconds from a to b. */
static double
Seconds(TimestampTz a, TimestampTz b)
{
	return (double) (b - a) / USECS_PER_SEC;
}

/* Add the latencies an event reveals: first token, gaps between tokens, queue time, the end. */
static void
RecordTimings(WorkerSlot *w, const cbllm_evt_output *e)
{
	TimestampTz now;

	if (e->n_tokens == 0 && e->finish == CBLLM_FINISH_NONE)
		return;
	now = GetCurrentTimestamp();
	if (e->n_tokens > 0)
	{
		int			gaps = e->n_tokens;

		if (w->first_token_at == 0)
		{
			w->first_token_at = now;
			CbllmRecordLatency(0, Seconds(w->submitted_at, now));
			if (e->progress.queue_seconds >= 0)
				CbllmRecordLatency(2, e->progress.queue_seconds);
			gaps--;
		}
		else
			for (int k = 0; k < gaps; k++)
				CbllmRecordLatency(1, Seconds(w->last_token_at, now) / gaps);
		w->last_token_at = now;
	}
	if (e->finish != CBLLM_FINISH_NONE && e->finish != CBLLM_FINISH_ERROR)
		CbllmRecordLatency(3, Seconds(w->submitted_at, now));
}

/* Apply one checked output event of engine k. */
static void
ApplyEvent(int k, const cbllm_evt_output *e, const char *text)
{
	WorkerSlot *w = &wslots[e->slot];

	if (!w->active || w->engine != k || w->serial != e->serial || w->finished)
		return;					/* a request this side already dropped */
	if (e->text_len > 0)
	{
		if (w->kind == CBLLM_REQ_TOKENIZE || w->kind == CBLLM_REQ_TOKEN_COUNT)
			AppendFrames(&w->pending, text, e->text_len, sizeof(int32), 0);
		else
			AppendPiece(&w->pending, text, e->text_len);
	}
	if (e->logprobs_len > 0)
		AppendFrames(&w->pending, text + e->text_len + e->error_len, e->logprobs_len, 1,
					 CBLLM_FRAME_LOGPROBS);
	if (e->reasoning_len > 0)
		AppendFrames(&w->pending, text + e->text_len + e->error_len + e->logprobs_len,
					 e->reasoning_len, 1, CBLLM_FRAME_REASONING);
	w->progress = e->progress;
	RecordTimings(w, e);
	if (e->finish != CBLLM_FINISH_NONE)
	{
		char		msg[CBLLM_ERROR_LEN];
		int			n = Min(e->error_len, CBLLM_ERROR_LEN - 1);

		memcpy(msg, text + e->text_len, n);
		msg[n] = '\0';
		if (e->finish == CBLLM_FINISH_ERROR)
			EndWorkerSlot(w, e->finish, StatusErrcode(e->status),
						  msg[0] ? msg : "generation failed");
		else if (e->finish == CBLLM_FINISH_LENGTH && w->constrained)
			EndWorkerSlot(w, CBLLM_FINISH_ERROR, ERRCODE_STRING_DATA_RIGHT_TRUNCATION,
						  "the output did not complete its json_schema, regex or choices within "
						  "max_tokens (finish reason: length)");
		else
			EndWorkerSlot(w, e->finish, 0, NULL);
	}
}

/* Apply every event engine k (ep) posted; false when its event ring is corrupt. */
bool
CbllmRequestsTakeEvents(CbllmEngineProc *ep, int k)
{
	cbllm_ring *r = cbllm_ipc_evt_ring(ep->rg);
	bool		took = false;

	for (;;)
	{
		uint32_t	type;
		size_t		len;
		cbllm_evt_output e;
		int			got = cbllm_ring_get(r, msgbuf, msgbuf_cap, &type, &len);
		const char *payload = msgbuf + sizeof(cbllm_msg_header);

		if (got == 0)
			break;
		if (got < 0 || type != CBLLM_EVT_OUTPUT || len < sizeof(cbllm_msg_header) + sizeof(e))
			return false;
		memcpy(&e, payload, sizeof(e));
		if (cbllm_evt_output_check(&e, len - sizeof(cbllm_msg_header), n_wslots) != NULL)
			return false;
		ApplyEvent(k, &e, payload + sizeof(e));
		took = true;
	}
	if (took)
		CbllmEngineRing(ep);	/* room in the ring for output the engine holds */
	return true;
}

/*
 * Move slot i's pending frames into its ring; once the request has ended and
 * everything is out, finish the slot (DONE or FAILED), or park an llm_submit
 * result.  Returns false when the owner cancelled (the slot is dropped).
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
		DropWorkerSlot(i);
		return true;			/* parked (or found cancelled and freed) */
	}
	/* progress first: a backend that reads the output sees the progress that came with it */
	CbllmSlotProgress(i, w->serial, &w->progress,
					  w->first_token_at);
	used = CbllmSlotDeliver(i, w->serial, w->pending.data, w->pending.len, &cancelled);
	if (cancelled)
		return false;
	if (used > 0)
	{
		memmove(w->pending.data, w->pending.data + used, w->pending.len - used);
		w->pending.len -= used;
	}
	if (w->finished && w->pending.len == 0)
	{
		(void) CbllmSlotFinish(i, w->serial, failed, w->finish, w->errcode, w->error);
		DropWorkerSlot(i);
	}
	return true;
}

/* Move pending output into the rings; true while any request is active. */
bool
CbllmRequestsDeliver(const CbllmEngineSet *es)
{
	bool		any = false;
	bool		sent[CBLLM_MAX_ENGINES] = {false};

	for (int i = 0; i < n_wslots; i++)
	{
		if (!wslots[i].active || wslots[i].abort_pending)
			continue;
		if (!Deliver(i))
		{
			/* the owner gave up (its slot is free already): tell the engine */
			if (wslots[i].in_engine && !PostAbort(es, i))
				wslots[i].abort_pending = true;		/* sent by the next Dispatch */
			else
			{
				if (wslots[i].in_engine)
					sent[wslots[i].engine] = true;
				DropWorkerSlot(i);
			}
			continue;
		}
		any |= wslots[i].active;
	}
	for (int k = 0; k < es->n; k++)
		if (sent[k] && es->procs[k] != NULL)
			CbllmEngineRing(es->procs[k]);
	return any;
}

/* Engine k died: fail every request it was running (finished ones keep their output). */
void
CbllmRequestsFailRunning(int k, const char *why)
{
	for (int i = 0; i < n_wslots; i++)
		if (wslots[i].active && wslots[i].engine == k && !wslots[i].finished)
			EndWorkerSlot(&wslots[i], CBLLM_FINISH_ERROR, ERRCODE_CONNECTION_FAILURE, why);
}

/* Requests engine k has now. */
int
CbllmRequestsInEngine(int k)
{
	int			n = 0;

	for (int i = 0; i < n_wslots; i++)
		n += wslots[i].active && wslots[i].in_engine && wslots[i].engine == k;
	return n;
}

/* Refuse every SUBMITTED slot (no engine will come) and free cancelled ones. */
void
CbllmRequestsRefuseAll(int errcode_in, const char *msg)
{
	for (int i = 0; i < n_wslots; i++)
	{
		uint64		serial;
		CbllmSlotState st = CbllmSlotPeek(i, &serial);

		if (st == SLOT_SUBMITTED)
			(void) CbllmSlotFinish(i, serial, true, CBLLM_FINISH_ERROR, errcode_in, msg);
		else if (st == SLOT_CANCELLED)
			CbllmSlotReapCancelled(i, serial);
	}
}

/* Fail what a previous supervisor left running or parking (at start). */
void
CbllmRequestsRecover(void)
{
	CbllmParkedRecover();
	for (int i = 0; i < n_wslots; i++)
	{
		uint64		serial;
		CbllmSlotState st = CbllmSlotPeek(i, &serial);

		if (st == SLOT_RUNNING || st == SLOT_PARKING)
			(void) CbllmSlotFinish(i, serial, true, CBLLM_FINISH_ERROR, ERRCODE_CONNECTION_FAILURE,
								   "the cbllm worker restarted while this request was running");
		else if (st == SLOT_CANCELLED)
			CbllmSlotReapCancelled(i, serial);
	}
}
