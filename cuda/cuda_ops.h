/*
 * cuda_ops.h: the CUDA kernels of the compute backend, reached from C.
 *
 * Every function returns a cbllm_status (0 ok) and, on a CUDA error, fills
 * err with the failing call and CUDA's message; nothing here aborts.
 * Pointers named d_* are device memory; shapes are given as in backend.h.
 * This header includes no CUDA and no PostgreSQL header.
 */
#ifndef CBLLM_CUDA_OPS_H
#define CBLLM_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "../src/util.h"

#ifdef __cplusplus
extern "C"
{
#endif

/* Number of usable CUDA devices; 0 when there is none or no driver. */
int			cuda_device_count(void);

int			cuda_alloc(void **d_ptr, size_t bytes, cbllm_err *err);
void		cuda_free(void *d_ptr);
int			cuda_upload(void *d_dst, const void *src, size_t bytes, cbllm_err *err);
int			cuda_download(void *dst, const void *d_src, size_t bytes, cbllm_err *err);
int			cuda_copy(void *d_dst, const void *d_src, size_t bytes, cbllm_err *err);

/* d_out (T, dim) = d_x / rms(d_x) * d_w */
int			cuda_rmsnorm(const float *d_x, const float *d_w, int T, int dim, float eps,
						 float *d_out, cbllm_err *err);

/* d_gate[i] = silu(d_gate[i]) * d_up[i] */
int			cuda_silu_mul(float *d_gate, const float *d_up, int64_t n, cbllm_err *err);

/* d_x[i] += d_y[i] */
int			cuda_add(float *d_x, const float *d_y, int64_t n, cbllm_err *err);

/*
 * Rotate d_x (T, n_heads, head_dim) in place, pairs (i, i + head_dim/2), by
 * angle pos[t] * inv_freq[i]: d_cos, d_sin (T, head_dim / 2).
 */
int			cuda_rope(float *d_x, const float *d_cos, const float *d_sin, int T, int n_heads,
					  int head_dim, cbllm_err *err);

/*
 * d_x (T, dim) = rows d_tokens[t] of an embedding table d_emb (vocab, dim)
 * stored as dtype (0 f32, 1 f16, 2 bf16, as cbllm_dtype).
 */
int			cuda_embed(const void *d_emb, int dtype, int dim, const int32_t *d_tokens, int T,
					   float *d_x, cbllm_err *err);

/* d_out[r] = index of the largest of row r of d_logits (rows, n); the first of equals */
int			cuda_argmax(const float *d_logits, int rows, int n, int32_t *d_out, cbllm_err *err);

/*
 * d_out (T, n_heads, head_dim) = causal attention of d_q (T, n_heads,
 * head_dim) over one layer's paged cache d_k_cache, d_v_cache (n_blocks,
 * block_size, n_kv_heads, head_dim).  Token t (sequence d_seq[t], position
 * d_pos[t]) sees positions [0, pos] (the last sliding_window of them when
 * > 0) through row d_seq[t] of d_tables (n_seqs, max_blocks).  max_ctx
 * bounds every position + 1.
 */
int			cuda_attention(const float *d_q, const float *d_k_cache, const float *d_v_cache,
						   const int32_t *d_tables, int max_blocks, const int32_t *d_pos,
						   const int32_t *d_seq, int T, int n_heads, int n_kv_heads, int head_dim,
						   int block_size, int sliding_window, int max_ctx, float *d_out,
						   cbllm_err *err);

/*
 * Write the step's keys and values, d_k and d_v (T, row floats), into one
 * layer's cache (n_blocks * block_size slots of row floats) at d_slots[t].
 */
int			cuda_kv_store(float *d_k_cache, float *d_v_cache, const float *d_k, const float *d_v,
						  const int64_t *d_slots, int T, int64_t row, cbllm_err *err);

/*
 * Device-to-device copy bandwidth in GB/s (bytes read plus bytes written per
 * second), the median of iters copies of bytes each.
 */
int			cuda_copy_bandwidth(size_t bytes, int iters, double *gbps, cbllm_err *err);

/* A cuBLAS handle (opaque). */
int			cuda_blas_create(void **handle, cbllm_err *err);
void		cuda_blas_destroy(void *handle);

/*
 * d_y (T, rows) = d_x (T, cols) @ W^T, W (rows, cols) row-major on the device
 * in dtype 1 (f16) or 2 (bf16); d_x is converted to that type in d_xh
 * (T * cols halves of scratch) and cuBLAS accumulates in f32.
 */
int			cuda_matmul(void *handle, const void *d_w, int dtype, int rows, int cols,
						const float *d_x, int T, void *d_xh, float *d_y, cbllm_err *err);

#ifdef __cplusplus
}
#endif

#endif
