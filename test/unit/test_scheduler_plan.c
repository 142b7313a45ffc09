/*
 * test_scheduler_plan.c: the scheduler's plan and update, with no model, no
 * backend and no engine: a real block manager, requests made here, and a
 * fake device whose "KV" is a tag per position (a hash of the sequence's
 * tokens up to it).  The harness executes each plan as the engine does
 * (swap copies in plan order, then the step's writes), and before a
 * sequence computes it checks that every position it would attend to holds
 * its own tag: a block handed out twice, a swap copied from the wrong place
 * or a prefix shared wrongly shows up as a wrong tag.
 *
 * What the tests prove: the token and sequence budgets, chunked prefill
 * beside decodes, the stall-free prefill cap (prompt tokens per step from
 * the step-time target and the measured costs, only while something
 * decodes), the preemption order (lowest rank, then latest arrival),
 * recompute against swap (and the fall-back when the swap area is full),
 * swapped requests resuming before later arrivals, no starvation (a victim
 * returns ahead of every later arrival; aging lifts a low priority above a
 * flood), sliding-window drops, prefix hits, requests that can never fit
 * reported rather than finished, a constrained workload that completes
 * with every block back, and longrope's per-sequence factor set (a tag
 * holds the set its position was computed in: a sequence that grows past
 * long_rope_from computes every position again, and the prefix cache never
 * mixes the sets).
 */
#include "sched_harness.h"

/* The token budget cuts the step's last prompt into a chunk; max_num_seqs caps the sequences. */
static void
TestTokenAndSequenceBudgets(void)
{
	harness    *h;
	const sched_plan *p;

	if ((h = Init(Limits(4, 16), 64, 0, 0, false)) != NULL)
	{
		for (int k = 0; k < 6; k++)
			Submit(h, 10, 0, 4, k);
		p = Step(h);
		TAP_OK(p->n_seqs == 2 && p->n_tokens == 16 && p->seqs[0].n_tokens == 10 &&
			   p->seqs[1].n_tokens == 6,
			   "a 16-token budget takes the first 10-token prompt whole and 6 tokens of the second (%d seqs, %d tokens)",
			   p->n_seqs, p->n_tokens);
		TAP_OK(p->seqs[0].sample && !p->seqs[1].sample,
			   "the whole prompt samples its first token; the chunk does not");
		TAP_OK(h->req[1]->n_computed == 6 && h->req[1]->table.n == 2 && h->req[2]->table.n == 0,
			   "the update records the chunk's 6 positions; blocks are taken only for the step's tokens");
	}
	Done();
	if ((h = Init(Limits(4, 100), 64, 0, 0, false)) != NULL)
	{
		for (int k = 0; k < 6; k++)
			Submit(h, 2, 0, 4, k);
		p = Step(h);
		TAP_OK(p->n_seqs == 4 && h->running.n == 4 && h->waiting.n == 2,
			   "with max_num_seqs 4, 4 of 6 small requests run and 2 wait, whatever the token budget");
		TAP_OK(RunAll(h, 100) && h->memory_ok && AllFree(h),
			   "the six complete, reading only their own KV, and every block is free after");
	}
	Done();
}

/* A long prompt is prefilled in chunks while a running request decodes a token in every step. */
static void
TestChunkedPrefillBesideDecode(void)
{
	harness    *h;
	int			a,
				b,
				steps = 0;
	bool		decode_every_step = true;

	if ((h = Init(Limits(4, 8), 64, 0, 0, false)) != NULL)
	{
		a = Submit(h, 4, 0, 40, 1);
		Step(h);				/* a's prompt */
		b = Submit(h, 40, 0, 2, 2);
		while (h->req[b]->n_computed < 40 && steps < 20)
		{
			int			before = h->req[a]->n_tokens;
			const sched_plan *p = Step(h);

			decode_every_step = decode_every_step && h->req[a]->n_tokens == before + 1 &&
				p->seqs[0].req == h->req[a] && p->seqs[0].n_tokens == 1 && p->n_tokens <= 8;
			steps++;
		}
		TAP_OK(steps == 6 && decode_every_step,
			   "a 40-token prompt under an 8-token budget takes 6 steps of 7 tokens or fewer, and the running request decodes one token in each (%d steps)",
			   steps);
		TAP_OK(RunAll(h, 100) && h->memory_ok && AllFree(h), "both complete with their own KV, nothing held");
	}
	Done();
}

