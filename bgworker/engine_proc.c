/*
 * engine_proc.c: the engine process as the supervisor sees it: start it
 * (fork, then exec of cbllm-engine, so that nothing of PostgreSQL runs in
 * it), ring its doorbell, notice its death and say what killed it, stop it.
 *
 * The engine is the supervisor's child, not the postmaster's: when it dies,
 * the postmaster sees nothing and no session but its requests' is touched.
 * It shares the supervisor's process group, so the postmaster's signals to
 * the supervisor at shutdown reach it too, and it is killed if the
 * supervisor dies (PR_SET_PDEATHSIG).
 */
#include "cbllm_pg.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "engine_proc.h"

/* The engine program: cbllm.engine_program, or cbllm-engine beside postgres. */
static void
EngineProgram(char *path, size_t len)
{
	if (cbllm_engine_program != NULL && cbllm_engine_program[0] != '\0')
		strlcpy(path, cbllm_engine_program, len);
	else
	{
		char		dir[MAXPGPATH];

		strlcpy(dir, my_exec_path, sizeof(dir));
		get_parent_directory(dir);
		snprintf(path, len, "%s/cbllm-engine", dir);
	}
}

/* Create and map the region: an anonymous memory file the engine inherits. */
static bool
MakeRegion(CbllmEngineProc *ep, size_t max_msg, char *errmsg)
{
	ep->size = cbllm_ipc_region_size(max_msg);
	ep->region_fd = memfd_create("cbllm-engine", MFD_CLOEXEC);
	if (ep->region_fd < 0 || ftruncate(ep->region_fd, (off_t) ep->size) != 0)
	{
		snprintf(errmsg, CBLLM_REASON_LEN, "cannot create the engine's shared memory: %m");
		return false;
	}
	ep->rg = mmap(NULL, ep->size, PROT_READ | PROT_WRITE, MAP_SHARED, ep->region_fd, 0);
	if (ep->rg == MAP_FAILED)
	{
		ep->rg = NULL;
		snprintf(errmsg, CBLLM_REASON_LEN, "cannot map the engine's shared memory: %m");
		return false;
	}
	cbllm_ipc_region_init(ep->rg, ep->size, max_msg);
	return true;
}

/* In the child: put fd at target (which must be free of our other fds), without CLOEXEC. */
static void
PlaceFd(int fd, int target)
{
	if (fd != target)
		dup2(fd, target);
	else
		fcntl(fd, F_SETFD, 0);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void
ExecEngine(CbllmEngineProc *ep, const char *prog, int to_engine_read, int from_engine_write,
		   pid_t parent)
{
	sigset_t	none;
	char		a_region[16],
				a_in[16],
				a_out[16],
				a_parent[16];
	char	   *argv[10];
	int			hi[3];

	/* PostgreSQL's handlers and mask must not survive into the engine */
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);

	/* the region at fd 3, the doorbells at 4 and 5; nothing else open but 0-2 */
	hi[0] = fcntl(ep->region_fd, F_DUPFD, 100);
	hi[1] = fcntl(to_engine_read, F_DUPFD, 100);
	hi[2] = fcntl(from_engine_write, F_DUPFD, 100);
	PlaceFd(hi[0], 3);
	PlaceFd(hi[1], 4);
	PlaceFd(hi[2], 5);
	close_range(6, ~0U, 0);

	snprintf(a_region, sizeof(a_region), "3");
	snprintf(a_in, sizeof(a_in), "4");
	snprintf(a_out, sizeof(a_out), "5");
	snprintf(a_parent, sizeof(a_parent), "%d", (int) parent);
	argv[0] = (char *) prog;
	argv[1] = "--region-fd";
	argv[2] = a_region;
	argv[3] = "--doorbell-in";
	argv[4] = a_in;
	argv[5] = "--doorbell-out";
	argv[6] = a_out;
	argv[7] = "--parent";
	argv[8] = a_parent;
	argv[9] = NULL;
	execv(prog, argv);
	_exit(CBLLM_ENGINE_EXEC_FAILED);
}

