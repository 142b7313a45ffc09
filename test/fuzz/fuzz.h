/*
 * fuzz.h: what every libFuzzer harness in test/fuzz shares.
 *
 * The engine reads whole files into NUL-terminated buffers before parsing
 * them (cbllm_read_file), so a harness hands its parser a malloc'd copy of
 * the input with one NUL after it, exactly as large as that: AddressSanitizer
 * then catches any read beyond what a file would have given.  FUZZ_CHECK
 * states a property the parser promises for what it accepts; a broken one
 * aborts, which libFuzzer reports as a crash like any other.
 */
#ifndef CBLLM_FUZZ_H
#define CBLLM_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A malloc'd copy of data[0..size) with a NUL after it, or NULL. */
static inline char *
fuzz_text(const uint8_t *data, size_t size)
{
	char	   *t = malloc(size + 1);

	if (t != NULL)
	{
		if (size > 0)
			memcpy(t, data, size);
		t[size] = '\0';
	}
	return t;
}

/* A malloc'd copy of data[0..size) exactly that large (a mapped file's bytes), or NULL. */
static inline uint8_t *
fuzz_bytes(const uint8_t *data, size_t size)
{
	uint8_t    *b = malloc(size > 0 ? size : 1);

	if (b != NULL && size > 0)
		memcpy(b, data, size);
	return b;
}

/* Abort (a finding) when a promised property does not hold. */
#define FUZZ_CHECK(cond, what) \
	do { \
		if (!(cond)) \
		{ \
			fprintf(stderr, "fuzz property broken at %s:%d: %s (%s)\n", __FILE__, __LINE__, \
					what, #cond); \
			abort(); \
		} \
	} while (0)

#endif
