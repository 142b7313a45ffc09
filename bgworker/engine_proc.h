/*
 * engine_proc.h: the engine process as the supervisor starts, watches and
 * stops it (engine_proc.c).
 */
#ifndef CBLLM_ENGINE_PROC_H
#define CBLLM_ENGINE_PROC_H

#include "datatype/timestamp.h"

#include "ipc/ipc.h"

/* The child's exit status when exec of the engine program failed. */
#define CBLLM_ENGINE_EXEC_FAILED 127

/* One engine process and its channel; all fields are the supervisor's alone. */
typedef struct CbllmEngineProc
{
	pid_t		pid;			/* 0 when none runs */
	int			region_fd;		/* the memory file of the region */
	cbllm_ipc_region *rg;		/* the region, mapped; NULL when none */
	size_t		size;
	int			bell_to_engine; /* write end of the engine's doorbell */
	int			bell_from_engine;	/* read end of ours (nonblocking); EOF when the engine is gone */
	TimestampTz started_at;
} CbllmEngineProc;

bool		CbllmEngineSpawn(CbllmEngineProc *ep, const cbllm_ipc_params *params, size_t max_msg,
							 char *errmsg);
void		CbllmEngineRing(CbllmEngineProc *ep);
void		CbllmEngineDrainBell(CbllmEngineProc *ep);
bool		CbllmEngineExited(CbllmEngineProc *ep, char *why, size_t len, int *status);
void		CbllmEngineKill(CbllmEngineProc *ep);
void		CbllmEngineStop(CbllmEngineProc *ep, int timeout_ms);
void		CbllmEngineRelease(CbllmEngineProc *ep);

#endif
