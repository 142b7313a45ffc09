/*
 * test_vocab_padding.c: the embeddings and the tokenizer disagree about the
 * vocabulary's size, both ways real checkpoints do, on the CPU and (with a
 * device argument) on that device:
 *   padded  vocab_size pads the embeddings beyond the tokenizer's ids (Qwen,
 *           Phi-3): every row loads, and an id no token stands for is never
 *           sampled nor fails a request, greedy or at a high temperature;
 *   beyond  the tokenizer has ids past the embeddings' rows (Gemma-3's
 *           <image_soft_token> = 262144 over 262144 rows): the checkpoint
 *           loads, such an id is never sampled, and a prompt holding one
 *           (its text parsed as a special token, or the id given) is refused
 *           on its own with an error naming it, while other requests run.
 *
 * usage: test_vocab_padding PADDED_DIR BEYOND_DIR [DEVICE]
 *   PADDED_DIR  gen_model.py --vocab 400 --pad-vocab 50 (config.json's
 *               vocab_size 450, tokenizer ids 0..399)
 *   BEYOND_DIR  gen_model.py --vocab 400 --tokens-beyond 2 (config.json's
 *               vocab_size 400, tokenizer ids 0..401: 400 <image_soft_token>)
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "ref_check.h"
#include "tap.h"

#define N_REQ 6
#define GEN 64

/* One way the sizes disagree. */
typedef struct vocab_case
{
	const char *name;
	const char *dir;
	int			model_rows;		/* config.json's vocab_size: the embeddings' rows */
	int			tokenizer_ids;	/* the tokenizer's ids */
} vocab_case;

/* The ids both a token and a row: the only ones sampling may draw. */
#define DRAWABLE(c) ((c)->model_rows < (c)->tokenizer_ids ? (c)->model_rows : (c)->tokenizer_ids)

/* An engine on device (NULL: the CPU) over c's model, or NULL. */
static cbllm_engine *
NewEngine(const vocab_case *c, const char *device)
{
	return ref_engine_sized(c->dir, device, (ref_engine_size) {8, 128, 256, 128, NULL, 0, 0});
}

/* What RunAll counts. */
typedef struct tally
{
	int			drawable;		/* ids below this may be drawn */
	int			n_tokens;		/* tokens generated */
	int			n_outside;		/* of those, ids not both a token and an embedding row */
	int			n_failed;		/* requests that failed */
} tally;

/* Count request i's new tokens, those outside the tokenizer, and its failure. */
static bool
CountTokens(void *arg, int i, const cbllm_output *o)
{
	tally	   *c = arg;

	c->n_tokens += o->n_tokens;
	for (int t = 0; t < o->n_tokens; t++)
		c->n_outside += o->tokens[t] < 0 || o->tokens[t] >= c->drawable;
	if (o->finish == CBLLM_FINISH_ERROR)
	{
		TAP_DIAG("request %d failed: %s", i, o->error ? o->error : "?");
		c->n_failed++;
	}
	return true;
}

/*
 * Run N_REQ requests of GEN tokens each with sp (seeded per request),
 * counting into c; false on an engine error.
 */
