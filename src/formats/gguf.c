/*
 * gguf.c: parse a GGUF file's header, metadata and tensor infos.
 *
 * Layout (all little-endian): "GGUF", version u32 (2 or 3), tensor count u64,
 * metadata count u64; then each key/value (key string, value type u32,
 * value); then each tensor info (name string, n_dims u32, n_dims u64
 * dimensions, ggml type u32, offset u64); then padding up to the alignment
 * (general.alignment, default 32) and the data section.  A string is a u64
 * length and that many bytes; an array is an element type u32, a count u64
 * and the elements.
 *
 * Reading goes through a cursor that checks every read against the bytes
 * left, so a truncation anywhere is an error naming what was being read.
 * Before allocating for n entries the parser checks that n entries of the
 * smallest possible size fit in what remains, which bounds every allocation
 * by the file's size.  Keys and tensor names are sorted once (qsort of
 * indices): duplicates are then neighbours, lookups a binary search.
 * Tensors are sorted by offset to find overlaps.
 */
#include "formats/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* the smallest encodings, for the count checks before allocating */
#define MIN_KV_BYTES 13			/* key length u64, type u32, one byte */
#define MIN_TENSOR_BYTES 32		/* name length u64, n_dims u32, one dim u64, type u32, offset u64 */
#define MIN_ARRAY_BYTES 12		/* element type u32, count u64 */
#define MIN_STRING_BYTES 8

/* a name in a message, as printf's "%.*s" arguments: at most 200 bytes of it */
#define SHOWN(s) (int) ((s).len < 200 ? (s).len : 200), (s).ptr

/* the ggml types GGUF files use: elements and bytes per block */
static const gguf_type_info TYPES[] = {
	{.id = 0, .name = "F32", .block_size = 1, .type_size = 4},
	{.id = 1, .name = "F16", .block_size = 1, .type_size = 2},
	{.id = 2, .name = "Q4_0", .block_size = 32, .type_size = 18},
	{.id = 3, .name = "Q4_1", .block_size = 32, .type_size = 20},
	{.id = 6, .name = "Q5_0", .block_size = 32, .type_size = 22},
	{.id = 7, .name = "Q5_1", .block_size = 32, .type_size = 24},
	{.id = 8, .name = "Q8_0", .block_size = 32, .type_size = 34},
	{.id = 9, .name = "Q8_1", .block_size = 32, .type_size = 36},
	{.id = 10, .name = "Q2_K", .block_size = 256, .type_size = 84},
	{.id = 11, .name = "Q3_K", .block_size = 256, .type_size = 110},
	{.id = 12, .name = "Q4_K", .block_size = 256, .type_size = 144},
	{.id = 13, .name = "Q5_K", .block_size = 256, .type_size = 176},
	{.id = 14, .name = "Q6_K", .block_size = 256, .type_size = 210},
	{.id = 15, .name = "Q8_K", .block_size = 256, .type_size = 292},
	{.id = 30, .name = "BF16", .block_size = 1, .type_size = 2},
	{.id = 39, .name = "MXFP4", .block_size = 32, .type_size = 17},
};

static const char *const VTYPE_NAMES[GGUF_N_VTYPES] = {
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
	"string", "array", "uint64", "int64", "float64"
};

