/*
 * tokenizer.c: encoding for HuggingFace tokenizer.json BPE tokenizers, of the
 * SentencePiece kind (Llama-2, Mistral, Gemma) and the byte-level kind
 * (GPT-2, Llama-3, Qwen).  The tables it reads are built by tokenizer_load.c
 * (see tokenizer_internal.h); decoding is in tokenizer_decode.c.
 *
 * Encoding (as HuggingFace): split the raw text on the added tokens that are
 * not normalized (special or not alike when parse_special is on, as the
 * default split_special_tokens = false; only the non-special ones when it is
 * off, as split_special_tokens = true and as llama.cpp's parse_special false,
 * which still matches user-defined tokens), normalize each remaining piece
 * (tokenizer_norm.c), split that on the normalized added tokens, pre-tokenize
 * (tokenizer_pretok.c), and run BPE on each word; then the post-processor's
 * ids go around the result when the caller adds special tokens.  Added
 * tokens are found leftmost-longest through a hash of their texts and, per
 * first byte, the lengths they come in (a length is tried only when the byte
 * it would end on ends some added text).
 *
 * BPE starts from one symbol per UTF-8 character (an unknown character
 * becomes <0xXX> byte symbols, or unk; an invalid byte is a character of its
 * own), keeps the symbols in a doubly linked list and the candidate merges in
 * a binary min-heap ordered by (rank, position); entries made stale by
 * earlier merges are skipped when popped.  A word of n characters costs
 * O(n log n).  With ignore_merges, a word found whole in the vocabulary is
 * that one token.
 *
 * Two shortcuts give the same ids faster on long texts.  A text of 4 KB or
 * more gets a word cache for the call (words up to 64 bytes and their ids),
 * so a repeated word runs BPE once; it lives and dies with the call, which
 * keeps encoding free of shared state.  And a long word of a vocabulary
 * where no piece has a "▁" after another character (meta_cut; for Gemma,
 * only after the few characters of meta_keep) is cut before each such "▁":
 * no merge can join the symbols on either side, since their join would be a
 * piece with that pair inside.  A SentencePiece text without a
 * pre-tokenizer, one BPE word in HuggingFace, so becomes its words.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>


/* ---------------------------------------------------------------- utils */

/* Length of the character at s if it has Unicode's White_Space property, else 0. */
int
tok_space_len(const char *s, size_t n)
{
	uint32_t	c = 0;
	int			len = utf8_decode(s, n, &c);

	return len > 0 && ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 ||
					   c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
					   c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000) ? len : 0;
}

/* ------------------------------------------------------------ encoding */

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
	bool		owned;			/* a was malloc'd (else it is the caller's stack array) */
} bpe_heap;

#define BPE_LOCAL		64			/* symbols and candidates kept on the stack */
#define CACHE_SLOTS		65536		/* word cache: a power of two */
#define CACHE_MAX_WORD	64			/* longest word it keeps, in bytes */
#define CACHE_MIN_TEXT	4096		/* shortest text that gets a cache */

typedef struct cache_slot		/* a word and its ids, in the cache's pools; len 0: empty */
{
	uint32_t	hash, word, len, ids, n_ids;
} cache_slot;

struct tok_word_cache			/* the words one encode call has already run BPE on */
{
	cache_slot	slot[CACHE_SLOTS];
	int			used;
	cbllm_buf	words;			/* word bytes */
	cbllm_buf	ids;			/* int32_t ids */
};

