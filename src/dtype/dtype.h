/*
 * dtype.h: the weight types, one row of traits each (dtype.c): what is true
 * of a type everywhere, whichever backend runs it.
 *
 * Whatever depends on how a weight type is stored asks its row: the name a
 * file spells it with, the bytes of a row of n elements, a reference
 * conversion to f32 and its quantizer, rather than switching on the type.
 * What a backend does with a type is that backend's own table, asked by type
 * in the same way: backend/cpu/cpu_dtype_traits.h for the CPU kernels,
 * backend/cuda/cuda_dtype_traits.h for the CUDA backend.  So a new backend
 * brings its table and never edits this one.  Plain C11 with no PostgreSQL,
 * usable from C++: the CUDA kernels include it.
 *
 * Types are stored in blocks: block_elems elements in block_bytes bytes
 * (one element per block for the float types; a block-quantized type packs
 * 32 or 256 weights with their scales).  A row of a matrix is a whole number
 * of blocks.  Block sizes are even but for MXFP4's 17 bytes, so a row or a
 * block may start at any byte: whatever reads a block reads it byte by
 * byte.
 *
 * Adding a type (a GGUF IQ4_XS, say) is one enum value before
 * CBLLM_DTYPE_COUNT and one row in dtype.c giving:
 *   name         as the file format spells it ("Q8_0")
 *   safetensors  whether safetensors files store it under that name; only
 *                those rows are found by cbllm_dtype_by_name and listed by
 *                cbllm_dtype_names, so a safetensors file never maps to a
 *                GGUF-only type
 *   ggml_type    its id in the ggml/GGUF type enumeration, -1 if none
 *   block_elems  elements per block (32 for Q8_0, 256 for the K-quants)
 *   block_bytes  bytes per block, scales included (34 for Q8_0, 17 for MXFP4)
 *   to_f32       the reference conversion of whole blocks to f32
 *   from_f32     its block quantizer (quantize.c), or NULL
 * and then a row in each backend's table that runs it (each table's header
 * says what its row needs).  A type that no backend's table runs is loaded
 * and then refused by every backend, naming the type.
 */
#ifndef CBLLM_DTYPE_H
#define CBLLM_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

typedef enum cbllm_dtype
{
	CBLLM_F32 = 0,
	CBLLM_F16 = 1,
	CBLLM_BF16 = 2,
	CBLLM_Q8_0 = 3,				/* the GGUF block-quantized types: dtype_quant.c */
	CBLLM_Q4_0 = 4,
	CBLLM_Q4_1 = 5,
	CBLLM_Q5_0 = 6,
	CBLLM_Q5_1 = 7,
	CBLLM_Q2_K = 8,				/* the GGUF K-quants, 256 elements a block: dtype_kquant.c */
	CBLLM_Q3_K = 9,
	CBLLM_Q4_K = 10,
	CBLLM_Q5_K = 11,
	CBLLM_Q6_K = 12,
	CBLLM_MXFP4 = 13,			/* 4-bit floats under a power of two a block of 32
								 * (gpt-oss's experts): dtype_quant.c */
	CBLLM_U8 = 14,				/* bytes (safetensors' U8): only the parts of MXFP4
								 * matrices a checkpoint stores apart (gpt-oss's
								 * _blocks and _scales), never a weight's own type */
	CBLLM_DTYPE_COUNT			/* not a type: the number of types */
} cbllm_dtype;

/* One weight type. */
typedef struct cbllm_dtype_traits
{
	const char *name;			/* as its file format spells it: "BF16", "Q8_0" */
	bool		safetensors;	/* safetensors stores it under name */
	int			ggml_type;		/* ggml's id of the type (GGML_TYPE_*); -1 if none */
	int			block_elems;	/* elements per block */
	size_t		block_bytes;	/* bytes per block */
	/* dst[0, n) = src's n elements as f32, n a multiple of block_elems */
	void		(*to_f32) (const void *src, float *dst, int64_t n);
	/*
	 * one block: dst (block_bytes) = the block_elems finite values at src
	 * quantized; false when the block's scales would overflow f16 (never for
	 * MXFP4, whose exponent spans f32's range).  NULL when the type has no
	 * quantizer (quantize.h; cbllm_quantize_row checks).
	 */
	bool		(*from_f32) (const float *src, void *dst);
} cbllm_dtype_traits;

/* The row of dt; for a value that is no type, a row named "?" that has no size and no ggml id. */
const cbllm_dtype_traits *cbllm_dtype_traits_of(cbllm_dtype dt);

/* The name of dt ("F32", "BF16", "Q4_0"); "?" for a value that is no type. */
const char *cbllm_dtype_name(cbllm_dtype dt);

/* The type safetensors names name (case-sensitive) into *dt; false when there is none. */
bool		cbllm_dtype_by_name(const char *name, cbllm_dtype *dt);

/* The type whose ggml id is ggml_type into *dt; false when the table has none. */
bool		cbllm_dtype_by_ggml(int ggml_type, cbllm_dtype *dt);

/* Every safetensors type's name in table order, as prose: "F32, F16 and BF16". */
void		cbllm_dtype_names(char *buf, size_t len);

/*
 * Bytes of n elements stored as described by t: SIZE_MAX when n is negative
 * or not a whole number of blocks, or t has no size, so that such a count
 * never matches a real size and allocating it fails.
 */
size_t		cbllm_dtype_traits_row_bytes(const cbllm_dtype_traits *t, int64_t n);

/* Bytes of n elements of dt, as cbllm_dtype_traits_row_bytes. */
size_t		cbllm_dtype_row_bytes(cbllm_dtype dt, int64_t n);

/* dst[0, n) = the n elements of dt at src as f32, through the row's reference conversion. */
void		cbllm_to_f32(cbllm_dtype dt, const void *src, float *dst, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
