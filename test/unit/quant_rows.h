/*
 * quant_rows.h: rows of the GGUF block types for the kernel tests: random
 * bytes (every code and scale pattern a block can hold) with finite f16
 * scales (MXFP4: exponents of moderate factors), or Gaussian rows through
 * the engine's quantizers.
 */
#ifndef CBLLM_TEST_QUANT_ROWS_H
#define CBLLM_TEST_QUANT_ROWS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "dtype/dtype.h"
#include "dtype/kquant_layout.h"
#include "dtype/quantize.h"
#include "tap.h"

/* A standard Gaussian value (Box-Muller). */
static inline double
quant_rows_gauss(cbllm_rng *r)
{
	double		u = rng_uniform(r),
				v = rng_uniform(r);

	return sqrt(-2.0 * log(u > 1e-300 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

/* The byte offsets of the f16 fields (scales, offsets) in a block of dt; the count (MXFP4: none). */
static inline int
quant_rows_f16_fields(cbllm_dtype dt, int off[2])
{
	const kquant_layout *l = cbllm_kquant_layout(dt);

	if (l != NULL)
	{
		off[0] = l->d_off;
		off[1] = l->dmin_off;
		return l->dmin_off >= 0 ? 2 : 1;
	}
	off[0] = 0;
	off[1] = 2;
	return dt == CBLLM_MXFP4 ? 0 : dt == CBLLM_Q4_1 || dt == CBLLM_Q5_1 ? 2 : 1;
}

/* rows x cols of dt (malloc'd): random bytes with finite f16 scales, or quantized Gaussian rows. */
static inline void *
quant_rows_make(cbllm_dtype dt, int rows, int64_t cols, bool random_bytes, cbllm_rng *r)
{
	const cbllm_dtype_traits *t = cbllm_dtype_traits_of(dt);
	size_t		rb = cbllm_dtype_row_bytes(dt, cols);
	uint8_t    *w = malloc(rb * rows);
	float	   *row = malloc(sizeof(float) * cols);
	cbllm_err	err;

	for (int i = 0; i < rows; i++)
	{
		uint8_t    *wr = w + rb * i;

		if (random_bytes)
		{
			int			off[2],
						n = quant_rows_f16_fields(dt, off);

			for (size_t b = 0; b < rb; b++)
				wr[b] = (uint8_t) rng_next(r);
			for (int64_t b = 0; b < cols / t->block_elems; b++)
				for (int f = 0; f < n; f++)
				{
					uint16_t	h = cbllm_f32_to_f16((float) (quant_rows_gauss(r) * 0.01));

					memcpy(wr + b * t->block_bytes + off[f], &h, 2);
				}
			/* MXFP4's exponent byte: factors 2^-12 .. 2^11, so that no product overflows or is subnormal */
			for (int64_t b = 0; b < cols / t->block_elems && dt == CBLLM_MXFP4; b++)
				wr[b * t->block_bytes] = (uint8_t) (116 + rng_next(r) % 24);
			continue;
		}
		for (int64_t k = 0; k < cols; k++)
			row[k] = (float) quant_rows_gauss(r);
		if (cbllm_quantize_row(dt, row, wr, cols, &err) != CBLLM_OK)
			TAP_DIAG("quantize_row: %s", err.msg);
	}
	free(row);
	return w;
}

/* Room for T tokens' quantized activations of width ld (a scale per blk). */
static inline cpu_qx
quant_rows_qx_alloc(int64_t ld, int T, int blk)
{
	cpu_qx		qx = {.ld = ld, .blk = blk, .q = malloc(ld * T), .s = malloc(sizeof(float) * ld / 4 * T),
		.sum16 = malloc(sizeof(float) * ld / 16 * T), .isum16 = malloc(sizeof(int16_t) * ld / 16 * T),
	.d = malloc(sizeof(float) * ld / 32 * T)};

	return qx;
}

static inline void
quant_rows_qx_free(cpu_qx *qx)
{
	free(qx->q);
	free(qx->s);
	free(qx->sum16);
	free(qx->isum16);
	free(qx->d);
}

#endif
