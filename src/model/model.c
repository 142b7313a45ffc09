/*
 * model.c: load a model: bind a checkpoint's tensors to the fields the
 * architecture's tensor roles name (arch.h), checking every name and shape
 * against config.json, or hand the model to the dummy loader (model_dummy.c).
 * Norm vectors become the multipliers the decoder applies: (1 + w) for an
 * architecture with ARCH_NORM_PLUS_ONE.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/numeric.h"
#include "dtype/dtype_quant.h"

/* "[a, b]": the shape of t, for messages. */
static void
ShapeText(const st_tensor *t, char *buf, size_t size)
{
	size_t		len = (size_t) snprintf(buf, size, "[");

	for (int d = 0; d < t->ndim && len < size; d++)
		len += (size_t) snprintf(buf + len, size - len, "%s%lld", d ? ", " : "",
								 (long long) t->shape[d]);
	if (len < size)
		snprintf(buf + len, size - len, "]");
}

/* A malloc'd f32 copy of a stored vector, with Gemma's 1 added when plus_one. */
int
model_vector_f32(cbllm_dtype dtype, const void *data, int64_t n, bool plus_one, float **out,
				 cbllm_err *err)
{
	float	   *v = malloc(sizeof(float) * n);

	if (v == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	cbllm_to_f32(dtype, data, v, n);
	if (plus_one)
		for (int64_t i = 0; i < n; i++)
			v[i] += 1.0f;		/* (1 + w) in f32, as Gemma's RMSNorm computes it */
	*out = v;
	return CBLLM_OK;
}

/*
 * Expert mt->expert's matrix of a tensor stacking the experts' (out, in)
 * matrices (Qwen3.5-MoE): (E, rows, cols), or (E, 2 rows, cols) with gate
 * and up one after the other in each expert's block.  Its rows are
 * consecutive, so it is bound in place, a pointer into the mapping.
 */
static int
BindStackedRows(cbllm_model *m, const model_tensor *mt, const st_tensor *t, const char *name,
				cbllm_err *err)
{
	int			k = mt->t->hf_layout == ARCH_HF_ROWS ? 1 : 2,
				o = mt->t->hf_layout == ARCH_HF_ROWS_SECOND ? 1 : 0;
	size_t		row = cbllm_dtype_row_bytes(t->dtype, mt->cols);

	if (t->ndim != 3 || t->shape[0] != m->cfg.n_experts || t->shape[1] != k * mt->rows ||
		t->shape[2] != mt->cols)
	{
		char		found[96];

		ShapeText(t, found, sizeof(found));
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" has the wrong shape: expected [%d, %lld, %lld] from config.json, found %s",
						  m->st->files[t->file].path, name, m->cfg.n_experts,
						  (long long) (k * mt->rows), (long long) mt->cols, found);
	}
	mt->matrix->dtype = t->dtype;
	mt->matrix->rows = mt->rows;
	mt->matrix->cols = mt->cols;
	mt->matrix->data = (const char *) t->data +
		row * (size_t) (((int64_t) mt->expert * k + o) * mt->rows);
	m->weight_bytes += row * (size_t) mt->rows;
	return CBLLM_OK;
}

/*
 * Expert mt->expert's part of a tensor stacking every expert (gpt-oss,
 * arch_hf_layout): a vector is its row's entries (every second one, from
 * the first or the second, when gate and up interleave) as f32; a matrix,
 * stored (E, cols, rows) [in, out], is copied out as (rows, cols) in its
 * stored type into a buffer of the model's own.
 */
