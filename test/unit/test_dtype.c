/*
 * test_dtype.c: the weight-type table (src/dtype/dtype.h): the sizes, names and
 * reference conversions of its rows against the safetensors format and
 * known bit patterns, the block arithmetic a quantized row will rely on,
 * and that what a backend's own table of types says it runs
 * (backend/cpu/cpu_dtype_traits.h, backend/cuda/cuda_dtype_traits.h) is what
 * that backend runs.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_registry.h"
#include "backend/cpu/cpu_dtype_traits.h"
#include "backend/cuda/cuda_dtype_traits.h"
#include "dtype/dtype.h"
#include "dtype_values.h"
#include "backend/cpu/kernels.h"
#include "formats/safetensors.h"
#include "tap.h"

/* The element sizes the safetensors format gives its float dtypes. */
static const struct
{
	const char *name;
	size_t		bytes;
}			st_sizes[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"U8", 1}};

/* A 16-bit pattern and the f32 bits it must widen to. */
typedef struct half_case
{
	uint16_t	h;
	uint32_t	f;
	const char *what;
} half_case;

static const half_case f16_cases[] = {
	{0x3c00, 0x3f800000, "1"},
	{0xc000, 0xc0000000, "-2"},
	{0x3555, 0x3eaaa000, "0.333251953125"},
	{0x7bff, 0x477fe000, "65504, the largest finite"},
	{0x0400, 0x38800000, "2^-14, the smallest normal"},
	{0x0001, 0x33800000, "2^-24, the smallest subnormal"},
	{0x03ff, 0x387fc000, "the largest subnormal"},
	{0x8001, 0xb3800000, "a negative subnormal"},
	{0x0000, 0x00000000, "+0"},
	{0x8000, 0x80000000, "-0"},
	{0x7c00, 0x7f800000, "+inf"},
	{0xfc00, 0xff800000, "-inf"},
	{0x7e00, 0x7fc00000, "a quiet NaN"},
	{0x7c01, 0x7f802000, "a signalling NaN, payload kept"},
};

static const half_case bf16_cases[] = {
	{0x3f80, 0x3f800000, "1"},
	{0xc000, 0xc0000000, "-2"},
	{0x4049, 0x40490000, "3.140625"},
	{0x7f7f, 0x7f7f0000, "the largest finite"},
	{0x0080, 0x00800000, "the smallest normal"},
	{0x0001, 0x00010000, "the smallest subnormal"},
	{0x8000, 0x80000000, "-0"},
	{0x7f80, 0x7f800000, "+inf"},
	{0xff80, 0xff800000, "-inf"},
	{0x7fc0, 0x7fc00000, "a quiet NaN"},
	{0xffc1, 0xffc10000, "a negative NaN, payload kept"},
};

/* Widen a case table through cbllm_to_f32 as one row and name the first element that differs, or NULL. */
static const char *
HalfCasesFail(cbllm_dtype dt, const half_case *cases, int n)
{
	uint16_t	h[16];
	float		f[16];

	for (int i = 0; i < n; i++)
		h[i] = cases[i].h;
	cbllm_to_f32(dt, h, f, n);
	for (int i = 0; i < n; i++)
	{
		uint32_t	u;

		memcpy(&u, &f[i], 4);
		if (u != cases[i].f)
			return cases[i].what;
	}
	return NULL;
}

