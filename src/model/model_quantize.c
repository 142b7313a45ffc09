/*
 * model_quantize.c: load-time quantization of a model's float matrices
 * (cbllm.weight_format, cbllm-cli --weight-format), so that a user with only
 * the HF checkpoint reads as few bytes per token as a GGUF file gives.
 *
 * Every matrix stored as F32, F16 or BF16 is converted, rows split over
 * threads, with the engine's quantizers (quantize.c): the format's type for
 * the layer matrices (in a q4_k_m or q5_k_m mix, Q6_K for the value and down
 * projections of the layers it favours); for the LM head (and the embedding that stands for a
 * tied one) Q6_K when the format is a K-quant of fewer bits, as llama.cpp's
 * _M mixes do, since the head's errors reach every logit; Q8_0 for a matrix
 * whose rows are not whole 256-element blocks; the stored type when they are
 * not whole 32-element ones either.  A mixture of experts' router stays as
 * stored, as llama.cpp keeps it; its experts' down projections get the _M
 * mixes' extra bits as the dense ones do.  Matrices already quantized (a GGUF
 * file's) stay as they are.  Each converted matrix is the model's own
 * (cbllm_weight.owned), freed with it; the checkpoint's mapping stays open
 * for what still points into it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "dtype/quantize.h"
#include "model/arch.h"
#include "model/model.h"

#define QUANT_MAX_THREADS 64

/*
 * The weight formats: a type for the layer matrices and, in llama.cpp's _M
 * mixes, the type of the matrices they give more bits (more): attn_v and
 * ffn_down in the first and last eighth of the layers and every third layer
 * between (MoreBits), where quantization errors cost the most.
 */
static const struct
{
	const char *name;			/* as the settings spell it */
	model_weight_mix mix;
}			formats[] = {
	{"q8_0", {CBLLM_Q8_0, CBLLM_Q8_0}},
	{"q4_0", {CBLLM_Q4_0, CBLLM_Q4_0}},
	{"q4_1", {CBLLM_Q4_1, CBLLM_Q4_1}},
	{"q5_0", {CBLLM_Q5_0, CBLLM_Q5_0}},
	{"q5_1", {CBLLM_Q5_1, CBLLM_Q5_1}},
	{"q2_k", {CBLLM_Q2_K, CBLLM_Q2_K}},
	{"q3_k", {CBLLM_Q3_K, CBLLM_Q3_K}},
	{"q4_k", {CBLLM_Q4_K, CBLLM_Q4_K}},
	{"q5_k", {CBLLM_Q5_K, CBLLM_Q5_K}},
	{"q6_k", {CBLLM_Q6_K, CBLLM_Q6_K}},
	{"q4_k_m", {CBLLM_Q4_K, CBLLM_Q6_K}},
	{"q5_k_m", {CBLLM_Q5_K, CBLLM_Q6_K}},
};

#define N_FORMATS ((int) (sizeof(formats) / sizeof(formats[0])))

/* The accepted format names, as prose: "auto", "q8_0", ... */
static void
FormatNames(char *buf, size_t len)
{
	size_t		at = (size_t) snprintf(buf, len, "\"auto\"");

	for (int i = 0; i < N_FORMATS && at < len; i++)
		at += (size_t) snprintf(buf + at, len - at, ", \"%s\"", formats[i].name);
}

int
model_weight_format(const char *name, bool *quantize, model_weight_mix *mix, cbllm_err *err)
{
	char		names[256];

	*quantize = false;
	if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0)
		return CBLLM_OK;
	for (int i = 0; i < N_FORMATS; i++)
		if (strcasecmp(name, formats[i].name) == 0)
		{
			*quantize = true;
			*mix = formats[i].mix;
			return CBLLM_OK;
		}
	FormatNames(names, sizeof(names));
	return cbllm_fail(err, CBLLM_ERR_INVALID, "unknown weight format \"%s\" (accepted: %s)", name,
					  names);
}

/* Whether dt is a K-quant of fewer than 6 bits (Q2_K .. Q5_K). */
static bool
IsSmallK(cbllm_dtype dt)
{
	return dt == CBLLM_Q2_K || dt == CBLLM_Q3_K || dt == CBLLM_Q4_K || dt == CBLLM_Q5_K;
}

/* Whether layer i of n is one an _M mix gives more bits. */
static bool
MoreBits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* The type matrix mt (stored as stored; head: the LM head or a tied embedding) gets under mix. */
static cbllm_dtype
TargetType(const model_tensor *mt, cbllm_dtype stored, bool head, model_weight_mix mix, int n_layers)
{
	bool		more = mt->layer >= 0 && MoreBits(mt->layer, n_layers) &&
		(strcmp(mt->t->role, "wv") == 0 || strcmp(mt->t->role, "w_down") == 0 ||
		 strcmp(mt->t->role, "expert w_down") == 0);
	cbllm_dtype dt = head && IsSmallK(mix.base) ? CBLLM_Q6_K : more ? mix.more : mix.base;

	if (strcmp(mt->t->role, "router") == 0)
		return stored;			/* small, and its errors choose the wrong experts */

	if (mt->cols % cbllm_dtype_traits_of(dt)->block_elems != 0)
		dt = CBLLM_Q8_0;
	return mt->cols % cbllm_dtype_traits_of(dt)->block_elems == 0 ? dt : stored;
}

/* One conversion: src (rows, cols) of type from into dst of type to, by threads in row ranges. */
typedef struct quant_job
{
	const char *src;
	char	   *dst;
	cbllm_dtype from;
	cbllm_dtype to;
	int64_t		rows;
	int64_t		cols;
	int			n_threads;
	pthread_mutex_t lock;
	int			rc;				/* the first failure, under lock */
	int64_t		bad_row;
	cbllm_err	err;
} quant_job;