static const uint8_t VTYPE_SIZES[GGUF_N_VTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* A read position in the file and where to report failures. */
typedef struct Cursor
{
	const uint8_t *base;
	size_t		size;
	size_t		pos;
	const char *name;			/* the file, in messages */
	cbllm_err  *err;
} Cursor;

/* The type table row of id, or NULL. */
const gguf_type_info *
gguf_type(uint32_t id)
{
	for (size_t i = 0; i < sizeof(TYPES) / sizeof(TYPES[0]); i++)
		if (TYPES[i].id == id)
			return &TYPES[i];
	return NULL;
}

/* The name of a metadata value type. */
const char *
gguf_vtype_name(uint32_t t)
{
	return t < GGUF_N_VTYPES ? VTYPE_NAMES[t] : "?";
}

/* Bytes of a fixed-size value type, 0 for strings, arrays and unknown types. */
size_t
gguf_vtype_size(uint32_t t)
{
	return t < GGUF_N_VTYPES ? VTYPE_SIZES[t] : 0;
}

/* Bytes left after the cursor. */
static inline size_t
Left(const Cursor *c)
{
	return c->size - c->pos;
}

/* Take n bytes, or fail naming what was being read. */
static int
Take(Cursor *c, size_t n, const uint8_t **out, const char *what)
{
	if (n > Left(c))
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: truncated reading %s at byte %zu (%zu bytes needed, %zu left)",
						  c->name, what, c->pos, n, Left(c));
	*out = c->base + c->pos;
	c->pos += n;
	return CBLLM_OK;
}

/* Read a little-endian u32. */
static int
ReadU32(Cursor *c, uint32_t *v, const char *what)
{
	const uint8_t *p = NULL;
	int			rc = Take(c, 4, &p, what);

	if (rc == CBLLM_OK)
		*v = (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
	return rc;
}

/* Read a little-endian u64. */
static int
ReadU64(Cursor *c, uint64_t *v, const char *what)
{
	const uint8_t *p = NULL;
	int			rc = Take(c, 8, &p, what);

	if (rc == CBLLM_OK)
	{
		*v = 0;
		for (int i = 7; i >= 0; i--)
			*v = *v << 8 | p[i];
	}
	return rc;
}

/* Read a string: u64 length, then that many bytes inside the file. */
static int
ReadStr(Cursor *c, gguf_str *s, const char *what)
{
	const uint8_t *p = NULL;
	int			rc = ReadU64(c, &s->len, what);

	if (rc != CBLLM_OK)
		return rc;
	if (s->len > Left(c))
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: %s at byte %zu has length %llu, past the end of the file (%zu bytes left)",
						  c->name, what, c->pos - 8, (unsigned long long) s->len, Left(c));
	rc = Take(c, (size_t) s->len, &p, what);
	s->ptr = (const char *) p;
	return rc;
}

/* Free the items of a value (recursively); the value itself belongs to its parent. */
static void
FreeValue(gguf_value *v)
{
	if (v->type == GGUF_ARRAY && v->items != NULL)
	{
		for (uint64_t i = 0; i < v->n; i++)
			FreeValue((gguf_value *) &v->items[i]);
		free((void *) v->items);
		v->items = NULL;
	}
}

static int	ReadValue(Cursor *c, uint32_t type, int depth, gguf_value *v, const gguf_str *key);

/* Read an array's element type, count and elements into v. */
static int
ReadArray(Cursor *c, int depth, gguf_value *v, const gguf_str *key)
{
	uint32_t	et;
	uint64_t	n;
	size_t		es;
	int			rc;

	if ((rc = ReadU32(c, &et, "an array's element type")) != CBLLM_OK ||
		(rc = ReadU64(c, &n, "an array's element count")) != CBLLM_OK)
		return rc;
	if (et >= GGUF_N_VTYPES)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: key \"%.*s\": array element type %u is unknown",
						  c->name, SHOWN(*key), et);
	if (et == GGUF_ARRAY && depth + 1 >= GGUF_MAX_ARRAY_DEPTH)
		return cbllm_fail(c->err, CBLLM_ERR_UNSUPPORTED,
						  "%s: key \"%.*s\": arrays nested deeper than %d are not supported",
						  c->name, SHOWN(*key), GGUF_MAX_ARRAY_DEPTH);
	v->elem_type = (gguf_vtype) et;
	v->n = n;
	v->data = c->base + c->pos;
	es = gguf_vtype_size(et);
	if (es > 0)
	{
		const uint8_t *p = NULL;

		if (n > Left(c) / es)
			return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
							  "%s: key \"%.*s\": array count %llu of %s is past the end of the file",
							  c->name, SHOWN(*key), (unsigned long long) n, VTYPE_NAMES[et]);
		rc = Take(c, (size_t) n * es, &p, "array elements");
		if (rc == CBLLM_OK && et == GGUF_BOOL)
			for (uint64_t i = 0; i < n; i++)
				if (p[i] > 1)
					return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
									  "%s: key \"%.*s\": bool element %llu is %u, not 0 or 1",
									  c->name, SHOWN(*key), (unsigned long long) i, p[i]);
		return rc;
	}
	/* strings or arrays: one view each, allocated after the size check */
	if (n > Left(c) / (et == GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES))
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: key \"%.*s\": array count %llu of %s is more than the file could hold",
						  c->name, SHOWN(*key), (unsigned long long) n, VTYPE_NAMES[et]);
	if (n == 0)
		return CBLLM_OK;
	gguf_value *items = calloc((size_t) n, sizeof(gguf_value));

	if (items == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_NOMEM, "%s: out of memory for array \"%.*s\"",
						  c->name, SHOWN(*key));
	v->items = items;
	v->n = 0;					/* counts the items read, for FreeValue on failure */
	for (uint64_t i = 0; i < n; i++)
	{
		rc = ReadValue(c, et, depth + 1, &items[i], key);
		if (rc != CBLLM_OK)
		{
			FreeValue(&items[i]);
			FreeValue(v);
			return rc;
		}
		v->n = i + 1;
	}
	return CBLLM_OK;
}

