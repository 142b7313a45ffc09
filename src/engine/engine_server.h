/*
 * engine_server.h: the loop of the engine process (cbllm-engine), driven by
 * the region and doorbells of ipc.h.
 */
#ifndef CBLLM_ENGINE_SERVER_H
#define CBLLM_ENGINE_SERVER_H

#include <signal.h>

#include "ipc/ipc.h"


/*
 * Load the engine from rg's parameters, publish LOADING, READY or FAILED,
 * then serve commands until a shutdown command, *stop, or an error; returns
 * a cbllm_server_exit.  doorbell_in is read (nonblocking) when idle;
 * doorbell_out is written (nonblocking) after posting events.
 */
int			cbllm_server_run(cbllm_ipc_region *rg, int doorbell_in, int doorbell_out,
							 volatile sig_atomic_t *stop);

#endif
