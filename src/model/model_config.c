/* model_config.c: read and validate a HuggingFace config.json for the architectures of arch.c. */
#include "model/model.h"

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Read an integer field; missing fields take def (or fail when def < 0). */
static int
GetInt(const cJSON *root, const char *key, int def, int lo, int hi, int *out,
	   const char *path, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	if (v == NULL || cJSON_IsNull(v))
	{
		if (def < 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: missing \"%s\"", path, key);
		*out = def;
		return CBLLM_OK;
	}
	/* the range first: casting a double out of long long's range is undefined */
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
		v->valuedouble != (double) (long long) v->valuedouble)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be an integer in [%d, %d]",
						  path, key, lo, hi);
	*out = (int) v->valuedouble;
	return CBLLM_OK;
}

/* Read a token id given as an integer or a list (first element); -1 when absent. */
static int
GetTokenId(const cJSON *root, const char *key, int32_t *out, const char *path, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	if (cJSON_IsArray(v))
		v = cJSON_GetArrayItem(v, 0);
	if (v == NULL || cJSON_IsNull(v))
	{
		*out = -1;
		return CBLLM_OK;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (1 << 24))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"%s\" must be a token id", path, key);
	*out = (int32_t) v->valuedouble;
	return CBLLM_OK;
}

/* Read a positive number field with a default; as a float it must stay positive and finite. */
static int
GetFloat(const cJSON *root, const char *key, double def, float *out,
		 const char *path, cbllm_err *err)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);

	if (v == NULL || cJSON_IsNull(v))
	{
		*out = (float) def;
		return CBLLM_OK;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= FLT_MAX) ||
		!((float) v->valuedouble > 0))
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: \"%s\" must be a positive number in float range (%g to %g)",
						  path, key, (double) FLT_TRUE_MIN, (double) FLT_MAX);
	*out = (float) v->valuedouble;
	return CBLLM_OK;
}

/* The hidden_act value of an activation. */
static const char *
ActivationName(arch_activation a)
{
	switch (a)
	{
		case ARCH_ACT_SILU:
			return "silu";
		case ARCH_ACT_GELU_TANH:
			return "gelu_pytorch_tanh";
		case ARCH_ACT_SWIGLU_OAI:
			return "silu";		/* what gpt-oss's config.json says of its clamped SwiGLU */
	}
	return "?";
}

/*
 * Find the architecture in the table (from config.json's top level, top)
 * and refuse the features it does not have (in the decoder's fields, root:
 * top itself, or text_config for a multimodal checkpoint).
 */
static int
CheckArchitecture(const cJSON *top, const cJSON *root, cbllm_model_config *cfg,
				  const char *path, cbllm_err *err)
{
	const cJSON *archs = cJSON_GetObjectItemCaseSensitive(top, "architectures");
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(top, "model_type");
	/* Gemma's configs name the activation hidden_activation, which wins over hidden_act unless null */
	const cJSON *hidden_activation = cJSON_GetObjectItemCaseSensitive(root, "hidden_activation");
	const char *act_key = hidden_activation != NULL && !cJSON_IsNull(hidden_activation) ?
		"hidden_activation" : "hidden_act";
	const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, act_key);
	const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "attention_bias");
	const cJSON *mlp_bias = cJSON_GetObjectItemCaseSensitive(root, "mlp_bias");
	const char *hf_name = NULL,
			   *model_type = cJSON_IsString(mt) ? mt->valuestring : NULL;
	const cbllm_arch *a;
	const uint32_t biases = ARCH_QKV_BIAS | ARCH_O_BIAS;

	if (cJSON_IsArray(archs) && cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
		hf_name = cJSON_GetArrayItem(archs, 0)->valuestring;
	if (hf_name == NULL && model_type == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: neither \"architectures\" nor \"model_type\" names the architecture",
						  path);
	a = arch_find(hf_name, model_type);
	if (a == NULL && hf_name != NULL && strcmp(hf_name, "Gemma3ForConditionalGeneration") == 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: unsupported architecture \"Gemma3ForConditionalGeneration\": the multimodal Gemma-3 keeps its decoder under text_config and its weights under language_model.; use a text-only Gemma3ForCausalLM checkpoint",
						  path);
	if (a == NULL)
	{
		char		known[640];

		arch_list_names(known, sizeof(known));
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: unsupported architecture \"%s\" (%s are supported)",
						  path, hf_name != NULL ? hf_name : model_type, known);
	}
	snprintf(cfg->arch, sizeof(cfg->arch), "%s", a->hf_name);
	cfg->features = a->features;
	cfg->activation = a->activation;
	if (root == NULL)
		return CBLLM_OK;		/* the decoder's fields are read next, from text_config */
	if (act != NULL &&
		!(cJSON_IsString(act) && strcmp(act->valuestring, ActivationName(a->activation)) == 0))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: unsupported %s \"%s\" (only \"%s\" is supported)", path, act_key,
						  cJSON_IsString(act) ? act->valuestring : "?",
						  ActivationName(a->activation));
	/* attention_bias says q, k, v and o all have biases: the architecture must have both */
	if ((cJSON_IsTrue(bias) && (a->features & biases) != biases) || cJSON_IsTrue(mlp_bias))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: attention or MLP biases are not supported", path);
	return CBLLM_OK;
}

