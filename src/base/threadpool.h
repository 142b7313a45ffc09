/*
 * threadpool.h: a fixed pool of compute threads for the engine's parallel
 * loops.  The calling thread takes part, so a pool of n threads starts n - 1.
 *
 * The threads are created with every signal blocked, so a host process's
 * signal handlers (PostgreSQL's) only ever run on the thread that created
 * the pool; they touch nothing but the memory their tasks are given.
 */
#ifndef CBLLM_THREADPOOL_H
#define CBLLM_THREADPOOL_H

#include "base/util.h"

typedef struct cbllm_threadpool cbllm_threadpool;

/* fn(arg, task, thread) runs once for every task in [0, n_tasks); thread < n_threads. */
typedef void (*cbllm_task_fn) (void *arg, int task, int thread);

int			threadpool_create(int n_threads, cbllm_threadpool **out, cbllm_err *err);
int			threadpool_size(const cbllm_threadpool *tp);

/* Run n_tasks tasks over the pool and return when all are done. */
void		threadpool_run(cbllm_threadpool *tp, int n_tasks, cbllm_task_fn fn, void *arg);

void		threadpool_destroy(cbllm_threadpool *tp);

#endif
