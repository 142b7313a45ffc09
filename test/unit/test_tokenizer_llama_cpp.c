/*
 * test_tokenizer_llama_cpp.c: llama.cpp's own tokenizer test vectors
 * (test/data/llama-cpp-vocab/) through cbllm's GGUF tokenizer.
 *
 * Each vocabulary is a vocab-only GGUF file, ggml-vocab-NAME.gguf, with two
 * files beside it: NAME.gguf.inp holds texts separated by the line
 * "__ggml_vocab_test__" (the separator is "\n__ggml_vocab_test__\n", and a
 * final one ends the file), NAME.gguf.out one line of ids per text, blanks
 * around them ignored.  As llama.cpp's test-tokenizer-0 does, each text is
 * encoded with nothing added (no BOS) and special-token text not parsed; the
 * ids must be the line's exactly.  Per vocabulary the test checks that the
 * file loads, that every text matches (the first few differences are
 * printed), and that adding special tokens puts llama.cpp's BOS first (or
 * adds none where llama.cpp adds none).  A vocabulary the tokenizer does not support yet is listed here
 * with the reason; its check is that the file is refused with a message
 * naming what is missing, and it is reported as a skip.  Every
 * ggml-vocab-*.gguf.inp of the directory must be listed: a vocabulary added
 * to the data without being run here fails.
 *
 * Usage: test_tokenizer_llama_cpp test/data/llama-cpp-vocab
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "tap.h"
#include "base/util.h"
#include "tokenizer/tokenizer.h"

#define SEP			"\n__ggml_vocab_test__\n"
#define MAX_SHOWN	3			/* differences printed per vocabulary */

typedef struct vocab_case
{
	const char *name;			/* ggml-vocab-NAME.gguf */
	int32_t		bos;			/* the BOS llama.cpp adds with add_special, or -1: none added */
	const char *todo;			/* NULL: must match; else why it is not supported yet */
	const char *refusal;		/* todo: a part of the load error's message */
} vocab_case;

/*
 * The BOS ids are what llama.cpp adds: its default for the tokenizer kind and
 * pre-tokenizer name (SentencePiece and Llama-3's BPE add one, other BPE
 * names none, Gemma 4 always), unless tokenizer.ggml.add_bos_token says.
 */
static const vocab_case cases[] = {
	{.name = "llama-spm", .bos = 1}, {.name = "llama-bpe", .bos = 128000}, {.name = "phi-3", .bos = 1},
	{.name = "qwen2", .bos = -1}, {.name = "gpt-2", .bos = -1}, {.name = "refact", .bos = -1},
	{.name = "starcoder", .bos = -1}, {.name = "mpt", .bos = -1}, {.name = "command-r", .bos = 5},
	{.name = "qwen35", .bos = -1}, {.name = "falcon", .bos = -1}, {.name = "deepseek-coder", .bos = 32013},
	{.name = "deepseek-llm", .bos = 100000}, {.name = "gemma-4", .bos = 2},
	{.name = "bert-bge",
		.todo = "WordPiece (tokenizer model \"bert\"), the embedding models' tokenizer, is not supported yet",
	.refusal = "\"bert\""},
};

#define N_CASES		(sizeof(cases) / sizeof(cases[0]))

/* One vocabulary's texts and expected ids. */
typedef struct vectors
{
	char	   *inp, *out;		/* the files' contents (inp is cut into texts in place) */
	int			n;
	const char **text;			/* n texts of len[i] bytes */
	size_t	   *len;
	const char **ids;			/* n lines of ids (NUL-terminated in out) */
} vectors;

/* Free what ReadVectors made. */
static void
FreeVectors(vectors *v)
{
	free(v->inp);
	free(v->out);
	free(v->text);
	free(v->len);
	free(v->ids);
	memset(v, 0, sizeof(*v));
}

