/*
 * ipc.c: the rings, the region layout and the checks of the channel between
 * the supervisor and the engine process (see ipc.h for the protocol and its
 * crash consistency).
 */
#include "ipc/ipc.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* The data bytes of a ring. */
static char *
RingData(const cbllm_ring *r)
{
	return (char *) (r + 1);
}

/* Initialise an empty ring of cap data bytes (the caller laid them out after it). */
void
cbllm_ring_init(cbllm_ring *r, uint64_t cap)
{
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	r->cap = cap;
}

/* Bytes a producer may still write now. */
uint64_t
cbllm_ring_space(const cbllm_ring *r)
{
	uint64_t	head = atomic_load_explicit(&((cbllm_ring *) r)->head, memory_order_relaxed);
	uint64_t	tail = atomic_load_explicit(&((cbllm_ring *) r)->tail, memory_order_acquire);

	return head - tail > r->cap ? 0 : r->cap - (head - tail);
}

/* Copy n bytes into the ring at byte position pos (two pieces at the wrap). */
static void
RingWrite(cbllm_ring *r, uint64_t pos, const void *src, size_t n)
{
	size_t		off = (size_t) (pos % r->cap);
	size_t		first = n < r->cap - off ? n : (size_t) (r->cap - off);

	memcpy(RingData(r) + off, src, first);
	if (n > first)
		memcpy(RingData(r), (const char *) src + first, n - first);
}

/* Copy n bytes out of the ring from byte position pos. */
static void
RingRead(const cbllm_ring *r, uint64_t pos, void *dst, size_t n)
{
	size_t		off = (size_t) (pos % r->cap);
	size_t		first = n < r->cap - off ? n : (size_t) (r->cap - off);

	memcpy(dst, RingData(r) + off, first);
	if (n > first)
		memcpy((char *) dst + first, RingData(r), n - first);
}

/* Append one message (header, a, b); false when it does not fit now. */
bool
cbllm_ring_put(cbllm_ring *r, uint32_t type, const void *a, size_t na, const void *b, size_t nb)
{
	cbllm_msg_header h;
	uint64_t	head = atomic_load_explicit(&r->head, memory_order_relaxed);
	size_t		len = sizeof(h) + na + nb;

	if (len > UINT32_MAX || len > cbllm_ring_space(r))
		return false;
	h.len = (uint32_t) len;
	h.type = type;
	RingWrite(r, head, &h, sizeof(h));
	if (na > 0)
		RingWrite(r, head + sizeof(h), a, na);
	if (nb > 0)
		RingWrite(r, head + sizeof(h) + na, b, nb);
	/* publish only once every byte is written */
	atomic_store_explicit(&r->head, head + len, memory_order_release);
	return true;
}

/* Take the next message into buf; 1 taken, 0 empty, -1 corrupt. */
int
cbllm_ring_get(cbllm_ring *r, void *buf, size_t cap, uint32_t *type, size_t *len)
{
	uint64_t	tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t	head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint64_t	used = head - tail;
	cbllm_msg_header h;

	if (used == 0)
		return 0;
	if (used > r->cap || used < sizeof(h))
		return -1;				/* a head no producer can have written */
	RingRead(r, tail, &h, sizeof(h));
	if (h.len < sizeof(h) || h.len > used || h.len > cap)
		return -1;
	RingRead(r, tail, buf, h.len);
	*type = h.type;
	*len = h.len;
	atomic_store_explicit(&r->tail, tail + h.len, memory_order_release);
	return 1;
}

/* True when n is between 0 and lim. */
static bool
InRange(int64_t n, int64_t lim)
{
	return n >= 0 && n <= lim;
}

