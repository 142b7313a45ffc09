/*
 * test_tokenizer_vectors.c: the tokenizer against the reference vectors of
 * five real tokenizers (test/data/tokenizers/: Llama-3.1, Qwen3 and Gemma-3
 * byte-level and SentencePiece BPE, Llama-2 and Mistral-7B).  Each
 * encode.jsonl record holds a text and what HuggingFace's reference
 * implementations give for it: ids (no special tokens added), ids_special
 * (with them), decoded (decode of ids with the config's clean-up) and
 * decoded_raw (the decoder chain alone).  Every record must match exactly in
 * all four, and decoding token by token through a stream must give
 * decoded_raw with every chunk valid UTF-8.  Literal added-token text in a
 * text is that token in both modes (split_special_tokens false), so both
 * encodings parse special tokens.
 *
 * Then all 159 texts joined by a special token (which splits a text into
 * pieces encoded independently) make one long text, whose ids must be the
 * reference ids joined by that token's id: long texts take the paths short
 * ones do not (the per-call word cache, long SentencePiece words cut
 * before "▁").  Where a model has chat.jsonl, each rendered chat template
 * must encode (added-token text parsed, nothing added) to its reference ids,
 * as the chat-template code will encode it.  Last, four threads encode the
 * joined text at once with one shared tokenizer, each getting the reference.
 *
 * Usage: test_tokenizer_vectors [dir]   (default test/data/tokenizers)
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

static const char *const models[] = {"llama3_1", "qwen3", "gemma3", "llama2", "mistral7b"};

typedef struct counts			/* records that matched, per column */
{
	int			n, ids, ids_special, decoded, decoded_raw, stream;
} counts;

typedef struct joined			/* the texts joined by a special token, and their reference ids */
{
	int32_t		sep;			/* the joining token */
	cbllm_buf	text;
	int32_t    *ids;
	int			n, cap;
} joined;

/* Append a record's text and reference ids, then the joining token, to j. */
static void
JoinRecord(const cbllm_tokenizer *tok, joined *j, const cJSON *rec)
{
	const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "text")),
			   *sep = tokenizer_piece(tok, j->sep);
	const cJSON *ids = cJSON_GetObjectItem(rec, "ids"), *v;
	int			need = j->n + cJSON_GetArraySize(ids) + 1;

	if (need > j->cap)
	{
		j->cap = 2 * need;
		j->ids = realloc(j->ids, (size_t) j->cap * sizeof(int32_t));
	}
	if (text == NULL || sep == NULL || j->ids == NULL)
		return;
	cbllm_buf_append(&j->text, text, strlen(text));
	cbllm_buf_append(&j->text, sep, strlen(sep));
	cJSON_ArrayForEach(v, ids)
		j->ids[j->n++] = (int32_t) v->valuedouble;
	j->ids[j->n++] = j->sep;
}

/* Encode the joined text; whether it gives the joined reference ids. */
static bool
JoinedMatches(const cbllm_tokenizer *tok, const joined *j)
{
	tokenizer_encode_opts plain = {.add_bos = false, .parse_special = true};
	int32_t    *ids = NULL;
	int			n = 0;
	cbllm_err	err = {{0}};
	bool		ok = tokenizer_encode(tok, j->text.data, j->text.len, plain, &ids, &n, &err) == CBLLM_OK &&
		n == j->n && memcmp(ids, j->ids, (size_t) n * sizeof(int32_t)) == 0;

	for (int i = 0; !ok && ids && i < n && i < j->n; i++)
		if (ids[i] != j->ids[i])
		{
			TAP_DIAG("first difference at id %d of %d: %d, reference %d", i, j->n, ids[i], j->ids[i]);
			break;
		}
	free(ids);
	return ok;
}

/* Whether a JSON array holds exactly ids[0..n). */
static bool
IdsMatch(const cJSON *want, const int32_t *ids, int n)
{
	const cJSON *v;
	int			k = 0;

	if (!cJSON_IsArray(want) || cJSON_GetArraySize(want) != n)
		return false;
	cJSON_ArrayForEach(v, want)
		if (!cJSON_IsNumber(v) || v->valuedouble != ids[k++])
		return false;
	return true;
}

/* Whether a JSON string equals buf[0..len). */
static bool
TextMatch(const cJSON *want, const char *buf, size_t len)
{
	const char *s = cJSON_GetStringValue(want);

	return s != NULL && strlen(s) == len && memcmp(s, buf, len) == 0;
}

/* Report the first few mismatches of a column. */
static void
DiagMiss(const char *model, int line, const char *what, const cJSON *rec, int *shown)
{
	char	   *t;

	if ((*shown)++ >= 5)
		return;
	t = cJSON_PrintUnformatted(cJSON_GetObjectItem(rec, "text"));
	TAP_DIAG("%s line %d: %s differs; text %.200s", model, line, what, t ? t : "?");
	free(t);
}

