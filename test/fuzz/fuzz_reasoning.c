/*
 * fuzz_reasoning.c: a generated answer split into reasoning and content
 * (chat/reasoning.h), the untrusted model output the engine splits token by
 * token.  The input's first byte picks the format (harmony, think, Gemma 4's
 * named think block, none) and whether the prompt left a block open; then
 * come records: a byte with its high bit set is a marker token (its low
 * bits pick which of the eleven, or an ordinary id), otherwise it is a
 * length n (0..127) and n text
 * bytes follow (an ordinary token's text; id -1 for every fourth, as a
 * decoder's held bytes).  Properties: the parts hold no more bytes than
 * the texts given plus one separator per marker; reasoning never starts or
 * ends with whitespace; content is empty until the end when a harmony answer
 * has opened no message.
 */
#include "fuzz.h"

#include "chat/reasoning.h"

static const reasoning_markers harmony = {REASONING_HARMONY, 200006, 200007, 200008, 200005, 200003,
200002, 200012, -1, -1, false};
static const reasoning_markers think = {REASONING_THINK, -1, -1, -1, -1, -1, -1, -1, 151667, 151668,
false};
static const reasoning_markers gemma4 = {REASONING_THINK, -1, -1, -1, -1, -1, -1, -1, 100, 101, true};
static const reasoning_markers none = {REASONING_NONE, -1, -1, -1, -1, -1, -1, -1, -1, -1, false};
static const int32_t marker_ids[] = {200006, 200007, 200008, 200005, 200003, 200002, 200012, 151667,
151668, 100, 101, 7};

static int
IsSpace(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const reasoning_markers *m;
	reasoning_split s;
	cbllm_buf	r = {0},
				c = {0};
	size_t		text_bytes = 0,
				markers = 0,
				at = 1;
	int			n_text = 0;

	if (size == 0)
		return 0;
	m = data[0] % 4 == 0 ? &harmony : data[0] % 4 == 1 ? &think : data[0] % 4 == 2 ? &gemma4 : &none;
	reasoning_split_init(&s, m, (data[0] & 4) != 0);
	while (at < size)
	{
		uint8_t		b = data[at++];

		if (b & 0x80)
		{
			int32_t		id = marker_ids[(b & 0x7f) % (sizeof(marker_ids) / sizeof(marker_ids[0]))];

			markers++;
			FUZZ_CHECK(reasoning_split_push(&s, id, "", 0, &r, &c) == CBLLM_OK, "a marker is taken");
		}
		else
		{
			size_t		len = b < size - at ? b : size - at;
			char	   *text = fuzz_text(data + at, len);

			FUZZ_CHECK(text != NULL, "memory");
			FUZZ_CHECK(reasoning_split_push(&s, n_text++ % 4 == 3 ? -1 : 11, text, len, &r, &c) == CBLLM_OK,
					   "a text is taken");
			free(text);
			text_bytes += len;
			at += len;
		}
	}
	FUZZ_CHECK(m != &harmony || s.any_message || c.len == 0, "no content before a harmony answer's end");
	FUZZ_CHECK(reasoning_split_finish(&s, &r, &c) == CBLLM_OK, "the end is taken");
	FUZZ_CHECK(r.len + c.len <= text_bytes + markers, "the parts hold only what was given");
	FUZZ_CHECK(r.len == 0 || (!IsSpace(r.data[0]) && !IsSpace(r.data[r.len - 1])),
			   "reasoning is trimmed");
	FUZZ_CHECK(m != &none || r.len == 0, "no format, no reasoning");
	reasoning_split_free(&s);
	cbllm_buf_free(&r);
	cbllm_buf_free(&c);
	return 0;
}
