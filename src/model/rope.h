/*
 * rope.h: rotary position embeddings.  A RoPE configuration (cbllm_rope) is
 * what config.json's rope_theta and rope_scaling (or, for Gemma-3's local
 * layers, rope_local_base_freq) say; rope_freqs_build turns it into the
 * per-dimension inverse frequencies and the factor that multiplies cos and
 * sin, and rope_fill gives the cos and sin of one position.  Both backends
 * build their tables from these two functions only.
 *
 * The variants, as HF's rope_type names them (d = head_dim, i < d / 2,
 * base_i = theta^(2i / d), inv_i = 1 / base_i):
 *
 *   default   inv_i; attention factor 1.
 *   linear    inv_i / factor.
 *   llama3    wavelength w_i = 2 pi / inv_i; with L = original_max_position_
 *             embeddings: w_i < L / high_freq_factor keeps inv_i, w_i >
 *             L / low_freq_factor takes inv_i / factor, and between them
 *             s = (L / w_i - low) / (high - low) mixes the two:
 *             (1 - s) inv_i / factor + s inv_i.
 *   yarn      with L = original_max_position_embeddings (rope_scaling's, else
 *             max_position_embeddings), the correction range [lo, hi] is
 *             d ln(L / (2 pi beta)) / (2 ln theta) at beta_fast (floored)
 *             and beta_slow (ceiled), clamped to [0, d - 1]; the ramp r_i =
 *             clamp((i - lo) / (hi - lo), 0, 1) (hi += 0.001 when equal)
 *             mixes inv_i / factor (weight r_i) and inv_i (weight 1 - r_i).
 *             Attention factor: attention_factor if given, else with
 *             m(s, k) = 0.1 k ln s + 1 (1 when s <= 1):
 *             m(factor, mscale) / m(factor, mscale_all_dim) when both are
 *             given and nonzero, else m(factor, 1).  factor is rope_scaling's
 *             own (as HF and vLLM read it now; a few HF releases replaced it by
 *             max_position_embeddings / original_max_position_embeddings, which
 *             turns Qwen2.5's YaRN configs into no scaling).  truncate false
 *             (gpt-oss) keeps lo and hi as they are, not floored and ceiled.
 *   dynamic   dynamic NTK.  HF rescales theta by the current sequence length
 *             once it passes max_position_embeddings; under a KV cache that
 *             would change the rotation of keys already stored, so cbllm
 *             uses one static base for every position, the one HF reaches
 *             at the longest context the factor is for, seq_len = factor *
 *             max_position_embeddings (as vLLM does): theta' = theta *
 *             (factor^2 - factor + 1)^(d / (d - 2)).  Short contexts
 *             therefore differ from HF's (which is unscaled below
 *             max_position_embeddings).
 *   longrope  (also "su", Phi-3 128k): inv_i / ext_i, where ext is
 *             short_factor or long_factor for a whole sequence, as HF
 *             transformers chooses: long_factor when the sequence is longer
 *             than original_max_position_embeddings (its whole length: a
 *             prompt's decides before its first chunk), else short_factor.
 *             rope_freqs holds both sets (inv_freq[0] short, inv_freq[1]
 *             long) and long_from, the length past which the long set
 *             applies; the engine keeps each sequence's set (scheduler.h),
 *             and a sequence that grows past long_from recomputes its KV with
 *             the long set, as transformers drops its cache there.  (vLLM and
 *             llama.cpp choose one set for the whole context size they are
 *             configured with.)  Attention factor, in both sets: attention_factor if
 *             given, else with s = factor: 1 when s <= 1, else
 *             sqrt(1 + ln s / ln original_max_position_embeddings).  As in
 *             HF, a top-level original_max_position_embeddings (Phi-3) makes
 *             factor = max_position_embeddings / it; without one, factor and
 *             original_max_position_embeddings come from rope_scaling (the
 *             latter defaulting to max_position_embeddings).
 *   freq_factors  (GGUF files only: llama.cpp's converter writes llama3
 *             scaling as the tensor rope_freqs.weight) inv_i / freq_factor[i]
 *             at every position, attention factor 1.
 *
 * Layout: pairs (i, i + d / 2) are rotated together (HF's rotate_half), d
 * the rotated width (rot_dim, or head_dim), or with interleaved (2i, 2i + 1), which is how GGUF llama
 * files' permuted q and k rows expect it (model_gguf.c).
 */
#ifndef CBLLM_ROPE_H
#define CBLLM_ROPE_H

#include <stdbool.h>

#include "base/util.h"

#define ROPE_MAX_FACTORS 256	/* factor lists: head_dim up to 512 (Gemma 4's full layers) */
#define ROPE_MAX_HALF 2048		/* head_dim / 2 of any model config.json allows */

