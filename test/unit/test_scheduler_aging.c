/*
 * test_scheduler_aging.c: priority aging against a flood, on a generated
 * tiny model: a low-priority request that a stream of high-priority ones
 * would starve is admitted once it has waited long enough, keeps its seat
 * once admitted, and the aging parameter is checked.  The engines run on
 * sched_engine.h's injected clock, which these tests move.
 *
 * usage: test_scheduler_aging MODEL_DIR
 */
#include "sched_engine.h"

#define FLOOD_MAX 1024
#define PRIO_H 10				/* the flood */
#define PRIO_L 0				/* the one request it would starve */

/* A stream of high-priority requests kept waiting at a fixed depth. */
typedef struct flood
{
	cbllm_engine *e;
	int64_t		ids[FLOOD_MAX];	/* submitted requests; 0 once finished */
	cbllm_phase phase[FLOOD_MAX];	/* phase at the last take */
	int			n;
	int			n_done;
	int			prompt_len;
	int			gen;
} flood;

/* Submit flood requests until `depth` of them wait for admission. */
static void
FloodTopUp(flood *f, int depth)
{
	int			waiting = 0;

	for (int k = 0; k < f->n; k++)
		waiting += f->ids[k] != 0 && f->phase[k] == CBLLM_PHASE_QUEUED;
	for (; waiting < depth && f->n < FLOOD_MAX; waiting++)
	{
		int32_t		ids[64];
		cbllm_request_input in = {.ids = ids, .n_ids = f->prompt_len};
		cbllm_sampling sp = cbllm_sampling_default();

		for (int i = 0; i < f->prompt_len; i++)
			ids[i] = SeedToken(5000 + f->n, i);
		sp.max_tokens = f->gen;
		sp.ignore_eos = true;
		sp.priority = PRIO_H;
		f->phase[f->n] = CBLLM_PHASE_QUEUED;
		if (cbllm_engine_submit(f->e, &in, &sp, &f->ids[f->n], NULL) != CBLLM_OK)
			f->ids[f->n] = 0;
		f->n++;
	}
}

/* Take every live flood request's output; count the finished ones. */
static void
FloodTake(flood *f)
{
	for (int k = 0; k < f->n; k++)
	{
		cbllm_output o;

		if (f->ids[k] == 0 || cbllm_engine_take(f->e, f->ids[k], &o, NULL) != CBLLM_OK)
			continue;
		f->phase[k] = o.phase;
		if (o.finish != CBLLM_FINISH_NONE)
		{
			f->ids[k] = 0;
			f->n_done++;
		}
	}
}

/* Submit the low-priority request at the current test_now; its id. */
static int64_t
SubmitLow(cbllm_engine *e, int prompt_len, int gen)
{
	int32_t		ids[64];
	cbllm_request_input in = {.ids = ids, .n_ids = prompt_len};
	cbllm_sampling sp = cbllm_sampling_default();
	int64_t		id = 0;

	for (int i = 0; i < prompt_len; i++)
		ids[i] = SeedToken(4242, i);
	sp.max_tokens = gen;
	sp.ignore_eos = true;
	sp.priority = PRIO_L;
	cbllm_engine_submit(e, &in, &sp, &id, NULL);
	return id;
}

#define FL_SEATS 2				/* max_num_seqs of the flood test */
#define FL_DEPTH 4				/* flood requests kept waiting */
#define FL_GEN_H 6
#define FL_GEN_L 4

/*
 * One flood run at the given aging rate, one clock second per step: the low
 * request is submitted first, then the flood keeps FL_DEPTH requests waiting
 * for up to `steps` steps.  Returns the step at which the low request
 * finished, or -1; *flood_done is how many flood requests finished.
 */
static int
RunFlood(double aging, int steps, int *flood_done)
{
	cbllm_engine_params p = Params(FL_SEATS, 256, 0, CBLLM_PREEMPT_RECOMPUTE, 0, true, CBLLM_BATCH_CONTINUOUS);
	flood	   *f = calloc(1, sizeof(flood));
	int64_t		low;
	int			done = -1;

	p.priority_aging = aging;
	test_now = 0;
	f->e = Create(&p);
	f->prompt_len = 8;
	f->gen = FL_GEN_H;
	if (f->e == NULL)
	{
		free(f);
		return -1;
	}
	low = SubmitLow(f->e, 8, FL_GEN_L);
	for (int s = 0; s < steps && done < 0; s++)
	{
		cbllm_output o;

		test_now = s;
		FloodTopUp(f, FL_DEPTH);
		cbllm_engine_step(f->e, NULL, NULL);
		FloodTake(f);
		if (cbllm_engine_take(f->e, low, &o, NULL) == CBLLM_OK && o.finish != CBLLM_FINISH_NONE)
			done = s;
	}
	*flood_done = f->n_done;
	cbllm_engine_destroy(f->e);
	free(f);
	test_now = 1000.0;
	return done;
}

/*
 * A continuous flood of priority-10 requests that keeps the engine full:
 * with aging, a priority-0 request finishes within a bound computed from the
 * rate; with aging off it is still waiting after three times that bound.
 */
