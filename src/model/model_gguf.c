/*
 * model_gguf.c: load a model from a GGUF file, as llama.cpp's converter
 * writes one: the configuration from general.architecture and the
 * "<arch>.*" keys, the tensors bound in place through the architecture
 * table's GGUF names (arch.h), the file kept mapped in m->gguf.
 *
 * What the converter does differently from the HF checkpoint, and how it is
 * read back:
 *   - llama (ARCH_GGUF_PERMUTED_QK): wq and wk rows are permuted within each
 *     head so that RoPE rotates adjacent pairs.  Nothing is copied back: the
 *     RoPE configurations are marked interleaved, and attention, a sum over
 *     a head's dimensions, is the same under the same permutation of q and k;
 *   - llama3 rope scaling is the tensor rope_freqs.weight, a divisor per
 *     dimension pair (ROPE_FREQ_FACTORS);
 *   - Phi-3's LongRoPE lists are the tensors rope_factors_short/long.weight,
 *     its attention factor rope.scaling.attn_factor;
 *   - Gemma's norms are stored with the 1 of (1 + w) added: not added again;
 *     the sliding-window layers rotate with rope.freq_base_swa (10000 when
 *     absent, Gemma-3's local base) and every attention.sliding_window_pattern
 *     -th layer (6 when absent) is global; q is scaled by 1 / sqrt(head_dim)
 *     except for the 62-layer (27B) geometry, 1 / sqrt(hidden / heads);
 *   - no output.weight: the embeddings are the lm_head;
 *   - experts: <arch>.expert_count and expert_used_count, their width
 *     expert_feed_forward_length (Mixtral, written as llama: its
 *     feed_forward_length); a layer has them when blk.N.ffn_gate_inp.weight
 *     (the router) is there, and each of their matrices is one tensor of
 *     (n_experts, rows, cols), every expert's rows bound in place; the
 *     chosen weights are renormalised unless expert_weights_norm is false
 *     (llama.cpp renormalises Qwen3-MoE's and Mixtral's whatever the key);
 *   - gpt-oss: its experts' biases are stacked too, (n_experts, rows); every
 *     second layer from the first is windowed; its YaRN keeps the correction
 *     range unrounded as its config.json says (llama.cpp rounds it).
 * Every key error names the key, every tensor error the tensor.
 */
#include "model/model.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BIG_INT (1 << 24)

/* A GGUF load in progress: the file, its architecture name and its path for messages. */
typedef struct gguf_load
{
	cbllm_model *m;
	const gguf_file *g;
	char		arch[32];		/* general.architecture */
	const char *path;
	int			rot_dim;		/* rope.dimension_count when below the head's size (partial
								 * rotation, Qwen3.5); 0: all of it */
} gguf_load;

/* Whether name (len bytes) ends in suffix. */
static bool
EndsWith(const char *name, size_t len, const char *suffix)
{
	size_t		n = strlen(suffix);

	return len >= n && memcmp(name + len - n, suffix, n) == 0;
}

/* Whether a file name is a shard of a split GGUF file: "-00001-of-00003.gguf". */
static bool
IsSplitName(const char *name)
{
	const char *of = strstr(name, "-of-");

	return of != NULL && of - name >= 6 && of[-6] == '-' && EndsWith(name, strlen(name), ".gguf");
}

/* The path of the GGUF file path names, or NULL for a checkpoint directory. */
int
model_gguf_path(const char *path, char **gguf_path, cbllm_err *err)
{
	struct stat st;
	DIR		   *d;
	struct dirent *e;
	int			n_gguf = 0,
				n_st = 0;
	char		first[256] = "",
				second[256] = "";

	*gguf_path = NULL;
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
	{
		if (!EndsWith(path, strlen(path), ".gguf"))
			return CBLLM_OK;	/* the checkpoint loader reports what is wrong */
		if (IsSplitName(path))
			return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
							  "%s: a split GGUF file: split files are not supported; merge them into one file (llama-gguf-split --merge)",
							  path);
		*gguf_path = strdup(path);
		return *gguf_path ? CBLLM_OK : cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	if ((d = opendir(path)) == NULL)
		return CBLLM_OK;
	while ((e = readdir(d)) != NULL)
	{
		size_t		len = strlen(e->d_name);

		if (EndsWith(e->d_name, len, ".safetensors"))
			n_st++;
		else if (EndsWith(e->d_name, len, ".gguf"))
		{
			snprintf(n_gguf == 0 ? first : second, sizeof(first), "%s", e->d_name);
			n_gguf++;
		}
	}
	closedir(d);
	if (n_st > 0 || n_gguf == 0)
		return CBLLM_OK;
	if (n_gguf > 1)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "%s: %d GGUF files found (%s, %s%s) and no safetensors: name the file to load",
						  path, n_gguf, first, second, n_gguf > 2 ? ", ..." : "");
	if (IsSplitName(first))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: %s is part of a split GGUF file: split files are not supported; merge them into one file",
						  path, first);
	*gguf_path = cbllm_path_join(path, first);
	return *gguf_path ? CBLLM_OK : cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
}

