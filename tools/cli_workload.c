/*
 * cli_workload.c: cbllm-cli bench replays the reference serving workload
 * against the engine in this process.  At each concurrency level C, C
 * closed-loop clients each keep one request in flight until N requests have
 * been served: prompt lengths uniform in [prompt_min, prompt_max] (half of
 * the prompts begin with a shared system prefix), max new tokens uniform in
 * [gen_min, gen_max] with EOS ignored so the lengths hold, sampling at
 * temperature 0.7 / top-p 0.95.  Time to first token is measured from
 * submission, inter-token latency is every gap between later tokens, and
 * throughput is generated tokens over the level's wall time.
 *
 * Every cbllm_engine_step is timed.  A step is a decode step when the
 * engine's counters show that it computed no prompt token and generated at
 * least one.  With a bandwidth B (--bandwidth, GB/s) each decode step also
 * gets a floor: the bytes it must read at least, the weights of one forward
 * pass (info.step_weight_bytes) plus the K and V of every position each of
 * its sequences attends to (context length * info.kv_bytes_per_token), over
 * B.  The sequences of a decode step are taken to be the requests that
 * received a token from it: in a step without prompt tokens every scheduled
 * sequence samples exactly one token and nothing else produces one, so the
 * set is exact rather than the approximation "every client past its first
 * token and not finished", which would also count requests left out of the
 * step (preempted, swapped out, or beyond max_num_seqs).  A sequence that
 * had generated g tokens before the step attends to prompt + g positions
 * (its prompt, its earlier tokens' K and V, and the token it feeds now).
 * The level reports the median decode step, the median floor and their
 * ratio.
 */
#include "cli_workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct client_req
{
	int64_t		id;				/* 0 when the client is idle */
	double		t_submit;
	double		t_last;			/* time of the latest token */
	int			n_gen;
} client_req;

typedef struct samples
{
	double	   *v;
	int			n;
	int			cap;
} samples;

