/*
 * fuzz_regex.c: regex_compile, regex_json_string_body and regex_escape
 * (src/regex_*.c) on a pattern of the input's bytes.  An automaton compiled
 * must keep the promises of regex.h: every next state in [-1, n_states),
 * dist[s] 0 exactly at accepting states and otherwise 1 + the least dist
 * of its successors (so every state is live), every state reachable from
 * the start; a string built by walking it (steered by the input's bytes,
 * then down the distances) is matched by dfa_match.  A refusal is invalid
 * or unsupported with a "regex: " message.  A pattern that compiles has a
 * JSON string body unless none of its strings fits one; the body compiles,
 * and the strings it matches need no escape and are matched by the pattern.  The escape of valid
 * UTF-8 input compiles to a chain that matches exactly that input.
 */
#include <stdbool.h>

#include "fuzz.h"
#include "constrain/regex.h"

#define WALK_MAX 256

/* Check the structure of d: ranges, distances, liveness, reachability. */
static void
CheckDfa(const cbllm_dfa *d)
{
	int32_t    *seen = calloc(d->n_states, sizeof(int32_t));
	int32_t    *queue = malloc(sizeof(int32_t) * d->n_states);
	int32_t		head = 0,
				tail = 0;

	FUZZ_CHECK(d->n_states >= 1 && d->n_states <= REGEX_MAX_STATES, "a state count within the limit");
	FUZZ_CHECK(d->n_classes >= 1 && d->n_classes <= 256, "1 to 256 byte classes");
	for (int b = 0; b < 256; b++)
		FUZZ_CHECK(d->byte_class[b] < d->n_classes, "every byte in a class");
	for (int32_t s = 0; s < d->n_states; s++)
	{
		int32_t		best = -1;

		for (int32_t c = 0; c < d->n_classes; c++)
		{
			int32_t		t = d->next[(size_t) s * d->n_classes + c];

			FUZZ_CHECK(t >= -1 && t < d->n_states, "next states in [-1, n_states)");
			if (t >= 0 && (best < 0 || d->dist[t] < best))
				best = d->dist[t];
		}
		FUZZ_CHECK(d->dist[s] >= 0 && d->dist[s] < d->n_states, "every state is live (dist finite)");
		if (d->accept[s])
			FUZZ_CHECK(d->dist[s] == 0, "dist 0 at accepting states");
		else
			FUZZ_CHECK(best >= 0 && d->dist[s] == best + 1, "dist 1 + the least dist of the successors");
	}
	seen[0] = 1;
	queue[tail++] = 0;
	while (head < tail)
	{
		int32_t		s = queue[head++];

		for (int32_t c = 0; c < d->n_classes; c++)
		{
			int32_t		t = d->next[(size_t) s * d->n_classes + c];

			if (t >= 0 && !seen[t])
				seen[t] = 1, queue[tail++] = t;
		}
	}
	FUZZ_CHECK(tail == d->n_states, "every state reachable from the start");
	free(seen);
	free(queue);
}

/* The state after walking s[0..n) by dfa_next, or -1. */
static int32_t
Walk(const cbllm_dfa *d, const uint8_t *s, size_t n)
{
	int32_t		state = 0;

	for (size_t i = 0; i < n && state >= 0; i++)
		state = dfa_next(d, state, s[i]);
	return state;
}

/*
 * Write into out a string d matches: bytes of steer while they have a next
 * state (stopping early at an accepting state when steer says so), then
 * down the distances.  Its length.
 */
static size_t
Build(const cbllm_dfa *d, const uint8_t *steer, size_t n, uint8_t *out)
{
	int32_t		s = 0;
	size_t		len = 0;

	for (size_t i = 0; i < n && len < WALK_MAX; i++)
	{
		if (d->accept[s] && steer[i] % 7 == 0)
			break;
		if (dfa_next(d, s, steer[i]) >= 0)
			s = dfa_next(d, s, steer[i]), out[len++] = steer[i];
	}
	while (d->dist[s] > 0)
	{
		int			b = 0;

		while (b < 256 && (dfa_next(d, s, (uint8_t) b) < 0 ||
						   d->dist[dfa_next(d, s, (uint8_t) b)] != d->dist[s] - 1))
			b++;
		FUZZ_CHECK(b < 256, "a byte down the distances");
		s = dfa_next(d, s, (uint8_t) b);
		out[len++] = (uint8_t) b;
	}
	return len;
}

