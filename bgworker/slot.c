/*
 * slot.c: every move of a request slot, in one place.
 *
 * A slot is a request's home in shared memory: its parameters, its prompt
 * buffer and its output ring.  Two processes share it, the backend that
 * claimed it and the engine worker, and its state says which of them may
 * touch which part.  Every change of state is made here, under the slot's
 * spinlock, with a few loads and stores: nothing is copied, allocated or
 * reported under a spinlock.  The bulk of the data moves outside the lock,
 * by the one process that the state gives it to.
 *
 *   state       who moves it on, to what (function)
 *   FREE        backend: -> CLAIMED (CbllmSlotClaim, also under claim_lock,
 *               so the per-session and per-role quotas count exactly)
 *   CLAIMED     backend: -> SUBMITTED once the request is written
 *               (CbllmSlotSubmit), -> FREE if it gives up (CbllmSlotGiveUp)
 *   SUBMITTED   worker: -> RUNNING (CbllmSlotTake), -> FAILED when it refuses
 *               the request (CbllmSlotFinish); backend: -> CANCELLED
 *   RUNNING     worker: -> DONE or FAILED once all output is in the ring
 *               (CbllmSlotFinish), -> PARKING for an llm_submit request
 *               (CbllmSlotPark); backend: -> CANCELLED
 *   PARKING     worker: -> FREE once the result is in the parked store;
 *               -> RUNNING if the store is full; backend: -> CANCELLED
 *   DONE/FAILED backend: -> FREE after reading it all (CbllmSlotGiveUp)
 *   CANCELLED   worker: -> FREE after aborting the request
 *               (CbllmSlotReapCancelled, or any worker move that finds it)
 *
 * Who owns the buffers:
 *   - the request (params, prompt buffer): the backend writes it while
 *     CLAIMED; from SUBMITTED on it is read-only, and it stays intact until
 *     the worker itself frees the slot, so the worker copies it without the
 *     lock after taking the slot;
 *   - the output ring: the worker writes the free part [out_head, out_tail +
 *     cap) and then advances out_head under the lock; the backend copies the
 *     written part [out_tail, out_head) and then advances out_tail under the
 *     lock, unless the slot left RUNNING/DONE/FAILED meanwhile (PARKING, or
 *     FREE once parked: the worker copied the same bytes out, so the
 *     backend drops its copy and takes the parked result instead);
 *   - error: the worker writes it before the store of FAILED, the backend
 *     reads it after seeing FAILED.
 *
 * Parking: a finished llm_submit request is not left in its slot waiting for
 * an llm_result that may come much later: the worker moves what is left of
 * its output (the unread ring and what did not fit) into the result area, a
 * DSA area of cbllm.result_memory inside the main shared memory, with an
 * entry in the parked array, and frees the slot.  The backend finds the
 * entry by the request's id.  When the store is full, or the role already
 * fills half of it, the result stays in its slot and counts against the
 * quotas until it is collected.
 */
#include "cbllm_pg.h"

#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/dsa.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* ---- the result area ---- */

static dsa_area *result_area = NULL;

/* This process's attachment to the result area. */
static dsa_area *
ResultArea(void)
{
	if (result_area == NULL)
	{
		/* the attachment lives as long as the process, not the query */
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		LWLockRegisterTranche(cbllm_shared->result_tranche, "cbllm_results");
		result_area = dsa_attach_in_place((char *) cbllm_shared + cbllm_shared->result_offset,
										  NULL);
		dsa_pin_mapping(result_area);
		MemoryContextSwitchTo(old);
	}
	return result_area;
}

/* Entry i of the parked array. */
static CbllmParked *
Parked(int i)
{
	return (CbllmParked *) ((char *) cbllm_shared + cbllm_shared->parked_offset) + i;
}

/* ---- ring copies (two pieces at the wrap) ---- */

