/*
 * test_tokenizer.c: unit tests of the tokenizer: the llama.cpp conformance
 * vectors for Llama-2, round trips, special tokens, streaming decode, small
 * synthetic tokenizers and malformed tokenizer files.
 *
 * Usage: test_tokenizer [testdata-dir]   (default: $CBLLM_TESTDATA, else
 * test/data/llama2-tokenizer, from the repository root)
 */
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() 0
#endif

#define FFFD "\xEF\xBF\xBD"

static cbllm_tokenizer *tok;

/* Encode text with the given options; returns ids (caller frees) or NULL. */
static int32_t *
Enc(const cbllm_tokenizer *t, const char *text, size_t len, bool add_bos,
	bool parse_special, int *n)
{
	tokenizer_encode_opts opts = {add_bos, parse_special};
	int32_t    *ids = NULL;
	cbllm_err	err = {{0}};

	if (tokenizer_encode(t, text, len, opts, &ids, n, &err) != CBLLM_OK)
	{
		TAP_DIAG("encode failed: %s", err.msg);
		*n = 0;
		return NULL;
	}
	return ids;
}

/* Whether ids[0..n) equals want[0..nw). */
static bool
IdsEq(const int32_t *ids, int n, const int32_t *want, int nw)
{
	return ids != NULL && n == nw && (n == 0 || memcmp(ids, want, n * sizeof(int32_t)) == 0);
}

/* Print ids as a diagnostic line. */
static void
DiagIds(const char *label, const int32_t *ids, int n)
{
	char		line[4096];
	size_t		o = 0;

	line[0] = '\0';
	for (int i = 0; i < n && o < sizeof(line) - 16; i++)
		o += snprintf(line + o, sizeof(line) - o, " %d", ids[i]);
	TAP_DIAG("%s:%s", label, line);
}

/* Whether s[0..n) is valid UTF-8 (an independent check of decoder output). */
static bool
ValidUtf8(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *) s;

	for (size_t i = 0; i < n;)
	{
		unsigned	c = p[i];
		int			k = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
		unsigned long cp;

		if (k < 0 || n - i <= (size_t) k)
			return false;
		cp = k == 0 ? c : c & (0x3F >> k);
		for (int j = 1; j <= k; j++)
		{
			if ((p[i + j] & 0xC0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + j] & 0x3F);
		}
		if ((k == 1 && cp < 0x80) || (k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
			(k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
			return false;
		i += k + 1;
	}
	return true;
}

/* Decode ids into a malloc'd NUL-terminated string (length in *len), or NULL. */
static char *
Dec(const cbllm_tokenizer *t, const int32_t *ids, int n, bool skip_special, size_t *len)
{
	cbllm_buf	out = {0};
	cbllm_err	err = {{0}};

	if (tokenizer_decode(t, ids, n, skip_special, &out, &err) != CBLLM_OK ||
		cbllm_buf_append(&out, "", 0) != CBLLM_OK)
	{
		TAP_DIAG("decode failed: %s", err.msg);
		cbllm_buf_free(&out);
		return NULL;
	}
	*len = out.len;
	return out.data;
}

/* A printable, shortened rendering of a text for check names. */
static const char *
Show(const char *s, size_t n)
{
	static char buf[64];
	size_t		o = 0;

	for (size_t i = 0; i < n && o < 40; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '\n' || c == '\t' || c == '\r' || c == '#' || c < 0x20 || c >= 0x7F)
			o += snprintf(buf + o, sizeof(buf) - o, "\\x%02X", c);
		else
			buf[o++] = (char) c;
	}
	if (o >= 40)
		o = 40, memcpy(buf + o, "...", 4);
	else
		buf[o] = '\0';
	return buf;
}

/* Whether decode(encode(text)) gives back the exact text (also with BOS). */
static bool
RoundTrips(const char *text, size_t len, bool verbose)
{
	int			n;
	int32_t    *ids = Enc(tok, text, len, true, false, &n);
	size_t		dlen = 0,
				blen = 0;
	char	   *d = ids ? Dec(tok, ids + 1, n - 1, false, &dlen) : NULL;
	char	   *b = ids ? Dec(tok, ids, n, true, &blen) : NULL;
	bool		ok = d && b && n >= 1 && ids[0] == 1 && dlen == len && memcmp(d, text, len) == 0 &&
		blen == len && memcmp(b, text, len) == 0;

	if (!ok && verbose)
		TAP_DIAG("text %s decoded as %s", Show(text, len), d ? Show(d, dlen) : "(error)");
	free(ids);
	free(d);
	free(b);
	return ok;
}

/* The llama.cpp conformance vectors: exact ids for each text. */
static void
TestVectors(const char *dir)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	char	   *ipath = cbllm_path_join(dir, "vectors.inp"),
			   *opath = cbllm_path_join(dir, "vectors.out");
	char	   *inp = NULL,
			   *out = NULL,
			   *texts[128],
			   *lines[128];
	size_t		ilen,
				olen,
				tlens[128];
	int			nt = 0,
				nl = 0,
				nrt = 0;
	cbllm_err	err;

	if (cbllm_read_file(ipath, &inp, &ilen, &err) != CBLLM_OK ||
		cbllm_read_file(opath, &out, &olen, &err) != CBLLM_OK)
	{
		TAP_OK(0, "read conformance vectors: %s", err.msg);
		goto done;
	}
	/* each text is followed by the separator (the file ends with one) */
	for (char *p = inp, *q; nt < 128 && (q = memmem(p, ilen - (p - inp), sep, sizeof(sep) - 1)) != NULL;
		 p = q + sizeof(sep) - 1)
	{
		texts[nt] = p;
		tlens[nt++] = q - p;
		if (q + sizeof(sep) - 1 == inp + ilen)
			break;
	}
	for (char *p = out; nl < 128 && p < out + olen;)
	{
		char	   *e = memchr(p, '\n', olen - (p - out));

		if (e == NULL)
			e = out + olen;
		*e = '\0';
		lines[nl++] = p;
		p = e + 1;
	}
	TAP_OK(nt > 40 && nt == nl, "conformance files hold %d texts and %d id lines", nt, nl);
	for (int i = 0; i < nt && i < nl; i++)
	{
		int32_t		want[1024];
		int			nw = 0,
					n;
		char	   *p = lines[i],
				   *e;
		int32_t    *ids;

		for (long v; nw < 1024 && (v = strtol(p, &e, 10), e != p); p = e)
			want[nw++] = (int32_t) v;
		ids = Enc(tok, texts[i], tlens[i], false, false, &n);
		TAP_OK(IdsEq(ids, n, want, nw), "vector %d \"%s\" encodes to its %d ids", i + 1,
			   Show(texts[i], tlens[i]), nw);
		if (!IdsEq(ids, n, want, nw))
		{
			DiagIds("expected", want, nw);
			DiagIds("got     ", ids, n);
		}
		free(ids);
		nrt += RoundTrips(texts[i], tlens[i], true);
	}
	TAP_OK(nrt == nt, "all %d conformance texts round trip through decode (%d did)", nt, nrt);
done:
	free(inp);
	free(out);
	free(ipath);
	free(opath);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;

/* xorshift64: a fixed-seed pseudo-random number. */
static uint32_t
Rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t) (rng_state >> 32);
}

