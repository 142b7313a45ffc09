/*
 * tokenizer.h: HuggingFace tokenizer.json BPE tokenizers, of the
 * SentencePiece kind (Llama-2, Mistral, Gemma: "▁" Prepend/Replace
 * normalizer, Metaspace, byte fallback) and of the byte-level kind (GPT-2,
 * Llama-3, Qwen: regex Split, ByteLevel, ignore_merges), with added/special
 * tokens, the post-processor's BOS/EOS and tokenizer_config.json's options.
 * Every option is read from the files, never chosen by model name.
 *
 * Encoding follows HuggingFace: text is first split on added tokens (special
 * ones only when special-token parsing is on), each remaining piece is normalized,
 * pre-tokenized and merged by BPE; characters missing from the vocabulary
 * become <0xXX> byte tokens where the model has byte fallback.  With add_bos
 * the post-processor's special tokens go around the ids, exactly as
 * HuggingFace's add_special_tokens (a text that starts with "<s>" then starts
 * with two BOS ids).
 *
 * Decoding runs tokenizer.json's decoder chain and is streaming-safe:
 * tokenizer_stream_push never emits part of a UTF-8 character; bytes of an
 * unfinished character wait for the next token.
 *
 * A loaded tokenizer is read-only: any number of threads may encode and
 * decode with it at once (each call or stream keeps its own state).
 */
#ifndef CBLLM_TOKENIZER_H
#define CBLLM_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"
#include "formats/gguf.h"

typedef struct cbllm_tokenizer cbllm_tokenizer;

/*
 * Load dir/tokenizer.json and (optionally) dir/tokenizer_config.json.
 * On failure returns a negative status and a message naming the file and
 * the problem.
 */
int			tokenizer_load(const char *dir, cbllm_tokenizer **out, cbllm_err *err);
void		tokenizer_free(cbllm_tokenizer *tok);

/*
 * Build a tokenizer from a parsed GGUF file's tokenizer.ggml.* metadata
 * (model "llama" or "gpt2", tokenizer_gguf.c); g may be freed afterwards.
 * Errors name the key at fault.
 */
int			tokenizer_load_gguf(const gguf_file *g, cbllm_tokenizer **out, cbllm_err *err);

/*
 * The token id at key of g, of any integer type, into *id when the key is
 * there (-1 when it says none: UINT32_MAX or -1), left as it is when absent;
 * an id outside [0, n) is an error naming the key.
 */
int			tokenizer_gguf_id(const gguf_file *g, const char *key, int n, int32_t *id,
							  cbllm_err *err);

/*
 * Whether a token's text is one llama.cpp treats as ending generation in any GGUF
 * vocabulary ("<end_of_turn>", "<|im_end|>", "<|endoftext|>", "</s>"...); such a token is
 * a control token of the GGUF tokenizer and, where it is special, a stop id of the engine.
 */
bool		tokenizer_gguf_ends_generation(const char *text, size_t len);

/* The texts of a tokenizer's files, already in memory (tokenizer_load_from). */
typedef struct tokenizer_source
{
	const char *json;			/* tokenizer.json: json_len bytes, then one readable byte */
	size_t		json_len;
	const char *json_name;		/* what messages call it (NULL: "tokenizer.json") */
	const char *config;			/* tokenizer_config.json likewise, or NULL when there is none */
	size_t		config_len;
	const char *config_name;	/* NULL: "tokenizer_config.json" */
} tokenizer_source;

/* Load a tokenizer from src, as tokenizer_load does from a directory's files. */
int			tokenizer_load_from(const tokenizer_source *src, cbllm_tokenizer **out,
								cbllm_err *err);

int			tokenizer_vocab_size(const cbllm_tokenizer *tok);	/* highest id + 1 */
int32_t		tokenizer_bos_id(const cbllm_tokenizer *tok);	/* -1 when none */
int32_t		tokenizer_eos_id(const cbllm_tokenizer *tok);	/* -1 when none */
bool		tokenizer_is_special(const cbllm_tokenizer *tok, int32_t id);

/* The stored piece of a token ("▁Hello", "<0x0A>", "<s>"), or NULL for a bad id. */
const char *tokenizer_piece(const cbllm_tokenizer *tok, int32_t id);

/*
 * The bytes token id adds to a generated text (a stream that skips special
 * tokens): *len bytes at the result, one held in *one for a byte-fallback
 * token; NULL for a special token or a bad id.  Concatenated, a sequence's
 * bytes are its decoded text wherever that text is valid UTF-8.
 */
const char *tokenizer_token_bytes(const cbllm_tokenizer *tok, int32_t id, char *one, size_t *len);

typedef struct tokenizer_encode_opts
{
	bool		add_bos;		/* add the post-processor's special tokens (BOS for Llama, Gemma) */
	bool		parse_special;	/* recognise special added-token text such as "<s>" or
								 * "<|im_start|>" (non-special added tokens are always
								 * recognised, as in HuggingFace and llama.cpp) */
} tokenizer_encode_opts;

/*
 * Encode len bytes of text (need not be NUL-terminated; invalid UTF-8 is
 * encoded byte by byte through byte fallback).  *ids is malloc'd and must be
 * freed by the caller.
 */
int			tokenizer_encode(const cbllm_tokenizer *tok, const char *text, size_t len,
							 tokenizer_encode_opts opts, int32_t **ids, int *n_ids,
							 cbllm_err *err);

/* Streaming decoder state: one per sequence. */
typedef struct tokenizer_stream
{
	uint8_t		pending[4];		/* bytes of an unfinished UTF-8 character */
	int			n_pending;
	bool		strip_space;	/* drop one leading space (start of a whole text) */
	bool		skip_special;	/* special tokens produce no text */
	bool		one_fffd;		/* an unfinished character is one U+FFFD, not one per byte */
} tokenizer_stream;

/*
 * strip_leading_space: true when decoding a whole text from its start (as
 * HuggingFace's decode does: the decoder's Strip or Metaspace drops one
 * leading space, where the decoder has one); false for a continuation such
 * as generated tokens after a prompt, where a leading space is output.
 */
void		tokenizer_stream_init(tokenizer_stream *s, bool strip_leading_space,
								  bool skip_special);

/* Append the text that token id completes to out; returns a status. */
int			tokenizer_stream_push(const cbllm_tokenizer *tok, tokenizer_stream *s,
								  int32_t id, cbllm_buf *out);

/* Flush bytes of an unfinished character as U+FFFD replacement characters. */
int			tokenizer_stream_flush(tokenizer_stream *s, cbllm_buf *out);

typedef struct tokenizer_decode_opts
{
	bool		skip_special;	/* special tokens produce no text */
	bool		raw;			/* the decoder chain alone: no clean_up_tokenization_spaces */
} tokenizer_decode_opts;

/*
 * Decode a whole id sequence from its start, as HuggingFace's decode:
 * the decoder chain, then, unless opts.raw, the clean-up of spaces before
 * punctuation and contractions when tokenizer_config.json's
 * clean_up_tokenization_spaces is true.  Appends to out.
 */
int			tokenizer_decode_with(const cbllm_tokenizer *tok, const int32_t *ids, int n,
								  tokenizer_decode_opts opts, cbllm_buf *out, cbllm_err *err);

/* tokenizer_decode_with(tok, ids, n, {skip_special, raw = false}, out, err). */
int			tokenizer_decode(const cbllm_tokenizer *tok, const int32_t *ids, int n,
							 bool skip_special, cbllm_buf *out, cbllm_err *err);

#endif
