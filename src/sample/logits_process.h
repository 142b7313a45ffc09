/*
 * logits_process.h: what a request's sampling controls do to its logits
 * before the sampler draws (sampler.h), in this order:
 *
 *   1. repetition_penalty r (HF and vLLM's): every token seen in the prompt
 *      or the generated text has its logit l made l / r when l > 0, else
 *      l * r (once, however often it was seen);
 *   2. frequency_penalty f and presence_penalty p (OpenAI's): every token
 *      generated c > 0 times loses c * f + p;
 *   3. logit_bias: each listed token gains its bias;
 *   4. the constraint's mask (constraint.h): other tokens become -inf;
 *   5. min_p m: tokens whose probability (at the request's temperature) is
 *      below m times the most likely one's become -inf, that is logits
 *      below max + temperature * ln(m) (greedy decoding keeps only the
 *      largest anyway).
 *
 * top_k and top_p then apply in the sampler, over what is left.
 */
#ifndef CBLLM_LOGITS_PROCESS_H
#define CBLLM_LOGITS_PROCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "api/cbllm.h"

/* Whether sp has a control that changes the logits (steps 1-3 and 5). */
bool		logits_process_active(const cbllm_sampling *sp);

/*
 * out = in (n logits) with sp's steps 1-4 applied, for a sequence whose
 * tokens are prompt (n_prompt) then generated (n_gen) ids; mask (NULL:
 * none) is the constraint's.  seen is n words of scratch the caller keeps
 * (any contents).  Per-token logprobs (cbllm_logprob) are read here,
 * before step 5.
 */
void		logits_process(const float *in, int n, const cbllm_sampling *sp,
						   const int32_t *tokens, int n_prompt, int n_gen, const uint32_t *mask,
						   uint32_t *seen, float *out);

/* Step 5 over the n logits out, in place: min_p at sp's temperature (nothing when off). */
void		logits_min_p(float *out, int n, const cbllm_sampling *sp);

#endif
