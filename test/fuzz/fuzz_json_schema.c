/*
 * fuzz_json_schema.c: json_schema_to_regex (src/constrain/json_schema.c) over
 * arbitrary schema text, and the regex compiler (src/regex_*.c) over what it
 * makes.  Promised: a refusal leaves the output as it was and has a
 * status of the documented ones and a message, a NUL-terminated line
 * starting "json_schema: "; an accepted schema gives a regex of at most
 * 1 MiB that the regex compiler refuses only for its limits (never as
 * malformed or as matching nothing); where it compiles, the shortest
 * document the automaton admits and one random walk through it are single
 * JSON values (cJSON reads each whole).
 */
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "base/utf8.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"

#define MAX_COMPILE (32 << 10)	/* compile regexes up to this size (speed) */
#define MAX_DOC (64 << 10)		/* walk documents up to this size */

/* Whether s[0..n) is UTF-8 without control characters. */
static int
CleanUtf8(const char *s, size_t n)
{
	for (size_t i = 0; i < n;)
	{
		int			len = (unsigned char) s[i] < 0x20 ? 0 : utf8_len(s + i, n - i);

		if (len == 0)
			return 0;
		i += (size_t) len;
	}
	return 1;
}

/* Whether err holds a message, one line of UTF-8 that starts with prefix. */
static int
MessageOk(const cbllm_err *err, const char *prefix)
{
	size_t		n = strnlen(err->msg, sizeof(err->msg));

	return n > strlen(prefix) && n < sizeof(err->msg) && strncmp(err->msg, prefix, strlen(prefix)) == 0 &&
		CleanUtf8(err->msg, n);
}

/*
 * Walk d from its start to a match: shortest (random false: the first
 * byte of each step that brings the match nearer) or random (any allowed
 * byte while under 256 bytes, then nearer ones), and check that the
 * document is one JSON value.
 */
static void
Walk(const cbllm_dfa *d, bool random, uint32_t seed)
{
	cbllm_buf	doc = {0};
	int32_t		s = 0;
	cJSON	   *v;
	const char *end = NULL;

	while (doc.len < MAX_DOC)
	{
		bool		near = !random || doc.len >= 256;
		int			picked = -1,
					seen = 0;

		if (d->accept[s] && (near || (seed >> 28) == 0))
			break;
		seed = seed * 1103515245u + 12345u;
		for (int b = 0; b < 256; b++)
		{
			int32_t		t = dfa_next(d, s, (uint8_t) b);

			if (t < 0 || (near && d->dist[t] >= d->dist[s]))
				continue;
			if (!random)
			{
				picked = b;
				break;
			}
			if (seed % (uint32_t) ++seen == 0)	/* reservoir: each byte equally likely */
				picked = b;
			seed = seed * 1103515245u + 12345u;
		}
		FUZZ_CHECK(picked >= 0 || d->accept[s], "every state reaches a match");
		if (picked < 0)
			break;
		cbllm_buf_append(&doc, &(char) {(char) picked}, 1);
		s = dfa_next(d, s, (uint8_t) picked);
	}
	if (doc.len < MAX_DOC)
	{
		FUZZ_CHECK(d->accept[s], "the walk ends at a match");
		v = cJSON_ParseWithLengthOpts(doc.data, doc.len, &end, false);
		FUZZ_CHECK(v != NULL && end == doc.data + doc.len, "a document the regex admits is one JSON value");
		cJSON_Delete(v);
	}
	cbllm_buf_free(&doc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = fuzz_text(data, size);
	cbllm_buf	out = {0};
	cbllm_err	err;
	cbllm_dfa  *d = NULL;
	int			rc;

	if (text == NULL)
		return 0;
	memset(err.msg, 'x', sizeof(err.msg));
	cbllm_buf_append(&out, "prefix", 6);
	rc = json_schema_to_regex(text, size, &out, &err);
	if (rc != CBLLM_OK)
	{
		FUZZ_CHECK(rc == CBLLM_ERR_FORMAT || rc == CBLLM_ERR_UNSUPPORTED || rc == CBLLM_ERR_INVALID ||
				   rc == CBLLM_ERR_NOMEM, "a documented status");
		FUZZ_CHECK(out.len == 6 && memcmp(out.data, "prefix", 6) == 0, "a refusal leaves the output alone");
		FUZZ_CHECK(MessageOk(&err, "json_schema: "), "a refusal has a message");
	}
	else
	{
		FUZZ_CHECK(out.len > 6 && out.len - 6 <= (1 << 20) && memcmp(out.data, "prefix", 6) == 0,
				   "the regex is appended, at most 1 MiB");
		if (out.len - 6 <= MAX_COMPILE)
		{
			memset(err.msg, 'x', sizeof(err.msg));
			rc = regex_compile(out.data + 6, out.len - 6, &d, &err);
			if (rc != CBLLM_OK)
				fprintf(stderr, "regex refused: %s\n", err.msg);
			FUZZ_CHECK(rc == CBLLM_OK || rc == CBLLM_ERR_UNSUPPORTED || rc == CBLLM_ERR_NOMEM,
					   "the regex compiles, or is over a limit");
			FUZZ_CHECK(rc == CBLLM_OK || MessageOk(&err, "regex: "), "a regex refusal has a message");
		}
		if (d != NULL)
		{
			uint32_t	seed = 2166136261u;

			for (size_t i = 0; i < size; i++)
				seed = (seed ^ data[i]) * 16777619u;
			Walk(d, false, 0);
			Walk(d, true, seed);
			dfa_free(d);
		}
	}
	cbllm_buf_free(&out);
	free(text);
	return 0;
}
