/*
 * softmax.h: attention weights from scores, vectorised (softmax.c).
 */
#ifndef CBLLM_SOFTMAX_H
#define CBLLM_SOFTMAX_H

/*
 * s[0, n) = exp(s[i] - max) / sum, in place, n >= 1: the largest score, the
 * exponentials (vec_math.h's, within 2 ulp) and their sum, then the
 * division, sixteen at a time in a fixed order.  The result depends only on
 * s[0, n), so a query's weights are the same whatever is batched with it;
 * every instruction set gives the same bits.
 */
void		softmax_inplace(float *s, int n);

/*
 * The same with one more logit, sink, in the denominator only (gpt-oss's
 * attention sinks: a learned per-head logit that takes weight from every
 * key): s[i] = exp(s[i] - m) / (sum + exp(sink - m)), m the larger of the
 * largest score and sink.  A sink of -inf gives softmax_inplace's bits.
 */
void		softmax_sink_inplace(float *s, int n, float sink);

#endif
