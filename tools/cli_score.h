/* cli_score.h: cbllm-cli perplexity and greedy: what a model scores, for checks against other engines. */
#ifndef CBLLM_CLI_SCORE_H
#define CBLLM_CLI_SCORE_H

#include "api/cbllm.h"

/* perplexity: standard input's text scored in chunks of context tokens; returns the exit status. */
int			cli_perplexity_run(const cbllm_engine_params *ep, int context);

/* greedy --jsonl: each standard-input line a JSON array of prompt ids, n greedy ids each. */
int			cli_greedy_run(const cbllm_engine_params *ep, int n);

#endif
