/*
 * tokenizer_gguf_pre.h: the byte-level pre-tokenizers a GGUF file names in
 * tokenizer.ggml.pre (tokenizer_gguf_pre.c), for tokenizer_gguf.c.  Private
 * to the tokenizer, like tokenizer_internal.h.
 */
#ifndef CBLLM_TOKENIZER_GGUF_PRE_H
#define CBLLM_TOKENIZER_GGUF_PRE_H

#include <stdbool.h>
#include <stddef.h>

/* A byte-level pre-tokenizer by its tokenizer.ggml.pre name. */
typedef struct gg_pre
{
	const char *name;
	const char *const *regex;	/* Split (Isolated) steps, NULL-terminated; NULL: ByteLevel's own GPT-2 regex */
	bool		nfc;			/* NFC normalizer */
	bool		ignore_merges;	/* a word that is a piece is that piece */
	bool		add_bos;		/* default of tokenizer.ggml.add_bos_token */
	bool		clean_up;		/* clean_up_tokenization_spaces */
} gg_pre;

/* The pre-tokenizer named name[0..len), or NULL when it is not known. */
const gg_pre *tok_gguf_pre_find(const char *name, size_t len);

#endif							/* CBLLM_TOKENIZER_GGUF_PRE_H */
