/*
 * test_cuda_ops.c: every CUDA kernel against a plain CPU computation on
 * random inputs: the relative error is within float tolerance and every
 * output element is written (outputs start as NaN).  Without a CUDA device
 * the whole test is skipped, and says so.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../../cuda/cuda_ops.h"
#include "backend.h"
#include "cbllm.h"
#include "numeric.h"
#include "tap.h"

static unsigned rng_state = 12345;

/* Uniform in [-1, 1). */
static float
Rand(void)
{
	rng_state = rng_state * 1664525u + 1013904223u;
	return (float) ((rng_state >> 8) * (1.0 / 8388608.0) - 1.0);
}

/* Max |a - b| / max |b| over n, or +inf if a holds a NaN (an element not written). */
static double
RelErr(const float *a, const float *b, size_t n)
{
	double		worst = 0,
				scale = 1e-30;

	for (size_t i = 0; i < n; i++)
	{
		if (isnan(a[i]))
			return INFINITY;
		worst = fmax(worst, fabs((double) a[i] - b[i]));
		scale = fmax(scale, fabs((double) b[i]));
	}
	return worst / scale;
}

/* Device copy of n floats of host data. */
static float *
Up(const float *h, size_t n)
{
	void	   *d = NULL;

	if (cuda_alloc(&d, n * sizeof(float), NULL) != CBLLM_OK)
		return NULL;
	cuda_upload(d, h, n * sizeof(float), NULL);
	return d;
}

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
sampler_argmax_ref(const float *v, int n)
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

static void
TestRmsnorm(void)
{
	int			T = 7,
				dim = 1000;
	float	   *x = HostArray((size_t) T * dim, false),
			   *w = HostArray(dim, false),
			   *ref = HostArray((size_t) T * dim, false),
			   *out0 = HostArray((size_t) T * dim, true);
	float	   *dx = Up(x, (size_t) T * dim),
			   *dw = Up(w, dim),
			   *dout = Up(out0, (size_t) T * dim),
			   *got;
	cbllm_err	err;
	int			rc;

	for (int t = 0; t < T; t++)
	{
		double		ss = 0;

		for (int i = 0; i < dim; i++)
			ss += (double) x[t * dim + i] * x[t * dim + i];
		for (int i = 0; i < dim; i++)
			ref[t * dim + i] = (float) (x[t * dim + i] / sqrt(ss / dim + 1e-5) * w[i]);
	}
	rc = cuda_rmsnorm(dx, dw, T, dim, 1e-5f, dout, &err);
	got = Down(dout, (size_t) T * dim);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, (size_t) T * dim) < 1e-5,
		   "rmsnorm matches the CPU within 1e-5 and writes every element (rel err %.2g)",
		   RelErr(got, ref, (size_t) T * dim));
	free(x), free(w), free(ref), free(out0), free(got);
	cuda_free(dx), cuda_free(dw), cuda_free(dout);
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
	rc = cuda_silu_mul(dg, du, n, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5, "silu_mul matches the CPU (rel err %.2g)",
		   RelErr(got, ref, n));
	free(got);
	for (int64_t i = 0; i < n; i++)
		ref[i] += u[i];
	rc = cuda_add(dg, du, n, &err);
	got = Down(dg, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-5, "add matches the CPU (rel err %.2g)",
		   RelErr(got, ref, n));
	free(g), free(u), free(ref), free(got);
	cuda_free(dg), cuda_free(du);
}

static void
TestRope(void)
{
	int			T = 5,
				H = 6,
				hd = 64,
				half = 32;
	size_t		n = (size_t) T * H * hd;
	float	   *x = HostArray(n, false),
			   *ref = malloc(n * sizeof(float)),
			   *cs = malloc(sizeof(float) * T * half),
			   *sn = malloc(sizeof(float) * T * half);
	float	   *dx,
			   *dc,
			   *ds,
			   *got;
	cbllm_err	err;
	int			rc;

	for (int t = 0; t < T; t++)
		for (int i = 0; i < half; i++)
		{
			double		a = (t * 37 + 3) / pow(10000.0, 2.0 * i / hd);

			cs[t * half + i] = (float) cos(a);
			sn[t * half + i] = (float) sin(a);
		}
	memcpy(ref, x, n * sizeof(float));
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < half; i++)
			{
				float	   *v = ref + ((size_t) t * H + h) * hd;
				float		a = v[i],
							b = v[i + half];

				v[i] = a * cs[t * half + i] - b * sn[t * half + i];
				v[i + half] = b * cs[t * half + i] + a * sn[t * half + i];
			}
	dx = Up(x, n);
	dc = Up(cs, (size_t) T * half);
	ds = Up(sn, (size_t) T * half);
	rc = cuda_rope(dx, dc, ds, T, H, hd, &err);
	got = Down(dx, n);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, n) < 1e-6, "rope matches the CPU (rel err %.2g)",
		   RelErr(got, ref, n));
	free(x), free(ref), free(cs), free(sn), free(got);
	cuda_free(dx), cuda_free(dc), cuda_free(ds);
}

