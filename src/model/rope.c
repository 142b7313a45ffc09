/*
 * rope.c: the RoPE variants' inverse frequencies and attention factors
 * (rope.h states the formulas).  Everything is computed in double; the
 * backends round cos and sin to float once per (position, dimension).
 */
#include "model/rope.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* The names config.json uses, by type; "su" is longrope's older name. */
static const struct
{
	const char *name;
	rope_type	type;
}			RopeNames[] = {
	{"default", ROPE_DEFAULT},
	{"linear", ROPE_LINEAR},
	{"llama3", ROPE_LLAMA3},
	{"yarn", ROPE_YARN},
	{"dynamic", ROPE_DYNAMIC},
	{"longrope", ROPE_LONGROPE},
	{"su", ROPE_LONGROPE},
	{"freq_factors", ROPE_FREQ_FACTORS},
};

#define N_NAMES ((int) (sizeof(RopeNames) / sizeof(RopeNames[0])))

/* r = plain RoPE of base theta. */
void
rope_set_default(cbllm_rope *r, double theta)
{
	memset(r, 0, sizeof(*r));
	r->type = ROPE_DEFAULT;
	r->theta = theta;
	r->factor = 1;
}

/* The first name of type t. */
const char *
rope_type_name(rope_type t)
{
	for (int i = 0; i < N_NAMES; i++)
		if (RopeNames[i].type == t)
			return RopeNames[i].name;
	return "?";
}

/* The type of a rope_type name. */
bool
rope_type_from_name(const char *name, rope_type *t)
{
	for (int i = 0; i < N_NAMES; i++)
		if (strcmp(RopeNames[i].name, name) == 0)
		{
			*t = RopeNames[i].type;
			return true;
		}
	return false;
}

/* YaRN's dimension at which a wavelength makes n_rot turns over L positions. */
static double
YarnCorrectionDim(double n_rot, int d, double theta, double L)
{
	return d * log(L / (n_rot * 2 * M_PI)) / (2 * log(theta));
}

/* YaRN's magnitude correction m(s, k). */
static double
YarnMscale(double s, double k)
{
	return s <= 1 ? 1.0 : 0.1 * k * log(s) + 1.0;
}

/* inv[i] of llama3: the bands of wavelength against original_max_position_embeddings. */
static void
Llama3Freqs(const cbllm_rope *r, int half, double *inv)
{
	double		L = r->orig_max_pos,
				lo_wl = L / r->low_freq_factor,
				hi_wl = L / r->high_freq_factor;

	for (int i = 0; i < half; i++)
	{
		double		wl = 2 * M_PI / inv[i];

		if (wl > lo_wl)
			inv[i] /= r->factor;
		else if (wl >= hi_wl)
		{
			double		s = (L / wl - r->low_freq_factor) /
				(r->high_freq_factor - r->low_freq_factor);

			inv[i] = (1 - s) * inv[i] / r->factor + s * inv[i];
		}
	}
}

/* inv[i] of yarn and its attention factor. */
static double
YarnFreqs(const cbllm_rope *r, int d, double *inv)
{
	double		L = r->orig_max_pos > 0 ? r->orig_max_pos : r->max_pos;
	double		lo = YarnCorrectionDim(r->beta_fast, d, r->theta, L),
				hi = YarnCorrectionDim(r->beta_slow, d, r->theta, L);

	if (!r->yarn_exact_range)
	{
		lo = floor(lo);
		hi = ceil(hi);
	}

	lo = lo < 0 ? 0 : lo;
	hi = hi > d - 1 ? d - 1 : hi;
	if (lo == hi)
		hi += 0.001;
	for (int i = 0; i < d / 2; i++)
	{
		double		ramp = (i - lo) / (hi - lo);

		ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
		inv[i] = inv[i] / r->factor * ramp + inv[i] * (1 - ramp);
	}
	if (r->attention_factor > 0)
		return r->attention_factor;
	if (r->mscale != 0 && r->mscale_all_dim != 0)
		return YarnMscale(r->factor, r->mscale) / YarnMscale(r->factor, r->mscale_all_dim);
	return YarnMscale(r->factor, 1);
}

/* longrope's attention factor. */
static double
LongropeAttention(const cbllm_rope *r)
{
	double		s = r->factor;

	if (r->attention_factor > 0)
		return r->attention_factor;
	return s <= 1 ? 1.0 : sqrt(1 + log(s) / log((double) r->orig_max_pos));
}

