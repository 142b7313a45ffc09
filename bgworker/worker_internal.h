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

/* The supervisor's engines, as the requests' half sees them. */
typedef struct CbllmEngineSet
{
	int			n;				/* cbllm.engines */
	CbllmEngineProc *procs[CBLLM_MAX_ENGINES];	/* each engine's process (pid 0: none runs) */
	bool		ready[CBLLM_MAX_ENGINES];	/* loaded and running: it takes new requests */
	int			kv_free[CBLLM_MAX_ENGINES];	/* its free KV blocks, as it last said */
} CbllmEngineSet;

void		CbllmRequestsInit(int n_slots);
/* Take SUBMITTED slots to the engines (as their command rings allow) and abort cancelled ones. */
void		CbllmRequestsDispatch(const CbllmEngineSet *es);
/* Apply every event engine k (ep) posted; false when its event ring is corrupt. */
bool		CbllmRequestsTakeEvents(CbllmEngineProc *ep, int k);
/* Move pending output into the slots' rings; returns true while any request is active. */
bool		CbllmRequestsDeliver(const CbllmEngineSet *es);
/* Engine k died: fail every request it was running with this message. */
void		CbllmRequestsFailRunning(int k, const char *why);
/* Refuse every SUBMITTED slot (no engine will come) and free cancelled ones. */
void		CbllmRequestsRefuseAll(int errcode_in, const char *msg);
/* Fail what a previous supervisor left running (at start). */
void		CbllmRequestsRecover(void);
/* Requests engine k has now (for the stall check and the view). */
int			CbllmRequestsInEngine(int k);

#endif
