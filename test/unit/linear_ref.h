/*
 * linear_ref.h: a hybrid model's linear attention (the causal conv, then
 * the gated delta rule one token at a time, then the gated RMSNorm) in
 * float64, the plain recurrence as HF's modeling code writes it: what
 * test_cuda_ops.c holds the device's chunked kernel to.
 */
#ifndef CBLLM_TEST_LINEAR_REF_H
#define CBLLM_TEST_LINEAR_REF_H

#include <math.h>
#include <stdlib.h>

/* A linear layer's heads: key heads, value heads, their sizes, the conv's taps. */
typedef struct lin_geom
{
	int			nk,
				nv,
				dk,
				dv,
				conv;
} lin_geom;

/* The float64 token loop of one sequence (its rows of qkv, z, beta, alpha), out (len, nv dv). */
static inline void
RefLinear(const lin_geom *g, int len, const float *qkv, const float *z, const float *beta,
		  const float *alpha, const float *kern, const float *a, const float *dt_bias,
		  const float *norm, double *out)
{
	int			cd = 2 * g->nk * g->dk + g->nv * g->dv;
	double	   *x = calloc((size_t) len * cd, sizeof(double)),
			   *S = calloc((size_t) g->nv * g->dk * g->dv, sizeof(double));

	for (int t = 0; t < len; t++)
		for (int c = 0; c < cd; c++)
		{
			double		y = 0;

			for (int r = 0; r < g->conv; r++)
				if (t - g->conv + 1 + r >= 0)
					y += (double) kern[c * g->conv + r] * qkv[(t - g->conv + 1 + r) * cd + c];
			x[t * cd + c] = y / (1 + exp(-y));
		}
	for (int t = 0; t < len; t++)
		for (int h = 0; h < g->nv; h++)
		{
			int			kh = h % g->nk;
			const double *q = x + t * cd + kh * g->dk,
					   *k = x + t * cd + g->nk * g->dk + kh * g->dk,
					   *v = x + t * cd + 2 * g->nk * g->dk + h * g->dv;
			double	   *Sh = S + (size_t) h * g->dk * g->dv,
						qn = 0,
						kn = 0,
						ss = 0,
						sp = alpha[t * g->nv + h] + dt_bias[h],
						decay,
						b = 1 / (1 + exp(-beta[t * g->nv + h])),
						o[512];

			sp = sp > 20 ? sp : log1p(exp(sp));
			decay = exp(a[h] * sp);
			for (int i = 0; i < g->dk; i++)
				qn += q[i] * q[i], kn += k[i] * k[i];
			qn = 1 / sqrt(qn + 1e-6) / sqrt(g->dk);
			kn = 1 / sqrt(kn + 1e-6);
			for (int c = 0; c < g->dv; c++)
			{
				double		kv = 0,
							d;

				for (int i = 0; i < g->dk; i++)
					kv += k[i] * kn * (Sh[i * g->dv + c] *= decay);
				d = (v[c] - kv) * b;
				o[c] = 0;
				for (int i = 0; i < g->dk; i++)
					o[c] += q[i] * qn * (Sh[i * g->dv + c] += k[i] * kn * d);
				ss += o[c] * o[c];
			}
			ss = 1 / sqrt(ss / g->dv + 1e-6);
			for (int c = 0; c < g->dv; c++)
			{
				double		zz = z[(t * g->nv + h) * g->dv + c];

				out[(t * g->nv + h) * g->dv + c] = o[c] * ss * norm[c] * zz / (1 + exp(-zz));
			}
		}
	free(x);
	free(S);
}

#endif
