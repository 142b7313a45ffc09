/*
 * cbllm-engine: the engine process.  The cbllm supervisor (a PostgreSQL
 * background worker) starts it with a shared-memory region and two doorbell
 * pipes already open; it holds the model, the KV cache, the compute threads
 * and the GPU context, and calls no PostgreSQL code.  If it dies, only its
 * requests fail: the supervisor restarts it, and the database goes on.
 *
 * usage: cbllm-engine --region-fd N --doorbell-in N --doorbell-out N --parent PID
 *
 * Exit status: a cbllm_server_exit (0 stopped, 2 the model did not load,
 * 3 a corrupt channel, 4 a lost device), or 1 for bad arguments.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_server.h"

static volatile sig_atomic_t stop_requested = 0;

/* SIGTERM, SIGINT: finish the current pass and stop. */
static void
OnStop(int sig)
{
	(void) sig;
	stop_requested = 1;
}

/* A non-negative integer argument, or -1. */
static long
NumberArg(const char *s)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	return errno || *end || v < 0 ? -1 : v;
}

/* Print one error line and return the bad-arguments status. */
static int
Fail(const char *what)
{
	fprintf(stderr, "cbllm-engine: error: %s\n", what);
	return 1;
}

int
main(int argc, char **argv)
{
	long		region_fd = -1,
				in_fd = -1,
				out_fd = -1,
				parent = -1;
	struct stat st;
	struct sigaction sa;
	cbllm_ipc_region *rg;
	const char *bad;

	for (int i = 1; i + 1 < argc; i += 2)
	{
		long		v = NumberArg(argv[i + 1]);

		if (strcmp(argv[i], "--region-fd") == 0)
			region_fd = v;
		else if (strcmp(argv[i], "--doorbell-in") == 0)
			in_fd = v;
		else if (strcmp(argv[i], "--doorbell-out") == 0)
			out_fd = v;
		else if (strcmp(argv[i], "--parent") == 0)
			parent = v;
		else
			return Fail("unknown argument (this program is started by the cbllm supervisor)");
	}
	if (region_fd < 0 || in_fd < 0 || out_fd < 0 || parent <= 0)
		return Fail("usage: cbllm-engine --region-fd N --doorbell-in N --doorbell-out N --parent PID");

	/* die with the supervisor, even if it is killed */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (pid_t) parent)
		return Fail("the supervisor is gone");

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = OnStop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);

	if (fstat((int) region_fd, &st) != 0 || st.st_size <= 0)
		return Fail("cannot stat the region");
	rg = mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int) region_fd, 0);
	if (rg == MAP_FAILED)
		return Fail("cannot map the region");
	if ((bad = cbllm_ipc_region_check(rg, (size_t) st.st_size)) != NULL)
		return Fail(bad);
	fcntl((int) in_fd, F_SETFL, fcntl((int) in_fd, F_GETFL) | O_NONBLOCK);
	fcntl((int) out_fd, F_SETFL, fcntl((int) out_fd, F_GETFL) | O_NONBLOCK);
	atomic_store(&rg->engine_pid, (int32_t) getpid());
	return cbllm_server_run(rg, (int) in_fd, (int) out_fd, &stop_requested);
}