static int
BindStacked(cbllm_model *m, const model_tensor *mt, const st_tensor *t, const char *name,
			cbllm_err *err)
{
	const cbllm_dtype_traits *tr = cbllm_dtype_traits_of(t->dtype);

	if (mt->t->hf_layout >= ARCH_HF_ROWS)
		return BindStackedRows(m, mt, t, name, err);
	int			k = mt->t->hf_layout == ARCH_HF_STACKED ? 1 : 2,
				o = mt->t->hf_layout == ARCH_HF_STACKED_ODD ? 1 : 0;
	bool		vector = mt->t->kind != ARCH_MATRIX;
	size_t		eb = tr->block_bytes;
	const char *src = t->data;

	if (vector ? (t->ndim != 2 || t->shape[0] != m->cfg.n_experts || t->shape[1] != k * mt->rows) :
		(t->ndim != 3 || t->shape[0] != m->cfg.n_experts || t->shape[1] != mt->cols ||
		 t->shape[2] != k * mt->rows))
	{
		char		found[96];

		ShapeText(t, found, sizeof(found));
		if (vector)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: tensor \"%s\" has the wrong shape: expected [%d, %lld] from config.json, found %s",
							  m->st->files[t->file].path, name, m->cfg.n_experts,
							  (long long) (k * mt->rows), found);
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" has the wrong shape: expected [%d, %lld, %lld] from config.json, found %s",
						  m->st->files[t->file].path, name, m->cfg.n_experts, (long long) mt->cols,
						  (long long) (k * mt->rows), found);
	}
	if (tr->block_elems != 1)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: tensor \"%s\" is %s: stacked experts are read as F32, F16 or BF16",
						  m->st->files[t->file].path, name, tr->name);
	if (vector)
	{
		float	   *v = malloc(sizeof(float) * mt->rows);

		if (v == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
		src += eb * (size_t) mt->expert * k * mt->rows;
		for (int64_t r = 0; r < mt->rows; r++)
			cbllm_to_f32(t->dtype, src + eb * (size_t) (k * r + o), &v[r], 1);
		*mt->vector = v;
		return CBLLM_OK;
	}
	{
		char	   *dst = malloc(eb * (size_t) (mt->rows * mt->cols));
		int64_t		ld = k * mt->rows;	/* stored elements per input column */

		if (dst == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM,
							  "out of memory for expert %d of layer %d's %s", mt->expert,
							  mt->layer, mt->t->role);
		src += eb * (size_t) mt->expert * mt->cols * ld;
		for (int64_t c = 0; c < mt->cols; c++)
			for (int64_t r = 0; r < mt->rows; r++)
				memcpy(dst + eb * (size_t) (r * mt->cols + c), src + eb * (size_t) (c * ld + k * r + o),
					   eb);
		mt->matrix->dtype = t->dtype;
		mt->matrix->rows = mt->rows;
		mt->matrix->cols = mt->cols;
		mt->matrix->data = dst;
		mt->matrix->owned = true;
		m->weight_bytes += eb * (size_t) (mt->rows * mt->cols);
	}
	return CBLLM_OK;
}

/*
 * Expert mt->expert's matrix from MXFP4 tensors stored apart, as gpt-oss's
 * released checkpoint has its experts: name_blocks (E, k rows, cols / 32,
 * 16) and name_scales (E, k rows, cols / 32), both U8, rows (out) first,
 * the gate and up rows interleaving (k = 2: the gate the even ones); a byte
 * of a block holds its elements 2i (low nibble) and 2i + 1 (high), each an
 * E2M1 code, under the factor 2^(scale - 127).  Copied out as MXFP4 blocks
 * (dtype_quant.h: the scale byte, then element j in byte j's low nibble and
 * j + 16 in its high), the same codes and exponent, into a buffer of the
 * model's own.
 */
