/*
 * tokenizer_gguf.c: a tokenizer from a GGUF file's tokenizer.ggml.* metadata.
 *
 * GGUF files made by llama.cpp's converter carry the vocabulary as parallel
 * arrays (tokens, TokenType, and scores or merges) plus a model name
 * ("llama": SentencePiece BPE with byte fallback; "gpt2": byte-level BPE;
 * "gemma4": SentencePiece pieces with listed merges) and
 * a pre-tokenizer name (tokenizer.ggml.pre).  This file validates every key
 * (element types, counts, ids in range, merges naming known pieces), then
 * describes the same tokenizer as a tokenizer.json tree and a
 * tokenizer_config.json tree and hands both to the loader that reads those
 * files (tok_build_from_json), so a GGUF tokenizer has the very tables a
 * HuggingFace one has and encodes through the same code.
 *
 * What the metadata leaves implicit comes from tables here:
 *   - "llama": the normalizer turns spaces into "▁" (with a "▁" before the
 *     text when add_space_prefix, true by default; Gemma's files say false),
 *     the decoder turns them back and drops that leading space.  There are
 *     no merges: SentencePiece merges the adjacent pair whose merged piece has
 *     the highest score, so every split of a piece (of any token type, as
 *     llama.cpp's tokenizer merges into any piece) into two known pieces is
 *     a merge, ranked by its piece's score (equal scores, equal ranks: the
 *     leftmost pair merges first).  remove_extra_whitespaces is
 *     read and checked but, as in llama.cpp's SentencePiece tokenizer, not
 *     applied.
 *   - "gpt2": the pre-tokenizer's regexes, NFC, ignore_merges, whether a BOS
 *     is added by default and the decode clean-up come from the row of
 *     the pre-tokenizer table (tokenizer_gguf_pre.c) named by
 *     tokenizer.ggml.pre.
 *   - "gemma4" (Gemma 4): SentencePiece-style pieces ("▁" for a space, <0xXX>
 *     byte tokens) with the merges listed, BPE'd in their order: spaces
 *     become "▁" with none before the text, no pre-tokenizer cuts the text
 *     (no merge joins a line break to anything else, so llama.cpp's cutting
 *     at line breaks changes nothing), and, as llama.cpp does, a BOS is
 *     always added by default.
 * Control and unknown tokens become special added tokens and user-defined
 * ones plain added tokens (but for the end-of-generation texts llama.cpp
 * makes control tokens: end_of_generation below), both matched in the raw text before
 * pre-tokenization.  A piece repeated under two ids is refused (a
 * tokenizer.json vocabulary cannot hold it, and llama.cpp stops on it); an
 * empty one becomes "[EMPTY_<id>]", as llama.cpp names it.  The building costs a
 * transient tree about as large as the tokenizer.json text would be: loading
 * Gemma 3's 262,145 tokens takes under a second.
 */
#include "tokenizer/tokenizer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "tokenizer/tokenizer_gguf_pre.h"

#define GG_PATH			"GGUF tokenizer.ggml"	/* what messages of the shared loader name */
#define GG_MAX_PIECE	4096	/* longest token text, in bytes */
#define GG_EMPTY_NAME	24		/* room for "[EMPTY_<id>]" and its NUL */

/* tokenizer.ggml.TokenType values, numbered as llama.cpp writes them */
enum
{
	TT_UNDEFINED, TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE, TT_COUNT
};

/* The validated views of the metadata. */
typedef struct gg_vocab
{
	bool		spm;			/* model "llama" or "gemma4", else "gpt2" */
	bool		gemma4;			/* model "gemma4": SentencePiece pieces, merges listed */
	const gg_pre *pre;			/* gpt2: its pre-tokenizer */
	const gguf_value *tokens;	/* n strings */
	gguf_str   *pieces;			/* n: their texts, an empty one named "[EMPTY_<id>]" as llama.cpp names it */
	char	   *names;			/* the texts of those names */
	const float *scores;		/* n scores (spm), unaligned views: read with memcpy */
	const uint8_t *types;		/* n int32 token types, or NULL (all normal) */
	const gguf_value *merges;	/* gpt2: strings "a b" */
	int			n;
	int32_t    *hash;			/* mask + 1 slots: token id, or -1 */
	uint32_t	mask;
	int32_t		bos, eos, unk;	/* -1: none */
	int32_t		pad;			/* checked; the tokenizer has no use for it */
	bool		add_bos, add_eos, add_space_prefix;
	bool		remove_extra_ws;	/* checked; not applied (see the top) */
} gg_vocab;