/* Write code point c as UTF-8; returns its length. */
static int
PutCp(char *o, uint32_t c)
{
	if (c < 0x80)
		return o[0] = (char) c, 1;
	if (c < 0x800)
		return o[0] = (char) (0xC0 | c >> 6), o[1] = (char) (0x80 | (c & 0x3F)), 2;
	if (c < 0x10000)
		return o[0] = (char) (0xE0 | c >> 12), o[1] = (char) (0x80 | ((c >> 6) & 0x3F)),
			o[2] = (char) (0x80 | (c & 0x3F)), 3;
	return o[0] = (char) (0xF0 | c >> 18), o[1] = (char) (0x80 | ((c >> 12) & 0x3F)),
		o[2] = (char) (0x80 | ((c >> 6) & 0x3F)), o[3] = (char) (0x80 | (c & 0x3F)), 4;
}

/* A random code point from a mix of scripts; never a surrogate or U+2581. */
static uint32_t
RandomCp(void)
{
	static const uint32_t ws[] = {' ', ' ', '\t', '\n', '\r', 0x3000, 0xA0};
	uint32_t	c;

	switch (Rnd() % 10)
	{
		case 0:
		case 1:
		case 2:
		case 3:
			return 0x20 + Rnd() % 95;
		case 4:
			return ws[Rnd() % 7];
		case 5:
			return Rnd() % 0x80;	/* controls and NUL too */
		case 6:
			return 0xA0 + Rnd() % (0x250 - 0xA0);
		case 7:
			return 0x4E00 + Rnd() % 0x5200;
		case 8:
			c = 0x800 + Rnd() % (0x10000 - 0x800);
			return (c >= 0xD800 && c <= 0xDFFF) || c == 0x2581 ? 0x3042 : c;
		default:
			return Rnd() % 2 ? 0x1F300 + Rnd() % 0x300 : 0x10000 + Rnd() % 0x100000;
	}
}

