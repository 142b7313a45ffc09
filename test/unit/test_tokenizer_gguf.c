/*
 * test_tokenizer_gguf.c: tokenizers built from GGUF metadata
 * (tokenizer_load_gguf) against the same tokenizers built from their
 * tokenizer.json.  For each real tokenizer in the test data, gguf_vocab.py
 * writes the tokenizer.ggml.* metadata a converter would write; the GGUF
 * tokenizer must then give the same vocabulary size, BOS and EOS, the same
 * special tokens, the same ids for every conformance text (with and without
 * BOS, parsing special tokens and not), the same decoded text, and the same
 * ids for the decoded text of every vocabulary piece.  Two tiny vocabularies
 * check SentencePiece merging by score and byte-level merging by merges (a
 * third, Gemma 4's pieces merging in the listed order), each
 * malformed file gguf_vocab.py --bad writes must fail with its message, and
 * the tiny byte-level one must load and split alike under every
 * pre-tokenizer name it lists.
 *
 * Usage: test_tokenizer_gguf test/data/tokenizers test/tools/gguf_vocab.py
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "formats/gguf.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

static const char *const models[] = {"llama3_1", "qwen3", "gemma3", "llama2", "mistral7b"};

/* Run the vocabulary tool with args; whether it succeeded. */
static bool
RunTool(const char *tool, const char *args)
{
	char	   *cmd;
	bool		ok;

	if (asprintf(&cmd, "/usr/bin/python3 '%s' %s", tool, args) < 0)
		return false;
	ok = system(cmd) == 0;
	free(cmd);
	return ok;
}

/* Open path and build its tokenizer; the status, with *tok set on success. */
static int
LoadGguf(const char *path, cbllm_tokenizer **tok, cbllm_err *err)
{
	gguf_file  *g = NULL;
	int			rc = gguf_open(path, &g, err);

	*tok = NULL;
	if (rc == CBLLM_OK)
		rc = tokenizer_load_gguf(g, tok, err);
	gguf_free(g);
	return rc;
}

/* Whether both tokenizers encode text alike with opts; on a difference, say so once. */
static bool
SameEncode(const cbllm_tokenizer *a, const cbllm_tokenizer *b, const char *text, size_t len,
			tokenizer_encode_opts opts, int *reported)
{
	int32_t    *ia = NULL, *ib = NULL;
	int			na = 0, nb = 0;
	cbllm_err	err = {{0}};
	bool		same = tokenizer_encode(a, text, len, opts, &ia, &na, &err) == CBLLM_OK &&
		tokenizer_encode(b, text, len, opts, &ib, &nb, &err) == CBLLM_OK &&
		na == nb && memcmp(ia, ib, (size_t) na * sizeof(int32_t)) == 0;

	if (!same && (*reported)++ < 3)
		TAP_DIAG("differs (bos %d special %d): \"%.*s\" (%d ids vs %d)", opts.add_bos, opts.parse_special,
				 (int) (len < 60 ? len : 60), text, na, nb);
	free(ia);
	free(ib);
	return same;
}

/*
 * Whether text holds a token that one tokenizer calls special and the other does not (a
 * GGUF file marks some of tokenizer.json's non-special added tokens, <mask> or <unused0>,
 * as control tokens, as llama.cpp's converter does): without special-token parsing the
 * two then rightly differ, each as its own source says.
 */
static bool
SpecialsDisagree(const cbllm_tokenizer *a, const cbllm_tokenizer *b, const char *text, size_t len)
{
	int32_t    *ids = NULL;
	int			n = 0;
	cbllm_err	err = {{0}};
	bool		differ = false;

	if (tokenizer_encode(a, text, len, (tokenizer_encode_opts) {false, true}, &ids, &n, &err) == CBLLM_OK)
		for (int i = 0; i < n; i++)
			differ |= tokenizer_is_special(a, ids[i]) != tokenizer_is_special(b, ids[i]);
	free(ids);
	return differ;
}