/* Token type of id. */
static int
TokenType(const gg_vocab *v, int id)
{
	int32_t		t;

	if (v->types == NULL)
		return TT_NORMAL;
	memcpy(&t, v->types + 4 * (size_t) id, 4);
	return t;
}

/* Score of id (spm). */
static float
TokenScore(const gg_vocab *v, int id)
{
	float		s;

	memcpy(&s, (const uint8_t *) v->scores + 4 * (size_t) id, 4);
	return s;
}

/* Id of the piece a[0..alen) followed by b[0..blen), or -1. */
static int32_t
GgFindPair(const gg_vocab *v, const char *a, size_t alen, const char *b, size_t blen)
{
	for (uint32_t i = hash_more(hash_bytes(a, alen), b, blen) & v->mask; v->hash[i] >= 0; i = (i + 1) & v->mask)
	{
		const gguf_str *p = &v->pieces[v->hash[i]];

		if (p->len == alen + blen && memcmp(p->ptr, a, alen) == 0 && memcmp(p->ptr + alen, b, blen) == 0)
			return v->hash[i];
	}
	return -1;
}

/* Id of the piece s[0..n), or -1. */
static int32_t
GgFind(const gg_vocab *v, const char *s, size_t n)
{
	return GgFindPair(v, s, n, "", 0);
}

/* Find an array key with elements of type et; absent is fine when !required. */
static int
GetArray(const gguf_file *g, const char *key, gguf_vtype et, bool required, const gguf_value **out,
		  cbllm_err *err)
{
	const gguf_value *a = gguf_find_key(g, key);

	*out = NULL;
	if (a == NULL)
		return required ? cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: %s is missing", key) : CBLLM_OK;
	if (a->type != GGUF_ARRAY || a->elem_type != et)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: %s must be an array of %s", key, gguf_vtype_name(et));
	*out = a;
	return CBLLM_OK;
}

/* Read an optional token id key of any integer type into *id (-1: none), checking it is below n. */
int
tokenizer_gguf_id(const gguf_file *g, const char *key, int n, int32_t *id, cbllm_err *err)
{
	const gguf_value *v = gguf_find_key(g, key);
	int64_t		x;

	if (v == NULL)
		return CBLLM_OK;
	switch (v->type)
	{
		case GGUF_UINT32:
			{
				uint32_t	u;

				memcpy(&u, v->data, 4);
				x = u == UINT32_MAX ? -1 : (int64_t) u;	/* some files write -1 as uint32 */
				break;
			}
		case GGUF_INT32:
			{
				int32_t		i;

				memcpy(&i, v->data, 4);
				x = i;
				break;
			}
		case GGUF_UINT64:
		case GGUF_INT64:
			memcpy(&x, v->data, 8);
			break;
		default:
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: %s must be an integer", key);
	}
	if (x < -1 || x >= n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: %s = %lld is not a token id (the vocabulary has %d)",
						  key, (long long) x, n);
	*id = (int32_t) x;
	return CBLLM_OK;
}

/* Read an optional boolean key into *out. */
static int
GetFlag(const gguf_file *g, const char *key, bool *out, cbllm_err *err)
{
	int			rc = gguf_get_bool(g, key, out, err);

	return rc == CBLLM_ERR_NOT_FOUND ? CBLLM_OK : rc;
}

