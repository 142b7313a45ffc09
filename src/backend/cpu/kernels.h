/*
 * kernels.h: the CPU's inner loops, compiled once per instruction set
 * (kernels_avx512.c, kernels_avx2.c, kernels_generic.c from one template,
 * kernels_simd.inc) and chosen at run time by cpu_kernels_select().
 *
 * Batch invariance: every output element of matmul_rows is one dot product
 * accumulated in one fixed order, whatever the number of tokens, the tile it
 * falls in, the thread that computes it, or whether its weights were widened
 * to f32 first: lane-wise in K order and reduced by the same horizontal sum
 * for rows as stored, one running sum in K order for rows packed as panels
 * (weight_pack.h).  So a sequence's results never depend on what else is in
 * the batch.
 */
#ifndef CBLLM_KERNELS_H
#define CBLLM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype/weight.h"

/* Queries (tokens of one prompt, heads of one KV head) that share one pass over the keys */
#define CPU_ATTN_GROUP 4

/* Output rows one matmul task covers; also the packing scratch's height. */
#define KERNEL_ROWS_PER_TASK 32

/* Bytes of one token's quantized activations for k columns: k rounded up to a whole 64. */
#define KERNEL_QLD(k) (((int64_t) (k) + 63) / 64 * 64)

/*
 * A batch's activations quantized for the products over block-quantized
 * weights (kernels_quant.inc): token t's element e is about
 * s[t * ld / 4 + e / 4] * q[t * ld + e], one scale per blk elements (blk 32
 * or 256, repeated over their lanes of 4 and their 32-blocks); everything
 * past the columns is zero.  The caller sets T, ld and blk (qx_block).
 */
typedef struct cpu_qx
{
	int			T;				/* tokens */
	int64_t		ld;				/* KERNEL_QLD(cols) */
	int			blk;			/* elements per scale: 32, or 256 where qx_block says so */
	int8_t	   *q;				/* (T, ld) codes, -127..127 */
	float	   *s;				/* (T, ld / 4) each lane's scale: its block's amax / 127 */
	float	   *sum16;			/* (T, ld / 16) the scale times the sum of each 16 codes */
	int16_t    *isum16;			/* (T, ld / 16) the sum of each 16 codes */
	float	   *d;				/* (T, ld / 32) each 32-block's scale (s once a 32-block) */
} cpu_qx;

