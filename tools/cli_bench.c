/*
 * cli_bench.c: cbllm-cli bench-steps.  For each batch size B it submits B
 * requests with context-token prompts, prefills them, then times gen_len decode
 * steps of B sequences each and reports the median step; then it times the
 * prefill of one prefill-token prompt.  Weight bytes read per step and
 * FLOPs per step put the times next to the machine's bandwidth and peak.
 * The decode steps sample with --temp, --top-p and --top-k (greedy without
 * --temp), so that a sampled run beside a greedy one shows what sampling costs.
 *
 * cbllm-cli bench-sampler times the sampler alone over a batch of logits
 * rows, spread over threads as an engine step spreads them.
 *
 * cbllm-cli membw measures the copy bandwidth that the bench's --bandwidth
 * floor divides by, as the device's backend measures it (its registry
 * entry's copy_bandwidth): on the CPU one thread's memcpy between two 1 GiB
 * buffers, on CUDA a device-to-device copy; both count the bytes read plus
 * the bytes written and report the median of the copies.
 */
#include "cli_bench.h"
#include "cli_workload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_registry.h"
#include "base/rng.h"
#include "base/threadpool.h"
#include "sample/sampler.h"

#define MEMBW_BYTES ((size_t) 1 << 30)	/* each copy moves 1 GiB */

/* Deterministic prompt ids in [3, vocab). */
static void
FillPrompt(int32_t *ids, int n, int vocab, unsigned seed)
{
	for (int i = 0; i < n; i++)
	{
		seed = seed * 1103515245u + 12345u;
		ids[i] = 3 + (int32_t) ((seed >> 8) % (unsigned) (vocab - 3));
	}
}

/*
 * Median seconds of decode steps with B sequences, plain or controlled
 * (under the constraint and with the logprobs o gives); returns < 0 on error.
 */
static double
TimeDecode(cbllm_engine *e, int B, const bench_opts *o, int vocab, bool controlled,
		   cbllm_stats *experts)
{
	int32_t    *ids = malloc(sizeof(int32_t) * o->context);
	int64_t    *rid = malloc(sizeof(int64_t) * B);
	double	   *t = malloc(sizeof(double) * o->steps);
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;
	cbllm_stats st;
	int			active,
				n_t = 0;
	double		med = -1;

	sp.max_tokens = o->steps + 2;
	sp.ignore_eos = true;
	sp.temperature = o->temperature;
	sp.top_p = o->top_p > 0 ? o->top_p : 1.0f;
	sp.top_k = o->top_k;
	sp.has_seed = true;
	sp.seed = 42;
	if (controlled)
	{
		sp.constraint = o->constraint;
		sp.constraint_len = o->constraint_len;
		sp.logprobs = o->logprobs;
		sp.top_logprobs = o->top_logprobs;
	}
	for (int b = 0; ids && rid && t && b < B; b++)
	{
		cbllm_request_input in = {.ids = ids, .n_ids = o->context};

		FillPrompt(ids, o->context, vocab, 1000u + b);
		if (cbllm_engine_submit(e, &in, &sp, &rid[b], &err) != CBLLM_OK)
		{
			fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
			goto done;
		}
	}
	/* prefill until every sequence decodes */
	do
	{
		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
			goto fail;
		cbllm_engine_stats(e, &st);
	} while (st.n_waiting > 0 || st.tokens_generated < B);
	for (n_t = 0; n_t < o->steps; n_t++)
	{
		double		t0 = cbllm_now();

		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
			goto fail;
		t[n_t] = cbllm_now() - t0;
	}
	if (experts != NULL)
	{
		cbllm_stats after;

		cbllm_engine_stats(e, &after);
		experts->steps = after.steps - st.steps;
		experts->expert_pairs = after.expert_pairs - st.expert_pairs;
		experts->expert_runs = after.expert_runs - st.expert_runs;
	}
	qsort(t, n_t, sizeof(double), cli_cmp_double);
	med = t[n_t / 2];
	for (int b = 0; b < B; b++)
		cbllm_engine_abort(e, rid[b], NULL);
	goto done;
fail:
	fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
done:
	free(ids);
	free(rid);
	free(t);
	return med;
}

