/*
 * engine_server.c: the engine process's loop.  It loads the model named by
 * the region's parameters, then, until told to stop: takes commands from
 * the command ring (submit, abort, shutdown), runs engine steps while
 * requests are active, and posts each request's new output (text, or token
 * ids for tokenizer requests), progress and end to the event ring.  Output
 * that does not fit the ring waits here, per request, so a slow supervisor
 * never loses any.  A heartbeat at every pass of the loop tells the
 * supervisor the engine is alive and making progress.
 *
 * Nothing here touches PostgreSQL: the program around it (tools/
 * cbllm-engine.c) is started by the supervisor with the region and two
 * doorbell pipes.
 */
#include "engine/engine_server.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/request_params.h"
#include "base/utf8.h"
#include "sample/logprobs_json.h"
#include "tokenizer/tokenizer.h"

/* What the server keeps of one supervisor slot's request. */
typedef struct server_req
{
	bool		active;			/* a request of this slot is here */
	uint64_t	serial;
	int			kind;			/* a cbllm_request_kind */
	int64_t		engine_id;		/* 0 when the engine has no part in it (or forgot it) */
	cbllm_buf	out;			/* output not yet posted */
	size_t		out_posted;		/* bytes of out already posted */
	cbllm_buf	lp;				/* logprobs JSON not yet posted (a stream the supervisor wraps
								 * in [ ]) */
	size_t		lp_posted;
	bool		lp_started;		/* a record has been written: the next one needs a comma */
	cbllm_buf	rsn;			/* a chat answer's reasoning not yet posted */
	size_t		rsn_posted;
	bool		finished;		/* the end is known; posted with the last bytes */
	int			finish;
	int			status;
	char		error[CBLLM_ERR_MSG_LEN];
	cbllm_request_progress progress;	/* the last the engine said */
	int			n_tokens;		/* tokens since the last posted event */
	bool		dirty;			/* something to post */
} server_req;

typedef struct server
{
	cbllm_ipc_region *rg;
	cbllm_engine *engine;
	server_req *reqs;			/* (n_slots) */
	int			n_slots;
	char	   *msg;			/* (max_msg) one message, in or out */
	int			doorbell_in;
	int			doorbell_out;
	cbllm_ipc_status status;
} server;

/* Publish the state and a reason (and the engine's facts and counters). */
static void
PublishStatus(server *sv, int state, const char *reason)
{
	sv->status.state = state;
	if (reason)
		snprintf(sv->status.reason, sizeof(sv->status.reason), "%s", reason);
	if (sv->engine)
		cbllm_engine_stats(sv->engine, &sv->status.stats);
	cbllm_ipc_status_write(sv->rg, &sv->status);
}

/* Build the engine parameters from the region's. */
static void
EngineParams(const cbllm_ipc_params *ip, cbllm_engine_params *p)
{
	memset(p, 0, sizeof(*p));
	p->model_dir = ip->model_dir;
	p->device = ip->device[0] ? ip->device : NULL;
	p->load_format = ip->load_format[0] ? ip->load_format : NULL;
	p->weight_format = ip->weight_format[0] ? ip->weight_format : NULL;
	p->kv_cache_dtype = ip->kv_cache_dtype[0] ? ip->kv_cache_dtype : NULL;
	p->chat_template = ip->chat_template[0] ? ip->chat_template : NULL;
	p->n_threads = ip->n_threads;
	p->max_num_seqs = ip->max_num_seqs;
	p->max_num_batched_tokens = ip->max_num_batched_tokens;
	p->max_model_len = ip->max_model_len;
	p->block_size = ip->block_size;
	p->kv_cache_bytes = (size_t) ip->kv_cache_bytes;
	p->max_queued = ip->max_queued;
	p->preempt_mode = (cbllm_preempt) ip->preempt_mode;
	p->swap_space_bytes = (size_t) ip->swap_space_bytes;
	p->no_prefix_caching = ip->no_prefix_caching != 0;
	p->no_cuda_graphs = ip->no_cuda_graphs != 0;
	p->gpu_memory_utilization = ip->gpu_memory_utilization;
	p->priority_aging = ip->priority_aging;
	p->max_step_ms = ip->max_step_ms;
}

