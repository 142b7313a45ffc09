/*
 * test_gguf.c: unit tests of the GGUF parser (gguf_open, gguf_parse and the
 * lookups).  test/tools/gguf_writer.py, run here, writes the fixtures into a
 * mkdtemp() directory with expect.json describing them: two well-formed files
 * (versions 3 and 2, alignments 64 and the default) must hold every key with
 * the written type and value and every tensor with the written type, dims,
 * offset, size and bytes; each malformed file must fail, from a mapping and
 * from a buffer, with the message expect.json gives.
 *
 * usage: test_gguf test/tools/gguf_writer.py
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "formats/gguf.h"
#include "tap.h"

/* Whether s holds exactly the text want. */
static bool
StrIs(gguf_str s, const char *want)
{
	return s.len == strlen(want) && (s.len == 0 || memcmp(s.ptr, want, s.len) == 0);
}

/* Whether the fixed-size value at p of type t equals the JSON value j. */
static bool
ScalarIs(uint32_t t, const uint8_t *p, const cJSON *j)
{
	union
	{
		uint8_t		u8;
		int8_t		i8;
		uint16_t	u16;
		int16_t		i16;
		uint32_t	u32;
		int32_t		i32;
		float		f32;
		uint64_t	u64;
		int64_t		i64;
		double		f64;
	}			v;
	const char *s = cJSON_IsString(j) ? j->valuestring : NULL;

	memcpy(&v, p, gguf_vtype_size(t));
	switch (t)
	{
		case GGUF_UINT8: return s && v.u8 == strtoull(s, NULL, 10);
		case GGUF_INT8: return s && v.i8 == strtoll(s, NULL, 10);
		case GGUF_UINT16: return s && v.u16 == strtoull(s, NULL, 10);
		case GGUF_INT16: return s && v.i16 == strtoll(s, NULL, 10);
		case GGUF_UINT32: return s && v.u32 == strtoull(s, NULL, 10);
		case GGUF_INT32: return s && v.i32 == strtoll(s, NULL, 10);
		case GGUF_UINT64: return s && v.u64 == strtoull(s, NULL, 10);
		case GGUF_INT64: return s && v.i64 == strtoll(s, NULL, 10);
		case GGUF_FLOAT32: return cJSON_IsNumber(j) && v.f32 == (float) j->valuedouble;
		case GGUF_FLOAT64: return cJSON_IsNumber(j) && v.f64 == j->valuedouble &&
				signbit(v.f64) == signbit(j->valuedouble);
		case GGUF_BOOL: return cJSON_IsBool(j) && (p[0] != 0) == cJSON_IsTrue(j);
	}
	return false;
}

/* The value type named name, or -1. */
static int
VtypeOf(const char *name)
{
	for (uint32_t t = 0; t < GGUF_N_VTYPES; t++)
		if (strcmp(gguf_vtype_name(t), name) == 0)
			return (int) t;
	return -1;
}

/* Whether v has type tname and the JSON value j (arrays: {"elem", "values"}). */
static bool
ValueIs(const gguf_value *v, const char *tname, const cJSON *j)
{
	int			t = VtypeOf(tname);

	if (t < 0 || v->type != (uint32_t) t)
		return false;
	if (t == GGUF_STRING)
		return cJSON_IsString(j) && StrIs(v->str, j->valuestring);
	if (t != GGUF_ARRAY)
		return ScalarIs(t, v->data, j);

	const char *et = cJSON_GetObjectItem(j, "elem")->valuestring;
	const cJSON *vals = cJSON_GetObjectItem(j, "values");
	int			ei = VtypeOf(et);

	if (ei < 0 || v->elem_type != (uint32_t) ei || v->n != (uint64_t) cJSON_GetArraySize(vals))
		return false;
	for (uint64_t i = 0; i < v->n; i++)
	{
		const cJSON *ji = cJSON_GetArrayItem(vals, (int) i);
		bool		ok = gguf_vtype_size(ei) > 0 ? ScalarIs(ei, gguf_array_elem(v, i), ji)
			: ValueIs(&v->items[i], et, ji);

		if (!ok)
			return false;
	}
	return gguf_array_elem(v, v->n) == NULL;
}

