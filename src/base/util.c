/* util.c: status codes, error messages, buffers and small file helpers. */
#define _POSIX_C_SOURCE 200809L
#include "base/util.h"

#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Write a formatted message into err and return code. */
int
cbllm_fail(cbllm_err *err, int code, const char *fmt,...)
{
	if (err != NULL)
	{
		va_list		ap;

		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

/* A short name for a status code. */
const char *
cbllm_status_name(int code)
{
	switch (code)
	{
		case CBLLM_OK:
			return "ok";
		case CBLLM_ERR_IO:
			return "io error";
		case CBLLM_ERR_FORMAT:
			return "format error";
		case CBLLM_ERR_UNSUPPORTED:
			return "unsupported";
		case CBLLM_ERR_NOMEM:
			return "out of memory";
		case CBLLM_ERR_INVALID:
			return "invalid argument";
		case CBLLM_ERR_TOO_LONG:
			return "too long";
		case CBLLM_ERR_FULL:
			return "full";
		case CBLLM_ERR_NOT_FOUND:
			return "not found";
		case CBLLM_ERR_INTERNAL:
			return "internal error";
		case CBLLM_ERR_DEVICE:
			return "device error";
		case CBLLM_ERR_DEVICE_LOST:
			return "device lost";
		case CBLLM_ERR_KV_BUDGET:
			return "no memory budget left for the kv cache";
		case CBLLM_ERR_KV_SIZE:
			return "kv cache too large for the device";
	}
	return "unknown error";
}

/* Append n bytes to b, growing it geometrically. */
int
cbllm_buf_append(cbllm_buf *b, const void *src, size_t n)
{
	if (b->len + n + 1 > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 64;
		char	   *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->data, cap);
		if (p == NULL)
			return CBLLM_ERR_NOMEM;
		b->data = p;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->data + b->len, src, n);
	b->len += n;
	b->data[b->len] = '\0';
	return CBLLM_OK;
}

/* Release a buffer and leave it empty. */
void
cbllm_buf_free(cbllm_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

/* Read a file into a NUL-terminated malloc'd buffer; an absent one is no error when optional. */
static int
ReadFile(const char *path, bool optional, char **out, size_t *len, cbllm_err *err)
{
	FILE	   *f = fopen(path, "rb");
	cbllm_buf	b = {0};
	char		chunk[65536];
	size_t		n;

	if (f == NULL && optional && errno == ENOENT)
	{
		*out = NULL;
		if (len)
			*len = 0;
		return CBLLM_OK;
	}
	if (f == NULL)
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
	{
		if (cbllm_buf_append(&b, chunk, n) != CBLLM_OK)
		{
			fclose(f);
			cbllm_buf_free(&b);
			return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory reading file", path);
		}
	}
	if (ferror(f))
	{
		int			e = errno;

		fclose(f);
		cbllm_buf_free(&b);
		return cbllm_fail(err, CBLLM_ERR_IO, "%s: read error: %s", path, strerror(e));
	}
	fclose(f);
	if (b.data == NULL && cbllm_buf_append(&b, "", 0) != CBLLM_OK)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "%s: out of memory", path);
	*out = b.data;
	if (len)
		*len = b.len;
	return CBLLM_OK;
}

/* Read a whole file into a NUL-terminated malloc'd buffer. */
int
cbllm_read_file(const char *path, char **out, size_t *len, cbllm_err *err)
{
	return ReadFile(path, false, out, len, err);
}

/* The same for a file that may be absent (*out NULL then). */
int
cbllm_read_file_if_exists(const char *path, char **out, size_t *len, cbllm_err *err)
{
	return ReadFile(path, true, out, len, err);
}

/* Join dir and name with a '/'. */
char *
cbllm_path_join(const char *dir, const char *name)
{
	size_t		a = strlen(dir),
				b = strlen(name);
	char	   *p = malloc(a + b + 2);

	if (p == NULL)
		return NULL;
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	return p;
}

/* Zero-filled anonymous memory whose pages are touched only when used. */
void *
cbllm_map_zeroed(size_t bytes)
{
	void	   *p;

	if (bytes == 0)
		return NULL;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			 -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* Release memory from cbllm_map_zeroed (NULL is ignored). */
void
cbllm_unmap(void *p, size_t bytes)
{
	if (p != NULL)
		munmap(p, bytes);
}

/* Monotonic time in seconds. */
double
cbllm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* Whether the JSON text s[0, len) nests arrays and objects deeper than limit (util.h). */
bool
json_too_deep(const char *s, size_t len, int limit)
{
	int			depth = 0;
	bool		in_string = false;

	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (in_string)
		{
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
		}
		else if (c == '"')
			in_string = true;
		else if (c == '[' || c == '{')
		{
			if (++depth > limit)
				return true;
		}
		else if (c == ']' || c == '}')
			depth--;
	}
	return false;
}
