/*
 * serve_bench.c: the serving workload as closed-loop clients of a server,
 * one driver for two servers so that both are measured the same way:
 *
 *   pg:CONNINFO      cbllm through PostgreSQL sessions: each client its own
 *                    connection running
 *                      SELECT llm_generate_stream($prompt, $max_tokens, 0.7, 0.95, 0, $seed)
 *                    in libpq single-row mode, every piece timed as it arrives;
 *   http:HOST:PORT   llama.cpp's llama-server: each client its own TCP
 *                    connection POSTing /completion with "stream": true
 *                    (temperature 0.7, top_p 0.95, top_k 0, the same seed),
 *                    every server-sent event with content timed as it arrives.
 *
 * Each client sends its next request as soon as its last one ends. Time to
 * first token runs from sending the request to its first piece;
 * inter-token latency between pieces. Tokens per second is the server's own
 * count of generated tokens over wall time: cbllm_status().tokens_generated
 * read before and after, or the sum of llama-server's tokens_predicted.
 * Prompts are random words (both servers tokenize the same text with the
 * same vocabulary), different at each concurrency level and for each SALT
 * so that one run's prompts do not sit in a prefix cache for the next.
 *
 * usage: serve_bench TARGET CONCURRENCY REQUESTS PROMPT_MIN PROMPT_MAX GEN_MIN GEN_MAX [SALT]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define HTTP_BUF 65536

typedef struct client
{
	PGconn	   *conn;			/* pg */
	int			sock;			/* http: -1 when idle */
	char	   *buf;			/* http: bytes received and not yet parsed */
	size_t		len;
	bool		busy;
	double		t_send;
	double		t_last;
	int			pieces;
} client;

typedef struct target
{
	bool		http;
	const char *conninfo;		/* pg */
	char		host[256];		/* http */
	char		port[16];
} target;

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

/* A piece arrived on c now. */
static void
Piece(client *c, double now, long *pieces)
{
	Add(c->pieces == 0 ? 0 : 1, now - (c->pieces == 0 ? c->t_send : c->t_last));
	c->t_last = now;
	c->pieces++;
	(*pieces)++;
}

/* The next request's prompt (random words) and max_tokens. */
static void
MakeRequest(unsigned *rng, int pmin, int pmax, int gmin, int gmax, char *prompt,
			size_t cap, int *max_tokens)
{
	static const char *words[] = {"the", "data", "base", "query", "table", "index", "row",
		"model", "token", "value", "system", "server", "engine", "batch", "cache", "page"};
	int			len;

	prompt[0] = '\0';
	*rng = *rng * 1664525u + 1013904223u;
	len = pmin + (int) ((*rng >> 8) % (unsigned) (pmax - pmin + 1));
	for (int i = 0; i < len && strlen(prompt) < cap - 16; i++)
	{
		*rng = *rng * 1664525u + 1013904223u;
		strcat(prompt, i ? " " : "");
		strcat(prompt, words[(*rng >> 8) % 16]);
	}
	*rng = *rng * 1664525u + 1013904223u;
	*max_tokens = gmin + (int) ((*rng >> 8) % (unsigned) (gmax - gmin + 1));
}

/* A connected TCP socket to the target, or -1. */
static int
Connect(const target *t)
{
	struct addrinfo hints = {0},
			   *res;
	int			s = -1;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(t->host, t->port, &hints, &res) != 0)
		return -1;
	s = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (s >= 0 && connect(s, res->ai_addr, res->ai_addrlen) != 0)
	{
		close(s);
		s = -1;
	}
	freeaddrinfo(res);
	return s;
}