/* Whether the typed getter of a scalar key gives its value and refuses the wrong type. */
static bool
GetterAgrees(const gguf_file *g, const char *key, const char *tname, const cJSON *j)
{
	cbllm_err	err;
	uint8_t		buf[8];
	int			t = VtypeOf(tname),
				rc;

	switch (t)
	{
		case GGUF_UINT8: rc = gguf_get_u8(g, key, (uint8_t *) buf, &err); break;
		case GGUF_INT8: rc = gguf_get_i8(g, key, (int8_t *) buf, &err); break;
		case GGUF_UINT16: rc = gguf_get_u16(g, key, (uint16_t *) buf, &err); break;
		case GGUF_INT16: rc = gguf_get_i16(g, key, (int16_t *) buf, &err); break;
		case GGUF_UINT32: rc = gguf_get_u32(g, key, (uint32_t *) buf, &err); break;
		case GGUF_INT32: rc = gguf_get_i32(g, key, (int32_t *) buf, &err); break;
		case GGUF_UINT64: rc = gguf_get_u64(g, key, (uint64_t *) buf, &err); break;
		case GGUF_INT64: rc = gguf_get_i64(g, key, (int64_t *) buf, &err); break;
		case GGUF_FLOAT32: rc = gguf_get_f32(g, key, (float *) buf, &err); break;
		case GGUF_FLOAT64: rc = gguf_get_f64(g, key, (double *) buf, &err); break;
		case GGUF_BOOL:
			{
				bool		b;

				rc = gguf_get_bool(g, key, &b, &err);
				buf[0] = b;
				break;
			}
		case GGUF_STRING:
			{
				gguf_str	s;

				rc = gguf_get_string(g, key, &s, &err);
				return rc == CBLLM_OK && StrIs(s, j->valuestring) &&
					gguf_get_u8(g, key, buf, &err) == CBLLM_ERR_FORMAT &&
					strstr(err.msg, "is a string, not a uint8") != NULL;
			}
		default: return true;	/* arrays have no getter */
	}
	if (rc != CBLLM_OK || !ScalarIs(t, buf, j))
		return false;
	/* and a string getter refuses it, naming its real type */
	{
		gguf_str	s;
		char		want[64];

		snprintf(want, sizeof(want), "is a %s, not a string", tname);
		return gguf_get_string(g, key, &s, &err) == CBLLM_ERR_FORMAT && strstr(err.msg, want) != NULL;
	}
}

/* Whether the tensor t is the one described by j, bytes included. */
static bool
TensorIs(const gguf_file *g, const gguf_tensor *t, const cJSON *j)
{
	const cJSON *dims = cJSON_GetObjectItem(j, "dims");
	const char *hex = cJSON_GetObjectItem(j, "data")->valuestring;
	int			nd = cJSON_GetArraySize(dims);

	if (t->type != (uint32_t) cJSON_GetObjectItem(j, "type")->valueint || t->n_dims != (uint32_t) nd ||
		t->offset != (uint64_t) cJSON_GetObjectItem(j, "offset")->valuedouble ||
		t->nbytes != (size_t) cJSON_GetObjectItem(j, "nbytes")->valuedouble ||
		(const uint8_t *) t->data != g->base + g->data_start + t->offset)
		return false;
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		if (t->ne[d] != (d < nd ? (int64_t) cJSON_GetArrayItem(dims, d)->valuedouble : 1))
			return false;
	if (strlen(hex) != 2 * t->nbytes)
		return false;
	for (size_t i = 0; i < t->nbytes; i++)
	{
		unsigned	b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1 || ((const uint8_t *) t->data)[i] != b)
			return false;
	}
	return true;
}

