/*
 * chat_template.c: find a model's chat template, compile it once, and render
 * a message list with the variables transformers passes (chat_template.h).
 *
 * The compiled template and the special-token object are immutable after
 * loading, and each render owns everything it allocates, so renders of one
 * cbllm_chat may run on several threads at once.  Messages are checked
 * before the template runs, so a malformed list fails with a message naming
 * the element ("messages[1].role must be a string") rather than somewhere in
 * the template.
 */
#include "chat/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/jinja.h"

struct cbllm_chat
{
	jinja_template *tmpl;
	cJSON	   *tokens;			/* {"bos_token": "<s>", ...}: the special tokens that are set */
};

/* The special-token keys of tokenizer_config.json that become template variables. */
static const char *const TOKEN_KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
"cls_token", "mask_token", NULL};

/* A token entry's text: a string, or an object's "content"; NULL otherwise. */
static const char *
TokenText(const cJSON *v)
{
	if (cJSON_IsString(v))
		return v->valuestring;
	if (cJSON_IsObject(v))
	{
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");

		if (cJSON_IsString(c))
			return c->valuestring;
	}
	return NULL;
}

/* Collect the config's special tokens into an object of strings. */
static int
SpecialTokens(const cJSON *cfg, cJSON **out, cbllm_err *err)
{
	cJSON	   *t = cJSON_CreateObject();
	const cJSON *extra = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "additional_special_tokens") : NULL;

	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
	for (int i = 0; cfg != NULL && TOKEN_KEYS[i] != NULL; i++)
	{
		const char *s = TokenText(cJSON_GetObjectItemCaseSensitive(cfg, TOKEN_KEYS[i]));

		if (s != NULL && cJSON_AddStringToObject(t, TOKEN_KEYS[i], s) == NULL)
			goto nomem;
	}
	if (cJSON_IsArray(extra) && cJSON_GetArraySize(extra) > 0)
	{
		cJSON	   *list = cJSON_AddArrayToObject(t, "additional_special_tokens");

		if (list == NULL)
			goto nomem;
		for (const cJSON *e = extra->child; e != NULL; e = e->next)
		{
			const char *s = TokenText(e);

			if (s != NULL && !cJSON_AddItemToArray(list, cJSON_CreateString(s)))
				goto nomem;
		}
	}
	*out = t;
	return CBLLM_OK;
nomem:
	cJSON_Delete(t);
	return cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
}

/* The template text of a config's "chat_template" (string, or the "default" of a list); NULL if none. */
static int
ConfigTemplate(const cJSON *cfg, const char **text, cbllm_err *err)
{
	const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");

	*text = NULL;
	if (ct == NULL || cJSON_IsNull(ct))
		return CBLLM_OK;
	if (cJSON_IsString(ct))
	{
		*text = ct->valuestring;
		return CBLLM_OK;
	}
	if (!cJSON_IsArray(ct))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "tokenizer_config.json: chat_template must be a string or a list of {name, template}");
	for (const cJSON *e = ct->child; e != NULL; e = e->next)
	{
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name"),
				   *tmpl = cJSON_GetObjectItemCaseSensitive(e, "template");

		if (!cJSON_IsString(name) || !cJSON_IsString(tmpl))
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "tokenizer_config.json: each chat_template entry needs string name and template");
		if (strcmp(name->valuestring, "default") == 0)
			*text = tmpl->valuestring;
	}
	if (*text == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "tokenizer_config.json: chat_template has no \"default\" entry");
	return CBLLM_OK;
}

/* Load from texts in memory. */
int
chat_load_from(const char *config_json, size_t config_len, const char *jinja, size_t jinja_len,
			   cbllm_chat **out, cbllm_err *err)
{
	cJSON	   *cfg = NULL;
	const char *text = jinja;
	size_t		text_len = jinja_len;
	cbllm_chat *c;
	int			rc;

	*out = NULL;
	if (config_json != NULL)
	{
		cfg = cJSON_ParseWithLength(config_json, config_len);
		if (cfg == NULL || !cJSON_IsObject(cfg))
		{
			cJSON_Delete(cfg);
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "tokenizer_config.json: not a JSON object");
		}
		if (text == NULL)
		{
			rc = ConfigTemplate(cfg, &text, err);
			if (rc != CBLLM_OK)
			{
				cJSON_Delete(cfg);
				return rc;
			}
			text_len = text ? strlen(text) : 0;
		}
	}
	if (text == NULL)
	{
		cJSON_Delete(cfg);
		return CBLLM_OK;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL)
	{
		cJSON_Delete(cfg);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
	}
	rc = jinja_compile(text, text_len, &c->tmpl, err);
	if (rc == CBLLM_OK)
		rc = SpecialTokens(cfg, &c->tokens, err);
	cJSON_Delete(cfg);
	if (rc != CBLLM_OK)
	{
		chat_free(c);
		return rc;
	}
	*out = c;
	return CBLLM_OK;
}

