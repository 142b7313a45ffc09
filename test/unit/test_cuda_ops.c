/*
 * test_cuda_ops.c: every CUDA kernel against a plain CPU computation on
 * random inputs: the relative error is within float (or bf16) tolerance and
 * every output element is written (outputs start as NaN); a recorded graph
 * replayed on new data; the dummy-weight fill against the host's rule.
 * Device sampling is test_cuda_sample.c.
 *
 * The backend table's ops each have their kernel checked here: rmsnorm (also
 * over head rows in place), add_rmsnorm, silu_mul, gelu_tanh_mul, scale,
 * add, add_bias, rope, embed, gather_rows,
 * matmul, kv_store, attention and linear_attention.
 *
 * Built twice: against CUDA (run on a GPU by test/gpu/check.sh; skipped,
 * and saying so, without one) and against the CPU emulator of CUDA
 * (test/cuda_emu), which runs the same kernels' logic in CI.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_dtype_traits.h"
#include "api/cbllm.h"
#include "backend/backend.h"
#include "base/numeric.h"
#include "kv/state_cache.h"
#include "model/model.h"
#include "compare.h"
#include "dtype_values.h"
#include "device_buf.h"
#include "linear_ref.h"
#include "tap.h"

/* Host copy of n device floats into a malloc'd array. */
static float *
Down(const float *d, size_t n)
{
	float	   *h = malloc(n * sizeof(float));

	cuda_download(h, d, n * sizeof(float), NULL);
	return h;
}

/* The index of the largest value, the first of equals (the CPU's rule). */
static int32_t
SamplerArgmaxRef(const float *v, int n)
{
	int32_t		best = 0;

	for (int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

/* A host array of n random floats (or NaN when nan). */
static float *
HostArray(size_t n, bool nan)
{
	float	   *h = malloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++)
		h[i] = nan ? NAN : Rand();
	return h;
}

/* Reference RMSNorm of T rows, in double. */
static void
RefRmsnorm(const float *x, const float *w, int T, int dim, float *out)
{
	for (int t = 0; t < T; t++)
	{
		double		ss = 0;

		for (int i = 0; i < dim; i++)
			ss += (double) x[t * dim + i] * x[t * dim + i];
		for (int i = 0; i < dim; i++)
			out[t * dim + i] = (float) (x[t * dim + i] / sqrt(ss / dim + 1e-5) * w[i]);
	}
}

static void
TestRmsnorm(void)
{
	int			T = 7,
				dim = 1000;
	size_t		n = (size_t) T * dim;
	float	   *x = HostArray(n, false),
			   *y = HostArray(n, false),
			   *w = HostArray(dim, false),
			   *ref = HostArray(n, false),
			   *sum = HostArray(n, false),
			   *out0 = HostArray(n, true);
	float	   *dx = Up(x, n),
			   *dy = Up(y, n),
			   *dw = Up(w, dim),
			   *dout = Up(out0, n),
			   *got,
			   *gotx;
	cbllm_err	err;
	int			rc;

	RefRmsnorm(x, w, T, dim, ref);
	rc = cuda_rmsnorm(dx, dw, T, dim, 1e-5f, dout, NULL, &err);
	got = Down(dout, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5,
		   "rmsnorm matches the CPU within 1e-5 and writes every element (rel err %.2g)",
		   RelErr(got, ref, n));
	free(got);
	/* fused: x += y, out = rmsnorm(x) */
	for (size_t i = 0; i < n; i++)
		sum[i] = x[i] + y[i];
	RefRmsnorm(sum, w, T, dim, ref);
	cuda_upload(dout, out0, sizeof(float) * n, NULL);
	rc = cuda_add_rmsnorm(dx, dy, dw, T, dim, 1e-5f, dout, NULL, &err);
	got = Down(dout, n);
	gotx = Down(dx, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5 && RelErr(gotx, sum, n) == 0,
		   "add_rmsnorm leaves x + y in x and its rmsnorm in out (rel err %.2g)", RelErr(got, ref, n));
	free(got), free(gotx);
	/* in place, as the forward pass uses it: out is y */
	cuda_upload(dx, x, sizeof(float) * n, NULL);
	rc = cuda_add_rmsnorm(dx, dy, dw, T, dim, 1e-5f, dy, NULL, &err);
	got = Down(dy, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5,
		   "add_rmsnorm may write its result over y (rel err %.2g)", RelErr(got, ref, n));
	free(x), free(y), free(w), free(ref), free(sum), free(out0), free(got);
	cuda_free(dx), cuda_free(dy), cuda_free(dw), cuda_free(dout);
}

static void
TestElementwise(void)
{
	int64_t		n = 100003;
	float	   *g = HostArray(n, false),
			   *u = HostArray(n, false),
			   *ref = HostArray(n, false);
	float	   *dg = Up(g, n),
			   *du = Up(u, n),
			   *got;
	cbllm_err	err;
	int			rc;

	for (int64_t i = 0; i < n; i++)
		ref[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	rc = cuda_silu_mul(dg, du, n, NULL, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5, "silu_mul matches the CPU (rel err %.2g)",
		   RelErr(got, ref, n));
	free(got);
	for (int64_t i = 0; i < n; i++)
		ref[i] += u[i];
	rc = cuda_add(dg, du, n, NULL, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5, "add matches the CPU (rel err %.2g)",
		   RelErr(got, ref, n));
	free(got);
	/* GELU-tanh, against the formula in double; then scaling */
	cuda_upload(dg, g, sizeof(float) * n, NULL);
	for (int64_t i = 0; i < n; i++)
	{
		double		x = 4.0 * g[i];	/* inputs in [-4, 4): both tails of the tanh */

		ref[i] = (float) (0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) *
						  u[i]);
	}
	rc = cuda_scale(dg, 4.0f, n, NULL, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && got[0] == 4.0f * g[0] && got[n - 1] == 4.0f * g[n - 1],
		   "scale multiplies every element (x4 exactly)");
	free(got);
	rc = cuda_gelu_tanh_mul(dg, du, n, NULL, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5,
		   "gelu_tanh_mul matches GELU's tanh form in double (rel err %.2g)", RelErr(got, ref, n));
	free(got);
	/* gpt-oss's clamped SwiGLU, gate and up in [-12, 12) so that both clamps at 7 bite */
	for (int64_t i = 0; i < n; i++)
	{
		double		gate = fmin(12.0 * g[i], 7.0),
					up = fmax(fmin(12.0 * u[i], 7.0), -7.0);

		ref[i] = (float) (gate / (1.0 + exp(-1.702 * gate)) * (up + 1.0));
		g[i] *= 12.0f;
		u[i] *= 12.0f;
	}
	cuda_upload(dg, g, sizeof(float) * n, NULL);
	cuda_upload(du, u, sizeof(float) * n, NULL);
	rc = cuda_swiglu_oai_mul(dg, du, n, 7.0f, NULL, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5,
		   "swiglu_oai_mul matches gpt-oss's clamped SwiGLU in double (rel err %.2g)",
		   RelErr(got, ref, n));
	free(got);
	for (int64_t i = 0; i < n; i++)
	{
		g[i] /= 12.0f;
		u[i] /= 12.0f;
	}
	cuda_upload(du, u, sizeof(float) * n, NULL);
	/* a bias row of dim 7 over n / 7 rows (n = 100003 is not a multiple: the last row is cut) */
	cuda_upload(dg, g, sizeof(float) * n, NULL);
	for (int64_t i = 0; i < n / 7 * 7; i++)
		ref[i] = g[i] + u[i % 7];
	rc = cuda_add_bias(dg, du, (int) (n / 7), 7, NULL, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n / 7 * 7) == 0 && got[n - 1] == g[n - 1],
		   "add_bias adds the bias to every row and nothing beyond T rows");
	free(g), free(u), free(ref), free(got);
	cuda_free(dg), cuda_free(du);
}

