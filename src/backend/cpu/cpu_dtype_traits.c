/*
 * cpu_dtype_traits.c: the CPU backend's table of weight types
 * (cpu_dtype_traits.h says what a row must give).
 */
#include "backend/cpu/cpu_dtype_traits.h"

static const cpu_dtype_traits cpu_dtype_table[CBLLM_DTYPE_COUNT] = {
	[CBLLM_F32] = {.path = CBLLM_CPU_FLOAT},
	[CBLLM_F16] = {.path = CBLLM_CPU_FLOAT},
	[CBLLM_BF16] = {.path = CBLLM_CPU_FLOAT},
	[CBLLM_Q8_0] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q4_0] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q4_1] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q5_0] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q5_1] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q2_K] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q3_K] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q4_K] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q5_K] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_Q6_K] = {.path = CBLLM_CPU_QUANT},
	[CBLLM_MXFP4] = {.path = CBLLM_CPU_QUANT},
};

/* What a value that is no type answers with. */
static const cpu_dtype_traits cpu_dtype_unknown = {.path = CBLLM_CPU_NONE};

/* The row of dt, or the unknown row. */
const cpu_dtype_traits *
cpu_dtype_traits_of(cbllm_dtype dt)
{
	return (unsigned) dt < CBLLM_DTYPE_COUNT ? &cpu_dtype_table[dt] : &cpu_dtype_unknown;
}