static int
BindStackedMx(cbllm_model *m, const model_tensor *mt, const st_tensor *blocks, const st_tensor *scales,
			  const char *name, cbllm_err *err)
{
	int			k = mt->t->hf_layout == ARCH_HF_STACKED ? 1 : 2,
				o = mt->t->hf_layout == ARCH_HF_STACKED_ODD ? 1 : 0;
	int64_t		nb = mt->cols / 32,
				rows = k * mt->rows;
	uint8_t    *dst;
	const uint8_t *bs,
			   *ss;

	if (blocks->dtype != CBLLM_U8 || scales->dtype != CBLLM_U8 || mt->cols % 32 != 0 ||
		blocks->ndim != 4 || blocks->shape[0] != m->cfg.n_experts || blocks->shape[1] != rows ||
		blocks->shape[2] != nb || blocks->shape[3] != 16 ||
		scales->ndim != 3 || scales->shape[0] != m->cfg.n_experts || scales->shape[1] != rows ||
		scales->shape[2] != nb)
	{
		char		fb[96],
					fs[96];

		ShapeText(blocks, fb, sizeof(fb));
		ShapeText(scales, fs, sizeof(fs));
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: MXFP4 tensors \"%s_blocks\" %s %s and \"%s_scales\" %s %s: expected U8 [%d, %lld, %lld, 16] and [%d, %lld, %lld] from config.json",
						  m->st->files[blocks->file].path, name, cbllm_dtype_name(blocks->dtype), fb,
						  name, cbllm_dtype_name(scales->dtype), fs, m->cfg.n_experts, (long long) rows,
						  (long long) nb, m->cfg.n_experts, (long long) rows, (long long) nb);
	}
	dst = malloc(cbllm_dtype_row_bytes(CBLLM_MXFP4, mt->cols) * (size_t) mt->rows);
	if (dst == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for expert %d of layer %d's %s",
						  mt->expert, mt->layer, mt->t->role);
	bs = (const uint8_t *) blocks->data + (size_t) mt->expert * rows * nb * 16;
	ss = (const uint8_t *) scales->data + (size_t) mt->expert * rows * nb;
	for (int64_t r = 0; r < mt->rows; r++)
		for (int64_t b = 0; b < nb; b++)
		{
			const uint8_t *in = bs + ((k * r + o) * nb + b) * 16;
			uint8_t    *out = dst + (r * nb + b) * CBLLM_MXFP4_BYTES,
						code[32];

			for (int i = 0; i < 16; i++)
			{
				code[2 * i] = in[i] & 15;
				code[2 * i + 1] = in[i] >> 4;
			}
			out[0] = ss[(k * r + o) * nb + b];
			for (int j = 0; j < 16; j++)
				out[1 + j] = (uint8_t) (code[j] | code[j + 16] << 4);
		}
	mt->matrix->dtype = CBLLM_MXFP4;
	mt->matrix->rows = mt->rows;
	mt->matrix->cols = mt->cols;
	mt->matrix->data = dst;
	mt->matrix->owned = true;
	m->weight_bytes += cbllm_dtype_row_bytes(CBLLM_MXFP4, mt->cols) * (size_t) mt->rows;
	return CBLLM_OK;
}

/*
 * Whether a vector tensor has the shape of mt: (rows), or for a small
 * matrix (rows, cols) with any unit dimensions between (Qwen3.5's conv1d
 * weight is (channels, 1, kernel)).
 */
static bool
VectorShapeOk(const st_tensor *t, const model_tensor *mt)
{
	int64_t		n = 1;

	if (t->ndim < 1 || t->shape[0] != mt->rows)
		return false;
	if (mt->cols == 1)
		return t->ndim == 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n == mt->rows * mt->cols && t->shape[t->ndim - 1] == mt->cols;
}

/* mt's vector as f32: Gemma's and Qwen3.5's 1 added to a norm, A_log turned into -exp(A_log). */
static int
BindVector(cbllm_model *m, const model_tensor *mt, const st_tensor *t, cbllm_err *err)
{
	int64_t		n = mt->rows * mt->cols;
	int			rc;

	rc = model_vector_f32(t->dtype, t->data, n,
						  mt->t->kind == ARCH_NORM && !mt->t->plain_norm &&
						  (m->cfg.features & ARCH_NORM_PLUS_ONE), mt->vector, err);
	if (rc == CBLLM_OK && mt->t->hf_neg_exp)
		for (int64_t i = 0; i < n; i++)
			(*mt->vector)[i] = (float) -exp((double) (*mt->vector)[i]);
	return rc;
}

