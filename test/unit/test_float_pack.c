/*
 * test_float_pack.c: float matrices (F32, F16, BF16) packed as panels
 * (weight_pack.h) and the AVX-512 products that read them
 * (kernels_float_packed.inc).
 *
 *   - every element of every packed row sits where the header of
 *     weight_pack.h says (element k of lane r at 16k + r of its group),
 *     read here from that formula; unpacking any row gives its stored
 *     bytes back, and the rows past the last whole panel are untouched;
 *   - the products over the packed matrix are, bit for bit, one running
 *     fused multiply-add per column in column order (computed here with
 *     fmaf), for every batch of 1 to 30 tokens and 72 (one token tile,
 *     several, and column blocks), in row blocks of 16 and 32 with a lone
 *     panel and tail rows mixed in: so a row's result is the same at every
 *     batch size;
 *   - a NaN activation makes its own token's outputs NaN and no other's;
 *   - which sets pack: the AVX-512 ones, the float types, 16 rows or more;
 *   - the CPU backend packs a model at load: a tied llama of bf16 dummy
 *     weights has every matrix packed, the LM head shares the embedding's
 *     panels, every row unpacks to the stored bytes, the embedding lookup
 *     gives the stored rows, and the backend's product over the LM head
 *     (with its tail rows) is the in-order sum at 1 and 33 tokens.
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
#include "model/model.h"
#include "packed_model.h"
#include "quant_rows.h"
#include "base/rng.h"
#include "tap.h"
#include "backend/cpu/weight_pack.h"
#include "base/threadpool.h"

#define MAX_T 72

static const cbllm_dtype types[] = {CBLLM_F32, CBLLM_F16, CBLLM_BF16};

/* rows rows of cols elements of dt from Gaussian values, as stored. */
static uint8_t *
MakeRows(cbllm_dtype dt, int64_t rows, int64_t cols, cbllm_rng *r)
{
	float	   *f = malloc(sizeof(float) * rows * cols);
	uint8_t    *b = malloc(cbllm_dtype_row_bytes(dt, cols) * rows);

	for (int64_t i = 0; i < rows * cols; i++)
	{
		f[i] = (float) quant_rows_gauss(r);
		if (dt == CBLLM_F16)
			((uint16_t *) b)[i] = cbllm_f32_to_f16(f[i]);
		else if (dt == CBLLM_BF16)
			((uint16_t *) b)[i] = cbllm_f32_to_bf16(f[i]);
	}
	if (dt == CBLLM_F32)
		memcpy(b, f, sizeof(float) * rows * cols);
	free(f);
	return b;
}

/* Whether element k of every packed row r is at 16k + r of its group, as weight_pack.h says. */
static bool
LayoutAsDocumented(cbllm_dtype dt, const uint8_t *stored, const uint8_t *packed, int64_t rows,
				   int64_t cols)
{
	int64_t		e = (int64_t) cbllm_dtype_row_bytes(dt, 1),
				rb = e * cols;

	for (int64_t g = 0; g < rows / 16; g++)
		for (int r = 0; r < 16; r++)
			for (int64_t k = 0; k < cols; k++)
				if (memcmp(packed + g * 16 * rb + (16 * k + r) * e, stored + (16 * g + r) * rb + k * e,
						   (size_t) e) != 0)
					return false;
	return true;
}

/* y (T, rows): every output the running fused sum over the columns in order. */
static void
InOrder(const cbllm_weight *w, const uint8_t *stored, const float *x, int T, float *y)
{
	float	   *row = malloc(sizeof(float) * w->cols);
	int64_t		rb = (int64_t) cbllm_dtype_row_bytes(w->dtype, w->cols);

	for (int64_t r = 0; r < w->rows; r++)
	{
		cbllm_to_f32(w->dtype, stored + r * rb, row, w->cols);
		for (int t = 0; t < T; t++)
		{
			float		acc = 0.0f;

			for (int64_t k = 0; k < w->cols; k++)
				acc = fmaf(row[k], x[t * w->cols + k], acc);
			y[t * w->rows + r] = acc;
		}
	}
	free(row);
}