/* Seconds of one prefill step of n tokens (median of 3). */
static double
TimePrefill(cbllm_engine *e, int n, int vocab)
{
	int32_t    *ids = malloc(sizeof(int32_t) * n);
	double		t[3];
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_err	err;

	if (ids == NULL)
		return -1;
	sp.max_tokens = 1;
	FillPrompt(ids, n, vocab, 7);
	for (int k = 0; k < 3; k++)
	{
		cbllm_request_input in = {.ids = ids, .n_ids = n};
		int64_t		id;
		int			active;
		cbllm_output out;
		double		t0;

		if (cbllm_engine_submit(e, &in, &sp, &id, &err) != CBLLM_OK)
		{
			fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
			free(ids);
			return -1;
		}
		t0 = cbllm_now();
		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK)
		{
			fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
			free(ids);
			return -1;
		}
		t[k] = cbllm_now() - t0;
		cbllm_engine_take(e, id, &out, NULL);
		cbllm_engine_abort(e, id, NULL);
	}
	free(ids);
	qsort(t, 3, sizeof(double), cli_cmp_double);
	return t[1];
}

/* Run the benchmark and print one line per batch size, then prefill. */
int
cli_bench_run(const cbllm_engine_params *ep_in, const bench_opts *oin)
{
	bench_opts	o = *oin;
	cbllm_engine_params ep = *ep_in;
	cbllm_engine *e;
	cbllm_engine_info info;
	cbllm_err	err;
	char		list[256];
	int			max_b = 1;
	bool		controlled;

	o.batches = o.batches ? o.batches : "1,8,32";
	o.context = o.context > 0 ? o.context : 64;
	o.steps = o.steps > 0 ? o.steps : 32;
	o.prefill_len = o.prefill_len > 0 ? o.prefill_len : 256;
	snprintf(list, sizeof(list), "%s", o.batches);
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
		if (atoi(s) > max_b)
			max_b = atoi(s);
	if (ep.max_num_seqs < max_b)
		ep.max_num_seqs = max_b;
	ep.no_prefix_caching = true;	/* the prefill runs repeat one prompt: time computing it */
	if (ep.max_num_batched_tokens < o.prefill_len)
		ep.max_num_batched_tokens = o.prefill_len > max_b * o.context ? o.prefill_len :
			max_b * o.context;
	if (ep.max_model_len == 0)
		ep.max_model_len = o.context + o.steps + 8 > o.prefill_len + 8 ?
			o.context + o.steps + 8 : o.prefill_len + 8;
	if (cbllm_engine_create(&ep, &e, &err) != CBLLM_OK)
	{
		fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
		return 1;
	}
	cbllm_engine_get_info(e, &info);
	printf("# model %s: %d layers, hidden %d, vocab %d, %.1f MB of weights (%s)\n", ep.model_dir,
		   info.n_layers, info.hidden, info.vocab_size, info.weight_bytes / 1e6, info.weight_types);
	if (info.quantize_seconds > 0)
		printf("# quantized at load (--weight-format %s) in %.2f s\n", ep.weight_format,
			   info.quantize_seconds);
	printf("# cpu kernels %s, %d threads, context %d tokens per sequence\n", info.cpu_isa,
		   info.n_threads, o.context);
	if (o.temperature > 0)
		printf("# decode samples: temperature %g, top-p %g, top-k %d\n", o.temperature,
			   o.top_p > 0 ? o.top_p : 1.0, o.top_k);
	else
		printf("# decode is greedy\n");
	if (o.constraint != NULL)
		printf("# each batch is timed unconstrained, then with every sequence under the "
			   "constraint (documents one per line, so that none ends)\n");
	if (o.logprobs)
		printf("# each batch is timed without logprobs, then with every sequence reporting them "
			   "with %d alternatives\n", o.top_logprobs);
	controlled = o.constraint != NULL || o.logprobs;
	printf("%-8s %14s %14s %16s %14s%s\n", "batch", "step_ms", "tokens_per_s", "weight_GB_per_s",
		   "GFLOP_per_s", !controlled ? "" : o.logprobs && o.constraint == NULL ?
		   "  logprobs_step_ms  logprobs/plain_tokens_per_s" :
		   "  constrained_step_ms  constrained/plain_tokens_per_s");
	snprintf(list, sizeof(list), "%s", o.batches);
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
	{
		int			B = atoi(s);
		cbllm_stats ex = {0};
		double		t = B > 0 ? TimeDecode(e, B, &o, info.vocab_size, false, &ex) : -1;
		double		tc = t > 0 && controlled ?
			TimeDecode(e, B, &o, info.vocab_size, true, NULL) : 1;

		/* a mixture of experts: each step reads each chosen expert once, not once per token */
		if (ex.expert_runs > 0 && ex.steps > 0)
			printf("# batch %d: %.1f experts read per decode step, where each token reading its own would read %.1f (%.2fx the bytes)\n",
				   B, (double) ex.expert_runs / ex.steps, (double) ex.expert_pairs / ex.steps,
				   (double) ex.expert_pairs / ex.expert_runs);

		if (t <= 0 || tc <= 0)
		{
			cbllm_engine_destroy(e);
			return 1;
		}
		printf("%-8d %14.3f %14.1f %16.2f %14.1f", B, t * 1e3, B / t,
			   info.step_weight_bytes / t / 1e9, 2.0 * info.matmul_params * B / t / 1e9);
		if (controlled)
			printf("  %19.3f  %31.3f", tc * 1e3, t / tc);
		printf("\n");
	}
	{
		double		t = TimePrefill(e, o.prefill_len, info.vocab_size);

		if (t <= 0)
		{
			cbllm_engine_destroy(e);
			return 1;
		}
		/* every token goes through the layers; only the last one through lm_head */
		double		lm_head = (double) info.vocab_size * info.hidden;
		double		flops = 2.0 * ((info.matmul_params - lm_head) * o.prefill_len + lm_head);

		printf("prefill  %d tokens: %.1f ms, %.1f tokens/s, %.1f GFLOP/s\n", o.prefill_len,
			   t * 1e3, o.prefill_len / t, flops / t / 1e9);
	}
	cbllm_engine_destroy(e);
	return 0;
}