/* Check a submit command's parameters and its lengths against the payload length. */
const char *
cbllm_cmd_submit_check(const cbllm_cmd_submit *c, size_t payload_len, int n_slots)
{
	const cbllm_request_params *p = &c->params;
	char		why[CBLLM_ERR_MSG_LEN];

	if (payload_len < sizeof(*c))
		return "a submit command shorter than its fixed part";
	if (!InRange(c->slot, n_slots - 1))
		return "a submit command for a slot that does not exist";
	if (p->kind < CBLLM_REQ_GENERATE || p->kind > CBLLM_REQ_RENDER)
		return "a submit command of an unknown kind";
	/* the supervisor checked them with tighter limits: a refusal here is corruption */
	if (cbllm_request_check(&cbllm_engine_limits, p, NULL, why, sizeof(why)) != CBLLM_CHECK_OK)
		return "a submit command whose parameters break the rules of a request";
	if ((int64_t) sizeof(*c) + cbllm_request_params_bytes(p) != (int64_t) payload_len)
		return "a submit command whose lengths do not add up";
	if (p->kind == CBLLM_REQ_DETOKENIZE && p->prompt_len % (int32_t) sizeof(int32_t) != 0)
		return "a detokenize command whose ids are not whole";
	return NULL;
}

/* Check an output event's fields against the payload length. */
const char *
cbllm_evt_output_check(const cbllm_evt_output *e, size_t payload_len, int n_slots)
{
	if (payload_len < sizeof(*e))
		return "an output event shorter than its fixed part";
	if (!InRange(e->slot, n_slots - 1))
		return "an output event for a slot that does not exist";
	if (!InRange(e->text_len, INT32_MAX) || !InRange(e->error_len, INT32_MAX) ||
		!InRange(e->logprobs_len, INT32_MAX) || !InRange(e->reasoning_len, INT32_MAX) ||
		(int64_t) sizeof(*e) + e->text_len + e->error_len + e->logprobs_len + e->reasoning_len !=
		(int64_t) payload_len)
		return "an output event whose lengths do not add up";
	if (e->finish < CBLLM_FINISH_NONE || e->finish > CBLLM_FINISH_CONSTRAINT)
		return "an output event with an unknown finish";
	if (e->progress.phase < CBLLM_PHASE_QUEUED || e->progress.phase > CBLLM_PHASE_FINISHED)
		return "an output event with an unknown phase";
	if (e->n_tokens < 0 || e->progress.n_prompt < 0 || e->progress.n_generated < 0)
		return "an output event with negative counts";
	return NULL;
}

/* Round n up to a multiple of 64. */
static size_t
Align64(size_t n)
{
	return (n + 63) & ~(size_t) 63;
}

/* Data bytes of each ring for messages of at most max_msg: two of the largest, at least 1 MiB. */
static size_t
RingCap(size_t max_msg)
{
	size_t		cap = 2 * max_msg;

	return Align64(cap < ((size_t) 1 << 20) ? (size_t) 1 << 20 : cap);
}

/* Bytes of a region whose messages may be as large as max_msg. */
size_t
cbllm_ipc_region_size(size_t max_msg)
{
	return Align64(sizeof(cbllm_ipc_region)) + 2 * (sizeof(cbllm_ring) + RingCap(max_msg));
}

/* The sizes of the shared structs, packed: any change of layout changes it. */
uint64_t
cbllm_ipc_layout(void)
{
	return (uint64_t) sizeof(cbllm_ipc_region) << 48 ^ (uint64_t) sizeof(cbllm_ipc_status) << 32 ^
		(uint64_t) sizeof(cbllm_cmd_submit) << 16 ^ (uint64_t) sizeof(cbllm_evt_output) ^
		(uint64_t) sizeof(cbllm_stats) << 24 ^ (uint64_t) sizeof(cbllm_ipc_params) << 8;
}

/* Lay out a zeroed region. */
void
cbllm_ipc_region_init(cbllm_ipc_region *rg, size_t size, size_t max_msg)
{
	size_t		cap = RingCap(max_msg);

	rg->magic = CBLLM_IPC_MAGIC;
	rg->version = CBLLM_IPC_VERSION;
	rg->size = size;
	rg->max_msg = max_msg;
	rg->layout = cbllm_ipc_layout();
	rg->cmd_offset = Align64(sizeof(cbllm_ipc_region));
	rg->evt_offset = rg->cmd_offset + sizeof(cbllm_ring) + cap;
	atomic_init(&rg->status_seq, 0);
	atomic_init(&rg->heartbeat_ns, 0);
	atomic_init(&rg->engine_pid, 0);
	cbllm_ring_init(cbllm_ipc_cmd_ring(rg), cap);
	cbllm_ring_init(cbllm_ipc_evt_ring(rg), cap);
}

