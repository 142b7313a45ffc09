/*
 * test_safetensors.c: unit tests of safetensors archives (st_open_dir,
 * st_find): a single model.safetensors and a two-shard checkpoint with its
 * model.safetensors.index.json hold every tensor with the dtype, shape and
 * bytes written; malformed files and bad indexes fail with messages naming
 * the file and the problem.  The fixtures (fixture.h) go into a mkdtemp()
 * directory, removed at the end.
 *
 * usage: test_safetensors
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "fixture.h"
#include "formats/safetensors.h"
#include "tap.h"

/* Whether every tensor spec is in the archive with its dtype, shape and bytes. */
static bool
ArchiveMatches(const st_archive *ar, const fixture_tensors *s)
{
	if (ar->n_tensors != s->n)
	{
		TAP_DIAG("archive has %d tensors, %d written", ar->n_tensors, s->n);
		return false;
	}
	for (int i = 0; i < s->n; i++)
	{
		const fixture_tensor *w = &s->t[i];
		const st_tensor *t = st_find(ar, w->name);
		bool		ok = t != NULL && strcmp(cbllm_dtype_name(t->dtype), w->dtype) == 0 &&
			t->ndim == w->ndim && t->nbytes == w->nbytes &&
			memcmp(t->data, w->data, w->nbytes) == 0;

		for (int d = 0; ok && d < w->ndim; d++)
			ok = t->shape[d] == w->shape[d];
		if (!ok)
		{
			TAP_DIAG("tensor %s differs from what was written", w->name);
			return false;
		}
	}
	return true;
}

/* The tiny checkpoint's model.safetensors opens with every F32, F16 and BF16 tensor as written. */
static void
TestSingleFile(void)
{
	char	   *dir = fixture_case_dir("valid");
	fixture_tensors s = {0};
	st_archive *ar = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_build_llama(&s, &fixture_tiny);
	fixture_write_model(dir, &fixture_tiny, &s, false);
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc == CBLLM_OK && ar->n_files == 1, "st_open_dir opens model.safetensors %s", err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(ArchiveMatches(ar, &s),
			   "st_open_dir: all %d F32/F16/BF16 tensors have the written dtype, shape and bytes", s.n);
		TAP_OK(st_find(ar, "model.layers.2.mlp.up_proj.weight") == NULL &&
			   st_find(ar, "model.embed_tokens") == NULL,
			   "st_find returns NULL for absent names and prefixes");
		st_close(ar);
	}
	fixture_free_tensors(&s);
	free(dir);
}

/* A two-shard checkpoint with an index opens with each tensor from its shard, as the single file. */
static void
TestSharded(void)
{
	fixture_pair p;
	const fixture_tensors *s = &p.s;
	st_archive *a1 = NULL,
			   *a2 = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	bool		same = true,
				in_shard = true;

	TAP_OK(fixture_pair_write(&p), "write the two-shard fixture with its index");
	rc = st_open_dir(p.sharded, &a2, &err);
	TAP_OK(rc == CBLLM_OK && a2->n_files == 2, "st_open_dir opens the index and 2 shards %s",
		   err.msg);
	if (rc != CBLLM_OK)
		goto done;
	TAP_OK(ArchiveMatches(a2, s), "sharded: every tensor has the written dtype, shape and bytes");
	for (int i = 0; i < s->n; i++)
	{
		const st_tensor *t = st_find(a2, s->t[i].name);
		const char *path = t ? a2->files[t->file].path : "";
		const char *want = fixture_shard_names[s->t[i].shard];

		if (t == NULL || strlen(path) < strlen(want) ||
			strcmp(path + strlen(path) - strlen(want), want) != 0)
			in_shard = false;
	}
	TAP_OK(in_shard, "sharded: each tensor comes from the shard the index names");
	rc = st_open_dir(p.single, &a1, &err);
	if (rc == CBLLM_OK)
		for (int i = 0; i < a1->n_tensors; i++)
		{
			const st_tensor *x = &a1->tensors[i],
					   *y = st_find(a2, x->name);

			if (y == NULL || y->nbytes != x->nbytes || y->dtype != x->dtype ||
				memcmp(x->data, y->data, x->nbytes) != 0)
				same = false;
		}
	TAP_OK(rc == CBLLM_OK && same && a1->n_tensors == a2->n_tensors,
		   "sharded and single-file archives hold the same tensor bytes");
done:
	st_close(a1);
	st_close(a2);
	fixture_pair_free(&p);
}

/* Write a raw model.safetensors (with a valid config.json) and expect st_open_dir to fail. */
static void
RawCase(const char *label, const void *bytes, size_t n, const char *n1, const char *n2)
{
	char	   *dir = fixture_case_dir(label);
	char	   *path = cbllm_path_join(dir, "model.safetensors");
	st_archive *ar = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_write_bytes(dir, "model.safetensors", bytes, n);
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, path, n1, n2), "%s fails (%s): %s", label,
		   cbllm_status_name(rc), err.msg);
	free(path);
	free(dir);
}

