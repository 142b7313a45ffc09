/*
 * soak.c: the driver of the soak test (bench/soak.sh makes the cluster and
 * the tables, runs the ordinary session and checks what is left afterwards).
 *
 * One process drives every connection with libpq's asynchronous API: each
 * client is a small state machine over its request's steps (PQsendQuery*,
 * then PQconsumeInput / PQisBusy / PQgetResult); one poll() loop serves all
 * sockets and timers.  First each (prompt, max_tokens) of the run is
 * generated alone as its reference: greedy output is deterministic, so a
 * result that differs is not the full one (a prefix of it is "truncated",
 * anything else "mismatched").  Then clients 1..N-1 work through a fixed plan
 * of mixed requests (short, long, streamed, array, llm_submit + llm_result)
 * and client 0 runs CALL cbllm.enrich on growing slices of soak_docs, paced
 * by the plan.  Every request sets its own statement_timeout first: SAFETY_MS,
 * or for a tenth a short one; another tenth are cancelled (pg_cancel_backend
 * from the control connection), a tenth abandoned (the client disconnects and
 * reconnects for its next request), each at a random moment.  A third of the
 * way through the plan the engine is killed with SIGKILL; at two thirds its
 * model file is truncated under it (it dies of SIGBUS) and, once the
 * restarted engine has failed to load the empty file, the saved copy is
 * renamed back.
 *
 * A request has hung if it has not ended by its statement_timeout (or the
 * moment it was cancelled) plus GRACE_S, its client then disconnecting, or if
 * it had no short timeout and still ends with a statement timeout (it ran
 * past SAFETY_MS).  Every error must be of an expected class: cancelled or
 * timed out as injected, or the engine's death; a request that met the
 * engine's death is sent again after a pause, up to MAX_RETRIES times, as the
 * error's HINT says (each attempt counts).  Everything is bounded: the plan
 * by DURATION, then DRAIN_S for what is in flight.  Connections go only to
 * the Unix socket directory given.
 *
 * usage: soak SOCKET_DIR PORT MODEL_FILE CLIENTS REQUESTS ROWS DURATION SEED
 * MODEL_FILE.saved must be a copy of MODEL_FILE.  Prints the counts, then
 * one "fail: REASON" line per failed check; exit status 0 when none failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define SAFETY_MS 120000		/* statement_timeout of a request without chaos */
#define GRACE_S 10.0			/* how long past its timeout or cancel a request may take */
#define DRAIN_S 180.0			/* after DURATION: time for work in flight and enrichment */
#define ARRAY_LEN 3				/* prompts in one llm_generate(text[]) call */
#define ENRICH_CHUNK 4
#define ENRICH_TOKENS 16			/* as soak.sh's references for the enrichment rows */
#define MAX_CLIENTS 256
#define MAX_RETRIES 3			/* a request that met an engine death is run again, as its HINT says */

typedef enum { K_SHORT, K_LONG, K_STREAM, K_ARRAY, K_SUBMIT, K_ENRICH, N_KINDS } Kind;
typedef enum { X_NONE, X_CANCEL, X_TIMEOUT, X_DISCONNECT, N_CHAOS } Chaos;
typedef enum
{
	O_OK, O_CANCELLED, O_TIMEOUT, O_DIED, O_DISCONNECTED, O_OTHER, O_HUNG, O_TRUNCATED,
	O_MISMATCH, N_OUTCOMES
} Outcome;

/*
 * One kind of request: plan weight, max_tokens, distinct prompts, how late
 * its chaos may strike, and the SQL of its steps after the SET (parameters:
 * $1 max_tokens, then the prompts; llm_result's $1 is the request id).
 */
typedef struct
{
	const char *name;
	int			weight, max_tokens, n_prompts;
	double		span_s;
	int			n_steps;
	const char *sql[2];
	int			n_params[2];
} KindSpec;

static const KindSpec KINDS[N_KINDS] = {
	{"short", 25, 16, 8, 1.0, 2, {"SELECT llm_generate($2, $1::int)"}, {2}},
	{"long", 15, 200, 4, 8.0, 2, {"SELECT llm_generate($2, $1::int)"}, {2}},
	{"stream", 20, 120, 4, 4.0, 2, {"SELECT llm_generate_stream($2, $1::int)"}, {2}},
	{"array", 15, 32, 6, 2.0, 2, {"SELECT x FROM unnest(llm_generate(ARRAY[$2, $3, $4], $1::int)) "
	"WITH ORDINALITY AS u(x, n) ORDER BY n"}, {1 + ARRAY_LEN}},
	{"submit", 25, 64, 6, 3.0, 3, {"SELECT llm_submit($2, $1::int)", "SELECT llm_result($1::bigint)"}, {2, 1}},
	{"enrich", 0, ENRICH_TOKENS, 0, 8.0, 3, {NULL, "SELECT count(*) FROM soak_docs WHERE summary IS NULL"}, {0, 0}},
};