/*
 * Refuse what some configs switch on and the decoder does not have: tanh
 * soft-capping of the logits or of the attention scores (Gemma-2's, null
 * in Gemma-3's configs) and bidirectional attention.
 */
static int
CheckAbsentFeatures(const cJSON *root, const char *path, cbllm_err *err)
{
	static const char *const must_be_null[] = {"final_logit_softcapping",
	"attn_logit_softcapping"};
	const cJSON *bidi = cJSON_GetObjectItemCaseSensitive(root, "use_bidirectional_attention");

	for (int i = 0; i < (int) (sizeof(must_be_null) / sizeof(must_be_null[0])); i++)
	{
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, must_be_null[i]);

		if (v != NULL && !cJSON_IsNull(v))
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: %s is not supported (only null)",
							  path, must_be_null[i]);
	}
	if (bidi != NULL && !cJSON_IsFalse(bidi) && !cJSON_IsNull(bidi))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: use_bidirectional_attention is not supported (only false)", path);
	return CBLLM_OK;
}

/*
 * Fields config.json must give for an architecture with a feature: HF's
 * defaults for them (Qwen3Config's head_dim 128, Gemma3TextConfig's 256) are
 * not what cbllm would derive, so an absent one is refused, not guessed.
 */
static const struct
{
	uint32_t	feature;
	const char *field;
}			RequiredFields[] = {
	{ARCH_QK_NORM, "head_dim"},
	{ARCH_EMBED_SCALE, "query_pre_attn_scalar"},
};

/* Refuse a config without a field its architecture's features need given. */
static int
CheckRequiredFields(const cJSON *root, const cbllm_model_config *cfg, const char *path,
					cbllm_err *err)
{
	for (int i = 0; i < (int) (sizeof(RequiredFields) / sizeof(RequiredFields[0])); i++)
	{
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, RequiredFields[i].field);

		if ((cfg->features & RequiredFields[i].feature) && (v == NULL || cJSON_IsNull(v)))
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: missing \"%s\" (%s configs must give it: HF's default is not derived from the other sizes)",
							  path, RequiredFields[i].field, cfg->arch);
	}
	return CBLLM_OK;
}

/*
 * The embeddings' multiplier (sqrt(hidden) with ARCH_EMBED_SCALE; the loader
 * rounds it to the embeddings' type) and q's (query_pre_attn_scalar).
 */
static int
GetScales(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	float		qpas;
	int			rc;

	cfg->embed_scale = (cfg->features & ARCH_EMBED_SCALE) ? sqrtf((float) cfg->hidden) : 1.0f;
	if ((rc = GetFloat(root, "query_pre_attn_scalar", cfg->head_dim, &qpas, path, err)))
		return rc;
	cfg->q_scale = qpas == (float) cfg->head_dim ? 1.0f :
		(float) sqrt((double) cfg->head_dim / qpas);
	return CBLLM_OK;
}

/*
 * The mixture of experts, when config.json gives experts (num_experts, or
 * Mixtral's num_local_experts): how many, how many a token takes, their
 * width, whether the chosen weights are renormalised, and which layers have
 * them.  Qwen3-MoE's layer l has experts when l is not in mlp_only_layers
 * and (l + 1) is a multiple of decoder_sparse_step, its experts are
 * moe_intermediate_size wide, and norm_topk_prob renormalises (false when
 * absent, as HF's Qwen3MoeConfig has it); Mixtral's and gpt-oss's layers all
 * have them, intermediate_size wide (num_local_experts of them), always
 * renormalised (gpt-oss's softmax over the chosen logits is the same
 * weights); gpt-oss's swiglu_limit clamps its activation.
 */
