/*
 * test_vocab_padding.c: a checkpoint whose vocab_size pads the embeddings
 * beyond the tokenizer's ids (as Qwen and Phi-3 checkpoints do) loads with
 * every row, and an id no token stands for is never sampled nor fails a
 * request, greedy or at a high temperature, on the CPU and (with a device
 * argument) on that device.
 *
 * usage: test_vocab_padding PADDED_DIR [DEVICE]
 *   PADDED_DIR  gen_model.py --vocab 400 --pad-vocab 50 (config.json's
 *               vocab_size 450, tokenizer ids 0..399)
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbllm.h"
#include "engine_run.h"
#include "ref_check.h"
#include "tap.h"

#define N_REQ 6
#define GEN 64
#define TOKENIZER_IDS 400
#define MODEL_VOCAB 450

static const char *model_dir;

/* An engine on device (NULL: the CPU) over the padded model, or NULL. */
static cbllm_engine *
NewEngine(const char *device)
{
	return ref_engine_sized(model_dir, device, (ref_engine_size) {8, 128, 256, 128, NULL});
}

/* What RunAll counts. */
typedef struct tally
{
	int			n_tokens;		/* tokens generated */
	int			n_outside;		/* of those, ids the tokenizer does not have */
	int			n_failed;		/* requests that failed */
} tally;

/* Count request i's new tokens, those outside the tokenizer, and its failure. */
static bool
CountTokens(void *arg, int i, const cbllm_output *o)
{
	tally	   *c = arg;

	c->n_tokens += o->n_tokens;
	for (int t = 0; t < o->n_tokens; t++)
		c->n_outside += o->tokens[t] < 0 || o->tokens[t] >= TOKENIZER_IDS;
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
RunAll(cbllm_engine *e, cbllm_sampling sp, tally *c)
{
	int64_t		ids[N_REQ];
	cbllm_err	err;

	memset(c, 0, sizeof(*c));
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

/* The padded rows load, and sampling never leaves the tokenizer's ids. */
static void
TestDevice(const char *device)
{
	const char *name = device ? device : "cpu";
	cbllm_engine *e = NewEngine(device);
	cbllm_engine_info info;
	cbllm_sampling hot = cbllm_sampling_default(),
				greedy = cbllm_sampling_default();
	tally		c;
	bool		ok;

	if (e == NULL)
	{
		TAP_OK(false, "%s: the padded model loads", name);
		return;
	}
	cbllm_engine_get_info(e, &info);
	TAP_OK(info.vocab_size == MODEL_VOCAB,
		   "%s: all %d rows of the padded embeddings load (the tokenizer has %d ids)", name,
		   info.vocab_size, TOKENIZER_IDS);
	hot.temperature = 3.0f;
	hot.top_p = 1.0f;
	hot.has_seed = true;
	for (int k = 0; k < 2; k++)
	{
		cbllm_sampling *sp = k == 0 ? &hot : &greedy;

		sp->max_tokens = GEN;
		sp->ignore_eos = true;
		ok = RunAll(e, *sp, &c);
		TAP_OK(ok && c.n_tokens == N_REQ * GEN && c.n_outside == 0 && c.n_failed == 0,
			   "%s: %s, %d tokens are all tokenizer ids and no request fails (%d outside, %d failed)",
			   name, k == 0 ? "at temperature 3" : "greedy", c.n_tokens, c.n_outside, c.n_failed);
	}
	cbllm_engine_destroy(e);
}

int
main(int argc, char **argv)
{
	if (argc < 2)
	{
		fprintf(stderr, "usage: test_vocab_padding PADDED_DIR [DEVICE]\n");
		return 2;
	}
	model_dir = argv[1];
	TestDevice(NULL);
	if (argc > 2)
		TestDevice(argv[2]);
	return tap_done();
}