/*
 * One of several engines (cbllm.engines > 1) takes one GPU, through
 * CUDA_VISIBLE_DEVICES, set before anything in this process touches CUDA
 * (cbllm_server_gpu_choice).  An engine whose GPU does not exist sees none.
 */
static void
SelectGpu(const cbllm_ipc_params *ip)
{
	char		pick[64];

	if (ip->n_engines <= 1 || ip->engine_index < 0)
		return;
	cbllm_server_gpu_choice(getenv("CUDA_VISIBLE_DEVICES"), ip->engine_index, pick, sizeof(pick));
	setenv("CUDA_VISIBLE_DEVICES", pick, 1);
}

/* Forget slot i's request (aborting it in the engine if it is there). */
static void
DropReq(server *sv, int i)
{
	server_req *q = &sv->reqs[i];

	if (q->engine_id != 0)
		cbllm_engine_abort(sv->engine, q->engine_id, NULL);
	cbllm_buf_free(&q->out);
	cbllm_buf_free(&q->lp);
	cbllm_buf_free(&q->rsn);
	memset(q, 0, sizeof(*q));
}

/* Record the end of slot i's request (posted once its output is out). */
static void
EndReq(server_req *q, int finish, int status, const char *error)
{
	q->finished = true;
	q->finish = finish;
	q->status = status;
	snprintf(q->error, sizeof(q->error), "%s", error ? error : "");
	q->engine_id = 0;
	q->dirty = true;
}

/* Answer a tokenizer request at once: its whole output goes to q->out. */
static void
RunTokenizer(server *sv, server_req *q, const char *in, int len)
{
	const cbllm_tokenizer *tok = cbllm_engine_tokenizer(sv->engine);
	cbllm_err	err;

	if (q->kind == CBLLM_REQ_TOKENIZE || q->kind == CBLLM_REQ_TOKEN_COUNT)
	{
		int32_t    *ids = NULL;
		int			n = 0;
		int			rc = cbllm_engine_tokenize(sv->engine, in, (size_t) len, true, &ids, &n, &err);

		if (rc != CBLLM_OK)
		{
			EndReq(q, CBLLM_FINISH_ERROR, rc, err.msg);
			return;
		}
		if (q->kind == CBLLM_REQ_TOKENIZE)
			rc = cbllm_buf_append(&q->out, ids, (size_t) n * sizeof(int32_t));
		else
		{
			int32_t		count = n;

			rc = cbllm_buf_append(&q->out, &count, sizeof(count));
		}
		free(ids);
		q->progress.n_prompt = n;
		if (rc != CBLLM_OK)
		{
			EndReq(q, CBLLM_FINISH_ERROR, CBLLM_ERR_NOMEM, "out of memory for the token ids");
			return;
		}
	}
	else
	{
		int			n = len / (int) sizeof(int32_t);
		int			vocab = tokenizer_vocab_size(tok);
		int32_t    *ids = malloc(sizeof(int32_t) * (size_t) (n > 0 ? n : 1));
		cbllm_buf	text = {0};
		int			rc;

		if (ids == NULL)
		{
			EndReq(q, CBLLM_FINISH_ERROR, CBLLM_ERR_NOMEM, "out of memory for the token ids");
			return;
		}
		memcpy(ids, in, (size_t) n * sizeof(int32_t));
		for (int k = 0; k < n; k++)
			if (ids[k] < 0 || ids[k] >= vocab)
			{
				char		msg[CBLLM_ERR_MSG_LEN];

				snprintf(msg, sizeof(msg), "token id %d is outside the vocabulary of %d", ids[k], vocab);
				free(ids);
				EndReq(q, CBLLM_FINISH_ERROR, CBLLM_ERR_INVALID, msg);
				return;
			}
		rc = tokenizer_decode(tok, ids, n, true, &text, &err);
		free(ids);
		if (rc == CBLLM_OK && text.len > 0)
			rc = cbllm_buf_append(&q->out, text.data, text.len);
		cbllm_buf_free(&text);
		if (rc != CBLLM_OK)
		{
			EndReq(q, CBLLM_FINISH_ERROR, rc, err.msg);
			return;
		}
	}
	q->progress.phase = CBLLM_PHASE_FINISHED;
	EndReq(q, CBLLM_FINISH_STOP, 0, NULL);
}

