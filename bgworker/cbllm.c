/*
 * cbllm.c: the module's entry point.  _PG_init only composes: it defines the
 * GUCs, requests the shared-memory channel, registers the engine worker and
 * installs the batching node's planner hook.
 */
#include "cbllm_pg.h"

#include "fmgr.h"
#include "miscadmin.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* Set up cbllm when the postmaster preloads it. */
void
_PG_init(void)
{
	/*
	 * Loaded in a session (CREATE EXTENSION without preloading): define
	 * nothing, since postmaster-level parameters cannot be created after
	 * startup; every call then says how to preload cbllm.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;
	CbllmDefineGucs();
	CbllmRequestShmem();
	CbllmRegisterWorker();
	CbllmBatchInit();
}
