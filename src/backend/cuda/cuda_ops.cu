/*
 * cuda_ops.cu: elementwise and row kernels of the CUDA backend: RMSNorm (and
 * RMSNorm fused with the residual add), SiLU- and GELU-tanh-and-multiply,
 * scaling, residual add,
 * RoPE, embedding lookup, row gather, the KV-cache scatter and dummy
 * weights.  One block per row for the row kernels (a warp-shuffle tree then
 * shared memory across warps); a grid-stride loop for the elementwise ones.
 * Every launch is checked and turned into a status code with a message.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dtype_device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_device.cuh"
#include "base/activation.h"
#include "base/rng.h"

#define ROW_THREADS 256


/*
 * One block per row: when y is given, x += y first (written back); then
 * out = x / rms(x) * w.  Each thread reads and writes only its own
 * elements, so out may be x or y.
 */
__global__ static void
RmsnormKernel(float *x, const float *y, const float *w, int dim, float eps, float *out)
{
	float	   *xr = x + (int64_t) blockIdx.x * dim;
	float	   *o = out + (int64_t) blockIdx.x * dim;
	float		ss = 0;
	float		scale;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
	{
		float		v = xr[i];

		if (y != NULL)
		{
			v += y[(int64_t) blockIdx.x * dim + i];
			xr[i] = v;
		}
		ss += v * v;
	}
	ss = BlockReduce<ROW_THREADS, false>(ss);
	scale = rsqrtf(ss / dim + eps);
	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		o[i] = w != NULL ? xr[i] * scale * w[i] : xr[i] * scale;
}

extern "C" int
cuda_rmsnorm(const float *d_x, const float *d_w, int T, int dim, float eps, float *d_out,
			 cuda_stream s, cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(RmsnormKernel, T, ROW_THREADS, 0, s, (float *) d_x, (const float *) NULL, d_w, dim,
				 eps, d_out);
	return CheckLaunch("rmsnorm", err);
}

/* The gated MLP's activations, as GateMulKernel applies them to the gate. */
enum gate_act
{
	GATE_SILU,
	GATE_GELU_TANH,
	GATE_SWIGLU_OAI
};

/* gate = act(gate, up), a grid-stride loop; limit: GATE_SWIGLU_OAI's clamp. */
__global__ static void
GateMulKernel(float *gate, const float *up, int64_t n, int act, float limit)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		float		g = gate[i];

		gate[i] = act == GATE_SILU ? cbllm_silu(g) * up[i] :
			act == GATE_GELU_TANH ? cbllm_gelu_tanh(g) * up[i] : cbllm_swiglu_oai(g, up[i], limit);
	}
}

/* Launch GateMulKernel with activation act; what names it in errors. */
static int
GateMul(float *d_gate, const float *d_up, int64_t n, int act, float limit, const char *what,
		cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(GateMulKernel, GridFor(n), 256, 0, s, d_gate, d_up, n, act, limit);
	return CheckLaunch(what, err);
}

extern "C" int
cuda_silu_mul(float *d_gate, const float *d_up, int64_t n, cuda_stream s, cbllm_err *err)
{
	return GateMul(d_gate, d_up, n, GATE_SILU, 0, "silu_mul", s, err);
}

extern "C" int
cuda_gelu_tanh_mul(float *d_gate, const float *d_up, int64_t n, cuda_stream s, cbllm_err *err)
{
	return GateMul(d_gate, d_up, n, GATE_GELU_TANH, 0, "gelu_tanh_mul", s, err);
}

extern "C" int
cuda_swiglu_oai_mul(float *d_gate, const float *d_up, int64_t n, float limit, cuda_stream s,
					cbllm_err *err)
{
	return GateMul(d_gate, d_up, n, GATE_SWIGLU_OAI, limit, "swiglu_oai_mul", s, err);
}

__global__ static void
ScaleKernel(float *x, float scale, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] *= scale;
}

extern "C" int
cuda_scale(float *d_x, float scale, int64_t n, cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(ScaleKernel, GridFor(n), 256, 0, s, d_x, scale, n);
	return CheckLaunch("scale", err);
}

__global__ static void
AddKernel(float *x, const float *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] += y[i];
}

extern "C" int
cuda_add(float *d_x, const float *d_y, int64_t n, cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(AddKernel, GridFor(n), 256, 0, s, d_x, d_y, n);
	return CheckLaunch("add", err);
}

/* x (n / dim, dim) += bias (dim): a grid-stride loop over every element. */
__global__ static void
AddBiasKernel(float *x, const float *bias, int64_t n, int dim)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] += bias[i % dim];
}