/* Into key, "<arch>.<suffix>". */
static void
ArchKey(const gguf_load *L, const char *suffix, char *key, size_t size)
{
	snprintf(key, size, "%s.%s", L->arch, suffix);
}

/* The integer value types: their width and signedness. */
static const struct
{
	gguf_vtype	type;
	int			bytes;
	bool		is_signed;
}			IntTypes[] = {
	{GGUF_UINT8, 1, false}, {GGUF_INT8, 1, true}, {GGUF_UINT16, 2, false},
	{GGUF_INT16, 2, true}, {GGUF_UINT32, 4, false}, {GGUF_INT32, 4, true},
	{GGUF_UINT64, 8, false}, {GGUF_INT64, 8, true},
};

/*
 * *out = the integer value v of any integer type (a uint64 above INT64_MAX
 * as INT64_MAX); false when v is not an integer.  The little-endian bytes lie
 * in the file unaligned: they are copied, not dereferenced.
 */
static bool
IntegerValue(const gguf_value *v, int64_t *out)
{
	for (int i = 0; i < (int) (sizeof(IntTypes) / sizeof(IntTypes[0])); i++)
	{
		uint64_t	u = 0;
		int			bits = 8 * IntTypes[i].bytes;

		if (IntTypes[i].type != v->type)
			continue;
		memcpy(&u, v->data, IntTypes[i].bytes);
		if (!IntTypes[i].is_signed)
			*out = u > INT64_MAX ? INT64_MAX : (int64_t) u;
		else if (bits < 64 && (u >> (bits - 1)) & 1)
			*out = (int64_t) u - ((int64_t) 1 << bits);	/* negative: two's complement */
		else
			memcpy(out, &u, 8);
		return true;
	}
	return false;
}

/*
 * *out = integer key (any integer type) in [lo, hi]; absent: def, or an
 * error when required.
 */
static int
GetInt(const gguf_load *L, const char *key, bool required, int def, int lo, int hi, int *out,
	   cbllm_err *err)
{
	const gguf_value *v = gguf_find_key(L->g, key);
	int64_t		x;

	if (v == NULL)
	{
		if (required)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: missing", L->path, key);
		*out = def;
		return CBLLM_OK;
	}
	if (!IntegerValue(v, &x))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: must be an integer, found %s",
						  L->path, key, gguf_vtype_name(v->type));
	if (x < lo || x > hi)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: %lld is out of range [%d, %d]",
						  L->path, key, (long long) x, lo, hi);
	*out = (int) x;
	return CBLLM_OK;
}

/* GetInt of "<arch>.<suffix>". */
static int
GetArchInt(const gguf_load *L, const char *suffix, bool required, int def, int lo, int hi,
		   int *out, cbllm_err *err)
{
	char		key[96];

	ArchKey(L, suffix, key, sizeof(key));
	return GetInt(L, key, required, def, lo, hi, out, err);
}

/* *out = float key "<arch>.<suffix>" (float32 or float64), positive and finite; absent: def or an error. */
static int
GetArchFloat(const gguf_load *L, const char *suffix, bool required, double def, double *out,
			 cbllm_err *err)
{
	char		key[96];
	const gguf_value *v;

	ArchKey(L, suffix, key, sizeof(key));
	v = gguf_find_key(L->g, key);
	if (v == NULL)
	{
		if (required)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: missing", L->path, key);
		*out = def;
		return CBLLM_OK;
	}
	if (v->type == GGUF_FLOAT32)
	{
		float		f;

		memcpy(&f, v->data, 4);
		*out = f;
	}
	else if (v->type == GGUF_FLOAT64)
		memcpy(out, v->data, 8);
	else
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: must be a float, found %s",
						  L->path, key, gguf_vtype_name(v->type));
	if (!(*out > 0) || !isfinite(*out) || *out > 3.4e38)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: %g must be positive and finite",
						  L->path, key, *out);
	return CBLLM_OK;
}

/* A token id key of tokenizer.ggml; -1 when absent. */
static int
GetTokenId(const gguf_load *L, const char *key, int32_t *out, cbllm_err *err)
{
	int			id;
	int			rc = GetInt(L, key, false, -1, 0, BIG_INT, &id, err);

	*out = id;
	return rc;
}

/* The tensor named name as a 1-d f32 vector of n elements into dst; absent: *found false. */
static int
GetFactorTensor(const gguf_load *L, const char *name, int n, double *dst, bool *found,
				cbllm_err *err)
{
	const gguf_tensor *t = gguf_find_tensor(L->g, name);

	*found = t != NULL;
	if (t == NULL)
		return CBLLM_OK;
	if ((int) t->type != cbllm_dtype_traits_of(CBLLM_F32)->ggml_type || t->n_dims != 1 ||
		t->ne[0] != n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: tensor \"%s\" must be F32 [%d] (head_dim / 2)", L->path, name,
						  n);
	for (int i = 0; i < n; i++)
	{
		float		f;

		memcpy(&f, (const char *) t->data + 4 * (size_t) i, 4);
		if (!(f > 0) || !isfinite(f))
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: tensor \"%s\"[%d] = %g must be positive", L->path, name,
							  i, (double) f);
		dst[i] = f;
	}
	return CBLLM_OK;
}

