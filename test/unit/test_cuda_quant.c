/*
 * test_cuda_quant.c: the GPU's kernels over GGUF block-quantized weights
 * (cuda_quant.cu, and the embedding of a quantized table in cuda_ops.cu),
 * every type whose row says CBLLM_CUDA_QUANT, against the engine's reference
 * dequantizer (the table's to_f32).
 *
 * Rows are random bytes with finite f16 scales (every code and scale
 * pattern: Q8_0's -128, Q3_K's negative scales, Q6_K's int8 ones) and
 * Gaussian rows through the engine's quantizers.  For each type:
 *   - dequantization to F32 is to_f32's bit for bit, to BF16 its rounding;
 *   - an embedding lookup gives exactly the dequantized rows;
 *   - the fused decode product, for 1 to CUDA_QMATVEC_MAX_T tokens, is within
 *     1e-5 of sum |w| |x| of the float64 dot of the dequantized row, writes
 *     every output, and gives a token the same bits whatever the batch;
 *   - the tiled product (bf16 tiles through cuBLAS) for 9 and 33 tokens, in
 *     tiles that leave a partial last one, is within 1e-5 of the float64 dot
 *     of the bf16-rounded row and activations;
 *   - malformed calls (a partial block, a float type, too many tokens for
 *     the fused kernel, a tile smaller than a row) are refused by name.
 *
 * Built twice, as test_cuda_ops is: on a GPU (test/gpu/check.sh) and on the
 * CPU emulator of CUDA in CI.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_dtype_traits.h"
#include "base/numeric.h"
#include "dtype/dtype.h"
#include "quant_rows.h"
#include "base/rng.h"
#include "device_buf.h"
#include "tap.h"

#define ROWS 13
#define COLS 512				/* two K-quant blocks, sixteen of 32 */
#define TILE_ROWS 5				/* the tiled product's tile: 13 rows are 5 + 5 + 3 */
#define MAX_T 33

/* A device buffer of n floats, all NaN, so an output never written shows. */
static float *
NanBuffer(size_t n)
{
	float	   *h = malloc(sizeof(float) * n);
	float	   *d;

	for (size_t i = 0; i < n; i++)
		h[i] = NAN;
	d = UpBytes(h, sizeof(float) * n);
	free(h);
	return d;
}

static float *
Down(const void *d, size_t bytes)
{
	float	   *h = malloc(bytes);

	cuda_download(h, d, bytes, NULL);
	return h;
}

static float
Bf16Round(float f)
{
	return cbllm_bf16_to_f32(cbllm_f32_to_bf16(f));
}

/*
 * Whether y (T, ROWS) is, within 1e-5 of sum |w| |x| per output, the float64
 * product of w (ROWS, COLS) and x (T, COLS), both rounded to bf16 when bf16;
 * *worst gets the largest error in those units.
 */
static bool
MatchesProduct(const float *w, const float *x, int T, const float *y, bool bf16, double *worst)
{
	*worst = 0;
	for (int t = 0; t < T; t++)
		for (int r = 0; r < ROWS; r++)
		{
			double		sum = 0,
						mag = 0;

			for (int k = 0; k < COLS; k++)
			{
				double		a = bf16 ? Bf16Round(w[r * COLS + k]) : w[r * COLS + k],
							b = bf16 ? Bf16Round(x[t * COLS + k]) : x[t * COLS + k];

				sum += a * b;
				mag += fabs(a * b);
			}
			if (!(fabs(y[t * ROWS + r] - sum) <= 1e-5 * mag))
			{
				*worst = INFINITY;
				return false;
			}
			if (mag > 0 && fabs(y[t * ROWS + r] - sum) / mag > *worst)
				*worst = fabs(y[t * ROWS + r] - sum) / mag;
		}
	return true;
}

