/*
 * test_model_config.c: unit tests of config.json parsing (model_config_load):
 * the fields of a tiny checkpoint's config and the defaults of absent ones,
 * the configs of Llama-2-7b-chat-hf, TinyLlama-1.1B-Chat-v1.0 and
 * Mistral-7B-v0.1 as HuggingFace ships them, those of Qwen2.5-0.5B-Instruct,
 * Qwen3-0.6B and gemma-3-1b-it with their families' refusals, rope_scaling, and one
 * malformed or unsupported config per error, each message naming the file
 * and the problem.  The fixtures (fixture.h) go into a mkdtemp() directory,
 * removed at the end.
 *
 * usage: test_model_config
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "fixture.h"
#include "model/model.h"
#include "tap.h"

/* The config.json of the tiny checkpoint: arch, sizes, derived head_dim and defaults as written. */
static void
TestTinyConfig(void)
{
	char	   *dir = fixture_case_dir("tiny");
	char	   *text = fixture_config_json(&fixture_tiny, "LlamaForCausalLM", "silu", NULL);
	cbllm_model_config cfg;
	cbllm_err	err = {{0}};
	int			rc;

	fixture_write_text(dir, "config.json", text);
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK, "model_config_load of the tiny model succeeds %s", err.msg);
	TAP_OK(strcmp(cfg.arch, "LlamaForCausalLM") == 0 && cfg.hidden == 16 && cfg.n_layers == 2 &&
		   cfg.n_heads == 4 && cfg.n_kv_heads == 2 && cfg.intermediate == 24 &&
		   cfg.vocab_size == 32, "tiny config: arch and sizes as written");
	TAP_OK(cfg.head_dim == 4, "tiny config: head_dim derived as hidden / heads = 4 (got %d)",
		   cfg.head_dim);
	TAP_OK(cfg.max_pos == 64 && cfg.rope[0].theta == 500000.0 && cfg.rms_eps == 1e-6f &&
		   cfg.n_rope == 1 && cfg.rope[0].type == ROPE_DEFAULT && cfg.sliding_window == 0 &&
		   model_kv_drop_window(&cfg) == 0 && cfg.layer_window[0] == 0 && cfg.layer_window[1] == 0,
		   "tiny config: max_pos 64, rope_theta 500000, rms_eps 1e-6, no rope scaling, no window");
	TAP_OK(cfg.bos_id == 1 && cfg.eos_id == 2 && !cfg.tie_embeddings,
		   "tiny config: bos 1, eos 2, untied");
	free(text);
	free(dir);
}

/* Write a tiny model whose config.json is text, then check model_config_load fails. */
static void
ConfigCase(const char *label, const char *text, const char *n1, const char *n2)
{
	char	   *dir = fixture_case_dir(label);
	char	   *path = cbllm_path_join(dir, "config.json");
	cbllm_model_config cfg;
	cbllm_err	err = {{0}};
	int			rc;

	if (text != NULL)
		fixture_write_text(dir, "config.json", text);
	rc = model_config_load(dir, &cfg, &err);
	if (rc >= 0)
		TAP_DIAG("%s: returned %d", label, rc);
	TAP_OK(rc < 0 && msg_has(&err, path, n1, n2), "%s fails (%s): %s", label,
		   cbllm_status_name(rc), err.msg);
	free(path);
	free(dir);
}