/* RMSNorm over the heads of q (T, heads, head_dim) in place, as Qwen3's and Gemma's q_norm runs. */
static void
TestHeadRmsnorm(void)
{
	int			T = 5,
				heads = 6,
				hd = 128;
	size_t		n = (size_t) T * heads * hd;
	float	   *x = HostArray(n, false),
			   *w = HostArray(hd, false),
			   *ref = HostArray(n, false);
	float	   *dx = Up(x, n),
			   *dw = Up(w, hd),
			   *got;
	cbllm_err	err;
	int			rc;

	RefRmsnorm(x, w, T * heads, hd, ref);
	rc = cuda_rmsnorm(dx, dw, T * heads, hd, 1e-5f, dx, NULL, &err);
	got = Down(dx, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5,
		   "rmsnorm over %d rows of head_dim %d, in place, matches the CPU (rel err %.2g)",
		   T * heads, hd, RelErr(got, ref, n));
	free(x), free(w), free(ref), free(got);
	cuda_free(dx), cuda_free(dw);
}

/*
 * RoPE with per-position angle tables, positions out of order: pairs
 * (i, i + half), or (2i, 2i + 1) when interleaved (GGUF llama files).
 */
static void
TestRope(bool interleaved, int rot_half)
{
	int			T = 5,
				H = 6,
				hd = 64,
				half = 32,
				P = 40;
	int32_t		pos[5] = {3, 39, 0, 17, 3};
	size_t		n = (size_t) T * H * hd;
	float	   *x = HostArray(n, false),
			   *ref = malloc(n * sizeof(float)),
			   *cs = malloc(sizeof(float) * P * half),
			   *sn = malloc(sizeof(float) * P * half);
	float	   *dx,
			   *dc,
			   *ds,
			   *got;
	void	   *dpos;
	cbllm_err	err;
	int			rc;

	for (int p = 0; p < P; p++)
		for (int i = 0; i < half; i++)
		{
			double		a = p / pow(10000.0, 2.0 * i / hd);

			cs[p * half + i] = (float) cos(a);
			sn[p * half + i] = (float) sin(a);
		}
	memcpy(ref, x, n * sizeof(float));
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < rot_half; i++)
			{
				float	   *v = ref + ((size_t) t * H + h) * hd;
				int			i0 = interleaved ? 2 * i : i,
							i1 = interleaved ? 2 * i + 1 : i + rot_half;
				float		a = v[i0],
							b = v[i1],
							c = cs[pos[t] * half + i],
							s = sn[pos[t] * half + i];

				v[i0] = a * c - b * s;
				v[i1] = b * c + a * s;
			}
	dx = Up(x, n);
	dc = Up(cs, (size_t) P * half);
	ds = Up(sn, (size_t) P * half);
	dpos = UpBytes(pos, sizeof(pos));
	rc = cuda_rope(dx, dc, ds, dpos, T, H, hd, half, rot_half, interleaved, NULL, &err);
	got = Down(dx, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-6,
		   "rope with per-position tables, pairs %s over %d of %d dimensions, matches the CPU (rel err %.2g)",
		   interleaved ? "(2i, 2i + 1)" : "(i, i + half)", 2 * rot_half, hd, RelErr(got, ref, n));
	free(x), free(ref), free(cs), free(sn), free(got);
	cuda_free(dx), cuda_free(dc), cuda_free(ds), cuda_free(dpos);
}

