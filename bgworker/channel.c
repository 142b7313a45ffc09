/*
 * channel.c: the layout of the shared-memory channel between sessions and
 * the worker, made at server start.
 *
 * Layout: one CbllmShared header; cbllm.max_queued_requests slots, each a
 * CbllmSlot followed by its prompt buffer and its output ring; the parked
 * array (four entries a slot); the result area, a DSA area of
 * cbllm.result_memory made in place (it never grows into DSM segments).
 * slot.c holds every move of a slot and says which process may make it
 * under which lock; the comments in cbllm_pg.h say who writes each field.
 */
#include "cbllm_pg.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/dsa.h"
#include "utils/timestamp.h"

CbllmShared *cbllm_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Bytes of one slot with its buffers. */
static Size
SlotSize(void)
{
	return MAXALIGN(MAXALIGN(sizeof(CbllmSlot)) + (Size) cbllm_max_prompt_bytes +
					(Size) cbllm_output_buffer_bytes);
}

/* Entries of the parked array. */
static int
ParkedCount(void)
{
	return 4 * cbllm_max_queued_requests;
}

/* Bytes of the result area. */
static Size
ResultSize(void)
{
	return Max((Size) cbllm_result_memory_kb * 1024, dsa_minimum_size());
}

/* Offset of the parked array from the header. */
static Size
ParkedOffset(void)
{
	return add_size(MAXALIGN(sizeof(CbllmShared)),
					mul_size(SlotSize(), (Size) cbllm_max_queued_requests));
}

/* Offset of the result area from the header. */
static Size
ResultOffset(void)
{
	return MAXALIGN(add_size(ParkedOffset(), mul_size(sizeof(CbllmParked), ParkedCount())));
}

/* Total bytes of the channel. */
static Size
ChannelSize(void)
{
	return add_size(ResultOffset(), ResultSize());
}

/* shmem_request_hook: ask for the channel's memory. */
static void
CbllmShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(ChannelSize());
	RequestNamedLWLockTranche("cbllm", 2);
}

/* shmem_startup_hook: create (or attach to) the channel. */
static void
CbllmShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	cbllm_shared = ShmemInitStruct("cbllm channel", ChannelSize(), &found);
	if (!found)
	{
		memset(cbllm_shared, 0, MAXALIGN(sizeof(CbllmShared)));
		SpinLockInit(&cbllm_shared->info_lock);
		pg_atomic_init_u32(&cbllm_shared->worker_generation, 0);
		cbllm_shared->state = ENGINE_STOPPED;
		cbllm_shared->stats_reset_at = GetCurrentTimestamp();	/* the histograms start empty here */
		cbllm_shared->n_slots = cbllm_max_queued_requests;
		cbllm_shared->slot_size = SlotSize();
		cbllm_shared->prompt_cap = cbllm_max_prompt_bytes;
		cbllm_shared->out_cap = cbllm_output_buffer_bytes;
		cbllm_shared->claim_lock = &GetNamedLWLockTranche("cbllm")[0].lock;
		cbllm_shared->parked_lock = &GetNamedLWLockTranche("cbllm")[1].lock;
		pg_atomic_init_u64(&cbllm_shared->heartbeat, 0);
		pg_atomic_init_u64(&cbllm_shared->engine_heartbeat, 0);
		cbllm_shared->n_parked = ParkedCount();
		cbllm_shared->parked_offset = ParkedOffset();
		cbllm_shared->result_offset = ResultOffset();
		cbllm_shared->result_size = ResultSize();
		memset((char *) cbllm_shared + cbllm_shared->parked_offset, 0,
			   sizeof(CbllmParked) * cbllm_shared->n_parked);
		{
			/* the result area: made here, in place, and never grown beyond it */
			dsa_area   *area;

			cbllm_shared->result_tranche = LWLockNewTrancheId();
			LWLockRegisterTranche(cbllm_shared->result_tranche, "cbllm_results");
			area = dsa_create_in_place((char *) cbllm_shared + cbllm_shared->result_offset,
									   cbllm_shared->result_size,
									   cbllm_shared->result_tranche, NULL);
			dsa_set_size_limit(area, cbllm_shared->result_size);
			dsa_pin(area);
			dsa_detach(area);
		}
		for (int i = 0; i < cbllm_shared->n_slots; i++)
		{
			CbllmSlot  *s = CbllmGetSlot(i);

			memset(s, 0, sizeof(CbllmSlot));
			SpinLockInit(&s->mutex);
			s->state = SLOT_FREE;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Install the shared-memory hooks (from _PG_init). */
void
CbllmRequestShmem(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = CbllmShmemRequest;
#else
	CbllmShmemRequest();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = CbllmShmemStartup;
}