extern "C" int
cuda_add_bias(float *d_x, const float *d_bias, int T, int dim, cuda_stream s, cbllm_err *err)
{
	int64_t		n = (int64_t) T * dim;

	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(AddBiasKernel, GridFor(n), 256, 0, s, d_x, d_bias, n, dim);
	return CheckLaunch("add_bias", err);
}

/* One block per token, threads over (head, pair); the angles come from the position's table row. */
__global__ static void
RopeKernel(float *x, const float *cs, const float *sn, const int32_t *pos, int n_heads,
		   int head_dim, int stride, int half, bool interleaved)
{
	int			t = blockIdx.x,
				step = interleaved ? 2 : 1, /* pair i is (i * step, i * step + other) */
				other = interleaved ? 1 : half;
	const float *c = cs + (int64_t) pos[t] * stride;
	const float *s = sn + (int64_t) pos[t] * stride;

	for (int k = threadIdx.x; k < n_heads * half; k += blockDim.x)
	{
		int			h = k / half,
					i = k % half;
		float	   *v = x + ((int64_t) t * n_heads + h) * head_dim;
		float		a = v[i * step],
					b = v[i * step + other];

		v[i * step] = a * c[i] - b * s[i];
		v[i * step + other] = b * c[i] + a * s[i];
	}
}

extern "C" int
cuda_rope(float *d_x, const float *d_cos, const float *d_sin, const int32_t *d_pos, int T,
		  int n_heads, int head_dim, int stride, int rot_half, bool interleaved, cuda_stream s,
		  cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(RopeKernel, T, ROW_THREADS, 0, s, d_x, d_cos, d_sin, d_pos, n_heads, head_dim,
				 stride, rot_half, interleaved);
	return CheckLaunch("rope", err);
}

__global__ static void
SoftcapKernel(float *x, float cap, int64_t n)
{
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] = cap * tanhf(x[i] / cap);
}

extern "C" int
cuda_softcap(float *d_x, float cap, int64_t n, cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(SoftcapKernel, GridFor(n), 256, 0, s, d_x, cap, n);
	return CheckLaunch("softcap", err);
}

/* One block per (i, j) row of x (a, b, width): out's row (j, i). */
__global__ static void
SwapAxesKernel(const float *x, int a, int b, int width, float *out)
{
	int			i = blockIdx.x / b,
				j = blockIdx.x % b;
	const float *src = x + ((int64_t) i * b + j) * width;
	float	   *dst = out + ((int64_t) j * a + i) * width;

	for (int k = threadIdx.x; k < width; k += blockDim.x)
		dst[k] = src[k];
}

extern "C" int
cuda_swap_axes(const float *d_x, int a, int b, int width, float *d_out, cuda_stream s,
			   cbllm_err *err)
{
	if (a <= 0 || b <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(SwapAxesKernel, a * b, ROW_THREADS, 0, s, d_x, a, b, width, d_out);
	return CheckLaunch("swap_axes", err);
}

/* x[t] = row tokens[t] of emb (vocab, dim) of element type T, as f32. */
template <typename T>
__global__ static void
EmbedKernel(const void *emb, int dim, const int32_t *tokens, float *x)
{
	int64_t		row = tokens[blockIdx.x];
	float	   *o = x + (int64_t) blockIdx.x * dim;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		o[i] = ElemToFloat(((const T *) emb)[row * dim + i]);
}

/* x[t] = row tokens[t] of emb (vocab, dim) in the block type Q (quant_device.cuh), dequantized. */
template <typename Q>
__global__ static void
EmbedQuantKernel(const void *emb, int dim, const int32_t *tokens, float *x)
{
	const uint8_t *row = (const uint8_t *) emb + (int64_t) tokens[blockIdx.x] * (dim / Q::QK) * Q::BYTES;
	float	   *o = x + (int64_t) blockIdx.x * dim;

	for (int g = threadIdx.x; g < dim / 8; g += blockDim.x)
		Q::Decode8(row + g / (Q::QK / 8) * Q::BYTES, g % (Q::QK / 8), o + 8 * g);
}

/* The embedding kernel of each weight type an embedding table may have on the device. */
typedef struct embed_type
{
	cbllm_dtype dt;
	int			block;			/* elements per block: a row is whole blocks */
	void		(*kernel) (const void *emb, int dim, const int32_t *tokens, float *x);
} embed_type;

static const embed_type embed_types[] = {
	{CBLLM_F32, 1, EmbedKernel<float>},
	{CBLLM_F16, 1, EmbedKernel<__half>},
	{CBLLM_BF16, 1, EmbedKernel<__nv_bfloat16>},
	{CBLLM_Q8_0, 32, EmbedQuantKernel<QBlockQ8_0>},
	{CBLLM_Q4_0, 32, EmbedQuantKernel<QBlockQ4_0>},
	{CBLLM_Q4_1, 32, EmbedQuantKernel<QBlockQ4_1>},
	{CBLLM_Q5_0, 32, EmbedQuantKernel<QBlockQ5_0>},
	{CBLLM_Q5_1, 32, EmbedQuantKernel<QBlockQ5_1>},
	{CBLLM_Q2_K, 256, EmbedQuantKernel<QBlockQ2_K>},
	{CBLLM_Q3_K, 256, EmbedQuantKernel<QBlockQ3_K>},
	{CBLLM_Q4_K, 256, EmbedQuantKernel<QBlockQ4_K>},
	{CBLLM_Q5_K, 256, EmbedQuantKernel<QBlockQ5_K>},
	{CBLLM_Q6_K, 256, EmbedQuantKernel<QBlockQ6_K>},
	{CBLLM_MXFP4, 32, EmbedQuantKernel<QBlockMXFP4>},
};

extern "C" int
cuda_embed(const void *d_emb, cbllm_dtype dtype, int dim, const int32_t *d_tokens, int T,
		   float *d_x, cuda_stream s, cbllm_err *err)
{
	const embed_type *et = DtypeRow(embed_types, dtype);
	void		(*kernel) (const void *, int, const int32_t *, float *);

	if (T <= 0)
		return CBLLM_OK;
	if (et == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "embed: unknown dtype %d", (int) dtype);
	if (dim % et->block != 0)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "embed: rows of %d are not whole %s blocks of %d",
						  dim, cbllm_dtype_name(dtype), et->block);
	kernel = et->kernel;
	CBLLM_LAUNCH(kernel, T, ROW_THREADS, 0, s, d_emb, dim, d_tokens, d_x);
	return CheckLaunch("embed", err);
}

