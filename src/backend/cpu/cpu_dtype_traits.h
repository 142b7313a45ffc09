/*
 * cpu_dtype_traits.h: what the CPU backend does with each weight type, one
 * row a type (cpu_dtype_traits.c), beside the table of what is true of a
 * type everywhere (dtype/dtype.h).  The backend asks the row, never the type:
 * whether it runs a type's matrices, and through which product.
 *
 * The kernels are compiled once per instruction set (kernels.h), so the
 * functions that read a type live in per-set tables indexed by type; a row's
 * path says which of them must have an entry for it:
 *   CBLLM_CPU_FLOAT  matmul_rows over f32 activations: weight_tiles_by_dtype
 *                    (kernels_simd.inc) gives the tiles that read its rows and
 *                    its widening to f32; on AVX-512, panel_tiles_by_dtype
 *                    (kernels_float_packed.inc) multiplies its rows packed
 *   CBLLM_CPU_QUANT  qmatmul_rows over activations quantized per block:
 *                    quant_tiles_by_dtype (kernels_quant.inc) unpacks its
 *                    rows a block at a time; the AVX-512 sets' faster paths
 *                    (fused_by_dtype, int_rows_by_dtype, kgemm_by_dtype,
 *                    kpack_by_dtype) are optional
 * A type whose row is CBLLM_CPU_NONE (and a value that is no type) is loaded
 * and then refused by the CPU backend, naming the type.
 */
#ifndef CBLLM_CPU_DTYPE_TRAITS_H
#define CBLLM_CPU_DTYPE_TRAITS_H

#include "dtype/dtype.h"

/* How the CPU kernels multiply the matrices of a type. */
typedef enum cbllm_cpu_path
{
	CBLLM_CPU_NONE = 0,			/* they do not: the backend refuses the type */
	CBLLM_CPU_FLOAT,			/* matmul_rows: the rows as stored, or widened to f32, times
								 * f32 activations */
	CBLLM_CPU_QUANT				/* qmatmul_rows: the rows block by block, in integers, times
								 * the activations quantized (cpu_qx) */
} cbllm_cpu_path;

/* One weight type on the CPU. */
typedef struct cpu_dtype_traits
{
	cbllm_cpu_path path;		/* how the kernels multiply its matrices */
} cpu_dtype_traits;

/* The CPU's row of dt; for a value that is no type, a row that runs nothing. */
const cpu_dtype_traits *cpu_dtype_traits_of(cbllm_dtype dt);

#endif