/* membw: print "copy_bandwidth_GBps X" for the device (cpu, cuda or auto). */
int
cli_membw_run(const char *device)
{
	const backend_reg *reg;
	char		names[256];
	double		gbps = 0;
	cbllm_err	err;

	device = device ? device : "cpu";
	if (strcmp(device, "auto") != 0 && backend_registry_find(device) == NULL)
	{
		backend_registry_names(names, sizeof(names), "");
		fprintf(stderr, "cbllm-cli: error: membw --device must be %s, not \"%s\"\n", names,
				device);
		return 1;
	}
	if (backend_registry_choose(device, &reg, &err) != CBLLM_OK ||
		reg->copy_bandwidth(MEMBW_BYTES, &gbps, &err) != CBLLM_OK)
	{
		fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
		return 1;
	}
	printf("copy_bandwidth_GBps %.1f\n", gbps);
	return 0;
}

typedef struct sampler_bench_job
{
	cbllm_sampler **s;			/* (threads) one sampler each, as the engine has */
	const float *logits;		/* (batch, vocab) */
	int			vocab;
	sampler_params p;
	cbllm_rng  *rng;			/* (batch) */
	int32_t    *tok;			/* (batch) */
} sampler_bench_job;

/* One row of the batch, on the thread's own sampler. */
static void
SampleRowTask(void *arg, int row, int thread)
{
	sampler_bench_job *j = arg;

	j->tok[row] = sampler_sample(j->s[thread], j->logits + (size_t) row * j->vocab, &j->p,
								 &j->rng[row]);
}

