/* cpu_softcap.c: the CPU backend's soft-capping of the final logits (Gemma 4). */
#include "backend/cpu/cpu_internal.h"

#include <math.h>

/* x[i] = cap * tanh(x[i] / cap), in f32 as HF computes it. */
void
cpu_softcap(cbllm_backend *be, float *x, float cap, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] / cap);
}
