/*
 * safetensors.h: memory-mapped reading of HuggingFace safetensors files, a
 * single model.safetensors or a sharded set named by model.safetensors.index.json.
 *
 * Tensors keep their stored dtype; data points into the read-only mapping, so
 * a bf16 checkpoint costs its file size in page cache and nothing more.
 */
#ifndef CBLLM_SAFETENSORS_H
#define CBLLM_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/util.h"
#include "dtype/dtype.h"

#define ST_MAX_DIMS 8		/* a vision tower's Conv3d kernel has 5 */

typedef struct st_tensor
{
	char	   *name;
	cbllm_dtype dtype;
	int			ndim;
	int64_t		shape[ST_MAX_DIMS];
	const void *data;			/* into the file's mapping */
	size_t		nbytes;
	int			file;			/* index into st_archive.files */
} st_tensor;

typedef struct st_file
{
	char	   *path;
	void	   *map;
	size_t		size;
	bool		borrowed;		/* map is the caller's buffer (st_add_buffer): not unmapped */
} st_file;

typedef struct st_archive
{
	st_file    *files;
	int			n_files;
	st_tensor  *tensors;
	int			n_tensors;
} st_archive;

/*
 * Open dir/model.safetensors, or dir/model.safetensors.index.json and its
 * shards.  Errors name the file and the problem.
 */
int			st_open_dir(const char *dir, st_archive **out, cbllm_err *err);

/* Parse and map one safetensors file, adding its tensors to ar. */
int			st_add_file(st_archive *ar, const char *path, cbllm_err *err);

/*
 * Parse a whole safetensors file already in memory (size bytes at buf),
 * adding its tensors to ar; name stands for its path in messages.  The
 * tensors point into buf, which the caller keeps until st_close(ar) and
 * frees after it.
 */
int			st_add_buffer(st_archive *ar, const void *buf, size_t size, const char *name,
						  cbllm_err *err);

/* Called by st_parse_index once per distinct shard file name; nonzero stops it. */
typedef int (*st_shard_fn) (void *arg, const char *file, cbllm_err *err);

/*
 * Parse the NUL-terminated text of a model.safetensors.index.json (index_path
 * names it in messages) and call each for every distinct plain file name of
 * its weight_map, in order; returns the first failure.
 */
int			st_parse_index(const char *text, const char *index_path, st_shard_fn each,
						   void *arg, cbllm_err *err);

/* Find a tensor by name, or NULL. */
const st_tensor *st_find(const st_archive *ar, const char *name);

void		st_close(st_archive *ar);

#endif
