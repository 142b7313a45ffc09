/*
 * engine_gguf.c: what a GGUF model file gives the engine beside its weights,
 * so that the file alone is a complete model:
 *   - the tokenizer, from tokenizer.ggml.* (tokenizer_gguf.c);
 *   - the stop ids: tokenizer.ggml.eos_token_id, and the end-of-turn and
 *     end-of-message ids (tokenizer.ggml.eot_token_id, eom_token_id) that
 *     chat models end their replies with, and every special token whose text
 *     llama.cpp takes for an end of generation (Gemma-3's <end_of_turn> in a
 *     file that names only <eos>: tokenizer_gguf_ends_generation), but, as
 *     llama.cpp, not a harmony vocabulary's <|end|> (gpt-oss ends a message
 *     with it and goes on: its answer ends at <|return|> or <|call|>); a GGUF
 *     file has no generation_config.json, so no sampling defaults either;
 *   - the chat template, tokenizer.chat_template, rendered with the texts of
 *     the BOS and EOS tokens as tokenizer_config.json would give them.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

/* Stop ids of a GGUF file beyond its EOS, read when present. */
static const char *const extra_stop_keys[] = {
	"tokenizer.ggml.eot_token_id",
	"tokenizer.ggml.eom_token_id",
};

/* The id among e's stop ids whose text is text, or -1. */
static int32_t
StopWithText(const cbllm_engine *e, const char *text)
{
	for (int i = 0; i < e->gen.n_eos; i++)
	{
		const char *piece = tokenizer_piece(e->tok, e->gen.eos_ids[i]);

		if (piece != NULL && strcmp(piece, text) == 0)
			return e->gen.eos_ids[i];
	}
	return -1;
}

/*
 * Drop <|end|> from the stop ids of a vocabulary that also stops at
 * <|return|> and <|call|> (harmony: gpt-oss's analysis message ends with
 * <|end|> and its final one follows) or at <|calls|> and <|flush|>, as
 * llama.cpp does.
 */
static void
DropHarmonyEnd(cbllm_engine *e)
{
	int32_t		end = StopWithText(e, "<|end|>");

	if (end >= 0 && ((StopWithText(e, "<|return|>") >= 0 && StopWithText(e, "<|call|>") >= 0) ||
					 (StopWithText(e, "<|calls|>") >= 0 && StopWithText(e, "<|flush|>") >= 0)))
		generation_config_remove_eos(&e->gen, end);
}

/* Add the file's EOS and end-of-turn ids to e's stop set. */
static int
LoadStops(cbllm_engine *e, const gguf_file *g, cbllm_err *err)
{
	int			n = tokenizer_vocab_size(e->tok);
	int			rc;

	memset(&e->gen, 0, sizeof(e->gen));
	e->eos_id = tokenizer_eos_id(e->tok);
	if (e->eos_id >= 0 && (rc = generation_config_add_eos(&e->gen, e->eos_id, err)) != CBLLM_OK)
		return rc;
	for (size_t i = 0; i < sizeof(extra_stop_keys) / sizeof(extra_stop_keys[0]); i++)
	{
		int32_t		id = -1;

		if ((rc = tokenizer_gguf_id(g, extra_stop_keys[i], n, &id, err)) != CBLLM_OK)
			return rc;
		if (id >= 0 && (rc = generation_config_add_eos(&e->gen, id, err)) != CBLLM_OK)
			return rc;
	}
	/* and, as llama.cpp, every special token whose text ends generation (while there is room) */
	for (int32_t id = 0; id < n && e->gen.n_eos < CBLLM_MAX_EOS_IDS; id++)
	{
		const char *piece = tokenizer_is_special(e->tok, id) ? tokenizer_piece(e->tok, id) : NULL;

		if (piece != NULL && tokenizer_gguf_ends_generation(piece, strlen(piece)) &&
			(rc = generation_config_add_eos(&e->gen, id, err)) != CBLLM_OK)
			return rc;
	}
	DropHarmonyEnd(e);
	return CBLLM_OK;
}

/* Put the text of token id under key in obj, when there is such a token. */
static bool
AddTokenText(cJSON *obj, const char *key, const cbllm_tokenizer *tok, int32_t id)
{
	const char *piece = id >= 0 ? tokenizer_piece(tok, id) : NULL;

	return piece == NULL || cJSON_AddStringToObject(obj, key, piece) != NULL;
}

/* The chat template of the file with a config naming its BOS and EOS texts. */
static int
LoadChat(cbllm_engine *e, const gguf_file *g, const char *template_file, cbllm_err *err)
{
	const gguf_value *v = gguf_find_key(g, "tokenizer.chat_template");
	cJSON	   *cfg = cJSON_CreateObject();
	char	   *config = NULL;
	int			rc;

	if (cfg == NULL ||
		!AddTokenText(cfg, "bos_token", e->tok, tokenizer_bos_id(e->tok)) ||
		!AddTokenText(cfg, "eos_token", e->tok, tokenizer_eos_id(e->tok)) ||
		(config = cJSON_PrintUnformatted(cfg)) == NULL)
	{
		cJSON_Delete(cfg);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	cJSON_Delete(cfg);
	if (v != NULL && v->type != GGUF_STRING)
	{
		free(config);
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.chat_template must be a string, found %s",
						  gguf_vtype_name(v->type));
	}
	/* the template is a view into the file: chat_load_from reads len bytes, no NUL needed */
	rc = engine_chat_load_texts(e, config, v != NULL ? v->str.ptr : NULL, v != NULL ? v->str.len : 0,
								"GGUF tokenizer.chat_template", template_file, err);
	free(config);
	return rc;
}

/* Load e's tokenizer, stop ids and chat template from its model's GGUF file. */
int
engine_gguf_load_text(cbllm_engine *e, const char *template_file, cbllm_err *err)
{
	const gguf_file *g = e->model->gguf;
	int			rc;

	if ((rc = tokenizer_load_gguf(g, &e->tok, err)) != CBLLM_OK ||
		(rc = LoadStops(e, g, err)) != CBLLM_OK)
		return rc;
	return LoadChat(e, g, template_file, err);
}
