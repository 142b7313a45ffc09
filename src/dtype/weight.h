/*
 * weight.h: a weight matrix in its stored type (cbllm_weight), the one thing
 * the compute kernels need to know of a model: its rows, their type and
 * where they are.  The model (model/model.h) holds its matrices as these;
 * the CPU kernels (backend/cpu/kernels.h, weight_pack.h) read them without
 * knowing the model.
 *
 * A dummy matrix (model_dummy.c) has no data on the host until a backend
 * fills it: element i is cbllm_dummy_value(dummy_seed, i) (base/rng.h) *
 * dummy_scale, multiplied in f32 and rounded to bf16 (nearest even), and a
 * device backend may generate it from those two fields when data is NULL.
 */
#ifndef CBLLM_WEIGHT_H
#define CBLLM_WEIGHT_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype/dtype.h"

/* A weight matrix in its stored dtype, row-major (rows, cols). */
typedef struct cbllm_weight
{
	cbllm_dtype dtype;
	int64_t		rows;
	int64_t		cols;
	const void *data;			/* (rows, cols); NULL for a dummy not filled on the host */
	uint64_t	dummy_seed;		/* nonzero: a dummy tensor whose values are
								 * cbllm_dummy_value(dummy_seed, i) * dummy_scale */
	float		dummy_scale;	/* 1 / sqrt(cols) for a dummy tensor, 0 otherwise */
	bool		owned;			/* data is the model's malloc'd buffer (dummy weights on the
								 * host, load-time quantization, rows packed at load); else
								 * the mapping's */
	int64_t		packed_rows;	/* rows [0, packed_rows) (whole groups of 16) are in the CPU's
								 * interleaved layout (weight_pack.h), packed at load by the
								 * CPU backend; the rest as stored.  0: all as stored */
} cbllm_weight;

#endif