/* Send request k on client c. */
static int
Send(const target *t, client *c, int k, unsigned *rng, int pmin, int pmax, int gmin, int gmax)
{
	char		prompt[8192];
	int			max_tokens;

	MakeRequest(rng, pmin, pmax, gmin, gmax, prompt, sizeof(prompt), &max_tokens);
	if (t->http)
	{
		char		body[9216],
					req[10240];
		int			blen = snprintf(body, sizeof(body),
									"{\"prompt\": \"%s\", \"n_predict\": %d, \"temperature\": 0.7, "
									"\"top_p\": 0.95, \"top_k\": 0, \"min_p\": 0, \"seed\": %d, "
									"\"stream\": true, \"cache_prompt\": true}",
									prompt, max_tokens, k);
		int			rlen = snprintf(req, sizeof(req),
									"POST /completion HTTP/1.1\r\nHost: %s:%s\r\n"
									"Content-Type: application/json\r\nContent-Length: %d\r\n"
									"Connection: close\r\n\r\n%s", t->host, t->port, blen, body);

		c->sock = Connect(t);
		c->len = 0;
		if (c->sock < 0 || write(c->sock, req, rlen) != rlen)
		{
			fprintf(stderr, "serve_bench: cannot send to %s:%s: %s\n", t->host, t->port,
					strerror(errno));
			return -1;
		}
	}
	else
	{
		char		maxtok[16],
					seed[16];
		const char *params[3] = {prompt, maxtok, seed};

		snprintf(maxtok, sizeof(maxtok), "%d", max_tokens);
		snprintf(seed, sizeof(seed), "%d", k);
		if (!PQsendQueryParams(c->conn,
							   "SELECT llm_generate_stream($1, $2::int, 0.7, 0.95, 0, $3::bigint)",
							   3, NULL, params, NULL, NULL, 0) ||
			!PQsetSingleRowMode(c->conn))
		{
			fprintf(stderr, "serve_bench: send failed: %s", PQerrorMessage(c->conn));
			return -1;
		}
	}
	c->busy = true;
	c->t_send = Now();
	c->pieces = 0;
	return 0;
}

/*
 * Read what llama-server sent on c: every complete "data: {...}" event with
 * content counts as a piece; the last one's tokens_predicted goes to
 * *tokens.  Returns 1 when the response is complete (the server closed the
 * connection), 0 to wait for more, -1 on an error.
 */
static int
ReadHttp(client *c, long *pieces, long long *tokens)
{
	ssize_t		n;
	char	   *line;
	double		now = Now();

	if (c->len + 4096 > HTTP_BUF)
		c->len = 0;				/* never: events are parsed as they complete */
	n = read(c->sock, c->buf + c->len, HTTP_BUF - 1 - c->len);
	if (n < 0)
		return -1;
	if (n == 0)
	{
		close(c->sock);
		c->sock = -1;
		return 1;
	}
	c->len += (size_t) n;
	c->buf[c->len] = '\0';
	/* complete events end with a blank line */
	while ((line = strstr(c->buf, "data: ")) != NULL)
	{
		char	   *end = strstr(line, "\n\n");
		char	   *tp;

		if (end == NULL)
		{
			memmove(c->buf, line, c->len - (size_t) (line - c->buf) + 1);
			c->len -= (size_t) (line - c->buf);
			return 0;
		}
		*end = '\0';
		if (strstr(line, "\"stop\":true") != NULL || strstr(line, "\"stop\": true") != NULL)
		{
			if ((tp = strstr(line, "\"tokens_predicted\":")) != NULL)
				*tokens += atoll(tp + strlen("\"tokens_predicted\":"));
		}
		else if (strstr(line, "\"content\":\"\"") == NULL)
			Piece(c, now, pieces);
		memmove(c->buf, end + 2, c->len - (size_t) (end + 2 - c->buf) + 1);
		c->len -= (size_t) (end + 2 - c->buf);
	}
	/* no event begins here: keep the last bytes, which may begin one */
	if (c->len > 5)
	{
		memmove(c->buf, c->buf + c->len - 5, 6);
		c->len = 5;
	}
	return 0;
}

/* Read what PostgreSQL sent on c; 1 when the query ended, 0 to wait, -1 on an error. */
static int
ReadPg(client *c, long *pieces)
{
	PQconsumeInput(c->conn);
	while (!PQisBusy(c->conn))
	{
		PGresult   *r = PQgetResult(c->conn);

		if (r == NULL)
			return 1;
		if (PQresultStatus(r) == PGRES_SINGLE_TUPLE)
			Piece(c, Now(), pieces);
		else if (PQresultStatus(r) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "serve_bench: query failed: %s", PQresultErrorMessage(r));
			PQclear(r);
			return -1;
		}
		PQclear(r);
	}
	return 0;
}

