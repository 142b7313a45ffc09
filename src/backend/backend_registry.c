/*
 * backend_registry.c: the table of the backends this build knows, and the
 * choice of one by device name.
 *
 * This file is the one place that lists the backends compiled in, in
 * priority order.  A backend is added by its entry here, under the build
 * flag that compiles its file, and by that file, which defines the entry
 * (name, probe, create, KV layout, weight types) next to the table of
 * operations it fills.  The engine never names a backend.
 */
#include "backend/backend_registry.h"

#include <string.h>

#include "base/join_names.h"

#ifdef CBLLM_WITH_CUDA
#define CUDA_ENTRY (&cuda_backend_reg)
#else
/* Left out of this build: still a name, so that asking for it says why. */
static const backend_reg CudaLeftOut = {
	.name = "cuda",
	.missing = "this build of cbllm has no CUDA support: rebuild with CUDA=1 where nvcc is installed",
};

#define CUDA_ENTRY (&CudaLeftOut)
#endif

/* (n_entries) every entry, by priority, highest first; built in, then added */
static const backend_reg *entries[BACKEND_REGISTRY_MAX] = {CUDA_ENTRY, &cpu_backend_reg};
static int	n_entries = 2;

/* The entry named name, built or left out; NULL when none has that name. */
const backend_reg *
backend_registry_find(const char *name)
{
	for (int i = 0; name != NULL && i < n_entries; i++)
		if (strcmp(entries[i]->name, name) == 0)
			return entries[i];
	return NULL;
}

/* The names a device may take, in name order, then "auto", each inside quote. */
void
backend_registry_names(char *buf, size_t len, const char *quote)
{
	const char *names[BACKEND_REGISTRY_MAX + 1];

	/* insertion sort of a handful of names */
	for (int i = 0; i < n_entries; i++)
	{
		int			j = i;

		for (; j > 0 && strcmp(names[j - 1], entries[i]->name) > 0; j--)
			names[j] = names[j - 1];
		names[j] = entries[i]->name;
	}
	names[n_entries] = "auto";
	cbllm_join_names(buf, len, names, n_entries + 1, "or", quote);
}

/* The entry for a device name; "auto" takes the first built entry whose device is present. */
int
backend_registry_choose(const char *device, const backend_reg **out, cbllm_err *err)
{
	const backend_reg *r;
	char		names[256];

	*out = NULL;
	if (device == NULL || device[0] == '\0')
		device = "cpu";
	if (strcmp(device, "auto") == 0)
	{
		for (int i = 0; i < n_entries; i++)
			if (entries[i]->create != NULL && entries[i]->probe())
			{
				*out = entries[i];
				return CBLLM_OK;
			}
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "no backend of this build has a device here");
	}
	r = backend_registry_find(device);
	if (r == NULL)
	{
		backend_registry_names(names, sizeof(names), "\"");
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "unsupported device \"%s\" (use %s)", device,
						  names);
	}
	if (r->create == NULL)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s", r->missing);
	*out = r;
	return CBLLM_OK;
}

/* Register one more backend ahead of every entry of lower priority. */
int
backend_registry_add(const backend_reg *r, cbllm_err *err)
{
	int			at = 0;

	if (r == NULL || r->name == NULL || r->name[0] == '\0' || strcmp(r->name, "auto") == 0)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "a backend needs a name other than \"auto\"");
	if (r->create == NULL ? r->missing == NULL :
		r->probe == NULL || r->kv_layout == NULL || r->supports_weight == NULL ||
		r->copy_bandwidth == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID,
						  "backend \"%s\": a built backend needs probe, create, kv_layout, supports_weight and copy_bandwidth; a left-out one its reason",
						  r->name);
	if (backend_registry_find(r->name) != NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "a backend named \"%s\" is already registered",
						  r->name);
	if (n_entries == BACKEND_REGISTRY_MAX)
		return cbllm_fail(err, CBLLM_ERR_FULL, "the backend registry holds %d entries at most",
						  BACKEND_REGISTRY_MAX);
	while (at < n_entries && entries[at]->priority >= r->priority)
		at++;
	memmove(&entries[at + 1], &entries[at], sizeof(entries[0]) * (n_entries - at));
	entries[at] = r;
	n_entries++;
	return CBLLM_OK;
}

/* Take a registered backend out of the table (nothing when it is not there). */
void
backend_registry_remove(const backend_reg *r)
{
	for (int i = 0; i < n_entries; i++)
		if (entries[i] == r)
		{
			memmove(&entries[i], &entries[i + 1], sizeof(entries[0]) * (n_entries - i - 1));
			n_entries--;
			return;
		}
}