static void
TestAgingEndsStarvation(void)
{
	const struct
	{
		const char *name;
		double		param;		/* priority_aging as passed */
		double		rate;		/* points per second it means */
	}			rates[] = {{"the default rate (1 point/s)", 0, 1.0}, {"2 points/s", 2.0, 2.0}};
	int			worst = 0,
				flood_done,
				done;

	for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++)
	{
		/*
		 * From t* = (10 - 0) / rate seconds on, every new flood request ranks
		 * at or below the low one (ties go to the earlier arrival).  What is
		 * ahead of it then is at most the FL_SEATS running and FL_DEPTH
		 * waiting flood requests, served FL_SEATS at a time in rounds of at
		 * most FL_GEN_H steps (an 8-token prompt is one step, which samples
		 * the first token); then it needs FL_GEN_L steps, plus 2 for step
		 * boundaries.
		 */
		int			t_star = (int) ceil((PRIO_H - PRIO_L) / rates[k].rate);
		int			bound = t_star + FL_GEN_H * (1 + (FL_DEPTH + FL_SEATS - 1) / FL_SEATS) +
			FL_GEN_L + 2;

		done = RunFlood(rates[k].param, 3 * bound, &flood_done);
		TAP_OK(done >= 0 && done <= bound,
			   "aging at %s: the priority-0 request finishes at step %d, within the bound of %d steps, while %d flood requests finish",
			   rates[k].name, done, bound, flood_done);
		worst = bound > worst ? bound : worst;
	}
	done = RunFlood(CBLLM_PRIORITY_AGING_OFF, 3 * worst, &flood_done);
	TAP_OK(done < 0 && flood_done >= 3 * worst * FL_SEATS / FL_GEN_H / 2,
		   "aging off: the priority-0 request is still waiting after %d steps (3 x the bound) while the flood keeps the engine full (%d finished)",
		   3 * worst, flood_done);
}

/*
 * A low-priority request that has aged runs with a small KV pool while a
 * fresh priority-10 flood arrives: with aging the flood never preempts it
 * (every later arrival ranks below it); with aging off it is preempted.
 */
static void
TestAgedRequestKeepsItsSeat(void)
{
	for (int on = 1; on >= 0; on--)
	{
		cbllm_engine_params p = Params(4, 256, 16, CBLLM_PREEMPT_RECOMPUTE, 0, true, CBLLM_BATCH_CONTINUOUS);
		flood	   *f = calloc(1, sizeof(flood));
		cbllm_stats st;
		int64_t		low;
		int			n_preempted = 0;
		bool		finished = false;

		p.priority_aging = on ? 0 : CBLLM_PRIORITY_AGING_OFF;
		test_now = 0;
		f->e = Create(&p);
		f->prompt_len = 8;
		f->gen = 8;
		if (f->e == NULL)
		{
			free(f);
			return;
		}
		low = SubmitLow(f->e, 16, 44);	/* 15 of the 16 blocks at its end: no room left beside it */
		for (int s = 0; s < 300 && !finished; s++)
		{
			cbllm_output o;

			test_now = s < 3 ? s : 100 + s;	/* it runs, then 100 s pass: it has aged 100 points */
			if (s >= 3)
				FloodTopUp(f, 2);
			cbllm_engine_step(f->e, NULL, NULL);
			FloodTake(f);
			if (cbllm_engine_take(f->e, low, &o, NULL) != CBLLM_OK)
				break;
			n_preempted = o.n_preemptions;
			finished = o.finish != CBLLM_FINISH_NONE;
		}
		cbllm_engine_stats(f->e, &st);
		if (on)
			TAP_OK(n_preempted == 0 && finished && f->n_done > 0 && st.preemptions > 0,
				   "aging on: the aged request is never preempted by the later flood and finishes, while flood requests preempt each other (%lld preemptions, %d flood requests done)",
				   (long long) st.preemptions, f->n_done);
		else
			TAP_OK(n_preempted > 0, "aging off: the same flood preempts it (%d times)", n_preempted);
		cbllm_engine_destroy(f->e);
		free(f);
		test_now = 1000.0;
	}
}

/* priority_aging must be finite. */
static void
TestAgingParamChecked(void)
{
	cbllm_engine_params p = Params(4, 256, 0, CBLLM_PREEMPT_AUTO, 0, true, CBLLM_BATCH_CONTINUOUS);
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.priority_aging = NAN;
	TAP_OK(cbllm_engine_create(&p, &e, &err) == CBLLM_ERR_INVALID && e == NULL,
		   "priority_aging NaN is refused: %s", err.msg);
}

int
main(int argc, char **argv)
{
	if (argc < 2)
	{
		fprintf(stderr, "usage: test_scheduler_aging MODEL_DIR\n");
		return 2;
	}
	if (!LoadVocab(argv[1]))
		return tap_done();
	TestAgingEndsStarvation();
	TestAgedRequestKeepsItsSeat();
	TestAgingParamChecked();
	return tap_done();
}