/* Copy n bytes of slot s's ring starting at byte position pos into dst. */
static void
RingRead(CbllmSlot *s, uint64 pos, char *dst, int n)
{
	int			cap = cbllm_shared->out_cap;
	int			off = (int) (pos % cap);
	int			first = Min(n, cap - off);

	memcpy(dst, CbllmSlotOut(s) + off, first);
	if (n > first)
		memcpy(dst + first, CbllmSlotOut(s), n - first);
}

/* Copy n bytes of src into slot s's ring starting at byte position pos. */
static void
RingWrite(CbllmSlot *s, uint64 pos, const char *src, int n)
{
	int			cap = cbllm_shared->out_cap;
	int			off = (int) (pos % cap);
	int			first = Min(n, cap - off);

	memcpy(CbllmSlotOut(s) + off, src, first);
	if (n > first)
		memcpy(CbllmSlotOut(s), src + first, n - first);
}

/*
 * Append the payloads of the text frames in data[0..len) to buf, at most
 * max_frames of them (0: all), and of the logprobs and reasoning frames to
 * side's (side or its member NULL: dropped).
 */
static int
UnframeInto(const char *data, int len, StringInfo buf, const CbllmSideParts *side, int max_frames)
{
	int			used = 0,
				frames = 0;

	while (used + CBLLM_FRAME_HEADER <= len && (max_frames == 0 || frames < max_frames))
	{
		uint32		h,
					n;

		memcpy(&h, data + used, sizeof(h));
		n = CBLLM_FRAME_LEN(h);
		if (used + CBLLM_FRAME_HEADER + (int) n > len)
			break;				/* cannot happen: frames are written whole */
		if ((h & (CBLLM_FRAME_LOGPROBS | CBLLM_FRAME_REASONING)) == 0)
		{
			appendBinaryStringInfo(buf, data + used + CBLLM_FRAME_HEADER, n);
			frames++;
		}
		else
		{
			StringInfo	to = side == NULL ? NULL :
				(h & CBLLM_FRAME_LOGPROBS) ? side->logprobs : side->reasoning;

			if (to != NULL)
				appendBinaryStringInfo(to, data + used + CBLLM_FRAME_HEADER, n);
		}
		used += CBLLM_FRAME_HEADER + n;
	}
	return used;
}

/* ---- quotas and claims (backend) ---- */

/* Requests one session may hold in slots at once. */
int
CbllmSessionQuota(void)
{
	int			n = cbllm_shared->n_slots;

	return cbllm_max_requests_per_session > 0 ? Min(cbllm_max_requests_per_session, n) :
		Max(n / 4, 1);
}

/*
 * Requests all sessions of one role may hold in slots at once: by default a
 * quarter of the slots, so that it takes at least four roles to fill them.
 */
int
CbllmRoleQuota(void)
{
	int			n = cbllm_shared->n_slots;

	return cbllm_max_requests_per_role > 0 ? Min(cbllm_max_requests_per_role, n) :
		Max(n / 4, 1);
}

/* Slots only superusers may claim: the last free ones (at most half of them all). */
int
CbllmReservedSlots(void)
{
	return Min(cbllm_superuser_reserved_requests, cbllm_shared->n_slots / 2);
}

/*
 * Claim a free slot for this backend, within its quotas: FREE -> CLAIMED.
 * On refusal *held_out is what the exhausted limit counted.
 */
