/*
 * tap.h: a minimal TAP producer for the unit tests.  Each test binary prints
 * "ok N - name" or "not ok N - name" per check and a plan line at the end;
 * test/run-tests collects them into one "N passed, N failed" summary.
 */
#ifndef CBLLM_TAP_H
#define CBLLM_TAP_H

#include <stdio.h>

static int	tap_n = 0;
static int	tap_failed = 0;

/* Record one check: cond true means it passed. */
#define TAP_OK(cond, ...) \
	do { \
		int tap_c_ = (cond); \
		tap_n++; \
		if (!tap_c_) tap_failed++; \
		printf("%s %d - ", tap_c_ ? "ok" : "not ok", tap_n); \
		printf(__VA_ARGS__); \
		printf("\n"); \
		if (!tap_c_) printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		fflush(stdout); \
	} while (0)

/* A diagnostic line. */
#define TAP_DIAG(...) do { printf("# "); printf(__VA_ARGS__); printf("\n"); } while (0)

/* Print the plan and return the process status. */
static inline int
tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
