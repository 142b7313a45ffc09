/*
 * tokenizer_decode.c: the decoder chain of a tokenizer.json, run one token at
 * a time, and the whole-text decode with tokenizer_config.json's clean-up.
 *
 * HuggingFace decoders come as a Sequence of steps.  Those before Fuse work
 * on each token alone (Replace, ByteLevel, Metaspace's "▁" -> " ", Strip per
 * token), so loading runs them once on every token and keeps each token's
 * decoded bytes (tok_entry.dec).  What is left works on the whole text and
 * is done by the stream: ByteFallback (a <0xXX> token is that byte), Fuse
 * (concatenation), and dropping one leading space (Strip after Fuse, or
 * Metaspace with a prepend scheme).  A missing decoder is the Llama-2 chain
 * (Replace "▁" -> " ", ByteFallback, Fuse, Strip one space).
 *
 * ByteLevel maps each character of a token back to the byte it stands for; a
 * token with a character outside the map (an added token such as
 * "<|im_start|>" has none, but one might) keeps its own bytes, and added
 * tokens always do, as HuggingFace keeps their text.
 *
 * Bytes reach the output through a small UTF-8 assembler in the stream
 * state, so no chunk ever holds part of a character.  An invalid sequence
 * becomes U+FFFD: per byte for byte-fallback tokens (HuggingFace's
 * ByteFallback); for ByteLevel, one per maximal invalid stretch, as a lossy
 * UTF-8 conversion of the whole text gives.  Unlike HuggingFace, which turns
 * a whole run of byte-fallback tokens into U+FFFDs when any of it is invalid,
 * the assembler keeps the run's valid characters.
 */
#include "tokenizer/tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#define TOK_FFFD		"\xEF\xBF\xBD"
#define TOK_MAX_DEC		16			/* decoder steps */

enum
{
	DEC_REPLACE, DEC_BYTELEVEL, DEC_METASPACE, DEC_STRIP
};

typedef struct dec_step			/* a per-token decoder step */
{
	int			kind;			/* DEC_* */
	const char *a, *b;			/* Replace a by b; Strip: a is the character */
	size_t		alen, blen;
	int			start, stop;	/* Strip: how many to drop from each end */
} dec_step;

typedef struct dec_chain
{
	dec_step	st[TOK_MAX_DEC];
	int			n;
	bool		fused;			/* a Fuse has been seen: what follows is whole-text */
} dec_chain;

/* ------------------------------------------------------------- loading */

/* Read a Strip step; after Fuse only dropping one leading space is supported. */
static int
LoadStrip(cbllm_tokenizer *tok, dec_chain *c, const cJSON *d, const char *path, cbllm_err *err)
{
	const char *content = JSTR(d, "content");
	const cJSON *start = JGET(d, "start"), *stop = JGET(d, "stop");
	int			n0 = cJSON_IsNumber(start) ? (int) start->valuedouble : -1,
				n1 = cJSON_IsNumber(stop) ? (int) stop->valuedouble : -1;

	if (content == NULL || utf8_len(content, strlen(content)) != (int) strlen(content) ||
		n0 < 0 || n1 < 0 || n0 > 64 || n1 > 64)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: Strip decoder needs one character and counts", path);
	if (c->fused)
	{
		if (n1 != 0 || n0 > 1 || (n0 == 1 && strcmp(content, " ") != 0))
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
							  "%s: a Strip decoder after Fuse may only drop one leading space", path);
		tok->dec_strip |= n0 == 1;
		tok->dec_strip_char = ' ';
		return CBLLM_OK;
	}
	c->st[c->n++] = (dec_step) {DEC_STRIP, tok_arena_dup(tok, content, strlen(content)), NULL, strlen(content), 0, n0, n1};
	return c->st[c->n - 1].a ? CBLLM_OK : cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
}

