/*
 * cli_chat.c: cbllm-cli chat -m DIR --render
 *
 * Reads one JSON object from standard input, {"messages": [...],
 * "add_generation_prompt": true|false, ...}, renders DIR's chat template
 * with it and prints the prompt exactly, with no newline added.  Every other
 * key of the object is a template variable (enable_thinking, tools...).  DIR
 * needs only tokenizer_config.json (and chat_template.jinja if the model has
 * one).  The whole object goes to chat_render as its kwargs, and the
 * messages as their own text, cut from the input as written, so the
 * template sees their numbers exactly (1.0 stays a float), as it sees the
 * other variables'.
 *
 * A GGUF model (a .gguf file, or a directory holding one and no
 * tokenizer_config.json) is loaded as the engine loads it, and its
 * tokenizer.chat_template rendered by the engine (cbllm_engine_render_chat)
 * with the file's BOS and EOS texts.
 */
#include "cli_chat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "api/cbllm.h"
#include "chat/chat_template.h"
#include "model/model.h"

/* Print an error line; the exit status 1. */
static int
ChatFail(const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s\n", msg);
	return 1;
}

/* Skip JSON whitespace from s[i]. */
static size_t
SkipSpace(const char *s, size_t n, size_t i)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
		i++;
	return i;
}

/* The index just past the JSON value at s[i], in a text cJSON has accepted. */
static size_t
SkipValue(const char *s, size_t n, size_t i)
{
	int			depth = 0;
	bool		in_string = false;

	if (s[i] != '"' && s[i] != '[' && s[i] != '{')
	{
		while (i < n && strchr(",]} \t\r\n", s[i]) == NULL)
			i++;
		return i;
	}
	for (; i < n; i++)
	{
		if (in_string)
		{
			if (s[i] == '\\')
				i++;
			else if (s[i] == '"')
				in_string = false;
		}
		else if (s[i] == '"')
			in_string = true;
		else if (s[i] == '[' || s[i] == '{')
			depth++;
		else if (s[i] == ']' || s[i] == '}')
			depth--;
		if (!in_string && depth == 0)
			return i + 1;
	}
	return n;
}

/*
 * Where the value of the first member named key (written without escapes)
 * lies in the JSON object text s (n bytes) cJSON has accepted: true with
 * *at and *len, false when there is none.
 */
static bool
MemberText(const char *s, size_t n, const char *key, size_t *at, size_t *len)
{
	size_t		i = SkipSpace(s, n, 0),
				klen = strlen(key);

	if (i >= n || s[i] != '{')
		return false;
	for (i = SkipSpace(s, n, i + 1); i < n && s[i] == '"';)
	{
		size_t		k = i + 1,
					end = SkipValue(s, n, i),
					v;

		v = SkipSpace(s, n, end);
		if (v >= n || s[v] != ':')
			return false;
		v = SkipSpace(s, n, v + 1);
		i = SkipValue(s, n, v);
		if (end - k - 1 == klen && memcmp(s + k, key, klen) == 0)
		{
			*at = v;
			*len = i - v;
			return true;
		}
		i = SkipSpace(s, n, i);
		if (i < n && s[i] == ',')
			i = SkipSpace(s, n, i + 1);
	}
	return false;
}

/* Read all of standard input. */
static int
ReadStdin(cbllm_buf *b)
{
	char		chunk[65536];
	size_t		n;

	while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0)
		if (cbllm_buf_append(b, chunk, n) != CBLLM_OK)
			return -1;
	return ferror(stdin) ? -1 : 0;
}

/* Render the request on standard input with the template of a model directory. */
static int
Render(const char *dir)
{
	cbllm_buf	in = {0},
				out = {0};
	cbllm_err	err;
	cbllm_chat *chat = NULL;
	cJSON	   *req = NULL;
	char	   *msgs = NULL;
	size_t		at,
				mlen;
	const cJSON *agp;
	int			status = 1;

	if (ReadStdin(&in) != 0)
		return ChatFail("cannot read standard input");
	req = cJSON_ParseWithLength(in.data ? in.data : "", in.len);
	if (!cJSON_IsObject(req))
		status = ChatFail("standard input must be one JSON object {\"messages\": [...], ...}");
	else if (chat_load(dir, &chat, &err) != CBLLM_OK)
		status = ChatFail(err.msg);
	else if (chat == NULL)
		status = ChatFail("the model has no chat template");
	else
	{
		agp = cJSON_GetObjectItemCaseSensitive(req, "add_generation_prompt");
		if (!MemberText(in.data, in.len, "messages", &at, &mlen))
		{
			msgs = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(req, "messages"));
			at = 0;
			mlen = msgs != NULL ? strlen(msgs) : 0;
		}
		if (agp != NULL && !cJSON_IsBool(agp))
			status = ChatFail("add_generation_prompt must be true or false");
		else if (msgs == NULL && mlen == 0)
			status = ChatFail("messages must be a JSON array");
		else if (chat_render(chat, msgs != NULL ? msgs : in.data + at, mlen, cJSON_IsTrue(agp), in.data,
							 in.len, &out, &err) != CBLLM_OK)
			status = ChatFail(err.msg);
		else
		{
			fwrite(out.data, 1, out.len, stdout);
			status = fflush(stdout) == 0 ? 0 : 1;
		}
	}
	cJSON_free(msgs);
	cJSON_Delete(req);
	chat_free(chat);
	cbllm_buf_free(&in);
	cbllm_buf_free(&out);
	return status;
}

