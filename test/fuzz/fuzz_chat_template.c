/*
 * fuzz_chat_template.c: a chat template and a message list (chat_load_from,
 * chat_render).  The input is the template text, then optionally a NUL byte
 * and the messages' JSON (default: a short user/assistant exchange).  A
 * template that compiles is rendered with and without the generation
 * prompt; a render must succeed within the output limit or fail with a
 * message that names the template or the messages.  The lexer, parser,
 * evaluator and builtins all run on hostile input, under the step, memory,
 * output and nesting limits.
 */
#include "fuzz.h"

#include "chat/chat_template.h"
#include "chat/jinja_eval.h"

static const char default_messages[] =
	"[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \" hi <think>x</think>\"},"
	" {\"role\": \"assistant\", \"content\": \"a\", \"tool_calls\": [{\"function\": {\"name\": \"f\","
	" \"arguments\": {\"x\": 1.5}}}]}, {\"role\": \"tool\", \"content\": \"r\"}]";

/* Whether a failed render's message says where it failed. */
static int
NamesItself(const cbllm_err *err)
{
	return strncmp(err->msg, "chat template", 13) == 0 || strncmp(err->msg, "messages", 8) == 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t		tlen = nul ? (size_t) (nul - data) : size;
	char	   *tmpl = fuzz_text(data, tlen);
	char	   *msgs = nul ? fuzz_text(nul + 1, size - tlen - 1) : NULL;
	const char *m = msgs ? msgs : default_messages;
	size_t		mlen = msgs ? size - tlen - 1 : sizeof(default_messages) - 1;
	cbllm_chat *chat = NULL;
	cbllm_err	err;
	int			rc;

	if (tmpl == NULL || (nul && msgs == NULL))
		goto done;
	err.msg[0] = '\0';
	rc = chat_load_from(NULL, 0, tmpl, tlen, &chat, &err);
	if (rc != CBLLM_OK)
	{
		FUZZ_CHECK(chat == NULL && strncmp(err.msg, "chat template", 13) == 0, "a load failure names the template");
		goto done;
	}
	FUZZ_CHECK(chat != NULL, "a template text always gives a template");
	for (int agp = 0; agp < 2; agp++)
	{
		cbllm_buf	out = {0};

		err.msg[0] = '\0';
		rc = chat_render(chat, m, mlen, agp, "{\"enable_thinking\": false}", 26, &out, &err);
		if (rc == CBLLM_OK)
			FUZZ_CHECK(out.len <= JINJA_MAX_OUTPUT && out.data != NULL && out.data[out.len] == '\0',
					   "a render fits the output limit, NUL-terminated");
		else
			FUZZ_CHECK(rc < 0 && NamesItself(&err), "a render failure names the template or the messages");
		cbllm_buf_free(&out);
	}
done:
	chat_free(chat);
	free(tmpl);
	free(msgs);
	return 0;
}
