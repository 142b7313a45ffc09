/*
 * make_seeds.c: the hand-made seeds of the two fuzz targets whose input is
 * binary structs (fuzz_request_check, fuzz_ipc), written through the real
 * structs and the real ring so that the seeds follow any change of layout.
 * make_corpus.py compiles and runs it; not a fuzz target (its name does not
 * start with fuzz_).
 *
 * usage: make_seeds DIR   writes DIR/request_check/NAME and DIR/ipc/NAME
 *
 *   request_check: the limits, the parameters, then the prompt and stop bytes
 *   ipc:           8 bytes of head, 8 of tail, then the ring's data bytes
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "api/request_params.h"
#include "ipc/ipc.h"

#define RING_CAP 4096			/* as fuzz_ipc.c's ring */

static const char *out_dir;

/* Write DIR/target/name from two pieces; exit on failure (a tool, not the engine). */
static void
Put(const char *target, const char *name, const void *a, size_t na, const void *b, size_t nb)
{
	char		path[1024];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
	f = fopen(path, "wb");
	if (f == NULL || fwrite(a, 1, na, f) != na || (nb > 0 && fwrite(b, 1, nb, f) != nb) || fclose(f) != 0)
	{
		fprintf(stderr, "make_seeds: cannot write %s\n", path);
		exit(1);
	}
}

/* A valid greedy generation of a prompt of n bytes. */
static cbllm_request_params
Generate(int32_t n)
{
	cbllm_request_params p;

	memset(&p, 0, sizeof(p));
	p.kind = CBLLM_REQ_GENERATE;
	p.max_tokens = 16;
	p.top_p = 1;
	p.prompt_len = n;
	return p;
}

/* A generation of a prompt of n bytes with every sampling option set and stop strings of these lengths. */
static cbllm_request_params
Sampled(int32_t n, int n_stop, const int32_t *stop_len)
{
	/* static, so its padding is zero: the seeds are the same bytes every run */
	static const cbllm_request_params every = {.kind = CBLLM_REQ_GENERATE, .max_tokens = 16,
		.temperature = 0.7, .top_p = 0.9, .top_k = 40, .priority = 3, .has_seed = 1,
	.seed = 42};
	cbllm_request_params p;

	memcpy(&p, &every, sizeof(p));
	p.prompt_len = n;
	p.n_stop = n_stop;
	memcpy(p.stop_len, stop_len, sizeof(int32_t) * (size_t) n_stop);
	return p;
}

/* One request_check seed: the server's limits, p, then bytes. */
static void
CheckSeed(const char *name, const cbllm_request_params *p, const char *bytes, size_t nb)
{
	char		buf[sizeof(cbllm_request_limits) + sizeof(cbllm_request_params)];
	cbllm_request_limits lim;

	memset(&lim, 0, sizeof(lim));	/* the padding too: the same bytes every run */
	lim.max_tokens_limit = 1000;
	lim.max_prompt_bytes = 65536;
	memcpy(buf, &lim, sizeof(lim));
	memcpy(buf + sizeof(lim), p, sizeof(*p));
	Put("request_check", name, buf, sizeof(buf), bytes, nb);
}

