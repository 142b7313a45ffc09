/*
 * softmax.c: the attention softmax over one query's scores, three passes
 * of sixteen lanes (the largest score; the exponentials and their sum; the
 * division), replacing a scalar loop around the C library's expf that cost
 * about a tenth of a prefill.
 *
 * The sum runs lane-wise over the whole vectors in order, then over the
 * sixteen lane sums in lane order, then over the scalar tail: one fixed
 * order for a given n.  A NaN score counts as no key (its weight is 0);
 * when every score is NaN or -inf, every weight is NaN, as a division by a
 * zero sum gives.  With a sink (softmax_sink_inplace) its exponential joins
 * the sum after the scores' and the maximum covers it too.
 */
#include "base/softmax.h"

#include <math.h>
#include <stdbool.h>

#include "base/vec_math.h"

/* s[0, n) = exp(s[i] - m) / (sum + extra), m the larger of the largest score and floor. */
static inline void
Softmax(float *s, int n, float floor, bool sink)
{
	vf16		acc = {0};
	float		mx = MaxV(s, n),
				sum = 0;
	int			i;

	if (sink && floor > mx)
		mx = floor;
	for (i = 0; i + VL <= n; i += VL)
	{
		vf16		e = ExpV(LoadV(s + i) - mx);

		memcpy(s + i, &e, sizeof(e));
		acc += e;
	}
	for (int j = 0; j < VL; j++)
		sum += acc[j];
	for (; i < n; i++)
		sum += s[i] = ExpNonPositive(s[i] - mx);
	if (sink && floor > -INFINITY)
		sum += ExpNonPositive(floor - mx);	/* the sink's share, in no weight */

	for (i = 0; i + VL <= n; i += VL)
	{
		vf16		x = LoadV(s + i) / sum;

		memcpy(s + i, &x, sizeof(x));
	}
	for (; i < n; i++)
		s[i] /= sum;
}

void		VEC_CLONES
softmax_inplace(float *s, int n)
{
	Softmax(s, n, -INFINITY, false);
}

void		VEC_CLONES
softmax_sink_inplace(float *s, int n, float sink)
{
	Softmax(s, n, sink, true);
}
