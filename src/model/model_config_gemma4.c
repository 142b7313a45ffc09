/*
 * model_config_gemma4.c: the config.json fields of Gemma 4's text decoder
 * (HF's Gemma4TextConfig, under text_config in the released
 * Gemma4ForConditionalGeneration), as HF's modeling_gemma4.py reads them:
 *
 *   layer_types       "sliding_attention" / "full_attention" per layer
 *                     (absent: full when (l + 1) % 6 == 0); the last layer
 *                     is full whatever the list says, as HF's config makes it.
 *   head_dim, global_head_dim
 *                     the sliding and the full layers' head sizes.
 *   num_key_value_heads, and num_global_key_value_heads for full layers
 *                     under attention_k_eq_v, whose full layers have no
 *                     v_proj: the values are the keys as projected.
 *   sliding_window    the sliding layers' window (512 when absent).
 *   rope_parameters   per layer type: {"rope_type": "default" or
 *                     "proportional", "rope_theta", "partial_rotary_factor"}
 *                     (absent: sliding default 1e4, full proportional 1e6
 *                     on a quarter).  Proportional rotates pairs (i, i + d/2)
 *                     of the whole head, the first partial * d / 2 of them
 *                     at theta^(-2i/d) and the rest not at all.
 *   num_kv_shared_layers
 *                     the last n layers compute no K and V: each attends to
 *                     the cache of the last earlier layer of its own type.
 *   use_double_wide_mlp
 *                     those layers' MLP is 2 intermediate_size wide.
 *   hidden_size_per_layer_input, vocab_size_per_layer_input
 *                     the per-layer embeddings (ARCH_PLE; 0: none).
 *   final_logit_softcapping
 *                     c tanh(logits / c), null for none.
 *
 * The attention's scale is 1 (q and k are RMSNormed per head), every norm
 * multiplies by its weight itself (not 1 + w), and v is RMSNormed per head
 * without a weight.  Attention biases and any activation but
 * gelu_pytorch_tanh are refused.
 *
 * With enable_moe_block (26B-A4B) every layer also has num_experts experts
 * of moe_intermediate_size, top_k_experts per token: the router reads
 * rmsnorm(x) * router.scale / sqrt(hidden) (x the residual stream), softmax,
 * the k largest renormalised, each times router.per_expert_scale; the
 * experts read rmsnorm(x) * pre_feedforward_layernorm_2; the layer's MLP
 * term is rmsnorm(dense) * post_feedforward_layernorm_1 + rmsnorm(experts) *
 * post_feedforward_layernorm_2.
 */
#include "model/model.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* *out = integer field key of obj in [lo, hi]; absent or null: def (an error when def < lo). */
static int
GetInt(const cJSON *obj, const char *key, int def, int lo, int hi, int *out, const char *path,
	   cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (v == NULL || cJSON_IsNull(v))
	{
		if (def < lo)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: missing \"%s\" (Gemma 4 needs it)",
							  path, key);
		*out = def;
		return CBLLM_OK;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
		v->valuedouble != floor(v->valuedouble))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be an integer in [%d, %d]",
						  path, key, lo, hi);
	*out = (int) v->valuedouble;
	return CBLLM_OK;
}

/* *out = boolean field key of obj; absent or null: false. */
static int
GetBool(const cJSON *obj, const char *key, bool *out, const char *path, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	*out = false;
	if (v == NULL || cJSON_IsNull(v))
		return CBLLM_OK;
	if (!cJSON_IsBool(v))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be true or false", path, key);
	*out = cJSON_IsTrue(v);
	return CBLLM_OK;
}

/* Which layers are full attention: layer_types, else every sixth; the last one always. */
static int
GetLayerKinds(const cJSON *root, cbllm_model_config *cfg, bool *full, const char *path,
			  cbllm_err *err)
{
	static const char *const names[] = {"sliding_attention", "full_attention"};
	int			n = cfg->n_layers,
				kind[CBLLM_MAX_LAYERS],
				rc;
	bool		given;

	if ((rc = model_config_layer_types(root, n, names, 2, kind, &given, path, err)) != CBLLM_OK)
		return rc;
	for (int l = 0; l < n; l++)
		full[l] = given ? kind[l] == 1 : (l + 1) % 6 == 0;
	full[n - 1] = true;
	return CBLLM_OK;
}

/*
 * r = rope_parameters[kind] for heads of head_dim: default, or proportional
 * (only the first partial * head_dim / 2 pairs rotate).
 */