typedef enum rope_type
{
	ROPE_DEFAULT,
	ROPE_LINEAR,
	ROPE_LLAMA3,
	ROPE_YARN,
	ROPE_DYNAMIC,
	ROPE_LONGROPE,
	ROPE_FREQ_FACTORS			/* GGUF's rope_freqs tensor: inv_i / freq_factor[i] at every
								 * position (how llama.cpp's converter stores llama3 scaling) */
} rope_type;

/* One RoPE configuration; the fields a type does not read are 0. */
typedef struct cbllm_rope
{
	rope_type	type;
	double		theta;			/* rope_theta (or rope_local_base_freq) */
	double		factor;			/* linear, llama3, yarn, dynamic, longrope */
	int			max_pos;		/* max_position_embeddings (dynamic, longrope) */
	int			orig_max_pos;	/* original_max_position_embeddings (llama3, yarn, longrope) */
	double		low_freq_factor;	/* llama3 */
	double		high_freq_factor;	/* llama3 */
	double		beta_fast;		/* yarn, 32 when absent */
	double		beta_slow;		/* yarn, 1 when absent */
	double		mscale;			/* yarn, 0 when absent */
	double		mscale_all_dim; /* yarn, 0 when absent */
	double		attention_factor;	/* yarn, longrope: 0 when absent (derived) */
	bool		yarn_exact_range;	/* yarn: rope_scaling.truncate false (gpt-oss): the
									 * correction range's bounds are not rounded out */
	int			n_factors;		/* longrope: head_dim / 2 */
	double		short_factor[ROPE_MAX_FACTORS]; /* longrope, (n_factors) */
	double		long_factor[ROPE_MAX_FACTORS];	/* longrope, (n_factors) */
	double		freq_factor[ROPE_MAX_FACTORS];	/* freq_factors, (n_factors) */
	bool		interleaved;	/* rotate pairs (2i, 2i + 1), not (i, i + head_dim / 2):
								 * a GGUF llama file's permuted q and k (model_gguf.c) */
	int			rot_dim;		/* dimensions of a head that rotate, the first ones (d above);
								 * the rest pass unchanged (partial_rotary_factor, Qwen3.5's
								 * quarter of a head); 0: all of head_dim */
	int			head_dim;		/* the heads it rotates, when its layers' differ from the
								 * model's head_dim (Gemma 4's full layers); 0: head_dim */
	int			n_rot_pairs;	/* HF's "proportional" RoPE (Gemma 4): pairs (i, i + d/2)
								 * of the whole head, only the first n_rot_pairs turning
								 * (at theta^(-2i/d)), the others at frequency 0; 0: all */
} cbllm_rope;

/* The head size rope r rotates in a model of head_dim. */
static inline int
rope_head_dim(const cbllm_rope *r, int head_dim)
{
	return r->head_dim > 0 ? r->head_dim : head_dim;
}

/* A configuration turned into frequencies for one head_dim. */
typedef struct rope_freqs
{
	int			half;			/* the rotated width / 2: rot_dim / 2, or head_dim / 2 */
	int			long_from;		/* a sequence longer than this takes set 1, inv_freq[1];
								 * INT_MAX: one set (inv_freq[1] is inv_freq[0]) */
	double		attn;			/* multiplies cos and sin */
	double		inv_freq[2][ROPE_MAX_HALF]; /* (2, half) set 0, then set 1 */
} rope_freqs;

/* r as the plain RoPE of base theta. */
void		rope_set_default(cbllm_rope *r, double theta);

/* The rope_type name of t ("default", "linear", ...). */
const char *rope_type_name(rope_type t);

/* The type config.json's rope_type (or type) name stands for; false when unknown. */
bool		rope_type_from_name(const char *name, rope_type *t);

/*
 * f = the frequencies and attention factor of r for heads of head_dim (even,
 * at most 2 * ROPE_MAX_HALF).  CBLLM_ERR_INVALID for a configuration the
 * formulas cannot take (named in err).
 */
int			rope_freqs_build(const cbllm_rope *r, int head_dim, rope_freqs *f, cbllm_err *err);

/* cos[i], sin[i] (f->half) = attn * cos, sin of pos * inv_freq[set][i] (set 0 or 1). */
void		rope_fill(const rope_freqs *f, int pos, int set, float *cos_out, float *sin_out);

/* The length past which a sequence takes r's second factor set (rope_freqs.long_from); 0: none. */
static inline int
rope_long_from(const cbllm_rope *r)
{
	return r->type == ROPE_LONGROPE ? r->orig_max_pos : 0;
}

#endif