static const char *CHAOS_NAMES[N_CHAOS] = {"no chaos", "cancel", "short timeout", "disconnect"};
static const char *OUTCOME_NAMES[N_OUTCOMES] = {
	"ok", "cancelled", "timeout", "engine died", "disconnected", "other", "hung", "truncated",
	"mismatched"
};

/* One request: its kind, prompts (indexes), chaos, and when the chaos strikes. */
typedef struct
{
	Kind		kind;
	int			prompt[ARRAY_LEN];
	Chaos		chaos;
	double		delay_s;		/* cancel or disconnect this long after the start */
	int			timeout_ms;		/* its statement_timeout (SAFETY_MS unless X_TIMEOUT) */
} Request;

/*
 * A client session and the request it works on: active while the request is
 * in progress, busy while one of its steps (0 is the SET) is in flight; idle
 * or between steps it goes on at next_at; a step still in flight at must_end
 * has hung.  A stream's pieces are concatenated into rows[0].
 */
typedef struct
{
	int			id;
	PGconn	   *conn;
	Request		r;
	bool		active, busy, acted, cancel_sent;	/* acted: its chaos action was done */
	int			step;
	double		next_at, start, must_end;
	char	  **rows;
	int			n_rows, cap_rows;
	char		sqlstate[6];
	char		errmsg[512];
	long long	submit_id;
	int			retries;		/* of this request after engine deaths */
	int			enrich_k;		/* enrichment: rows up to this id asked for so far */
	long		enrich_left;	/* rows NULL after the last CALL (-1: not known yet) */
} Client;

/* The engine kills, as a sequence of phases polled every 100 ms. */
typedef enum { KM_WAIT_KILL, KM_BACK1, KM_WAIT_TRUNC, KM_FAILED, KM_BACK2, KM_DONE } KillPhase;
typedef struct
{
	KillPhase	ph;
	double		since, next_poll, t_inject[2], t_back[2];
	int			pid[2];
	bool		truncated;		/* from the truncation until the engine is back */
} Killer;

static struct
{
	const char *sockdir, *model;
	int			port, clients, requests, rows;
	double		duration;
	unsigned	seed;
} opt;

static PGconn *ctl;				/* the control connection */
static Request *plan;
static char **refs[N_KINDS];
static int	variant[N_KINDS][8];	/* which wording prompt i of a kind uses (see References) */
static long counts[N_KINDS][N_OUTCOMES];
static double slowest[N_KINDS];	/* the longest request that returned its result */
static long injected[N_CHAOS];
static int	next_req, done_req, shown_bad, load_refusals;
static Client cl[MAX_CLIENTS];
static Killer km;
static char failures[4096];
static double t0;

/* Seconds on a monotonic clock. */
static double
Now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A uniform number in [0, 1) from the run's seeded generator. */
static double
Rand(void)
{
	opt.seed = opt.seed * 1664525u + 1013904223u;
	return (opt.seed >> 8) / 16777216.0;
}

/* Add a reason to the verdict. */
static void
Fail(const char *fmt, ...)
{
	va_list		ap;
	size_t		n = strlen(failures);

	if (n > 0 && n < sizeof(failures) - 2)
		strcat(failures, "\n");
	n = strlen(failures);
	va_start(ap, fmt);
	vsnprintf(failures + n, sizeof(failures) - n, fmt, ap);
	va_end(ap);
}

