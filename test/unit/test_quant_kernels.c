/*
 * test_quant_kernels.c: the CPU's products over block-quantized weights
 * (kernels_quant.inc), every type whose row says the CPU reads it, on every
 * kernel set this CPU runs.
 *
 * Weights are random bytes (every code and scale pattern the format can
 * hold: Q8_0's -128, Q3_K's negative scales, Q6_K's int8 ones) with their
 * f16 scales set to finite values, and rows quantized from Gaussian values
 * by cbllm_quantize_row.  For each:
 *   - quantize_x's codes dequantize to within half a step of each activation,
 *     with a scale per 256 exactly where AVX-512's integer K-quant products
 *     take them (Q4_K, Q5_K, Q6_K rows of whole 256s), else per 32;
 *   - each output is, within 1e-5 of the sum of |w| |x^|, the float64 dot
 *     of the row's reference dequantization (the table's to_f32) with the
 *     dequantized activations x^, so the unpacking of every code, scale and
 *     offset is the format's;
 *   - batch invariance: a token's outputs are bit-identical alone and in a
 *     batch of 72 and in batches of 3, 7, 8 and 13 (on AVX-512 the fused
 *     products alone, the unpacked ones in the batch; the integer K-quant
 *     products a row at a time at every batch, the Q8_0 and Q4_0 ones a row
 *     at a time alone and, with VNNI, repacked sixteen rows at a time from 9
 *     tokens; MXFP4's likewise for rows of whole 32s, its last group of 8
 *     blocks short in widths 288 and 320), and whatever the row blocks the work is split into (rows as
 *     stored: test_weight_pack checks the K-quants packed at load);
 *   - avx512 and avx512vnni (vpmaddubsw against vpdpbusd) give the same bits;
 *   - a NaN activation gives NaN outputs for its token only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/cpu_dtype_traits.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "dtype/dtype.h"
#include "dtype/dtype_quant.h"
#include "dtype/kquant_layout.h"
#include "dtype/quantize.h"
#include "quant_rows.h"
#include "tap.h"

#define ROWS 37
#define MAX_T 72				/* above kernels_quant.inc's QFUSED_MAX_T: both paths */

/* The kernels' activations for T tokens of x (T, cols) for the products over w, in the block they want. */
static void
Quantize(const cpu_kernels *ks, const cbllm_weight *w, const float *x, int T, int64_t cols, cpu_qx *qx)
{
	qx->T = T;
	qx->ld = KERNEL_QLD(cols);
	qx->blk = ks->qx_block(w);
	for (int t = 0; t < T; t++)
		ks->quantize_x(x + t * cols, cols, 0, cols, t, qx);
}

/* y (T, ROWS) through qmatmul_rows in blocks of at most step rows. */
static void
Run(const cpu_kernels *ks, const cbllm_weight *w, const cpu_qx *qx, int step, float *y, float *scratch)
{
	for (int64_t r0 = 0; r0 < w->rows; r0 += step)
		ks->qmatmul_rows(w, qx, y, r0, r0 + step < w->rows ? r0 + step : w->rows, scratch);
}

/* Whether every output is the float64 dot of the dequantized row and x^; the worst error into *worst. */
static bool
MatchesReference(const cbllm_weight *w, const cpu_qx *qx, const float *y, double *worst)
{
	int64_t		K = w->cols;
	size_t		rb = cbllm_dtype_row_bytes(w->dtype, K);
	float	   *row = malloc(sizeof(float) * K);
	bool		ok = true;

	*worst = 0;
	for (int64_t r = 0; r < w->rows; r++)
	{
		cbllm_to_f32(w->dtype, (const char *) w->data + r * rb, row, K);
		for (int t = 0; t < qx->T; t++)
		{
			double		s = 0,
						mag = 0;

			for (int64_t k = 0; k < K; k++)
			{
				double		xh = (double) qx->s[t * qx->ld / 4 + k / 4] * qx->q[t * qx->ld + k];

				s += (double) row[k] * xh;
				mag += fabs((double) row[k] * xh);
			}
			{
				double		e = fabs(y[t * w->rows + r] - s) / (mag > 0 ? mag : 1);

				*worst = e > *worst ? e : *worst;
				ok = ok && e <= 1e-5;
			}
		}
	}
	free(row);
	return ok;
}