/* rope[0]'s scaling: rope.scaling.* keys and the factor tensors. */
static int
GetRopeScaling(gguf_load *L, cbllm_rope *r, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	char		key[96];
	gguf_str	type = {"none", 4};
	int			half = cfg->head_dim / 2,
				rc;
	bool		found_long,
				found_short,
				found_freqs;

	if (half > ROPE_MAX_FACTORS &&
		(gguf_find_tensor(L->g, "rope_freqs.weight") || gguf_find_tensor(L->g, "rope_factors_long.weight")))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: gguf: RoPE factor tensors are supported up to head_dim %d", L->path,
						  2 * ROPE_MAX_FACTORS);
	if ((rc = GetFactorTensor(L, "rope_freqs.weight", half, r->freq_factor, &found_freqs, err)) ||
		(rc = GetFactorTensor(L, "rope_factors_long.weight", half, r->long_factor, &found_long,
							  err)) ||
		(rc = GetFactorTensor(L, "rope_factors_short.weight", half, r->short_factor,
							  &found_short, err)))
		return rc;
	ArchKey(L, "rope.scaling.type", key, sizeof(key));
	if (gguf_find_key(L->g, key) && (rc = gguf_get_string(L->g, key, &type, err)))
		return rc;
	if (found_long != found_short)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: rope_factors_long.weight and rope_factors_short.weight come together",
						  L->path);
	if (found_long)
	{
		r->type = ROPE_LONGROPE;
		r->n_factors = half;
		if ((rc = GetArchInt(L, "rope.scaling.original_context_length", true, 0, 2, BIG_INT,
							 &r->orig_max_pos, err)) ||
			(rc = GetArchFloat(L, "rope.scaling.attn_factor", false, 0, &r->attention_factor,
							   err)))
			return rc;
		r->factor = (double) cfg->max_pos / r->orig_max_pos;
		return CBLLM_OK;
	}
	if (found_freqs)
	{
		r->type = ROPE_FREQ_FACTORS;
		r->n_factors = half;
		return CBLLM_OK;
	}
	if (type.len == 4 && memcmp(type.ptr, "none", 4) == 0)
		return CBLLM_OK;
	if (type.len == 6 && memcmp(type.ptr, "linear", 6) == 0)
	{
		r->type = ROPE_LINEAR;
		return GetArchFloat(L, "rope.scaling.factor", true, 1, &r->factor, err);
	}
	if (type.len == 4 && memcmp(type.ptr, "yarn", 4) == 0)
	{
		r->type = ROPE_YARN;
		if ((rc = GetArchFloat(L, "rope.scaling.factor", true, 1, &r->factor, err)) ||
			(rc = GetArchInt(L, "rope.scaling.original_context_length", false, cfg->max_pos, 1,
							 BIG_INT, &r->orig_max_pos, err)) ||
			(rc = GetArchFloat(L, "rope.scaling.yarn_beta_fast", false, 32, &r->beta_fast, err)) ||
			(rc = GetArchFloat(L, "rope.scaling.yarn_beta_slow", false, 1, &r->beta_slow, err)) ||
			(rc = GetArchFloat(L, "rope.scaling.yarn_attn_factor", false, 0,
							   &r->attention_factor, err)))
			return rc;
		return CBLLM_OK;
	}
	return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
					  "%s: gguf: %s: unsupported \"%.*s\" (none, linear and yarn are supported; longrope through its factor tensors)",
					  L->path, key, (int) (type.len > 40 ? 40 : type.len), type.ptr);
}

/*
 * A per-layer sliding_window_pattern, an array of one bool per layer (how
 * llama.cpp's files say which layers are windowed when they do not
 * alternate), into sliding; absent, sliding stays as it is.
 */
static int
GetLayerPattern(const gguf_load *L, bool *sliding, cbllm_err *err)
{
	char		key[96];
	const gguf_value *v;
	int			n = L->m->cfg.n_layers;

	ArchKey(L, "attention.sliding_window_pattern", key, sizeof(key));
	if ((v = gguf_find_key(L->g, key)) == NULL)
		return CBLLM_OK;
	if (v->type != GGUF_ARRAY || v->elem_type != GGUF_BOOL || v->n != (uint64_t) n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: %s: must be an array of %d bools (one per layer)", L->path,
						  key, n);
	for (int l = 0; l < n; l++)
		sliding[l] = *(const uint8_t *) gguf_array_elem(v, (uint64_t) l) != 0;
	return CBLLM_OK;
}

/*
 * A key that is one integer for every layer or an array of one per layer
 * (Gemma 4's feed_forward_length, head_count_kv): *scalar gets the first
 * layer's, per_layer (n_layers) each one's.  Absent: def, or an error when
 * required.
 */
