/*
 * forward.c: the decoder over a flat batch, written once against the
 * backend table for every architecture of arch.c.  It reads top to bottom
 * like the model:
 *
 *   x = embed(tokens) (* sqrt(hidden))
 *   for each layer:
 *       h = rmsnorm(x);  q, k, v = h Wq, h Wk, h Wv (+ bq, bk, bv)
 *       (q, k = rmsnorm of each head of q, k)  (q *= q_scale)
 *       rope(q, k);  store k, v
 *       a = attention(q, cache) Wo (+ bo)  (a = rmsnorm(a))
 *       x += a
 *       h = rmsnorm(x);  m = (act(h Wgate) * h Wup) Wdown  (m = rmsnorm(m))
 *           or, in a layer with experts, m = moe(h, h Wrouter)
 *           (+ sigmoid(h Wsh_router) * the shared expert's MLP of h)
 *       x += m
 *   logits = rmsnorm(x[rows asked]) Wlm_head
 *
 * What an architecture changes is read from its feature flags (arch.h),
 * the parenthesised steps above: ARCH_QKV_BIAS and ARCH_O_BIAS add the
 * projections' biases (Qwen2: q, k, v); ARCH_QK_NORM norms each head of q
 * and k before RoPE (Qwen3, Gemma-3); ARCH_SANDWICH_NORM norms the
 * attention's and the MLP's outputs before their residual adds (Gemma-3);
 * ARCH_EMBED_SCALE multiplies the embeddings (Gemma-3).  act is the
 * architecture's activation (SiLU, or GELU-tanh for Gemma-3), and q_scale
 * (config.json's query_pre_attn_scalar) turns the attention's 1/sqrt(head_dim)
 * into the model's own scale.  Gemma's (1 + w) norms need nothing here: the
 * loader folds the 1 into the vectors (model.h).  Positions are per layer:
 * layer l rotates with RoPE cfg.rope[cfg.layer_rope[l]] and attends within
 * cfg.layer_window[l] (model.h; Gemma-3's local and global layers).  A
 * layer with experts (cfg.layer_moe) computes its router's logits, and the
 * backend's moe runs the experts they choose (moe.h, backend.h).
 *
 * Gemma 4 (ARCH_GEMMA4) sizes each layer's heads, kv heads and MLP on its
 * own (cfg.layer_head_dim, layer_kv_heads, layer_ff); a KV-shared layer
 * (cfg.layer_kv_source) projects only q and attends to its source's cache;
 * v is RMSNormed without a weight; after the MLP's residual add comes the
 * per-layer input (ARCH_PLE: x += rmsnorm((gelu_tanh(x Wgate) * ple[l])
 * Wproj)) and x *= the layer's scalar; the logits are soft-capped.
 *
 * Every linear layer is one matmul over all T tokens of the step.  Where
 * the backend fuses the residual add with the next norm, each "x += ...;
 * h = rmsnorm(x)" pair is one operation.
 *
 * A decode step (one token per sequence) on a backend that records steps
 * is padded to the backend's size with tokens of an extra sequence that
 * owns only the backend's pad block; their rows are computed and ignored.
 */
#include "engine/forward.h"