/* Decode ids with tok into out (cleared first); the status. */
static int
DecodeAll(const cbllm_tokenizer *tok, const int32_t *ids, int n, cbllm_buf *out)
{
	cbllm_err	err = {{0}};

	out->len = 0;
	return tokenizer_decode(tok, ids, n, false, out, &err);
}

/*
 * Every conformance text: same ids in all four modes, same decoded text; a
 * text holding a token that one file calls special and the other does not is
 * compared with special-token parsing only.
 */
static void
CheckTexts(const char *name, const char *dir, const cbllm_tokenizer *js, const cbllm_tokenizer *gg)
{
	char	   *path = cbllm_path_join(dir, "encode.jsonl"), *text = NULL, *line, *save = NULL;
	size_t		len;
	int			n = 0, bad_ids = 0, bad_dec = 0, reported = 0, literal_skipped = 0;
	cbllm_err	err = {{0}};
	cbllm_buf	da = {0}, db = {0};

	if (path == NULL || cbllm_read_file(path, &text, &len, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: encode.jsonl reads", name);
		free(path);
		return;
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
	{
		cJSON	   *rec = cJSON_Parse(line);
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "text"));
		int32_t    *ids = NULL;
		int			nids = 0;
		bool		ok = t != NULL;
		bool		literal = !(t && SpecialsDisagree(js, gg, t, strlen(t)));

		literal_skipped += !literal;
		for (int mode = literal ? 0 : 2; ok && mode < 4; mode++)
			ok = SameEncode(js, gg, t, strlen(t), (tokenizer_encode_opts) {mode & 1, mode >> 1}, &reported);
		bad_ids += !ok;
		if (t && tokenizer_encode(js, t, strlen(t), (tokenizer_encode_opts) {true, true}, &ids, &nids, &err) == CBLLM_OK)
			bad_dec += DecodeAll(js, ids, nids, &da) != CBLLM_OK || DecodeAll(gg, ids, nids, &db) != CBLLM_OK ||
				da.len != db.len || memcmp(da.data, db.data, da.len) != 0;
		free(ids);
		cJSON_Delete(rec);
		n++;
	}
	TAP_OK(n > 100 && bad_ids == 0, "%s: the GGUF tokenizer encodes all %d conformance texts as tokenizer.json's "
		   "(with and without BOS and special-token parsing, but for %d texts with tokens whose special flags "
		   "differ only with it; %d differ)", name, n, literal_skipped, bad_ids);
	TAP_OK(n > 100 && bad_dec == 0, "%s: and decodes their ids to the same text (%d differ)", name, bad_dec);
	cbllm_buf_free(&da);
	cbllm_buf_free(&db);
	free(text);
	free(path);
}

/* Every piece: its decoded text encodes alike; special flags agree where tokenizer.json has them. */
static void
CheckPieces(const char *name, const cbllm_tokenizer *js, const cbllm_tokenizer *gg)
{
	int			n = tokenizer_vocab_size(js), bad = 0, special = 0, reported = 0;
	cbllm_buf	d = {0};

	for (int32_t id = 0; id < n; id++)
	{
		if (tokenizer_piece(js, id) == NULL)
			continue;
		special += tokenizer_is_special(js, id) && !tokenizer_is_special(gg, id);
		if (DecodeAll(js, &id, 1, &d) != CBLLM_OK ||
			!SameEncode(js, gg, d.data ? d.data : "", d.len, (tokenizer_encode_opts) {false, true}, &reported))
			bad++;
	}
	TAP_OK(bad == 0, "%s: the decoded text of each of the %d pieces encodes as tokenizer.json's (%d differ)",
		   name, n, bad);
	TAP_OK(special == 0, "%s: every special token of tokenizer.json is special in the GGUF tokenizer (%d are not)",
		   name, special);
	cbllm_buf_free(&d);
}

