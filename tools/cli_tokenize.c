/*
 * cli_tokenize.c: the tokenizer commands of cbllm-cli.
 *
 *   tokenize -m DIR [--raw | --no-bos | --no-parse-special]
 *                                         all of standard input, ids on one
 *                                         line: the BOS (the post-processor's
 *                                         tokens) added unless --no-bos,
 *                                         special-token text ("<s>") taken as
 *                                         that token unless --no-parse-special;
 *                                         --raw is both (llama.cpp's
 *                                         test-tokenizer-0 encodes so)
 *   tokenize -m DIR --jsonl [--special]   each input line a JSON string; each
 *                                         output line a JSON array of its ids
 *                                         (added-token text is parsed unless
 *                                         --no-parse-special; the
 *                                         post-processor's tokens only with
 *                                         --special, as HuggingFace's
 *                                         add_special_tokens)
 *   detokenize -m DIR --jsonl [--raw]     each input line a JSON array of ids;
 *                                         each output line the decoded JSON
 *                                         string (--raw: no clean-up of spaces)
 *   tokenize -m DIR --bench FILE          load time of tokenizer.json, then
 *                                         FILE encoded 3 times on one thread:
 *                                         the median MB/s
 *
 * DIR needs only tokenizer.json (and tokenizer_config.json).  -m may also
 * name a GGUF file, or a directory holding one GGUF file and no safetensors,
 * whose tokenizer.ggml.* metadata is the tokenizer: a vocab-only file (no
 * tensors) will do.  --no-parse-special (or its other name, --literal)
 * leaves special added-token text as text, as llama.cpp's parse_special
 * false.  Every failure prints one line "cbllm-cli: error: ..." and exits 1.
 */
#include "cli_tokenize.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define BENCH_RUNS	3

/* Print an error line and return the exit status 1. */
static int
Fail(const char *what, const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s%s\n", what, msg);
	return 1;
}

/*
 * The tokenizer of the GGUF file at path, or NULL with *use_dir set when the
 * file has no tokenizer metadata and dir_given (dir's tokenizer.json is then
 * the tokenizer, as the engine does); an error fills err.
 */
static cbllm_tokenizer *
LoadGguf(const char *path, bool dir_given, bool *use_dir, cbllm_err *err)
{
	gguf_file  *g = NULL;
	cbllm_tokenizer *tok = NULL;
	int			rc = gguf_open(path, &g, err);

	*use_dir = rc == CBLLM_OK && dir_given && gguf_find_key(g, "tokenizer.ggml.model") == NULL;
	if (rc == CBLLM_OK && !*use_dir && (rc = tokenizer_load_gguf(g, &tok, err)) != CBLLM_OK)
	{
		char		msg[CBLLM_ERR_MSG_LEN];

		snprintf(msg, sizeof(msg), "%s", err->msg);
		cbllm_fail(err, rc, "%s: %s", path, msg);
	}
	gguf_free(g);
	return tok;
}

/* Load the tokenizer of o->model_dir (a GGUF file, or a directory); prints the error on failure. */
static cbllm_tokenizer *
Load(const tokenize_opts *o)
{
	cbllm_tokenizer *tok = NULL;
	cbllm_err	err = {{0}};
	char	   *gguf = NULL;
	struct stat st;
	bool		use_dir = true;

	if (o->model_dir == NULL)
	{
		Fail("", "tokenize needs -m DIR or -m FILE.gguf");
		return NULL;
	}
	if (model_gguf_path(o->model_dir, &gguf, &err) != CBLLM_OK)
	{
		Fail("", err.msg);
		return NULL;
	}
	if (gguf != NULL)
		tok = LoadGguf(gguf, stat(o->model_dir, &st) == 0 && S_ISDIR(st.st_mode), &use_dir, &err);
	if (use_dir && tokenizer_load(o->model_dir, &tok, &err) != CBLLM_OK)
		tok = NULL;
	if (tok == NULL)
		Fail("", err.msg);
	free(gguf);
	return tok;
}

/* Write s[0..n) as a JSON string: quotes, backslashes and control characters escaped. */
static void
PutJsonString(const char *s, size_t n, FILE *f)
{
	putc('"', f);
	for (size_t i = 0; i < n; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c < 0x20 || c == 0x7F)
			fprintf(f, "\\u%04x", c);
		else
			putc(c, f);
	}
	putc('"', f);
}

/* Print ids as a JSON array line, or space-separated. */
static void
PutIds(const int32_t *ids, int n, bool json)
{
	fputs(json ? "[" : "", stdout);
	for (int i = 0; i < n; i++)
		printf(i ? (json ? ", %d" : " %d") : "%d", ids[i]);
	fputs(json ? "]\n" : "\n", stdout);
}

/* tokenize --jsonl: one JSON string per line in, one array of ids per line out. */
static int
TokenizeJsonl(const cbllm_tokenizer *tok, const tokenize_opts *o)
{
	tokenizer_encode_opts eo = {.add_bos = o->special, .parse_special = !o->no_parse_special};
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;
	int			status = 0;

	for (long no = 1; status == 0 && (len = getline(&line, &cap, stdin)) >= 0; no++)
	{
		cJSON	   *v = cJSON_ParseWithLength(line, (size_t) len);
		const char *s = cJSON_GetStringValue(v);
		int32_t    *ids = NULL;
		int			n = 0;
		cbllm_err	err = {{0}};

		if (s == NULL)
		{
			fprintf(stderr, "cbllm-cli: error: standard input line %ld is not a JSON string\n", no);
			status = 1;
		}
		else if (tokenizer_encode(tok, s, strlen(s), eo, &ids, &n, &err) != CBLLM_OK)
			status = Fail("", err.msg);
		else
			PutIds(ids, n, true);
		free(ids);
		cJSON_Delete(v);
	}
	free(line);
	return status;
}

