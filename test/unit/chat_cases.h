/*
 * chat_cases.h: the conversations of a tokenizer's chat.jsonl
 * (test/data/tokenizers/.../chat.jsonl: messages, add_generation_prompt and
 * the prompt HF transformers rendered), one line each, handed to a renderer
 * whose output is compared byte for byte.
 */
#ifndef CBLLM_TEST_CHAT_CASES_H
#define CBLLM_TEST_CHAT_CASES_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "tap.h"

/* Render messages (their JSON, len bytes) into out; a status and err as the engine's. */
typedef int (*chat_render_fn) (void *arg, const char *messages, size_t len, bool add_generation_prompt,
							   cbllm_buf *out, cbllm_err *err);

/* Shows where a rendering parts from the expected text. */
static inline void
chat_cases_diff(const char *got, size_t len, const char *want)
{
	size_t		i = 0,
				n = strlen(want);

	while (i < len && i < n && got[i] == want[i])
		i++;
	TAP_DIAG("first difference at byte %zu: got \"%.60s\" want \"%.60s\"", i, len > 0 ? got + i : "",
			 want + i);
}

/*
 * Every case of the chat.jsonl at path through render: the number of cases
 * (0 when the file cannot be read), the number rendered to the expected text
 * into *same.
 */
static inline int
chat_cases_run(const char *path, chat_render_fn render, void *arg, int *same)
{
	char	   *text = NULL;
	size_t		len;
	cbllm_err	err = {{0}};
	int			total = 0;

	*same = 0;
	if (cbllm_read_file(path, &text, &len, &err) != CBLLM_OK)
	{
		TAP_DIAG("%s", err.msg);
		return 0;
	}
	for (char *line = text, *nl; line < text + len && *line; line = nl + 1)
	{
		cJSON	   *rec;
		char	   *msgs;
		cbllm_buf	out = {0};
		const cJSON *want;

		nl = strchr(line, '\n');
		if (nl == NULL)
			nl = text + len;
		rec = cJSON_ParseWithLength(line, (size_t) (nl - line));
		if (rec == NULL)
			continue;
		total++;
		msgs = cJSON_PrintUnformatted(cJSON_GetObjectItem(rec, "messages"));
		want = cJSON_GetObjectItem(rec, "rendered");
		if (msgs == NULL || !cJSON_IsString(want))
			TAP_DIAG("case %d: no messages or no rendered text", total);
		else if (render(arg, msgs, strlen(msgs), cJSON_IsTrue(cJSON_GetObjectItem(rec, "add_generation_prompt")),
						&out, &err) != CBLLM_OK)
			TAP_DIAG("case %d: %s", total, err.msg);
		else if (out.len == strlen(want->valuestring) && memcmp(out.data, want->valuestring, out.len) == 0)
			(*same)++;
		else
			chat_cases_diff(out.data, out.len, want->valuestring);
		cbllm_buf_free(&out);
		cJSON_free(msgs);
		cJSON_Delete(rec);
	}
	free(text);
	return total;
}

#endif
