/*
 * tokenizer.c: encoding and streaming decoding for HuggingFace tokenizer.json
 * BPE tokenizers of the SentencePiece kind (Llama-2 family).  The tables
 * they read are built by tokenizer_load.c (see tokenizer_internal.h).
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
#include "tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_FFFD		"\xEF\xBF\xBD"

/* ---------------------------------------------------------------- utils */

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

/* ------------------------------------------------------- normalization */

/* Apply the normalizer to s[0..n), replacing the contents of out. */
int
tok_normalize(const cbllm_tokenizer *tok, const char *s, size_t n, cbllm_buf *out)
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
	int			rc = tok_normalize(e->tok, s, n, &b);

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
