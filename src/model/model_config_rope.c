/*
 * model_config_rope.c: the positional part of config.json: which RoPE
 * configuration each layer rotates with and which window it attends in.
 *
 * RoPE: rope[0] comes from rope_theta and rope_scaling (its "rope_type" or
 * older "type" key: default, linear, llama3, yarn, dynamic, longrope/su;
 * rope.h gives the formulas and the fields each reads).  A config with
 * rope_local_base_freq (Gemma-3) gets rope[1], the plain RoPE of that base,
 * for its sliding-window layers; its other layers keep rope[0].  An unknown
 * type, a missing or invalid field and partial_rotary_factor other than 1
 * are refused naming the field.
 *
 * Windows, as HF applies them:
 *   - use_sliding_window false (Qwen2), or sliding_window absent, null or 0:
 *     no layer has a window;
 *   - layer_types: "sliding_attention" layers have sliding_window, and
 *     "full_attention" layers none;
 *   - else sliding_window_pattern N (Gemma-3): layer l is global when
 *     (l + 1) % N == 0, windowed otherwise;
 *   - else max_window_layers M with use_sliding_window true (Qwen2): layers
 *     l >= M are windowed;
 *   - else (Mistral, Phi-3) every layer is windowed.
 */
#include "model/model.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG_INT (1 << 24)

/*
 * *out = number field key of obj (named prefix.key in messages), in
 * [lo, hi]; an integer when integer.  Absent: def, or an error when
 * required.
 */
static int
GetNumber(const cJSON *obj, const char *prefix, const char *key, bool required, double def,
		  double lo, double hi, bool integer, double *out, const char *path, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (v == NULL || cJSON_IsNull(v))
	{
		if (required)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: missing %s%s", path, prefix, key);
		*out = def;
		return CBLLM_OK;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
		(integer && v->valuedouble != floor(v->valuedouble)))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s%s\" must be %s in [%g, %g]%s", path,
						  prefix, key, integer ? "an integer" : "a number", lo, hi,
						  hi == FLT_MAX ? " (float range)" : "");
	*out = v->valuedouble;
	return CBLLM_OK;
}

/* An integer field through GetNumber. */
static int
GetCount(const cJSON *obj, const char *prefix, const char *key, bool required, int def,
		 int *out, const char *path, cbllm_err *err)
{
	double		d;
	int			rc = GetNumber(obj, prefix, key, required, def, 0, BIG_INT, true, &d, path, err);

	if (rc == CBLLM_OK)
		*out = (int) d;
	return rc;
}

/* dst (n) = the numbers of the list field key of rs, which must have n of them. */
static int
GetFactors(const cJSON *rs, const char *key, int n, double *dst, const char *path,
		   cbllm_err *err)
{
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(rs, key);
	int			i = 0;
	const cJSON *v;

	if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: rope_scaling.%s must be a list of head_dim / 2 = %d numbers", path,
						  key, n);
	cJSON_ArrayForEach(v, list)
	{
		if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= FLT_MAX))
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: rope_scaling.%s[%d] must be a positive number", path, key, i);
		dst[i++] = v->valuedouble;
	}
	return CBLLM_OK;
}

/* The longrope fields: the factor lists and the context lengths (rope.h). */
static int
GetLongrope(const cJSON *root, const cJSON *rs, cbllm_model_config *cfg, cbllm_rope *r,
			const char *path, cbllm_err *err)
{
	int			half = cfg->head_dim / 2,
				rc;

	if (half > ROPE_MAX_FACTORS)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: rope_scaling longrope is supported up to head_dim %d (head_dim is %d)",
						  path, 2 * ROPE_MAX_FACTORS, cfg->head_dim);
	r->n_factors = half;
	if ((rc = GetFactors(rs, "short_factor", half, r->short_factor, path, err)) ||
		(rc = GetFactors(rs, "long_factor", half, r->long_factor, path, err)) ||
		(rc = GetNumber(rs, "rope_scaling.", "attention_factor", false, 0, 0, FLT_MAX, false,
						&r->attention_factor, path, err)))
		return rc;
	/*
	 * Phi-3 keeps original_max_position_embeddings at the top level, and
	 * then the factor is max_position_embeddings over it; else both come
	 * from rope_scaling (the original length defaulting to
	 * max_position_embeddings)
	 */
	if (cJSON_GetObjectItemCaseSensitive(root, "original_max_position_embeddings") != NULL)
	{
		if ((rc = GetCount(root, "", "original_max_position_embeddings", true, 0,
						   &r->orig_max_pos, path, err)))
			return rc;
		r->factor = r->orig_max_pos > 0 ? (double) cfg->max_pos / r->orig_max_pos : 0;
	}
	else if ((rc = GetCount(rs, "rope_scaling.", "original_max_position_embeddings", false,
							cfg->max_pos, &r->orig_max_pos, path, err)) ||
			 (rc = GetNumber(rs, "rope_scaling.", "factor", true, 1, DBL_MIN, FLT_MAX, false,
							 &r->factor, path, err)))
		return rc;
	if (r->orig_max_pos < 2)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: original_max_position_embeddings must be at least 2", path);
	return CBLLM_OK;
}

