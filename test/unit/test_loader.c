/*
 * test_loader.c: unit tests of model loading: config.json parsing
 * (model_config_load), safetensors archives (st_open_dir), and binding the
 * weights to the Llama layer structure (model_load), and the dummy load
 * format, whose weights come from config.json alone (model_load_ex).
 *
 * Every fixture is written by this file into a mkdtemp() directory under
 * /tmp, removed at the end: tiny Llama checkpoints with F32, F16 and BF16
 * tensors, sharded and single-file, and one malformed variant per error case.
 * The configs of Llama-2-7b-chat-hf, TinyLlama-1.1B-Chat-v1.0 and
 * Mistral-7B-v0.1 are reproduced as HuggingFace ships them.
 */
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "safetensors.h"
#include "tap.h"

/* One tensor to write into a safetensors file. */
typedef struct tspec
{
	char		name[96];
	const char *dtype;			/* written verbatim: "F32", "F16", "BF16", "I64"... */
	int			ndim;
	int64_t		shape[4];
	int			seed;			/* element i holds val(seed, i) */
	unsigned char *data;
	size_t		nbytes;			/* written verbatim into data_offsets */
	int			shard;			/* 0 or 1 in a sharded checkpoint */
} tspec;

/* A growable list of tensors. */
typedef struct tspecs
{
	tspec	   *t;
	int			n;
} tspecs;

/* The geometry of a tiny Llama checkpoint. */
typedef struct geom
{
	int			hidden;
	int			layers;
	int			heads;
	int			kv_heads;
	int			head_dim;		/* 0: not in config.json (hidden / heads) */
	int			inter;
	int			vocab;
	bool		tie;			/* tie_word_embeddings in config.json */
	bool		lm_head;		/* write lm_head.weight */
} geom;

static char root[] = "/tmp/cbllm_loader_XXXXXX";
static int	n_cases = 0;

/* The value of element i of the tensor with the given seed: exact in F16 and BF16. */
static float
val(int seed, int64_t i)
{
	return (float) ((seed * 7 + i * 3) % 61 - 30) * 0.125f;
}

/* IEEE half bits of v, which must be zero or a normal half with a short mantissa. */
static uint16_t
f16_bits(float v)
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
bf16_bits(float v)
{
	uint32_t	u;

	memcpy(&u, &v, 4);
	return (uint16_t) (u >> 16);
}

/* Number of elements of a tensor spec. */
static int64_t
spec_elems(const tspec *t)
{
	int64_t		n = 1;

	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

/* Append a tensor of shape (r) or (r, c) filled from val(seed, i) in the given dtype. */
static tspec *
add_tensor(tspecs *s, const char *name, const char *dtype, int64_t r, int64_t c, int shard)
{
	tspec	   *t;
	int64_t		n;
	size_t		esz = strcmp(dtype, "F32") == 0 ? 4 : strcmp(dtype, "I64") == 0 ? 8 : 2;

	s->t = realloc(s->t, sizeof(tspec) * (s->n + 1));
	t = &s->t[s->n];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->dtype = dtype;
	t->ndim = c > 0 ? 2 : 1;
	t->shape[0] = r;
	t->shape[1] = c;
	t->seed = s->n + 1;
	t->shard = shard;
	n = spec_elems(t);
	t->nbytes = (size_t) n * esz;
	t->data = calloc(1, t->nbytes + 1);
	for (int64_t i = 0; i < n; i++)
	{
		float		v = val(t->seed, i);
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
			h = strcmp(dtype, "F16") == 0 ? f16_bits(v) : bf16_bits(v);
			memcpy(t->data + 2 * i, &h, 2);
		}
	}
	s->n++;
	return t;
}

/* Find a tensor spec by name, or NULL. */
static tspec *
find_spec(tspecs *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->t[i].name, name) == 0)
			return &s->t[i];
	return NULL;
}

/* Remove a tensor spec by name. */
static void
remove_spec(tspecs *s, const char *name)
{
	tspec	   *t = find_spec(s, name);
	int			i;

	if (t == NULL)
		return;
	i = (int) (t - s->t);
	free(t->data);
	memmove(&s->t[i], &s->t[i + 1], sizeof(tspec) * (s->n - i - 1));
	s->n--;
}

/* Release every tensor spec. */
static void
free_specs(tspecs *s)
{
	for (int i = 0; i < s->n; i++)
		free(s->t[i].data);
	free(s->t);
	s->t = NULL;
	s->n = 0;
}