/* Check the model and pre-tokenizer names. */
static int
ReadNames(const gguf_file *g, gg_vocab *v, cbllm_err *err)
{
	gguf_str	model, pre = {"default", 7};
	int			rc;

	if ((rc = gguf_get_string(g, "tokenizer.ggml.model", &model, err)) != CBLLM_OK)
		return rc == CBLLM_ERR_NOT_FOUND ?
			cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.model is missing") : rc;
	if (model.len == 5 && memcmp(model.ptr, "llama", 5) == 0)
		v->spm = true;
	else if (model.len == 6 && memcmp(model.ptr, "gemma4", 6) == 0)
		v->spm = v->gemma4 = true;
	else if (!(model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "GGUF: tokenizer.ggml.model \"%.*s\" is not supported (llama, gpt2 or gemma4)",
						  (int) (model.len < 64 ? model.len : 64), model.ptr);
	if ((rc = gguf_get_string(g, "tokenizer.ggml.pre", &pre, err)) != CBLLM_OK && rc != CBLLM_ERR_NOT_FOUND)
		return rc;
	if (v->spm)
		return CBLLM_OK;		/* SentencePiece has no pre-tokenizer to choose */
	if ((v->pre = tok_gguf_pre_find(pre.ptr, pre.len)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "GGUF: tokenizer.ggml.pre \"%.*s\" is not a known pre-tokenizer",
						  (int) (pre.len < 64 ? pre.len : 64), pre.ptr);
	return CBLLM_OK;
}

/* Take the token texts as pieces, naming each empty one "[EMPTY_<id>]". */
static int
NamePieces(gg_vocab *v, cbllm_err *err)
{
	size_t		n_empty = 0, used = 0;

	for (int id = 0; id < v->n; id++)
		n_empty += v->tokens->items[id].str.len == 0;
	if ((v->pieces = malloc((size_t) v->n * sizeof(gguf_str))) == NULL ||
		(v->names = malloc(n_empty * GG_EMPTY_NAME + 1)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "GGUF tokenizer: out of memory");
	for (int id = 0; id < v->n; id++)
	{
		v->pieces[id] = v->tokens->items[id].str;
		if (v->pieces[id].len > 0)
			continue;
		v->pieces[id].ptr = v->names + used;
		v->pieces[id].len = (uint64_t) snprintf(v->names + used, GG_EMPTY_NAME, "[EMPTY_%d]", id);
		used += GG_EMPTY_NAME;
	}
	return CBLLM_OK;
}

/* Check the arrays (types, counts, texts, token types, scores) and hash the pieces. */
static int
ReadArrays(const gguf_file *g, gg_vocab *v, cbllm_err *err)
{
	const gguf_value *types, *scores;
	int			rc;

	if ((rc = GetArray(g, "tokenizer.ggml.tokens", GGUF_STRING, true, &v->tokens, err)) != CBLLM_OK ||
		(rc = GetArray(g, "tokenizer.ggml.token_type", GGUF_INT32, false, &types, err)) != CBLLM_OK ||
		(rc = GetArray(g, "tokenizer.ggml.scores", GGUF_FLOAT32, v->spm && !v->gemma4, &scores, err)) != CBLLM_OK ||
		(rc = GetArray(g, "tokenizer.ggml.merges", GGUF_STRING, !v->spm || v->gemma4, &v->merges, err)) != CBLLM_OK)
		return rc;
	if (v->tokens->n == 0 || v->tokens->n >= TOK_MAX_ID)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.tokens has %llu tokens (1 to %d allowed)",
						  (unsigned long long) v->tokens->n, TOK_MAX_ID - 1);
	v->n = (int) v->tokens->n;
	if (types != NULL && types->n != v->tokens->n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.token_type has %llu entries for %d tokens",
						  (unsigned long long) types->n, v->n);
	if (scores != NULL && scores->n != v->tokens->n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.scores has %llu entries for %d tokens",
						  (unsigned long long) scores->n, v->n);
	v->types = types ? types->data : NULL;
	v->scores = scores ? (const float *) scores->data : NULL;
	v->mask = 15;
	while (v->mask + 1 < 2 * (uint32_t) v->n)
		v->mask = v->mask * 2 + 1;
	if ((v->hash = malloc((size_t) (v->mask + 1) * sizeof(int32_t))) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "GGUF tokenizer: out of memory");
	memset(v->hash, 0xFF, (size_t) (v->mask + 1) * sizeof(int32_t));
	if ((rc = NamePieces(v, err)) != CBLLM_OK)
		return rc;
	for (int id = 0; id < v->n; id++)
	{
		const gguf_str *p = &v->pieces[id];
		int32_t		dup;
		uint32_t	h;

		if (p->len > GG_MAX_PIECE)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.tokens[%d] has %llu bytes (at most %d allowed)",
							  id, (unsigned long long) p->len, GG_MAX_PIECE);
		if (memchr(p->ptr, '\0', p->len) != NULL)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.tokens[%d] holds a NUL byte", id);
		for (size_t i = 0, l; i < p->len; i += l)
			if ((l = utf8_len(p->ptr + i, p->len - i)) == 0)
				return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.tokens[%d] is not valid UTF-8", id);
		if (TokenType(v, id) < 0 || TokenType(v, id) >= TT_COUNT)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.token_type[%d] = %d is not a token type",
							  id, TokenType(v, id));
		if (v->scores != NULL && !isfinite(TokenScore(v, id)))
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.scores[%d] is not a finite number", id);
		if ((dup = GgFind(v, p->ptr, p->len)) >= 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.tokens[%d] repeats tokens[%d] \"%.*s\"",
							  id, dup, (int) (p->len < 64 ? p->len : 64), p->ptr);
		for (h = hash_bytes(p->ptr, p->len) & v->mask; v->hash[h] >= 0; h = (h + 1) & v->mask)
			;
		v->hash[h] = id;
	}
	return CBLLM_OK;
}

