/*
 * cli_chat.c: cbllm-cli chat -m DIR --render
 *
 * Reads one JSON object from standard input, {"messages": [...],
 * "add_generation_prompt": true|false, ...}, renders DIR's chat template
 * with it and prints the prompt exactly, with no newline added.  Every other
 * key of the object is a template variable (enable_thinking, tools...).  DIR
 * needs only tokenizer_config.json (and chat_template.jinja if the model has
 * one).  The whole object goes to chat_render as its kwargs, so the messages
 * the template sees keep their numbers exactly as written (1.0 stays a
 * float); the messages are also passed on their own to be checked.
 */
#include "cli_chat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"

/* Print an error line; the exit status 1. */
static int
ChatFail(const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s\n", msg);
	return 1;
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
		msgs = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(req, "messages"));
		if (agp != NULL && !cJSON_IsBool(agp))
			status = ChatFail("add_generation_prompt must be true or false");
		else if (msgs == NULL)
			status = ChatFail("messages must be a JSON array");
		else if (chat_render(chat, msgs, strlen(msgs), cJSON_IsTrue(agp), in.data, in.len, &out, &err) != CBLLM_OK)
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

/* cbllm-cli chat: parse its options and run it. */
int
cli_chat_main(int argc, char **argv)
{
	const char *dir = NULL;
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
	return Render(dir);
}
