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
 *   DeltaKernel     one block per (sequence, value head): the delta rule
 *                   in its chunked form, a chunk's part of the step's
 *                   tokens at a time (see the kernel), then the gated
 *                   RMSNorm of the head's outputs.
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
#include "base/activation.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.cuh"
#include "kv/state_cache.h"

#define CONV_THREADS 256
#define DELTA_THREADS 128		/* threads of a delta-rule block; a column each, looping when
								 * v_dim is larger */
#define MAX_CONV 64				/* kernel taps: config.json's linear_conv_kernel_dim is at most 64 */
#define MAX_DELTA_KEY 256		/* key head size whose chunk rows of q fit in shared memory */

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
		*x = cbllm_silu(y);
	}
	for (int r = 0; r < K - 1; r++)
		hist[(int64_t) r * conv_dim + ch] = h[r];
}

/*
 * Pass 2: one block per (sequence, value head), the chunked delta rule of
 * cpu_linear_attn.c (the formulas are there; the state's layout is
 * kv/state_cache.h's).  The sequence's tokens go a chunk's part of m rows
 * at a time:
 *
 *   1. row by row, q and k normed (block reductions): q into shared memory,
 *      k into the state's chunk rows; then thread 0 extends the chunk's
 *      cumulative log decays;
 *   2. a thread per (row, earlier chunk row) pair: the decayed products
 *      k[r] . k[j] and q[r] . k[j], each a sum over k_dim in order;
 *   3. a thread per column of the state: S^T k and S^T q of the part's
 *      rows, the new values u and the outputs row by row from the earlier
 *      rows' u (its own column of them), and the fold of a complete chunk
 *      into its column of S;
 *   4. row by row, the gated RMSNorm of the outputs (block reductions).
 *
 * Every sum is over a fixed range in a fixed order, so a position's bits do
 * not depend on how its chunk was split over steps.
 */
__global__ static void
DeltaKernel(const float *qkv, const float *z, const float *beta, const float *alpha,
			const float *a, const float *dt_bias, const float *norm, float *states,
			const int32_t *seq_first, const int32_t *slots, const int32_t *pos, float *out,
			int nk, int nv, int dk, int dv, bool tiled, float eps, int64_t slot_floats,
			int64_t head_floats)
{
	enum
	{
		C = STATE_CHUNK_ROWS
	};
	CBLLM_DYN_SHARED(float, sh);	/* Q (C, dk), KK (C, C), QK (C, C), gcs (C), bs (C), ws (C) */
	int			s = blockIdx.x / nv,
				hd = blockIdx.x % nv,
				kh = tiled ? hd % nk : hd / (nv / nk),
				conv_dim = 2 * nk * dk + nv * dv;
	int			t0 = seq_first[s],
				t1 = seq_first[s + 1];
	float	   *S = states + slots[s] * slot_floats + hd * head_floats,
			   *K = S + (int64_t) dk * dv,
			   *U = K + (int64_t) C * dk,
			   *gc = U + (int64_t) C * dv;
	float	   *Q = sh,
			   *KK = Q + C * dk,
			   *QK = KK + C * C,
			   *gcs = QK + C * C,
			   *bs = gcs + C,
			   *ws = bs + C;

	if (pos[t0] == 0)
		for (int i = threadIdx.x; i < dk * dv; i += blockDim.x)
			S[i] = 0.0f;
	for (int t = t0; t < t1;)
	{
		int			r0 = pos[t] % C,
					m = C - r0 < t1 - t ? C - r0 : t1 - t,
					n = r0 + m;

		/* 1: the rows' normed q and k, the chunk's decays */
		for (int i = threadIdx.x; i < r0; i += blockDim.x)
			gcs[i] = gc[i];
		__syncthreads();
		for (int i = 0; i < m; i++)
		{
			const float *row = qkv + (int64_t) (t + i) * conv_dim;
			float		qq = 0.0f,
						kk = 0.0f;

			for (int x = threadIdx.x; x < dk; x += blockDim.x)
			{
				float		q = row[kh * dk + x],
							k = row[nk * dk + kh * dk + x];

				qq += q * q;
				kk += k * k;
			}
			qq = BlockReduce<DELTA_THREADS, false>(qq);
			kk = BlockReduce<DELTA_THREADS, false>(kk);
			qq = 1.0f / sqrtf(qq + 1e-6f) / sqrtf((float) dk);
			kk = 1.0f / sqrtf(kk + 1e-6f);
			for (int x = threadIdx.x; x < dk; x += blockDim.x)
			{
				Q[i * dk + x] = row[kh * dk + x] * qq;
				K[(int64_t) (r0 + i) * dk + x] = row[nk * dk + kh * dk + x] * kk;
			}
		}
		if (threadIdx.x == 0)
			for (int i = 0; i < m; i++)
			{
				int64_t		ai = (int64_t) (t + i) * nv + hd;
				int			r = r0 + i;

				gcs[r] = (r == 0 ? 0.0f : gcs[r - 1]) +
					a[hd] * cbllm_softplus(alpha[ai] + dt_bias[hd]);
				gc[r] = gcs[r];
				bs[r] = cbllm_sigmoid(beta[ai]);
			}
		__syncthreads();
		/* 2: the decayed products of each row with the chunk's rows up to it */
		for (int p = threadIdx.x; p < m * n; p += blockDim.x)
		{
			int			i = p / n,
						j = p % n,
						r = r0 + i;
			float		dkk = 0.0f,
						dqk = 0.0f,
						d;

			if (j > r)
				continue;
			for (int x = 0; x < dk; x++)
			{
				float		kj = K[(int64_t) j * dk + x];

				dkk += K[(int64_t) r * dk + x] * kj;
				dqk += Q[i * dk + x] * kj;
			}
			d = expf(gcs[r] - gcs[j]);
			KK[i * C + j] = d * dkk;
			QK[i * C + j] = d * dqk;
		}
		if (n == C)
			for (int j = threadIdx.x; j < C; j += blockDim.x)
				ws[j] = expf(gcs[C - 1] - gcs[j]);
		__syncthreads();
		/* 3: per column, the rows' new values and outputs; a complete chunk folded */
		for (int c = threadIdx.x; c < dv; c += blockDim.x)
		{
			for (int i = 0; i < m; i++)
			{
				int			r = r0 + i;
				const float *v = qkv + (int64_t) (t + i) * conv_dim + 2 * nk * dk + hd * dv;
				float		ks = 0.0f,
							qs = 0.0f,
							acc = 0.0f,
							g = expf(gcs[r]),
							u,
							o;

				for (int x = 0; x < dk; x++)
				{
					float		w = S[(int64_t) x * dv + c];

					ks += K[(int64_t) r * dk + x] * w;
					qs += Q[i * dk + x] * w;
				}
				for (int j = 0; j < r; j++)
					acc += KK[i * C + j] * U[(int64_t) j * dv + c];
				u = (v[c] - (g * ks + acc)) * bs[r];
				U[(int64_t) r * dv + c] = u;
				o = g * qs;
				for (int j = 0; j < r; j++)
					o += QK[i * C + j] * U[(int64_t) j * dv + c];
				o += QK[i * C + r] * u;
				out[((int64_t) (t + i) * nv + hd) * dv + c] = o;
			}
			if (n == C)
			{
				float		uc[C],
							gl = expf(gcs[C - 1]);

				for (int j = 0; j < C; j++)
					uc[j] = U[(int64_t) j * dv + c] * ws[j];
				for (int x = 0; x < dk; x++)
				{
					float		w = gl * S[(int64_t) x * dv + c];

					for (int j = 0; j < C; j++)
						w += K[(int64_t) j * dk + x] * uc[j];
					S[(int64_t) x * dv + c] = w;
				}
			}
		}
		/* 4: the gated RMSNorm of each row's output */
		for (int i = 0; i < m; i++)
		{
			float	   *o = out + ((int64_t) (t + i) * nv + hd) * dv;
			const float *zr = z + ((int64_t) (t + i) * nv + hd) * dv;
			float		oo = 0.0f;

			for (int c = threadIdx.x; c < dv; c += blockDim.x)
				oo += o[c] * o[c];
			oo = BlockReduce<DELTA_THREADS, false>(oo);
			oo = 1.0f / sqrtf(oo / dv + eps);
			for (int c = threadIdx.x; c < dv; c += blockDim.x)
				o[c] = o[c] * oo * norm[c] * cbllm_silu(zr[c]);
		}
		__syncthreads();
		t += m;
	}
}