/* Answer a RENDER request at once: the chat template's prompt goes to q->out. */
static void
RunRender(server *sv, server_req *q, const char *in, int len)
{
	cbllm_err	err;
	int			rc = cbllm_engine_render_chat(sv->engine, in, (size_t) len, &q->out, &err);

	if (rc != CBLLM_OK)
	{
		cbllm_buf_free(&q->out);
		EndReq(q, CBLLM_FINISH_ERROR, rc, err.msg);
		return;
	}
	q->progress.phase = CBLLM_PHASE_FINISHED;
	EndReq(q, CBLLM_FINISH_STOP, 0, NULL);
}

/* Take a submit command: into the engine, or answered at once. */
static void
Submit(server *sv, const cbllm_cmd_submit *c, const char *payload)
{
	server_req *q = &sv->reqs[c->slot];
	cbllm_sampling sp;
	cbllm_request_input in;
	cbllm_buf	rendered = {0};
	char	   *held = NULL;
	cbllm_err	err;
	int			rc;

	if (q->active)
		DropReq(sv, c->slot);	/* the supervisor reused the slot: the old one is over */
	q->active = true;
	q->serial = c->serial;
	q->kind = c->params.kind;
	q->progress = cbllm_progress_queued();
	q->dirty = true;
	if (c->params.kind == CBLLM_REQ_RENDER)
	{
		RunRender(sv, q, payload, c->params.prompt_len);
		return;
	}
	if (!CBLLM_KIND_GENERATES(c->params.kind))
	{
		RunTokenizer(sv, q, payload, c->params.prompt_len);
		return;
	}
	rc = cbllm_request_params_to_engine(&c->params, payload, &in, &sp, &held);
	if (rc != CBLLM_OK)
		snprintf(err.msg, sizeof(err.msg), "out of memory for the stop strings");
	else if (c->params.kind == CBLLM_REQ_CHAT &&
			 (rc = cbllm_engine_render_chat(sv->engine, payload, (size_t) c->params.prompt_len,
											&rendered, &err)) == CBLLM_OK)
	{
		in.text = rendered.data ? rendered.data : "";
		in.text_len = rendered.len;
	}
	if (rc == CBLLM_OK && c->params.share_slot > 0 && c->params.share_slot <= sv->n_slots)
	{
		const server_req *l = &sv->reqs[c->params.share_slot - 1];

		if (l->active && l->serial == c->params.share_serial && l->engine_id != 0)
			in.share_prompt_with = l->engine_id;
	}
	if (rc == CBLLM_OK)
		rc = cbllm_engine_submit(sv->engine, &in, &sp, &q->engine_id, &err);
	free(held);
	cbllm_buf_free(&rendered);
	if (rc != CBLLM_OK)
	{
		q->engine_id = 0;
		EndReq(q, CBLLM_FINISH_ERROR, rc, err.msg);
	}
}

/*
 * Take every command waiting.  Returns 0 to go on, 1 on shutdown, -1 when
 * the ring is corrupt (the supervisor then restarts the engine).
 */
static int
TakeCommands(server *sv)
{
	cbllm_ring *r = cbllm_ipc_cmd_ring(sv->rg);

	for (;;)
	{
		uint32_t	type;
		size_t		len;
		int			got = cbllm_ring_get(r, sv->msg, sv->rg->max_msg, &type, &len);
		const char *payload = sv->msg + sizeof(cbllm_msg_header);
		size_t		plen = len - sizeof(cbllm_msg_header);

		if (got == 0)
			return 0;
		if (got < 0)
			return -1;
		if (type == CBLLM_CMD_SHUTDOWN)
			return 1;
		if (type == CBLLM_CMD_SUBMIT)
		{
			cbllm_cmd_submit c;

			if (plen < sizeof(c))
				return -1;
			memcpy(&c, payload, sizeof(c));
			if (cbllm_cmd_submit_check(&c, plen, sv->n_slots) != NULL)
				return -1;
			Submit(sv, &c, payload + sizeof(c));
		}
		else if (type == CBLLM_CMD_ABORT)
		{
			cbllm_cmd_abort a;

			if (plen != sizeof(a))
				return -1;
			memcpy(&a, payload, sizeof(a));
			if (a.slot < 0 || a.slot >= sv->n_slots)
				return -1;
			if (sv->reqs[a.slot].active && sv->reqs[a.slot].serial == a.serial)
				DropReq(sv, a.slot);
		}
		else
			return -1;
	}
}

