/*
 * constraint.h: constrained decoding.  A request's constraint is a regular
 * expression (regex.h; a JSON schema or a list of choices is compiled to
 * one first, json_schema.h) that the generated text must fully match.  At
 * every step the engine samples only among the tokens whose bytes keep the
 * text on a path to a full match, offers the end-of-turn tokens only where
 * the text is a full match, and ends the request itself when nothing more
 * can follow.
 *
 * A token's allowed set is found without running the automaton per token:
 * the vocabulary's texts form a byte trie (constraint_vocab), laid out in
 * preorder so that one pass over it from an automaton state walks every
 * prefix once and skips a whole subtree at the first byte no match can
 * take.  The result, a bitmask over the vocabulary, is cached per state of
 * the compiled constraint, so a state costs its walk once for every request
 * that shares the constraint (the engine keeps compiled constraints by their
 * text, engine_constraint.c).
 *
 * Budget.  Every state knows the fewest bytes to a full match (dist), and a
 * vocabulary with a token for every byte needs at most that many tokens.
 * When a request's remaining tokens run short, only the tokens after which
 * the rest still fits are allowed, so a constraint that can be met within
 * max_tokens is met: the text ends valid instead of cut off.
 *
 * Thread safety: constraint_mask may run on several compute threads at once
 * for one constraint; a state's mask is published once with an atomic
 * compare-and-swap (a thread that loses the race frees its copy).
 */
#ifndef CBLLM_CONSTRAINT_H
#define CBLLM_CONSTRAINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "constrain/regex.h"
#include "tokenizer/tokenizer.h"

#define CONSTRAINT_MAX_TOKEN_BYTES 1024 /* longer tokens are never allowed */
#define CONSTRAINT_MASK_BYTES ((size_t) 64 << 20)	/* cached masks per constraint, at most */

typedef struct constraint_vocab constraint_vocab;
typedef struct constraint constraint;

/*
 * The byte trie of a tokenizer's texts over n_logits token ids (ids past
 * the tokenizer's, special tokens and tokens that add no text are never
 * allowed).  eos lists the n_eos end-of-turn ids.
 */
int			constraint_vocab_build(const cbllm_tokenizer *tok, int n_logits, const int32_t *eos,
								   int n_eos, constraint_vocab **out, cbllm_err *err);
void		constraint_vocab_free(constraint_vocab *v);

/* Words of a mask over the vocabulary's n_logits ids. */
int			constraint_mask_words(const constraint_vocab *v);

/* Compile len bytes of regex for vocabulary v (which must outlive it). */
int			constraint_compile(const constraint_vocab *v, const char *regex, size_t len,
							   constraint **out, cbllm_err *err);
void		constraint_free(constraint *c);

/* Its automaton. */
const cbllm_dfa *constraint_dfa(const constraint *c);

/* The pattern it was compiled from (len bytes). */
const char *constraint_text(const constraint *c, size_t *len);

/* The automaton's start state. */
#define CONSTRAINT_START 0

/* What may follow a state. */
typedef struct constraint_step
{
	const uint32_t *mask;		/* (constraint_mask_words) bit t: token t may follow; end-of-turn
								 * ids are set exactly when the state is a full match */
	int32_t		n_allowed;		/* tokens set in mask */
	bool		complete;		/* the text so far is a full match */
	bool		final;			/* complete, and no byte can follow: the request ends here */
} constraint_step;

/*
 * What may follow state q when the request may still generate remaining
 * tokens (>= 1; the budget rule above).  The mask is the cached one or is
 * written into scratch (constraint_mask_words words), which must then stay
 * alive while step is used.  CBLLM_ERR_NOMEM only when even scratch is
 * unusable (never: scratch is the fallback), so failure is impossible; the
 * status is kept for the future.
 */
void		constraint_next(constraint *c, int32_t q, int remaining, uint32_t *scratch,
							constraint_step *step);

/* The state after token t from q, or -1 when t may not follow q (end-of-turn ids: q itself). */
int32_t		constraint_advance(const constraint *c, int32_t q, int32_t t);

/* Whether state q is a full match. */
bool		constraint_complete(const constraint *c, int32_t q);

/* Whether state q is a full match that no byte can continue. */
bool		constraint_final(const constraint *c, int32_t q);

/*
 * Copy n logits to out, with every token not in mask set to -inf: what the
 * sampler then draws from.
 */
void		constraint_apply(const uint32_t *mask, const float *logits, int n, float *out);

/* Masks cached so far (bytes), for the engine's statistics and the tests. */
size_t		constraint_cached_bytes(const constraint *c);

#endif