#include <math.h>
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
	int			n_rows;			/* logit rows of the last step */
	bool		no_graphs;		/* recording failed once: run every step as it is */
	/* backend activations */
	float	   *x;				/* (max_tokens, hidden) residual stream */
	float	   *h;				/* (max_tokens, hidden) normed input / projection output */
	float	   *q;				/* (max_tokens, n_heads * head_dim) */
	float	   *k;				/* (max_tokens, n_kv_heads * head_dim) */
	float	   *v;				/* (max_tokens, n_kv_heads * head_dim) */
	float	   *att;			/* (max_tokens, n_heads * head_dim) */
	float	   *gate;			/* (max_tokens, intermediate) */
	float	   *up;				/* (max_tokens, intermediate) */
	float	   *router;			/* (max_tokens, n_experts) a layer's router logits; NULL
								 * without experts */
	float	   *moe_out;		/* (max_tokens, hidden) a layer's experts' output; NULL
								 * without experts */
	float	   *moe_in;			/* (max_tokens, hidden) Gemma 4's router and experts' input;
								 * NULL without its experts */
	float	   *sh_logit;		/* (max_tokens) a layer's shared-expert gate logits, with
								 * ARCH_SHARED_EXPERT; else NULL */
	float	   *qg;				/* (max_tokens, n_heads, 2 head_dim) q and its gate as
								 * projected, with ARCH_ATTN_GATE; else NULL */
	float	   *attn_gate;		/* (max_tokens, n_heads * head_dim) the gate, with ARCH_ATTN_GATE */
	float	   *lin_qkv;		/* (max_tokens, conv channels) a linear layer's q, k, v; NULL
								 * without linear layers (so the four below) */
	float	   *lin_z;			/* (max_tokens, lin_v_heads * lin_v_dim) its output gate */
	float	   *lin_beta;		/* (max_tokens, lin_v_heads) */
	float	   *lin_alpha;		/* (max_tokens, lin_v_heads) */
	float	   *lin_out;		/* (max_tokens, lin_v_heads * lin_v_dim) */
	float	   *ple;			/* (max_tokens, n_layers * ple_dim) the per-layer inputs as
								 * computed, with ARCH_PLE; else NULL (so the three below) */
	float	   *ple_tok;		/* (max_tokens, n_layers * ple_dim) their embeddings' part */
	float	   *ple_in;			/* (n_layers, max_tokens, ple_dim) layer by layer */
	state_cache *sc;			/* a hybrid model's states; NULL otherwise */
	int32_t    *state_slots;	/* (max_seqs) the step's sequences' slots */
	float	   *logits_dev;		/* (max_rows, vocab) */
	/* host batch description */
	int32_t    *tokens;			/* (max_tokens) */
	int32_t    *pos;			/* (max_tokens) */
	int32_t    *seq;			/* (max_tokens) */
	uint8_t    *rope_set;		/* (max_tokens) */
	int64_t    *slot;			/* (max_tokens) */
	int32_t    *rows;			/* (max_tokens) batch rows whose logits are wanted */
	const int32_t **tables;		/* (max_seqs) */
	int32_t		pad_table[1];	/* block table of the padding sequence */
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
	size_t		qd = (size_t) c->n_heads * model_max_head_dim(c);
	size_t		kvd = (size_t) model_max_kv_row(c);
	size_t		ff = (size_t) (c->shared_intermediate > model_max_ff(c) ? c->shared_intermediate :
							   model_max_ff(c));	/* the widest dense MLP */
	size_t		ple = (size_t) c->n_layers * c->ple_dim;

	if ((size_t) c->ple_dim > ff)
		ff = (size_t) c->ple_dim;	/* the per-layer input's gate shares the MLP's buffer */
	bool		lin_fail = false;

	if (f == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	if (c->n_experts > 0 && be->moe == NULL)
	{
		free(f);
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "the %s backend does not run mixture-of-experts models yet (%s has %d experts per layer); use device 'cpu'",
						  be->name, c->arch, c->n_experts);
	}
	if ((c->features & ARCH_SHARED_EXPERT) && c->n_experts > 0 && be->add_gated_rows == NULL)
	{
		free(f);
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "the %s backend does not run shared experts yet (%s); use device 'cpu'",
						  be->name, c->arch);
	}
	if ((c->n_linear_layers > 0 && be->linear_attention == NULL) ||
		((c->features & ARCH_ATTN_GATE) && (be->split_halves == NULL || be->sigmoid_mul == NULL)))
	{
		free(f);
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "the %s backend does not run hybrid models yet (%s has %d linear-attention layers and gated attention); use device 'cpu'",
						  be->name, c->arch, c->n_linear_layers);
	}
	if ((!model_kv_uniform(c) || c->n_kv_shared > 0 || (c->features & ARCH_GEMMA4)) &&
		(!be->per_layer_heads || (c->logit_softcap > 0 && be->softcap == NULL) ||
		 ((c->features & ARCH_PLE) && be->swap_axes == NULL)))
	{
		free(f);
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "the %s backend does not run Gemma 4's layers yet (%s: head sizes and kv heads per layer, KV shared between layers, soft-capped logits); use device 'cpu'",
						  be->name, c->arch);
	}
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
	f->gate = be->alloc(be, sizeof(float) * T * ff);
	f->up = be->alloc(be, sizeof(float) * T * ff);
	f->logits_dev = be->alloc(be, sizeof(float) * f->max_rows * c->vocab_size);
	if (c->n_experts > 0)
	{
		f->router = be->alloc(be, sizeof(float) * T * c->n_experts);
		f->moe_out = be->alloc(be, sizeof(float) * T * c->hidden);
	}
	if ((c->features & ARCH_SHARED_EXPERT) && c->n_experts > 0 &&
		(f->sh_logit = be->alloc(be, sizeof(float) * T)) == NULL)
		lin_fail = true;
	if ((c->features & ARCH_GEMMA4) && c->n_experts > 0 &&
		(f->moe_in = be->alloc(be, sizeof(float) * T * c->hidden)) == NULL)
		lin_fail = true;
	if ((c->features & ARCH_ATTN_GATE) &&
		((f->qg = be->alloc(be, sizeof(float) * T * 2 * qd)) == NULL ||
		 (f->attn_gate = be->alloc(be, sizeof(float) * T * qd)) == NULL))
		lin_fail = true;
	if (c->n_linear_layers > 0)
	{
		size_t		vd = (size_t) c->lin_v_heads * c->lin_v_dim;

		f->lin_qkv = be->alloc(be, sizeof(float) * T * (2 * (size_t) c->lin_k_heads * c->lin_k_dim + vd));
		f->lin_z = be->alloc(be, sizeof(float) * T * vd);
		f->lin_beta = be->alloc(be, sizeof(float) * T * c->lin_v_heads);
		f->lin_alpha = be->alloc(be, sizeof(float) * T * c->lin_v_heads);
		f->lin_out = be->alloc(be, sizeof(float) * T * vd);
		f->state_slots = malloc(sizeof(int32_t) * p->max_seqs);
		lin_fail |= !f->lin_qkv || !f->lin_z || !f->lin_beta || !f->lin_alpha || !f->lin_out ||
			!f->state_slots;
	}
	if (c->features & ARCH_PLE)
	{
		f->ple = be->alloc(be, sizeof(float) * T * ple);
		f->ple_tok = be->alloc(be, sizeof(float) * T * ple);
		f->ple_in = be->alloc(be, sizeof(float) * T * ple);
		lin_fail |= !f->ple || !f->ple_tok || !f->ple_in;
	}
	f->tokens = malloc(sizeof(int32_t) * T);
	f->pos = malloc(sizeof(int32_t) * T);
	f->seq = malloc(sizeof(int32_t) * T);
	f->rope_set = malloc(T);
	f->slot = malloc(sizeof(int64_t) * T);
	f->rows = malloc(sizeof(int32_t) * T);
	f->tables = malloc(sizeof(int32_t *) * p->max_seqs);
	f->logits = malloc(sizeof(float) * f->max_rows * c->vocab_size);
	if (lin_fail || !f->x || !f->h || !f->q || !f->k || !f->v || !f->att || !f->gate || !f->up ||
		!f->logits_dev || (c->n_experts > 0 && (!f->router || !f->moe_out)) || !f->tokens || !f->pos || !f->seq || !f->rope_set || !f->slot || !f->rows ||
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

/* The padded size of this step when the backend replays decode steps of that size; 0 otherwise. */
static int
GraphTokens(cbllm_forward *f, const fwd_seq *seqs, int n_seqs)
{
	cbllm_backend *be = f->be;
	int			G;

	if (f->no_graphs || be->graph_tokens == NULL || be->pad_block < 0 || n_seqs < 1)
		return 0;
	for (int s = 0; s < n_seqs; s++)
		if (seqs[s].n_tokens != 1 || seqs[s].logits != FWD_LOGITS_LAST)
			return 0;
	G = be->graph_tokens(be, n_seqs);
	if (G < n_seqs || G > f->max_tokens || G > f->max_rows || G > f->max_seqs)
		return 0;
	return G;
}

/* Flatten the sequences into the batch arrays; returns the number of logit rows. */
static int
BuildBatch(cbllm_forward *f, const fwd_seq *seqs, int n_seqs, bool allow_graph, fwd_batch *b,
		   cbllm_err *err)
{
	int			T = 0,
				n_rows = 0;
	int			bs = f->kv->block_size;
	int			G = allow_graph ? GraphTokens(f, seqs, n_seqs) : 0;

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
		if (f->state_slots != NULL)
			f->state_slots[s] = sq->state_slot;
		for (int i = 0; i < sq->n_tokens; i++, T++)
		{
			int			p = sq->pos0 + i;

			if (sq->tokens[i] < 0 || sq->tokens[i] >= f->model->cfg.vocab_size)
				return cbllm_fail(err, CBLLM_ERR_INVALID, "token id %d is outside the vocabulary",
								  sq->tokens[i]);
			f->tokens[T] = sq->tokens[i];
			f->pos[T] = p;
			f->seq[T] = s;
			f->rope_set[T] = sq->rope_set;
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
	f->n_rows = n_rows;
	b->graph = G > 0;
	if (G > T)
	{
		/* padding: one sequence at position 0 of the pad block */
		f->pad_table[0] = f->be->pad_block;
		f->tables[n_seqs] = f->pad_table;
		for (; T < G; T++)
		{
			f->tokens[T] = 0;
			f->pos[T] = 0;
			f->seq[T] = n_seqs;
			f->rope_set[T] = 0;
			f->slot[T] = (int64_t) f->be->pad_block * bs;
			f->rows[T] = T;
		}
		n_seqs++;
	}
	b->n_tokens = T;
	b->tokens = f->tokens;
	b->pos = f->pos;
	b->seq = f->seq;
	b->rope_set = f->rope_set;
	b->slot = f->slot;
	b->n_seqs = n_seqs;
	b->block_tables = f->tables;
	b->n_rows = b->graph ? T : n_rows;
	b->rows = f->rows;
	b->state_slots = f->state_slots;
	return n_rows;
}

/* x += y, then out = rmsnorm(x) * w: fused when the backend can. */
static void
AddNorm(cbllm_forward *f, float *x, const float *y, const float *w, int T, float *out)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;

	if (be->add_rmsnorm != NULL)
		be->add_rmsnorm(be, x, y, w, T, c->hidden, c->rms_eps, out);
	else
	{
		be->add(be, x, y, (int64_t) T * c->hidden);
		be->rmsnorm(be, x, w, T, c->hidden, c->rms_eps, out);
	}
}

/* gate = act(gate) * up (T, width) with the architecture's activation. */
static void
ActivateMul(cbllm_forward *f, int T, int width)
{
	const cbllm_model_config *c = &f->model->cfg;
	int64_t		n = (int64_t) T * width;

	switch (c->activation)
	{
		case ARCH_ACT_SILU:
			f->be->silu_mul(f->be, f->gate, f->up, n);
			break;
		case ARCH_ACT_GELU_TANH:
			f->be->gelu_tanh_mul(f->be, f->gate, f->up, n);
			break;
		case ARCH_ACT_SWIGLU_OAI:
			f->be->swiglu_oai_mul(f->be, f->gate, f->up, n);
			break;
	}
}

/* q and k of layer l, projected, biased, head-normed and scaled as the architecture says, then rotated. */
static void
QueryKey(cbllm_forward *f, int l, const cbllm_layer *w, const fwd_batch *b)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;
	int			T = b->n_tokens;
	int			hd = c->layer_head_dim[l],
				nkv = c->layer_kv_heads[l];
	bool		own_kv = c->layer_kv_source[l] == l;	/* else a KV-shared layer: q alone */

	if (!own_kv)
		be->matmul(be, 1, (const cbllm_weight *[]) {&w->wq}, f->h, T, (float *[]) {f->q});
	else						/* values that are the keys are their projection again */
		be->matmul(be, 3, (const cbllm_weight *[]) {&w->wq, &w->wk,
					   c->layer_v_is_k[l] ? &w->wk : &w->wv}, f->h, T,
				   (float *[]) {f->qg != NULL ? f->qg : f->q, f->k, f->v});
	if (f->qg != NULL)			/* each head's q, then its gate */
		be->split_halves(be, f->qg, (int64_t) T * c->n_heads, hd, f->q, f->attn_gate);
	if (c->features & ARCH_QKV_BIAS)
	{
		be->add_bias(be, f->q, w->bq, T, c->n_heads * hd);
		be->add_bias(be, f->k, w->bk, T, nkv * hd);
		be->add_bias(be, f->v, w->bv, T, nkv * hd);
	}
	if (c->features & ARCH_QK_NORM)
	{
		/* each head is a row of its head size */
		be->rmsnorm(be, f->q, w->q_norm, T * c->n_heads, hd, c->rms_eps, f->q);
		if (own_kv)
			be->rmsnorm(be, f->k, w->k_norm, T * nkv, hd, c->rms_eps, f->k);
	}
	if ((c->features & ARCH_GEMMA4) && own_kv)	/* v's norm has no weight */
		be->rmsnorm(be, f->v, NULL, T * nkv, hd, c->rms_eps, f->v);
	if (c->q_scale != 1.0f)
		be->scale(be, f->q, c->q_scale, (int64_t) T * c->n_heads * hd);
	be->rope(be, f->q, T, c->n_heads, c->layer_rope[l], b);
	if (own_kv)
		be->rope(be, f->k, T, nkv, c->layer_rope[l], b);
}

