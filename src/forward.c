/*
 * forward.c: the Llama decoder over a flat batch, written once against the
 * backend table.  It reads top to bottom like the model:
 *
 *   x = embed(tokens)
 *   for each layer:
 *       h = rmsnorm(x);  q, k, v = h Wq, h Wk, h Wv;  rope(q, k);  store k, v
 *       x += attention(q, cache) Wo
 *       h = rmsnorm(x);  x += (silu(h Wgate) * h Wup) Wdown
 *   logits = rmsnorm(x[rows asked]) Wlm_head
 *
 * Every linear layer is one matmul over all T tokens of the step.
 */
#include "forward.h"

#include <stdlib.h>
#include <string.h>

struct cbllm_forward
{
	const cbllm_model *model;
	cbllm_backend *be;
	kv_cache   *kv;
	int			max_tokens;
	int			max_seqs;
	int			max_rows;		/* most logit rows */
	/* backend activations */
	float	   *x;				/* (max_tokens, hidden) residual stream */
	float	   *h;				/* (max_tokens, hidden) normed input / projection output */
	float	   *q;				/* (max_tokens, n_heads * head_dim) */
	float	   *k;				/* (max_tokens, n_kv_heads * head_dim) */
	float	   *v;				/* (max_tokens, n_kv_heads * head_dim) */
	float	   *att;			/* (max_tokens, n_heads * head_dim) */
	float	   *gate;			/* (max_tokens, intermediate) */
	float	   *up;				/* (max_tokens, intermediate) */
	float	   *logits_dev;		/* (max_rows, vocab) */
	/* host batch description */
	int32_t    *tokens;			/* (max_tokens) */
	int32_t    *pos;			/* (max_tokens) */
	int32_t    *seq;			/* (max_tokens) */
	int64_t    *slot;			/* (max_tokens) */
	int32_t    *rows;			/* (max_tokens) batch rows whose logits are wanted */
	const int32_t **tables;		/* (max_seqs) */
	float	   *logits;			/* (max_rows, vocab) host copy */
};

/* Allocate the workspace for steps of up to p->max_tokens tokens. */
int
forward_create(const forward_params *p, cbllm_forward **out, cbllm_err *err)
{
	const cbllm_model_config *c = &p->model->cfg;
	cbllm_forward *f = calloc(1, sizeof(*f));
	cbllm_backend *be = p->backend;
	size_t		T = (size_t) p->max_tokens;
	size_t		qd = (size_t) c->n_heads * c->head_dim;
	size_t		kvd = (size_t) c->n_kv_heads * c->head_dim;

	if (f == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	f->model = p->model;
	f->be = be;
	f->kv = p->kv;
	f->max_tokens = p->max_tokens;
	f->max_seqs = p->max_seqs;
	f->max_rows = p->max_logit_rows > 0 ? p->max_logit_rows : p->max_seqs;
	f->x = be->alloc(be, sizeof(float) * T * c->hidden);
	f->h = be->alloc(be, sizeof(float) * T * c->hidden);
	f->q = be->alloc(be, sizeof(float) * T * qd);
	f->k = be->alloc(be, sizeof(float) * T * kvd);
	f->v = be->alloc(be, sizeof(float) * T * kvd);
	f->att = be->alloc(be, sizeof(float) * T * qd);
	f->gate = be->alloc(be, sizeof(float) * T * c->intermediate);
	f->up = be->alloc(be, sizeof(float) * T * c->intermediate);
	f->logits_dev = be->alloc(be, sizeof(float) * f->max_rows * c->vocab_size);
	f->tokens = malloc(sizeof(int32_t) * T);
	f->pos = malloc(sizeof(int32_t) * T);
	f->seq = malloc(sizeof(int32_t) * T);
	f->slot = malloc(sizeof(int64_t) * T);
	f->rows = malloc(sizeof(int32_t) * T);
	f->tables = malloc(sizeof(int32_t *) * p->max_seqs);
	f->logits = malloc(sizeof(float) * f->max_rows * c->vocab_size);
	if (!f->x || !f->h || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up ||
		!f->logits_dev || !f->tokens || !f->pos || !f->seq || !f->slot || !f->rows ||
		!f->tables || !f->logits)
	{
		forward_free(f);
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "out of memory for the activations of %d tokens per step; lower max_num_batched_tokens",
						  p->max_tokens);
	}
	*out = f;
	return CBLLM_OK;
}

