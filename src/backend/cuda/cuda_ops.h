/*
 * cuda_ops.h: the CUDA runtime calls and kernels of the compute backend,
 * reached from C.
 *
 * Every function returns a cbllm_status (0 ok) and, on a CUDA error, fills
 * err with the failing call and CUDA's message; nothing here aborts.
 * Pointers named d_* are device memory, h_* pinned host memory; shapes are
 * given as in backend.h.  Kernels run on the stream given (NULL: the legacy
 * stream) and are launched asynchronously; so are the *_async copies.  This
 * header includes no CUDA and no PostgreSQL header.
 */
#ifndef CBLLM_CUDA_OPS_H
#define CBLLM_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "dtype/dtype.h"
#include "sample/sampler.h"

#ifdef __cplusplus
extern "C"
{
#endif

/* A CUDA stream, event and instantiated graph (the runtime's own types). */
typedef struct CUstream_st *cuda_stream;
typedef struct CUevent_st *cuda_event;
typedef struct CUgraphExec_st *cuda_graph;

/* ------------------------------------------------------ cuda_runtime_ops.cu */

/* Number of usable CUDA devices; 0 when there is none or no driver. */
int			cuda_device_count(void);

/* The device's name and memory, e.g. "NVIDIA H200, 143771 MiB". */
void		cuda_device_describe(char *buf, size_t len);

/* Whether the device still works: false after a fault that poisons the context. */
int			cuda_device_ok(void);

/* Free and total device memory in bytes. */
int			cuda_mem_info(size_t *free_b, size_t *total_b, cbllm_err *err);

int			cuda_alloc(void **d_ptr, size_t bytes, cbllm_err *err);
void		cuda_free(void *d_ptr);
/* Page-locked host memory, for asynchronous copies. */
int			cuda_host_alloc(void **h_ptr, size_t bytes, cbllm_err *err);
void		cuda_host_free(void *h_ptr);
/* Page-lock (or release) existing host memory. */
int			cuda_host_register(void *p, size_t bytes, cbllm_err *err);
void		cuda_host_unregister(void *p);

/* Copies finished on return, in the legacy stream's order (never while a stream captures a graph). */
int			cuda_upload(void *d_dst, const void *src, size_t bytes, cbllm_err *err);
int			cuda_download(void *dst, const void *d_src, size_t bytes, cbllm_err *err);
int			cuda_copy(void *d_dst, const void *d_src, size_t bytes, cbllm_err *err);
/* Copies ordered on a stream; host memory should be page-locked. */
int			cuda_copy_async(void *dst, const void *src, size_t bytes, cuda_stream s,
							cbllm_err *err);
/* rows rows of width bytes, dst_pitch and src_pitch bytes apart, ordered on a stream. */
int			cuda_copy_2d_async(void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
							   size_t width, size_t rows, cuda_stream s, cbllm_err *err);

int			cuda_stream_create(cuda_stream *s, cbllm_err *err);
void		cuda_stream_destroy(cuda_stream s);
int			cuda_stream_sync(cuda_stream s, cbllm_err *err);
int			cuda_event_create(cuda_event *e, cbllm_err *err);
void		cuda_event_destroy(cuda_event e);
int			cuda_event_record(cuda_event e, cuda_stream s, cbllm_err *err);
/* Make stream s wait (on the device) for the work recorded in e. */
int			cuda_stream_wait(cuda_stream s, cuda_event e, cbllm_err *err);
int			cuda_event_sync(cuda_event e, cbllm_err *err);

/* Record what is launched on s from now on, instead of running it. */
int			cuda_capture_begin(cuda_stream s, cbllm_err *err);
/* Stop recording and make the recording an executable graph. */
int			cuda_capture_end(cuda_stream s, cuda_graph *g, cbllm_err *err);
int			cuda_graph_launch(cuda_graph g, cuda_stream s, cbllm_err *err);
void		cuda_graph_destroy(cuda_graph g);

/*
 * Device-to-device copy bandwidth in GB/s (bytes read plus bytes written per
 * second), the median of iters copies of bytes each.
 */
int			cuda_copy_bandwidth(size_t bytes, int iters, double *gbps, cbllm_err *err);

/* -------------------------------------------------------------- cuda_ops.cu */

/* d_out (T, dim) = d_x / rms(d_x) * d_w; d_out may be d_x; rows may be heads (T * n_heads, head_dim) */
int			cuda_rmsnorm(const float *d_x, const float *d_w, int T, int dim, float eps,
						 float *d_out, cuda_stream s, cbllm_err *err);

/* d_x += d_y, then d_out = rmsnorm(d_x) * d_w: the residual add fused with the next norm */
int			cuda_add_rmsnorm(float *d_x, const float *d_y, const float *d_w, int T, int dim,
							 float eps, float *d_out, cuda_stream s, cbllm_err *err);

/* d_gate[i] = silu(d_gate[i]) * d_up[i] */
int			cuda_silu_mul(float *d_gate, const float *d_up, int64_t n, cuda_stream s,
						  cbllm_err *err);

/* d_gate[i] = swiglu_oai(d_gate[i], d_up[i], limit) (src/base/activation.h; gpt-oss) */
int			cuda_swiglu_oai_mul(float *d_gate, const float *d_up, int64_t n, float limit,
								cuda_stream s, cbllm_err *err);

/* d_gate[i] = gelu_tanh(d_gate[i]) * d_up[i] (src/base/activation.h) */
int			cuda_gelu_tanh_mul(float *d_gate, const float *d_up, int64_t n, cuda_stream s,
							   cbllm_err *err);

/* d_x[i] *= scale */
int			cuda_scale(float *d_x, float scale, int64_t n, cuda_stream s, cbllm_err *err);

/* d_x[i] += d_y[i] */
int			cuda_add(float *d_x, const float *d_y, int64_t n, cuda_stream s, cbllm_err *err);

/* d_x (T, dim) += d_bias (dim) on every row */
int			cuda_add_bias(float *d_x, const float *d_bias, int T, int dim, cuda_stream s,
						  cbllm_err *err);

/*
 * Rotate d_x (T, n_heads, head_dim) in place, pairs (i, i + rot_half) for
 * i < rot_half (the head's first 2 rot_half dimensions; the rest pass) or,
 * interleaved, (2i, 2i + 1), by
 * the angle of table row d_pos[t]: d_cos, d_sin (rows, stride) hold the
 * RoPE configuration's cos and sin (rope_fill) of a position in a factor
 * set per row (the backend's rows: set * max positions + position).
 */
int			cuda_rope(float *d_x, const float *d_cos, const float *d_sin, const int32_t *d_pos,
					  int T, int n_heads, int head_dim, int stride, int rot_half, bool interleaved,
					  cuda_stream s, cbllm_err *err);

/* d_x[i] = cap * tanh(d_x[i] / cap) (Gemma 4's final logits) */
int			cuda_softcap(float *d_x, float cap, int64_t n, cuda_stream s, cbllm_err *err);

/* d_out (b, a, width) = d_x (a, b, width), the first two axes swapped */
int			cuda_swap_axes(const float *d_x, int a, int b, int width, float *d_out, cuda_stream s,
						   cbllm_err *err);

/*
 * d_x (T, dim) = rows d_tokens[t] of an embedding table d_emb (vocab, dim)
 * stored as dtype (one with a row in cuda_ops.cu's embed_types).
 */
int			cuda_embed(const void *d_emb, cbllm_dtype dtype, int dim, const int32_t *d_tokens, int T,
					   float *d_x, cuda_stream s, cbllm_err *err);

/*
 * Mixture of experts (cuda_moe.cu): d_ids (T, k) and d_weights (T, k), each
 * token's experts and weights from its router logits d_logits (T, E), as
 * src/model/moe.h routes; each weight times d_scale[its expert] when d_scale
 * (E) is given (Gemma 4's per-expert scale).
 */
int			cuda_moe_route(const float *d_logits, int T, int E, int k, bool renormalise,
						   const float *d_scale, int32_t *d_ids, float *d_weights, cuda_stream s,
						   cbllm_err *err);

/* d_out (T, H): token t's sum over j < k of d_weights[t k + j] * row d_slot[t k + j] of d_y, in j's order */
int			cuda_moe_combine(const float *d_y, const int32_t *d_slot, const float *d_weights,
							 int T, int k, int H, float *d_out, cuda_stream s, cbllm_err *err);

/* d_out (n, dim) = rows d_rows[i] of d_x */
int			cuda_gather_rows(const float *d_x, const int32_t *d_rows, int n, int dim,
							 float *d_out, cuda_stream s, cbllm_err *err);

/*
 * Write the step's keys and values, d_k and d_v (T, row floats), as bf16
 * into one layer's cache (n_blocks * block_size slots of row halves) at
 * d_slots[t].
 */
int			cuda_kv_store(uint16_t *d_k_cache, uint16_t *d_v_cache, const float *d_k,
						  const float *d_v, const int64_t *d_slots, int T, int64_t row,
						  cuda_stream s, cbllm_err *err);

/*
 * Fill n bf16 elements with dummy weights: element i is
 * cbllm_dummy_value(seed, i) * scale (src/base/rng.h), rounded to nearest even.
 */
int			cuda_fill_dummy(uint16_t *d_w, int64_t n, uint64_t seed, float scale,
							cbllm_err *err);

/* -------------------------------------------------------- cuda_attention.cu */

/*
 * d_out (T, n_heads, head_dim) = causal attention of d_q (T, n_heads,
 * head_dim) over one layer's paged bf16 cache d_k_cache, d_v_cache
 * (n_blocks, block_size, n_kv_heads, head_dim).  Token t (sequence d_seq[t],
 * position d_pos[t]) sees positions [0, pos] (the last sliding_window of them
 * when > 0: the layer's window) through row d_seq[t] of d_tables (n_seqs, max_blocks).  max_ctx
 * bounds every position + 1 and sizes the kernel's shared memory, so one
 * launch serves any batch of the same T (a CUDA graph replays it).  d_sinks
 * (n_heads) or NULL: each head's sink logit in its softmax's denominator.
 */
int			cuda_attention(const float *d_q, const uint16_t *d_k_cache,
						   const uint16_t *d_v_cache, const int32_t *d_tables, int max_blocks,
						   const int32_t *d_pos, const int32_t *d_seq, int T, int n_heads,
						   int n_kv_heads, int head_dim, int block_size, int sliding_window,
						   int max_ctx, float scale, const float *d_sinks, float *d_out,
						   cuda_stream s, cbllm_err *err);

/* ----------------------------------------------------------- cuda_sample.cu */

/* d_out[r] = index of the largest of row r of d_logits (rows, n); the first of equals */
int			cuda_argmax(const float *d_logits, int rows, int n, int32_t *d_out, cuda_stream s,
						cbllm_err *err);


/*
 * d_out[r] = a token drawn from the first n ids of row r of d_logits (rows,
 * stride) with d_params[r] (ids from n on, a vocabulary's padding, are never drawn):
 * the top_k largest logits (ties by lower id), softmax at the temperature,
 * then the smallest set of most likely tokens whose mass reaches top_p, and
 * the token where u * (their mass) falls, walking them in id order.
 * Greedy rows (temperature <= 0 or top_k == 1) take the argmax.
 */
int			cuda_sample(const float *d_logits, int rows, int n, int stride,
						const sampler_row *d_params, int32_t *d_out, cuda_stream s,
						cbllm_err *err);

/*
 * Constrained rows: for each row r of d_logits (rows, stride) whose
 * d_params[r].mask is k > 0, ids below n that row k - 1 of d_masks (n_masks
 * rows of (n + 31) / 32 words) does not allow become -inf, in place.  A row
 * whose index is past n_masks (the caller never gives one) is left as it is.
 */
int			cuda_apply_masks(float *d_logits, int rows, int n, int stride,
							 const sampler_row *d_params, const uint32_t *d_masks, int n_masks,
							 cuda_stream s, cbllm_err *err);

/* ------------------------------------------------------------- cuda_gemm.cu */

/* A cuBLAS handle (opaque) with its own workspace, so that GEMMs can be captured in graphs. */
int			cuda_blas_create(void **handle, cbllm_err *err);
void		cuda_blas_destroy(void *handle);

/*
 * d_xh (n elements of dtype, a CBLLM_CUDA_GEMM type of cuda_dtype_traits.c) =
 * d_x (n floats), rounded to nearest even.
 */
int			cuda_to_half(const float *d_x, int64_t n, cbllm_dtype dtype, void *d_xh, cuda_stream s,
						 cbllm_err *err);

/* d_y (T, rows) = d_xh (T, cols, of dtype) @ W^T in cuBLAS, f32 accumulation. */
int			cuda_gemm_half(void *handle, const void *d_w, cbllm_dtype dtype, int rows, int cols,
						   const void *d_xh, int T, float *d_y, cuda_stream s, cbllm_err *err);

/* The same into the columns [0, rows) of d_y (T, ldy), ldy >= rows: one tile of a wider output. */
int			cuda_gemm_half_ld(void *handle, const void *d_w, cbllm_dtype dtype, int rows,
							  int cols, const void *d_xh, int T, float *d_y, int ldy,
							  cuda_stream s, cbllm_err *err);

/*
 * d_y (T, rows) = d_x (T, cols) @ W^T, W (rows, cols) row-major on the device
 * in dtype, a CBLLM_CUDA_GEMM type (f16, bf16); d_x is converted to that type
 * in d_xh (T * cols elements of scratch) and cuBLAS accumulates in f32.
 */
int			cuda_matmul(void *handle, const void *d_w, cbllm_dtype dtype, int rows, int cols,
						const float *d_x, int T, void *d_xh, float *d_y, cuda_stream s,
						cbllm_err *err);

/* ------------------------------------------------------------ cuda_quant.cu */

/*
 * The GGUF block types (CBLLM_CUDA_QUANT rows of cuda_dtype_traits.c), kept
 * on the device as stored: a matrix (rows, cols) is rows rows of cols /
 * block_elems blocks.  Every call refuses a type without a row in
 * cuda_quant.cu's quant_types and a length that is not whole blocks.
 */

/* The most tokens cuda_qmatvec takes: decode-sized batches. */
#define CUDA_QMATVEC_MAX_T 8

/*
 * d_out (n elements of out_dt, F32 or BF16) = the n elements of d_w (in dt)
 * dequantized: the F32 values are cbllm_to_f32's bit for bit; BF16 rounds them
 * to nearest even.
 */
int			cuda_dequant(const void *d_w, cbllm_dtype dt, int64_t n, cbllm_dtype out_dt,
						 void *d_out, cuda_stream s, cbllm_err *err);

/*
 * d_y (T, rows) = d_x (T, cols) @ W^T for T <= CUDA_QMATVEC_MAX_T, W in dt: a
 * fused kernel decodes the weights in registers, f32 arithmetic; a token's
 * result does not depend on T.
 */
int			cuda_qmatvec(const void *d_w, cbllm_dtype dt, int rows, int cols, const float *d_x,
						 int T, float *d_y, cuda_stream s, cbllm_err *err);

/*
 * d_y (T, rows) = d_xh (T, cols, bf16) @ W^T for any T, W in dt: tiles of
 * tile_elems / cols rows are dequantized to bf16 into d_tile (tile_elems
 * elements, at least cols) and multiplied in cuBLAS, f32 accumulation.
 */
int			cuda_qmatmul_tiled(void *blas, const void *d_w, cbllm_dtype dt, int rows, int cols,
							   const void *d_xh, int T, void *d_tile, int64_t tile_elems,
							   float *d_y, cuda_stream s, cbllm_err *err);

/*
 * A hybrid model's Gated DeltaNet over one layer (cuda_linear_attn.cu,
 * backend.h's linear_attention): the step's n_seqs sequences, each of
 * consecutive tokens from seq_first[s] to seq_first[s + 1], continue their
 * states in slot slots[s] of the layer's conv_states (slots, conv - 1,
 * conv channels) and rec_states (slots, nv, dk, dv), from zero where
 * pos[seq_first[s]] is 0.  All pointers are device memory.
 */
typedef struct cuda_linear_args
{
	float	   *qkv;			/* (T, 2 nk dk + nv dv) in; overwritten by the conv's output */
	const float *z;				/* (T, nv dv) */
	const float *beta;			/* (T, nv) beta's logits */
	const float *alpha;			/* (T, nv) */
	const float *kern;			/* (conv channels, conv) */
	const float *a;				/* (nv) -exp(A_log) */
	const float *dt_bias;		/* (nv) */
	const float *norm;			/* (dv) */
	float	   *conv_states;
	float	   *rec_states;
	const int32_t *seq_first;	/* (n_seqs + 1) */
	const int32_t *slots;		/* (n_seqs) */
	const int32_t *pos;			/* (T) */
	float	   *out;			/* (T, nv dv) */
	int			n_seqs;
	int			nk,
				nv,
				dk,
				dv,
				conv;
	bool		tiled;			/* value head h reads key head h % nk, else h / (nv / nk) */
	float		eps;			/* the gated RMSNorm's */
} cuda_linear_args;

int			cuda_linear_attention(const cuda_linear_args *a, cuda_stream s, cbllm_err *err);

/* Row r of d_x (n, 2 width) into d_first[r] and d_second[r] (width each). */
int			cuda_split_halves(const float *d_x, int64_t n, int width, float *d_first,
							  float *d_second, cuda_stream s, cbllm_err *err);

/* d_x[t] (T, dim) += sigmoid(d_logit[t]) * d_y[t], row by row. */
int			cuda_add_gated_rows(float *d_x, const float *d_y, const float *d_logit, int T,
								int dim, cuda_stream s, cbllm_err *err);

/* d_x[i] *= sigmoid(d_gate[i]). */
int			cuda_sigmoid_mul(float *d_x, const float *d_gate, int64_t n, cuda_stream s,
							 cbllm_err *err);

#ifdef __cplusplus
}
#endif

#endif