static int
GetRope(const cJSON *root, const char *kind, bool full, int head_dim, cbllm_rope *r,
		const char *path, cbllm_err *err)
{
	const cJSON *all = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
	const cJSON *p = cJSON_IsObject(all) ? cJSON_GetObjectItemCaseSensitive(all, kind) : NULL;
	const cJSON *type = p != NULL ? cJSON_GetObjectItemCaseSensitive(p, "rope_type") : NULL;
	const cJSON *theta = p != NULL ? cJSON_GetObjectItemCaseSensitive(p, "rope_theta") : NULL;
	const cJSON *part = p != NULL ? cJSON_GetObjectItemCaseSensitive(p, "partial_rotary_factor") : NULL;
	const cJSON *factor = p != NULL ? cJSON_GetObjectItemCaseSensitive(p, "factor") : NULL;
	const char *tname = cJSON_IsString(type) ? type->valuestring : full && p == NULL ? "proportional" : "default";
	double		th = cJSON_IsNumber(theta) ? theta->valuedouble : full ? 1e6 : 1e4;
	double		partial = cJSON_IsNumber(part) ? part->valuedouble : full && p == NULL ? 0.25 : 1.0;

	if (all != NULL && !cJSON_IsNull(all) && !cJSON_IsObject(all))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: rope_parameters must be an object", path);
	if (strcmp(tname, "default") != 0 && strcmp(tname, "proportional") != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: unsupported rope_parameters.%s.rope_type \"%s\" (default and proportional are supported)",
						  path, kind, tname);
	if (!(th > 1) || (theta != NULL && !cJSON_IsNumber(theta)))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: rope_parameters.%s.rope_theta must be above 1",
						  path, kind);
	if (!(partial > 0 && partial <= 1) || (part != NULL && !cJSON_IsNumber(part) && !cJSON_IsNull(part)))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: rope_parameters.%s.partial_rotary_factor must be in (0, 1]", path, kind);
	if (factor != NULL && !cJSON_IsNull(factor) &&
		!(cJSON_IsNumber(factor) && factor->valuedouble == 1))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: rope_parameters.%s.factor other than 1 is not supported", path, kind);
	rope_set_default(r, th);
	r->head_dim = head_dim;
	if (strcmp(tname, "proportional") == 0)
		r->n_rot_pairs = (int) (partial * head_dim / 2);
	else if (partial != 1)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: rope_parameters.%s: partial_rotary_factor needs rope_type proportional",
						  path, kind);
	if (r->n_rot_pairs == head_dim / 2)
		r->n_rot_pairs = 0;
	return CBLLM_OK;
}

/* Refuse what the decoder does not run: biases, another activation, attention soft-capping. */
static int
CheckSupported(const cJSON *root, const char *path, cbllm_err *err)
{
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_activation");
	const cJSON *cap = cJSON_GetObjectItemCaseSensitive(root, "attn_logit_softcapping");
	bool		bias;
	int			rc;

	if ((rc = GetBool(root, "attention_bias", &bias, path, err)))
		return rc;
	if (bias)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: Gemma 4 with attention_bias is not supported",
						  path);
	if (act != NULL && !cJSON_IsNull(act) &&
		!(cJSON_IsString(act) && strcmp(act->valuestring, "gelu_pytorch_tanh") == 0))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: Gemma 4's hidden_activation must be gelu_pytorch_tanh", path);
	if (cap != NULL && !cJSON_IsNull(cap))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: attn_logit_softcapping is not supported (only null)", path);
	return CBLLM_OK;
}

/*
 * The mixture-of-experts block (enable_moe_block, 26B-A4B): num_experts of
 * moe_intermediate_size, top_k_experts chosen, in every layer beside the
 * dense MLP; the router renormalises the chosen weights.
 */
static int
GetExperts(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	bool		moe;
	int			rc;

	if ((rc = GetBool(root, "enable_moe_block", &moe, path, err)) || !moe)
		return rc;
	if ((rc = GetInt(root, "num_experts", -1, 1, CBLLM_MAX_EXPERTS, &cfg->n_experts, path, err)) ||
		(rc = GetInt(root, "top_k_experts", -1, 1, cfg->n_experts, &cfg->n_experts_used, path,
					 err)) ||
		(rc = GetInt(root, "moe_intermediate_size", -1, 1, 1 << 24, &cfg->expert_intermediate,
					 path, err)))
		return rc;
	cfg->moe_norm_topk = true;
	cfg->features |= ARCH_MOE;
	for (int l = 0; l < cfg->n_layers; l++)
		cfg->layer_moe[l] = 1;
	return CBLLM_OK;
}

/* KV sharing: each of the last n layers reads the last earlier unshared layer of its type. */
static int
ShareKv(cbllm_model_config *cfg, const bool *full, int n_shared, const char *path, cbllm_err *err)
{
	int			first = cfg->n_layers - n_shared;

	cfg->n_kv_shared = n_shared;
	for (int l = first; l < cfg->n_layers; l++)
	{
		int			src = -1;

		for (int j = 0; j < first; j++)
			if (full[j] == full[l])
				src = j;
		if (src < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: KV-shared layer %d has no earlier %s layer to share (num_kv_shared_layers %d)",
							  path, l, full[l] ? "full_attention" : "sliding_attention", n_shared);
		cfg->layer_kv_source[l] = (int16_t) src;
	}
	return CBLLM_OK;
}

