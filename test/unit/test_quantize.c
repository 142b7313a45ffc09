/*
 * test_quantize.c: the engine's quantizers (src/dtype/quantize.c), every type the
 * weight-type table can produce.
 *
 * For each: (a) Gaussian rows quantized and dequantized through the table's
 * to_f32 stay within the type's relative RMS error bound (quality_rows below
 * says how each bound was set); (b) the bytes equal, bit for bit, those of
 * test/tools/quant.py's quantizer on the same rows (quant.py --out DIR writes
 * NAME.x and NAME.xq), the two following one algorithm; (c) a zero row, a
 * constant row and a row with one huge outlier come back as they should, and
 * NaN, infinite, too large inputs (MXFP4 takes any finite one), partial
 * blocks and types without a quantizer are refused with CBLLM_ERR_INVALID.  Also numeric.h's
 * cbllm_f32_to_f16, which rounds every scale.
 *
 *   test_quantize DIR [--time]   --time also times a 4096 x 4096 matrix to Q4_K and Q8_0
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checks.h"
#include "base/numeric.h"
#include "base/rng.h"
#include "dtype/dtype.h"
#include "dtype/quantize.h"
#include "tap.h"
#include "base/util.h"

/*
 * Each producible type and the relative RMS error it may leave on rows of
 * standard Gaussian values.  Measured over these 64 rows of 4096 (quant.py's
 * quantizer gives the same bytes): Q8_0 0.0048, Q4_0 0.0808, Q4_1 0.0696,
 * Q5_0 0.0399, Q5_1 0.0333, Q2_K 0.2694, Q3_K 0.1435, Q4_K 0.0710, Q5_K
 * 0.0355, Q6_K 0.0169, MXFP4 0.1117, near the uniform-rounding estimate
 * step / sqrt(12) over each block's range.  Each bound is about 10% above
 * its measurement: room for compilers and libm's log and cos, none for a
 * quantizer that loses a bit (doubling the error) or whose search stops
 * helping: rounding the format's reference way instead was 6-12% worse on
 * the 32-element types (Q8_0 0.0053, Q4_0 0.0858, Q4_1 0.0782, Q5_0 0.0426,
 * Q5_1 0.0377), the K-quants with the one trial N' = N alone 4-9% worse
 * (Q2_K 0.286, Q3_K 0.149, Q4_K 0.0755, Q5_K 0.0374, Q6_K 0.0184 over 400
 * rows of 256), and MXFP4 with ggml's exponent alone 3% worse (0.115 over
 * numpy's Gaussian rows, against 0.1115 with both exponents tried).
 * test/tools/quant.py's RMS_BOUND holds the same bounds for its self-check.
 */
static const struct
{
	cbllm_dtype dt;
	double		max_rms;
	bool		fp4;			/* MXFP4: codes on a fixed grid of 4-bit floats, no f16 scale */
}			quality_rows[] = {
	{CBLLM_Q8_0, 0.0053, false}, {CBLLM_Q4_0, 0.089, false}, {CBLLM_Q4_1, 0.0765, false},
	{CBLLM_Q5_0, 0.044, false}, {CBLLM_Q5_1, 0.0367, false}, {CBLLM_Q2_K, 0.296, false},
	{CBLLM_Q3_K, 0.158, false}, {CBLLM_Q4_K, 0.078, false}, {CBLLM_Q5_K, 0.039, false},
	{CBLLM_Q6_K, 0.0186, false}, {CBLLM_MXFP4, 0.123, true},
};

/*
 * MXFP4 holds a value only as 1 or 1.5 times a power of two (its codes'
 * magnitudes 1, 2, 3, 4, 6, 8, 12 times the block's factor): c = 1.25 2^k
 * lies 2^k / 4 from both neighbours, a fifth of c, which bounds a constant
 * row.  The largest element of a block may also clip to 12 times the factor
 * under the first exponent tried (quantize.c), from up to 16 times it: a
 * quarter of the value.
 */
#define FP4_CONST_ERR 0.2
#define FP4_TOP_ERR 0.25

#define N_TYPES ((int) (sizeof(quality_rows) / sizeof(quality_rows[0])))
#define ROW 4096

