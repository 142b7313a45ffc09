/*
 * cli_bench.c: cbllm-cli bench-steps.  For each batch size B it submits B
 * requests with context-token prompts, prefills them, then times gen_len decode
 * steps of B sequences each and reports the median step; then it times the
 * prefill of one prefill-token prompt.  Weight bytes read per step and
 * FLOPs per step put the times next to the machine's bandwidth and peak.
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

#include "backend_registry.h"

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

/* Median seconds of decode steps with B sequences; returns < 0 on error. */
static double
TimeDecode(cbllm_engine *e, int B, const bench_opts *o, int vocab)
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
	printf("%-8s %14s %14s %16s %14s\n", "batch", "step_ms", "tokens_per_s", "weight_GB_per_s",
		   "GFLOP_per_s");
	snprintf(list, sizeof(list), "%s", o.batches);
	for (char *s = strtok(list, ","); s; s = strtok(NULL, ","))
	{
		int			B = atoi(s);
		double		t = B > 0 ? TimeDecode(e, B, &o, info.vocab_size) : -1;
		if (t <= 0)
		{
			cbllm_engine_destroy(e);
			return 1;
		}
		printf("%-8d %14.3f %14.1f %16.2f %14.1f\n", B, t * 1e3, B / t,
			   info.step_weight_bytes / t / 1e9, 2.0 * info.matmul_params * B / t / 1e9);
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