static void
TestEmbedGatherArgmax(void)
{
	int			vocab = 50,
				dim = 48,
				T = 4;
	int32_t		tokens[4] = {3, 0, 49, 3},
				rows[3] = {2, 0, 2};
	float	   *emb = HostArray((size_t) vocab * dim, false);
	uint16_t   *emb16 = malloc(sizeof(uint16_t) * vocab * dim);
	float	   *ref = malloc(sizeof(float) * T * dim),
			   *x0 = HostArray((size_t) T * dim, true),
			   *g0 = HostArray((size_t) 3 * dim, true),
			   *gref = malloc(sizeof(float) * 3 * dim);
	void	   *demb,
			   *dtok,
			   *drows,
			   *dout = NULL;
	float	   *dx,
			   *dg,
			   *got;
	int32_t		am[4],
				am_ref[4];
	cbllm_err	err;
	int			rc;

	/* bf16 table: the upper halves of the floats, so the reference is exact */
	for (int i = 0; i < vocab * dim; i++)
	{
		uint32_t	u;

		memcpy(&u, &emb[i], 4);
		emb16[i] = (uint16_t) (u >> 16);
	}
	for (int t = 0; t < T; t++)
		for (int i = 0; i < dim; i++)
			ref[t * dim + i] = cbllm_bf16_to_f32(emb16[tokens[t] * dim + i]);
	demb = UpBytes(emb16, sizeof(uint16_t) * vocab * dim);
	dtok = UpBytes(tokens, sizeof(tokens));
	dx = Up(x0, (size_t) T * dim);
	rc = cuda_embed(demb, CBLLM_BF16, dim, dtok, T, dx, NULL, &err);
	got = Down(dx, (size_t) T * dim);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, (size_t) T * dim) == 0,
		   "embed of a bf16 table gives exactly the widened rows");
	free(got);
	/* gather rows 2, 0, 2 */
	for (int r = 0; r < 3; r++)
		memcpy(gref + r * dim, ref + rows[r] * dim, sizeof(float) * dim);
	drows = UpBytes(rows, sizeof(rows));
	dg = Up(g0, (size_t) 3 * dim);
	rc = cuda_gather_rows(dx, drows, 3, dim, dg, NULL, &err);
	got = Down(dg, (size_t) 3 * dim);
	TAP_OK(rc == CBLLM_OK && RelErr(got, gref, (size_t) 3 * dim) == 0,
		   "gather_rows copies exactly the rows asked for, in order, repeats included");
	free(got);
	/* argmax over the rows of ref, with a tie planted in row 1 and a NaN in row 2 */
	ref[1 * dim + 5] = ref[1 * dim + 9] = 7.0f;
	for (int t = 0; t < T; t++)
		am_ref[t] = SamplerArgmaxRef(ref + t * dim, dim);
	ref[2 * dim + 0] = NAN;
	cuda_upload(dx, ref, sizeof(float) * T * dim, NULL);
	cuda_alloc(&dout, sizeof(am), NULL);
	rc = cuda_argmax(dx, T, dim, dout, NULL, &err);
	cuda_download(am, dout, sizeof(am), NULL);
	TAP_OK(rc == CBLLM_OK && memcmp(am, am_ref, sizeof(am)) == 0 && am[1] == 5,
		   "argmax matches the CPU per row, the first of equal maxima winning and NaN never winning");
	free(emb), free(emb16), free(ref), free(x0), free(g0), free(gref);
	cuda_free(demb), cuda_free(dtok), cuda_free(drows), cuda_free(dout), cuda_free(dx), cuda_free(dg);
}