/* Read one value of the given type (depth: how many arrays enclose it). */
static int
ReadValue(Cursor *c, uint32_t type, int depth, gguf_value *v, const gguf_str *key)
{
	const uint8_t *p = NULL;
	int			rc;

	memset(v, 0, sizeof(*v));
	if (type >= GGUF_N_VTYPES)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: key \"%.*s\": value type %u is unknown",
						  c->name, SHOWN(*key), type);
	v->type = (gguf_vtype) type;
	if (type == GGUF_STRING)
		return ReadStr(c, &v->str, "a string value");
	if (type == GGUF_ARRAY)
		return ReadArray(c, depth, v, key);
	rc = Take(c, VTYPE_SIZES[type], &p, "a metadata value");
	if (rc != CBLLM_OK)
		return rc;
	v->data = p;
	if (type == GGUF_BOOL && p[0] > 1)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: key \"%.*s\": bool value is %u, not 0 or 1",
						  c->name, SHOWN(*key), p[0]);
	return CBLLM_OK;
}

/* Order two strings by bytes, then length. */
static int
StrCmp(const gguf_str *a, const gguf_str *b)
{
	size_t		n = a->len < b->len ? (size_t) a->len : (size_t) b->len;
	int			r = n > 0 ? memcmp(a->ptr, b->ptr, n) : 0;

	if (r != 0)
		return r;
	return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

/* qsort's view of the arrays being sorted (qsort has no context argument) */
static _Thread_local const gguf_file *sort_file;

/* Compare two key indices by key. */
static int
CmpKv(const void *a, const void *b)
{
	return StrCmp(&sort_file->kvs[*(const uint64_t *) a].key, &sort_file->kvs[*(const uint64_t *) b].key);
}

/* Compare two tensor indices by name. */
static int
CmpTensorName(const void *a, const void *b)
{
	return StrCmp(&sort_file->tensors[*(const uint64_t *) a].name,
				  &sort_file->tensors[*(const uint64_t *) b].name);
}

/* Compare two tensor indices by data offset. */
static int
CmpTensorOffset(const void *a, const void *b)
{
	uint64_t	x = sort_file->tensors[*(const uint64_t *) a].offset,
				y = sort_file->tensors[*(const uint64_t *) b].offset;

	return x < y ? -1 : x > y;
}

/* A malloc'd array 0..n-1 sorted with cmp, or NULL when out of memory (or n is 0). */
static uint64_t *
SortedOrder(const gguf_file *g, uint64_t n, int (*cmp) (const void *, const void *))
{
	uint64_t   *o = malloc((size_t) (n > 0 ? n : 1) * sizeof(uint64_t));

	if (o == NULL)
		return NULL;
	for (uint64_t i = 0; i < n; i++)
		o[i] = i;
	sort_file = g;
	qsort(o, (size_t) n, sizeof(uint64_t), cmp);
	sort_file = NULL;
	return o;
}

/* The key of kvs[i]. */
static const gguf_str *
KeyAt(const gguf_file *g, uint64_t i)
{
	return &g->kvs[i].key;
}

/* The name of tensors[i]. */
static const gguf_str *
TensorNameAt(const gguf_file *g, uint64_t i)
{
	return &g->tensors[i].name;
}

/* The string at(order[i]) equal to its predecessor in the sorted order, or NULL. */
static const gguf_str *
Duplicate(const gguf_file *g, const uint64_t *order, uint64_t n,
		  const gguf_str *(*at) (const gguf_file *, uint64_t))
{
	for (uint64_t i = 1; i < n; i++)
		if (StrCmp(at(g, order[i]), at(g, order[i - 1])) == 0)
			return at(g, order[i]);
	return NULL;
}

/* Read every key/value, refusing duplicates, and take general.alignment. */
static int
ReadMetadata(Cursor *c, gguf_file *g, uint64_t n)
{
	const gguf_str *dup;
	int			rc;

	if (n > Left(c) / MIN_KV_BYTES)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: metadata count %llu is more than the file could hold (%zu bytes left)",
						  c->name, (unsigned long long) n, Left(c));
	g->kvs = calloc((size_t) (n > 0 ? n : 1), sizeof(gguf_kv));
	if (g->kvs == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_NOMEM, "%s: out of memory for %llu keys", c->name,
						  (unsigned long long) n);
	for (uint64_t i = 0; i < n; i++)
	{
		gguf_kv    *kv = &g->kvs[i];
		uint32_t	type;

		if ((rc = ReadStr(c, &kv->key, "a metadata key")) != CBLLM_OK ||
			(rc = ReadU32(c, &type, "a metadata value type")) != CBLLM_OK)
			return rc;
		rc = ReadValue(c, type, 0, &kv->value, &kv->key);
		if (rc != CBLLM_OK)
		{
			FreeValue(&kv->value);
			return rc;
		}
		g->n_kvs = i + 1;
	}
	if ((g->kv_order = SortedOrder(g, n, CmpKv)) == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_NOMEM, "%s: out of memory", c->name);
	if ((dup = Duplicate(g, g->kv_order, n, KeyAt)) != NULL)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: duplicate metadata key \"%.*s\"",
						  c->name, SHOWN(*dup));
	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	const gguf_value *a = gguf_find_key(g, "general.alignment");

	if (a != NULL)
	{
		uint32_t	v;

		if (a->type != GGUF_UINT32)
			return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: general.alignment is a %s, not a uint32",
							  c->name, gguf_vtype_name(a->type));
		memcpy(&v, a->data, 4);
		if (v == 0 || (v & (v - 1)) != 0)
			return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
							  "%s: general.alignment %u is not a power of two", c->name, v);
		g->alignment = v;
	}
	return CBLLM_OK;
}