static int
GetLayerInts(const gguf_load *L, const char *suffix, bool required, int def, int lo, int hi,
			 int *scalar, int32_t *per_layer, cbllm_err *err)
{
	char		key[96];
	const gguf_value *v;
	int			n = L->m->cfg.n_layers,
				rc;

	ArchKey(L, suffix, key, sizeof(key));
	v = gguf_find_key(L->g, key);
	if (v == NULL || v->type != GGUF_ARRAY)
	{
		if ((rc = GetArchInt(L, suffix, required, def, lo, hi, scalar, err)))
			return rc;
		for (int l = 0; l < n; l++)
			per_layer[l] = *scalar;
		return CBLLM_OK;
	}
	if (v->n < (uint64_t) n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s: must be an integer or an array of one per layer (%d)",
						  L->path, key, n);
	for (int l = 0; l < n; l++)
	{
		gguf_value	e = {.type = v->elem_type, .data = gguf_array_elem(v, (uint64_t) l)};
		int64_t		x;

		if (e.data == NULL || !IntegerValue(&e, &x) || x < lo || x > hi)
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s[%d] must be an integer in [%d, %d]",
							  L->path, key, l, lo, hi);
		per_layer[l] = (int32_t) x;
	}
	*scalar = per_layer[0];
	return CBLLM_OK;
}

/*
 * Gemma 4 (llama.cpp's gemma4 keys): attention.key_length is the full
 * layers' head size and key_length_swa the sliding ones'; the bool array
 * attention.sliding_window_pattern says which layers slide;
 * attention.shared_kv_layers, embedding_length_per_layer_input (the
 * per-layer embeddings, whose rows are the tensor's), final_logit_softcapping;
 * rope.freq_base for full layers, whose proportional RoPE is the tensor
 * rope_freqs.weight (a divisor per pair, 1e30 for the pairs that stay),
 * and rope.freq_base_swa for sliding ones.  A full layer with attn_k and no
 * attn_v takes its values from its keys (attention_k_eq_v).
 */
static int
GetGemma4(gguf_load *L, const int32_t *ff, const int32_t *kv_heads, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	bool		full[CBLLM_MAX_LAYERS],
				found;
	char		key[96];
	const gguf_value *v;
	const gguf_tensor *ple = gguf_find_tensor(L->g, "per_layer_token_embd.weight");
	int			global_hd = cfg->head_dim,
				window,
				n_shared,
				n = cfg->n_layers,
				rc;
	double		theta,
				theta_swa,
				cap;

	if ((rc = GetArchInt(L, "attention.key_length_swa", true, 0, 2, 4096, &cfg->head_dim, err)) ||
		(rc = GetArchInt(L, "attention.sliding_window", true, 0, 1, BIG_INT, &window, err)) ||
		(rc = GetArchInt(L, "attention.shared_kv_layers", false, 0, 0, n - 1, &n_shared, err)) ||
		(rc = GetArchInt(L, "embedding_length_per_layer_input", false, 0, 0, 1 << 16,
						 &cfg->ple_dim, err)) ||
		(rc = GetArchFloat(L, "final_logit_softcapping", false, 0, &cap, err)) ||
		(rc = GetArchFloat(L, "rope.freq_base", false, 1e6, &theta, err)) ||
		(rc = GetArchFloat(L, "rope.freq_base_swa", false, 1e4, &theta_swa, err)))
		return rc;
	ArchKey(L, "attention.sliding_window_pattern", key, sizeof(key));
	if ((v = gguf_find_key(L->g, key)) == NULL || v->type != GGUF_ARRAY ||
		v->elem_type != GGUF_BOOL || v->n < (uint64_t) n)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: %s: must be an array of a bool per layer (%d)", L->path, key, n);
	if (cfg->head_dim % 2 != 0 || !(theta > 1) || !(theta_swa > 1) || cap < 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: gemma4's key_length_swa must be even, its RoPE bases above 1 and its soft-capping not negative",
						  L->path);
	for (int l = 0; l < n; l++)
	{
		char		name[64];

		full[l] = *(const uint8_t *) gguf_array_elem(v, (uint64_t) l) == 0;
		cfg->layer_head_dim[l] = (int16_t) (full[l] ? global_hd : cfg->head_dim);
		cfg->layer_kv_heads[l] = (int16_t) kv_heads[l];
		cfg->layer_ff[l] = ff[l];
		snprintf(name, sizeof(name), "blk.%d.attn_v.weight", l);
		cfg->layer_v_is_k[l] = full[l] && l < n - n_shared && gguf_find_tensor(L->g, name) == NULL;
		if (cfg->n_heads % kv_heads[l] != 0)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: gemma4: layer %d's %d heads are not a multiple of its %d kv heads",
							  L->path, l, cfg->n_heads, kv_heads[l]);
	}
	if (cfg->ple_dim > 0)
	{
		if (ple == NULL || ple->n_dims != 2 || ple->ne[1] > BIG_INT || ple->ne[1] < cfg->vocab_size)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: tensor \"per_layer_token_embd.weight\" must be 2-d with a row for each of the %d tokens",
							  L->path, cfg->vocab_size);
		cfg->ple_vocab = (int) ple->ne[1];
		cfg->features |= ARCH_PLE;
	}
	cfg->logit_softcap = (float) cap;
	rope_set_default(&cfg->rope[0], theta);
	cfg->rope[0].head_dim = global_hd;
	rope_set_default(&cfg->rope[1], theta_swa);
	cfg->rope[1].head_dim = cfg->head_dim;
	if (global_hd / 2 > ROPE_MAX_FACTORS)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: gguf: gemma4 head size %d above %d",
						  L->path, global_hd, 2 * ROPE_MAX_FACTORS);
	if ((rc = GetFactorTensor(L, "rope_freqs.weight", global_hd / 2, cfg->rope[0].freq_factor,
							  &found, err)))
		return rc;
	if (found)
	{
		cfg->rope[0].type = ROPE_FREQ_FACTORS;
		cfg->rope[0].n_factors = global_hd / 2;
	}
	return model_config_gemma4_layers(cfg, full, window, n_shared, L->path, err);
}