/*
 * The frequencies and attention factor of r for heads of head_dim (r's own
 * when it gives one), of which the first r->rot_dim rotate (all of them
 * when 0): the formulas take the rotated width as their d.  With
 * n_rot_pairs, the pairs past it get frequency 0: they do not turn.
 */
int
rope_freqs_build(const cbllm_rope *r, int head_dim, rope_freqs *f, cbllm_err *err)
{
	int			half;
	double		theta = r->theta;

	if (r->head_dim > 0)
		head_dim = r->head_dim;
	if (r->rot_dim < 0 || r->rot_dim % 2 != 0 || r->rot_dim > head_dim)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "RoPE: %d rotated dimensions must be even and at most head_dim %d",
						  r->rot_dim, head_dim);
	if (r->rot_dim > 0)
		head_dim = r->rot_dim;
	half = head_dim / 2;
	if (head_dim < 2 || head_dim % 2 != 0 || half > ROPE_MAX_HALF)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "RoPE: head_dim %d must be even, 2 to %d",
						  head_dim, 2 * ROPE_MAX_HALF);
	if (!(theta > 1) || !isfinite(theta))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "RoPE: rope_theta %g must be above 1", theta);
	if (r->type != ROPE_DEFAULT && !(r->factor > 0))
		return cbllm_fail(err, CBLLM_ERR_INVALID, "RoPE: rope_scaling.factor %g must be positive",
						  r->factor);
	if (r->type == ROPE_LONGROPE && (r->n_factors != half || r->orig_max_pos < 2))
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "RoPE: longrope needs %d factors (has %d) and original_max_position_embeddings >= 2",
						  half, r->n_factors);
	if (r->type == ROPE_FREQ_FACTORS && r->n_factors != half)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "RoPE: freq_factors needs %d factors (has %d)",
						  half, r->n_factors);
	if (r->n_rot_pairs < 0 || r->n_rot_pairs > half)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "RoPE: %d rotated pairs of %d", r->n_rot_pairs,
						  half);
	if (r->type == ROPE_DYNAMIC && head_dim <= 2)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "RoPE: dynamic scaling needs head_dim above 2");
	if (r->type == ROPE_DYNAMIC)
		theta *= pow(r->factor * r->factor - r->factor + 1, (double) head_dim / (head_dim - 2));
	f->half = half;
	f->long_from = INT_MAX;
	f->attn = 1;
	for (int i = 0; i < half; i++)
		f->inv_freq[0][i] = 1.0 / pow(theta, (2.0 * i) / head_dim);
	switch (r->type)
	{
		case ROPE_DEFAULT:
		case ROPE_DYNAMIC:
			break;
		case ROPE_LINEAR:
			for (int i = 0; i < half; i++)
				f->inv_freq[0][i] /= r->factor;
			break;
		case ROPE_LLAMA3:
			Llama3Freqs(r, half, f->inv_freq[0]);
			break;
		case ROPE_YARN:
			f->attn = YarnFreqs(r, head_dim, f->inv_freq[0]);
			break;
		case ROPE_LONGROPE:
			f->long_from = rope_long_from(r);
			f->attn = LongropeAttention(r);
			for (int i = 0; i < half; i++)
			{
				f->inv_freq[1][i] = f->inv_freq[0][i] / r->long_factor[i];
				f->inv_freq[0][i] /= r->short_factor[i];
			}
			break;
		case ROPE_FREQ_FACTORS:
			for (int i = 0; i < half; i++)
				f->inv_freq[0][i] /= r->freq_factor[i];
			break;
	}
	for (int i = r->n_rot_pairs > 0 ? r->n_rot_pairs : half; i < half; i++)
		f->inv_freq[0][i] = f->inv_freq[1][i] = 0;	/* proportional: these pairs stay */
	if (f->long_from == INT_MAX)
		memcpy(f->inv_freq[1], f->inv_freq[0], sizeof(double) * half);
	return CBLLM_OK;
}

/* cos and sin of position pos in factor set set for every dimension pair, times the attention factor. */
void
rope_fill(const rope_freqs *f, int pos, int set, float *cos_out, float *sin_out)
{
	const double *inv = f->inv_freq[set != 0];

	for (int i = 0; i < f->half; i++)
	{
		double		a = (double) pos * inv[i];

		cos_out[i] = (float) (f->attn * cos(a));
		sin_out[i] = (float) (f->attn * sin(a));
	}
}