/* The cuBLAS linear layer against the CPU, bf16 weights: within bf16 rounding of the activations. */
static void
TestMatmul(void)
{
	int			rows = 300,
				cols = 256,
				T = 5;
	float	   *w = HostArray((size_t) rows * cols, false),
			   *x = HostArray((size_t) T * cols, false),
			   *ref = malloc(sizeof(float) * T * rows),
			   *y0 = HostArray((size_t) T * rows, true);
	uint16_t   *wb = malloc(sizeof(uint16_t) * rows * cols);
	void	   *dw,
			   *dxh = NULL,
			   *blas = NULL;
	float	   *dx,
			   *dy,
			   *got;
	cuda_stream s = NULL;
	cbllm_err	err;
	int			rc;

	for (int i = 0; i < rows * cols; i++)
	{
		uint32_t	u;

		memcpy(&u, &w[i], 4);
		wb[i] = (uint16_t) (u >> 16);
	}
	for (int t = 0; t < T; t++)
		for (int r = 0; r < rows; r++)
		{
			double		sum = 0;

			for (int k = 0; k < cols; k++)
				sum += (double) cbllm_bf16_to_f32(wb[r * cols + k]) * x[t * cols + k];
			ref[t * rows + r] = (float) sum;
		}
	rc = cuda_blas_create(&blas, &err);
	if (rc == CBLLM_OK)
		rc = cuda_stream_create(&s, &err);
	dw = UpBytes(wb, sizeof(uint16_t) * rows * cols);
	cuda_alloc(&dxh, sizeof(uint16_t) * T * cols, NULL);
	dx = Up(x, (size_t) T * cols);
	dy = Up(y0, (size_t) T * rows);
	if (rc == CBLLM_OK)
		rc = cuda_matmul(blas, dw, CBLLM_BF16, rows, cols, dx, T, dxh, dy, s, &err);
	if (rc == CBLLM_OK)
		rc = cuda_stream_sync(s, &err);
	got = Down(dy, (size_t) T * rows);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, (size_t) T * rows) < 2e-2,
		   "cuBLAS bf16 matmul on a stream matches the CPU within bf16 tolerance and writes every element (rel err %.2g)%s%s",
		   RelErr(got, ref, (size_t) T * rows), rc ? ": " : "", rc ? err.msg : "");
	cuda_stream_destroy(s);
	cuda_blas_destroy(blas);
	free(w), free(x), free(ref), free(y0), free(wb), free(got);
	cuda_free(dw), cuda_free(dxh), cuda_free(dx), cuda_free(dy);
}

/*
 * Every weight type against the kernels' per-type tables: an embedding table
 * of each widens exactly; a type whose row says CBLLM_CUDA_GEMM is multiplied
 * as stored (exactly, on small integers) and any other is refused by the
 * conversion of the activations, as is a value that is no type.
 */
static void
TestWeightTypes(void)
{
	enum
	{
		ROWS = 6, COLS = 40, T = 3
	};
	int32_t		tokens[T] = {4, 0, 5};
	float		x[T * COLS],
				ref[T * ROWS],
				emb_ref[T * COLS],
				wrow[COLS];
	float	   *dx = NULL,
			   *dy = NULL,
			   *de = NULL,
			   *got;
	void	   *dxh = NULL,
			   *blas = NULL;
	int32_t    *dtok = UpBytes(tokens, sizeof(tokens));
	cbllm_err	err;
	int			rc;

	for (int i = 0; i < T * COLS; i++)
		x[i] = (float) ((i * 5) % 7 - 3);
	dx = Up(x, T * COLS);
	cuda_alloc((void **) &dy, sizeof(float) * T * ROWS, NULL);
	cuda_alloc((void **) &de, sizeof(float) * T * COLS, NULL);
	cuda_alloc(&dxh, sizeof(float) * T * COLS, NULL);
	rc = cuda_blas_create(&blas, &err);
	TAP_OK(rc == CBLLM_OK, "a cuBLAS handle for the weight-type checks");
	for (int d = 0; d < CBLLM_DTYPE_COUNT; d++)
	{
		cbllm_dtype dt = (cbllm_dtype) d;
		size_t		row_bytes = cbllm_dtype_row_bytes(dt, COLS);
		void	   *h;
		void	   *dw;

		if (cuda_dtype_traits_of(dt)->path == CBLLM_CUDA_NONE ||
			cuda_dtype_traits_of(dt)->path == CBLLM_CUDA_QUANT)
			continue;			/* the block types are test_cuda_quant's */
		h = malloc(row_bytes * ROWS);
		for (int i = 0; i < ROWS * COLS; i++)
			StoreSmallInt(dt, h, i, (i * 3) % 8 - 4);
		for (int r = 0; r < ROWS; r++)
		{
			cbllm_to_f32(dt, (const char *) h + r * row_bytes, wrow, COLS);
			for (int t = 0; t < T; t++)
			{
				double		sum = 0;

				for (int k = 0; k < COLS; k++)
					sum += (double) wrow[k] * x[t * COLS + k];
				ref[t * ROWS + r] = (float) sum;
				if (r == tokens[t])
					memcpy(emb_ref + t * COLS, wrow, sizeof(wrow));
			}
		}
		dw = UpBytes(h, row_bytes * ROWS);
		rc = cuda_embed(dw, dt, COLS, dtok, T, de, NULL, &err);
		got = Down(de, T * COLS);
		TAP_OK(rc == CBLLM_OK && memcmp(got, emb_ref, sizeof(emb_ref)) == 0,
			   "embed of a %s table gives exactly the widened rows", cbllm_dtype_name(dt));
		free(got);
		if (cuda_dtype_traits_of(dt)->path == CBLLM_CUDA_GEMM)
		{
			rc = cuda_matmul(blas, dw, dt, ROWS, COLS, dx, T, dxh, dy, NULL, &err);
			if (rc == CBLLM_OK)
				rc = cuda_stream_sync(NULL, &err);
			got = Down(dy, T * ROWS);
			TAP_OK(rc == CBLLM_OK && memcmp(got, ref, sizeof(ref)) == 0,
				   "%s weights run as stored: cuBLAS matmul of small integers is exact%s%s",
				   cbllm_dtype_name(dt), rc ? ": " : "", rc ? err.msg : "");
			free(got);
		}
		else
			TAP_OK(cuda_to_half(dx, T * COLS, dt, dxh, NULL, &err) == CBLLM_ERR_UNSUPPORTED,
				   "%s is not converted for cuBLAS: its row does not say it runs as stored",
				   cbllm_dtype_name(dt));
		free(h);
		cuda_free(dw);
	}
	TAP_OK(cuda_embed(dx, CBLLM_DTYPE_COUNT, COLS, dtok, T, de, NULL, &err) == CBLLM_ERR_INVALID &&
		   cuda_to_half(dx, T * COLS, CBLLM_DTYPE_COUNT, dxh, NULL, &err) == CBLLM_ERR_UNSUPPORTED,
		   "a value that is no type is refused by embed and by the conversion");
	cuda_blas_destroy(blas);
	cuda_free(dx), cuda_free(dy), cuda_free(de), cuda_free(dxh), cuda_free(dtok);
}