static int
ParseExperts(const cJSON *root, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	bool		mixtral = (cfg->features & (ARCH_MOE_BLOCK_SPARSE | ARCH_GPT_OSS)) != 0;
	const char *count_key = mixtral ? "num_local_experts" : "num_experts";
	const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "norm_topk_prob");
	const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
	const cJSON *shared = cJSON_GetObjectItemCaseSensitive(root, "shared_expert_intermediate_size");
	int			step,
				rc;

	if ((rc = GetInt(root, count_key, mixtral ? 8 : 0, 0, CBLLM_MAX_EXPERTS, &cfg->n_experts,
					 path, err)) ||
		(rc = GetFloat(root, "swiglu_limit", 7.0, &cfg->swiglu_limit, path, err)))
		return rc;
	if (cfg->n_experts == 0)
		return CBLLM_OK;
	if ((rc = GetInt(root, "num_experts_per_tok", mixtral ? 2 : -1, 1, cfg->n_experts,
					 &cfg->n_experts_used, path, err)) ||
		(rc = GetInt(root, "moe_intermediate_size", mixtral ? cfg->intermediate : -1, 1,
					 1 << 24, &cfg->expert_intermediate, path, err)) ||
		(rc = GetInt(root, "decoder_sparse_step", 1, 1, CBLLM_MAX_LAYERS, &step, path, err)))
		return rc;
	if (mixtral)
		cfg->expert_intermediate = cfg->intermediate;
	if (cfg->features & ARCH_SHARED_EXPERT)
	{
		if ((rc = GetInt(root, "shared_expert_intermediate_size", -1, 1, 1 << 24,
						 &cfg->shared_intermediate, path, err)))
			return rc;
	}
	else if (shared != NULL && !cJSON_IsNull(shared) &&
			 !(cJSON_IsNumber(shared) && shared->valuedouble == 0))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: shared experts (shared_expert_intermediate_size) are not supported for %s",
						  path, cfg->arch);
	if (norm != NULL && !cJSON_IsBool(norm) && !cJSON_IsNull(norm))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"norm_topk_prob\" must be true or false",
						  path);
	/* Qwen3.5-MoE's router always renormalises (HF reads no norm_topk_prob for it) */
	cfg->moe_norm_topk = mixtral || (cfg->features & ARCH_SHARED_EXPERT) || cJSON_IsTrue(norm);
	cfg->features |= ARCH_MOE;
	for (int l = 0; l < cfg->n_layers; l++)
		cfg->layer_moe[l] = (l + 1) % step == 0;
	if (only != NULL && !cJSON_IsNull(only) && !cJSON_IsArray(only))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: \"mlp_only_layers\" must be a list of layers",
						  path);
	for (const cJSON *v = only != NULL && cJSON_IsArray(only) ? only->child : NULL; v; v = v->next)
	{
		if (!cJSON_IsNumber(v) || v->valuedouble != (double) (int) v->valuedouble ||
			v->valuedouble < 0 || v->valuedouble >= cfg->n_layers)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: \"mlp_only_layers\" must list layers in [0, %d)", path,
							  cfg->n_layers);
		cfg->layer_moe[(int) v->valuedouble] = 0;
	}
	return CBLLM_OK;
}

/*
 * Fill cfg from the parsed JSON, top.  A multimodal checkpoint's decoder
 * (ARCH_TEXT_CONFIG) is described by top's text_config; its
 * tie_word_embeddings is top's when given there (the model class built is
 * the top one), else text_config's.
 */
