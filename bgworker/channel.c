/*
 * channel.c: the shared-memory channel between sessions and the worker.
 *
 * Layout: one CbllmShared header, then cbllm.max_queued_requests slots, each
 * a CbllmSlot followed by its prompt buffer and its output ring.  The slot's
 * spinlock guards every field; the comments in cbllm_pg.h say which process
 * writes what.  Spinlocks are held only for copies, never across a wait.
 */
#include "cbllm_pg.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
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

/* Total bytes of the channel. */
static Size
ChannelSize(void)
{
	return add_size(MAXALIGN(sizeof(CbllmShared)),
					mul_size(SlotSize(), (Size) cbllm_max_queued_requests));
}

/* shmem_request_hook: ask for the channel's memory. */
static void
CbllmShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(ChannelSize());
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
		cbllm_shared->n_slots = cbllm_max_queued_requests;
		cbllm_shared->slot_size = SlotSize();
		cbllm_shared->prompt_cap = cbllm_max_prompt_bytes;
		cbllm_shared->out_cap = cbllm_output_buffer_bytes;
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