/* Parse pg:CONNINFO or http:HOST:PORT. */
static bool
ParseTarget(const char *s, target *t)
{
	memset(t, 0, sizeof(*t));
	if (strncmp(s, "pg:", 3) == 0)
	{
		t->conninfo = s + 3;
		return true;
	}
	if (strncmp(s, "http:", 5) == 0)
	{
		const char *colon = strrchr(s + 5, ':');

		if (colon == NULL || (size_t) (colon - (s + 5)) >= sizeof(t->host))
			return false;
		t->http = true;
		memcpy(t->host, s + 5, (size_t) (colon - (s + 5)));
		snprintf(t->port, sizeof(t->port), "%s", colon + 1);
		return true;
	}
	return false;
}

int
main(int argc, char **argv)
{
	target		t;
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
	long long	tokens = 0,
				tok0 = 0;
	unsigned	rng;
	double		t0,
				wall;
	PGconn	   *mon = NULL;

	if ((argc != 8 && argc != 9) || !ParseTarget(argv[1], &t))
	{
		fprintf(stderr, "usage: serve_bench pg:CONNINFO|http:HOST:PORT CONCURRENCY REQUESTS "
				"PROMPT_MIN PROMPT_MAX GEN_MIN GEN_MAX [SALT]\n");
		return 2;
	}
	C = atoi(argv[2]);
	/* other prompts at each level and salt: no prefix-cache carry-over */
	rng = 12345u + (unsigned) C * 7919u + (argc == 9 ? (unsigned) atoi(argv[8]) * 104729u : 0);
	N = atoi(argv[3]);
	pmin = atoi(argv[4]);
	pmax = atoi(argv[5]);
	gmin = atoi(argv[6]);
	gmax = atoi(argv[7]);
	cl = calloc(C, sizeof(client));
	if (!t.http)
	{
		mon = PQconnectdb(t.conninfo);
		if (PQstatus(mon) != CONNECTION_OK)
		{
			fprintf(stderr, "serve_bench: %s", PQerrorMessage(mon));
			return 1;
		}
		tok0 = TokensGenerated(mon);
	}
	for (int i = 0; i < C; i++)
	{
		cl[i].sock = -1;
		if (t.http)
			cl[i].buf = malloc(HTTP_BUF);
		else if (PQstatus(cl[i].conn = PQconnectdb(t.conninfo)) != CONNECTION_OK)
		{
			fprintf(stderr, "serve_bench: %s", PQerrorMessage(cl[i].conn));
			return 1;
		}
	}
	t0 = Now();
	for (int i = 0; i < C && sent < N; i++)
		if (Send(&t, &cl[i], sent++, &rng, pmin, pmax, gmin, gmax) != 0)
			return 1;
	while (done < N)
	{
		fd_set		fds;
		int			maxfd = 0;

		FD_ZERO(&fds);
		for (int i = 0; i < C; i++)
			if (cl[i].busy)
			{
				int			fd = t.http ? cl[i].sock : PQsocket(cl[i].conn);

				FD_SET(fd, &fds);
				maxfd = fd > maxfd ? fd : maxfd;
			}
		if (select(maxfd + 1, &fds, NULL, NULL, NULL) < 0)
			return 1;
		for (int i = 0; i < C; i++)
		{
			client	   *c = &cl[i];
			int			rc;

			if (!c->busy || !FD_ISSET(t.http ? c->sock : PQsocket(c->conn), &fds))
				continue;
			rc = t.http ? ReadHttp(c, &pieces, &tokens) : ReadPg(c, &pieces);
			if (rc < 0)
				return 1;
			if (rc == 1)
			{
				c->busy = false;
				done++;
				if (sent < N && Send(&t, c, sent++, &rng, pmin, pmax, gmin, gmax) != 0)
					return 1;
			}
		}
	}
	wall = Now() - t0;
	if (!t.http)
		tokens = TokensGenerated(mon) - tok0;
	printf("%s concurrency %d requests %d:", t.http ? "llama-server" : "cbllm", C, N);
	Report("ttft", 0);
	Report("itl", 1);
	printf(" pieces_per_s %.1f tokens_per_s %.1f wall_s %.2f\n", pieces / wall, tokens / wall,
		   wall);
	if (mon)
		PQfinish(mon);
	for (int i = 0; i < C; i++)
	{
		if (cl[i].conn)
			PQfinish(cl[i].conn);
		free(cl[i].buf);
	}
	free(cl);
	return 0;
}
