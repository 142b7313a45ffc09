/*
 * test_dtype_quant.c: the GGUF block-quantized rows of the weight-type table
 * (src/dtype/dtype.h, src/dtype/dtype_quant.c).
 *
 * The 32-element types (dtype_quant.c; MXFP4's blocks carry an exponent
 * byte instead of an f16 scale) and the 256-element K-quants
 * (dtype_kquant.c).  Their traits (sizes, ggml ids, names that safetensors never finds, no
 * backend running them), hand-built blocks whose values are worked out here
 * from the format, and then bit-exact agreement with an independent numpy
 * quantizer and dequantizer: test/tools/quant.py writes, for each type,
 * NAME.blocks (packed blocks of random data and of edge cases) and NAME.f32
 * (their values), and every float the engine's to_f32 gives must have the
 * same bits.
 *
 *   test_dtype_quant DIR     DIR as quant.py --out DIR wrote it
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_registry.h"
#include "backend/cpu/cpu_dtype_traits.h"
#include "backend/cuda/cuda_dtype_traits.h"
#include "dtype/dtype.h"
#include "dtype/dtype_quant.h"
#include "tap.h"

/* What each quantized row must say, from the GGUF/ggml format. */
static const struct
{
	cbllm_dtype dt;
	const char *name;
	int			elems;			/* elements per block */
	size_t		bytes;
	int			ggml;
	int			d_off;			/* byte of the block's f16 scale d; -1: an exponent byte at 0 (MXFP4) */
	int			m_off;			/* byte of its f16 offset m (dmin in the K-quants); -1 if none */
}			quant_rows[] = {
	{CBLLM_Q8_0, "Q8_0", 32, 34, 8, 0, -1},
	{CBLLM_Q4_0, "Q4_0", 32, 18, 2, 0, -1},
	{CBLLM_Q4_1, "Q4_1", 32, 20, 3, 0, 2},
	{CBLLM_Q5_0, "Q5_0", 32, 22, 6, 0, -1},
	{CBLLM_Q5_1, "Q5_1", 32, 24, 7, 0, 2},
	{CBLLM_Q2_K, "Q2_K", 256, 84, 10, 80, 82},
	{CBLLM_Q3_K, "Q3_K", 256, 110, 11, 108, -1},
	{CBLLM_Q4_K, "Q4_K", 256, 144, 12, 0, 2},
	{CBLLM_Q5_K, "Q5_K", 256, 176, 13, 0, 2},
	{CBLLM_Q6_K, "Q6_K", 256, 210, 14, 208, -1},
	{CBLLM_MXFP4, "MXFP4", 32, 17, 39, -1, -1},
};

#define N_QUANT ((int) (sizeof(quant_rows) / sizeof(quant_rows[0])))

/* The bits of f. */
static uint32_t
Bits(float f)
{
	uint32_t	u;

	memcpy(&u, &f, 4);
	return u;
}