/*
 * A hybrid model's linear attention (llama.cpp's qwen35 keys): ssm.group_count
 * key heads and ssm.time_step_rank value heads of ssm.state_size each
 * (ssm.inner_size = value heads * their size), ssm.conv_kernel, and which
 * layers are linear: attention.recurrent_layers (a bool per layer) or
 * full_attention_interval (4 when absent).  llama.cpp's converter stores
 * the value heads tiled (cfg.lin_v_tiled).
 */
static int
GetLinear(gguf_load *L, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	char		key[96];
	const gguf_value *v;
	int			inner,
				interval,
				n = cfg->n_layers,
				rc;

	if (!(cfg->features & ARCH_LINEAR_ATTN))
	{
		model_config_cache_layers(cfg);
		return CBLLM_OK;
	}
	if ((rc = GetArchInt(L, "ssm.group_count", true, 0, 1, 1 << 16, &cfg->lin_k_heads, err)) ||
		(rc = GetArchInt(L, "ssm.time_step_rank", true, 0, 1, 1 << 16, &cfg->lin_v_heads, err)) ||
		(rc = GetArchInt(L, "ssm.state_size", true, 0, 1, 1024, &cfg->lin_k_dim, err)) ||
		(rc = GetArchInt(L, "ssm.inner_size", true, 0, 1, BIG_INT, &inner, err)) ||
		(rc = GetArchInt(L, "ssm.conv_kernel", true, 0, 1, 64, &cfg->lin_conv, err)) ||
		(rc = GetArchInt(L, "full_attention_interval", false, 4, 1, CBLLM_MAX_LAYERS, &interval,
						 err)))
		return rc;
	if (cfg->lin_v_heads % cfg->lin_k_heads != 0 || inner % cfg->lin_v_heads != 0 ||
		inner / cfg->lin_v_heads > 1024)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: %s.ssm.time_step_rank %d must be a multiple of group_count %d and divide inner_size %d into heads of at most 1024",
						  L->path, L->arch, cfg->lin_v_heads, cfg->lin_k_heads, inner);
	cfg->lin_v_dim = inner / cfg->lin_v_heads;
	cfg->lin_v_tiled = true;
	for (int l = 0; l < n; l++)
		cfg->layer_linear[l] = (l + 1) % interval != 0;
	ArchKey(L, "attention.recurrent_layers", key, sizeof(key));
	if ((v = gguf_find_key(L->g, key)) != NULL)
	{
		/* llama.cpp may list extra (multi-token prediction) layers after the decoder's */
		if (v->type != GGUF_ARRAY || v->elem_type != GGUF_BOOL || v->n < (uint64_t) n)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: %s: must be an array of a bool per layer (%d)", L->path,
							  key, n);
		for (int l = 0; l < n; l++)
			cfg->layer_linear[l] = *(const uint8_t *) gguf_array_elem(v, (uint64_t) l) != 0;
	}
	model_config_cache_layers(cfg);
	if (cfg->n_kv_layers == 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: gguf: every layer is linear attention; cbllm needs at least one attention layer",
						  L->path);
	return CBLLM_OK;
}

/* The layers' windows and RoPE configurations. */
static int
GetPositions(gguf_load *L, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	bool		sliding[CBLLM_MAX_LAYERS];
	double		theta,
				local_base = 0;
	int			window,
				pattern = 0,
				rc;

	if ((rc = GetArchFloat(L, "rope.freq_base", false, 10000, &theta, err)))
		return rc;
	if (!(theta > 1))
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: %s.rope.freq_base must be above 1",
						  L->path, L->arch);
	rope_set_default(&cfg->rope[0], theta);
	cfg->rope[0].max_pos = cfg->max_pos;
	if ((rc = GetRopeScaling(L, &cfg->rope[0], err)) ||
		(rc = GetArchInt(L, "attention.sliding_window", false, 0, 0, BIG_INT, &window, err)))
		return rc;
	if (window > 0 && (cfg->features & ARCH_SANDWICH_NORM) &&
		((rc = GetArchInt(L, "attention.sliding_window_pattern", false, 6, 1, CBLLM_MAX_LAYERS,
						  &pattern, err)) ||
		 (rc = GetArchFloat(L, "rope.freq_base_swa", false, 10000, &local_base, err))))
		return rc;
	if (window > 0 && (cfg->features & ARCH_GPT_OSS))
		pattern = 2;			/* gpt-oss alternates: windowed layers 0, 2, 4, ... */
	for (int l = 0; l < cfg->n_layers; l++)
		sliding[l] = pattern > 0 ? (l + 1) % pattern != 0 : window > 0;
	if (window > 0 && (cfg->features & ARCH_GPT_OSS) && (rc = GetLayerPattern(L, sliding, err)))
		return rc;
	model_config_layer_positions(cfg, sliding, window, local_base);
	for (int i = 0; i < cfg->n_rope; i++)
	{
		cfg->rope[i].interleaved = (cfg->features & ARCH_GGUF_PERMUTED_QK) != 0;
		/* gpt-oss's YaRN keeps its correction range unrounded (its config's truncate false) */
		cfg->rope[i].yarn_exact_range = (cfg->features & ARCH_GPT_OSS) != 0;
		cfg->rope[i].rot_dim = L->rot_dim;
	}
	return model_config_check_ropes(cfg, L->path, err);
}

