/*
 * fixture.c: the writers of fixture.h.  The safetensors files are laid out
 * as the format says: an 8-byte little-endian header length, the JSON header
 * (padded with spaces to a multiple of 8), then each tensor's bytes in the
 * order of the list.
 */
#include "fixture.h"

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

static char fixture_root[64];
static int	fixture_n_cases = 0;

const fixture_geom fixture_tiny = {16, 2, 4, 2, 0, 24, 32, false, true};

const char *const fixture_shard_names[2] = {
	"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
};

/* Make the fixture root /tmp/cbllm_<tag>_XXXXXX; returns its path, or NULL. */
const char *
fixture_root_create(const char *tag)
{
	snprintf(fixture_root, sizeof(fixture_root), "/tmp/cbllm_%s_XXXXXX", tag);
	fixture_n_cases = 0;
	return mkdtemp(fixture_root);
}

/* Make the next numbered case directory under the root; caller frees the path. */
char *
fixture_case_dir(const char *label)
{
	char		name[128];
	char	   *dir;

	snprintf(name, sizeof(name), "%02d-%s", ++fixture_n_cases, label);
	dir = cbllm_path_join(fixture_root, name);
	if (mkdir(dir, 0700) != 0)
		printf("# mkdir %s failed\n", dir);
	return dir;
}

/* nftw callback: remove one fixture file or directory. */
static int
RemoveEntry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* Remove dir and everything in it; whether it is gone. */
bool
fixture_remove_tree(const char *dir)
{
	return nftw(dir, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) == 0 && access(dir, F_OK) != 0;
}

/* Remove the fixture root and everything in it; whether it is gone. */
bool
fixture_root_remove(void)
{
	return fixture_remove_tree(fixture_root);
}

/* Write n bytes to dir/name; whether it worked. */
bool
fixture_write_bytes(const char *dir, const char *name, const void *data, size_t n)
{
	char	   *path = cbllm_path_join(dir, name);
	FILE	   *f = fopen(path, "wb");
	bool		ok = f != NULL;

	if (f != NULL)
	{
		ok = fwrite(data, 1, n, f) == n;
		ok = fclose(f) == 0 && ok;
	}
	free(path);
	return ok;
}

/* Write a NUL-terminated text to dir/name; whether it worked. */
bool
fixture_write_text(const char *dir, const char *name, const char *text)
{
	return fixture_write_bytes(dir, name, text, strlen(text));
}

/* The value of element i of the tensor with the given seed: exact in F16 and BF16. */
float
fixture_value(int seed, int64_t i)
{
	return (float) ((seed * 7 + i * 3) % 61 - 30) * 0.125f;
}

/* IEEE half bits of v, which must be zero or a normal half with a short mantissa. */
static uint16_t
F16Bits(float v)
{
	uint16_t	sign = v < 0 ? 0x8000 : 0;
	int			e;
	float		m;

	if (v == 0)
		return sign;
	m = frexpf(fabsf(v), &e);	/* |v| = m * 2^e, m in [0.5, 1) */
	return sign | (uint16_t) ((e - 1 + 15) << 10) | (uint16_t) ((m * 2 - 1) * 1024);
}

/* bfloat16 bits of v: the upper half of its f32 bits (exact for short mantissas). */
static uint16_t
Bf16Bits(float v)
{
	uint32_t	u;

	memcpy(&u, &v, 4);
	return (uint16_t) (u >> 16);
}