/* Check every merge "a b": one space, both sides and their concatenation known pieces. */
static int
CheckMerges(const gg_vocab *v, cbllm_err *err)
{
	for (uint64_t i = 0; v->merges != NULL && i < v->merges->n; i++)
	{
		const gguf_str *m = &v->merges->items[i].str;
		const char *sp = memchr(m->ptr, ' ', m->len);
		size_t		alen = sp ? (size_t) (sp - m->ptr) : 0,
					blen = sp ? m->len - alen - 1 : 0;

		if (sp == NULL || alen == 0 || blen == 0 || memchr(sp + 1, ' ', blen) != NULL)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.merges[%llu] is not two pieces joined by one space",
							  (unsigned long long) i);
		if (GgFind(v, m->ptr, alen) < 0 || GgFind(v, sp + 1, blen) < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.merges[%llu] names a piece that is not a token: \"%.*s\"",
							  (unsigned long long) i, (int) (m->len < 128 ? m->len : 128), m->ptr);
		if (GgFindPair(v, m->ptr, alen, sp + 1, blen) < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF: tokenizer.ggml.merges[%llu]: the merged piece is not a token: \"%.*s\"",
							  (unsigned long long) i, (int) (m->len < 128 ? m->len : 128), m->ptr);
	}
	return CBLLM_OK;
}

