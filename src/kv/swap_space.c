/* swap_space.c: the host memory of the swap area for swap preemption. */
#include "kv/swap_space.h"

#include <stdlib.h>

/* Create the area, zeroed. */
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
		if (sw->k == NULL || sw->v == NULL)
		{
			swap_space_free(sw);
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "cannot allocate %zu MiB of swap space; lower the swap space size",
							  n * 2 * sizeof(float) >> 20);
		}
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
	free(sw);
}
