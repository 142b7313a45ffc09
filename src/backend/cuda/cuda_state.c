/*
 * cuda_state.c: a hybrid model's linear attention on the CUDA backend: the
 * states in device memory (backend.h's alloc_state and copy_state), each
 * step's sequence starts and state slots uploaded beside the batch, and the
 * table's linear_attention, split_halves and sigmoid_mul over the kernels
 * of cuda_linear_attn.cu.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ctx.h"
#include "backend/cuda/cuda_ops.h"

/* Floats of one slot of one layer: the conv's inputs and the delta-rule state. */
static int64_t
ConvFloats(const state_cache_params *p)
{
	return (int64_t) p->conv_rows * p->conv_dim;
}

static int64_t
RecFloats(const state_cache_params *p)
{
	return p->n_heads * state_cache_head_floats(p);
}

/* Device states of p->n_slots sequences over every linear layer, zeroed, and the step's staging. */
int
cuda_state_alloc(cbllm_backend *be, const state_cache_params *p, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	size_t		conv = sizeof(float) * (size_t) (p->n_layers * p->n_slots * ConvFloats(p)),
				rec = sizeof(float) * (size_t) (p->n_layers * p->n_slots * RecFloats(p)),
				seqs = sizeof(int32_t) * ((size_t) c->max_tokens + 1);
	float	   *zero;
	int			rc;

	if (conv == 0)
		conv = sizeof(float);
	if ((rc = cuda_alloc((void **) &c->d_conv_states, conv, err)) ||
		(rc = cuda_alloc((void **) &c->d_rec_states, rec, err)))
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "the linear-attention states of %d sequences (%zu MiB) do not fit on the GPU; lower max_num_seqs",
						  p->n_slots, (conv + rec) >> 20);
	if ((rc = cuda_alloc((void **) &c->d_seq_first, seqs, err)) ||
		(rc = cuda_alloc((void **) &c->d_state_slots, seqs, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_seq_first, seqs, err)) ||
		(rc = cuda_host_alloc((void **) &c->h_state_slots, seqs, err)))
		return rc;
	c->state = *p;
	/* zeroed once, so that a swap copy never reads what was never written */
	if ((zero = calloc(1, conv > rec ? conv : rec)) == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	rc = cuda_upload(c->d_conv_states, zero, conv, err);
	if (rc == CBLLM_OK)
		rc = cuda_upload(c->d_rec_states, zero, rec, err);
	free(zero);
	return rc;
}

/* Free what cuda_state_alloc allocated. */
void
cuda_state_free(cuda_ctx *c)
{
	cuda_free(c->d_conv_states);
	cuda_free(c->d_rec_states);
	cuda_free(c->d_seq_first);
	cuda_free(c->d_state_slots);
	cuda_host_free(c->h_seq_first);
	cuda_host_free(c->h_state_slots);
}

/* One slot's state over all layers to host memory or back, in state_cache_save's layout. */
int
cuda_state_copy(cbllm_backend *be, int32_t slot, float *host, bool to_host, cbllm_err *err)
{
	cuda_ctx   *c = be->ctx;
	const state_cache_params *p = &c->state;
	int64_t		cf = ConvFloats(p),
				rf = RecFloats(p);
	int			rc;

	/* the previous step's kernels may still be updating the state */
	if ((rc = cuda_stream_sync(c->stream, err)) != CBLLM_OK)
		return rc;
	for (int l = 0; l < p->n_layers && rc == CBLLM_OK; l++)
	{
		float	   *dc = c->d_conv_states + ((int64_t) l * p->n_slots + slot) * cf,
				   *dr = c->d_rec_states + ((int64_t) l * p->n_slots + slot) * rf;

		if (cf > 0)
			rc = to_host ? cuda_download(host, dc, sizeof(float) * cf, err) :
				cuda_upload(dc, host, sizeof(float) * cf, err);
		host += cf;
		if (rc == CBLLM_OK)
			rc = to_host ? cuda_download(host, dr, sizeof(float) * rf, err) :
				cuda_upload(dr, host, sizeof(float) * rf, err);
		host += rf;
	}
	return rc;
}

/*
 * Stage the step's sequence starts and state slots (the batch holds each
 * sequence's tokens together) and copy them up on the step's stream.
 */