/* The dense MLP of layer l on f->h (T, hidden), its output in f->h. */
static void
DenseMlp(cbllm_forward *f, int l, const cbllm_layer *w, int T)
{
	cbllm_backend *be = f->be;

	be->matmul(be, 2, (const cbllm_weight *[]) {&w->w_gate, &w->w_up}, f->h, T,
			   (float *[]) {f->gate, f->up});
	ActivateMul(f, T, f->model->cfg.layer_ff[l]);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->w_down}, f->gate, T, (float *[]) {f->h});
}

/*
 * Gemma 4's layer with experts: the dense MLP on f->h and the experts
 * beside it, each output normed, summed in f->h.  The router and the
 * experts read the residual stream f->x, each through its own norm.
 */
static float *
DenseAndExperts(cbllm_forward *f, int l, const cbllm_layer *w, int T)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;

	DenseMlp(f, l, w, T);
	be->rmsnorm(be, f->h, w->dense_out_norm, T, c->hidden, c->rms_eps, f->h);
	be->rmsnorm(be, f->x, w->router_scale, T, c->hidden, c->rms_eps, f->moe_in);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->router}, f->moe_in, T, (float *[]) {f->router});
	be->rmsnorm(be, f->x, w->moe_in_norm, T, c->hidden, c->rms_eps, f->moe_in);
	be->moe(be, w, f->moe_in, f->router, T, f->moe_out);
	be->rmsnorm(be, f->moe_out, w->moe_out_norm, T, c->hidden, c->rms_eps, f->moe_out);
	be->add(be, f->h, f->moe_out, (int64_t) T * c->hidden);
	return f->h;
}