/* The names, their round trip and the sizes against the safetensors format. */
static void
TestNamesAndSizes(void)
{
	char		names[64];
	cbllm_dtype dt;
	bool		ok = true;

	for (int i = 0; i < (int) (sizeof(st_sizes) / sizeof(st_sizes[0])); i++)
	{
		const cbllm_dtype_traits *t;

		TAP_OK(cbllm_dtype_by_name(st_sizes[i].name, &dt) &&
			   strcmp(cbllm_dtype_name(dt), st_sizes[i].name) == 0,
			   "safetensors dtype %s names a row of that name", st_sizes[i].name);
		t = cbllm_dtype_traits_of(dt);
		TAP_OK(t->block_elems == 1 && t->block_bytes == st_sizes[i].bytes &&
			   cbllm_dtype_row_bytes(dt, 10) == 10 * st_sizes[i].bytes,
			   "%s: one element of %zu bytes per block, as safetensors stores it; 10 elements are %zu bytes",
			   st_sizes[i].name, st_sizes[i].bytes, 10 * st_sizes[i].bytes);
	}
	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
	{
		if (cbllm_dtype_traits_of((cbllm_dtype) i)->safetensors)
			ok = ok && cbllm_dtype_by_name(cbllm_dtype_name((cbllm_dtype) i), &dt) && dt == (cbllm_dtype) i;
		else
			ok = ok && !cbllm_dtype_by_name(cbllm_dtype_name((cbllm_dtype) i), &dt);
		for (int j = 0; j < i; j++)
			ok = ok && strcmp(cbllm_dtype_name((cbllm_dtype) i),
							  cbllm_dtype_name((cbllm_dtype) j)) != 0;
	}
	TAP_OK(ok, "every row's name is distinct; by_name maps a safetensors row's name back to it and no other's");
	TAP_OK(!cbllm_dtype_by_name("F64", &dt) && !cbllm_dtype_by_name("I64", &dt) &&
		   !cbllm_dtype_by_name("bf16", &dt) && !cbllm_dtype_by_name("BF16 ", &dt) &&
		   !cbllm_dtype_by_name("", &dt),
		   "other dtypes, other cases and near misses name no type");
	cbllm_dtype_names(names, sizeof(names));
	TAP_OK(strcmp(names, "F32, F16, BF16 and U8") == 0, "the names as prose, in table order: %s", names);
	cbllm_dtype_names(names, 6);
	TAP_OK(strcmp(names, "F32, ") == 0, "the prose is cut to the buffer, terminated: \"%s\"", names);
	dt = (cbllm_dtype) CBLLM_DTYPE_COUNT;
	TAP_OK(strcmp(cbllm_dtype_name(dt), "?") == 0 && cbllm_dtype_row_bytes(dt, 4) == SIZE_MAX &&
		   cpu_dtype_traits_of(dt)->path == CBLLM_CPU_NONE && cuda_dtype_traits_of(dt)->path == CBLLM_CUDA_NONE,
		   "a value that is no type is named \"?\", has no size and runs nowhere");
}

/* Row bytes: whole blocks only, tried on rows shaped like quantized types (not in the table). */
static void
TestRowBytes(void)
{
	const cbllm_dtype_traits q8 = {.name = "Q8_0-like", .block_elems = 32, .block_bytes = 34};
	const cbllm_dtype_traits q4k = {.name = "Q4_K-like", .block_elems = 256, .block_bytes = 144};

	TAP_OK(cbllm_dtype_row_bytes(CBLLM_F32, 0) == 0 && cbllm_dtype_row_bytes(CBLLM_BF16, 0) == 0,
		   "zero elements are zero bytes");
	TAP_OK(cbllm_dtype_row_bytes(CBLLM_F16, -1) == SIZE_MAX, "a negative count has no size");
	TAP_OK(cbllm_dtype_traits_row_bytes(&q8, 32) == 34 && cbllm_dtype_traits_row_bytes(&q8, 4096) == 4352,
		   "blocks of 32 in 34 bytes: 32 elements are 34 bytes, 4096 are 4352");
	TAP_OK(cbllm_dtype_traits_row_bytes(&q8, 33) == SIZE_MAX &&
		   cbllm_dtype_traits_row_bytes(&q8, 16) == SIZE_MAX,
		   "a count that is not a whole number of 32-element blocks has no size");
	TAP_OK(cbllm_dtype_traits_row_bytes(&q4k, 512) == 288 &&
		   cbllm_dtype_traits_row_bytes(&q4k, 100) == SIZE_MAX,
		   "blocks of 256 in 144 bytes: 512 elements are 288 bytes, 100 have no size");
}

/* The reference conversions against known bit patterns. */
static void
TestToF32(void)
{
	const char *bad;
	uint32_t	fb[] = {0x3f800000, 0x80000000, 0x00000001, 0x7fc00001, 0xff800000, 0x40490fdb};
	float		src[6],
				dst[6];

	bad = HalfCasesFail(CBLLM_F16, f16_cases, (int) (sizeof(f16_cases) / sizeof(f16_cases[0])));
	TAP_OK(bad == NULL, "F16 widens exactly: normals, subnormals, signed zeros, infinities, NaNs%s%s",
		   bad ? "; wrong: " : "", bad ? bad : "");
	bad = HalfCasesFail(CBLLM_BF16, bf16_cases, (int) (sizeof(bf16_cases) / sizeof(bf16_cases[0])));
	TAP_OK(bad == NULL, "BF16 widens exactly: normals, subnormals, signed zeros, infinities, NaNs%s%s",
		   bad ? "; wrong: " : "", bad ? bad : "");
	memcpy(src, fb, sizeof(src));
	memset(dst, 0, sizeof(dst));
	cbllm_to_f32(CBLLM_F32, src, dst, 6);
	TAP_OK(memcmp(dst, fb, sizeof(dst)) == 0,
		   "F32 rows are copied bit for bit (-0, a subnormal, a NaN payload, -inf)");
	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
		TAP_OK(cbllm_dtype_traits_of((cbllm_dtype) i)->to_f32 != NULL, "%s has a reference conversion",
			   cbllm_dtype_name((cbllm_dtype) i));
}