/* Read all of f into b. */
static int
ReadAll(FILE *f, cbllm_buf *b)
{
	char		chunk[65536];
	size_t		n;

	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (cbllm_buf_append(b, chunk, n) != CBLLM_OK)
			return -1;
	return ferror(f) ? -1 : 0;
}

/* Compare doubles for qsort. */
static int
CmpDouble(const void *a, const void *b)
{
	double		x = *(const double *) a, y = *(const double *) b;

	return x < y ? -1 : x > y;
}

/* tokenize --bench FILE: the load time, then the median speed of encoding FILE. */
static int
TokenizeBench(const tokenize_opts *o)
{
	tokenizer_encode_opts eo = {.add_bos = false, .parse_special = true};
	FILE	   *f = fopen(o->bench_file, "rb");
	cbllm_buf	text = {0};
	cbllm_tokenizer *tok;
	double		t0, load_s, mbps[BENCH_RUNS];
	int			n = 0;

	if (f == NULL || ReadAll(f, &text) != 0)
	{
		if (f)
			fclose(f);
		cbllm_buf_free(&text);
		return Fail("cannot read ", o->bench_file);
	}
	fclose(f);
	t0 = cbllm_now();
	if ((tok = Load(o)) == NULL)
	{
		cbllm_buf_free(&text);
		return 1;
	}
	load_s = cbllm_now() - t0;
	for (int r = 0; r < BENCH_RUNS; r++)
	{
		int32_t    *ids = NULL;
		cbllm_err	err = {{0}};

		t0 = cbllm_now();
		if (tokenizer_encode(tok, text.data ? text.data : "", text.len, eo, &ids, &n, &err) != CBLLM_OK)
		{
			tokenizer_free(tok);
			cbllm_buf_free(&text);
			return Fail("", err.msg);
		}
		mbps[r] = (double) text.len / 1e6 / (cbllm_now() - t0);
		free(ids);
	}
	qsort(mbps, BENCH_RUNS, sizeof(double), CmpDouble);
	printf("load_s %.3f\nbytes %zu\ntokens %d\nencode_MBps %.2f (runs %.2f %.2f %.2f)\n",
		   load_s, text.len, n, mbps[BENCH_RUNS / 2], mbps[0], mbps[1], mbps[2]);
	tokenizer_free(tok);
	cbllm_buf_free(&text);
	return 0;
}

/* tokenize: standard input to ids. */
int
cli_tokenize_run(const tokenize_opts *o)
{
	tokenizer_encode_opts eo = {.add_bos = !o->raw && !o->no_bos, .parse_special = !o->raw && !o->no_parse_special};
	cbllm_tokenizer *tok;
	cbllm_err	err = {{0}};
	cbllm_buf	text = {0};
	int32_t    *ids = NULL;
	int			n_ids = 0, status = 0;

	if (o->bench_file != NULL)
		return TokenizeBench(o);
	if ((tok = Load(o)) == NULL)
		return 1;
	if (o->jsonl)
		status = TokenizeJsonl(tok, o);
	else if (ReadAll(stdin, &text) != 0)
		status = Fail("", "cannot read standard input");
	else if (tokenizer_encode(tok, text.data ? text.data : "", text.len, eo, &ids, &n_ids, &err) != CBLLM_OK)
		status = Fail("", err.msg);
	else
		PutIds(ids, n_ids, false);
	free(ids);
	tokenizer_free(tok);
	cbllm_buf_free(&text);
	return status;
}

/* Read a JSON array of ids into a malloc'd array; -1 if it is not one. */
static int
ParseIdArray(const cJSON *v, int32_t **ids, int *n)
{
	const cJSON *it;
	int			k = 0;

	if (!cJSON_IsArray(v) || (*ids = malloc(((size_t) cJSON_GetArraySize(v) + 1) * sizeof(int32_t))) == NULL)
		return -1;
	cJSON_ArrayForEach(it, v)
	{
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX ||
			it->valuedouble != (double) (int32_t) it->valuedouble)
		{
			free(*ids);
			*ids = NULL;
			return -1;
		}
		(*ids)[k++] = (int32_t) it->valuedouble;
	}
	*n = k;
	return 0;
}

/* detokenize --jsonl: one JSON array of ids per line in, one JSON string per line out. */
int
cli_detokenize_run(const tokenize_opts *o)
{
	tokenizer_decode_opts dopts = {.skip_special = false, .raw = o->raw};
	cbllm_tokenizer *tok;
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		len;
	int			status = 0;

	if (!o->jsonl)
		return Fail("", "detokenize needs --jsonl");
	if ((tok = Load(o)) == NULL)
		return 1;
	for (long no = 1; status == 0 && (len = getline(&line, &cap, stdin)) >= 0; no++)
	{
		cJSON	   *v = cJSON_ParseWithLength(line, (size_t) len);
		int32_t    *ids = NULL;
		int			n = 0;
		cbllm_buf	out = {0};
		cbllm_err	err = {{0}};

		if (ParseIdArray(v, &ids, &n) != 0)
		{
			fprintf(stderr, "cbllm-cli: error: standard input line %ld is not a JSON array of ids\n", no);
			status = 1;
		}
		else if (tokenizer_decode_with(tok, ids, n, dopts, &out, &err) != CBLLM_OK)
			status = Fail("", err.msg);
		else
		{
			PutJsonString(out.data, out.len, stdout);
			putchar('\n');
		}
		cbllm_buf_free(&out);
		free(ids);
		cJSON_Delete(v);
	}
	free(line);
	tokenizer_free(tok);
	return status;
}
