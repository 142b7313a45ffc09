/*
 * tokenizer.c: HuggingFace tokenizer.json BPE tokenizers of the SentencePiece
 * kind (Llama-2 family).
 *
 * Loading copies what encoding and decoding need out of the cJSON tree into
 * flat tables and frees the tree: an id-indexed array of token entries
 * (piece text, byte value of <0xXX> pieces, special flag); an
 * open-addressing hash of the model vocabulary (piece -> id); an
 * open-addressing hash of the merges keyed by the pair of ids (-> rank,
 * merged id); the added tokens sorted by first byte then by length, for
 * leftmost-longest matching; the normalizer as a list of Prepend/Replace
 * steps; an optional Metaspace pre-tokenizer.  All strings live in one arena.
 *
 * Encoding (as HuggingFace): split the raw text on non-normalized added
 * tokens (special ones only when parse_special; non-special ones always),
 * normalize each remaining piece, split that on normalized added tokens,
 * pre-tokenize, and run BPE on each word.  BPE starts from one symbol per
 * UTF-8 character (an unknown character becomes <0xXX> byte symbols, or unk;
 * an invalid byte is a character of its own), keeps the symbols in a doubly
 * linked list and the candidate merges in a binary min-heap ordered by
 * (rank, position); entries made stale by earlier merges are skipped when
 * popped.  A word of n characters costs O(n log n).
 *
 * Decoding is Llama-2's decoder chain (Replace "▁" -> " ", ByteFallback,
 * Fuse, Strip one leading space) done one token at a time: byte tokens pass
 * through a small UTF-8 assembler in the stream state, so no chunk ever holds
 * part of a character.  Unlike HuggingFace, which turns a whole run of byte
 * tokens into U+FFFDs when any of it is invalid, the assembler keeps the
 * valid characters and replaces each byte of an invalid sequence.
 */
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOK_MAX_ID		(1 << 24)	/* ids must be below this */
#define TOK_MAX_NORM	16			/* normalizer steps */
#define TOK_FFFD		"\xEF\xBF\xBD"
#define TOK_META		"\xE2\x96\x81"	/* U+2581, SentencePiece's space */
#define JGET(o, k)		cJSON_GetObjectItemCaseSensitive(o, k)
#define JSTR(o, k)		cJSON_GetStringValue(JGET(o, k))

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

/* Copy n bytes plus a NUL into the tokenizer's string arena. */
static char *
arena_dup(cbllm_tokenizer *tok, const char *s, size_t n)
{
	tok_block  *b = tok->arena;

	if (b == NULL || b->cap - b->used < n + 1)
	{
		size_t		cap = n + 1 > 65536 ? n + 1 : 65536;

		if ((b = malloc(sizeof(tok_block) + cap)) == NULL)
			return NULL;
		*b = (tok_block) {tok->arena, 0, cap};
		tok->arena = b;
	}
	memcpy(b->data + b->used, s, n);
	b->data[b->used + n] = '\0';
	b->used += n + 1;
	return b->data + b->used - n - 1;
}

/* Total length of the character if p[0..n) is a valid UTF-8 prefix of one, else 0. */
static int
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
static int
utf8_len(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *) s;
	int			need = utf8_prefix(p, 1);

	return need > 0 && (size_t) need <= n && utf8_prefix(p, need) == need ? need : 0;
}

/* Whether s[0..n) is entirely valid UTF-8. */
static bool
utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0, l; i < n; i += l)
		if ((l = utf8_len(s + i, n - i)) == 0)
			return false;
	return true;
}

/* Length of the character at s if it has Unicode's White_Space property, else 0. */
static int
space_len(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *) s;
	int			len = utf8_len(s, n);
	uint32_t	c = len == 1 ? p[0] : p[0] & (0x7F >> len);

	for (int i = 1; i < len; i++)
		c = (c << 6) | (p[i] & 0x3F);
	return len > 0 && ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
					   c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
					   c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000) ? len : 0;
}

/* FNV-1a hash of a byte string. */
static uint32_t
hash_bytes(const char *s, size_t n)
{
	uint32_t	h = 2166136261u;

	while (n--)
		h = (h ^ (uint8_t) *s++) * 16777619u;
	return h;
}

/* Mask of a power-of-two table size at least twice n. */
static uint32_t
table_mask(size_t n)
{
	uint32_t	size = 16;

	while (size < 2 * n)
		size *= 2;
	return size - 1;
}

/* Id of a piece in the model vocabulary, or -1. */
static int32_t
vocab_find(const cbllm_tokenizer *tok, const char *s, size_t n)
{
	for (uint32_t i = hash_bytes(s, n) & tok->vocab_mask; tok->vocab[i].s; i = (i + 1) & tok->vocab_mask)
		if (tok->vocab[i].len == n && memcmp(tok->vocab[i].s, s, n) == 0)
			return tok->vocab[i].id;
	return -1;
}

/* The merge slot for the pair (a, b): its own, or the empty one where it would go. */
static tok_merge *
merge_slot(const cbllm_tokenizer *tok, int32_t a, int32_t b)
{
	uint64_t	key = (uint64_t) (uint32_t) a << 32 | (uint32_t) b;
	uint32_t	i = (uint32_t) ((key ^ key >> 29) * 0xff51afd7ed558ccdULL >> 32) & tok->merge_mask;

	while (tok->merges[i].key != UINT64_MAX && tok->merges[i].key != key)
		i = (i + 1) & tok->merge_mask;
	return &tok->merges[i];
}

/* ------------------------------------------------------------- loading */