/* decode(encode(text)) == text for chosen and pseudo-random strings. */
static void
TestRoundTrips(void)
{
	static const char *texts[] = {
		"Hello world", " Hello", "  two leading spaces", "   three", "\tTab first",
		"trailing spaces   ", "\n\nnewlines first", "mixed \t\n\r\n  whitespace \r ",
		"\xC3\x87\xC3\xA0 va? d\xC3\xA9j\xC3\xA0 vu \xE2\x80\x94 na\xC3\xAFve fa\xC3\xA7" "ade",
		"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88 \xE4\xB8\xAD\xE6\x96\x87",
		"emoji \xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
		"\xF0\x9D\x94\x98\xF0\x9D\x94\xAB \xF0\x90\x8D\x88 \xF4\x8F\xBF\xBD four-byte",
		"<s> looks special </s>", "<0x41> is text", " ", "a", "\xEF\xBF\xBD replacement",
	};
	int			nt = sizeof(texts) / sizeof(texts[0]),
				ok = 0,
				n;
	char		buf[512];
	int32_t    *ids;
	cbllm_buf	out = {0};
	tokenizer_stream s;

	for (int i = 0; i < nt; i++)
		TAP_OK(RoundTrips(texts[i], strlen(texts[i]), true), "round trip \"%s\"", Show(texts[i], strlen(texts[i])));
	TAP_OK(RoundTrips("a\0b", 3, true), "round trip of a text holding NUL");
	for (int i = 0; i < 3000; i++)
	{
		size_t		len = 0,
					nc = 1 + Rnd() % 40;

		for (size_t k = 0; k < nc; k++)
			len += PutCp(buf + len, RandomCp());
		if (RoundTrips(buf, len, ok == i))
			ok++;
	}
	TAP_OK(ok == 3000, "3000 pseudo-random UTF-8 strings round trip (%d did)", ok);

	/* a continuation (no strip) keeps the space that Prepend added */
	ids = Enc(tok, "Hello", 5, false, false, &n);
	tokenizer_stream_init(&s, false, false);
	for (int i = 0; i < n; i++)
		tokenizer_stream_push(tok, &s, ids[i], &out);
	TAP_OK(out.len == 6 && memcmp(out.data, " Hello", 6) == 0, "continuation decode keeps the leading space");
	free(ids);
	cbllm_buf_free(&out);
}

/* BOS/EOS, parse_special and skip_special. */
static void
TestSpecial(void)
{
	static const int32_t hello[] = {15043},
				bos_hello[] = {1, 15043},
				bos_bos_hello[] = {1, 1, 15043},
				hello_eos[] = {15043, 2},
				bos_only[] = {1};
	int			n;
	int32_t    *ids;
	size_t		len;
	char	   *d;
	bool		has_bos = false;

	TAP_OK(tokenizer_bos_id(tok) == 1 && tokenizer_eos_id(tok) == 2, "BOS is 1 and EOS is 2");
	TAP_OK(tokenizer_vocab_size(tok) == 32000, "vocabulary size is 32000");
	TAP_OK(tokenizer_is_special(tok, 1) && tokenizer_is_special(tok, 2) && !tokenizer_is_special(tok, 15043),
		   "<s> and </s> are special, Hello is not");
	TAP_OK(strcmp(tokenizer_piece(tok, 1), "<s>") == 0 && strcmp(tokenizer_piece(tok, 13), "<0x0A>") == 0 &&
		   tokenizer_piece(tok, 32000) == NULL && tokenizer_piece(tok, -1) == NULL,
		   "tokenizer_piece returns stored pieces and NULL for bad ids");

	ids = Enc(tok, "Hello", 5, false, false, &n);
	TAP_OK(IdsEq(ids, n, hello, 1), "\"Hello\" is [15043]");
	free(ids);
	ids = Enc(tok, "Hello", 5, true, false, &n);
	TAP_OK(IdsEq(ids, n, bos_hello, 2), "add_bos prepends BOS");
	free(ids);
	ids = Enc(tok, "<s>Hello", 8, false, true, &n);
	TAP_OK(IdsEq(ids, n, bos_hello, 2), "parse_special: \"<s>Hello\" is [1, 15043]");
	free(ids);
	ids = Enc(tok, "<s>Hello", 8, true, true, &n);
	TAP_OK(IdsEq(ids, n, bos_bos_hello, 3), "parse_special + add_bos: the text's <s> and the added BOS (as HuggingFace)");
	free(ids);
	ids = Enc(tok, "Hello</s>", 9, false, true, &n);
	TAP_OK(IdsEq(ids, n, hello_eos, 2), "parse_special: \"Hello</s>\" ends with EOS 2");
	free(ids);
	ids = Enc(tok, "<s>", 3, false, false, &n);
	for (int i = 0; i < n; i++)
		has_bos |= ids[i] == 1;
	TAP_OK(ids && n > 1 && !has_bos, "without parse_special \"<s>\" is plain pieces (%d ids)", n);
	free(ids);
	ids = Enc(tok, "<s>", 3, true, false, &n);
	TAP_OK(ids && n > 1 && ids[0] == 1 && ids[1] != 1, "without parse_special add_bos still adds a BOS before \"<s>\" text");
	free(ids);
	ids = Enc(tok, "", 0, false, true, &n);
	TAP_OK(ids != NULL && n == 0, "empty text without BOS gives no ids");
	free(ids);
	ids = Enc(tok, "", 0, true, true, &n);
	TAP_OK(IdsEq(ids, n, bos_only, 1), "empty text with add_bos gives [BOS]");
	free(ids);

	ids = Enc(tok, "<s>Hello</s>", 12, false, true, &n);
	d = Dec(tok, ids, n, true, &len);
	TAP_OK(d && strcmp(d, "Hello") == 0, "skip_special decode of [1, 15043, 2] is \"Hello\"");
	free(d);
	d = Dec(tok, ids, n, false, &len);
	TAP_OK(d && strcmp(d, "<s> Hello</s>") == 0, "decode without skip_special is \"<s> Hello</s>\" (HF)");
	free(d);
	free(ids);
	{
		int32_t		bad[] = {15043, 32000};
		cbllm_buf	out = {0};
		cbllm_err	err = {{0}};
		int			rc = tokenizer_decode(tok, bad, 2, false, &out, &err);

		TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "32000"), "decode of an out-of-range id fails: %s", err.msg);
		cbllm_buf_free(&out);
		ids = (int32_t *) &rc;
		rc = tokenizer_encode(tok, NULL, 0, (tokenizer_encode_opts) {false, false}, &ids, &n, &err);
		TAP_OK(rc == CBLLM_OK && n == 0, "encode of a NULL text of length 0 gives no ids");
		free(ids);
		ids = NULL;
		rc = tokenizer_encode(NULL, "a", 1, (tokenizer_encode_opts) {false, false}, &ids, &n, &err);
		TAP_OK(rc == CBLLM_ERR_INVALID && ids == NULL, "encode without a tokenizer is an invalid argument");
	}
}