/* Render the request req with the chat template of the GGUF file at path, through the engine. */
static int
RenderGguf(const char *path, cJSON *req)
{
	cbllm_engine_params ep = {.model_dir = path, .n_threads = 1, .max_num_seqs = 1, .max_model_len = 16};
	cbllm_engine *e = NULL;
	cbllm_err	err;
	cbllm_buf	out = {0},
				payload = {0};
	char	   *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(req, "messages"));
	char	   *vars = NULL;
	const cJSON *agp = cJSON_GetObjectItemCaseSensitive(req, "add_generation_prompt");
	int			status = 1;

	/* the engine's default for a missing add_generation_prompt is true; --render's is false */
	if (agp == NULL)
		cJSON_AddBoolToObject(req, "add_generation_prompt", false);
	vars = cJSON_PrintUnformatted(req);
	if (msgs == NULL || vars == NULL)
		ChatFail("messages must be a JSON array");
	else if (cbllm_buf_append(&payload, msgs, strlen(msgs) + 1) != CBLLM_OK ||
			 cbllm_buf_append(&payload, vars, strlen(vars)) != CBLLM_OK)
		ChatFail("out of memory");
	else if (cbllm_engine_create(&ep, &e, &err) != CBLLM_OK ||
			 cbllm_engine_render_chat(e, payload.data, payload.len, &out, &err) != CBLLM_OK)
		ChatFail(err.msg);
	else
	{
		fwrite(out.data, 1, out.len, stdout);
		status = fflush(stdout) == 0 ? 0 : 1;
	}
	if (e != NULL)
		cbllm_engine_destroy(e);
	cJSON_free(msgs);
	cJSON_free(vars);
	cbllm_buf_free(&payload);
	cbllm_buf_free(&out);
	return status;
}

/* The GGUF file dir names (itself, or the one in it when it has no tokenizer_config.json), or NULL. */
static char *
GgufOf(const char *dir)
{
	char		config[4096];
	char	   *path = NULL;
	cbllm_err	err;

	snprintf(config, sizeof(config), "%s/tokenizer_config.json", dir);
	if (access(config, R_OK) == 0 || model_gguf_path(dir, &path, &err) != CBLLM_OK)
		return NULL;
	return path;
}

/* cbllm-cli chat: parse its options and run it. */
int
cli_chat_main(int argc, char **argv)
{
	const char *dir = NULL;
	char	   *gguf;
	bool		render = false;

	for (int i = 2; i < argc; i++)
	{
		if ((strcmp(argv[i], "-m") == 0 || strcmp(argv[i], "--model") == 0) && i + 1 < argc)
			dir = argv[++i];
		else if (strcmp(argv[i], "--render") == 0)
			render = true;
		else
		{
			fprintf(stderr, "cbllm-cli: error: chat: unknown option \"%s\"\n", argv[i]);
			return 1;
		}
	}
	if (dir == NULL || !render)
		return ChatFail("usage: cbllm-cli chat -m DIR --render   (a JSON request on standard input)");
	if ((gguf = GgufOf(dir)) != NULL)
	{
		cbllm_buf	in = {0};
		cJSON	   *req = NULL;
		int			status;

		if (ReadStdin(&in) != 0)
			status = ChatFail("cannot read standard input");
		else if (!cJSON_IsObject(req = cJSON_ParseWithLength(in.data ? in.data : "", in.len)))
			status = ChatFail("standard input must be one JSON object {\"messages\": [...], ...}");
		else
			status = RenderGguf(gguf, req);
		cJSON_Delete(req);
		cbllm_buf_free(&in);
		free(gguf);
		return status;
	}
	return Render(dir);
}
