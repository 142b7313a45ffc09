/*
 * test_engine_ipc.c: the engine process (cbllm-engine) driven through its
 * region and doorbells exactly as the PostgreSQL supervisor drives it, with
 * no PostgreSQL: start, READY, generation equal to the same engine run in
 * this process (greedy, and seeded with every sampling option and stop
 * strings), tokenizer requests, chat requests rendered by the chat
 * template a setting names (cbllm.chat_template) and generated as in
 * this process, many requests at once, abort and reuse of
 * a slot, output held back while the event ring is full and then delivered
 * whole, a corrupt command or one whose parameters break the rules (the
 * engine stops with status 3), a bad model (FAILED with the loader's
 * reason, status 2), shutdown, the heartbeat, and a wrong parent.
 *
 * usage: test_engine_ipc ENGINE_PROGRAM MODEL_DIR [DEVICE]
 *   (DEVICE "cuda" with the emulated-CUDA build of the program runs the same
 *   checks on the CUDA backend inside the engine process)
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/cbllm.h"
#include "engine/engine_server.h"
#include "sample/logprobs_json.h"
#include "fixture.h"
#include "api/request_params.h"
#include "ipc/ipc.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

#define N_SLOTS 16
#define MAX_MSG (256 * 1024)

static const char *program;
static const char *model_dir;
static const char *device = "cpu";
static char chat_file[1024];	/* the chat template both engines use instead of the model's (none) */

/* A Llama-2-like template: its output for a conversation is easy to write down. */
#define CHAT_TEMPLATE "{% for m in messages %}<s>[INST] {{ m.content | trim }} [/INST]{% endfor %}" \
	"{% if add_generation_prompt %} Answer:{% endif %}"

/* One engine process and its channel, as the supervisor holds them. */
typedef struct proc
{
	pid_t		pid;
	cbllm_ipc_region *rg;
	size_t		size;
	int			bell_to;		/* write end of the engine's doorbell */
	int			bell_from;		/* read end of ours */
} proc;

/* What came back for one slot. */
typedef struct reply
{
	cbllm_buf	out;
	cbllm_buf	lp;				/* the logprobs stream */
	int			finish;
	int			status;
	char		error[512];
	int			events;
} reply;

/* Start the engine with these parameters (model dir, parent pid as given). */
static bool
Start(proc *p, const char *model, pid_t parent)
{
	int			to[2],
				from[2];
	int			fd = memfd_create("test-engine", 0);
	char		a_parent[32];

	memset(p, 0, sizeof(*p));
	p->size = cbllm_ipc_region_size(MAX_MSG);
	if (fd < 0 || ftruncate(fd, (off_t) p->size) != 0)
		return false;
	p->rg = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p->rg == MAP_FAILED)
		return false;
	cbllm_ipc_region_init(p->rg, p->size, MAX_MSG);
	snprintf(p->rg->params.model_dir, sizeof(p->rg->params.model_dir), "%s", model);
	snprintf(p->rg->params.device, sizeof(p->rg->params.device), "%s", device);
	snprintf(p->rg->params.chat_template, sizeof(p->rg->params.chat_template), "%s", chat_file);
	p->rg->params.n_threads = 2;
	p->rg->params.max_model_len = 512;
	p->rg->params.n_slots = N_SLOTS;
	p->rg->params.max_queued = N_SLOTS;
	if (pipe(to) != 0 || pipe2(from, O_NONBLOCK) != 0)
		return false;
	snprintf(a_parent, sizeof(a_parent), "%d", (int) parent);
	p->pid = fork();
	if (p->pid == 0)
	{
		dup2(fd, 3);
		dup2(to[0], 4);
		dup2(from[1], 5);
		execl(program, program, "--region-fd", "3", "--doorbell-in", "4", "--doorbell-out", "5",
			  "--parent", a_parent, (char *) NULL);
		_exit(127);
	}
	close(fd);
	close(to[0]);
	close(from[1]);
	p->bell_to = to[1];
	p->bell_from = from[0];
	return p->pid > 0;
}