/*
 * With the costs given (decode step, prompt token) and the target, a
 * request decoding and a 300-token prompt then a 100-token one queued:
 * the prompt tokens of the step after a's prefill, and whether a decoded
 * in every step until both prompts were done (each sampled a token; at
 * most 40 steps).
 */
static int
CappedStep(double target, double dec, double per_token, bool decoding, bool *every, int *steps)
{
	sched_limits lim = Limits(8, 2048);
	harness    *h;
	int			a = -1,
				b,
				c,
				first = -1;

	lim.max_step_sec = target;
	*every = true;
	*steps = 0;
	if ((h = Init(lim, 128, 0, 0, false)) == NULL)
		return -1;
	h->s.sec_decode_step = dec;
	h->s.sec_per_prefill_token = per_token;
	if (decoding)
	{
		a = Submit(h, 4, 0, 200, 1);
		Step(h);
	}
	b = Submit(h, 300, 0, 2, 2);
	c = Submit(h, 100, 0, 2, 3);
	while ((h->req[b]->n_tokens == 300 || h->req[c]->n_tokens == 100) && *steps < 40)
	{
		int			before = a >= 0 ? h->req[a]->n_tokens : 0;
		const sched_plan *p = Step(h);
		int			pre = 0;

		for (int i = 0; i < p->n_seqs; i++)
			pre += p->seqs[i].n_tokens > 1 ? p->seqs[i].n_tokens : 0;
		first = first < 0 ? pre : first;
		*every = *every && (a < 0 || h->req[a]->n_tokens == before + 1);
		(*steps)++;
	}
	*every = *every && RunAll(h, 400) && h->memory_ok && AllFree(h);
	Done();
	return first;
}

/* The stall-free cap: prompt tokens per step from the target and the costs, only while something decodes. */
static void
TestStallFreePrefill(void)
{
	bool		every;
	int			steps,
				first;

	first = CappedStep(SCHED_STEP_AUTO, 0.010, 0.0002, true, &every, &steps);
	TAP_OK(first == 50 && steps == 8 && every,
		   "auto target (twice a 10 ms decode step), 0.2 ms a prompt token: 50 prompt tokens a step, "
		   "400 in 8 steps, the decoding request gets a token in each (first %d, %d steps)", first, steps);
	first = CappedStep(SCHED_STEP_AUTO, 0, 0.0002, true, &every, &steps);
	TAP_OK(first == 400 && steps == 1 && every,
		   "auto target before any decode step was measured: the whole budget (first %d, %d steps)",
		   first, steps);
	first = CappedStep(SCHED_STEP_AUTO, 0.010, 0.0002, false, &every, &steps);
	TAP_OK(first == 400 && steps == 1 && every,
		   "nothing decoding: both prompts in one step, the cap does not apply (first %d, %d steps)",
		   first, steps);
	first = CappedStep(0.012, 0.010, 0.0002, true, &every, &steps);
	TAP_OK(first == SCHED_MIN_PREFILL && every,
		   "a 12 ms target over a 10 ms decode step: the floor of %d prompt tokens a step, so prompts "
		   "still progress (first %d)", SCHED_MIN_PREFILL, first);
	first = CappedStep(0, 0.010, 0.0002, true, &every, &steps);
	TAP_OK(first == 400 && steps == 1 && every,
		   "target 0 (off): the token budget alone (first %d, %d steps)", first, steps);
}

/*
 * Three 8-token requests fill a 6-block pool; the next step needs a block
 * each.  Returns the plan of that step.
 */