/* Read and parse a JSON object file; on failure the message names the file. */
static int
load_json(const char *path, cJSON **out, cbllm_err *err)
{
	char	   *text;
	size_t		len;
	const char *end = NULL;
	int			rc;

	if ((rc = cbllm_read_file(path, &text, &len, err)) != CBLLM_OK)
		return rc;
	*out = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (*out == NULL)
	{
		size_t		off = end && end >= text && end <= text + len ? (size_t) (end - text) : 0;
		int			line = 1;

		for (size_t i = 0; i < off; i++)
			line += text[i] == '\n';
		free(text);
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: invalid JSON at line %d (byte %zu)", path, line, off);
	}
	free(text);
	if (cJSON_IsObject(*out))
		return CBLLM_OK;
	cJSON_Delete(*out);
	*out = NULL;
	return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: not a JSON object", path);
}

/* Read an optional boolean member into *out; absent or null leaves it alone. */
static int
get_bool(const cJSON *obj, const char *key, bool *out, const char *path,
		 const char *where, cbllm_err *err)
{
	const cJSON *v = JGET(obj, key);

	if (v == NULL || cJSON_IsNull(v))
		return CBLLM_OK;
	if (!cJSON_IsBool(v))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s\"%s\" must be a boolean", path, where, key);
	*out = cJSON_IsTrue(v);
	return CBLLM_OK;
}

/* Whether v is an integer in [0, limit); stores it in *id. */
static bool
get_id(const cJSON *v, int64_t limit, int32_t *id)
{
	double		d = cJSON_IsNumber(v) ? v->valuedouble : -1;

	if (!(d >= 0 && d < (double) limit) || (double) (int32_t) d != d)
		return false;
	*id = (int32_t) d;
	return true;
}