/* A one-tensor safetensors file: header, then nbytes of data; *size gets its length. */
static char *
OneTensorFile(const char *dtype, size_t nbytes, size_t *size)
{
	char		hdr[200];
	uint64_t	n = (uint64_t) snprintf(hdr, sizeof(hdr),
										"{\"w\": {\"dtype\": \"%s\", \"shape\": [3, 4], \"data_offsets\": [0, %zu]}}",
										dtype, nbytes);
	char	   *buf = calloc(1, 8 + n + nbytes);

	for (int i = 0; i < 8; i++)
		buf[i] = (char) (n >> (8 * i));
	memcpy(buf + 8, hdr, n);
	*size = 8 + n + nbytes;
	return buf;
}

/* st_add_buffer's status for a (3, 4) tensor of dtype stored in nbytes; err gets its message. */
static int
AddOne(const char *dtype, size_t nbytes, cbllm_err *err)
{
	size_t		size;
	char	   *buf = OneTensorFile(dtype, nbytes, &size);
	st_archive *ar = calloc(1, sizeof(st_archive));
	int			rc = st_add_buffer(ar, buf, size, "model.safetensors", err);

	st_close(ar);
	free(buf);
	return rc;
}

/* The safetensors reader sizes tensors by the table. */
static void
TestSafetensors(void)
{
	cbllm_err	err;

	for (int i = 0; i < CBLLM_DTYPE_COUNT; i++)
	{
		const char *name = cbllm_dtype_name((cbllm_dtype) i);
		size_t		need = cbllm_dtype_row_bytes((cbllm_dtype) i, 12);

		if (!cbllm_dtype_traits_of((cbllm_dtype) i)->safetensors)
		{
			TAP_OK(AddOne(name, 96, &err) == CBLLM_ERR_UNSUPPORTED,
				   "safetensors: a tensor of the GGUF-only type %s is refused as an unknown dtype", name);
			continue;
		}
		TAP_OK(AddOne(name, need, &err) == CBLLM_OK && AddOne(name, need - 1, &err) == CBLLM_ERR_FORMAT &&
			   AddOne(name, need + 1, &err) == CBLLM_ERR_FORMAT,
			   "safetensors: a (3, 4) %s tensor must hold exactly %zu bytes", name, need);
	}
	TAP_OK(AddOne("F64", 96, &err) == CBLLM_ERR_UNSUPPORTED &&
		   strstr(err.msg, "unsupported dtype F64 (F32, F16, BF16 and U8 are supported)") != NULL,
		   "safetensors: an F64 tensor is refused, naming the supported types: %s", err.msg);
}

/* y (T, rows) = x (T, cols) @ W^T in double from W's reference conversion. */
static void
RefMatmul(const cbllm_weight *w, const float *x, int T, float *y)
{
	float	   *row = malloc(sizeof(float) * w->cols);

	for (int64_t r = 0; r < w->rows; r++)
	{
		cbllm_to_f32(w->dtype, (const char *) w->data + r * cbllm_dtype_row_bytes(w->dtype, w->cols),
					 row, w->cols);
		for (int t = 0; t < T; t++)
		{
			double		s = 0;

			for (int64_t k = 0; k < w->cols; k++)
				s += (double) row[k] * x[t * w->cols + k];
			y[t * w->rows + r] = (float) s;
		}
	}
	free(row);
}