/* Start the engine with these parameters; false (and why) when it cannot be started. */
bool
CbllmEngineSpawn(CbllmEngineProc *ep, const cbllm_ipc_params *params, size_t max_msg,
				 char *errmsg)
{
	int			to_engine[2] = {-1, -1},
				from_engine[2] = {-1, -1};
	char		prog[MAXPGPATH];
	pid_t		parent = getpid();
	pid_t		pid;

	memset(ep, 0, sizeof(*ep));
	ep->region_fd = ep->bell_to_engine = ep->bell_from_engine = -1;
	EngineProgram(prog, sizeof(prog));
	if (access(prog, X_OK) != 0)
	{
		snprintf(errmsg, CBLLM_REASON_LEN, "the engine program \"%s\" cannot be run: %m", prog);
		return false;
	}
	if (!MakeRegion(ep, max_msg, errmsg))
	{
		CbllmEngineRelease(ep);
		return false;
	}
	memcpy(&ep->rg->params, params, sizeof(*params));
	if (pipe2(to_engine, O_CLOEXEC) != 0 || pipe2(from_engine, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		snprintf(errmsg, CBLLM_REASON_LEN, "cannot create the engine's pipes: %m");
		CbllmEngineRelease(ep);
		return false;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		ExecEngine(ep, prog, to_engine[0], from_engine[1], parent);
	close(to_engine[0]);
	close(from_engine[1]);
	ep->bell_to_engine = to_engine[1];
	ep->bell_from_engine = from_engine[0];
	if (pid < 0)
	{
		snprintf(errmsg, CBLLM_REASON_LEN, "cannot start the engine process: %m");
		CbllmEngineRelease(ep);
		return false;
	}
	fcntl(ep->bell_to_engine, F_SETFL, fcntl(ep->bell_to_engine, F_GETFL) | O_NONBLOCK);
	ep->pid = pid;
	ep->started_at = GetCurrentTimestamp();
	return true;
}

/* Ring the engine's doorbell (a full pipe is ringing already). */
void
CbllmEngineRing(CbllmEngineProc *ep)
{
	char		b = 1;

	if (ep->bell_to_engine >= 0 && write(ep->bell_to_engine, &b, 1) < 0)
	{
		/* EAGAIN: already ringing; EPIPE: it is gone, and the loop will notice */
	}
}

/* Empty the engine's doorbell to us. */
void
CbllmEngineDrainBell(CbllmEngineProc *ep)
{
	char		buf[256];

	while (ep->bell_from_engine >= 0 && read(ep->bell_from_engine, buf, sizeof(buf)) > 0)
		;
}

/* The name of a signal, for messages. */
static const char *
SignalName(int sig)
{
	switch (sig)
	{
		case SIGKILL:
			return "SIGKILL";
		case SIGSEGV:
			return "SIGSEGV";
		case SIGBUS:
			return "SIGBUS";
		case SIGABRT:
			return "SIGABRT";
		case SIGTERM:
			return "SIGTERM";
		case SIGQUIT:
			return "SIGQUIT";
		case SIGILL:
			return "SIGILL";
		case SIGFPE:
			return "SIGFPE";
		default:
			return "a signal";
	}
}

/* Say in words how an engine that ended with wait status st died. */
static void
Describe(int st, char *why, size_t len)
{
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS)
		snprintf(why, len, "the cbllm engine process died of SIGBUS: a model file changed under the engine (it was truncated or rewritten in place while mapped)");
	else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		snprintf(why, len, "the cbllm engine process was killed by SIGKILL (the kernel's out-of-memory killer, an operator, or a stall)");
	else if (WIFSIGNALED(st))
		snprintf(why, len, "the cbllm engine process was killed by signal %d (%s)", WTERMSIG(st),
				 SignalName(WTERMSIG(st)));
	else if (WIFEXITED(st) && WEXITSTATUS(st) == CBLLM_ENGINE_EXEC_FAILED)
		snprintf(why, len, "the cbllm engine program could not be started");
	else if (WIFEXITED(st) && WEXITSTATUS(st) == CBLLM_SERVER_BAD_CHANNEL)
		snprintf(why, len, "the cbllm engine process found its command channel corrupt and stopped");
	else if (WIFEXITED(st) && WEXITSTATUS(st) == CBLLM_SERVER_DEVICE_LOST)
		snprintf(why, len, "the cbllm engine process lost its GPU and stopped for a fresh device context");
	else if (WIFEXITED(st) && WEXITSTATUS(st) == CBLLM_SERVER_LOAD_FAILED)
		snprintf(why, len, "the cbllm engine process could not load the model");
	else if (WIFEXITED(st))
		snprintf(why, len, "the cbllm engine process exited with status %d", WEXITSTATUS(st));
	else
		snprintf(why, len, "the cbllm engine process ended");
}

/* True when the engine has ended (then it is reaped, and why says how). */
bool
CbllmEngineExited(CbllmEngineProc *ep, char *why, size_t len, int *status)
{
	int			st;
	pid_t		r;

	if (ep->pid <= 0)
		return false;
	r = waitpid(ep->pid, &st, WNOHANG);
	if (r != ep->pid)
		return false;
	ep->pid = 0;
	Describe(st, why, len);
	*status = st;
	return true;
}

/* Kill the engine now and reap it. */
void
CbllmEngineKill(CbllmEngineProc *ep)
{
	if (ep->pid > 0)
	{
		kill(ep->pid, SIGKILL);
		(void) waitpid(ep->pid, NULL, 0);
		ep->pid = 0;
	}
}

/* Ask the engine to stop, wait up to timeout_ms, then kill it. */
void
CbllmEngineStop(CbllmEngineProc *ep, int timeout_ms)
{
	if (ep->pid <= 0)
		return;
	if (ep->rg != NULL)
		(void) cbllm_ring_put(cbllm_ipc_cmd_ring(ep->rg), CBLLM_CMD_SHUTDOWN, NULL, 0, NULL, 0);
	CbllmEngineRing(ep);
	kill(ep->pid, SIGTERM);
	for (int waited = 0; waited < timeout_ms; waited += 10)
	{
		if (waitpid(ep->pid, NULL, WNOHANG) == ep->pid)
		{
			ep->pid = 0;
			return;
		}
		pg_usleep(10000L);
	}
	CbllmEngineKill(ep);
}

/* Unmap and close what a (dead or never started) engine left. */
void
CbllmEngineRelease(CbllmEngineProc *ep)
{
	if (ep->rg != NULL)
		munmap(ep->rg, ep->size);
	if (ep->region_fd >= 0)
		close(ep->region_fd);
	if (ep->bell_to_engine >= 0)
		close(ep->bell_to_engine);
	if (ep->bell_from_engine >= 0)
		close(ep->bell_from_engine);
	ep->rg = NULL;
	ep->region_fd = ep->bell_to_engine = ep->bell_from_engine = -1;
}
