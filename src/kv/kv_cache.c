/* kv_cache.c: the host memory of the paged KV cache's keys and values. */
#include "kv/kv_cache.h"

#include <stdlib.h>
#include <strings.h>

int
kv_cache_elem_bytes(cbllm_dtype dt)
{
	return dt == CBLLM_F32 ? 4 : 2;
}

/* Bytes of K and V for one block across all layers. */
size_t
kv_cache_block_bytes(int block_size, int n_layers, int n_kv_heads, int head_dim, cbllm_dtype dt)
{
	return (size_t) 2 * block_size * n_layers * n_kv_heads * head_dim * kv_cache_elem_bytes(dt);
}

/* Bytes of K and V for one block across layers of row_sum elements per position. */
size_t
kv_cache_rows_block_bytes(int block_size, int64_t row_sum, cbllm_dtype dt)
{
	return (size_t) 2 * block_size * (size_t) row_sum * kv_cache_elem_bytes(dt);
}

bool
kv_cache_dtype_ok(cbllm_dtype dt)
{
	return dt == CBLLM_F32 || dt == CBLLM_F16 || dt == CBLLM_BF16;
}

bool
kv_cache_dtype_parse(const char *name, cbllm_dtype auto_dt, cbllm_dtype *dt)
{
	static const struct
	{
		const char *name;
		cbllm_dtype dt;
	}			names[] = {{"f32", CBLLM_F32}, {"f16", CBLLM_F16}, {"bf16", CBLLM_BF16}};

	if (name == NULL || name[0] == '\0' || strcasecmp(name, "auto") == 0)
	{
		*dt = auto_dt;
		return true;
	}
	for (int i = 0; i < (int) (sizeof(names) / sizeof(names[0])); i++)
		if (strcasecmp(name, names[i].name) == 0)
		{
			*dt = names[i].dt;
			return true;
		}
	return false;
}

int
kv_cache_dtype_resolve(const char *name, cbllm_dtype auto_dt, cbllm_dtype *dt, cbllm_err *err)
{
	if (!kv_cache_dtype_parse(name, auto_dt, dt))
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "kv_cache_dtype \"%s\" is not auto, f32, f16 or bf16", name);
	return CBLLM_OK;
}

/* Create the K and V arrays of p->n_blocks blocks, zeroed (only the geometry with no_data). */
int
kv_cache_create(const kv_cache_params *p, kv_cache **out, cbllm_err *err)
{
	kv_cache   *kv;
	size_t		n;

	if (!kv_cache_dtype_ok(p->dtype))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "kv cache: elements of type %s are not supported"
						  " (f32, f16 or bf16)", cbllm_dtype_name(p->dtype));
	if (p->n_blocks < 1 || p->block_size < 1 || p->block_size > 1024 ||
		p->n_layers < 1 || p->n_kv_heads < 1 || p->head_dim < 1)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "kv cache: %d blocks of %d positions, %d layers, %d KV heads of dimension %d is not a valid pool",
						  p->n_blocks, p->block_size, p->n_layers, p->n_kv_heads, p->head_dim);
	kv = calloc(1, sizeof(*kv));
	if (kv == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	kv->n_blocks = p->n_blocks;
	kv->block_size = p->block_size;
	kv->n_layers = p->n_layers;
	kv->layer_map = p->layer_map;
	kv->n_kv_heads = p->n_kv_heads;
	kv->head_dim = p->head_dim;
	kv->dtype = p->dtype;
	kv->elem_bytes = kv_cache_elem_bytes(p->dtype);
	kv->block_floats = (int64_t) p->block_size * p->n_kv_heads * p->head_dim;
	kv->row = malloc(sizeof(int32_t) * p->n_layers);
	kv->base = malloc(sizeof(int64_t) * (p->n_layers + 1));
	if (kv->row == NULL || kv->base == NULL)
	{
		kv_cache_free(kv);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	kv->base[0] = 0;
	for (int l = 0; l < p->n_layers; l++)
	{
		kv->row[l] = p->layer_row != NULL ? p->layer_row[l] : p->n_kv_heads * p->head_dim;
		if (kv->row[l] < 1)
		{
			kv_cache_free(kv);
			return cbllm_fail(err, CBLLM_ERR_INVALID, "kv cache: layer %d has %d elements per position",
							  l, p->layer_row != NULL ? p->layer_row[l] : 0);
		}
		kv->base[l + 1] = kv->base[l] + (int64_t) p->n_blocks * p->block_size * kv->row[l];
	}
	n = (size_t) kv->base[p->n_layers];
	if (!p->no_data)
	{
		kv->k = cbllm_map_zeroed(n * kv->elem_bytes);
		kv->v = cbllm_map_zeroed(n * kv->elem_bytes);
		if (kv->k == NULL || kv->v == NULL)
		{
			size_t		mb = 2 * n * kv->elem_bytes >> 20;

			kv_cache_free(kv);
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "kv cache: cannot allocate %zu MiB for %d blocks; lower the KV cache size",
							  mb, p->n_blocks);
		}
	}
	*out = kv;
	return CBLLM_OK;
}

/* Release the pool's memory. */
void
kv_cache_free(kv_cache *kv)
{
	size_t		n;

	if (kv == NULL)
		return;
	if (kv->base != NULL && kv->row != NULL)
	{
		n = (size_t) kv->base[kv->n_layers] * kv->elem_bytes;
		cbllm_unmap(kv->k, n);
		cbllm_unmap(kv->v, n);
	}
	free(kv->row);
	free(kv->base);
	free(kv);
}