/* Streaming decode never splits a character; flush replaces a dangling one. */
static void
TestStream(void)
{
	const char *text = "C\xE1\xBB\xAD" "a Vi\xE1\xBB\x87t \xF0\x9F\xA6\x99 \xE1\x9E\x80\xE1\x9E\xB6 ok";
	int			n,
				held = 0;
	int32_t    *ids = Enc(tok, text, strlen(text), false, false, &n);
	cbllm_buf	all = {0},
				chunk = {0};
	tokenizer_stream s;
	bool		valid = true;
	size_t		len;
	char	   *d = Dec(tok, ids, n, false, &len);

	tokenizer_stream_init(&s, true, false);
	for (int i = 0; i < n; i++)
	{
		chunk.len = 0;
		if (tokenizer_stream_push(tok, &s, ids[i], &chunk) != CBLLM_OK)
			valid = false;
		valid &= ValidUtf8(chunk.data, chunk.len);
		held += chunk.len == 0;
		cbllm_buf_append(&all, chunk.data, chunk.len);
	}
	chunk.len = 0;
	tokenizer_stream_flush(&s, &chunk);
	TAP_OK(valid && held > 0 && chunk.len == 0, "stream: every chunk is valid UTF-8 (%d tokens held bytes back)", held);
	TAP_OK(d && all.len == len && memcmp(all.data, d, len) == 0 && strcmp(d, text) == 0,
		   "stream: chunks concatenate to the whole decode and the text");
	free(ids);
	free(d);

	/* byte-level cases: <0xXX> is id 3 + XX */
	{
		struct
		{
			const char *name;
			int32_t		ids[6];
			int			n;
			const char *want;
		}			cases[] = {
			{"dangling lead byte is U+FFFD at flush", {3 + 0xE1}, 1, FFFD},
			{"interrupted sequence then a piece", {3 + 0xE1, 3 + 0x9E, 15043}, 3, FFFD FFFD " Hello"},
			{"invalid byte is U+FFFD", {3 + 0xFF, 3 + 0x41}, 2, FFFD "A"},
			{"bad continuation restarts", {3 + 0xC3, 3 + 0x28}, 2, FFFD "("},
			{"4-byte character assembled", {3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99}, 4, "\xF0\x9F\xA6\x99"},
			{"overlong E0 80 rejected", {3 + 0xE0, 3 + 0x80, 3 + 0x80}, 3, FFFD FFFD FFFD},
			{"byte space at start is stripped", {3 + 0x20, 3 + 0x20, 3 + 0x41}, 3, " A"},
		};

		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		{
			cbllm_buf	out = {0};
			bool		ok = true;

			tokenizer_stream_init(&s, true, false);
			for (int i = 0; i < cases[c].n; i++)
			{
				size_t		before = out.len;

				ok &= tokenizer_stream_push(tok, &s, cases[c].ids[i], &out) == CBLLM_OK;
				ok &= ValidUtf8(out.data + before, out.len - before);
			}
			ok &= tokenizer_stream_flush(&s, &out) == CBLLM_OK;
			ok &= out.len == strlen(cases[c].want) && memcmp(out.data, cases[c].want, out.len) == 0;
			ok &= s.n_pending == 0;
			TAP_OK(ok, "stream: %s", cases[c].name);
			cbllm_buf_free(&out);
		}
	}
	cbllm_buf_free(&all);
	cbllm_buf_free(&chunk);
}