/* Number of elements of a tensor. */
int64_t
fixture_tensor_elems(const fixture_tensor *t)
{
	int64_t		n = 1;

	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

/* Append a tensor of shape (r) or (r, c) (c 0) filled from fixture_value in the given dtype. */
fixture_tensor *
fixture_add_tensor(fixture_tensors *s, const char *name, const char *dtype, int64_t r, int64_t c,
				   int shard)
{
	fixture_tensor *t;
	int64_t		n;
	size_t		esz = strcmp(dtype, "F32") == 0 ? 4 : strcmp(dtype, "I64") == 0 ? 8 : 2;

	s->t = realloc(s->t, sizeof(fixture_tensor) * (s->n + 1));
	t = &s->t[s->n];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->dtype = dtype;
	t->ndim = c > 0 ? 2 : 1;
	t->shape[0] = r;
	t->shape[1] = c;
	t->seed = s->n + 1;
	t->shard = shard;
	n = fixture_tensor_elems(t);
	t->nbytes = (size_t) n * esz;
	t->data = calloc(1, t->nbytes + 1);
	for (int64_t i = 0; i < n; i++)
	{
		float		v = fixture_value(t->seed, i);
		uint16_t	h;

		if (esz == 4)
			memcpy(t->data + 4 * i, &v, 4);
		else if (esz == 8)
		{
			int64_t		q = (int64_t) (v * 8);

			memcpy(t->data + 8 * i, &q, 8);
		}
		else
		{
			h = strcmp(dtype, "F16") == 0 ? F16Bits(v) : Bf16Bits(v);
			memcpy(t->data + 2 * i, &h, 2);
		}
	}
	s->n++;
	return t;
}

/* Find a tensor by name, or NULL. */
fixture_tensor *
fixture_find_tensor(fixture_tensors *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->t[i].name, name) == 0)
			return &s->t[i];
	return NULL;
}

/* Remove a tensor by name. */
void
fixture_remove_tensor(fixture_tensors *s, const char *name)
{
	fixture_tensor *t = fixture_find_tensor(s, name);
	int			i;

	if (t == NULL)
		return;
	i = (int) (t - s->t);
	free(t->data);
	memmove(&s->t[i], &s->t[i + 1], sizeof(fixture_tensor) * (s->n - i - 1));
	s->n--;
}

/* Release every tensor. */
void
fixture_free_tensors(fixture_tensors *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->t[i].data);
	free(s->t);
	s->t = NULL;
	s->n = 0;
}

/* Append the tensors of a tiny Llama checkpoint with mixed dtypes; layers after 0 go to shard 1. */
void
fixture_build_llama(fixture_tensors *s, const fixture_geom *g)
{
	int			hd = g->head_dim ? g->head_dim : g->hidden / g->heads;
	int64_t		q = (int64_t) g->heads * hd,
				kv = (int64_t) g->kv_heads * hd;
	char		n[128];

	fixture_add_tensor(s, "model.embed_tokens.weight", "BF16", g->vocab, g->hidden, 0);
	for (int l = 0; l < g->layers; l++)
	{
		int			sh = l == 0 ? 0 : 1;

#define T(suffix, dt, r, c) \
		do { \
			snprintf(n, sizeof(n), "model.layers.%d.%s", l, suffix); \
			fixture_add_tensor(s, n, dt, r, c, sh); \
		} while (0)
		T("input_layernorm.weight", l % 2 ? "BF16" : "F16", g->hidden, 0);
		T("self_attn.q_proj.weight", "F16", q, g->hidden);
		T("self_attn.k_proj.weight", "F16", kv, g->hidden);
		T("self_attn.v_proj.weight", "F32", kv, g->hidden);
		T("self_attn.o_proj.weight", "F16", g->hidden, q);
		T("post_attention_layernorm.weight", l % 2 ? "F16" : "BF16", g->hidden, 0);
		T("mlp.gate_proj.weight", "BF16", g->inter, g->hidden);
		T("mlp.up_proj.weight", "BF16", g->inter, g->hidden);
		T("mlp.down_proj.weight", "BF16", g->hidden, g->inter);
#undef T
	}
	fixture_add_tensor(s, "model.norm.weight", "F32", g->hidden, 0, 1);
	if (g->lm_head)
		fixture_add_tensor(s, "lm_head.weight", "F32", g->vocab, g->hidden, 1);
}

/* Append printf-formatted text to a buffer. */
static void
Bprintf(cbllm_buf *b, const char *fmt,...)
{
	char		tmp[4096];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	cbllm_buf_append(b, tmp, (size_t) n);
}