/* The architecture from general.architecture. */
static int
GetArchitecture(gguf_load *L, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	gguf_str	name;
	const cbllm_arch *a;
	int			rc;

	if ((rc = gguf_get_string(L->g, "general.architecture", &name, err)))
		return rc == CBLLM_ERR_NOT_FOUND ?
			cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: general.architecture: missing", L->path) :
			rc;
	a = arch_find_gguf(name.ptr, name.len);
	if (a == NULL)
	{
		char		known[256];

		arch_list_gguf_names(known, sizeof(known));
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: gguf: general.architecture \"%.*s\" is not supported (%s are)",
						  L->path, (int) (name.len > 40 ? 40 : name.len), name.ptr, known);
	}
	snprintf(L->arch, sizeof(L->arch), "%s", a->gguf_name);
	snprintf(cfg->arch, sizeof(cfg->arch), "%s", a->hf_name);
	cfg->features = a->features;
	cfg->activation = a->activation;
	return CBLLM_OK;
}

/* The vocabulary size: <arch>.vocab_size, else the embeddings' rows. */
static int
GetVocab(gguf_load *L, cbllm_err *err)
{
	const gguf_tensor *t = gguf_find_tensor(L->g, "token_embd.weight");
	int			rows = t != NULL && t->n_dims == 2 && t->ne[1] <= BIG_INT ? (int) t->ne[1] : -1;

	if (rows < 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: tensor \"token_embd.weight\": %s", L->path,
						  t == NULL ? "missing" : "must be 2-d (hidden, vocab)");
	return GetArchInt(L, "vocab_size", false, rows, 1, BIG_INT, &L->m->cfg.vocab_size, err);
}

/* The experts: their keys, and which layers have a router tensor. */
static int
GetExperts(gguf_load *L, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	char		key[96];
	bool		norm = true;
	int			rc;

	if ((rc = GetArchInt(L, "expert_count", false, 0, 0, CBLLM_MAX_EXPERTS, &cfg->n_experts,
						 err)))
		return rc;
	if (cfg->n_experts == 0)
		return CBLLM_OK;
	ArchKey(L, "expert_weights_norm", key, sizeof(key));
	if ((rc = GetArchInt(L, "expert_used_count", true, 0, 1, cfg->n_experts,
						 &cfg->n_experts_used, err)) ||
		(rc = GetArchInt(L, "expert_feed_forward_length", strcmp(L->arch, "llama") != 0,
						 cfg->intermediate, 1, BIG_INT, &cfg->expert_intermediate, err)) ||
		(gguf_find_key(L->g, key) != NULL && (rc = gguf_get_bool(L->g, key, &norm, err))))
		return rc;
	cfg->moe_norm_topk = norm;
	cfg->swiglu_limit = 7.0f;	/* gpt-oss's, which llama.cpp's files do not state */
	if ((cfg->features & ARCH_SHARED_EXPERT) &&
		(rc = GetArchInt(L, "expert_shared_feed_forward_length", true, 0, 1, BIG_INT,
						 &cfg->shared_intermediate, err)))
		return rc;
	/* a model with no dense MLP (qwen35moe) has no feed_forward_length: the widest of its MLPs */
	if (cfg->intermediate == 0)
		cfg->intermediate = cfg->expert_intermediate > cfg->shared_intermediate ?
			cfg->expert_intermediate : cfg->shared_intermediate;
	cfg->features |= ARCH_MOE;
	if (strcmp(L->arch, "llama") == 0)
		snprintf(cfg->arch, sizeof(cfg->arch), "MixtralForCausalLM");
	for (int l = 0; l < cfg->n_layers; l++)
	{
		char		name[64];

		snprintf(name, sizeof(name), "blk.%d.ffn_gate_inp.weight", l);
		cfg->layer_moe[l] = gguf_find_tensor(L->g, name) != NULL;
	}
	return CBLLM_OK;
}

