/*
 * regex.h: a regular expression compiled to a deterministic automaton over
 * bytes, the form constrained decoding walks (constraint.c): the output must
 * fully match the expression, and every state of the automaton can still
 * reach a full match, so a byte is allowed exactly when it has a next state.
 *
 * The dialect is the common one (Python's re, PCRE) without what a finite
 * automaton cannot do:
 *   literals (UTF-8), "." (any character but "\n"), [...] and [^...] with
 *   ranges, \d \w \s (ASCII; \D \W \S and [^\d] exclude Python's Unicode set),
 *   \n \r \t \f \v \0, \xHH,
 *   \uHHHH, \x{H...}, escaped metacharacters; groups (...), (?:...),
 *   (?P<name>...), (?<name>...); alternation |; quantifiers * + ? {n} {n,}
 *   {n,m} (and their lazy forms, which match the same strings); ^ \A at the
 *   start and $ \Z \z at the end (the match is always a full match).
 * Refused with a message naming the construct and its byte offset:
 * backreferences, lookaround, \b \B, inline flags, possessive quantifiers,
 * anchors elsewhere, repetition counts over REGEX_MAX_REPEAT, automata over
 * REGEX_MAX_STATES states.  Matching is over Unicode scalar values encoded
 * as UTF-8: a negated class or "." never admits a surrogate or a byte
 * sequence that is not UTF-8.
 */
#ifndef CBLLM_REGEX_H
#define CBLLM_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

#define REGEX_MAX_REPEAT 1000	/* the largest count of {n,m} */
#define REGEX_MAX_STATES 65536	/* the largest automaton compiled */

/*
 * A deterministic automaton over bytes.  Bytes that every state treats
 * alike share a class, so a state's row has n_classes entries.  Only live
 * states are kept: each can reach an accepting state.
 */
typedef struct cbllm_dfa
{
	int32_t		n_states;		/* state 0 is the start */
	int32_t		n_classes;		/* [1, 256] */
	uint8_t		byte_class[256];	/* the class of each byte */
	int32_t    *next;			/* (n_states, n_classes): the next state, -1 where no match can
								 * follow */
	uint8_t    *accept;			/* (n_states): 1 where the bytes so far are a full match */
	int32_t    *dist;			/* (n_states): fewest bytes from the state to a full match */
} cbllm_dfa;

/* The state after byte b from state s (s >= 0), or -1. */
static inline int32_t
dfa_next(const cbllm_dfa *d, int32_t s, uint8_t b)
{
	return d->next[(size_t) s * d->n_classes + d->byte_class[b]];
}

/*
 * Compile len bytes of pattern.  A pattern that matches nothing is an error
 * (CBLLM_ERR_INVALID), like a malformed one; CBLLM_ERR_UNSUPPORTED for a
 * construct of another dialect or over a limit.  err names the construct
 * and its byte offset: "regex: lookahead (?= at offset 4 is not supported".
 */
int			regex_compile(const char *pattern, size_t len, cbllm_dfa **out, cbllm_err *err);

void		dfa_free(cbllm_dfa *d);

/* Whether d fully matches s[0..n). */
bool		dfa_match(const cbllm_dfa *d, const char *s, size_t n);

/* Append to out a pattern that matches exactly the bytes s[0..n). */
int			regex_escape(const char *s, size_t n, cbllm_buf *out);

/*
 * Append to out a pattern matching exactly those strings that pattern
 * fully matches and that hold no '"', no '\\' and no character below
 * U+0020: the body of a JSON string whose text needs no escapes, for a
 * JSON schema's "pattern" (json_schema.c).  Errors as regex_compile's.
 */
int			regex_json_string_body(const char *pattern, size_t len, cbllm_buf *out,
								   cbllm_err *err);

#endif