/* One instruction set's matmul over every type the table says the CPU reads, few tokens and many. */
static void
TestCpuKernels(const cpu_kernels *ks)
{
	enum
	{
		ROWS = 5, COLS = 37, MAX_T = 8
	};
	float		x[MAX_T * COLS],
				y[MAX_T * ROWS],
				ref[MAX_T * ROWS];
	float	   *scratch = malloc(sizeof(float) * KERNEL_ROWS_PER_TASK * COLS);
	int			Ts[] = {1, MAX_T};

	for (int i = 0; i < MAX_T * COLS; i++)
		x[i] = (float) ((i * 5) % 7 - 3);
	for (int d = 0; d < CBLLM_DTYPE_COUNT; d++)
	{
		cbllm_dtype dt = (cbllm_dtype) d;
		cbllm_weight w = {.dtype = dt, .rows = ROWS, .cols = COLS};
		void	   *data;

		/* the block-quantized types have test_quant_kernels */
		if (cpu_dtype_traits_of(dt)->path == CBLLM_CPU_NONE || cbllm_dtype_traits_of(dt)->block_elems > 1)
			continue;
		data = malloc(cbllm_dtype_row_bytes(dt, ROWS * COLS));
		for (int i = 0; i < ROWS * COLS; i++)
			StoreSmallInt(dt, data, i, (i * 3) % 8 - 4);
		w.data = data;
		for (int k = 0; k < 2; k++)
		{
			int			T = Ts[k];

			for (int i = 0; i < T * ROWS; i++)
				y[i] = NAN;
			RefMatmul(&w, x, T, ref);
			ks->matmul_rows(&w, x, NULL, T, y, 0, ROWS, scratch);
			TAP_OK(memcmp(y, ref, sizeof(float) * T * ROWS) == 0,
				   "%s kernels: a %d x %d %s matrix times %d token%s is exact",
				   ks->isa, ROWS, COLS, cbllm_dtype_name(dt), T, T == 1 ? "" : "s");
		}
		free(data);
	}
	free(scratch);
}

/* What the rows say the backends run is what their registry entries answer. */
static void
TestBackendsAsk(void)
{
	const backend_reg *cuda = backend_registry_find("cuda");
	bool		cpu_ok = true,
				cuda_ok = true;

	for (int d = 0; d <= CBLLM_DTYPE_COUNT; d++)
	{
		const cpu_dtype_traits *tc = cpu_dtype_traits_of((cbllm_dtype) d);
		const cuda_dtype_traits *tg = cuda_dtype_traits_of((cbllm_dtype) d);

		cpu_ok = cpu_ok && cpu_backend_reg.supports_weight((cbllm_dtype) d) == (tc->path != CBLLM_CPU_NONE);
		if (cuda != NULL && cuda->missing == NULL)
			cuda_ok = cuda_ok &&
				cuda->supports_weight((cbllm_dtype) d) == (tg->path != CBLLM_CUDA_NONE);
	}
	TAP_OK(cpu_ok, "the cpu backend runs exactly the types whose row says cpu");
	TAP_OK(cpu_backend_reg.supports_weight(CBLLM_F32) && cpu_backend_reg.supports_weight(CBLLM_F16) &&
		   cpu_backend_reg.supports_weight(CBLLM_BF16), "the cpu backend runs F32, F16 and BF16");
	if (cuda != NULL && cuda->missing == NULL)
	{
		TAP_OK(cuda_ok, "the cuda backend runs exactly the types whose row gives a CUDA path");
		TAP_OK(cuda->supports_weight(CBLLM_F32) && cuda->supports_weight(CBLLM_F16) &&
			   cuda->supports_weight(CBLLM_BF16), "the cuda backend runs F32, F16 and BF16");
	}
	else
		TAP_DIAG("the cuda backend is not in this build: its entry is not asked");
	TAP_OK(cuda_dtype_traits_of(CBLLM_F32)->path == CBLLM_CUDA_AS_BF16 &&
		   cuda_dtype_traits_of(CBLLM_F16)->path == CBLLM_CUDA_GEMM &&
		   cuda_dtype_traits_of(CBLLM_BF16)->path == CBLLM_CUDA_GEMM,
		   "on CUDA, F16 and BF16 run as stored and F32 is uploaded as BF16");
}

int
main(void)
{
	const char *isas[] = {"generic", "avx2", "avx512", "avx512vnni"};

	TestNamesAndSizes();
	TestRowBytes();
	TestToF32();
	TestSafetensors();
	for (int i = 0; i < 4; i++)
	{
		const cpu_kernels *ks = cpu_kernels_select(isas[i]);

		if (ks != NULL)
			TestCpuKernels(ks);
		else
			TAP_DIAG("this CPU has no %s: its kernels are not run", isas[i]);
	}
	TestBackendsAsk();
	return tap_done();
}