/* Decode ids token by token through one stream; whether it gives want and valid chunks. */
static bool
StreamMatches(const cbllm_tokenizer *tok, const int32_t *ids, int n, const cJSON *want)
{
	tokenizer_stream s;
	cbllm_buf	out = {0};
	bool		ok = true;

	tokenizer_stream_init(&s, true, false);
	for (int i = 0; i < n && ok; i++)
	{
		size_t		before = out.len;

		ok = tokenizer_stream_push(tok, &s, ids[i], &out) == CBLLM_OK &&
			utf8_valid(out.data + before, out.len - before);
	}
	ok = ok && tokenizer_stream_flush(&s, &out) == CBLLM_OK && TextMatch(want, out.data, out.len);
	cbllm_buf_free(&out);
	return ok;
}

/* Check one record; adds to c. */
static void
CheckRecord(const cbllm_tokenizer *tok, const char *model, int line, const cJSON *rec, counts *c, int *shown)
{
	const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "text"));
	size_t		len = text ? strlen(text) : 0;
	tokenizer_encode_opts plain = {.add_bos = false, .parse_special = true},
				special = {.add_bos = true, .parse_special = true};
	tokenizer_decode_opts cooked = {.skip_special = false, .raw = false},
				raw = {.skip_special = false, .raw = true};
	int32_t    *ids = NULL, *ids2 = NULL;
	int			n = 0, n2 = 0;
	cbllm_err	err = {{0}};
	cbllm_buf	d = {0}, r = {0};

	c->n++;
	if (text == NULL || tokenizer_encode(tok, text, len, plain, &ids, &n, &err) != CBLLM_OK ||
		tokenizer_encode(tok, text, len, special, &ids2, &n2, &err) != CBLLM_OK)
	{
		TAP_DIAG("%s line %d: encode failed: %s", model, line, err.msg);
		free(ids);
		return;
	}
	if (IdsMatch(cJSON_GetObjectItem(rec, "ids"), ids, n))
		c->ids++;
	else
		DiagMiss(model, line, "ids", rec, shown);
	if (IdsMatch(cJSON_GetObjectItem(rec, "ids_special"), ids2, n2))
		c->ids_special++;
	else
		DiagMiss(model, line, "ids_special", rec, shown);
	/* decode the reference ids, so a decoding check does not hang on the encoder */
	free(ids);
	n = cJSON_GetArraySize(cJSON_GetObjectItem(rec, "ids"));
	ids = calloc((size_t) n + 1, sizeof(int32_t));
	for (int i = 0; ids && i < n; i++)
		ids[i] = (int32_t) cJSON_GetArrayItem(cJSON_GetObjectItem(rec, "ids"), i)->valuedouble;
	if (ids && tokenizer_decode_with(tok, ids, n, cooked, &d, &err) == CBLLM_OK &&
		TextMatch(cJSON_GetObjectItem(rec, "decoded"), d.data, d.len))
		c->decoded++;
	else
		DiagMiss(model, line, "decoded", rec, shown);
	if (ids && tokenizer_decode_with(tok, ids, n, raw, &r, &err) == CBLLM_OK &&
		TextMatch(cJSON_GetObjectItem(rec, "decoded_raw"), r.data, r.len))
		c->decoded_raw++;
	else
		DiagMiss(model, line, "decoded_raw", rec, shown);
	if (ids && StreamMatches(tok, ids, n, cJSON_GetObjectItem(rec, "decoded_raw")))
		c->stream++;
	else
		DiagMiss(model, line, "stream", rec, shown);
	cbllm_buf_free(&d);
	cbllm_buf_free(&r);
	free(ids);
	free(ids2);
}

typedef struct thread_job		/* one thread's share of the shared-tokenizer check */
{
	const cbllm_tokenizer *tok;
	const joined *j;
	int			ok;				/* rounds that gave the reference ids */
} thread_job;

/* Encode the joined text a few times; count the rounds that match. */
static void *
ThreadEncode(void *arg)
{
	thread_job *t = arg;

	for (int r = 0; r < 3; r++)
		t->ok += JoinedMatches(t->tok, t->j);
	return NULL;
}

/* Whether four threads sharing tok all encode the joined text to its reference ids. */
static bool
ThreadsMatch(const cbllm_tokenizer *tok, const joined *j)
{
	pthread_t	th[4];
	thread_job	jobs[4];
	int			started = 0, ok = 0;

	for (int i = 0; i < 4; i++)
	{
		jobs[i] = (thread_job) {tok, j, 0};
		started += pthread_create(&th[i], NULL, ThreadEncode, &jobs[i]) == 0;
	}
	for (int i = 0; i < started; i++)
	{
		pthread_join(th[i], NULL);
		ok += jobs[i].ok;
	}
	return started == 4 && ok == 12;
}