/* Read base.inp and base.out into v; false (with a diagnostic) when they do not pair up. */
static bool
ReadVectors(const char *base, vectors *v)
{
	char		path[4200];
	size_t		inp_len, out_len;
	cbllm_err	err = {{0}};
	int			n_lines = 0;

	memset(v, 0, sizeof(*v));
	snprintf(path, sizeof(path), "%s.inp", base);
	if (cbllm_read_file(path, &v->inp, &inp_len, &err) != CBLLM_OK)
	{
		TAP_DIAG("%s", err.msg);
		return false;
	}
	snprintf(path, sizeof(path), "%s.out", base);
	if (cbllm_read_file(path, &v->out, &out_len, &err) != CBLLM_OK)
	{
		TAP_DIAG("%s", err.msg);
		return false;
	}
	v->text = malloc((inp_len / strlen(SEP) + 2) * sizeof(char *));
	v->len = malloc((inp_len / strlen(SEP) + 2) * sizeof(size_t));
	v->ids = malloc((out_len + 1) * sizeof(char *));
	if (v->text == NULL || v->len == NULL || v->ids == NULL)
		return false;
	/* the texts: up to each separator, and what follows the last one if anything */
	for (size_t pos = 0; pos < inp_len;)
	{
		const char *next = memmem(v->inp + pos, inp_len - pos, SEP, strlen(SEP));
		size_t		end = next ? (size_t) (next - v->inp) : inp_len;

		v->text[v->n] = v->inp + pos;
		v->len[v->n++] = end - pos;
		pos = next ? end + strlen(SEP) : inp_len;
	}
	/* the id lines */
	for (char *line = v->out, *nl; line < v->out + out_len; line = nl + 1)
	{
		if ((nl = memchr(line, '\n', (size_t) (v->out + out_len - line))) == NULL)
			nl = v->out + out_len;
		*nl = '\0';
		v->ids[n_lines++] = line;
	}
	if (n_lines != v->n)
	{
		TAP_DIAG("%s: %d texts but %d lines of ids", base, v->n, n_lines);
		return false;
	}
	return v->n > 0;
}

/* Parse a line of space-separated ids into want (cap entries); the count, or -1. */
static int
ParseIds(const char *line, int32_t *want, int cap)
{
	int			n = 0;

	for (const char *p = line; *p;)
	{
		char	   *end;
		long		id;

		while (*p == ' ' || *p == '\t' || *p == '\r')
			p++;
		if (*p == '\0')
			break;
		id = strtol(p, &end, 10);
		if (end == p || id < 0 || id > INT32_MAX || n == cap)
			return -1;
		want[n++] = (int32_t) id;
		p = end;
	}
	return n;
}

/* Print text (up to 60 bytes), ids and the expected ids of one difference. */
static void
ShowDifference(const char *text, size_t len, const int32_t *got, int n_got, const char *want)
{
	char		buf[1024];
	int			k = 0;

	for (int i = 0; i < n_got && k < (int) sizeof(buf) - 16; i++)
		k += snprintf(buf + k, sizeof(buf) - (size_t) k, " %d", got[i]);
	buf[k] = '\0';
	TAP_DIAG("text \"%.*s\"%s", (int) (len < 60 ? len : 60), text, len > 60 ? "..." : "");
	TAP_DIAG("  got: %s", buf);
	TAP_DIAG("  want: %s", want);
}

/* Encode every text of v as test-tokenizer-0 does; how many gave the expected ids. */
static int
CountMatches(const cbllm_tokenizer *tok, const char *name, const vectors *v)
{
	tokenizer_encode_opts opts = {.add_bos = false, .parse_special = false};
	int			matched = 0, shown = 0;

	for (int i = 0; i < v->n; i++)
	{
		int32_t    *got = NULL,
					want[4096];
		int			n_got = 0,
					n_want = ParseIds(v->ids[i], want, 4096);
		cbllm_err	err = {{0}};

		if (n_want < 0)
			TAP_DIAG("%s: line %d of the .out file is not a list of ids", name, i + 1);
		else if (tokenizer_encode(tok, v->text[i], v->len[i], opts, &got, &n_got, &err) != CBLLM_OK)
			TAP_DIAG("%s: text %d: %s", name, i + 1, err.msg);
		else if (n_got == n_want && memcmp(got, want, (size_t) n_got * sizeof(int32_t)) == 0)
			matched++;
		else if (shown++ < MAX_SHOWN)
			ShowDifference(v->text[i], v->len[i], got, n_got, v->ids[i]);
		free(got);
	}
	return matched;
}

