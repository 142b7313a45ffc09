/* engine_run.h: step an engine until its requests end, as the engine tests do. */
#ifndef CBLLM_TEST_ENGINE_RUN_H
#define CBLLM_TEST_ENGINE_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "api/cbllm.h"
#include "tap.h"

/* Told request i's new output; false stops the run as a failure. */
typedef bool (*engine_run_fn) (void *arg, int i, const cbllm_output *o);

/*
 * Step e until no request is active, handing each of the n requests' new
 * output to fn after every step; request i is done (ids[i] set to 0) once
 * its output has a finish.  Returns the steps taken, or -1 on an engine
 * error, when fn says stop, or after max_steps steps.
 */
static inline int
engine_run_to_end(cbllm_engine *e, int64_t *ids, int n, int max_steps, engine_run_fn fn,
				  void *arg)
{
	int			active = 1,
				steps = 0;
	cbllm_err	err;

	while (active > 0)
	{
		if (steps == max_steps)
			return -1;
		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
		{
			TAP_DIAG("step: %s", err.msg);
			return -1;
		}
		steps++;
		for (int i = 0; i < n; i++)
		{
			cbllm_output o;

			if (ids[i] == 0)
				continue;
			if (cbllm_engine_take(e, ids[i], &o, &err) != CBLLM_OK || !fn(arg, i, &o))
				return -1;
			if (o.finish != CBLLM_FINISH_NONE)
				ids[i] = 0;
		}
	}
	return steps;
}

#endif
