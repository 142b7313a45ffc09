/*
 * tokenizer_internal.h: the tokenizer's private structures and the small
 * helpers shared by its files: tokenizer_load.c (tokenizer.json's model,
 * added tokens and post-processor, tokenizer_config.json), tokenizer_norm.c
 * (normalizers), tokenizer_pretok.c (pre-tokenizers: Split, ByteLevel,
 * Metaspace), tokenizer.c (added-token splitting and BPE) and
 * tokenizer_decode.c (the decoder chain and streaming decoding).  Private to
 * the tokenizer: nothing else includes it; the public interface is
 * tokenizer.h.
 */
#ifndef CBLLM_TOKENIZER_INTERNAL_H
#define CBLLM_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/utf8.h"
#include "tokenizer/tokenizer.h"

#define TOK_MAX_NORM	16			/* normalizer steps */
#define TOK_MAX_PRETOK	8			/* pre-tokenizer steps */
#define TOK_MAX_POST	8			/* ids the post-processor adds before or after */
#define TOK_MAX_ID		(1 << 24)	/* ids must be below this */
#define TOK_MAX_KEEP	32			/* characters a piece may have before a "▁" (meta_keep) */
#define TOK_META		"\xE2\x96\x81"	/* U+2581, SentencePiece's space */
#define JGET(o, k)		cJSON_GetObjectItemCaseSensitive(o, k)
#define JSTR(o, k)		cJSON_GetStringValue(JGET(o, k))

typedef struct tok_entry
{
	const char *piece;			/* token text (added content wins); NULL: no token */
	uint32_t	len;
	int16_t		byte;			/* value of a <0xXX> piece under ByteFallback, else -1 */
	bool		special;
	bool		added;			/* an added token (its text bypasses ByteLevel decoding) */
	const char *dec;			/* bytes the decoder's per-token steps make of it */
	uint32_t	dec_len;
} tok_entry;

typedef struct tok_slot			/* vocabulary hash slot; s == NULL when empty */
{
	const char *s;
	uint32_t	len;
	int32_t		id;
} tok_slot;

typedef struct tok_merge		/* merge hash slot; key == UINT64_MAX when empty */
{
	uint64_t	key;			/* left id << 32 | right id */
	int32_t		rank, new_id;
} tok_merge;

typedef struct tok_added
{
	const char *match;			/* text to find: content, normalized if normalized */
	uint32_t	len;
	int32_t		id;
	bool		special, lstrip, rstrip, normalized, single_word;
} tok_added;

enum
{
	NORM_PREPEND, NORM_REPLACE, NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD
};

typedef struct tok_norm			/* Prepend a, Replace a by b, or a Unicode normal form */
{
	int			kind;			/* NORM_* */
	const char *a, *b;
	size_t		alen, blen;
} tok_norm;

enum
{
	PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE
};

enum							/* how Split keeps what its pattern matched (HF names) */
{
	SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS
};

typedef struct tok_pretok		/* one pre-tokenizer step */
{
	int			kind;			/* PRE_* */
	int			behavior;		/* SPLIT_* (ByteLevel's own regex: Isolated) */
	bool		invert;			/* Split: keep the gaps as the matches */
	bool		add_prefix_space;	/* ByteLevel: a space before a piece without one */
	void	   *re;				/* compiled pcre2_code, or NULL (String pattern, no regex) */
	const char *str;			/* Split with a String pattern: slen bytes */
	size_t		slen;
} tok_pretok;

typedef struct tok_block		/* string arena block */
{
	struct tok_block *next;
	size_t		used, cap;
	char		data[];
} tok_block;

enum
{
	META_NONE, META_ALWAYS, META_FIRST, META_NEVER
};

