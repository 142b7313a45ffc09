/*
 * engine_server.h: the loop of the engine process (cbllm-engine), driven by
 * the region and doorbells of ipc.h.
 */
#ifndef CBLLM_ENGINE_SERVER_H
#define CBLLM_ENGINE_SERVER_H

#include <signal.h>

#include "ipc.h"

/* How the loop ended: the engine process exits with this status. */
enum cbllm_server_exit
{
	CBLLM_SERVER_STOPPED = 0,	/* told to stop (shutdown command or *stop) */
	CBLLM_SERVER_LOAD_FAILED = 2,	/* the model did not load: the status block says why */
	CBLLM_SERVER_BAD_CHANNEL = 3,	/* a corrupt command ring */
	CBLLM_SERVER_DEVICE_LOST = 4	/* a sticky device fault: a new process gets a new context */
};

/*
 * Load the engine from rg's parameters, publish LOADING, READY or FAILED,
 * then serve commands until a shutdown command, *stop, or an error; returns
 * a cbllm_server_exit.  doorbell_in is read (nonblocking) when idle;
 * doorbell_out is written (nonblocking) after posting events.
 */
int			cbllm_server_run(cbllm_ipc_region *rg, int doorbell_in, int doorbell_out,
							 volatile sig_atomic_t *stop);

/*
 * The GPU engine index of several (cbllm.engines) takes, as the value of
 * CUDA_VISIBLE_DEVICES it runs with: the index-th device that visible (the
 * supervisor's CUDA_VISIBLE_DEVICES, NULL or empty: none) lists, round the
 * list, else GPU index itself.
 */
void		cbllm_server_gpu_choice(const char *visible, int index, char *out, size_t len);

#endif
