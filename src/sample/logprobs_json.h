/*
 * logprobs_json.h: a request's per-token logprobs (cbllm_logprob) as the
 * JSON that SQL returns, written by the engine process, which alone has
 * the tokenizer.  Each record is one object:
 *
 *   {"token": "Hello", "id": 9906, "logprob": -0.0123,
 *    "top_logprobs": [{"token": "Hello", "id": 9906, "logprob": -0.0123}, ...]}
 *
 * "token" is the text the token adds to the output; a special token (an
 * end-of-turn) is its own text, such as "<|eot_id|>".  A token whose bytes
 * are not whole UTF-8 on their own (a piece of a character) shows U+FFFD
 * in "token" and gains "bytes", the array of its byte values.  NUL becomes
 * U+FFFD as in the text.  "logprob" is the shortest decimal that reads back
 * as the float.
 */
#ifndef CBLLM_LOGPROBS_JSON_H
#define CBLLM_LOGPROBS_JSON_H

#include <stdbool.h>

#include "api/cbllm.h"
#include "base/util.h"
#include "tokenizer/tokenizer.h"

/*
 * Append records lp[0..n) to out, separated by commas: a comma before the
 * first one too unless *first, which is then cleared.  The caller wraps the
 * whole stream in [ ].  CBLLM_ERR_NOMEM when out cannot grow.
 */
int			logprobs_json_append(const cbllm_tokenizer *tok, const cbllm_logprob *lp, int n,
								 bool *first, cbllm_buf *out);

#endif