/* Print a progress line with the seconds since the chaos began. */
static void
Say(const char *fmt, ...)
{
	va_list		ap;

	printf("soak: %6.1f s: ", Now() - t0);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* A new connection to the cluster's Unix socket, or NULL with the message in err. */
static PGconn *
Connect(const char *app, char *err, size_t errlen)
{
	char		ci[1024];
	PGconn	   *c;

	snprintf(ci, sizeof(ci), "host='%s' port=%d dbname=postgres application_name=%s "
			 "connect_timeout=10 options='-c client_min_messages=warning'", opt.sockdir, opt.port, app);
	c = PQconnectdb(ci);
	if (PQstatus(c) != CONNECTION_OK)
	{
		snprintf(err, errlen, "%s", PQerrorMessage(c));
		PQfinish(c);
		return NULL;
	}
	return c;
}

/* Run a query on the control connection: its result, or NULL (and a message). */
static PGresult *
Ctl(const char *sql)
{
	PGresult   *r = PQexec(ctl, sql);

	if (PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK)
		return r;
	Say("control query failed: %s: %s", sql, PQresultErrorMessage(r));
	PQclear(r);
	return NULL;
}

/* The text of prompt i of kind k (a different one for every pair). */
static void
Prompt(Kind k, int i, char *buf, size_t len)
{
	static const char *w[] = {"the", "quick", "brown", "fox", "database", "table", "index",
		"model", "token", "server", "query", "cache", "dog", "hills", "clouds", "grass"};
	static const char *again[] = {"", " over the hills", " and then the story goes on", " said the fox"};

	snprintf(buf, len, "%s %s %s %s %s the %s%s%s", KINDS[k].name, w[i % 16], w[(3 * i + k) % 16],
			 w[(5 * i + 2 * k + 1) % 16], w[(7 * i + 3) % 16], w[(i + k + 9) % 16],
			 k == K_LONG ? " and then the story goes on" : "", again[variant[k][i]]);
}

/*
 * Every reference, each generated alone before any chaos.  A long or
 * streamed prompt whose output ends early (the model's EOS) is replaced by
 * another wording, up to three times, so that those requests are long.
 */
static bool
References(void)
{
	double		t = Now();
	int			n = 0, shortest = 1 << 30;

	for (int k = 0; k < N_KINDS; k++)
	{
		refs[k] = calloc(KINDS[k].n_prompts, sizeof(char *));
		for (int i = 0; i < KINDS[k].n_prompts; i++, n++)
		{
			char		prompt[256], mt[16];
			const char *params[2] = {prompt, mt};
			PGresult   *r;

			Prompt(k, i, prompt, sizeof(prompt));
			snprintf(mt, sizeof(mt), "%d", KINDS[k].max_tokens);
			r = PQexecParams(ctl, "SELECT llm_generate($1, $2::int)", 2, NULL, params, NULL, NULL, 0);
			if (PQresultStatus(r) != PGRES_TUPLES_OK || PQgetisnull(r, 0, 0))
			{
				Say("reference for \"%s\" failed: %s", prompt, PQresultErrorMessage(r));
				return false;
			}
			refs[k][i] = strdup(PQgetvalue(r, 0, 0));
			PQclear(r);
			if ((k == K_LONG || k == K_STREAM) && strlen(refs[k][i]) < (size_t) KINDS[k].max_tokens &&
				variant[k][i] < 3)
			{
				free(refs[k][i]);
				variant[k][i]++;
				i--, n--;		/* the same prompt again, worded otherwise */
			}
			else if (k == K_LONG || k == K_STREAM)
				shortest = (int) strlen(refs[k][i]) < shortest ? (int) strlen(refs[k][i]) : shortest;
		}
	}
	Say("references: %d prompts generated alone in %.1f s (long and streamed: %d characters or more)",
		n, Now() - t, shortest);
	return true;
}

/* Draw a request's chaos and its timing (none once the plan is over). */
static void
DrawChaos(Request *r, bool none)
{
	double		c = Rand();

	r->chaos = none || c < 0.7 ? X_NONE : c < 0.8 ? X_CANCEL : c < 0.9 ? X_TIMEOUT : X_DISCONNECT;
	r->delay_s = 0.05 + Rand() * KINDS[r->kind].span_s;
	r->timeout_ms = r->chaos == X_TIMEOUT ? (int) (r->delay_s * 1000) : SAFETY_MS;
}

/* The fixed plan: kinds by weight, prompts, chaos. */
static void
MakePlan(void)
{
	int			total = 0;

	for (int k = 0; k < N_KINDS; k++)
		total += KINDS[k].weight;
	plan = calloc(opt.requests, sizeof(Request));
	for (int n = 0; n < opt.requests; n++)
	{
		Request    *r = &plan[n];
		int			x = (int) (Rand() * total);

		for (r->kind = 0; x >= KINDS[r->kind].weight; r->kind++)
			x -= KINDS[r->kind].weight;
		for (int i = 0; i < ARRAY_LEN; i++)
			r->prompt[i] = (int) (Rand() * KINDS[r->kind].n_prompts);
		DrawChaos(r, false);
	}
}

/* Forget a client's rows. */
static void
ClearRows(Client *c)
{
	for (int i = 0; i < c->n_rows; i++)
		free(c->rows[i]);
	c->n_rows = 0;
}

/* Keep row i of a result (NULL for SQL NULL); a stream's pieces go on the end of its one row. */
static void
AddRow(Client *c, PGresult *r, int i)
{
	if (c->r.kind == K_STREAM && c->n_rows == 1 && c->rows[0] && !PQgetisnull(r, i, 0))
	{
		c->rows[0] = realloc(c->rows[0], strlen(c->rows[0]) + PQgetlength(r, i, 0) + 1);
		strcat(c->rows[0], PQgetvalue(r, i, 0));
		return;
	}
	if (c->n_rows == c->cap_rows)
	{
		c->cap_rows = c->cap_rows ? 2 * c->cap_rows : 16;
		c->rows = realloc(c->rows, sizeof(char *) * c->cap_rows);
	}
	c->rows[c->n_rows++] = PQgetisnull(r, i, 0) ? NULL : strdup(PQgetvalue(r, i, 0));
}

/* Send the client's current step; false (with the error kept) if it cannot be sent. */
static bool
SendStep(Client *c)
{
	const Request *r = &c->r;
	const KindSpec *ks = &KINDS[r->kind];
	char		sql[512], v[1 + ARRAY_LEN][256];
	const char *params[1 + ARRAY_LEN] = {v[0], v[1], v[2], v[3]};
	int			np = c->step > 0 ? ks->n_params[c->step - 1] : 0;
	bool		ok;

	snprintf(v[0], sizeof(v[0]), "%d", ks->max_tokens);
	for (int i = 0; i < ARRAY_LEN && r->kind != K_ENRICH; i++)
		Prompt(r->kind, r->prompt[i], v[1 + i], sizeof(v[1 + i]));
	if (r->kind == K_SUBMIT && c->step == 2)
		snprintf(v[0], sizeof(v[0]), "%lld", c->submit_id);
	if (c->step == 0)
		snprintf(sql, sizeof(sql), "SET statement_timeout = %d", r->timeout_ms);
	else if (r->kind == K_ENRICH && c->step == 1)
		snprintf(sql, sizeof(sql), "CALL cbllm.enrich('soak_docs', 'id', $$'Summarise: ' || body$$, "
				 "'summary', where_sql => 'id <= %d', chunk_size => %d, max_tokens => %d)",
				 c->enrich_k, ENRICH_CHUNK, ENRICH_TOKENS);
	else
		snprintf(sql, sizeof(sql), "%s", ks->sql[c->step - 1]);
	ok = np ? PQsendQueryParams(c->conn, sql, np, NULL, params, NULL, NULL, 0) : PQsendQuery(c->conn, sql);
	if (ok && r->kind == K_STREAM && c->step == 1)
		ok = PQsetSingleRowMode(c->conn);
	if (!ok)
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "send failed: %s", PQerrorMessage(c->conn));
		return false;
	}
	c->busy = true;
	c->cancel_sent = false;
	c->must_end = Now() + (c->step == 0 ? SAFETY_MS : r->timeout_ms) / 1000.0 + GRACE_S;
	return true;
}