/* Check one well-formed file: header, every key, every tensor, absent names. */
static void
CheckGood(const char *dir, const cJSON *desc)
{
	const char *file = cJSON_GetObjectItem(desc, "file")->valuestring;
	const cJSON *kvs = cJSON_GetObjectItem(desc, "kvs");
	const cJSON *tensors = cJSON_GetObjectItem(desc, "tensors");
	char	   *path = cbllm_path_join(dir, file);
	gguf_file  *g = NULL;
	cbllm_err	err = {{0}};
	int			rc = gguf_open(path, &g, &err);

	TAP_OK(rc == CBLLM_OK, "%s: gguf_open accepts it %s", file, err.msg);
	if (rc != CBLLM_OK)
	{
		free(path);
		return;
	}
	TAP_OK(g->version == (uint32_t) cJSON_GetObjectItem(desc, "version")->valueint &&
		   g->alignment == (uint32_t) cJSON_GetObjectItem(desc, "alignment")->valueint &&
		   g->data_start == (size_t) cJSON_GetObjectItem(desc, "data_start")->valueint &&
		   g->data_start % g->alignment == 0,
		   "%s: version %u, alignment %u and aligned data start %zu as written", file, g->version,
		   g->alignment, g->data_start);
	TAP_OK(g->n_kvs == (uint64_t) cJSON_GetArraySize(kvs) &&
		   g->n_tensors == (uint64_t) cJSON_GetArraySize(tensors),
		   "%s: %llu keys and %llu tensors, as written", file, (unsigned long long) g->n_kvs,
		   (unsigned long long) g->n_tensors);
	for (int i = 0; i < cJSON_GetArraySize(kvs); i++)
	{
		const cJSON *kv = cJSON_GetArrayItem(kvs, i);
		const char *key = cJSON_GetObjectItem(kv, "key")->valuestring;
		const char *type = cJSON_GetObjectItem(kv, "type")->valuestring;
		const cJSON *val = cJSON_GetObjectItem(kv, "value");
		const gguf_value *v = gguf_find_key(g, key);

		TAP_OK(v != NULL && v == &g->kvs[i].value && ValueIs(v, type, val) && GetterAgrees(g, key, type, val),
			   "%s: key %s is the %s written, in file order, and its getter agrees", file, key, type);
	}
	for (int i = 0; i < cJSON_GetArraySize(tensors); i++)
	{
		const cJSON *tj = cJSON_GetArrayItem(tensors, i);
		const char *name = cJSON_GetObjectItem(tj, "name")->valuestring;
		const gguf_tensor *t = gguf_find_tensor(g, name);

		TAP_OK(t != NULL && t == &g->tensors[i] && TensorIs(g, t, tj),
			   "%s: tensor %s has the written type %d, dims, offset, size and bytes", file, name,
			   cJSON_GetObjectItem(tj, "type")->valueint);
	}
	{
		uint32_t	u;
		int			miss = gguf_get_u32(g, "llama.no_such_key", &u, &err);

		TAP_OK(gguf_find_key(g, "test.u") == NULL && gguf_find_key(g, "test.u80") == NULL &&
			   gguf_find_tensor(g, "output") == NULL && gguf_find_tensor(g, "") == NULL &&
			   miss == CBLLM_ERR_NOT_FOUND && strstr(err.msg, "\"llama.no_such_key\" is missing") != NULL,
			   "%s: absent keys, prefixes and tensors are not found", file);
	}
	gguf_free(g);

	/* the same bytes from a buffer: tensors point into that buffer */
	err.msg[0] = '\0';
	{
		char	   *buf;
		size_t		len;

		if (cbllm_read_file(path, &buf, &len, &err) == CBLLM_OK)
		{
			rc = gguf_parse(buf, len, &g, &err);
			TAP_OK(rc == CBLLM_OK && g->n_tensors > 0 && g->tensors[0].data == buf + g->data_start + g->tensors[0].offset &&
				   g->n_kvs == (uint64_t) cJSON_GetArraySize(kvs),
				   "%s: gguf_parse of the bytes in memory gives the same file, pointing into the buffer %s",
				   file, err.msg);
			gguf_free(g);
			free(buf);
		}
		else
			TAP_OK(false, "%s: read back %s", file, err.msg);
	}
	free(path);
}

/* Check that one malformed file fails from a mapping and from a buffer with its message. */
static void
CheckBad(const char *dir, const cJSON *desc)
{
	const char *file = cJSON_GetObjectItem(desc, "file")->valuestring;
	const char *want = cJSON_GetObjectItem(desc, "error")->valuestring;
	char	   *path = cbllm_path_join(dir, file);
	gguf_file  *g = (gguf_file *) 1;
	cbllm_err	err = {{0}},
				err2 = {{0}};
	int			rc = gguf_open(path, &g, &err);
	bool		ok = rc < 0 && g == NULL && strstr(err.msg, want) != NULL;
	char	   *buf = NULL;
	size_t		len = 0;

	if (strcmp(file, "empty.gguf") == 0)	/* an empty file cannot be mapped: gguf_open says so */
		ok = rc == CBLLM_ERR_FORMAT && g == NULL && strstr(err.msg, "empty file") != NULL;
	if (cbllm_read_file(path, &buf, &len, &err2) == CBLLM_OK)
	{
		rc = gguf_parse(buf, len, &g, &err2);
		ok = ok && rc < 0 && g == NULL && strstr(err2.msg, want) != NULL;
		free(buf);
	}
	else
		ok = false;
	TAP_OK(ok, "%s is refused: \"%s\"", file, want);
	if (!ok)
		TAP_DIAG("gguf_open said \"%s\", gguf_parse said \"%s\"", err.msg, err2.msg);
	free(path);
}

