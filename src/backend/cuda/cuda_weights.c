/*
 * cuda_weights.c: the model's weights on the device.  Every tensor the
 * architecture's roles name (model_visit) is uploaded once in the type its
 * row of the backend's weight-type table (cuda_dtype_traits.c) says the
 * device runs it in; dummy matrices are generated
 * on the device from their seeds.  A host pointer (or a dummy seed) finds
 * its device copy.
 */
#include <stdlib.h>

#include "backend/cuda/cuda_ctx.h"
#include "backend/cuda/cuda_dtype_traits.h"
#include "base/numeric.h"
#include "base/rng.h"

/* The first slot of (host, seed) in an index of cap slots (a power of two). */
static int
SlotOf(const void *host, uint64_t seed, int cap)
{
	return (int) (cbllm_mix64((uint64_t) (uintptr_t) host ^ (seed * 0x9E3779B97F4A7C15ULL)) &
				  (uint64_t) (cap - 1));
}

/* The device copy of a host tensor or of a dummy tensor: a probe of the index. */
const dev_weight *
cuda_weight_find(const cuda_ctx *c, const void *host, uint64_t seed)
{
	if (c->cap_slots == 0)
		return NULL;
	for (int i = SlotOf(host, seed, c->cap_slots);; i = (i + 1) & (c->cap_slots - 1))
	{
		int32_t		at = c->w_slots[i];

		if (at < 0)
			return NULL;
		if (c->w[at].host == host && c->w[at].seed == seed)
			return &c->w[at];
	}
}

/* Index w[i] (growing the index to keep it at most half full); false when out of memory. */
static bool
IndexWeight(cuda_ctx *c, int i)
{
	if (2 * (i + 1) > c->cap_slots)
	{
		int			cap = c->cap_slots ? 2 * c->cap_slots : 256;
		int32_t    *slots = malloc(sizeof(int32_t) * cap);

		if (slots == NULL)
			return false;
		free(c->w_slots);
		c->w_slots = slots;
		c->cap_slots = cap;
		for (int s = 0; s < cap; s++)
			slots[s] = -1;
		for (int j = 0; j < i; j++)
		{
			int			s = SlotOf(c->w[j].host, c->w[j].seed, cap);

			while (slots[s] >= 0)
				s = (s + 1) & (cap - 1);
			slots[s] = j;
		}
	}
	{
		int			s = SlotOf(c->w[i].host, c->w[i].seed, c->cap_slots);

		while (c->w_slots[s] >= 0)
			s = (s + 1) & (c->cap_slots - 1);
		c->w_slots[s] = i;
	}
	return true;
}

/* The device copy of a weight matrix. */
const dev_weight *
cuda_weight_find_matrix(const cuda_ctx *c, const cbllm_weight *w)
{
	return cuda_weight_find(c, w->data, w->data != NULL ? 0 : w->dummy_seed);
}

/*
 * The type a tensor of stored type dt has on the device: vectors F32, dummy
 * matrices BF16, matrices as their row of cuda_dtype_traits.c says (the
 * block types as stored).
 */
static cbllm_dtype
DeviceType(cbllm_dtype dt, bool is_vector, bool is_dummy)
{
	if (is_vector)
		return CBLLM_F32;
	if (is_dummy || cuda_dtype_traits_of(dt)->path == CBLLM_CUDA_AS_BF16)
		return CBLLM_BF16;
	return dt;
}

/* Copy n elements stored as dt at host to the device as bf16, converting through f32. */
static int
UploadAsBf16(void *dev, const void *host, cbllm_dtype dt, size_t n, cbllm_err *err)
{
	float	   *f = malloc(sizeof(float) * n);
	uint16_t   *h = malloc(sizeof(uint16_t) * n);
	int			rc;

	if (f == NULL || h == NULL)
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	else
	{
		cbllm_to_f32(dt, host, f, (int64_t) n);
		for (size_t i = 0; i < n; i++)
			h[i] = cbllm_f32_to_bf16(f[i]);
		rc = cuda_upload(dev, h, sizeof(uint16_t) * n, err);
	}
	free(f);
	free(h);
	return rc;
}