static void
TestEmbedArgmax(void)
{
	int			vocab = 50,
				dim = 48,
				T = 4;
	int32_t		tokens[4] = {3, 0, 49, 3};
	float	   *emb = HostArray((size_t) vocab * dim, false);
	uint16_t   *emb16 = malloc(sizeof(uint16_t) * vocab * dim);
	float	   *ref = malloc(sizeof(float) * T * dim),
			   *x0 = HostArray((size_t) T * dim, true);
	void	   *demb = NULL,
			   *dtok = NULL,
			   *dout = NULL;
	float	   *dx,
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
	cuda_alloc(&demb, sizeof(uint16_t) * vocab * dim, NULL);
	cuda_upload(demb, emb16, sizeof(uint16_t) * vocab * dim, NULL);
	cuda_alloc(&dtok, sizeof(tokens), NULL);
	cuda_upload(dtok, tokens, sizeof(tokens), NULL);
	dx = Up(x0, (size_t) T * dim);
	rc = cuda_embed(demb, CBLLM_BF16, dim, dtok, T, dx, &err);
	got = Down(dx, (size_t) T * dim);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, (size_t) T * dim) == 0,
		   "embed of a bf16 table gives exactly the widened rows");
	/* argmax over the rows of ref, with a tie planted in row 1 */
	ref[1 * dim + 5] = ref[1 * dim + 9] = 7.0f;
	for (int t = 0; t < T; t++)
		am_ref[t] = sampler_argmax_ref(ref + t * dim, dim);
	cuda_upload(dx, ref, sizeof(float) * T * dim, NULL);
	cuda_alloc(&dout, sizeof(am), NULL);
	rc = cuda_argmax(dx, T, dim, dout, &err);
	cuda_download(am, dout, sizeof(am), NULL);
	TAP_OK(rc == CBLLM_OK && memcmp(am, am_ref, sizeof(am)) == 0 && am[1] == 5,
		   "argmax matches the CPU per row, the first of equal maxima winning");
	free(emb), free(emb16), free(ref), free(x0), free(got);
	cuda_free(demb), cuda_free(dtok), cuda_free(dout), cuda_free(dx);
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
	void	   *dw = NULL,
			   *dxh = NULL,
			   *blas = NULL;
	float	   *dx,
			   *dy,
			   *got;
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
			double		s = 0;

			for (int k = 0; k < cols; k++)
				s += (double) cbllm_bf16_to_f32(wb[r * cols + k]) * x[t * cols + k];
			ref[t * rows + r] = (float) s;
		}
	rc = cuda_blas_create(&blas, &err);
	cuda_alloc(&dw, sizeof(uint16_t) * rows * cols, NULL);
	cuda_upload(dw, wb, sizeof(uint16_t) * rows * cols, NULL);
	cuda_alloc(&dxh, sizeof(uint16_t) * T * cols, NULL);
	dx = Up(x, (size_t) T * cols);
	dy = Up(y0, (size_t) T * rows);
	if (rc == CBLLM_OK)
		rc = cuda_matmul(blas, dw, CBLLM_BF16, rows, cols, dx, T, dxh, dy, &err);
	got = Down(dy, (size_t) T * rows);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, (size_t) T * rows) < 2e-2,
		   "cuBLAS bf16 matmul matches the CPU within bf16 tolerance and writes every element (rel err %.2g)%s%s",
		   RelErr(got, ref, (size_t) T * rows), rc ? ": " : "", rc ? err.msg : "");
	cuda_blas_destroy(blas);
	free(w), free(x), free(ref), free(y0), free(wb), free(got);
	cuda_free(dw), cuda_free(dxh), cuda_free(dx), cuda_free(dy);
}