typedef struct cpu_kernels
{
	const char *isa;			/* "avx512vnni", "avx512", "avx2" or "generic" */
	int			lanes;			/* floats per vector */

	/*
	 * y[t * w->rows + r] = dot(x[t * w->cols ...], W[r, :]) for t in [0, T),
	 * r in [r0, r1), r1 - r0 <= KERNEL_ROWS_PER_TASK.  x: (T, w->cols);
	 * xp: x as panel_x arranges it, read when w's rows are packed (else
	 * unused); y: (T, w->rows); scratch: (KERNEL_ROWS_PER_TASK, w->cols) floats.
	 */
	void		(*matmul_rows) (const cbllm_weight *w, const float *x, const float *xp, int T,
								float *y, int64_t r0, int64_t r1, float *scratch);
	/*
	 * Part part of parts of the T tokens of x (T, k) arranged into xp (T * k
	 * floats) as the products over packed float rows read them; NULL in the
	 * sets that pack no float matrix.  For T = 1 the arrangement is x itself.
	 */
	void		(*panel_x) (const float *x, int T, int64_t k, int part, int parts, float *xp);
	/*
	 * The activation block (cpu_qx.blk) the products over w want: 256 where
	 * this set multiplies w's K-quant blocks in integers over whole 256s (one
	 * activation scale a block, as llama.cpp's Q8_K), else 32.  A matmul
	 * group takes 256 only when every matrix of it does.
	 */
	int			(*qx_block) (const cbllm_weight *w);
	/*
	 * elements [e0, e1) of token t's k activations x (its whole row)
	 * quantized into qx, a scale per qx->blk (e0, e1 and k multiples of it,
	 * qx->ld >= k); the range ending at k also zeroes the padding to qx->ld
	 */
	void		(*quantize_x) (const float *x, int64_t k, int64_t e0, int64_t e1, int t,
							   const cpu_qx *qx);

	/*
	 * y[t * w->rows + r] = dot(x^ of token t, W[r, :]) for the qx->T tokens
	 * and r in [r0, r1), r1 - r0 <= KERNEL_ROWS_PER_TASK, W block-quantized
	 * (its row of cpu_dtype_traits.c says CBLLM_CPU_QUANT) and qx quantized
	 * from (T, w->cols) activations; scratch: (KERNEL_ROWS_PER_TASK,
	 * KERNEL_QLD(w->cols)) floats.
	 */
	void		(*qmatmul_rows) (const cbllm_weight *w, const cpu_qx *qx, float *y, int64_t r0,
								 int64_t r1, float *scratch);
	/*
	 * Whether qmatmul_rows takes w's rows packed (weight_pack.h) when
	 * w->packed_rows says they are: the backend packs such matrices once,
	 * at load.  Packed K-quant rows want qx->blk 256, MXFP4 ones 32.
	 */
	bool		(*packs) (const cbllm_weight *w);
	/* sum of a[i] * b[i], i < n */
	float		(*dot) (const float *a, const float *b, int n);
	/* y[i] += a * x[i], i < n */
	void		(*axpy) (float *y, float a, const float *x, int n);
	/* s[i] = scale * dot(q, k + i * stride, hd) for i < n: attention scores of n cached keys */
	void		(*scores) (const float *q, const float *k, int64_t stride, int n, int hd,
						   float scale, float *s);
	/* out += sum over i < n, in order, of w[i] * (v + i * stride)[0..hd) */
	void		(*accumulate) (float *out, const float *w, const float *v, int64_t stride, int n,
							   int hd);
	/* scores and accumulate over keys and values cached as [0] f16 or [1] bf16 (exactly as over their f32 values) */
	void		(*scores_half[2]) (const float *q, const uint16_t *k, int64_t stride, int n, int hd,
								   float scale, float *s);
	void		(*accumulate_half[2]) (float *out, const float *w, const uint16_t *v,
									   int64_t stride, int n, int hd);
	/*
	 * scores and accumulate for g queries at once (1 <= g <= CPU_ATTN_GROUP),
	 * keys and values cached as [0] f32, [1] f16, [2] bf16: q[j], s[j],
	 * out[j] and w[j] are query j's, and each gets bit for bit what the one-query
	 * entries above give it; every key and value is read once for the group.
	 */
	void		(*scores_group[3]) (int g, const float *const *q, const void *k, int64_t stride,
									int n, int hd, float scale, float *const *s);
	void		(*accumulate_group[3]) (int g, float *const *out, const float *const *w,
										const void *v, int64_t stride, int n, int hd);
	/* dst[0, n) = src as [0] f16 or [1] bf16, rounded to nearest even: keys and values into a half cache */
	void		(*narrow_half[2]) (const float *src, uint16_t *dst, int64_t n);
	/*
	 * The chunked gated delta rule's products (cpu_linear_attn.c), each
	 * element's sum in the same order however many rows a call has:
	 * delta_rows: out (m, dv) = A (m, dk) S (dk, dv);
	 * delta_fold: S (dk, dv) = decay S + sum over j < n of w[j] K[j] U[j]^T,
	 * K (n, dk), U (n, dv).
	 */
	void		(*delta_rows) (const float *A, int m, const float *S, int dk, int dv, float *out);
	void		(*delta_fold) (float *S, int dk, int dv, const float *K, const float *U,
							   const float *w, float decay, int n);
} cpu_kernels;

extern const cpu_kernels cpu_kernels_avx512vnni;
extern const cpu_kernels cpu_kernels_avx512;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_generic;

/*
 * The kernels for name ("avx512vnni", "avx512", "avx2", "generic"), or the best this CPU
 * supports when name is NULL or "auto".  NULL when the CPU lacks the named set.
 */
const cpu_kernels *cpu_kernels_select(const char *name);

#endif
