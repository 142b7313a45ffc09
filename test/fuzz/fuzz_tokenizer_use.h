/*
 * fuzz_tokenizer_use.h: what the tokenizer harnesses do with a tokenizer the
 * loader accepted.  The loader's tables drive the encoder and the decoder,
 * so an accepted file must leave them safe to use: a fixed text that reaches
 * every encoder path (spaces, "\u2581", added-token text, multi-byte and
 * invalid bytes, digits, contractions, a combining mark) encodes to ids that are tokens, those ids decode, and
 * decoding (of those and of every id in turn, through one stream) gives
 * valid UTF-8.
 */
#ifndef CBLLM_FUZZ_TOKENIZER_USE_H
#define CBLLM_FUZZ_TOKENIZER_USE_H

#include <stdbool.h>

#include "fuzz.h"
#include "tokenizer/tokenizer.h"

static const char fuzz_sample[] =
	"Hello world  <s>a</s> ab\xE2\x96\x81" "b\tx\xC3\xA9\xE3\x80\x80<sep> hey <unk>"
	"\xF0\x9F\x98\x80 \xFF\xC3 <0x41>\r\n"
	"<|begin_of_text|>He'S 123456 e\xCC\x81 <think>\n\n\xE2\x96\x81\xE2\x96\x81hey heyo";

/* Whether s[0..n) is valid UTF-8 (no overlong forms, surrogates or values past U+10FFFF). */
static bool
fuzz_utf8_ok(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *) s;

	for (size_t i = 0; i < n;)
	{
		uint8_t		c = p[i];
		size_t		need = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
		uint8_t		lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80,
					hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;

		if (need == 0 || n - i < need)
			return false;
		for (size_t k = 1; k < need; k++)
			if (p[i + k] < (k == 1 ? lo : 0x80) || p[i + k] > (k == 1 ? hi : 0xBF))
				return false;
		i += need;
	}
	return true;
}

/* Push ids [from, to) through one decoding stream; the text must be valid UTF-8. */
static void
fuzz_stream_ids(const cbllm_tokenizer *tok, int from, int to, bool skip_special)
{
	tokenizer_stream s;
	cbllm_buf	out = {0};

	tokenizer_stream_init(&s, true, skip_special);
	for (int id = from; id < to; id++)
	{
		int			rc = tokenizer_stream_push(tok, &s, id, &out);

		FUZZ_CHECK(rc == CBLLM_OK || (rc == CBLLM_ERR_INVALID && tokenizer_piece(tok, id) == NULL),
				   "every token decodes");
	}
	FUZZ_CHECK(tokenizer_stream_flush(&s, &out) == CBLLM_OK, "the stream flushes");
	FUZZ_CHECK(fuzz_utf8_ok(out.data, out.len), "streamed text is valid UTF-8");
	cbllm_buf_free(&out);
}

/* Encode the sample every way and decode what comes out; stream the vocabulary's ends. */
static void
fuzz_use_tokenizer(const cbllm_tokenizer *tok)
{
	int			n_ids = tokenizer_vocab_size(tok);

	for (int k = 0; k < 4; k++)
	{
		tokenizer_encode_opts opts = {(k & 1) != 0, (k & 2) != 0};
		int32_t    *ids = NULL;
		int			n = 0;
		cbllm_buf	out = {0};
		cbllm_err	err;

		if (tokenizer_encode(tok, fuzz_sample, sizeof(fuzz_sample) - 1, opts, &ids, &n, &err) != CBLLM_OK)
			continue;
		for (int i = 0; i < n; i++)
			FUZZ_CHECK(ids[i] >= 0 && ids[i] < n_ids && tokenizer_piece(tok, ids[i]) != NULL,
					   "encoded ids are tokens");
		FUZZ_CHECK(tokenizer_decode(tok, ids, n, k >= 2, &out, &err) == CBLLM_OK, "encoded ids decode");
		FUZZ_CHECK(fuzz_utf8_ok(out.data, out.len), "decoded text is valid UTF-8");
		cbllm_buf_free(&out);
		free(ids);
	}
	fuzz_stream_ids(tok, 0, n_ids < 512 ? n_ids : 512, false);
	fuzz_stream_ids(tok, n_ids > 576 ? n_ids - 64 : 0, n_ids, true);
	(void) tokenizer_bos_id(tok);
	(void) tokenizer_eos_id(tok);
	FUZZ_CHECK(!tokenizer_is_special(tok, -1) && !tokenizer_is_special(tok, n_ids) &&
			   tokenizer_piece(tok, n_ids) == NULL, "ids out of range are no tokens");
}

#endif