/* Build the tensors of a tiny Llama checkpoint with mixed dtypes. */
static void
build_model(tspecs *s, const geom *g)
{
	int			hd = g->head_dim ? g->head_dim : g->hidden / g->heads;
	int64_t		q = (int64_t) g->heads * hd,
				kv = (int64_t) g->kv_heads * hd;
	char		n[128];

	add_tensor(s, "model.embed_tokens.weight", "BF16", g->vocab, g->hidden, 0);
	for (int l = 0; l < g->layers; l++)
	{
		int			sh = l == 0 ? 0 : 1;

#define T(suffix, dt, r, c) \
		do { \
			snprintf(n, sizeof(n), "model.layers.%d.%s", l, suffix); \
			add_tensor(s, n, dt, r, c, sh); \
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
	add_tensor(s, "model.norm.weight", "F32", g->hidden, 0, 1);
	if (g->lm_head)
		add_tensor(s, "lm_head.weight", "F32", g->vocab, g->hidden, 1);
}

/* Append printf-formatted text to a buffer. */
static void
bprintf(cbllm_buf *b, const char *fmt,...)
{
	char		tmp[4096];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	cbllm_buf_append(b, tmp, (size_t) n);
}

/* Write n bytes to dir/name; returns whether it worked. */
static bool
write_bytes(const char *dir, const char *name, const void *data, size_t n)
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

/* Write a NUL-terminated text to dir/name. */
static bool
write_text(const char *dir, const char *name, const char *text)
{
	return write_bytes(dir, name, text, strlen(text));
}

/*
 * Write the tensors of shard (or all of them when shard < 0) as the
 * safetensors file dir/name, leaving out the last drop_tail bytes.
 */
static bool
write_st(const char *dir, const char *name, const tspecs *s, int shard, size_t drop_tail)
{
	cbllm_buf	hdr = {0},
				file = {0};
	size_t		off = 0;
	unsigned char len8[8];
	uint64_t	hlen;
	bool		ok;

	bprintf(&hdr, "{\"__metadata__\": {\"format\": \"pt\"}");
	for (int i = 0; i < s->n; i++)
	{
		const tspec *t = &s->t[i];

		if (shard >= 0 && t->shard != shard)
			continue;
		bprintf(&hdr, ", \"%s\": {\"dtype\": \"%s\", \"shape\": [", t->name, t->dtype);
		for (int d = 0; d < t->ndim; d++)
			bprintf(&hdr, "%s%lld", d ? ", " : "", (long long) t->shape[d]);
		bprintf(&hdr, "], \"data_offsets\": [%zu, %zu]}", off, off + t->nbytes);
		off += t->nbytes;
	}
	bprintf(&hdr, "}");
	while (hdr.len % 8 != 0)
		bprintf(&hdr, " ");
	hlen = hdr.len;
	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char) (hlen >> (8 * i));
	cbllm_buf_append(&file, len8, 8);
	cbllm_buf_append(&file, hdr.data, hdr.len);
	for (int i = 0; i < s->n; i++)
		if (shard < 0 || s->t[i].shard == shard)
			cbllm_buf_append(&file, s->t[i].data, s->t[i].nbytes);
	ok = write_bytes(dir, name, file.data, file.len - drop_tail);
	cbllm_buf_free(&hdr);
	cbllm_buf_free(&file);
	return ok;
}

/* The shard file names of a two-shard checkpoint. */
static const char *const shard_names[2] = {
	"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
};

/* Write model.safetensors.index.json mapping every tensor to its shard. */
static bool
write_index(const char *dir, const tspecs *s)
{
	cbllm_buf	b = {0};
	size_t		total = 0;
	bool		ok;

	for (int i = 0; i < s->n; i++)
		total += s->t[i].nbytes;
	bprintf(&b, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n  \"weight_map\": {", total);
	for (int i = 0; i < s->n; i++)
		bprintf(&b, "%s\n    \"%s\": \"%s\"", i ? "," : "", s->t[i].name,
				shard_names[s->t[i].shard]);
	bprintf(&b, "\n  }\n}\n");
	ok = write_text(dir, "model.safetensors.index.json", b.data);
	cbllm_buf_free(&b);
	return ok;
}

/* A config.json for a tiny checkpoint; extra holds more members (each ", "-prefixed). */
static char *
config_json(const geom *g, const char *arch, const char *act, const char *extra)
{
	cbllm_buf	b = {0};

	bprintf(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"llama\",\n", arch);
	if (act != NULL)
		bprintf(&b, "  \"hidden_act\": \"%s\",\n", act);
	bprintf(&b, "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
			"  \"num_attention_heads\": %d,\n  \"num_hidden_layers\": %d,\n"
			"  \"num_key_value_heads\": %d,\n  \"vocab_size\": %d,\n",
			g->hidden, g->inter, g->heads, g->layers, g->kv_heads, g->vocab);
	if (g->head_dim)
		bprintf(&b, "  \"head_dim\": %d,\n", g->head_dim);
	bprintf(&b, "  \"max_position_embeddings\": 64,\n  \"rms_norm_eps\": 1e-06,\n"
			"  \"rope_theta\": 500000.0,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n"
			"  \"torch_dtype\": \"bfloat16\",\n  \"tie_word_embeddings\": %s%s\n}\n",
			g->tie ? "true" : "false", extra ? extra : "");
	return b.data;
}

/* Make a new empty fixture directory under the root; caller frees the path. */
static char *
case_dir(const char *label)
{
	char		name[128];
	char	   *dir;

	snprintf(name, sizeof(name), "%02d-%s", ++n_cases, label);
	dir = cbllm_path_join(root, name);
	if (mkdir(dir, 0700) != 0)
		TAP_DIAG("mkdir %s failed", dir);
	return dir;
}

/* Write config.json and the weights (single file or two shards) of a checkpoint. */
static bool
write_model(const char *dir, const geom *g, const tspecs *s, bool sharded)
{
	char	   *cfg = config_json(g, "LlamaForCausalLM", "silu", NULL);
	bool		ok = write_text(dir, "config.json", cfg);

	free(cfg);
	if (sharded)
		return ok && write_st(dir, shard_names[0], s, 0, 0) &&
			write_st(dir, shard_names[1], s, 1, 0) && write_index(dir, s);
	return ok && write_st(dir, "model.safetensors", s, -1, 0);
}

/* Whether the error message contains every non-NULL needle; print it otherwise. */
static bool
msg_has(const cbllm_err *err, const char *a, const char *b, const char *c)
{
	const char *needles[3] = {a, b, c};

	for (int i = 0; i < 3; i++)
		if (needles[i] != NULL && strstr(err->msg, needles[i]) == NULL)
		{
			TAP_DIAG("message \"%s\" lacks \"%s\"", err->msg, needles[i]);
			return false;
		}
	return true;
}

/* Check a failed call: a negative status and a message holding the needles. */
static void
expect_fail(const char *what, int rc, const cbllm_err *err, const char *a, const char *b,
			const char *c)
{
	if (rc >= 0)
		TAP_DIAG("%s: returned %d", what, rc);
	TAP_OK(rc < 0 && msg_has(err, a, b, c), "%s fails (%s): %s", what,
		   cbllm_status_name(rc), err->msg);
}

/* Whether a bound weight is the given tensor spec: dtype, shape and bytes. */
static bool
weight_is(const cbllm_weight *w, const tspec *t)
{
	const char *dt = cbllm_dtype_name(w->dtype);

	return t != NULL && w->data != NULL && strcmp(dt, t->dtype) == 0 && t->ndim == 2 &&
		w->rows == t->shape[0] && w->cols == t->shape[1] &&
		memcmp(w->data, t->data, t->nbytes) == 0;
}

/* Whether a converted norm holds the values written for the tensor spec. */
static bool
norm_is(const float *v, const tspec *t)
{
	if (v == NULL || t == NULL)
		return false;
	for (int64_t i = 0; i < t->shape[0]; i++)
		if (v[i] != val(t->seed, i))
			return false;
	return true;
}

/* Whether every tensor spec is in the archive with its dtype, shape and bytes. */
static bool
archive_matches(const st_archive *ar, const tspecs *s)
{
	if (ar->n_tensors != s->n)
	{
		TAP_DIAG("archive has %d tensors, %d written", ar->n_tensors, s->n);
		return false;
	}
	for (int i = 0; i < s->n; i++)
	{
		const tspec *w = &s->t[i];
		const st_tensor *t = st_find(ar, w->name);
		bool		ok = t != NULL && strcmp(cbllm_dtype_name(t->dtype), w->dtype) == 0 &&
			t->ndim == w->ndim && t->nbytes == w->nbytes &&
			memcmp(t->data, w->data, w->nbytes) == 0;

		for (int d = 0; ok && d < w->ndim; d++)
			ok = t->shape[d] == w->shape[d];
		if (!ok)
		{
			TAP_DIAG("tensor %s differs from what was written", w->name);
			return false;
		}
	}
	return true;
}

/* Check every layer's bound weights and norms against the specs. */
static bool
layers_match(const cbllm_model *m, tspecs *s)
{
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		const cbllm_layer *L = &m->layers[l];
		const cbllm_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
		const char *wn[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
		"self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
		char		n[128];

		for (int k = 0; k < 7; k++)
		{
			snprintf(n, sizeof(n), "model.layers.%d.%s.weight", l, wn[k]);
			if (!weight_is(ws[k], find_spec(s, n)))
			{
				TAP_DIAG("layer %d: %s is not bound to its tensor", l, n);
				return false;
			}
		}
		snprintf(n, sizeof(n), "model.layers.%d.input_layernorm.weight", l);
		if (!norm_is(L->attn_norm, find_spec(s, n)))
			return false;
		snprintf(n, sizeof(n), "model.layers.%d.post_attention_layernorm.weight", l);
		if (!norm_is(L->mlp_norm, find_spec(s, n)))
			return false;
	}
	return true;
}

/* Bytes and elements of the layer matrices (and lm_head) as written. */
static void
count_specs(const tspecs *s, size_t *layer_bytes, int64_t *layer_elems)
{
	*layer_bytes = 0;
	*layer_elems = 0;
	for (int i = 0; i < s->n; i++)
		if (s->t[i].ndim == 2 && strncmp(s->t[i].name, "model.layers.", 13) == 0)
		{
			*layer_bytes += s->t[i].nbytes;
			*layer_elems += spec_elems(&s->t[i]);
		}
}

static const geom tiny = {16, 2, 4, 2, 0, 24, 32, false, true};

/* A valid tiny untied GQA model loads with every field and tensor bound. */
static void
test_valid_model(void)
{
	char	   *dir = case_dir("valid");
	tspecs		s = {0};
	cbllm_model_config cfg;
	cbllm_model *m = NULL;
	st_archive *ar = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	size_t		lb;
	int64_t		le;

	build_model(&s, &tiny);
	TAP_OK(write_model(dir, &tiny, &s, false), "write the tiny model fixture");
	rc = model_config_load(dir, &cfg, &err);
	TAP_OK(rc == CBLLM_OK, "model_config_load of the tiny model succeeds %s", err.msg);
	TAP_OK(strcmp(cfg.arch, "LlamaForCausalLM") == 0 && cfg.hidden == 16 && cfg.n_layers == 2 &&
		   cfg.n_heads == 4 && cfg.n_kv_heads == 2 && cfg.intermediate == 24 &&
		   cfg.vocab_size == 32, "tiny config: arch and sizes as written");
	TAP_OK(cfg.head_dim == 4, "tiny config: head_dim derived as hidden / heads = 4 (got %d)",
		   cfg.head_dim);
	TAP_OK(cfg.max_pos == 64 && cfg.rope_theta == 500000.0f && cfg.rms_eps == 1e-6f &&
		   cfg.rope_scale == 1.0f && cfg.sliding_window == 0,
		   "tiny config: max_pos 64, rope_theta 500000, rms_eps 1e-6, no rope scaling, no window");
	TAP_OK(cfg.bos_id == 1 && cfg.eos_id == 2 && !cfg.tie_embeddings,
		   "tiny config: bos 1, eos 2, untied");

	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc == CBLLM_OK && ar->n_files == 1, "st_open_dir opens model.safetensors %s", err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(archive_matches(ar, &s),
			   "st_open_dir: all %d F32/F16/BF16 tensors have the written dtype, shape and bytes", s.n);
		TAP_OK(st_find(ar, "model.layers.2.mlp.up_proj.weight") == NULL &&
			   st_find(ar, "model.embed_tokens") == NULL,
			   "st_find returns NULL for absent names and prefixes");
		st_close(ar);
	}

	rc = model_load(dir, &m, &err);
	TAP_OK(rc == CBLLM_OK, "model_load of the tiny model succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(m->cfg.hidden == 16 && m->cfg.n_kv_heads == 2 && m->cfg.head_dim == 4,
			   "model_load fills the config");
		TAP_OK(weight_is(&m->embed, find_spec(&s, "model.embed_tokens.weight")) &&
			   m->embed.dtype == CBLLM_BF16 && m->embed.rows == 32 && m->embed.cols == 16,
			   "embed is the BF16 (vocab 32, hidden 16) model.embed_tokens.weight");
		TAP_OK(weight_is(&m->lm_head, find_spec(&s, "lm_head.weight")) &&
			   m->lm_head.dtype == CBLLM_F32 && m->lm_head.data != m->embed.data,
			   "untied: lm_head is the F32 lm_head.weight, not the embedding");
		TAP_OK(m->layers[1].wq.rows == 16 && m->layers[1].wq.cols == 16 &&
			   m->layers[1].wk.rows == 8 && m->layers[1].wk.cols == 16 &&
			   m->layers[1].wv.rows == 8 && m->layers[1].wo.rows == 16 &&
			   m->layers[1].wo.cols == 16,
			   "GQA shapes: q (4 heads x 4, 16), k and v (2 heads x 4 = 8, 16), o (16, 16)");
		TAP_OK(m->layers[0].w_gate.rows == 24 && m->layers[0].w_gate.cols == 16 &&
			   m->layers[0].w_up.rows == 24 && m->layers[0].w_down.rows == 16 &&
			   m->layers[0].w_down.cols == 24,
			   "MLP shapes: gate and up (24, 16), down (16, 24)");
		TAP_OK(layers_match(m, &s),
			   "every layer matrix is bound to its tensor's bytes; F16/BF16 norms convert exactly");
		TAP_OK(norm_is(m->final_norm, find_spec(&s, "model.norm.weight")),
			   "the F32 final norm holds the written values");
		count_specs(&s, &lb, &le);
		TAP_OK(m->weight_bytes == lb + 32 * 16 * 2 + 32 * 16 * 4,
			   "weight_bytes counts layer matrices, embedding and lm_head (%zu)", m->weight_bytes);
		TAP_OK(m->step_weight_bytes == lb + 32 * 16 * 4 && m->matmul_params == le + 32 * 16,
			   "step_weight_bytes and matmul_params count layer matrices and lm_head");
		model_free(m);
	}
	free_specs(&s);
	free(dir);
}

