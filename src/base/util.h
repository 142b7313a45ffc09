/*
 * util.h: status codes, error messages and growable buffers shared by every
 * part of the engine core.
 *
 * The engine core never exits, aborts or calls PostgreSQL.  A function that
 * can fail returns a cbllm_status (0 on success, negative on failure) and,
 * when given a cbllm_err, writes a one-line human-readable message there.
 */
#ifndef CBLLM_UTIL_H
#define CBLLM_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

typedef enum cbllm_status
{
	CBLLM_OK = 0,
	CBLLM_ERR_IO = -1,			/* a file is missing or cannot be read */
	CBLLM_ERR_FORMAT = -2,		/* a file is malformed (bad JSON, truncated data) */
	CBLLM_ERR_UNSUPPORTED = -3, /* valid input that cbllm does not handle */
	CBLLM_ERR_NOMEM = -4,		/* an allocation failed */
	CBLLM_ERR_INVALID = -5,		/* an invalid argument (bad parameter, bad id) */
	CBLLM_ERR_TOO_LONG = -6,	/* a prompt or request exceeds a limit */
	CBLLM_ERR_FULL = -7,		/* no room: queue or KV pool exhausted */
	CBLLM_ERR_NOT_FOUND = -8,	/* an unknown request id or name */
	CBLLM_ERR_INTERNAL = -9,	/* a bug: an invariant does not hold */
	CBLLM_ERR_DEVICE = -10,		/* a compute device failed */
	CBLLM_ERR_DEVICE_LOST = -11,	/* the device is unusable until the engine is recreated */
	CBLLM_ERR_KV_BUDGET = -12,	/* the device memory budget (engine parameter
								 * gpu_memory_utilization) leaves no room for the KV
								 * cache; a smaller max_num_batched_tokens also helps */
	CBLLM_ERR_KV_SIZE = -13		/* the KV cache size given (engine parameter kv_cache_bytes,
								 * or num_kv_blocks) does not fit the device */
} cbllm_status;

#define CBLLM_ERR_MSG_LEN 512

typedef struct cbllm_err
{
	char		msg[CBLLM_ERR_MSG_LEN];
} cbllm_err;

/* Write a formatted message into err (which may be NULL); return code. */
int			cbllm_fail(cbllm_err *err, int code, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* A short lower-case name for a status code ("io error", "format error"...). */
const char *cbllm_status_name(int code);

/* A growable byte buffer; data is always NUL-terminated when len > 0. */
typedef struct cbllm_buf
{
	char	   *data;
	size_t		len;
	size_t		cap;
} cbllm_buf;

int			cbllm_buf_append(cbllm_buf *b, const void *src, size_t n);
void		cbllm_buf_free(cbllm_buf *b);

/* Read a whole file into a NUL-terminated malloc'd buffer. */
int			cbllm_read_file(const char *path, char **out, size_t *len, cbllm_err *err);

/* The same for a file that may be absent: then CBLLM_OK with *out NULL (and *len 0). */
int			cbllm_read_file_if_exists(const char *path, char **out, size_t *len, cbllm_err *err);

/* Join dir and name with a '/' into a malloc'd string, or NULL when out of memory. */
char	   *cbllm_path_join(const char *dir, const char *name);

/* bytes of zero-filled private memory, touched lazily; NULL on failure or for 0 bytes. */
void	   *cbllm_map_zeroed(size_t bytes);
void		cbllm_unmap(void *p, size_t bytes);

/* Monotonic time in seconds. */
double		cbllm_now(void);

/*
 * JSON nesting.  cJSON refuses documents nested deeper than its own limit
 * (1000) with no reason given, so parsers of untrusted JSON check the depth
 * first and say why.
 */
#define CBLLM_JSON_MAX_DEPTH 512

/* Whether the JSON text s[0, len) nests arrays and objects deeper than limit (strings skipped). */
bool		json_too_deep(const char *s, size_t len, int limit);

#ifdef __cplusplus
}
#endif

#endif