/* One real tokenizer: write its GGUF metadata, load both ways, compare. */
static void
CheckModel(const char *data, const char *tool, const char *work, const char *name)
{
	char	   *dir = cbllm_path_join(data, name), *gguf, *args;
	cbllm_tokenizer *js = NULL, *gg = NULL;
	cbllm_err	err = {{0}};

	if (asprintf(&gguf, "%s/%s.gguf", work, name) < 0 || asprintf(&args, "'%s' '%s'", dir, gguf) < 0)
		return;
	TAP_OK(RunTool(tool, args), "%s: gguf_vocab.py writes its tokenizer metadata", name);
	TAP_OK(tokenizer_load(dir, &js, &err) == CBLLM_OK, "%s: tokenizer.json loads", name);
	TAP_OK(LoadGguf(gguf, &gg, &err) == CBLLM_OK, "%s: the GGUF tokenizer loads (%s)", name, gg ? "" : err.msg);
	if (js && gg)
	{
		TAP_OK(tokenizer_vocab_size(js) == tokenizer_vocab_size(gg) && tokenizer_bos_id(js) == tokenizer_bos_id(gg) &&
			   tokenizer_eos_id(js) == tokenizer_eos_id(gg),
			   "%s: vocabulary size %d, BOS %d and EOS %d agree (GGUF: %d, %d, %d)", name,
			   tokenizer_vocab_size(js), tokenizer_bos_id(js), tokenizer_eos_id(js),
			   tokenizer_vocab_size(gg), tokenizer_bos_id(gg), tokenizer_eos_id(gg));
		CheckTexts(name, dir, js, gg);
		CheckPieces(name, js, gg);
	}
	tokenizer_free(js);
	tokenizer_free(gg);
	free(args);
	free(gguf);
	free(dir);
}

/* Whether tok encodes text (parsing special tokens, BOS as add_bos) to the n ids of want. */
static bool
EncodesTo(const cbllm_tokenizer *tok, const char *text, bool add_bos, const int32_t *want, int n)
{
	int32_t    *ids = NULL;
	int			got = 0;
	cbllm_err	err = {{0}};
	bool		ok = tok && tokenizer_encode(tok, text, strlen(text), (tokenizer_encode_opts) {add_bos, true},
											 &ids, &got, &err) == CBLLM_OK &&
		got == n && memcmp(ids, want, (size_t) n * sizeof(int32_t)) == 0;

	free(ids);
	return ok;
}

/* The tiny Gemma 4 vocabulary: SentencePiece pieces merged in the listed order, llama.cpp's overrides. */
static void
CheckTinyGemma4(const char *bad)
{
	char	   *path = cbllm_path_join(bad, "tiny_gemma4.gguf");
	cbllm_tokenizer *t = NULL;
	cbllm_err	err = {{0}};
	cbllm_buf	out = {0};

	TAP_OK(path && LoadGguf(path, &t, &err) == CBLLM_OK, "tiny gemma4 vocabulary loads (%s)", t ? "ok" : err.msg);
	TAP_OK(EncodesTo(t, " ab", false, (int32_t[]) {7, 6}, 2),
		   "gemma4 merges in the listed order, not by score: \" ab\" is \u2581a b, not \u2581 ab");
	TAP_OK(EncodesTo(t, "ab", true, (int32_t[]) {2, 8}, 2),
		   "gemma4: a BOS though add_bos_token says false, no \u2581 before the text though add_space_prefix says true");
	TAP_OK(EncodesTo(t, "az", false, (int32_t[]) {5, 9}, 2), "gemma4: a character without a piece is its <0xXX> byte");
	TAP_OK(t && tokenizer_decode(t, (int32_t[]) {2, 7, 6, 9}, 4, true, &out, &err) == CBLLM_OK &&
		   out.len == 4 && memcmp(out.data, " abz", 4) == 0,
		   "gemma4 decodes <bos> \u2581a b <0x7A> to \" abz\": the leading space kept, the byte as itself");
	cbllm_buf_free(&out);
	tokenizer_free(t);
	free(path);
}