/* Tied embeddings: without lm_head.weight the embedding serves; untied it is required. */
static void
test_tied(void)
{
	geom		g = tiny;
	char	   *dir = case_dir("tied");
	tspecs		s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	size_t		lb;
	int64_t		le;

	g.tie = true;
	g.lm_head = false;
	build_model(&s, &g);
	write_model(dir, &g, &s, false);
	rc = model_load(dir, &m, &err);
	TAP_OK(rc == CBLLM_OK, "tied model without lm_head.weight loads %s", err.msg);
	if (rc == CBLLM_OK)
	{
		count_specs(&s, &lb, &le);
		TAP_OK(m->cfg.tie_embeddings && m->lm_head.data == m->embed.data &&
			   m->lm_head.dtype == m->embed.dtype && m->lm_head.rows == 32 &&
			   m->lm_head.cols == 16, "tied: lm_head is the embedding matrix");
		TAP_OK(m->weight_bytes == lb + 32 * 16 * 2,
			   "tied: weight_bytes counts the shared embedding once");
		TAP_OK(m->step_weight_bytes == lb + 32 * 16 * 2 && m->matmul_params == le + 32 * 16,
			   "tied: the step still reads the embedding as lm_head");
		model_free(m);
	}
	free_specs(&s);
	free(dir);

	/* untied and without lm_head.weight: an error naming the tensor */
	g.tie = false;
	dir = case_dir("untied-no-head");
	build_model(&s, &g);
	write_model(dir, &g, &s, false);
	m = NULL;
	rc = model_load(dir, &m, &err);
	expect_fail("untied model without lm_head.weight", rc, &err, "lm_head.weight", "missing", NULL);
	TAP_OK(m == NULL, "a failed model_load leaves the output untouched");
	free_specs(&s);
	free(dir);
}

/* An explicit head_dim with q width unlike hidden, and a single KV head (MQA). */
static void
test_head_dim(void)
{
	geom		g = {16, 1, 4, 1, 6, 20, 24, false, true};
	char	   *dir = case_dir("head-dim");
	tspecs		s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	build_model(&s, &g);
	write_model(dir, &g, &s, false);
	rc = model_load(dir, &m, &err);
	TAP_OK(rc == CBLLM_OK, "model with head_dim 6 (4 heads, hidden 16) and 1 KV head loads %s",
		   err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(m->cfg.head_dim == 6 && m->cfg.n_kv_heads == 1, "head_dim 6 from config.json");
		TAP_OK(m->layers[0].wq.rows == 24 && m->layers[0].wq.cols == 16 &&
			   m->layers[0].wk.rows == 6 && m->layers[0].wv.rows == 6 &&
			   m->layers[0].wo.rows == 16 && m->layers[0].wo.cols == 24,
			   "q (24, 16), k and v (6, 16), o (16, 24)");
		TAP_OK(layers_match(m, &s), "every tensor of the head_dim model is bound");
		model_free(m);
	}
	free_specs(&s);
	free(dir);

	/* the transposed o_proj: same byte count, wrong shape */
	dir = case_dir("head-dim-transposed");
	build_model(&s, &g);
	find_spec(&s, "model.layers.0.self_attn.o_proj.weight")->shape[0] = 24;
	find_spec(&s, "model.layers.0.self_attn.o_proj.weight")->shape[1] = 16;
	write_model(dir, &g, &s, false);
	rc = model_load(dir, &m, &err);
	expect_fail("o_proj stored transposed (24, 16)", rc, &err, "wrong shape",
				"model.layers.0.self_attn.o_proj.weight", "[16, 24]");
	free_specs(&s);
	free(dir);
}

