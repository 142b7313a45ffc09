/*
 * stats.h: the engine's counters (cbllm_engine_stats, cbllm.h), in a header
 * of their own so that the PostgreSQL glue can keep them in shared memory
 * and add up several engines' without the rest of the engine's API.
 */
#ifndef CBLLM_STATS_H
#define CBLLM_STATS_H

#include <stdint.h>

typedef struct cbllm_stats
{
	int			n_waiting;
	int			n_running;
	int			kv_blocks_total;
	int			kv_blocks_free;
	int64_t		steps;
	int64_t		tokens_prompt;	/* prompt tokens computed (including recomputation) */
	int64_t		tokens_generated;
	int64_t		tokens_padding;	/* padded static batching: prompt positions computed again as
								 * padding (decode steps past an end are in batch_seqs_sum) */
	int64_t		batch_seqs_sum; /* sum over steps of the sequences in the step */
	int64_t		preemptions;	/* all preemptions */
	int64_t		preemptions_recompute;
	int64_t		preemptions_swap;
	int			n_swapped;		/* requests whose KV is in swap space now */
	int			swap_blocks_total;
	int			swap_blocks_free;
	int			kv_blocks_cached;	/* free blocks still holding a cached prefix */
	int64_t		prefix_queries; /* full prompt blocks looked up */
	int64_t		prefix_hits;	/* of those, found in the cache */
	double		forward_seconds;
	int64_t		graph_steps;	/* steps replayed from CUDA graphs */
	int64_t		tokens_masked_device;	/* constrained tokens drawn on the device, their
										 * mask applied there */
	int64_t		expert_pairs;	/* (token, expert) pairs the experts computed: a token's
								 * experts in each layer with experts */
	int64_t		expert_runs;	/* experts run over their tokens' rows: what was read, each
								 * expert once per layer and step that chose it */
	int			state_slots_total;	/* a hybrid model's linear-attention state slots (one per
									 * sequence of max_num_seqs); 0 for other models */
	int			state_slots_used;	/* held by running sequences */
	int64_t		state_bytes;	/* memory of those states (the slots', on the device or the
								 * host) and of swapped-out sequences' saved copies */
} cbllm_stats;

/* Add every counter of x to sum (the counters of several engines as one). */
void		cbllm_stats_add(cbllm_stats *sum, const cbllm_stats *x);

#endif