/* Invalid UTF-8 input is encoded byte by byte; long texts encode fast. */
static void
TestHostileText(void)
{
	const char *bad = "\xFF\xFE abc \xC3(\xE2\x82";
	int			n,
				nb = 0;
	int32_t    *ids = Enc(tok, bad, strlen(bad), false, false, &n);
	size_t		len,
				big = 100 * 1024;
	char	   *d = ids ? Dec(tok, ids, n, false, &len) : NULL;
	char	   *text = malloc(big);
	double		t0,
				t1,
				limit = UNDER_VALGRIND() ? 60.0 : 1.0;

	for (int i = 0; i < n; i++)
		nb += ids[i] >= 3 && ids[i] < 259;
	TAP_OK(ids && nb == 5, "invalid UTF-8 input goes to byte fallback (%d byte tokens)", nb);
	TAP_OK(d && strcmp(d, FFFD FFFD " abc " FFFD "(" FFFD FFFD) == 0,
		   "invalid UTF-8 input decodes to U+FFFD per bad byte");
	free(ids);
	free(d);

	for (size_t o = 0; o < big;)
	{
		char		c[4];
		int			l = PutCp(c, RandomCp());

		if (o + l > big)
			break;
		memcpy(text + o, c, l);
		o += l;
		len = o;
	}
	t0 = cbllm_now();
	ids = Enc(tok, text, len, true, true, &n);
	t1 = cbllm_now();
	TAP_OK(ids && t1 - t0 < limit, "100 KB mixed text: %d ids in %.3f s", n, t1 - t0);
	free(ids);
	TAP_OK(RoundTrips(text, len, true), "100 KB mixed text round trips");
	memset(text, 'a', big);
	t0 = cbllm_now();
	ids = Enc(tok, text, big, false, false, &n);
	t1 = cbllm_now();
	TAP_OK(ids && t1 - t0 < limit, "100 KB of one letter: %d ids in %.3f s", n, t1 - t0);
	free(ids);
	for (size_t i = 0; i < big; i++)
		text[i] = (char) (Rnd() & 0xFF);
	t0 = cbllm_now();
	ids = Enc(tok, text, big, false, true, &n);
	t1 = cbllm_now();
	d = ids ? Dec(tok, ids, n, false, &len) : NULL;
	TAP_OK(ids && d && ValidUtf8(d, len) && t1 - t0 < limit,
		   "100 KB of random bytes encodes in %.3f s and decodes to valid UTF-8", t1 - t0);
	free(ids);
	free(d);
	free(text);
}

/* Load a tokenizer from a temporary directory holding the given files (NULL: no such file). */
static int
LoadTemp(const char *json, const char *config, cbllm_tokenizer **t, cbllm_err *err)
{
	char		dir[] = "/tmp/cbllm_tok_XXXXXX";
	int			rc;

	if (mkdtemp(dir) == NULL)
		return cbllm_fail(err, CBLLM_ERR_IO, "mkdtemp failed");
	if (json != NULL)
		fixture_write_text(dir, "tokenizer.json", json);
	if (config != NULL)
		fixture_write_text(dir, "tokenizer_config.json", config);
	rc = tokenizer_load(dir, t, err);
	fixture_remove_tree(dir);
	return rc;
}

/* A small tokenizer.json; the %s holds the extra top-level members. */
#define SMALL_VOCAB \
	"\"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"a\": 3, \"b\": 4, \"ab\": 5," \
	" \"\\u2581\": 6, \"\\u2581a\": 7}"
#define LLAMA_NORM \
	"\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}," \
	" {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}"