/* Fill m->cfg from the file's keys. */
static int
ReadConfig(gguf_load *L, cbllm_err *err)
{
	cbllm_model_config *cfg = &L->m->cfg;
	double		eps;
	int			v_len,
				rope_dims,
				nextn,
				rc;
	int32_t		ff[CBLLM_MAX_LAYERS],
				kv_heads[CBLLM_MAX_LAYERS];

	if ((rc = GetArchitecture(L, err)) ||
		(rc = GetArchInt(L, "embedding_length", true, 0, 1, BIG_INT, &cfg->hidden, err)) ||
		(rc = GetArchInt(L, "block_count", true, 0, 1, CBLLM_MAX_LAYERS, &cfg->n_layers, err)) ||
		(rc = GetArchInt(L, "attention.head_count", true, 0, 1, 4096, &cfg->n_heads, err)) ||
		(rc = GetLayerInts(L, "attention.head_count_kv", false, cfg->n_heads, 1, 4096,
						   &cfg->n_kv_heads, kv_heads, err)) ||
		(rc = GetLayerInts(L, "feed_forward_length", strcmp(L->arch, "qwen35moe") != 0, 0, 1,
						   BIG_INT, &cfg->intermediate, ff, err)) ||
		(rc = GetArchInt(L, "context_length", false, 2048, 1, BIG_INT, &cfg->max_pos, err)) ||
		(rc = GetArchFloat(L, "attention.layer_norm_rms_epsilon", true, 0, &eps, err)) ||
		(rc = GetVocab(L, err)) ||
		(rc = GetTokenId(L, "tokenizer.ggml.bos_token_id", &cfg->bos_id, err)) ||
		(rc = GetTokenId(L, "tokenizer.ggml.eos_token_id", &cfg->eos_id, err)))
		return rc;
	cfg->rms_eps = (float) eps;
	/*
	 * llama.cpp's converter counts a checkpoint's multi-token-prediction
	 * layers (Qwen3.5's mtp.*, blk.N.nextn.* after the decoder's) in
	 * block_count; the decoder is the layers before them, and they are not read
	 */
	if ((rc = GetArchInt(L, "nextn_predict_layers", false, 0, 0, CBLLM_MAX_LAYERS, &nextn, err)))
		return rc;
	if (nextn >= cfg->n_layers)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: %s.nextn_predict_layers %d leaves no decoder layer of block_count %d",
						  L->path, L->arch, nextn, cfg->n_layers);
	cfg->n_layers -= nextn;
	if (cfg->n_heads % cfg->n_kv_heads != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: %s.attention.head_count %d is not a multiple of head_count_kv %d",
						  L->path, L->arch, cfg->n_heads, cfg->n_kv_heads);
	if ((rc = GetArchInt(L, "attention.key_length", cfg->hidden % cfg->n_heads != 0, cfg->hidden / cfg->n_heads,
						 2, 4096, &cfg->head_dim, err)) ||
		(rc = GetArchInt(L, "attention.value_length", false, cfg->head_dim, 1, 4096, &v_len,
						 err)) ||
		(rc = GetArchInt(L, "rope.dimension_count", false, cfg->head_dim, 1, 4096, &rope_dims,
						 err)))
		return rc;
	if (cfg->head_dim % 2 != 0 || v_len != cfg->head_dim || rope_dims > cfg->head_dim ||
		rope_dims % 2 != 0)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: gguf: %s.attention.key_length %d must be even and equal value_length (%d), and rope.dimension_count (%d) be even and at most it",
						  L->path, L->arch, cfg->head_dim, v_len, rope_dims);
	L->rot_dim = rope_dims < cfg->head_dim ? rope_dims : 0;
	if (cfg->features & ARCH_GEMMA4)
		rc = GetGemma4(L, ff, kv_heads, err);
	else if ((rc = GetLinear(L, err)) == CBLLM_OK)
		rc = GetPositions(L, err);
	if (rc != CBLLM_OK || (rc = GetExperts(L, err)))
		return rc;
	cfg->tie_embeddings = gguf_find_tensor(L->g, "output.weight") == NULL;
	cfg->embed_scale = (cfg->features & ARCH_EMBED_SCALE) ? sqrtf((float) cfg->hidden) : 1.0f;
	/* llama.cpp's Gemma-3 scale: 1 / sqrt(head_dim), but hidden / heads for the 27B */
	cfg->q_scale = (cfg->features & ARCH_EMBED_SCALE) && cfg->n_layers == 62 ?
		(float) sqrt((double) cfg->head_dim / (cfg->hidden / cfg->n_heads)) : 1.0f;
	return CBLLM_OK;
}

/* "[a, b]": the dims of a GGUF tensor, outermost first as the checkpoints write them. */
static void
DimsText(const gguf_tensor *t, char *buf, size_t size)
{
	size_t		len = (size_t) snprintf(buf, size, "[");

	for (int d = (int) t->n_dims - 1; d >= 0 && len < size; d--)
		len += (size_t) snprintf(buf + len, size - len, "%lld%s", (long long) t->ne[d],
								 d ? ", " : "");
	if (len < size)
		snprintf(buf + len, size - len, "]");
}