int
cuda_state_upload(cuda_ctx *c, const fwd_batch *b, cbllm_err *err)
{
	int			n = 0;
	int			rc;

	if (b->state_slots == NULL || c->d_seq_first == NULL)
		return CBLLM_OK;
	for (int t = 0; t < b->n_tokens; t++)
		if (t == 0 || b->seq[t] != b->seq[t - 1])
		{
			c->h_seq_first[n] = t;
			c->h_state_slots[n] = b->state_slots[b->seq[t]];
			if (c->h_state_slots[n] < 0 || c->h_state_slots[n] >= c->state.n_slots)
				return cbllm_fail(err, CBLLM_ERR_INTERNAL, "sequence %d has no state slot",
								  b->seq[t]);
			n++;
		}
	c->h_seq_first[n] = b->n_tokens;
	c->n_state_seqs = n;
	if ((rc = cuda_copy_async(c->d_seq_first, c->h_seq_first, sizeof(int32_t) * (n + 1),
							  c->stream, err)) ||
		(rc = cuda_copy_async(c->d_state_slots, c->h_state_slots, sizeof(int32_t) * n,
							  c->stream, err)))
		return rc;
	return CBLLM_OK;
}

/* The device copy of a model vector, or a failure noted for the step. */
static const float *
Vector(cuda_ctx *c, const float *host, const char *what)
{
	const dev_weight *d = cuda_weight_find(c, host, 0);

	if (d == NULL)
	{
		cuda_backend_note(c, cbllm_fail(&c->err, CBLLM_ERR_INTERNAL, "%s not on the GPU", what));
		return NULL;
	}
	return d->dev;
}

/* backend.h's linear_attention. */
void
cuda_linear_attention_op(cbllm_backend *be, state_cache *sc, int l, const cbllm_layer *w,
						 float *qkv, const float *z, const float *beta, const float *alpha,
						 const fwd_batch *b, float *out)
{
	cuda_ctx   *c = be->ctx;
	const cbllm_model_config *cfg = &c->cfg;
	const state_cache_params *p = &c->state;
	int			layer = cfg->state_layer[l];
	cuda_linear_args a = {
		.qkv = qkv, .z = z, .beta = beta, .alpha = alpha,
		.kern = Vector(c, w->lin_conv, "the conv kernel"),
		.a = Vector(c, w->lin_a, "A"),
		.dt_bias = Vector(c, w->lin_dt_bias, "dt_bias"),
		.norm = Vector(c, w->lin_norm, "the gated norm"),
		.conv_states = c->d_conv_states + (int64_t) layer * p->n_slots * ConvFloats(p),
		.rec_states = c->d_rec_states + (int64_t) layer * p->n_slots * RecFloats(p),
		.seq_first = c->d_seq_first, .slots = c->d_state_slots, .pos = c->d_pos, .out = out,
		.n_seqs = c->n_state_seqs,
		.nk = cfg->lin_k_heads, .nv = cfg->lin_v_heads, .dk = cfg->lin_k_dim,
		.dv = cfg->lin_v_dim, .conv = cfg->lin_conv, .tiled = cfg->lin_v_tiled,
		.eps = cfg->rms_eps,
	};

	(void) sc;
	if (c->mode == STEP_REPLAY || a.kern == NULL || a.a == NULL || a.dt_bias == NULL ||
		a.norm == NULL)
		return;
	cuda_backend_note(c, cuda_linear_attention(&a, c->stream, &c->err));
}

/* backend.h's split_halves. */
void
cuda_split_halves_op(cbllm_backend *be, const float *x, int64_t n, int width, float *first,
					 float *second)
{
	cuda_ctx   *c = be->ctx;

	if (c->mode != STEP_REPLAY)
		cuda_backend_note(c, cuda_split_halves(x, n, width, first, second, c->stream, &c->err));
}

/* backend.h's sigmoid_mul. */
void
cuda_sigmoid_mul_op(cbllm_backend *be, float *x, const float *gate, int64_t n)
{
	cuda_ctx   *c = be->ctx;

	if (c->mode != STEP_REPLAY)
		cuda_backend_note(c, cuda_sigmoid_mul(x, gate, n, c->stream, &c->err));
}

/* backend.h's add_gated_rows (Qwen3.5-MoE's shared expert). */
void
cuda_add_gated_rows_op(cbllm_backend *be, float *x, const float *y, const float *logit, int T,
					   int dim)
{
	cuda_ctx   *c = be->ctx;

	if (c->mode != STEP_REPLAY)
		cuda_backend_note(c, cuda_add_gated_rows(x, y, logit, T, dim, c->stream, &c->err));
}