/* The progress of a request as the engine's output tells it: the one translation. */
static cbllm_request_progress
ProgressOf(const cbllm_output *o)
{
	cbllm_request_progress p = {o->queue_seconds, (int32_t) o->phase, o->n_prompt, o->n_generated,
	0};

	return p;
}

/* Take new output of every request the engine runs. */
static void
TakeOutputs(server *sv)
{
	for (int i = 0; i < sv->n_slots; i++)
	{
		server_req *q = &sv->reqs[i];
		cbllm_request_progress p;
		cbllm_output o;
		cbllm_err	err;
		int			rc;

		if (!q->active || q->engine_id == 0)
			continue;
		rc = cbllm_engine_take(sv->engine, q->engine_id, &o, &err);
		if (rc != CBLLM_OK)
		{
			EndReq(q, CBLLM_FINISH_ERROR, rc, err.msg);
			continue;
		}
		if (o.n_logprobs > 0)
		{
			bool		first = !q->lp_started;

			rc = logprobs_json_append(cbllm_engine_tokenizer(sv->engine), o.logprobs, o.n_logprobs,
									  &first, &q->lp);
			q->lp_started = !first;
		}
		if (rc != CBLLM_OK ||
			(o.text_len > 0 && cbllm_buf_append(&q->out, o.text, o.text_len) != CBLLM_OK) ||
			(o.reasoning_len > 0 && cbllm_buf_append(&q->rsn, o.reasoning, o.reasoning_len) != CBLLM_OK))
		{
			cbllm_engine_abort(sv->engine, q->engine_id, NULL);
			EndReq(q, CBLLM_FINISH_ERROR, CBLLM_ERR_NOMEM, "out of memory for the output");
			continue;
		}
		p = ProgressOf(&o);
		if (o.n_tokens > 0 || p.phase != q->progress.phase ||
			p.n_generated != q->progress.n_generated || o.text_len > 0)
			q->dirty = true;
		q->dirty = q->dirty || o.n_logprobs > 0 || o.reasoning_len > 0;
		q->n_tokens += o.n_tokens;
		q->progress = p;
		if (o.finish != CBLLM_FINISH_NONE)	/* the engine forgot it with this take */
			EndReq(q, o.finish, o.finish == CBLLM_FINISH_ERROR ? CBLLM_ERR_INTERNAL : 0,
				   o.error ? o.error : (o.finish == CBLLM_FINISH_ERROR ? "generation failed" : NULL));
	}
}

/* Bytes of q's output that may go in one event of at most room bytes: whole characters or ids. */
static size_t
Chunk(const server_req *q, size_t room)
{
	size_t		left = q->out.len - q->out_posted;
	size_t		n = left < room ? left : room;

	if (n == left)
		return n;
	if (q->kind != CBLLM_REQ_TOKENIZE && q->kind != CBLLM_REQ_TOKEN_COUNT)
	{
		const unsigned char *p = (const unsigned char *) q->out.data + q->out_posted;

		while (n > 0 && utf8_is_cont(p[n]))
			n--;				/* do not cut a UTF-8 character */
	}
	else
		n -= n % sizeof(int32_t);
	return n;
}