/* Each row's traits, its ggml id both ways, that the CPU runs it and no safetensors file holds it. */
static void
TestRows(void)
{
	const int	ggml_ids[][2] = {
		{0, CBLLM_F32}, {1, CBLLM_F16}, {2, CBLLM_Q4_0}, {3, CBLLM_Q4_1}, {6, CBLLM_Q5_0},
		{7, CBLLM_Q5_1}, {8, CBLLM_Q8_0}, {10, CBLLM_Q2_K}, {11, CBLLM_Q3_K}, {12, CBLLM_Q4_K},
		{13, CBLLM_Q5_K}, {14, CBLLM_Q6_K}, {30, CBLLM_BF16}, {39, CBLLM_MXFP4}};
	const int	no_ids[] = {-1, 4, 5, 9, 15, 16, 29, 31, 38, 40, 1000};
	const backend_reg *cuda = backend_registry_find("cuda");
	cbllm_dtype dt;
	bool		ok = true;

	for (int i = 0; i < N_QUANT; i++)
	{
		const cbllm_dtype_traits *t = cbllm_dtype_traits_of(quant_rows[i].dt);
		size_t		b = quant_rows[i].bytes;
		int			k = quant_rows[i].elems;

		TAP_OK(strcmp(t->name, quant_rows[i].name) == 0 && t->block_elems == k && t->block_bytes == b &&
			   t->ggml_type == quant_rows[i].ggml && t->to_f32 != NULL && !t->safetensors,
			   "%s: blocks of %d elements in %zu bytes, ggml id %d, a reference conversion, not a safetensors type",
			   quant_rows[i].name, k, b, quant_rows[i].ggml);
		TAP_OK(cbllm_dtype_row_bytes(quant_rows[i].dt, k) == b &&
			   cbllm_dtype_row_bytes(quant_rows[i].dt, 4096) == (size_t) (4096 / k) * b &&
			   cbllm_dtype_row_bytes(quant_rows[i].dt, 0) == 0,
			   "%s: %d elements are %zu bytes, 4096 are %zu, none are 0", quant_rows[i].name, k, b,
			   (size_t) (4096 / k) * b);
		TAP_OK(cbllm_dtype_row_bytes(quant_rows[i].dt, k + k / 2) == SIZE_MAX &&
			   cbllm_dtype_row_bytes(quant_rows[i].dt, k - 1) == SIZE_MAX &&
			   cbllm_dtype_row_bytes(quant_rows[i].dt, 1) == SIZE_MAX &&
			   cbllm_dtype_row_bytes(quant_rows[i].dt, -k) == SIZE_MAX,
			   "%s: a partial block (%d, %d, 1 elements) or a negative count has no size", quant_rows[i].name,
			   k + k / 2, k - 1);
		TAP_OK(cpu_dtype_traits_of(quant_rows[i].dt)->path != CBLLM_CPU_NONE &&
			   cuda_dtype_traits_of(quant_rows[i].dt)->path == CBLLM_CUDA_QUANT &&
			   cpu_backend_reg.supports_weight(quant_rows[i].dt),
			   "%s: the cpu backend runs it (test_quant_kernels), the cuda backend as stored (test_cuda_quant)",
			   quant_rows[i].name);
		if (cuda != NULL && cuda->missing == NULL)
			TAP_OK(cuda->supports_weight(quant_rows[i].dt), "%s: the cuda backend takes it",
				   quant_rows[i].name);
		TAP_OK(!cbllm_dtype_by_name(quant_rows[i].name, &dt),
			   "%s: by_name (the safetensors lookup) does not find it", quant_rows[i].name);
	}
	for (int i = 0; i < (int) (sizeof(ggml_ids) / sizeof(ggml_ids[0])); i++)
	{
		ok = ok && cbllm_dtype_by_ggml(ggml_ids[i][0], &dt) && dt == (cbllm_dtype) ggml_ids[i][1] &&
			cbllm_dtype_traits_of(dt)->ggml_type == ggml_ids[i][0];
	}
	TAP_OK(ok, "by_ggml: F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q2_K 10 .. Q6_K 14, BF16 30, "
		   "MXFP4 39");
	ok = true;
	for (int i = 0; i < (int) (sizeof(no_ids) / sizeof(no_ids[0])); i++)
		ok = ok && !cbllm_dtype_by_ggml(no_ids[i], &dt);
	TAP_OK(ok, "by_ggml: ids of types not in the table (Q4_2, Q8_1, Q8_K, IQ2_XXS, -1, 31, 38, 40) give none");
	TAP_OK(cbllm_dtype_traits_of((cbllm_dtype) CBLLM_DTYPE_COUNT)->ggml_type == -1,
		   "a value that is no type has no ggml id");
}

/* One hand-built block and the bits some of its elements must widen to. */
typedef struct hand_case
{
	cbllm_dtype dt;
	uint8_t		block[34];
	int			idx[4];
	uint32_t	want[4];
	const char *what;
} hand_case;

