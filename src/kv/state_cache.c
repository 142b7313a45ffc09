/* state_cache.c: the slots of the linear-attention states (state_cache.h). */
#include "kv/state_cache.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of one sequence's state over all layers. */
size_t
state_cache_slot_bytes(const state_cache_params *p)
{
	return sizeof(float) * (size_t) p->n_layers *
		((size_t) p->conv_rows * p->conv_dim + (size_t) p->n_heads * state_cache_head_floats(p));
}

/* Allocate n_slots zeroed states and the free stack. */
int
state_cache_create(const state_cache_params *p, state_cache **out, cbllm_err *err)
{
	state_cache *sc;

	if (p->n_slots < 1 || p->n_layers < 1 || p->conv_rows < 0 || p->conv_dim < 1 ||
		p->n_heads < 1 || p->k_dim < 1 || p->v_dim < 1)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "invalid state cache geometry");
	sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	sc->p = *p;
	sc->conv_floats = (int64_t) p->conv_rows * p->conv_dim;
	sc->rec_floats = p->n_heads * state_cache_head_floats(p);
	if (!p->no_data)
	{
		sc->conv = calloc((size_t) p->n_layers * p->n_slots *
						  (sc->conv_floats > 0 ? sc->conv_floats : 1), sizeof(float));
		sc->rec = calloc((size_t) p->n_layers * p->n_slots * sc->rec_floats, sizeof(float));
	}
	sc->free_slots = malloc(sizeof(int32_t) * p->n_slots);
	if ((!p->no_data && (sc->conv == NULL || sc->rec == NULL)) || sc->free_slots == NULL)
	{
		size_t		bytes = state_cache_slot_bytes(p) * (size_t) p->n_slots;

		state_cache_free(sc);
		return cbllm_fail(err, CBLLM_ERR_NOMEM,
						  "out of memory for the linear-attention states of %d sequences (%zu MB); lower max_num_seqs",
						  p->n_slots, bytes >> 20);
	}
	/* slot 0 on top: the first sequences take the lowest slots */
	for (int i = 0; i < p->n_slots; i++)
		sc->free_slots[i] = p->n_slots - 1 - i;
	sc->n_free = p->n_slots;
	*out = sc;
	return CBLLM_OK;
}

/* Release the slots. */
void
state_cache_free(state_cache *sc)
{
	if (sc == NULL)
		return;
	free(sc->conv);
	free(sc->rec);
	free(sc->free_slots);
	free(sc);
}

/* Pop a free slot. */
int32_t
state_cache_acquire(state_cache *sc)
{
	return sc->n_free > 0 ? sc->free_slots[--sc->n_free] : -1;
}

/* Push slot back. */
void
state_cache_release(state_cache *sc, int32_t slot)
{
	if (slot >= 0 && slot < sc->p.n_slots && sc->n_free < sc->p.n_slots)
		sc->free_slots[sc->n_free++] = slot;
}

/* Copy a slot's layers out, conv inputs then delta-rule state per layer. */
void
state_cache_save(const state_cache *sc, int32_t slot, float *dst)
{
	for (int l = 0; l < sc->p.n_layers; l++)
	{
		memcpy(dst, state_cache_conv(sc, l, slot), sizeof(float) * sc->conv_floats);
		dst += sc->conv_floats;
		memcpy(dst, state_cache_rec(sc, l, slot), sizeof(float) * sc->rec_floats);
		dst += sc->rec_floats;
	}
}

/* Copy a slot's layers back in, as state_cache_save laid them out. */
void
state_cache_load(state_cache *sc, int32_t slot, const float *src)
{
	for (int l = 0; l < sc->p.n_layers; l++)
	{
		memcpy(state_cache_conv(sc, l, slot), src, sizeof(float) * sc->conv_floats);
		src += sc->conv_floats;
		memcpy(state_cache_rec(sc, l, slot), src, sizeof(float) * sc->rec_floats);
		src += sc->rec_floats;
	}
}