/* Malformed or unsupported config.json files: each error names the file and the problem. */
static void
TestBadConfigs(void)
{
	fixture_geom g = fixture_tiny;
	char	   *t;

	ConfigCase("missing config.json", NULL, "cannot open", NULL);
	ConfigCase("config.json not JSON", "{\"hidden_size\": 16,,}", "invalid JSON", NULL);
	ConfigCase("config.json a JSON array", "[1, 2, 3]", "JSON", NULL);
	t = fixture_config_json(&g, "GPT2LMHeadModel", "gelu_new", NULL);
	ConfigCase("architecture GPT2LMHeadModel", t, "unsupported architecture", "GPT2LMHeadModel");
	free(t);
	t = fixture_config_json(&g, "LlamaForCausalLM", "gelu", NULL);
	ConfigCase("hidden_act gelu", t, "hidden_act", "unsupported");
	free(t);
	g.hidden = 18;
	t = fixture_config_json(&g, "LlamaForCausalLM", "silu", NULL);
	ConfigCase("hidden_size 18 with 4 heads", t, "hidden_size 18",
				"num_attention_heads 4");
	free(t);
	g = fixture_tiny;
	g.kv_heads = 3;
	t = fixture_config_json(&g, "LlamaForCausalLM", "silu", NULL);
	ConfigCase("4 heads with 3 KV heads", t, "num_key_value_heads 3", "multiple");
	free(t);
	g = fixture_tiny;
	g.head_dim = 5;
	t = fixture_config_json(&g, "LlamaForCausalLM", "silu", NULL);
	ConfigCase("odd head_dim 5", t, "head_dim 5", NULL);
	free(t);
	ConfigCase("no vocab_size",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24}",
				"\"vocab_size\"", "missing");
	ConfigCase("hidden_size a string",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"16\","
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32}", "\"hidden_size\"", "integer");
	/* found by fuzzing: a size beyond long long's range was cast before the range check */
	ConfigCase("hidden_size 1e30 (beyond any integer type)",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 1e30,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32}", "\"hidden_size\"", "integer");
	/* found by fuzzing: positive numbers that are 0 or infinite as floats */
	ConfigCase("rms_norm_eps 1e-85 (0 as a float)",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32, \"rms_norm_eps\": 1e-85}", "\"rms_norm_eps\"", "float range");
	ConfigCase("rope_theta 1e39 (infinite as a float)",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32, \"rope_theta\": 1e39}", "\"rope_theta\"", "float range");
	ConfigCase("num_hidden_layers 0",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 0, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32}", "\"num_hidden_layers\"", NULL);
	ConfigCase("no architectures or model_type",
				"{\"hidden_size\": 16, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
				" \"intermediate_size\": 24, \"vocab_size\": 32}", "architecture", NULL);
	t = fixture_config_json(&fixture_tiny, "LlamaForCausalLM", "silu", ", \"attention_bias\": true");
	ConfigCase("attention_bias true", t, "bias", NULL);
	free(t);
}