/* The type table gives the ggml block sizes and bytes per block. */
static void
CheckTypeTable(void)
{
	const gguf_type_info *f32 = gguf_type(0), *q4_0 = gguf_type(2), *q8_0 = gguf_type(8),
			   *q4_k = gguf_type(12), *q6_k = gguf_type(14), *bf16 = gguf_type(30);

	TAP_OK(f32 && f32->block_size == 1 && f32->type_size == 4 && q4_0 && q4_0->block_size == 32 &&
		   q4_0->type_size == 18 && q8_0 && q8_0->type_size == 34 && q4_k && q4_k->block_size == 256 &&
		   q4_k->type_size == 144 && q6_k && q6_k->type_size == 210 && bf16 && bf16->type_size == 2 &&
		   strcmp(q4_k->name, "Q4_K") == 0,
		   "gguf_type: F32, Q4_0, Q8_0, Q4_K, Q6_K and BF16 have ggml's block and byte sizes");
	TAP_OK(gguf_type(39) && gguf_type(39)->block_size == 32 && gguf_type(39)->type_size == 17 &&
		   strcmp(gguf_type(39)->name, "MXFP4") == 0,
		   "gguf_type: MXFP4 (39) is blocks of 32 in 17 bytes, an exponent byte and 16 of nibbles");
	TAP_OK(gguf_type(4) == NULL && gguf_type(5) == NULL && gguf_type(16) == NULL && gguf_type(99) == NULL,
		   "gguf_type: removed (4, 5) and unlisted ids are unknown");
}

/* Write the fixtures with the writer named on the command line, then check each. */
int
main(int argc, char **argv)
{
	const char *root;
	char	   *dir,
			   *cmd,
			   *text = NULL;
	size_t		len;
	cJSON	   *expect;
	cbllm_err	err;

	if (argc != 2)
	{
		fprintf(stderr, "usage: test_gguf test/tools/gguf_writer.py\n");
		return 2;
	}
	CheckTypeTable();
	root = fixture_root_create("gguf");
	dir = root ? fixture_case_dir("fixtures") : NULL;
	if (dir == NULL || asprintf(&cmd, "/usr/bin/python3 '%s' --fixtures '%s'", argv[1], dir) < 0)
	{
		TAP_OK(false, "make the fixture directory");
		return tap_done();
	}
	TAP_OK(system(cmd) == 0, "gguf_writer.py writes the fixtures");
	free(cmd);
	{
		char	   *p = cbllm_path_join(dir, "expect.json");

		if (p == NULL || cbllm_read_file(p, &text, &len, &err) != CBLLM_OK)
			text = NULL;
		free(p);
	}
	expect = text ? cJSON_Parse(text) : NULL;
	TAP_OK(expect != NULL, "expect.json reads");
	if (expect != NULL)
	{
		const cJSON *e;

		cJSON_ArrayForEach(e, cJSON_GetObjectItem(expect, "good"))
			CheckGood(dir, e);
		cJSON_ArrayForEach(e, cJSON_GetObjectItem(expect, "bad"))
			CheckBad(dir, e);
		cJSON_Delete(expect);
	}
	{
		char	   *missing = cbllm_path_join(dir, "no_such_file.gguf");
		gguf_file  *g = (gguf_file *) 1;
		int			rc = gguf_open(missing, &g, &err);

		TAP_OK(rc == CBLLM_ERR_IO && g == NULL && strstr(err.msg, "no_such_file.gguf: No such file") != NULL,
			   "gguf_open of a missing file is an io error naming it: %s", err.msg);
		free(missing);
	}
	free(text);
	free(dir);
	TAP_OK(fixture_root_remove(), "the fixture directory is removed");
	return tap_done();
}