/* Dynamic shared memory of DeltaKernel. */
static size_t
DeltaShared(int dk)
{
	return sizeof(float) * ((size_t) STATE_CHUNK_ROWS * dk +
							2 * STATE_CHUNK_ROWS * STATE_CHUNK_ROWS + 3 * STATE_CHUNK_ROWS);
}

extern "C" int
cuda_linear_attention(const cuda_linear_args *a, cuda_stream s, cbllm_err *err)
{
	int			conv_dim = 2 * a->nk * a->dk + a->nv * a->dv;
	int64_t		slot_floats = (int64_t) (a->conv - 1) * conv_dim;
	state_cache_params sp = {};
	int64_t		head_floats;
	dim3		conv_grid((conv_dim + CONV_THREADS - 1) / CONV_THREADS, a->n_seqs);
	int			rc;

	if (a->n_seqs <= 0)
		return CBLLM_OK;
	if (a->conv > MAX_CONV)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "a conv kernel of %d taps exceeds %d",
						  a->conv, MAX_CONV);
	sp.k_dim = a->dk;
	sp.v_dim = a->dv;
	head_floats = state_cache_head_floats(&sp);
	if (a->dk > MAX_DELTA_KEY)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "linear attention's key heads of %d exceed the %d the GPU's delta rule takes",
						  a->dk, MAX_DELTA_KEY);
	CBLLM_LAUNCH(LinConvKernel, conv_grid, CONV_THREADS, 0, s, a->qkv, a->kern, a->conv_states,
				 a->seq_first, a->slots, a->pos, conv_dim, a->conv, slot_floats);
	if ((rc = CheckLaunch("linear attention conv", err)) != CBLLM_OK)
		return rc;
	CBLLM_LAUNCH(DeltaKernel, a->n_seqs * a->nv, DELTA_THREADS, DeltaShared(a->dk), s, a->qkv,
				 a->z, a->beta, a->alpha, a->a, a->dt_bias, a->norm, a->rec_states, a->seq_first,
				 a->slots, a->pos, a->out, a->nk, a->nv, a->dk, a->dv, a->tiled, a->eps,
				 a->nv * head_floats, head_floats);
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
		x[i] += y[i] * cbllm_sigmoid(logit[i / dim]);
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
		x[i] *= cbllm_sigmoid(gate[i]);
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
