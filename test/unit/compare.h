/* compare.h: how the device tests compare float arrays. */
#ifndef CBLLM_TEST_COMPARE_H
#define CBLLM_TEST_COMPARE_H

#include <math.h>
#include <stddef.h>

/* Max |a - b| / max |b| over n, or +inf if a holds a NaN (an element never written). */
static inline double
RelErr(const float *a, const float *b, size_t n)
{
	double		worst = 0,
				scale = 1e-30;

	for (size_t i = 0; i < n; i++)
	{
		if (isnan(a[i]))
			return INFINITY;
		worst = fmax(worst, fabs((double) a[i] - b[i]));
		scale = fmax(scale, fabs((double) b[i]));
	}
	return worst / scale;
}

#endif