struct cbllm_tokenizer
{
	char	   *path;			/* tokenizer.json, for messages */
	tok_block  *arena;
	tok_entry  *ent;			/* n_ids entries */
	int			n_ids, n_added, n_norm, n_pretok;
	tok_slot   *vocab;
	tok_merge  *merges;
	uint32_t	vocab_mask, merge_mask;
	tok_added  *added;			/* sorted by first byte, then longest first */
	int			first[257];		/* added[first[c]..first[c+1]) start with byte c */
	int32_t    *added_hash;		/* added_mask + 1 slots: index into added, or -1 */
	uint32_t	added_mask;
	uint32_t   *added_lens;		/* per pass and first byte, the distinct match lengths, longest first */
	int			lens_first[2][257];	/* pass normalized, byte c: added_lens[lens_first[p][c]..[c+1]) */
	uint8_t		added_last[256][32];	/* bit b of row c: some added text starts with c, ends with b */
	tok_norm	norm[TOK_MAX_NORM];
	tok_pretok	pretok[TOK_MAX_PRETOK];
	int			meta;			/* Metaspace pre-tokenizer: META_* */
	bool		meta_split, byte_fallback, fuse_unk, ignore_merges;
	int32_t		byte_id[256];	/* id of "<0xXX>", or -1 */
	int32_t		ascii_id[128];	/* id of each ASCII character as a piece, or -1 */
	/*
	 * A long word may be cut before each "▁" where no piece can span the cut
	 * (tokenizer.c): meta_cut says the vocabulary allows it, except after the
	 * characters of meta_keep (each up to 4 bytes), which some piece has
	 * before a "▁".
	 */
	bool		meta_cut;
	int			n_meta_keep;
	char		meta_keep[TOK_MAX_KEEP][4];
	int32_t		unk_id, bos_id, eos_id;
	char		bl_char[256][3];	/* ByteLevel: the character standing for each byte */
	uint8_t		bl_len[256];	/* its UTF-8 length (1 or 2) */
	/* what encoding with add_special_tokens puts around the ids (post-processor) */
	int32_t		prefix[TOK_MAX_POST], suffix[TOK_MAX_POST];
	int			n_prefix, n_suffix;
	bool		has_post;		/* tokenizer.json has a post_processor */
	/* the decoder chain */
	bool		dec_byte_level;	/* ByteLevel: token characters stand for bytes */
	bool		dec_byte_fallback;	/* ByteFallback: <0xXX> tokens are bytes */
	bool		dec_strip;		/* one leading dec_strip_char of the whole text goes */
	char		dec_strip_char;
	bool		clean_up;		/* tokenizer_config.json clean_up_tokenization_spaces */
};

/* ---------------------------------------------------------------- utils */

/* FNV-1a hash h of some bytes continued over s[0..n). */
static inline uint32_t
hash_more(uint32_t h, const char *s, size_t n)
{
	while (n--)
		h = (h ^ (uint8_t) *s++) * 16777619u;
	return h;
}

/* FNV-1a hash of a byte string. */
static inline uint32_t
hash_bytes(const char *s, size_t n)
{
	return hash_more(2166136261u, s, n);
}

/* Id of a piece in the model vocabulary, or -1. */
static inline int32_t
vocab_find(const cbllm_tokenizer *tok, const char *s, size_t n)
{
	for (uint32_t i = hash_bytes(s, n) & tok->vocab_mask; tok->vocab[i].s; i = (i + 1) & tok->vocab_mask)
		if (tok->vocab[i].len == n && memcmp(tok->vocab[i].s, s, n) == 0)
			return tok->vocab[i].id;
	return -1;
}

/* Id of the piece a[0..alen) followed by b[0..blen) in the model vocabulary, or -1. */
static inline int32_t
vocab_find_pair(const cbllm_tokenizer *tok, const char *a, size_t alen, const char *b, size_t blen)
{
	for (uint32_t i = hash_more(hash_bytes(a, alen), b, blen) & tok->vocab_mask; tok->vocab[i].s;
		 i = (i + 1) & tok->vocab_mask)
		if (tok->vocab[i].len == alen + blen && memcmp(tok->vocab[i].s, a, alen) == 0 &&
			memcmp(tok->vocab[i].s + alen, b, blen) == 0)
			return tok->vocab[i].id;
	return -1;
}

