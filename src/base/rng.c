/* rng.c: xoshiro256**, the sampling generator of every request (rng.h). */
#include "base/rng.h"

/* Seed the generator. */
void
rng_seed(cbllm_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = cbllm_splitmix64_next(&seed);
}

static inline uint64_t
Rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* The next 64 random bits (xoshiro256**). */
uint64_t
rng_next(cbllm_rng *r)
{
	uint64_t   *s = r->s;
	uint64_t	result = Rotl(s[1] * 5, 7) * 9;
	uint64_t	t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = Rotl(s[3], 45);
	return result;
}

/* A double uniform in [0, 1). */
double
rng_uniform(cbllm_rng *r)
{
	return (double) (rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}