/* Append the steps of a decoder (recursing into Sequence). */
static int
LoadSteps(cbllm_tokenizer *tok, void *ctx, const cJSON *d, int depth, const char *path, cbllm_err *err)
{
	const char *t = JSTR(d, "type");
	dec_chain  *c = ctx;
	int			rc = CBLLM_OK;

	if (!cJSON_IsObject(d) || t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: decoder must be null or an object with a \"type\"", path);
	if (strcmp(t, "Sequence") == 0)
		return tok_load_sequence(tok, c, d, "decoders", depth, LoadSteps, "decoder", path, err);
	if (c->n == TOK_MAX_DEC)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: too many decoder steps", path);
	if (strcmp(t, "Fuse") == 0)
		c->fused = true;
	else if (strcmp(t, "ByteFallback") == 0)
		tok->dec_byte_fallback = true;
	else if (strcmp(t, "ByteLevel") == 0)
	{
		tok->dec_byte_level = true;
		c->st[c->n++] = (dec_step) {.kind = DEC_BYTELEVEL};
	}
	else if (strcmp(t, "Strip") == 0)
		rc = LoadStrip(tok, c, d, path, err);
	else if (strcmp(t, "Replace") == 0)
	{
		const char *a = JSTR(JGET(d, "pattern"), "String"), *b = JSTR(d, "content");

		if (a == NULL || *a == '\0' || b == NULL)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Replace decoder needs a non-empty String pattern and a content", path);
		c->st[c->n++] = (dec_step) {DEC_REPLACE, tok_arena_dup(tok, a, strlen(a)), tok_arena_dup(tok, b, strlen(b)),
			strlen(a), strlen(b), 0, 0};
		if (c->st[c->n - 1].a == NULL || c->st[c->n - 1].b == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
		if (strlen(b) > 4 * strlen(a))
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Replace decoder lengthens text too much", path);
	}
	else if (strcmp(t, "Metaspace") == 0)
	{
		const char *scheme = JSTR(d, "prepend_scheme");
		bool		prefix = true;

		if ((rc = tok_get_bool(d, "add_prefix_space", &prefix, path, "decoder: ", err)) != CBLLM_OK)
			return rc;
		if (JSTR(d, "replacement") != NULL && strcmp(JSTR(d, "replacement"), TOK_META) != 0)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Metaspace decoder replacement must be \"" TOK_META "\"", path);
		c->st[c->n++] = (dec_step) {.kind = DEC_METASPACE};
		tok->dec_strip |= scheme ? strcmp(scheme, "never") != 0 : prefix;
		tok->dec_strip_char = ' ';
	}
	else
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: unsupported decoder type %.64s", path, t);
	return rc;
}

/* Byte that a ByteLevel character stands for, from the encoding table; -1 if none. */
static int
ByteOf(const int16_t *rev, const char *s, int len)
{
	uint32_t	c = 0;

	utf8_decode(s, (size_t) len, &c);
	return c < 0x144 ? rev[c] : -1;
}

/* Run one per-token step over in[0..n) into out (replacing its contents). */
static int
RunStep(const dec_step *st, const int16_t *rev, bool added,
		 const char *in, size_t n, cbllm_buf *out)
{
	int			rc = CBLLM_OK;

	out->len = 0;
	if (st->kind == DEC_BYTELEVEL && !added)
	{
		for (size_t i = 0, l; i < n && rc == CBLLM_OK; i += l)
		{
			int			b = (l = utf8_len(in + i, n - i)) > 0 ? ByteOf(rev, in + i, (int) l) : -1;
			uint8_t		c = (uint8_t) b;

			if (b < 0)			/* not all characters map: the token keeps its bytes */
			{
				out->len = 0;
				return cbllm_buf_append(out, in, n);
			}
			rc = cbllm_buf_append(out, &c, 1);
		}
		return rc;
	}
	if (st->kind == DEC_STRIP)
	{
		for (int k = 0; k < st->start && n >= st->alen && memcmp(in, st->a, st->alen) == 0; k++)
			in += st->alen, n -= st->alen;
		for (int k = 0; k < st->stop && n >= st->alen && memcmp(in + n - st->alen, st->a, st->alen) == 0; k++)
			n -= st->alen;
		return cbllm_buf_append(out, in, n);
	}
	if (st->kind != DEC_REPLACE && st->kind != DEC_METASPACE)
		return cbllm_buf_append(out, in, n);
	{
		const char *a = st->kind == DEC_REPLACE ? st->a : TOK_META,
				   *b = st->kind == DEC_REPLACE ? st->b : " ";
		size_t		alen = st->kind == DEC_REPLACE ? st->alen : 3,
					blen = st->kind == DEC_REPLACE ? st->blen : 1,
					run = 0;

		for (size_t i = 0; i + alen <= n && rc == CBLLM_OK;)
		{
			if (memcmp(in + i, a, alen) != 0)
			{
				i++;
				continue;
			}
			if ((rc = cbllm_buf_append(out, in + run, i - run)) == CBLLM_OK)
				rc = cbllm_buf_append(out, b, blen);
			run = i += alen;
		}
		return rc == CBLLM_OK ? cbllm_buf_append(out, in + run, n - run) : rc;
	}
}