/* The fields of rope_scaling's type beyond its factor. */
static int
GetTypeFields(const cJSON *root, const cJSON *rs, cbllm_model_config *cfg, cbllm_rope *r,
			  const char *path, cbllm_err *err)
{
	const char *p = "rope_scaling.";
	const cJSON *truncate = cJSON_GetObjectItemCaseSensitive(rs, "truncate");
	int			rc = CBLLM_OK;

	switch (r->type)
	{
		case ROPE_DEFAULT:
		case ROPE_LINEAR:
		case ROPE_DYNAMIC:
			break;
		case ROPE_LLAMA3:
			if ((rc = GetNumber(rs, p, "low_freq_factor", true, 0, DBL_MIN, FLT_MAX, false,
								&r->low_freq_factor, path, err)) ||
				(rc = GetNumber(rs, p, "high_freq_factor", true, 0, DBL_MIN, FLT_MAX, false,
								&r->high_freq_factor, path, err)) ||
				(rc = GetCount(rs, p, "original_max_position_embeddings", true, 0,
							   &r->orig_max_pos, path, err)))
				return rc;
			if (r->high_freq_factor <= r->low_freq_factor || r->orig_max_pos < 1)
				return cbllm_fail(err, CBLLM_ERR_FORMAT,
								  "%s: rope_scaling.high_freq_factor must exceed low_freq_factor, and original_max_position_embeddings be positive",
								  path);
			break;
		case ROPE_YARN:
			if ((rc = GetNumber(rs, p, "beta_fast", false, 32, DBL_MIN, FLT_MAX, false,
								&r->beta_fast, path, err)) ||
				(rc = GetNumber(rs, p, "beta_slow", false, 1, DBL_MIN, FLT_MAX, false,
								&r->beta_slow, path, err)) ||
				(rc = GetNumber(rs, p, "attention_factor", false, 0, 0, FLT_MAX, false,
								&r->attention_factor, path, err)) ||
				(rc = GetNumber(rs, p, "mscale", false, 0, 0, FLT_MAX, false, &r->mscale, path,
								err)) ||
				(rc = GetNumber(rs, p, "mscale_all_dim", false, 0, 0, FLT_MAX, false,
								&r->mscale_all_dim, path, err)) ||
				(rc = GetCount(rs, p, "original_max_position_embeddings", false, cfg->max_pos,
							   &r->orig_max_pos, path, err)))
				return rc;
			if (truncate != NULL && !cJSON_IsBool(truncate))
				return cbllm_fail(err, CBLLM_ERR_FORMAT,
								  "%s: rope_scaling.truncate must be true or false", path);
			r->yarn_exact_range = cJSON_IsFalse(truncate);
			break;
		case ROPE_LONGROPE:
			rc = GetLongrope(root, rs, cfg, r, path, err);
			break;
		case ROPE_FREQ_FACTORS:
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
							  "%s: rope_scaling.rope_type \"freq_factors\" comes from GGUF files only",
							  path);
	}
	return rc;
}

/*
 * Newer configs (transformers 5: Qwen3.5) give rope_theta, the scaling and
 * partial_rotary_factor in one object, rope_parameters, which then stands
 * for rope_scaling (its rope_type "default" is no scaling).  Its
 * mrope_section and mrope_interleaved split a multimodal model's rotary
 * pairs between time, height and width positions; for text all three are
 * the token's position, which makes it the plain RoPE, so they are not read.
 */