/* Write a model.safetensors whose 120-byte header is json padded with spaces; expect failure. */
static void
RawJsonCase(const char *label, const char *json, const char *n1, const char *n2)
{
	unsigned char buf[128];

	memset(buf, ' ', sizeof(buf));
	memset(buf, 0, 8);
	buf[0] = 120;
	memcpy(buf + 8, json, strlen(json));
	RawCase(label, buf, sizeof(buf), n1, n2);
}

/* Malformed safetensors files: short, bad header lengths, bad header JSON, bad entries. */
static void
TestMalformedFiles(void)
{
	unsigned char buf[64];

	RawCase("safetensors of 5 bytes", "\x10\0\0\0\0", 5, "too short", NULL);
	memset(buf, ' ', sizeof(buf));
	memcpy(buf, "\0\x10\0\0\0\0\0\0{}", 10);	/* header length 4096 in a 64-byte file */
	RawCase("header length 4096 in a 64-byte file", buf, 64, "header length 4096", "exceeds");
	memcpy(buf, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
	RawCase("header length 2^64 - 1", buf, 64, "header length", "exceeds");
	RawJsonCase("header not JSON", "not json", "not a JSON object", NULL);
	RawJsonCase("header a JSON array", "[1, 2]", "not a JSON object", NULL);
	RawJsonCase("header entry without data_offsets",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", "\"w\"", "malformed");
	RawJsonCase("data_offsets ending before they begin",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}",
				  "\"w\"", "data_offsets");
	RawJsonCase("data_offsets not numbers",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [\"0\", \"0\"]}}",
				  "\"w\"", "data_offsets");
	/* found by fuzzing: an end offset beyond size_t's range was cast before the size check */
	RawJsonCase("data_offsets ending at byte 1e30",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1e30]}}",
				  "\"w\"", "truncated");
	RawJsonCase("negative dimension",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 0]}}",
				  "\"w\"", "shape");
}

/* Sharded checkpoints with a bad index. */
static void
TestBadIndex(void)
{
	fixture_tensors s = {0};
	char	   *dir;
	char	   *index;
	char	   *shard3;
	st_archive *ar = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_build_llama(&s, &fixture_tiny);

	/* the index names a shard that does not exist */
	dir = fixture_case_dir("index-missing-shard");
	fixture_write_model(dir, &fixture_tiny, &s, true);
	index = cbllm_path_join(dir, "model.safetensors.index.json");
	fixture_write_text(dir, "model.safetensors.index.json",
					   "{\"metadata\": {}, \"weight_map\": {\"model.embed_tokens.weight\":"
					   " \"model-00001-of-00002.safetensors\", \"lm_head.weight\":"
					   " \"model-00003-of-00002.safetensors\"}}");
	shard3 = cbllm_path_join(dir, "model-00003-of-00002.safetensors");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, shard3, "cannot open", NULL),
		   "index naming a missing shard fails (%s): %s", cbllm_status_name(rc), err.msg);
	free(shard3);
	free(index);
	free(dir);

	/* a weight_map path with a '/' */
	dir = fixture_case_dir("index-slash");
	fixture_write_model(dir, &fixture_tiny, &s, true);
	index = cbllm_path_join(dir, "model.safetensors.index.json");
	fixture_write_text(dir, "model.safetensors.index.json",
					   "{\"weight_map\": {\"model.embed_tokens.weight\": \"../model-00001-of-00002.safetensors\"}}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "not a plain file name", NULL),
		   "weight_map path with '/' fails (%s): %s", cbllm_status_name(rc), err.msg);
	fixture_write_text(dir, "model.safetensors.index.json",
					   "{\"weight_map\": {\"model.embed_tokens.weight\": \"sub/x.safetensors\"}}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "model.embed_tokens.weight", NULL),
		   "weight_map path sub/x.safetensors fails naming the tensor: %s", err.msg);
	fixture_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": [1, 2]}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "weight_map", NULL),
		   "index whose weight_map is not an object fails: %s", err.msg);
	fixture_write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "JSON", NULL),
		   "index that is not JSON fails: %s", err.msg);
	fixture_write_text(dir, "model.safetensors.index.json",
					   "{\"weight_map\": {\"model.embed_tokens.weight\": 5}}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "model.embed_tokens.weight", NULL),
		   "weight_map entry that is not a string fails: %s", err.msg);
	free(index);
	free(dir);
	fixture_free_tensors(&s);
}

int
main(void)
{
	void		(*const tests[]) (void) = {
		TestSingleFile,
		TestSharded,
		TestMalformedFiles,
		TestBadIndex
	};

	return run_in_fixture_root("safetensors", tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