/* Whether tok's ids for text, with special-token parsing off and no BOS, hold id. */
static bool
LiteralHolds(const cbllm_tokenizer *tok, const char *text, int32_t id)
{
	int32_t    *ids = NULL;
	int			n = 0;
	cbllm_err	err = {{0}};
	bool		held = false;

	if (tok && tokenizer_encode(tok, text, strlen(text), (tokenizer_encode_opts) {false, false},
								&ids, &n, &err) == CBLLM_OK)
		for (int i = 0; i < n; i++)
			held |= ids[i] == id;
	free(ids);
	return held;
}

/* User-defined tokens are found in text without special-token parsing, but for the
 * end-of-generation texts llama.cpp makes control tokens ("</s>"). */
static void
CheckUserDefined(const char *bad)
{
	char	   *path = cbllm_path_join(bad, "tiny_spm_user.gguf");
	cbllm_tokenizer *t = NULL;
	cbllm_err	err = {{0}};

	TAP_OK(path && LoadGguf(path, &t, &err) == CBLLM_OK, "a vocabulary with user-defined <s> and </s> loads");
	TAP_OK(LiteralHolds(t, "a<s>", 1) && !tokenizer_is_special(t, 1),
		   "without special-token parsing the user-defined <s> is still found, as llama.cpp finds it");
	TAP_OK(t && !LiteralHolds(t, "a</s>", 2) && tokenizer_is_special(t, 2),
		   "but the user-defined </s> is a control token, as llama.cpp makes it: its text stays text");
	tokenizer_free(t);
	free(path);
}

/* The tiny vocabularies: merging by score (SentencePiece) and by merges (byte-level). */
static void
CheckTiny(const char *bad)
{
	char	   *spm = cbllm_path_join(bad, "tiny_spm.gguf"), *bpe = cbllm_path_join(bad, "tiny_bpe.gguf");
	cbllm_tokenizer *s = NULL, *b = NULL;
	cbllm_err	err = {{0}};

	TAP_OK(spm && LoadGguf(spm, &s, &err) == CBLLM_OK, "tiny SentencePiece vocabulary loads");
	TAP_OK(EncodesTo(s, "ab", false, (int32_t[]) {3, 7}, 2),
		   "SentencePiece merges the pair whose piece scores highest (\"ab\" -1 before \"\u2581a\" -5): \u2581 ab");
	TAP_OK(EncodesTo(s, "a", true, (int32_t[]) {1, 6}, 2),
		   "SentencePiece: add_bos_token defaults to true, the text gets its \u2581 prefix: <s> \u2581a");
	TAP_OK(EncodesTo(s, "<s>a", false, (int32_t[]) {1, 6}, 2), "SentencePiece: control token <s> is matched as special");
	TAP_OK(s && tokenizer_piece(s, 0) && tokenizer_is_special(s, 0) && tokenizer_bos_id(s) == 1,
		   "SentencePiece: the unknown token is special and bos_token_id is read");
	TAP_OK(bpe && LoadGguf(bpe, &b, &err) == CBLLM_OK, "tiny byte-level vocabulary loads");
	TAP_OK(EncodesTo(b, "ab", false, (int32_t[]) {2}, 1) && EncodesTo(b, "ba", false, (int32_t[]) {1, 0}, 2),
		   "byte-level: \"a b\" merges, \"b a\" is no merge");
	TAP_OK(EncodesTo(b, "ab<|end|>", true, (int32_t[]) {2, 3}, 2) && tokenizer_eos_id(b) == 3,
		   "byte-level: gpt-2 adds no BOS by default; control token <|end|> is special and the EOS");
	tokenizer_free(b);
	b = NULL;
	free(bpe);
	bpe = cbllm_path_join(bad, "tiny_bpe_eos_none.gguf");
	TAP_OK(bpe && LoadGguf(bpe, &b, &err) == CBLLM_OK && tokenizer_eos_id(b) == -1,
		   "eos_token_id 0xFFFFFFFF (-1 written as uint32) means no EOS");
	tokenizer_free(b);
	b = NULL;
	free(bpe);
	bpe = cbllm_path_join(bad, "tiny_bpe_empty.gguf");
	TAP_OK(bpe && LoadGguf(bpe, &b, &err) == CBLLM_OK && tokenizer_piece(b, 3) &&
		   strcmp(tokenizer_piece(b, 3), "[EMPTY_3]") == 0 && tokenizer_is_special(b, 3),
		   "an empty token text becomes \"[EMPTY_3]\", as llama.cpp names it");
	tokenizer_free(s);
	tokenizer_free(b);
	free(spm);
	free(bpe);
}