CbllmClaimRefusal
CbllmSlotClaim(bool async, int *slot_out, uint64 *serial_out, int *held_out)
{
	static int	hint = -1;
	int			n = cbllm_shared->n_slots;
	int			mine = 0,
				role_held = 0,
				n_free = 0,
				found = -1;
	Oid			role = GetUserId();
	bool		privileged = superuser();	/* before the lock: it may read the catalog */
	CbllmClaimRefusal why = CLAIM_OK;

	if (hint < 0)
		hint = MyProcPid % n;
	LWLockAcquire(cbllm_shared->claim_lock, LW_EXCLUSIVE);
	for (int k = 0; k < n; k++)
	{
		int			i = (hint + k) % n;
		CbllmSlot  *s = CbllmGetSlot(i);
		CbllmSlotState st;
		int			pid;
		Oid			r;

		SpinLockAcquire(&s->mutex);
		st = s->state;
		pid = s->owner_pid;
		r = s->owner_role;
		SpinLockRelease(&s->mutex);
		if (st == SLOT_FREE)
		{
			if (found < 0)
				found = i;
			n_free++;
			continue;
		}
		mine += pid == MyProcPid;
		role_held += r == role;
	}
	if (found < 0)
		why = CLAIM_NO_SLOT, *held_out = n;
	else if (!privileged && n_free <= CbllmReservedSlots())
		why = CLAIM_RESERVED, *held_out = n - n_free;
	else if (mine >= CbllmSessionQuota())
		why = CLAIM_SESSION_QUOTA, *held_out = mine;
	else if (role_held >= CbllmRoleQuota())
		why = CLAIM_ROLE_QUOTA, *held_out = role_held;
	else
	{
		CbllmSlot  *s = CbllmGetSlot(found);

		SpinLockAcquire(&s->mutex);
		s->state = SLOT_CLAIMED;
		s->serial++;
		s->owner_pid = MyProcPid;
		s->owner_role = role;
		s->owner_latch = MyLatch;
		s->async = async;
		s->out_head = s->out_tail = 0;
		s->progress = cbllm_progress_queued();
		s->first_token_at = 0;
		s->finish = 0;
		s->errcode = 0;
		*slot_out = found;
		*serial_out = s->serial;
		SpinLockRelease(&s->mutex);
		hint = (found + 1) % n;
	}
	LWLockRelease(cbllm_shared->claim_lock);
	return why;
}

/* The request in a CLAIMED slot is written: CLAIMED -> SUBMITTED. */
void
CbllmSlotSubmit(int slot, uint32 worker_generation)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	TimestampTz now = GetCurrentTimestamp();

	SpinLockAcquire(&s->mutex);
	Assert(s->state == SLOT_CLAIMED && s->owner_pid == MyProcPid);
	s->worker_generation = worker_generation;
	s->submitted_at = now;
	s->state = SLOT_SUBMITTED;
	SpinLockRelease(&s->mutex);
}

/*
 * Take out of the parked array the result of (slot, serial) that backend pid
 * owns, or with any_request the first of pid's results: the entry is copied
 * to *out and freed.  Its data is then the caller's to read and free.
 */
static bool
ParkedTake(int slot, uint64 serial, int pid, bool any_request, CbllmParked *out)
{
	bool		found = false;

	LWLockAcquire(cbllm_shared->parked_lock, LW_EXCLUSIVE);
	for (int i = 0; i < cbllm_shared->n_parked && !found; i++)
	{
		CbllmParked *p = Parked(i);

		if (p->in_use && p->owner_pid == pid &&
			(any_request || (p->slot == slot && p->serial == serial)))
		{
			memcpy(out, p, sizeof(*out));
			p->in_use = false;
			found = true;
		}
	}
	LWLockRelease(cbllm_shared->parked_lock);
	return found;
}

/* Free a taken entry's data. */
static void
ParkedFreeData(const CbllmParked *e)
{
	if (e->data != 0)
		dsa_free(ResultArea(), (dsa_pointer) e->data);
}

/* Drop the parked result of (slot, serial) owned by this backend, if there is one. */
static void
ParkedDrop(int slot, uint64 serial)
{
	CbllmParked e;

	if (ParkedTake(slot, serial, MyProcPid, false, &e))
		ParkedFreeData(&e);
}

/*
 * At worker start: entries a previous worker reserved but never filled (it
 * died while parking) belong to nobody; free them.
 */
void
CbllmParkedRecover(void)
{
	CbllmParkedFreeOwnedBy(0);
}

/* Free every parked result of backend pid (at its exit). */
void
CbllmParkedFreeOwnedBy(int pid)
{
	CbllmParked e;

	if (cbllm_shared == NULL)
		return;
	while (ParkedTake(0, 0, pid, true, &e))
		ParkedFreeData(&e);
}