/* y (T, rows) through matmul_rows over the packed w in row blocks of step, x arranged by panel_x. */
static void
Run(const cpu_kernels *ks, const cbllm_weight *w, const float *x, int T, int step, float *xp,
	float *y, float *scratch)
{
	int			parts = T < 3 ? T : 3;

	for (int p = 0; p < parts; p++)
		ks->panel_x(x, T, w->cols, p, parts, xp);
	for (int64_t r0 = 0; r0 < w->rows; r0 += step)
		ks->matmul_rows(w, x, T == 1 ? x : xp, T, y, r0, r0 + step < w->rows ? r0 + step : w->rows,
						scratch);
}

/* One kernel set, one type, one shape (rows: some whole panels and a tail). */
static void
TestShape(const cpu_kernels *ks, cbllm_dtype dt, int64_t rows, int64_t cols, cbllm_rng *r)
{
	const char *name = cbllm_dtype_name(dt);
	int64_t		rb = (int64_t) cbllm_dtype_row_bytes(dt, cols),
				whole = rows / 16 * 16;
	uint8_t    *stored = MakeRows(dt, rows, cols, r),
			   *packed = malloc(rows * rb),
			   *tmp = malloc(16 * rb),
			   *row = malloc(rb);
	cbllm_weight wp = {.dtype = dt, .rows = rows, .cols = cols, .data = packed};
	float	   *x = malloc(sizeof(float) * MAX_T * cols),
			   *xp = malloc(sizeof(float) * MAX_T * cols),
			   *ref = malloc(sizeof(float) * MAX_T * rows),
			   *y = malloc(sizeof(float) * MAX_T * rows),
			   *scratch = malloc(sizeof(float) * KERNEL_ROWS_PER_TASK * KERNEL_QLD(cols));
	bool		round = true,
				same = true,
				nan_ok = true;

	memcpy(packed, stored, rows * rb);
	weight_pack_groups(&wp, 0, rows / 16, packed, tmp);
	wp.packed_rows = whole;
	TAP_OK(LayoutAsDocumented(dt, stored, packed, rows, cols),
		   "%s %ld x %ld: every element of the packed rows is where weight_pack.h says", name,
		   (long) rows, (long) cols);
	for (int64_t i = 0; i < rows && round; i++)
		round = memcmp(weight_row(&wp, i, row), stored + i * rb, rb) == 0;
	TAP_OK(round && memcmp(packed + whole * rb, stored + whole * rb, (rows - whole) * rb) == 0,
		   "%s %ld x %ld: each packed row unpacks to its stored bytes; the tail rows are untouched",
		   name, (long) rows, (long) cols);

	for (int64_t i = 0; i < MAX_T * cols; i++)
		x[i] = (float) (quant_rows_gauss(r) * (1 + (i / cols) % 3));
	for (int T = 1; T <= 31 && same; T++)
	{
		int			n = T == 31 ? MAX_T : T;

		InOrder(&wp, stored, x, n, ref);
		Run(ks, &wp, x, n, T % 2 ? 16 : KERNEL_ROWS_PER_TASK, xp, y, scratch);
		same = memcmp(ref, y, sizeof(float) * n * rows) == 0;
		if (!same)
			TAP_DIAG("first difference at %d tokens", n);
	}
	TAP_OK(same, "%s: %s %ld x %ld packed is the in-order fused sum, bit for bit, for 1 to 30 and "
		   "72 tokens, blocks of 16 and 32 rows", ks->isa, name, (long) rows, (long) cols);

	x[2 * cols + 5] = NAN;
	for (int T = 3; T <= 23; T += 20)
	{
		Run(ks, &wp, x, T, KERNEL_ROWS_PER_TASK, xp, y, scratch);
		for (int t = 0; t < T; t++)
			for (int64_t i = 0; i < rows; i++)
				nan_ok = nan_ok && (t == 2 ? isnan(y[t * rows + i]) : isfinite(y[t * rows + i]));
	}
	TAP_OK(nan_ok, "%s: %s packed, a NaN activation makes its own token's outputs NaN and no other's",
		   ks->isa, name);

	free(stored);
	free(packed);
	free(tmp);
	free(row);
	free(x);
	free(xp);
	free(ref);
	free(y);
	free(scratch);
}