static const hand_case hand_cases[] = {
	{CBLLM_Q8_0, {0x00, 0x40, 0x80, 0x7f, 0x00, 0xff},
	 {0, 1, 2, 3}, {0xc3800000, 0x437e0000, 0x00000000, 0xc0000000},
	 "Q8_0, d 2: int8 -128, 127, 0, -1 are -256, 254, 0, -2"},
	{CBLLM_Q8_0, {0x01, 0x00, 0x80, 0x01},
	 {0, 1, 2, 31}, {0xb7000000, 0x33800000, 0x00000000, 0x00000000},
	 "Q8_0, d the smallest subnormal f16 (2^-24): -128 d is -2^-17, 1 d is 2^-24"},
	{CBLLM_Q4_0, {0x00, 0x3c, 0x21, [17] = 0xf0},
	 {0, 16, 15, 31}, {0xc0e00000, 0xc0c00000, 0xc1000000, 0x40e00000},
	 "Q4_0, d 1: byte 0 0x21 gives element 0 -7 (low nibble) and 16 -6; byte 15 0xf0 gives 15 -8, 31 7"},
	{CBLLM_Q4_0, {0x00, 0xbc, 0x00},
	 {0, 16, 1, 30}, {0x41000000, 0x41000000, 0x41000000, 0x41000000},
	 "Q4_0, d -1 (a negative scale): nibble 0 is -8 * -1 = 8"},
	{CBLLM_Q4_1, {0x00, 0x38, 0x00, 0xc0, 0xf3},
	 {0, 16, 1, 17}, {0xbf000000, 0x40b00000, 0xc0000000, 0xc0000000},
	 "Q4_1, d 0.5, m -2: byte 0xf3 gives element 0 3 d + m = -0.5 and 16 15 d + m = 5.5"},
	{CBLLM_Q5_0, {0x00, 0x3c, 0x01, 0x00, 0x00, 0x80, 0x00, [21] = 0xf0},
	 {0, 16, 1, 31}, {0x00000000, 0xc1800000, 0xc1800000, 0x41700000},
	 "Q5_0, d 1, qh bits 0 and 31: element 0 (0|16) - 16 = 0, 16 -16, 1 -16, 31 (15|16) - 16 = 15"},
	{CBLLM_Q5_1, {0x00, 0x3c, 0x00, 0x3c, 0x00, 0x00, 0x01, 0x00, 0x21},
	 {0, 16, 1, 17}, {0x40000000, 0x41980000, 0x3f800000, 0x3f800000},
	 "Q5_1, d 1, m 1, qh bit 16: byte 0x21 gives element 0 1 + 1 = 2 and 16 (2|16) + 1 = 19"},
	{CBLLM_MXFP4, {0x80, 0x7f, 0x98},
	 {0, 16, 1, 17}, {0xc1400000, 0x41400000, 0x00000000, 0xbf800000},
	 "MXFP4, e 128 (factor 1): byte 1 0x7f gives element 0 code 15 = -12 and 16 code 7 = 12; byte 2 0x98 "
	 "gives 1 code 8 = +0 and 17 code 9 = -1"},
	{CBLLM_MXFP4, {0x00, 0x31, [16] = 0xd5},
	 {0, 16, 15, 31}, {0x00200000, 0x00600000, 0x00c00000, 0x80c00000},
	 "MXFP4, e 0 (factor 2^-128, subnormal): codes 1, 3, 5, 13 give 2^-128, 3 2^-128, 6 2^-128, -6 2^-128"},
	{CBLLM_MXFP4, {0x01, 0x17, 0x0a},
	 {0, 16, 1, 17}, {0x01c00000, 0x00400000, 0x80800000, 0x00000000},
	 "MXFP4, e 1 (factor 2^-127, subnormal): codes 7, 1, 10, 0 give 1.5 2^-124 (normal), 2^-127, -2^-126, 0"},
	{CBLLM_MXFP4, {0xff, 0x21, 0xa9},
	 {0, 16, 1, 17}, {0x7f000000, 0x7f800000, 0xff000000, 0xff800000},
	 "MXFP4, e 255 (no NaN: factor 2^127): codes 1, 2, 9, 10 give 2^127, +inf, -2^127, -inf"},
};