/* Append one id to the output. */
static int
EncPush(tok_enc *e, int32_t id)
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
CandLess(const bpe_cand *x, const bpe_cand *y)
{
	return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

/* Queue the merge of symbol pos with its right neighbour, if the merges have one. */
static int
BpeQueue(const cbllm_tokenizer *tok, const bpe_sym *sym, int32_t pos, bpe_heap *h)
{
	const tok_merge *m;
	int			i;

	if (pos < 0 || sym[pos].next < 0 || (m = merge_slot(tok, sym[pos].id, sym[sym[pos].next].id))->key == UINT64_MAX)
		return CBLLM_OK;
	if (h->n == h->cap)
	{
		int			cap = h->cap ? h->cap * 2 : 16;
		bpe_cand   *a = h->owned ? realloc(h->a, (size_t) cap * sizeof(bpe_cand)) :
			malloc((size_t) cap * sizeof(bpe_cand));

		if (a == NULL)
			return CBLLM_ERR_NOMEM;
		if (!h->owned && h->n > 0)
			memcpy(a, h->a, (size_t) h->n * sizeof(bpe_cand));
		h->a = a;
		h->cap = cap;
		h->owned = true;
	}
	h->a[i = h->n++] = (bpe_cand) {m->rank, pos, sym[pos].id, sym[sym[pos].next].id, m->new_id};
	for (; i > 0 && CandLess(&h->a[i], &h->a[(i - 1) / 2]); i = (i - 1) / 2)
	{
		bpe_cand	t = h->a[i];

		h->a[i] = h->a[(i - 1) / 2];
		h->a[(i - 1) / 2] = t;
	}
	return CBLLM_OK;
}

/* Remove and return the best candidate of a non-empty heap. */
static bpe_cand
BpePop(bpe_heap *h)
{
	bpe_cand	top = h->a[0], t;

	h->a[0] = h->a[--h->n];
	for (int i = 0, m = 0;; i = m)
	{
		int			l = 2 * i + 1;

		if (l < h->n && CandLess(&h->a[l], &h->a[m]))
			m = l;
		if (l + 1 < h->n && CandLess(&h->a[l + 1], &h->a[m]))
			m = l + 1;
		if (m == i)
			return top;
		t = h->a[i], h->a[i] = h->a[m], h->a[m] = t;
	}
}

/* Split a word into initial symbols: characters, else their bytes, else unk. */
static int
BpeSymbols(tok_enc *e, const char *w, size_t n, bpe_sym *sym, int32_t *ns)
{
	const cbllm_tokenizer *tok = e->tok;
	bool		prev_unk = false;

	*ns = 0;
	for (size_t i = 0, l; i < n; i += l)
	{
		int32_t		id;
		bool		bytes_ok = tok->byte_fallback;

		if ((uint8_t) w[i] < 0x80 && tok->ascii_id[(uint8_t) w[i]] >= 0)
		{
			sym[(*ns)++].id = tok->ascii_id[(uint8_t) w[i]];
			prev_unk = false;
			l = 1;
			continue;
		}
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

/* Run BPE on a word (no ignore_merges) and append its ids. */
static int
BpeRun(tok_enc *e, const char *w, size_t n)
{
	const cbllm_tokenizer *tok = e->tok;
	bpe_sym		local_sym[BPE_LOCAL],
			   *sym = local_sym;
	bpe_cand	local_cand[BPE_LOCAL];
	bpe_heap	h = {local_cand, 0, BPE_LOCAL, false};
	int32_t		ns = 0, i;
	int			rc;

	if (n + 1 > BPE_LOCAL && (sym = malloc((n + 1) * sizeof(bpe_sym))) == NULL)
		return cbllm_fail(e->err, CBLLM_ERR_NOMEM, "tokenizer_encode: out of memory");
	rc = BpeSymbols(e, w, n, sym, &ns);
	for (i = 0; i < ns; i++)
		sym[i].prev = i - 1, sym[i].next = i + 1 < ns ? i + 1 : -1;
	for (i = 0; i < ns && rc == CBLLM_OK; i++)
		rc = BpeQueue(tok, sym, i, &h);
	while (rc == CBLLM_OK && h.n > 0)
	{
		bpe_cand	c = BpePop(&h);
		int32_t		r = sym[c.pos].next;

		if (sym[c.pos].id != c.left || r < 0 || sym[r].id != c.right)
			continue;			/* stale: a neighbour merged since */
		sym[c.pos].id = c.new_id;
		sym[c.pos].next = sym[r].next;
		if (sym[r].next >= 0)
			sym[sym[r].next].prev = c.pos;
		sym[r].id = -1;
		if ((rc = BpeQueue(tok, sym, sym[c.pos].prev, &h)) == CBLLM_OK)
			rc = BpeQueue(tok, sym, c.pos, &h);
	}
	if (rc == CBLLM_ERR_NOMEM)
		rc = cbllm_fail(e->err, rc, "tokenizer_encode: out of memory");
	for (i = 0; ns > 0 && i >= 0 && rc == CBLLM_OK; i = sym[i].next)
		rc = EncPush(e, sym[i].id);	/* symbol 0 always heads the list */
	if (h.owned)
		free(h.a);
	if (sym != local_sym)
		free(sym);
	return rc;
}

/* Run BPE on a word through the call's word cache, when it has one. */
static int
BpeCached(tok_enc *e, const char *w, size_t n)
{
	struct tok_word_cache *c = e->cache;
	uint32_t	h = hash_bytes(w, n), i = h & (CACHE_SLOTS - 1);
	int			first = e->n, rc;

	if (c == NULL || n > CACHE_MAX_WORD)
		return BpeRun(e, w, n);
	for (; c->slot[i].len; i = (i + 1) & (CACHE_SLOTS - 1))
	{
		const cache_slot *sl = &c->slot[i];

		if (sl->hash == h && sl->len == n && memcmp(c->words.data + sl->word, w, n) == 0)
		{
			for (uint32_t k = 0, rc2 = CBLLM_OK; k < sl->n_ids && rc2 == CBLLM_OK; k++)
				if ((rc2 = (uint32_t) EncPush(e, ((const int32_t *) (const void *) c->ids.data)[sl->ids + k])) != CBLLM_OK)
					return (int) rc2;
			return CBLLM_OK;
		}
	}
	if ((rc = BpeRun(e, w, n)) != CBLLM_OK || c->used >= CACHE_SLOTS / 2)
		return rc;
	c->slot[i] = (cache_slot) {h, (uint32_t) c->words.len, (uint32_t) n,
		(uint32_t) (c->ids.len / sizeof(int32_t)), (uint32_t) (e->n - first)};
	if (cbllm_buf_append(&c->words, w, n) != CBLLM_OK ||
		cbllm_buf_append(&c->ids, e->ids + first, (size_t) (e->n - first) * sizeof(int32_t)) != CBLLM_OK)
	{
		c->slot[i].len = 0;		/* not kept; the ids are still right */
		return CBLLM_OK;
	}
	c->used++;
	return CBLLM_OK;
}

/* Whether a long word may be cut before the "▁" at w[i] (see meta_cut). */
static bool
MetaCutAt(const cbllm_tokenizer *tok, const char *w, size_t i)
{
	int			l = 1;

	while (l < 4 && (size_t) l < i && utf8_len(w + i - l, (size_t) l) != l)
		l++;
	if (utf8_len(w + i - l, (size_t) l) != l || vocab_find(tok, w + i - l, (size_t) l) < 0 ||
		(l == 3 && memcmp(w + i - 3, TOK_META, 3) == 0))
		return false;			/* after "▁", or after a character that is not a piece */
	for (int k = 0; k < tok->n_meta_keep; k++)
		if (memcmp(tok->meta_keep[k], w + i - l, (size_t) l) == 0 && (l == 4 || tok->meta_keep[k][l] == '\0'))
			return false;
	return true;
}

/*
 * Encode one pre-token by BPE and append its ids.  A long word of a
 * vocabulary with meta_cut (a SentencePiece text with no pre-tokenizer is one
 * word) is cut before each "▁" that no piece can span, which gives the same
 * ids (no merge can join symbols across the cut) at a fraction of the cost,
 * and lets the word cache see its words.
 */
int
tok_bpe_word(tok_enc *e, const char *w, size_t n)
{
	const cbllm_tokenizer *tok = e->tok;
	int32_t		id;
	size_t		start = 0;
	int			rc = CBLLM_OK;

	if (tok->ignore_merges && (id = vocab_find(tok, w, n)) >= 0)
		return EncPush(e, id);
	if (!tok->meta_cut || n <= CACHE_MAX_WORD)
		return BpeCached(e, w, n);
	for (size_t i = 1; i + 3 <= n && rc == CBLLM_OK; i++)
		if (memcmp(w + i, TOK_META, 3) == 0 && MetaCutAt(tok, w, i))
		{
			rc = BpeCached(e, w + start, i - start);
			start = i;
		}
	return rc == CBLLM_OK ? BpeCached(e, w + start, n - start) : rc;
}

/* Whether the character ending at s[0..end) (or starting at s, forward) is a letter or digit. */
static bool
WordChar(const char *s, size_t n, bool backward)
{
	int			l = 0;
	uint32_t	c = 0;

	if (n == 0)
		return false;
	if (backward)
		for (l = 1; l < 4 && (size_t) l < n && utf8_len(s + n - l, l) != l; l++)
			;
	s = backward ? s + n - l : s;
	l = utf8_decode(s, backward ? (size_t) l : n, &c);
	if (l == 0)
		return false;
	switch (utf8proc_category((utf8proc_int32_t) c))
	{
		case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
		case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
		case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
			return true;
		default:
			return false;
	}
}

/* The added token whose text is s[0..len) and that this pass may match, or NULL. */
static const tok_added *
AddedLookup(const cbllm_tokenizer *tok, const char *s, size_t len, bool normalized)
{
	for (uint32_t i = hash_bytes(s, len) & tok->added_mask; tok->added_hash[i] >= 0; i = (i + 1) & tok->added_mask)
	{
		const tok_added *a = &tok->added[tok->added_hash[i]];

		if (a->len == len && a->normalized == normalized && memcmp(a->match, s, len) == 0)
			return a;
	}
	return NULL;
}

/*
 * Find the leftmost-longest added token of this pass (normalized or not) in
 * s[from..n), a special one only when special is true.  A single_word token
 * next to a letter or digit is passed over, and the search goes on after it.
 */
static const tok_added *
FindAdded(const cbllm_tokenizer *tok, const char *s, size_t n, size_t from, bool normalized, bool special,
		   size_t *at)
{
	for (size_t i = from; i < n && tok->n_added > 0; i++)
	{
		uint8_t		c = (uint8_t) s[i];

		for (int k = tok->lens_first[normalized][c]; k < tok->lens_first[normalized][c + 1]; k++)
		{
			size_t		len = tok->added_lens[k];
			uint8_t		last = len <= n - i ? (uint8_t) s[i + len - 1] : 0;
			const tok_added *a = len <= n - i && (tok->added_last[c][last >> 3] >> (last & 7) & 1) ?
				AddedLookup(tok, s + i, len, normalized) : NULL;

			if (a == NULL || (a->special && !special))
				continue;
			if (a->single_word && (WordChar(s, i, true) || WordChar(s + i + len, n - i - len, false)))
			{
				i += len - 1;
				break;
			}
			*at = i;
			return a;
		}
	}
	return NULL;
}

static int	EncodeNormalized(tok_enc *e, const char *s, size_t n, bool at_start);

/*
 * Split s on added tokens (the normalized ones, or the others) and encode
 * the pieces between them: raw pieces get normalized, normalized ones get
 * pre-tokenized and merged.
 */
static int
EncodeSplit(tok_enc *e, const char *s, size_t n, bool normalized, bool at_start)
{
	for (size_t seg = 0;;)
	{
		size_t		ms = n, me = n, l;
		const tok_added *a = FindAdded(e->tok, s, n, seg, normalized, e->parse_special, &ms);
		int			rc = CBLLM_OK;

		if (a != NULL)
		{
			me = ms + a->len;
			while (a->lstrip && ms > seg)	/* eat whitespace characters before ms */
			{
				for (l = 1; l < 4 && ms - l > seg && utf8_len(s + ms - l, l) != (int) l; l++)
					;
				if (tok_space_len(s + ms - l, l) != (int) l)
					break;
				ms -= l;
			}
			while (a->rstrip && me < n && (l = tok_space_len(s + me, n - me)) > 0)
				me += l;
		}
		if (ms > seg)
			rc = normalized ? tok_pretokenize(e, 0, s + seg, ms - seg, at_start && seg == 0)
				: EncodeNormalized(e, s + seg, ms - seg, seg == 0);
		if (rc == CBLLM_OK && a != NULL)
			rc = EncPush(e, a->id);
		if (rc != CBLLM_OK || a == NULL)
			return rc;
		seg = me;
	}
}

/* Normalize a raw piece, then split it on normalized added tokens. */
static int
EncodeNormalized(tok_enc *e, const char *s, size_t n, bool at_start)
{
	cbllm_buf	b = {0};
	int			rc = tok_normalize(e->tok, s, n, &b);

	if (rc != CBLLM_OK)
		rc = cbllm_fail(e->err, rc, "tokenizer_encode: out of memory");
	else if (b.len > 0)
		rc = EncodeSplit(e, b.data, b.len, true, at_start);
	cbllm_buf_free(&b);
	return rc;
}

/* Encode text to ids, with the post-processor's special tokens when opts.add_bos. */
int
tokenizer_encode(const cbllm_tokenizer *tok, const char *text, size_t len,
				 tokenizer_encode_opts opts, int32_t **ids, int *n_ids,
				 cbllm_err *err)
{
	tok_enc		e = {tok, opts.parse_special, NULL, 0, 0, NULL, NULL, err};
	int			rc = CBLLM_OK;

	if (tok == NULL || ids == NULL || n_ids == NULL || (text == NULL && len > 0))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_encode: invalid argument");
	*ids = NULL;
	*n_ids = 0;
	if (len > (size_t) INT32_MAX / 4)
		return cbllm_fail(err, CBLLM_ERR_TOO_LONG, "tokenizer_encode: text of %zu bytes is too long", len);
	for (int i = 0; opts.add_bos && i < tok->n_prefix && rc == CBLLM_OK; i++)
		rc = EncPush(&e, tok->prefix[i]);
	if (rc == CBLLM_OK && (rc = EncPush(&e, -1)) == CBLLM_OK)	/* a non-empty array even for no ids */
		e.n--;
	if (rc == CBLLM_OK && len >= CACHE_MIN_TEXT)
		e.cache = calloc(1, sizeof(*e.cache));	/* without one, every word runs BPE */
	if (rc == CBLLM_OK)
		rc = EncodeSplit(&e, text, len, false, true);
	for (int i = 0; opts.add_bos && i < tok->n_suffix && rc == CBLLM_OK; i++)
		rc = EncPush(&e, tok->suffix[i]);
	tok_enc_done(&e);
	if (e.cache)
	{
		cbllm_buf_free(&e.cache->words);
		cbllm_buf_free(&e.cache->ids);
		free(e.cache);
	}
	if (rc != CBLLM_OK)
	{
		free(e.ids);
		return rc;
	}
	*ids = e.ids;
	*n_ids = e.n;
	return CBLLM_OK;
}