static int
ParseConfig(const cJSON *top, cbllm_model_config *cfg, const char *path, cbllm_err *err)
{
	const cJSON *root = top;
	const cJSON *tie;
	int			rc;
	const int	big = 1 << 24;

	if ((rc = CheckArchitecture(top, NULL, cfg, path, err)))
		return rc;
	if (cfg->features & ARCH_TEXT_CONFIG)
	{
		root = cJSON_GetObjectItemCaseSensitive(top, "text_config");
		if (!cJSON_IsObject(root))
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: %s keeps its decoder's fields in \"text_config\", which is missing or not an object",
							  path, cfg->arch);
	}
	tie = cJSON_GetObjectItemCaseSensitive(top, "tie_word_embeddings");
	if (tie == NULL || cJSON_IsNull(tie))
		tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
	if ((rc = CheckArchitecture(top, root, cfg, path, err)) ||
		(rc = GetInt(root, "hidden_size", -1, 1, big, &cfg->hidden, path, err)) ||
		(rc = GetInt(root, "num_hidden_layers", -1, 1, 4096, &cfg->n_layers, path, err)) ||
		(rc = GetInt(root, "num_attention_heads", -1, 1, 4096, &cfg->n_heads, path, err)) ||
		(rc = GetInt(root, "num_key_value_heads", cfg->n_heads, 1, 4096, &cfg->n_kv_heads, path, err)) ||
		(rc = GetInt(root, "intermediate_size", (cfg->features & ARCH_SHARED_EXPERT) ? 1 : -1, 1,
					 big, &cfg->intermediate, path, err)) ||
		(rc = GetInt(root, "vocab_size", -1, 1, big, &cfg->vocab_size, path, err)) ||
		(rc = GetInt(root, "max_position_embeddings", 2048, 1, big, &cfg->max_pos, path, err)) ||
		(rc = GetTokenId(root, "bos_token_id", &cfg->bos_id, path, err)) ||
		(rc = GetTokenId(root, "eos_token_id", &cfg->eos_id, path, err)) ||
		(rc = GetFloat(root, "rms_norm_eps", 1e-6, &cfg->rms_eps, path, err)))
		return rc;
	if (!(cfg->features & ARCH_GEMMA4) &&
		((rc = CheckAbsentFeatures(root, path, err)) ||
		 (rc = CheckRequiredFields(root, cfg, path, err))))
		return rc;
	if (cfg->hidden % cfg->n_heads != 0 &&
		cJSON_GetObjectItemCaseSensitive(root, "head_dim") == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: hidden_size %d is not a multiple of num_attention_heads %d",
						  path, cfg->hidden, cfg->n_heads);
	if ((rc = GetInt(root, "head_dim", cfg->hidden / cfg->n_heads, 2, 4096,
					 &cfg->head_dim, path, err)))
		return rc;
	if (cfg->head_dim % 2 != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: head_dim %d must be even", path,
						  cfg->head_dim);
	if (cfg->n_heads % cfg->n_kv_heads != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
						  path, cfg->n_heads, cfg->n_kv_heads);
	if (cfg->features & ARCH_GEMMA4)	/* its experts too */
		rc = model_config_gemma4(root, cfg, path, err);
	else if ((rc = model_config_hybrid(root, cfg, path, err)) == CBLLM_OK &&
			 (rc = model_config_positions(root, cfg, path, err)) == CBLLM_OK)
		rc = ParseExperts(root, cfg, path, err);
	if (rc != CBLLM_OK)
		return rc;
	if ((cfg->features & ARCH_SHARED_EXPERT) && cfg->n_experts == 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: missing \"num_experts\" (%s has experts)",
						  path, cfg->arch);
	/* Qwen3.5-MoE has no dense MLP (its config gives no intermediate_size): the widest of its MLPs */
	if ((cfg->features & ARCH_SHARED_EXPERT) &&
		cJSON_GetObjectItemCaseSensitive(root, "intermediate_size") == NULL)
		cfg->intermediate = cfg->expert_intermediate > cfg->shared_intermediate ?
			cfg->expert_intermediate : cfg->shared_intermediate;
	cfg->tie_embeddings = tie == NULL || cJSON_IsNull(tie) ?
		(cfg->features & ARCH_TIED_DEFAULT) != 0 : cJSON_IsTrue(tie);
	return GetScales(root, cfg, path, err);
}

/* model.h's model_config_layer_types. */
int
model_config_layer_types(const cJSON *root, int n_layers, const char *const *names, int n_names,
						 int *kind, bool *given, const char *path, cbllm_err *err)
{
	const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
	char		list[160] = "";

	*given = types != NULL && !cJSON_IsNull(types);
	if (!*given)
		return CBLLM_OK;
	for (int i = 0; i < n_names; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s\"%s\"",
				 i == 0 ? "" : i + 1 == n_names ? " and " : ", ", names[i]);
	if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n_layers)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: layer_types must be a list of num_hidden_layers = %d names", path,
						  n_layers);
	for (int l = 0; l < n_layers; l++)
	{
		const cJSON *t = cJSON_GetArrayItem(types, l);

		kind[l] = -1;
		for (int i = 0; i < n_names && cJSON_IsString(t); i++)
			if (strcmp(t->valuestring, names[i]) == 0)
				kind[l] = i;
		if (kind[l] < 0)
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
							  "%s: unsupported layer_types[%d] \"%s\" (%s are supported)", path, l,
							  cJSON_IsString(t) ? t->valuestring : "?", list);
	}
	return CBLLM_OK;
}

/* Parse the NUL-terminated text of a config.json (path names it in messages) into cfg. */
int
model_config_parse(const char *json, const char *path, cbllm_model_config *cfg, cbllm_err *err)
{
	cJSON	   *root;
	int			rc;

	memset(cfg, 0, sizeof(*cfg));
	root = cJSON_Parse(json);
	if (root == NULL || !cJSON_IsObject(root))
		rc = cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: invalid JSON (not a JSON object)", path);
	else
		rc = ParseConfig(root, cfg, path, err);
	cJSON_Delete(root);
	return rc;
}

/* Parse dir/config.json into cfg. */
int
model_config_load(const char *dir, cbllm_model_config *cfg, cbllm_err *err)
{
	char	   *path = cbllm_path_join(dir, "config.json");
	char	   *text = NULL;
	int			rc;

	if (path == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	memset(cfg, 0, sizeof(*cfg));
	rc = cbllm_read_file(path, &text, NULL, err);
	if (rc == CBLLM_OK)
		rc = model_config_parse(text, path, cfg, err);
	free(text);
	free(path);
	return rc;
}