/* Write shard's tensors (all when shard < 0) as dir/name, less the last drop_tail bytes. */
bool
fixture_write_safetensors(const char *dir, const char *name, const fixture_tensors *s, int shard,
						  size_t drop_tail)
{
	cbllm_buf	hdr = {0},
				file = {0};
	size_t		off = 0;
	unsigned char len8[8];
	uint64_t	hlen;
	bool		ok;

	Bprintf(&hdr, "{\"__metadata__\": {\"format\": \"pt\"}");
	for (int i = 0; i < s->n; i++)
	{
		const fixture_tensor *t = &s->t[i];

		if (shard >= 0 && t->shard != shard)
			continue;
		Bprintf(&hdr, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", t->name, t->dtype);
		for (int d = 0; d < t->ndim; d++)
			Bprintf(&hdr, "%s%lld", d ? ", " : "", (long long) t->shape[d]);
		Bprintf(&hdr, "], \"data_offsets\": [%zu, %zu]}", off, off + t->nbytes);
		off += t->nbytes;
	}
	Bprintf(&hdr, "}");
	while (hdr.len % 8 != 0)
		Bprintf(&hdr, " ");
	hlen = hdr.len;
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char) (hlen >> (8 * i));
	cbllm_buf_append(&file, len8, 8);
	cbllm_buf_append(&file, hdr.data, hdr.len);
	for (int i = 0; i < s->n; i++)
		if (shard < 0 || s->t[i].shard == shard)
			cbllm_buf_append(&file, s->t[i].data, s->t[i].nbytes);
	ok = fixture_write_bytes(dir, name, file.data, file.len - drop_tail);
	cbllm_buf_free(&hdr);
	cbllm_buf_free(&file);
	return ok;
}

/* Write model.safetensors.index.json mapping every tensor to its shard. */
bool
fixture_write_index(const char *dir, const fixture_tensors *s)
{
	cbllm_buf	b = {0};
	size_t		total = 0;
	bool		ok;

	for (int i = 0; i < s->n; i++)
		total += s->t[i].nbytes;
	Bprintf(&b, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n  \"weight_map\": {", total);
	for (int i = 0; i < s->n; i++)
		Bprintf(&b, "%s\n    \"%s\": \"%s\"", i ? "," : "", s->t[i].name,
				fixture_shard_names[s->t[i].shard]);
	Bprintf(&b, "\n  }\n}\n");
	ok = fixture_write_text(dir, "model.safetensors.index.json", b.data);
	cbllm_buf_free(&b);
	return ok;
}

/* config.json of g; act NULL: no hidden_act; extra: more members, each ", "-prefixed. */
char *
fixture_config_json(const fixture_geom *g, const char *arch, const char *act, const char *extra)
{
	cbllm_buf	b = {0};

	Bprintf(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"llama\",\n", arch);
	if (act != NULL)
		Bprintf(&b, "  \"hidden_act\": \"%s\",\n", act);
	Bprintf(&b, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
			"  \"num_attention_heads\": %d,\n  \"num_hidden_layers\": %d,\n"
			"  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n",
			g->hidden, g->inter, g->heads, g->layers, g->kv_heads, g->vocab);
	if (g->head_dim)
		Bprintf(&b, "  \"head_dim\": %d,\n", g->head_dim);
	Bprintf(&b, "  \"max_position_embeddings\": 64,\n  \"rms_norm_eps\": 1e-06,\n"
			"  \"rope_theta\": 500000.0,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
			"  \"torch_dtype\": \"bfloat16\",\n  \"tie_word_embeddings\": %s%s\n}\n",
			g->tie ? "true" : "false", extra ? extra : "");
	return b.data;
}

/* Write config.json (LlamaForCausalLM, silu) and the weights, one file or two shards. */
bool
fixture_write_model(const char *dir, const fixture_geom *g, const fixture_tensors *s, bool sharded)
{
	char	   *cfg = fixture_config_json(g, "LlamaForCausalLM", "silu", NULL);
	bool		ok = fixture_write_text(dir, "config.json", cfg);

	free(cfg);
	if (sharded)
		return ok && fixture_write_safetensors(dir, fixture_shard_names[0], s, 0, 0) &&
			fixture_write_safetensors(dir, fixture_shard_names[1], s, 1, 0) &&
			fixture_write_index(dir, s);
	return ok && fixture_write_safetensors(dir, "model.safetensors", s, -1, 0);
}

/* Write the pair into two new case directories; whether both were written. */
bool
fixture_pair_write(fixture_pair *p)
{
	bool		ok;

	memset(p, 0, sizeof(*p));
	fixture_build_llama(&p->s, &fixture_tiny);
	p->single = fixture_case_dir("single");
	p->sharded = fixture_case_dir("sharded");
	ok = fixture_write_model(p->single, &fixture_tiny, &p->s, false);
	return fixture_write_model(p->sharded, &fixture_tiny, &p->s, true) && ok;
}