/* A two-shard checkpoint with an index loads the same bytes as the single file. */
static void
test_sharded(void)
{
	char	   *one = case_dir("single");
	char	   *two = case_dir("sharded");
	tspecs		s = {0};
	st_archive *a1 = NULL,
			   *a2 = NULL;
	cbllm_model *m1 = NULL,
			   *m2 = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	bool		same = true,
				in_shard = true;

	build_model(&s, &tiny);
	write_model(one, &tiny, &s, false);
	TAP_OK(write_model(two, &tiny, &s, true), "write the two-shard fixture with its index");
	rc = st_open_dir(two, &a2, &err);
	TAP_OK(rc == CBLLM_OK && a2->n_files == 2, "st_open_dir opens the index and 2 shards %s",
		   err.msg);
	if (rc != CBLLM_OK)
		goto done;
	TAP_OK(archive_matches(a2, &s), "sharded: every tensor has the written dtype, shape and bytes");
	for (int i = 0; i < s.n; i++)
	{
		const st_tensor *t = st_find(a2, s.t[i].name);
		const char *p = t ? a2->files[t->file].path : "";
		const char *want = shard_names[s.t[i].shard];

		if (t == NULL || strlen(p) < strlen(want) || strcmp(p + strlen(p) - strlen(want), want) != 0)
			in_shard = false;
	}
	TAP_OK(in_shard, "sharded: each tensor comes from the shard the index names");
	rc = st_open_dir(one, &a1, &err);
	if (rc == CBLLM_OK)
		for (int i = 0; i < a1->n_tensors; i++)
		{
			const st_tensor *x = &a1->tensors[i],
					   *y = st_find(a2, x->name);

			if (y == NULL || y->nbytes != x->nbytes || y->dtype != x->dtype ||
				memcmp(x->data, y->data, x->nbytes) != 0)
				same = false;
		}
	TAP_OK(rc == CBLLM_OK && same && a1->n_tensors == a2->n_tensors,
		   "sharded and single-file archives hold the same tensor bytes");
	rc = model_load(one, &m1, &err);
	if (rc == CBLLM_OK)
		rc = model_load(two, &m2, &err);
	TAP_OK(rc == CBLLM_OK, "model_load of the sharded model succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		TAP_OK(memcmp(m1->embed.data, m2->embed.data, 32 * 16 * 2) == 0 &&
			   memcmp(m1->lm_head.data, m2->lm_head.data, 32 * 16 * 4) == 0 &&
			   memcmp(m1->layers[1].w_down.data, m2->layers[1].w_down.data, 16 * 24 * 2) == 0 &&
			   memcmp(m1->final_norm, m2->final_norm, 16 * 4) == 0 &&
			   m1->weight_bytes == m2->weight_bytes && layers_match(m2, &s),
			   "sharded and single-file models bind the same bytes");
	}
done:
	model_free(m1);
	model_free(m2);
	st_close(a1);
	st_close(a2);
	free_specs(&s);
	free(one);
	free(two);
}

/* Write a tiny model whose config.json is text, then check model_config_load fails. */
static void
config_case(const char *label, const char *text, const char *n1, const char *n2)
{
	char	   *dir = case_dir(label);
	char	   *path = cbllm_path_join(dir, "config.json");
	cbllm_model_config cfg;
	cbllm_err	err = {{0}};
	int			rc;

	if (text != NULL)
		write_text(dir, "config.json", text);
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
test_bad_configs(void)
{
	geom		g = tiny;
	char	   *t;
	char	   *dir;
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	config_case("missing config.json", NULL, "cannot open", NULL);
	config_case("config.json not JSON", "{\"hidden_size\": 16,,}", "invalid JSON", NULL);
	config_case("config.json a JSON array", "[1, 2, 3]", "JSON", NULL);
	t = config_json(&g, "GPT2LMHeadModel", "gelu_new", NULL);
	config_case("architecture GPT2LMHeadModel", t, "unsupported architecture", "GPT2LMHeadModel");
	free(t);
	t = config_json(&g, "LlamaForCausalLM", "gelu", NULL);
	config_case("hidden_act gelu", t, "hidden_act", "unsupported");
	free(t);
	g.hidden = 18;
	t = config_json(&g, "LlamaForCausalLM", "silu", NULL);
	config_case("hidden_size 18 with 4 heads", t, "hidden_size 18",
				"num_attention_heads 4");
	free(t);
	g = tiny;
	g.kv_heads = 3;
	t = config_json(&g, "LlamaForCausalLM", "silu", NULL);
	config_case("4 heads with 3 KV heads", t, "num_key_value_heads 3", "multiple");
	free(t);
	g = tiny;
	g.head_dim = 5;
	t = config_json(&g, "LlamaForCausalLM", "silu", NULL);
	config_case("odd head_dim 5", t, "head_dim 5", NULL);
	free(t);
	config_case("no vocab_size",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24}",
				"\"vocab_size\"", "missing");
	config_case("hidden_size a string",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": \"16\","
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32}", "\"hidden_size\"", "integer");
	/* found by fuzzing: a size beyond long long's range was cast before the range check */
	config_case("hidden_size 1e30 (beyond any integer type)",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 1e30,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32}", "\"hidden_size\"", "integer");
	/* found by fuzzing: positive numbers that are 0 or infinite as floats */
	config_case("rms_norm_eps 1e-85 (0 as a float)",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32, \"rms_norm_eps\": 1e-85}", "\"rms_norm_eps\"", "float range");
	config_case("rope_theta 1e39 (infinite as a float)",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32, \"rope_theta\": 1e39}", "\"rope_theta\"", "float range");
	config_case("num_hidden_layers 0",
				"{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
				" \"num_hidden_layers\": 0, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
				" \"vocab_size\": 32}", "\"num_hidden_layers\"", NULL);
	config_case("no architectures or model_type",
				"{\"hidden_size\": 16, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
				" \"intermediate_size\": 24, \"vocab_size\": 32}", "architecture", NULL);
	t = config_json(&tiny, "LlamaForCausalLM", "silu", ", \"attention_bias\": true");
	config_case("attention_bias true", t, "bias", NULL);
	free(t);

	/* model_load reports config errors too, before touching the weights */
	dir = case_dir("model-load-no-config");
	rc = model_load(dir, &m, &err);
	expect_fail("model_load without config.json", rc, &err, "config.json", "cannot open", NULL);
	TAP_OK(m == NULL, "model_load without config.json leaves the output untouched");
	free(dir);
}

/* rope_scaling: none and linear load; dynamic, llama3 and bad factors are unsupported. */
static void
test_rope_scaling(void)
{
	struct
	{
		const char *label;
		const char *json;
		float		scale;		/* 0: must fail as unsupported */
	}			cases[] = {
		{"rope_scaling null", ", \"rope_scaling\": null", 1.0f},
		{"rope_scaling linear factor 2", ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2}", 2.0f},
		{"rope_scaling rope_type linear factor 4.0", ", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0}", 4.0f},
		{"rope_scaling dynamic factor 2", ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}", 0},
		{"rope_scaling llama3", ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
		" \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", 0},
		{"rope_scaling linear without factor", ", \"rope_scaling\": {\"type\": \"linear\"}", 0},
		{"rope_scaling linear factor 0.5", ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 0.5}", 0},
	};

	for (int i = 0; i < (int) (sizeof(cases) / sizeof(cases[0])); i++)
	{
		char	   *dir = case_dir("rope");
		char	   *text = config_json(&tiny, "LlamaForCausalLM", "silu", cases[i].json);
		char	   *path = cbllm_path_join(dir, "config.json");
		cbllm_model_config cfg;
		cbllm_err	err = {{0}};
		int			rc;

		write_text(dir, "config.json", text);
		rc = model_config_load(dir, &cfg, &err);
		if (cases[i].scale > 0)
			TAP_OK(rc == CBLLM_OK && cfg.rope_scale == cases[i].scale,
				   "%s loads with rope_scale %g (got %g) %s", cases[i].label,
				   cases[i].scale, rc == CBLLM_OK ? cfg.rope_scale : -1.0, err.msg);
		else
			TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && msg_has(&err, path, "rope_scaling", NULL),
				   "%s is unsupported: %s", cases[i].label, err.msg);
		free(path);
		free(text);
		free(dir);
	}
}

