/*
 * cuda_quant.cu: the linear layers over GGUF block-quantized weights
 * (CBLLM_CUDA_QUANT in cuda_dtype_traits.c), kept on the device as their
 * file stores them.  y (T, rows) = x (T, cols) @ W^T with W (rows, cols) in blocks.
 *
 * Two paths, by the number of tokens:
 *   - up to CUDA_QMATVEC_MAX_T (decode): one fused kernel.  A warp owns a
 *     row; each lane decodes groups of 8 weights in registers (quant_device.cuh)
 *     and multiplies them with every token's f32 activations, so the weights
 *     are read once per step and never written out.
 *   - more (prefill, large batches): a tile of rows is dequantized to bf16
 *     in scratch and cuBLAS multiplies it with the bf16 activations (the
 *     BF16 path of cuda_gemm.cu), tile after tile.
 * A type runs here when it has a row in quant_types.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dtype_device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_device.cuh"

#define MATVEC_WARPS 4			/* rows per block of the fused kernel */
#define DEQUANT_THREADS 256

/* v = f stored in an f32 or bf16 output */
__device__ static inline void
Put(float *p, float f)
{
	*p = f;
}

__device__ static inline void
Put(__nv_bfloat16 *p, float f)
{
	*p = __float2bfloat16(f);
}

/* out (n elements, of Out) = the n / Q::QK blocks at w, dequantized; a thread per group of 8. */
template <typename Q, typename Out>
__global__ static void
DequantKernel(const uint8_t *w, int64_t n_groups, Out *out)
{
	for (int64_t G = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; G < n_groups;
		 G += (int64_t) gridDim.x * blockDim.x)
	{
		float		v[8];

		Q::Decode8(w + G / (Q::QK / 8) * Q::BYTES, (int) (G % (Q::QK / 8)), v);
		for (int i = 0; i < 8; i++)
			Put(out + 8 * G + i, v[i]);
	}
}

/*
 * y[t * rows + r] = row r of w . x[t] for t < NT: warp w of block b owns row
 * MATVEC_WARPS b + w; its lanes take the row's groups of 8 in turn (a warp
 * reads whole blocks at once), keep one sum per token, and add the lanes'
 * sums by shuffles.  Each token's sum is formed the same way whatever NT.
 */
template <typename Q, int NT>
__global__ static void
MatvecKernel(const uint8_t *w, int64_t row_bytes, int cols, const float *x, int rows, float *y)
{
	int			lane = threadIdx.x % 32,
				r = blockIdx.x * MATVEC_WARPS + threadIdx.x / 32,
				groups = cols / 8;
	const uint8_t *row = w + (int64_t) r * row_bytes;
	float		acc[NT];

	if (r >= rows)
		return;					/* the whole warp: no lane is left in a shuffle */
	for (int t = 0; t < NT; t++)
		acc[t] = 0.0f;
	for (int g = lane; g < groups; g += 32)
	{
		float		v[8];

		Q::Decode8(row + g / (Q::QK / 8) * Q::BYTES, g % (Q::QK / 8), v);
		for (int t = 0; t < NT; t++)
		{
			const float *xt = x + (int64_t) t * cols + 8 * g;
			float		s = 0.0f;

			for (int i = 0; i < 8; i++)
				s += v[i] * xt[i];
			acc[t] += s;
		}
	}
	for (int t = 0; t < NT; t++)
	{
		float		s = acc[t];

		for (int o = 16; o > 0; o /= 2)
			s += __shfl_xor_sync(0xffffffff, s, o);
		if (lane == 0)
			y[(int64_t) t * rows + r] = s;
	}
}

typedef void (*matvec_fn) (const uint8_t *, int64_t, int, const float *, int, float *);
typedef void (*dequant_f32_fn) (const uint8_t *, int64_t, float *);
typedef void (*dequant_bf16_fn) (const uint8_t *, int64_t, __nv_bfloat16 *);

/* A block type the device runs: its kernels. */
typedef struct quant_type
{
	cbllm_dtype dt;
	int			qk;				/* elements per block */
	int			bytes;			/* bytes per block */
	dequant_f32_fn to_f32;
	dequant_bf16_fn to_bf16;
	matvec_fn	matvec[CUDA_QMATVEC_MAX_T];	/* [NT - 1] */
} quant_type;

#define MATVECS(Q) {MatvecKernel<Q, 1>, MatvecKernel<Q, 2>, MatvecKernel<Q, 3>, MatvecKernel<Q, 4>, \
		MatvecKernel<Q, 5>, MatvecKernel<Q, 6>, MatvecKernel<Q, 7>, MatvecKernel<Q, 8>}
#define QUANT_ROW(dt, Q) {dt, Q::QK, Q::BYTES, DequantKernel<Q, float>, \
		DequantKernel<Q, __nv_bfloat16>, MATVECS(Q)}