/* Bind one tensor of the file to its field, checking its type and shape. */
static int
BindTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	gguf_load  *L = arg;
	cbllm_model *m = L->m;
	char		name[128],
				found[96];
	const gguf_tensor *t;
	const cbllm_dtype_traits *tr;
	cbllm_dtype dt;
	bool		vector = mt->t->kind != ARCH_MATRIX;
	int64_t		rows = vector ? mt->rows : mt->stored_rows,
				first_row = mt->first_row;

	if (mt->tied)
	{
		*mt->matrix = m->embed;
		return CBLLM_OK;
	}
	arch_tensor_name(mt->t, mt->layer, mt->expert, true, name, sizeof(name));
	if ((t = gguf_find_tensor(L->g, name)) == NULL && mt->expert >= 0 && !vector &&
		(mt->t->offset == offsetof(cbllm_expert, w_gate) ||
		 mt->t->offset == offsetof(cbllm_expert, w_up)))
	{
		/*
		 * llama.cpp's converter may fuse the experts' gate and up (its
		 * --fuse-gate-up-exps): ffn_gate_up_exps, each expert's gate rows
		 * then its up rows
		 */
		snprintf(name, sizeof(name), "blk.%d.ffn_gate_up_exps.weight", mt->layer);
		if ((t = gguf_find_tensor(L->g, name)) != NULL)
		{
			rows = 2 * mt->rows;
			first_row = mt->t->offset == offsetof(cbllm_expert, w_up) ? mt->rows : 0;
		}
		else
			arch_tensor_name(mt->t, mt->layer, mt->expert, true, name, sizeof(name));
	}
	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: gguf: missing tensor \"%s\"", L->path, name);
	if (!cbllm_dtype_by_ggml((int) t->type, &dt))
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: gguf: tensor \"%s\" has ggml type %u, which cbllm does not support",
						  L->path, name, t->type);
	tr = cbllm_dtype_traits_of(dt);
	DimsText(t, found, sizeof(found));
	if (mt->expert >= 0 && vector)
	{
		if (t->n_dims != 2 || t->ne[0] != rows || t->ne[1] != m->cfg.n_experts)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: tensor \"%s\" has the wrong shape: expected [%d, %lld] from the %s.* keys, found %s",
							  L->path, name, m->cfg.n_experts, (long long) rows, L->arch, found);
	}
	else if (mt->expert >= 0)
	{
		if (t->n_dims != 3 || t->ne[0] != mt->cols || t->ne[1] != rows ||
			t->ne[2] != m->cfg.n_experts)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: tensor \"%s\" has the wrong shape: expected [%d, %lld, %lld] from the %s.* keys, found %s",
							  L->path, name, m->cfg.n_experts, (long long) rows,
							  (long long) mt->cols, L->arch, found);
	}
	else if (vector && mt->cols > 1)
	{
		/* a small matrix kept as f32 (Qwen3.5's conv kernel): (rows, cols) */
		if (t->n_dims != 2 || t->ne[0] != mt->cols || t->ne[1] != rows)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: tensor \"%s\" has the wrong shape: expected [%lld, %lld] from the %s.* keys, found %s",
							  L->path, name, (long long) rows, (long long) mt->cols, L->arch, found);
	}
	else if (!vector && rows == 1 && t->n_dims == 1 && t->ne[0] == mt->cols)
		;						/* a one-row matrix stored as a vector (llama-quantize writes
								 * qwen35moe's ffn_gate_inp_shexp so) */
	else if (t->n_dims != (vector ? 1u : 2u) || t->ne[0] != (vector ? rows : mt->cols) ||
			 (!vector && t->ne[1] != rows))
	{
		if (vector)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: gguf: tensor \"%s\" has the wrong shape: expected [%lld] from the %s.* keys, found %s",
							  L->path, name, (long long) rows, L->arch, found);
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: tensor \"%s\" has the wrong shape: expected [%lld, %lld] from the %s.* keys, found %s",
						  L->path, name, (long long) rows, (long long) mt->cols, L->arch, found);
	}
	if (t->ne[0] % tr->block_elems != 0)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: gguf: tensor \"%s\": rows of %lld elements are not whole %s blocks of %d",
						  L->path, name, (long long) t->ne[0], tr->name, tr->block_elems);
	if (vector)
		return model_vector_f32(dt, (const char *) t->data +
								(mt->expert >= 0 ? cbllm_dtype_row_bytes(dt, rows) * mt->expert : 0),
								rows * mt->cols, false, mt->vector, err);
	mt->matrix->dtype = dt;
	mt->matrix->rows = mt->rows;
	mt->matrix->cols = mt->cols;
	/* a block of a fused tensor is its rows, an expert its matrix of the stack: a pointer into the mapping */
	mt->matrix->data = (const char *) t->data +
		((mt->expert >= 0 ? (int64_t) mt->expert * rows : 0) + first_row) *
		cbllm_dtype_row_bytes(dt, mt->cols);
	m->weight_bytes += cbllm_dtype_row_bytes(dt, mt->cols) * mt->rows;
	return CBLLM_OK;
}

/* Map path, read the configuration, bind every tensor into the mapping. */
int
model_load_gguf(cbllm_model *m, const char *path, cbllm_err *err)
{
	gguf_load	L = {.m = m, .path = path};
	int			rc;

	if ((rc = gguf_open(path, &m->gguf, err)))
		return rc;
	L.g = m->gguf;
	memset(&m->cfg, 0, sizeof(m->cfg));
	if ((rc = ReadConfig(&L, err)))
		return rc;
	if ((rc = model_alloc_layers(m, err)))
		return rc;
	m->lm_head_tied = m->cfg.tie_embeddings;
	return model_visit(m, BindTensor, &L, err);
}
