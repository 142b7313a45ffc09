/*
 * cbllm_pg.h: the PostgreSQL side of cbllm: GUCs, the shared-memory channel
 * between sessions and the engine worker, and the worker itself.
 *
 * Only this layer includes postgres.h; the engine (src/) knows nothing of
 * PostgreSQL and is driven through src/cbllm.h from the worker's main thread.
 */
#ifndef CBLLM_PG_H
#define CBLLM_PG_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "datatype/timestamp.h"

/* ---- GUCs (guc.c) ---- */
extern char *cbllm_model;
extern char *cbllm_device;
extern int	cbllm_threads;
extern int	cbllm_max_num_seqs;
extern int	cbllm_max_num_batched_tokens;
extern int	cbllm_max_model_len;
extern int	cbllm_kv_cache_size_mb;
extern int	cbllm_block_size;
extern int	cbllm_preempt_mode;
extern int	cbllm_swap_space_mb;
extern double cbllm_gpu_memory_utilization;
extern int	cbllm_load_format;
extern bool cbllm_cuda_graphs;
extern bool cbllm_enable_prefix_caching;
extern int	cbllm_max_queued_requests;
extern int	cbllm_max_tokens_limit;
extern int	cbllm_max_prompt_bytes;
extern int	cbllm_output_buffer_bytes;
extern int	cbllm_load_timeout_ms;

void		CbllmDefineGucs(void);

/* ---- the channel (channel.c) ---- */

typedef enum CbllmSlotState
{
	SLOT_FREE = 0,				/* unused; a backend may claim it */
	SLOT_CLAIMED,				/* a backend is filling in the request */
	SLOT_SUBMITTED,				/* ready for the worker */
	SLOT_RUNNING,				/* the worker has it in the engine */
	SLOT_DONE,					/* finished; output complete */
	SLOT_FAILED,				/* finished with an error (errcode, error) */
	SLOT_CANCELLED				/* the backend gave up; the worker aborts and frees it */
} CbllmSlotState;

typedef enum CbllmEngineState
{
	ENGINE_STOPPED = 0,			/* no worker has run yet */
	ENGINE_LOADING,				/* the worker is loading the model */
	ENGINE_READY,
	ENGINE_FAILED,				/* the model failed to load: see reason */
	ENGINE_NO_MODEL				/* cbllm.model is empty */
} CbllmEngineState;

#define CBLLM_REASON_LEN 512
#define CBLLM_ERROR_LEN 512
#define CBLLM_MAX_STOP_STRINGS 8

/* A request's generation parameters, as the SQL call gave them. */
typedef struct CbllmParams
{
	int			max_tokens;
	double		temperature;
	double		top_p;
	int			top_k;
	bool		has_seed;
	int64		seed;
	int			priority;
	int			n_stop;
	int			stop_len[CBLLM_MAX_STOP_STRINGS];	/* bytes of each stop string */
} CbllmParams;

/*
 * One request slot.  Every field says who writes it, under which lock:
 * "mutex" is the slot's spinlock; the state machine is
 *   FREE -> CLAIMED (backend) -> SUBMITTED (backend) -> RUNNING (worker)
 *   -> DONE | FAILED (worker) -> FREE (backend, after reading)
 * and from CLAIMED/SUBMITTED/RUNNING a backend may move it to CANCELLED,
 * after which only the worker touches it and returns it to FREE.
 */
typedef struct CbllmSlot
{
	slock_t		mutex;
	CbllmSlotState state;		/* see above; under mutex */
	uint64		serial;			/* backend, under mutex: bumped at every claim */
	int			owner_pid;		/* backend at claim, under mutex; 0 when free */
	Latch	   *owner_latch;	/* backend at claim, under mutex: set by the worker on output */
	uint32		worker_generation;	/* backend at submit (the worker it expects), under mutex */

	/* the request: backend, under mutex, before SUBMITTED; then read-only */
	CbllmParams params;			/* its stop strings follow the prompt in prompt_buf */
	int			prompt_len;		/* bytes of prompt text at the start of prompt_buf */

	Oid			owner_role;		/* backend at claim, under mutex: the submitting user */
	TimestampTz submitted_at;	/* backend at submit, under mutex */

	/* the result: worker, under mutex */
	int			phase;			/* a cbllm_phase, for cbllm.requests */
	TimestampTz first_token_at; /* 0 until the first token */
	double		queue_seconds;	/* submit to first admission in the engine; -1 while queued */
	int			n_prompt_tokens;
	int			n_generated;
	int			finish;			/* a cbllm_finish once DONE */
	int			errcode;		/* a PostgreSQL sqlstate once FAILED */
	char		error[CBLLM_ERROR_LEN];
	uint64		out_head;		/* worker, under mutex: bytes ever written to out_buf */
	uint64		out_tail;		/* backend, under mutex: bytes ever read from out_buf */
	/* prompt_buf (cbllm.max_prompt_bytes) and out_buf (cbllm.output_buffer_bytes) follow */
} CbllmSlot;

