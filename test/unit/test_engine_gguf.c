/*
 * test_engine_gguf.c: a GGUF file alone gives the engine its chat template
 * and its end-of-turn stops.
 *
 * usage: test_engine_gguf HF_DIR GGUF_DIR CHAT_JSONL EOT_ID [NO_EOT_DIR]
 *   HF_DIR    a checkpoint with a real tokenizer and its chat template
 *             (tokenizer_config.json)
 *   GGUF_DIR  the same checkpoint converted by hf_to_gguf.py --eot-id EOT_ID:
 *             a directory holding only model.gguf
 *   CHAT_JSONL  that tokenizer's conversations with the prompts HF
 *             transformers rendered from them (test/data/tokenizers/.../chat.jsonl)
 *   NO_EOT_DIR  the same converted without --eot-id (optional)
 *
 * Checks, on the engine made from the GGUF directory:
 *   - every conversation renders through cbllm_engine_render_chat (the
 *     template read from tokenizer.chat_template) to transformers' text;
 *   - EOT_ID (tokenizer.ggml.eot_token_id) and the file's eos are stop ids,
 *     while the HF directory's engine, which has no such key, does not stop
 *     at EOT_ID; an ordinary token is no stop;
 *   - with NO_EOT_DIR: EOT_ID is a stop id all the same, its text being one
 *     llama.cpp ends generation at, and the special token after it is not.
 *
 * usage: test_engine_gguf --harmony GGUF_DIR
 *   GGUF_DIR  a gpt-oss file whose vocabulary has the harmony tokens, all
 *             special, at gpt-oss's ids (test/tools/harmony_tokenizer.py
 *             --all-special, then hf_to_gguf.py)
 * Checks that it stops at <|return|> and <|call|> (and <|endoftext|>) but
 * not at <|end|>, which ends the analysis message before the answer, though
 * <|end|>'s text is one llama.cpp ends generation at in other vocabularies.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "chat_cases.h"
#include "base/util.h"
#include "engine/engine_internal.h"
#include "model/generation_config.h"

static cbllm_engine *
Open(const char *dir)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err = {{0}};

	p.model_dir = dir;
	p.device = "cpu";
	p.n_threads = 1;
	p.max_num_seqs = 2;
	p.max_model_len = 256;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
	{
		TAP_DIAG("engine on %s: %s", dir, err.msg);
		return NULL;
	}
	return e;
}

/* chat_render_fn through the engine: the payload its chat requests carry. */
static int
RenderEngine(void *arg, const char *messages, size_t len, bool add_generation_prompt, cbllm_buf *out,
			 cbllm_err *err)
{
	const char *vars = add_generation_prompt ? "{\"add_generation_prompt\":true}" :
		"{\"add_generation_prompt\":false}";
	cbllm_buf	payload = {0};
	int			rc;

	/* the messages, a NUL, the template variables */
	if (cbllm_buf_append(&payload, messages, len) != CBLLM_OK || cbllm_buf_append(&payload, "", 1) != CBLLM_OK ||
		cbllm_buf_append(&payload, vars, strlen(vars)) != CBLLM_OK)
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	else
		rc = cbllm_engine_render_chat(arg, payload.data, payload.len, out, err);
	cbllm_buf_free(&payload);
	return rc;
}

/* --harmony: the stop ids of a harmony vocabulary's GGUF file. */
static int
Harmony(const char *dir)
{
	cbllm_engine *e = Open(dir);
	const char *end = e ? tokenizer_piece(e->tok, 200007) : NULL;

	TAP_OK(e != NULL, "an engine made from the harmony GGUF file alone");
	if (e == NULL)
		return tap_done();
	TAP_OK(generation_config_is_eos(&e->gen, 200002) && generation_config_is_eos(&e->gen, 200012) &&
		   generation_config_is_eos(&e->gen, 199999),
		   "a harmony vocabulary stops at <|return|> (200002), <|call|> (200012) and <|endoftext|> (199999)");
	TAP_OK(end != NULL && strcmp(end, "<|end|>") == 0 && tokenizer_is_special(e->tok, 200007) &&
		   tokenizer_gguf_ends_generation(end, strlen(end)) && !generation_config_is_eos(&e->gen, 200007),
		   "but not at <|end|> (200007, special, a text llama.cpp ends generation at elsewhere): the answer "
		   "follows the analysis message it ends");
	cbllm_engine_destroy(e);
	return tap_done();
}

int
main(int argc, char **argv)
{
	cbllm_engine *g,
			   *h;
	int			eot,
				total,
				same;

	if (argc == 3 && strcmp(argv[1], "--harmony") == 0)
		return Harmony(argv[2]);
	if (argc != 5 && argc != 6)
	{
		fprintf(stderr, "usage: test_engine_gguf HF_DIR GGUF_DIR CHAT_JSONL EOT_ID [GGUF_DIR_WITHOUT_EOT_KEY]\n"
				"       test_engine_gguf --harmony GGUF_DIR\n");
		return 2;
	}
	eot = atoi(argv[4]);
	g = Open(argv[2]);
	h = Open(argv[1]);
	TAP_OK(g != NULL && h != NULL, "engines made from the GGUF file alone and from the HF directory");
	if (g == NULL || h == NULL)
		return tap_done();

	total = chat_cases_run(argv[3], RenderEngine, g, &same);
	TAP_OK(total > 0 && same == total,
		   "the GGUF file's tokenizer.chat_template renders %d/%d conversations as transformers does",
		   same, total);

	TAP_OK(generation_config_is_eos(&g->gen, eot),
		   "the GGUF file's tokenizer.ggml.eot_token_id (%d) is a stop id", eot);
	TAP_OK(g->eos_id >= 0 && generation_config_is_eos(&g->gen, g->eos_id),
		   "the GGUF file's eos (%d) is a stop id", g->eos_id);
	TAP_OK(!generation_config_is_eos(&h->gen, eot),
		   "the HF directory, with no end-of-turn key, does not stop at %d", eot);
	TAP_OK(!generation_config_is_eos(&g->gen, 100), "an ordinary token (100) is no stop id");
	if (argc == 6)
	{
		cbllm_engine *k = Open(argv[5]);
		const char *eot_text = k ? tokenizer_piece(k->tok, eot) : NULL;

		TAP_OK(k != NULL && eot_text != NULL && tokenizer_gguf_ends_generation(eot_text, strlen(eot_text)) &&
			   generation_config_is_eos(&k->gen, eot),
			   "a GGUF file without tokenizer.ggml.eot_token_id still stops at %d (%s), whose text ends "
			   "generation for llama.cpp", eot, eot_text ? eot_text : "?");
		TAP_OK(k != NULL && tokenizer_is_special(k->tok, eot + 1) && !generation_config_is_eos(&k->gen, eot + 1),
			   "a special token whose text is no end of generation (%d, %s) is no stop id", eot + 1,
			   k && tokenizer_piece(k->tok, eot + 1) ? tokenizer_piece(k->tok, eot + 1) : "?");
		if (k != NULL)
			cbllm_engine_destroy(k);
	}

	cbllm_engine_destroy(g);
	cbllm_engine_destroy(h);
	return tap_done();
}
