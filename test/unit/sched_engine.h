/*
 * sched_engine.h: what the scheduler tests on a whole engine share: an
 * injected clock (test_now, which only the tests move, so priority aging is
 * deterministic), engines of block size 4 with the given limits and modes,
 * and generated prompts.  Included by one test program each (its functions
 * are static); LoadVocab sets model_dir and vocab before the rest is used.
 */
#ifndef CBLLM_TEST_SCHED_ENGINE_H
#define CBLLM_TEST_SCHED_ENGINE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine/engine_internal.h"	/* bm->test_hash, the forced-collision hook */
#include "tap.h"

#define MAXR 16

static const char *model_dir;
static int	vocab;
static double test_now = 1000.0;	/* the engines' clock, in seconds */

/* The injected engine clock: reads test_now. */
static double
TestClock(void *arg)
{
	return *(const double *) arg;
}

/* Parameters with block size 4, the test clock, and the given limits and modes. */
static cbllm_engine_params
Params(int max_seqs, int budget, int kv_blocks, cbllm_preempt mode, int swap_blocks,
	   bool no_prefix, cbllm_batching batching)
{
	cbllm_engine_params p = {0};

	p.model_dir = model_dir;
	p.n_threads = 2;
	p.max_num_seqs = max_seqs;
	p.max_num_batched_tokens = budget;
	p.num_kv_blocks = kv_blocks;
	p.block_size = 4;
	p.max_model_len = 256;
	p.preempt_mode = mode;
	p.num_swap_blocks = swap_blocks;
	p.swap_space_bytes = swap_blocks == 0 ? SIZE_MAX : 0;
	p.no_prefix_caching = no_prefix;
	p.batching = batching;
	p.clock = TestClock;
	p.clock_arg = &test_now;
	return p;
}

/* An engine from p; NULL (with a diagnostic) when creation fails. */
static cbllm_engine *
Create(const cbllm_engine_params *p)
{
	cbllm_engine *e = NULL;
	cbllm_err	err;

	if (cbllm_engine_create(p, &e, &err) != CBLLM_OK)
		TAP_DIAG("engine_create: %s", err.msg);
	return e;
}

/* An engine with block size 4 and the given limits and modes. */
static cbllm_engine *
NewEngine(int max_seqs, int budget, int kv_blocks, cbllm_preempt mode, int swap_blocks,
		  bool no_prefix, cbllm_batching batching)
{
	cbllm_engine_params p = Params(max_seqs, budget, kv_blocks, mode, swap_blocks, no_prefix,
								   batching);

	return Create(&p);
}

/* Token i of prompt "seed": 1 (BOS) first, then a deterministic id. */
static int32_t
SeedToken(int seed, int i)
{
	return i == 0 ? 1 : 3 + (int32_t) ((seed * 2654435761u + i * 40503u) % (unsigned) (vocab - 3));
}

/* Load the model in dir once to learn its vocabulary; false (a failed check) when it does not load. */
static bool
LoadVocab(const char *dir)
{
	cbllm_engine *e;
	cbllm_engine_info info;

	model_dir = dir;
	e = NewEngine(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, false, CBLLM_BATCH_CONTINUOUS);
	TAP_OK(e != NULL, "engine loads %s", model_dir);
	if (e == NULL)
		return false;
	cbllm_engine_get_info(e, &info);
	vocab = info.vocab_size;
	cbllm_engine_destroy(e);
	return true;
}

#endif
