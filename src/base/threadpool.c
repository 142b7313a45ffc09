/*
 * threadpool.c: fork-join parallel loops over a fixed set of threads.
 *
 * A job is published by bumping a generation counter; workers spin briefly
 * on it (a decode step runs many short loops back to back) and then sleep on
 * a condition variable.  Tasks are claimed from one atomic word holding the
 * job's generation and the next task index, so a worker that wakes late can
 * never claim a task of a later job by mistake; the caller waits until every
 * task of its job has finished.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPIN_ITERS 20000

struct cbllm_threadpool
{
	int			n_threads;
	pthread_t  *threads;		/* (n_threads - 1) workers */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	atomic_uint gen;			/* bumped once per job (and at shutdown) */
	_Atomic uint64_t claim;		/* (generation << 32) | next task index */
	atomic_int	n_done;			/* tasks finished in the current job */
	int			n_tasks;
	cbllm_task_fn fn;
	void	   *arg;
	atomic_bool stop;
};

typedef struct worker_arg
{
	cbllm_threadpool *tp;
	int			index;
	unsigned	gen;
} worker_arg;

/* Claim and run tasks of job gen until none are left (or the job is over). */
static void
RunTasks(cbllm_threadpool *tp, unsigned gen, int thread)
{
	uint64_t	c = atomic_load(&tp->claim);

	for (;;)
	{
		uint32_t	t = (uint32_t) c;

		if ((uint32_t) (c >> 32) != gen || t >= (uint32_t) tp->n_tasks)
			break;
		if (!atomic_compare_exchange_weak(&tp->claim, &c, c + 1))
			continue;			/* c now holds the current value */
		tp->fn(tp->arg, (int) t, thread);
		atomic_fetch_add_explicit(&tp->n_done, 1, memory_order_release);
		c = atomic_load(&tp->claim);
	}
}

/* A worker: wait for a new generation, help with its job, repeat. */
static void *
WorkerMain(void *p)
{
	worker_arg *wa = p;
	cbllm_threadpool *tp = wa->tp;
	int			index = wa->index;
	unsigned	seen = wa->gen;		/* the generation when the pool was created */

	free(wa);
	for (;;)
	{
		unsigned	g;
		int			spins = 0;

		while ((g = atomic_load_explicit(&tp->gen, memory_order_acquire)) == seen &&
			   spins < SPIN_ITERS)
		{
			spins++;
			__builtin_ia32_pause();
		}
		if (g == seen)
		{
			pthread_mutex_lock(&tp->mu);
			while ((g = atomic_load(&tp->gen)) == seen)
				pthread_cond_wait(&tp->cv, &tp->mu);
			pthread_mutex_unlock(&tp->mu);
		}
		seen = g;
		if (atomic_load(&tp->stop))
			return NULL;
		RunTasks(tp, g, index);
	}
}

/* Start n_threads - 1 workers with all signals blocked. */
int
threadpool_create(int n_threads, cbllm_threadpool **out, cbllm_err *err)
{
	cbllm_threadpool *tp;
	sigset_t	all,
				old;
	int			rc = CBLLM_OK;

	if (n_threads < 1 || n_threads > 1024)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "threads must be between 1 and 1024, not %d",
						  n_threads);
	tp = calloc(1, sizeof(*tp));
	if (tp == NULL || (tp->threads = calloc(n_threads, sizeof(pthread_t))) == NULL)
	{
		free(tp);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	tp->n_threads = 1;
	pthread_mutex_init(&tp->mu, NULL);
	pthread_cond_init(&tp->cv, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (int i = 1; i < n_threads; i++)
	{
		worker_arg *wa = malloc(sizeof(*wa));
		int			e;

		if (wa == NULL)
		{
			rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
			break;
		}
		wa->tp = tp;
		wa->index = i;
		wa->gen = atomic_load(&tp->gen);
		e = pthread_create(&tp->threads[i - 1], NULL, WorkerMain, wa);
		if (e != 0)
		{
			free(wa);
			rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "cannot create compute thread: %s",
							strerror(e));
			break;
		}
		tp->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != CBLLM_OK)
	{
		threadpool_destroy(tp);
		return rc;
	}
	*out = tp;
	return CBLLM_OK;
}

/* Number of threads that run tasks, the caller included. */
int
threadpool_size(const cbllm_threadpool *tp)
{
	return tp->n_threads;
}

/* Run a job on every thread and wait for all its tasks. */
void
threadpool_run(cbllm_threadpool *tp, int n_tasks, cbllm_task_fn fn, void *arg)
{
	unsigned	g;

	if (n_tasks <= 0)
		return;
	if (tp->n_threads == 1 || n_tasks == 1)
	{
		for (int t = 0; t < n_tasks; t++)
			fn(arg, t, 0);
		return;
	}
	/* close the previous job's claims before its fields change */
	g = atomic_load(&tp->gen) + 1;
	atomic_store(&tp->claim, ((uint64_t) g << 32) | UINT32_MAX);
	tp->fn = fn;
	tp->arg = arg;
	tp->n_tasks = n_tasks;
	atomic_store(&tp->n_done, 0);
	atomic_store(&tp->claim, (uint64_t) g << 32);
	pthread_mutex_lock(&tp->mu);
	atomic_store(&tp->gen, g);
	pthread_cond_broadcast(&tp->cv);
	pthread_mutex_unlock(&tp->mu);
	RunTasks(tp, g, 0);
	while (atomic_load_explicit(&tp->n_done, memory_order_acquire) < n_tasks)
		__builtin_ia32_pause();
}

/* Stop and join every worker, then free the pool. */
void
threadpool_destroy(cbllm_threadpool *tp)
{
	if (tp == NULL)
		return;
	atomic_store(&tp->stop, true);
	pthread_mutex_lock(&tp->mu);
	atomic_fetch_add(&tp->gen, 1);
	pthread_cond_broadcast(&tp->cv);
	pthread_mutex_unlock(&tp->mu);
	for (int i = 0; i < tp->n_threads - 1; i++)
		pthread_join(tp->threads[i], NULL);
	pthread_mutex_destroy(&tp->mu);
	pthread_cond_destroy(&tp->cv);
	free(tp->threads);
	free(tp);
}

