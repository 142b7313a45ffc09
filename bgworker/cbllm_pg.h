/*
 * cbllm_pg.h: the PostgreSQL side of cbllm: GUCs, the shared-memory channel
 * between sessions and the engine worker, and the worker itself.
 *
 * Only this layer includes postgres.h; the engine (src/) knows nothing of
 * PostgreSQL and is driven through src/api/cbllm.h from the worker's main thread.
 */
#ifndef CBLLM_PG_H
#define CBLLM_PG_H

#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "datatype/timestamp.h"

#include "api/request_params.h"
#include "api/request_progress.h"
#include "api/stats.h"

/* ---- GUCs (guc.c) ---- */
extern char *cbllm_model;
extern char *cbllm_chat_template;
extern char *cbllm_device;
extern int	cbllm_threads;
extern int	cbllm_engines;
extern int	cbllm_max_num_seqs;
extern int	cbllm_max_num_batched_tokens;
extern int	cbllm_max_model_len;
extern int	cbllm_kv_cache_size_mb;
extern int	cbllm_block_size;
extern int	cbllm_preempt_mode;
extern int	cbllm_swap_space_mb;
extern double cbllm_gpu_memory_utilization;
extern int	cbllm_load_format;
extern int	cbllm_weight_format;
extern const char *const cbllm_weight_formats[];
extern int	cbllm_kv_cache_dtype;
extern const char *const cbllm_kv_cache_dtypes[];
extern bool cbllm_cuda_graphs;
extern bool cbllm_enable_prefix_caching;
extern int	cbllm_max_queued_requests;
extern int	cbllm_max_tokens_limit;
extern int	cbllm_max_prompt_bytes;
extern int	cbllm_output_buffer_bytes;
extern int	cbllm_load_timeout_ms;
extern int	cbllm_max_requests_per_session;
extern int	cbllm_max_requests_per_role;
extern int	cbllm_superuser_reserved_requests;
extern int	cbllm_max_priority;
extern int	cbllm_slot_wait_timeout_ms;
extern int	cbllm_result_memory_kb;
extern int	cbllm_stall_timeout_ms;
extern int	cbllm_prefix_cache_scope;
extern char *cbllm_engine_program;
extern bool cbllm_restart_stalled_engine;
extern double cbllm_priority_aging;
extern int	cbllm_max_step_ms;

/* cbllm.prefix_cache_scope */
#define PREFIX_SCOPE_ROLE 0
#define PREFIX_SCOPE_DATABASE 1
#define PREFIX_SCOPE_CLUSTER 2

void		CbllmDefineGucs(void);

/* ---- the channel (channel.c: layout; slot.c: every slot transition) ---- */

/*
 * A slot's life (slot.c has the whole protocol and says who may make each
 * move under which lock):
 *   FREE -> CLAIMED -> SUBMITTED -> RUNNING -> DONE | FAILED -> FREE
 * with CANCELLED (the backend gave up) and PARKING (the worker moves a
 * finished llm_submit result out of the slot) on the side.
 */
