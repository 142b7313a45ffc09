/*
 * dtype.c: the table of weight types, what is true of each everywhere
 * (dtype.h says what a row must give; each backend's own table says what it
 * does with the type).
 */
#include "dtype/dtype.h"

#include <string.h>

#include "base/join_names.h"
#include "base/numeric.h"
#include "dtype/dtype_quant.h"
#include "dtype/quantize.h"

/* f32 rows are already f32. */
static void
F32ToF32(const void *src, float *dst, int64_t n)
{
	if (n > 0)
		memcpy(dst, src, sizeof(float) * (size_t) n);
}

/* IEEE half rows widened exactly. */
static void
F16ToF32(const void *src, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = cbllm_f16_to_f32(((const uint16_t *) src)[i]);
}

/* bf16 rows widened exactly. */
static void
Bf16ToF32(const void *src, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = cbllm_bf16_to_f32(((const uint16_t *) src)[i]);
}

static void
U8ToF32(const void *src, float *dst, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dst[i] = (float) ((const uint8_t *) src)[i];
}

static const cbllm_dtype_traits dtype_table[CBLLM_DTYPE_COUNT] = {
	[CBLLM_F32] = {
		.name = "F32", .safetensors = true, .ggml_type = 0, .block_elems = 1, .block_bytes = 4,
		.to_f32 = F32ToF32,
	},
	[CBLLM_F16] = {
		.name = "F16", .safetensors = true, .ggml_type = 1, .block_elems = 1, .block_bytes = 2,
		.to_f32 = F16ToF32,
	},
	[CBLLM_BF16] = {
		.name = "BF16", .safetensors = true, .ggml_type = 30, .block_elems = 1, .block_bytes = 2,
		.to_f32 = Bf16ToF32,
	},
	/*
	 * GGUF only (safetensors has no name for them): the block-quantized
	 * types, decoded in dtype_quant.c and dtype_kquant.c, quantized in
	 * quantize.c
	 */
	[CBLLM_Q8_0] = {
		.name = "Q8_0", .ggml_type = 8, .block_elems = CBLLM_QK, .block_bytes = CBLLM_Q8_0_BYTES,
		.to_f32 = cbllm_q8_0_to_f32, .from_f32 = cbllm_q8_0_from_f32,
	},
	[CBLLM_Q4_0] = {
		.name = "Q4_0", .ggml_type = 2, .block_elems = CBLLM_QK, .block_bytes = CBLLM_Q4_0_BYTES,
		.to_f32 = cbllm_q4_0_to_f32, .from_f32 = cbllm_q4_0_from_f32,
	},
	[CBLLM_Q4_1] = {
		.name = "Q4_1", .ggml_type = 3, .block_elems = CBLLM_QK, .block_bytes = CBLLM_Q4_1_BYTES,
		.to_f32 = cbllm_q4_1_to_f32, .from_f32 = cbllm_q4_1_from_f32,
	},
	[CBLLM_Q5_0] = {
		.name = "Q5_0", .ggml_type = 6, .block_elems = CBLLM_QK, .block_bytes = CBLLM_Q5_0_BYTES,
		.to_f32 = cbllm_q5_0_to_f32, .from_f32 = cbllm_q5_0_from_f32,
	},
	[CBLLM_Q5_1] = {
		.name = "Q5_1", .ggml_type = 7, .block_elems = CBLLM_QK, .block_bytes = CBLLM_Q5_1_BYTES,
		.to_f32 = cbllm_q5_1_to_f32, .from_f32 = cbllm_q5_1_from_f32,
	},
	[CBLLM_Q2_K] = {
		.name = "Q2_K", .ggml_type = 10, .block_elems = CBLLM_QK_K, .block_bytes = CBLLM_Q2_K_BYTES,
		.to_f32 = cbllm_q2_k_to_f32, .from_f32 = cbllm_q2_k_from_f32,
	},
	[CBLLM_Q3_K] = {
		.name = "Q3_K", .ggml_type = 11, .block_elems = CBLLM_QK_K, .block_bytes = CBLLM_Q3_K_BYTES,
		.to_f32 = cbllm_q3_k_to_f32, .from_f32 = cbllm_q3_k_from_f32,
	},
	[CBLLM_Q4_K] = {
		.name = "Q4_K", .ggml_type = 12, .block_elems = CBLLM_QK_K, .block_bytes = CBLLM_Q4_K_BYTES,
		.to_f32 = cbllm_q4_k_to_f32, .from_f32 = cbllm_q4_k_from_f32,
	},
	[CBLLM_Q5_K] = {
		.name = "Q5_K", .ggml_type = 13, .block_elems = CBLLM_QK_K, .block_bytes = CBLLM_Q5_K_BYTES,
		.to_f32 = cbllm_q5_k_to_f32, .from_f32 = cbllm_q5_k_from_f32,
	},
	[CBLLM_Q6_K] = {
		.name = "Q6_K", .ggml_type = 14, .block_elems = CBLLM_QK_K, .block_bytes = CBLLM_Q6_K_BYTES,
		.to_f32 = cbllm_q6_k_to_f32, .from_f32 = cbllm_q6_k_from_f32,
	},
	[CBLLM_MXFP4] = {
		.name = "MXFP4", .ggml_type = 39, .block_elems = CBLLM_QK, .block_bytes = CBLLM_MXFP4_BYTES,
		.to_f32 = cbllm_mxfp4_to_f32, .from_f32 = cbllm_mxfp4_from_f32,
	},
	/* safetensors' bytes: the blocks and scales of MXFP4 experts stored apart (model.c joins them) */
	[CBLLM_U8] = {
		.name = "U8", .safetensors = true, .ggml_type = -1, .block_elems = 1, .block_bytes = 1,
		.to_f32 = U8ToF32,
	},
};