static const sched_plan *
FillThenGrow(harness *h, double rank_a)
{
	Submit(h, 8, rank_a, 12, 1);	/* A */
	Submit(h, 8, 0, 12, 2);		/* B */
	Submit(h, 8, 0, 12, 3);		/* C */
	Step(h);
	return Step(h);
}

/* Victims go lowest rank first, then latest arrival: C, then B; the high-rank A never. */
static void
TestPreemptionOrder(void)
{
	harness    *h;
	const sched_plan *p;

	if ((h = Init(Limits(4, 64), 6, 0, 0, false)) != NULL)
	{
		p = FillThenGrow(h, 5);
		TAP_OK(p->n_preempted == 1 && p->preempted[0].req == h->req[2] && p->preempted[0].swap == -1,
			   "when A (rank 5), B and C (rank 0) each need a block of a full pool, C (rank 0, latest arrival) is preempted by recompute");
		TAP_OK(request_waiting(h->req[2]) && h->req[2]->n_computed == 0 &&
			   h->req[2]->table.n == 0 && h->req[2]->n_preemptions == 1 && h->waiting.head == h->req[2],
			   "the recomputed victim waits at the head of the queue with no block and nothing computed");
		TAP_OK(p->n_seqs == 2 && p->seqs[0].req == h->req[0] && p->seqs[1].req == h->req[1],
			   "A and B decode in that step");
		for (int s = 0; s < 4; s++)
			p = Step(h);
		TAP_OK(h->req[0]->n_preemptions == 0 && h->req[1]->n_preemptions == 1,
			   "when A and B outgrow the pool, B is the next victim and A is never preempted");
		TAP_OK(RunAll(h, 400) && h->memory_ok && AllFree(h),
			   "all three complete with their own KV and every block is free after");
	}
	Done();
}

/* Swap keeps the victim's computed positions and lists its copies; a full swap area falls back to recompute. */
static void
TestRecomputeVersusSwap(void)
{
	harness    *h;
	sched_limits lim = Limits(4, 64);
	const sched_plan *p;

	lim.preempt_mode = CBLLM_PREEMPT_SWAP;
	if ((h = Init(lim, 6, 8, 0, false)) != NULL)
	{
		p = FillThenGrow(h, 5);
		TAP_OK(p->n_preempted == 1 && p->preempted[0].swap == 0 && p->n_swaps == 1 &&
			   p->swaps[0].out && p->swaps[0].req == h->req[2] && p->swaps[0].n == 2,
			   "swap mode: the victim's 2 blocks are listed for copying out");
		TAP_OK(h->req[2]->table.swapped && h->req[2]->n_computed == 8 && h->req[2]->table.n == 0 &&
			   h->bm->n_swap_free == 6,
			   "the swapped victim keeps its 8 computed positions in 2 swap blocks and holds no pool block");
		TAP_OK(RunAll(h, 400) && h->memory_ok && h->n_swap_out > 0 && AllFree(h),
			   "swapped requests resume with the KV they left with (swapped %d times) and every block is free after",
			   h->n_swap_out);
	}
	Done();
	if ((h = Init(lim, 6, 1, 0, false)) != NULL)
	{
		p = FillThenGrow(h, 5);
		TAP_OK(p->n_preempted == 1 && p->preempted[0].swap == -1 && p->n_swaps == 0 &&
			   !h->req[2]->table.swapped && h->req[2]->n_computed == 0,
			   "swap mode with a 1-block swap area: the 2-block victim falls back to recompute");
	}
	Done();
	lim.preempt_mode = CBLLM_PREEMPT_AUTO;
	for (int fast = 0; fast < 2; fast++)
	{
		if ((h = Init(lim, 6, 8, 0, false)) != NULL)
		{
			h->s.swap_bytes_per_sec = fast ? 1e12 : 1.0;
			p = FillThenGrow(h, 5);
			TAP_OK(p->n_preempted == 1 && (p->preempted[0].swap >= 0) == (fast == 1),
				   "auto mode: a %s copy rate makes the victim %s", fast ? "fast" : "slow",
				   fast ? "swap" : "recompute");
		}
		Done();
	}
}