/* The scatter of a step's keys and values into bf16 cache slots: the rows written, nothing else. */
static void
TestKvStore(void)
{
	int			T = 3,
				slots_n = 10;
	int64_t		row = 40,
				slots[3] = {7, 0, 4};
	size_t		nc = (size_t) slots_n * row;
	float	   *k = HostArray((size_t) T * row, false),
			   *v = HostArray((size_t) T * row, false);
	uint16_t   *cache0 = malloc(sizeof(uint16_t) * nc),
			   *kref = malloc(sizeof(uint16_t) * nc),
			   *vref = malloc(sizeof(uint16_t) * nc),
			   *gk = malloc(sizeof(uint16_t) * nc),
			   *gv = malloc(sizeof(uint16_t) * nc);
	float	   *dk = Up(k, (size_t) T * row),
			   *dv = Up(v, (size_t) T * row);
	void	   *dkc,
			   *dvc,
			   *dslots;
	cbllm_err	err;
	int			rc;

	for (size_t i = 0; i < nc; i++)
		cache0[i] = (uint16_t) (0x3f00 + i % 97);
	memcpy(kref, cache0, sizeof(uint16_t) * nc);
	memcpy(vref, cache0, sizeof(uint16_t) * nc);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < row; i++)
		{
			kref[slots[t] * row + i] = cbllm_f32_to_bf16(k[t * row + i]);
			vref[slots[t] * row + i] = cbllm_f32_to_bf16(v[t * row + i]);
		}
	dkc = UpBytes(cache0, sizeof(uint16_t) * nc);
	dvc = UpBytes(cache0, sizeof(uint16_t) * nc);
	dslots = UpBytes(slots, sizeof(slots));
	rc = cuda_kv_store(dkc, dvc, dk, dv, dslots, T, row, NULL, &err);
	cuda_download(gk, dkc, sizeof(uint16_t) * nc, NULL);
	cuda_download(gv, dvc, sizeof(uint16_t) * nc, NULL);
	TAP_OK(rc == CBLLM_OK && memcmp(gk, kref, sizeof(uint16_t) * nc) == 0 &&
		   memcmp(gv, vref, sizeof(uint16_t) * nc) == 0,
		   "kv_store writes each token's k and v, rounded to bf16, to its slot and leaves the other slots as they were");
	free(k), free(v), free(cache0), free(kref), free(vref), free(gk), free(gv);
	cuda_free(dk), cuda_free(dv), cuda_free(dkc), cuda_free(dvc), cuda_free(dslots);
}

/*
 * Paged attention (GQA, a prefill chunk and a decode token, a sliding
 * window) against the CPU backend, both reading the same bf16-valued cache.
 */
