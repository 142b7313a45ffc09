/*
 * gguf.h: read-only parsing of GGUF files (versions 2 and 3, little-endian),
 * from a read-only mapping (gguf_open) or a caller's buffer (gguf_parse).
 *
 * Nothing is copied: strings, arrays and tensor data are views into the file.
 * A string is a (pointer, length) pair and need not be NUL-terminated.  The
 * parser validates every count, length, dimension and offset against the
 * bytes that remain before it allocates or exposes anything, so a truncated
 * or hostile file is an error naming the field, never a bad read.  What it
 * allocates is bounded by a small multiple of the file's size.
 */
#ifndef CBLLM_GGUF_H
#define CBLLM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_ARRAY_DEPTH 2		/* an array of arrays, no deeper */
#define GGUF_DEFAULT_ALIGNMENT 32

/* Metadata value types, numbered as in the file. */
typedef enum gguf_vtype
{
	GGUF_UINT8 = 0,
	GGUF_INT8 = 1,
	GGUF_UINT16 = 2,
	GGUF_INT16 = 3,
	GGUF_UINT32 = 4,
	GGUF_INT32 = 5,
	GGUF_FLOAT32 = 6,
	GGUF_BOOL = 7,
	GGUF_STRING = 8,
	GGUF_ARRAY = 9,
	GGUF_UINT64 = 10,
	GGUF_INT64 = 11,
	GGUF_FLOAT64 = 12,
	GGUF_N_VTYPES
} gguf_vtype;

/* A string inside the file: len bytes at ptr, not NUL-terminated. */
typedef struct gguf_str
{
	const char *ptr;
	uint64_t	len;
} gguf_str;

/*
 * A typed view of one value.  A scalar's little-endian bytes are at data; a
 * string is str; an array has n elements of elem_type: fixed-size ones lie
 * packed at data, strings and arrays have one view each in items[0..n).
 */
typedef struct gguf_value
{
	gguf_vtype	type;
	const uint8_t *data;		/* scalar bytes, or packed fixed-size elements */
	gguf_str	str;			/* type GGUF_STRING */
	gguf_vtype	elem_type;		/* type GGUF_ARRAY */
	uint64_t	n;				/* type GGUF_ARRAY: element count */
	const struct gguf_value *items; /* arrays of strings or arrays, else NULL */
} gguf_value;

typedef struct gguf_kv
{
	gguf_str	key;
	gguf_value	value;
} gguf_kv;

/* One row of the ggml type table: elements per block and bytes per block. */
typedef struct gguf_type_info
{
	uint32_t	id;
	const char *name;
	uint32_t	block_size;
	uint32_t	type_size;
} gguf_type_info;

typedef struct gguf_tensor
{
	gguf_str	name;
	uint32_t	type;			/* ggml type id, one of the table's */
	uint32_t	n_dims;			/* 1 .. GGUF_MAX_DIMS */
	int64_t		ne[GGUF_MAX_DIMS];	/* ne[0] innermost (fastest); unused ones 1 */
	uint64_t	offset;			/* from the data section's start */
	size_t		nbytes;
	const void *data;			/* into the file */
} gguf_tensor;

typedef struct gguf_file
{
	uint32_t	version;
	uint32_t	alignment;		/* general.alignment, default 32 */
	gguf_kv    *kvs;			/* in file order */
	uint64_t	n_kvs;
	gguf_tensor *tensors;		/* in file order */
	uint64_t	n_tensors;
	size_t		data_start;		/* the data section's offset in the file */
	const uint8_t *base;		/* the whole file */
	size_t		size;
	/* private */
	bool		mapped;			/* base is our mapping (gguf_open) */
	uint64_t   *kv_order;		/* kvs sorted by key, for lookups */
	uint64_t   *tensor_order;	/* tensors sorted by name */
} gguf_file;

/* Map and parse the file at path; errors name the path and the field. */
int			gguf_open(const char *path, gguf_file **out, cbllm_err *err);

/* Parse a whole GGUF file at buf (len bytes), which the caller keeps until gguf_free. */
int			gguf_parse(const void *buf, size_t len, gguf_file **out, cbllm_err *err);

/* Release a parsed file (and unmap it when gguf_open mapped it); NULL is fine. */
void		gguf_free(gguf_file *g);

/* The value of key, or NULL. */
const gguf_value *gguf_find_key(const gguf_file *g, const char *key);

/* The tensor named name, or NULL. */
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);

/* The type table row of a ggml type id, or NULL when it is not one cbllm knows. */
const gguf_type_info *gguf_type(uint32_t id);

/* A value type's name ("uint8" ... "float64"), or "?" */
const char *gguf_vtype_name(uint32_t t);

/*
 * Typed getters: fill *out and return CBLLM_OK when key exists with exactly
 * that type; CBLLM_ERR_NOT_FOUND or CBLLM_ERR_FORMAT (naming the key) otherwise.
 */
int			gguf_get_u8(const gguf_file *g, const char *key, uint8_t *out, cbllm_err *err);
int			gguf_get_i8(const gguf_file *g, const char *key, int8_t *out, cbllm_err *err);
int			gguf_get_u16(const gguf_file *g, const char *key, uint16_t *out, cbllm_err *err);
int			gguf_get_i16(const gguf_file *g, const char *key, int16_t *out, cbllm_err *err);
int			gguf_get_u32(const gguf_file *g, const char *key, uint32_t *out, cbllm_err *err);
int			gguf_get_i32(const gguf_file *g, const char *key, int32_t *out, cbllm_err *err);
int			gguf_get_u64(const gguf_file *g, const char *key, uint64_t *out, cbllm_err *err);
int			gguf_get_i64(const gguf_file *g, const char *key, int64_t *out, cbllm_err *err);
int			gguf_get_f32(const gguf_file *g, const char *key, float *out, cbllm_err *err);
int			gguf_get_f64(const gguf_file *g, const char *key, double *out, cbllm_err *err);
int			gguf_get_bool(const gguf_file *g, const char *key, bool *out, cbllm_err *err);
int			gguf_get_string(const gguf_file *g, const char *key, gguf_str *out, cbllm_err *err);

/* An array's fixed-size element i (0 <= i < v->n) as raw bytes; NULL if out of range or not fixed-size. */
const void *gguf_array_elem(const gguf_value *v, uint64_t i);

/* Bytes of one fixed-size value of type t, or 0 for strings and arrays. */
size_t		gguf_vtype_size(uint32_t t);

#endif