/* Upload n elements of a tensor in its device type (DeviceType). */
static int
Upload(cuda_ctx *c, const void *host, uint64_t seed, float scale, cbllm_dtype dt, size_t n,
	   bool is_vector, cbllm_err *err)
{
	dev_weight	d = {host, host != NULL ? 0 : seed, NULL,
	DeviceType(dt, is_vector, host == NULL)};
	size_t		bytes = cbllm_dtype_row_bytes(d.dtype, (int64_t) n);
	int			rc;

	if (cuda_weight_find(c, d.host, d.seed) != NULL)
		return CBLLM_OK;		/* tied embeddings: one upload */
	if (host == NULL && seed == 0)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "a weight has neither data nor a dummy seed");
	if (c->n_w == c->cap_w)
	{
		int			cap = c->cap_w ? 2 * c->cap_w : 64;
		dev_weight *g = realloc(c->w, sizeof(dev_weight) * cap);

		if (g == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		c->w = g;
		c->cap_w = cap;
	}
	if ((rc = cuda_alloc(&d.dev, bytes, err)) != CBLLM_OK)
		return rc;
	if (host == NULL)
		rc = cuda_fill_dummy(d.dev, (int64_t) n, seed, scale, err);
	else if (d.dtype == (is_vector ? CBLLM_F32 : dt))
		rc = cuda_upload(d.dev, host, bytes, err);
	else
		rc = UploadAsBf16(d.dev, host, dt, n, err);
	if (rc != CBLLM_OK)
	{
		cuda_free(d.dev);
		return rc;
	}
	c->w[c->n_w] = d;
	if (!IndexWeight(c, c->n_w))
	{
		cuda_free(d.dev);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	c->n_w++;
	c->weight_bytes += bytes;
	if (cuda_dtype_traits_of(d.dtype)->path == CBLLM_CUDA_QUANT && (int64_t) n > c->max_quant_elems)
		c->max_quant_elems = (int64_t) n;
	return CBLLM_OK;
}

/* Add one tensor's device bytes, in its device type. */
static int
AddDeviceBytes(void *arg, const model_tensor *mt, cbllm_err *err)
{
	const cbllm_weight *w = mt->matrix;

	if (!mt->tied)
		*(size_t *) arg += cbllm_dtype_row_bytes(w != NULL ?
												 DeviceType(w->dtype, false, w->data == NULL) :
												 CBLLM_F32, mt->rows * mt->cols);
	return CBLLM_OK;
}

/* Upload one tensor (a tied one is the embeddings' upload). */
static int
UploadTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	cuda_ctx   *c = arg;
	const cbllm_weight *w = mt->matrix;

	if (mt->tied)
		return CBLLM_OK;
	if (mt->vector != NULL)
		return Upload(c, *mt->vector, 0, 1.0f, CBLLM_F32, (size_t) (mt->rows * mt->cols), true, err);
	return Upload(c, w->data, w->dummy_seed, w->dummy_scale, w->dtype,
				  (size_t) (w->rows * w->cols), false, err);
}

/* Upload every matrix and vector of the model. */
int
cuda_weights_upload(cuda_ctx *c, const cbllm_model *m, cbllm_err *err)
{
	size_t		need = 0,
				free_b = 0,
				total_b = 0;
	int			rc;

	model_visit(m, AddDeviceBytes, &need, err);
	if ((rc = cuda_mem_info(&free_b, &total_b, err)) != CBLLM_OK)
		return rc;
	if (need > free_b)
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "the model's weights need %zu MiB on the GPU but only %zu MiB of %zu MiB are free; use a GPU with more memory or stop what else holds it",
						  need >> 20, free_b >> 20, total_b >> 20);
	if ((rc = model_visit(m, UploadTensor, c, err)) != CBLLM_OK)
		return rc;
	return cuda_stream_sync(NULL, err);	/* dummy fills run on the legacy stream */
}
