/*
 * safetensors.c: parse safetensors headers and map their data read-only.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({name: {dtype, shape, data_offsets}, "__metadata__": {...}}), then the
 * data.  Every offset is checked against the file size before any tensor is
 * exposed, so a truncated or hostile file is an error, never a bad read.
 */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)

/* Validate one header entry and append it to the archive's tensor list. */
static int
AddTensor(st_archive *ar, int file, const cJSON *ent, const char *data,
		  size_t data_len, const char *path, cbllm_err *err)
{
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(ent, "dtype");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(ent, "shape");
	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(ent, "data_offsets");
	const char *name = ent->string;
	st_tensor	t = {0};
	size_t		nelem = 1;
	double		b,
				e;
	int			d;
	size_t		need;
	char		names[64];
	const cJSON *it;
	st_tensor  *grown;

	if (!cJSON_IsObject(ent) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
		!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" has a malformed header entry", path, name);
	if (!cbllm_dtype_by_name(dt->valuestring, &t.dtype))
	{
		cbllm_dtype_names(names, sizeof(names));
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED,
						  "%s: tensor \"%s\" has unsupported dtype %s (%s are supported)",
						  path, name, dt->valuestring, names);
	}
	t.ndim = cJSON_GetArraySize(shape);
	if (t.ndim > ST_MAX_DIMS)
		return cbllm_fail(err, CBLLM_ERR_UNSUPPORTED, "%s: tensor \"%s\" has %d dimensions",
						  path, name, t.ndim);
	d = 0;
	cJSON_ArrayForEach(it, shape)
	{
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1e12 ||
			(double) nelem * it->valuedouble > 1e15)	/* no size_t overflow below */
			return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: tensor \"%s\" has a bad shape",
							  path, name);
		t.shape[d++] = (int64_t) it->valuedouble;
		nelem *= (size_t) it->valuedouble;
	}
	b = cJSON_GetArrayItem(offs, 0)->valuedouble;
	e = cJSON_GetArrayItem(offs, 1)->valuedouble;
	if (!cJSON_IsNumber(cJSON_GetArrayItem(offs, 0)) ||
		!cJSON_IsNumber(cJSON_GetArrayItem(offs, 1)) || b < 0 || e < b)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: tensor \"%s\" has bad data_offsets",
						  path, name);
	if (e > (double) data_len)	/* compared as doubles: (size_t) e may overflow */
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: file is truncated: tensor \"%s\" ends at byte %.0f of the data but only %zu bytes are present",
						  path, name, e, data_len);
	t.nbytes = (size_t) e - (size_t) b;
	need = cbllm_dtype_row_bytes(t.dtype, (int64_t) nelem);	/* SIZE_MAX: never matches */
	if (t.nbytes != need)
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: tensor \"%s\" holds %zu bytes but its shape and dtype need %zu",
						  path, name, t.nbytes, need);
	t.data = data + (size_t) b;
	t.file = file;
	t.name = strdup(name);
	if (t.name == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	grown = realloc(ar->tensors, sizeof(st_tensor) * (ar->n_tensors + 1));
	if (grown == NULL)
	{
		free(t.name);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	ar->tensors = grown;
	ar->tensors[ar->n_tensors++] = t;
	return CBLLM_OK;
}

/* The error for a file too short to hold the header length. */
static int
TooShort(const char *path, size_t size, cbllm_err *err)
{
	return cbllm_fail(err, CBLLM_ERR_FORMAT,
					  "%s: file is truncated: %lld bytes, too short for a safetensors header",
					  path, (long long) size);
}

/* Release a file's bytes unless they are the caller's. */
static void
Unmap(const unsigned char *p, size_t size, bool borrowed)
{
	if (!borrowed)
		munmap((void *) p, size);
}

/*
 * Parse the header of the size bytes at p (at least 8), register them as one
 * of ar's files and add their tensors.  A failure before the file is
 * registered unmaps p unless it is borrowed; after that st_close does.
 */
static int
AddMapped(st_archive *ar, const unsigned char *p, size_t size, bool borrowed,
		  const char *path, cbllm_err *err)
{
	uint64_t	hlen = 0;
	cJSON	   *hdr;
	const cJSON *ent;
	st_file    *files;
	int			file,
				rc = CBLLM_OK;

	for (int i = 7; i >= 0; i--)
		hlen = (hlen << 8) | p[i];
	if (hlen > ST_MAX_HEADER || hlen > (uint64_t) size - 8)
	{
		Unmap(p, size, borrowed);
		return cbllm_fail(err, CBLLM_ERR_FORMAT,
						  "%s: file is truncated or not safetensors: header length %llu exceeds the file size %lld",
						  path, (unsigned long long) hlen, (long long) size);
	}
	hdr = cJSON_ParseWithLength((const char *) p + 8, (size_t) hlen);
	if (hdr == NULL || !cJSON_IsObject(hdr))
	{
		cJSON_Delete(hdr);
		Unmap(p, size, borrowed);
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: the safetensors header is not a JSON object",
						  path);
	}
	files = realloc(ar->files, sizeof(st_file) * (ar->n_files + 1));
	if (files == NULL || (files[ar->n_files].path = strdup(path)) == NULL)
	{
		if (files)
			ar->files = files;
		cJSON_Delete(hdr);
		Unmap(p, size, borrowed);
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	}
	ar->files = files;
	file = ar->n_files++;
	files[file].map = (void *) p;
	files[file].size = size;
	files[file].borrowed = borrowed;
	cJSON_ArrayForEach(ent, hdr)
	{
		if (strcmp(ent->string, "__metadata__") == 0)
			continue;
		rc = AddTensor(ar, file, ent, (const char *) p + 8 + hlen,
					   size - 8 - hlen, path, err);
		if (rc != CBLLM_OK)
			break;
	}
	cJSON_Delete(hdr);
	return rc;
}