/* The config.json of meta-llama/Llama-2-7b-chat-hf as HuggingFace ships it. */
static const char *llama2_7b_chat =
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
static const char *tinyllama_chat =
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
static const char *mistral_7b =
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

/* Parse a config text through model_config_load; returns the status. */
static int
load_config_text(const char *label, const char *text, cbllm_model_config *cfg, cbllm_err *err)
{
	char	   *dir = case_dir(label);
	int			rc;

	write_text(dir, "config.json", text);
	rc = model_config_load(dir, cfg, err);
	free(dir);
	return rc;
}

/* The shipped configs of three real models parse with the right fields. */
static void
test_real_configs(void)
{
	cbllm_model_config c;
	cbllm_err	err = {{0}};
	int			rc;

	rc = load_config_text("llama2", llama2_7b_chat, &c, &err);
	TAP_OK(rc == CBLLM_OK, "Llama-2-7b-chat-hf config.json loads %s", err.msg);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "LlamaForCausalLM") == 0 && c.hidden == 4096 &&
		   c.n_layers == 32 && c.n_heads == 32 && c.n_kv_heads == 32 && c.head_dim == 128 &&
		   c.intermediate == 11008 && c.vocab_size == 32000 && c.max_pos == 4096,
		   "Llama-2-7b: 4096 hidden, 32 layers, 32 heads, 32 KV heads, head_dim 128, 11008, 32000, 4096");
	TAP_OK(rc == CBLLM_OK && c.rope_theta == 10000.0f && c.rms_eps == 1e-5f &&
		   c.rope_scale == 1.0f && c.sliding_window == 0 && !c.tie_embeddings &&
		   c.bos_id == 1 && c.eos_id == 2,
		   "Llama-2-7b: rope_theta absent gives 10000, rms 1e-5, untied, bos 1, eos 2");

	rc = load_config_text("tinyllama", tinyllama_chat, &c, &err);
	TAP_OK(rc == CBLLM_OK, "TinyLlama-1.1B-Chat-v1.0 config.json loads %s", err.msg);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "LlamaForCausalLM") == 0 && c.hidden == 2048 &&
		   c.n_layers == 22 && c.n_heads == 32 && c.n_kv_heads == 4 && c.head_dim == 64 &&
		   c.intermediate == 5632 && c.vocab_size == 32000 && c.max_pos == 2048,
		   "TinyLlama: 2048 hidden, 22 layers, 32 heads, 4 KV heads, head_dim 64, 5632, 32000, 2048");
	TAP_OK(rc == CBLLM_OK && c.rope_theta == 10000.0f && c.rms_eps == 1e-5f &&
		   c.rope_scale == 1.0f && c.sliding_window == 0 && !c.tie_embeddings &&
		   c.bos_id == 1 && c.eos_id == 2,
		   "TinyLlama: rope_theta 10000, rms 1e-5, untied, bos 1, eos 2");

	rc = load_config_text("mistral", mistral_7b, &c, &err);
	TAP_OK(rc == CBLLM_OK, "Mistral-7B-v0.1 config.json loads %s", err.msg);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "MistralForCausalLM") == 0 && c.hidden == 4096 &&
		   c.n_layers == 32 && c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128 &&
		   c.intermediate == 14336 && c.vocab_size == 32000 && c.max_pos == 32768,
		   "Mistral-7B: 4096 hidden, 32 layers, 32 heads, 8 KV heads, head_dim 128, 14336, 32000, 32768");
	TAP_OK(rc == CBLLM_OK && c.rope_theta == 10000.0f && c.rms_eps == 1e-5f &&
		   c.sliding_window == 4096 && c.rope_scale == 1.0f && !c.tie_embeddings &&
		   c.bos_id == 1 && c.eos_id == 2,
		   "Mistral-7B: rope_theta 10000, sliding_window 4096, rms 1e-5, bos 1, eos 2");

	/* an eos_token_id list (Llama-3 style) takes its first element */
	rc = load_config_text("eos-list",
						  "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16,"
						  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
						  " \"intermediate_size\": 24, \"vocab_size\": 32,"
						  " \"bos_token_id\": 7, \"eos_token_id\": [9, 8, 3]}", &c, &err);
	TAP_OK(rc == CBLLM_OK && c.bos_id == 7 && c.eos_id == 9 && c.n_kv_heads == 4 &&
		   c.max_pos == 2048 && c.rope_theta == 10000.0f,
		   "eos_token_id list gives its first id; absent num_key_value_heads is num_attention_heads");
	rc = load_config_text("model-type-only",
						  "{\"model_type\": \"mistral\", \"hidden_size\": 16,"
						  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
						  " \"intermediate_size\": 24, \"vocab_size\": 32}", &c, &err);
	TAP_OK(rc == CBLLM_OK && strcmp(c.arch, "MistralForCausalLM") == 0 && c.bos_id == -1 &&
		   c.eos_id == -1, "model_type \"mistral\" alone names MistralForCausalLM; absent ids are -1");
}

/* Write the tiny model, let mangle change the specs, and expect model_load to fail. */
static void
weights_case(const char *label, void (*mangle) (tspecs *s), size_t drop_tail,
			 const char *n1, const char *n2, bool name_file)
{
	char	   *dir = case_dir(label);
	char	   *path = cbllm_path_join(dir, "model.safetensors");
	char	   *cfg = config_json(&tiny, "LlamaForCausalLM", "silu", NULL);
	tspecs		s = {0};
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	build_model(&s, &tiny);
	if (mangle)
		mangle(&s);
	write_text(dir, "config.json", cfg);
	write_st(dir, "model.safetensors", &s, -1, drop_tail);
	rc = model_load(dir, &m, &err);
	if (rc >= 0)
		TAP_DIAG("%s: returned %d", label, rc);
	TAP_OK(rc < 0 && m == NULL && msg_has(&err, name_file ? path : NULL, n1, n2),
		   "%s fails (%s): %s", label, cbllm_status_name(rc), err.msg);
	free_specs(&s);
	free(cfg);
	free(path);
	free(dir);
}

/* Shorten the data of the last layer's down_proj by one element. */
static void
mangle_short_bytes(tspecs *s)
{
	find_spec(s, "model.layers.1.mlp.down_proj.weight")->nbytes -= 2;
}

/* Declare the first layer's gate_proj as I64 (with 8-byte elements). */
static void
mangle_i64(tspecs *s)
{
	tspec	   *t = find_spec(s, "model.layers.0.mlp.gate_proj.weight");

	free(t->data);
	t->dtype = "I64";
	t->nbytes = (size_t) spec_elems(t) * 8;
	t->data = calloc(1, t->nbytes);
}

/* Remove the first layer's up_proj. */
static void
mangle_missing(tspecs *s)
{
	remove_spec(s, "model.layers.0.mlp.up_proj.weight");
}

