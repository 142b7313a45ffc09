/*
 * request_progress.h: where a request is, as the engine reports it.  The
 * engine process keeps it per request, sends it in every output event
 * (ipc.h), and the supervisor keeps it per request and publishes it in the
 * request's shared-memory slot for cbllm.requests: one struct all the way,
 * copied whole across each boundary, filled from the engine's output in one
 * place (engine_server.c).  Plain data, PostgreSQL-free.
 */
#ifndef CBLLM_REQUEST_PROGRESS_H
#define CBLLM_REQUEST_PROGRESS_H

#include <stdint.h>

typedef struct cbllm_request_progress
{
	double		queue_seconds;	/* submission to first admission in the engine; -1 while queued */
	int32_t		phase;			/* a cbllm_phase */
	int32_t		n_prompt;		/* prompt tokens */
	int32_t		n_generated;	/* tokens generated so far */
	int32_t		reserved;		/* zero: keeps the struct free of padding on the wire */
} cbllm_request_progress;

/* A request that has not reached the engine yet: queued, nothing counted. */
static inline cbllm_request_progress
cbllm_progress_queued(void)
{
	cbllm_request_progress p = {-1, 0, 0, 0, 0};

	return p;
}

#endif