/* Results parked now (for cbllm_status). */
int
CbllmParkedCount(void)
{
	int			n = 0;

	LWLockAcquire(cbllm_shared->parked_lock, LW_SHARED);
	for (int i = 0; i < cbllm_shared->n_parked; i++)
		n += Parked(i)->in_use;
	LWLockRelease(cbllm_shared->parked_lock);
	return n;
}

/*
 * The backend is done with (slot, serial), finished or not: unfinished
 * requests become CANCELLED (the worker aborts them), the rest FREE, and a
 * parked result is dropped.  Returns true when the worker must be woken.
 */
bool
CbllmSlotGiveUp(int slot, uint64 serial)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	bool		wake = false,
				parked = false;

	SpinLockAcquire(&s->mutex);
	if (s->serial == serial && s->owner_pid == MyProcPid)
	{
		switch (s->state)
		{
			case SLOT_SUBMITTED:
			case SLOT_RUNNING:
			case SLOT_PARKING:
				s->state = SLOT_CANCELLED;
				wake = true;
				break;
			case SLOT_CLAIMED:
			case SLOT_DONE:
			case SLOT_FAILED:
				s->state = SLOT_FREE;
				s->owner_pid = 0;
				s->owner_role = InvalidOid;
				s->owner_latch = NULL;
				break;
			default:
				break;
		}
	}
	else
		parked = true;			/* the worker parked it (and the slot may be reused already) */
	SpinLockRelease(&s->mutex);
	if (parked)
		ParkedDrop(slot, serial);
	return wake;
}

/*
 * Read new output of (slot, serial) into buf: whole frames, at most
 * max_frames (0: all).  Returns true when something was read or the request
 * is over (res says how it ended).
 */
bool
CbllmSlotRead(int slot, uint64 serial, StringInfo buf, const CbllmSideParts *side, int max_frames,
			  CbllmReadResult *res)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	CbllmSlotState st;
	uint64		ser,
				head,
				tail;
	int			avail,
				used,
				len0 = buf->len,
				lp0 = side && side->logprobs ? side->logprobs->len : 0,
				rs0 = side && side->reasoning ? side->reasoning->len : 0;
	char	   *copy;

	memset(res, 0, sizeof(*res));
	SpinLockAcquire(&s->mutex);
	st = s->state;
	ser = s->serial;
	head = s->out_head;
	tail = s->out_tail;
	SpinLockRelease(&s->mutex);

	if (ser != serial || st == SLOT_FREE)
	{
		/* parked: the whole rest of the output is in the result area */
		CbllmParked e;

		res->over = true;
		res->finish = -1;
		if (!ParkedTake(slot, serial, MyProcPid, false, &e))
		{
			res->failed = true;
			res->errcode = ERRCODE_INTERNAL_ERROR;
			strlcpy(res->error, "the request's result is gone", CBLLM_ERROR_LEN);
			return true;
		}
		if (e.data != 0)
			(void) UnframeInto(dsa_get_address(ResultArea(), (dsa_pointer) e.data), e.len, buf,
							   side, 0);
		ParkedFreeData(&e);
		res->failed = e.failed;
		res->errcode = e.errcode;
		strlcpy(res->error, e.error, CBLLM_ERROR_LEN);
		return true;
	}
	if (st != SLOT_RUNNING && st != SLOT_DONE && st != SLOT_FAILED)
		return false;			/* not started, or being parked: nothing to read yet */

	avail = (int) (head - tail);
	if (avail > 0)
	{
		/* copy outside the lock: [tail, head) is ours until we advance tail */
		copy = palloc(avail);
		RingRead(s, tail, copy, avail);
		used = UnframeInto(copy, avail, buf, side, max_frames);
		pfree(copy);
	}
	else
		used = 0;

	SpinLockAcquire(&s->mutex);
	if (s->serial != serial ||
		!(s->state == SLOT_RUNNING || s->state == SLOT_DONE || s->state == SLOT_FAILED))
	{
		/*
		 * The worker is moving these bytes to the result area, or has moved
		 * them already (PARKING, or FREE once parked), or the owner gave up:
		 * drop our copy; the parked result holds all of it.
		 */
		SpinLockRelease(&s->mutex);
		buf->len = len0;
		buf->data[len0] = '\0';
		if (side != NULL && side->logprobs != NULL)
		{
			side->logprobs->len = lp0;
			side->logprobs->data[lp0] = '\0';
		}
		if (side != NULL && side->reasoning != NULL)
		{
			side->reasoning->len = rs0;
			side->reasoning->data[rs0] = '\0';
		}
		return false;
	}
	s->out_tail += used;
	st = s->state;
	res->over = (st == SLOT_DONE || st == SLOT_FAILED) && s->out_tail == s->out_head;
	res->errcode = s->errcode;
	res->finish = s->finish;
	res->progress = s->progress;
	SpinLockRelease(&s->mutex);
	if (res->over)
	{
		res->failed = st == SLOT_FAILED;
		if (res->failed)
			strlcpy(res->error, s->error, CBLLM_ERROR_LEN); /* fixed once FAILED */
	}
	if (used > 0 && !res->over)
		CbllmWakeWorker();	/* room in the ring for frames the worker holds */
	return used > 0 || res->over;
}