/* Read one tensor info: name, dimensions, type and offset, and compute its size. */
static int
ReadTensorInfo(Cursor *c, gguf_tensor *t)
{
	uint64_t	nelem = 1;
	const gguf_type_info *ti;
	int			rc;

	if ((rc = ReadStr(c, &t->name, "a tensor name")) != CBLLM_OK ||
		(rc = ReadU32(c, &t->n_dims, "a tensor's n_dims")) != CBLLM_OK)
		return rc;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: tensor \"%.*s\": n_dims %u is not 1 to %d",
						  c->name, SHOWN(t->name), t->n_dims, GGUF_MAX_DIMS);
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < t->n_dims; d++)
	{
		uint64_t	ne;

		if ((rc = ReadU64(c, &ne, "a tensor dimension")) != CBLLM_OK)
			return rc;
		if (ne > INT64_MAX || (ne != 0 && nelem > (uint64_t) INT64_MAX / ne))
			return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
							  "%s: tensor \"%.*s\": the dimensions' product overflows (dimension %u is %llu)",
							  c->name, SHOWN(t->name), d, (unsigned long long) ne);
		t->ne[d] = (int64_t) ne;
		nelem *= ne;
	}
	if ((rc = ReadU32(c, &t->type, "a tensor's type")) != CBLLM_OK ||
		(rc = ReadU64(c, &t->offset, "a tensor's offset")) != CBLLM_OK)
		return rc;
	if ((ti = gguf_type(t->type)) == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_UNSUPPORTED, "%s: tensor \"%.*s\": ggml type id %u is unknown",
						  c->name, SHOWN(t->name), t->type);
	if (t->ne[0] % ti->block_size != 0)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%.*s\": row length %lld is not a multiple of %s's block of %u",
						  c->name, SHOWN(t->name), (long long) t->ne[0], ti->name,
						  ti->block_size);
	if (nelem / ti->block_size > SIZE_MAX / ti->type_size)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: tensor \"%.*s\": byte size overflows",
						  c->name, SHOWN(t->name));
	t->nbytes = (size_t) (nelem / ti->block_size) * ti->type_size;
	return CBLLM_OK;
}