/* Whether encoding with add_bos puts c->bos before the ids of "Hello world", or nothing when it is -1. */
static bool
AddsBos(const cbllm_tokenizer *tok, const vocab_case *c)
{
	int32_t    *plain = NULL, *with = NULL;
	int			n_plain = 0, n_with = 0, extra = c->bos >= 0;
	cbllm_err	err = {{0}};
	bool		ok = tokenizer_encode(tok, "Hello world", 11, (tokenizer_encode_opts) {.add_bos = false},
									  &plain, &n_plain, &err) == CBLLM_OK &&
		tokenizer_encode(tok, "Hello world", 11, (tokenizer_encode_opts) {.add_bos = true},
						 &with, &n_with, &err) == CBLLM_OK &&
		n_with == n_plain + extra && (!extra || with[0] == c->bos) &&
		memcmp(with + extra, plain, (size_t) n_plain * sizeof(int32_t)) == 0;

	free(plain);
	free(with);
	return ok;
}

/* Open a GGUF file and build its tokenizer; the status. */
static int
LoadVocab(const char *path, cbllm_tokenizer **tok, cbllm_err *err)
{
	gguf_file  *g = NULL;
	int			rc = gguf_open(path, &g, err);

	*tok = NULL;
	if (rc == CBLLM_OK)
		rc = tokenizer_load_gguf(g, tok, err);
	gguf_free(g);
	return rc;
}

/* One vocabulary: it loads and matches every text, or (todo) it is refused and skipped. */
static void
RunCase(const char *dir, const vocab_case *c)
{
	char		base[4096];
	vectors		v;
	cbllm_tokenizer *tok = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	snprintf(base, sizeof(base), "%s/ggml-vocab-%s.gguf", dir, c->name);
	rc = LoadVocab(base, &tok, &err);
	if (c->todo != NULL)
	{
		TAP_OK(rc != CBLLM_OK && strstr(err.msg, c->refusal) != NULL,
			   "%s: refused, the message naming %s", c->name, c->refusal);
		if (rc != CBLLM_OK)
			TAP_DIAG("%s", err.msg);
		printf("ok %d # SKIP %s: %s\n", ++tap_n, c->name, c->todo);
		tokenizer_free(tok);
		return;
	}
	TAP_OK(rc == CBLLM_OK, "%s: the vocab-only GGUF file loads", c->name);
	if (rc != CBLLM_OK)
		TAP_DIAG("%s", err.msg);
	if (!ReadVectors(base, &v))
		TAP_OK(false, "%s: its .inp and .out files can be read and pair up", c->name);
	else if (tok == NULL)
		TAP_OK(false, "%s: all %d texts give llama.cpp's ids (not loaded)", c->name, v.n);
	else
	{
		int			matched = CountMatches(tok, c->name, &v);

		TAP_OK(matched == v.n, "%s: %d/%d texts give llama.cpp's ids", c->name, matched, v.n);
		if (c->bos >= 0)
			TAP_OK(AddsBos(tok, c), "%s: adding special tokens puts BOS %d first", c->name, c->bos);
		else
			TAP_OK(AddsBos(tok, c), "%s: adding special tokens adds no BOS, as in llama.cpp", c->name);
	}
	FreeVectors(&v);
	tokenizer_free(tok);
}

/* Whether every ggml-vocab-*.gguf.inp of dir names a listed case; false lists the others. */
static bool
AllListed(const char *dir, int *n_files)
{
	DIR		   *d = opendir(dir);
	struct dirent *e;
	bool		ok = d != NULL;

	*n_files = 0;
	while (d != NULL && (e = readdir(d)) != NULL)
	{
		size_t		len = strlen(e->d_name);
		bool		listed = false;

		if (strncmp(e->d_name, "ggml-vocab-", 11) != 0 || len < 11 + 9 ||
			strcmp(e->d_name + len - 9, ".gguf.inp") != 0)
			continue;
		(*n_files)++;
		for (size_t i = 0; i < N_CASES; i++)
			listed |= strlen(cases[i].name) == len - 20 && strncmp(cases[i].name, e->d_name + 11, len - 20) == 0;
		if (!listed)
		{
			TAP_DIAG("%s is not run by this test", e->d_name);
			ok = false;
		}
	}
	if (d != NULL)
		closedir(d);
	return ok;
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "test/data/llama-cpp-vocab";
	int			n_files;

	TAP_OK(AllListed(dir, &n_files) && n_files == (int) N_CASES,
		   "the %d vocabularies with vectors in %s are the %d this test runs", n_files, dir, (int) N_CASES);
	for (size_t i = 0; i < N_CASES; i++)
		RunCase(dir, &cases[i]);
	return tap_done();
}