/* A small synthetic tokenizer: no byte fallback, fused unk, added tokens with lstrip/rstrip. */
static void
TestSynthetic(void)
{
	const char *json = "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [[\"a\", \"b\"], [\"\\u2581\", \"a\"]],"
		" \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": false},"
		LLAMA_NORM ", \"pre_tokenizer\": null, \"added_tokens\": ["
		"{\"id\": 1, \"content\": \"<s>\", \"special\": true},"
		"{\"id\": 8, \"content\": \"<sep>\", \"special\": false, \"lstrip\": true, \"rstrip\": true, \"normalized\": false},"
		"{\"id\": 9, \"content\": \"hey\", \"special\": false, \"normalized\": true}]}";
	const char *meta = "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [\"a b\", \"\\u2581 a\"],"
		" \"unk_token\": \"<unk>\"}, \"normalizer\": null,"
		" \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", \"split\": true}}";
	const char *nounk = "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [], \"unk_token\": null}}";
	static const int32_t w1[] = {6, 5},
				w2[] = {7, 8, 6, 4},
				w3[] = {1, 6, 0},
				w4[] = {7, 9},
				w5[] = {7, 0},
				w6[] = {7, 6, 5},
				w7[] = {7, 8, 6, 0},
				w8[] = {6, 0, 8};
	cbllm_tokenizer *t = NULL;
	cbllm_err	err = {{0}};
	int			rc = LoadTemp(json, NULL, &t, &err),
				n;
	int32_t    *ids;
	size_t		len;
	char	   *d;

	TAP_OK(rc == CBLLM_OK, "synthetic tokenizer loads without a config%s%s", rc ? ": " : "", rc ? err.msg : "");
	if (rc != CBLLM_OK)
		return;
	TAP_OK(tokenizer_vocab_size(t) == 10 && tokenizer_bos_id(t) == 1 && tokenizer_eos_id(t) == 2,
		   "synthetic: vocabulary size 10, BOS/EOS default to <s>/</s>");
	ids = Enc(t, "ab", 2, false, false, &n);
	TAP_OK(IdsEq(ids, n, w1, 2), "synthetic: lowest-rank merge first (\"ab\" -> [6, 5])");
	free(ids);
	ids = Enc(t, "a <sep> b", 9, false, true, &n);
	TAP_OK(IdsEq(ids, n, w2, 4), "synthetic: non-special added token with lstrip/rstrip eats the spaces");
	if (!IdsEq(ids, n, w2, 4))
		DiagIds("got", ids, n);
	d = ids ? Dec(t, ids, n, false, &len) : NULL;
	TAP_OK(d && strcmp(d, "a<sep> b") == 0, "synthetic: decode gives \"a<sep> b\"");
	free(d);
	free(ids);
	ids = Enc(t, "a <sep> b", 9, false, false, &n);
	TAP_OK(IdsEq(ids, n, w2, 4), "synthetic: without parse_special a non-special added token is still found "
		   "(HuggingFace's split_special_tokens, llama.cpp's user-defined tokens)");
	if (!IdsEq(ids, n, w2, 4))
		DiagIds("got", ids, n);
	free(ids);
	ids = Enc(t, "a hey", 5, false, false, &n);
	TAP_OK(IdsEq(ids, n, w4, 2), "synthetic: without parse_special a normalized non-special added token is still found");
	free(ids);
	ids = Enc(t, "<s>a", 4, false, false, &n);
	TAP_OK(ids != NULL && n > 1 && ids[0] != 1, "synthetic: without parse_special a special added token is plain text");
	free(ids);
	ids = Enc(t, "a\xE3\x80\x80<sep>\xC3\xA9", 12, false, true, &n);
	TAP_OK(IdsEq(ids, n, w7, 4), "synthetic: lstrip eats a Unicode space (U+3000) before the added token");
	free(ids);
	ids = Enc(t, "\xC3\xA9<sep>", 7, false, true, &n);
	TAP_OK(IdsEq(ids, n, w8, 3), "synthetic: lstrip stops at a non-space multi-byte character");
	free(ids);
	ids = Enc(t, "xyz", 3, true, false, &n);
	TAP_OK(IdsEq(ids, n, w3, 3), "synthetic: unknown characters fuse into one unk, BOS added by default");
	free(ids);
	ids = Enc(t, "a hey", 5, false, true, &n);
	TAP_OK(IdsEq(ids, n, w4, 2), "synthetic: normalized added token matches the normalized text");
	free(ids);
	ids = Enc(t, "ahey", 4, false, true, &n);
	TAP_OK(IdsEq(ids, n, w5, 2), "synthetic: normalized added token needs its \"\\u2581\" prefix");
	free(ids);
	tokenizer_free(t);

	rc = LoadTemp(meta, "{\"add_bos_token\": false, \"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": null}", &t, &err);
	TAP_OK(rc == CBLLM_OK && tokenizer_eos_id(t) == -1, "Metaspace tokenizer with object/null config tokens loads%s%s",
		   rc ? ": " : "", rc ? err.msg : "");
	if (rc == CBLLM_OK)
	{
		ids = Enc(t, "a ab", 4, true, false, &n);
		TAP_OK(IdsEq(ids, n, w6, 3), "Metaspace: \"a ab\" -> [7, 6, 5], no BOS when add_bos_token is false");
		free(ids);
		tokenizer_free(t);
	}

	rc = LoadTemp(nounk, NULL, &t, &err);
	TAP_OK(rc == CBLLM_OK, "tokenizer without unk token loads");
	if (rc == CBLLM_OK)
	{
		ids = NULL;
		rc = tokenizer_encode(t, "z", 1, (tokenizer_encode_opts) {false, false}, &ids, &n, &err);
		TAP_OK(rc < 0 && strstr(err.msg, "tokenizer.json") && ids == NULL,
			   "encoding an unknown character without unk or byte fallback fails: %s", err.msg);
		tokenizer_free(t);
	}
}

