/*
 * probe_fma.c: the machine's FP32 FMA peak.  Each thread runs chains of
 * independent 512-bit FMAs (enough accumulators to hide latency) from
 * registers; FLOPs = 2 per lane per FMA.
 *
 * Build with -O3 so that the accumulators stay in registers.
 *
 * usage: probe_fma [THREADS]
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERS 50000000L
#define ACC 12

static double
Now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float sink[64];

/* ITERS rounds of ACC independent FMAs. */
__attribute__((target("avx512f")))
static void *
Spin(void *arg)
{
	int			id = (int) (long) arg;
	__m512		acc[ACC];
	__m512		x = _mm512_set1_ps(0.999999f),
				y = _mm512_set1_ps(1e-7f);

#pragma GCC unroll 16
	for (int k = 0; k < ACC; k++)
		acc[k] = _mm512_set1_ps((float) k);
	for (long i = 0; i < ITERS; i++)
	{
#pragma GCC unroll 16
		for (int k = 0; k < ACC; k++)
			acc[k] = _mm512_fmadd_ps(acc[k], x, y);
		/* keep every accumulator live in a register each round */
		__asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]),
						 "+v"(acc[4]), "+v"(acc[5]), "+v"(acc[6]), "+v"(acc[7]),
						 "+v"(acc[8]), "+v"(acc[9]), "+v"(acc[10]), "+v"(acc[11]));
	}
	for (int k = 1; k < ACC; k++)
		acc[0] = _mm512_add_ps(acc[0], acc[k]);
	sink[id] = _mm512_reduce_add_ps(acc[0]);
	return NULL;
}

int
main(int argc, char **argv)
{
	int			nt = argc > 1 ? atoi(argv[1]) : 2;
	pthread_t	th[64];
	double		t0,
				t;

	if (nt < 1 || nt > 64)
		return 1;
	t0 = Now();
	for (long i = 0; i < nt; i++)
		pthread_create(&th[i], NULL, Spin, (void *) i);
	for (int i = 0; i < nt; i++)
		pthread_join(th[i], NULL);
	t = Now() - t0;
	printf("fp32 fma peak: %.1f GFLOP/s (%d threads, 512-bit)\n",
		   (double) nt * ITERS * ACC * 16 * 2 / t / 1e9, nt);
	return 0;
}