/* The class of a failed request, from its sqlstate, message and chaos. */
static Outcome
Classify(const Client *c)
{
	if (strcmp(c->sqlstate, "57014") == 0 && strstr(c->errmsg, "statement timeout"))
		return c->r.chaos == X_TIMEOUT ? O_TIMEOUT : O_HUNG;	/* else it ran past SAFETY_MS */
	if (strcmp(c->sqlstate, "57014") == 0)
		return c->r.chaos == X_CANCEL ? O_CANCELLED : O_OTHER;
	if (strstr(c->errmsg, "the cbllm engine process "))
		return O_DIED;
	if (km.truncated && strstr(c->errmsg, "the cbllm engine failed to load its model"))
		return O_DIED;			/* the restarted engine meets the truncated file */
	if (km.truncated && strstr(c->errmsg, opt.model))
	{
		load_refusals++;		/* queued across the death, refused with the loader's own message */
		return O_DIED;
	}
	return O_OTHER;
}

/* A result against its reference: ok, truncated (a strict prefix) or mismatched. */
static Outcome
Compare(const char *got, const char *want)
{
	if (got && strcmp(got, want) == 0)
		return O_OK;
	return got && strncmp(got, want, strlen(got)) == 0 ? O_TRUNCATED : O_MISMATCH;
}

