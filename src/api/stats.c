/*
 * stats.c: the engine's counters (cbllm_stats, stats.h) added up, field by
 * field in one place, so that a counter added to the struct is summed here
 * and nowhere else needs to learn of it.
 */
#include "api/stats.h"

/* Add every counter of x to sum. */
void
cbllm_stats_add(cbllm_stats *sum, const cbllm_stats *x)
{
	sum->n_waiting += x->n_waiting;
	sum->n_running += x->n_running;
	sum->kv_blocks_total += x->kv_blocks_total;
	sum->kv_blocks_free += x->kv_blocks_free;
	sum->steps += x->steps;
	sum->tokens_prompt += x->tokens_prompt;
	sum->tokens_generated += x->tokens_generated;
	sum->tokens_padding += x->tokens_padding;
	sum->batch_seqs_sum += x->batch_seqs_sum;
	sum->preemptions += x->preemptions;
	sum->preemptions_recompute += x->preemptions_recompute;
	sum->preemptions_swap += x->preemptions_swap;
	sum->n_swapped += x->n_swapped;
	sum->swap_blocks_total += x->swap_blocks_total;
	sum->swap_blocks_free += x->swap_blocks_free;
	sum->kv_blocks_cached += x->kv_blocks_cached;
	sum->prefix_queries += x->prefix_queries;
	sum->prefix_hits += x->prefix_hits;
	sum->forward_seconds += x->forward_seconds;
	sum->graph_steps += x->graph_steps;
	sum->tokens_masked_device += x->tokens_masked_device;
	sum->expert_pairs += x->expert_pairs;
	sum->expert_runs += x->expert_runs;
	sum->state_slots_total += x->state_slots_total;
	sum->state_slots_used += x->state_slots_used;
	sum->state_bytes += x->state_bytes;
}