/* rope_scaling: each type HF defines loads with its fields; unknown types and bad fields are refused by name. */
static void
TestRopeScaling(void)
{
	struct
	{
		const char *label;
		const char *json;
		int			type;		/* rope_type expected; -1: must fail naming field */
		double		factor;
		const char *field;
	}			cases[] = {
		{"rope_scaling null", ", \"rope_scaling\": null", ROPE_DEFAULT, 1, NULL},
		{"rope_scaling linear factor 2", ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}", ROPE_LINEAR, 2, NULL},
		{"rope_scaling rope_type linear factor 4.0", ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0}", ROPE_LINEAR, 4, NULL},
		{"rope_scaling dynamic factor 2", ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}", ROPE_DYNAMIC, 2, NULL},
		{"rope_scaling llama3", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
		" \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", ROPE_LLAMA3, 8, NULL},
		{"rope_scaling yarn factor 4 (Qwen2.5 style)", ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0,"
		" \"original_max_position_embeddings\": 32}", ROPE_YARN, 4, NULL},
		{"rope_scaling llama3 without low_freq_factor", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
		" \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", -1, 0, "rope_scaling.low_freq_factor"},
		{"rope_scaling llama3 high <= low", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
		" \"low_freq_factor\": 4.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", -1, 0, "rope_scaling.high_freq_factor"},
		{"rope_scaling type foo", ", \"rope_scaling\": {\"rope_type\": \"foo\", \"factor\": 2}", -1, 0, "unsupported rope_scaling.rope_type \"foo\""},
		{"rope_scaling without a type", ", \"rope_scaling\": {\"factor\": 2}", -1, 0, "rope_scaling.rope_type"},
		{"rope_scaling linear without factor", ", \"rope_scaling\": {\"type\": \"linear\"}", -1, 0, "rope_scaling.factor"},
		{"rope_scaling linear factor 0.5", ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 0.5}", -1, 0, "rope_scaling.factor"},
		{"rope_scaling yarn truncate false (gpt-oss)", ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2, \"truncate\": false}", ROPE_YARN, 2, NULL},
		{"rope_scaling yarn truncate a string", ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2, \"truncate\": \"no\"}", -1, 0, "rope_scaling.truncate"},
		{"longrope with a short_factor list of the wrong length", ", \"original_max_position_embeddings\": 16,"
		" \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1, 2]}", -1, 0, "rope_scaling.short_factor"},
		{"longrope without long_factor", ", \"original_max_position_embeddings\": 16,"
		" \"rope_scaling\": {\"type\": \"su\", \"short_factor\": [1, 1]}", -1, 0, "rope_scaling.long_factor"},
		{"partial_rotary_factor 0.3 (1.2 of 4 dimensions: not an even count)", ", \"partial_rotary_factor\": 0.3", -1, 0, "partial_rotary_factor"},
		{"layer_types of 1 name for 2 layers", ", \"sliding_window\": 4, \"layer_types\": [\"full_attention\"]", -1, 0, "layer_types"},
		{"layer_types with an unknown name", ", \"sliding_window\": 4, \"layer_types\": [\"full_attention\", \"chunked_attention\"]",
		-1, 0, "unsupported layer_types[1] \"chunked_attention\""},
		{"use_sliding_window not a boolean", ", \"sliding_window\": 4, \"use_sliding_window\": 1", -1, 0, "use_sliding_window"},
		{"sliding_window negative", ", \"sliding_window\": -4", -1, 0, "sliding_window"},
		{"sliding_window_pattern fractional", ", \"sliding_window\": 4, \"sliding_window_pattern\": 1.5", -1, 0, "sliding_window_pattern"},
		{"rope_local_base_freq not a number", ", \"rope_local_base_freq\": \"10000\"", -1, 0, "rope_local_base_freq"},
		{"longrope for head_dim 4 with 2-factor lists loads", ", \"original_max_position_embeddings\": 16,"
		" \"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1, 1.5], \"long_factor\": [2, 4]}", ROPE_LONGROPE, 4, NULL},
	};

	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		char	   *dir = fixture_case_dir("rope");
		char	   *text = fixture_config_json(&fixture_tiny, "LlamaForCausalLM", "silu", cases[i].json);
		char	   *path = cbllm_path_join(dir, "config.json");
		cbllm_model_config cfg;
		cbllm_err	err = {{0}};
		int			rc;

		fixture_write_text(dir, "config.json", text);
		rc = model_config_load(dir, &cfg, &err);
		if (cases[i].type >= 0)
			TAP_OK(rc == CBLLM_OK && (int) cfg.rope[0].type == cases[i].type &&
				   cfg.rope[0].factor == cases[i].factor,
				   "%s loads as rope_type %s factor %g %s", cases[i].label,
				   rope_type_name(cases[i].type), cases[i].factor, err.msg);
		else
			TAP_OK(rc != CBLLM_OK && msg_has(&err, path, cases[i].field, NULL),
				   "%s is refused naming %s: %s", cases[i].label, cases[i].field, err.msg);
		free(path);
		free(text);
		free(dir);
	}
}

/* Parse a config text through model_config_load; returns the status. */
static int
LoadConfigText(const char *label, const char *text, cbllm_model_config *cfg, cbllm_err *err)
{
	char	   *dir = fixture_case_dir(label);
	int			rc;

	fixture_write_text(dir, "config.json", text);
	rc = model_config_load(dir, cfg, err);
	free(dir);
	return rc;
}

/* A real model's config.json and the fields it must parse to. */
typedef struct real_config
{
	const char *label;			/* its case directory */
	const char *text;
	const char *name;			/* as HuggingFace names it */
	const char *sizes;			/* the messages of the field checks */
	const char *rest;
	const char *arch;
	int			hidden,
				layers,
				heads,
				kv_heads,
				head_dim,
				inter,
				max_pos,
				window;
} real_config;