/* Store the second layer's k_proj as (16, 8) instead of (8, 16). */
static void
mangle_shape(tspecs *s)
{
	tspec	   *t = find_spec(s, "model.layers.1.self_attn.k_proj.weight");

	t->shape[0] = 16;
	t->shape[1] = 8;
}

/* Store the final norm as a (1, 16) matrix. */
static void
mangle_norm_2d(tspecs *s)
{
	tspec	   *t = find_spec(s, "model.norm.weight");

	t->ndim = 2;
	t->shape[0] = 1;
	t->shape[1] = 16;
}

/* Remove the second layer's input norm. */
static void
mangle_missing_norm(tspecs *s)
{
	remove_spec(s, "model.layers.1.input_layernorm.weight");
}

/* Add an unused tensor whose shape overflows 64 bits to almost no bytes. */
static void
mangle_overflow(tspecs *s)
{
	tspec	   *t = add_tensor(s, "model.huge", "F32", 1, 1, 0);

	t->ndim = 4;
	t->shape[0] = t->shape[1] = t->shape[2] = t->shape[3] = 65536;	/* 2^64 elements */
	t->nbytes = 0;
}

/* Write a raw model.safetensors (with a valid config.json) and expect st_open_dir to fail. */
static void
raw_case(const char *label, const void *bytes, size_t n, const char *n1, const char *n2)
{
	char	   *dir = case_dir(label);
	char	   *path = cbllm_path_join(dir, "model.safetensors");
	st_archive *ar = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	write_bytes(dir, "model.safetensors", bytes, n);
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, path, n1, n2), "%s fails (%s): %s", label,
		   cbllm_status_name(rc), err.msg);
	free(path);
	free(dir);
}

/* Write a model.safetensors whose 120-byte header is json padded with spaces; expect failure. */
static void
raw_json_case(const char *label, const char *json, const char *n1, const char *n2)
{
	unsigned char buf[128];

	memset(buf, ' ', sizeof(buf));
	memset(buf, 0, 8);
	buf[0] = 120;
	memcpy(buf + 8, json, strlen(json));
	raw_case(label, buf, sizeof(buf), n1, n2);
}

/* Malformed safetensors files and checkpoints that do not match config.json. */
static void
test_bad_weights(void)
{
	char	   *dir;
	char	   *cfg;
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}};
	int			rc;
	unsigned char buf[64];

	/* no weights at all */
	dir = case_dir("no-weights");
	cfg = config_json(&tiny, "LlamaForCausalLM", "silu", NULL);
	write_text(dir, "config.json", cfg);
	free(cfg);
	rc = model_load(dir, &m, &err);
	expect_fail("missing weights (no model.safetensors, no index)", rc, &err, dir,
				"model.safetensors", "no model weights");
	free(dir);

	raw_case("safetensors of 5 bytes", "\x10\0\0\0\0", 5, "too short", NULL);
	memset(buf, ' ', sizeof(buf));
	memcpy(buf, "\0\x10\0\0\0\0\0\0{}", 10);	/* header length 4096 in a 64-byte file */
	raw_case("header length 4096 in a 64-byte file", buf, 64, "header length 4096", "exceeds");
	memcpy(buf, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
	raw_case("header length 2^64 - 1", buf, 64, "header length", "exceeds");
	raw_json_case("header not JSON", "not json", "not a JSON object", NULL);
	raw_json_case("header a JSON array", "[1, 2]", "not a JSON object", NULL);
	raw_json_case("header entry without data_offsets",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", "\"w\"", "malformed");
	raw_json_case("data_offsets ending before they begin",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}",
				  "\"w\"", "data_offsets");
	raw_json_case("data_offsets not numbers",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [\"0\", \"0\"]}}",
				  "\"w\"", "data_offsets");
	/* found by fuzzing: an end offset beyond size_t's range was cast before the size check */
	raw_json_case("data_offsets ending at byte 1e30",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1e30]}}",
				  "\"w\"", "truncated");
	raw_json_case("negative dimension",
				  "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 0]}}",
				  "\"w\"", "shape");

	weights_case("truncated data (last tensor short by 10 bytes)", NULL, 10, "truncated",
				 "lm_head.weight", true);
	weights_case("byte count unlike shape x dtype", mangle_short_bytes, 0,
				 "model.layers.1.mlp.down_proj.weight", "bytes", true);
	weights_case("dtype I64", mangle_i64, 0, "model.layers.0.mlp.gate_proj.weight", "I64", true);
	weights_case("missing tensor", mangle_missing, 0, "model.layers.0.mlp.up_proj.weight",
				 "missing", false);
	weights_case("missing norm", mangle_missing_norm, 0,
				 "model.layers.1.input_layernorm.weight", "missing", false);
	weights_case("k_proj of wrong shape", mangle_shape, 0, "wrong shape",
				 "model.layers.1.self_attn.k_proj.weight", true);
	weights_case("final norm stored 2-D", mangle_norm_2d, 0, "wrong shape",
				 "model.norm.weight", true);
	weights_case("shape whose element count overflows", mangle_overflow, 0, "model.huge",
				 NULL, true);
}

/* Sharded checkpoints with a bad index. */
static void
test_bad_index(void)
{
	tspecs		s = {0};
	char	   *dir;
	char	   *index;
	char	   *shard3;
	st_archive *ar = NULL;
	cbllm_err	err = {{0}};
	int			rc;

	build_model(&s, &tiny);

	/* the index names a shard that does not exist */
	dir = case_dir("index-missing-shard");
	write_model(dir, &tiny, &s, true);
	index = cbllm_path_join(dir, "model.safetensors.index.json");
	write_text(dir, "model.safetensors.index.json",
			   "{\"metadata\": {}, \"weight_map\": {\"model.embed_tokens.weight\":"
			   " \"model-00001-of-00002.safetensors\", \"lm_head.weight\":"
			   " \"model-00003-of-00002.safetensors\"}}");
	shard3 = cbllm_path_join(dir, "model-00003-of-00002.safetensors");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, shard3, "cannot open", NULL),
		   "index naming a missing shard fails (%s): %s", cbllm_status_name(rc), err.msg);
	free(shard3);
	free(index);
	free(dir);

	/* a weight_map path with a '/' */
	dir = case_dir("index-slash");
	write_model(dir, &tiny, &s, true);
	index = cbllm_path_join(dir, "model.safetensors.index.json");
	write_text(dir, "model.safetensors.index.json",
			   "{\"weight_map\": {\"model.embed_tokens.weight\": \"../model-00001-of-00002.safetensors\"}}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "not a plain file name", NULL),
		   "weight_map path with '/' fails (%s): %s", cbllm_status_name(rc), err.msg);
	write_text(dir, "model.safetensors.index.json",
			   "{\"weight_map\": {\"model.embed_tokens.weight\": \"sub/x.safetensors\"}}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "model.embed_tokens.weight", NULL),
		   "weight_map path sub/x.safetensors fails naming the tensor: %s", err.msg);
	write_text(dir, "model.safetensors.index.json", "{\"weight_map\": [1, 2]}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "weight_map", NULL),
		   "index whose weight_map is not an object fails: %s", err.msg);
	write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "JSON", NULL),
		   "index that is not JSON fails: %s", err.msg);
	write_text(dir, "model.safetensors.index.json",
			   "{\"weight_map\": {\"model.embed_tokens.weight\": 5}}");
	rc = st_open_dir(dir, &ar, &err);
	TAP_OK(rc < 0 && ar == NULL && msg_has(&err, index, "model.embed_tokens.weight", NULL),
		   "weight_map entry that is not a string fails: %s", err.msg);
	free(index);
	free(dir);
	free_specs(&s);
}

