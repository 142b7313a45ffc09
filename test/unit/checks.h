/*
 * checks.h: checks the unit tests share, printed as TAP lines by the test
 * program that includes it: a call that must fail (a negative status and an
 * error message holding the words it must: a path, a tensor's name, what is
 * wrong), and a run of tests in a fresh fixture root (fixture.h) that must
 * be removed at the end.
 */
#ifndef CBLLM_TEST_CHECKS_H
#define CBLLM_TEST_CHECKS_H

#include <stdbool.h>
#include <string.h>

#include "fixture.h"
#include "tap.h"
#include "base/util.h"

/* Whether the error message contains every non-NULL needle; print it otherwise. */
static inline bool
msg_has(const cbllm_err *err, const char *a, const char *b, const char *c)
{
	const char *needles[3] = {a, b, c};

	for (int i = 0; i < 3; i++)
		if (needles[i] != NULL && strstr(err->msg, needles[i]) == NULL)
		{
			TAP_DIAG("message \"%s\" lacks \"%s\"", err->msg, needles[i]);
			return false;
		}
	return true;
}

/* Check a failed call: a negative status and a message holding the needles. */
static inline void
expect_fail(const char *what, int rc, const cbllm_err *err, const char *a, const char *b,
			const char *c)
{
	if (rc >= 0)
		TAP_DIAG("%s: returned %d", what, rc);
	TAP_OK(rc < 0 && msg_has(err, a, b, c), "%s fails (%s): %s", what,
		   cbllm_status_name(rc), err->msg);
}

/* Run the tests in a new fixture root, check that it is removed; returns the exit status. */
static inline int
run_in_fixture_root(const char *tag, void (*const tests[]) (void), int n_tests)
{
	const char *root = fixture_root_create(tag);

	if (root == NULL)
	{
		TAP_OK(false, "mkdtemp of the fixture directory");
		return tap_done();
	}
	TAP_DIAG("fixtures in %s", root);
	for (int i = 0; i < n_tests; i++)
		tests[i] ();
	TAP_OK(fixture_root_remove(), "remove the fixture directory %s", root);
	return tap_done();
}

#endif