/* What a value that is no type answers with. */
static const cbllm_dtype_traits dtype_unknown = {.name = "?", .ggml_type = -1};

/* The row of dt, or the unknown row. */
const cbllm_dtype_traits *
cbllm_dtype_traits_of(cbllm_dtype dt)
{
	return (unsigned) dt < CBLLM_DTYPE_COUNT ? &dtype_table[dt] : &dtype_unknown;
}

/* The name of dt's row. */
const char *
cbllm_dtype_name(cbllm_dtype dt)
{
	return cbllm_dtype_traits_of(dt)->name;
}

/* The safetensors row whose name is name. */
bool
cbllm_dtype_by_name(const char *name, cbllm_dtype *dt)
{
	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
		if (dtype_table[i].safetensors && strcmp(dtype_table[i].name, name) == 0)
		{
			*dt = (cbllm_dtype) i;
			return true;
		}
	return false;
}

/* The row whose ggml id is ggml_type. */
bool
cbllm_dtype_by_ggml(int ggml_type, cbllm_dtype *dt)
{
	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
		if (ggml_type >= 0 && dtype_table[i].ggml_type == ggml_type)
		{
			*dt = (cbllm_dtype) i;
			return true;
		}
	return false;
}

/* The safetensors names joined with commas and a final "and". */
void
cbllm_dtype_names(char *buf, size_t len)
{
	const char *names[CBLLM_DTYPE_COUNT];
	int			n = 0;

	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
		if (dtype_table[i].safetensors)
			names[n++] = dtype_table[i].name;
	cbllm_join_names(buf, len, names, n, "and", "");
}

/* Whole blocks times the bytes of one. */
size_t
cbllm_dtype_traits_row_bytes(const cbllm_dtype_traits *t, int64_t n)
{
	if (n < 0 || t->block_elems <= 0 || t->block_bytes == 0 || n % t->block_elems != 0)
		return SIZE_MAX;
	return (size_t) (n / t->block_elems) * t->block_bytes;
}

/* The row bytes of dt's row. */
size_t
cbllm_dtype_row_bytes(cbllm_dtype dt, int64_t n)
{
	return cbllm_dtype_traits_row_bytes(cbllm_dtype_traits_of(dt), n);
}

/* The reference conversion of dt's row. */
void
cbllm_to_f32(cbllm_dtype dt, const void *src, float *dst, int64_t n)
{
	cbllm_dtype_traits_of(dt)->to_f32(src, dst, n);
}
