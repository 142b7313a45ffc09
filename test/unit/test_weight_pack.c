/*
 * test_weight_pack.c: the CPU's packed layout of K-quant and MXFP4 matrices
 * (weight_pack.h) and the AVX-512 products that read it
 * (kernels_quant_packed.inc), on Q4_K, Q5_K, Q6_K and MXFP4 matrices of
 * random bytes (every code and scale pattern) and of quantized Gaussian
 * rows (MXFP4's also of widths with a short last group of blocks).
 *
 *   - every code, scale, d and dmin (MXFP4: exponent) of every packed row
 *     sits where the header of weight_pack.h says, read here from that
 *     text's formulas (not through weight_pack.c's helpers);
 *   - unpacking any row gives back the bytes it had as stored, and rows
 *     past the last whole group are left as they were;
 *   - the products over the packed matrix give the bits of the products
 *     over the matrix as stored, for batches of 1 to 13 tokens and 72 (on
 *     both sides of the stored products' switches), in row blocks of 16
 *     and 32, with the tail rows mixed in;
 *   - a NaN activation makes its own token's outputs NaN and no other's;
 *   - which sets pack: the AVX-512 ones, those types, rows of whole 256s
 *     (MXFP4: 32s) and at least one group;
 *   - the CPU backend packs a model at load: a tied 256-wide llama of
 *     dummy weights quantized as q4_k has every matrix packed (the Q6_K
 *     embedding too, being its LM head), the LM head marked as the
 *     embedding is, every row unpacking to the bytes of the same model
 *     loaded again, and the embedding lookup giving the stored rows' values.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_registry.h"
#include "dtype/dtype.h"
#include "fixture.h"
#include "backend/cpu/kernels.h"
#include "base/numeric.h"
#include "base/threadpool.h"
#include "dtype/kquant_layout.h"
#include "model/model.h"
#include "packed_model.h"
#include "backend/cpu/weight_pack.h"
#include "base/rng.h"
#include "quant_rows.h"
#include "tap.h"

#define ROWS 37					/* two groups and five rows as stored */
#define MAX_T 72

static const cbllm_dtype types[] = {CBLLM_Q4_K, CBLLM_Q5_K, CBLLM_Q6_K, CBLLM_MXFP4};

/* Row r's code of element e as weight_pack.h's header places it in the group at grp. */
static int
SpecCode(const kquant_layout *l, const uint8_t *grp, int r, int sb, int e, int nsw, int hbits)
{
	const uint8_t *rec = grp + sb * 16 * l->bytes,
			   *nib = rec + 64 * nsw + 32 * (l->dmin_off >= 0 ? 2 : 1),
			   *high = nib + 32 * 64;
	int			m = e / 32,
				o = e % 32,
				h = o / 16,
				k = (o % 16) / 4,
				i = o % 4;
	int			q = (nib[64 * (4 * m + k) + 4 * r + i] >> (4 * h)) & 15;

	if (hbits > 0)
	{
		int			bit = (8 * m + 2 * k + h) * hbits;

		q |= ((high[64 * (bit / 8) + 4 * r + i] >> (bit % 8)) & ((1 << hbits) - 1)) << 4;
	}
	return q;
}

/*
 * MXFP4: whether every packed row's exponents and nibbles are where the
 * layout says (a record per 8 blocks, m of them in the last: m * 16
 * exponent bytes, then vector 4j + v's byte 4r + i = block j's byte 1 + 4v + i).
 */
static bool
MxLayoutAsDocumented(const uint8_t *stored, const uint8_t *packed, int64_t cols)
{
	int64_t		rb = (int64_t) cbllm_dtype_row_bytes(CBLLM_MXFP4, cols),
				nb = cols / 32;

	for (int g = 0; g < ROWS / 16; g++)
		for (int r = 0; r < 16; r++)
			for (int64_t blk = 0; blk < nb; blk++)
			{
				const uint8_t *b = stored + (16 * g + r) * rb + blk * 17,
						   *rec = packed + 16 * g * rb + 16 * (blk / 8 * 8) * 17;
				int			m = nb - blk / 8 * 8 < 8 ? (int) (nb - blk / 8 * 8) : 8,
							j = (int) (blk % 8);

				if (rec[16 * j + r] != b[0])
					return false;
				for (int v = 0; v < 4; v++)
					for (int i = 0; i < 4; i++)
						if (rec[16 * m + 64 * (4 * j + v) + 4 * r + i] != b[1 + 4 * v + i])
							return false;
			}
	return true;
}