/* bf16 bits nearest to v, ties to even, by comparing the dropped half (not numeric.h's trick). */
static uint16_t
bf16_nearest(float v)
{
	uint32_t	u;
	uint32_t	low;
	uint16_t	h;

	memcpy(&u, &v, 4);
	h = (uint16_t) (u >> 16);
	low = u & 0xffff;
	if (low > 0x8000 || (low == 0x8000 && (h & 1)))
		h++;
	return h;
}

/* The dummy matrices of a model in seed order: embed, each layer's seven, lm_head. */
static int
dummy_matrices(const cbllm_model *m, const cbllm_weight **ws)
{
	int			n = 0;

	ws[n++] = &m->embed;
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		const cbllm_layer *L = &m->layers[l];

		ws[n++] = &L->wq;
		ws[n++] = &L->wk;
		ws[n++] = &L->wv;
		ws[n++] = &L->wo;
		ws[n++] = &L->w_gate;
		ws[n++] = &L->w_up;
		ws[n++] = &L->w_down;
	}
	ws[n++] = &m->lm_head;
	return n;
}

/* Whether the norms of a model are all ones. */
static bool
norms_are_ones(const cbllm_model *m)
{
	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int i = 0; i < m->cfg.hidden; i++)
			if (m->layers[l].attn_norm[i] != 1.0f || m->layers[l].mlp_norm[i] != 1.0f)
				return false;
	for (int i = 0; i < m->cfg.hidden; i++)
		if (m->final_norm[i] != 1.0f)
			return false;
	return true;
}

/* Whether element i of a filled dummy matrix is cbllm_dummy_value * scale rounded to bf16. */
static bool
dummy_elem_ok(const cbllm_weight *w, int64_t i)
{
	uint16_t	want = bf16_nearest(cbllm_dummy_value(w->dummy_seed, (uint64_t) i) * w->dummy_scale);
	uint16_t	got = ((const uint16_t *) w->data)[i];

	if (got != want)
		TAP_DIAG("seed %llu element %lld: bf16 0x%04x, expected 0x%04x",
				 (unsigned long long) w->dummy_seed, (long long) i, got, want);
	return got == want;
}

/* Load dir with format, dummy weights on the host or not. */
static int
load_format(const char *dir, const char *format, bool on_host, cbllm_model **m, cbllm_err *err)
{
	model_load_params p = {.dir = dir, .format = format, .dummy_on_host = on_host};

	return model_load_ex(&p, m, err);
}

/* cbllm_dummy_value: pinned values, exact multiples of 2^-23 in [-1, 1) with mean near 0. */
static void
test_dummy_value(void)
{
	double		sum = 0;
	bool		in_range = true,
				on_grid = true;
	float		lo = 1,
				hi = -1;

	/* pinned: the CUDA generator must reproduce these bits, so the formula may not change */
	TAP_OK(cbllm_dummy_value(1, 0) == (float) (5673494 - 8388608) / 8388608.0f &&
		   cbllm_dummy_value(1, 1) == (float) (9505325 - 8388608) / 8388608.0f &&
		   cbllm_dummy_value(0x0123456789abcdefULL, 1000000) == (float) (2096866 - 8388608) / 8388608.0f,
		   "cbllm_dummy_value matches three values computed independently (formula unchanged)");
	for (int i = 0; i < 100000; i++)
	{
		float		v = cbllm_dummy_value(0x5eedULL, (uint64_t) i);
		float		k = (v + 1.0f) * 8388608.0f;

		in_range = in_range && v >= -1.0f && v < 1.0f;
		on_grid = on_grid && k == floorf(k);
		lo = fminf(lo, v);
		hi = fmaxf(hi, v);
		sum += v;
	}
	TAP_OK(in_range && lo < -0.999f && hi > 0.999f,
		   "100000 dummy values lie in [-1, 1) and span it (min %g, max %g)", lo, hi);
	TAP_OK(fabs(sum / 100000) < 0.01, "100000 dummy values have |mean| < 0.01 (%g)",
		   sum / 100000);
	TAP_OK(on_grid, "every dummy value is exactly (k - 2^23) / 2^23 for an integer k");
	TAP_OK(cbllm_dummy_value(1, 7) != cbllm_dummy_value(2, 7) && cbllm_dummy_value(1, 7) != cbllm_dummy_value(1, 8),
		   "dummy values differ between seeds and between elements");
}

/* A dummy load of config.json alone: shapes and counts of the checkpoint, generated values. */
static void
test_dummy_load(void)
{
	char	   *dir = case_dir("dummy");
	char	   *ckpt = case_dir("dummy-checkpoint");
	char	   *cfgtext = config_json(&tiny, "LlamaForCausalLM", "silu", NULL);
	tspecs		s = {0};
	cbllm_model *m = NULL,
			   *m2 = NULL,
			   *ref = NULL,
			   *dev = NULL;
	const cbllm_weight *ws[64],
			   *ws2[64],
			   *wr[64],
			   *wd[64];
	cbllm_err	err = {{0}};
	int			n = 0,
				rc;
	bool		ok;
	int64_t		elems = 0;

	TAP_OK(write_text(dir, "config.json", cfgtext),
		   "write a model directory with config.json only");
	rc = load_format(dir, "dummy", true, &m, &err);
	TAP_OK(rc == CBLLM_OK && m != NULL, "dummy load of a directory without weights succeeds %s",
		   err.msg);
	if (rc != CBLLM_OK)
		goto done;
	TAP_OK(m->st == NULL && m->cfg.hidden == 16 && m->cfg.n_layers == 2 &&
		   m->cfg.vocab_size == 32, "dummy: config.json parsed, no safetensors archive");

	/* the same geometry from a checkpoint, to compare shapes and counts with */
	build_model(&s, &tiny);
	write_model(ckpt, &tiny, &s, false);
	rc = model_load(ckpt, &ref, &err);
	TAP_OK(rc == CBLLM_OK, "the tiny checkpoint loads for comparison %s", err.msg);
	if (rc != CBLLM_OK)
		goto done;
	n = dummy_matrices(m, ws);
	dummy_matrices(ref, wr);
	ok = n == 16;
	for (int k = 0; ok && k < n; k++)
		ok = ws[k]->dtype == CBLLM_BF16 && ws[k]->rows == wr[k]->rows &&
			ws[k]->cols == wr[k]->cols && ws[k]->data != NULL;
	TAP_OK(ok, "dummy: all 16 matrices are BF16 with the checkpoint loader's (rows, cols)");
	ok = true;
	for (int k = 0; k < n; k++)
	{
		ok = ok && ws[k]->dummy_scale == 1.0f / sqrtf((float) ws[k]->cols);
		elems += ws[k]->rows * ws[k]->cols;
	}
	TAP_OK(ok && m->embed.dummy_scale == 0.25f,
		   "dummy: every scale is 1/sqrt(cols) (0.25 for the embedding)");
	TAP_OK(m->matmul_params == ref->matmul_params &&
		   m->step_weight_bytes == 2 * (size_t) m->matmul_params,
		   "dummy: matmul_params %lld as the checkpoint's, step_weight_bytes twice that in bf16",
		   (long long) m->matmul_params);
	TAP_OK(m->weight_bytes == 2 * (size_t) elems && elems == 9728 / 2,
		   "dummy: weight_bytes %zu counts every matrix, embedding and lm_head, in bf16",
		   m->weight_bytes);
	TAP_OK(norms_are_ones(m), "dummy: every norm weight is 1");

	ok = true;
	for (int k = 0; k < n; k++)
	{
		int64_t		ne = ws[k]->rows * ws[k]->cols;

		for (int64_t i = 0; i < ne; i += 1 + i % 13)
			ok = ok && dummy_elem_ok(ws[k], i);
		ok = ok && dummy_elem_ok(ws[k], ne - 1);
	}
	TAP_OK(ok, "dummy on host: sampled elements are bf16(cbllm_dummy_value(seed, i) * scale)");

	ok = true;
	for (int k = 0; k < n; k++)
		for (int j = 0; j < n; j++)
			ok = ok && ws[k]->dummy_seed != 0 &&
				(j == k || ws[k]->dummy_seed != ws[j]->dummy_seed);
	TAP_OK(ok && memcmp(m->layers[0].wk.data, m->layers[0].wv.data, 8 * 16 * 2) != 0 &&
		   memcmp(m->layers[0].wq.data, m->layers[1].wq.data, 16 * 16 * 2) != 0,
		   "dummy: the 16 seeds are nonzero and distinct; same-shape matrices differ");

	rc = load_format(dir, "dummy", true, &m2, &err);
	TAP_OK(rc == CBLLM_OK, "a second dummy load succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		dummy_matrices(m2, ws2);
		ok = true;
		for (int k = 0; k < n; k++)
			ok = ok && ws2[k]->dummy_seed == ws[k]->dummy_seed && ws2[k]->data != ws[k]->data &&
				memcmp(ws2[k]->data, ws[k]->data, (size_t) (ws[k]->rows * ws[k]->cols * 2)) == 0;
		TAP_OK(ok, "dummy loads are deterministic: same seeds and the same bytes");
		model_free(m2);
	}

	rc = load_format(dir, "dummy", false, &dev, &err);
	TAP_OK(rc == CBLLM_OK, "dummy load for a device backend succeeds %s", err.msg);
	if (rc == CBLLM_OK)
	{
		dummy_matrices(dev, wd);
		ok = true;
		for (int k = 0; k < n; k++)
			ok = ok && wd[k]->data == NULL && wd[k]->dummy_seed == ws[k]->dummy_seed &&
				wd[k]->dummy_scale == ws[k]->dummy_scale && wd[k]->dtype == CBLLM_BF16 &&
				wd[k]->rows == ws[k]->rows && wd[k]->cols == ws[k]->cols;
		TAP_OK(ok, "dummy not on host: data NULL, seeds, scales and shapes as on the host");
		TAP_OK(norms_are_ones(dev) && dev->weight_bytes == m->weight_bytes &&
			   dev->step_weight_bytes == m->step_weight_bytes &&
			   dev->matmul_params == m->matmul_params,
			   "dummy not on host: unit norms and the same byte counts");
		model_free(dev);
	}
done:
	model_free(m);
	model_free(ref);
	free_specs(&s);
	free(cfgtext);
	free(ckpt);
	free(dir);
}

