/*
 * fuzz_tokenizer.c: tokenizer.json (tokenizer_load_from with no
 * tokenizer_config.json, as tokenizer_load reads a directory without one);
 * an accepted tokenizer is then used (fuzz_tokenizer_use.h).
 */
#include "fuzz_tokenizer_use.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = fuzz_text(data, size);
	tokenizer_source src = {text, size, "tokenizer.json", NULL, 0, NULL};
	cbllm_tokenizer *tok = NULL;
	cbllm_err	err;

	if (text == NULL)
		return 0;
	if (tokenizer_load_from(&src, &tok, &err) == CBLLM_OK)
	{
		int32_t		bos = tokenizer_bos_id(tok),
					eos = tokenizer_eos_id(tok);

		FUZZ_CHECK(bos < tokenizer_vocab_size(tok) && eos < tokenizer_vocab_size(tok),
				   "BOS and EOS are tokens or -1");
		fuzz_use_tokenizer(tok);
	}
	else
		FUZZ_CHECK(tok == NULL, "a failed load gives no tokenizer");
	tokenizer_free(tok);
	free(text);
	return 0;
}
