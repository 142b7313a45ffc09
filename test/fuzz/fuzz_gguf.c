/*
 * fuzz_gguf.c: a whole GGUF file through gguf_parse, the parser gguf_open
 * runs over its mapping.  For what the parser accepts: the alignment is a
 * power of two and the data section starts aligned inside the file; every
 * string and array lies inside the file; every tensor has 1 to 4 dimensions,
 * a known ggml type, an aligned offset, bytes = elements / block x bytes per
 * block, lies inside the data section, overlaps no other, and is found by
 * its name; every key is found by its name.
 */
#include "fuzz.h"
#include "formats/gguf.h"

static volatile uint8_t sink;

/* Whether [p, p + n) lies inside the file [lo, hi). */
static int
Inside(const void *p, uint64_t n, uintptr_t lo, uintptr_t hi)
{
	uintptr_t	a = (uintptr_t) p;

	return a >= lo && a <= hi && n <= hi - a;
}

/* Check one value (and its elements) lies in the file; read its ends. */
static void
CheckValue(const gguf_value *v, uintptr_t lo, uintptr_t hi, int depth)
{
	FUZZ_CHECK(depth < GGUF_MAX_ARRAY_DEPTH || v->type != GGUF_ARRAY, "arrays nest at most twice");
	if (v->type == GGUF_STRING)
	{
		FUZZ_CHECK(Inside(v->str.ptr, v->str.len, lo, hi), "a string lies inside the file");
		if (v->str.len > 0)
			sink ^= (uint8_t) (v->str.ptr[0] ^ v->str.ptr[v->str.len - 1]);
	}
	else if (v->type == GGUF_ARRAY)
	{
		size_t		es = gguf_vtype_size(v->elem_type);

		if (es > 0)
		{
			FUZZ_CHECK(v->n <= (hi - lo) / es && Inside(v->data, v->n * es, lo, hi),
					   "fixed-size elements lie inside the file");
			if (v->n > 0)
				sink ^= *(const uint8_t *) gguf_array_elem(v, v->n - 1);
		}
		else
		{
			FUZZ_CHECK(v->n == 0 || v->items != NULL, "strings and arrays have their views");
			for (uint64_t i = 0; i < v->n; i++)
			{
				FUZZ_CHECK(v->items[i].type == v->elem_type, "elements have the array's type");
				CheckValue(&v->items[i], lo, hi, depth + 1);
			}
		}
	}
	else
		FUZZ_CHECK(Inside(v->data, gguf_vtype_size(v->type), lo, hi), "a scalar lies inside the file");
}

/* Parse one input from an exact-size copy and check what was accepted. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t    *buf = fuzz_bytes(data, size);	/* exactly the file: ASan sees reads past it */
	uintptr_t	lo = (uintptr_t) buf,
				hi = lo + size;
	gguf_file  *g = NULL;
	cbllm_err	err;
	int			rc;

	if (buf == NULL)
		return 0;
	rc = gguf_parse(buf, size, &g, &err);
	FUZZ_CHECK((rc == CBLLM_OK) == (g != NULL), "a file is returned exactly on success");
	if (rc != CBLLM_OK)
		FUZZ_CHECK(err.msg[0] != '\0', "a refusal has a message");
	else
	{
		FUZZ_CHECK(g->alignment > 0 && (g->alignment & (g->alignment - 1)) == 0, "the alignment is a power of two");
		FUZZ_CHECK(g->data_start <= size && (g->n_tensors == 0 || g->data_start % g->alignment == 0),
				   "the data section starts aligned inside the file");
		for (uint64_t i = 0; i < g->n_kvs; i++)
		{
			const gguf_kv *kv = &g->kvs[i];
			char	   *key = fuzz_text((const uint8_t *) kv->key.ptr, (size_t) kv->key.len);

			FUZZ_CHECK(Inside(kv->key.ptr, kv->key.len, lo, hi), "a key lies inside the file");
			CheckValue(&kv->value, lo, hi, 0);
			/* a key with a NUL inside cannot be looked up by a C string */
			if (key != NULL && strlen(key) == kv->key.len)
				FUZZ_CHECK(gguf_find_key(g, key) == &kv->value, "a key is found by its name");
			free(key);
		}
		for (uint64_t i = 0; i < g->n_tensors; i++)
		{
			const gguf_tensor *t = &g->tensors[i];
			const gguf_type_info *ti = gguf_type(t->type);
			uint64_t	nelem = 1;
			char	   *name = fuzz_text((const uint8_t *) t->name.ptr, (size_t) t->name.len);

			FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "1 to 4 dimensions");
			FUZZ_CHECK(ti != NULL, "a known ggml type");
			for (int d = 0; d < GGUF_MAX_DIMS; d++)
			{
				FUZZ_CHECK(t->ne[d] >= 0, "non-negative dimensions");
				nelem *= (uint64_t) t->ne[d];
			}
			FUZZ_CHECK(nelem % ti->block_size == 0 && t->nbytes == nelem / ti->block_size * ti->type_size,
					   "bytes = elements / block x bytes per block");
			FUZZ_CHECK(t->offset % g->alignment == 0, "an aligned offset");
			FUZZ_CHECK((const uint8_t *) t->data == buf + g->data_start + t->offset &&
					   Inside(t->data, t->nbytes, lo + g->data_start, hi), "the data lies inside the data section");
			for (uint64_t j = i + 1; j < g->n_tensors; j++)
			{
				const gguf_tensor *u = &g->tensors[j];

				FUZZ_CHECK(t->nbytes == 0 || u->nbytes == 0 || t->offset + t->nbytes <= u->offset ||
						   u->offset + u->nbytes <= t->offset, "tensors do not overlap");
			}
			if (name != NULL && strlen(name) == t->name.len)
				FUZZ_CHECK(gguf_find_tensor(g, name) == t, "a tensor is found by its name");
			free(name);
			if (t->nbytes > 0)
				sink ^= ((const uint8_t *) t->data)[0] ^ ((const uint8_t *) t->data)[t->nbytes - 1];
		}
	}
	gguf_free(g);
	free(buf);
	return 0;
}
