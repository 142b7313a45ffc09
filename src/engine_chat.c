/*
 * engine_chat.c: the engine's chat template.  It is loaded with the model
 * (chat_template.h); a model without one, or with one the interpreter cannot
 * compile, still serves plain prompts: the reason is kept and every chat
 * request gets it as its error.  Rendering reads the CBLLM_CHAT_PAYLOAD of a
 * request: the messages' JSON, a NUL, the template variables' JSON object.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "chat_template.h"
#include "engine_internal.h"

/* Load dir's chat template into e (a failure is kept in e->chat_error). */
void
engine_chat_load(cbllm_engine *e, const char *dir)
{
	cbllm_err	err;

	e->chat = NULL;
	e->chat_error[0] = '\0';
	if (chat_load(dir, &e->chat, &err) != CBLLM_OK)
	{
		e->chat = NULL;
		snprintf(e->chat_error, sizeof(e->chat_error), "%s", err.msg);
	}
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
	cJSON	   *root = cJSON_ParseWithLength(vars, len);
	const cJSON *v;
	int			rc = CBLLM_OK;

	*agp = true;
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
