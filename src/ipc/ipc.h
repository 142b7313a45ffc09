/*
 * ipc.h: the channel between the PostgreSQL supervisor and the engine
 * process (cbllm-engine), in a shared-memory region of their own.
 *
 * The supervisor (a background worker) creates the region (an anonymous
 * memory file), fills in the parameters, and starts the engine with the file
 * and two pipes (doorbells, one each way).  Two single-producer
 * single-consumer rings carry the traffic: commands (submit, abort,
 * shutdown) from the supervisor, events (a request's new output, its end)
 * from the engine.  The engine also publishes its state, facts and
 * counters under a sequence lock, and a heartbeat at every pass of its loop.
 *
 * Crash consistency.  The engine may die at any instant (a signal, the OOM
 * killer, SIGBUS on a truncated model file), so nothing the supervisor
 * trusts is ever half written:
 *   - a ring's producer writes a message's bytes first and only then
 *     publishes its new head with a release store; the consumer reads up to
 *     the head it loaded with an acquire load.  A producer that dies
 *     mid-message leaves a head that does not cover it: the message never
 *     existed;
 *   - the status block is written between two increments of status_seq (odd
 *     while writing); a reader retries until it sees the same even value
 *     before and after its copy, and gives up (keeping its last good copy)
 *     if the writer died while odd;
 *   - every message is checked before it is used (its length against the
 *     bytes available and the largest allowed, its fields against their
 *     ranges): a corrupt message marks the channel broken, and the
 *     supervisor then kills and restarts the engine rather than act on it.
 * The supervisor never blocks on the engine: a full command ring leaves the
 * request waiting in its slot, and a full event ring makes the engine keep
 * the output until there is room.
 */
#ifndef CBLLM_IPC_H
#define CBLLM_IPC_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/cbllm.h"
#include "api/request_params.h"
#include "api/request_progress.h"

#define CBLLM_IPC_MAGIC 0x434c4c4dU	/* "MLLC" */
#define CBLLM_IPC_VERSION 12
#define CBLLM_IPC_REASON_LEN 512


/* ---- one single-producer single-consumer ring of messages ---- */

typedef struct cbllm_ring
{
	alignas(64) _Atomic uint64_t head;	/* producer: bytes ever written, stored after the bytes */
	alignas(64) _Atomic uint64_t tail;	/* consumer: bytes ever read, stored after reading them */
	alignas(64) uint64_t cap;	/* bytes of data (set at creation, read-only) */
	/* cap bytes of data follow */
} cbllm_ring;

/* A message: this header, then len - sizeof(header) bytes of payload. */
typedef struct cbllm_msg_header
{
	uint32_t	len;			/* whole message, header included */
	uint32_t	type;
} cbllm_msg_header;

void		cbllm_ring_init(cbllm_ring *r, uint64_t cap);
/* Bytes a producer may still write now. */
uint64_t	cbllm_ring_space(const cbllm_ring *r);
/* Append one message of payload a then b; false (nothing written) when it does not fit now. */
bool		cbllm_ring_put(cbllm_ring *r, uint32_t type, const void *a, size_t na, const void *b,
						   size_t nb);

/*
 * Take the next message into buf (cap bytes; its payload starts after the
 * header).  Returns 1 with *type and *len (the whole message), 0 when the
 * ring is empty, -1 when the ring is corrupt (a length that cannot be).
 */
int			cbllm_ring_get(cbllm_ring *r, void *buf, size_t cap, uint32_t *type, size_t *len);

/* ---- what goes through the rings ---- */

enum cbllm_cmd_type
{
	CBLLM_CMD_SUBMIT = 1,		/* cbllm_cmd_submit, then its prompt, then its stop strings */
	CBLLM_CMD_ABORT,			/* cbllm_cmd_abort */
	CBLLM_CMD_SHUTDOWN			/* no payload */
};

typedef struct cbllm_cmd_submit
{
	int32_t		slot;			/* the request's id on the supervisor's side: slot and serial */
	uint64_t	serial;
	cbllm_request_params params;	/* as the slot holds them: params.prompt_len bytes of prompt
									 * (or int32 ids), then the stop strings, follow this struct */
} cbllm_cmd_submit;

typedef struct cbllm_cmd_abort
{
	int32_t		slot;
	uint64_t	serial;
} cbllm_cmd_abort;

enum cbllm_evt_type
{
	CBLLM_EVT_OUTPUT = 1		/* cbllm_evt_output, then text, then error, then logprobs, then
								 * reasoning */
};

typedef struct cbllm_evt_output
{
	int32_t		slot;
	uint64_t	serial;
	cbllm_request_progress progress;	/* where the request is now */
	int32_t		n_tokens;		/* tokens generated since the previous event */
	int32_t		finish;			/* a cbllm_finish; NONE while running */
	int32_t		status;			/* when finish is ERROR: a cbllm status code (what kind of error) */
	int32_t		text_len;		/* bytes after this struct */
	int32_t		error_len;		/* bytes after the text */
	int32_t		logprobs_len;	/* bytes after the error: the next part of the request's
								 * logprobs stream (logprobs_json.h), cut anywhere */
	int32_t		reasoning_len;	/* bytes after the logprobs: the next part of a chat answer's
								 * reasoning (text is its content), cut anywhere */
} cbllm_evt_output;

/* Check a submit command's parameters by the rules of a request (request_params.h) and its
 * lengths against the payload length; NULL when sound, else why not. */