/* Give every token its decoded bytes under the per-token steps of chain c. */
static int
DecodeEntries(cbllm_tokenizer *tok, const dec_chain *c, const char *path, cbllm_err *err)
{
	int16_t		rev[0x144];
	cbllm_buf	x = {0}, y = {0}, t;
	int			rc = CBLLM_OK;

	memset(rev, 0xFF, sizeof(rev));
	for (int b = 0; b < 256; b++)
	{
		uint32_t	c = 0;

		utf8_decode(tok->bl_char[b], (size_t) tok->bl_len[b], &c);
		rev[c] = (int16_t) b;
	}
	for (int id = 0; id < tok->n_ids && rc == CBLLM_OK; id++)
	{
		tok_entry  *e = &tok->ent[id];

		if (!tok->dec_byte_fallback)
			e->byte = -1;
		e->dec = e->piece;
		e->dec_len = e->len;
		if (e->piece == NULL || e->byte >= 0 || c->n == 0)
			continue;
		x.len = 0;
		rc = cbllm_buf_append(&x, e->piece, e->len);
		for (int k = 0; k < c->n && rc == CBLLM_OK; k++)
		{
			rc = RunStep(&c->st[k], rev, e->added, x.data, x.len, &y);
			t = x, x = y, y = t;
		}
		if (rc == CBLLM_OK && (x.len != e->len || (x.len > 0 && memcmp(x.data, e->piece, e->len) != 0)))
		{
			e->dec = x.len ? tok_arena_dup(tok, x.data, x.len) : "";
			e->dec_len = (uint32_t) x.len;
			rc = e->dec ? CBLLM_OK : CBLLM_ERR_NOMEM;
		}
	}
	cbllm_buf_free(&x);
	cbllm_buf_free(&y);
	return rc == CBLLM_OK ? CBLLM_OK : cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
}