/*
 * The MLP of layer l on f->h (T, hidden), normed: the dense one, or the
 * experts its router chooses (Gemma 4: both).  Returns where the output
 * (T, hidden) is.
 */
static float *
Mlp(cbllm_forward *f, int l, const cbllm_layer *w, int T)
{
	cbllm_backend *be = f->be;

	if (f->model->cfg.layer_moe[l] && f->moe_in != NULL)
		return DenseAndExperts(f, l, w, T);
	if (f->model->cfg.layer_moe[l])
	{
		be->matmul(be, 1, (const cbllm_weight *[]) {&w->router}, f->h, T, (float *[]) {f->router});
		if (w->router_bias != NULL)
			be->add_bias(be, f->router, w->router_bias, T, f->model->cfg.n_experts);
		be->moe(be, w, f->h, f->router, T, f->moe_out);
		if (f->sh_logit != NULL)
		{
			/* the shared expert, weighed by the sigmoid of its gate's logit */
			int			sh = f->model->cfg.shared_intermediate;

			be->matmul(be, 3, (const cbllm_weight *[]) {&w->w_sh_gate, &w->w_sh_up, &w->w_sh_router},
					   f->h, T, (float *[]) {f->gate, f->up, f->sh_logit});
			ActivateMul(f, T, sh);
			be->matmul(be, 1, (const cbllm_weight *[]) {&w->w_sh_down}, f->gate, T,
					   (float *[]) {f->h});
			be->add_gated_rows(be, f->moe_out, f->h, f->sh_logit, T, f->model->cfg.hidden);
		}
		return f->moe_out;
	}
	DenseMlp(f, l, w, T);
	return f->h;
}

