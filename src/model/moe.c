/* moe.c: a step's (token, expert) pairs grouped by expert (moe.h). */
#include "model/moe.h"

#include <string.h>

void
moe_group(const int32_t *ids, int n, int n_experts, int32_t *start, int32_t *fill, int32_t *slot)
{
	memset(fill, 0, sizeof(int32_t) * n_experts);
	for (int i = 0; i < n; i++)
		fill[ids[i]]++;
	start[0] = 0;
	for (int e = 0; e < n_experts; e++)
	{
		start[e + 1] = start[e] + fill[e];
		fill[e] = start[e];
	}
	for (int i = 0; i < n; i++)
		slot[i] = fill[ids[i]]++;
}