/* The hand-built blocks' elements, worked out from the format rather than by quant.py. */
static void
TestHandBlocks(void)
{
	for (int i = 0; i < (int) (sizeof(hand_cases) / sizeof(hand_cases[0])); i++)
	{
		const hand_case *c = &hand_cases[i];
		float		out[32];
		bool		ok = true;

		cbllm_to_f32(c->dt, c->block, out, 32);
		for (int k = 0; k < 4; k++)
			ok = ok && Bits(out[c->idx[k]]) == c->want[k];
		TAP_OK(ok, "%s", c->what);
	}
}

/* One hand-built K-quant block, as the bytes that are not zero, and the bits some elements must widen to. */
typedef struct hand_kcase
{
	cbllm_dtype dt;
	int			set[12][2];		/* {byte, value} pairs, the rest of the block 0; {0, 0} ends them */
	int			idx[4];
	uint32_t	want[4];
	const char *what;
} hand_kcase;

static const hand_kcase hand_kcases[] = {
	{CBLLM_Q2_K, {{81, 0x38}, {83, 0x34}, {0, 0x3a}, {15, 0xf1}, {16, 0x02}, {79, 0xc0}},
	 {0, 255, 1, 96}, {0x41140000, 0xc0100000, 0xbf400000, 0x00000000},
	 "Q2_K, d 0.5, dmin 0.25, scales byte 0 0x3a (sc 10, m 3), 15 0xf1 (sc 1, m 15): element 0 (q 2) is "
	 "10 - 0.75 = 9.25, 255 (q 3 in bits 6-7 of qs byte 63) 1.5 - 3.75 = -2.25, 1 -0.75, 96 (sc 0) 0"},
	{CBLLM_Q3_K, {{109, 0x40}, {96, 0x01}, {104, 0x02}, {101, 0x40}, {105, 0x40}, {32, 0x03},
	 {0, 0x01}, {82, 0x20}, {18, 0x40}},
	 {0, 1, 210, 16}, {0x40c00000, 0xc1000000, 0xc2400000, 0x43800000},
	 "Q3_K, d 2, sub-block 0's 6-bit scale 33 (sc 1), 13's 20 (sc -12; high nibble of byte 5, bits 6-7 of "
	 "byte 9), 1's 0 (sc -32): element 0 (code 7) is 6, 1 (code 0) -8, 210 (code 6) -48, 16 (code 0) 256"},
	{CBLLM_Q4_K, {{1, 0x3c}, {3, 0x38}, {4, 0x01}, {8, 0x02}, {5, 0x80}, {13, 0x95},
	 {16, 0x3f}, {81, 0x70}},
	 {0, 1, 161, 32}, {0x41600000, 0xbf800000, 0x437e8000, 0x00000000},
	 "Q4_K, d 1, dmin 0.5, sub-block 0 sc 1 m 2, 5 sc 37 m 9 (split over scale bytes 1, 5 and 9): element 0 "
	 "(q 15) is 15 - 1 = 14, 1 -1, 161 (high nibble of qs byte 65, q 7) 259 - 4.5 = 254.5, 32 (sc 0) 0"},
	{CBLLM_Q5_K, {{1, 0x3c}, {3, 0x3c}, {4, 0x02}, {8, 0x01}, {15, 0x01}, {7, 0x40},
	 {11, 0xc0}, {48, 0x0f}, {16, 0x01}, {175, 0x30},
	 {47, 0x80}},
	 {0, 255, 1, 32}, {0x42740000, 0x43898000, 0xbf800000, 0x00000000},
	 "Q5_K, d 1, dmin 1, sub-block 0 sc 2 m 1, 7 sc 17 m 48: element 0 (q 15 | 16) is 62 - 1 = 61, 255 "
	 "(q 3 | 16, its fifth bit bit 7 of qh byte 31) 323 - 48 = 275, 1 -1, 32 0"},
	{CBLLM_Q6_K, {{209, 0x34}, {192, 0xfd}, {205, 100}, {0, 0x0a}, {128, 0x02}, {82, 0x50},
	 {178, 0x30}},
	 {0, 210, 1, 16}, {0xc0f00000, 0x44034000, 0x41c00000, 0x80000000},
	 "Q6_K, d 0.25, sc -3 (sub-block 0) and 100 (13): element 0 (code 42) is -0.75 * 10 = -7.5, 210 (high "
	 "nibble of ql byte 82, bits 4-5 of qh byte 50: code 53) 25 * 21 = 525, 1 (code 0) 24, 16 (sc 0) -0"},
};