/* The shipped configs of three real models parse with the right fields. */
static void
TestRealConfigs(void)
{
	const real_config real[] = {
		{"llama2", fixture_llama2_7b_chat, "Llama-2-7b-chat-hf",
			"Llama-2-7b: 4096 hidden, 32 layers, 32 heads, 32 KV heads, head_dim 128, 11008, 32000, 4096",
			"Llama-2-7b: rope_theta absent gives 10000, rms 1e-5, untied, bos 1, eos 2",
		"LlamaForCausalLM", 4096, 32, 32, 32, 128, 11008, 4096, 0},
		{"tinyllama", fixture_tinyllama_chat, "TinyLlama-1.1B-Chat-v1.0",
			"TinyLlama: 2048 hidden, 22 layers, 32 heads, 4 KV heads, head_dim 64, 5632, 32000, 2048",
			"TinyLlama: rope_theta 10000, rms 1e-5, untied, bos 1, eos 2",
		"LlamaForCausalLM", 2048, 22, 32, 4, 64, 5632, 2048, 0},
		{"mistral", fixture_mistral_7b, "Mistral-7B-v0.1",
			"Mistral-7B: 4096 hidden, 32 layers, 32 heads, 8 KV heads, head_dim 128, 14336, 32000, 32768",
			"Mistral-7B: rope_theta 10000, sliding_window 4096, rms 1e-5, bos 1, eos 2",
		"MistralForCausalLM", 4096, 32, 32, 8, 128, 14336, 32768, 4096},
	};
	cbllm_model_config c;
	cbllm_err	err = {{0}};
	int			rc;

	for (int i = 0; i < (int) (sizeof(real) / sizeof(real[0])); i++)
	{
		const real_config *r = &real[i];

		rc = LoadConfigText(r->label, r->text, &c, &err);
		TAP_OK(rc == CBLLM_OK, "%s config.json loads %s", r->name, err.msg);
		TAP_OK(rc == CBLLM_OK && strcmp(c.arch, r->arch) == 0 && c.hidden == r->hidden &&
			   c.n_layers == r->layers && c.n_heads == r->heads && c.n_kv_heads == r->kv_heads &&
			   c.head_dim == r->head_dim && c.intermediate == r->inter && c.vocab_size == 32000 &&
			   c.max_pos == r->max_pos, "%s", r->sizes);
		TAP_OK(rc == CBLLM_OK && c.rope[0].theta == 10000.0 && c.rms_eps == 1e-5f &&
			   c.rope[0].type == ROPE_DEFAULT && c.sliding_window == r->window &&
			   model_kv_drop_window(&c) == r->window && !c.tie_embeddings &&
			   c.bos_id == 1 && c.eos_id == 2, "%s", r->rest);
	}

	/* an eos_token_id list (Llama-3 style) takes its first element */
	rc = LoadConfigText("eos-list",
						  "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
						  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
						  " \"intermediate_size\": 24, \"vocab_size\": 32,"
						  " \"bos_token_id\": 7, \"eos_token_id\": [9, 8, 3]}", &c, &err);
	TAP_OK(rc == CBLLM_OK && c.bos_id == 7 && c.eos_id == 9 && c.n_kv_heads == 4 &&
		   c.max_pos == 2048 && c.rope[0].theta == 10000.0,
		   "eos_token_id list gives its first id; absent num_key_value_heads is num_attention_heads");
	rc = LoadConfigText("model-type-only",
						  "{\"model_type\": \"mistral\", \"hidden_size\": 16,"
						  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
						  " \"intermediate_size\": 24, \"vocab_size\": 32}", &c, &err);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "MistralForCausalLM") == 0 && c.bos_id == -1 &&
		   c.eos_id == -1, "model_type \"mistral\" alone names MistralForCausalLM; absent ids are -1");
}

/* The config.json of Qwen/Qwen2.5-0.5B-Instruct. */
static const char *const Qwen25_05b =
"{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"
" \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"hidden_act\": \"silu\","
" \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
" \"max_position_embeddings\": 32768, \"max_window_layers\": 21, \"model_type\": \"qwen2\","
" \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
" \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
" \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
" \"transformers_version\": \"4.43.1\", \"use_cache\": true, \"use_sliding_window\": false,"
" \"vocab_size\": 151936}";

/* The config.json of Qwen/Qwen3-0.6B. */
static const char *const Qwen3_06b =
"{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false,"
" \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645,"
" \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024,"
" \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
" \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
" \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8,"
" \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000,"
" \"sliding_window\": null, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
" \"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false,"
" \"vocab_size\": 151936}";

