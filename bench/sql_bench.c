/*
 * sql_bench.c: the serving workload through real PostgreSQL sessions.
 *
 * C closed-loop clients, each its own connection, each running
 *   SELECT llm_generate_stream($prompt, $max_tokens, 0.7, 0.95, 0, $seed)
 * in libpq single-row mode, so every text piece is timed when it reaches the
 * client: time to first token from sending the query, inter-token latency
 * between pieces, and throughput both as pieces over wall time and as the
 * engine's generated tokens (cbllm_status().tokens_generated, read before and
 * after) over wall time.  A piece is the text of one step's token; a token
 * that ends inside a UTF-8 character has no piece of its own, so pieces can
 * be fewer than tokens.  EOS is not ignored here, so lengths may end early.
 * Prompts are random words of the same length ranges as cbllm-cli bench,
 * different at each concurrency level so that one level's prompts do not sit
 * in the prefix cache for the next.
 *
 * usage: sql_bench CONNINFO CONCURRENCY REQUESTS PROMPT_MIN PROMPT_MAX GEN_MIN GEN_MAX
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include <libpq-fe.h>

typedef struct client
{
	PGconn	   *conn;
	int			busy;
	double		t_send;
	double		t_last;
	int			pieces;
} client;

static double
Now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
Cmp(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

/* The engine's generated-token counter, read on a separate connection. */
static long long
TokensGenerated(PGconn *conn)
{
	PGresult   *r = PQexec(conn, "SELECT tokens_generated FROM cbllm_status()");
	long long	v = -1;

	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

static double *samples[2];
static int	n_samples[2],
			cap_samples[2];

/* Record a TTFT (k = 0) or ITL (k = 1) sample in seconds. */
static void
Add(int k, double v)
{
	if (n_samples[k] == cap_samples[k])
	{
		cap_samples[k] = cap_samples[k] ? 2 * cap_samples[k] : 4096;
		samples[k] = realloc(samples[k], sizeof(double) * cap_samples[k]);
	}
	samples[k][n_samples[k]++] = v;
}

/* Print mean, p50, p99 in ms of sample set k. */
static void
Report(const char *name, int k)
{
	double		sum = 0;
	int			n = n_samples[k];

	if (n == 0)
	{
		printf(" %s -", name);
		return;
	}
	qsort(samples[k], n, sizeof(double), Cmp);
	for (int i = 0; i < n; i++)
		sum += samples[k][i];
	printf(" %s_ms mean %.2f p50 %.2f p99 %.2f", name, sum / n * 1e3,
		   samples[k][(int) (0.5 * (n - 1) + 0.5)] * 1e3, samples[k][(int) (0.99 * (n - 1) + 0.5)] * 1e3);
}

/* Send request number k on client c. */
static int
Send(client *c, int k, unsigned *rng, int pmin, int pmax, int gmin, int gmax)
{
	static const char *words[] = {"the", "data", "base", "query", "table", "index", "row",
		"model", "token", "value", "system", "server", "engine", "batch", "cache", "page"};
	char		prompt[8192] = "";
	char		maxtok[16],
				seed[16];
	const char *params[3];
	int			len;

	*rng = *rng * 1664525u + 1013904223u;
	len = pmin + (int) ((*rng >> 8) % (unsigned) (pmax - pmin + 1));
	for (int i = 0; i < len && strlen(prompt) < sizeof(prompt) - 16; i++)
	{
		*rng = *rng * 1664525u + 1013904223u;
		strcat(prompt, i ? " " : "");
		strcat(prompt, words[(*rng >> 8) % 16]);
	}
	*rng = *rng * 1664525u + 1013904223u;
	snprintf(maxtok, sizeof(maxtok), "%d", gmin + (int) ((*rng >> 8) % (unsigned) (gmax - gmin + 1)));
	snprintf(seed, sizeof(seed), "%d", k);
	params[0] = prompt;
	params[1] = maxtok;
	params[2] = seed;
	if (!PQsendQueryParams(c->conn,
						   "SELECT llm_generate_stream($1, $2::int, 0.7, 0.95, 0, $3::bigint)",
						   3, NULL, params, NULL, NULL, 0) ||
		!PQsetSingleRowMode(c->conn))
	{
		fprintf(stderr, "sql_bench: send failed: %s", PQerrorMessage(c->conn));
		return -1;
	}
	c->busy = 1;
	c->t_send = Now();
	c->pieces = 0;
	return 0;
}

int
main(int argc, char **argv)
{
	int			C,
				N,
				pmin,
				pmax,
				gmin,
				gmax;
	client	   *cl;
	int			sent = 0,
				done = 0;
	long		pieces = 0;
	unsigned	rng;
	double		t0;

	if (argc != 8)
	{
		fprintf(stderr, "usage: sql_bench CONNINFO CONCURRENCY REQUESTS PROMPT_MIN PROMPT_MAX GEN_MIN GEN_MAX\n");
		return 2;
	}
	C = atoi(argv[2]);
	rng = 12345u + (unsigned) C * 7919u;	/* other prompts at each level: no prefix-cache carry-over */
	N = atoi(argv[3]);
	pmin = atoi(argv[4]);
	pmax = atoi(argv[5]);
	gmin = atoi(argv[6]);
	gmax = atoi(argv[7]);
	PGconn	   *mon;
	long long	tok0;

	cl = calloc(C, sizeof(client));
	mon = PQconnectdb(argv[1]);
	if (PQstatus(mon) != CONNECTION_OK)
	{
		fprintf(stderr, "sql_bench: %s", PQerrorMessage(mon));
		return 1;
	}
	tok0 = TokensGenerated(mon);
	for (int i = 0; i < C; i++)
	{
		cl[i].conn = PQconnectdb(argv[1]);
		if (PQstatus(cl[i].conn) != CONNECTION_OK)
		{
			fprintf(stderr, "sql_bench: %s", PQerrorMessage(cl[i].conn));
			return 1;
		}
	}
	t0 = Now();
	for (int i = 0; i < C && sent < N; i++)
		if (Send(&cl[i], sent++, &rng, pmin, pmax, gmin, gmax) != 0)
			return 1;
	while (done < N)
	{
		fd_set		fds;
		int			maxfd = 0;

		FD_ZERO(&fds);
		for (int i = 0; i < C; i++)
			if (cl[i].busy)
			{
				FD_SET(PQsocket(cl[i].conn), &fds);
				maxfd = PQsocket(cl[i].conn) > maxfd ? PQsocket(cl[i].conn) : maxfd;
			}
		if (select(maxfd + 1, &fds, NULL, NULL, NULL) < 0)
			return 1;
		for (int i = 0; i < C; i++)
		{
			client	   *c = &cl[i];

			if (!c->busy || !FD_ISSET(PQsocket(c->conn), &fds))
				continue;
			PQconsumeInput(c->conn);
			while (c->busy && !PQisBusy(c->conn))
			{
				PGresult   *r = PQgetResult(c->conn);
				double		now = Now();

				if (r == NULL)
				{
					c->busy = 0;
					done++;
					if (sent < N && Send(c, sent++, &rng, pmin, pmax, gmin, gmax) != 0)
						return 1;
					break;
				}
				if (PQresultStatus(r) == PGRES_SINGLE_TUPLE)
				{
					Add(c->pieces == 0 ? 0 : 1, now - (c->pieces == 0 ? c->t_send : c->t_last));
					c->t_last = now;
					c->pieces++;
					pieces++;
				}
				else if (PQresultStatus(r) != PGRES_TUPLES_OK)
				{
					fprintf(stderr, "sql_bench: query failed: %s", PQresultErrorMessage(r));
					return 1;
				}
				PQclear(r);
			}
		}
	}
	printf("concurrency %d requests %d:", C, N);
	Report("ttft", 0);
	Report("itl", 1);
	{
		double		wall = Now() - t0;

		printf(" pieces_per_s %.1f tokens_per_s %.1f wall_s %.2f\n", pieces / wall,
			   (TokensGenerated(mon) - tok0) / wall, wall);
	}
	PQfinish(mon);
	for (int i = 0; i < C; i++)
		PQfinish(cl[i].conn);
	return 0;
}