/* A swapped victim keeps its arrival: it resumes before a request that arrived after it. */
static void
TestSwapInBeforeNewAdmissions(void)
{
	harness    *h;
	sched_limits lim = Limits(4, 64);
	int			d;
	bool		d_waited = true;

	lim.preempt_mode = CBLLM_PREEMPT_SWAP;
	if ((h = Init(lim, 6, 8, 0, false)) != NULL)
	{
		FillThenGrow(h, 5);
		d = Submit(h, 4, 0, 2, 4);	/* D: small, arrives after the victim C */
		while (h->req[2]->table.swapped && h->step < 400)
		{
			Step(h);
			d_waited = d_waited && (h->first_step[d] < 0 || !h->req[2]->table.swapped);
		}
		TAP_OK(!h->req[2]->table.swapped && d_waited,
			   "the swapped victim C is swapped back in before D, which arrived later, is admitted, though D is smaller");
		TAP_OK(RunAll(h, 400) && h->memory_ok && AllFree(h), "all four complete, nothing held");
	}
	Done();
}

/* Preempted requests return ahead of every later arrival, under a steady stream of them. */
static void
TestVictimsAreNotStarved(void)
{
	harness    *h;
	bool		order_kept = true;

	if ((h = Init(Limits(3, 64), 10, 0, 0, false)) != NULL)
	{
		for (int k = 0; k < 3; k++)
			Submit(h, 6, 0, 12, k);
		for (int s = 0; s < 300 && h->n < MAXR; s++)
		{
			if (h->waiting.n < 3)
				Submit(h, 6, 0, 12, 100 + h->n);
			Step(h);
			/* no request is admitted for the first time while one that arrived earlier waits */
			for (int k = 0; k < h->n; k++)
				if (h->first_step[k] == h->step - 1)
					for (int j = 0; j < k; j++)
						if (request_waiting(h->req[j]))
							order_kept = false;
		}
		TAP_OK(order_kept, "while any request waits, no request that arrived after it is admitted first");
		TAP_OK(h->n_recompute > 0, "the stream kept the pool short: %d preemptions", h->n_recompute);
		TAP_OK(RunAll(h, 2000) && h->memory_ok && AllFree(h),
			   "every one of the %d requests completes with its own KV, nothing held", h->n);
	}
	Done();
}

/*
 * Priority aging as the engine ranks requests (priority - rate * t_submit):
 * a priority-0 request submitted first outranks every priority-10 arrival
 * after 10 s at 1 point/s, so it runs though the flood never stops.
 */
static void
TestAgingLiftsLowPriorityOverAFlood(void)
{
	harness    *h;
	int			low;

	if ((h = Init(Limits(2, 64), 64, 0, 0, false)) != NULL)
	{
		low = Submit(h, 8, 0 - 1.0 * 0, 4, 1);
		for (int s = 0; s < 60 && h->n < MAXR && h->done_step[low] < 0; s++)
		{
			while (h->waiting.n < 4 && h->n < MAXR)
				Submit(h, 8, 10 - 1.0 * s, 6, 100 + h->n);
			Step(h);
		}
		TAP_OK(h->done_step[low] >= 0 && h->done_step[low] <= 10 + 6 * 3 + 4 + 2,
			   "the priority-0 request finishes at step %d, within 10 s of aging and three rounds of the flood",
			   h->done_step[low]);
	}
	Done();
}