/*
 * The token mixer of linear layer l on f->h (T, hidden), normed: the
 * Gated DeltaNet (backend.h's linear_attention) between its input and
 * output projections, continuing each sequence's state.  Output in f->h.
 */
static void
LinearMixer(cbllm_forward *f, int l, const cbllm_layer *w, const fwd_batch *b)
{
	cbllm_backend *be = f->be;
	int			T = b->n_tokens;

	be->matmul(be, 2, (const cbllm_weight *[]) {&w->w_lin_qkv, &w->w_lin_z}, f->h, T,
			   (float *[]) {f->lin_qkv, f->lin_z});
	be->matmul(be, 2, (const cbllm_weight *[]) {&w->w_lin_b, &w->w_lin_a}, f->h, T,
			   (float *[]) {f->lin_beta, f->lin_alpha});
	be->linear_attention(be, f->sc, l, w, f->lin_qkv, f->lin_z, f->lin_beta, f->lin_alpha, b,
						 f->lin_out);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->w_lin_out}, f->lin_out, T,
			   (float *[]) {f->h});
}

/* The attention of layer l on f->h (T, hidden), normed; output in f->h. */
static void
AttentionMixer(cbllm_forward *f, int l, const cbllm_layer *w, const fwd_batch *b)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;
	int			T = b->n_tokens;

	QueryKey(f, l, w, b);
	if (c->layer_kv_source[l] == l)
		be->kv_store(be, f->kv, l, f->k, f->v, b);
	be->attention(be, f->kv, l, f->q, w->sinks, b, f->att);
	if (f->attn_gate != NULL)
		be->sigmoid_mul(be, f->att, f->attn_gate, (int64_t) T * c->n_heads * c->layer_head_dim[l]);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->wo}, f->att, T, (float *[]) {f->h});
	if (c->features & ARCH_O_BIAS)
		be->add_bias(be, f->h, w->bo, T, c->hidden);
}