/* One kernel set, one type, one width: reference, batch invariance, NaN. */
static void
TestShape(const cpu_kernels *ks, cbllm_dtype dt, int64_t cols, bool random_bytes, cbllm_rng *r)
{
	const char *name = cbllm_dtype_name(dt);
	int64_t		ld = KERNEL_QLD(cols);
	cbllm_weight w = {.dtype = dt, .rows = ROWS, .cols = cols};
	float	   *x = malloc(sizeof(float) * MAX_T * cols);
	float	   *y = malloc(sizeof(float) * MAX_T * ROWS);
	float	   *y1 = malloc(sizeof(float) * ROWS);
	float	   *scratch = malloc(sizeof(float) * KERNEL_ROWS_PER_TASK * ld);
	cpu_qx		qx = quant_rows_qx_alloc(ld, MAX_T, 32);
	cpu_qx		q1 = quant_rows_qx_alloc(ld, 1, 32);
	double		worst,
				step_err = 0;
	bool		same = true,
				nan_ok = true;
	const char *src = random_bytes ? "random bytes" : "quantized rows";

	w.data = quant_rows_make(dt, ROWS, cols, random_bytes, r);
	for (int64_t i = 0; i < MAX_T * cols; i++)
		x[i] = (float) (quant_rows_gauss(r) * (1 + (i / cols) % 3));
	Quantize(ks, &w, x, MAX_T, cols, &qx);
	for (int t = 0; t < MAX_T; t++)
		for (int64_t k = 0; k < cols; k++)
		{
			float		d = qx.s[t * ld / 4 + k / 4];
			double		e = fabs(x[t * cols + k] - (double) d * qx.q[t * ld + k]) / d;

			step_err = e > step_err ? e : step_err;
		}
	TAP_OK(step_err <= 0.5 + 1e-5, "%s: %s x %ld activations quantize within half a step, a scale per %d (%.4f)",
		   ks->isa, name, (long) cols, qx.blk, step_err);
	/* the integer products over whole 256s: AVX-512's, for Q4_K, Q5_K and Q6_K */
	{
		bool		ints = strncmp(ks->isa, "avx512", 6) == 0 && cols % 256 == 0 &&
			(dt == CBLLM_Q4_K || dt == CBLLM_Q5_K || dt == CBLLM_Q6_K);

		TAP_OK(qx.blk == (ints ? 256 : 32), "%s: %s x %ld takes activations with a scale per %d (%d)",
			   ks->isa, name, (long) cols, ints ? 256 : 32, qx.blk);
	}

	Run(ks, &w, &qx, KERNEL_ROWS_PER_TASK, y, scratch);
	TAP_OK(MatchesReference(&w, &qx, y, &worst),
		   "%s: %s (%s), %d x %ld times %d tokens is the float64 dot of the dequantized rows (worst %.2g)",
		   ks->isa, name, src, ROWS, (long) cols, MAX_T, worst);

	for (int t = 0; t < MAX_T && same; t++)
	{
		Quantize(ks, &w, x + t * cols, 1, cols, &q1);
		Run(ks, &w, &q1, t % 2 ? 5 : KERNEL_ROWS_PER_TASK, y1, scratch);
		same = memcmp(y1, y + t * ROWS, sizeof(float) * ROWS) == 0;
	}
	TAP_OK(same, "%s: %s x %ld, each token alone (in blocks of 5 or 32 rows) gives the bits it gives in a batch of %d",
		   ks->isa, name, (long) cols, MAX_T);
	/* batches on either side of the switch to AVX512-VNNI's repacked Q8_0 and Q4_0 products (8 tokens), with tails */
	for (int bi = 0; bi < 4 && same; bi++)
	{
		int			nb = (int[]) {3, 7, 8, 13}[bi];

		Quantize(ks, &w, x, nb, cols, &qx);
		Run(ks, &w, &qx, KERNEL_ROWS_PER_TASK, y, scratch);
		for (int t = 0; t < nb && same; t++)
		{
			Quantize(ks, &w, x + t * cols, 1, cols, &q1);
			Run(ks, &w, &q1, KERNEL_ROWS_PER_TASK, y1, scratch);
			same = memcmp(y1, y + t * ROWS, sizeof(float) * ROWS) == 0;
		}
	}
	TAP_OK(same, "%s: %s x %ld, each token of batches of 3, 7, 8 and 13 gives the bits it gives alone",
		   ks->isa, name, (long) cols);

	x[3 * cols + 1] = NAN;
	for (int nb = 5; nb <= 13; nb += 8)	/* both sides of the switch to the repacked products */
	{
		Quantize(ks, &w, x, nb, cols, &qx);
		Run(ks, &w, &qx, KERNEL_ROWS_PER_TASK, y, scratch);
		for (int t = 0; t < nb; t++)
			for (int i = 0; i < ROWS; i++)
				nan_ok = nan_ok && (t == 3 ? isnan(y[t * ROWS + i]) : isfinite(y[t * ROWS + i]));
	}
	TAP_OK(nan_ok, "%s: %s, a NaN activation makes its own token's outputs NaN and no other's (batches of 5 and 13)",
		   ks->isa, name);

	free((void *) w.data);
	free(x);
	free(y);
	free(y1);
	free(scratch);
	quant_rows_qx_free(&qx);
	quant_rows_qx_free(&q1);
}