static void
TestAttention(int window, int hd, bool with_sinks)
{
	cbllm_model_config cfg = {0};
	cbllm_threadpool *pool = NULL;
	cbllm_backend *be = NULL;
	kv_cache   *kv = NULL;
	kv_cache_params kp = {16, 4, 1, 2, hd, false, CBLLM_F32, NULL, NULL};
	cpu_backend_params bp;
	int32_t		table0[8] = {3, 7, 1, 0, 0, 0, 0, 0},
				table1[8] = {2, 4, 5, 6, 8, 9, 0, 0};
	const int32_t *tables[2] = {table0, table1};
	int32_t		flat[16],
				pos[6] = {5, 6, 7, 8, 9, 20},
				seq[6] = {0, 0, 0, 0, 0, 1};
	int64_t		slot[6] = {0};
	fwd_batch	b = {6, NULL, pos, seq, slot, 2, tables, 0, NULL, false, NULL, NULL};
	int			T = 6,
				H = 4;
	size_t		nq = (size_t) T * H * hd;
	size_t		ncache = (size_t) 16 * 4 * 2 * hd;
	float	   *q = HostArray(nq, false),
			   *ref = malloc(sizeof(float) * nq),
			   *out0 = HostArray(nq, true),
			   *got = NULL;
	uint16_t   *k16 = malloc(sizeof(uint16_t) * ncache),
			   *v16 = malloc(sizeof(uint16_t) * ncache);
	float		sinks[4] = {3.0f * Rand(), 3.0f * Rand(), 2.5f, -INFINITY};	/* a large one, and none */
	float	   *dsinks = with_sinks ? Up(sinks, 4) : NULL;
	float	   *dq,
			   *dout;
	void	   *dk,
			   *dv,
			   *dtab,
			   *dpos,
			   *dseq;
	cbllm_err	err;
	int			rc;

	cfg.hidden = H * hd;
	cfg.n_layers = 1;
	cfg.n_heads = H;
	cfg.n_kv_heads = 2;
	cfg.head_dim = hd;
	cfg.intermediate = 64;
	cfg.vocab_size = 16;
	cfg.max_pos = 64;
	cfg.rms_eps = 1e-5f;
	model_config_uniform_positions(&cfg, 10000, window);
	model_config_cache_layers(&cfg);
	bp = (cpu_backend_params) {&cfg, NULL, NULL, 8, 64, false, CBLLM_F32};
	if (threadpool_create(1, &pool, &err) != CBLLM_OK || (bp.pool = pool, cpu_backend_create(&bp, &be, &err)) != CBLLM_OK ||
		kv_cache_create(&kp, &kv, &err) != CBLLM_OK)
	{
		TAP_OK(false, "attention test set-up: %s", err.msg);
		return;
	}
	for (size_t i = 0; i < ncache; i++)
	{
		k16[i] = cbllm_f32_to_bf16(Rand());
		v16[i] = cbllm_f32_to_bf16(Rand());
		((float *) kv->k)[i] = cbllm_bf16_to_f32(k16[i]);
		((float *) kv->v)[i] = cbllm_bf16_to_f32(v16[i]);
	}
	be->attention(be, kv, 0, q, with_sinks ? sinks : NULL, &b, ref);
	memcpy(flat, table0, sizeof(table0));
	memcpy(flat + 8, table1, sizeof(table1));
	dq = Up(q, nq);
	dk = UpBytes(k16, sizeof(uint16_t) * ncache);
	dv = UpBytes(v16, sizeof(uint16_t) * ncache);
	dout = Up(out0, nq);
	dtab = UpBytes(flat, sizeof(flat));
	dpos = UpBytes(pos, sizeof(pos));
	dseq = UpBytes(seq, sizeof(seq));
	rc = cuda_attention(dq, dk, dv, dtab, 8, dpos, dseq, T, H, 2, hd, 4, window, 64,
						1.0f / sqrtf((float) hd), dsinks, dout, NULL, &err);
	got = Down(dout, nq);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, nq) < 1e-5,
		   "paged attention (GQA, prefill chunk and decode token, window %d, head_dim %d%s) matches the CPU backend (rel err %.2g)",
		   window, hd, with_sinks ? ", a sink logit per head" : "", RelErr(got, ref, nq));
	cuda_free(dsinks);
	free(q), free(ref), free(out0), free(got), free(k16), free(v16);
	cuda_free(dq), cuda_free(dk), cuda_free(dv), cuda_free(dout);
	cuda_free(dtab), cuda_free(dpos), cuda_free(dseq);
	kv_cache_free(kv);
	be->destroy(be);
	threadpool_destroy(pool);
}

/*
 * A hybrid model's linear attention (the causal conv and the chunked delta
 * rule) over two sequences in three steps that start and end inside the
 * delta rule's chunks, one of them a token each: every output within float
 * rounding of a float64 token loop (the delta rule's plain recurrence).
 */
#define LIN_SEQS 2

