/*
 * tokenizer_internal.h: the tokenizer's private structures and the small
 * helpers shared by tokenizer_load.c (reading tokenizer.json and
 * tokenizer_config.json into flat tables) and tokenizer.c (encoding and
 * streaming decoding).  Private to the tokenizer: nothing else includes it;
 * the public interface is tokenizer.h.
 */
#ifndef CBLLM_TOKENIZER_INTERNAL_H
#define CBLLM_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tokenizer.h"

#define TOK_MAX_NORM	16			/* normalizer steps */
#define TOK_META		"\xE2\x96\x81"	/* U+2581, SentencePiece's space */

typedef struct tok_entry
{
	const char *piece;			/* token text (added content wins); NULL: no token */
	uint32_t	len;
	int16_t		byte;			/* value of a <0xXX> piece, else -1 */
	bool		special;
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
	bool		special, lstrip, rstrip, normalized;
} tok_added;

typedef struct tok_norm			/* Prepend a, or Replace a by b */
{
	bool		prepend;
	const char *a, *b;
	size_t		alen, blen;
} tok_norm;

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
	int			n_ids, n_added, n_norm;
	tok_slot   *vocab;
	tok_merge  *merges;
	uint32_t	vocab_mask, merge_mask;
	tok_added  *added;
	int			first[257];		/* added[first[c]..first[c+1]) start with byte c */
	tok_norm	norm[TOK_MAX_NORM];
	int			meta;			/* Metaspace pre-tokenizer: META_* */
	bool		meta_split, byte_fallback, fuse_unk, ignore_merges, add_bos, add_eos;
	int32_t		byte_id[256];	/* id of "<0xXX>", or -1 */
	int32_t		unk_id, bos_id, eos_id;
};

/* ---------------------------------------------------------------- utils */

/* Total length of the character if p[0..n) is a valid UTF-8 prefix of one, else 0. */
static inline int
utf8_prefix(const uint8_t *p, int n)
{
	int			need = p[0] < 0x80 ? 1 : p[0] < 0xC2 ? 0 : p[0] < 0xE0 ? 2 :
		p[0] < 0xF0 ? 3 : p[0] < 0xF5 ? 4 : 0;

	if (need == 0 || n > need)
		return 0;
	for (int i = 1; i < n; i++)
	{
		uint8_t		lo = 0x80, hi = 0xBF;

		if (i == 1 && p[0] == 0xE0)
			lo = 0xA0;			/* no overlong forms */
		else if (i == 1 && p[0] == 0xED)
			hi = 0x9F;			/* no surrogates */
		else if (i == 1 && p[0] == 0xF0)
			lo = 0x90;
		else if (i == 1 && p[0] == 0xF4)
			hi = 0x8F;			/* nothing above U+10FFFF */
		if (p[i] < lo || p[i] > hi)
			return 0;
	}
	return need;
}

/* Length of the valid UTF-8 character at s (n bytes left), or 0 if invalid. */
static inline int
utf8_len(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *) s;
	int			need = utf8_prefix(p, 1);

	return need > 0 && (size_t) need <= n && utf8_prefix(p, need) == need ? need : 0;
}

/* FNV-1a hash of a byte string. */
static inline uint32_t
hash_bytes(const char *s, size_t n)
{
	uint32_t	h = 2166136261u;

	while (n--)
		h = (h ^ (uint8_t) *s++) * 16777619u;
	return h;
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

/* ------------------------------------------------------- normalization */

/* Apply the normalizer to s[0..n), replacing the contents of out (tokenizer.c). */
int			tok_normalize(const cbllm_tokenizer *tok, const char *s, size_t n, cbllm_buf *out);

#endif							/* CBLLM_TOKENIZER_INTERNAL_H */
