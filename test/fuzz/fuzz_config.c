/*
 * fuzz_config.c: config.json (model_config_parse, as model_config_load reads
 * it).  A config the parser accepts must hold the geometry the forward pass
 * divides by: positive sizes, heads that split hidden (or an explicit even
 * head_dim), KV heads that divide the heads, finite positive RoPE base,
 * norm epsilon and scale, and known architecture names.
 */
#include <math.h>

#include "fuzz.h"
#include "model/model.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *text = fuzz_text(data, size);
	cbllm_model_config cfg;
	cbllm_err	err;

	if (text == NULL)
		return 0;
	if (model_config_parse(text, "config.json", &cfg, &err) == CBLLM_OK)
	{
		FUZZ_CHECK(arch_find(cfg.arch, NULL) != NULL, "a supported architecture");
		FUZZ_CHECK(cfg.hidden > 0 && cfg.n_layers > 0 && cfg.intermediate > 0 &&
				   cfg.vocab_size > 0 && cfg.max_pos > 0 && cfg.sliding_window >= 0,
				   "positive sizes");
		FUZZ_CHECK(cfg.n_heads > 0 && cfg.n_kv_heads > 0 && cfg.n_heads % cfg.n_kv_heads == 0,
				   "KV heads divide the heads");
		FUZZ_CHECK(cfg.head_dim >= 2 && cfg.head_dim % 2 == 0, "an even head_dim");
		FUZZ_CHECK(cfg.n_rope >= 1 && cfg.n_rope <= CBLLM_MAX_ROPE && cfg.rope[0].theta > 1 &&
				   cfg.rms_eps > 0 && isfinite(cfg.rope[0].theta) && isfinite(cfg.rms_eps) &&
				   cfg.rope[0].factor > 0, "finite positive RoPE base, norm epsilon and scale");
		for (int l = 0; l < cfg.n_layers; l++)
			FUZZ_CHECK(cfg.layer_rope[l] < cfg.n_rope && cfg.layer_window[l] >= 0,
					   "each layer's RoPE and window in range");
		FUZZ_CHECK(cfg.bos_id >= -1 && cfg.eos_id >= -1, "token ids or -1");
	}
	free(text);
	return 0;
}