/* The scatter of a step's keys and values into cache slots: exactly the rows written, nothing else. */
static void
TestKvStore(void)
{
	int			T = 3,
				slots_n = 10;
	int64_t		row = 40,
				slots[3] = {7, 0, 4};
	float	   *k = HostArray((size_t) T * row, false),
			   *v = HostArray((size_t) T * row, false),
			   *cache0 = HostArray((size_t) slots_n * row, false),
			   *kref = malloc(sizeof(float) * slots_n * row),
			   *vref = malloc(sizeof(float) * slots_n * row),
			   *gk,
			   *gv;
	float	   *dk = Up(k, (size_t) T * row),
			   *dv = Up(v, (size_t) T * row),
			   *dkc = Up(cache0, (size_t) slots_n * row),
			   *dvc = Up(cache0, (size_t) slots_n * row);
	void	   *dslots = NULL;
	cbllm_err	err;
	int			rc;

	memcpy(kref, cache0, sizeof(float) * slots_n * row);
	memcpy(vref, cache0, sizeof(float) * slots_n * row);
	for (int t = 0; t < T; t++)
	{
		memcpy(kref + slots[t] * row, k + t * row, sizeof(float) * row);
		memcpy(vref + slots[t] * row, v + t * row, sizeof(float) * row);
	}
	cuda_alloc(&dslots, sizeof(slots), NULL);
	cuda_upload(dslots, slots, sizeof(slots), NULL);
	rc = cuda_kv_store(dkc, dvc, dk, dv, dslots, T, row, &err);
	gk = Down(dkc, (size_t) slots_n * row);
	gv = Down(dvc, (size_t) slots_n * row);
	TAP_OK(rc == CBLLM_OK && memcmp(gk, kref, sizeof(float) * slots_n * row) == 0 &&
		   memcmp(gv, vref, sizeof(float) * slots_n * row) == 0,
		   "kv_store writes each token's k and v to its slot and leaves the other slots as they were");
	free(k), free(v), free(cache0), free(kref), free(vref), free(gk), free(gv);
	cuda_free(dk), cuda_free(dv), cuda_free(dkc), cuda_free(dvc), cuda_free(dslots);
}

/* Paged attention (GQA, a prefill chunk and a decode token, and a sliding window) against the CPU backend. */
static void
TestAttention(int window)
{
	cbllm_model_config cfg = {0};
	cbllm_threadpool *pool = NULL;
	cbllm_backend *be = NULL;
	kv_cache   *kv = NULL;
	kv_cache_params kp = {16, 4, 1, 2, 32};
	cpu_backend_params bp;
	int32_t		table0[8] = {3, 7, 1, 0, 0, 0, 0, 0},
				table1[8] = {2, 4, 5, 6, 8, 9, 0, 0};
	const int32_t *tables[2] = {table0, table1};
	int32_t		flat[16],
				pos[6] = {5, 6, 7, 8, 9, 20},
				seq[6] = {0, 0, 0, 0, 0, 1};
	int64_t		slot[6] = {0};
	fwd_batch	b = {6, NULL, pos, seq, slot, 2, tables};
	int			T = 6,
				H = 4,
				hd = 32;
	size_t		nq = (size_t) T * H * hd;
	size_t		ncache = (size_t) 16 * 4 * 2 * 32;
	float	   *q = HostArray(nq, false),
			   *ref = malloc(sizeof(float) * nq),
			   *out0 = HostArray(nq, true),
			   *got = NULL;
	float	   *dq = NULL,
			   *dk = NULL,
			   *dv = NULL,
			   *dout = NULL;
	void	   *dtab = NULL,
			   *dpos = NULL,
			   *dseq = NULL;
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
	cfg.rope_theta = 10000;
	cfg.rope_scale = 1;
	cfg.rms_eps = 1e-5f;
	cfg.sliding_window = window;
	bp = (cpu_backend_params) {&cfg, NULL, NULL, 8, 64};
	if (threadpool_create(1, &pool, &err) != CBLLM_OK || (bp.pool = pool, cpu_backend_create(&bp, &be, &err)) != CBLLM_OK ||
		kv_cache_create(&kp, &kv, &err) != CBLLM_OK)
	{
		TAP_OK(false, "attention test set-up: %s", err.msg);
		return;
	}
	for (size_t i = 0; i < ncache; i++)
	{
		kv->k[i] = Rand();
		kv->v[i] = Rand();
	}
	be->attention(be, kv, 0, q, &b, ref);
	memcpy(flat, table0, sizeof(table0));
	memcpy(flat + 8, table1, sizeof(table1));
	dq = Up(q, nq);
	dk = Up(kv->k, ncache);
	dv = Up(kv->v, ncache);
	dout = Up(out0, nq);
	cuda_alloc(&dtab, sizeof(flat), NULL);
	cuda_upload(dtab, flat, sizeof(flat), NULL);
	cuda_alloc(&dpos, sizeof(pos), NULL);
	cuda_upload(dpos, pos, sizeof(pos), NULL);
	cuda_alloc(&dseq, sizeof(seq), NULL);
	cuda_upload(dseq, seq, sizeof(seq), NULL);
	rc = cuda_attention(dq, dk, dv, dtab, 8, dpos, dseq, T, H, 2, hd, 4, window, 64, dout, &err);
	got = Down(dout, nq);
	TAP_OK(rc == CBLLM_OK && RelErr(got, ref, nq) < 1e-5,
		   "paged attention (GQA, prefill chunk and decode token, window %d) matches the CPU backend (rel err %.2g)",
		   window, RelErr(got, ref, nq));
	free(q), free(ref), free(out0), free(got);
	cuda_free(dq), cuda_free(dk), cuda_free(dv), cuda_free(dout);
	cuda_free(dtab), cuda_free(dpos), cuda_free(dseq);
	kv_cache_free(kv);
	be->destroy(be);
	threadpool_destroy(pool);
}

