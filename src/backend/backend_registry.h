/*
 * backend_registry.h: the compute backends a build knows, one entry each.
 *
 * An entry says what the engine must know before a backend exists: its
 * name, whether a device for it is present (probe), how it stores the KV
 * cache (dtype and bytes per block) and which weight types it can run; and
 * it creates the backend (the table of backend.h), which then answers the
 * rest (how many KV blocks fit the memory budget, the operations).
 *
 * The table is filled by the build in backend_registry.c, the one place
 * that lists the backends compiled in, in priority order: "auto" takes the
 * first whose probe says a device is present (cuda before cpu).  A backend
 * the build left out keeps an entry with no create and the reason, so that
 * asking for it by name says why it is missing.  A caller (a test, an
 * embedding program) may add an entry of its own before creating engines.
 *
 *   backend_registry_choose   the entry for a device name ("auto" probes)
 *   backend_registry_find     the entry of a name, built or not; NULL if unknown
 *   backend_registry_names    the names a device may take, for messages
 *   backend_registry_add      register one more backend; _remove takes it out
 */
#ifndef CBLLM_BACKEND_REGISTRY_H
#define CBLLM_BACKEND_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/backend.h"

/* What every backend is created from (each reads the fields it needs). */
typedef struct backend_params
{
	const cbllm_model *model;
	cbllm_threadpool *pool;		/* the engine's compute threads */
	const char *cpu_isa;		/* CPU kernel set: NULL or "auto" for the best */
	int			max_tokens;		/* most tokens in one step */
	int			max_seqs;		/* most sequences in one step */
	int			max_ctx;		/* longest sequence */
	int			block_size;		/* KV positions per block */
	bool		no_graphs;		/* run decode steps eagerly, never from recorded graphs */
	cbllm_dtype kv_dtype;		/* the KV cache's elements, as kv_layout chose them */
} backend_params;

/* How a backend stores the KV cache of a model. */
typedef struct backend_kv_layout
{
	cbllm_dtype dtype;			/* element type of the cached keys and values */
	size_t		block_bytes;	/* K and V of one block over all layers, as stored */
} backend_kv_layout;

typedef struct backend_reg
{
	const char *name;			/* the device name that selects it: "cpu", "cuda" */
	int			priority;		/* "auto" tries higher first */
	const char *missing;		/* left out of this build: the error that says so; NULL when built */
	/* Whether a device for it is present now (cheap; creates no context). */
	bool		(*probe) (void);
	int			(*create) (const backend_params *p, cbllm_backend **out, cbllm_err *err);
	/*
	 * How it would store the KV cache of cfg in blocks of block_size
	 * positions with elements of type kv_dtype ("auto", NULL, or a name of
	 * kv_cache_dtype_parse); an error when it cannot store that type.
	 */
	int			(*kv_layout) (const cbllm_model_config *cfg, int block_size, const char *kv_dtype,
							  backend_kv_layout *out, cbllm_err *err);
	/* Whether it runs matrices stored as dt. */
	bool		(*supports_weight) (cbllm_dtype dt);
	/* Copy bandwidth of its memory in GB/s (bytes read plus written), copies of bytes each. */
	int			(*copy_bandwidth) (size_t bytes, double *gbps, cbllm_err *err);
	bool		dummies_on_device;	/* it makes dummy weights itself: the loader leaves data NULL */
	bool		threads_in_step;	/* its runtime may start threads in a step: steps block signals */
	bool		runs_linear_attention;	/* it runs hybrid models' linear-attention layers
										 * (backend.h's linear_attention) */
	bool		runs_per_layer_heads;	/* it runs Gemma 4's layers (backend.h's
										 * per_layer_heads) */
} backend_reg;

#define BACKEND_REGISTRY_MAX 8	/* entries, built in and added */

/*
 * The entry for device: a registered name, or "auto" (NULL and "" mean
 * "cpu"); CBLLM_ERR_UNSUPPORTED with the reason for an unknown name or one
 * this build left out.
 */
int			backend_registry_choose(const char *device, const backend_reg **out, cbllm_err *err);

/* The entry named name, built or left out; NULL when no backend has that name. */
const backend_reg *backend_registry_find(const char *name);

/* Every name in name order and then "auto", each inside quote: "cpu", "cuda" or "auto". */
void		backend_registry_names(char *buf, size_t len, const char *quote);

/*
 * Register r (kept by pointer; it must outlive its registration), ahead of
 * every entry of lower priority; a name already registered is refused.
 * Not thread-safe: call it before engines are created.
 */
int			backend_registry_add(const backend_reg *r, cbllm_err *err);
void		backend_registry_remove(const backend_reg *r);

/* The entries of the backends (each defined in its backend's file; backend_registry.c lists those built). */
extern const backend_reg cpu_backend_reg;
extern const backend_reg cuda_backend_reg;

#endif