/* Check that every tensor is aligned, inside the data section and overlaps no other. */
static int
CheckTensorData(Cursor *c, gguf_file *g)
{
	size_t		data_len = g->size - g->data_start;
	uint64_t   *by_off;

	for (uint64_t i = 0; i < g->n_tensors; i++)
	{
		gguf_tensor *t = &g->tensors[i];

		if (t->offset % g->alignment != 0)
			return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
							  "%s: tensor \"%.*s\": offset %llu is not a multiple of the alignment %u",
							  c->name, SHOWN(t->name), (unsigned long long) t->offset,
							  g->alignment);
		if (t->offset > data_len || t->nbytes > data_len - t->offset)
			return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
							  "%s: tensor \"%.*s\": data (offset %llu, %zu bytes) runs past the end of the file (data section %zu bytes)",
							  c->name, SHOWN(t->name), (unsigned long long) t->offset,
							  t->nbytes, data_len);
		t->data = g->base + g->data_start + t->offset;
	}
	if ((by_off = SortedOrder(g, g->n_tensors, CmpTensorOffset)) == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_NOMEM, "%s: out of memory", c->name);
	/*
	 * In offset order the non-empty tensors accepted so far are disjoint, so
	 * the last of them ends last: each next one must start at or after it.
	 */
	const gguf_tensor *a = NULL;

	for (uint64_t i = 0; i < g->n_tensors; i++)
	{
		const gguf_tensor *b = &g->tensors[by_off[i]];

		if (b->nbytes == 0)
			continue;
		if (a == NULL || b->offset >= a->offset + a->nbytes)
		{
			a = b;
			continue;
		}
		free(by_off);
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: tensors \"%.*s\" and \"%.*s\" overlap",
						  c->name, SHOWN(a->name), SHOWN(b->name));
	}
	free(by_off);
	return CBLLM_OK;
}

