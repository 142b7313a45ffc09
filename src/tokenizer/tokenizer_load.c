/*
 * tokenizer_load.c: reading a HuggingFace tokenizer.json (a BPE model) and
 * its tokenizer_config.json.
 *
 * Loading copies what encoding and decoding need out of the cJSON tree into
 * flat tables and frees the tree: an id-indexed array of token entries
 * (piece text, byte value of <0xXX> pieces, special and added flags, decoded
 * bytes); an open-addressing hash of the model vocabulary (piece -> id); an
 * open-addressing hash of the merges keyed by the pair of ids (-> rank,
 * merged id); the added tokens sorted by first byte then by length, with a
 * hash of their texts and the lengths per first byte, for leftmost-longest
 * matching; the ids the post-processor puts around a text.  The normalizer
 * (tokenizer_norm.c), the pre-tokenizer (tokenizer_pretok.c) and the decoder
 * (tokenizer_decode.c) read their own sections.  All strings live in one
 * arena.
 *
 * tokenizer_config.json gives the BOS and EOS tokens, add_bos_token and
 * add_eos_token (which, when given, put in or take out the BOS/EOS the
 * post-processor adds, as transformers' Llama and Gemma tokenizers do; with
 * no post-processor they alone decide, adding a BOS by default), and
 * clean_up_tokenization_spaces (false when absent).
 */
#include "tokenizer/tokenizer_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- utils */

/* Copy n bytes plus a NUL into the tokenizer's string arena. */
char *
tok_arena_dup(cbllm_tokenizer *tok, const char *s, size_t n)
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

/* Mask of a power-of-two table size at least twice n. */
static uint32_t
TableMask(size_t n)
{
	uint32_t	size = 16;

	while (size < 2 * n)
		size *= 2;
	return size - 1;
}

/* ------------------------------------------------------------- loading */

/* Parse len bytes of JSON text (text[len] readable) into an object; messages name path. */
static int
ParseJson(const char *text, size_t len, const char *path, cJSON **out, cbllm_err *err)
{
	const char *end = NULL;

	*out = cJSON_ParseWithLengthOpts(text, len, &end, false);
	if (*out == NULL)
	{
		size_t		off = end && end >= text && end <= text + len ? (size_t) (end - text) : 0;
		int			line = 1;

		for (size_t i = 0; i < off; i++)
			line += text[i] == '\n';
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: invalid JSON at line %d (byte %zu)", path, line, off);
	}
	if (cJSON_IsObject(*out))
		return CBLLM_OK;
	cJSON_Delete(*out);
	*out = NULL;
	return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: not a JSON object", path);
}