const char *cbllm_cmd_submit_check(const cbllm_cmd_submit *c, size_t payload_len, int n_slots);
/* Check an output event's fields against the payload length; NULL when sound, else why not. */
const char *cbllm_evt_output_check(const cbllm_evt_output *e, size_t payload_len, int n_slots);

/* ---- the region ---- */

/* The engine's parameters: the supervisor writes them before starting the engine. */
typedef struct cbllm_ipc_params
{
	char		model_dir[1024];
	char		device[16];
	char		load_format[16];
	char		weight_format[16];	/* "" or "auto": as stored; else a quantized type's name */
	char		kv_cache_dtype[16];	/* "" or "auto", "f32", "f16", "bf16" */
	char		chat_template[1024];	/* "" : the model's own */
	int32_t		n_threads;
	int32_t		max_num_seqs;
	int32_t		max_num_batched_tokens;
	int32_t		max_model_len;
	int32_t		block_size;
	int32_t		max_queued;
	int32_t		preempt_mode;
	int32_t		no_prefix_caching;
	int32_t		no_cuda_graphs;
	int32_t		n_slots;		/* the supervisor's slots: commands name a slot below this */
	int32_t		engine_index;	/* this engine among the supervisor's n_engines (cbllm.engines) */
	int32_t		n_engines;		/* > 1: engine k takes GPU k (see engine_server_select_gpu) */
	uint64_t	kv_cache_bytes;
	uint64_t	swap_space_bytes;
	double		gpu_memory_utilization;
	double		priority_aging;
	double		max_step_ms;	/* cbllm_engine_params.max_step_ms */
} cbllm_ipc_params;

typedef enum cbllm_ipc_state
{
	CBLLM_IPC_STARTING = 0,		/* the engine has not said anything yet */
	CBLLM_IPC_LOADING,
	CBLLM_IPC_READY,
	CBLLM_IPC_FAILED			/* the model failed to load: see reason */
} cbllm_ipc_state;

/* What the engine publishes (under status_seq). */
typedef struct cbllm_ipc_status
{
	int32_t		state;			/* a cbllm_ipc_state */
	int32_t		load_status;	/* FAILED: the cbllm status code of the failure (what kind) */
	char		reason[CBLLM_IPC_REASON_LEN];
	char		device[32];
	char		cpu_isa[32];
	char		weight_types[128];	/* the model's tensors by weight type (model_weight_types) */
	int32_t		max_model_len;
	cbllm_stats stats;
} cbllm_ipc_status;

typedef struct cbllm_ipc_region
{
	uint32_t	magic;			/* supervisor, at creation: CBLLM_IPC_MAGIC */
	uint32_t	version;		/* CBLLM_IPC_VERSION */
	uint64_t	size;			/* bytes of the whole region */
	uint64_t	cmd_offset;		/* from the region's start: the command ring */
	uint64_t	evt_offset;		/* the event ring */
	uint64_t	max_msg;		/* the largest message either side may put */
	uint64_t	layout;			/* the sizes of the shared structs (cbllm_ipc_layout): both builds agree */
	cbllm_ipc_params params;	/* supervisor, before the engine starts; read-only after */
	alignas(64) _Atomic uint32_t status_seq;	/* engine: odd while it writes status */
	cbllm_ipc_status status;	/* engine, under status_seq */
	alignas(64) _Atomic uint64_t heartbeat_ns;	/* engine: CLOCK_MONOTONIC at every pass of its loop */
	_Atomic int32_t engine_pid; /* engine, at start */
} cbllm_ipc_region;

/* The sizes of the structs both sides share, in one number: a build whose layout differs is refused. */
uint64_t	cbllm_ipc_layout(void);
/* Bytes of a region whose messages may be as large as max_msg. */
size_t		cbllm_ipc_region_size(size_t max_msg);
/* Lay out a zeroed region of that size. */
void		cbllm_ipc_region_init(cbllm_ipc_region *rg, size_t size, size_t max_msg);
/* Check a mapped region's header; NULL when sound, else why not. */
const char *cbllm_ipc_region_check(const cbllm_ipc_region *rg, size_t mapped);
cbllm_ring *cbllm_ipc_cmd_ring(cbllm_ipc_region *rg);
cbllm_ring *cbllm_ipc_evt_ring(cbllm_ipc_region *rg);

/* Engine: publish the status block. */
void		cbllm_ipc_status_write(cbllm_ipc_region *rg, const cbllm_ipc_status *st);
/* Supervisor: copy the status block; false when no consistent copy could be had. */
bool		cbllm_ipc_status_read(const cbllm_ipc_region *rg, cbllm_ipc_status *out);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t	cbllm_ipc_now_ns(void);

/* How the engine process's loop ended (engine/engine_server.c): the status it exits with. */
enum cbllm_server_exit
{
	CBLLM_SERVER_STOPPED = 0,	/* told to stop (shutdown command or *stop) */
	CBLLM_SERVER_LOAD_FAILED = 2,	/* the model did not load: the status block says why */
	CBLLM_SERVER_BAD_CHANNEL = 3,	/* a corrupt command ring */
	CBLLM_SERVER_DEVICE_LOST = 4	/* a sticky device fault: a new process gets a new context */
};

/*
 * The GPU engine index of several (cbllm.engines) takes, as the value of
 * CUDA_VISIBLE_DEVICES it runs with: the index-th device that visible (the
 * supervisor's CUDA_VISIBLE_DEVICES, NULL or empty: none) lists, round the
 * list, else GPU index itself.
 */
void		cbllm_server_gpu_choice(const char *visible, int index, char *out, size_t len);

#endif