/* Read the tensor infos, refusing duplicate names, and place the data section. */
static int
ReadTensors(Cursor *c, gguf_file *g, uint64_t n)
{
	const gguf_str *dup;
	size_t		pad;
	int			rc;

	if (n > Left(c) / MIN_TENSOR_BYTES)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: tensor count %llu is more than the file could hold (%zu bytes left)",
						  c->name, (unsigned long long) n, Left(c));
	g->tensors = calloc((size_t) (n > 0 ? n : 1), sizeof(gguf_tensor));
	if (g->tensors == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_NOMEM, "%s: out of memory for %llu tensors", c->name,
						  (unsigned long long) n);
	for (uint64_t i = 0; i < n; i++)
	{
		if ((rc = ReadTensorInfo(c, &g->tensors[i])) != CBLLM_OK)
			return rc;
		g->n_tensors = i + 1;
	}
	if ((g->tensor_order = SortedOrder(g, n, CmpTensorName)) == NULL)
		return cbllm_fail(c->err, CBLLM_ERR_NOMEM, "%s: out of memory", c->name);
	if ((dup = Duplicate(g, g->tensor_order, n, TensorNameAt)) != NULL)
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT, "%s: duplicate tensor name \"%.*s\"",
						  c->name, SHOWN(*dup));
	pad = (g->alignment - c->pos % g->alignment) % g->alignment;
	if (n > 0 && pad > Left(c))
		return cbllm_fail(c->err, CBLLM_ERR_FORMAT,
						  "%s: truncated in the padding before the data section at byte %zu",
						  c->name, c->pos);
	g->data_start = pad > Left(c) ? c->size : c->pos + pad;
	return CheckTensorData(c, g);
}