/* n standard Gaussian values from seed (Box-Muller over splitmix64). */
static void
Gaussian(float *x, int64_t n, uint64_t seed)
{
	for (int64_t i = 0; i < n; i++)
	{
		double		u1 = ((double) (cbllm_splitmix64_next(&seed) >> 11) + 1.0) / 9007199254740993.0,
					u2 = (double) (cbllm_splitmix64_next(&seed) >> 11) / 9007199254740992.0;

		x[i] = (float) (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
	}
}

/* dst = src quantized as dt and dequantized back through the table; the status of the quantization. */
static int
RoundTrip(cbllm_dtype dt, const float *src, float *dst, int64_t n, cbllm_err *err)
{
	size_t		bytes = cbllm_dtype_row_bytes(dt, n);
	void	   *q = malloc(bytes);
	int			rc = cbllm_quantize_row(dt, src, q, n, err);

	if (rc == CBLLM_OK)
		cbllm_to_f32(dt, q, dst, n);
	free(q);
	return rc;
}

/* The relative RMS error of y against x over n values. */
static double
RelRms(const float *x, const float *y, int64_t n)
{
	double		num = 0.0,
				den = 0.0;

	for (int64_t i = 0; i < n; i++)
	{
		num += ((double) y[i] - x[i]) * ((double) y[i] - x[i]);
		den += (double) x[i] * x[i];
	}
	return sqrt(num / den);
}

/* (a) Each type's error on 64 Gaussian rows of 4096 within its bound. */
static void
TestQuality(void)
{
	int64_t		n = 64 * (int64_t) ROW;
	float	   *x = malloc(sizeof(float) * (size_t) n),
			   *y = malloc(sizeof(float) * (size_t) n);

	Gaussian(x, n, 42);
	for (int i = 0; i < N_TYPES; i++)
	{
		cbllm_dtype dt = quality_rows[i].dt;
		cbllm_err	err = {{0}};
		int			rc = RoundTrip(dt, x, y, n, &err);
		double		rel = rc == CBLLM_OK ? RelRms(x, y, n) : INFINITY;

		TAP_OK(rc == CBLLM_OK && rel < quality_rows[i].max_rms,
			   "%s: Gaussian rows come back with a relative RMS error of %.4f, below %.4f",
			   cbllm_dtype_name(dt), rel, quality_rows[i].max_rms);
	}
	free(x);
	free(y);
}

/* (b) Each type's bytes for quant.py's rows equal quant.py's. */
static void
TestAgainstNumpy(const char *dir)
{
	for (int i = 0; i < N_TYPES; i++)
	{
		cbllm_dtype dt = quality_rows[i].dt;
		const char *name = cbllm_dtype_name(dt);
		char		path[1024];
		char	   *x = NULL,
				   *want = NULL;
		size_t		nx = 0,
					nq = 0;
		cbllm_err	err = {{0}};
		int64_t		n,
					first = -1;
		uint8_t    *got;
		int			rc;

		snprintf(path, sizeof(path), "%s/%s.x", dir, name);
		rc = cbllm_read_file(path, &x, &nx, &err);
		snprintf(path, sizeof(path), "%s/%s.xq", dir, name);
		if (rc == CBLLM_OK)
			rc = cbllm_read_file(path, &want, &nq, &err);
		n = (int64_t) (nx / 4);
		TAP_OK(rc == CBLLM_OK && nx % 4 == 0 && n >= 64 * 256 && nq == cbllm_dtype_row_bytes(dt, n),
			   "%s: quant.py wrote %lld values and their %zu bytes of blocks", name, (long long) n, nq);
		if (rc != CBLLM_OK || nq != cbllm_dtype_row_bytes(dt, n))
		{
			free(x);
			free(want);
			continue;
		}
		got = malloc(nq);
		rc = cbllm_quantize_row(dt, (const float *) x, got, n, &err);
		for (size_t k = 0; k < nq && first < 0; k++)
			if (got[k] != (uint8_t) want[k])
				first = (int64_t) k;
		TAP_OK(rc == CBLLM_OK && first < 0, "%s: the engine's quantizer writes numpy's %zu bytes for its %lld values",
			   name, nq, (long long) n);
		if (rc != CBLLM_OK)
			TAP_DIAG("%s: %s", name, err.msg);
		else if (first >= 0)
			TAP_DIAG("%s: first difference at byte %lld (block %lld): 0x%02x, numpy 0x%02x", name,
					 (long long) first, (long long) (first / (int64_t) cbllm_dtype_traits_of(dt)->block_bytes),
					 got[first], (uint8_t) want[first]);
		free(got);
		free(x);
		free(want);
	}
}

/* (c) A zero row, a constant row and a huge outlier, for each type. */
static void
TestShapes(void)
{
	float		x[512],
				y[512];

	for (int i = 0; i < N_TYPES; i++)
	{
		cbllm_dtype dt = quality_rows[i].dt;
		const char *name = cbllm_dtype_name(dt);
		cbllm_err	err = {{0}};
		bool		ok;
		double		worst = 0.0,
					rest;

		memset(x, 0, sizeof(x));
		ok = RoundTrip(dt, x, y, 512, &err) == CBLLM_OK;
		for (int k = 0; k < 512; k++)
			ok = ok && y[k] == 0.0f;
		TAP_OK(ok, "%s: a zero row comes back zero", name);

		for (int c = 0; c < 4; c++)
		{
			const float consts[] = {1.0f, -1.0f, 0.0374f, -250.0f};

			for (int k = 0; k < 512; k++)
				x[k] = consts[c];
			ok = RoundTrip(dt, x, y, 512, &err) == CBLLM_OK;
			for (int k = 0; k < 512 && ok; k++)
				worst = fmax(worst, fabs((double) y[k] - x[k]) / fabs((double) x[k]));
		}
		/* one f16 rounding of the scale (2^-11) and of the code's step times the scale code */
		TAP_OK(ok && worst <= (quality_rows[i].fp4 ? FP4_CONST_ERR : 1.0 / 256),
			   "%s: constant rows (1, -1, 0.0374, -250) come back within %.2g relative (at most %s)", name, worst,
			   quality_rows[i].fp4 ? "1/5, half the grid's widest gap" : "1/256");

		Gaussian(x, 512, 7 + (uint64_t) i);
		x[300] = 5000.0f;
		ok = RoundTrip(dt, x, y, 512, &err) == CBLLM_OK;
		rest = RelRms(x, y, 256);
		/* the outlier sets its block's scale: it comes back within half a step of the largest code */
		TAP_OK(ok && fabs((double) y[300] - 5000.0) <= 5000.0 * (quality_rows[i].fp4 ? FP4_TOP_ERR : 0.02) &&
			   rest < quality_rows[i].max_rms * 2.0,
			   "%s: an outlier of 5000 among Gaussian values comes back as %g (within %s), and the block without "
			   "it keeps its error (%.4f)", name, (double) y[300], quality_rows[i].fp4 ? "25%" : "2%", rest);
	}
}

/* (c) Inputs no type can hold, partial blocks and types without a quantizer. */
static void
TestRefusals(void)
{
	float		x[256];
	uint8_t		out[512];
	const float bad[] = {NAN, INFINITY, -INFINITY};

	for (int i = 0; i < N_TYPES; i++)
	{
		cbllm_dtype dt = quality_rows[i].dt;
		const char *name = cbllm_dtype_name(dt);
		int			be = cbllm_dtype_traits_of(dt)->block_elems;
		cbllm_err	err = {{0}};
		bool		ok = true;

		for (int b = 0; b < 3; b++)
		{
			Gaussian(x, 256, 3);
			x[17] = bad[b];
			ok = ok && cbllm_quantize_row(dt, x, out, 256, &err) == CBLLM_ERR_INVALID &&
				msg_has(&err, name, "element 17", b == 0 ? "NaN" : "infinite");
		}
		TAP_OK(ok, "%s: NaN, +inf and -inf are refused naming the element (%s)", name, err.msg);
		Gaussian(x, 256, 3);
		x[200] = 3.0e38f;
		if (quality_rows[i].fp4)
		{
			float		y[256];

			ok = cbllm_quantize_row(dt, x, out, 256, &err) == CBLLM_OK;
			cbllm_to_f32(dt, out, y, 256);
			for (int k = 0; k < 256; k++)
				ok = ok && isfinite(y[k]);
			TAP_OK(ok && fabs((double) y[200] - 3.0e38) <= 3.0e38 * FP4_TOP_ERR,
				   "%s: a value of 3e38 is taken (its exponent byte spans f32's range) and comes back finite, as %g",
				   name, (double) y[200]);
		}
		else
			TAP_OK(cbllm_quantize_row(dt, x, out, 256, &err) == CBLLM_ERR_INVALID &&
				   msg_has(&err, name, "f16 scales", NULL),
				   "%s: a value of 3e38 is refused: its block's scale exceeds f16 (%s)", name, err.msg);
		TAP_OK(cbllm_quantize_row(dt, x, out, be + 1, &err) == CBLLM_ERR_INVALID &&
			   cbllm_quantize_row(dt, x, out, -be, &err) == CBLLM_ERR_INVALID &&
			   msg_has(&err, name, "whole number", NULL),
			   "%s: %d or %d values (no whole number of blocks) are refused", name, be + 1, -be);
	}
	for (int dt = CBLLM_F32; dt <= CBLLM_BF16; dt++)
	{
		cbllm_err	err = {{0}};

		TAP_OK(cbllm_dtype_traits_of((cbllm_dtype) dt)->from_f32 == NULL &&
			   cbllm_quantize_row((cbllm_dtype) dt, x, out, 32, &err) == CBLLM_ERR_INVALID &&
			   msg_has(&err, cbllm_dtype_name((cbllm_dtype) dt), "no quantizer", NULL),
			   "%s: no quantizer in the table; quantize_row refuses it", cbllm_dtype_name((cbllm_dtype) dt));
	}
}

/* The f32 with bits u. */
static float
FromBits(uint32_t u)
{
	float		f;

	memcpy(&f, &u, 4);
	return f;
}

/* cbllm_f32_to_f16, which writes every scale: exact on halves, ties to even, overflow and underflow. */
static void
TestF32ToF16(void)
{
	bool		exact = true,
				ties = true;

	for (uint32_t h = 0; h < 0x10000; h++)
	{
		float		f = cbllm_f16_to_f32((uint16_t) h);

		if ((h & 0x7c00) == 0x7c00)
			continue;
		exact = exact && cbllm_f32_to_f16(f) == h;
		/* halfway to the next half up in magnitude: even mantissas stay, odd ones round up */
		if ((h & 0x7fff) < 0x7bff)
		{
			float		next = cbllm_f16_to_f32((uint16_t) (h + 1));

			if (fabsf(next) > fabsf(f))
			{
				float		mid = (float) (((double) f + (double) next) / 2.0);
				uint16_t	want = (uint16_t) ((h & 1) ? h + 1 : h);

				ties = ties && cbllm_f32_to_f16(mid) == want &&
					cbllm_f32_to_f16(nextafterf(mid, 0.0f)) == (uint16_t) h &&
					cbllm_f32_to_f16(nextafterf(mid, copysignf(INFINITY, f))) == (uint16_t) (h + 1);
			}
		}
	}
	TAP_OK(exact, "f32_to_f16: every finite half (subnormals and -0 included) comes back to its bits");
	TAP_OK(ties, "f32_to_f16: values halfway between halves round to the even one, just off halfway to the nearer");
	TAP_OK(cbllm_f32_to_f16(65519.99f) == 0x7bff && cbllm_f32_to_f16(65520.0f) == 0x7c00 &&
		   cbllm_f32_to_f16(-1e30f) == 0xfc00 && cbllm_f32_to_f16(INFINITY) == 0x7c00 &&
		   (cbllm_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (cbllm_f32_to_f16(NAN) & 0x03ff) != 0,
		   "f32_to_f16: below 65520 the largest half, from it infinity; NaN stays NaN");
	TAP_OK(cbllm_f32_to_f16(FromBits(0x33000000)) == 0x0000 && cbllm_f32_to_f16(FromBits(0x33000001)) == 0x0001 &&
		   cbllm_f32_to_f16(FromBits(0xb3400000)) == 0x8001 && cbllm_f32_to_f16(1e-30f) == 0x0000 &&
		   cbllm_f32_to_f16(-1e-30f) == 0x8000,
		   "f32_to_f16: 2^-25 (half the smallest subnormal) ties to 0, just above it and 1.5 * 2^-25 to 2^-24; "
		   "tinier values to a signed zero");
}

/* Seconds quantizing a 4096 x 4096 Gaussian matrix to dt (one run), as a diagnostic. */
static void
TimeMatrix(cbllm_dtype dt)
{
	int64_t		n = (int64_t) ROW * ROW;
	float	   *x = malloc(sizeof(float) * (size_t) n);
	void	   *q = malloc(cbllm_dtype_row_bytes(dt, n));
	struct timespec t0,
				t1;
	cbllm_err	err = {{0}};
	int			rc;
	double		s;

	Gaussian(x, n, 11);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = CBLLM_OK;
	for (int r = 0; r < ROW && rc == CBLLM_OK; r++)
		rc = cbllm_quantize_row(dt, x + (int64_t) r * ROW, (uint8_t *) q + (size_t) r * cbllm_dtype_row_bytes(dt, ROW),
								ROW, &err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	TAP_OK(rc == CBLLM_OK, "%s: a 4096 x 4096 f32 matrix quantized in %.3f s on one thread (%.1f M values/s)",
		   cbllm_dtype_name(dt), s, (double) n / s * 1e-6);
	free(x);
	free(q);
}

int
main(int argc, char **argv)
{
	TestF32ToF16();
	TestQuality();
	TestShapes();
	TestRefusals();
	if (argc < 2)
		TAP_OK(false, "usage: test_quantize DIR [--time] (DIR as test/tools/quant.py --out DIR wrote it)");
	else
		TestAgainstNumpy(argv[1]);
	if (argc > 2 && strcmp(argv[2], "--time") == 0)
	{
		TimeMatrix(CBLLM_Q4_K);
		TimeMatrix(CBLLM_Q8_0);
	}
	return tap_done();
}