/* Append the steps of a normalizer (recursing into Sequence). */
static int
load_normalizer(cbllm_tokenizer *tok, const cJSON *n, int depth, const char *path, cbllm_err *err)
{
	const char *t = JSTR(n, "type");
	tok_norm   *st = &tok->norm[tok->n_norm];
	const cJSON *it;

	if (n == NULL || cJSON_IsNull(n))
		return CBLLM_OK;
	if (!cJSON_IsObject(n) || t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: normalizer must be null or an object with a \"type\"", path);
	if (strcmp(t, "Sequence") == 0)
	{
		if (!cJSON_IsArray(JGET(n, "normalizers")) || depth > 4)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: bad Sequence normalizer", path);
		cJSON_ArrayForEach(it, JGET(n, "normalizers"))
		{
			int			rc = load_normalizer(tok, it, depth + 1, path, err);

			if (rc != CBLLM_OK)
				return rc;
		}
		return CBLLM_OK;
	}
	if (tok->n_norm == TOK_MAX_NORM)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: too many normalizer steps", path);
	if (strcmp(t, "Prepend") == 0)
		*st = (tok_norm) {true, JSTR(n, "prepend"), "", 0, 0};
	else if (strcmp(t, "Replace") == 0)
	{
		if (JGET(JGET(n, "pattern"), "Regex") != NULL)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Replace normalizer with a Regex pattern is not supported", path);
		*st = (tok_norm) {false, JSTR(JGET(n, "pattern"), "String"), JSTR(n, "content"), 0, 0};
	}
	else
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported normalizer type %.64s", path, t);
	if (st->a == NULL || st->b == NULL || (!st->prepend && *st->a == '\0'))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s normalizer lacks its strings", path, t);
	st->alen = strlen(st->a);
	st->blen = strlen(st->b);
	if ((st->a = arena_dup(tok, st->a, st->alen)) == NULL || (st->b = arena_dup(tok, st->b, st->blen)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	tok->n_norm++;
	return CBLLM_OK;
}

/* Apply the normalizer to s[0..n), replacing the contents of out. */
static int
normalize(const cbllm_tokenizer *tok, const char *s, size_t n, cbllm_buf *out)
{
	cbllm_buf	cur = {0}, next = {0}, t;
	int			rc = cbllm_buf_append(&cur, s, n);

	for (int k = 0; k < tok->n_norm && rc == CBLLM_OK && cur.len > 0; k++)
	{
		const tok_norm *st = &tok->norm[k];
		size_t		run = 0;

		next.len = 0;
		if (st->prepend)
			rc = cbllm_buf_append(&next, st->a, st->alen);
		for (size_t i = 0; !st->prepend && i < cur.len && rc == CBLLM_OK;)
		{
			if (cur.len - i >= st->alen && memcmp(cur.data + i, st->a, st->alen) == 0)
			{
				if ((rc = cbllm_buf_append(&next, cur.data + run, i - run)) == CBLLM_OK)
					rc = cbllm_buf_append(&next, st->b, st->blen);
				run = i += st->alen;
			}
			else
				i++;
		}
		if (rc == CBLLM_OK)
			rc = cbllm_buf_append(&next, cur.data + run, cur.len - run);
		t = cur, cur = next, next = t;
	}
	out->len = 0;
	if (rc == CBLLM_OK)
		rc = cbllm_buf_append(out, cur.data, cur.len);
	cbllm_buf_free(&cur);
	cbllm_buf_free(&next);
	return rc;
}

/* Read the pre-tokenizer: null, or Metaspace with the "▁" replacement. */
static int
load_pretokenizer(cbllm_tokenizer *tok, const cJSON *p, const char *path, cbllm_err *err)
{
	const char *t = JSTR(p, "type"),
			   *rep = JSTR(p, "replacement"),
			   *scheme = JSTR(p, "prepend_scheme");
	bool		add_prefix = true;
	int			rc;

	if (p == NULL || cJSON_IsNull(p))
		return CBLLM_OK;
	if (t == NULL || strcmp(t, "Metaspace") != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported pre_tokenizer type %.64s", path, t ? t : "(none)");
	if (rep != NULL && strcmp(rep, TOK_META) != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Metaspace replacement must be \"" TOK_META "\"", path);
	tok->meta_split = true;
	if ((rc = get_bool(p, "split", &tok->meta_split, path, "pre_tokenizer: ", err)) != CBLLM_OK ||
		(rc = get_bool(p, "add_prefix_space", &add_prefix, path, "pre_tokenizer: ", err)) != CBLLM_OK)
		return rc;
	tok->meta = scheme == NULL ? (add_prefix ? META_ALWAYS : META_NEVER) :
		strcmp(scheme, "always") == 0 ? META_ALWAYS : strcmp(scheme, "first") == 0 ? META_FIRST :
		strcmp(scheme, "never") == 0 ? META_NEVER : META_NONE;
	if (tok->meta == META_NONE)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: bad Metaspace prepend_scheme %.32s", path, scheme);
	return CBLLM_OK;
}

/* Validate the ids of the vocabulary and the added tokens, then allocate the entries. */
static int
size_tables(cbllm_tokenizer *tok, const cJSON *vocab, const cJSON *added, const char *path, cbllm_err *err)
{
	const cJSON *it;
	int32_t		id, max = -1;
	int64_t		limit;
	int			k = 0;

	cJSON_ArrayForEach(it, vocab)
	{
		if (!get_id(it, TOK_MAX_ID, &id))
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.vocab: id of \"%.64s\" is not an integer in [0, %d)",
							  path, it->string, TOK_MAX_ID);
		max = id > max ? id : max;
	}
	if (added != NULL && !cJSON_IsNull(added) && !cJSON_IsArray(added))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: added_tokens must be an array", path);
	added = cJSON_IsArray(added) ? added : NULL;
	tok->n_added = cJSON_GetArraySize(added);
	limit = (int64_t) max + 1 + tok->n_added;	/* added tokens may extend the vocabulary */
	cJSON_ArrayForEach(it, added)
	{
		const char *content = JSTR(it, "content");

		if (!get_id(JGET(it, "id"), limit, &id))
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: added_tokens[%d]: id is not an integer in [0, %lld)",
							  path, k, (long long) limit);
		if (content == NULL || *content == '\0')
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: added_tokens[%d]: content must be a non-empty string", path, k);
		max = id > max ? id : max;
		k++;
	}
	tok->n_ids = max + 1;
	if ((tok->ent = calloc(tok->n_ids + 1, sizeof(tok_entry))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	for (int i = 0; i < tok->n_ids; i++)
		tok->ent[i].byte = -1;
	return CBLLM_OK;
}

/* Fill the entries and the hash of the model vocabulary (ids already validated). */
static int
load_vocab(cbllm_tokenizer *tok, const cJSON *vocab, const char *path, cbllm_err *err)
{
	const cJSON *it;

	tok->vocab_mask = table_mask(cJSON_GetArraySize(vocab));
	if ((tok->vocab = calloc(tok->vocab_mask + 1, sizeof(tok_slot))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	cJSON_ArrayForEach(it, vocab)
	{
		size_t		len = strlen(it->string);
		int32_t		id = (int32_t) it->valuedouble;
		uint32_t	h = hash_bytes(it->string, len) & tok->vocab_mask;
		tok_entry  *e = &tok->ent[id];

		if (e->piece != NULL)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.vocab: id %d is used twice", path, id);
		if (!utf8_valid(it->string, len))
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.vocab: piece with id %d is not valid UTF-8", path, id);
		if (vocab_find(tok, it->string, len) >= 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.vocab: piece \"%.64s\" appears twice", path, it->string);
		if ((e->piece = arena_dup(tok, it->string, len)) == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
		while (tok->vocab[h].s)
			h = (h + 1) & tok->vocab_mask;
		tok->vocab[h] = (tok_slot) {e->piece, (uint32_t) len, id};
		e->len = (uint32_t) len;
	}
	return CBLLM_OK;
}

/* Read the merges ("a b" or ["a", "b"]; rank = index) into their hash. */
static int
load_merges(cbllm_tokenizer *tok, const cJSON *merges, const char *path, cbllm_err *err)
{
	const cJSON *it;
	int			rank = 0;

	if (merges != NULL && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.merges must be an array", path);
	tok->merge_mask = table_mask(cJSON_GetArraySize(merges));
	if ((tok->merges = malloc((size_t) (tok->merge_mask + 1) * sizeof(tok_merge))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	memset(tok->merges, 0xFF, (size_t) (tok->merge_mask + 1) * sizeof(tok_merge));
	merges = cJSON_IsArray(merges) ? merges : NULL;
	cJSON_ArrayForEach(it, merges)
	{
		const char *a = it->valuestring, *b = NULL;
		size_t		alen = 0, blen = 0, bad;
		int32_t		ia, ib, im;
		char		both[512];
		tok_merge  *m;

		if (cJSON_IsString(it) && (b = strchr(a, ' ')) != NULL && strchr(b + 1, ' ') == NULL)
			alen = (size_t) (b - a), blen = strlen(++b);
		else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
				 (a = cJSON_GetStringValue(it->child)) != NULL && (b = cJSON_GetStringValue(it->child->next)) != NULL)
			alen = strlen(a), blen = strlen(b);
		else
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.merges[%d] is not \"a b\" or [\"a\", \"b\"]", path, rank);
		ia = vocab_find(tok, a, alen);
		ib = vocab_find(tok, b, blen);
		bad = ia < 0 ? alen : blen;
		if (ia < 0 || ib < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.merges[%d] names a piece not in the vocabulary: \"%.*s\"",
							  path, rank, (int) (bad < 200 ? bad : 200), ia < 0 ? a : b);
		if (alen + blen > sizeof(both))
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: model.merges[%d] is too long", path, rank);
		memcpy(both, a, alen);
		memcpy(both + alen, b, blen);
		if ((im = vocab_find(tok, both, alen + blen)) < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.merges[%d]: merged piece \"%.*s\" is not in the vocabulary",
							  path, rank, (int) (alen + blen), both);
		if ((m = merge_slot(tok, ia, ib))->key == UINT64_MAX)	/* a duplicate keeps its first rank */
			*m = (tok_merge) {(uint64_t) (uint32_t) ia << 32 | (uint32_t) ib, rank, im};
		rank++;
	}
	return CBLLM_OK;
}

/* Order added tokens by first byte, then longest first. */
static int
added_cmp(const void *x, const void *y)
{
	const tok_added *a = x, *b = y;

	if ((uint8_t) a->match[0] != (uint8_t) b->match[0])
		return (uint8_t) a->match[0] - (uint8_t) b->match[0];
	return a->len < b->len ? 1 : a->len > b->len ? -1 : 0;
}

/* Fill the added tokens (validated by size_tables) into the entries and the match table. */
static int
load_added(cbllm_tokenizer *tok, const cJSON *list, const char *path, cbllm_err *err)
{
	const cJSON *it;
	cbllm_buf	nb = {0};
	int			k = 0, rc = CBLLM_OK;

	if ((tok->added = calloc(tok->n_added + 1, sizeof(tok_added))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	list = tok->n_added > 0 ? list : NULL;
	cJSON_ArrayForEach(it, list)
	{
		tok_added  *a = &tok->added[k];
		const char *content = JSTR(it, "content");
		size_t		len = strlen(content);
		tok_entry  *e = &tok->ent[a->id = (int32_t) JGET(it, "id")->valuedouble];
		char		where[48];

		snprintf(where, sizeof(where), "added_tokens[%d]: ", k++);
		if ((rc = get_bool(it, "special", &a->special, path, where, err)) != CBLLM_OK)
			break;
		a->normalized = !a->special;
		if ((rc = get_bool(it, "lstrip", &a->lstrip, path, where, err)) != CBLLM_OK ||
			(rc = get_bool(it, "rstrip", &a->rstrip, path, where, err)) != CBLLM_OK ||
			(rc = get_bool(it, "normalized", &a->normalized, path, where, err)) != CBLLM_OK)
			break;
		if (!utf8_valid(content, len))
		{
			rc = cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %scontent is not valid UTF-8", path, where);
			break;
		}
		if (e->piece == NULL || e->len != len || memcmp(e->piece, content, len) != 0)
			*e = (tok_entry) {arena_dup(tok, content, len), (uint32_t) len, -1, false};
		e->special |= a->special;
		a->match = e->piece;
		a->len = e->len;
		if (a->normalized && (rc = normalize(tok, content, len, &nb)) == CBLLM_OK)
		{
			a->match = arena_dup(tok, nb.data, nb.len);
			a->len = (uint32_t) nb.len;
		}
		if (rc != CBLLM_OK || e->piece == NULL || a->match == NULL)
		{
			rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
			break;
		}
		if (a->len == 0)
		{
			rc = cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %scontent normalizes to nothing", path, where);
			break;
		}
	}
	cbllm_buf_free(&nb);
	if (rc != CBLLM_OK)
		return rc;
	qsort(tok->added, tok->n_added, sizeof(tok_added), added_cmp);
	for (int c = 0, i = 0; c <= 256; c++)
	{
		while (i < tok->n_added && (uint8_t) tok->added[i].match[0] < c)
			i++;
		tok->first[c] = i;
	}
	return CBLLM_OK;
}

/* Id of a token by its text: an added token first, then the vocabulary; or -1. */
static int32_t
find_token(const cbllm_tokenizer *tok, const char *s)
{
	size_t		n = strlen(s);

	for (int i = 0; i < tok->n_added; i++)
	{
		const tok_entry *e = &tok->ent[tok->added[i].id];

		if (e->len == n && memcmp(e->piece, s, n) == 0)
			return tok->added[i].id;
	}
	return vocab_find(tok, s, n);
}

/* Resolve a config token member (string, {"content": ...} or null) to an id. */
static int
config_token(const cbllm_tokenizer *tok, const cJSON *root, const char *key, int32_t *id,
			 const char *path, cbllm_err *err)
{
	const cJSON *v = JGET(root, key);
	const char *s = cJSON_IsObject(v) ? JSTR(v, "content") : cJSON_GetStringValue(v);

	if (v == NULL || cJSON_IsNull(v))
	{
		*id = v ? -1 : *id;
		return CBLLM_OK;
	}
	if (s == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be a string or an object with a \"content\" string", path, key);
	if ((*id = find_token(tok, s)) < 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s \"%.64s\" is not in the vocabulary", path, key, s);
	return CBLLM_OK;
}

/* Read dir/tokenizer_config.json if present: BOS/EOS and whether to add them. */
static int
load_config(cbllm_tokenizer *tok, const char *dir, cbllm_err *err)
{
	char	   *path = cbllm_path_join(dir, "tokenizer_config.json");
	cJSON	   *root = NULL;
	int			rc = CBLLM_OK;

	if (path == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	tok->bos_id = find_token(tok, "<s>");	/* defaults when the config is silent */
	tok->eos_id = find_token(tok, "</s>");
	if (access(path, F_OK) == 0 && (rc = load_json(path, &root, err)) == CBLLM_OK &&
		(rc = config_token(tok, root, "bos_token", &tok->bos_id, path, err)) == CBLLM_OK)
		rc = config_token(tok, root, "eos_token", &tok->eos_id, path, err);
	tok->add_bos = tok->bos_id >= 0;
	if (rc == CBLLM_OK && (rc = get_bool(root, "add_bos_token", &tok->add_bos, path, "", err)) == CBLLM_OK)
		rc = get_bool(root, "add_eos_token", &tok->add_eos, path, "", err);
	cJSON_Delete(root);
	free(path);
	return rc;
}

/* Read the BPE model section (options, vocabulary, merges) and the added tokens' ids. */
static int
load_model(cbllm_tokenizer *tok, const cJSON *root, const cJSON *model, const char *path, cbllm_err *err)
{
	const cJSON *vocab = JGET(model, "vocab"),
			   *unk = JGET(model, "unk_token"),
			   *type = JGET(model, "type"),
			   *dropout = JGET(model, "dropout");
	const char *prefix = JSTR(model, "continuing_subword_prefix"),
			   *suffix = JSTR(model, "end_of_word_suffix");
	int			rc;

	if (!cJSON_IsObject(model))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"model\" must be an object", path);
	if ((type != NULL && !cJSON_IsString(type)) || (type == NULL && JGET(model, "merges") == NULL))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.type must be a string", path);
	if (type != NULL && strcmp(type->valuestring, "BPE") != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported tokenizer model type %.64s", path, type->valuestring);
	if (!cJSON_IsObject(vocab))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.vocab must be an object", path);
	if ((prefix && *prefix) || (suffix && *suffix) || (cJSON_IsNumber(dropout) && dropout->valuedouble > 0))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: BPE with a subword prefix, word suffix or dropout is not supported", path);
	if (unk != NULL && !cJSON_IsNull(unk) && !cJSON_IsString(unk))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.unk_token must be a string or null", path);
	if ((rc = get_bool(model, "byte_fallback", &tok->byte_fallback, path, "model: ", err)) != CBLLM_OK ||
		(rc = get_bool(model, "fuse_unk", &tok->fuse_unk, path, "model: ", err)) != CBLLM_OK ||
		(rc = get_bool(model, "ignore_merges", &tok->ignore_merges, path, "model: ", err)) != CBLLM_OK ||
		(rc = size_tables(tok, vocab, JGET(root, "added_tokens"), path, err)) != CBLLM_OK ||
		(rc = load_vocab(tok, vocab, path, err)) != CBLLM_OK ||
		(rc = load_merges(tok, JGET(model, "merges"), path, err)) != CBLLM_OK)
		return rc;
	tok->unk_id = cJSON_IsString(unk) ? vocab_find(tok, unk->valuestring, strlen(unk->valuestring)) : -1;
	for (int b = 0; b < 256; b++)
	{
		char		name[8];

		snprintf(name, sizeof(name), "<0x%02X>", b);
		if ((tok->byte_id[b] = vocab_find(tok, name, 6)) >= 0)
			tok->ent[tok->byte_id[b]].byte = (int16_t) b;
	}
	return CBLLM_OK;
}

/* Load dir/tokenizer.json and dir/tokenizer_config.json. */
int
tokenizer_load(const char *dir, cbllm_tokenizer **out, cbllm_err *err)
{
	cbllm_tokenizer *tok;
	cJSON	   *root = NULL;
	int			rc;

	*out = NULL;
	if (dir == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_load: no directory");
	if ((tok = calloc(1, sizeof(*tok))) == NULL || (tok->path = cbllm_path_join(dir, "tokenizer.json")) == NULL)
	{
		free(tok);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "tokenizer_load: out of memory");
	}
	if ((rc = load_json(tok->path, &root, err)) == CBLLM_OK &&
		(rc = load_model(tok, root, JGET(root, "model"), tok->path, err)) == CBLLM_OK &&
		(rc = load_normalizer(tok, JGET(root, "normalizer"), 0, tok->path, err)) == CBLLM_OK &&
		(rc = load_pretokenizer(tok, JGET(root, "pre_tokenizer"), tok->path, err)) == CBLLM_OK)
		rc = load_added(tok, JGET(root, "added_tokens"), tok->path, err);
	cJSON_Delete(root);
	if (rc == CBLLM_OK)
		rc = load_config(tok, dir, err);
	if (rc != CBLLM_OK)
	{
		tokenizer_free(tok);
		return rc;
	}
	*out = tok;
	return CBLLM_OK;
}

/* Release a tokenizer and everything it owns. */
void
tokenizer_free(cbllm_tokenizer *tok)
{
	if (tok == NULL)
		return;
	while (tok->arena)
	{
		tok_block  *next = tok->arena->next;

		free(tok->arena);
		tok->arena = next;
	}
	free(tok->ent);
	free(tok->vocab);
	free(tok->merges);
	free(tok->added);
	free(tok->path);
	free(tok);
}

/* Highest id + 1. */
int
tokenizer_vocab_size(const cbllm_tokenizer *tok)
{
	return tok ? tok->n_ids : 0;
}

/* BOS id, or -1. */
int32_t
tokenizer_bos_id(const cbllm_tokenizer *tok)
{
	return tok ? tok->bos_id : -1;
}

/* EOS id, or -1. */
int32_t
tokenizer_eos_id(const cbllm_tokenizer *tok)
{
	return tok ? tok->eos_id : -1;
}

/* Whether id is a special added token. */
bool
tokenizer_is_special(const cbllm_tokenizer *tok, int32_t id)
{
	return tok && id >= 0 && id < tok->n_ids && tok->ent[id].special;
}

/* The stored piece of a token, or NULL. */
const char *
tokenizer_piece(const cbllm_tokenizer *tok, int32_t id)
{
	return tok && id >= 0 && id < tok->n_ids ? tok->ent[id].piece : NULL;
}

/* ------------------------------------------------------------ encoding */

typedef struct enc				/* one encode call */
{
	const cbllm_tokenizer *tok;
	bool		parse_special;
	int32_t    *ids;
	int			n, cap;
	cbllm_err  *err;
} enc;

typedef struct bpe_sym			/* id is -1 once merged into its left neighbour */
{
	int32_t		id, prev, next;
} bpe_sym;

typedef struct bpe_cand			/* a candidate merge of symbol pos with its right neighbour */
{
	int32_t		rank, pos, left, right, new_id;
} bpe_cand;

typedef struct bpe_heap
{
	bpe_cand   *a;
	int			n, cap;
} bpe_heap;

/* Append one id to the output. */
static int
enc_push(enc *e, int32_t id)
{
	if (e->n == e->cap)
	{
		int			cap = e->cap ? e->cap * 2 : 64;
		int32_t    *p = realloc(e->ids, (size_t) cap * sizeof(int32_t));

		if (p == NULL)
			return cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
		e->ids = p;
		e->cap = cap;
	}
	e->ids[e->n++] = id;
	return CBLLM_OK;
}

/* Whether candidate x merges before y: lower rank, then leftmost. */
static bool
cand_less(const bpe_cand *x, const bpe_cand *y)
{
	return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

/* Queue the merge of symbol pos with its right neighbour, if the merges have one. */
static int
bpe_queue(const cbllm_tokenizer *tok, const bpe_sym *sym, int32_t pos, bpe_heap *h)
{
	const tok_merge *m;
	int			i;

	if (pos < 0 || sym[pos].next < 0 || (m = merge_slot(tok, sym[pos].id, sym[sym[pos].next].id))->key == UINT64_MAX)
		return CBLLM_OK;
	if (h->n == h->cap)
	{
		int			cap = h->cap ? h->cap * 2 : 16;
		bpe_cand   *a = realloc(h->a, (size_t) cap * sizeof(bpe_cand));

		if (a == NULL)
			return CBLLM_ERR_NOMEM;
		h->a = a;
		h->cap = cap;
	}
	h->a[i = h->n++] = (bpe_cand) {m->rank, pos, sym[pos].id, sym[sym[pos].next].id, m->new_id};
	for (; i > 0 && cand_less(&h->a[i], &h->a[(i - 1) / 2]); i = (i - 1) / 2)
	{
		bpe_cand	t = h->a[i];

		h->a[i] = h->a[(i - 1) / 2];
		h->a[(i - 1) / 2] = t;
	}
	return CBLLM_OK;
}

/* Remove and return the best candidate of a non-empty heap. */
static bpe_cand
bpe_pop(bpe_heap *h)
{
	bpe_cand	top = h->a[0], t;

	h->a[0] = h->a[--h->n];
	for (int i = 0, m = 0;; i = m)
	{
		int			l = 2 * i + 1;

		if (l < h->n && cand_less(&h->a[l], &h->a[m]))
			m = l;
		if (l + 1 < h->n && cand_less(&h->a[l + 1], &h->a[m]))
			m = l + 1;
		if (m == i)
			return top;
		t = h->a[i], h->a[i] = h->a[m], h->a[m] = t;
	}
}

/* Split a word into initial symbols: characters, else their bytes, else unk. */
static int
bpe_symbols(enc *e, const char *w, size_t n, bpe_sym *sym, int32_t *ns)
{
	const cbllm_tokenizer *tok = e->tok;
	bool		prev_unk = false;

	*ns = 0;
	for (size_t i = 0, l; i < n; i += l)
	{
		int32_t		id;
		bool		bytes_ok = tok->byte_fallback;

		if ((l = utf8_len(w + i, n - i)) == 0)
			l = 1;				/* an invalid byte is a symbol of its own */
		id = vocab_find(tok, w + i, l);
		for (size_t j = 0; id < 0 && j < l; j++)
			bytes_ok &= tok->byte_id[(uint8_t) w[i + j]] >= 0;
		if (id < 0 && bytes_ok)
		{
			for (size_t j = 0; j < l; j++)
				sym[(*ns)++].id = tok->byte_id[(uint8_t) w[i + j]];
			prev_unk = false;
			continue;
		}
		if (id < 0 && tok->unk_id < 0)
		{
			char		hex[16] = "";

			for (size_t j = 0; j < l; j++)
				snprintf(hex + 3 * j, 4, " %02X", (uint8_t) w[i + j]);
			return cbllm_fail(e->err, CBLLM_ERR_UNSUPPORTED,
							  "%s: cannot encode bytes%s: not in the vocabulary, no byte fallback and no unk token",
							  tok->path, hex);
		}
		if (id < 0 && prev_unk && tok->fuse_unk)
			continue;
		prev_unk = id < 0;
		sym[(*ns)++].id = id < 0 ? tok->unk_id : id;
	}
	return CBLLM_OK;
}

/* Encode one word by BPE and append its ids. */
static int
bpe_word(enc *e, const char *w, size_t n)
{
	const cbllm_tokenizer *tok = e->tok;
	bpe_sym    *sym;
	bpe_heap	h = {0};
	int32_t		ns = 0, i, id;
	int			rc;

	if (tok->ignore_merges && (id = vocab_find(tok, w, n)) >= 0)
		return enc_push(e, id);
	if ((sym = malloc((n + 1) * sizeof(bpe_sym))) == NULL)
		return cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
	rc = bpe_symbols(e, w, n, sym, &ns);
	for (i = 0; i < ns; i++)
		sym[i].prev = i - 1, sym[i].next = i + 1 < ns ? i + 1 : -1;
	for (i = 0; i < ns && rc == CBLLM_OK; i++)
		rc = bpe_queue(tok, sym, i, &h);
	while (rc == CBLLM_OK && h.n > 0)
	{
		bpe_cand	c = bpe_pop(&h);
		int32_t		r = sym[c.pos].next;

		if (sym[c.pos].id != c.left || r < 0 || sym[r].id != c.right)
			continue;			/* stale: a neighbour merged since */
		sym[c.pos].id = c.new_id;
		sym[c.pos].next = sym[r].next;
		if (sym[r].next >= 0)
			sym[sym[r].next].prev = c.pos;
		sym[r].id = -1;
		if ((rc = bpe_queue(tok, sym, sym[c.pos].prev, &h)) == CBLLM_OK)
			rc = bpe_queue(tok, sym, c.pos, &h);
	}
	if (rc == CBLLM_ERR_NOMEM)
		rc = cbllm_fail(e->err, rc, "tokenizer_encode: out of memory");
	for (i = 0; ns > 0 && i >= 0 && rc == CBLLM_OK; i = sym[i].next)
		rc = enc_push(e, sym[i].id);	/* symbol 0 always heads the list */
	free(h.a);
	free(sym);
	return rc;
}

/* Pre-tokenize a normalized piece (Metaspace, if configured) and encode its words. */
static int
encode_words(enc *e, const char *s, size_t n, bool at_start)
{
	const cbllm_tokenizer *tok = e->tok;
	cbllm_buf	b = {0};
	int			rc = CBLLM_OK;

	if (tok->meta == META_NONE)
		return bpe_word(e, s, n);
	if ((tok->meta == META_ALWAYS || (tok->meta == META_FIRST && at_start)) &&
		!(s[0] == ' ' || (n >= 3 && memcmp(s, TOK_META, 3) == 0)))
		rc = cbllm_buf_append(&b, TOK_META, 3);
	for (size_t i = 0; i < n && rc == CBLLM_OK; i++)
		rc = s[i] == ' ' ? cbllm_buf_append(&b, TOK_META, 3) : cbllm_buf_append(&b, s + i, 1);
	if (rc != CBLLM_OK)
		rc = cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
	for (size_t i = 1, start = 0; i <= b.len && rc == CBLLM_OK; i++)
	{
		/* with split, each "▁" starts a new word */
		if (i == b.len || (tok->meta_split && b.len - i >= 3 && memcmp(b.data + i, TOK_META, 3) == 0))
		{
			rc = bpe_word(e, b.data + start, i - start);
			start = i;
		}
	}
	cbllm_buf_free(&b);
	return rc;
}

/* Find the leftmost-longest eligible added token in s[from..n). */
static const tok_added *
find_added(const cbllm_tokenizer *tok, const char *s, size_t n, size_t from,
		   bool normalized, bool parse_special, size_t *at)
{
	for (size_t i = from; i < n && tok->n_added > 0; i++)
	{
		uint8_t		c = (uint8_t) s[i];

		for (int k = tok->first[c]; k < tok->first[c + 1]; k++)
		{
			const tok_added *a = &tok->added[k];

			if (a->normalized == normalized && (parse_special || !a->special) &&
				a->len <= n - i && memcmp(s + i, a->match, a->len) == 0)
			{
				*at = i;
				return a;
			}
		}
	}
	return NULL;
}

static int	encode_normalized(enc *e, const char *s, size_t n, bool at_start);

/*
 * Split s on added tokens (the normalized ones, or the others) and encode
 * the pieces between them: raw pieces get normalized, normalized ones get
 * pre-tokenized and merged.
 */
static int
encode_split(enc *e, const char *s, size_t n, bool normalized, bool at_start)
{
	for (size_t seg = 0;;)
	{
		size_t		ms = n, me = n, l;
		const tok_added *a = find_added(e->tok, s, n, seg, normalized, e->parse_special, &ms);
		int			rc = CBLLM_OK;

		if (a != NULL)
		{
			me = ms + a->len;
			while (a->lstrip && ms > seg)	/* eat whitespace characters before ms */
			{
				for (l = 1; l < 4 && ms - l > seg && utf8_len(s + ms - l, l) != (int) l; l++)
					;
				if (space_len(s + ms - l, l) != (int) l)
					break;
				ms -= l;
			}
			while (a->rstrip && me < n && (l = space_len(s + me, n - me)) > 0)
				me += l;
		}
		if (ms > seg)
			rc = normalized ? encode_words(e, s + seg, ms - seg, at_start && seg == 0)
				: encode_normalized(e, s + seg, ms - seg, seg == 0);
		if (rc == CBLLM_OK && a != NULL)
			rc = enc_push(e, a->id);
		if (rc != CBLLM_OK || a == NULL)
			return rc;
		seg = me;
	}
}

/* Normalize a raw piece, then split it on normalized added tokens. */
static int
encode_normalized(enc *e, const char *s, size_t n, bool at_start)
{
	cbllm_buf	b = {0};
	int			rc = normalize(e->tok, s, n, &b);

	if (rc != CBLLM_OK)
		rc = cbllm_fail(e->err, rc, "tokenizer_encode: out of memory");
	else if (b.len > 0)
		rc = encode_split(e, b.data, b.len, true, at_start);
	cbllm_buf_free(&b);
	return rc;
}

/* Encode text to ids, adding BOS (and EOS) as the config asks. */
int
tokenizer_encode(const cbllm_tokenizer *tok, const char *text, size_t len,
				 tokenizer_encode_opts opts, int32_t **ids, int *n_ids,
				 cbllm_err *err)
{
	enc			e = {tok, opts.parse_special, NULL, 0, 0, err};
	int			rc;

	if (tok == NULL || ids == NULL || n_ids == NULL || (text == NULL && len > 0))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_encode: invalid argument");
	*ids = NULL;
	*n_ids = 0;
	if (len > (size_t) INT32_MAX / 4)
		return cbllm_fail(err, CBLLM_ERR_TOO_LONG, "tokenizer_encode: text of %zu bytes is too long", len);
	if ((rc = enc_push(&e, -1)) == CBLLM_OK)	/* room for a BOS */
		rc = encode_split(&e, text, len, false, true);
	if (rc == CBLLM_OK && opts.add_bos && tok->add_bos && tok->bos_id >= 0 && !(e.n > 1 && e.ids[1] == tok->bos_id))
		e.ids[0] = tok->bos_id;
	if (rc == CBLLM_OK && opts.add_bos && tok->add_eos && tok->eos_id >= 0 && !(e.n > 1 && e.ids[e.n - 1] == tok->eos_id))
		rc = enc_push(&e, tok->eos_id);
	if (rc != CBLLM_OK)
	{
		free(e.ids);
		return rc;
	}
	if (e.ids[0] < 0)
		memmove(e.ids, e.ids + 1, (size_t) --e.n * sizeof(int32_t));
	*ids = e.ids;
	*n_ids = e.n;
	return CBLLM_OK;
}

/* ------------------------------------------------------------ decoding */

/* Set up a decoder stream. */
void
tokenizer_stream_init(tokenizer_stream *s, bool strip_leading_space, bool skip_special)
{
	memset(s, 0, sizeof(*s));
	s->strip_space = strip_leading_space;
	s->skip_special = skip_special;
}

/* Append complete text to out, dropping the stream's one leading space. */
static int
emit(tokenizer_stream *s, cbllm_buf *out, const char *p, size_t n)
{
	if (n == 0)
		return CBLLM_OK;
	if (s->strip_space)
	{
		s->strip_space = false;
		if (p[0] == ' ')
			p++, n--;
	}
	return cbllm_buf_append(out, p, n);
}

/* Replace each held byte of an unfinished character with U+FFFD. */
static int
flush_pending(tokenizer_stream *s, cbllm_buf *out)
{
	int			n = s->n_pending, rc = CBLLM_OK;

	s->n_pending = 0;
	for (int i = 0; i < n && rc == CBLLM_OK; i++)
		rc = emit(s, out, TOK_FFFD, 3);
	return rc;
}

/* Feed one byte of a byte-fallback token through the UTF-8 assembler. */
static int
stream_byte(tokenizer_stream *s, uint8_t b, cbllm_buf *out)
{
	int			need, rc;

	s->pending[s->n_pending++] = b;
	need = utf8_prefix(s->pending, s->n_pending);
	if (need == 0 && s->n_pending > 1)
	{
		s->n_pending--;			/* b does not continue the held character */
		if ((rc = flush_pending(s, out)) != CBLLM_OK)
			return rc;
		s->pending[s->n_pending++] = b;
		need = utf8_prefix(s->pending, 1);
	}
	if (need == 0)
	{
		s->n_pending = 0;
		return emit(s, out, TOK_FFFD, 3);
	}
	if (need == s->n_pending)
	{
		s->n_pending = 0;
		return emit(s, out, (const char *) s->pending, need);
	}
	return CBLLM_OK;
}

/* Append the text that token id completes. */
int
tokenizer_stream_push(const cbllm_tokenizer *tok, tokenizer_stream *s,
					  int32_t id, cbllm_buf *out)
{
	const tok_entry *t;
	const char *p, *end, *run;
	int			rc;

	if (tok == NULL || s == NULL || out == NULL || s->n_pending < 0 || s->n_pending > 3 ||
		id < 0 || id >= tok->n_ids || tok->ent[id].piece == NULL)
		return CBLLM_ERR_INVALID;
	t = &tok->ent[id];
	if (t->special && s->skip_special)
		return CBLLM_OK;
	if (t->byte >= 0)
		return stream_byte(s, (uint8_t) t->byte, out);
	if ((rc = flush_pending(s, out)) != CBLLM_OK)
		return rc;
	for (p = run = t->piece, end = p + t->len; rc == CBLLM_OK && p <= end; p++)
	{
		if (p == end || (end - p >= 3 && memcmp(p, TOK_META, 3) == 0))
		{
			rc = emit(s, out, run, (size_t) (p - run));	/* "▁" becomes " " */
			if (p < end && rc == CBLLM_OK)
				rc = emit(s, out, " ", 1);
			p += p < end ? 2 : 0;
			run = p + 1;
		}
	}
	return rc;
}

/* Flush the bytes of an unfinished character as U+FFFD replacement characters. */
int
tokenizer_stream_flush(tokenizer_stream *s, cbllm_buf *out)
{
	if (s == NULL || out == NULL || s->n_pending < 0 || s->n_pending > 3)
		return CBLLM_ERR_INVALID;
	return flush_pending(s, out);
}

/* Decode a whole id sequence, stripping the leading space. */
int
tokenizer_decode(const cbllm_tokenizer *tok, const int32_t *ids, int n,
				 bool skip_special, cbllm_buf *out, cbllm_err *err)
{
	tokenizer_stream s;
	int			rc = CBLLM_OK;

	if (tok == NULL || out == NULL || (ids == NULL && n > 0))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_decode: invalid argument");
	tokenizer_stream_init(&s, true, skip_special);
	for (int i = 0; i < n && rc == CBLLM_OK; i++)
		if ((rc = tokenizer_stream_push(tok, &s, ids[i], out)) == CBLLM_ERR_INVALID)
			return cbllm_fail(err, rc, "tokenizer_decode: token id %d at position %d is not in the vocabulary", ids[i], i);
	if (rc == CBLLM_OK)
		rc = tokenizer_stream_flush(&s, out);
	return rc == CBLLM_OK ? CBLLM_OK : cbllm_fail(err, rc, "tokenizer_decode: out of memory");
}
