/*
 * test_scheduler_fair.c: fair shares between tenants (scheduler.c, "Fair
 * share"), on the scheduler harness (sched_harness.h: no model, a fake
 * device that checks every sequence reads only its own KV).
 *
 * What the tests prove: a tenant's short request arriving while another
 * tenant's flood holds every running sequence runs in the next step and
 * ends within twice its unloaded steps plus one, taking only the sequences
 * it needs; two floods settle at equal shares and both progress; a late
 * tenant's short prompt goes first for the step's prompt budget; a
 * tenant's priority preempts only its own requests; blocks taken for
 * fairness or for growth never come from a request already in the plan
 * (every workload completes, each sequence reading its own KV, every
 * block back); and one tenant alone is planned exactly as without tenants.
 */
#include "sched_harness.h"

/* Queue a request of tenant (see Submit); its index. */
static int
SubmitAs(harness *h, uint64_t tenant, int n_prompt, double rank, int gen, int seed)
{
	int			k = Submit(h, n_prompt, rank, gen, seed);

	h->req[k]->tenant = tenant;
	return k;
}

/* Running requests of tenant. */
static int
RunningOf(const harness *h, uint64_t tenant)
{
	int			n = 0;

	for (const cbllm_request *r = h->running.head; r != NULL; r = r->next)
		n += r->tenant == tenant;
	return n;
}

/* Steps a 4-token prompt generating 4 tokens takes alone, in a fresh harness. */
static int
UnloadedSteps(void)
{
	harness    *h;
	int			k,
				steps = -1;

	if ((h = Init(Limits(8, 64), 128, 0, 0, false)) != NULL)
	{
		k = SubmitAs(h, 2, 4, 0, 4, 1);
		RunAll(h, 100);
		steps = h->done_step[k] + 1;
	}
	Done();
	return steps;
}

/*
 * Tenant 1 fills every running sequence with long requests and queues as
 * many more; tenant 2's short request runs at once and ends within twice
 * its unloaded steps plus one.
 */
static void
TestShortRequestBesideAFlood(void)
{
	int			unloaded = UnloadedSteps();
	harness    *h;
	int			b,
				at;

	if ((h = Init(Limits(8, 64), 128, 0, 0, false)) != NULL)
	{
		for (int k = 0; k < 16; k++)
			SubmitAs(h, 1, 4, -k, 200, 10 + k);
		for (int s = 0; s < 5; s++)
			Step(h);
		TAP_OK(RunningOf(h, 1) == 8 && h->waiting.n == 8,
			   "the flood of tenant 1 holds all 8 running sequences and queues 8 more");
		at = h->step;
		b = SubmitAs(h, 2, 4, -100, 4, 99);	/* ranks below every request of the flood */
		Step(h);
		TAP_OK(h->first_step[b] == at, "tenant 2's request is in the very next step (step %d, submitted at %d)",
			   h->first_step[b], at);
		TAP_OK(RunningOf(h, 1) == 7 && h->n_recompute == 1,
			   "one request of the flood was preempted to make room, no more (%d running, %d preempted)",
			   RunningOf(h, 1), h->n_recompute);
		for (int s = 0; s < 20 && h->done_step[b] < 0; s++)
			Step(h);
		TAP_OK(h->done_step[b] >= 0 && h->done_step[b] - at + 1 <= 2 * unloaded + 1,
			   "it ends %d steps after it arrived; alone it takes %d (bound: twice that plus one)",
			   h->done_step[b] - at + 1, unloaded);
		Step(h);
		TAP_OK(RunningOf(h, 1) == 8, "once it ended, the flood takes its sequence back");
		TAP_OK(RunAll(h, 2000) && h->memory_ok && AllFree(h),
			   "everything completes, each sequence reading only its own KV, every block back");
	}
	Done();
}

/* Two tenants that both flood settle at equal shares, and both progress. */
static void
TestTwoFloodsShareEqually(void)
{
	harness    *h;
	bool		equal = true;
	int			a_done = 0,
				b_done = 0;

	if ((h = Init(Limits(8, 64), 128, 0, 0, false)) != NULL)
	{
		for (int k = 0; k < 20; k++)
			SubmitAs(h, 1, 4, -k, 30, 10 + k);
		Step(h);
		for (int k = 0; k < 20; k++)
			SubmitAs(h, 2, 4, -100 - k, 30, 40 + k);
		for (int s = 0; s < 60; s++)
		{
			const sched_plan *p = Step(h);
			int			in_plan[3] = {0, 0, 0};

			for (int i = 0; i < p->n_seqs; i++)
				in_plan[p->seqs[i].req->tenant]++;
			if (in_plan[1] != 4 || in_plan[2] != 4)
				equal = false;
		}
		for (int k = 0; k < h->n; k++)
		{
			a_done += h->done_step[k] >= 0 && h->req[k]->tenant == 1;
			b_done += h->done_step[k] >= 0 && h->req[k]->tenant == 2;
		}
		TAP_OK(equal, "while both have work, every step runs 4 sequences of each tenant");
		TAP_OK(a_done >= 4 && b_done >= 4, "both progress: %d and %d requests done in 60 steps",
			   a_done, b_done);
		TAP_OK(RunAll(h, 2000) && h->memory_ok && AllFree(h), "both floods complete; every block is back");
	}
	Done();
}

