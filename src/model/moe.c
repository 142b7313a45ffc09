/* moe.c: a token's experts and their weights from the router's logits (moe.h). */
#include "model/moe.h"

#include <math.h>

/* Whether logit a ranks above b: larger, and any number above NaN. */
static inline bool
Above(float a, float b)
{
	return a > b || (isnan(b) && !isnan(a));
}

void
moe_route(const float *logits, int n_experts, int k, bool renormalise, int32_t *ids,
		  float *weights)
{
	float		mx = -INFINITY;
	double		total = 0,
				chosen = 0;

	for (int e = 0; e < n_experts; e++)
		if (logits[e] > mx)
			mx = logits[e];
	for (int e = 0; e < n_experts; e++)
		total += isnan(logits[e]) ? 0 : exp((double) logits[e] - mx);
	/* no finite logit (all NaN or -inf): the experts are still chosen, with weight 0 */
	/* k passes of a selection: the best expert not yet taken, the lower index on ties */
	for (int j = 0; j < k; j++)
	{
		int			best = -1;

		for (int e = 0; e < n_experts; e++)
		{
			bool		taken = false;

			for (int i = 0; i < j && !taken; i++)
				taken = ids[i] == e;
			if (!taken && (best < 0 || Above(logits[e], logits[best])))
				best = e;
		}
		ids[j] = best;
		weights[j] = isnan(logits[best]) || !(total > 0 && isfinite(total)) ? 0.0f :
			(float) (exp((double) logits[best] - mx) / total);
		chosen += weights[j];
	}
	if (renormalise && chosen > 0)
		for (int j = 0; j < k; j++)
			weights[j] = (float) (weights[j] / chosen);
}