/* Check a finished request's rows (a stream's pieces together) against the references. */
static Outcome
CheckRows(const Client *c)
{
	const Request *r = &c->r;
	Outcome		o = O_OK;

	if (r->kind == K_ENRICH)
		return O_OK;			/* its rows are checked at the end */
	if (c->n_rows != (r->kind == K_ARRAY ? ARRAY_LEN : 1))
		return c->n_rows == 0 ? O_TRUNCATED : O_MISMATCH;
	for (int i = 0; i < c->n_rows; i++)
	{
		Outcome		e = Compare(c->rows[i], refs[r->kind][r->prompt[i]]);

		o = e > o ? e : o;
	}
	return o;
}

/* End the client's request with outcome o: count it, say why when it is bad, plan a pause. */
static void
Finish(Client *c, Outcome o)
{
	const Request *r = &c->r;
	double		el = Now() - c->start;

	counts[r->kind][o]++;
	c->retries = o == O_DIED && r->kind != K_ENRICH && c->retries < MAX_RETRIES ? c->retries + 1 : 0;
	done_req += r->kind != K_ENRICH && c->retries == 0;
	if (o == O_OK && el > slowest[r->kind])
		slowest[r->kind] = el;
	if ((o == O_OTHER || o >= O_HUNG) && shown_bad++ < 20)
		Say("client %d: %s request (%s, timeout %d ms) %s after %.2f s: %s %s", c->id, KINDS[r->kind].name,
			CHAOS_NAMES[r->chaos], r->timeout_ms, OUTCOME_NAMES[o], el, c->sqlstate, c->errmsg);
	ClearRows(c);
	c->active = c->busy = false;
	/* a pause: between enrichment CALLs, and after an engine death (as a client retrying would) */
	c->next_at = Now() + (c->id == 0 ? 0.5 : 0) + (o == O_DIED ? 1 + 2 * Rand() : 0) + Rand() * 0.2;
}

/* Close the client's connection (it reconnects for its next request). */
static void
Disconnect(Client *c)
{
	PQfinish(c->conn);
	c->conn = NULL;
}

/* Start the client's next request: an enrichment round for client 0, the plan's next for the others. */
static void
StartRequest(Client *c)
{
	char		app[32], err[256];

	if (c->id == 0)
	{
		c->r = (Request) {.kind = K_ENRICH};
		DrawChaos(&c->r, next_req >= opt.requests);
	}
	else if (c->retries == 0)
		c->r = plan[next_req++];
	injected[c->r.chaos]++;
	c->active = true;
	c->acted = false;
	c->step = 0;
	c->sqlstate[0] = c->errmsg[0] = '\0';
	c->start = Now();
	snprintf(app, sizeof(app), "soak-client-%d", c->id);
	if (c->conn == NULL && (c->conn = Connect(app, err, sizeof(err))) == NULL)
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "connect failed: %s", err);
		Finish(c, O_OTHER);
	}
	else if (!SendStep(c))
		Finish(c, O_OTHER);
}

/* A step ended without error: take what it returned, go on to the next step or finish. */
static void
StepDone(Client *c)
{
	const char *v = c->n_rows == 1 ? c->rows[0] : NULL;

	c->busy = false;
	if (c->r.kind == K_SUBMIT && c->step == 1)
	{
		c->submit_id = v ? atoll(v) : -1;
		ClearRows(c);
		c->step++;
		c->next_at = Now() + Rand() * 0.5;	/* hold the request a while before collecting it */
		return;
	}
	if (c->r.kind == K_ENRICH && c->step == 1)
		c->enrich_k = c->enrich_k + opt.rows / 10 + 1 < opt.rows ? c->enrich_k + opt.rows / 10 + 1 : opt.rows;
	if (c->r.kind == K_ENRICH && c->step == 2)
		c->enrich_left = v ? atol(v) : -1;
	if (++c->step < KINDS[c->r.kind].n_steps)
	{
		if (!SendStep(c))
			Finish(c, O_OTHER);
		return;
	}
	Finish(c, CheckRows(c));
}