/* One block per token: its k and v rows, rounded to bf16, into their cache slots. */
__global__ static void
KvStoreKernel(__nv_bfloat16 *k_cache, __nv_bfloat16 *v_cache, const float *k, const float *v,
			  const int64_t *slots, int64_t row)
{
	int64_t		dst = slots[blockIdx.x] * row;
	int64_t		src = (int64_t) blockIdx.x * row;

	for (int64_t i = threadIdx.x; i < row; i += blockDim.x)
	{
		k_cache[dst + i] = __float2bfloat16(k[src + i]);
		v_cache[dst + i] = __float2bfloat16(v[src + i]);
	}
}

extern "C" int
cuda_kv_store(uint16_t *d_k_cache, uint16_t *d_v_cache, const float *d_k, const float *d_v,
			  const int64_t *d_slots, int T, int64_t row, cuda_stream s, cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(KvStoreKernel, T, ROW_THREADS, 0, s, (__nv_bfloat16 *) d_k_cache,
				 (__nv_bfloat16 *) d_v_cache, d_k, d_v, d_slots, row);
	return CheckLaunch("kv_store", err);
}

extern "C" int
cuda_add_rmsnorm(float *d_x, const float *d_y, const float *d_w, int T, int dim, float eps,
				 float *d_out, cuda_stream s, cbllm_err *err)
{
	if (T <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(RmsnormKernel, T, ROW_THREADS, 0, s, d_x, d_y, d_w, dim, eps, d_out);
	return CheckLaunch("add_rmsnorm", err);
}

/* One block per output row. */
__global__ static void
GatherRowsKernel(const float *x, const int32_t *rows, int dim, float *out)
{
	const float *src = x + (int64_t) rows[blockIdx.x] * dim;
	float	   *dst = out + (int64_t) blockIdx.x * dim;

	for (int i = threadIdx.x; i < dim; i += blockDim.x)
		dst[i] = src[i];
}

extern "C" int
cuda_gather_rows(const float *d_x, const int32_t *d_rows, int n, int dim, float *d_out,
				 cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(GatherRowsKernel, n, ROW_THREADS, 0, s, d_x, d_rows, dim, d_out);
	return CheckLaunch("gather_rows", err);
}

/* Element i of a dummy tensor: rng.h's cbllm_dummy_value, scaled, as bf16. */
__global__ static void
FillDummyKernel(__nv_bfloat16 *w, int64_t n, uint64_t seed, float scale)
{
	for (int64_t i = blockIdx.x * (int64_t) blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		w[i] = __float2bfloat16(cbllm_dummy_value(seed, (uint64_t) i) * scale);
	}
}

extern "C" int
cuda_fill_dummy(uint16_t *d_w, int64_t n, uint64_t seed, float scale, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(FillDummyKernel, GridFor(n), 256, 0, (cuda_stream) 0, (__nv_bfloat16 *) d_w, n,
				 seed, scale);
	return CheckLaunch("fill_dummy", err);
}