/* The state of (slot, serial) as the backend sees it; FREE when gone or parked. */
CbllmSlotState
CbllmSlotStateOf(int slot, uint64 serial)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	CbllmSlotState st;

	SpinLockAcquire(&s->mutex);
	st = s->serial == serial ? s->state : SLOT_FREE;
	SpinLockRelease(&s->mutex);
	return st;
}

/* Set the worker's latch (after a submit, a cancel or a read that made room). */
void
CbllmWakeWorker(void)
{
	Latch	   *l;

	SpinLockAcquire(&cbllm_shared->info_lock);
	l = cbllm_shared->worker_latch;
	SpinLockRelease(&cbllm_shared->info_lock);
	if (l)
		SetLatch(l);
}

/* ---- the worker's moves ---- */

/* Read slot i's state and serial. */
CbllmSlotState
CbllmSlotPeek(int slot, uint64 *serial)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	CbllmSlotState st;

	SpinLockAcquire(&s->mutex);
	st = s->state;
	*serial = s->serial;
	SpinLockRelease(&s->mutex);
	return st;
}

/* Take a SUBMITTED request: -> RUNNING.  Its request is then stable for the worker to copy. */
bool
CbllmSlotTake(int slot, uint64 *serial_out)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	bool		ok = false;

	SpinLockAcquire(&s->mutex);
	if (s->state == SLOT_SUBMITTED)
	{
		s->state = SLOT_RUNNING;
		*serial_out = s->serial;
		ok = true;
	}
	SpinLockRelease(&s->mutex);
	return ok;
}

/* Set the owner's latch of slot i (if it has an owner). */
void
CbllmWakeOwner(int slot)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	Latch	   *l;

	SpinLockAcquire(&s->mutex);
	l = s->state != SLOT_FREE ? s->owner_latch : NULL;
	SpinLockRelease(&s->mutex);
	if (l)
		SetLatch(l);
}

/* Free a CANCELLED slot (CANCELLED -> FREE); returns true if it was cancelled. */
static bool
ReapLocked(CbllmSlot *s, uint64 serial)
{
	if (s->serial != serial || s->state != SLOT_CANCELLED)
		return false;
	s->state = SLOT_FREE;
	s->owner_pid = 0;
	s->owner_role = InvalidOid;
	s->owner_latch = NULL;
	return true;
}

/* CANCELLED -> FREE, after the worker has aborted the request. */
void
CbllmSlotReapCancelled(int slot, uint64 serial)
{
	CbllmSlot  *s = CbllmGetSlot(slot);

	SpinLockAcquire(&s->mutex);
	(void) ReapLocked(s, serial);
	SpinLockRelease(&s->mutex);
}