/* Encode each chat.jsonl rendering, if the model has the file; adds matches to *ok of *n. */
static void
CheckChat(const cbllm_tokenizer *tok, const char *dir, const char *model, int *ok, int *n)
{
	char		path[4096];
	char	   *text = NULL;
	size_t		len = 0;
	cbllm_err	err = {{0}};

	snprintf(path, sizeof(path), "%s/%s/chat.jsonl", dir, model);
	if (cbllm_read_file(path, &text, &len, &err) != CBLLM_OK)
		return;
	for (char *p = text, *nl; p < text + len; p = nl + 1)
	{
		tokenizer_encode_opts plain = {.add_bos = false, .parse_special = true};
		cJSON	   *rec;
		const char *r;
		int32_t    *ids = NULL;
		int			k = 0;

		if ((nl = memchr(p, '\n', (size_t) (text + len - p))) == NULL)
			nl = text + len;
		if (nl == p || (rec = cJSON_ParseWithLength(p, (size_t) (nl - p))) == NULL)
			continue;
		(*n)++;
		r = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "rendered"));
		if (r && tokenizer_encode(tok, r, strlen(r), plain, &ids, &k, &err) == CBLLM_OK &&
			IdsMatch(cJSON_GetObjectItem(rec, "ids"), ids, k))
			(*ok)++;
		else if (*n - *ok <= 3)
			TAP_DIAG("%s chat record %d: ids differ", model, *n);
		free(ids);
		cJSON_Delete(rec);
	}
	free(text);
}

/* Load one model's tokenizer and check all of its encode.jsonl. */
static void
CheckModel(const char *dir, const char *model)
{
	char		path[4096];
	char	   *text = NULL;
	size_t		len = 0;
	cbllm_tokenizer *tok = NULL;
	cbllm_err	err = {{0}};
	counts		c = {0};
	joined		j = {0};
	int			line = 0, shown = 0;
	double		t0 = cbllm_now(), t1;
	int			rc;

	snprintf(path, sizeof(path), "%s/%s", dir, model);
	rc = tokenizer_load(path, &tok, &err);
	t1 = cbllm_now();
	TAP_OK(rc == CBLLM_OK, "%s: tokenizer.json loads (%.3f s)%s%s", model, t1 - t0, rc ? ": " : "", rc ? err.msg : "");
	snprintf(path, sizeof(path), "%s/%s/encode.jsonl", dir, model);
	j.sep = tok && tokenizer_bos_id(tok) >= 0 ? tokenizer_bos_id(tok) : tok ? tokenizer_eos_id(tok) : -1;
	if (rc != CBLLM_OK || cbllm_read_file(path, &text, &len, &err) != CBLLM_OK)
	{
		TAP_OK(false, "%s: encode.jsonl is read%s%s", model, rc ? "" : ": ", rc ? "" : err.msg);
		tokenizer_free(tok);
		return;
	}
	for (char *p = text, *nl; p < text + len; p = nl + 1)
	{
		cJSON	   *rec;

		if ((nl = memchr(p, '\n', (size_t) (text + len - p))) == NULL)
			nl = text + len;
		line++;
		if (nl == p)
			continue;
		if ((rec = cJSON_ParseWithLength(p, (size_t) (nl - p))) == NULL)
		{
			TAP_DIAG("%s line %d: not JSON", model, line);
			c.n++;
			continue;
		}
		CheckRecord(tok, model, line, rec, &c, &shown);
		JoinRecord(tok, &j, rec);
		cJSON_Delete(rec);
	}
	TAP_OK(c.n == 159, "%s: encode.jsonl has the 159 reference texts (%d)", model, c.n);
	TAP_OK(c.ids == c.n, "%s: %d/%d ids (no special tokens added) match the reference", model, c.ids, c.n);
	TAP_OK(c.ids_special == c.n, "%s: %d/%d ids_special (post-processor's tokens added) match", model, c.ids_special, c.n);
	TAP_OK(c.decoded == c.n, "%s: %d/%d decoded (with the config's clean-up) match", model, c.decoded, c.n);
	TAP_OK(c.decoded_raw == c.n, "%s: %d/%d decoded_raw (decoder chain alone) match", model, c.decoded_raw, c.n);
	TAP_OK(c.stream == c.n, "%s: %d/%d streamed token by token equal decoded_raw in valid UTF-8 chunks",
		   model, c.stream, c.n);
	TAP_OK(j.text.len > 8192 && JoinedMatches(tok, &j),
		   "%s: the texts joined by %s in one text of %zu bytes give the joined reference ids",
		   model, tokenizer_piece(tok, j.sep), j.text.len);
	TAP_OK(ThreadsMatch(tok, &j), "%s: four threads sharing the tokenizer each encode the joined text to the reference",
		   model);
	cbllm_buf_free(&j.text);
	free(j.ids);
	{
		int			chat_ok = 0, chat_n = 0;

		CheckChat(tok, dir, model, &chat_ok, &chat_n);
		if (chat_n > 0)
			TAP_OK(chat_ok == chat_n, "%s: %d/%d chat.jsonl renderings encode to the reference ids",
				   model, chat_ok, chat_n);
	}
	free(text);
	tokenizer_free(tok);
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "test/data/tokenizers";

	for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++)
		CheckModel(dir, models[m]);
	return tap_done();
}
