/*
 * worker_internal.h: the two halves of the supervisor (the background
 * worker): worker.c runs the loop and the engine process's life,
 * worker_requests.c carries each slot's request to the engine and its
 * output back.
 */
#ifndef CBLLM_WORKER_INTERNAL_H
#define CBLLM_WORKER_INTERNAL_H

#include "cbllm_pg.h"

#include "engine_proc.h"

/* The largest message between supervisor and engine: a whole request, with room to spare. */
#define CBLLM_MAX_MSG(prompt_cap) ((size_t) (prompt_cap) + 65536)

void		CbllmRequestsInit(int n_slots);
/* Take SUBMITTED slots to the engine (as the command ring allows) and abort cancelled ones. */
void		CbllmRequestsDispatch(CbllmEngineProc *ep);
/* Apply every event the engine posted; false when the event ring is corrupt. */
bool		CbllmRequestsTakeEvents(CbllmEngineProc *ep);
/* Move pending output into the slots' rings; returns true while any request is active. */
bool		CbllmRequestsDeliver(CbllmEngineProc *ep);
/* The engine died: fail every request it was running with this message. */
void		CbllmRequestsFailRunning(const char *why);
/* Refuse every SUBMITTED slot (no engine will come) and free cancelled ones. */
void		CbllmRequestsRefuseAll(int errcode_in, const char *msg);
/* Fail what a previous supervisor left running (at start). */
void		CbllmRequestsRecover(void);
/* Requests the engine has now (for the stall check). */
int			CbllmRequestsInEngine(void);

#endif