/* Which kernel sets take which float matrices packed. */
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
		for (int t = 0; t < 3; t++)
		{
			cbllm_weight w = {.dtype = types[t], .rows = 64, .cols = 100, .data = &byte};

			ok = ok && ks->packs(&w) == avx512 && (ks->panel_x != NULL) == avx512;
			w.rows = 15;
			ok = ok && !ks->packs(&w);
			w.rows = 64;
			w.data = NULL;
			ok = ok && !ks->packs(&w);
		}
		TAP_OK(ok, "%s packs %s", isas[i],
			   avx512 ? "F32, F16 and BF16 matrices of 16 rows or more, of any width" : "no float matrix");
	}
}

/* The CPU backend packs a tied bf16 model at load; rows, embeddings and products come back. */
static void
TestBackendPacks(const char *isa)
{
	fixture_geom g = {.hidden = 96, .layers = 2, .heads = 4, .kv_heads = 2, .inter = 200, .vocab = 405,
	.tie = true};
	packed_model pm;
	cbllm_err	err = {0};
	int			rc = packed_model_open(&pm, "float_pack", isa, &g, NULL, 40, &err);
	cbllm_model *m = pm.m,
			   *s = pm.stored;
	cbllm_backend *be = pm.be;

	TAP_OK(rc == CBLLM_OK && m->lm_head_tied && m->embed.dtype == CBLLM_BF16,
		   "%s: the tied llama of bf16 dummy weights loads and packs (%s)", isa, rc ? err.msg : "ok");
	if (rc == CBLLM_OK)
	{
		pack_walk	pw = packed_model_walk(&pm);

		TAP_OK(pw.matrices == 1 + 7 * 2 && pw.packed == pw.matrices && pw.rows_back == pw.matrices &&
			   m->lm_head.packed_rows == 400 && m->embed.packed_rows == 400 &&
			   m->lm_head.data == m->embed.data,
			   "%s: all %d matrices of the tied model are packed (%d), the LM head as its embedding "
			   "(400 of 405 rows, 5 as stored), and every row unpacks to the stored bytes (%d)",
			   isa, pw.matrices, pw.packed, pw.rows_back);
		TAP_OK(packed_model_embed_matches(&pm), "%s: the embedding lookup of the packed embedding gives the stored rows", isa);

		/* the backend's matmul over the packed LM head: the in-order sums, at 1 and 33 tokens */
		{
			cbllm_rng	r;
			float	   *xs = malloc(sizeof(float) * 33 * 96),
					   *y = malloc(sizeof(float) * 33 * 405),
					   *ref = malloc(sizeof(float) * 33 * 405);
			bool		exact = true;

			rng_seed(&r, 11);
			for (int i = 0; i < 33 * 96; i++)
				xs[i] = (float) quant_rows_gauss(&r);
			for (int T = 1; T <= 33; T += 32)
			{
				be->matmul(be, 1, (const cbllm_weight *[]) {&m->lm_head}, xs, T, (float *[]) {y});
				InOrder(&s->embed, s->embed.data, xs, T, ref);
				exact = exact && memcmp(y, ref, sizeof(float) * T * 405) == 0;
			}
			TAP_OK(exact, "%s: the backend's product over the packed LM head (and its 5 tail rows) is "
				   "the in-order fused sum, at 1 and 33 tokens", isa);
			free(xs);
			free(y);
			free(ref);
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
	rng_seed(&r, 700 + i);
	for (int t = 0; t < 3; t++)
	{
		TestShape(ks, types[t], 37, 100, &r);	/* a pair, a tail of 5; columns past a vector */
		TestShape(ks, types[t], 53, 300, &r);	/* a pair, a lone panel, a tail; two column blocks */
		TestShape(ks, types[t], 64, 512, &r);	/* pairs only */
	}
}

int
main(void)
{
	TestWhoPacks();
	packed_model_for_sets(OnSet);
	return tap_done();
}
