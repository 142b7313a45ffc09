/*
 * fuzz_safetensors.c: a whole safetensors file (8-byte header length, JSON
 * header, data) through st_add_buffer, the parser st_add_file runs over its
 * mapping.  Every tensor the parser accepts must lie inside the file's data
 * and hold exactly its shape times its dtype's size in bytes.
 */
#include "fuzz.h"
#include "formats/safetensors.h"

static volatile uint8_t sink;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	st_archive *ar = calloc(1, sizeof(st_archive));
	uintptr_t	lo = (uintptr_t) data + 8,
				hi = (uintptr_t) data + size;
	cbllm_err	err;

	if (ar == NULL)
		return 0;
	/* a failure keeps the tensors added before it: check those too */
	(void) st_add_buffer(ar, data, size, "model.safetensors", &err);
	FUZZ_CHECK(ar->n_files <= 1, "one file");
	for (int i = 0; i < ar->n_tensors; i++)
	{
		const st_tensor *t = &ar->tensors[i];
		const uint8_t *bytes = t->data;
		uintptr_t	p = (uintptr_t) t->data;
		size_t		nelem = 1;

		FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS, "at most ST_MAX_DIMS dimensions");
		for (int d = 0; d < t->ndim; d++)
		{
			FUZZ_CHECK(t->shape[d] >= 0, "non-negative dimensions");
			nelem *= (size_t) t->shape[d];
		}
		FUZZ_CHECK(t->nbytes == cbllm_dtype_row_bytes(t->dtype, (int64_t) nelem), "bytes = shape x dtype size");
		FUZZ_CHECK(p >= lo && p <= hi && t->nbytes <= hi - p, "the tensor lies inside the file");
		FUZZ_CHECK(st_find(ar, t->name) != NULL, "a tensor is found by its name");
		if (t->nbytes > 0)		/* read the first and last bytes: ASan checks them */
			sink = bytes[0] ^ bytes[t->nbytes - 1];
	}
	st_close(ar);
	return 0;
}
