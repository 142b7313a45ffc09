/*
 * cuda_linear_attn.cu: a hybrid model's Gated DeltaNet on the device
 * (backend.h's linear_attention), and the two small operations of its gated
 * attention layers (q and its gate split apart, the output times the
 * gate's sigmoid).
 *
 * The state of every sequence lives in device memory, in the layout of the
 * host's state cache (kv/state_cache.h), one slot per sequence.  Two
 * kernels per layer, as on the CPU:
 *
 *   LinConvKernel   one thread per (sequence, channel): the channel's
 *                   kernel slides over the sequence's past inputs (its
 *                   state, zero before position 0) and the step's tokens in
 *                   order; outputs through silu replace the inputs, the
 *                   last inputs become the state;
 *   DeltaKernel     one block per (sequence, value head), a thread per
 *                   column of the head's (k_dim, v_dim) state: the step's
 *                   tokens in order, q and k normed by block reductions into
 *                   shared memory, each thread decaying, reading and
 *                   updating its column, then the gated RMSNorm of the
 *                   head's output (a block reduction again).
 *
 * (And Qwen3.5-MoE's shared expert's gate: its output rows added, each
 * times the sigmoid of its logit.)
 *
 * A sequence's tokens are consecutive in the batch; seq_first (n_seqs + 1)
 * gives where each starts, slots (n_seqs) its state slot.  The work of a
 * sequence is the same whatever else is in the step.
 */
#include <cuda_runtime.h>

#include <math.h>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"

#define CONV_THREADS 256
#define DELTA_THREADS 128		/* threads of a delta-rule block; a column each, looping when
								 * v_dim is larger */
#define MAX_CONV 64				/* kernel taps: config.json's linear_conv_kernel_dim is at most 64 */

__device__ static inline float
Silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* Pass 1: one thread per (sequence, channel). */
__global__ static void
LinConvKernel(float *qkv, const float *kern, float *states, const int32_t *seq_first,
			  const int32_t *slots, const int32_t *pos, int conv_dim, int K, int64_t slot_floats)
{
	int			s = blockIdx.y,
				ch = blockIdx.x * blockDim.x + threadIdx.x;
	int			t0 = seq_first[s],
				t1 = seq_first[s + 1];
	float	   *hist = states + slots[s] * slot_floats;
	bool		fresh = pos[t0] == 0;
	float		h[MAX_CONV];

	if (ch >= conv_dim)
		return;
	for (int r = 0; r < K - 1; r++)
		h[r] = fresh ? 0.0f : hist[(int64_t) r * conv_dim + ch];
	for (int t = t0; t < t1; t++)
	{
		float	   *x = qkv + (int64_t) t * conv_dim + ch;
		float		in = *x,
					y = kern[(int64_t) ch * K + K - 1] * in;

		for (int r = 0; r < K - 1; r++)
			y += kern[(int64_t) ch * K + r] * h[r];
		for (int r = 0; r + 1 < K - 1; r++)
			h[r] = h[r + 1];
		if (K > 1)
			h[K - 2] = in;
		*x = Silu(y);
	}
	for (int r = 0; r < K - 1; r++)
		hist[(int64_t) r * conv_dim + ch] = h[r];
}

/* Pass 2: one block per (sequence, value head). */
__global__ static void
DeltaKernel(const float *qkv, const float *z, const float *beta, const float *alpha,
			const float *a, const float *dt_bias, const float *norm, float *states,
			const int32_t *seq_first, const int32_t *slots, const int32_t *pos, float *out,
			int nk, int nv, int dk, int dv, bool tiled, float eps, int64_t slot_floats)
{
	CBLLM_DYN_SHARED(float, sh);	/* q (dk), k (dk), then a scratch of dv */
	int			s = blockIdx.x / nv,
				hd = blockIdx.x % nv,
				kh = tiled ? hd % nk : hd / (nv / nk),
				conv_dim = 2 * nk * dk + nv * dv;
	int			t0 = seq_first[s],
				t1 = seq_first[s + 1];
	float	   *S = states + slots[s] * slot_floats + (int64_t) hd * dk * dv;
	float	   *q = sh,
			   *k = sh + dk,
			   *o = sh + 2 * dk;

	if (pos[t0] == 0)
		for (int i = threadIdx.x; i < dk * dv; i += blockDim.x)
			S[i] = 0.0f;
	__syncthreads();
	for (int t = t0; t < t1; t++)
	{
		const float *row = qkv + (int64_t) t * conv_dim;
		const float *v = row + 2 * nk * dk + hd * dv;
		float		qq = 0.0f,
					kk = 0.0f,
					oo = 0.0f,
					decay = expf(a[hd] * (alpha[(int64_t) t * nv + hd] + dt_bias[hd] > 20.0f ?
										  alpha[(int64_t) t * nv + hd] + dt_bias[hd] :
										  log1pf(expf(alpha[(int64_t) t * nv + hd] + dt_bias[hd])))),
					b = 1.0f / (1.0f + expf(-beta[(int64_t) t * nv + hd]));

		for (int i = threadIdx.x; i < dk; i += blockDim.x)
		{
			float		x = row[kh * dk + i],
						y = row[nk * dk + kh * dk + i];

			q[i] = x;
			k[i] = y;
			qq += x * x;
			kk += y * y;
		}
		qq = BlockReduce<DELTA_THREADS, false>(qq);
		kk = BlockReduce<DELTA_THREADS, false>(kk);
		qq = 1.0f / sqrtf(qq + 1e-6f) / sqrtf((float) dk);
		kk = 1.0f / sqrtf(kk + 1e-6f);
		for (int i = threadIdx.x; i < dk; i += blockDim.x)
		{
			q[i] *= qq;
			k[i] *= kk;
		}
		__syncthreads();
		for (int c = threadIdx.x; c < dv; c += blockDim.x)
		{
			float		kv = 0.0f,
						d,
						acc = 0.0f;

			for (int i = 0; i < dk; i++)
			{
				float		w = S[(int64_t) i * dv + c] * decay;

				S[(int64_t) i * dv + c] = w;
				kv += k[i] * w;
			}
			d = (v[c] - kv) * b;
			for (int i = 0; i < dk; i++)
			{
				float		w = S[(int64_t) i * dv + c] + k[i] * d;

				S[(int64_t) i * dv + c] = w;
				acc += q[i] * w;
			}
			o[c] = acc;
			oo += acc * acc;
		}
		oo = BlockReduce<DELTA_THREADS, false>(oo);
		oo = 1.0f / sqrtf(oo / dv + eps);
		for (int c = threadIdx.x; c < dv; c += blockDim.x)
		{
			float		g = z[((int64_t) t * nv + hd) * dv + c];

			out[((int64_t) t * nv + hd) * dv + c] = o[c] * oo * norm[c] * Silu(g);
		}
		__syncthreads();
	}
}