typedef struct quant_part
{
	quant_job  *job;
	int			index;
} quant_part;

/* One thread's rows: each widened to f32, then quantized. */
static void *
QuantizeRows(void *arg)
{
	quant_part *p = arg;
	quant_job  *j = p->job;
	int64_t		per = (j->rows + j->n_threads - 1) / j->n_threads;
	int64_t		r0 = per * p->index,
				r1 = r0 + per < j->rows ? r0 + per : j->rows;
	size_t		sb = cbllm_dtype_row_bytes(j->from, j->cols),
				db = cbllm_dtype_row_bytes(j->to, j->cols);
	float	   *row = malloc(sizeof(float) * j->cols);
	cbllm_err	err;
	int			rc = row == NULL ? cbllm_fail(&err, CBLLM_ERR_NOMEM, "out of memory") : CBLLM_OK;
	int64_t		r = r0;

	for (; rc == CBLLM_OK && r < r1; r++)
	{
		cbllm_to_f32(j->from, j->src + r * sb, row, j->cols);
		rc = cbllm_quantize_row(j->to, row, j->dst + r * db, j->cols, &err);
	}
	if (rc != CBLLM_OK)
	{
		pthread_mutex_lock(&j->lock);
		if (j->rc == CBLLM_OK)
		{
			j->rc = rc;
			j->bad_row = r - 1;
			j->err = err;
		}
		pthread_mutex_unlock(&j->lock);
	}
	free(row);
	return NULL;
}

/* Convert w to type to into a buffer of its own; an error names the tensor and the row. */
static int
ConvertMatrix(cbllm_weight *w, cbllm_dtype to, int n_threads, const char *name, cbllm_err *err)
{
	quant_job	j = {.src = w->data, .from = w->dtype, .to = to, .rows = w->rows, .cols = w->cols,
	.n_threads = n_threads};
	pthread_t	tid[QUANT_MAX_THREADS];
	quant_part	parts[QUANT_MAX_THREADS];
	int			started = 0;

	j.dst = malloc(cbllm_dtype_row_bytes(to, w->cols) * (size_t) w->rows);
	if (j.dst == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory quantizing %s to %s", name,
						  cbllm_dtype_name(to));
	pthread_mutex_init(&j.lock, NULL);
	for (int i = 0; i < n_threads; i++)
		parts[i] = (quant_part) {&j, i};
	/* parts 1.. on threads, part 0 (and any part whose thread does not start) here */
	for (int i = 1; i < n_threads; i++)
		if (pthread_create(&tid[started], NULL, QuantizeRows, &parts[i]) == 0)
			started++;
		else
			QuantizeRows(&parts[i]);
	QuantizeRows(&parts[0]);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	pthread_mutex_destroy(&j.lock);
	if (j.rc != CBLLM_OK)
	{
		free(j.dst);
		return cbllm_fail(err, j.rc, "quantizing %s to %s, row %ld: %s", name, cbllm_dtype_name(to),
						  (long) j.bad_row, j.err.msg);
	}
	if (w->owned)
		free((void *) w->data);
	w->data = j.dst;
	w->dtype = to;
	w->owned = true;
	w->dummy_seed = 0;			/* its values are the quantized ones now */
	w->dummy_scale = 0;
	return CBLLM_OK;
}

typedef struct quant_walk
{
	cbllm_model *m;
	model_weight_mix mix;
	int			n_threads;
} quant_walk;

/* model_visit: convert one float matrix not tied, and keep the weight count true. */
static int
QuantizeTensor(void *arg, const model_tensor *mt, cbllm_err *err)
{
	quant_walk *q = arg;
	cbllm_weight *w = mt->matrix;
	bool		head;
	cbllm_dtype to;
	char		name[128];
	size_t		before;
	int			rc;

	if (w == NULL || mt->tied || cbllm_dtype_traits_of(w->dtype)->block_elems != 1)
		return CBLLM_OK;
	if (w->data == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "a weight format needs the weights on the host: the dummy weights of this device are made there");
	head = w == &q->m->lm_head || (w == &q->m->embed && q->m->lm_head_tied);
	to = TargetType(mt, w->dtype, head, q->mix, q->m->cfg.n_layers);
	if (to == w->dtype)
		return CBLLM_OK;
	arch_tensor_name(mt->t, mt->layer, mt->expert, false, name, sizeof(name));
	before = cbllm_dtype_row_bytes(w->dtype, w->cols) * (size_t) w->rows;
	if ((rc = ConvertMatrix(w, to, q->n_threads, name, err)) != CBLLM_OK)
		return rc;
	q->m->weight_bytes = q->m->weight_bytes - before +
		cbllm_dtype_row_bytes(w->dtype, w->cols) * (size_t) w->rows;
	return CBLLM_OK;
}

int
model_quantize(cbllm_model *m, model_weight_mix mix, int n_threads, cbllm_err *err)
{
	quant_walk	q = {m, mix, n_threads};
	double		t0 = cbllm_now();
	int			rc;

	if (n_threads <= 0)
	{
		long		n = sysconf(_SC_NPROCESSORS_ONLN);

		q.n_threads = n > 0 ? (int) n : 1;
	}
	if (q.n_threads > QUANT_MAX_THREADS)
		q.n_threads = QUANT_MAX_THREADS;
	rc = model_visit(m, QuantizeTensor, &q, err);
	if (m->lm_head_tied)
	{
		m->lm_head = m->embed;
		m->lm_head.owned = false;
	}
	m->quantize_seconds = cbllm_now() - t0;
	return rc;
}
