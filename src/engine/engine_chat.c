/*
 * engine_chat.c: the engine's chat template.  It is loaded with the model
 * (chat_template.h); a model without one, or with one the interpreter cannot
 * compile, still serves plain prompts: the reason is kept and every chat
 * request gets it as its error.  Rendering reads the CBLLM_CHAT_PAYLOAD of a
 * request: the messages' JSON, a NUL, the template variables' JSON object.
 * The vocabulary's reasoning markers (chat/reasoning.h) are found with the
 * template: they say how a chat answer splits into reasoning and content.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_template.h"
#include "engine/engine_internal.h"

/*
 * Compile jinja (jinja_len bytes) with config, the text of a
 * tokenizer_config.json or NULL (for its special tokens), as e's template;
 * an error names where the template came from.
 */
static int
LoadTexts(cbllm_engine *e, const char *config, size_t config_len, const char *jinja,
		  size_t jinja_len, const char *name, cbllm_err *err)
{
	int			rc = chat_load_from(config, config_len, jinja, jinja_len, &e->chat, err);

	if (rc != CBLLM_OK)
	{
		char		msg[CBLLM_ERR_MSG_LEN];

		e->chat = NULL;
		snprintf(msg, sizeof(msg), "%s", err->msg);
		rc = cbllm_fail(err, rc, "%s: %s", name, msg);
	}
	return rc;
}

/* Load template_file with config (NULL: none): the template a setting gives instead of the model's. */
static int
LoadGiven(cbllm_engine *e, const char *config, size_t config_len, const char *template_file,
		  cbllm_err *err)
{
	char	   *jinja = NULL;
	size_t		jinja_len = 0;
	int			rc;

	if ((rc = cbllm_read_file(template_file, &jinja, &jinja_len, err)) != CBLLM_OK)
		return rc;
	rc = LoadTexts(e, config, config_len, jinja, jinja_len, template_file, err);
	free(jinja);
	return rc;
}

/* The id of the token whose whole text is text (an added token's), or -1. */
static int32_t
MarkerId(const char *text, void *arg)
{
	const cbllm_tokenizer *tok = arg;
	tokenizer_encode_opts o = {.add_bos = false, .parse_special = true};
	int32_t    *ids = NULL,
				id = -1;
	int			n = 0;
	cbllm_err	err;
	const char *piece;

	if (tokenizer_encode(tok, text, strlen(text), o, &ids, &n, &err) == CBLLM_OK && n == 1 &&
		(piece = tokenizer_piece(tok, ids[0])) != NULL && strcmp(piece, text) == 0)
		id = ids[0];
	free(ids);
	return id;
}

/* Find e's reasoning markers in its tokenizer's vocabulary. */
static void
FindMarkers(cbllm_engine *e)
{
	e->reasoning = reasoning_markers_find(MarkerId, e->tok);
}

/* Load the chat template into e: template_file (NULL: none), else dir's own. */
int
engine_chat_load(cbllm_engine *e, const char *dir, const char *template_file, cbllm_err *err)
{
	cbllm_err	own;

	FindMarkers(e);
	e->chat = NULL;
	e->chat_error[0] = '\0';
	if (template_file != NULL && template_file[0] != '\0')
	{
		char		path[4096];
		char	   *config = NULL;
		size_t		config_len = 0;
		int			rc;

		snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
		if ((rc = cbllm_read_file_if_exists(path, &config, &config_len, err)) != CBLLM_OK)
			return rc;
		rc = LoadGiven(e, config, config_len, template_file, err);
		free(config);
		return rc;
	}
	if (chat_load(dir, &e->chat, &own) != CBLLM_OK)
	{
		e->chat = NULL;
		snprintf(e->chat_error, sizeof(e->chat_error), "%s", own.msg);
	}
	return CBLLM_OK;
}

/*
 * Load the chat template into e from texts in memory (a GGUF file's
 * tokenizer.chat_template, NULL when it has none, and a config naming the
 * special tokens): template_file instead when one is given.  As from a
 * directory, a model's own template that does not compile leaves plain
 * prompts served and the reason kept.
 */
int
engine_chat_load_texts(cbllm_engine *e, const char *config, const char *jinja, size_t jinja_len,
					   const char *name, const char *template_file, cbllm_err *err)
{
	cbllm_err	own;
	size_t		config_len = config != NULL ? strlen(config) : 0;

	FindMarkers(e);
	e->chat = NULL;
	e->chat_error[0] = '\0';
	if (template_file != NULL && template_file[0] != '\0')
		return LoadGiven(e, config, config_len, template_file, err);
	if (jinja == NULL)
		snprintf(e->chat_error, sizeof(e->chat_error), "the model has no chat template (%s)", name);
	else if (LoadTexts(e, config, config_len, jinja, jinja_len, name, &own) != CBLLM_OK)
		snprintf(e->chat_error, sizeof(e->chat_error), "%s", own.msg);
	return CBLLM_OK;
}

/* Free e's chat template. */
void
engine_chat_free(cbllm_engine *e)
{
	chat_free(e->chat);
	e->chat = NULL;
}

/* Whether the variables' JSON asks for the generation prompt (true unless it says false). */
static int
GenerationPrompt(const char *vars, size_t len, bool *agp, cbllm_err *err)
{
	cJSON	   *root;
	const cJSON *v;
	int			rc = CBLLM_OK;

	*agp = true;
	if (json_too_deep(vars, len, CBLLM_JSON_MAX_DEPTH))
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "the template variables are nested too deeply (more than %d levels)",
						  CBLLM_JSON_MAX_DEPTH);
	root = cJSON_ParseWithLength(vars, len);
	if (root == NULL || !cJSON_IsObject(root))
		rc = cbllm_fail(err, CBLLM_ERR_INVALID, "the template variables must be a JSON object");
	else if ((v = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt")) != NULL &&
			 !cJSON_IsNull(v))
	{
		if (!cJSON_IsBool(v))
			rc = cbllm_fail(err, CBLLM_ERR_INVALID, "add_generation_prompt must be true or false");
		else
			*agp = cJSON_IsTrue(v);
	}
	cJSON_Delete(root);
	return rc;
}

/* Render a chat payload with e's template, appending the prompt to out. */
int
cbllm_engine_render_chat(const cbllm_engine *e, const char *payload, size_t len, cbllm_buf *out,
						 cbllm_err *err)
{
	const char *nul = memchr(payload, '\0', len);
	const char *vars;
	size_t		mlen,
				vlen;
	cbllm_buf	prompt = {0};
	bool		agp;
	int			rc;

	if (e->chat == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s",
						  e->chat_error[0] ? e->chat_error :
						  "the model has no chat template (tokenizer_config.json has no chat_template and there is no chat_template.jinja)");
	if (nul == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "a chat request needs its messages and template variables");
	mlen = (size_t) (nul - payload);
	vars = nul + 1;
	vlen = len - mlen - 1;
	if ((rc = GenerationPrompt(vars, vlen, &agp, err)) != CBLLM_OK)
		return rc;
	rc = chat_render(e->chat, payload, mlen, agp, vars, vlen, &prompt, err);
	if (rc == CBLLM_OK && prompt.len > 0 && cbllm_buf_append(out, prompt.data, prompt.len) != CBLLM_OK)
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the rendered prompt");
	cbllm_buf_free(&prompt);
	return rc;
}