/*
 * Gemma 4's per-layer input of layer l, added to the residual stream:
 * x += rmsnorm((gelu_tanh(x Wgate) * ple_in[l]) Wproj) * ple_norm.
 */
static void
PerLayerInput(cbllm_forward *f, int l, const cbllm_layer *w, int T)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;
	int64_t		n = (int64_t) T * c->ple_dim;

	be->matmul(be, 1, (const cbllm_weight *[]) {&w->w_ple_gate}, f->x, T, (float *[]) {f->gate});
	be->gelu_tanh_mul(be, f->gate, f->ple_in + (int64_t) l * n, n);
	be->matmul(be, 1, (const cbllm_weight *[]) {&w->w_ple_proj}, f->gate, T, (float *[]) {f->h});
	be->rmsnorm(be, f->h, w->ple_norm, T, c->hidden, c->rms_eps, f->h);
	be->add(be, f->x, f->h, (int64_t) T * c->hidden);
}

/*
 * Gemma 4's per-layer inputs of the step's tokens, from the scaled
 * embeddings in f->x: ((x Wmodel_proj / sqrt(hidden), each layer's slice
 * RMSNormed) + embed_ple[token] * sqrt(ple_dim)) / sqrt(2), then laid out
 * layer by layer in f->ple_in.
 */