/*
 * Write whole frames from data[0..len) into the ring of a RUNNING slot, as
 * many as fit.  Returns the bytes written; *cancelled when the backend gave
 * up (the slot is then freed here).
 */
int
CbllmSlotDeliver(int slot, uint64 serial, const char *data, int len, bool *cancelled)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	int			cap = cbllm_shared->out_cap;
	uint64		head,
				tail;
	int			used = 0;
	Latch	   *l = NULL;

	*cancelled = false;
	SpinLockAcquire(&s->mutex);
	if (s->serial != serial || s->state != SLOT_RUNNING)
	{
		*cancelled = true;
		(void) ReapLocked(s, serial);
		SpinLockRelease(&s->mutex);
		return 0;
	}
	head = s->out_head;
	tail = s->out_tail;
	SpinLockRelease(&s->mutex);

	while (used + CBLLM_FRAME_HEADER <= len)
	{
		uint32		n;
		int			frame;

		memcpy(&n, data + used, sizeof(n));
		frame = CBLLM_FRAME_HEADER + (int) CBLLM_FRAME_LEN(n);
		if ((int) (head + used - tail) + frame > cap)
			break;
		RingWrite(s, head + used, data + used, frame);
		used += frame;
	}
	if (used == 0)
		return 0;
	SpinLockAcquire(&s->mutex);
	if (s->serial == serial && s->state == SLOT_RUNNING)
	{
		s->out_head = head + used;
		l = s->owner_latch;
	}
	SpinLockRelease(&s->mutex);
	if (l)
		SetLatch(l);
	return used;
}

/* Publish a running request's progress (for cbllm.requests and the backend). */
void
CbllmSlotProgress(int slot, uint64 serial, const cbllm_request_progress *p,
				  TimestampTz first_token_at)
{
	CbllmSlot  *s = CbllmGetSlot(slot);

	SpinLockAcquire(&s->mutex);
	if (s->serial == serial && s->state == SLOT_RUNNING)
	{
		s->progress = *p;
		s->first_token_at = first_token_at;
	}
	SpinLockRelease(&s->mutex);
}

/*
 * End a request whose output is all in the ring: SUBMITTED or RUNNING ->
 * DONE or FAILED, and wake its owner.  A cancelled one is freed instead.
 * Returns false when the request was no longer there to finish.
 */
bool
CbllmSlotFinish(int slot, uint64 serial, bool failed, int finish, int errcode_in, const char *msg)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	Latch	   *l = NULL;
	bool		live;

	SpinLockAcquire(&s->mutex);
	live = s->serial == serial && (s->state == SLOT_SUBMITTED || s->state == SLOT_RUNNING);
	if (!live)
		(void) ReapLocked(s, serial);
	SpinLockRelease(&s->mutex);
	if (!live)
		return false;

	/* the backend reads error only after it sees FAILED */
	if (failed)
		strlcpy(s->error, msg ? msg : "", CBLLM_ERROR_LEN);

	SpinLockAcquire(&s->mutex);
	live = s->serial == serial && (s->state == SLOT_SUBMITTED || s->state == SLOT_RUNNING);
	if (live)
	{
		s->state = failed ? SLOT_FAILED : SLOT_DONE;
		s->finish = finish;
		s->errcode = errcode_in;
		l = s->owner_latch;
	}
	else
		(void) ReapLocked(s, serial);
	SpinLockRelease(&s->mutex);
	if (l)
		SetLatch(l);
	return live;
}

/*
 * Move a finished llm_submit result out of its slot: RUNNING -> PARKING ->
 * FREE, with the unread ring and the worker's pending frames copied into the
 * result area.  Returns false (the slot stays RUNNING) when the request is
 * not an llm_submit one or the store is full; true when the slot is gone
 * (parked, or found cancelled and freed).
 */
