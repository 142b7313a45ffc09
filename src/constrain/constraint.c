/*
 * constraint.c: the vocabulary's byte trie, allowed-token masks per
 * automaton state, the budget rule and the masked copy of the logits
 * (constraint.h).
 */
#include "constrain/constraint.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/*
 * The trie in preorder.  Node i is reached by byte[i] from the nearest node
 * before it of depth depth[i] - 1 (the root, depth 0, is implicit); its
 * subtree is the nodes [i, skip[i]); its tokens are ids[tok_first[i] ..
 * tok_first[i + 1]).
 */
struct constraint_vocab
{
	const cbllm_tokenizer *tok;
	int			n_logits;		/* logits per row: ids [0, n_logits) */
	int			n_words;		/* mask words: n_logits / 32 rounded up */
	int32_t		n_nodes;
	int			max_depth;		/* the longest token's bytes */
	uint8_t    *byte;			/* (n_nodes) */
	uint16_t   *depth;			/* (n_nodes) 1 for the root's children */
	int32_t    *skip;			/* (n_nodes) */
	int32_t    *tok_first;		/* (n_nodes + 1) */
	int32_t    *ids;			/* (tokens in the trie) in trie order */
	int32_t    *eos;			/* (n_eos) end-of-turn ids below n_logits */
	int			n_eos;
	char		all_bytes[256]; /* byte b at b: the text of byte-fallback tokens */
};

/* A cached mask: what may follow one state, under no budget. */
typedef struct cached_mask
{
	int32_t		n_allowed;		/* tokens set in bits */
	int32_t		max_dist;		/* the largest dist after one of them; -1 when none */
	uint32_t	bits[];			/* (n_words) */
} cached_mask;

struct constraint
{
	const constraint_vocab *v;
	cbllm_dfa  *dfa;
	char	   *text;			/* the pattern, NUL-terminated */
	size_t		len;
	uint8_t    *final;			/* (n_states) 1: accepting, and no byte follows */
	_Atomic(cached_mask *) *cache;	/* (n_states) NULL until first computed */
	atomic_size_t cached_bytes;
};

/* ------------------------------------------------------------ the trie */

typedef struct tok_text
{
	const char *s;
	uint32_t	len;
	int32_t		id;
} tok_text;