/* Bind one tensor of the checkpoint to its field, checking its shape against config.json. */
static int
BindTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	cbllm_model *m = arg;
	char		name[128];
	const st_tensor *t;
	bool		vector = mt->t->kind != ARCH_MATRIX;

	if (mt->tied)
	{
		*mt->matrix = m->embed;
		return CBLLM_OK;
	}
	arch_tensor_name(mt->t, mt->layer, mt->expert, false, name, sizeof(name));
	arch_hf_checkpoint_name(m->cfg.features, name, sizeof(name));
	t = st_find(m->st, name);
	if (t == NULL && mt->expert >= 0 && mt->t->hf_layout != ARCH_HF_OWN && !vector)
	{
		/* a stacked expert matrix may be MXFP4, its blocks and scales stored apart */
		char		part[160];
		const st_tensor *blocks,
				   *scales;

		snprintf(part, sizeof(part), "%s_blocks", name);
		blocks = st_find(m->st, part);
		snprintf(part, sizeof(part), "%s_scales", name);
		scales = st_find(m->st, part);
		if (blocks != NULL && scales != NULL)
			return BindStackedMx(m, mt, blocks, scales, name, err);
		if (blocks != NULL || scales != NULL)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: model weights: MXFP4 tensor \"%s_%s\" without \"%s_%s\"", m->dir, name,
							  blocks != NULL ? "blocks" : "scales", name, blocks != NULL ? "scales" : "blocks");
	}
	if (t == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: model weights: missing tensor \"%s\"",
						  m->dir, name);
	if (t->dtype == CBLLM_U8)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: tensor \"%s\" is U8: bytes are read only as an MXFP4 matrix's _blocks and _scales",
						  m->st->files[t->file].path, name);
	if (mt->expert >= 0 && mt->t->hf_layout != ARCH_HF_OWN)
		return BindStacked(m, mt, t, name, err);
	if (vector ? !VectorShapeOk(t, mt) :
		(t->ndim != 2 || t->shape[0] != mt->stored_rows || t->shape[1] != mt->cols))
	{
		char		found[96];

		ShapeText(t, found, sizeof(found));
		if (vector && mt->cols > 1)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: tensor \"%s\" has the wrong shape: expected [%lld, %lld] from config.json, found %s",
							  m->st->files[t->file].path, name, (long long) mt->rows,
							  (long long) mt->cols, found);
		if (vector)
			return cbllm_fail(err, CBLLM_ERR_FORMAT,
							  "%s: tensor \"%s\" has the wrong shape: expected [%lld] from config.json",
							  m->st->files[t->file].path, name, (long long) mt->rows);
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" has the wrong shape: expected [%lld, %lld] from config.json, found %s",
						  m->st->files[t->file].path, name, (long long) mt->stored_rows,
						  (long long) mt->cols, found);
	}
	if (vector)
		return BindVector(m, mt, t, err);
	mt->matrix->dtype = t->dtype;
	mt->matrix->rows = mt->rows;
	mt->matrix->cols = mt->cols;
	/* a block of a fused tensor is its rows, a pointer into the stored tensor */
	mt->matrix->data = (const char *) t->data +
		mt->first_row * cbllm_dtype_row_bytes(t->dtype, mt->cols);
	m->weight_bytes += cbllm_dtype_row_bytes(t->dtype, mt->cols) * mt->rows;
	return CBLLM_OK;
}

/* Count a matrix that every forward step reads (a token's share of the experts). */
static int
AddStepWeight(void *arg, const model_tensor *mt, cbllm_err *err)
{
	cbllm_model *m = arg;
	const cbllm_weight *w = mt->matrix;

	if (mt->matrix != NULL && mt->t->per_step)
	{
		m->matmul_params += w->rows * w->cols;
		m->step_weight_bytes += cbllm_dtype_row_bytes(w->dtype, w->rows * w->cols);
	}
	else if (mt->matrix != NULL && mt->expert >= 0 && mt->expert < m->cfg.n_experts_used)
	{
		/* a token reads n_experts_used experts of each such layer: count as many */
		m->matmul_params += w->rows * w->cols;
		m->step_weight_bytes += cbllm_dtype_row_bytes(w->dtype, w->rows * w->cols);
	}
	return CBLLM_OK;
}