static const cJSON *
RopeParameters(const cJSON *root)
{
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");

	return cJSON_IsObject(p) ? p : NULL;
}

/* rope[0] from rope_theta and rope_scaling. */
static int
GetGlobalRope(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
	const cJSON *params = RopeParameters(root);
	const cJSON *type;
	cbllm_rope *r = &cfg->rope[0];
	double		theta;
	int			rc;

	if ((rc = GetNumber(params != NULL && cJSON_GetObjectItemCaseSensitive(root, "rope_theta") == NULL ?
						params : root, "", "rope_theta", false, 10000, 1, FLT_MAX, false, &theta,
						path, err)))
		return rc;
	if ((rs == NULL || cJSON_IsNull(rs)) && params != NULL)
		rs = params;
	if (!(theta > 1))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: rope_theta must be above 1", path);
	rope_set_default(r, theta);
	r->max_pos = cfg->max_pos;
	if (rs == NULL || cJSON_IsNull(rs))
		return CBLLM_OK;
	if (!cJSON_IsObject(rs))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: rope_scaling must be an object or null",
						  path);
	type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
	if (type == NULL)
		type = cJSON_GetObjectItemCaseSensitive(rs, "type");
	if (!cJSON_IsString(type))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: rope_scaling.rope_type (or type) must be a string", path);
	if (!rope_type_from_name(type->valuestring, &r->type))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: unsupported rope_scaling.rope_type \"%s\" (default, linear, llama3, yarn, dynamic, longrope and su are supported)",
						  path, type->valuestring);
	if (r->type != ROPE_DEFAULT && r->type != ROPE_LONGROPE &&
		(rc = GetNumber(rs, "rope_scaling.", "factor", true, 1, 1, FLT_MAX, false, &r->factor,
						path, err)))
		return rc;
	return GetTypeFields(root, rs, cfg, r, path, err);
}

/* Whether layer l is a sliding-window layer under layer_types, the pattern or max_window_layers. */
static int
GetLayerKinds(const cJSON *root, cbllm_model_config *cfg, bool *sliding, const char *path,
			  cbllm_err *err)
{
	/* a hybrid model's linear layers (model_config_hybrid read which) have no window */
	static const char *const names[] = {"sliding_attention", "full_attention", "linear_attention"};
	int			kind[CBLLM_MAX_LAYERS],
				pattern,
				max_window,
				rc;
	bool		given,
				hybrid = false;

	for (int l = 0; l < cfg->n_layers; l++)
		hybrid = hybrid || cfg->layer_linear[l];
	if ((rc = model_config_layer_types(root, cfg->n_layers, names, hybrid ? 3 : 2, kind, &given,
									   path, err)))
		return rc;
	if (given)
	{
		for (int l = 0; l < cfg->n_layers; l++)
			sliding[l] = kind[l] == 0;
		return CBLLM_OK;
	}
	if ((rc = GetCount(root, "", "sliding_window_pattern", false, 0, &pattern, path, err)) ||
		(rc = GetCount(root, "", "max_window_layers", false, 0, &max_window, path, err)))
		return rc;
	for (int l = 0; l < cfg->n_layers; l++)
		sliding[l] = pattern > 0 ? (l + 1) % pattern != 0 :
			cJSON_GetObjectItemCaseSensitive(root, "max_window_layers") != NULL ? l >= max_window :
			true;
	return CBLLM_OK;
}

/* Each layer's window and RoPE. */
static int
GetLayers(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	const cJSON *use = cJSON_GetObjectItemCaseSensitive(root, "use_sliding_window");
	bool		sliding[CBLLM_MAX_LAYERS];
	int			window,
				rc;
	double		local_base;

	if ((rc = GetCount(root, "", "sliding_window", false, 0, &window, path, err)) ||
		(rc = GetNumber(root, "", "rope_local_base_freq", false, 0, 1, FLT_MAX, false,
						&local_base, path, err)) ||
		(rc = GetLayerKinds(root, cfg, sliding, path, err)))
		return rc;
	if (use != NULL && !cJSON_IsBool(use))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: use_sliding_window must be true or false",
						  path);
	if (cJSON_IsFalse(use))
		window = 0;
	model_config_layer_positions(cfg, sliding, window, local_base);
	return CBLLM_OK;
}