/* Parse the whole file at buf; name stands for it in messages. */
static int
Parse(const void *buf, size_t len, const char *name, gguf_file *g, cbllm_err *err)
{
	Cursor		c = {.base = buf, .size = len, .name = name, .err = err};
	const uint8_t *magic = NULL;
	uint64_t	n_tensors,
				n_kvs;
	int			rc;

	g->base = buf;
	g->size = len;
	if ((rc = Take(&c, 4, &magic, "the magic")) != CBLLM_OK)
		return rc;
	if (memcmp(magic, "GGUF", 4) != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: bad magic (not a GGUF file)", name);
	if ((rc = ReadU32(&c, &g->version, "the version")) != CBLLM_OK)
		return rc;
	if (g->version != 2 && g->version != 3)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: GGUF version %u is not supported (only 2 and 3)", name, g->version);
	if ((rc = ReadU64(&c, &n_tensors, "the tensor count")) != CBLLM_OK ||
		(rc = ReadU64(&c, &n_kvs, "the metadata count")) != CBLLM_OK ||
		(rc = ReadMetadata(&c, g, n_kvs)) != CBLLM_OK)
		return rc;
	return ReadTensors(&c, g, n_tensors);
}

/* Parse buf into a new gguf_file; on failure nothing is kept. */
static int
ParseNew(const void *buf, size_t len, const char *name, bool mapped, gguf_file **out, cbllm_err *err)
{
	gguf_file  *g = calloc(1, sizeof(gguf_file));
	int			rc;

	*out = NULL;
	if (g == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", name);
	rc = Parse(buf, len, name, g, err);
	g->mapped = mapped;
	if (rc != CBLLM_OK)
	{
		gguf_free(g);
		return rc;
	}
	*out = g;
	return CBLLM_OK;
}

/* Parse a caller's buffer (see gguf.h). */
int
gguf_parse(const void *buf, size_t len, gguf_file **out, cbllm_err *err)
{
	return ParseNew(buf, len, "GGUF buffer", false, out, err);
}

/* Map path read-only and parse it. */
int
gguf_open(const char *path, gguf_file **out, cbllm_err *err)
{
	struct stat st;
	void	   *map;
	int			fd = open(path, O_RDONLY | O_CLOEXEC);

	*out = NULL;
	if (fd < 0)
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || st.st_size <= 0)
	{
		int			e = errno;

		close(fd);
		return st.st_size == 0 ? cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: empty file", path)
			: cbllm_fail(err, CBLLM_ERR_IO, "%s: %s", path, strerror(e));
	}
	map = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: mmap: %s", path, strerror(errno));
	return ParseNew(map, (size_t) st.st_size, path, true, out, err);
}

/* Free the views, the sort orders and the mapping. */
void
gguf_free(gguf_file *g)
{
	if (g == NULL)
		return;
	for (uint64_t i = 0; i < g->n_kvs; i++)
		FreeValue(&g->kvs[i].value);
	free(g->kvs);
	free(g->tensors);
	free(g->kv_order);
	free(g->tensor_order);
	if (g->mapped)
		munmap((void *) g->base, g->size);
	free(g);
}

/* Binary search order[0..n) (sorted by the string at(i)) for name. */
static int64_t
Search(const uint64_t *order, uint64_t n, const char *name,
	   const gguf_str *(*at) (const gguf_file *, uint64_t), const gguf_file *g)
{
	gguf_str	want = {name, strlen(name)};
	uint64_t	lo = 0,
				hi = n;

	if (order == NULL)
		return -1;
	while (lo < hi)
	{
		uint64_t	mid = lo + (hi - lo) / 2;
		int			r = StrCmp(at(g, order[mid]), &want);

		if (r == 0)
			return (int64_t) order[mid];
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Binary search of the sorted keys. */
const gguf_value *
gguf_find_key(const gguf_file *g, const char *key)
{
	int64_t		i = Search(g->kv_order, g->n_kvs, key, KeyAt, g);

	return i < 0 ? NULL : &g->kvs[i].value;
}

/* Binary search of the sorted tensor names. */
const gguf_tensor *
gguf_find_tensor(const gguf_file *g, const char *name)
{
	int64_t		i = Search(g->tensor_order, g->n_tensors, name, TensorNameAt, g);

	return i < 0 ? NULL : &g->tensors[i];
}

/* The bytes of a fixed-size array element, in place. */
const void *
gguf_array_elem(const gguf_value *v, uint64_t i)
{
	size_t		es = gguf_vtype_size(v->elem_type);

	if (v->type != GGUF_ARRAY || es == 0 || i >= v->n)
		return NULL;
	return v->data + i * es;
}

/* Find key and check its type; the typed getters share this. */
static int
GetTyped(const gguf_file *g, const char *key, gguf_vtype type, const gguf_value **v, cbllm_err *err)
{
	*v = gguf_find_key(g, key);
	if (*v == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOT_FOUND, "GGUF key \"%s\" is missing", key);
	if ((*v)->type != type)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "GGUF key \"%s\" is a %s, not a %s", key,
						  gguf_vtype_name((*v)->type), gguf_vtype_name(type));
	return CBLLM_OK;
}

/* Define gguf_get_NAME: copy a fixed-size value of type VT out as CTYPE. */
#define GGUF_GETTER(NAME, CTYPE, VT) \
int \
gguf_get_##NAME(const gguf_file *g, const char *key, CTYPE *out, cbllm_err *err) \
{ \
	const gguf_value *v; \
	int			rc = GetTyped(g, key, VT, &v, err); \
	if (rc == CBLLM_OK) \
		memcpy(out, v->data, sizeof(CTYPE)); \
	return rc; \
}

GGUF_GETTER(u8, uint8_t, GGUF_UINT8)
GGUF_GETTER(i8, int8_t, GGUF_INT8)
GGUF_GETTER(u16, uint16_t, GGUF_UINT16)
GGUF_GETTER(i16, int16_t, GGUF_INT16)
GGUF_GETTER(u32, uint32_t, GGUF_UINT32)
GGUF_GETTER(i32, int32_t, GGUF_INT32)
GGUF_GETTER(u64, uint64_t, GGUF_UINT64)
GGUF_GETTER(i64, int64_t, GGUF_INT64)
GGUF_GETTER(f32, float, GGUF_FLOAT32)
GGUF_GETTER(f64, double, GGUF_FLOAT64)

/* A bool key's value. */
int
gguf_get_bool(const gguf_file *g, const char *key, bool *out, cbllm_err *err)
{
	const gguf_value *v;
	int			rc = GetTyped(g, key, GGUF_BOOL, &v, err);

	if (rc == CBLLM_OK)
		*out = v->data[0] != 0;
	return rc;
}

/* A string key's view. */
int
gguf_get_string(const gguf_file *g, const char *key, gguf_str *out, cbllm_err *err)
{
	const gguf_value *v;
	int			rc = GetTyped(g, key, GGUF_STRING, &v, err);

	if (rc == CBLLM_OK)
		*out = v->str;
	return rc;
}