/* The config.json of google/gemma-3-1b-it (no tie_word_embeddings: tied is Gemma's default). */
static const char *const Gemma3_1b =
"{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false,"
" \"attention_dropout\": 0.0, \"attn_logit_softcapping\": null, \"bos_token_id\": 2,"
" \"cache_implementation\": \"hybrid\", \"eos_token_id\": [1, 106],"
" \"final_logit_softcapping\": null, \"head_dim\": 256,"
" \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 1152,"
" \"initializer_range\": 0.02, \"intermediate_size\": 6912,"
" \"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\","
" \"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1,"
" \"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06,"
" \"rope_local_base_freq\": 10000, \"rope_scaling\": null, \"rope_theta\": 1000000,"
" \"sliding_window\": 512, \"sliding_window_pattern\": 6, \"torch_dtype\": \"bfloat16\","
" \"transformers_version\": \"4.50.0.dev0\", \"use_cache\": true, \"vocab_size\": 262144}";

/* gemma-3-1b-it's config.json with one field's text replaced (from -> to); caller frees. */
static char *
GemmaWith(const char *from, const char *to)
{
	const char *at = strstr(Gemma3_1b, from);
	size_t		head = at != NULL ? (size_t) (at - Gemma3_1b) : strlen(Gemma3_1b);
	char	   *t = malloc(strlen(Gemma3_1b) + strlen(to) + 1);

	memcpy(t, Gemma3_1b, head);
	strcpy(t + head, to);
	if (at != NULL)
		strcat(t, at + strlen(from));
	return t;
}

/*
 * The Qwen2.5, Qwen3 and Gemma-3 configs as HuggingFace ships them load as
 * their architectures with their features, head_dim, ties and scales; what
 * those families' configs may switch on that cbllm lacks is refused, naming
 * the field.
 */