/* Dummy loads: tied embeddings, a 7B geometry, bad formats and bad directories. */
static void
test_dummy_cases(void)
{
	geom		g = tiny;
	char	   *dir = case_dir("dummy-tied");
	char	   *text;
	cbllm_model *m = NULL;
	cbllm_err	err = {{0}},
				err2 = {{0}};
	int			rc,
				rc2;

	g.tie = true;
	text = config_json(&g, "LlamaForCausalLM", "silu", NULL);
	write_text(dir, "config.json", text);
	free(text);
	for (int on_host = 0; on_host < 2; on_host++)
	{
		rc = load_format(dir, "dummy", on_host, &m, &err);
		TAP_OK(rc == CBLLM_OK && m->lm_head.data == m->embed.data &&
			   m->lm_head.dummy_seed == m->embed.dummy_seed && m->lm_head.rows == 32 &&
			   m->weight_bytes == 2 * (size_t) (32 * 16 + 2 * 1920) &&
			   m->step_weight_bytes == 2 * (size_t) (32 * 16 + 2 * 1920),
			   "dummy tied (%s): lm_head is the embedding, counted once in weight_bytes %s",
			   on_host ? "on host" : "not on host", err.msg);
		if (rc == CBLLM_OK)
			model_free(m);		/* frees the shared buffer once */
		m = NULL;
	}
	free(dir);

	dir = case_dir("dummy-llama2-7b");
	write_text(dir, "config.json", llama2_7b_chat);
	rc = load_format(dir, "dummy", false, &m, &err);
	TAP_OK(rc == CBLLM_OK && m->weight_bytes == 13476298752ULL &&
		   m->matmul_params == 6607077376LL && m->step_weight_bytes == 13214154752ULL &&
		   m->layers[31].w_down.rows == 4096 && m->layers[31].w_down.cols == 11008 &&
		   m->lm_head.data == NULL && m->lm_head.dummy_seed != m->embed.dummy_seed,
		   "dummy Llama-2-7b config alone: 6.74e9 matrix weights, 13476298752 bf16 bytes %s",
		   err.msg);
	if (rc == CBLLM_OK)
		model_free(m);
	m = NULL;

	rc = load_format(dir, "gguf", true, &m, &err);
	expect_fail("load format \"gguf\"", rc, &err, "\"gguf\"", "\"dummy\"", "\"safetensors\"");
	TAP_OK(m == NULL, "an unknown format leaves the output untouched");
	rc = load_format(dir, "auto", false, &m, &err);
	expect_fail("format auto on a directory without weights", rc, &err, dir, NULL, NULL);
	free(dir);

	dir = case_dir("dummy-no-config");
	rc = load_format(dir, "dummy", true, &m, &err);
	rc2 = model_load(dir, &m, &err2);
	expect_fail("dummy load without config.json", rc, &err, "config.json", NULL, NULL);
	TAP_OK(rc == rc2 && strcmp(err.msg, err2.msg) == 0 && m == NULL,
		   "dummy and checkpoint loads fail alike without config.json");
	write_text(dir, "config.json",
			   "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": \"gelu\"}");
	rc = load_format(dir, "dummy", false, &m, &err);
	expect_fail("dummy load of a config with hidden_act gelu", rc, &err, "gelu", NULL, NULL);
	free(dir);

	/* a (2^24, 2^24) embedding is 512 TiB: its allocation fails cleanly */
	dir = case_dir("dummy-huge");
	write_text(dir, "config.json",
			   "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16777216,"
			   " \"num_hidden_layers\": 1, \"num_attention_heads\": 4096, \"intermediate_size\": 2,"
			   " \"vocab_size\": 16777216}");
	rc = load_format(dir, "dummy", true, &m, &err);
	expect_fail("dummy on host of a 512 TiB embedding", rc, &err,
				"out of memory for the dummy weights of the embeddings", NULL, NULL);
	rc = load_format(dir, "dummy", false, &m, &err2);
	TAP_OK(rc == CBLLM_OK && m->embed.data == NULL && m->weight_bytes > ((size_t) 1 << 50),
		   "the same model not on host allocates nothing and counts its bytes %s", err2.msg);
	if (rc == CBLLM_OK)
		model_free(m);
	free(dir);
}

/* nftw callback: remove one fixture file or directory. */
static int
remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

int
main(void)
{
	if (mkdtemp(root) == NULL)
	{
		TAP_OK(false, "mkdtemp %s", root);
		return tap_done();
	}
	TAP_DIAG("fixtures in %s", root);
	test_valid_model();
	test_tied();
	test_head_dim();
	test_sharded();
	test_bad_configs();
	test_rope_scaling();
	test_real_configs();
	test_bad_weights();
	test_bad_index();
	test_dummy_value();
	test_dummy_load();
	test_dummy_cases();
	TAP_OK(nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 && access(root, F_OK) != 0,
		   "remove the fixture directory %s", root);
	return tap_done();
}