/* Append x to s. */
static int
SamplesAdd(samples *s, double x)
{
	if (s->n == s->cap)
	{
		int			cap = s->cap ? 2 * s->cap : 1024;
		double	   *p = realloc(s->v, sizeof(double) * cap);

		if (p == NULL)
			return -1;
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = x;
	return 0;
}

int
cli_cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

/* Sort s and read its mean and p50/p99 (nearest rank). */
static void
Summarise(samples *s, double *mean, double *p50, double *p99)
{
	double		sum = 0;

	*mean = *p50 = *p99 = 0;
	if (s->n == 0)
		return;
	qsort(s->v, s->n, sizeof(double), cli_cmp_double);
	for (int i = 0; i < s->n; i++)
		sum += s->v[i];
	*mean = sum / s->n;
	*p50 = s->v[(int) (0.50 * (s->n - 1) + 0.5)];
	*p99 = s->v[(int) (0.99 * (s->n - 1) + 0.5)];
}

/* Sort s and read its median (nearest rank); 0 when empty. */
static double
Median(samples *s)
{
	double		mean,
				p50,
				p99;

	Summarise(s, &mean, &p50, &p99);
	return p50;
}

/* A JSON number, or null when there is none (has false). */
static void
JsonNumber(char *buf, size_t len, double v, bool has)
{
	if (has)
		snprintf(buf, len, "%.3f", v);
	else
		snprintf(buf, len, "null");
}

/* Parse "A..B" or "A". */
int
workload_parse_range(const char *s, int *lo, int *hi)
{
	char	   *end;
	long		a = strtol(s, &end, 10),
				b = a;

	if (end == s)
		return -1;
	if (strncmp(end, "..", 2) == 0)
	{
		const char *t = end + 2;

		b = strtol(t, &end, 10);
		if (end == t)
			return -1;
	}
	if (*end != '\0' || a < 1 || b < a || b > 1000000)
		return -1;
	*lo = (int) a;
	*hi = (int) b;
	return 0;
}

/* A small deterministic generator for the workload's draws. */
static unsigned
Next(unsigned *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* Uniform integer in [lo, hi]. */
static int
Uniform(unsigned *s, int lo, int hi)
{
	return lo + (int) (Next(s) % (unsigned) (hi - lo + 1));
}

/* Submit the k-th request of the level for a client. */
static int
SubmitOne(cbllm_engine *e, const workload_opts *o, int vocab, unsigned *rng, int k,
		  client_req *c, cbllm_err *err)
{
	int			len = Uniform(rng, o->prompt_min, o->prompt_max);
	int32_t    *ids = malloc(sizeof(int32_t) * len);
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_request_input in = {.ids = ids, .n_ids = len};
	bool		prefixed = (k % 2) == 0 && o->prefix_len > 0;
	int			rc;

	if (ids == NULL)
		return cbllm_fail(err, CBLLM_ERR_NOMEM, "out of memory");
	for (int i = 0; i < len; i++)
	{
		unsigned	shared = 12345u + (unsigned) i * 2654435761u;

		ids[i] = i == 0 ? 1 : 3 + (int32_t) ((prefixed && i < o->prefix_len ? shared >> 8 :
											  Next(rng)) % (unsigned) (vocab - 3));
	}
	sp.max_tokens = Uniform(rng, o->gen_min, o->gen_max);
	sp.ignore_eos = true;
	sp.temperature = o->temperature;
	sp.top_p = o->top_p;
	sp.has_seed = true;
	sp.seed = o->seed * 100003u + (unsigned) k;
	sp.constraint = o->constraint;
	sp.constraint_len = o->constraint_len;
	rc = cbllm_engine_submit(e, &in, &sp, &c->id, err);
	free(ids);
	c->t_submit = cbllm_now();
	c->t_last = 0;
	c->n_gen = 0;
	return rc;
}

/* What one concurrency level measured. */
typedef struct level_result
{
	samples		ttft;			/* seconds from submission to the first token */
	samples		itl;			/* seconds between later tokens */
	samples		steps;			/* seconds of each decode step */
	samples		floors;			/* each decode step's floor in seconds (with a bandwidth) */
	int64_t		gen_tokens;
	double		wall;			/* seconds of the level */
	cbllm_stats st;				/* the engine's counters at the end */
} level_result;

/* Free the samples of r. */
static void
LevelFree(level_result *r)
{
	free(r->ttft.v);
	free(r->itl.v);
	free(r->steps.v);
	free(r->floors.v);
}

/* Record a decode step of dt seconds whose sequences attend to ctx positions in all. */
static void
AddDecodeStep(level_result *r, const cbllm_engine_info *info, const workload_opts *o,
			  double dt, int64_t ctx)
{
	SamplesAdd(&r->steps, dt);
	if (o->bandwidth_gbps > 0)
		SamplesAdd(&r->floors, ((double) info->step_weight_bytes +
							   (double) ctx * (double) info->kv_bytes_per_token) /
				   (o->bandwidth_gbps * 1e9));
}

/* Print the level's line: a table row, or a JSON object with --json. */
static void
PrintLevel(const cbllm_engine_params *ep, const workload_opts *o, int C, level_result *r)
{
	const cbllm_stats *st = &r->st;
	double		m[6],
				step_ms = Median(&r->steps) * 1e3,
				floor_ms = Median(&r->floors) * 1e3;
	bool		has_step = r->steps.n > 0,
				has_floor = r->floors.n > 0 && floor_ms > 0;
	double		batch = st->steps ? (double) st->batch_seqs_sum / st->steps : 0.0,
				hits = st->prefix_queries ? (double) st->prefix_hits / st->prefix_queries : 0.0;

	Summarise(&r->ttft, &m[0], &m[1], &m[2]);
	Summarise(&r->itl, &m[3], &m[4], &m[5]);
	if (o->json)
	{
		char		js[32],
					jf[32],
					jx[32];

		JsonNumber(js, sizeof(js), step_ms, has_step);
		JsonNumber(jf, sizeof(jf), floor_ms, has_floor);
		JsonNumber(jx, sizeof(jx), has_floor ? step_ms / floor_ms : 0, has_step && has_floor);
		printf("{\"mode\": \"%s\", \"concurrency\": %d, \"requests\": %d, "
			   "\"ttft_ms\": {\"mean\": %.2f, \"p50\": %.2f, \"p99\": %.2f}, "
			   "\"itl_ms\": {\"mean\": %.2f, \"p50\": %.2f, \"p99\": %.2f}, "
			   "\"tokens_per_s\": %.2f, \"generated_tokens\": %lld, \"wall_s\": %.3f, "
			   "\"mean_batch\": %.2f, \"preemptions\": %lld, \"prefix_hit_rate\": %.4f, "
			   "\"decode_step_ms\": {\"p50\": %s}, \"decode_steps\": %d, "
			   "\"floor_ms\": {\"p50\": %s}, \"x_floor\": %s}\n",
			   cbllm_batching_name(ep->batching), C, o->requests,
			   m[0] * 1e3, m[1] * 1e3, m[2] * 1e3, m[3] * 1e3, m[4] * 1e3, m[5] * 1e3,
			   r->gen_tokens / r->wall, (long long) r->gen_tokens, r->wall,
			   batch, (long long) st->preemptions, hits, js, r->steps.n, jf, jx);
	}
	else
	{
		char		cs[16] = "-",
					cf[16] = "-",
					cx[16] = "-";

		if (has_step)
			snprintf(cs, sizeof(cs), "%.3f", step_ms);
		if (has_floor)
			snprintf(cf, sizeof(cf), "%.3f", floor_ms);
		if (has_step && has_floor)
			snprintf(cx, sizeof(cx), "%.2f", step_ms / floor_ms);
		printf("%-11d %8.1f %8.1f %8.1f %8.2f %8.2f %8.2f %10.1f %8.2f %8lld %8.1f%% "
			   "%9s %9s %8s\n", C,
			   m[0] * 1e3, m[1] * 1e3, m[2] * 1e3, m[3] * 1e3, m[4] * 1e3, m[5] * 1e3,
			   r->gen_tokens / r->wall, batch, (long long) st->preemptions, 100.0 * hits,
			   cs, cf, cx);
	}
	fflush(stdout);
}

/* Run one concurrency level on a fresh engine and print its line. */
static int
RunLevel(const cbllm_engine_params *ep, const workload_opts *o, int C)
{
	cbllm_engine *e;
	cbllm_engine_info info;
	cbllm_err	err;
	client_req *cl = calloc(C, sizeof(client_req));
	level_result r = {0};
	unsigned	rng = o->seed * 7919u + (unsigned) C;
	int			submitted = 0,
				done = 0,
				active;
	double		t0;

	if (cl == NULL || cbllm_engine_create(ep, &e, &err) != CBLLM_OK)
	{
		fprintf(stderr, "cbllm-cli: error: %s\n", cl ? err.msg : "out of memory");
		free(cl);
		return 1;
	}
	cbllm_engine_get_info(e, &info);
	t0 = cbllm_now();
	for (int c = 0; c < C && submitted < o->requests; c++)
		if (SubmitOne(e, o, info.vocab_size, &rng, submitted++, &cl[c], &err) != CBLLM_OK)
			goto fail;
	while (done < o->requests)
	{
		cbllm_stats before,
					after;
		double		t_step,
					now;
		int64_t		ctx = 0;	/* positions the step's sequences attend to */

		cbllm_engine_stats(e, &before);
		t_step = cbllm_now();
		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
			goto fail;
		now = cbllm_now();
		cbllm_engine_stats(e, &after);
		for (int c = 0; c < C; c++)
		{
			cbllm_output out;

			if (cl[c].id == 0 || cbllm_engine_take(e, cl[c].id, &out, &err) != CBLLM_OK)
				continue;
			if (out.n_tokens > 0)
				ctx += out.n_prompt + out.n_generated - out.n_tokens;
			for (int t = 0; t < out.n_tokens; t++)
			{
				if (cl[c].n_gen++ == 0)
					SamplesAdd(&r.ttft, now - cl[c].t_submit);
				else
					SamplesAdd(&r.itl, now - cl[c].t_last);
				cl[c].t_last = now;
			}
			r.gen_tokens += out.n_tokens;
			if (out.finish == CBLLM_FINISH_NONE)
				continue;
			if (out.finish == CBLLM_FINISH_ERROR)
			{
				fprintf(stderr, "cbllm-cli: error: request failed: %s\n", out.error);
				goto fail_quiet;
			}
			done++;
			cl[c].id = 0;
			if (submitted < o->requests &&
				SubmitOne(e, o, info.vocab_size, &rng, submitted++, &cl[c], &err) != CBLLM_OK)
				goto fail;
		}
		if (after.tokens_prompt == before.tokens_prompt &&
			after.tokens_generated > before.tokens_generated)
			AddDecodeStep(&r, &info, o, now - t_step, ctx);
	}
	r.wall = cbllm_now() - t0;
	cbllm_engine_stats(e, &r.st);
	PrintLevel(ep, o, C, &r);
	cbllm_engine_destroy(e);
	free(cl);
	LevelFree(&r);
	return 0;
fail:
	fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
fail_quiet:
	cbllm_engine_destroy(e);
	free(cl);
	LevelFree(&r);
	return 1;
}

/* Run every concurrency level. */
int
cli_workload_run(const cbllm_engine_params *ep_in, const workload_opts *oin)
{
	workload_opts o = *oin;
	cbllm_engine_params ep = *ep_in;
	char		list[256];
	int			max_c = 1;

	o.concurrency = o.concurrency ? o.concurrency : "1,4,8,16,32";
	o.requests = o.requests > 0 ? o.requests : 50;
	if (o.prompt_min <= 0)
		o.prompt_min = 50, o.prompt_max = 200;
	if (o.gen_min <= 0)
		o.gen_min = 100, o.gen_max = 500;
	o.prefix_len = o.prefix_len == 0 ? 130 : o.prefix_len;
	o.temperature = o.temperature < 0 ? 0.7f : o.temperature;
	o.top_p = o.top_p > 0 ? o.top_p : 0.95f;
	snprintf(list, sizeof(list), "%s", o.concurrency);
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
	{
		if (atoi(s) < 1)
		{
			fprintf(stderr, "cbllm-cli: error: bad concurrency \"%s\"\n", s);
			return 1;
		}
		max_c = atoi(s) > max_c ? atoi(s) : max_c;
	}
	if (ep.max_num_seqs == 0)
		ep.max_num_seqs = max_c;
	if (ep.max_model_len == 0)
		ep.max_model_len = o.prompt_max + o.gen_max + 1;
	if (!o.json)
		printf("%-11s %8s %8s %8s %8s %8s %8s %10s %8s %8s %9s %9s %9s %8s\n", "concurrency",
			   "ttft_ms", "ttft_p50", "ttft_p99", "itl_ms", "itl_p50", "itl_p99", "tokens/s",
			   "batch", "preempt", "prefix_hit", "decode_ms", "floor_ms", "x_floor");
	snprintf(list, sizeof(list), "%s", o.concurrency);
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
		if (RunLevel(&ep, &o, atoi(s)) != 0)
			return 1;
	return 0;
}

/*
 * The head-of-line case: 8 requests submitted together, the first needing
 * long_gen tokens and 7 needing short_gen, with room for 4 sequences per step
 * (max_num_seqs, unless set) so that some requests must wait for a slot;
 * prints the short requests' mean time to first token and completion time,
 * and the long one's completion.
 */
int
cli_hol_run(const cbllm_engine_params *ep_in, int short_gen, int long_gen, int prompt_len)
{
	cbllm_engine_params ep = *ep_in;
	cbllm_engine *e;
	cbllm_engine_info info;
	cbllm_err	err;
	int64_t		ids[8];
	double		first[8] = {0},
				end[8] = {0},
				t0;
	int			left = 8,
				active;
	double		sum_first = 0,
				sum_end = 0,
				max_end = 0;

	ep.max_num_seqs = ep.max_num_seqs ? ep.max_num_seqs : 4;
	ep.max_model_len = ep.max_model_len ? ep.max_model_len : prompt_len + long_gen + 1;
	if (cbllm_engine_create(&ep, &e, &err) != CBLLM_OK)
	{
		fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
		return 1;
	}
	cbllm_engine_get_info(e, &info);
	t0 = cbllm_now();
	for (int k = 0; k < 8; k++)
	{
		int32_t    *p = malloc(sizeof(int32_t) * prompt_len);
		cbllm_sampling sp = cbllm_sampling_default();
		cbllm_request_input in = {.ids = p, .n_ids = prompt_len};
		unsigned	s = 99u + (unsigned) k;

		for (int i = 0; p && i < prompt_len; i++)
			p[i] = 3 + (int32_t) (Next(&s) % (unsigned) (info.vocab_size - 3));
		sp.max_tokens = k == 0 ? long_gen : short_gen;
		sp.ignore_eos = true;
		if (p == NULL || cbllm_engine_submit(e, &in, &sp, &ids[k], &err) != CBLLM_OK)
		{
			fprintf(stderr, "cbllm-cli: error: %s\n", p ? err.msg : "out of memory");
			free(p);
			cbllm_engine_destroy(e);
			return 1;
		}
		free(p);
	}
	while (left > 0 && cbllm_engine_step(e, &active, &err) == CBLLM_OK)
	{
		double		now = cbllm_now() - t0;

		for (int k = 0; k < 8; k++)
		{
			cbllm_output o;

			if (ids[k] == 0 || cbllm_engine_take(e, ids[k], &o, NULL) != CBLLM_OK)
				continue;
			if (o.n_tokens > 0 && first[k] == 0)
				first[k] = now;
			if (o.finish != CBLLM_FINISH_NONE)
			{
				end[k] = now;
				ids[k] = 0;
				left--;
			}
		}
	}
	for (int k = 1; k < 8; k++)
	{
		sum_first += first[k];
		sum_end += end[k];
		max_end = end[k] > max_end ? end[k] : max_end;
	}
	printf("%-10s short requests (7 x %d tokens): ttft mean %.1f ms, completion mean %.1f ms, last %.1f ms; long request (%d tokens): completion %.1f ms\n",
		   cbllm_batching_name(ep.batching), short_gen, sum_first / 7 * 1e3,
		   sum_end / 7 * 1e3, max_end * 1e3, long_gen, end[0] * 1e3);
	cbllm_engine_destroy(e);
	return left == 0 ? 0 : 1;
}