/* Read the special ids and flags, with llama.cpp's defaults. */
static int
ReadSpecials(const gguf_file *g, gg_vocab *v, cbllm_err *err)
{
	int			rc;

	v->bos = v->eos = v->unk = v->pad = -1;
	v->add_bos = v->spm || v->pre->add_bos;
	v->add_space_prefix = v->spm;
	for (int id = 0; id < v->n && v->spm; id++)
		if (TokenType(v, id) == TT_UNKNOWN && v->unk < 0)
			v->unk = id;
	if ((rc = tokenizer_gguf_id(g, "tokenizer.ggml.bos_token_id", v->n, &v->bos, err)) == CBLLM_OK &&
		(rc = tokenizer_gguf_id(g, "tokenizer.ggml.eos_token_id", v->n, &v->eos, err)) == CBLLM_OK &&
		(rc = tokenizer_gguf_id(g, "tokenizer.ggml.unknown_token_id", v->n, &v->unk, err)) == CBLLM_OK &&
		(rc = tokenizer_gguf_id(g, "tokenizer.ggml.padding_token_id", v->n, &v->pad, err)) == CBLLM_OK &&
		(rc = GetFlag(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) == CBLLM_OK &&
		(rc = GetFlag(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) == CBLLM_OK &&
		(rc = GetFlag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) == CBLLM_OK)
		rc = GetFlag(g, "tokenizer.ggml.remove_extra_whitespaces", &v->remove_extra_ws, err);
	if (v->gemma4)
	{
		/* as llama.cpp: never a space before the text, always a BOS (whatever the keys say) */
		v->add_space_prefix = false;
		v->add_bos = true;
	}
	return rc;
}

/* ---------------------------------------------------- the JSON description */

/* A cJSON string of the GGUF string s (checked: no NUL, at most GG_MAX_PIECE bytes). */
static cJSON *
Jstr(const gguf_str *s)
{
	char		buf[GG_MAX_PIECE + 1];

	memcpy(buf, s->ptr, s->len);
	buf[s->len] = '\0';
	return cJSON_CreateString(buf);
}

/* Parse a fixed JSON text (a section the tables here describe). */
static cJSON *
Jparse(const char *text)
{
	return cJSON_Parse(text);
}

/* The model vocabulary: every token by its piece. */
static bool
AddVocab(const gg_vocab *v, cJSON *model)
{
	cJSON	   *vocab = cJSON_AddObjectToObject(model, "vocab");
	char		buf[GG_MAX_PIECE + 1];

	for (int id = 0; vocab != NULL && id < v->n; id++)
	{
		const gguf_str *p = &v->pieces[id];

		memcpy(buf, p->ptr, p->len);
		buf[p->len] = '\0';
		if (cJSON_AddNumberToObject(vocab, buf, id) == NULL)
			return false;
	}
	return vocab != NULL;
}

/* gpt2: the merges as they are. */
static bool
AddMerges(const gg_vocab *v, cJSON *merges)
{
	for (uint64_t i = 0; i < v->merges->n; i++)
		if (!cJSON_AddItemToArray(merges, Jstr(&v->merges->items[i].str)))
			return false;
	return true;
}

/* spm: every split of a piece into two pieces is a merge (ranked later by score). */
static bool
DeriveMerges(const gg_vocab *v, cJSON *merges)
{
	for (int id = 0; id < v->n; id++)
	{
		const gguf_str *p = &v->pieces[id];

		for (size_t i = (size_t) utf8_len(p->ptr, p->len); i < p->len; i += (size_t) utf8_len(p->ptr + i, p->len - i))
		{
			int32_t		a = GgFind(v, p->ptr, i),
						b = GgFind(v, p->ptr + i, p->len - i);
			cJSON	   *pair;

			if (a < 0 || b < 0)
				continue;
			if ((pair = cJSON_CreateArray()) == NULL || !cJSON_AddItemToArray(merges, pair) ||
				!cJSON_AddItemToArray(pair, Jstr(&v->pieces[a])) ||
				!cJSON_AddItemToArray(pair, Jstr(&v->pieces[b])))
				return false;
		}
	}
	return true;
}

/*
 * The texts of end-of-generation tokens that llama.cpp makes control tokens
 * whatever their stored type (so "</s>", user-defined in Gemma-3's files, is
 * not matched in text when special-token parsing is off); "</s>" stays a
 * plain token in a vocabulary that also has one of the markers after it.
 */
static const char *const end_of_generation[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
	"<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
	"<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<\xEF\xBD\x9C\x65nd\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~[",
};
static const char *const plain_end_of_sentence_markers[] = {"<|tool_response>", "<|plamo:eos|>"};

/* Whether a token text is one of llama.cpp's end-of-generation texts. */
bool
tokenizer_gguf_ends_generation(const char *text, size_t len)
{
	for (size_t i = 0; i < sizeof(end_of_generation) / sizeof(end_of_generation[0]); i++)
		if (len == strlen(end_of_generation[i]) && memcmp(text, end_of_generation[i], len) == 0)
			return true;
	return false;
}

/* Whether token id is a control token for llama.cpp though stored as user-defined. */
static bool
MadeControl(const gg_vocab *v, int id)
{
	const gguf_str *p = &v->pieces[id];

	if (p->len == 4 && memcmp(p->ptr, "</s>", 4) == 0)
		for (size_t i = 0; i < sizeof(plain_end_of_sentence_markers) / sizeof(char *); i++)
			if (GgFind(v, plain_end_of_sentence_markers[i], strlen(plain_end_of_sentence_markers[i])) >= 0)
				return false;
	return tokenizer_gguf_ends_generation(p->ptr, p->len);
}

/* Control and unknown tokens as special added tokens, user-defined ones as plain ones. */
static bool
AddAdded(const gg_vocab *v, cJSON *root)
{
	cJSON	   *list = cJSON_AddArrayToObject(root, "added_tokens");

	for (int id = 0; list != NULL && id < v->n; id++)
	{
		int			t = TokenType(v, id);
		cJSON	   *a;

		if (t != TT_CONTROL && t != TT_USER_DEFINED && t != TT_UNKNOWN)
			continue;
		if (t == TT_USER_DEFINED && MadeControl(v, id))
			t = TT_CONTROL;
		if ((a = cJSON_CreateObject()) == NULL || !cJSON_AddItemToArray(list, a) ||
			cJSON_AddNumberToObject(a, "id", id) == NULL ||
			!cJSON_AddItemToObject(a, "content", Jstr(&v->pieces[id])) ||
			cJSON_AddBoolToObject(a, "special", t != TT_USER_DEFINED) == NULL ||
			cJSON_AddFalseToObject(a, "normalized") == NULL)
			return false;
	}
	return list != NULL;
}

/* The normalizer, pre-tokenizer and decoder sections of the model's kind. */
static bool
AddSections(const gg_vocab *v, cJSON *root)
{
	cJSON	   *norm, *pre = NULL, *dec;

	if (v->spm)
	{
		norm = Jparse(v->add_space_prefix ?
					  "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" TOK_META "\"},"
					  "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" TOK_META "\"}]}" :
					  "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" TOK_META "\"}");
		dec = Jparse(v->add_space_prefix ?
					 "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" TOK_META "\"},"
					 "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
					 "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}" :
					 "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" TOK_META "\"},"
					 "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}");
		return cJSON_AddItemToObject(root, "normalizer", norm) && cJSON_AddItemToObject(root, "decoder", dec);
	}
	norm = v->pre->nfc ? Jparse("{\"type\":\"NFC\"}") : cJSON_CreateNull();
	dec = Jparse("{\"type\":\"ByteLevel\"}");
	if (!cJSON_AddItemToObject(root, "normalizer", norm) || !cJSON_AddItemToObject(root, "decoder", dec) ||
		(pre = cJSON_AddObjectToObject(root, "pre_tokenizer")) == NULL ||
		cJSON_AddStringToObject(pre, "type", "Sequence") == NULL)
		return false;
	if ((pre = cJSON_AddArrayToObject(pre, "pretokenizers")) == NULL)
		return false;
	for (const char *const *re = v->pre->regex; re != NULL && *re != NULL; re++)
	{
		cJSON	   *st = cJSON_CreateObject(), *pat;

		if (st == NULL || !cJSON_AddItemToArray(pre, st) || cJSON_AddStringToObject(st, "type", "Split") == NULL ||
			(pat = cJSON_AddObjectToObject(st, "pattern")) == NULL || cJSON_AddStringToObject(pat, "Regex", *re) == NULL ||
			cJSON_AddStringToObject(st, "behavior", "Isolated") == NULL)
			return false;
	}
	return cJSON_AddItemToArray(pre, Jparse(v->pre->regex == NULL ?
											"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}" :
											"{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}"));
}

/* The tokenizer.json tree of the validated vocabulary, or NULL when out of memory. */
static cJSON *
DescribeTokenizer(const gg_vocab *v)
{
	cJSON	   *root = cJSON_CreateObject(), *model, *merges;

	if (root == NULL || (model = cJSON_AddObjectToObject(root, "model")) == NULL ||
		cJSON_AddStringToObject(model, "type", "BPE") == NULL ||
		cJSON_AddBoolToObject(model, "byte_fallback", v->spm) == NULL ||
		cJSON_AddBoolToObject(model, "fuse_unk", v->spm) == NULL ||
		cJSON_AddBoolToObject(model, "ignore_merges", !v->spm && v->pre->ignore_merges) == NULL ||
		!cJSON_AddItemToObject(model, "unk_token", v->unk >= 0 ? Jstr(&v->pieces[v->unk]) : cJSON_CreateNull()) ||
		!AddVocab(v, model) || (merges = cJSON_AddArrayToObject(model, "merges")) == NULL ||
		!(v->spm && !v->gemma4 ? DeriveMerges(v, merges) : AddMerges(v, merges)) ||
		!AddAdded(v, root) || !AddSections(v, root))
	{
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* The tokenizer_config.json tree: BOS, EOS, whether to add them, the clean-up. */
static cJSON *
DescribeConfig(const gg_vocab *v)
{
	cJSON	   *c = cJSON_CreateObject();

	if (c == NULL ||
		!cJSON_AddItemToObject(c, "bos_token", v->bos >= 0 ? Jstr(&v->pieces[v->bos]) : cJSON_CreateNull()) ||
		!cJSON_AddItemToObject(c, "eos_token", v->eos >= 0 ? Jstr(&v->pieces[v->eos]) : cJSON_CreateNull()) ||
		cJSON_AddBoolToObject(c, "add_bos_token", v->add_bos) == NULL ||
		cJSON_AddBoolToObject(c, "add_eos_token", v->add_eos) == NULL ||
		cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", !v->spm && v->pre->clean_up) == NULL)
	{
		cJSON_Delete(c);
		return NULL;
	}
	return c;
}

/* Order floats from highest to lowest. */
static int
ScoreDesc(const void *x, const void *y)
{
	float		a = *(const float *) x, b = *(const float *) y;

	return a < b ? 1 : a > b ? -1 : 0;
}

/* spm: rank each merge by its merged piece's score, highest first, equal scores equal ranks. */
static int
RankByScore(cbllm_tokenizer *tok, const gg_vocab *v, cbllm_err *err)
{
	float	   *s = malloc((size_t) v->n * sizeof(float));
	int			n = 0;

	if (s == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "GGUF tokenizer: out of memory");
	for (int id = 0; id < v->n; id++)
		s[id] = TokenScore(v, id);
	qsort(s, (size_t) v->n, sizeof(float), ScoreDesc);
	for (int i = 0; i < v->n; i++)
		if (n == 0 || s[n - 1] != s[i])
			s[n++] = s[i];
	for (uint32_t i = 0; i <= tok->merge_mask; i++)
	{
		tok_merge  *m = &tok->merges[i];
		float		key;
		const float *at;

		if (m->key == UINT64_MAX)
			continue;
		key = TokenScore(v, m->new_id);
		at = bsearch(&key, s, (size_t) n, sizeof(float), ScoreDesc);
		m->rank = (int32_t) (at - s);	/* every score is in s */
	}
	free(s);
	return CBLLM_OK;
}

/* Build a tokenizer from a GGUF file's tokenizer.ggml.* metadata. */
int
tokenizer_load_gguf(const gguf_file *g, cbllm_tokenizer **out, cbllm_err *err)
{
	gg_vocab	v = {0};
	cbllm_tokenizer *tok = NULL;
	cJSON	   *root = NULL, *config = NULL;
	int			rc;

	*out = NULL;
	if (g == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_load_gguf: no file");
	if ((rc = ReadNames(g, &v, err)) == CBLLM_OK && (rc = ReadArrays(g, &v, err)) == CBLLM_OK &&
		(rc = CheckMerges(&v, err)) == CBLLM_OK)
		rc = ReadSpecials(g, &v, err);
	if (rc == CBLLM_OK &&
		((root = DescribeTokenizer(&v)) == NULL || (config = DescribeConfig(&v)) == NULL ||
		 (tok = calloc(1, sizeof(*tok))) == NULL || (tok->path = strdup(GG_PATH)) == NULL))
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "GGUF tokenizer: out of memory");
	if (rc == CBLLM_OK)
		rc = tok_build_from_json(tok, root, config, GG_PATH, err);
	if (rc == CBLLM_OK && v.spm && !v.gemma4)
		rc = RankByScore(tok, &v, err);
	cJSON_Delete(root);
	cJSON_Delete(config);
	free(v.hash);
	free(v.pieces);
	free(v.names);
	if (rc != CBLLM_OK)
	{
		tokenizer_free(tok);
		return rc;
	}
	*out = tok;
	return CBLLM_OK;
}