/* Malformed tokenizer files give a negative status naming the file. */
static void
TestMalformed(void)
{
#define MODEL(extra) "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [\"a b\"]" extra "}"
	static const struct
	{
		const char *name;
		const char *json;
		const char *config;
		const char *file;
	}			cases[] = {
		{"no tokenizer.json", NULL, NULL, "tokenizer.json"},
		{"empty file", "", NULL, "tokenizer.json"},
		{"invalid JSON", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1,", NULL, "tokenizer.json"},
		{"top level is an array", "[]", NULL, "tokenizer.json"},
		{"no model", "{\"normalizer\": null}", NULL, "tokenizer.json"},
		{"model type WordPiece", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", NULL, "tokenizer.json"},
		{"model type not a string", "{\"model\": {\"type\": 7, \"vocab\": {}}}", NULL, "tokenizer.json"},
		{"vocab not an object", "{\"model\": {\"type\": \"BPE\", \"vocab\": [\"a\"], \"merges\": []}}", NULL, "tokenizer.json"},
		{"vocab id negative", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", NULL, "tokenizer.json"},
		{"vocab id fractional", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1.5}, \"merges\": []}}", NULL, "tokenizer.json"},
		{"vocab id a string", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"1\"}, \"merges\": []}}", NULL, "tokenizer.json"},
		{"vocab id huge", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e300}, \"merges\": []}}", NULL, "tokenizer.json"},
		{"vocab id used twice", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", NULL, "tokenizer.json"},
		{"merges not an array", "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": {\"a\": 1}}}", NULL, "tokenizer.json"},
		{"merge names an unknown piece", "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [\"a zz\"]}}", NULL, "tokenizer.json"},
		{"merge without a space", "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [\"ab\"]}}", NULL, "tokenizer.json"},
		{"merge of three pieces", "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [[\"a\", \"b\", \"c\"]]}}", NULL, "tokenizer.json"},
		{"merged piece not in vocab", "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"merges\": [\"b a\"]}}", NULL, "tokenizer.json"},
		{"byte_fallback not a boolean", "{\"model\": {\"type\": \"BPE\", " SMALL_VOCAB ", \"byte_fallback\": \"yes\"}}", NULL, "tokenizer.json"},
		{"added token id out of range", MODEL("}, \"added_tokens\": [{\"id\": 99999, \"content\": \"<x>\"}]"), NULL, "tokenizer.json"},
		{"added token id negative", MODEL("}, \"added_tokens\": [{\"id\": -3, \"content\": \"<x>\"}]"), NULL, "tokenizer.json"},
		{"added token empty content", MODEL("}, \"added_tokens\": [{\"id\": 8, \"content\": \"\"}]"), NULL, "tokenizer.json"},
		{"added token content a number", MODEL("}, \"added_tokens\": [{\"id\": 8, \"content\": 5}]"), NULL, "tokenizer.json"},
		{"added_tokens not an array", MODEL("}, \"added_tokens\": {}"), NULL, "tokenizer.json"},
		{"normalizer Lowercase", MODEL("}, \"normalizer\": {\"type\": \"Lowercase\"}"), NULL, "tokenizer.json"},
		{"normalizer Replace with Regex", MODEL("}, \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \" \"}, \"content\": \"x\"}"), NULL, "tokenizer.json"},
		{"normalizer a string", MODEL("}, \"normalizer\": \"Prepend\""), NULL, "tokenizer.json"},
		{"pre_tokenizer Whitespace", MODEL("}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}"), NULL, "tokenizer.json"},
		{"normalizer growing text 81-fold (two Replace a -> 9 a)", MODEL("}, \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": ["
		 "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"aaaaaaaaa\"},"
		 "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"aaaaaaaaa\"}]}"), NULL, "tokenizer.json"},
		{"config invalid JSON", MODEL("}"), "{\"bos_token\": ", "tokenizer_config.json"},
		{"config bos_token a number", MODEL("}"), "{\"bos_token\": 5}", "tokenizer_config.json"},
		{"config bos_token unknown", MODEL("}"), "{\"bos_token\": \"<nope>\"}", "tokenizer_config.json"},
		{"config add_bos_token a string", MODEL("}"), "{\"add_bos_token\": \"true\"}", "tokenizer_config.json"},
	};
#undef MODEL

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		cbllm_tokenizer *t = NULL;
		cbllm_err	err = {{0}};
		const char *file = cases[i].file;
		int			rc = LoadTemp(cases[i].json, cases[i].config, &t, &err);

		TAP_OK(rc < 0 && t == NULL && strstr(err.msg, file) != NULL, "malformed: %s is rejected naming %s",
			   cases[i].name, file);
		TAP_DIAG("%s", err.msg);
		tokenizer_free(t);
	}
	{
		cbllm_tokenizer *t = NULL;
		cbllm_err	err = {{0}};
		int			rc = LoadTemp("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", NULL, &t, &err);

		TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "tokenizer.json: unsupported tokenizer model type WordPiece"),
			   "WordPiece gives the unsupported-model-type message");
	}
}

/* Run every group of checks against the testdata directory. */
/*
 * Split's behaviours on HuggingFace's documented example: "the-final--countdown"
 * split on "-" gives the-|final-|-|countdown (MergedWithPrevious),
 * the|-final|-|-countdown (MergedWithNext), the|-|final|-|-|countdown
 * (Isolated), the|-|final|--|countdown (Contiguous), the|final|countdown
 * (Removed).  With ignore_merges every pre-token in the vocabulary is one id,
 * so the ids show the pre-tokens.
 */
static void
TestSplitBehaviors(void)
{
	static const char *const pieces[] = {
		"t", "h", "e", "-", "f", "i", "n", "a", "l", "c", "o", "u", "d", "w",
		"the", "final", "countdown", "the-", "final-", "-final", "-countdown", "--",
	};
	static const struct
	{
		const char *behavior, *want;
		bool		invert;
	}			cases[] = {
		{"MergedWithPrevious", "the-|final-|-|countdown", false},
		{"MergedWithNext", "the|-final|-|-countdown", false},
		{"Isolated", "the|-|final|-|-|countdown", false},
		{"Contiguous", "the|-|final|--|countdown", false},
		{"Removed", "the|final|countdown", false},
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
	{
		char		json[2048];
		size_t		o = 0;
		tokenizer_source src = {json, 0, NULL, NULL, 0, NULL};
		cbllm_tokenizer *t = NULL;
		cbllm_err	err = {{0}};
		int32_t    *ids = NULL;
		int			n = 0;
		char		got[256] = "";

		o += snprintf(json + o, sizeof(json) - o, "{\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"merges\": [], \"vocab\": {");
		for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++)
			o += snprintf(json + o, sizeof(json) - o, "%s\"%s\": %zu", k ? ", " : "", pieces[k], k);
		o += snprintf(json + o, sizeof(json) - o, "}}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"%s\": \"-\"}, "
					  "\"behavior\": \"%s\", \"invert\": %s}, \"decoder\": {\"type\": \"Fuse\"}}",
					  c % 2 ? "Regex" : "String", cases[c].behavior, cases[c].invert ? "true" : "false");
		src.json_len = o;
		if (tokenizer_load_from(&src, &t, &err) == CBLLM_OK)
			ids = Enc(t, "the-final--countdown", 20, false, false, &n);
		for (int i = 0; ids && i < n; i++)
			snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i ? "|" : "", tokenizer_piece(t, ids[i]));
		TAP_OK(strcmp(got, cases[c].want) == 0, "Split on a %s \"-\", %s%s: %s (got %s%s)",
			   c % 2 ? "Regex" : "String", cases[c].behavior, cases[c].invert ? ", inverted" : "",
			   cases[c].want, got, t ? "" : err.msg);
		free(ids);
		tokenizer_free(t);
	}
}