/* The merge slot for the pair (a, b): its own, or the empty one where it would go. */
static inline tok_merge *
merge_slot(const cbllm_tokenizer *tok, int32_t a, int32_t b)
{
	uint64_t	key = (uint64_t) (uint32_t) a << 32 | (uint32_t) b;
	uint32_t	i = (uint32_t) ((key ^ key >> 29) * 0xff51afd7ed558ccdULL >> 32) & tok->merge_mask;

	while (tok->merges[i].key != UINT64_MAX && tok->merges[i].key != key)
		i = (i + 1) & tok->merge_mask;
	return &tok->merges[i];
}

/* ------------------------------------------------- shared by the loaders */

/* Copy n bytes plus a NUL into the tokenizer's string arena (tokenizer_load.c). */
char	   *tok_arena_dup(cbllm_tokenizer *tok, const char *s, size_t n);

/*
 * Build a tokenizer whose path is set from a tokenizer.json tree and a
 * tokenizer_config.json tree (NULL: none), as tokenizer_load does from the
 * files' texts (tokenizer_load.c); config_path names the config in messages.
 */
int			tok_build_from_json(cbllm_tokenizer *tok, const cJSON *root, const cJSON *config,
								const char *config_path, cbllm_err *err);

/* Read an optional boolean member into *out; absent or null leaves it alone. */
int			tok_get_bool(const cJSON *obj, const char *key, bool *out, const char *path,
						 const char *where, cbllm_err *err);

/* A loader of one step of a normalizer, pre-tokenizer, decoder or post-processor. */
typedef int (*tok_step_fn) (cbllm_tokenizer *tok, void *ctx, const cJSON *step, int depth,
							const char *path, cbllm_err *err);

/* Run fn on each element of seq's array key (a Sequence of what), one level deeper. */
int			tok_load_sequence(cbllm_tokenizer *tok, void *ctx, const cJSON *seq, const char *key, int depth,
							  tok_step_fn fn, const char *what, const char *path, cbllm_err *err);

/* Read the normalizer and check how much it can lengthen a text (tokenizer_norm.c). */
int			tok_load_normalizer(cbllm_tokenizer *tok, const cJSON *n, const char *path, cbllm_err *err);

/* Read the pre-tokenizer steps (tokenizer_pretok.c). */
int			tok_load_pretokenizer(cbllm_tokenizer *tok, const cJSON *p, const char *path, cbllm_err *err);

/* Release the compiled patterns of the pre-tokenizer steps. */
void		tok_free_pretokenizer(cbllm_tokenizer *tok);

/* Read the decoder and give every token its decoded bytes (tokenizer_decode.c). */
int			tok_load_decoder(cbllm_tokenizer *tok, const cJSON *d, const char *path, cbllm_err *err);

/* ------------------------------------------------------------ encoding */

/* Apply the normalizer to s[0..n), replacing the contents of out (tokenizer_norm.c). */
int			tok_normalize(const cbllm_tokenizer *tok, const char *s, size_t n, cbllm_buf *out);

typedef struct tok_enc			/* one encode call */
{
	const cbllm_tokenizer *tok;
	bool		parse_special;
	int32_t    *ids;
	int			n, cap;
	void	   *md;				/* pcre2_match_data for the Split steps, made on first use */
	struct tok_word_cache *cache;	/* words already encoded by this call (long texts), or NULL */
	cbllm_err  *err;
} tok_enc;

/* Pre-tokenize a normalized piece from step k on and encode its words (tokenizer_pretok.c). */
int			tok_pretokenize(tok_enc *e, int k, const char *s, size_t n, bool at_start);

/* Release what the pre-tokenizer made for one encode call. */
void		tok_enc_done(tok_enc *e);

/* Encode one pre-token by BPE and append its ids (tokenizer.c). */
int			tok_bpe_word(tok_enc *e, const char *w, size_t n);

/* Length of the character at s if it has Unicode's White_Space property, else 0. */
int			tok_space_len(const char *s, size_t n);

#endif							/* CBLLM_TOKENIZER_INTERNAL_H */