static void
PerLayerInputs(cbllm_forward *f, const fwd_batch *b)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;
	int			T = b->n_tokens,
				L = c->n_layers;
	int64_t		n = (int64_t) T * L * c->ple_dim;

	be->embed(be, &f->model->embed_ple, b, f->ple_tok);
	be->scale(be, f->ple_tok, c->ple_embed_scale, n);
	be->matmul(be, 1, (const cbllm_weight *[]) {&f->model->w_ple_model_proj}, f->x, T,
			   (float *[]) {f->ple});
	be->scale(be, f->ple, 1.0f / sqrtf((float) c->hidden), n);
	be->rmsnorm(be, f->ple, f->model->ple_proj_norm, T * L, c->ple_dim, c->rms_eps, f->ple);
	be->add(be, f->ple, f->ple_tok, n);
	be->scale(be, f->ple, (float) M_SQRT1_2, n);
	be->swap_axes(be, f->ple, T, L, c->ple_dim, f->ple_in);
}

/*
 * One decoder layer over the batch, updating the residual stream f->x.  On
 * entry f->h holds rmsnorm(x) for this layer's token mixer (attention, or a
 * hybrid model's linear attention); on exit it holds the norm for
 * next_norm (the next layer's), or x is complete when NULL.
 */
static void
Layer(cbllm_forward *f, int l, const fwd_batch *b, const float *next_norm)
{
	const cbllm_model_config *c = &f->model->cfg;
	const cbllm_layer *w = &f->model->layers[l];
	cbllm_backend *be = f->be;
	int			T = b->n_tokens;
	bool		sandwich = (c->features & ARCH_SANDWICH_NORM) != 0;
	float	   *mlp;

	if (c->layer_linear[l])
		LinearMixer(f, l, w, b);
	else
		AttentionMixer(f, l, w, b);
	if (sandwich)
		be->rmsnorm(be, f->h, w->attn_out_norm, T, c->hidden, c->rms_eps, f->h);
	AddNorm(f, f->x, f->h, w->mlp_norm, T, f->h);

	mlp = Mlp(f, l, w, T);
	if (sandwich)
		be->rmsnorm(be, mlp, w->mlp_out_norm, T, c->hidden, c->rms_eps, mlp);
	if (c->features & ARCH_GEMMA4)
	{
		be->add(be, f->x, mlp, (int64_t) T * c->hidden);
		if (c->features & ARCH_PLE)
			PerLayerInput(f, l, w, T);
		be->scale(be, f->x, w->layer_scalar_value, (int64_t) T * c->hidden);
		if (next_norm != NULL)
			be->rmsnorm(be, f->x, next_norm, T, c->hidden, c->rms_eps, f->h);
	}
	else if (next_norm != NULL)
		AddNorm(f, f->x, mlp, next_norm, T, f->h);
	else
		be->add(be, f->x, mlp, (int64_t) T * c->hidden);
}

/* The whole pass over a built batch, leaving the logits in f->logits_dev. */
static int
RunPass(cbllm_forward *f, const fwd_batch *b, cbllm_err *err)
{
	const cbllm_model_config *c = &f->model->cfg;
	cbllm_backend *be = f->be;
	int			rc;

	if ((rc = be->begin_step(be, b, err)) != CBLLM_OK)
		return rc;
	be->embed(be, &f->model->embed, b, f->x);
	if (c->features & ARCH_EMBED_SCALE)
		be->scale(be, f->x, c->embed_scale, (int64_t) b->n_tokens * c->hidden);
	if (c->features & ARCH_PLE)
		PerLayerInputs(f, b);
	be->rmsnorm(be, f->x, f->model->layers[0].attn_norm, b->n_tokens, c->hidden, c->rms_eps,
				f->h);
	for (int l = 0; l < c->n_layers; l++)
		Layer(f, l, b, l + 1 < c->n_layers ? f->model->layers[l + 1].attn_norm : NULL);
	if (b->n_rows > 0)
	{
		be->gather_rows(be, f->x, b->rows, b->n_rows, c->hidden, f->h);
		be->rmsnorm(be, f->h, f->model->final_norm, b->n_rows, c->hidden, c->rms_eps, f->h);
		be->matmul(be, 1, (const cbllm_weight *[]) {&f->model->lm_head}, f->h, b->n_rows,
				   (float *[]) {f->logits_dev});
		if (c->logit_softcap > 0)
			be->softcap(be, f->logits_dev, c->logit_softcap, (int64_t) b->n_rows * c->vocab_size);
	}
	return be->end_step != NULL ? be->end_step(be, err) : CBLLM_OK;
}