/* Read the decoder (null or absent: the Llama-2 chain) and decode every token. */
int
tok_load_decoder(cbllm_tokenizer *tok, const cJSON *d, const char *path, cbllm_err *err)
{
	dec_chain	c = {0};
	int			rc;

	if (d == NULL || cJSON_IsNull(d))
	{
		c.st[c.n++] = (dec_step) {DEC_REPLACE, TOK_META, " ", 3, 1, 0, 0};
		tok->dec_byte_fallback = tok->dec_strip = true;
		tok->dec_strip_char = ' ';
		return DecodeEntries(tok, &c, path, err);
	}
	if ((rc = LoadSteps(tok, &c, d, 0, path, err)) != CBLLM_OK)
		return rc;
	return DecodeEntries(tok, &c, path, err);
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
Emit(tokenizer_stream *s, cbllm_buf *out, const char *p, size_t n)
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

/* Replace the held bytes of an unfinished character with U+FFFD (one, or one each). */
static int
FlushPending(tokenizer_stream *s, cbllm_buf *out)
{
	int			n = s->one_fffd && s->n_pending > 0 ? 1 : s->n_pending, rc = CBLLM_OK;

	s->n_pending = 0;
	for (int i = 0; i < n && rc == CBLLM_OK; i++)
		rc = Emit(s, out, TOK_FFFD, 3);
	return rc;
}

/* Feed one byte through the UTF-8 assembler. */
static int
StreamByte(tokenizer_stream *s, uint8_t b, cbllm_buf *out)
{
	int			need, rc;

	s->pending[s->n_pending++] = b;
	need = utf8_prefix(s->pending, s->n_pending);
	if (need == 0 && s->n_pending > 1)
	{
		s->n_pending--;			/* b does not continue the held character */
		if ((rc = FlushPending(s, out)) != CBLLM_OK)
			return rc;
		s->pending[s->n_pending++] = b;
		need = utf8_prefix(s->pending, 1);
	}
	if (need == 0)
	{
		s->n_pending = 0;
		return Emit(s, out, TOK_FFFD, 3);
	}
	if (need == s->n_pending)
	{
		s->n_pending = 0;
		return Emit(s, out, (const char *) s->pending, need);
	}
	return CBLLM_OK;
}

/* Feed p[0..n) through the assembler, whole characters at once when nothing is held. */
static int
StreamBytes(tokenizer_stream *s, const char *p, size_t n, cbllm_buf *out)
{
	int			rc = CBLLM_OK;

	for (size_t i = 0, j, l; i < n && rc == CBLLM_OK;)
	{
		for (j = i; s->n_pending == 0 && j < n && (l = utf8_len(p + j, n - j)) > 0; j += l)
			;
		if (j > i)
			rc = Emit(s, out, p + i, j - i), i = j;
		else
			rc = StreamByte(s, (uint8_t) p[i++], out);
	}
	return rc;
}

/* Append the text that token id completes. */
int
tokenizer_stream_push(const cbllm_tokenizer *tok, tokenizer_stream *s,
					  int32_t id, cbllm_buf *out)
{
	const tok_entry *t;
	int			rc;

	if (tok == NULL || s == NULL || out == NULL || s->n_pending < 0 || s->n_pending > 3 ||
		id < 0 || id >= tok->n_ids || tok->ent[id].piece == NULL)
		return CBLLM_ERR_INVALID;
	t = &tok->ent[id];
	if (t->special && s->skip_special)
		return CBLLM_OK;
	s->strip_space &= tok->dec_strip;
	s->one_fffd = tok->dec_byte_level;
	if (t->byte >= 0)
		return StreamByte(s, (uint8_t) t->byte, out);
	if (!tok->dec_byte_level || t->added)	/* a whole text: what is held is unfinished */
	{
		if ((rc = FlushPending(s, out)) != CBLLM_OK)
			return rc;
	}
	return StreamBytes(s, t->dec, t->dec_len, out);
}

/* The bytes token id adds to a generated text. */
const char *
tokenizer_token_bytes(const cbllm_tokenizer *tok, int32_t id, char *one, size_t *len)
{
	const tok_entry *t;

	*len = 0;
	if (id < 0 || id >= tok->n_ids || tok->ent[id].piece == NULL || tok->ent[id].special)
		return NULL;
	t = &tok->ent[id];
	if (t->byte >= 0)
	{
		*one = (char) t->byte;
		*len = 1;
		return one;
	}
	*len = t->dec_len;
	return t->dec;
}

/* Flush the bytes of an unfinished character as U+FFFD replacement characters. */
int
tokenizer_stream_flush(tokenizer_stream *s, cbllm_buf *out)
{
	if (s == NULL || out == NULL || s->n_pending < 0 || s->n_pending > 3)
		return CBLLM_ERR_INVALID;
	return FlushPending(s, out);
}

/* The clean-up of transformers' clean_up_tokenization_spaces, in its order. */
static const char *const clean_up_pairs[][2] = {
	{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
	{" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

/* Apply the clean-up replacements, each over the whole text, to out[from..). */
static void
CleanUp(cbllm_buf *out, size_t from)
{
	for (size_t k = 0; k < sizeof(clean_up_pairs) / sizeof(clean_up_pairs[0]); k++)
	{
		const char *a = clean_up_pairs[k][0], *b = clean_up_pairs[k][1];
		size_t		alen = strlen(a), blen = strlen(b), w = from;

		for (size_t i = from; i < out->len;)	/* b is shorter: rewrite in place */
		{
			if (out->len - i >= alen && memcmp(out->data + i, a, alen) == 0)
			{
				memmove(out->data + w, b, blen);
				w += blen, i += alen;
			}
			else
				out->data[w++] = out->data[i++];
		}
		out->len = w;
	}
}

/* Decode a whole id sequence from its start, with the configured clean-up unless raw. */
int
tokenizer_decode_with(const cbllm_tokenizer *tok, const int32_t *ids, int n,
					  tokenizer_decode_opts opts, cbllm_buf *out, cbllm_err *err)
{
	tokenizer_stream s;
	size_t		from = out ? out->len : 0;
	int			rc = CBLLM_OK;

	if (tok == NULL || out == NULL || (ids == NULL && n > 0))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "tokenizer_decode: invalid argument");
	tokenizer_stream_init(&s, true, opts.skip_special);
	for (int i = 0; i < n && rc == CBLLM_OK; i++)
		if ((rc = tokenizer_stream_push(tok, &s, ids[i], out)) == CBLLM_ERR_INVALID)
			return cbllm_fail(err, rc, "tokenizer_decode: token id %d at position %d is not in the vocabulary", ids[i], i);
	if (rc == CBLLM_OK)
		rc = tokenizer_stream_flush(&s, out);
	if (rc != CBLLM_OK)
		return cbllm_fail(err, rc, "tokenizer_decode: out of memory");
	if (tok->clean_up && !opts.raw)
		CleanUp(out, from);
	return CBLLM_OK;
}

/* Decode a whole id sequence with the configured clean-up. */
int
tokenizer_decode(const cbllm_tokenizer *tok, const int32_t *ids, int n,
				 bool skip_special, cbllm_buf *out, cbllm_err *err)
{
	tokenizer_decode_opts o = {.skip_special = skip_special};

	return tokenizer_decode_with(tok, ids, n, o, out, err);
}