/* Post what each request has to say, while the event ring has room; true if anything went. */
static bool
PostEvents(server *sv)
{
	cbllm_ring *r = cbllm_ipc_evt_ring(sv->rg);
	bool		any = false;

	for (int i = 0; i < sv->n_slots; i++)
	{
		server_req *q = &sv->reqs[i];

		while (q->active && q->dirty)
		{
			cbllm_evt_output e = {0};
			uint64_t	space = cbllm_ring_space(r);
			size_t		fixed = sizeof(cbllm_msg_header) + sizeof(e);
			size_t		room,
						n,
						m,
						k,
						elen;
			bool		last;

			if (space <= fixed + 64)
				return any;		/* full: the rest waits here */
			room = (size_t) (space < sv->rg->max_msg ? space : sv->rg->max_msg) - fixed - 64;
			elen = q->finished ? strlen(q->error) : 0;
			n = Chunk(q, room > elen ? room - elen : 0);
			if (n == 0 && q->out.len > q->out_posted)
				return any;		/* no room for a whole character yet */
			m = q->lp.len - q->lp_posted;
			if (m > (room > elen + n ? room - elen - n : 0))
				m = room > elen + n ? room - elen - n : 0;
			k = q->rsn.len - q->rsn_posted;
			if (k > (room > elen + n + m ? room - elen - n - m : 0))
				k = room > elen + n + m ? room - elen - n - m : 0;
			last = q->finished && q->out_posted + n == q->out.len && q->lp_posted + m == q->lp.len &&
				q->rsn_posted + k == q->rsn.len;
			e.slot = i;
			e.serial = q->serial;
			e.progress = q->progress;
			e.n_tokens = q->n_tokens;
			e.finish = last ? q->finish : CBLLM_FINISH_NONE;
			e.status = last ? q->status : 0;
			e.text_len = (int32_t) n;
			e.error_len = last ? (int32_t) elen : 0;
			e.logprobs_len = (int32_t) m;
			e.reasoning_len = (int32_t) k;
			/* text, error, logprobs and reasoning go out as one second part: copy them together */
			memcpy(sv->msg, &e, sizeof(e));
			memcpy(sv->msg + sizeof(e), q->out.data + q->out_posted, n);
			if (e.error_len > 0)
				memcpy(sv->msg + sizeof(e) + n, q->error, elen);
			if (m > 0)
				memcpy(sv->msg + sizeof(e) + n + e.error_len, q->lp.data + q->lp_posted, m);
			if (k > 0)
				memcpy(sv->msg + sizeof(e) + n + e.error_len + m, q->rsn.data + q->rsn_posted, k);
			if (!cbllm_ring_put(r, CBLLM_EVT_OUTPUT, sv->msg,
								sizeof(e) + n + (size_t) e.error_len + m + k, NULL, 0))
				return any;
			any = true;
			q->out_posted += n;
			q->lp_posted += m;
			q->rsn_posted += k;
			q->n_tokens = 0;
			if (q->out_posted == q->out.len)
			{
				q->out.len = 0;
				q->out_posted = 0;
			}
			if (q->lp_posted == q->lp.len)
			{
				q->lp.len = 0;
				q->lp_posted = 0;
			}
			if (q->rsn_posted == q->rsn.len)
			{
				q->rsn.len = 0;
				q->rsn_posted = 0;
			}
			q->dirty = q->out.len > 0 || q->lp.len > 0 || q->rsn.len > 0;
			if (last)
			{
				cbllm_buf_free(&q->out);
				cbllm_buf_free(&q->lp);
				cbllm_buf_free(&q->rsn);
				memset(q, 0, sizeof(*q));
			}
		}
	}
	return any;
}