/* The hand-built K-quant blocks' elements, worked out from the format rather than by quant.py. */
static void
TestHandKBlocks(void)
{
	for (int i = 0; i < (int) (sizeof(hand_kcases) / sizeof(hand_kcases[0])); i++)
	{
		const hand_kcase *c = &hand_kcases[i];
		uint8_t		block[256] = {0};
		float		out[256];
		bool		ok = true;

		for (int k = 0; k < 12 && (c->set[k][0] != 0 || c->set[k][1] != 0); k++)
			block[c->set[k][0]] = (uint8_t) c->set[k][1];
		cbllm_to_f32(c->dt, block, out, 256);
		for (int k = 0; k < 4; k++)
		{
			if (Bits(out[c->idx[k]]) != c->want[k])
				TAP_DIAG("%s element %d: 0x%08x (%g), want 0x%08x", cbllm_dtype_name(c->dt), c->idx[k],
						 (unsigned) Bits(out[c->idx[k]]), (double) out[c->idx[k]], (unsigned) c->want[k]);
			ok = ok && Bits(out[c->idx[k]]) == c->want[k];
		}
		TAP_OK(ok, "%s", c->what);
	}
}

/* The whole of path into *len bytes (malloc'd), or NULL. */
static uint8_t *
ReadAll(const char *path, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	uint8_t    *buf = NULL;
	long		n;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
		(buf = malloc((size_t) n)) != NULL && fread(buf, 1, (size_t) n, f) != (size_t) n)
	{
		free(buf);
		buf = NULL;
	}
	else if (buf != NULL)
		*len = (size_t) n;
	fclose(f);
	return buf;
}

/* The index of the first element whose bits differ between got and want (n floats), or -1. */
static int64_t
FirstDiff(const float *got, const uint8_t *want, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
	{
		uint32_t	w = (uint32_t) want[4 * i] | (uint32_t) want[4 * i + 1] << 8 |
			(uint32_t) want[4 * i + 2] << 16 | (uint32_t) want[4 * i + 3] << 24;

		if (Bits(got[i]) != w)
			return i;
	}
	return -1;
}

/* The f16 bits at byte off of block i: its scale or its offset. */
static uint16_t
HalfOf(const uint8_t *blocks, size_t bytes, int64_t i, int off)
{
	const uint8_t *p = blocks + (size_t) i * bytes + off;

	return (uint16_t) (p[0] | p[1] << 8);
}

/* The f32 whose bits are u. */
static float
FromBits(uint32_t u)
{
	float		f;

	memcpy(&f, &u, 4);
	return f;
}

/*
 * An exponent-byte type's blocks (MXFP4) hold every exponent 0..255, and its
 * factor cbllm_mxfp4_scale is 2^(e - 128) exactly for each, by ldexpf and by
 * the bits it must have (subnormal below e = 2).
 */
static void
TestExponents(const char *name, const uint8_t *blocks, size_t bytes, int64_t n_blocks)
{
	bool		seen[256] = {false},
				all = true,
				exact = true;

	for (int64_t i = 0; i < n_blocks; i++)
		seen[blocks[(size_t) i * bytes]] = true;
	for (int e = 0; e < 256; e++)
	{
		uint32_t	want = e >= 2 ? (uint32_t) (e - 1) << 23 : (uint32_t) 1 << (21 + e);

		all = all && seen[e];
		exact = exact && Bits(cbllm_mxfp4_scale((uint8_t) e)) == want &&
			cbllm_mxfp4_scale((uint8_t) e) == ldexpf(1.0f, e - 128) && FromBits(want) == ldexpf(1.0f, e - 128);
	}
	TAP_OK(all, "%s: the blocks include every exponent byte 0..255", name);
	TAP_OK(exact, "%s: exponent e gives the factor 2^(e - 128) exactly, 2^-128 and 2^-127 subnormal, "
		   "e = 255 2^127", name);
}