static void
TestLinearAttention(lin_geom g)
{
	static const int lens[LIN_SEQS] = {45, 70},
				ends[3][LIN_SEQS] = {{20, 37}, {21, 38}, {45, 70}};	/* each step's end per sequence */
	static const int32_t slots[LIN_SEQS] = {2, 0};
	int			cd = 2 * g.nk * g.dk + g.nv * g.dv,
				od = g.nv * g.dv,
				total = lens[0] + lens[1];
	state_cache_params sp = {.k_dim = g.dk, .v_dim = g.dv};
	int64_t		conv_floats = (int64_t) (g.conv - 1) * cd,
				rec_floats = g.nv * state_cache_head_floats(&sp);
	float	   *qkv = HostArray((size_t) total * cd, false),
			   *z = HostArray((size_t) total * od, false),
			   *beta = HostArray((size_t) total * g.nv, false),
			   *alpha = HostArray((size_t) total * g.nv, false),
			   *kern = HostArray((size_t) cd * g.conv, false),
			   *norm = HostArray(g.dv, false),
			   *a = malloc(sizeof(float) * g.nv),
			   *dt = HostArray(g.nv, false),
			   *got = malloc(sizeof(float) * total * od);
	double	   *ref = malloc(sizeof(double) * total * od),
				worst = 0,
				scale = 0;
	float	   *dkern = Up(kern, (size_t) cd * g.conv),
			   *dnorm = Up(norm, g.dv),
			   *da,
			   *ddt = Up(dt, g.nv),
			   *dconv = NULL,
			   *drec = NULL;
	int			start[LIN_SEQS] = {0, 0},
				first[LIN_SEQS] = {0, lens[0]};	/* each sequence's rows in the host arrays */
	bool		ok = true;
	cbllm_err	err;

	for (int h = 0; h < g.nv; h++)
		a[h] = -0.1f * (1.5f + Rand());	/* a slow decay: the state reaches across chunks */
	da = Up(a, g.nv);
	cuda_alloc((void **) &dconv, sizeof(float) * 3 * conv_floats, NULL);
	cuda_alloc((void **) &drec, sizeof(float) * 3 * rec_floats, NULL);
	for (int st = 0; st < 3 && ok; st++)
	{
		int			n = 0,
					sf[LIN_SEQS + 1];
		int32_t    *pos = malloc(sizeof(int32_t) * total);
		float	   *bq = malloc(sizeof(float) * total * cd),
				   *bz = malloc(sizeof(float) * total * od),
				   *bb = malloc(sizeof(float) * total * g.nv),
				   *ba = malloc(sizeof(float) * total * g.nv);
		void	   *dq,
				   *dz,
				   *db,
				   *dal,
				   *dsf,
				   *dsl,
				   *dpos,
				   *dout;

		for (int s = 0; s < LIN_SEQS; s++)
		{
			sf[s] = n;
			for (int p = start[s]; p < ends[st][s]; p++, n++)
			{
				int			row = first[s] + p;

				pos[n] = p;
				memcpy(bq + (size_t) n * cd, qkv + (size_t) row * cd, sizeof(float) * cd);
				memcpy(bz + (size_t) n * od, z + (size_t) row * od, sizeof(float) * od);
				memcpy(bb + (size_t) n * g.nv, beta + (size_t) row * g.nv, sizeof(float) * g.nv);
				memcpy(ba + (size_t) n * g.nv, alpha + (size_t) row * g.nv, sizeof(float) * g.nv);
			}
		}
		sf[LIN_SEQS] = n;
		dq = Up(bq, (size_t) n * cd);
		dz = Up(bz, (size_t) n * od);
		db = Up(bb, (size_t) n * g.nv);
		dal = Up(ba, (size_t) n * g.nv);
		dsf = UpBytes(sf, sizeof(sf));
		dsl = UpBytes(slots, sizeof(slots));
		dpos = UpBytes(pos, sizeof(int32_t) * n);
		cuda_alloc(&dout, sizeof(float) * n * od, NULL);
		{
			cuda_linear_args la = {
				.qkv = dq, .z = dz, .beta = db, .alpha = dal, .kern = dkern, .a = da,
				.dt_bias = ddt, .norm = dnorm, .conv_states = dconv, .rec_states = drec,
				.seq_first = dsf, .slots = dsl, .pos = dpos, .out = dout, .n_seqs = LIN_SEQS,
				.nk = g.nk, .nv = g.nv, .dk = g.dk, .dv = g.dv, .conv = g.conv, .tiled = true,
				.eps = 1e-6f,
			};
			float	   *o = malloc(sizeof(float) * n * od);

			ok = cuda_linear_attention(&la, NULL, &err) == CBLLM_OK &&
				cuda_download(o, dout, sizeof(float) * n * od, NULL) == CBLLM_OK;
			for (int s = 0; s < LIN_SEQS; s++)
				memcpy(got + (size_t) (first[s] + start[s]) * od, o + (size_t) sf[s] * od,
					   sizeof(float) * (sf[s + 1] - sf[s]) * od);
			free(o);
		}
		for (int s = 0; s < LIN_SEQS; s++)
			start[s] = ends[st][s];
		free(pos), free(bq), free(bz), free(bb), free(ba);
		cuda_free(dq), cuda_free(dz), cuda_free(db), cuda_free(dal), cuda_free(dsf);
		cuda_free(dsl), cuda_free(dpos), cuda_free(dout);
	}
	for (int s = 0; s < LIN_SEQS && ok; s++)
		RefLinear(&g, lens[s], qkv + (size_t) first[s] * cd, z + (size_t) first[s] * od,
				  beta + (size_t) first[s] * g.nv, alpha + (size_t) first[s] * g.nv, kern, a, dt,
				  norm, ref + (size_t) first[s] * od);
	for (size_t i = 0; ok && i < (size_t) total * od; i++)
	{
		worst = fmax(worst, fabs(got[i] - ref[i]));
		scale = fmax(scale, fabs(ref[i]));
	}
	TAP_OK(ok && worst <= 1e-4 * scale,
		   "linear attention (conv %d, %d key heads of %d, %d value heads of %d): two sequences of %d and %d tokens in steps split inside chunks, every output within 1e-4 of a float64 token loop (worst %.2g of %.2g)",
		   g.conv, g.nk, g.dk, g.nv, g.dv, lens[0], lens[1], worst, scale);
	free(qkv), free(z), free(beta), free(alpha), free(kern), free(norm), free(a), free(dt);
	free(got), free(ref);
	cuda_free(dkern), cuda_free(dnorm), cuda_free(da), cuda_free(ddt), cuda_free(dconv);
	cuda_free(drec);
}

/* The dummy-weight fill equals the host's rule bit for bit. */
static void
TestFillDummy(void)
{
	int64_t		n = 5003;
	uint64_t	seed = 0x1234567887654321ULL;
	float		scale = 0.0625f;
	uint16_t   *got = malloc(sizeof(uint16_t) * n);
	void	   *d = NULL;
	int			bad = 0;
	cbllm_err	err;
	int			rc;

	cuda_alloc(&d, sizeof(uint16_t) * n, NULL);
	rc = cuda_fill_dummy(d, n, seed, scale, &err);
	cuda_download(got, d, sizeof(uint16_t) * n, NULL);
	for (int64_t i = 0; i < n; i++)
		bad += got[i] != cbllm_f32_to_bf16(cbllm_dummy_value(seed, (uint64_t) i) * scale);
	TAP_OK(rc == CBLLM_OK && bad == 0, "dummy weights made on the device equal the host's (%d differ)",
		   bad);
	free(got);
	cuda_free(d);
}