/* The properties of an automaton and of dfa_match on the input and on walked strings. */
static void
CheckMatch(const cbllm_dfa *d, const uint8_t *data, size_t size, uint8_t *buf)
{
	int32_t		end = Walk(d, data, size);
	size_t		n;

	CheckDfa(d);
	FUZZ_CHECK(dfa_match(d, (const char *) data, size) == (end >= 0 && d->accept[end]),
			   "dfa_match agrees with walking the input");
	n = Build(d, data, 0, buf);
	FUZZ_CHECK(n == (size_t) d->dist[0] && dfa_match(d, (const char *) buf, n),
			   "the shortest string has dist[0] bytes and matches");
	n = Build(d, data, size, buf);
	FUZZ_CHECK(dfa_match(d, (const char *) buf, n), "a walked string matches");
}

/* A refusal: invalid or unsupported, with a message. */
static void
CheckRefusal(int rc, const cbllm_err *err)
{
	FUZZ_CHECK(rc == CBLLM_ERR_INVALID || rc == CBLLM_ERR_UNSUPPORTED, "invalid or unsupported");
	FUZZ_CHECK(strncmp(err->msg, "regex: ", 7) == 0, "a regex: message");
}

/*
 * The JSON string body: a pattern that compiles has one unless none of its
 * strings fits, and it compiles; its strings need no escape and match d.
 * A pattern refused for a limit (compiled, rc) is not compiled twice.
 */
static void
CheckJsonBody(const char *text, size_t size, const cbllm_dfa *d, int compiled, const uint8_t *data,
			  uint8_t *buf)
{
	cbllm_buf	body = {0};
	cbllm_err	err = {{0}};
	cbllm_dfa  *e = NULL;
	int			rc = regex_json_string_body(text, size, &body, &err);

	if (rc != CBLLM_OK)
	{
		CheckRefusal(rc, &err);
		FUZZ_CHECK(d == NULL || (rc == CBLLM_ERR_INVALID && strstr(err.msg, "JSON string") != NULL),
				   "a pattern that compiles has a body unless none of its strings fits");
	}
	else if (d == NULL)
		FUZZ_CHECK(compiled == CBLLM_ERR_UNSUPPORTED, "a pattern with a body is only refused for a limit");
	else
	{
		rc = regex_compile(body.data ? body.data : "", body.len, &e, &err);
		FUZZ_CHECK(rc == CBLLM_OK, "the body of a pattern that compiles compiles");
		CheckMatch(e, data, size, buf);
		for (int k = 0; k < 2; k++)
		{
			size_t		n = Build(e, data, k ? size : 0, buf);

			for (size_t i = 0; i < n; i++)
				FUZZ_CHECK(buf[i] >= 0x20 && buf[i] != '"' && buf[i] != '\\',
						   "a body's string needs no escape");
			FUZZ_CHECK(dfa_match(d, (const char *) buf, n), "a body's string matches the pattern");
		}
	}
	dfa_free(e);
	cbllm_buf_free(&body);
}

/* regex_escape of the input: a chain matching exactly it, or a refusal of invalid UTF-8. */
static void
CheckEscape(const char *text, size_t size)
{
	cbllm_buf	esc = {0};
	cbllm_err	err = {{0}};
	cbllm_dfa  *d = NULL;

	if (regex_escape(text, size, &esc) == CBLLM_OK)
	{
		int			rc = regex_compile(esc.data ? esc.data : "", esc.len, &d, &err);

		FUZZ_CHECK(rc == CBLLM_OK, "an escaped string compiles");
		FUZZ_CHECK(dfa_match(d, text, size) && d->dist[0] == (int32_t) size &&
				   d->n_states == (int32_t) size + 1, "an escaped string matches itself only");
	}
	dfa_free(d);
	cbllm_buf_free(&esc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = fuzz_text(data, size);
	uint8_t    *buf = malloc(WALK_MAX + REGEX_MAX_STATES + 1);
	cbllm_dfa  *d = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	if (text == NULL || buf == NULL)
	{
		free(text);
		free(buf);
		return 0;
	}
	rc = regex_compile(text, size, &d, &err);
	FUZZ_CHECK((rc == CBLLM_OK) == (d != NULL), "an automaton exactly on success");
	if (rc == CBLLM_OK)
		CheckMatch(d, data, size, buf);
	else
		CheckRefusal(rc, &err);
	CheckJsonBody(text, size, d, rc, data, buf);
	CheckEscape(text, size);
	dfa_free(d);
	free(text);
	free(buf);
	return 0;
}
