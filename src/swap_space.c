/* swap_space.c: the host block area for swap preemption. */
#include "swap_space.h"

#include <stdlib.h>

/* Create the area with every block free. */
int
swap_space_create(int n_blocks, int64_t block_floats, swap_space **out, cbllm_err *err)
{
	swap_space *sw = calloc(1, sizeof(*sw));
	size_t		n = (size_t) (n_blocks > 0 ? n_blocks : 0) * block_floats;

	if (sw == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	sw->n_blocks = n_blocks > 0 ? n_blocks : 0;
	sw->block_floats = block_floats;
	if (sw->n_blocks > 0)
	{
		sw->k = cbllm_map_zeroed(n * sizeof(float));
		sw->v = cbllm_map_zeroed(n * sizeof(float));
		sw->free_ids = malloc(sizeof(int32_t) * sw->n_blocks);
		if (sw->k == NULL || sw->v == NULL || sw->free_ids == NULL)
		{
			swap_space_free(sw);
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "cannot allocate %zu MiB of swap space; lower the swap space size",
							  n * 2 * sizeof(float) >> 20);
		}
		for (int i = 0; i < sw->n_blocks; i++)
			sw->free_ids[i] = sw->n_blocks - 1 - i;
		sw->n_free = sw->n_blocks;
	}
	*out = sw;
	return CBLLM_OK;
}

/* Release the area. */
void
swap_space_free(swap_space *sw)
{
	size_t		n;

	if (sw == NULL)
		return;
	n = (size_t) sw->n_blocks * sw->block_floats * sizeof(float);
	cbllm_unmap(sw->k, n);
	cbllm_unmap(sw->v, n);
	free(sw->free_ids);
	free(sw);
}

/* Take n blocks, all or none. */
int
swap_space_alloc(swap_space *sw, int n, int32_t *ids)
{
	if (n > sw->n_free)
		return CBLLM_ERR_FULL;
	for (int i = 0; i < n; i++)
		ids[i] = sw->free_ids[--sw->n_free];
	return CBLLM_OK;
}

/* Return n blocks. */
void
swap_space_release(swap_space *sw, int n, const int32_t *ids)
{
	for (int i = 0; i < n && sw->n_free < sw->n_blocks; i++)
		sw->free_ids[sw->n_free++] = ids[i];
}