static void
TestFamilyConfigs(void)
{
	/* gemma-3-1b-it with one field changed, and what the refusal must say */
	static const struct
	{
		const char *label,
				   *from,
				   *to,
				   *n1,
				   *n2;
	}			refused[] = {
		{"final_logit_softcapping 30", "\"final_logit_softcapping\": null",
		"\"final_logit_softcapping\": 30.0", "final_logit_softcapping is not supported", NULL},
		{"attn_logit_softcapping 50", "\"attn_logit_softcapping\": null",
		"\"attn_logit_softcapping\": 50.0", "attn_logit_softcapping is not supported", NULL},
		{"gemma3 hidden_activation gelu", "\"hidden_activation\": \"gelu_pytorch_tanh\"",
		"\"hidden_activation\": \"gelu\"", "unsupported hidden_activation \"gelu\"",
		"gelu_pytorch_tanh"},
		{"use_bidirectional_attention true", "\"use_cache\": true",
		"\"use_bidirectional_attention\": true", "use_bidirectional_attention", "not supported"},
		{"Gemma3ForConditionalGeneration", "\"Gemma3ForCausalLM\"",
		"\"Gemma3ForConditionalGeneration\"", "Gemma3ForConditionalGeneration", "Gemma3ForCausalLM"},
		{"query_pre_attn_scalar 0", "\"query_pre_attn_scalar\": 256", "\"query_pre_attn_scalar\": 0",
		"\"query_pre_attn_scalar\"", "positive"},
		{"gemma3 without query_pre_attn_scalar", "\"query_pre_attn_scalar\": 256, ", "",
		"missing \"query_pre_attn_scalar\"", "Gemma3ForCausalLM"},
		{"gemma3 without head_dim", "\"head_dim\": 256, ", "", "missing \"head_dim\"", NULL},
	};
	cbllm_model_config c;
	cbllm_err	err = {{0}};
	char	   *t;
	int			rc;

	rc = LoadConfigText("qwen2.5", Qwen25_05b, &c, &err);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "Qwen2ForCausalLM") == 0 &&
		   c.features == ARCH_QKV_BIAS && c.head_dim == 64 && c.n_kv_heads == 2 &&
		   c.tie_embeddings && c.rope[0].theta == 1e6 && c.layer_window[0] == 0 && c.bos_id == 151643 && c.eos_id == 151645 &&
		   c.q_scale == 1.0f && c.embed_scale == 1.0f && c.activation == ARCH_ACT_SILU,
		   "Qwen2.5-0.5B-Instruct: q, k, v biases, head_dim 64 = 896 / 14, tied, theta 1e6, window off %s",
		   err.msg);
	TAP_OK(rc == CBLLM_OK && c.sliding_window == 0 && c.layer_window[0] == 0 &&
		   c.layer_window[c.n_layers - 1] == 0 && model_kv_drop_window(&c) == 0 && c.n_rope == 1,
		   "Qwen2.5-0.5B-Instruct: sliding_window 32768 with use_sliding_window false is no window at any layer");
	rc = LoadConfigText("qwen3", Qwen3_06b, &c, &err);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "Qwen3ForCausalLM") == 0 &&
		   c.features == ARCH_QK_NORM && c.head_dim == 128 && c.hidden == 1024 &&
		   c.n_heads == 16 && c.tie_embeddings && c.q_scale == 1.0f,
		   "Qwen3-0.6B: per-head q/k norms, explicit head_dim 128 (16 heads over hidden 1024), tied %s",
		   err.msg);
	rc = LoadConfigText("gemma3", Gemma3_1b, &c, &err);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "Gemma3ForCausalLM") == 0 &&
		   (c.features & (ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_SANDWICH_NORM | ARCH_EMBED_SCALE)) ==
		   (ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_SANDWICH_NORM | ARCH_EMBED_SCALE) &&
		   c.activation == ARCH_ACT_GELU_TANH && c.head_dim == 256 && c.n_kv_heads == 1 &&
		   c.tie_embeddings && c.q_scale == 1.0f && c.embed_scale == sqrtf(1152.0f) &&
		   c.bos_id == 2 && c.eos_id == 1,
		   "gemma-3-1b-it: Gemma's norms, GELU-tanh, head_dim 256, tied by default, scale sqrt(1152), eos list's first %s",
		   err.msg);
	{
		bool		pattern = c.n_layers == 26;

		for (int l = 0; l < c.n_layers; l++)
		{
			bool		global = (l + 1) % 6 == 0;

			pattern = pattern && c.layer_window[l] == (global ? 0 : 512) &&
				c.layer_rope[l] == (global ? 0 : 1);
		}
		TAP_OK(rc == CBLLM_OK && pattern && c.n_rope == 2 && c.rope[1].theta == 10000 &&
			   c.rope[0].theta == 1e6 && model_kv_drop_window(&c) == 0,
			   "gemma-3-1b-it: layers 5, 11, 17, 23 global (rope_theta 1e6, no window), the others local (window 512, rope_local_base_freq 10000); KV blocks kept");
	}
	t = GemmaWith("\"rope_scaling\": null", "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}");
	rc = LoadConfigText("gemma3-4b-rope", t, &c, &err);
	TAP_OK(rc == CBLLM_OK && c.rope[0].type == ROPE_LINEAR && c.rope[0].factor == 8 &&
		   c.rope[1].type == ROPE_DEFAULT && c.layer_rope[0] == 1 && c.layer_rope[5] == 0,
		   "Gemma-3 4B's rope_scaling linear 8 scales the global layers' RoPE only %s", err.msg);
	free(t);
	t = GemmaWith("\"use_cache\": true", "\"tie_word_embeddings\": false");
	rc = LoadConfigText("gemma3-untied", t, &c, &err);
	TAP_OK(rc == CBLLM_OK && !c.tie_embeddings,
		   "a Gemma-3 config that says tie_word_embeddings false is untied %s", err.msg);
	free(t);
	t = GemmaWith("\"hidden_activation\": \"gelu_pytorch_tanh\"",
				  "\"hidden_activation\": null, \"hidden_act\": \"gelu_pytorch_tanh\"");
	rc = LoadConfigText("gemma3-hidden-act", t, &c, &err);
	TAP_OK(rc == CBLLM_OK && c.activation == ARCH_ACT_GELU_TANH,
		   "hidden_activation null leaves the activation to hidden_act %s", err.msg);
	free(t);
	t = GemmaWith("\"query_pre_attn_scalar\": 256", "\"query_pre_attn_scalar\": 144");
	rc = LoadConfigText("gemma3-qpas", t, &c, &err);
	TAP_OK(rc == CBLLM_OK && fabsf(c.q_scale - 4.0f / 3.0f) < 1e-6f,
		   "query_pre_attn_scalar 144 with head_dim 256: q scaled by sqrt(256 / 144) = %g", c.q_scale);
	free(t);
	for (int i = 0; i < (int) (sizeof(refused) / sizeof(refused[0])); i++)
	{
		t = GemmaWith(refused[i].from, refused[i].to);
		ConfigCase(refused[i].label, t, refused[i].n1, refused[i].n2);
		free(t);
	}
}