/* The request_check seeds: every option valid, each refusal, the sizes at their edges. */
static void
CheckSeeds(void)
{
	static const char bytes[] = "helloEND\n\n";
	cbllm_request_params p;

	p = Sampled(5, 2, (const int32_t[]) {3, 2});
	CheckSeed("generate_every_option", &p, bytes, sizeof(bytes) - 1);
	p = Sampled(5, 2, (const int32_t[]) {4, 1});
	CheckSeed("stop_string_with_nul", &p, "hello\0END\n\n", 11);
	p = Generate(2);
	CheckSeed("greedy_plain", &p, "hi", 2);
	p.top_p = 1e-300;
	CheckSeed("top_p_below_float", &p, "hi", 2);
	p = Generate(2);
	p.max_tokens = 1001;
	CheckSeed("max_tokens_over_limit", &p, "hi", 2);
	p = Generate(2);
	p.temperature = NAN;
	CheckSeed("temperature_nan", &p, "hi", 2);
	p.temperature = 1e300;
	CheckSeed("temperature_1e300", &p, "hi", 2);
	p = Generate(2);
	p.top_p = 0;
	CheckSeed("top_p_zero", &p, "hi", 2);
	p = Generate(2);
	p.top_k = -1;
	CheckSeed("top_k_negative", &p, "hi", 2);
	p = Generate(2);
	p.priority = 5000;
	CheckSeed("priority_5000", &p, "hi", 2);
	p = Generate(2);
	p.defaults = CBLLM_DEFAULT_ALL;
	CheckSeed("model_defaults", &p, "hi", 2);
	p.defaults = 8;
	CheckSeed("unknown_defaults_bit", &p, "hi", 2);
	p = Generate(5);
	p.kind = CBLLM_REQ_CHAT;
	CheckSeed("chat", &p, "[]\0{}", 5);
	p.kind = CBLLM_REQ_RENDER;
	CheckSeed("render", &p, "[]\0{}", 5);
	p = Generate(2);
	p.n_stop = 9;
	CheckSeed("nine_stop_strings", &p, "hi", 2);
	p = Generate(-5);
	CheckSeed("negative_prompt_length", &p, NULL, 0);
	p = Generate(2);
	p.n_stop = 1;
	CheckSeed("empty_stop_string", &p, "hi", 2);
	p = Generate(65536);
	p.n_stop = 1;
	p.stop_len[0] = 1;
	CheckSeed("one_byte_over_the_limit", &p, NULL, 0);
	p = Generate(INT32_MAX);
	p.n_stop = CBLLM_MAX_STOP;
	for (int k = 0; k < CBLLM_MAX_STOP; k++)
		p.stop_len[k] = INT32_MAX;
	CheckSeed("overflowing-prompt-and-stop-lengths", &p, NULL, 0);
	memset(&p, 0, sizeof(p));
	p.kind = CBLLM_REQ_TOKENIZE;
	p.prompt_len = 100;
	CheckSeed("tokenize", &p, NULL, 0);
	p.kind = CBLLM_REQ_DETOKENIZE;
	p.prompt_len = 70000;
	CheckSeed("detokenize_too_large", &p, NULL, 0);
}

/* A ring of fuzz_ipc's size, empty, with its first skip bytes already written and read. */
static cbllm_ring *
NewRing(uint64_t skip)
{
	static _Alignas(64) char mem[sizeof(cbllm_ring) + RING_CAP];
	cbllm_ring *r = (cbllm_ring *) mem;

	memset(mem, 0, sizeof(mem));
	cbllm_ring_init(r, RING_CAP);
	atomic_store(&r->head, skip);
	atomic_store(&r->tail, skip);
	return r;
}

/* Write the ring's state as an ipc seed: head, tail, the data bytes up to the last one written. */
static void
RingSeed(const char *name, cbllm_ring *r)
{
	char		buf[16 + RING_CAP];
	uint64_t	head = atomic_load(&r->head),
				tail = atomic_load(&r->tail);
	size_t		end = (size_t) (tail % RING_CAP + (head - tail));	/* where the last byte lies, unwrapped */
	size_t		n = end > RING_CAP ? RING_CAP : end;

	memcpy(buf, &head, 8);
	memcpy(buf + 8, &tail, 8);
	memcpy(buf + 16, r + 1, n);
	Put("ipc", name, buf, 16 + n, NULL, 0);
}

/* Append a submit command of p for slot 1 with its bytes. */
static void
PutSubmit(cbllm_ring *r, const cbllm_request_params *p, const void *bytes, size_t nb)
{
	cbllm_cmd_submit c;

	memset(&c, 0, sizeof(c));
	c.slot = 1;
	c.serial = 7;
	c.params = *p;
	if (!cbllm_ring_put(r, CBLLM_CMD_SUBMIT, &c, sizeof(c), bytes, nb))
		exit(1);
}

/* Append an output event for slot 1 with text, an error when it ends in one, and logprobs. */
static void
PutOutputLogprobs(cbllm_ring *r, const char *text, int finish, const char *error,
				  const char *logprobs)
{
	char		buf[512];
	cbllm_evt_output e;

	memset(&e, 0, sizeof(e));
	e.slot = 1;
	e.serial = 7;
	e.progress.phase = finish ? CBLLM_PHASE_FINISHED : CBLLM_PHASE_DECODE;
	e.progress.n_prompt = 3;
	e.progress.n_generated = 2;
	e.n_tokens = 2;
	e.progress.queue_seconds = 0.5;
	e.finish = finish;
	e.status = finish == CBLLM_FINISH_ERROR ? CBLLM_ERR_INVALID : 0;
	e.text_len = (int32_t) strlen(text);
	e.error_len = error ? (int32_t) strlen(error) : 0;
	e.logprobs_len = logprobs ? (int32_t) strlen(logprobs) : 0;
	memcpy(buf, text, (size_t) e.text_len);
	memcpy(buf + e.text_len, error ? error : "", (size_t) e.error_len);
	memcpy(buf + e.text_len + e.error_len, logprobs ? logprobs : "", (size_t) e.logprobs_len);
	if (!cbllm_ring_put(r, CBLLM_EVT_OUTPUT, &e, sizeof(e), buf,
						(size_t) (e.text_len + e.error_len + e.logprobs_len)))
		exit(1);
}