/* Whether every packed row's codes, scales, d and dmin are where the layout says. */
static bool
LayoutAsDocumented(cbllm_dtype dt, const uint8_t *stored, const uint8_t *packed, int64_t cols)
{
	const kquant_layout *l = cbllm_kquant_layout(dt);
	int64_t		rb = (int64_t) cbllm_dtype_row_bytes(dt, cols),
				nsb = cols / 256;
	int			nsw = dt == CBLLM_Q6_K ? 4 : 3,
				hbits = dt == CBLLM_Q4_K ? 0 : dt == CBLLM_Q5_K ? 1 : 2;

	if (dt == CBLLM_MXFP4)
		return MxLayoutAsDocumented(stored, packed, cols);

	for (int g = 0; g < ROWS / 16; g++)
		for (int r = 0; r < 16; r++)
			for (int sb = 0; sb < nsb; sb++)
			{
				const uint8_t *b = stored + (16 * g + r) * rb + sb * l->bytes,
						   *grp = packed + 16 * g * rb,
						   *rec = grp + sb * 16 * l->bytes;

				for (int j = 0; j < 4 * nsw; j++)
					if (rec[64 * (j / 4) + 4 * r + j % 4] != b[l->scales_off + j])
						return false;
				if (memcmp(rec + 64 * nsw + 2 * r, b + l->d_off, 2) != 0 ||
					(l->dmin_off >= 0 && memcmp(rec + 64 * nsw + 32 + 2 * r, b + l->dmin_off, 2) != 0))
					return false;
				for (int e = 0; e < 256; e++)
					if (SpecCode(l, grp, r, sb, e, nsw, hbits) != cbllm_kquant_code(l, b, e))
						return false;
			}
	return true;
}

/* y (T, ROWS) = the T tokens of x through qmatmul_rows in row blocks of step, activations per 256 (MXFP4: 32). */
static void
Run(const cpu_kernels *ks, const cbllm_weight *w, const float *x, int T, cpu_qx *qx, int step, float *y,
	float *scratch)
{
	qx->T = T;
	qx->blk = w->dtype == CBLLM_MXFP4 ? 32 : 256;
	for (int t = 0; t < T; t++)
		ks->quantize_x(x + t * w->cols, w->cols, 0, w->cols, t, qx);
	for (int64_t r0 = 0; r0 < w->rows; r0 += step)
		ks->qmatmul_rows(w, qx, y, r0, r0 + step < w->rows ? r0 + step : w->rows, scratch);
}