/* Read what arrived for a busy client: rows, the first error, the end of a step. */
static void
ReadClient(Client *c)
{
	if (!PQconsumeInput(c->conn))
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "connection lost: %s", PQerrorMessage(c->conn));
		Disconnect(c);
		Finish(c, O_OTHER);
		return;
	}
	while (c->busy && !PQisBusy(c->conn))
	{
		PGresult   *r = PQgetResult(c->conn);
		ExecStatusType st = PQresultStatus(r);

		if (r == NULL)
		{
			if (c->errmsg[0])
				Finish(c, Classify(c));
			else
				StepDone(c);
			return;
		}
		if (st == PGRES_SINGLE_TUPLE || st == PGRES_TUPLES_OK)
			for (int i = 0; i < PQntuples(r); i++)
				AddRow(c, r, i);
		else if (st != PGRES_COMMAND_OK && !c->errmsg[0])
		{
			const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
			const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);

			snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", s ? s : "");
			snprintf(c->errmsg, sizeof(c->errmsg), "%s", m ? m : PQresultErrorMessage(r));
		}
		PQclear(r);
	}
}

/* A client's timers: its chaos action, a hung step, the end of a pause, the next request. */
static void
ClientTimers(Client *c, double now, bool may_start)
{
	if (c->active && !c->acted && (c->r.chaos == X_CANCEL || c->r.chaos == X_DISCONNECT) &&
		now >= c->start + c->r.delay_s && (c->busy || c->r.chaos == X_DISCONNECT))
	{
		char		sql[64];

		c->acted = true;
		if (c->r.chaos == X_DISCONNECT)
		{
			Disconnect(c);
			Finish(c, O_DISCONNECTED);
			return;
		}
		snprintf(sql, sizeof(sql), "SELECT pg_cancel_backend(%d)", PQbackendPID(c->conn));
		PQclear(Ctl(sql));
		c->cancel_sent = true;
		if (c->must_end > now + GRACE_S)
			c->must_end = now + GRACE_S;
	}
	if (c->active && c->busy && now > c->must_end)
	{
		snprintf(c->errmsg, sizeof(c->errmsg), "no answer by its deadline (step %d%s)", c->step,
				 c->cancel_sent ? ", cancelled" : "");
		Disconnect(c);
		Finish(c, O_HUNG);
	}
	else if (c->active && !c->busy && now >= c->next_at && !SendStep(c))
		Finish(c, O_OTHER);
	else if (!c->active && may_start && now >= c->next_at)
		StartRequest(c);
}

/* Injection i (0 the kill, 1 the truncation): now, while the engine works, or not yet. */
static bool
InjectNow(int i, double now, const char *state, int running)
{
	if (done_req < (i + 1) * opt.requests / 3 || strcmp(state, "ready") != 0)
	{
		km.since = now;
		return false;
	}
	/* best with several generations and an enrichment CALL in flight; at most 15 s later */
	return running >= 1 && ((running >= 4 && cl[0].busy && cl[0].step == 1) || now - km.since > 15);
}

/* Kill the engine (i = 0) or truncate its model file (i = 1). */
static void
Inject(int i, int pid, int running, double now)
{
	char		saved[1024];
	int			fd = -1;

	km.pid[i] = pid;
	km.t_inject[i] = now;
	km.since = now;
	snprintf(saved, sizeof(saved), "%s.saved", opt.model);
	if (i == 0 && kill(pid, SIGKILL) != 0)
		Fail("kill -9 of the engine %d: %s", pid, strerror(errno));
	if (i == 1 && (access(saved, R_OK) != 0 || (fd = open(opt.model, O_WRONLY | O_TRUNC)) < 0))
		Fail("truncating %s (with a saved copy): %s", opt.model, strerror(errno));
	if (fd >= 0)
		close(fd);
	km.truncated = i == 1;
	km.ph = i == 0 ? KM_BACK1 : KM_FAILED;
	Say("%s the engine %d (%d requests running, %d of %d done)",
		i == 0 ? "kill -9 of" : "model file truncated under", pid, running, done_req, opt.requests);
}