/* Flatten the sequences into the batch arrays; returns the number of logit rows. */
static int
BuildBatch(cbllm_forward *f, const fwd_seq *seqs, int n_seqs, fwd_batch *b, cbllm_err *err)
{
	int			T = 0,
				n_rows = 0;
	int			bs = f->kv->block_size;

	if (n_seqs > f->max_seqs)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "%d sequences exceed the step limit of %d",
						  n_seqs, f->max_seqs);
	for (int s = 0; s < n_seqs; s++)
	{
		const fwd_seq *sq = &seqs[s];

		if (sq->n_tokens < 1 || T + sq->n_tokens > f->max_tokens)
			return cbllm_fail(err, CBLLM_ERR_INTERNAL, "step of more than %d tokens",
							  f->max_tokens);
		f->tables[s] = sq->block_table;
		for (int i = 0; i < sq->n_tokens; i++, T++)
		{
			int			p = sq->pos0 + i;

			if (sq->tokens[i] < 0 || sq->tokens[i] >= f->model->cfg.vocab_size)
				return cbllm_fail(err, CBLLM_ERR_INVALID, "token id %d is outside the vocabulary",
								  sq->tokens[i]);
			f->tokens[T] = sq->tokens[i];
			f->pos[T] = p;
			f->seq[T] = s;
			f->slot[T] = (int64_t) sq->block_table[p / bs] * bs + p % bs;
			if (sq->logits == FWD_LOGITS_ALL ||
				(sq->logits == FWD_LOGITS_LAST && i == sq->n_tokens - 1))
			{
				if (n_rows == f->max_rows)
					return cbllm_fail(err, CBLLM_ERR_INTERNAL,
									  "step asks for more than %d logit rows", f->max_rows);
				f->rows[n_rows++] = T;
			}
		}
	}
	b->n_tokens = T;
	b->tokens = f->tokens;
	b->pos = f->pos;
	b->seq = f->seq;
	b->slot = f->slot;
	b->n_seqs = n_seqs;
	b->block_tables = f->tables;
	return n_rows;
}

/* One decoder layer over the batch, updating the residual stream f->x. */
static void
Layer(cbllm_forward *f, int l, const fwd_batch *b)
{
	const cbllm_model_config *c = &f->model->cfg;
	const cbllm_layer *w = &f->model->layers[l];
	cbllm_backend *be = f->be;
	int			T = b->n_tokens;

	be->rmsnorm(be, f->x, w->attn_norm, T, c->hidden, c->rms_eps, f->h);
	be->matmul(be, 3, (const cbllm_weight *[]) {&w->wq, &w->wk, &w->wv}, f->h, T,
			   (float *[]) {f->q, f->k, f->v});
	be->rope(be, f->q, T, c->n_heads, b);
	be->rope(be, f->k, T, c->n_kv_heads, b);
	be->kv_store(be, f->kv, l, f->k, f->v, b);
	be->attention(be, f->kv, l, f->q, b, f->att);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->wo}, f->att, T, (float *[]) {f->h});
	be->add(be, f->x, f->h, (int64_t) T * c->hidden);

	be->rmsnorm(be, f->x, w->mlp_norm, T, c->hidden, c->rms_eps, f->h);
	be->matmul(be, 2, (const cbllm_weight *[]) {&w->w_gate, &w->w_up}, f->h, T,
			   (float *[]) {f->gate, f->up});
	be->silu_mul(be, f->gate, f->up, (int64_t) T * c->intermediate);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->w_down}, f->gate, T, (float *[]) {f->h});
	be->add(be, f->x, f->h, (int64_t) T * c->hidden);
}

/* Run one step over the flattened sequences. */
int
forward_run(cbllm_forward *f, const fwd_seq *seqs, int n_seqs, const float **logits,
			int *n_rows, cbllm_err *err)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;
	fwd_batch	b;
	int			rows,
				rc;

	rows = BuildBatch(f, seqs, n_seqs, &b, err);
	if (rows < 0)
		return rows;
	if ((rc = be->begin_step(be, &b, err)) != CBLLM_OK)
		return rc;
	be->embed(be, &f->model->embed, &b, f->x);
	for (int l = 0; l < c->n_layers; l++)
		Layer(f, l, &b);
	*n_rows = rows;
	*logits = f->logits;
	if (rows == 0)
		return CBLLM_OK;
	be->gather_rows(be, f->x, f->rows, rows, c->hidden, f->h);
	be->rmsnorm(be, f->h, f->model->final_norm, rows, c->hidden, c->rms_eps, f->h);
	be->matmul(be, 1, (const cbllm_weight *[]) {&f->model->lm_head}, f->h, rows,
			   (float *[]) {f->logits_dev});
	return be->download(be, f->logits_dev, f->logits, (size_t) rows * c->vocab_size, err);
}

/* Free the workspace. */
void
forward_free(cbllm_forward *f)
{
	cbllm_backend *be;

	if (f == NULL)
		return;
	be = f->be;
	be->free(be, f->x);
	be->free(be, f->h);
	be->free(be, f->q);
	be->free(be, f->k);
	be->free(be, f->v);
	be->free(be, f->att);
	be->free(be, f->gate);
	be->free(be, f->up);
	be->free(be, f->logits_dev);
	free(f->tokens);
	free(f->pos);
	free(f->seq);
	free(f->slot);
	free(f->rows);
	free(f->tables);
	free(f->logits);
	free(f);
}