/* Dequantization and embedding of the rows at h (dequantized by to_f32 into ref). */
static void
TestDequant(cbllm_dtype dt, const void *dw, const float *ref, const char *kind)
{
	size_t		n = (size_t) ROWS * COLS;
	float	   *d32 = NanBuffer(n),
			   *d16 = NanBuffer(n),
			   *de = NanBuffer(3 * COLS),
			   *got;
	uint16_t   *got16;
	int32_t		tokens[3] = {ROWS - 1, 0, 5};
	int32_t    *dtok = UpBytes(tokens, sizeof(tokens));
	cbllm_err	err = {{0}};
	int			rc = cuda_dequant(dw, dt, (int64_t) n, CBLLM_F32, d32, NULL, &err);
	bool		same = true;

	got = Down(d32, sizeof(float) * n);
	TAP_OK(rc == CBLLM_OK && memcmp(got, ref, sizeof(float) * n) == 0,
		   "%s %s: dequantized to F32 on the device, bit for bit the reference's%s%s",
		   cbllm_dtype_name(dt), kind, rc ? ": " : "", rc ? err.msg : "");
	free(got);
	rc = cuda_dequant(dw, dt, (int64_t) n, CBLLM_BF16, d16, NULL, &err);
	got16 = (uint16_t *) Down(d16, sizeof(uint16_t) * n);
	for (size_t i = 0; i < n && rc == CBLLM_OK; i++)
		same = same && got16[i] == cbllm_f32_to_bf16(ref[i]);
	TAP_OK(rc == CBLLM_OK && same, "%s %s: dequantized to BF16, the reference rounded to nearest even",
		   cbllm_dtype_name(dt), kind);
	free(got16);
	rc = cuda_embed(dw, dt, COLS, dtok, 3, de, NULL, &err);
	got = Down(de, sizeof(float) * 3 * COLS);
	same = rc == CBLLM_OK;
	for (int t = 0; t < 3 && same; t++)
		same = memcmp(got + t * COLS, ref + (size_t) tokens[t] * COLS, sizeof(float) * COLS) == 0;
	TAP_OK(same, "%s %s: an embedding lookup gives exactly the dequantized rows%s%s",
		   cbllm_dtype_name(dt), kind, rc ? ": " : "", rc ? err.msg : "");
	free(got);
	cuda_free(d32), cuda_free(d16), cuda_free(de), cuda_free(dtok);
}

/* The fused product for every T it takes, and batch invariance across them. */
static void
TestMatvec(cbllm_dtype dt, const void *dw, const float *ref, const float *x, const float *dx,
		   const char *kind)
{
	float	   *alone = NULL;
	bool		all_ok = true,
				invariant = true;
	double		worst_all = 0;
	cbllm_err	err = {{0}};

	for (int T = 1; T <= CUDA_QMATVEC_MAX_T; T++)
	{
		float	   *dy = NanBuffer((size_t) T * ROWS),
				   *y;
		int			rc = cuda_qmatvec(dw, dt, ROWS, COLS, dx, T, dy, NULL, &err);
		double		worst = 0;

		if (rc == CBLLM_OK)
			rc = cuda_stream_sync(NULL, &err);
		y = Down(dy, sizeof(float) * T * ROWS);
		if (rc != CBLLM_OK || !MatchesProduct(ref, x, T, y, false, &worst))
		{
			TAP_DIAG("%s %s: %d tokens: %s", cbllm_dtype_name(dt), kind, T,
					 rc ? err.msg : "an output is off (or never written)");
			all_ok = false;
		}
		worst_all = worst > worst_all ? worst : worst_all;
		if (T == 1)
			alone = y;
		else
		{
			invariant = invariant && alone != NULL && memcmp(alone, y, sizeof(float) * ROWS) == 0;
			free(y);
		}
		cuda_free(dy);
	}
	TAP_OK(all_ok, "%s %s: the fused product of 1 to %d tokens is the float64 dot of the dequantized rows (worst %.2g of sum |w||x| <= 1e-5)",
		   cbllm_dtype_name(dt), kind, CUDA_QMATVEC_MAX_T, worst_all);
	TAP_OK(invariant, "%s %s: a token's fused products are the same bits alone and among up to %d",
		   cbllm_dtype_name(dt), kind, CUDA_QMATVEC_MAX_T);
	free(alone);
}

/* The tiled product through cuBLAS for batches above the fused kernel's. */
static void
TestTiled(cbllm_dtype dt, const void *dw, const float *ref, const float *x, const float *dx,
		  void *blas, const char *kind)
{
	static const int Ts[] = {CUDA_QMATVEC_MAX_T + 1, MAX_T};
	void	   *dxh = NULL,
			   *dtile = NULL;
	cbllm_err	err = {{0}};

	cuda_alloc(&dxh, sizeof(uint16_t) * MAX_T * COLS, NULL);
	cuda_alloc(&dtile, sizeof(uint16_t) * TILE_ROWS * COLS, NULL);
	for (int i = 0; i < (int) (sizeof(Ts) / sizeof(Ts[0])); i++)
	{
		int			T = Ts[i];
		float	   *dy = NanBuffer((size_t) T * ROWS),
				   *y;
		int			rc = cuda_to_half(dx, (int64_t) T * COLS, CBLLM_BF16, dxh, NULL, &err);
		double		worst = 0;
		bool		ok;

		if (rc == CBLLM_OK)
			rc = cuda_qmatmul_tiled(blas, dw, dt, ROWS, COLS, dxh, T, dtile,
									(int64_t) TILE_ROWS * COLS + COLS / 2, dy, NULL, &err);
		if (rc == CBLLM_OK)
			rc = cuda_stream_sync(NULL, &err);
		y = Down(dy, sizeof(float) * T * ROWS);
		ok = rc == CBLLM_OK && MatchesProduct(ref, x, T, y, true, &worst);
		TAP_OK(ok, "%s %s: the tiled product of %d tokens, tiles of %d rows, is the float64 dot of the bf16-rounded rows and activations (worst %.2g <= 1e-5)%s%s",
			   cbllm_dtype_name(dt), kind, T, TILE_ROWS, worst, rc ? ": " : "", rc ? err.msg : "");
		free(y);
		cuda_free(dy);
	}
	cuda_free(dxh), cuda_free(dtile);
}