/* One packing set, one type, one width. */
static void
TestShape(const cpu_kernels *ks, cbllm_dtype dt, int64_t cols, bool random_bytes, cbllm_rng *r)
{
	const char *name = cbllm_dtype_name(dt),
			   *src = random_bytes ? "random bytes" : "quantized rows";
	int64_t		rb = (int64_t) cbllm_dtype_row_bytes(dt, cols),
				ld = KERNEL_QLD(cols);
	uint8_t    *stored = quant_rows_make(dt, ROWS, cols, random_bytes, r),
			   *packed = malloc(ROWS * rb),
			   *tmp = malloc(16 * rb),
			   *row = malloc(rb);
	cbllm_weight ws = {.dtype = dt, .rows = ROWS, .cols = cols, .data = stored},
				wp = {.dtype = dt, .rows = ROWS, .cols = cols, .data = packed};
	float	   *x = malloc(sizeof(float) * MAX_T * cols),
			   *ys = malloc(sizeof(float) * MAX_T * ROWS),
			   *yp = malloc(sizeof(float) * MAX_T * ROWS),
			   *scratch = malloc(sizeof(float) * KERNEL_ROWS_PER_TASK * ld);
	cpu_qx		qx = quant_rows_qx_alloc(ld, MAX_T, 256);
	bool		round = true,
				same = true,
				nan_ok = true;

	memcpy(packed, stored, ROWS * rb);
	weight_pack_groups(&wp, 0, ROWS / 16, packed, tmp);
	wp.packed_rows = ROWS / 16 * 16;
	TAP_OK(LayoutAsDocumented(dt, stored, packed, cols),
		   "%s (%s) x %ld: every code, scale, d and dmin of the packed rows is where weight_pack.h says",
		   name, src, (long) cols);
	for (int i = 0; i < ROWS && round; i++)
		round = memcmp(weight_row(&wp, i, row), stored + i * rb, rb) == 0;
	TAP_OK(round && memcmp(packed + 32 * rb, stored + 32 * rb, (ROWS - 32) * rb) == 0,
		   "%s (%s) x %ld: each packed row unpacks to its stored bytes; the tail rows are untouched",
		   name, src, (long) cols);

	for (int64_t i = 0; i < MAX_T * cols; i++)
		x[i] = (float) (quant_rows_gauss(r) * (1 + (i / cols) % 3));
	for (int T = 1; T <= 14 && same; T++)
	{
		int			n = T == 14 ? MAX_T : T;

		Run(ks, &ws, x, n, &qx, KERNEL_ROWS_PER_TASK, ys, scratch);
		Run(ks, &wp, x, n, &qx, T % 2 ? 16 : KERNEL_ROWS_PER_TASK, yp, scratch);
		same = memcmp(ys, yp, sizeof(float) * n * ROWS) == 0;
		if (!same)
			TAP_DIAG("first difference at %d tokens", n);
	}
	TAP_OK(same, "%s: %s (%s) x %ld packed gives the stored rows' bits for 1 to 13 and 72 tokens, blocks of 16 and 32 rows",
		   ks->isa, name, src, (long) cols);

	x[2 * cols + 5] = NAN;
	for (int T = 3; T <= 9; T += 6)
	{
		Run(ks, &wp, x, T, &qx, KERNEL_ROWS_PER_TASK, yp, scratch);
		for (int t = 0; t < T; t++)
			for (int i = 0; i < ROWS; i++)
				nan_ok = nan_ok && (t == 2 ? isnan(yp[t * ROWS + i]) : isfinite(yp[t * ROWS + i]));
	}
	TAP_OK(nan_ok, "%s: %s packed, a NaN activation makes its own token's outputs NaN and no other's",
		   ks->isa, name);

	free(stored);
	free(packed);
	free(tmp);
	free(row);
	free(x);
	free(ys);
	free(yp);
	free(scratch);
	quant_rows_qx_free(&qx);
}

/* Which kernel sets take which matrices packed. */
static void
TestWhoPacks(void)
{
	const char *isas[] = {"generic", "avx2", "avx512", "avx512vnni"};
	uint8_t		byte = 0;

	for (int i = 0; i < 4; i++)
	{
		const cpu_kernels *ks = cpu_kernels_select(isas[i]);
		bool		avx512 = i >= 2,
					ok = true;

		if (ks == NULL)
			continue;
		for (int d = 0; d < CBLLM_DTYPE_COUNT; d++)
		{
			cbllm_dtype dt = (cbllm_dtype) d;
			bool		kq = dt == CBLLM_Q4_K || dt == CBLLM_Q5_K || dt == CBLLM_Q6_K,
						mx = dt == CBLLM_MXFP4,
						fl = dt == CBLLM_F32 || dt == CBLLM_F16 || dt == CBLLM_BF16;
			cbllm_weight w = {.dtype = dt, .rows = 64, .cols = 512, .data = &byte};

			ok = ok && ks->packs(&w) == (avx512 && (kq || mx || fl));
			w.cols = 320;
			ok = ok && ks->packs(&w) == (avx512 && (mx || fl));
			w.cols = 512;
			w.rows = 15;
			ok = ok && !ks->packs(&w);
			w.rows = 64;
			w.data = NULL;
			ok = ok && !ks->packs(&w);
		}
		TAP_OK(ok, "%s packs %s (16 rows or more, on the host)", isas[i],
			   avx512 ? "Q4_K, Q5_K and Q6_K (rows of whole 256s), MXFP4 (whole 32s) and the float types, nothing else" :
			   "nothing");
	}
}