/* Open the safetensors checkpoint of m->dir and bind every weight to m's layers. */
static int
BindCheckpoint(cbllm_model *m, cbllm_err *err)
{
	char		tied_name[128];
	int			rc;

	if ((rc = st_open_dir(m->dir, &m->st, err)) || (rc = model_alloc_layers(m, err)))
		return rc;
	/*
	 * Qwen3.5-MoE's experts as released: stacked (E, out, in) with gate and
	 * up in one tensor; other checkpoints of it store each expert's matrices
	 */
	for (int l = 0; l < m->cfg.n_layers && (m->cfg.features & ARCH_SHARED_EXPERT); l++)
		if (m->cfg.layer_moe[l])
		{
			snprintf(tied_name, sizeof(tied_name), "model.layers.%d.mlp.experts.gate_up_proj", l);
			arch_hf_checkpoint_name(m->cfg.features, tied_name, sizeof(tied_name));
			if (st_find(m->st, tied_name) != NULL)
				m->cfg.features |= ARCH_MOE_STACKED_ROWS;
			break;
		}
	/* tie_word_embeddings with an lm_head tensor of its own: the tensor wins */
	arch_tensor_name(arch_tied_tensor(), -1, -1, false, tied_name, sizeof(tied_name));
	arch_hf_checkpoint_name(m->cfg.features, tied_name, sizeof(tied_name));
	m->lm_head_tied = m->cfg.tie_embeddings && st_find(m->st, tied_name) == NULL;
	return model_visit(m, BindTensor, m, err);
}

/*
 * HF multiplies the embeddings by sqrt(hidden) cast to the weights' type: a
 * bf16 checkpoint (and the dummy format, bf16) uses the scale rounded to
 * bf16, e.g. sqrt(1152) = 33.94 as 34.  The product is taken in f32 here,
 * where HF rounds it to bf16 again: that second rounding (a relative 2^-9
 * per element) is not reproduced.  F32 and F16 use the f32 scale.
 */
static void
RoundEmbedScale(cbllm_model *m)
{
	if (m->embed.dtype == CBLLM_BF16)
		m->cfg.embed_scale = cbllm_bf16_to_f32(cbllm_f32_to_bf16(m->cfg.embed_scale));
	m->cfg.ple_embed_scale = sqrtf((float) m->cfg.ple_dim);
	if (m->embed_ple.dtype == CBLLM_BF16)
		m->cfg.ple_embed_scale = cbllm_bf16_to_f32(cbllm_f32_to_bf16(m->cfg.ple_embed_scale));
}

/*
 * Each layer's layer_scalar as a number the forward pass multiplies by (1
 * without one), and Gemma 4's router scale divided by sqrt(hidden).
 */
static void
ReadLayerScalars(cbllm_model *m)
{
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		cbllm_layer *L = &m->layers[l];

		L->layer_scalar_value = L->layer_scalar != NULL ? L->layer_scalar[0] : 1.0f;
		/* Gemma 4's router input: rmsnorm(x) * scale / sqrt(hidden), one multiplier */
		for (int i = 0; L->router_scale != NULL && i < m->cfg.hidden; i++)
			L->router_scale[i] /= sqrtf((float) m->cfg.hidden);
	}
}

/* Whether a load format names the safetensors checkpoint. */
static bool
IsCheckpointFormat(const char *format)
{
	return format == NULL || strcmp(format, "auto") == 0 || strcmp(format, "safetensors") == 0;
}

/* Load config.json and bind every weight of the model in dir. */
int
model_load(const char *dir, cbllm_model **out, cbllm_err *err)
{
	model_load_params p = {.dir = dir, .format = NULL, .dummy_on_host = false};

	return model_load_ex(&p, out, err);
}

/*
 * Load a GGUF file (p->dir names one, or a directory holding one), or
 * config.json and then the checkpoint's weights or dummy ones, as p->format
 * says.
 */
