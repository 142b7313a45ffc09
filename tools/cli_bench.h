/* cli_bench.h: cbllm-cli bench-steps: timing of decode steps and prefill. */
#ifndef CBLLM_CLI_BENCH_H
#define CBLLM_CLI_BENCH_H

#include "api/cbllm.h"

typedef struct bench_opts
{
	const char *batches;		/* "1,8,32" */
	int			context;		/* prompt length of each decoding sequence; 0: 64 */
	int			steps;			/* decode steps timed per batch size; 0: 32 */
	int			prefill_len;	/* prompt length of the prefill measurement; 0: 256 */
	float		temperature;	/* decode steps sample with these controls; 0: greedy */
	float		top_p;			/* 0: 1 (off) */
	int			top_k;			/* 0: off */
	const char *constraint;		/* a regex the decode steps are also timed under (regex.h); NULL:
								 * none.  It must never end (cli_constraint_regex's lines) */
	size_t		constraint_len;
	bool		logprobs;		/* the decode steps are also timed reporting per-token logprobs */
	int			top_logprobs;	/* with that many alternatives */
} bench_opts;

int			cli_bench_run(const cbllm_engine_params *ep, const bench_opts *o);

typedef struct sampler_bench_opts
{
	int			vocab;			/* 0: 151936 (Qwen's) */
	int			batch;			/* rows sampled together; 0: 32 */
	int			threads;		/* 0: 1 */
	float		temperature;
	float		top_p;			/* 0: 1 (off) */
	int			top_k;			/* 0: off */
} sampler_bench_opts;

/* bench-sampler: print the median batch time and time per row, greedy and sampled. */
int			cli_sampler_bench_run(const sampler_bench_opts *o);

/* membw: print "copy_bandwidth_GBps X" for device "cpu" (NULL), "cuda" or "auto". */
int			cli_membw_run(const char *device);

#endif