/* Check a mapped region's header. */
const char *
cbllm_ipc_region_check(const cbllm_ipc_region *rg, size_t mapped)
{
	if (mapped < sizeof(*rg))
		return "the region is smaller than its header";
	if (rg->magic != CBLLM_IPC_MAGIC || rg->version != CBLLM_IPC_VERSION ||
		rg->layout != cbllm_ipc_layout())
		return "the region was made by another version of cbllm (install the engine program and the extension from one build)";
	if (rg->size != mapped || rg->cmd_offset < sizeof(*rg) ||
		rg->evt_offset <= rg->cmd_offset || rg->max_msg == 0 ||
		rg->evt_offset + sizeof(cbllm_ring) + RingCap(rg->max_msg) > mapped ||
		rg->cmd_offset + sizeof(cbllm_ring) + RingCap(rg->max_msg) > rg->evt_offset)
		return "the region's layout does not fit its size";
	return NULL;
}

/* The command ring. */
cbllm_ring *
cbllm_ipc_cmd_ring(cbllm_ipc_region *rg)
{
	return (cbllm_ring *) ((char *) rg + rg->cmd_offset);
}

/* The event ring. */
cbllm_ring *
cbllm_ipc_evt_ring(cbllm_ipc_region *rg)
{
	return (cbllm_ring *) ((char *) rg + rg->evt_offset);
}

/* Engine: publish the status block between two increments of status_seq. */
void
cbllm_ipc_status_write(cbllm_ipc_region *rg, const cbllm_ipc_status *st)
{
	uint32_t	seq = atomic_load_explicit(&rg->status_seq, memory_order_relaxed);

	atomic_store_explicit(&rg->status_seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	memcpy(&rg->status, st, sizeof(*st));
	atomic_store_explicit(&rg->status_seq, seq + 2, memory_order_release);
}

/* Supervisor: a consistent copy of the status block, or false. */
bool
cbllm_ipc_status_read(const cbllm_ipc_region *rg, cbllm_ipc_status *out)
{
	cbllm_ipc_region *r = (cbllm_ipc_region *) rg;

	for (int tries = 0; tries < 1000; tries++)
	{
		uint32_t	s1 = atomic_load_explicit(&r->status_seq, memory_order_acquire);
		uint32_t	s2;

		if (s1 & 1)
			continue;
		memcpy(out, &r->status, sizeof(*out));
		atomic_thread_fence(memory_order_acquire);
		s2 = atomic_load_explicit(&r->status_seq, memory_order_relaxed);
		if (s1 == s2)
		{
			out->reason[CBLLM_IPC_REASON_LEN - 1] = '\0';
			out->device[sizeof(out->device) - 1] = '\0';
			out->cpu_isa[sizeof(out->cpu_isa) - 1] = '\0';
			out->weight_types[sizeof(out->weight_types) - 1] = '\0';
			return true;
		}
	}
	return false;
}

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t
cbllm_ipc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* The CUDA_VISIBLE_DEVICES of engine index: the index-th entry of visible (round it), else the index. */
void
cbllm_server_gpu_choice(const char *visible, int index, char *out, size_t len)
{
	if (visible != NULL && visible[0] != '\0')
	{
		int			n = 1;
		const char *p = visible;

		for (const char *c = visible; *c; c++)
			n += *c == ',';
		for (int i = 0; i < index % n; i++)
			p = strchr(p, ',') + 1;
		snprintf(out, len, "%.*s", (int) strcspn(p, ","), p);
	}
	else
		snprintf(out, len, "%d", index);
}