int
model_load_ex(const model_load_params *p, cbllm_model **out, cbllm_err *err)
{
	bool		dummy = p->format != NULL && strcmp(p->format, "dummy") == 0;
	cbllm_model *m;
	char	   *gguf_path = NULL;
	bool		quantize;
	model_weight_mix want = {CBLLM_F32, CBLLM_F32};
	int			rc;

	if (!dummy && !IsCheckpointFormat(p->format))
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "unknown load format \"%s\" (accepted: \"auto\", \"safetensors\", \"dummy\")",
						  p->format);
	if ((rc = model_weight_format(p->weight_format, &quantize, &want, err)))
		return rc;
	m = calloc(1, sizeof(cbllm_model));
	if (m == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	m->dir = p->dir;
	if (!dummy && (rc = model_gguf_path(p->dir, &gguf_path, err)))
	{
		free(m);
		return rc;
	}
	if (gguf_path != NULL)
		rc = model_load_gguf(m, gguf_path, err);
	else if ((rc = model_config_load(p->dir, &m->cfg, err)) == CBLLM_OK)
		rc = dummy ? model_load_dummy(m, p->dummy_on_host, err) : BindCheckpoint(m, err);
	free(gguf_path);
	if (rc == CBLLM_OK)
	{
		RoundEmbedScale(m);		/* by the embedding's stored type, before any conversion */
		ReadLayerScalars(m);
		if (quantize)
			rc = model_quantize(m, want, p->threads, err);
	}
	if (rc != CBLLM_OK)
	{
		model_free(m);
		return rc;
	}
	model_visit(m, AddStepWeight, m, err);
	m->dir = NULL;
	*out = m;
	return CBLLM_OK;
}

/* Count one tensor under the type it is used in (arg: int counts[CBLLM_DTYPE_COUNT]). */
static int
CountType(void *arg, const model_tensor *mt, cbllm_err *err)
{
	int		   *counts = arg;

	if (mt->vector != NULL)
		counts[CBLLM_F32]++;
	else if (!mt->tied && (int) mt->matrix->dtype >= 0 && mt->matrix->dtype < CBLLM_DTYPE_COUNT)
		counts[mt->matrix->dtype]++;
	return CBLLM_OK;
}

/* "Q8_0 14, F32 7": the tensors of m by the weight type they are used in. */
void
model_weight_types(const cbllm_model *m, char *buf, size_t size)
{
	int			counts[CBLLM_DTYPE_COUNT] = {0};
	size_t		len = 0;

	buf[0] = '\0';
	model_visit(m, CountType, counts, NULL);
	for (int t = 0; t < CBLLM_DTYPE_COUNT && len < size; t++)
		if (counts[t] > 0)
		{
			int			w = snprintf(buf + len, size - len, "%s%s %d", len ? ", " : "",
									 cbllm_dtype_name((cbllm_dtype) t), counts[t]);

			len += w > 0 ? (size_t) w : 0;
		}
}

/* Allocate m's layers and the experts of those that have them. */
int
model_alloc_layers(cbllm_model *m, cbllm_err *err)
{
	m->layers = calloc(m->cfg.n_layers, sizeof(cbllm_layer));
	if (m->layers == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for %d layers", m->cfg.n_layers);
	for (int l = 0; l < m->cfg.n_layers; l++)
		if (m->cfg.layer_moe[l] &&
			(m->layers[l].experts = calloc(m->cfg.n_experts, sizeof(cbllm_expert))) == NULL)
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory for the experts of layer %d", l);
	return CBLLM_OK;
}

/* Free one tensor's converted vector, or its matrix when the buffer is the model's own. */
static int
FreeTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	if (mt->vector != NULL)
		free(*mt->vector);
	else if (mt->matrix->owned && !mt->tied)
		free((void *) mt->matrix->data);
	return CBLLM_OK;
}

/* Release the model's converted vectors, its own matrices and its mappings. */
void
model_free(cbllm_model *m)
{
	if (m == NULL)
		return;
	if (m->layers)
	{
		model_visit(m, FreeTensor, NULL, NULL);
		for (int l = 0; l < m->cfg.n_layers; l++)
			free(m->layers[l].experts);
	}
	free(m->layers);
	st_close(m->st);
	gguf_free(m->gguf);
	free(m);
}