/* Wait up to ms for the engine to exit; its wait status, or -1. */
static int
WaitExit(proc *p, int ms)
{
	int			st;

	for (int t = 0; t < ms; t += 10)
	{
		if (waitpid(p->pid, &st, WNOHANG) == p->pid)
		{
			p->pid = 0;
			return st;
		}
		usleep(10000);
	}
	return -1;
}

/* Kill (if alive) and unmap. */
static void
Stop(proc *p)
{
	if (p->pid > 0)
	{
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	munmap(p->rg, p->size);
	close(p->bell_to);
	close(p->bell_from);
}

/* Wait up to ms for the engine to publish state; true when it did. */
static bool
WaitState(proc *p, int state, int ms, cbllm_ipc_status *st)
{
	for (int t = 0; t < ms; t += 10)
	{
		if (cbllm_ipc_status_read(p->rg, st) && st->state == state)
			return true;
		usleep(10000);
	}
	return false;
}

/* Ring the engine's doorbell. */
static void
Ring(proc *p)
{
	char		b = 1;

	(void) !write(p->bell_to, &b, 1);
}

/* Submit a request with these parameters on slot/serial; its prompt and stop strings lie at bytes. */
static bool
SubmitParams(proc *p, int slot, uint64_t serial, const cbllm_request_params *prm, const void *bytes)
{
	cbllm_cmd_submit c = {.slot = slot, .serial = serial, .params = *prm};
	bool		ok;

	ok = cbllm_ring_put(cbllm_ipc_cmd_ring(p->rg), CBLLM_CMD_SUBMIT, &c, sizeof(c), bytes,
						(size_t) cbllm_request_params_bytes(prm));
	Ring(p);
	return ok;
}

/* Submit a greedy request of this kind on slot/serial. */
static bool
Submit(proc *p, int slot, uint64_t serial, int kind, const void *in, int len, int max_tokens)
{
	cbllm_request_params prm = {.kind = kind, .max_tokens = max_tokens, .top_p = 1, .prompt_len = len};

	return SubmitParams(p, slot, serial, &prm, in);
}

/* Take every event now waiting into replies[slot] (matching serials[slot]); -1 on a corrupt one. */
static int
Drain(proc *p, reply *replies, const uint64_t *serials)
{
	static char buf[MAX_MSG];
	int			n = 0;

	for (;;)
	{
		uint32_t	type;
		size_t		len;
		cbllm_evt_output e;
		int			got = cbllm_ring_get(cbllm_ipc_evt_ring(p->rg), buf, sizeof(buf), &type, &len);

		if (got == 0)
			return n;
		if (got < 0 || type != CBLLM_EVT_OUTPUT)
			return -1;
		memcpy(&e, buf + sizeof(cbllm_msg_header), sizeof(e));
		if (cbllm_evt_output_check(&e, len - sizeof(cbllm_msg_header), N_SLOTS) != NULL)
			return -1;
		if (e.serial == serials[e.slot])
		{
			reply	   *r = &replies[e.slot];
			const char *text = buf + sizeof(cbllm_msg_header) + sizeof(e);

			cbllm_buf_append(&r->out, text, (size_t) e.text_len);
			cbllm_buf_append(&r->lp, text + e.text_len + e.error_len, (size_t) e.logprobs_len);
			r->events++;
			if (e.finish != CBLLM_FINISH_NONE)
			{
				r->finish = e.finish;
				r->status = e.status;
				snprintf(r->error, sizeof(r->error), "%.*s", e.error_len, text + e.text_len);
			}
		}
		n++;
	}
}

/* Drain until every slot in [0, n) has finished, or ms pass; true when all did. */
static bool
Collect(proc *p, reply *replies, const uint64_t *serials, int n, int ms)
{
	for (int t = 0; t < ms; t += 5)
	{
		int			done = 0;

		if (Drain(p, replies, serials) < 0)
			return false;
		Ring(p);				/* room in the ring */
		for (int i = 0; i < n; i++)
			done += replies[i].finish != CBLLM_FINISH_NONE;
		if (done == n)
			return true;
		usleep(5000);
	}
	return false;
}

/*
 * The text of a request in this process, as the engine process must give
 * it: prm, with its prompt and stop strings at bytes, through the same
 * translation to the engine API; NULL when the engine refuses it.  With
 * logprobs, also the JSON the engine process must write of its logprobs.
 */
static char *
LocalRunLogprobs(cbllm_engine *e, const cbllm_request_params *prm, const char *bytes,
				 char **logprobs)
{
	cbllm_sampling sp;
	cbllm_request_input in;
	cbllm_buf	all = {0},
				lp = {0};
	cbllm_output o;
	cbllm_err	err;
	char	   *held;
	int64_t		id;
	int			active,
				rc;
	bool		first = true;

	rc = cbllm_request_params_to_engine(prm, bytes, &in, &sp, &held);
	if (rc == CBLLM_OK)
		rc = cbllm_engine_submit(e, &in, &sp, &id, &err);
	free(held);
	if (rc != CBLLM_OK)
		return NULL;
	do
	{
		cbllm_engine_step(e, &active, &err);
		cbllm_engine_take(e, id, &o, &err);
		cbllm_buf_append(&all, o.text, o.text_len);
		logprobs_json_append(cbllm_engine_tokenizer(e), o.logprobs, o.n_logprobs, &first, &lp);
	} while (o.finish == CBLLM_FINISH_NONE);
	cbllm_buf_append(&all, "", 1);
	cbllm_buf_append(&lp, "", 1);
	if (logprobs != NULL)
		*logprobs = lp.data;
	else
		cbllm_buf_free(&lp);
	return all.data;
}

/* The text of a request in this process (LocalRunLogprobs without the logprobs). */
static char *
LocalRun(cbllm_engine *e, const cbllm_request_params *prm, const char *bytes)
{
	return LocalRunLogprobs(e, prm, bytes, NULL);
}

/* Greedy text of prompt in this process, as the engine process must give it. */
static char *
LocalText(cbllm_engine *e, const char *prompt, int max_tokens)
{
	cbllm_request_params prm = {.kind = CBLLM_REQ_GENERATE, .max_tokens = max_tokens, .top_p = 1,
	.prompt_len = (int32_t) strlen(prompt)};

	return LocalRun(e, &prm, prompt);
}

/* Greedy text of a chat payload in this process: rendered by e's template, then generated. */
static char *
LocalChat(cbllm_engine *e, const char *payload, int len, int max_tokens)
{
	cbllm_request_params prm = {.kind = CBLLM_REQ_CHAT, .max_tokens = max_tokens, .top_p = 1,
	.prompt_len = len};
	cbllm_buf	prompt = {0};
	cbllm_err	err;
	char	   *text;

	if (cbllm_engine_render_chat(e, payload, (size_t) len, &prompt, &err) != CBLLM_OK)
		return NULL;
	prm.kind = CBLLM_REQ_GENERATE;
	prm.prompt_len = (int32_t) prompt.len;
	text = LocalRun(e, &prm, prompt.data);	/* GENERATE adds a BOS: the template wrote one */
	cbllm_buf_free(&prompt);
	return text;
}

/* Free the replies' buffers and zero them. */
static void
Reset(reply *replies, int n)
{
	for (int i = 0; i < n; i++)
	{
		cbllm_buf_free(&replies[i].out);
		cbllm_buf_free(&replies[i].lp);
		memset(&replies[i], 0, sizeof(replies[i]));
	}
}

int
main(int argc, char **argv)
{
	static const char *prompts[] = {"hello world", "The quick brown fox", "Once upon a time",
	"a b c d e", "databases are", "hi", "what is the answer", "one two three"};
	proc		p;
	cbllm_ipc_status st;
	reply		replies[N_SLOTS] = {0};
	uint64_t	serials[N_SLOTS] = {0};
	cbllm_engine *local;
	cbllm_engine_params lp = {0};
	cbllm_err	err;
	char	   *chat_dir;
	int			ws;

	if (argc < 3)
	{
		fprintf(stderr, "usage: test_engine_ipc ENGINE_PROGRAM MODEL_DIR [DEVICE]\n");
		return 2;
	}
	{
		char		g[4][16];

		cbllm_server_gpu_choice(NULL, 1, g[0], sizeof(g[0]));
		cbllm_server_gpu_choice("", 3, g[1], sizeof(g[1]));
		cbllm_server_gpu_choice("4,7,GPU-abc", 2, g[2], sizeof(g[2]));
		cbllm_server_gpu_choice("4,7", 3, g[3], sizeof(g[3]));
		TAP_OK(strcmp(g[0], "1") == 0 && strcmp(g[1], "3") == 0 && strcmp(g[2], "GPU-abc") == 0 &&
			   strcmp(g[3], "7") == 0,
			   "engine k of several takes GPU k, or the k-th listed device round the list (%s %s %s %s)",
			   g[0], g[1], g[2], g[3]);
	}
	program = argv[1];
	model_dir = argv[2];
	if (argc > 3)
		device = argv[3];
	if (fixture_root_create("engine_ipc") == NULL || (chat_dir = fixture_case_dir("chat")) == NULL ||
		!fixture_write_text(chat_dir, "chat.jinja", CHAT_TEMPLATE))
	{
		printf("not ok 1 - the chat template file is written\n1..1\n");
		return 1;
	}
	snprintf(chat_file, sizeof(chat_file), "%s/chat.jinja", chat_dir);
	free(chat_dir);
	lp.model_dir = model_dir;
	lp.n_threads = 2;
	lp.max_model_len = 512;
	lp.chat_template = chat_file;
	if (cbllm_engine_create(&lp, &local, &err) != CBLLM_OK)
	{
		printf("not ok 1 - the reference engine loads: %s\n1..1\n", err.msg);
		return 1;
	}

	/* ---- start, READY, facts */
	TAP_OK(Start(&p, model_dir, getpid()), "the engine process starts (%s, device %s)", program, device);
	TAP_OK(WaitState(&p, CBLLM_IPC_READY, 30000, &st), "it loads the model and says READY");
	TAP_OK(st.max_model_len == 512 && st.device[0] != '\0',
		   "its status has the model's facts (max_model_len %d, device %s)", st.max_model_len, st.device);
	TAP_OK(atomic_load(&p.rg->engine_pid) == p.pid, "it publishes its pid");
	{
		uint64_t	b1 = atomic_load(&p.rg->heartbeat_ns);

		usleep(450000);
		TAP_OK(atomic_load(&p.rg->heartbeat_ns) > b1, "its heartbeat goes on while it is idle");
	}

	/* ---- generation, several at once, each equal to the same engine in this process */
	for (int i = 0; i < 8; i++)
	{
		serials[i] = 100 + i;
		Submit(&p, i, serials[i], CBLLM_REQ_GENERATE, prompts[i], (int) strlen(prompts[i]), 12);
	}
	TAP_OK(Collect(&p, replies, serials, 8, 60000), "8 generations submitted at once all finish");
	{
		int			same = 0;

		for (int i = 0; i < 8; i++)
		{
			char	   *want = LocalText(local, prompts[i], 12);

			cbllm_buf_append(&replies[i].out, "", 1);
			same += want && strcmp(want, replies[i].out.data) == 0 &&
				replies[i].finish != CBLLM_FINISH_ERROR;
			if (!want || strcmp(want, replies[i].out.data) != 0)
				TAP_DIAG("slot %d: got \"%s\", want \"%s\"", i, replies[i].out.data, want ? want : "?");
			free(want);
		}
		TAP_OK(same == 8, "each gives the greedy text of the same engine run in this process (%d of 8)", same);
	}
	Reset(replies, N_SLOTS);

	/* ---- chat requests: rendered by the template in the engine process, then generated */
	{
		static const char conv[] = "[{\"role\": \"user\", \"content\": \" hi there \"}, "
			"{\"role\": \"assistant\", \"content\": \"hello\"}]\0{}";
		static const char no_gen[] = "[{\"role\": \"user\", \"content\": \"hi\"}]\0"
			"{\"add_generation_prompt\": false}";
		static const char bad[] = "[{\"role\": \"user\", \"content\": 5}]\0{}";
		char	   *want;

		for (int i = 0; i < 4; i++)
			serials[i] = 250 + i;
		Submit(&p, 0, 250, CBLLM_REQ_RENDER, conv, sizeof(conv) - 1, 1);
		Submit(&p, 1, 251, CBLLM_REQ_RENDER, no_gen, sizeof(no_gen) - 1, 1);
		Submit(&p, 2, 252, CBLLM_REQ_CHAT, conv, sizeof(conv) - 1, 12);
		Submit(&p, 3, 253, CBLLM_REQ_CHAT, bad, sizeof(bad) - 1, 12);
		TAP_OK(Collect(&p, replies, serials, 4, 30000), "render and chat requests finish");
		cbllm_buf_append(&replies[0].out, "", 1);
		TAP_OK(strcmp(replies[0].out.data, "<s>[INST] hi there [/INST]<s>[INST] hello [/INST] Answer:") == 0,
			   "a render request gives the template's prompt (%s)", replies[0].out.data);
		cbllm_buf_append(&replies[1].out, "", 1);
		TAP_OK(strcmp(replies[1].out.data, "<s>[INST] hi [/INST]") == 0,
			   "add_generation_prompt false in the variables leaves the generation prompt out (%s)",
			   replies[1].out.data);
		want = LocalChat(local, conv, sizeof(conv) - 1, 12);
		cbllm_buf_append(&replies[2].out, "", 1);
		TAP_OK(want != NULL && replies[2].finish != CBLLM_FINISH_ERROR &&
			   strcmp(want, replies[2].out.data) == 0,
			   "a chat request gives the greedy text of its rendered prompt in this process (\"%s\")",
			   replies[2].out.data);
		free(want);
		TAP_OK(replies[3].finish == CBLLM_FINISH_ERROR && replies[3].status == CBLLM_ERR_INVALID &&
			   strstr(replies[3].error, "messages[0].content") != NULL,
			   "bad messages are the request's error, naming the element (%s)", replies[3].error);
	}
	Reset(replies, N_SLOTS);

	/* ---- tokenizer requests */
	{
		const char *text = "<s>Hello world, tokenized by the engine";
		const cbllm_tokenizer *tok = cbllm_engine_tokenizer(local);
		tokenizer_encode_opts o = {.add_bos = true, .parse_special = true};
		int32_t    *ids;
		int			n;
		int32_t		bad = 999999;

		tokenizer_encode(tok, text, strlen(text), o, &ids, &n, &err);
		/* HuggingFace's encode adds a BOS before the text's own: the engine reads one */
		TAP_OK(n >= 2 && ids[0] == tokenizer_bos_id(tok) && ids[1] == tokenizer_bos_id(tok),
			   "the tokenizer, as HuggingFace's, puts its BOS before the text's own <s>");
		memmove(ids, ids + 1, sizeof(int32_t) * (size_t) --n);
		serials[0] = 200;
		serials[1] = 201;
		serials[2] = 202;
		serials[3] = 203;
		Submit(&p, 0, 200, CBLLM_REQ_TOKENIZE, text, (int) strlen(text), 1);
		Submit(&p, 1, 201, CBLLM_REQ_TOKEN_COUNT, text, (int) strlen(text), 1);
		Submit(&p, 2, 202, CBLLM_REQ_DETOKENIZE, ids, n * (int) sizeof(int32_t), 1);
		Submit(&p, 3, 203, CBLLM_REQ_DETOKENIZE, &bad, sizeof(bad), 1);
		TAP_OK(Collect(&p, replies, serials, 4, 30000), "tokenize, count and detokenize requests finish");
		TAP_OK(replies[0].out.len == (size_t) n * sizeof(int32_t) &&
			   memcmp(replies[0].out.data, ids, replies[0].out.len) == 0,
			   "tokenize gives the tokenizer's ids with one BOS, as the engine reads a prompt (%d ids)", n);
		TAP_OK(replies[1].out.len == sizeof(int32_t) && *(int32_t *) replies[1].out.data == n,
			   "token count gives their number");
		cbllm_buf_append(&replies[2].out, "", 1);
		TAP_OK(strcmp(replies[2].out.data, "Hello world, tokenized by the engine") == 0,
			   "detokenize gives the text back without the special tokens (%s)", replies[2].out.data);
		TAP_OK(replies[3].finish == CBLLM_FINISH_ERROR && replies[3].status == CBLLM_ERR_INVALID &&
			   strstr(replies[3].error, "outside the vocabulary") != NULL,
			   "an id outside the vocabulary is an error of the request (%s)", replies[3].error);
		free(ids);
	}
	Reset(replies, N_SLOTS);

	/* ---- abort, then the slot reused with a new serial */
	{
		serials[0] = 300;
		Submit(&p, 0, 300, CBLLM_REQ_GENERATE, "hello world", 11, 400);
		for (int t = 0; t < 2000 && replies[0].events == 0; t++)
		{
			Drain(&p, replies, serials);
			usleep(1000);
		}
		{
			cbllm_cmd_abort a = {.slot = 0, .serial = 300};

			cbllm_ring_put(cbllm_ipc_cmd_ring(p.rg), CBLLM_CMD_ABORT, &a, sizeof(a), NULL, 0);
			Ring(&p);
		}
		usleep(100000);
		Drain(&p, replies, serials);
		TAP_OK(replies[0].finish == CBLLM_FINISH_NONE, "an aborted request sends no end of its own");
		Reset(replies, 1);
		serials[0] = 301;
		Submit(&p, 0, 301, CBLLM_REQ_GENERATE, "hello world", 11, 12);
		TAP_OK(Collect(&p, replies, serials, 1, 30000) && replies[0].finish != CBLLM_FINISH_ERROR,
			   "the slot is reused by a new request");
	}
	Reset(replies, N_SLOTS);

	if (strcmp(device, "cpu") != 0)
	{
		/* the rest checks the channel, not the backend: the CPU run of this test covers it */
		TAP_DIAG("the channel checks below ran in the CPU run; this run checked the %s backend", device);
		Stop(&p);
		Reset(replies, N_SLOTS);
		cbllm_engine_destroy(local);
		fixture_root_remove();
		return tap_done();
	}

	/* ---- sampling options and stop strings travel whole in the frame */
	{
		static const char bytes[] = "Once upon a time" "e " "zz";
		cbllm_request_params prm = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 24, .temperature = 0.8,
			.top_p = 0.9, .top_k = 20, .priority = 5, .has_seed = true, .seed = 42,
		.prompt_len = 16, .n_stop = 2, .stop_len = {2, 2}};
		char	   *want = LocalRun(local, &prm, bytes);

		serials[0] = 150;
		SubmitParams(&p, 0, 150, &prm, bytes);
		TAP_OK(Collect(&p, replies, serials, 1, 60000), "a seeded request with stop strings finishes");
		cbllm_buf_append(&replies[0].out, "", 1);
		TAP_OK(want != NULL && replies[0].finish != CBLLM_FINISH_ERROR &&
			   strcmp(want, replies[0].out.data) == 0,
			   "it gives the text of the same parameters run in this process (\"%s\")", replies[0].out.data);
		TAP_OK(strstr(replies[0].out.data, "e ") == NULL && strstr(replies[0].out.data, "zz") == NULL,
			   "and neither stop string appears in it");
		{
			cbllm_sampling sp = cbllm_sampling_default();
			cbllm_request_input in = {.text = "hi", .text_len = 2};
			int64_t		id;

			sp.temperature = 150;
			TAP_OK(cbllm_engine_submit(local, &in, &sp, &id, &err) == CBLLM_ERR_INVALID &&
				   strcmp(err.msg, "temperature must be between 0 and 100, not 150") == 0,
				   "the engine API refuses what the SQL check refuses, with its message (%s)", err.msg);
		}
		free(want);
	}
	Reset(replies, N_SLOTS);

	/* ---- logprobs travel as their own stream beside the text */
	{
		/* the prompt, then a logit_bias that keeps the end-of-turn token out: 200 tokens */
		char		bytes[16 + sizeof(cbllm_bias_entry)] = "Once upon a time";
		cbllm_bias_entry no_eos = {tokenizer_eos_id(cbllm_engine_tokenizer(local)), -100};
		cbllm_request_params prm = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 200, .temperature = 1,
			.top_p = 1, .has_seed = true, .seed = 9, .prompt_len = 16, .n_bias = 1, .logprobs = 1,
		.top_logprobs = CBLLM_MAX_TOP_LOGPROBS};
		char	   *want,
				   *text;

		memcpy(bytes + 16, &no_eos, sizeof(no_eos));
		text = LocalRunLogprobs(local, &prm, bytes, &want);

		serials[0] = 160;
		SubmitParams(&p, 0, 160, &prm, bytes);
		TAP_OK(Collect(&p, replies, serials, 1, 60000), "a request with logprobs finishes");
		cbllm_buf_append(&replies[0].out, "", 1);
		cbllm_buf_append(&replies[0].lp, "", 1);
		TAP_OK(want != NULL && strlen(want) > 50000 && strcmp(want, replies[0].lp.data) == 0,
			   "its logprobs stream (%zu bytes in %d events) is the JSON of the same request run in "
			   "this process", replies[0].lp.len - 1, replies[0].events);
		TAP_OK(text != NULL && strcmp(text, replies[0].out.data) == 0, "and its text is unchanged");
		free(want);
		free(text);
	}
	Reset(replies, N_SLOTS);

	/* ---- output held back while the event ring is full, then delivered whole */
	{
		static char big[60000];
		size_t		want_total = 0,
					got_total = 0;
		cbllm_ipc_status st2;

		for (size_t k = 0; k < sizeof(big); k++)
			big[k] = "ab "[k % 3];
		for (int i = 0; i < 8; i++)
		{
			serials[i] = 400 + i;
			Submit(&p, i, serials[i], CBLLM_REQ_TOKENIZE, big, sizeof(big), 1);
		}
		usleep(1500000);		/* let the engine fill the event ring while nobody reads */
		TAP_OK(cbllm_ring_space(cbllm_ipc_evt_ring(p.rg)) < (uint64_t) MAX_MSG,
			   "8 tokenizations of 60 kB fill the event ring while it is not read");
		TAP_OK(cbllm_ipc_status_read(p.rg, &st2) && st2.state == CBLLM_IPC_READY,
			   "the engine keeps going with the ring full");
		TAP_OK(Collect(&p, replies, serials, 8, 60000), "read again, every request finishes");
		for (int i = 0; i < 8; i++)
			got_total += replies[i].out.len;
		{
			const cbllm_tokenizer *tok = cbllm_engine_tokenizer(local);
			tokenizer_encode_opts o = {.add_bos = true, .parse_special = true};
			int32_t    *ids;
			int			n;

			tokenizer_encode(tok, big, sizeof(big), o, &ids, &n, &err);
			want_total = 8 * (size_t) n * sizeof(int32_t);
			TAP_OK(got_total == want_total && memcmp(replies[7].out.data, ids, replies[7].out.len) == 0,
				   "and every id arrived, in order (%zu of %zu bytes)", got_total, want_total);
			free(ids);
		}
	}
	Reset(replies, N_SLOTS);

	/* ---- a corrupt command stops the engine with status 3 */
	{
		char		junk[32] = {0};

		cbllm_ring_put(cbllm_ipc_cmd_ring(p.rg), 99, junk, sizeof(junk), NULL, 0);
		Ring(&p);
		ws = WaitExit(&p, 10000);
		TAP_OK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == CBLLM_SERVER_BAD_CHANNEL,
			   "an unknown command stops the engine with status %d", CBLLM_SERVER_BAD_CHANNEL);
		Stop(&p);
	}

	/* ---- a submit whose lengths do not add up is corrupt too */
	{
		cbllm_cmd_submit c = {.slot = 0, .serial = 1, .params = {.prompt_len = 1000}};

		Start(&p, model_dir, getpid());
		WaitState(&p, CBLLM_IPC_READY, 30000, &st);
		cbllm_ring_put(cbllm_ipc_cmd_ring(p.rg), CBLLM_CMD_SUBMIT, &c, sizeof(c), "x", 1);
		Ring(&p);
		ws = WaitExit(&p, 10000);
		TAP_OK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == CBLLM_SERVER_BAD_CHANNEL,
			   "a submit whose lengths do not add up stops the engine (status 3)");
		Stop(&p);
	}

	/* ---- and so is a submit whose parameters break the rules the supervisor checked */
	{
		cbllm_request_params prm = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 4, .temperature = 150,
		.top_p = 1, .prompt_len = 2};

		Start(&p, model_dir, getpid());
		WaitState(&p, CBLLM_IPC_READY, 30000, &st);
		SubmitParams(&p, 0, 1, &prm, "hi");
		ws = WaitExit(&p, 10000);
		TAP_OK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == CBLLM_SERVER_BAD_CHANNEL,
			   "a submit with temperature 150 stops the engine (status 3)");
		Stop(&p);
	}

	/* ---- shutdown */
	{
		Start(&p, model_dir, getpid());
		WaitState(&p, CBLLM_IPC_READY, 30000, &st);
		cbllm_ring_put(cbllm_ipc_cmd_ring(p.rg), CBLLM_CMD_SHUTDOWN, NULL, 0, NULL, 0);
		Ring(&p);
		ws = WaitExit(&p, 10000);
		TAP_OK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "a shutdown command ends it with status 0");
		Stop(&p);
	}

	/* ---- a model that does not load */
	{
		Start(&p, "/nonexistent/model", getpid());
		TAP_OK(WaitState(&p, CBLLM_IPC_FAILED, 30000, &st) && strstr(st.reason, "config.json") != NULL,
			   "a missing model: FAILED with the loader's reason (%s)", st.reason);
		ws = WaitExit(&p, 10000);
		TAP_OK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == CBLLM_SERVER_LOAD_FAILED,
			   "and it exits with status %d", CBLLM_SERVER_LOAD_FAILED);
		Stop(&p);
	}

	/* ---- started by someone else than the parent it was told */
	{
		Start(&p, model_dir, 1);
		ws = WaitExit(&p, 10000);
		TAP_OK(ws >= 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 1,
			   "an engine whose parent is not the one named refuses to run");
		Stop(&p);
	}

	Reset(replies, N_SLOTS);
	cbllm_engine_destroy(local);
	fixture_root_remove();
	return tap_done();
}