static void
TestType(cbllm_dtype dt, bool random_bytes, void *blas, cbllm_rng *r)
{
	const char *kind = random_bytes ? "random blocks" : "quantized rows";
	size_t		rb = cbllm_dtype_row_bytes(dt, COLS);
	uint8_t    *h = quant_rows_make(dt, ROWS, COLS, random_bytes, r);
	float	   *ref = malloc(sizeof(float) * ROWS * COLS),
			   *x = malloc(sizeof(float) * MAX_T * COLS);
	void	   *dw = UpBytes(h, rb * ROWS);
	float	   *dx;

	cbllm_to_f32(dt, h, ref, (int64_t) ROWS * COLS);
	for (int i = 0; i < MAX_T * COLS; i++)
		x[i] = (float) quant_rows_gauss(r);
	dx = UpBytes(x, sizeof(float) * MAX_T * COLS);
	TestDequant(dt, dw, ref, kind);
	TestMatvec(dt, dw, ref, x, dx, kind);
	TestTiled(dt, dw, ref, x, dx, blas, kind);
	free(h), free(ref), free(x);
	cuda_free(dw), cuda_free(dx);
}

/* Calls the kernels cannot serve are refused, naming the cause. */
static void
TestRefusals(void *blas)
{
	void	   *dw = NULL,
			   *dtile = NULL;
	float	   *dx = NanBuffer(16 * 256),
			   *dy = NanBuffer(16 * 256);
	cbllm_err	err = {{0}};
	int			rc;

	cuda_alloc(&dw, 4096, NULL);
	cuda_alloc(&dtile, 4096, NULL);
	rc = cuda_qmatvec(dw, CBLLM_Q4_K, 2, 255, dx, 1, dy, NULL, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "not whole Q4_K blocks of 256") != NULL,
		   "a Q4_K row of 255 elements is refused: %s", err.msg);
	rc = cuda_qmatvec(dw, CBLLM_BF16, 2, 256, dx, 1, dy, NULL, &err);
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "BF16 is not a block type") != NULL,
		   "a float type is refused by the block kernels: %s", err.msg);
	rc = cuda_qmatvec(dw, CBLLM_Q8_0, 2, 256, dx, CUDA_QMATVEC_MAX_T + 1, dy, NULL, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "at most") != NULL,
		   "the fused kernel refuses %d tokens: %s", CUDA_QMATVEC_MAX_T + 1, err.msg);
	rc = cuda_qmatmul_tiled(blas, dw, CBLLM_Q8_0, 2, 256, dx, 9, dtile, 255, dy, NULL, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "holds no row") != NULL,
		   "a tile smaller than a row is refused: %s", err.msg);
	rc = cuda_dequant(dw, CBLLM_Q6_K, 256, CBLLM_F16, dtile, NULL, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "F32 or BF16") != NULL,
		   "dequantization into F16 is refused: %s", err.msg);
	cuda_free(dw), cuda_free(dtile), cuda_free(dx), cuda_free(dy);
}

int
main(void)
{
	char		dev[300];
	void	   *blas = NULL;
	cbllm_rng	r;
	cbllm_err	err = {{0}};
	int			n_types = 0;

	if (cuda_device_count() == 0)
	{
		printf("1..0 # SKIP no CUDA device here: the quantized kernel checks need one (test/gpu/check.sh runs them; test_cuda_quant_emu runs them on the CPU emulator)\n");
		return 0;
	}
	cuda_device_describe(dev, sizeof(dev));
	TAP_DIAG("device: %s", dev);
	rng_seed(&r, 2024);
	if (cuda_blas_create(&blas, &err) != CBLLM_OK)
	{
		TAP_OK(false, "a cuBLAS handle: %s", err.msg);
		return tap_done();
	}
	for (int d = 0; d < CBLLM_DTYPE_COUNT; d++)
		if (cuda_dtype_traits_of((cbllm_dtype) d)->path == CBLLM_CUDA_QUANT)
		{
			TestType((cbllm_dtype) d, true, blas, &r);
			TestType((cbllm_dtype) d, false, blas, &r);
			n_types++;
		}
	TAP_OK(n_types == 11, "the eleven GGUF block types run on the GPU (%d have a CBLLM_CUDA_QUANT row)",
		   n_types);
	TestRefusals(blas);
	cuda_blas_destroy(blas);
	return tap_done();
}