/* Windowed layers get window and, with a local base, rope[1]; the others the whole context and rope[0]. */
void
model_config_layer_positions(cbllm_model_config *cfg, const bool *sliding, int window,
							 double local_base)
{
	cfg->n_rope = 1;
	if (local_base > 0)
	{
		cfg->n_rope = 2;
		rope_set_default(&cfg->rope[1], local_base);
		cfg->rope[1].max_pos = cfg->max_pos;
	}
	cfg->sliding_window = 0;
	for (int l = 0; l < cfg->n_layers; l++)
	{
		cfg->layer_window[l] = sliding[l] ? window : 0;
		cfg->layer_rope[l] = sliding[l] && cfg->n_rope == 2 ? 1 : 0;
		if (cfg->layer_window[l] > 0)
			cfg->sliding_window = window;
	}
}

/* Fill cfg's RoPE configurations and per-layer windows from config.json. */
int
model_config_positions(const cJSON *root, cbllm_model_config *cfg, const char *path,
					   cbllm_err *err)
{
	double		partial;
	int			rot_dim,
				rc;

	if (cfg->n_layers > CBLLM_MAX_LAYERS)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: num_hidden_layers %d exceeds %d", path,
						  cfg->n_layers, CBLLM_MAX_LAYERS);
	/* HF's Qwen3.5 config defaults the factor to a quarter of the head; the others rotate all of it */
	if ((rc = GetNumber(RopeParameters(root) != NULL &&
						cJSON_GetObjectItemCaseSensitive(root, "partial_rotary_factor") == NULL ?
						RopeParameters(root) : root, "", "partial_rotary_factor", false,
						(cfg->features & ARCH_LINEAR_ATTN) ? 0.25 : 1, DBL_MIN, 1, false, &partial,
						path, err)))
		return rc;
	rot_dim = (int) (cfg->head_dim * partial);
	if (rot_dim < 2 || rot_dim % 2 != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: partial_rotary_factor %g of head_dim %d rotates %d dimensions; it must be an even number of at least 2",
						  path, partial, cfg->head_dim, rot_dim);
	if ((rc = GetGlobalRope(root, cfg, path, err)) || (rc = GetLayers(root, cfg, path, err)))
		return rc;
	for (int i = 0; i < cfg->n_rope; i++)
		cfg->rope[i].rot_dim = rot_dim < cfg->head_dim ? rot_dim : 0;
	return model_config_check_ropes(cfg, path, err);
}

/* Build every RoPE configuration of cfg once: the formulas must take them now, not at the first step. */
int
model_config_check_ropes(const cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	int			rc = CBLLM_OK;
	rope_freqs *probe = malloc(sizeof(*probe));

	if (probe == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	for (int i = 0; i < cfg->n_rope && rc == CBLLM_OK; i++)
	{
		cbllm_err	why;

		if (rope_freqs_build(&cfg->rope[i], cfg->head_dim, probe, &why) != CBLLM_OK)
			rc = cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: %s", path, why.msg);
	}
	free(probe);
	return rc;
}

/* Every layer: rope[0] plain of base theta, window as given. */
void
model_config_uniform_positions(cbllm_model_config *cfg, double theta, int window)
{
	cfg->n_rope = 1;
	rope_set_default(&cfg->rope[0], theta);
	cfg->rope[0].max_pos = cfg->max_pos;
	cfg->sliding_window = window;
	for (int l = 0; l < CBLLM_MAX_LAYERS; l++)
	{
		cfg->layer_rope[l] = 0;
		cfg->layer_window[l] = window;
	}
}

/* The common window of all layers, or 0 when one has none or they differ. */
int
model_kv_drop_window(const cbllm_model_config *cfg)
{
	for (int l = 0; l < cfg->n_layers; l++)
		if (cfg->layer_window[l] <= 0 || cfg->layer_window[l] != cfg->layer_window[0])
			return 0;
	return cfg->n_layers > 0 ? cfg->layer_window[0] : 0;
}