static bool
RunAll(cbllm_engine *e, cbllm_sampling sp, int drawable, tally *c)
{
	int64_t		ids[N_REQ];
	cbllm_err	err;

	memset(c, 0, sizeof(*c));
	c->drawable = drawable;
	for (int i = 0; i < N_REQ; i++)
	{
		int32_t		prompt[6] = {1, 20 + i, 30, 40 + 3 * i, 50, 60};
		cbllm_request_input in = {0};

		in.ids = prompt;
		in.n_ids = 6;
		sp.seed = 1000 + i;
		if (cbllm_engine_submit(e, &in, &sp, &ids[i], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			return false;
		}
	}
	return engine_run_to_end(e, ids, N_REQ, INT_MAX, CountTokens, c) >= 0;
}

/* Submit text (no BOS) with greedy sampling; the status, *id and err as submit leaves them. */
static int
SubmitText(cbllm_engine *e, const char *text, int64_t *id, cbllm_err *err)
{
	cbllm_request_input in = {0};
	cbllm_sampling sp = cbllm_sampling_default();

	in.text = text;
	in.text_len = strlen(text);
	sp.max_tokens = 8;
	sp.ignore_eos = true;
	return cbllm_engine_submit(e, &in, &sp, id, err);
}

/*
 * A prompt naming a token past the embeddings is refused when submitted,
 * with an error naming it, as text and as ids, while a request beside it
 * runs to its end.
 */
static void
TestPromptBeyond(cbllm_engine *e, const vocab_case *c, const char *name)
{
	int64_t		ok_id = 0,
				bad_id = 0;
	int32_t		ids[3] = {1, 30, c->model_rows};
	cbllm_request_input in = {0};
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;
	tally		t = {.drawable = DRAWABLE(c)};
	int			rc;

	TAP_OK(SubmitText(e, "the fox and the dog", &ok_id, &err) == CBLLM_OK,
		   "%s: a prompt of ordinary text is accepted", name);
	rc = SubmitText(e, "the fox <image_soft_token> and the dog", &bad_id, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "<image_soft_token>") != NULL &&
		   strstr(err.msg, "400") != NULL,
		   "%s: a text prompt holding <image_soft_token> (id %d, past the %d rows) is refused naming it: %s",
		   name, c->model_rows, c->model_rows, rc == CBLLM_OK ? "accepted" : err.msg);
	in.ids = ids;
	in.n_ids = 3;
	rc = cbllm_engine_submit(e, &in, &sp, &bad_id, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "400") != NULL,
		   "%s: a prompt of ids holding %d is refused: %s", name, c->model_rows,
		   rc == CBLLM_OK ? "accepted" : err.msg);
	TAP_OK(ok_id != 0 && engine_run_to_end(e, &ok_id, 1, INT_MAX, CountTokens, &t) >= 0 &&
		   t.n_tokens == 8 && t.n_failed == 0 && t.n_outside == 0,
		   "%s: the ordinary request beside them generates its 8 tokens (%d, %d failed)", name,
		   t.n_tokens, t.n_failed);
}

/* c's model loads with every row, and sampling draws only ids that are a token and a row. */
static void
TestDevice(const vocab_case *c, const char *device)
{
	char		name[64];
	cbllm_engine *e = NewEngine(c, device);
	cbllm_engine_info info;
	cbllm_sampling hot = cbllm_sampling_default(),
				greedy = cbllm_sampling_default();
	tally		t;
	bool		ok;

	snprintf(name, sizeof(name), "%s, %s", c->name, device ? device : "cpu");
	if (e == NULL)
	{
		TAP_OK(false, "%s: the model loads", name);
		return;
	}
	cbllm_engine_get_info(e, &info);
	TAP_OK(info.vocab_size == c->model_rows,
		   "%s: all %d rows of the embeddings load (the tokenizer has %d ids)", name,
		   info.vocab_size, c->tokenizer_ids);
	hot.temperature = 3.0f;
	hot.top_p = 1.0f;
	hot.has_seed = true;
	for (int k = 0; k < 2; k++)
	{
		cbllm_sampling *sp = k == 0 ? &hot : &greedy;

		sp->max_tokens = GEN;
		sp->ignore_eos = true;
		ok = RunAll(e, *sp, DRAWABLE(c), &t);
		TAP_OK(ok && t.n_tokens == N_REQ * GEN && t.n_outside == 0 && t.n_failed == 0,
			   "%s: %s, %d tokens are all below %d (both a token and a row) and no request fails (%d outside, %d failed)",
			   name, k == 0 ? "at temperature 3" : "greedy", t.n_tokens, DRAWABLE(c), t.n_outside,
			   t.n_failed);
	}
	if (c->tokenizer_ids > c->model_rows)
		TestPromptBeyond(e, c, name);
	cbllm_engine_destroy(e);
}

int
main(int argc, char **argv)
{
	vocab_case	cases[2] = {{"padded", NULL, 450, 400}, {"beyond", NULL, 400, 402}};

	if (argc < 3)
	{
		fprintf(stderr, "usage: test_vocab_padding PADDED_DIR BEYOND_DIR [DEVICE]\n");
		return 2;
	}
	cases[0].dir = argv[1];
	cases[1].dir = argv[2];
	for (int i = 0; i < 2; i++)
	{
		TestDevice(&cases[i], NULL);
		if (argc > 3)
			TestDevice(&cases[i], argv[3]);
	}
	return tap_done();
}