/*
 * The whole engine on both devices: a tiny generated model's prompt logits
 * agree within BF16 tolerance (the GPU rounds F32 weights and activations
 * to BF16), and the greedy tokens are reported side by side.
 */
static void
TestEngineBothDevices(const char *model_dir)
{
	cbllm_engine_params p = {0};
	cbllm_engine *cpu = NULL,
			   *gpu = NULL;
	cbllm_engine_info info;
	cbllm_err	err;
	int32_t		ids[12] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};
	float	   *a,
			   *b;
	int			rc;

	p.model_dir = model_dir;
	p.max_model_len = 256;
	p.max_num_seqs = 16;
	p.num_kv_blocks = 64;
	p.device = "cpu";
	rc = cbllm_engine_create(&p, &cpu, &err);
	p.device = "cuda";
	if (rc == CBLLM_OK)
		rc = cbllm_engine_create(&p, &gpu, &err);
	TAP_OK(rc == CBLLM_OK, "the engine starts on the CPU and on the GPU%s%s", rc ? ": " : "",
		   rc ? err.msg : "");
	if (rc != CBLLM_OK)
	{
		cbllm_engine_destroy(cpu);
		return;
	}
	cbllm_engine_get_info(cpu, &info);
	a = malloc(sizeof(float) * 12 * info.vocab_size);
	b = malloc(sizeof(float) * 12 * info.vocab_size);
	rc = cbllm_engine_prompt_logits(cpu, ids, 12, a, &err);
	if (rc == CBLLM_OK)
		rc = cbllm_engine_prompt_logits(gpu, ids, 12, b, &err);
	TAP_OK(rc == CBLLM_OK && RelErr(b, a, (size_t) 12 * info.vocab_size) < 5e-2,
		   "GPU prompt logits match the CPU within BF16 tolerance (rel err %.2g)%s%s",
		   rc == CBLLM_OK ? RelErr(b, a, (size_t) 12 * info.vocab_size) : -1.0,
		   rc ? ": " : "", rc ? err.msg : "");
	free(a);
	free(b);
	cbllm_engine_destroy(cpu);
	cbllm_engine_destroy(gpu);
}

int
main(int argc, char **argv)
{
	int			n = cuda_device_count();

	if (n == 0)
	{
		printf("1..0 # SKIP no CUDA device here: the CUDA kernel and engine checks need one (test/gpu/check.sh runs them)\n");
		return 0;
	}
	TAP_DIAG("%d CUDA device(s)", n);
	TestRmsnorm();
	TestElementwise();
	TestRope();
	TestEmbedArgmax();
	TestMatmul();
	TestKvStore();
	TestAttention(0);
	TestAttention(6);
	if (argc > 1)
		TestEngineBothDevices(argv[1]);
	return tap_done();
}