/* Gemma 4's fields of config.json root (the text config) into cfg; then the cache layers. */
int
model_config_gemma4(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	const cJSON *cap = cJSON_GetObjectItemCaseSensitive(root, "final_logit_softcapping");
	bool		full[CBLLM_MAX_LAYERS];
	bool		k_eq_v,
				wide;
	int			global_hd,
				global_kv,
				window,
				n_shared,
				rc;

	if (cfg->n_layers > CBLLM_MAX_LAYERS)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: num_hidden_layers %d exceeds %d", path,
						  cfg->n_layers, CBLLM_MAX_LAYERS);
	if ((rc = CheckSupported(root, path, err)) || (rc = GetExperts(root, cfg, path, err)) ||
		(rc = GetLayerKinds(root, cfg, full, path, err)) ||
		(rc = GetInt(root, "global_head_dim", -1, 2, 4096, &global_hd, path, err)) ||
		(rc = GetBool(root, "attention_k_eq_v", &k_eq_v, path, err)) ||
		(rc = GetInt(root, "num_global_key_value_heads", cfg->n_kv_heads, 1, cfg->n_heads,
					 &global_kv, path, err)) ||
		(rc = GetInt(root, "sliding_window", 512, 1, 1 << 24, &window, path, err)) ||
		(rc = GetInt(root, "num_kv_shared_layers", 0, 0, cfg->n_layers - 1, &n_shared, path,
					 err)) ||
		(rc = GetBool(root, "use_double_wide_mlp", &wide, path, err)) ||
		(rc = GetInt(root, "hidden_size_per_layer_input", 256, 0, 1 << 16, &cfg->ple_dim, path,
					 err)) ||
		(rc = GetInt(root, "vocab_size_per_layer_input", 262144, 1, 1 << 24, &cfg->ple_vocab,
					 path, err)))
		return rc;
	if (global_hd % 2 != 0 || (k_eq_v && cfg->n_heads % global_kv != 0))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: global_head_dim %d must be even and num_attention_heads %d a multiple of num_global_key_value_heads %d",
						  path, global_hd, cfg->n_heads, global_kv);
	if (cap != NULL && !cJSON_IsNull(cap) &&
		!(cJSON_IsNumber(cap) && cap->valuedouble > 0 && cap->valuedouble <= FLT_MAX))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: final_logit_softcapping must be a positive number or null", path);
	if (cfg->ple_dim > 0 && cfg->ple_vocab < cfg->vocab_size)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: vocab_size_per_layer_input %d is below vocab_size %d: some tokens would have no per-layer embedding",
						  path, cfg->ple_vocab, cfg->vocab_size);
	cfg->logit_softcap = cJSON_IsNumber(cap) ? (float) cap->valuedouble : 0;
	if (cfg->ple_dim > 0)
		cfg->features |= ARCH_PLE;
	/* rope[0] for the full layers, rope[1] for the sliding ones */
	if ((rc = GetRope(root, "full_attention", true, global_hd, &cfg->rope[0], path, err)) ||
		(rc = GetRope(root, "sliding_attention", false, cfg->head_dim, &cfg->rope[1], path, err)))
		return rc;
	for (int l = 0; l < cfg->n_layers; l++)
	{
		bool		shared = l >= cfg->n_layers - n_shared;

		cfg->layer_head_dim[l] = (int16_t) (full[l] ? global_hd : cfg->head_dim);
		cfg->layer_kv_heads[l] = (int16_t) (full[l] && k_eq_v ? global_kv : cfg->n_kv_heads);
		cfg->layer_v_is_k[l] = full[l] && k_eq_v;
		cfg->layer_ff[l] = cfg->intermediate * (wide && shared ? 2 : 1);
	}
	return model_config_gemma4_layers(cfg, full, window, n_shared, path, err);
}

/* The layers' RoPE (rope[0] full, rope[1] sliding), windows and KV sources; then the cache layers. */
int
model_config_gemma4_layers(cbllm_model_config *cfg, const bool *full, int window, int n_shared,
						   const char *path, cbllm_err *err)
{
	int			rc;

	cfg->n_rope = 2;
	cfg->attn_scale = 1.0f;
	cfg->sliding_window = 0;
	cfg->rope[0].max_pos = cfg->rope[1].max_pos = cfg->max_pos;
	for (int l = 0; l < cfg->n_layers; l++)
	{
		cfg->layer_rope[l] = full[l] ? 0 : 1;
		cfg->layer_window[l] = full[l] ? 0 : window;
		if (!full[l])
			cfg->sliding_window = window;
	}
	if ((rc = ShareKv(cfg, full, n_shared, path, err)))
		return rc;
	model_config_cache_layers(cfg);
	return model_config_check_ropes(cfg, path, err);
}
