/*
 * cpu_gemma4.c: the CPU ops only Gemma 4's layers use: soft-capping of the
 * final logits, and laying its per-layer inputs out layer by layer.
 */
#include "backend/cpu/cpu_internal.h"

#include <math.h>
#include <string.h>

/* x[i] = cap * tanh(x[i] / cap), in f32 as HF computes it. */
void
cpu_softcap(cbllm_backend *be, float *x, float cap, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] / cap);
}

/* out (b, a, width) = x (a, b, width) with its first two axes swapped. */
void
cpu_swap_axes(cbllm_backend *be, const float *x, int a, int b, int width, float *out)
{
	for (int i = 0; i < a; i++)
		for (int j = 0; j < b; j++)
			memcpy(out + ((int64_t) j * a + i) * width, x + ((int64_t) i * b + j) * width,
				   sizeof(float) * width);
}