/* Run one step over the flattened sequences. */
int
forward_run(cbllm_forward *f, const fwd_seq *seqs, int n_seqs, int *n_rows, cbllm_err *err)
{
	fwd_batch	b;
	int			rows,
				rc;

	rows = BuildBatch(f, seqs, n_seqs, true, &b, err);
	if (rows < 0)
		return rows;
	rc = RunPass(f, &b, err);
	if (rc != CBLLM_OK && b.graph)
	{
		/* recording or replay failed before anything ran: run the step as it is from now on */
		f->no_graphs = true;
		if ((rows = BuildBatch(f, seqs, n_seqs, false, &b, err)) < 0)
			return rows;
		rc = RunPass(f, &b, err);
	}
	*n_rows = rc == CBLLM_OK ? rows : 0;
	f->n_rows = *n_rows;
	return rc;
}

/* The last step's logits (n_rows, vocab) on the host, valid until the next step. */
int
forward_logits(cbllm_forward *f, const float **logits, cbllm_err *err)
{
	int			rc = CBLLM_OK;

	if (f->n_rows > 0)
		rc = f->be->download(f->be, f->logits_dev, f->logits,
							 (size_t) f->n_rows * f->model->cfg.vocab_size, err);
	*logits = f->logits;
	return rc;
}

/* Whether the backend samples on its own (forward_sample). */
bool
forward_can_sample(const cbllm_forward *f)
{
	return f->be->sample != NULL;
}

/* tokens[r] = a token below n_ids drawn by the backend from row r of the last step's logits, within its mask. */
int
forward_sample(cbllm_forward *f, int n_ids, const sampler_row *p, const uint32_t *masks,
			   int n_masks, int32_t *tokens, cbllm_err *err)
{
	if (f->be->sample == NULL)
		return cbllm_fail(err, CBLLM_ERR_INTERNAL, "the %s backend does not sample", f->be->name);
	if (f->n_rows == 0)
		return CBLLM_OK;
	return f->be->sample(f->be, f->logits_dev, f->n_rows, f->model->cfg.vocab_size, n_ids, p,
						 masks, n_masks, tokens, err);
}

/* Attach the KV cache (a device backend sizes it after the workspace is allocated). */
void
forward_set_kv(cbllm_forward *f, kv_cache *kv)
{
	f->kv = kv;
}

/* Attach the state cache. */
void
forward_set_state(cbllm_forward *f, state_cache *sc)
{
	f->sc = sc;
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
	if (f->router != NULL)
		be->free(be, f->router);
	if (f->moe_out != NULL)
		be->free(be, f->moe_out);
	{
		float	   *opt[] = {f->qg, f->attn_gate, f->lin_qkv, f->lin_z, f->lin_beta,
		f->lin_alpha, f->lin_out, f->sh_logit, f->ple, f->ple_tok, f->ple_in, f->moe_in};

		for (int i = 0; i < (int) (sizeof(opt) / sizeof(opt[0])); i++)
			if (opt[i] != NULL)
				be->free(be, opt[i]);
	}
	free(f->state_slots);
	free(f->tokens);
	free(f->pos);
	free(f->seq);
	free(f->rope_set);
	free(f->slot);
	free(f->rows);
	free(f->tables);
	free(f->logits);
	free(f);
}
