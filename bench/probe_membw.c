/*
 * probe_membw.c: the machine's memory read bandwidth, for comparing decode
 * steps with their floor.  Each thread streams its share of a buffer much
 * larger than the caches with 512-bit (or 256-bit) loads; the best of several
 * passes is reported.
 *
 * usage: probe_membw [THREADS] [MIB]
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct job
{
	const float *p;
	size_t		n;
	float		sum;
} job;

static double
Now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sum a slice with four independent vector accumulators. */
__attribute__((target("avx512f")))
static void *
ReadSlice(void *arg)
{
	job		   *j = arg;
	__m512		a = _mm512_setzero_ps(),
				b = a,
				c = a,
				d = a;

	for (size_t i = 0; i + 64 <= j->n; i += 64)
	{
		a = _mm512_add_ps(a, _mm512_load_ps(j->p + i));
		b = _mm512_add_ps(b, _mm512_load_ps(j->p + i + 16));
		c = _mm512_add_ps(c, _mm512_load_ps(j->p + i + 32));
		d = _mm512_add_ps(d, _mm512_load_ps(j->p + i + 48));
	}
	j->sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
	return NULL;
}

int
main(int argc, char **argv)
{
	int			nt = argc > 1 ? atoi(argv[1]) : 2;
	size_t		mib = argc > 2 ? (size_t) atol(argv[2]) : 1024;
	size_t		n = mib << 18;	/* floats */
	float	   *buf = aligned_alloc(64, n * sizeof(float));
	double		best = 1e30;
	pthread_t	th[64];
	job			jobs[64];

	if (buf == NULL || nt < 1 || nt > 64)
		return 1;
	memset(buf, 1, n * sizeof(float));
	for (int pass = 0; pass < 6; pass++)
	{
		double		t0 = Now();

		for (int i = 0; i < nt; i++)
		{
			jobs[i].p = buf + n / nt * i;
			jobs[i].n = n / nt;
			pthread_create(&th[i], NULL, ReadSlice, &jobs[i]);
		}
		for (int i = 0; i < nt; i++)
			pthread_join(th[i], NULL);
		if (Now() - t0 < best)
			best = Now() - t0;
	}
	printf("read bandwidth: %.2f GB/s (%d threads, %zu MiB, best of 6)\n",
		   n * sizeof(float) / best / 1e9, nt, mib);
	free(buf);
	return 0;
}