typedef enum CbllmSlotState
{
	SLOT_FREE = 0,				/* unused; a backend may claim it under claim_lock */
	SLOT_CLAIMED,				/* a backend is filling in the request */
	SLOT_SUBMITTED,				/* ready for the worker */
	SLOT_RUNNING,				/* the worker has it in the engine */
	SLOT_PARKING,				/* finished; the worker is moving its result to the parked store */
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
/* The largest piece payload in one output frame; a frame is a 4-byte length, then the bytes. */
#define CBLLM_FRAME_MAX 4096
#define CBLLM_FRAME_HEADER 4
/* Set in a frame's length: the frame is the next part of the logprobs stream, not text. */
#define CBLLM_FRAME_LOGPROBS 0x80000000u
/* Set in a frame's length: the frame is the next part of a chat answer's reasoning, not text. */
#define CBLLM_FRAME_REASONING 0x40000000u
#define CBLLM_FRAME_LEN(h) ((h) & ~(CBLLM_FRAME_LOGPROBS | CBLLM_FRAME_REASONING))
/* The smallest output ring: two of the largest frames. */
#define CBLLM_MIN_OUTPUT_BUFFER (2 * (CBLLM_FRAME_MAX + CBLLM_FRAME_HEADER))

/*
 * One request slot.  "mutex" is the slot's spinlock, held only for a few
 * loads and stores (never for a copy of a buffer, an allocation or an
 * elog); the buffers are copied outside it, by the one process the state
 * gives them to (see slot.c).
 */
typedef struct CbllmSlot
{
	slock_t		mutex;
	CbllmSlotState state;		/* under mutex; the moves are listed in slot.c */
	uint64		serial;			/* backend at claim, under claim_lock and mutex: bumped at every claim */
	int			owner_pid;		/* backend at claim, under claim_lock and mutex; 0 when free */
	Oid			owner_role;		/* backend at claim, under claim_lock and mutex: the submitting user */
	Latch	   *owner_latch;	/* backend at claim, under mutex: set by the worker on output */
	bool		async;			/* backend at claim, under mutex: llm_submit (its result is parked when done) */
	uint32		worker_generation;	/* backend at submit (the worker it expects), under mutex */

	/* the request: backend, while CLAIMED (no lock: the slot is its own); read-only from SUBMITTED */
	cbllm_request_params params;	/* as the SQL call gave them, checked; prompt_buf starts with
									 * params.prompt_len bytes of prompt text (or of int32 ids),
									 * then its stop strings */
	TimestampTz submitted_at;	/* backend at submit, under mutex */

	/* progress: worker, under mutex */
	cbllm_request_progress progress;	/* phase, counts, queue time: for cbllm.requests */
	TimestampTz first_token_at; /* 0 until the first token */
	int			finish;			/* a cbllm_finish once DONE */
	int			errcode;		/* worker, under mutex: a PostgreSQL sqlstate once FAILED */
	char		error[CBLLM_ERROR_LEN]; /* worker, while RUNNING (no lock), published by the FAILED store */

	/*
	 * The output ring: the worker writes bytes at [out_head, out_tail + cap)
	 * outside the lock and then advances out_head under it; the backend
	 * copies [out_tail, out_head) outside the lock and then advances
	 * out_tail under it.  Each counts bytes ever written or read.
	 */
	uint64		out_head;		/* worker, under mutex */
	uint64		out_tail;		/* backend, under mutex */
	/* prompt_buf (cbllm.max_prompt_bytes) and out_buf (cbllm.output_buffer_size) follow */
} CbllmSlot;

/*
 * A finished llm_submit result the worker moved out of its slot, so that an
 * uncollected result holds no request slot.  Entries live in an array
 * guarded by parked_lock; the text lives in the result area (a DSA area of
 * cbllm.result_memory inside the main shared memory).
 */
typedef struct CbllmParked
{
	bool		in_use;			/* worker sets it, the owning backend clears it, under parked_lock */
	int			owner_pid;		/* worker, under parked_lock: copied from the slot */
	Oid			owner_role;		/* worker, under parked_lock: a role fills at most half the array */
	int			slot;			/* the request's id: slot and serial */
	uint64		serial;
	uint64		data;			/* a dsa_pointer to len bytes of framed output, 0 when len is 0 */
	int			len;
	bool		failed;
	int			errcode;
	char		error[CBLLM_ERROR_LEN];
} CbllmParked;

/* Most engine processes one supervisor runs (cbllm.engines). */
#define CBLLM_MAX_ENGINES 8

/*
 * One engine process as cbllm.engines shows it.  The worker writes every
 * field under info_lock; readers copy the array under the same lock.
 */
typedef struct CbllmEngineInfo
{
	CbllmEngineState state;
	char		reason[CBLLM_REASON_LEN];	/* why FAILED, or the last restart's cause */
	char		device[32];
	int			pid;			/* the engine process; 0 when none runs */
	int64		restarts;		/* its processes that died and were replaced */
	int			requests;		/* requests the supervisor gave it that have not ended */
	cbllm_stats stats;			/* its counters, as its last status said them (zero when it
								 * is not ready) */
	TimestampTz heartbeat;		/* when it last passed its loop; 0: never, or no process */
} CbllmEngineInfo;

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
	char		fail_hint[CBLLM_REASON_LEN];	/* worker, under info_lock: which setting to change, or empty */
	char		model[MAXPGPATH];	/* worker, under info_lock */
	char		device[32];		/* worker, under info_lock */
	char		cpu_isa[32];	/* worker, under info_lock */
	char		weight_types[128];	/* worker, under info_lock: the model's tensors by weight type */
	cbllm_stats stats;			/* worker, under info_lock: the sums of the engines' counters
								 * (cbllm_stats_add), of those that are ready */
	int			max_model_len;	/* worker, under info_lock */
	TimestampTz started_at;		/* worker, under info_lock */
	int			engine_pid;		/* worker, under info_lock: the first engine's process; 0 when none */
	int64		engine_restarts;	/* worker, under info_lock: engines that died and were replaced */
	int			n_engines;		/* worker, under info_lock: the engines it runs (cbllm.engines) */
	CbllmEngineInfo engines[CBLLM_MAX_ENGINES];	/* worker, under info_lock: each of them */

	/* latency histograms since stats_reset_at (server start, or cbllm.reset_stats()): worker adds,
	 * cbllm.reset_stats() clears and stamps, under info_lock */
	TimestampTz stats_reset_at;
	CbllmHistogram latency[CBLLM_N_LATENCY];

	/* liveness: worker, at every pass of its loop (at least once a second) */
	pg_atomic_uint64 heartbeat; /* a TimestampTz; 0 while no worker runs */
	pg_atomic_uint64 engine_heartbeat;	/* worker: when the engine process last passed its loop; 0: none */

	/* set at startup, read-only afterwards */
	LWLock	   *claim_lock;		/* serialises claims, so the quotas count exactly */
	LWLock	   *parked_lock;	/* guards the parked array */
	int			result_tranche; /* LWLock tranche of the result area */
	int			n_slots;
	Size		slot_size;		/* bytes per slot including its buffers */
	int			prompt_cap;
	int			out_cap;
	int			n_parked;		/* entries of the parked array */
	Size		parked_offset;	/* from the header to the parked array */
	Size		result_offset;	/* from the header to the result area */
	Size		result_size;
	/* slots follow, each slot_size bytes, 8-byte aligned; then the parked array, then the result area */
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

/* ---- slot transitions (slot.c) ---- */

/* What a backend read from its request (see CbllmSlotRead). */
typedef struct CbllmReadResult
{
	bool		over;			/* the request ended and all its output has been read */
	bool		failed;
	int			errcode;
	char		error[CBLLM_ERROR_LEN];
	int			finish;			/* once over: a cbllm_finish; -1 for a parked result */
	cbllm_request_progress progress;	/* once over: its token counts (parked: none) */
} CbllmReadResult;

/* Why a claim failed. */
typedef enum CbllmClaimRefusal
{
	CLAIM_OK = 0,
	CLAIM_NO_SLOT,				/* every slot is taken */
	CLAIM_RESERVED,				/* the free slots are those reserved for superusers */
	CLAIM_SESSION_QUOTA,		/* this session holds cbllm.max_requests_per_session */
	CLAIM_ROLE_QUOTA			/* this role holds cbllm.max_requests_per_role */
} CbllmClaimRefusal;

int			CbllmSessionQuota(void);
int			CbllmRoleQuota(void);
int			CbllmReservedSlots(void);
CbllmClaimRefusal CbllmSlotClaim(bool async, int *slot_out, uint64 *serial_out, int *held_out);
void		CbllmSlotSubmit(int slot, uint32 worker_generation);
bool		CbllmSlotGiveUp(int slot, uint64 serial);
void		CbllmWakeWorker(void);
/* Where a read puts the parts of an output beside its text (a NULL member: dropped). */
typedef struct CbllmSideParts
{
	StringInfo	logprobs;		/* the logprobs stream (CBLLM_FRAME_LOGPROBS) */
	StringInfo	reasoning;		/* a chat answer's reasoning (CBLLM_FRAME_REASONING) */
} CbllmSideParts;

bool		CbllmSlotRead(int slot, uint64 serial, StringInfo buf, const CbllmSideParts *side,
						  int max_frames, CbllmReadResult *res);
CbllmSlotState CbllmSlotStateOf(int slot, uint64 serial);
void		CbllmParkedFreeOwnedBy(int pid);
void		CbllmParkedRecover(void);
int			CbllmParkedCount(void);

/* worker side */
CbllmSlotState CbllmSlotPeek(int slot, uint64 *serial);
bool		CbllmSlotTake(int slot, uint64 *serial_out);
int			CbllmSlotDeliver(int slot, uint64 serial, const char *data, int len, bool *cancelled);
void		CbllmSlotProgress(int slot, uint64 serial, const cbllm_request_progress *p,
							  TimestampTz first_token_at);
bool		CbllmSlotFinish(int slot, uint64 serial, bool failed, int finish, int errcode_in,
							const char *msg);
bool		CbllmSlotPark(int slot, uint64 serial, const char *pending, int pending_len,
						  bool failed, int errcode_in, const char *msg);
void		CbllmSlotReapCancelled(int slot, uint64 serial);
void		CbllmWakeOwner(int slot);

/* ---- text between the database and the model (sql_text.c) ---- */
char	   *CbllmTextToModel(const char *s, int len, int *out_len, char *errmsg_out);
char	   *CbllmTextToModelOrError(text *t, int *out_len);
struct ArrayType;
int			CbllmTextArrayToModel(struct ArrayType *arr, const char *what, const char *null_msg,
								  int max, char ***strs, int **lens);
text	   *CbllmTextFromModel(const char *s, int len);

/* ---- the backend side of requests (client.c) ---- */

typedef struct CbllmRequestArgs
{
	const char *prompt;			/* UTF-8 text, or int32 ids for CBLLM_REQ_DETOKENIZE: params.prompt_len bytes */
	cbllm_request_params params;
	const char *stop[CBLLM_MAX_STOP];	/* params.stop_len[k] bytes each */
	const char *constraint;		/* the regex of json_schema, regex or choices (UTF-8):
								 * params.constraint_len bytes */
	const cbllm_bias_entry *bias;	/* (params.n_bias) logit_bias */
} CbllmRequestArgs;

/* A request this backend has in flight. */
typedef struct CbllmHandle
{
	int			slot;
	uint64		serial;
	uint32		worker_generation;
	bool		session;		/* survives the commit of its transaction (llm_submit); else cancelled at its end */
	bool		async;			/* an llm_submit request, collected with llm_result */
	SubTransactionId subxact;	/* the subtransaction that submitted it; Invalid once committed at top level */
} CbllmHandle;

void		CbllmCheckLoaded(void);
void		CbllmCheckArgs(const CbllmRequestArgs *a);
bool		CbllmArgsError(const CbllmRequestArgs *a, int *errcode_out, char *errmsg_out);
void		CbllmWaitReady(void);
bool		CbllmSubmit(const CbllmRequestArgs *a, CbllmHandle *h, bool wait_for_slot);
void		CbllmSubmitOrFail(const CbllmRequestArgs *a, CbllmHandle *h);
void		CbllmDefaultParams(cbllm_request_params *p, int kind);

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
bool		CbllmFindOwned(int slot, uint64 serial, bool async, CbllmHandle *h);
void		CbllmWait(CbllmHandle *h);
void		CbllmRelease(CbllmHandle *h);
void		CbllmCancel(CbllmHandle *h);
void		CbllmRaiseFailure(int errcode_in, const char *msg);
void		CbllmCollect(CbllmHandle *h, StringInfo buf);
void		CbllmCollectResult(CbllmHandle *h, StringInfo buf, const CbllmSideParts *side,
							   CbllmReadResult *res);

/* ---- the generating forms, over any input (sql_generate.c) ---- */

/*
 * Put the request's input (argument 0 of the form, or one element of its
 * array) into a: its payload in UTF-8 and its kind's parameters, checked,
 * without raising: false with the sqlstate and message of the problem.
 */
typedef bool (*CbllmPrepareFn) (CbllmRequestArgs *a, Datum input, FunctionCallInfo fcinfo,
								int *errcode_out, char *errmsg_out);

/* Run one request of a kind answered at once (tokenizer, template), its whole output into out (sql_tokenize.c). */
void		CbllmAskEngine(int kind, const char *input, int len, StringInfo out);

void		CbllmReadOptions(FunctionCallInfo fcinfo, CbllmRequestArgs *a, int kind);
Datum		CbllmGenerateJson(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep);
/* The most completions one llm_completions call asks for. */
#define CBLLM_MAX_COMPLETIONS 16
Datum		CbllmCompletions(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep);

/*
 * Argument positions every generating form shares after its input (0) and
 * options (1..7): the constraint (json_schema jsonb, regex text, choices
 * text[]), the logits controls (min_p, repetition_penalty,
 * frequency_penalty, presence_penalty, logit_bias), then the form's own
 * (on_error, transaction_scoped); template_kwargs is always last.  The
 * forms that return jsonb (llm_generate_json, llm_chat_json) have no regex
 * and choices: their controls start right after json_schema.
 */
#define CBLLM_ARG_JSON_SCHEMA 8
#define CBLLM_ARG_REGEX 9
#define CBLLM_ARG_CHOICES 10
#define CBLLM_ARG_CONTROLS 11	/* CBLLM_ARG_CONTROLS_JSON in the jsonb forms */
#define CBLLM_ARG_CONTROLS_JSON 9
#define CBLLM_N_CONTROLS 5
#define CBLLM_ARG_FORM 16
#define CBLLM_ARG_LOGPROBS 17	/* llm_completions, llm_chat_completions: after n */

/* sql_constraint.c: the regex of a call's json_schema, regex or choices (NULL: none); raises. */
char	   *CbllmConstraintRegex(FunctionCallInfo fcinfo, int *len);
/* sql_constraint.c: min_p, the penalties and logit_bias into a; raises on a malformed logit_bias. */
void		CbllmReadControls(FunctionCallInfo fcinfo, CbllmRequestArgs *a);
Datum		CbllmGenerateOne(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep);
Datum		CbllmGenerateArray(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep, int on_error_arg);
Datum		CbllmGenerateStream(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep);
Datum		CbllmSubmitAsync(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep, int scoped_arg);

/* sql_chat.c: a chat form's input (messages jsonb, template_kwargs its last argument) */
bool		CbllmPrepareChat(CbllmRequestArgs *a, Datum input, FunctionCallInfo fcinfo, int *code,
							 char *msg);

/*
 * A generating form the batching node runs in batches (sql_generate.c): a
 * function of one input and one value out, whose calls it prepares with
 * CbllmPrepareCall and whose outputs become values with CbllmFormResult.
 */
typedef struct CbllmBatchForm
{
	const char *symbol;			/* the C function (pg_proc.prosrc) */
	int			kind;			/* CBLLM_REQ_GENERATE or CBLLM_REQ_CHAT */
	CbllmPrepareFn prep;		/* its input into a request */
	bool		json;			/* returns jsonb, else text */
} CbllmBatchForm;

const CbllmBatchForm *CbllmBatchFormOf(Oid funcid);
void		CbllmPrepareCall(FunctionCallInfo fcinfo, const CbllmBatchForm *f, CbllmRequestArgs *a);
Datum		CbllmFormResult(const CbllmBatchForm *f, const char *s, int len);

/* ---- the batching node (batch_plan.c, batch_exec.c) ---- */
extern int	cbllm_batch_rows;
void		CbllmBatchInit(void);

/* ---- engine liveness (sql_status.c) ---- */
bool		CbllmEngineStalled(void);

#endif
