/*
 * stats.c: latency statistics for cbllm.stats: time to first token,
 * inter-token latency, queue time and end-to-end latency, each a log-spaced
 * histogram in shared memory (bucket edges 0.1 ms * 1.25^b, so a percentile
 * is known to within 12%), written by the worker and read by anyone under
 * the info lock; cbllm.reset_stats() clears them.
 */
#include "cbllm_pg.h"

#include <math.h>

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(cbllm_latency);
PG_FUNCTION_INFO_V1(cbllm_reset_stats);

#define HIST_BASE 1e-4
#define HIST_RATIO 1.25

static const char *const metric_names[CBLLM_N_LATENCY] = {"ttft", "itl", "queue", "e2e"};

/* The bucket of a latency. */
static int
Bucket(double seconds)
{
	int			b;

	if (!(seconds > HIST_BASE))
		return 0;
	b = (int) (log(seconds / HIST_BASE) / log(HIST_RATIO));
	return b < 0 ? 0 : b >= CBLLM_HIST_BUCKETS ? CBLLM_HIST_BUCKETS - 1 : b;
}

/* Add one latency sample (worker). */
void
CbllmRecordLatency(int metric, double seconds)
{
	CbllmHistogram *h = &cbllm_shared->latency[metric];
	int			b = Bucket(seconds);

	SpinLockAcquire(&cbllm_shared->info_lock);
	h->count++;
	h->sum_seconds += seconds;
	h->buckets[b]++;
	SpinLockRelease(&cbllm_shared->info_lock);
}

/* The q-quantile in seconds: the geometric middle of the bucket holding that rank. */
double
CbllmHistogramQuantile(const CbllmHistogram *h, double q)
{
	uint64		rank,
				seen = 0;

	if (h->count == 0)
		return 0;
	rank = (uint64) ceil(q * h->count);
	rank = rank < 1 ? 1 : rank;
	for (int b = 0; b < CBLLM_HIST_BUCKETS; b++)
	{
		seen += h->buckets[b];
		if (seen >= rank)
			return HIST_BASE * pow(HIST_RATIO, b + 0.5);
	}
	return HIST_BASE * pow(HIST_RATIO, CBLLM_HIST_BUCKETS);
}

/* cbllm_latency(): one row per metric (samples, mean, p50, p90, p99 in ms, since). */
Datum
cbllm_latency(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CbllmHistogram hist[CBLLM_N_LATENCY];
	TimestampTz since;

	CbllmCheckLoaded();
	InitMaterializedSRF(fcinfo, 0);
	SpinLockAcquire(&cbllm_shared->info_lock);
	memcpy(hist, cbllm_shared->latency, sizeof(hist));
	since = cbllm_shared->stats_reset_at;
	SpinLockRelease(&cbllm_shared->info_lock);
	for (int m = 0; m < CBLLM_N_LATENCY; m++)
	{
		Datum		v[7];
		bool		n[7] = {0};
		const CbllmHistogram *h = &hist[m];

		v[0] = CStringGetTextDatum(metric_names[m]);
		v[1] = Int64GetDatum((int64) h->count);
		v[2] = Float8GetDatum(h->count ? h->sum_seconds / h->count * 1e3 : 0);
		v[3] = Float8GetDatum(CbllmHistogramQuantile(h, 0.50) * 1e3);
		v[4] = Float8GetDatum(CbllmHistogramQuantile(h, 0.90) * 1e3);
		v[5] = Float8GetDatum(CbllmHistogramQuantile(h, 0.99) * 1e3);
		v[6] = TimestampTzGetDatum(since);
		n[2] = n[3] = n[4] = n[5] = h->count == 0;
		n[6] = since == 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
	}
	return (Datum) 0;
}

/* cbllm.reset_stats(): clear the latency histograms. */
Datum
cbllm_reset_stats(PG_FUNCTION_ARGS)
{
	CbllmCheckLoaded();
	SpinLockAcquire(&cbllm_shared->info_lock);
	memset(cbllm_shared->latency, 0, sizeof(cbllm_shared->latency));
	cbllm_shared->stats_reset_at = GetCurrentTimestamp();
	SpinLockRelease(&cbllm_shared->info_lock);
	PG_RETURN_VOID();
}