/* Release the pair's tensors and paths. */
void
fixture_pair_free(fixture_pair *p)
{
	fixture_free_tensors(&p->s);
	free(p->single);
	free(p->sharded);
}

/* The config.json of meta-llama/Llama-2-7b-chat-hf as HuggingFace ships it. */
const char *const fixture_llama2_7b_chat =
"{\n"
"  \"_name_or_path\": \"meta-llama/Llama-2-7b-chat-hf\",\n"
"  \"architectures\": [\n"
"    \"LlamaForCausalLM\"\n"
"  ],\n"
"  \"bos_token_id\": 1,\n"
"  \"eos_token_id\": 2,\n"
"  \"hidden_act\": \"silu\",\n"
"  \"hidden_size\": 4096,\n"
"  \"initializer_range\": 0.02,\n"
"  \"intermediate_size\": 11008,\n"
"  \"max_position_embeddings\": 4096,\n"
"  \"model_type\": \"llama\",\n"
"  \"num_attention_heads\": 32,\n"
"  \"num_hidden_layers\": 32,\n"
"  \"num_key_value_heads\": 32,\n"
"  \"pretraining_tp\": 1,\n"
"  \"rms_norm_eps\": 1e-05,\n"
"  \"rope_scaling\": null,\n"
"  \"tie_word_embeddings\": false,\n"
"  \"torch_dtype\": \"float16\",\n"
"  \"transformers_version\": \"4.32.0.dev0\",\n"
"  \"use_cache\": true,\n"
"  \"vocab_size\": 32000\n"
"}\n";

/* The config.json of TinyLlama/TinyLlama-1.1B-Chat-v1.0. */
const char *const fixture_tinyllama_chat =
"{\n"
"  \"architectures\": [\n"
"    \"LlamaForCausalLM\"\n"
"  ],\n"
"  \"attention_bias\": false,\n"
"  \"bos_token_id\": 1,\n"
"  \"eos_token_id\": 2,\n"
"  \"hidden_act\": \"silu\",\n"
"  \"hidden_size\": 2048,\n"
"  \"initializer_range\": 0.02,\n"
"  \"intermediate_size\": 5632,\n"
"  \"max_position_embeddings\": 2048,\n"
"  \"model_type\": \"llama\",\n"
"  \"num_attention_heads\": 32,\n"
"  \"num_hidden_layers\": 22,\n"
"  \"num_key_value_heads\": 4,\n"
"  \"pretraining_tp\": 1,\n"
"  \"rms_norm_eps\": 1e-05,\n"
"  \"rope_scaling\": null,\n"
"  \"rope_theta\": 10000.0,\n"
"  \"tie_word_embeddings\": false,\n"
"  \"torch_dtype\": \"bfloat16\",\n"
"  \"transformers_version\": \"4.35.0\",\n"
"  \"use_cache\": true,\n"
"  \"vocab_size\": 32000\n"
"}\n";

/* The config.json of mistralai/Mistral-7B-v0.1. */
const char *const fixture_mistral_7b =
"{\n"
"  \"architectures\": [\n"
"    \"MistralForCausalLM\"\n"
"  ],\n"
"  \"bos_token_id\": 1,\n"
"  \"eos_token_id\": 2,\n"
"  \"hidden_act\": \"silu\",\n"
"  \"hidden_size\": 4096,\n"
"  \"initializer_range\": 0.02,\n"
"  \"intermediate_size\": 14336,\n"
"  \"max_position_embeddings\": 32768,\n"
"  \"model_type\": \"mistral\",\n"
"  \"num_attention_heads\": 32,\n"
"  \"num_hidden_layers\": 32,\n"
"  \"num_key_value_heads\": 8,\n"
"  \"rms_norm_eps\": 1e-05,\n"
"  \"rope_theta\": 10000.0,\n"
"  \"sliding_window\": 4096,\n"
"  \"tie_word_embeddings\": false,\n"
"  \"torch_dtype\": \"bfloat16\",\n"
"  \"transformers_version\": \"4.34.0.dev0\",\n"
"  \"use_cache\": true,\n"
"  \"vocab_size\": 32000\n"
"}\n";