/* Read dir/name when it exists: *text NULL when absent. */
static int
ReadOptional(const char *dir, const char *name, char **text, size_t *len, cbllm_err *err)
{
	char	   *path = cbllm_path_join(dir, name);
	int			rc;

	*text = NULL;
	*len = 0;
	if (path == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
	rc = cbllm_read_file_if_exists(path, text, len, err);
	free(path);
	return rc;
}

/* Load a model directory's template. */
int
chat_load(const char *dir, cbllm_chat **out, cbllm_err *err)
{
	char	   *cfg = NULL,
			   *jinja = NULL;
	size_t		cfg_len,
				jinja_len;
	int			rc;

	*out = NULL;
	rc = ReadOptional(dir, "tokenizer_config.json", &cfg, &cfg_len, err);
	if (rc == CBLLM_OK)
		rc = ReadOptional(dir, "chat_template.jinja", &jinja, &jinja_len, err);
	if (rc == CBLLM_OK)
		rc = chat_load_from(cfg, cfg_len, jinja, jinja_len, out, err);
	free(cfg);
	free(jinja);
	return rc;
}

/* Check the message list's shape, naming the first bad element. */
static int
CheckMessages(const cJSON *m, cbllm_err *err)
{
	int			i = 0;

	if (!cJSON_IsArray(m))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "messages must be a JSON array");
	for (const cJSON *e = m->child; e != NULL; e = e->next, i++)
	{
		const cJSON *content;

		if (!cJSON_IsObject(e))
			return cbllm_fail(err, CBLLM_ERR_INVALID, "messages[%d] is not an object", i);
		if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "role")))
			return cbllm_fail(err, CBLLM_ERR_INVALID, "messages[%d].role must be a string", i);
		content = cJSON_GetObjectItemCaseSensitive(e, "content");
		if (content != NULL && !cJSON_IsString(content) && !cJSON_IsNull(content))
		{
			if (!cJSON_IsArray(content))
				return cbllm_fail(err, CBLLM_ERR_INVALID, "messages[%d].content must be a string or null", i);
			for (const cJSON *p = content->child; p != NULL; p = p->next)
				if (!cJSON_IsObject(p) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "type")))
					return cbllm_fail(err, CBLLM_ERR_INVALID,
									  "messages[%d].content must be a string, null or a list of {\"type\", ...} parts", i);
		}
	}
	return CBLLM_OK;
}

/* Render a message list. */
int
chat_render(const cbllm_chat *c, const char *messages_json, size_t messages_len,
			bool add_generation_prompt, const char *kwargs_json, size_t kwargs_len,
			cbllm_buf *out, cbllm_err *err)
{
	cJSON	   *msgs = NULL,
			   *kwargs = NULL,
			   *defaults = NULL;
	jinja_var	vars[4];
	int			rc;

	if (c == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "the model has no chat template");
	if (json_too_deep(messages_json, messages_len, CBLLM_JSON_MAX_DEPTH))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "messages are nested too deeply (more than %d levels)",
						  CBLLM_JSON_MAX_DEPTH);
	msgs = cJSON_ParseWithLength(messages_json, messages_len);
	if (msgs == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "messages must be a JSON array");
	rc = CheckMessages(msgs, err);
	if (rc == CBLLM_OK && kwargs_json != NULL)
	{
		if (json_too_deep(kwargs_json, kwargs_len, CBLLM_JSON_MAX_DEPTH))
			rc = cbllm_fail(err, CBLLM_ERR_INVALID,
							"chat template kwargs are nested too deeply (more than %d levels)",
							CBLLM_JSON_MAX_DEPTH);
		else if (!cJSON_IsObject(kwargs = cJSON_ParseWithLength(kwargs_json, kwargs_len)))
			rc = cbllm_fail(err, CBLLM_ERR_INVALID, "chat template kwargs must be a JSON object");
	}
	if (rc == CBLLM_OK)
	{
		defaults = cJSON_CreateObject();
		if (defaults == NULL || cJSON_AddNullToObject(defaults, "tools") == NULL ||
			cJSON_AddNullToObject(defaults, "documents") == NULL ||
			cJSON_AddBoolToObject(defaults, "add_generation_prompt", add_generation_prompt) == NULL)
			rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "chat template: out of memory");
	}
	if (rc == CBLLM_OK)
	{
		int			n = 0;

		/* later ones win: the messages argument over a "messages" key of the kwargs */
		vars[n++] = (jinja_var) {NULL, c->tokens, NULL, 0, true};
		vars[n++] = (jinja_var) {NULL, defaults, NULL, 0, true};
		if (kwargs != NULL)
			vars[n++] = (jinja_var) {NULL, kwargs, kwargs_json, kwargs_len, true};
		vars[n++] = (jinja_var) {"messages", msgs, messages_json, messages_len, false};
		rc = jinja_render(c->tmpl, vars, n, out, err);
	}
	cJSON_Delete(msgs);
	cJSON_Delete(kwargs);
	cJSON_Delete(defaults);
	return rc;
}

/* Free a loaded template. */
void
chat_free(cbllm_chat *c)
{
	if (c == NULL)
		return;
	jinja_free(c->tmpl);
	cJSON_Delete(c->tokens);
	free(c);
}