/* avx512 and avx512vnni give the same bits on every type. */
static void
TestVnniAgrees(const cpu_kernels *a, const cpu_kernels *b)
{
	cbllm_rng	r;
	bool		same = true;

	rng_seed(&r, 7);
	for (int d = 0; d < CBLLM_DTYPE_COUNT; d++)
	{
		cbllm_dtype dt = (cbllm_dtype) d;
		const cbllm_dtype_traits *t = cbllm_dtype_traits_of(dt);
		int64_t		cols = 2 * 256,
					ld = KERNEL_QLD(cols);
		cbllm_weight w = {.dtype = dt, .rows = ROWS, .cols = cols};
		float		x[8 * 512],
					ya[8 * ROWS],
					yb[8 * ROWS];
		float	   *scratch;
		cpu_qx		qx;

		if (cpu_dtype_traits_of(dt)->path == CBLLM_CPU_NONE || t->block_elems == 1)
			continue;
		qx = quant_rows_qx_alloc(ld, 8, 32);
		scratch = malloc(sizeof(float) * KERNEL_ROWS_PER_TASK * ld);
		w.data = quant_rows_make(dt, ROWS, cols, true, &r);
		for (int i = 0; i < 8 * 512; i++)
			x[i] = (float) quant_rows_gauss(&r);
		Quantize(a, &w, x, 8, cols, &qx);
		Run(a, &w, &qx, KERNEL_ROWS_PER_TASK, ya, scratch);
		Run(b, &w, &qx, KERNEL_ROWS_PER_TASK, yb, scratch);
		same = same && memcmp(ya, yb, sizeof(ya)) == 0;
		free((void *) w.data);
		free(scratch);
		quant_rows_qx_free(&qx);
	}
	TAP_OK(same, "avx512 and avx512vnni give the same bits on every block-quantized type");
}

/* Whether two activation quantizations of T tokens hold the same bytes. */
static bool
QxSame(const cpu_qx *a, const cpu_qx *b, int T)
{
	int64_t		ld = a->ld;

	return memcmp(a->q, b->q, ld * T) == 0 && memcmp(a->s, b->s, sizeof(float) * ld / 4 * T) == 0 &&
		memcmp(a->sum16, b->sum16, sizeof(float) * ld / 16 * T) == 0 &&
		memcmp(a->isum16, b->isum16, sizeof(int16_t) * ld / 16 * T) == 0 &&
		memcmp(a->d, b->d, sizeof(float) * ld / 32 * T) == 0;
}

