/*
 * state_cache.h: the recurrent state of a hybrid model's linear-attention
 * layers (Gated DeltaNet), beside the paged KV cache of its attention
 * layers.  A sequence's state does not grow with its length: per linear
 * layer, the last kernel - 1 inputs of the causal conv and, per value head,
 * the delta rule's state in its chunked form.
 *
 * The delta rule runs over chunks of STATE_CHUNK_ROWS (C) positions,
 * aligned to position 0 (chunk n holds positions n C to n C + C - 1).  A head keeps S
 * (k_dim, v_dim), the state after the last complete chunk, and the rows of
 * the chunk under way: each position's normed key, its new value u (the
 * delta rule's correction, from S and the chunk's earlier rows) and the
 * chunk's cumulative log decay up to it.  A position's output reads S and
 * those rows; S moves on once its chunk is complete.  So each position is
 * computed the same way whether its chunk came in one step or a token at a
 * time: prefill, chunked prefill and decode give the same bits.
 *
 * The cache holds n_slots such states; a running sequence holds one slot, taken when it is first scheduled and
 * given back when it finishes, is aborted or is preempted (by recompute: it
 * starts again from position 0 and a zero state; by swap: its state is
 * copied to host memory of its own and back into a free slot when it
 * resumes).  The engine does that bookkeeping (engine_state.c); the
 * backend reads and updates a slot's state in its linear-attention
 * operation.  The states live in host memory, where the CPU backend works,
 * or in a device backend's own memory (no_data: this struct then keeps
 * only the slots, and the backend copies a slot's state for a swap).
 *
 * A state summarises every position before it, so it cannot be cut at a
 * block boundary: a prefix-cache hit, which skips the positions of shared
 * blocks, has no state to continue from.  The engine therefore turns prefix
 * caching off for hybrid models.
 */
#ifndef CBLLM_STATE_CACHE_H
#define CBLLM_STATE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"

typedef struct state_cache_params
{
	int			n_slots;		/* sequences whose states fit */
	int			n_layers;		/* linear-attention layers */
	int			conv_rows;		/* the conv's kernel - 1: past inputs kept */
	int			conv_dim;		/* the conv's channels (q, k and v) */
	int			n_heads;		/* value heads */
	int			k_dim;			/* key head size */
	int			v_dim;			/* value head size */
	bool		no_data;		/* only the slots: the states live in a device backend's memory
								 * (backend.h's alloc_state), in the layout below */
} state_cache_params;

typedef struct state_cache
{
	state_cache_params p;
	int64_t		conv_floats;	/* of one slot in one layer: conv_rows * conv_dim */
	int64_t		rec_floats;		/* of one slot in one layer: n_heads * state_cache_head_floats */
	float	   *conv;			/* (n_layers, n_slots, conv_rows, conv_dim) past conv inputs,
								 * oldest first; NULL with no_data */
	float	   *rec;			/* (n_layers, n_slots, n_heads, head floats) delta-rule states
								 * (state_cache_head_floats); NULL with no_data */
	int32_t    *free_slots;		/* (n_slots) a stack of the free slots */
	int			n_free;
} state_cache;

#define STATE_CHUNK_ROWS 32		/* positions of a delta-rule chunk */

/*
 * Floats of one value head's delta-rule state, in this order: S (k_dim,
 * v_dim) after the last complete chunk; the chunk under way's normed keys
 * (STATE_CHUNK_ROWS, k_dim), new values (STATE_CHUNK_ROWS, v_dim) and
 * cumulative log decays (STATE_CHUNK_ROWS).  Of the chunk's rows, those of
 * positions already run (position mod STATE_CHUNK_ROWS of them) hold
 * values.
 */
static inline int64_t
state_cache_head_floats(const state_cache_params *p)
{
	return (int64_t) p->k_dim * p->v_dim + (int64_t) STATE_CHUNK_ROWS * (p->k_dim + p->v_dim + 1);
}

/* Bytes of one sequence's state over all layers (f32). */
size_t		state_cache_slot_bytes(const state_cache_params *p);

/* Allocate the slots, all free; the memory is zero. */
int			state_cache_create(const state_cache_params *p, state_cache **out, cbllm_err *err);
void		state_cache_free(state_cache *sc);

/* A free slot, or -1 when every one is held. */
int32_t		state_cache_acquire(state_cache *sc);

/* Give slot back (its contents are left as they are). */
void		state_cache_release(state_cache *sc, int32_t slot);

/* The conv inputs (conv_rows, conv_dim) of layer and slot. */
static inline float *
state_cache_conv(const state_cache *sc, int layer, int32_t slot)
{
	return sc->conv + ((int64_t) layer * sc->p.n_slots + slot) * sc->conv_floats;
}

/* The delta-rule states (n_heads, state_cache_head_floats) of layer and slot. */
static inline float *
state_cache_rec(const state_cache *sc, int layer, int32_t slot)
{
	return sc->rec + ((int64_t) layer * sc->p.n_slots + slot) * sc->rec_floats;
}

/* Copy slot's state over all layers to dst (state_cache_slot_bytes), or back from src. */
void		state_cache_save(const state_cache *sc, int32_t slot, float *dst);
void		state_cache_load(state_cache *sc, int32_t slot, const float *src);

#endif
