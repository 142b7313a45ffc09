/*
 * model_config_hybrid.c: the config.json fields of a hybrid model, whose
 * layers mix tokens either by attention or by Gated DeltaNet linear
 * attention (Qwen3.5: three of every four layers linear), and the layers'
 * places in the two caches that follow from them: an attention layer's K
 * and V in the paged KV cache, a linear layer's conv and delta-rule state
 * in the per-sequence state cache.
 *
 * The fields, as HF's Qwen3_5TextConfig names them: linear_num_key_heads,
 * linear_num_value_heads (a multiple of the key heads: each key head serves
 * that many value heads), linear_key_head_dim, linear_value_head_dim,
 * linear_conv_kernel_dim, and layer_types ("linear_attention" or
 * "full_attention" per layer) or, without it, full_attention_interval (a
 * layer is full attention when its number plus one is a multiple of it).
 * None has a default that cbllm would guess: the head counts and sizes
 * must be given.
 */
#include "model/model.h"

#include <cjson/cJSON.h>
#include <string.h>

/* A positive integer field of at most hi; absent fails unless def > 0, which it then takes. */
static int
GetCount(const cJSON *root, const char *key, int def, int hi, int *out, const char *path,
		 cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	if (v == NULL || cJSON_IsNull(v))
	{
		if (def <= 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: missing \"%s\" (a hybrid model's linear attention needs it)",
							  path, key);
		*out = def;
		return CBLLM_OK;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= hi) ||
		v->valuedouble != (double) (int) v->valuedouble)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be an integer in [1, %d]",
						  path, key, hi);
	*out = (int) v->valuedouble;
	return CBLLM_OK;
}

/* Which layers are linear: layer_types, else full_attention_interval. */
static int
GetLinearLayers(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	static const char *const names[] = {"full_attention", "linear_attention"};
	int			kind[CBLLM_MAX_LAYERS],
				interval,
				rc;
	bool		given;

	if ((rc = model_config_layer_types(root, cfg->n_layers, names, 2, kind, &given, path, err)))
		return rc;
	if (!given &&
		(rc = GetCount(root, "full_attention_interval", 4, CBLLM_MAX_LAYERS, &interval, path, err)))
		return rc;
	for (int l = 0; l < cfg->n_layers; l++)
		cfg->layer_linear[l] = given ? kind[l] == 1 : (l + 1) % interval != 0;
	return CBLLM_OK;
}

/* Each layer's geometry where the config gave none, and its index in the KV cache or the state cache. */
void
model_config_cache_layers(cbllm_model_config *cfg)
{
	cfg->n_kv_layers = 0;
	cfg->n_linear_layers = 0;
	for (int l = 0; l < cfg->n_layers; l++)
	{
		int			src;

		if (cfg->layer_head_dim[l] == 0)
			cfg->layer_head_dim[l] = (int16_t) cfg->head_dim;
		if (cfg->layer_kv_heads[l] == 0)
			cfg->layer_kv_heads[l] = (int16_t) cfg->n_kv_heads;
		if (cfg->layer_ff[l] == 0)
			cfg->layer_ff[l] = cfg->intermediate;
		if (l < cfg->n_layers - cfg->n_kv_shared || cfg->layer_kv_source[l] >= l ||
			cfg->layer_kv_source[l] < 0)
			cfg->layer_kv_source[l] = (int16_t) l;
		src = cfg->layer_kv_source[l];
		cfg->kv_layer[l] = cfg->layer_linear[l] ? -1 :
			src == l ? (int16_t) cfg->n_kv_layers++ : cfg->kv_layer[src];
		cfg->state_layer[l] = cfg->layer_linear[l] ? (int16_t) cfg->n_linear_layers++ : -1;
	}
}

/* Whether every cache layer has n_kv_heads heads of head_dim. */
bool
model_kv_uniform(const cbllm_model_config *cfg)
{
	for (int l = 0; l < cfg->n_layers; l++)
		if (cfg->kv_layer[l] >= 0 &&
			(cfg->layer_head_dim[l] != cfg->head_dim || cfg->layer_kv_heads[l] != cfg->n_kv_heads))
			return false;
	return true;
}

/* Each cache layer's elements per position into row (when not NULL); their sum. */
int64_t
model_kv_rows(const cbllm_model_config *cfg, int32_t *row)
{
	int64_t		sum = 0;

	for (int l = 0; l < cfg->n_layers; l++)
		if (cfg->kv_layer[l] >= 0 && cfg->layer_kv_source[l] == l)
		{
			int32_t		r = (int32_t) cfg->layer_kv_heads[l] * cfg->layer_head_dim[l];

			if (row != NULL)
				row[cfg->kv_layer[l]] = r;
			sum += r;
		}
	return sum;
}

/* The linear-attention geometry and layers of a hybrid model, then the cache indices. */
int
model_config_hybrid(const cJSON *root, cbllm_model_config *cfg, const char *path,
					cbllm_err *err)
{
	const int	big = 1 << 16;
	int			rc;

	if (cfg->n_layers > CBLLM_MAX_LAYERS)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: num_hidden_layers %d exceeds %d", path,
						  cfg->n_layers, CBLLM_MAX_LAYERS);
	if (!(cfg->features & ARCH_LINEAR_ATTN))
	{
		model_config_cache_layers(cfg);
		return CBLLM_OK;
	}
	if ((rc = GetCount(root, "linear_num_key_heads", 0, big, &cfg->lin_k_heads, path, err)) ||
		(rc = GetCount(root, "linear_num_value_heads", 0, big, &cfg->lin_v_heads, path, err)) ||
		(rc = GetCount(root, "linear_key_head_dim", 0, 1024, &cfg->lin_k_dim, path, err)) ||
		(rc = GetCount(root, "linear_value_head_dim", 0, 1024, &cfg->lin_v_dim, path, err)) ||
		(rc = GetCount(root, "linear_conv_kernel_dim", 4, 64, &cfg->lin_conv, path, err)) ||
		(rc = GetLinearLayers(root, cfg, path, err)))
		return rc;
	if (cfg->lin_v_heads % cfg->lin_k_heads != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
						  path, cfg->lin_v_heads, cfg->lin_k_heads);
	cfg->lin_v_tiled = false;
	model_config_cache_layers(cfg);
	if (cfg->n_kv_layers == 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: every layer is linear attention; cbllm needs at least one attention layer",
						  path);
	return CBLLM_OK;
}