/* Parse and map one safetensors file, adding its tensors to ar. */
int
st_add_file(st_archive *ar, const char *path, cbllm_err *err)
{
	int			fd;
	struct stat sb;
	void	   *map;

	fd = open(path, O_RDONLY);
	if (fd < 0)
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &sb) != 0)
	{
		close(fd);
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
	}
	if (sb.st_size < 8)
	{
		close(fd);
		return TooShort(path, (size_t) sb.st_size, err);
	}
	map = mmap(NULL, (size_t) sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
	return AddMapped(ar, map, (size_t) sb.st_size, false, path, err);
}

/* Parse a safetensors file held in the caller's memory, adding its tensors to ar. */
int
st_add_buffer(st_archive *ar, const void *buf, size_t size, const char *name, cbllm_err *err)
{
	if (size < 8)
		return TooShort(name, size, err);
	return AddMapped(ar, buf, size, true, name, err);
}

/* Call each for every distinct shard file name of an index's weight_map. */
int
st_parse_index(const char *text, const char *index_path, st_shard_fn each, void *arg,
			   cbllm_err *err)
{
	cJSON	   *idx,
			   *map;
	const cJSON *ent;
	int			rc;

	idx = cJSON_Parse(text);
	if (idx == NULL)
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: invalid JSON", index_path);
	map = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
	if (!cJSON_IsObject(map))
	{
		cJSON_Delete(idx);
		return cbllm_fail(err, CBLLM_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);
	}
	cJSON_ArrayForEach(ent, map)
	{
		const cJSON *prev;
		bool		seen = false;

		if (!cJSON_IsString(ent) || strchr(ent->valuestring, '/') != NULL)
		{
			/* format the message before the JSON (and ent->string) is freed */
			rc = cbllm_fail(err, CBLLM_ERR_FORMAT,
							"%s: weight_map entry \"%s\" is not a plain file name",
							index_path, ent->string);
			cJSON_Delete(idx);
			return rc;
		}
		for (prev = map->child; prev != ent; prev = prev->next)
			if (strcmp(prev->valuestring, ent->valuestring) == 0)
			{
				seen = true;
				break;
			}
		if (seen)
			continue;
		rc = each(arg, ent->valuestring, err);
		if (rc != CBLLM_OK)
		{
			cJSON_Delete(idx);
			return rc;
		}
	}
	cJSON_Delete(idx);
	return CBLLM_OK;
}

/* Where OpenSharded's shards go: the archive and the directory of the index. */
typedef struct ShardTarget
{
	st_archive *ar;
	const char *dir;
} ShardTarget;

/* Open one shard of an index (an st_shard_fn). */
static int
AddShard(void *arg, const char *file, cbllm_err *err)
{
	ShardTarget *t = arg;
	char	   *path = cbllm_path_join(t->dir, file);
	int			rc;

	rc = path ? st_add_file(t->ar, path, err) : cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	free(path);
	return rc;
}

/* Open the shards listed by an index file's weight_map, each once. */
static int
OpenSharded(st_archive *ar, const char *dir, const char *index_path, cbllm_err *err)
{
	ShardTarget target = {ar, dir};
	char	   *text;
	int			rc;

	rc = cbllm_read_file(index_path, &text, NULL, err);
	if (rc != CBLLM_OK)
		return rc;
	rc = st_parse_index(text, index_path, AddShard, &target, err);
	free(text);
	return rc;
}

/* Open a model directory's weights, single-file or sharded. */
int
st_open_dir(const char *dir, st_archive **out, cbllm_err *err)
{
	st_archive *ar = calloc(1, sizeof(st_archive));
	char	   *single = cbllm_path_join(dir, "model.safetensors");
	char	   *index = cbllm_path_join(dir, "model.safetensors.index.json");
	int			rc;

	if (ar == NULL || single == NULL || index == NULL)
		rc = cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	else if (access(single, F_OK) == 0)
		rc = st_add_file(ar, single, err);
	else if (access(index, F_OK) == 0)
		rc = OpenSharded(ar, dir, index, err);
	else
		rc = cbllm_fail(err, CBLLM_ERR_IO,
						"%s: no model weights: neither model.safetensors nor model.safetensors.index.json exists",
						dir);
	free(single);
	free(index);
	if (rc != CBLLM_OK)
	{
		st_close(ar);
		return rc;
	}
	*out = ar;
	return CBLLM_OK;
}

/* Find a tensor by name (linear: a checkpoint has a few hundred). */
const st_tensor *
st_find(const st_archive *ar, const char *name)
{
	for (int i = 0; i < ar->n_tensors; i++)
		if (strcmp(ar->tensors[i].name, name) == 0)
			return &ar->tensors[i];
	return NULL;
}

/* Unmap every file (but the borrowed buffers) and free the archive. */
void
st_close(st_archive *ar)
{
	if (ar == NULL)
		return;
	for (int i = 0; i < ar->n_tensors; i++)
		free(ar->tensors[i].name);
	for (int i = 0; i < ar->n_files; i++)
	{
		Unmap(ar->files[i].map, ar->files[i].size, ar->files[i].borrowed);
		free(ar->files[i].path);
	}
	free(ar->tensors);
	free(ar->files);
	free(ar);
}
