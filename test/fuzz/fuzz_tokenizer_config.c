/*
 * fuzz_tokenizer_config.c: tokenizer_config.json, applied to a small fixed
 * tokenizer.json of the Llama-2 kind (tokenizer_load_from, as tokenizer_load
 * reads a directory holding both).  BOS and EOS must come out as tokens or
 * -1, and add_bos may only put the BOS before and the EOS after the ids.
 */
#include "fuzz_tokenizer_use.h"

static const char tokenizer_json[] =
	"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2,"
	" \"<0x0A>\": 3, \"a\": 4, \"b\": 5, \"ab\": 6, \"\\u2581\": 7, \"\\u2581a\": 8, \"<pad>\": 9},"
	" \"merges\": [\"a b\", \"\\u2581 a\"], \"unk_token\": \"<unk>\", \"byte_fallback\": true,"
	" \"fuse_unk\": true},"
	" \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\","
	" \"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"},"
	" \"content\": \"\\u2581\"}]}, \"pre_tokenizer\": null,"
	" \"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
	" {\"id\": 1, \"content\": \"<s>\", \"special\": true},"
	" {\"id\": 2, \"content\": \"</s>\", \"special\": true},"
	" {\"id\": 10, \"content\": \"<|im_end|>\", \"special\": true},"
	" {\"id\": 11, \"content\": \"<sep>\", \"special\": false, \"lstrip\": true,"
	" \"rstrip\": true, \"normalized\": false}]}";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = fuzz_text(data, size);
	tokenizer_source src = {tokenizer_json, sizeof(tokenizer_json) - 1, "tokenizer.json",
	text, size, "tokenizer_config.json"};
	cbllm_tokenizer *tok = NULL;
	cbllm_err	err;
	int			rc;

	if (text == NULL)
		return 0;
	rc = tokenizer_load_from(&src, &tok, &err);
	if (rc == CBLLM_OK)
	{
		int32_t		bos = tokenizer_bos_id(tok),
					eos = tokenizer_eos_id(tok),
				   *plain = NULL,
				   *with = NULL;
		int			np = 0,
					nw = 0;

		FUZZ_CHECK(bos >= -1 && bos < tokenizer_vocab_size(tok) && eos >= -1 &&
				   eos < tokenizer_vocab_size(tok), "BOS and EOS are tokens or -1");
		/* add_bos may add the BOS before and the EOS after, nothing else */
		if (tokenizer_encode(tok, "ab a", 4, (tokenizer_encode_opts) {false, false}, &plain, &np, &err) == CBLLM_OK &&
			tokenizer_encode(tok, "ab a", 4, (tokenizer_encode_opts) {true, false}, &with, &nw, &err) == CBLLM_OK)
		{
			/* the BOS is left out when the text's ids already start with it */
			int			pre = nw > np && bos >= 0 && with[0] == bos &&
				memcmp(with + 1, plain, (size_t) np * sizeof(int32_t)) == 0;

			FUZZ_CHECK(nw >= np + pre && memcmp(with + pre, plain, (size_t) np * sizeof(int32_t)) == 0,
					   "add_bos keeps the text's ids");
			FUZZ_CHECK(nw == np + pre || (nw == np + pre + 1 && eos >= 0 && with[nw - 1] == eos),
					   "add_bos adds only BOS and EOS");
		}
		free(plain);
		free(with);
		fuzz_use_tokenizer(tok);
	}
	else
		FUZZ_CHECK(tok == NULL && strstr(err.msg, "tokenizer_config.json") != NULL,
				   "a failure names tokenizer_config.json (the tokenizer.json is valid)");
	tokenizer_free(tok);
	free(text);
	return 0;
}
