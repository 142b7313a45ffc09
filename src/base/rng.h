/*
 * rng.h: the project's one source of pseudo-random numbers.
 *
 *   splitmix64     a hash of a 64-bit counter (Steele, Lea and Flood): the
 *                  finalizer cbllm_mix64, a stream cbllm_splitmix64_next, and
 *                  cbllm_dummy_value, the dummy weights' values (model.h);
 *   cbllm_rng      xoshiro256** (Blackman and Vigna), a request's sampling
 *                  generator, seeded by four splitmix64 outputs.
 *
 * The inline functions also compile as CUDA device code, so the kernel that
 * makes dummy weights on a device computes the host's values bit for bit.
 */
#ifndef CBLLM_RNG_H
#define CBLLM_RNG_H

#include <stdint.h>

#if defined(__CUDACC__) || (defined(CBLLM_CUDA_EMU) && defined(__cplusplus))
#define CBLLM_HOST_DEVICE __host__ __device__
#else
#define CBLLM_HOST_DEVICE
#endif

#define CBLLM_GOLDEN_GAMMA 0x9e3779b97f4a7c15ULL	/* splitmix64's counter step */

/* The splitmix64 finalizer: a bijection of the 64-bit integers that fixes 0. */
static inline CBLLM_HOST_DEVICE uint64_t
cbllm_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The next output of the splitmix64 stream whose state is *x. */
static inline CBLLM_HOST_DEVICE uint64_t
cbllm_splitmix64_next(uint64_t *x)
{
	*x += CBLLM_GOLDEN_GAMMA;
	return cbllm_mix64(*x);
}

/*
 * The dummy value of element i of a tensor, before scaling: uniform in
 * [-1, 1).  The splitmix64 hash of seed + i * gamma; its top 24 bits make
 * the value, exactly, so host and device agree bit for bit.  Do not change
 * the formula: benchmarks of dummy models compare across versions.
 */
static inline CBLLM_HOST_DEVICE float
cbllm_dummy_value(uint64_t seed, uint64_t i)
{
	return (float) (cbllm_mix64(seed + i * CBLLM_GOLDEN_GAMMA) >> 40) * (2.0f / 16777216.0f) -
		1.0f;
}

/* A request's sampling generator: xoshiro256**. */
typedef struct cbllm_rng
{
	uint64_t	s[4];			/* xoshiro256** state */
} cbllm_rng;

/* Seed r with the first four splitmix64 outputs of seed. */
void		rng_seed(cbllm_rng *r, uint64_t seed);

/* The next 64 random bits. */
uint64_t	rng_next(cbllm_rng *r);

/* A uniform double in [0, 1) from the top 53 bits of rng_next. */
double		rng_uniform(cbllm_rng *r);

#endif