/*
 * Mixtures of experts: a Qwen3-MoE config's experts, width, renormalisation
 * and the layers that have them (decoder_sparse_step, mlp_only_layers);
 * Mixtral's defaults; and each malformed or unsupported field refused by
 * name.
 */
static void
TestExpertConfigs(void)
{
	fixture_geom g = fixture_tiny;
	char	   *dir = fixture_case_dir("experts");
	char	   *t;
	cbllm_model_config cfg;
	cbllm_err	err = {{0}};
	int			rc;
	struct
	{
		const char *label;
		const char *extra;
		const char *n1;
		const char *n2;
	}			bad[] = {
		{"num_experts_per_tok above num_experts", ", \"num_experts\": 4, \"num_experts_per_tok\": 5,"
		" \"moe_intermediate_size\": 8", "\"num_experts_per_tok\"", "[1, 4]"},
		{"no num_experts_per_tok", ", \"num_experts\": 4, \"moe_intermediate_size\": 8",
		"\"num_experts_per_tok\"", "missing"},
		{"no moe_intermediate_size", ", \"num_experts\": 4, \"num_experts_per_tok\": 2",
		"\"moe_intermediate_size\"", "missing"},
		{"num_experts beyond the limit", ", \"num_experts\": 100000, \"num_experts_per_tok\": 2,"
		" \"moe_intermediate_size\": 8", "\"num_experts\"", NULL},
		{"mlp_only_layers naming layer 2 of 2", ", \"num_experts\": 4, \"num_experts_per_tok\": 2,"
		" \"moe_intermediate_size\": 8, \"mlp_only_layers\": [2]", "\"mlp_only_layers\"", "[0, 2)"},
		{"norm_topk_prob a number", ", \"num_experts\": 4, \"num_experts_per_tok\": 2,"
		" \"moe_intermediate_size\": 8, \"norm_topk_prob\": 1", "\"norm_topk_prob\"", NULL},
		{"shared experts", ", \"num_experts\": 4, \"num_experts_per_tok\": 2,"
		" \"moe_intermediate_size\": 8, \"shared_expert_intermediate_size\": 16",
		"shared experts", "not supported"},
	};

	g.head_dim = 4;
	t = fixture_config_json(&g, "Qwen3MoeForCausalLM", "silu",
							", \"num_experts\": 6, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8,"
							" \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [0]");
	fixture_write_text(dir, "config.json", t);
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK && cfg.n_experts == 6 && cfg.n_experts_used == 2 &&
		   cfg.expert_intermediate == 8 && cfg.moe_norm_topk && (cfg.features & ARCH_MOE) &&
		   !cfg.layer_moe[0] && cfg.layer_moe[1],
		   "Qwen3-MoE config: 6 experts, 2 per token, 8 wide, renormalised, layer 0 dense (mlp_only_layers) %s",
		   err.msg);
	free(t);
	t = fixture_config_json(&g, "Qwen3MoeForCausalLM", "silu",
							", \"num_experts\": 6, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 8,"
							" \"decoder_sparse_step\": 2");
	fixture_write_text(dir, "config.json", t);
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK && !cfg.moe_norm_topk && !cfg.layer_moe[0] && cfg.layer_moe[1],
		   "Qwen3-MoE config: norm_topk_prob absent is false (HF's default); decoder_sparse_step 2 puts experts in layer 1 only %s",
		   err.msg);
	free(t);
	t = fixture_config_json(&g, "MixtralForCausalLM", "silu", NULL);
	fixture_write_text(dir, "config.json", t);
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK && cfg.n_experts == 8 && cfg.n_experts_used == 2 &&
		   cfg.expert_intermediate == cfg.intermediate && cfg.moe_norm_topk &&
		   cfg.layer_moe[0] && cfg.layer_moe[1] && (cfg.features & ARCH_MOE_BLOCK_SPARSE),
		   "Mixtral config: HF's defaults, 8 experts, 2 per token, intermediate_size wide, renormalised, every layer %s",
		   err.msg);
	free(t);
	t = fixture_config_json(&g, "GptOssForCausalLM", "silu",
							", \"attention_bias\": true, \"num_local_experts\": 4, \"num_experts_per_tok\": 2,"
							" \"swiglu_limit\": 5.0");
	fixture_write_text(dir, "config.json", t);
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK && cfg.n_experts == 4 && cfg.n_experts_used == 2 &&
		   cfg.expert_intermediate == cfg.intermediate && cfg.moe_norm_topk &&
		   cfg.swiglu_limit == 5.0f && cfg.activation == ARCH_ACT_SWIGLU_OAI &&
		   cfg.layer_moe[0] && cfg.layer_moe[1] &&
		   (cfg.features & (ARCH_ATTN_SINKS | ARCH_MOE_BIASES | ARCH_QKV_BIAS | ARCH_O_BIAS)) ==
		   (ARCH_ATTN_SINKS | ARCH_MOE_BIASES | ARCH_QKV_BIAS | ARCH_O_BIAS),
		   "gpt-oss config: 4 experts, 2 per token, intermediate_size wide, weights renormalised, sinks and biases, the clamped SwiGLU at swiglu_limit 5 %s",
		   err.msg);
	free(t);
	t = fixture_config_json(&g, "Qwen3MoeForCausalLM", "silu", ", \"num_experts\": 0");
	fixture_write_text(dir, "config.json", t);
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK && cfg.n_experts == 0 && !(cfg.features & ARCH_MOE) && !cfg.layer_moe[0],
		   "Qwen3-MoE config with num_experts 0: a dense model %s", err.msg);
	free(t);
	for (int i = 0; i < (int) (sizeof(bad) / sizeof(bad[0])); i++)
	{
		t = fixture_config_json(&g, "Qwen3MoeForCausalLM", "silu", bad[i].extra);
		ConfigCase(bad[i].label, t, bad[i].n1, bad[i].n2);
		free(t);
	}
	free(dir);
}