/* Ring a doorbell (a full pipe means it is ringing already). */
static void
Ring(int fd)
{
	char		b = 1;

	if (write(fd, &b, 1) < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
	{
		/* the supervisor is gone; the next loop notices */
	}
}

/* Wait up to ms for the supervisor's doorbell, and empty it. */
static void
WaitDoorbell(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char		buf[256];

	if (poll(&p, 1, ms) > 0 && (p.revents & POLLIN))
		while (read(fd, buf, sizeof(buf)) > 0)
			;
}

/* True while some request is in the engine or has output to post. */
static bool
Busy(const server *sv, bool *engine_work)
{
	bool		busy = false;

	*engine_work = false;
	for (int i = 0; i < sv->n_slots; i++)
	{
		busy |= sv->reqs[i].active && sv->reqs[i].dirty;
		*engine_work |= sv->reqs[i].active && sv->reqs[i].engine_id != 0;
	}
	return busy || *engine_work;
}

/* The engine process's whole life after its region is mapped; see engine_server.h. */
int
cbllm_server_run(cbllm_ipc_region *rg, int doorbell_in, int doorbell_out,
				 volatile sig_atomic_t *stop)
{
	server		sv = {0};
	cbllm_engine_params p;
	cbllm_engine_info info;
	cbllm_err	err;
	int			rc = CBLLM_SERVER_STOPPED;

	sv.rg = rg;
	sv.doorbell_in = doorbell_in;
	sv.doorbell_out = doorbell_out;
	sv.n_slots = rg->params.n_slots;
	atomic_store(&rg->heartbeat_ns, cbllm_ipc_now_ns());
	PublishStatus(&sv, CBLLM_IPC_LOADING, NULL);
	Ring(doorbell_out);
	SelectGpu(&rg->params);
	EngineParams(&rg->params, &p);
	if (sv.n_slots < 1 || (sv.status.load_status = cbllm_engine_create(&p, &sv.engine, &err)) != CBLLM_OK)
	{
		if (sv.n_slots < 1)
			sv.status.load_status = CBLLM_ERR_INVALID;
		PublishStatus(&sv, CBLLM_IPC_FAILED, sv.n_slots < 1 ? "no request slots" : err.msg);
		Ring(doorbell_out);
		return CBLLM_SERVER_LOAD_FAILED;
	}
	cbllm_engine_get_info(sv.engine, &info);
	snprintf(sv.status.device, sizeof(sv.status.device), "%s", info.device ? info.device : "cpu");
	snprintf(sv.status.cpu_isa, sizeof(sv.status.cpu_isa), "%s", info.cpu_isa ? info.cpu_isa : "");
	snprintf(sv.status.weight_types, sizeof(sv.status.weight_types), "%s",
			 info.weight_types ? info.weight_types : "");
	sv.status.max_model_len = info.max_model_len;
	sv.reqs = calloc((size_t) sv.n_slots, sizeof(server_req));
	sv.msg = malloc(rg->max_msg);
	if (sv.reqs == NULL || sv.msg == NULL)
	{
		PublishStatus(&sv, CBLLM_IPC_FAILED, "out of memory for the request table");
		rc = CBLLM_SERVER_LOAD_FAILED;
		goto out;
	}
	PublishStatus(&sv, CBLLM_IPC_READY, "");
	Ring(doorbell_out);

	while (!*stop)
	{
		bool		engine_work;
		int			got;

		atomic_store_explicit(&rg->heartbeat_ns, cbllm_ipc_now_ns(), memory_order_release);
		got = TakeCommands(&sv);
		if (got > 0)
			break;
		if (got < 0)
		{
			rc = CBLLM_SERVER_BAD_CHANNEL;
			break;
		}
		(void) Busy(&sv, &engine_work);
		if (engine_work)
		{
			int			active;

			if (cbllm_engine_step(sv.engine, &active, &err) == CBLLM_ERR_DEVICE_LOST)
			{
				/* the requests were failed with the device's message; a new process gets a new context */
				TakeOutputs(&sv);
				(void) PostEvents(&sv);
				Ring(doorbell_out);
				rc = CBLLM_SERVER_DEVICE_LOST;
				break;
			}
			TakeOutputs(&sv);
		}
		/*
		 * The counters first, then the events: a supervisor that has read an
		 * event reads counters at least as new, so a caller that got its
		 * result sees the counters of the step that made it.
		 */
		PublishStatus(&sv, CBLLM_IPC_READY, NULL);
		if (PostEvents(&sv))
			Ring(doorbell_out);
		if (!Busy(&sv, &engine_work))
			WaitDoorbell(doorbell_in, 200);
		else if (!engine_work)
			WaitDoorbell(doorbell_in, 20);	/* only output waiting for ring space */
	}
out:
	for (int i = 0; sv.reqs && i < sv.n_slots; i++)
	{
		cbllm_buf_free(&sv.reqs[i].out);
		cbllm_buf_free(&sv.reqs[i].lp);
		cbllm_buf_free(&sv.reqs[i].rsn);
	}
	free(sv.reqs);
	free(sv.msg);
	cbllm_engine_destroy(sv.engine);
	return rc;
}