/* The engine kills, one phase after another. */
static void
KillerTick(double now)
{
	char		state[32], saved[1024];
	int			pid, running;
	PGresult   *r;

	if (km.ph == KM_DONE || now < km.next_poll)
		return;
	km.next_poll = now + 0.1;
	if ((r = Ctl("SELECT state, coalesce(engine_pid, 0), requests_running FROM cbllm_status()")) == NULL)
		return;
	snprintf(state, sizeof(state), "%s", PQgetvalue(r, 0, 0));
	pid = atoi(PQgetvalue(r, 0, 1));
	running = atoi(PQgetvalue(r, 0, 2));
	PQclear(r);
	if ((km.ph == KM_WAIT_KILL || km.ph == KM_WAIT_TRUNC) && InjectNow(km.ph == KM_WAIT_TRUNC, now, state, running))
		Inject(km.ph == KM_WAIT_TRUNC, pid, running, now);
	else if (km.ph == KM_FAILED && ((strcmp(state, "failed") == 0 && pid != km.pid[1]) || now - km.since > 30))
	{
		snprintf(saved, sizeof(saved), "%s.saved", opt.model);
		if (rename(saved, opt.model) != 0)
			Fail("restoring %s: %s", opt.model, strerror(errno));
		if (strcmp(state, "failed") != 0)
			Fail("the restarted engine did not report the truncated model (state %s)", state);
		Say("model file restored (the restarted engine's state was %s)", state);
		km.ph = KM_BACK2;
	}
	else if ((km.ph == KM_BACK1 || km.ph == KM_BACK2) && strcmp(state, "ready") == 0 &&
			 pid != 0 && pid != km.pid[km.ph == KM_BACK2])
	{
		int			i = km.ph == KM_BACK2;

		km.t_back[i] = now;
		km.truncated = false;
		Say("a new engine %d is ready, %.1f s after the %s", pid, now - km.t_inject[i], i ? "truncation" : "kill");
		km.ph = i == 0 ? KM_WAIT_TRUNC : KM_DONE;
	}
	else if (km.ph != KM_WAIT_KILL && km.ph != KM_WAIT_TRUNC && now - km.since > 90)
	{
		Fail("the engine was not back 90 s after the %s (state %s)", km.ph == KM_BACK1 ? "kill" : "truncation", state);
		km.ph = KM_DONE;
	}
}

/* Whether client i may start a request now (the enrichment keeps pace with the plan). */
static bool
MayStart(int i, double now, double end_plan, double hard_end)
{
	const Client *c = &cl[i];

	if (i > 0)
		return now < end_plan && (next_req < opt.requests || c->retries > 0);
	if (c->enrich_k >= opt.rows && c->enrich_left == 0)
		return false;			/* the job is done */
	return now < hard_end &&
		(next_req >= opt.requests || now >= end_plan || (long) c->enrich_k * opt.requests <= (long) done_req * opt.rows);
}

/* The chaos: every client, the ordinary session and the kills, until all is done or the deadline. */
static void
RunChaos(void)
{
	double		end_plan = t0 + opt.duration, hard_end = end_plan + DRAIN_S, next_report = t0 + 30;
	struct pollfd fds[MAX_CLIENTS];
	int			who[MAX_CLIENTS];

	for (;;)
	{
		double		now = Now();
		bool		active = false, may = false;
		int			nf = 0;

		for (int i = 0; i < opt.clients; i++)
		{
			bool		m = MayStart(i, now, end_plan, hard_end);

			ClientTimers(&cl[i], now, m);
			active |= cl[i].active;
			may |= m;
		}
		KillerTick(now);
		/* the end: nothing to do, and no engine on its way back (a kill not yet due never will be) */
		if (!active && !may && (km.ph == KM_DONE || km.ph == KM_WAIT_KILL || km.ph == KM_WAIT_TRUNC || now >= end_plan))
			break;
		if (now >= hard_end + GRACE_S)
		{
			Fail("the run passed its deadline with work in flight");
			break;
		}
		if (now >= next_report)
		{
			Say("%d of %d requests done; enrichment asked up to id %d (%ld NULL)",
				done_req, opt.requests, cl[0].enrich_k, cl[0].enrich_left);
			next_report = now + 30;
		}
		for (int i = 0; i < opt.clients; i++)
			if (cl[i].busy)
			{
				fds[nf] = (struct pollfd) {.fd = PQsocket(cl[i].conn), .events = POLLIN};
				who[nf++] = i;
			}
		poll(fds, nf, 20);
		for (int f = 0; f < nf; f++)
			if (fds[f].revents && cl[who[f]].busy)
				ReadClient(&cl[who[f]]);
	}
}