/*
 * A hybrid model's layer_types (the one reader model_config_layer_types,
 * which Qwen3.5's, Gemma 4's and the windowed families' configs share):
 * linear and full layers where it names them; a window's name, an unknown
 * name or a list of the wrong length refused naming layer_types.
 */
static void
TestHybridLayerTypes(void)
{
	static const char *const lin = ", \"partial_rotary_factor\": 0.5, \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 8,"
		" \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 2, \"layer_types\": ";
	struct
	{
		const char *label;
		const char *types;
		const char *want;		/* NULL: loads as linear then full */
	}			cases[] = {
		{"linear then full", "[\"linear_attention\", \"full_attention\"]", NULL},
		{"a sliding layer", "[\"linear_attention\", \"sliding_attention\"]",
		"unsupported layer_types[1] \"sliding_attention\" (\"full_attention\" and \"linear_attention\" are supported)"},
		{"a number", "[\"linear_attention\", 3]", "unsupported layer_types[1] \"?\""},
		{"one name for two layers", "[\"full_attention\"]", "layer_types must be a list"},
	};
	fixture_geom g = fixture_tiny;

	g.head_dim = 4;
	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		char		extra[400];
		char	   *dir = fixture_case_dir("hybrid"),
				   *text,
				   *path = cbllm_path_join(dir, "config.json");
		cbllm_model_config cfg;
		cbllm_err	err = {{0}};
		int			rc;

		snprintf(extra, sizeof(extra), "%s%s", lin, cases[i].types);
		text = fixture_config_json(&g, "Qwen3_5ForCausalLM", "silu", extra);
		fixture_write_text(dir, "config.json", text);
		rc = model_config_load(dir, &cfg, &err);
		if (cases[i].want == NULL)
			TAP_OK(rc == CBLLM_OK && cfg.layer_linear[0] && !cfg.layer_linear[1] &&
				   cfg.n_linear_layers == 1, "Qwen3.5 layer_types %s loads as such %s",
				   cases[i].label, err.msg);
		else
			TAP_OK(rc != CBLLM_OK && msg_has(&err, path, cases[i].want, NULL),
				   "Qwen3.5 layer_types with %s is refused: %s", cases[i].label, err.msg);
		free(path);
		free(text);
		free(dir);
	}
}

int
main(void)
{
	void		(*const tests[]) (void) = {
		TestTinyConfig,
		TestBadConfigs,
		TestRopeScaling,
		TestRealConfigs,
		TestFamilyConfigs,
		TestExpertConfigs,
		TestHybridLayerTypes
	};

	return run_in_fixture_root("config", tests, (int) (sizeof(tests) / sizeof(tests[0])));
}