/* With a sliding window a long sequence holds only the blocks the window can see. */
static void
TestWindowDropsBlocks(void)
{
	harness    *h;
	int			worst = 0,
				a;

	if ((h = Init(Limits(2, 64), 8, 0, 8, false)) != NULL)
	{
		a = Submit(h, 6, 0, 50, 1);	/* 56 positions: 14 blocks, in a pool of 8 */
		while (h->req[a]->state != REQ_FINISHED && h->step < 200)
		{
			const block_table *t = &h->req[a]->table;

			Step(h);
			if (t->n - t->n_dropped > worst)
				worst = t->n - t->n_dropped;
		}
		TAP_OK(h->why[a] == CBLLM_FINISH_LENGTH && h->n_recompute == 0 && h->memory_ok,
			   "a 56-position sequence with window 8 runs to its end in an 8-block pool, without preemption, always seeing its window");
		TAP_OK(worst <= 8 / BS + 2, "it never holds more than %d live blocks (at most %d)", worst,
			   8 / BS + 2);
		TAP_OK(AllFree(h), "every block is free after");
	}
	Done();
}

/* A prompt whose full blocks are cached computes only the rest; the last token always. */
static void
TestPrefixHitsSkipPrefill(void)
{
	harness    *h;
	const sched_plan *p;
	int			b,
				c;

	if ((h = Init(Limits(4, 64), 32, 0, 0, true)) != NULL)
	{
		Submit(h, 13, 0, 2, 7);
		RunAll(h, 50);
		b = Submit(h, 13, 0, 2, 7);	/* the same 13 tokens */
		p = Step(h);
		TAP_OK(p->n_seqs == 1 && p->seqs[0].n_tokens == 1 && h->bm->prefix_hits == 3,
			   "the same 13-token prompt again hits its 3 cached full blocks and computes 1 token (%d)",
			   p->seqs[0].n_tokens);
		RunAll(h, 50);
		c = Submit(h, 16, 0, 2, 7);	/* shares 13 tokens: 3 full blocks */
		p = Step(h);
		TAP_OK(p->seqs[0].n_tokens == 4 && h->bm->prefix_hits == 6,
			   "a 16-token prompt sharing those 13 tokens reuses the 3 blocks and computes its last 4");
		TAP_OK(RunAll(h, 50) && h->memory_ok && h->why[b] == CBLLM_FINISH_LENGTH &&
			   h->why[c] == CBLLM_FINISH_LENGTH && AllFree(h),
			   "shared blocks hold the right KV for each and nothing is held after");
	}
	Done();
}

/* A request that can never fit the pool is reported in the plan; the scheduler does not finish it. */
static void
TestNeverFitReportedNotFinished(void)
{
	harness    *h;
	const sched_plan *p;
	int			a,
				b;

	if ((h = Init(Limits(4, 64), 4, 0, 0, false)) != NULL)
	{
		a = Submit(h, 6, 0, 20, 1);	/* grows past 16 positions: more than the pool */
		for (int s = 0; s < 40 && h->done_step[a] < 0; s++)
			p = Step(h);
		TAP_OK(h->done_step[a] >= 0 && h->why[a] == CBLLM_FINISH_LENGTH && h->n_never_fit == 1 &&
			   h->req[a]->n_tokens == 17,
			   "a lone request that outgrows the 4-block pool is reported as ending by length once its 16 positions are computed");
		TAP_OK(h->req[a]->state == REQ_FINISHED && h->running.n == 0 && AllFree(h),
			   "it is out of the queues with its blocks back (its finish is the engine's: the scheduler's record has none)");
		b = Submit(h, 15, 0, 2, 2);
		h->req[b]->tokens[15] = 5;
		h->req[b]->n_tokens = 16;	/* as if preempted after generating: 17 positions */
		p = Step(h);
		TAP_OK(p->n_finished == 1 && p->finished[0].req == h->req[b] && p->n_seqs == 0 &&
			   h->waiting.n == 0,
			   "a waiting request needing more than the pool is reported, not scheduled");
	}
	Done();
}