/*
 * A recorded graph (copy in, add, rmsnorm) replayed twice on new input:
 * each replay computes the new data, since kernels read it from the same
 * buffers; and the stream, events and asynchronous copies keep order.
 */
static void
TestGraph(void)
{
	int			T = 3,
				dim = 64;
	size_t		n = (size_t) T * dim;
	float	   *x = HostArray(n, false),
			   *w = HostArray(dim, false),
			   *ref = malloc(sizeof(float) * n),
			   *got = malloc(sizeof(float) * n),
			   *h_in = NULL;
	float	   *dx = Up(x, n),
			   *dy = Up(x, n),
			   *dw = Up(w, dim),
			   *dout = Up(x, n);
	cuda_stream s = NULL;
	cuda_event	e = NULL;
	cuda_graph	g = NULL;
	cbllm_err	err;
	int			rc,
				ok = 1;

	rc = cuda_stream_create(&s, &err);
	if (rc == CBLLM_OK)
		rc = cuda_event_create(&e, &err);
	if (rc == CBLLM_OK)
		rc = cuda_host_alloc((void **) &h_in, sizeof(float) * n, &err);
	if (rc == CBLLM_OK)
		rc = cuda_capture_begin(s, &err);
	if (rc == CBLLM_OK)
	{
		rc = cuda_copy_async(dy, h_in, sizeof(float) * n, s, &err);
		if (rc == CBLLM_OK)
			rc = cuda_add_rmsnorm(dx, dy, dw, T, dim, 1e-5f, dout, s, &err);
		if (rc == CBLLM_OK)
			rc = cuda_capture_end(s, &g, &err);
		else
			(void) cuda_capture_end(s, &g, NULL);
	}
	for (int round = 0; round < 2 && rc == CBLLM_OK; round++)
	{
		float	   *xs = HostArray(n, false),
				   *sum = malloc(sizeof(float) * n);

		/* new data: x on the device, y through the pinned buffer the graph copies from */
		for (size_t i = 0; i < n; i++)
		{
			h_in[i] = (float) round + Rand();
			sum[i] = xs[i] + h_in[i];
		}
		RefRmsnorm(sum, w, T, dim, ref);
		rc = cuda_copy_async(dx, xs, sizeof(float) * n, s, &err);
		if (rc == CBLLM_OK)
			rc = cuda_graph_launch(g, s, &err);
		if (rc == CBLLM_OK)
			rc = cuda_event_record(e, s, &err);
		if (rc == CBLLM_OK)
			rc = cuda_event_sync(e, &err);
		if (rc == CBLLM_OK)
			rc = cuda_download(got, dout, sizeof(float) * n, &err);
		ok = ok && rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5;
		free(xs), free(sum);
	}
	TAP_OK(rc == CBLLM_OK && ok, "a recorded graph replays on new data in the same buffers%s%s",
		   rc ? ": " : "", rc ? err.msg : "");
	cuda_graph_destroy(g);
	cuda_event_destroy(e);
	cuda_stream_destroy(s);
	cuda_host_free(h_in);
	free(x), free(w), free(ref), free(got);
	cuda_free(dx), cuda_free(dy), cuda_free(dw), cuda_free(dout);
}

/* Out-of-memory errors say how much was asked for and how much is free. */
static void
TestOutOfMemory(void)
{
	size_t		free_b = 0,
				total_b = 0;
	void	   *d = NULL;
	cbllm_err	err;
	int			rc;

	cuda_mem_info(&free_b, &total_b, NULL);
	rc = cuda_alloc(&d, total_b + ((size_t) 1 << 30), &err);
	TAP_OK(rc == CBLLM_ERR_NOMEM && d == NULL && strstr(err.msg, "MiB needed") != NULL &&
		   strstr(err.msg, "MiB free") != NULL,
		   "an allocation larger than the device fails with the sizes in the message: %s", err.msg);
}

int
main(int argc, char **argv)
{
	int			n = cuda_device_count();
	char		dev[300];

	if (n == 0)
	{
		printf("1..0 # SKIP no CUDA device here: the CUDA kernel checks need one (test/gpu/check.sh runs them; test_cuda_ops_emu runs them on the CPU emulator)\n");
		return 0;
	}
	cuda_device_describe(dev, sizeof(dev));
	TAP_DIAG("device: %s", dev);
	TestRmsnorm();
	TestElementwise();
	TestHeadRmsnorm();
	TestRope(false, 32);
	TestRope(true, 32);
	TestRope(false, 8);			/* partial: Qwen3.5's quarter of a head */
	TestEmbedGatherArgmax();
	TestMatmul();
	TestWeightTypes();
	TestKvStore();
	TestAttention(0, 32, false);
	TestAttention(6, 32, false);
	TestAttention(0, 80, false);
	TestAttention(6, 256, false);	/* Gemma-3's head_dim, the 8-dims-a-lane kernel's largest, in a local layer's window */
	TestAttention(0, 512, false);	/* Gemma 4's full layers: the 16-dims-a-lane kernel */
	TestAttention(6, 64, true);		/* gpt-oss's head_dim and attention sinks, in a window */
	TestLinearAttention((lin_geom) {2, 4, 24, 40, 4});
	TestLinearAttention((lin_geom) {1, 2, 128, 160, 3});	/* Qwen3.5's key heads; value columns past a block's threads */
	TestFillDummy();
	TestGraph();
	TestOutOfMemory();
	return tap_done();
}