/* Append an output event for slot 1 with text, and an error when it ends in one. */
static void
PutOutput(cbllm_ring *r, const char *text, int finish, const char *error)
{
	PutOutputLogprobs(r, text, finish, error, NULL);
}

/* The ipc seeds: sound traffic of every kind, across the ring's end, and each corrupt command. */
static void
RingSeeds(void)
{
	static const char bytes[] = "hello world\n\n";
	static const int32_t ids[] = {1, 2, 3};
	cbllm_request_params p = Sampled(11, 1, (const int32_t[]) {2});
	cbllm_cmd_abort a = {.slot = 1, .serial = 7};
	cbllm_ring *r;

	r = NewRing(0);
	PutSubmit(r, &p, bytes, sizeof(bytes) - 1);
	PutOutput(r, "Once upon", CBLLM_FINISH_NONE, NULL);
	cbllm_ring_put(r, CBLLM_CMD_ABORT, &a, sizeof(a), NULL, 0);
	PutOutput(r, "", CBLLM_FINISH_ERROR, "temperature must be between 0 and 100, not 150");
	cbllm_ring_put(r, CBLLM_CMD_SHUTDOWN, NULL, 0, NULL, 0);
	RingSeed("valid-submit-then-output", r);

	r = NewRing(RING_CAP - 40);	/* the next message wraps around the ring's end */
	PutSubmit(r, &p, bytes, sizeof(bytes) - 1);
	PutOutput(r, "wrapped", CBLLM_FINISH_STOP, NULL);
	RingSeed("submit_across_the_end", r);

	r = NewRing(0);
	p.logprobs = 1;
	p.top_logprobs = 2;
	PutSubmit(r, &p, bytes, sizeof(bytes) - 1);
	PutOutputLogprobs(r, " Once", CBLLM_FINISH_NONE, NULL,
					  "{\"token\":\" Once\",\"id\":9,\"logprob\":-0.5,\"top_logprobs\":[");
	PutOutputLogprobs(r, "", CBLLM_FINISH_LENGTH, NULL, "]}");
	RingSeed("output_with_logprobs", r);
	p.logprobs = 0;
	p.top_logprobs = 0;

	r = NewRing(0);
	memset(&p, 0, sizeof(p));
	p.kind = CBLLM_REQ_TOKENIZE;
	p.prompt_len = 5;
	PutSubmit(r, &p, "hello", 5);
	p.kind = CBLLM_REQ_TOKEN_COUNT;
	PutSubmit(r, &p, "hello", 5);
	p.kind = CBLLM_REQ_DETOKENIZE;
	p.prompt_len = sizeof(ids);
	PutSubmit(r, &p, ids, sizeof(ids));
	RingSeed("tokenizer_submits", r);

	r = NewRing(0);
	p.prompt_len = 6;
	PutSubmit(r, &p, ids, 6);
	RingSeed("detokenize_ids_not_whole", r);

	r = NewRing(0);
	p = Generate(1000);
	PutSubmit(r, &p, "x", 1);
	RingSeed("submit_lengths_do_not_add_up", r);

	r = NewRing(0);
	p = Generate(2);
	p.temperature = 150;
	PutSubmit(r, &p, "hi", 2);
	RingSeed("submit_breaking_the_rules", r);

	r = NewRing(0);
	p = Generate(2);
	p.kind = 9;
	PutSubmit(r, &p, "hi", 2);
	RingSeed("submit_unknown_kind", r);
}

int
main(int argc, char **argv)
{
	if (argc != 2)
	{
		fprintf(stderr, "usage: make_seeds DIR\n");
		return 2;
	}
	out_dir = argv[1];
	CheckSeeds();
	RingSeeds();
	return 0;
}