static const quant_type quant_types[] = {
	QUANT_ROW(CBLLM_Q8_0, QBlockQ8_0),
	QUANT_ROW(CBLLM_Q4_0, QBlockQ4_0),
	QUANT_ROW(CBLLM_Q4_1, QBlockQ4_1),
	QUANT_ROW(CBLLM_Q5_0, QBlockQ5_0),
	QUANT_ROW(CBLLM_Q5_1, QBlockQ5_1),
	QUANT_ROW(CBLLM_Q2_K, QBlockQ2_K),
	QUANT_ROW(CBLLM_Q3_K, QBlockQ3_K),
	QUANT_ROW(CBLLM_Q4_K, QBlockQ4_K),
	QUANT_ROW(CBLLM_Q5_K, QBlockQ5_K),
	QUANT_ROW(CBLLM_Q6_K, QBlockQ6_K),
	QUANT_ROW(CBLLM_MXFP4, QBlockMXFP4),
};

/* *q = the row of dt; an error when dt is no block type or cols is not whole blocks of it. */
static int
QuantRow(cbllm_dtype dt, int64_t cols, const char *what, const quant_type **q, cbllm_err *err)
{
	*q = DtypeRow(quant_types, dt);
	if (*q == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: %s is not a block type the GPU runs",
						  what, cbllm_dtype_name(dt));
	if (cols <= 0 || cols % (*q)->qk != 0)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "%s: %lld elements are not whole %s blocks of %d",
						  what, (long long) cols, cbllm_dtype_name(dt), (*q)->qk);
	return CBLLM_OK;
}

extern "C" int
cuda_dequant(const void *d_w, cbllm_dtype dt, int64_t n, cbllm_dtype out_dt, void *d_out,
			 cuda_stream s, cbllm_err *err)
{
	const quant_type *q;
	int			rc = QuantRow(dt, n, "cuda_dequant", &q, err);
	int64_t		groups = n / 8;
	int			blocks = (int) ((groups + DEQUANT_THREADS - 1) / DEQUANT_THREADS < 65535 ?
								(groups + DEQUANT_THREADS - 1) / DEQUANT_THREADS : 65535);

	if (rc != CBLLM_OK)
		return rc;
	if (out_dt == CBLLM_F32)
	{
		dequant_f32_fn k = q->to_f32;

		CBLLM_LAUNCH(k, blocks, DEQUANT_THREADS, 0, s, (const uint8_t *) d_w, groups,
					 (float *) d_out);
	}
	else if (out_dt == CBLLM_BF16)
	{
		dequant_bf16_fn k = q->to_bf16;

		CBLLM_LAUNCH(k, blocks, DEQUANT_THREADS, 0, s, (const uint8_t *) d_w, groups,
					 (__nv_bfloat16 *) d_out);
	}
	else
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cuda_dequant: the output must be F32 or BF16, not %s",
						  cbllm_dtype_name(out_dt));
	return CheckLaunch("dequantize", err);
}

extern "C" int
cuda_qmatvec(const void *d_w, cbllm_dtype dt, int rows, int cols, const float *d_x, int T,
			 float *d_y, cuda_stream s, cbllm_err *err)
{
	const quant_type *q;
	int			rc = QuantRow(dt, cols, "cuda_qmatvec", &q, err);
	matvec_fn	k;

	if (rc != CBLLM_OK)
		return rc;
	if (T <= 0 || rows <= 0)
		return CBLLM_OK;
	if (T > CUDA_QMATVEC_MAX_T)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "cuda_qmatvec: %d tokens, at most %d", T,
						  CUDA_QMATVEC_MAX_T);
	k = q->matvec[T - 1];
	CBLLM_LAUNCH(k, (rows + MATVEC_WARPS - 1) / MATVEC_WARPS, 32 * MATVEC_WARPS, 0, s,
				 (const uint8_t *) d_w, (int64_t) cols / q->qk * q->bytes, cols, d_x, rows, d_y);
	return CheckLaunch("quantized matvec", err);
}

extern "C" int
cuda_qmatmul_tiled(void *blas, const void *d_w, cbllm_dtype dt, int rows, int cols,
				   const void *d_xh, int T, void *d_tile, int64_t tile_elems, float *d_y,
				   cuda_stream s, cbllm_err *err)
{
	const quant_type *q;
	int			rc = QuantRow(dt, cols, "cuda_qmatmul_tiled", &q, err);
	int			tile_rows;
	int64_t		row_bytes;

	if (rc != CBLLM_OK)
		return rc;
	if (T <= 0 || rows <= 0)
		return CBLLM_OK;
	if (tile_elems < cols)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "cuda_qmatmul_tiled: a tile of %lld elements holds no row of %d",
						  (long long) tile_elems, cols);
	tile_rows = tile_elems / cols < rows ? (int) (tile_elems / cols) : rows;
	row_bytes = (int64_t) cols / q->qk * q->bytes;
	for (int r0 = 0; r0 < rows; r0 += tile_rows)
	{
		int			n = rows - r0 < tile_rows ? rows - r0 : tile_rows;

		/* y[:, r0, r0 + n) = x @ tile^T, written in place with y's own row stride */
		if ((rc = cuda_dequant((const uint8_t *) d_w + r0 * row_bytes, dt, (int64_t) n * cols,
							   CBLLM_BF16, d_tile, s, err)) ||
			(rc = cuda_gemm_half_ld(blas, d_tile, CBLLM_BF16, n, cols, d_xh, T, d_y + r0, rows, s,
									err)))
			return rc;
	}
	return CBLLM_OK;
}