/* Read an optional boolean member into *out; absent or null leaves it alone. */
int
tok_get_bool(const cJSON *obj, const char *key, bool *out, const char *path,
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

/* Run fn on each element of seq's array key (a Sequence of what), one level deeper. */
int
tok_load_sequence(cbllm_tokenizer *tok, void *ctx, const cJSON *seq, const char *key, int depth,
				  tok_step_fn fn, const char *what, const char *path, cbllm_err *err)
{
	const cJSON *it;
	int			rc;

	if (!cJSON_IsArray(JGET(seq, key)) || depth > 4)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: bad Sequence %s", path, what);
	cJSON_ArrayForEach(it, JGET(seq, key))
		if ((rc = fn(tok, ctx, it, depth + 1, path, err)) != CBLLM_OK)
		return rc;
	return CBLLM_OK;
}

/* Whether v is an integer in [0, limit); stores it in *id. */
static bool
GetId(const cJSON *v, int64_t limit, int32_t *id)
{
	double		d = cJSON_IsNumber(v) ? v->valuedouble : -1;

	if (!(d >= 0 && d < (double) limit) || (double) (int32_t) d != d)
		return false;
	*id = (int32_t) d;
	return true;
}

/* Validate the ids of the vocabulary and the added tokens, then allocate the entries. */
static int
SizeTables(cbllm_tokenizer *tok, const cJSON *vocab, const cJSON *added, const char *path, cbllm_err *err)
{
	const cJSON *it;
	int32_t		id, max = -1;
	int64_t		limit;
	int			k = 0;

	cJSON_ArrayForEach(it, vocab)
	{
		if (!GetId(it, TOK_MAX_ID, &id))
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

		if (!GetId(JGET(it, "id"), limit, &id))
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
LoadVocab(cbllm_tokenizer *tok, const cJSON *vocab, const char *path, cbllm_err *err)
{
	const cJSON *it;

	tok->vocab_mask = TableMask(cJSON_GetArraySize(vocab));
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
		if ((e->piece = tok_arena_dup(tok, it->string, len)) == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
		while (tok->vocab[h].s)
			h = (h + 1) & tok->vocab_mask;
		tok->vocab[h] = (tok_slot) {e->piece, (uint32_t) len, id};
		e->len = (uint32_t) len;
	}
	return CBLLM_OK;
}

/*
 * Find where a long word may be cut before a "▁" (tokenizer_internal.h):
 * collect the characters that some piece has just before a "▁" (other than
 * "▁" itself); with more than TOK_MAX_KEEP of them, no cutting.
 */
static void
FindMetaCuts(cbllm_tokenizer *tok)
{
	tok->meta_cut = vocab_find(tok, TOK_META, 3) >= 0;
	for (int id = 0; id < tok->n_ids && tok->meta_cut; id++)
	{
		const tok_entry *e = &tok->ent[id];

		for (const char *p = e->piece, *m; p && (m = memmem(p, e->len - (size_t) (p - e->piece), TOK_META, 3)) != NULL; p = m + 3)
		{
			int			l = 1,
						k;

			if (m == e->piece)
				continue;
			while (l < 4 && m - l > e->piece && utf8_len(m - l, (size_t) l) != l)
				l++;
			if (l == 3 && memcmp(m - 3, TOK_META, 3) == 0)
				continue;
			for (k = 0; k < tok->n_meta_keep && memcmp(tok->meta_keep[k], m - l, (size_t) l) != 0; k++)
				;
			if (k < tok->n_meta_keep)
				continue;
			if (tok->n_meta_keep == TOK_MAX_KEEP)
			{
				tok->meta_cut = false;
				break;
			}
			memset(tok->meta_keep[k], 0, 4);
			memcpy(tok->meta_keep[k], m - l, (size_t) l);
			tok->n_meta_keep++;
		}
	}
}

/* Read the merges ("a b" or ["a", "b"]; rank = index) into their hash. */
static int
LoadMerges(cbllm_tokenizer *tok, const cJSON *merges, const char *path, cbllm_err *err)
{
	const cJSON *it;
	int			rank = 0;

	if (merges != NULL && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.merges must be an array", path);
	tok->merge_mask = TableMask(cJSON_GetArraySize(merges));
	if ((tok->merges = malloc((size_t) (tok->merge_mask + 1) * sizeof(tok_merge))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	memset(tok->merges, 0xFF, (size_t) (tok->merge_mask + 1) * sizeof(tok_merge));
	merges = cJSON_IsArray(merges) ? merges : NULL;
	cJSON_ArrayForEach(it, merges)
	{
		const char *a = it->valuestring, *b = NULL;
		size_t		alen = 0, blen = 0, bad;
		int32_t		ia, ib, im;
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
		if ((im = vocab_find_pair(tok, a, alen, b, blen)) < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model.merges[%d]: merged piece \"%.*s%.*s\" is not in the vocabulary",
							  path, rank, (int) (alen < 100 ? alen : 100), a, (int) (blen < 100 ? blen : 100), b);
		if ((m = merge_slot(tok, ia, ib))->key == UINT64_MAX)	/* a duplicate keeps its first rank */
			*m = (tok_merge) {(uint64_t) (uint32_t) ia << 32 | (uint32_t) ib, rank, im};
		rank++;
	}
	return CBLLM_OK;
}

/* Order added tokens by first byte, then longest first. */
static int
AddedCmp(const void *x, const void *y)
{
	const tok_added *a = x, *b = y;

	if ((uint8_t) a->match[0] != (uint8_t) b->match[0])
		return (uint8_t) a->match[0] - (uint8_t) b->match[0];
	return a->len < b->len ? 1 : a->len > b->len ? -1 : 0;
}

/*
 * Index the sorted added tokens for matching: first[c] (where those starting
 * with byte c begin), a hash of their match texts, the last bytes the texts
 * starting with each byte end with, and for each pass (raw
 * text, normalized text) and first byte the distinct lengths of the tokens
 * that pass looks for, longest first.
 */
static int
IndexAdded(cbllm_tokenizer *tok, const char *path, cbllm_err *err)
{
	int			n_lens = 0;

	tok->added_mask = TableMask(tok->n_added);
	if ((tok->added_hash = malloc((size_t) (tok->added_mask + 1) * sizeof(int32_t))) == NULL ||
		(tok->added_lens = malloc((size_t) (tok->n_added + 1) * sizeof(uint32_t))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	memset(tok->added_hash, 0xFF, (size_t) (tok->added_mask + 1) * sizeof(int32_t));
	for (int c = 0, i = 0; c <= 256; c++)
	{
		tok->first[c] = i;
		for (; i < tok->n_added && (uint8_t) tok->added[i].match[0] == c; i++)
		{
			uint32_t	h = hash_bytes(tok->added[i].match, tok->added[i].len) & tok->added_mask;

			while (tok->added_hash[h] >= 0)
				h = (h + 1) & tok->added_mask;
			tok->added_hash[h] = i;
			tok->added_last[c][(uint8_t) tok->added[i].match[tok->added[i].len - 1] >> 3] |=
				(uint8_t) (1u << ((uint8_t) tok->added[i].match[tok->added[i].len - 1] & 7));
		}
	}
	for (int pass = 0; pass < 2; pass++)
		for (int c = 0; c <= 256; c++)
		{
			tok->lens_first[pass][c] = n_lens;
			for (int i = c < 256 ? tok->first[c] : tok->n_added; c < 256 && i < tok->first[c + 1]; i++)
			{
				const tok_added *a = &tok->added[i];

				if (a->normalized == (pass == 1) &&
					(n_lens == tok->lens_first[pass][c] || tok->added_lens[n_lens - 1] != a->len))
					tok->added_lens[n_lens++] = a->len;
			}
		}
	return CBLLM_OK;
}

/* Fill the added tokens (validated by SizeTables) into the entries and the match table. */
static int
LoadAdded(cbllm_tokenizer *tok, const cJSON *list, const char *path, cbllm_err *err)
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
		if ((rc = tok_get_bool(it, "special", &a->special, path, where, err)) != CBLLM_OK)
			break;
		a->normalized = !a->special;
		if ((rc = tok_get_bool(it, "lstrip", &a->lstrip, path, where, err)) != CBLLM_OK ||
			(rc = tok_get_bool(it, "rstrip", &a->rstrip, path, where, err)) != CBLLM_OK ||
			(rc = tok_get_bool(it, "normalized", &a->normalized, path, where, err)) != CBLLM_OK ||
			(rc = tok_get_bool(it, "single_word", &a->single_word, path, where, err)) != CBLLM_OK)
			break;
		if (!utf8_valid(content, len))
		{
			rc = cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %scontent is not valid UTF-8", path, where);
			break;
		}
		if (e->piece == NULL || e->len != len || memcmp(e->piece, content, len) != 0)
			*e = (tok_entry) {tok_arena_dup(tok, content, len), (uint32_t) len, -1, false, true, NULL, 0};
		e->special |= a->special;
		e->added = true;
		a->match = e->piece;
		a->len = e->len;
		if (a->normalized && (rc = tok_normalize(tok, content, len, &nb)) == CBLLM_OK)
		{
			a->match = tok_arena_dup(tok, nb.data, nb.len);
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
	qsort(tok->added, tok->n_added, sizeof(tok_added), AddedCmp);
	return IndexAdded(tok, path, err);
}

/* Id of a token by its text: an added token first, then the vocabulary; or -1. */
static int32_t
FindToken(const cbllm_tokenizer *tok, const char *s)
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
ConfigToken(const cbllm_tokenizer *tok, const cJSON *root, const char *key, int32_t *id,
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
	if ((*id = FindToken(tok, s)) < 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s \"%.64s\" is not in the vocabulary", path, key, s);
	return CBLLM_OK;
}

/* Put id first in list (or take it out, when !on), as add_bos_token asks. */
static void
SetEdge(int32_t *list, int *n, int32_t id, bool on, bool at_end)
{
	int			k = at_end ? *n - 1 : 0;

	if (id < 0)
		return;
	if (!on && *n > 0 && list[k] == id)
	{
		if (!at_end)
			memmove(list, list + 1, (size_t) (*n - 1) * sizeof(int32_t));
		(*n)--;
	}
	else if (on && (*n == 0 || list[k] != id) && *n < TOK_MAX_POST)
	{
		if (!at_end)
			memmove(list + 1, list, (size_t) *n * sizeof(int32_t));
		list[at_end ? *n : 0] = id;
		(*n)++;
	}
}

/*
 * Apply a parsed tokenizer_config.json (NULL when there is none): BOS/EOS,
 * whether to add them, and the decode clean-up.  Messages name path.
 */
static int
ApplyConfig(cbllm_tokenizer *tok, const cJSON *root, const char *path, cbllm_err *err)
{
	const cJSON *ab, *ae;
	int			rc;
	bool		add_bos = true, add_eos = false;

	tok->bos_id = FindToken(tok, "<s>");	/* defaults when the config is silent */
	tok->eos_id = FindToken(tok, "</s>");
	if ((rc = ConfigToken(tok, root, "bos_token", &tok->bos_id, path, err)) == CBLLM_OK)
		rc = ConfigToken(tok, root, "eos_token", &tok->eos_id, path, err);
	if (rc == CBLLM_OK && (rc = tok_get_bool(root, "add_bos_token", &add_bos, path, "", err)) == CBLLM_OK &&
		(rc = tok_get_bool(root, "add_eos_token", &add_eos, path, "", err)) == CBLLM_OK)
		rc = tok_get_bool(root, "clean_up_tokenization_spaces", &tok->clean_up, path, "", err);
	ab = JGET(root, "add_bos_token");
	ae = JGET(root, "add_eos_token");
	if (rc == CBLLM_OK && (!tok->has_post || cJSON_IsBool(ab)))
		SetEdge(tok->prefix, &tok->n_prefix, tok->bos_id, add_bos, false);
	if (rc == CBLLM_OK && (!tok->has_post || cJSON_IsBool(ae)))
		SetEdge(tok->suffix, &tok->n_suffix, tok->eos_id, add_eos, true);
	return rc;
}

/* Apply tokenizer_config.json's text (len bytes; NULL when there is none). */
static int
ParseConfig(cbllm_tokenizer *tok, const char *text, size_t len, const char *path, cbllm_err *err)
{
	cJSON	   *root = NULL;
	int			rc = CBLLM_OK;

	if (text != NULL)
		rc = ParseJson(text, len, path, &root, err);
	if (rc == CBLLM_OK)
		rc = ApplyConfig(tok, root, path, err);
	cJSON_Delete(root);
	return rc;
}

/* Read dir/tokenizer_config.json if present and apply it. */
static int
LoadConfig(cbllm_tokenizer *tok, const char *dir, cbllm_err *err)
{
	char	   *path = cbllm_path_join(dir, "tokenizer_config.json");
	char	   *text = NULL;
	size_t		len = 0;
	int			rc = CBLLM_OK;

	if (path == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	rc = cbllm_read_file_if_exists(path, &text, &len, err);
	if (rc == CBLLM_OK)
		rc = ParseConfig(tok, text, len, path, err);
	free(text);
	free(path);
	return rc;
}

/* Read the BPE model section (options, vocabulary, merges) and the added tokens' ids. */
static int
LoadModel(cbllm_tokenizer *tok, const cJSON *root, const cJSON *model, const char *path, cbllm_err *err)
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
	if ((rc = tok_get_bool(model, "byte_fallback", &tok->byte_fallback, path, "model: ", err)) != CBLLM_OK ||
		(rc = tok_get_bool(model, "fuse_unk", &tok->fuse_unk, path, "model: ", err)) != CBLLM_OK ||
		(rc = tok_get_bool(model, "ignore_merges", &tok->ignore_merges, path, "model: ", err)) != CBLLM_OK ||
		(rc = SizeTables(tok, vocab, JGET(root, "added_tokens"), path, err)) != CBLLM_OK ||
		(rc = LoadVocab(tok, vocab, path, err)) != CBLLM_OK ||
		(rc = LoadMerges(tok, JGET(model, "merges"), path, err)) != CBLLM_OK)
		return rc;
	tok->unk_id = cJSON_IsString(unk) ? vocab_find(tok, unk->valuestring, strlen(unk->valuestring)) : -1;
	for (int b = 0; b < 256; b++)
	{
		char		name[8];

		snprintf(name, sizeof(name), "<0x%02X>", b);
		if ((tok->byte_id[b] = vocab_find(tok, name, 6)) >= 0)
			tok->ent[tok->byte_id[b]].byte = (int16_t) b;
	}
	for (int c = 0; c < 128; c++)
	{
		char		ch = (char) c;

		tok->ascii_id[c] = vocab_find(tok, &ch, 1);
	}
	FindMetaCuts(tok);
	return CBLLM_OK;
}

/* Append the ids of a TemplateProcessing "single" template around its sequence A. */
static int
LoadTemplate(cbllm_tokenizer *tok, const cJSON *p, const char *path, cbllm_err *err)
{
	const cJSON *it, *specials = JGET(p, "special_tokens");
	bool		after = false;

	if (!cJSON_IsArray(JGET(p, "single")))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: TemplateProcessing needs a \"single\" array", path);
	cJSON_ArrayForEach(it, JGET(p, "single"))
	{
		const char *name = JSTR(JGET(it, "SpecialToken"), "id");
		const cJSON *ids = JGET(JGET(specials, name ? name : ""), "ids"), *v;

		if (JGET(it, "Sequence") != NULL)
		{
			after = true;
			continue;
		}
		if (name == NULL || !cJSON_IsArray(ids))
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: TemplateProcessing item is not a known SpecialToken or a Sequence", path);
		cJSON_ArrayForEach(v, ids)
		{
			int32_t		id;
			int		   *n = after ? &tok->n_suffix : &tok->n_prefix;

			if (!GetId(v, tok->n_ids, &id) || tok->ent[id].piece == NULL)
				return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: TemplateProcessing token %.64s has a bad id", path, name);
			if (*n == TOK_MAX_POST)
				return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: TemplateProcessing adds too many tokens", path);
			(after ? tok->suffix : tok->prefix)[(*n)++] = id;
		}
	}
	return CBLLM_OK;
}

/* Id of a Roberta/Bert processor's ["token", id] member, or -1 if it is bad. */
static int32_t
PairId(const cbllm_tokenizer *tok, const cJSON *pair)
{
	int32_t		id;

	return cJSON_IsArray(pair) && cJSON_GetArraySize(pair) == 2 && GetId(cJSON_GetArrayItem(pair, 1), tok->n_ids, &id) &&
		tok->ent[id].piece != NULL ? id : -1;
}

/* Read the post-processor: what add_special_tokens puts around a text. */
static int
LoadPost(cbllm_tokenizer *tok, void *ctx, const cJSON *p, int depth, const char *path, cbllm_err *err)
{
	const char *t = JSTR(p, "type");

	if (p == NULL || cJSON_IsNull(p))
		return CBLLM_OK;
	tok->has_post = true;
	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: post_processor must be null or an object with a \"type\"", path);
	if (strcmp(t, "Sequence") == 0)
		return tok_load_sequence(tok, ctx, p, "processors", depth, LoadPost, "post_processor", path, err);
	if (strcmp(t, "ByteLevel") == 0)
		return CBLLM_OK;		/* offsets only */
	if (strcmp(t, "TemplateProcessing") == 0)
		return LoadTemplate(tok, p, path, err);
	if (strcmp(t, "RobertaProcessing") == 0 || strcmp(t, "BertProcessing") == 0)
	{
		int32_t		cls = PairId(tok, JGET(p, "cls")), sep = PairId(tok, JGET(p, "sep"));

		if (cls < 0 || sep < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s needs \"cls\" and \"sep\" as [token, id]", path, t);
		if (tok->n_prefix == TOK_MAX_POST || tok->n_suffix == TOK_MAX_POST)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: post_processor adds too many tokens", path);
		tok->prefix[tok->n_prefix++] = cls;
		tok->suffix[tok->n_suffix++] = sep;
		return CBLLM_OK;
	}
	return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported post_processor type %.64s", path, t);
}

/* Build tok's tables from a parsed tokenizer.json; messages name tok->path. */
static int
BuildTables(cbllm_tokenizer *tok, const cJSON *root, cbllm_err *err)
{
	int			rc;

	if ((rc = LoadModel(tok, root, JGET(root, "model"), tok->path, err)) == CBLLM_OK &&
		(rc = tok_load_normalizer(tok, JGET(root, "normalizer"), tok->path, err)) == CBLLM_OK &&
		(rc = tok_load_pretokenizer(tok, JGET(root, "pre_tokenizer"), tok->path, err)) == CBLLM_OK &&
		(rc = LoadAdded(tok, JGET(root, "added_tokens"), tok->path, err)) == CBLLM_OK &&
		(rc = tok_load_decoder(tok, JGET(root, "decoder"), tok->path, err)) == CBLLM_OK)
		rc = LoadPost(tok, NULL, JGET(root, "post_processor"), 0, tok->path, err);
	return rc;
}

/* Build tok's tables from tokenizer.json's text (len bytes); messages name tok->path. */
static int
ParseTokenizer(cbllm_tokenizer *tok, const char *text, size_t len, cbllm_err *err)
{
	cJSON	   *root = NULL;
	int			rc;

	if ((rc = ParseJson(text, len, tok->path, &root, err)) == CBLLM_OK)
		rc = BuildTables(tok, root, err);
	cJSON_Delete(root);
	return rc;
}

/* Build tok (its path set) from a tokenizer.json tree and a config tree (or NULL). */
int
tok_build_from_json(cbllm_tokenizer *tok, const cJSON *root, const cJSON *config,
					const char *config_path, cbllm_err *err)
{
	int			rc = BuildTables(tok, root, err);

	return rc == CBLLM_OK ? ApplyConfig(tok, config, config_path, err) : rc;
}

/* Load dir/tokenizer.json and dir/tokenizer_config.json. */
int
tokenizer_load(const char *dir, cbllm_tokenizer **out, cbllm_err *err)
{
	cbllm_tokenizer *tok;
	char	   *text;
	size_t		len;
	int			rc;

	*out = NULL;
	if (dir == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_load: no directory");
	if ((tok = calloc(1, sizeof(*tok))) == NULL || (tok->path = cbllm_path_join(dir, "tokenizer.json")) == NULL)
	{
		free(tok);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "tokenizer_load: out of memory");
	}
	if ((rc = cbllm_read_file(tok->path, &text, &len, err)) == CBLLM_OK)
	{
		rc = ParseTokenizer(tok, text, len, err);
		free(text);
	}
	if (rc == CBLLM_OK)
		rc = LoadConfig(tok, dir, err);
	if (rc != CBLLM_OK)
	{
		tokenizer_free(tok);
		return rc;
	}
	*out = tok;
	return CBLLM_OK;
}

/* Load a tokenizer from the texts of its files, already in memory. */
int
tokenizer_load_from(const tokenizer_source *src, cbllm_tokenizer **out, cbllm_err *err)
{
	cbllm_tokenizer *tok;
	int			rc;

	*out = NULL;
	if (src == NULL || src->json == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_load_from: no tokenizer.json text");
	if ((tok = calloc(1, sizeof(*tok))) == NULL ||
		(tok->path = strdup(src->json_name ? src->json_name : "tokenizer.json")) == NULL)
	{
		free(tok);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "tokenizer_load_from: out of memory");
	}
	if ((rc = ParseTokenizer(tok, src->json, src->json_len, err)) == CBLLM_OK)
		rc = ParseConfig(tok, src->config, src->config_len,
						  src->config_name ? src->config_name : "tokenizer_config.json", err);
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
	free(tok->added_hash);
	free(tok->added_lens);
	tok_free_pretokenizer(tok);
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