/* Bytewise order, a prefix first, then id: equal texts end up side by side. */
static int
TextCmp(const void *a, const void *b)
{
	const tok_text *x = a,
			   *y = b;
	uint32_t	n = x->len < y->len ? x->len : y->len;
	int			c = n ? memcmp(x->s, y->s, n) : 0;

	if (c != 0)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Whether id is one of the n end-of-turn ids. */
static bool
IsEos(const int32_t *eos, int n, int32_t id)
{
	for (int i = 0; i < n; i++)
		if (eos[i] == id)
			return true;
	return false;
}

/* The texts of every token a constraint may choose, sorted; *n of them. */
static tok_text *
CollectTexts(const constraint_vocab *v, int *n, size_t *total)
{
	int			n_ids = tokenizer_vocab_size(v->tok);
	tok_text   *t;
	char		one;

	n_ids = n_ids < v->n_logits ? n_ids : v->n_logits;
	t = malloc(sizeof(tok_text) * (n_ids > 0 ? n_ids : 1));

	*n = 0;
	*total = 0;
	if (t == NULL)
		return NULL;
	for (int32_t id = 0; id < n_ids; id++)
	{
		size_t		len;
		const char *s = tokenizer_token_bytes(v->tok, id, &one, &len);

		if (s == NULL || len == 0 || len > CONSTRAINT_MAX_TOKEN_BYTES || IsEos(v->eos, v->n_eos, id))
			continue;
		if (s == &one)			/* a byte token: point at a byte that outlives this call */
			s = &v->all_bytes[(uint8_t) one];
		t[*n] = (tok_text) {s, (uint32_t) len, id};
		(*n)++;
		*total += len;
	}
	qsort(t, *n, sizeof(tok_text), TextCmp);
	return t;
}

/* Lay the sorted texts out as the preorder trie. */
static int
BuildTrie(constraint_vocab *v, const tok_text *t, int n, size_t total)
{
	int32_t		open[CONSTRAINT_MAX_TOKEN_BYTES + 1];	/* open[d]: the node of the current
														 * text's prefix of d bytes */
	uint32_t	prev_len = 0;
	int32_t		n_ids = 0;

	v->byte = malloc(total ? total : 1);
	v->depth = malloc(sizeof(uint16_t) * (total ? total : 1));
	v->skip = malloc(sizeof(int32_t) * (total ? total : 1));
	v->tok_first = malloc(sizeof(int32_t) * (total + 1));
	v->ids = malloc(sizeof(int32_t) * (n ? n : 1));
	if (!v->byte || !v->depth || !v->skip || !v->tok_first || !v->ids)
		return CBLLM_ERR_NOMEM;
	v->n_nodes = 0;
	for (int k = 0; k < n; k++)
	{
		uint32_t	l = 0;

		if (k > 0)
			while (l < prev_len && l < t[k].len && t[k - 1].s[l] == t[k].s[l])
				l++;
		for (uint32_t d = prev_len; d > l; d--)
			v->skip[open[d]] = v->n_nodes;	/* prefixes the new text leaves are closed */
		for (uint32_t d = l + 1; d <= t[k].len; d++)
		{
			int32_t		i = v->n_nodes++;

			v->byte[i] = (uint8_t) t[k].s[d - 1];
			v->depth[i] = (uint16_t) d;
			v->tok_first[i] = n_ids;
			open[d] = i;
		}
		v->ids[n_ids++] = t[k].id;	/* the last node made is the text's (or its equal's) */
		prev_len = t[k].len;
		if ((int) t[k].len > v->max_depth)
			v->max_depth = (int) t[k].len;
	}
	for (uint32_t d = prev_len; d > 0; d--)
		v->skip[open[d]] = v->n_nodes;
	v->tok_first[v->n_nodes] = n_ids;
	return CBLLM_OK;
}

/* Build the trie of tok's texts over n_logits ids. */
int
constraint_vocab_build(const cbllm_tokenizer *tok, int n_logits, const int32_t *eos, int n_eos,
					   constraint_vocab **out, cbllm_err *err)
{
	constraint_vocab *v = calloc(1, sizeof(*v));
	tok_text   *t = NULL;
	size_t		total = 0;
	int			n = 0,
				rc = CBLLM_ERR_NOMEM;

	*out = NULL;
	if (n_logits <= 0)
	{
		free(v);
		return cbllm_fail(err, CBLLM_ERR_INVALID, "constraint: an empty vocabulary");
	}
	if (v == NULL || (v->eos = malloc(sizeof(int32_t) * (n_eos > 0 ? n_eos : 1))) == NULL)
		goto done;
	v->tok = tok;
	v->n_logits = n_logits;
	v->n_words = (n_logits + 31) / 32;
	for (int b = 0; b < 256; b++)
		v->all_bytes[b] = (char) b;
	for (int i = 0; i < n_eos; i++)
		if (eos[i] >= 0 && eos[i] < n_logits)
			v->eos[v->n_eos++] = eos[i];
	if ((t = CollectTexts(v, &n, &total)) == NULL)
		goto done;
	rc = BuildTrie(v, t, n, total);
done:
	free(t);
	if (rc != CBLLM_OK)
	{
		constraint_vocab_free(v);
		return cbllm_fail(err, rc, "constraint: out of memory building the vocabulary's trie");
	}
	*out = v;
	return CBLLM_OK;
}

void
constraint_vocab_free(constraint_vocab *v)
{
	if (v == NULL)
		return;
	free(v->byte);
	free(v->depth);
	free(v->skip);
	free(v->tok_first);
	free(v->ids);
	free(v->eos);
	free(v);
}

int
constraint_mask_words(const constraint_vocab *v)
{
	return v->n_words;
}

/* ------------------------------------------------------------ masks */

/*
 * Set in bits (zeroed first) every token that may follow state q and after
 * which at most limit bytes remain to a full match, and the end-of-turn ids
 * when q is a full match; *max_dist is the largest dist after a token set
 * (-1: none).  Returns the tokens set, end-of-turn ids not counted.
 */
static int32_t
Walk(const constraint *c, int32_t q, int32_t limit, uint32_t *bits, int32_t *max_dist)
{
	const constraint_vocab *v = c->v;
	const cbllm_dfa *d = c->dfa;
	int32_t		st[CONSTRAINT_MAX_TOKEN_BYTES + 1];
	int32_t		n = 0,
				mx = -1;

	memset(bits, 0, sizeof(uint32_t) * v->n_words);
	st[0] = q;
	for (int32_t i = 0; i < v->n_nodes;)
	{
		int			dep = v->depth[i];
		int32_t		s = dfa_next(d, st[dep - 1], v->byte[i]);

		if (s < 0)
		{
			i = v->skip[i];
			continue;
		}
		st[dep] = s;
		if (d->dist[s] <= limit)
			for (int32_t k = v->tok_first[i]; k < v->tok_first[i + 1]; k++)
			{
				int32_t		t = v->ids[k];

				bits[t >> 5] |= 1u << (t & 31);
				n++;
				mx = d->dist[s] > mx ? d->dist[s] : mx;
			}
		i++;
	}
	if (d->accept[q])
		for (int k = 0; k < v->n_eos; k++)
			bits[v->eos[k] >> 5] |= 1u << (v->eos[k] & 31);
	*max_dist = mx;
	return n;
}

/* State q's unbudgeted mask: the cached one, computed and published now if need be, or NULL. */
static const cached_mask *
Cached(constraint *c, int32_t q)
{
	size_t		bytes = sizeof(cached_mask) + sizeof(uint32_t) * c->v->n_words;
	cached_mask *m = atomic_load_explicit(&c->cache[q], memory_order_acquire),
			   *expect = NULL;

	if (m != NULL)
		return m;
	if (atomic_fetch_add(&c->cached_bytes, bytes) + bytes > CONSTRAINT_MASK_BYTES)
	{
		atomic_fetch_sub(&c->cached_bytes, bytes);
		return NULL;
	}
	if ((m = malloc(bytes)) == NULL)
	{
		atomic_fetch_sub(&c->cached_bytes, bytes);
		return NULL;
	}
	m->n_allowed = Walk(c, q, INT32_MAX, m->bits, &m->max_dist);
	if (!atomic_compare_exchange_strong_explicit(&c->cache[q], &expect, m,
												 memory_order_acq_rel, memory_order_acquire))
	{
		free(m);				/* another thread published it first */
		atomic_fetch_sub(&c->cached_bytes, bytes);
		return expect;
	}
	return m;
}

/* What may follow q with remaining tokens left. */
void
constraint_next(constraint *c, int32_t q, int remaining, uint32_t *scratch, constraint_step *step)
{
	const cached_mask *m = Cached(c, q);
	int32_t		n,
				max_dist;
	int32_t		limit = remaining > 1 ? remaining - 1 : 0;

	step->complete = c->dfa->accept[q] != 0;
	step->final = c->final[q] != 0;
	if (m != NULL && m->max_dist <= limit)
	{
		step->mask = m->bits;
		step->n_allowed = m->n_allowed;
		return;
	}
	n = Walk(c, q, limit, scratch, &max_dist);
	if (n == 0 && !step->complete)
	{
		/* nothing fits the budget: offer every way on (the request ends cut short) */
		if (m != NULL)
		{
			step->mask = m->bits;
			step->n_allowed = m->n_allowed;
			return;
		}
		n = Walk(c, q, INT32_MAX, scratch, &max_dist);
	}
	step->mask = scratch;
	step->n_allowed = n;
}

/* The state after token t from q, or -1. */
int32_t
constraint_advance(const constraint *c, int32_t q, int32_t t)
{
	size_t		len;
	char		one;
	const char *s;

	if (IsEos(c->v->eos, c->v->n_eos, t))
		return c->dfa->accept[q] ? q : -1;
	if (t < 0 || t >= c->v->n_logits ||
		(s = tokenizer_token_bytes(c->v->tok, t, &one, &len)) == NULL || len == 0 ||
		len > CONSTRAINT_MAX_TOKEN_BYTES)
		return -1;
	for (size_t i = 0; i < len && q >= 0; i++)
		q = dfa_next(c->dfa, q, (uint8_t) s[i]);
	return q;
}

bool
constraint_complete(const constraint *c, int32_t q)
{
	return c->dfa->accept[q] != 0;
}

bool
constraint_final(const constraint *c, int32_t q)
{
	return c->final[q] != 0;
}

/* Copy the logits, -inf where the mask is clear. */
void
constraint_apply(const uint32_t *mask, const float *logits, int n, float *out)
{
	int			w = 0;

	for (; (w + 1) * 32 <= n; w++)
	{
		uint32_t	m = mask[w];
		const float *l = logits + w * 32;
		float	   *o = out + w * 32;

		if (m == 0)
			for (int j = 0; j < 32; j++)
				o[j] = -INFINITY;
		else if (m == UINT32_MAX)
			memcpy(o, l, sizeof(float) * 32);
		else
			for (int j = 0; j < 32; j++)
				o[j] = (m >> j) & 1 ? l[j] : -INFINITY;
	}
	for (int i = w * 32; i < n; i++)
		out[i] = (mask[i >> 5] >> (i & 31)) & 1 ? logits[i] : -INFINITY;
}

size_t
constraint_cached_bytes(const constraint *c)
{
	return atomic_load(&c->cached_bytes);
}

/* ------------------------------------------------------------ compiling */

/* Compile a pattern for v. */
int
constraint_compile(const constraint_vocab *v, const char *regex, size_t len, constraint **out,
				   cbllm_err *err)
{
	constraint *c = calloc(1, sizeof(*c));
	int			rc;

	*out = NULL;
	if (c == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "constraint: out of memory");
	c->v = v;
	if ((rc = regex_compile(regex, len, &c->dfa, err)) != CBLLM_OK)
	{
		free(c);
		return rc;
	}
	c->len = len;
	c->text = malloc(len + 1);
	c->final = malloc(c->dfa->n_states);
	c->cache = calloc(c->dfa->n_states, sizeof(*c->cache));
	if (c->text == NULL || c->final == NULL || c->cache == NULL)
	{
		constraint_free(c);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "constraint: out of memory");
	}
	memcpy(c->text, regex, len);
	c->text[len] = '\0';
	for (int32_t s = 0; s < c->dfa->n_states; s++)
	{
		bool		any = false;

		for (int k = 0; k < c->dfa->n_classes && !any; k++)
			any = c->dfa->next[(size_t) s * c->dfa->n_classes + k] >= 0;
		c->final[s] = c->dfa->accept[s] && !any;
	}
	atomic_init(&c->cached_bytes, 0);
	*out = c;
	return CBLLM_OK;
}

void
constraint_free(constraint *c)
{
	if (c == NULL)
		return;
	if (c->cache != NULL)
		for (int32_t s = 0; s < c->dfa->n_states; s++)
			free(atomic_load(&c->cache[s]));
	free(c->cache);
	free(c->final);
	free(c->text);
	dfa_free(c->dfa);
	free(c);
}

const char *
constraint_text(const constraint *c, size_t *len)
{
	*len = c->len;
	return c->text;
}

const cbllm_dfa *
constraint_dfa(const constraint *c)
{
	return c->dfa;
}