/*
 * Prompt work in turn: tenant 1's four long prompts are prefilling in
 * 16-token steps when tenant 2's 4-token prompt arrives; it is computed in
 * the next step, ahead of the chunks of the tenant running more.
 */
static void
TestShortPromptGoesFirstForPromptWork(void)
{
	harness    *h;
	const sched_plan *p;
	int			b;

	if ((h = Init(Limits(8, 16), 128, 0, 0, false)) != NULL)
	{
		for (int k = 0; k < 4; k++)
			SubmitAs(h, 1, 60, -k, 4, 10 + k);
		Step(h);
		Step(h);
		b = SubmitAs(h, 2, 4, -100, 4, 99);
		p = Step(h);
		TAP_OK(p->n_seqs >= 1 && p->seqs[0].req == h->req[b] && p->seqs[0].n_tokens == 4 &&
			   p->seqs[0].sample,
			   "the late tenant's whole prompt goes first in the 16-token step and samples its first token");
		TAP_OK(RunAll(h, 500) && h->memory_ok && AllFree(h), "all complete; every block is back");
	}
	Done();
}

/*
 * Priority orders a tenant's own requests: tenant 1's high-priority request,
 * waiting for blocks, preempts tenant 1's own low-ranked request and none
 * of tenant 2's.
 */
static void
TestPriorityPreemptsOnlyItsOwnTenant(void)
{
	harness    *h;
	int			a_low,
				b1,
				b2,
				hi;

	/* 12 blocks of 4: three 15-token prompts fill them, and their next token still fits */
	if ((h = Init(Limits(8, 64), 12, 0, 0, false)) != NULL)
	{
		a_low = SubmitAs(h, 1, 15, -10, 100, 1);
		b1 = SubmitAs(h, 2, 15, -20, 100, 2);
		b2 = SubmitAs(h, 2, 15, -30, 100, 3);
		Step(h);
		TAP_OK(request_running(h->req[a_low]) && request_running(h->req[b1]) &&
			   request_running(h->req[b2]), "three requests, one of tenant 1 and two of tenant 2, run");
		hi = SubmitAs(h, 1, 15, 1000, 4, 4);	/* outranks everything */
		Step(h);
		TAP_OK(!request_waiting(h->req[hi]) && request_waiting(h->req[a_low]),
			   "tenant 1's high-priority request runs in its own low-ranked request's place");
		TAP_OK(request_running(h->req[b1]) && request_running(h->req[b2]),
			   "tenant 2's requests, within their share, keep running");
		TAP_OK(RunAll(h, 3000) && h->memory_ok && AllFree(h),
			   "all complete in the tight pool, each reading its own KV, every block back");
	}
	Done();
}

/* Tight pools with three tenants complete in each preemption mode. */
static void
TestTightPoolsComplete(void)
{
	const preempt_case *modes = PREEMPT_CASES;

	for (int m = 0; m < N_PREEMPT_CASES; m++)
	{
		sched_limits lim = Limits(6, 24);
		harness    *h;

		lim.preempt_mode = modes[m].mode;
		if ((h = Init(lim, 16, modes[m].n_swap, 0, modes[m].prefix)) != NULL)
		{
			for (int k = 0; k < 18; k++)
			{
				SubmitAs(h, 1 + k % 3, 5 + 2 * (k % 4), -k, 6 + k % 5, k % 2);
				if (k % 4 == 3)
					Step(h);
			}
			TAP_OK(RunAll(h, 5000) && h->memory_ok && AllFree(h),
				   "%s: 18 requests of 3 tenants complete in a 16-block pool, each reading its own KV, every block back (%d preempted)",
				   modes[m].name, h->n_recompute + h->n_swap_out);
		}
		Done();
	}
}

/* One tenant alone (any id) is planned as requests without tenants are. */
static void
TestOneTenantPlansAsBefore(void)
{
	int			first[2][24],
				done[2][24];
	harness    *h;

	for (int pass = 0; pass < 2; pass++)
	{
		if ((h = Init(Limits(4, 20), 12, 0, 0, false)) != NULL)
		{
			for (int k = 0; k < 24; k++)
				SubmitAs(h, pass == 0 ? 0 : 77, 3 + k % 7, -(k % 3), 2 + k % 6, k % 2);
			RunAll(h, 3000);
			memcpy(first[pass], h->first_step, sizeof(first[pass]));
			memcpy(done[pass], h->done_step, sizeof(done[pass]));
		}
		Done();
	}
	TAP_OK(memcmp(first[0], first[1], sizeof(first[0])) == 0 &&
		   memcmp(done[0], done[1], sizeof(done[0])) == 0,
		   "24 requests of tenant 77 start and end at the same steps as with tenant 0");
}

int
main(void)
{
	TestShortRequestBesideAFlood();
	TestTwoFloodsShareEqually();
	TestShortPromptGoesFirstForPromptWork();
	TestPriorityPreemptsOnlyItsOwnTenant();
	TestTightPoolsComplete();
	TestOneTenantPlansAsBefore();
	return tap_done();
}