/* One type's blocks from quant.py against its expected floats, bit for bit. */
static void
TestAgainstNumpy(const char *dir, int r)
{
	const char *name = quant_rows[r].name;
	size_t		bytes = quant_rows[r].bytes;
	char		path[1024];
	size_t		nb = 0,
				nf = 0;
	uint8_t    *blocks,
			   *want;
	int64_t		n_blocks,
				n,
				diff;
	int			k = quant_rows[r].elems;
	int			zero = 0,
				neg = 0,
				sub = 0,
				sub_m = 0;
	float	   *got;

	snprintf(path, sizeof(path), "%s/%s.blocks", dir, name);
	blocks = ReadAll(path, &nb);
	snprintf(path, sizeof(path), "%s/%s.f32", dir, name);
	want = ReadAll(path, &nf);
	n_blocks = (int64_t) (nb / bytes);
	n = n_blocks * k;
	TAP_OK(blocks != NULL && want != NULL && nb % bytes == 0 && nf == (size_t) n * 4 && n_blocks >= 2000,
		   "%s: quant.py wrote %lld whole blocks of %zu bytes and their %lld floats (at least 2000 blocks)",
		   name, (long long) n_blocks, bytes, (long long) n);
	if (blocks == NULL || want == NULL || nb % bytes != 0 || nf != (size_t) n * 4)
	{
		free(blocks);
		free(want);
		return;
	}
	if (quant_rows[r].d_off < 0)
		TestExponents(name, blocks, bytes, n_blocks);
	for (int64_t i = 0; i < n_blocks && quant_rows[r].d_off >= 0; i++)
	{
		uint16_t	d = HalfOf(blocks, bytes, i, quant_rows[r].d_off);

		zero += (d & 0x7fff) == 0;
		neg += (d & 0x8000) != 0 && (d & 0x7fff) != 0;
		sub += (d & 0x7c00) == 0 && (d & 0x03ff) != 0;
		if (quant_rows[r].m_off >= 0)
		{
			uint16_t	m = HalfOf(blocks, bytes, i, quant_rows[r].m_off);

			sub_m += (m & 0x7c00) == 0 && (m & 0x03ff) != 0;
		}
	}
	if (quant_rows[r].d_off >= 0)
		TAP_OK(zero > 0 && neg > 0 && sub > 0 && (quant_rows[r].m_off < 0 || sub_m > 0),
			   "%s: the blocks include zero scales (%d), negative scales (%d), subnormal f16 scales (%d)%s",
			   name, zero, neg, sub, quant_rows[r].m_off >= 0 ? " and subnormal offsets" : "");
	got = malloc(sizeof(float) * (size_t) n);
	cbllm_to_f32(quant_rows[r].dt, blocks, got, n);
	diff = FirstDiff(got, want, n);
	TAP_OK(diff < 0, "%s: all %lld elements of %lld blocks dequantize to numpy's bits%s",
		   name, (long long) n, (long long) n_blocks, diff < 0 ? "" : " (first difference below)");
	if (diff >= 0)
		TAP_DIAG("%s block %lld element %lld: got 0x%08x (%g)", name, (long long) (diff / k),
				 (long long) (diff % k), (unsigned) Bits(got[diff]), (double) got[diff]);
	/* the comparison itself must see a one-ulp change in the last value */
	want[nf - 4] ^= 1;
	TAP_OK(FirstDiff(got, want, n) == n - 1, "%s: a one-bit change in the expected values is seen", name);
	free(got);
	free(blocks);
	free(want);
}

int
main(int argc, char **argv)
{
	TestRows();
	TestHandBlocks();
	TestHandKBlocks();
	if (argc < 2)
		TAP_OK(false, "usage: test_dtype_quant DIR (as test/tools/quant.py --out DIR wrote it)");
	else
		for (int r = 0; r < N_QUANT; r++)
			TestAgainstNumpy(argv[1], r);
	return tap_done();
}