/* The counts by kind and outcome, and the requests' verdict. */
static void
Summary(void)
{
	long		tot[N_OUTCOMES] = {0}, sent = 0;

	printf("\n%-7s %5s", "kind", "sent");
	for (int o = 0; o < N_OUTCOMES; o++)
		printf(" %5s", OUTCOME_NAMES[o]);
	printf("  slowest ok\n");
	for (int k = 0; k <= N_KINDS; k++)
	{
		long	   *row = k < N_KINDS ? counts[k] : tot;

		sent = 0;
		for (int o = 0; o < N_OUTCOMES; o++)
			sent += row[o];
		printf("%-7s %5ld", k < N_KINDS ? KINDS[k].name : "total", sent);
		for (int o = 0; o < N_OUTCOMES; o++)
		{
			printf(" %*ld", (int) strlen(OUTCOME_NAMES[o]) > 5 ? (int) strlen(OUTCOME_NAMES[o]) : 5, row[o]);
			tot[o] += k < N_KINDS ? row[o] : 0;
		}
		if (k < N_KINDS)
			printf("  %8.1f s", slowest[k]);
		printf("\n");
	}
	printf("sent: every attempt (a request that met an engine death is sent again, up to %d times); "
		   "%d of %d planned requests issued\nchaos injected: %ld cancels, %ld short statement timeouts, "
		   "%ld disconnects\nengine died: %d refused with the loader's message (\"cbllm request failed: "
		   "MODEL_FILE: ...\"), queued across the death\n\n", MAX_RETRIES, next_req, opt.requests,
		   injected[X_CANCEL], injected[X_TIMEOUT], injected[X_DISCONNECT], load_refusals);
	if (tot[O_HUNG] || tot[O_TRUNCATED] || tot[O_MISMATCH] || tot[O_OTHER])
		Fail("%ld hung, %ld truncated, %ld mismatched, %ld other errors", tot[O_HUNG], tot[O_TRUNCATED],
			 tot[O_MISMATCH], tot[O_OTHER]);
	if (next_req < opt.requests || tot[O_OK] < sent / 4)
		Fail("%d of %d planned requests issued, %ld of %ld returned a result", next_req, opt.requests,
			 tot[O_OK], sent);
	for (int k = 0; k < N_KINDS; k++)
		if (counts[k][O_OK] == 0)
			Fail("no %s request returned its result", KINDS[k].name);
}

/* Read the command line; false if it is wrong. */
static bool
Options(int argc, char **argv)
{
	if (argc != 9 || argv[1][0] != '/')
		return false;
	opt.sockdir = argv[1];
	opt.port = atoi(argv[2]);
	opt.model = argv[3];
	opt.clients = atoi(argv[4]);
	opt.requests = atoi(argv[5]);
	opt.rows = atoi(argv[6]);
	opt.duration = atof(argv[7]);
	opt.seed = (unsigned) atol(argv[8]);
	return opt.clients >= 2 && opt.clients <= MAX_CLIENTS && opt.requests >= 3 && opt.rows > 0 &&
		opt.duration > 0;
}

int
main(int argc, char **argv)
{
	char		err[512];

	if (!Options(argc, argv))
	{
		fprintf(stderr, "usage: soak SOCKET_DIR PORT MODEL_FILE CLIENTS REQUESTS ROWS DURATION SEED "
				"(SOCKET_DIR an absolute path)\n");
		return 2;
	}
	t0 = Now();
	if ((ctl = Connect("soak-control", err, sizeof(err))) == NULL)
	{
		printf("fail: cannot connect: %s", err);
		return 1;
	}
	Say("%d clients, %d requests, %d enrichment rows, at most %.0f s of requests, seed %u",
		opt.clients, opt.requests, opt.rows, opt.duration, opt.seed);
	if (!References())
	{
		printf("fail: no references\n");
		return 1;
	}
	MakePlan();
	for (int i = 0; i < opt.clients; i++)
		cl[i] = (Client) {.id = i, .enrich_left = -1};
	t0 = Now();
	RunChaos();
	Say("chaos over: %d of %d requests done; kill -9: a new engine ready after %.1f s, "
		"truncation: after %.1f s", done_req, opt.requests, km.t_back[0] - km.t_inject[0],
		km.t_back[1] - km.t_inject[1]);
	if (km.ph != KM_DONE || km.t_back[1] == 0)
		Fail("the two engine deaths were not both injected and recovered from");
	Summary();
	for (int i = 0; i < opt.clients; i++)
		if (cl[i].conn)
			Disconnect(&cl[i]);
	for (char *f = strtok(failures, "\n"); f; f = strtok(NULL, "\n"))
		printf("fail: %s\n", f);
	PQfinish(ctl);
	return failures[0] ? 1 : 0;
}
