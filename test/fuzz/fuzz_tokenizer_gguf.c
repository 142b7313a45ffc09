/*
 * fuzz_tokenizer_gguf.c: a whole GGUF file through gguf_parse and then
 * tokenizer_load_gguf, which builds a tokenizer from the tokenizer.ggml.*
 * metadata it accepted.  A refusal has a message and gives no tokenizer; an
 * accepted tokenizer has BOS and EOS that are tokens or -1, and is then used
 * (fuzz_tokenizer_use.h).
 */
#include "fuzz_tokenizer_use.h"
#include "formats/gguf.h"

/* Parse one input from an exact-size copy, build its tokenizer and use it. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t    *buf = fuzz_bytes(data, size);	/* exactly the file: ASan sees reads past it */
	gguf_file  *g = NULL;
	cbllm_tokenizer *tok = NULL;
	cbllm_err	err;
	int			rc;

	if (buf == NULL)
		return 0;
	if (gguf_parse(buf, size, &g, &err) == CBLLM_OK)
	{
		err.msg[0] = '\0';
		rc = tokenizer_load_gguf(g, &tok, &err);
		FUZZ_CHECK((rc == CBLLM_OK) == (tok != NULL), "a tokenizer is returned exactly on success");
		if (rc != CBLLM_OK)
			FUZZ_CHECK(err.msg[0] != '\0', "a refusal has a message");
		else
		{
			FUZZ_CHECK(tokenizer_bos_id(tok) < tokenizer_vocab_size(tok) &&
					   tokenizer_eos_id(tok) < tokenizer_vocab_size(tok), "BOS and EOS are tokens or -1");
			fuzz_use_tokenizer(tok);
		}
	}
	tokenizer_free(tok);
	gguf_free(g);
	free(buf);
	return 0;
}
