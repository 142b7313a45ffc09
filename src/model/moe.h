/*
 * moe.h: how a mixture of experts routes one token.  The router's logits
 * (one per expert) become probabilities by a softmax over all the experts;
 * the token goes to the k experts of highest probability (of equal ones, the
 * lower index first), in that order, each weighted by its probability, or,
 * when the model renormalises (cfg.moe_norm_topk), by its share of the k
 * chosen probabilities.  This is HF's Qwen3-MoE and Mixtral routing (and,
 * renormalised, a softmax over the k chosen logits alone, as gpt-oss has
 * it).  Every backend routes by this rule; the CPU's calls this function.
 */
#ifndef CBLLM_MOE_H
#define CBLLM_MOE_H

#include <stdbool.h>
#include <stdint.h>

/*
 * ids (k) and weights (k) of the token whose router logits are logits
 * (n_experts), 1 <= k <= n_experts.  A NaN logit is never chosen before a
 * number.
 */
void		moe_route(const float *logits, int n_experts, int k, bool renormalise, int32_t *ids,
					  float *weights);

#endif