/* A constrained workload completes in every preemption mode, each sequence reading only its own KV. */
static void
TestConstrainedWorkloadCompletes(void)
{
	const preempt_case *modes = PREEMPT_CASES;
	harness    *h;
	int			need = 0;

	for (int k = 0; k < 8; k++)
		need += (10 + 3 * k + 12 + BS - 1) / BS;
	for (int m = 0; m < N_PREEMPT_CASES; m++)
	{
		sched_limits lim = Limits(8, 32);

		lim.preempt_mode = modes[m].mode;
		if ((h = Init(lim, 20, modes[m].n_swap, 0, modes[m].prefix)) != NULL)
		{
			for (int k = 0; k < 8; k++)
				Submit(h, 10 + 3 * k, k % 3, 12, k % 2);	/* two families of shared prompts */
			TAP_OK(RunAll(h, 2000) && h->memory_ok,
				   "%s: 8 requests needing %d blocks complete in a 20-block pool, each reading its own KV",
				   modes[m].name, need);
			TAP_OK(h->n_swap_out + h->n_recompute > 0 &&
				   (modes[m].mode != CBLLM_PREEMPT_RECOMPUTE || h->n_swap_out == 0),
				   "%s: requests were preempted (%d by swap, %d by recompute)", modes[m].name,
				   h->n_swap_out, h->n_recompute);
			TAP_OK(AllFree(h), "%s: every KV and swap block is free at the end", modes[m].name);
		}
		Done();
	}
}

/*
 * A sequence that grows past long_rope_from gives back its blocks and,
 * still running, computes every position again, its generated tokens
 * included, in the long set; a prompt longer than it starts in the long
 * set; a sequence that stays short keeps the short one; in every preemption
 * mode, and beside prefix-cached blocks of the same tokens in the other set.
 */
static void
TestLongRopeSwitch(void)
{
	for (int c = 0; c < N_PREEMPT_CASES; c++)
	{
		const preempt_case *pc = &PREEMPT_CASES[c];
		sched_limits lim = Limits(4, 8);
		harness    *h;
		int			a,
					b,
					d,
					redo = 0;

		lim.preempt_mode = pc->mode;
		lim.long_rope_from = 10;
		if ((h = Init(lim, 12, pc->n_swap, 0, pc->prefix)) == NULL)
			continue;
		a = Submit(h, 6, 0, 12, 3);	/* 6 + 12 tokens: long from its 11th */
		b = Submit(h, 14, 0, 4, 3);	/* shares a's first 6 tokens, long throughout */
		d = Submit(h, 6, 0, 3, 3);	/* a's prompt, 9 tokens at most: short throughout */
		for (int s = 0; s < 200 && (h->waiting.n > 0 || h->running.n > 0); s++)
		{
			const sched_plan *p = Step(h);

			for (int i = 0; i < p->n_seqs; i++)
				redo += p->seqs[i].req == h->req[a] && p->seqs[i].start == 0 &&
					h->req[a]->n_tokens > h->req[a]->n_prompt;
		}
		TAP_OK(h->waiting.n == 0 && h->running.n == 0 && h->memory_ok &&
			   h->why[a] == CBLLM_FINISH_LENGTH && h->why[b] == CBLLM_FINISH_LENGTH &&
			   h->why[d] == CBLLM_FINISH_LENGTH && redo > 0 && h->req[a]->rope_set == 1 &&
			   h->req[b]->rope_set == 1 && h->req[d]->rope_set == 0 && AllFree(h),
			   "%s: the sequence growing past 10 recomputes from position 0 in the long set (%d), the long prompt starts in it, the short one stays short, every position read holds its set's KV",
			   pc->name, redo);
		Done();
	}
}

int
main(void)
{
	TestTokenAndSequenceBudgets();
	TestChunkedPrefillBesideDecode();
	TestStallFreePrefill();
	TestPreemptionOrder();
	TestRecomputeVersusSwap();
	TestSwapInBeforeNewAdmissions();
	TestVictimsAreNotStarved();
	TestAgingLiftsLowPriorityOverAFlood();
	TestWindowDropsBlocks();
	TestPrefixHitsSkipPrefill();
	TestNeverFitReportedNotFinished();
	TestConstrainedWorkloadCompletes();
	TestLongRopeSwitch();
	return tap_done();
}
