/* cli_workload.h: cbllm-cli bench: the reference serving workload replayed in-process. */
#ifndef CBLLM_CLI_WORKLOAD_H
#define CBLLM_CLI_WORKLOAD_H

#include <stdbool.h>

#include "api/cbllm.h"

typedef struct workload_opts
{
	const char *concurrency;	/* "1,4,8,16,32" */
	int			requests;		/* per level; 0: 50 */
	int			prompt_min,
				prompt_max;		/* 0: 50..200 */
	int			gen_min,
				gen_max;		/* 0: 100..500 */
	int			prefix_len;		/* shared system prefix of half the prompts; 0: 130, -1: none */
	float		temperature;	/* < 0: 0.7 */
	float		top_p;			/* 0: 0.95 */
	bool		json;
	unsigned	seed;
	double		bandwidth_gbps; /* memory bandwidth for each decode step's floor; 0: no floor */
	const char *constraint;		/* a regex every request's output must match; NULL: none */
	size_t		constraint_len;
} workload_opts;

/* Ascending order of doubles, for qsort (medians and percentiles). */
int			cli_cmp_double(const void *a, const void *b);

/* Parse "A..B" (or "A") into lo, hi; 0 on success. */
int			workload_parse_range(const char *s, int *lo, int *hi);

int			cli_workload_run(const cbllm_engine_params *ep, const workload_opts *o);

/* The head-of-line case: 1 long and 7 short requests submitted together. */
int			cli_hol_run(const cbllm_engine_params *ep, int short_gen, int long_gen, int prompt_len);

#endif