/*
 * quantize_x of set ks gives the generic set's bytes (its vector code the
 * plain code's rounding), and quantizing a token a block at a time, last
 * block first, gives the bytes of one call over the row: per 32 and per 256.
 */
static void
TestQuantizeAgrees(const cpu_kernels *ks)
{
	const cpu_kernels *g = cpu_kernels_select("generic");
	int64_t		cols = 1280,
				ld = KERNEL_QLD(cols);
	float	   *x = malloc(sizeof(float) * 3 * cols);
	cbllm_rng	r;

	rng_seed(&r, 11);
	for (int64_t i = 0; i < 3 * cols; i++)
		x[i] = (float) (quant_rows_gauss(&r) * (i % 7 == 0 ? 40.0 : 1.0));
	for (int blk = 32; blk <= 256; blk *= 8)
	{
		cpu_qx		a = quant_rows_qx_alloc(ld, 3, 32),
					b = quant_rows_qx_alloc(ld, 3, 32),
					c = quant_rows_qx_alloc(ld, 3, 32);

		a.T = b.T = c.T = 3;
		a.blk = b.blk = c.blk = blk;
		memset(x + 2 * cols, 0, sizeof(float) * blk);	/* an all-zero block: scale 0 */
		for (int t = 0; t < 3; t++)
		{
			g->quantize_x(x + t * cols, cols, 0, cols, t, &a);
			ks->quantize_x(x + t * cols, cols, 0, cols, t, &b);
			for (int64_t e = cols - blk; e >= 0; e -= blk)
				ks->quantize_x(x + t * cols, cols, e, e + blk, t, &c);
		}
		TAP_OK(QxSame(&a, &b, 3), "%s: activations quantized per %d give the generic set's bytes", ks->isa, blk);
		TAP_OK(QxSame(&b, &c, 3), "%s: activations quantized per %d a block at a time, last first, give one call's bytes",
			   ks->isa, blk);
		quant_rows_qx_free(&a);
		quant_rows_qx_free(&b);
		quant_rows_qx_free(&c);
	}
	free(x);
}

int
main(void)
{
	const char *isas[] = {"generic", "avx2", "avx512", "avx512vnni"};
	int			n_types = 0;

	for (int i = 0; i < 4; i++)
	{
		const cpu_kernels *ks = cpu_kernels_select(isas[i]);
		cbllm_rng	r;

		if (ks == NULL)
		{
			TAP_DIAG("this CPU has no %s: its quantized kernels are not run", isas[i]);
			continue;
		}
		rng_seed(&r, 1000 + i);
		TestQuantizeAgrees(ks);
		n_types = 0;
		for (int d = 0; d < CBLLM_DTYPE_COUNT; d++)
		{
			cbllm_dtype dt = (cbllm_dtype) d;
			const cbllm_dtype_traits *t = cbllm_dtype_traits_of(dt);

			if (cpu_dtype_traits_of(dt)->path == CBLLM_CPU_NONE || t->block_elems == 1)
				continue;
			n_types++;
			if (t->block_elems == 32)
			{
				/* one block, a width whose last 64-step is half empty, and 9 blocks */
				TestShape(ks, dt, 32, true, &r);
				TestShape(ks, dt, 96, true, &r);
				TestShape(ks, dt, 288, false, &r);
				TestShape(ks, dt, 512, true, &r);	/* whole 256s: AVX-512's fused path */
				/* a 256 and a short group of two blocks (gpt-oss's 2880 is eleven and 64): MXFP4's integer path */
				TestShape(ks, dt, 320, true, &r);
			}
			else
			{
				TestShape(ks, dt, 256, true, &r);
				TestShape(ks, dt, 768, false, &r);
			}
		}
	}
	TAP_OK(n_types == 11, "the CPU reads all eleven block-quantized types (%d)", n_types);
	if (cpu_kernels_select("avx512vnni") != NULL)
		TestVnniAgrees(cpu_kernels_select("avx512"), cpu_kernels_select("avx512vnni"));
	else
		TAP_DIAG("this CPU has no avx512vnni: it is not compared with avx512");
	return tap_done();
}