/* Latencies kept as log-spaced histograms (bucket b: [0.1 ms * 1.25^b, 0.1 ms * 1.25^(b+1))). */
#define CBLLM_HIST_BUCKETS 96
#define CBLLM_N_LATENCY 4		/* ttft, itl, queue, e2e */

typedef struct CbllmHistogram
{
	uint64		count;
	double		sum_seconds;
	uint64		buckets[CBLLM_HIST_BUCKETS];
} CbllmHistogram;

/*
 * The shared header.  Engine fields are written by the worker under
 * info_lock; readers copy them under the same lock and never block the
 * worker for longer than a copy.
 */
typedef struct CbllmShared
{
	slock_t		info_lock;
	pg_atomic_uint32 worker_generation; /* worker: bumped when a worker starts */
	int			worker_pid;		/* worker, under info_lock; 0 when none */
	Latch	   *worker_latch;	/* worker, under info_lock; backends set it on submit/cancel */
	CbllmEngineState state;		/* worker, under info_lock */
	char		reason[CBLLM_REASON_LEN];	/* worker, under info_lock: why FAILED */
	char		model[MAXPGPATH];	/* worker, under info_lock */
	char		device[32];		/* worker, under info_lock */
	char		cpu_isa[32];	/* worker, under info_lock */
	int			kv_blocks_total;	/* worker, under info_lock: engine statistics */
	int			kv_blocks_free;
	int			n_running;
	int			n_waiting;
	int64		steps;
	int64		batch_seqs_sum;
	int64		tokens_prompt;
	int64		tokens_generated;
	int64		preemptions;
	int64		prefix_queries;
	int64		prefix_hits;
	int			max_model_len;
	TimestampTz started_at;
	int			kv_blocks_cached;	/* worker, under info_lock */
	int			swap_blocks_total;
	int			swap_blocks_free;
	int			n_swapped;
	int64		preemptions_recompute;
	int64		preemptions_swap;

	/* latency histograms since stats_reset_at: worker adds, cbllm.reset_stats() clears, under info_lock */
	TimestampTz stats_reset_at;
	CbllmHistogram latency[CBLLM_N_LATENCY];

	/* set at startup, read-only afterwards */
	int			n_slots;
	Size		slot_size;		/* bytes per slot including its buffers */
	int			prompt_cap;
	int			out_cap;
	/* slots follow, each slot_size bytes, 8-byte aligned */
} CbllmShared;

extern CbllmShared *cbllm_shared;

void		CbllmRequestShmem(void);

/* Address of slot i and of its buffers. */
static inline CbllmSlot *
CbllmGetSlot(int i)
{
	return (CbllmSlot *) ((char *) cbllm_shared + MAXALIGN(sizeof(CbllmShared)) +
						  (Size) i * cbllm_shared->slot_size);
}

static inline char *
CbllmSlotPrompt(CbllmSlot *s)
{
	return (char *) s + MAXALIGN(sizeof(CbllmSlot));
}

static inline char *
CbllmSlotOut(CbllmSlot *s)
{
	return CbllmSlotPrompt(s) + cbllm_shared->prompt_cap;
}

/* ---- latency statistics (stats.c) ---- */
void		CbllmRecordLatency(int metric, double seconds);	/* worker, takes info_lock */
double		CbllmHistogramQuantile(const CbllmHistogram *h, double q);

/* ---- the worker (worker.c) ---- */
void		CbllmRegisterWorker(void);
PGDLLEXPORT void cbllm_worker_main(Datum arg);

/* ---- the backend side of requests (client.c) ---- */

typedef struct CbllmRequestArgs
{
	const char *prompt;
	int			prompt_len;
	CbllmParams params;
	const char *stop[CBLLM_MAX_STOP_STRINGS];	/* params.stop_len[k] bytes each */
} CbllmRequestArgs;

/* A request this backend has in flight. */
typedef struct CbllmHandle
{
	int			slot;
	uint64		serial;
	uint32		worker_generation;
	bool		session;		/* survives transaction end (llm_submit); else cancelled at it */
} CbllmHandle;

void		CbllmCheckLoaded(void);
void		CbllmCheckArgs(const CbllmRequestArgs *a);
void		CbllmWaitReady(void);
bool		CbllmSubmit(const CbllmRequestArgs *a, CbllmHandle *h, bool wait_for_slot);

/*
 * Move new output of h into buf (appending); returns true once the request
 * has finished (then *failed tells whether it failed, with errcode/message).
 */
bool		CbllmPoll(CbllmHandle *h, StringInfo buf, bool *failed, int *errcode_out,
					  char *errmsg_out);
bool		CbllmPollPiece(CbllmHandle *h, StringInfo buf, bool *failed, int *errcode_out,
						   char *errmsg_out);
void		CbllmCheckWorker(const CbllmHandle *h);
void		CbllmFlushClient(void);
bool		CbllmFindOwned(int slot, uint64 serial, CbllmHandle *h);
void		CbllmWait(CbllmHandle *h);
void		CbllmRelease(CbllmHandle *h);
void		CbllmCancel(CbllmHandle *h);
void		CbllmRaiseFailure(int errcode_in, const char *msg);

#endif