/* Each malformed file fails with its expected message; each known pre-tokenizer name loads. */
static void
CheckBad(const char *bad)
{
	char	   *path = cbllm_path_join(bad, "expect.json"), *text = NULL;
	size_t		len;
	cbllm_err	err = {{0}};
	cJSON	   *expect;
	const cJSON *e;

	if (path == NULL || cbllm_read_file(path, &text, &len, &err) != CBLLM_OK || (expect = cJSON_Parse(text)) == NULL)
	{
		TAP_OK(false, "expect.json of the malformed files reads");
		free(path);
		free(text);
		return;
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(expect, "refused"))
	{
		char	   *file = cbllm_path_join(bad, e->string);
		cbllm_tokenizer *tok = NULL;
		int			rc = file ? LoadGguf(file, &tok, &err) : CBLLM_ERR_NOMEM;

		TAP_OK(rc != CBLLM_OK && tok == NULL && strstr(err.msg, e->valuestring) != NULL,
			   "%s is refused: \"%s\" (got \"%s\")", e->string, e->valuestring, rc == CBLLM_OK ? "success" : err.msg);
		tokenizer_free(tok);
		free(file);
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(expect, "pre"))
	{
		char	   *file = cbllm_path_join(bad, e->valuestring);
		cbllm_tokenizer *tok = NULL;
		int			rc = file ? LoadGguf(file, &tok, &err) : CBLLM_ERR_NOMEM;

		TAP_OK(rc == CBLLM_OK && EncodesTo(tok, "ab ba<|end|>ab", false, (int32_t[]) {2, 5, 0, 3, 2}, 5),
			   "%s: the pre-tokenizer loads, its regexes compile and split \"ab ba\" as ab \u0120b a (%s)", e->valuestring,
			   rc == CBLLM_OK ? "ok" : err.msg);
		tokenizer_free(tok);
		free(file);
	}
	cJSON_Delete(expect);
	free(text);
	free(path);
}

/* Write the fixtures, then check the tiny, malformed and real tokenizers. */
int
main(int argc, char **argv)
{
	const char *root;
	char	   *work, *bad, *args;

	if (argc != 3)
	{
		fprintf(stderr, "usage: test_tokenizer_gguf test/data/tokenizers test/tools/gguf_vocab.py\n");
		return 2;
	}
	root = fixture_root_create("tokenizer_gguf");
	work = root ? fixture_case_dir("real") : NULL;
	bad = root ? fixture_case_dir("bad") : NULL;
	if (work == NULL || bad == NULL || asprintf(&args, "--bad '%s'", bad) < 0)
	{
		TAP_OK(false, "make the fixture directories");
		return tap_done();
	}
	TAP_OK(RunTool(argv[2], args), "gguf_vocab.py --bad writes the malformed and tiny files");
	CheckTiny(bad);
	CheckTinyGemma4(bad);
	CheckUserDefined(bad);
	CheckBad(bad);
	for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++)
		CheckModel(argv[1], argv[2], work, models[m]);
	free(args);
	free(work);
	free(bad);
	fixture_root_remove();
	return tap_done();
}