/*
 * Merges of any length: pieces of 1 to 512 "a"s and "b"s, each made by
 * merging two halves, and a last merge of the two 512-byte pieces into one of
 * 1024 bytes (Command R's vocabulary has merges of over 512 bytes).
 */
static void
TestLongMerge(void)
{
	char	   *json = NULL;
	size_t		json_len = 0;
	FILE	   *f = open_memstream(&json, &json_len);
	tokenizer_source src = {0};
	cbllm_tokenizer *t = NULL;
	cbllm_err	err = {{0}};
	int32_t    *ids = NULL;
	int			n = 0, id = 0, rc;
	char		run[1024];

	memset(run, 'a', 512);
	memset(run + 512, 'b', 512);
	fprintf(f, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
	for (int c = 0; c < 2; c++)
		for (int len = 1; len <= 512; len *= 2)
			fprintf(f, "%s\"%.*s\": %d", id ? ", " : "", len, run + 512 * c, id), id++;
	fprintf(f, ", \"%.*s\": %d}, \"merges\": [", 1024, run, id);
	for (int c = 0; c < 2; c++)
		for (int len = 1; len < 512; len *= 2)
			fprintf(f, "\"%.*s %.*s\", ", len, run + 512 * c, len, run + 512 * c);
	fprintf(f, "\"%.*s %.*s\"]}}", 512, run, 512, run + 512);
	fclose(f);
	src.json = json;
	src.json_len = json_len;
	rc = tokenizer_load_from(&src, &t, &err);
	TAP_OK(rc == CBLLM_OK, "a merge of two 512-byte pieces (1025 bytes) loads%s%s", rc ? ": " : "", rc ? err.msg : "");
	if (rc == CBLLM_OK)
	{
		ids = Enc(t, run, 1024, false, false, &n);
		TAP_OK(ids != NULL && n == 1 && ids[0] == id,
			   "512 \"a\"s and 512 \"b\"s merge into the 1024-byte piece (%d ids)", n);
	}
	free(ids);
	tokenizer_free(t);
	free(json);
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : getenv("CBLLM_TESTDATA");
	cbllm_err	err = {{0}};
	int			rc;

	if (dir == NULL)
		dir = "test/data/llama2-tokenizer";
	rc = tokenizer_load(dir, &tok, &err);
	TAP_OK(rc == CBLLM_OK, "load the Llama-2 tokenizer from %s%s%s", dir, rc ? ": " : "", rc ? err.msg : "");
	if (rc == CBLLM_OK)
	{
		TestVectors(dir);
		TestRoundTrips();
		TestSpecial();
		TestStream();
		TestHostileText();
	}
	TestSynthetic();
	TestSplitBehaviors();
	TestLongMerge();
	TestMalformed();
	tokenizer_free(tok);
	return tap_done();
}