bool
CbllmSlotPark(int slot, uint64 serial, const char *pending, int pending_len, bool failed,
			  int errcode_in, const char *msg)
{
	CbllmSlot  *s = CbllmGetSlot(slot);
	dsa_area   *area = ResultArea();
	uint64		head,
				tail;
	int			owner,
				ring_len,
				entry = -1,
				role_parked = 0;
	Oid			role;
	dsa_pointer data = InvalidDsaPointer;
	Latch	   *l = NULL;
	bool		cancelled;

	SpinLockAcquire(&s->mutex);
	if (s->serial != serial || s->state != SLOT_RUNNING || !s->async)
	{
		bool		reaped = ReapLocked(s, serial);

		SpinLockRelease(&s->mutex);
		return reaped;
	}
	s->state = SLOT_PARKING;
	head = s->out_head;
	tail = s->out_tail;
	owner = s->owner_pid;
	role = s->owner_role;
	SpinLockRelease(&s->mutex);

	ring_len = (int) (head - tail);
	if (ring_len + pending_len > 0)
		data = dsa_allocate_extended(area, ring_len + pending_len, DSA_ALLOC_NO_OOM);
	if (ring_len + pending_len == 0 || DsaPointerIsValid(data))
	{
		LWLockAcquire(cbllm_shared->parked_lock, LW_EXCLUSIVE);
		/* one role may fill at most half of the store */
		for (int i = 0; i < cbllm_shared->n_parked; i++)
			role_parked += Parked(i)->in_use && Parked(i)->owner_role == role;
		for (int i = 0; i < cbllm_shared->n_parked && role_parked < cbllm_shared->n_parked / 2; i++)
			if (!Parked(i)->in_use)
			{
				entry = i;
				Parked(i)->owner_role = role;
				Parked(i)->in_use = true;	/* reserved; filled below */
				Parked(i)->owner_pid = 0;	/* no backend matches it yet */
				Parked(i)->data = DsaPointerIsValid(data) ? (uint64) data : 0;
				break;
			}
		LWLockRelease(cbllm_shared->parked_lock);
	}
	if (entry < 0)
	{
		/* the store is full: the result stays in its slot */
		if (DsaPointerIsValid(data))
			dsa_free(area, data);
		SpinLockAcquire(&s->mutex);
		if (s->state == SLOT_PARKING)
			s->state = SLOT_RUNNING;
		cancelled = ReapLocked(s, serial);
		SpinLockRelease(&s->mutex);
		return cancelled;
	}
	if (DsaPointerIsValid(data))
	{
		char	   *dst = dsa_get_address(area, data);

		RingRead(s, tail, dst, ring_len);
		if (pending_len > 0)
			memcpy(dst + ring_len, pending, pending_len);
	}
	LWLockAcquire(cbllm_shared->parked_lock, LW_EXCLUSIVE);
	{
		CbllmParked *p = Parked(entry);

		p->slot = slot;
		p->serial = serial;
		p->data = DsaPointerIsValid(data) ? (uint64) data : 0;
		p->len = ring_len + pending_len;
		p->failed = failed;
		p->errcode = errcode_in;
		strlcpy(p->error, msg ? msg : "", CBLLM_ERROR_LEN);
		p->owner_pid = owner;
	}
	LWLockRelease(cbllm_shared->parked_lock);

	SpinLockAcquire(&s->mutex);
	cancelled = s->state == SLOT_CANCELLED;
	if (!cancelled)
		l = s->owner_latch;
	s->state = SLOT_FREE;
	s->owner_pid = 0;
	s->owner_role = InvalidOid;
	s->owner_latch = NULL;
	SpinLockRelease(&s->mutex);
	if (cancelled)
	{
		/* the owner gave up while we parked: nobody will collect it */
		LWLockAcquire(cbllm_shared->parked_lock, LW_EXCLUSIVE);
		Parked(entry)->in_use = false;
		LWLockRelease(cbllm_shared->parked_lock);
		if (DsaPointerIsValid(data))
			dsa_free(area, data);
	}
	if (l)
		SetLatch(l);
	return true;
}