/* The CPU backend packs a tied q4_k model at load; rows and embeddings come back as stored. */
static void
TestBackendPacks(const char *isa)
{
	fixture_geom g = {.hidden = 256, .layers = 2, .heads = 4, .kv_heads = 2, .inter = 512, .vocab = 400,
	.tie = true};
	packed_model pm;
	cbllm_err	err = {0};
	int			rc = packed_model_open(&pm, "weight_pack", isa, &g, "q4_k", 8, &err);
	cbllm_model *m = pm.m;
	cbllm_backend *be = pm.be;

	TAP_OK(rc == CBLLM_OK && m->lm_head_tied && m->embed.dtype == CBLLM_Q6_K,
		   "%s: the tied q4_k llama (a Q6_K embedding) loads and packs (%s)", isa, rc ? err.msg : "ok");
	if (rc == CBLLM_OK)
	{
		pack_walk	pw = packed_model_walk(&pm);

		TAP_OK(pw.matrices == 1 + 7 * 2 && pw.packed == pw.matrices && pw.rows_back == pw.matrices &&
			   m->lm_head.packed_rows == 400 && m->embed.packed_rows == 400 && m->lm_head.data == m->embed.data,
			   "%s: all %d matrices of the tied model are packed (%d), the LM head as its embedding, and "
			   "every row unpacks to the stored bytes (%d)", isa, pw.matrices, pw.packed, pw.rows_back);
		TAP_OK(packed_model_embed_matches(&pm), "%s: the embedding lookup of the packed embedding gives the stored rows' values", isa);

		/* a group of a packed Q4_K matrix and a Q8_0 one (activations per 256 and per 32) */
		{
			cbllm_rng	r;
			cbllm_weight q8 = {.dtype = CBLLM_Q8_0, .rows = 48, .cols = 256};
			const cbllm_weight *w = &m->layers[0].wq;
			float	   *xs = malloc(sizeof(float) * 5 * 256),
					   *ya = malloc(sizeof(float) * 5 * w->rows),
					   *yb = malloc(sizeof(float) * 5 * q8.rows),
					   *za = malloc(sizeof(float) * 5 * w->rows),
					   *zb = malloc(sizeof(float) * 5 * q8.rows);

			rng_seed(&r, 3);
			q8.data = quant_rows_make(CBLLM_Q8_0, 48, 256, true, &r);
			for (int i = 0; i < 5 * 256; i++)
				xs[i] = (float) quant_rows_gauss(&r);
			be->matmul(be, 2, (const cbllm_weight *[]) {w, &q8}, xs, 5, (float *[]) {ya, yb});
			be->matmul(be, 1, (const cbllm_weight *[]) {w}, xs, 5, (float *[]) {za});
			be->matmul(be, 1, (const cbllm_weight *[]) {&q8}, xs, 5, (float *[]) {zb});
			TAP_OK(w->packed_rows > 0 && memcmp(ya, za, sizeof(float) * 5 * w->rows) == 0 &&
				   memcmp(yb, zb, sizeof(float) * 5 * q8.rows) == 0,
				   "%s: a packed Q4_K and a Q8_0 matrix in one group give what each gives alone", isa);
			free((void *) q8.data);
			free(xs);
			free(ya);
			free(yb);
			free(za);
			free(zb);
		}
	}
	packed_model_close(&pm);
}

/* Everything on one packing kernel set. */
static void
OnSet(const cpu_kernels *ks, int i)
{
	cbllm_rng	r;

	TestBackendPacks(ks->isa);
	rng_seed(&r, 500 + i);
	for (int t = 0; t < 4; t++)
	{
		TestShape(ks, types[t], 256, true, &r);
		TestShape(ks, types[t], 1024, true, &r);
		TestShape(ks, types[t], 768, false, &r);
	}
	/* MXFP4 rows whose last group of blocks is short: one block past 256, two (gpt-oss's 2880 ends so) */
	TestShape(ks, CBLLM_MXFP4, 288, true, &r);
	TestShape(ks, CBLLM_MXFP4, 320, false, &r);
}

int
main(void)
{
	TestWhoPacks();
	packed_model_for_sets(OnSet);
	return tap_done();
}