extern "C" int
cuda_linear_attention(const cuda_linear_args *a, cuda_stream s, cbllm_err *err)
{
	int			conv_dim = 2 * a->nk * a->dk + a->nv * a->dv;
	int64_t		slot_floats = (int64_t) (a->conv - 1) * conv_dim;
	dim3		conv_grid((conv_dim + CONV_THREADS - 1) / CONV_THREADS, a->n_seqs);
	int			rc;

	if (a->n_seqs <= 0)
		return CBLLM_OK;
	if (a->conv > MAX_CONV)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "a conv kernel of %d taps exceeds %d",
						  a->conv, MAX_CONV);
	CBLLM_LAUNCH(LinConvKernel, conv_grid, CONV_THREADS, 0, s, a->qkv, a->kern, a->conv_states,
				 a->seq_first, a->slots, a->pos, conv_dim, a->conv, slot_floats);
	if ((rc = CheckLaunch("linear attention conv", err)) != CBLLM_OK)
		return rc;
	CBLLM_LAUNCH(DeltaKernel, a->n_seqs * a->nv, DELTA_THREADS,
				 sizeof(float) * (2 * a->dk + a->dv), s, a->qkv, a->z, a->beta, a->alpha, a->a,
				 a->dt_bias, a->norm, a->rec_states, a->seq_first, a->slots, a->pos, a->out,
				 a->nk, a->nv, a->dk, a->dv, a->tiled, a->eps,
				 (int64_t) a->nv * a->dk * a->dv);
	return CheckLaunch("linear attention delta rule", err);
}

/* Row r of x (n, 2 width) into first and second. */
__global__ static void
SplitHalvesKernel(const float *x, int64_t n, int width, float *first, float *second)
{
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n * width;
		 i += (int64_t) gridDim.x * blockDim.x)
	{
		int64_t		r = i / width,
					c = i % width;

		first[i] = x[2 * r * width + c];
		second[i] = x[(2 * r + 1) * width + c];
	}
}

/* x[t] += sigmoid(logit[t]) * y[t] over rows of dim. */
__global__ static void
AddGatedRowsKernel(float *x, const float *y, const float *logit, int64_t n, int dim)
{
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] += y[i] / (1.0f + expf(-logit[i / dim]));
}

extern "C" int
cuda_add_gated_rows(float *d_x, const float *d_y, const float *d_logit, int T, int dim,
					cuda_stream s, cbllm_err *err)
{
	int64_t		n = (int64_t) T * dim;

	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(AddGatedRowsKernel, GridFor(n), 256, 0, s, d_x, d_y, d_logit, n, dim);
	return CheckLaunch("add_gated_rows", err);
}

/* x[i] *= sigmoid(gate[i]). */
__global__ static void
SigmoidMulKernel(float *x, const float *gate, int64_t n)
{
	for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
		 i += (int64_t) gridDim.x * blockDim.x)
		x[i] *= 1.0f / (1.0f + expf(-gate[i]));
}


extern "C" int
cuda_split_halves(const float *d_x, int64_t n, int width, float *d_first, float *d_second,
				  cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(SplitHalvesKernel, GridFor(n * width), 256, 0, s, d_x, n, width, d_first, d_second);
	return CheckLaunch("split_halves", err);
}

extern "C" int
cuda_sigmoid_mul(float *d_x, const float *d_gate, int64_t n, cuda_stream s, cbllm_err *err)
{
	if (n <= 0)
		return CBLLM_OK;
	CBLLM_LAUNCH(SigmoidMulKernel, GridFor(n), 256, 0, s, d_x, d_gate, n);
	return CheckLaunch("sigmoid_mul", err);
}