/*
 * bench-sampler: time sampling a batch of logits rows over the thread pool,
 * as an engine step does.  The rows are bell-shaped (a sum of four uniforms,
 * scaled to a spread of 12 like a trained model's logits) so that top-p
 * keeps a realistic share of the vocabulary; a greedy pass over the same
 * rows is the floor.
 */
int
cli_sampler_bench_run(const sampler_bench_opts *o)
{
	int			vocab = o->vocab > 0 ? o->vocab : 151936,
				batch = o->batch > 0 ? o->batch : 32,
				threads = o->threads > 0 ? o->threads : 1,
				reps = 50,
				status = 1;
	float	   *logits = malloc(sizeof(float) * vocab * (size_t) batch);
	cbllm_rng  *rng = malloc(sizeof(cbllm_rng) * batch);
	int32_t    *tok = malloc(sizeof(int32_t) * batch);
	cbllm_sampler **s = calloc(threads, sizeof(*s));
	cbllm_threadpool *tp = NULL;
	cbllm_err	err;
	uint64_t	x = 12345;
	sampler_params modes[2] = {{0, 1, 0}, {o->temperature, o->top_p > 0 ? o->top_p : 1.0f,
	o->top_k}};
	double		t[2][50];

	if (!logits || !rng || !tok || !s || threadpool_create(threads, &tp, &err) != CBLLM_OK)
	{
		fprintf(stderr, "cbllm-cli: error: out of memory\n");
		goto done;
	}
	for (int i = 0; i < threads; i++)
		if (sampler_create(vocab, &s[i], &err) != CBLLM_OK)
		{
			fprintf(stderr, "cbllm-cli: error: %s\n", err.msg);
			goto done;
		}
	for (size_t i = 0; i < (size_t) vocab * batch; i++)
	{
		double		u = 0;

		for (int k = 0; k < 4; k++)
			u += (double) (cbllm_splitmix64_next(&x) >> 11) / 9007199254740992.0;
		logits[i] = (float) (u * 3.0 - 6.0);
	}
	for (int b = 0; b < batch; b++)
		rng_seed(&rng[b], 1000 + b);
	for (int m = 0; m < 2; m++)
	{
		sampler_bench_job j = {s, logits, vocab, modes[m], rng, tok};

		threadpool_run(tp, batch, SampleRowTask, &j);	/* warm */
		for (int r = 0; r < reps; r++)
		{
			double		t0 = cbllm_now();

			threadpool_run(tp, batch, SampleRowTask, &j);
			t[m][r] = cbllm_now() - t0;
		}
		qsort(t[m], reps, sizeof(double), cli_cmp_double);
	}
	printf("# vocab %d, batch %d, %d threads; sampled: temperature %g, top-p %g, top-k %d\n",
		   vocab, batch, threads, modes[1].temperature, modes[1].top_p, modes[1].top_k);
	printf("%-8s %12s %14s\n", "mode", "batch_ms", "us_per_row");
	printf("%-8s %12.3f %14.1f\n", "greedy", t[0][reps / 2] * 1e3,
		   t[0][reps / 2] * 1e6 * threads / batch);
	printf("%-8s %12.3f %14.1f\n", "sampled", t[1][reps / 2] * 1e3,
		   t[1][reps / 2] * 1e6 * threads / batch);
	status = 0;
done:
	for (int i = 0; s && i < threads; i++)
		sampler_free(s[i]);
	if (tp)
		threadpool_destroy(tp);
	free(s);
	free(logits);
	free(rng);
	free(tok);
	return status;
}
