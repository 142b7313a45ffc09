/*
 * batch_exec.c: the batching node at run time (batch.h says what it is;
 * batch_plan.c puts it in plans).
 *
 * A batch: up to cbllm.batch_rows rows from the child (fewer under a LIMIT's
 * bound), copied into the batch's memory.  Wave by wave, every row's calls
 * of that wave have their arguments evaluated and their requests prepared
 * exactly as the functions themselves would (CbllmPrepareCall: the same
 * checks, the same errors); the requests of all but the last wave are
 * submitted and answered before the next wave's arguments are evaluated.
 * The last wave's requests are submitted as the session's request slots
 * allow, and the rows go out in order, each once its results are in (while
 * the later ones keep generating); a row the filter refuses is skipped.  A
 * NULL input gives NULL without a request, as the functions do.
 *
 * When the node stops early (LIMIT, a cursor closed, a rescan) the requests
 * still running are cancelled; on an error or a cancel the transaction's
 * end cancels them (client.c).
 */
#include "cbllm_pg.h"

#include "executor/executor.h"
#include "executor/nodeCustom.h"
#include "commands/explain.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "batch.h"

/* One batched call of the plan. */
typedef struct BatchCall
{
	const CbllmBatchForm *form;
	FuncExpr   *expr;
	int			wave;
	int			nargs;
	ExprState **args;			/* (nargs) over the scan tuple */
	FmgrInfo	flinfo;
} BatchCall;

/* Where a (row, call) stands. */
typedef enum CallState
{
	CALL_NONE = 0,				/* arguments not evaluated yet */
	CALL_NULL,					/* a NULL input: NULL, no request */
	CALL_READY,					/* prepared, not submitted */
	CALL_SUBMITTED,
	CALL_DONE					/* its value is in the row */
} CallState;

typedef struct BatchState
{
	CustomScanState css;
	PlanState  *child;
	int			n_leaves;
	int			n_calls;
	int			n_waves;
	BatchCall  *calls;
	List	   *row_by_row;		/* (String) for EXPLAIN */
	int			bound;			/* rows a LIMIT above takes (-1: no bound) */
	int			batch_rows;		/* rows a batch takes */

	/* the current batch, in batch_cxt */
	MemoryContext batch_cxt;
	int			n_rows;
	int			next_row;		/* the next row to return */
	int			next_submit;	/* the next (row, last-wave call) to submit, row-major */
	Datum	   *values;			/* (n_rows, n_leaves + n_calls) */
	bool	   *nulls;
	CallState  *state;			/* (n_rows, n_calls) */
	CbllmRequestArgs *reqs;		/* (n_rows, n_calls) */
	CbllmHandle *handles;		/* (n_rows, n_calls) */
	bool		child_done;
	int64		returned;		/* rows returned since the start (or rescan) */

	/* for EXPLAIN ANALYZE */
	int64		n_batches;
	int64		n_requests;
	int64		prompt_tokens;
	int64		completion_tokens;
} BatchState;

static Node *CreateBatchState(CustomScan *cscan);

const CustomScanMethods cbllm_batch_scan_methods = {
	.CustomName = CBLLM_BATCH_NAME,
	.CreateCustomScanState = CreateBatchState,
};

/* The (row, call) index of the batch's arrays. */
static inline int
At(const BatchState *b, int row, int call)
{
	return row * b->n_calls + call;
}

/* Set up the calls' argument states and the child. */
static void
BeginBatch(CustomScanState *node, EState *estate, int eflags)
{
	BatchState *b = (BatchState *) node;
	CustomScan *cs = (CustomScan *) node->ss.ps.plan;
	List	   *waves = list_nth(cs->custom_private, BATCH_PRIV_WAVES);
	ListCell   *lc;

	b->child = ExecInitNode(linitial(cs->custom_plans), estate, eflags);
	node->custom_ps = list_make1(b->child);
	b->bound = intVal(list_nth(cs->custom_private, BATCH_PRIV_BOUND));
	b->n_leaves = intVal(list_nth(cs->custom_private, BATCH_PRIV_LEAVES));
	b->row_by_row = list_nth(cs->custom_private, BATCH_PRIV_ROW_BY_ROW);
	b->n_calls = list_length(cs->custom_exprs);
	b->calls = palloc0(sizeof(BatchCall) * Max(b->n_calls, 1));
	foreach(lc, cs->custom_exprs)
	{
		BatchCall  *c = &b->calls[foreach_current_index(lc)];
		ListCell   *a;

		c->expr = lfirst(lc);
		c->form = CbllmBatchFormOf(c->expr->funcid);
		if (c->form == NULL)
			elog(ERROR, "cbllm: function %u of a batch is not a generating form", c->expr->funcid);
		c->wave = list_nth_int(waves, foreach_current_index(lc));
		b->n_waves = Max(b->n_waves, c->wave);
		c->nargs = list_length(c->expr->args);
		c->args = palloc(sizeof(ExprState *) * Max(c->nargs, 1));
		foreach(a, c->expr->args)
			c->args[foreach_current_index(a)] = ExecInitExpr(lfirst(a), &node->ss.ps);
		fmgr_info(c->expr->funcid, &c->flinfo);
		fmgr_info_set_expr((Node *) c->expr, &c->flinfo);
	}
	b->batch_rows = cbllm_batch_rows > 0 ? cbllm_batch_rows :
		cbllm_batch_rows == 0 ? 1 : Max(cbllm_max_num_seqs * Max(cbllm_engines, 1), 1);
	b->batch_cxt = AllocSetContextCreate(CurrentMemoryContext, "cbllm batch",
										 ALLOCSET_DEFAULT_SIZES);
}

/* Cancel what the batch still has running and forget the batch. */
static void
DropBatch(BatchState *b)
{
	for (int i = 0; i < b->n_rows * b->n_calls; i++)
		if (b->state[i] == CALL_SUBMITTED)
			CbllmCancel(&b->handles[i]);
	b->n_rows = b->next_row = b->next_submit = 0;
	MemoryContextReset(b->batch_cxt);
}

/* The scan slot holding row r's leaves and results. */
static TupleTableSlot *
RowSlot(BatchState *b, int r)
{
	TupleTableSlot *slot = b->css.ss.ss_ScanTupleSlot;
	int			w = b->n_leaves + b->n_calls;

	ExecClearTuple(slot);
	memcpy(slot->tts_values, b->values + (size_t) r * w, sizeof(Datum) * w);
	memcpy(slot->tts_isnull, b->nulls + (size_t) r * w, sizeof(bool) * w);
	return ExecStoreVirtualTuple(slot);
}

/* Evaluate row r's arguments of call j and prepare its request (or note a NULL input). */
static void
PrepareCall(BatchState *b, int r, int j)
{
	BatchCall  *c = &b->calls[j];
	ExprContext *econtext = b->css.ss.ps.ps_ExprContext;
	LOCAL_FCINFO(fcinfo, FUNC_MAX_ARGS);

	InitFunctionCallInfoData(*fcinfo, &c->flinfo, c->nargs, c->expr->inputcollid, NULL, NULL);
	econtext->ecxt_scantuple = RowSlot(b, r);
	for (int i = 0; i < c->nargs; i++)
		fcinfo->args[i].value = ExecEvalExpr(c->args[i], econtext, &fcinfo->args[i].isnull);
	if (fcinfo->args[0].isnull)
	{
		b->state[At(b, r, j)] = CALL_NULL;
		return;
	}
	CbllmPrepareCall(fcinfo, c->form, &b->reqs[At(b, r, j)]);
	b->state[At(b, r, j)] = CALL_READY;
}

/* Submit request k (a (row, call) index); with wait, until a slot frees, else false when none is free. */
static bool
Submit(BatchState *b, int k, bool wait)
{
	CbllmHandle *h = &b->handles[k];

	memset(h, 0, sizeof(*h));
	h->slot = -1;
	if (!CbllmSubmit(&b->reqs[k], h, wait))
		return false;
	b->state[k] = CALL_SUBMITTED;
	b->n_requests++;
	return true;
}

/*
 * Submit wave's prepared requests in (row, call) order from where the last
 * submission stopped, as far as the session's request slots allow; request
 * k and those before it are submitted even if that means waiting for a slot
 * (the batch then holds none: every earlier one has been collected).
 */
static void
SubmitThrough(BatchState *b, int wave, int k)
{
	int			n = b->n_rows * b->n_calls;

	for (; b->next_submit < n; b->next_submit++)
	{
		int			i = b->next_submit;

		if (b->calls[i % b->n_calls].wave != wave || b->state[i] != CALL_READY)
			continue;
		if (!Submit(b, i, i <= k))
			break;
	}
}

/* Wait for request k and put its value in its row; a failure raises the function's error. */
static void
Collect(BatchState *b, int k)
{
	int			r = k / b->n_calls,
				j = k % b->n_calls,
				col = r * (b->n_leaves + b->n_calls) + b->n_leaves + j;
	StringInfoData buf;
	CbllmReadResult res;

	initStringInfo(&buf);
	CbllmCollectResult(&b->handles[k], &buf, NULL, &res);
	b->state[k] = CALL_DONE;
	b->prompt_tokens += res.progress.n_prompt;
	b->completion_tokens += res.progress.n_generated;
	b->values[col] = CbllmFormResult(b->calls[j].form, buf.data, buf.len);
	b->nulls[col] = false;
}

/* Request k of wave answered (submitting ahead of it what slots allow). */
static void
Answer(BatchState *b, int wave, int k)
{
	if (b->state[k] != CALL_READY && b->state[k] != CALL_SUBMITTED)
		return;
	SubmitThrough(b, wave, k);
	Collect(b, k);
}

/* Take the next batch of rows from the child and run every wave but the last; false when none is left. */
static bool
FillBatch(BatchState *b)
{
	int			want = b->batch_rows,
				w = b->n_leaves + b->n_calls;
	MemoryContext old;
	TupleDesc	desc = b->child->ps_ResultTupleDesc;

	DropBatch(b);
	if (b->child_done)
		return false;
	if (b->bound >= 0)
		want = (int) Min((int64) want, Max((int64) b->bound - b->returned, 1));
	old = MemoryContextSwitchTo(b->batch_cxt);
	b->values = palloc(sizeof(Datum) * want * w);
	b->nulls = palloc(sizeof(bool) * want * w);
	b->state = palloc0(sizeof(CallState) * Max(want * b->n_calls, 1));
	b->reqs = palloc0(sizeof(CbllmRequestArgs) * Max(want * b->n_calls, 1));
	b->handles = palloc0(sizeof(CbllmHandle) * Max(want * b->n_calls, 1));
	MemoryContextSwitchTo(old);
	while (b->n_rows < want)
	{
		/* in the query's context: the child may set up its scan on the first call */
		TupleTableSlot *slot = ExecProcNode(b->child);
		int			r = b->n_rows;

		if (TupIsNull(slot))
		{
			b->child_done = true;
			break;
		}
		slot_getallattrs(slot);
		MemoryContextSwitchTo(b->batch_cxt);
		for (int i = 0; i < b->n_leaves; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			b->nulls[r * w + i] = slot->tts_isnull[i];
			b->values[r * w + i] = slot->tts_isnull[i] ? (Datum) 0 :
				datumCopy(slot->tts_values[i], att->attbyval, att->attlen);
		}
		for (int j = 0; j < b->n_calls; j++)
		{
			b->nulls[r * w + b->n_leaves + j] = true;
			b->values[r * w + b->n_leaves + j] = (Datum) 0;
		}
		b->n_rows++;
		MemoryContextSwitchTo(old);
	}
	if (b->n_rows > 0)
		b->n_batches++;
	MemoryContextSwitchTo(b->batch_cxt);
	for (int wave = 1; wave <= b->n_waves; wave++)
	{
		for (int r = 0; r < b->n_rows; r++)
			for (int j = 0; j < b->n_calls; j++)
				if (b->calls[j].wave == wave)
					PrepareCall(b, r, j);
		b->next_submit = 0;
		if (wave == b->n_waves)
			break;				/* the last wave is answered as the rows go out */
		/* an inner wave: all of it answered before the next one's arguments are evaluated */
		for (int k = 0; k < b->n_rows * b->n_calls; k++)
			if (b->calls[k % b->n_calls].wave == wave)
				Answer(b, wave, k);
	}
	MemoryContextSwitchTo(old);
	return b->n_rows > 0;
}

/* The next row: its calls answered, the filter passed, the target list computed. */
static TupleTableSlot *
ExecBatch(CustomScanState *node)
{
	BatchState *b = (BatchState *) node;
	ExprContext *econtext = node->ss.ps.ps_ExprContext;
	ExprState  *qual = node->ss.ps.qual;
	ProjectionInfo *proj = node->ss.ps.ps_ProjInfo;

	for (;;)
	{
		MemoryContext old;
		int			r;

		CHECK_FOR_INTERRUPTS();
		if (b->bound >= 0 && b->returned >= b->bound && node->ss.ps.qual == NULL)
			return NULL;
		if (b->next_row >= b->n_rows && !FillBatch(b))
			return NULL;
		r = b->next_row++;
		old = MemoryContextSwitchTo(b->batch_cxt);
		for (int j = 0; j < b->n_calls; j++)
			if (b->calls[j].wave == b->n_waves)
				Answer(b, b->n_waves, At(b, r, j));
		MemoryContextSwitchTo(old);
		ResetExprContext(econtext);
		econtext->ecxt_scantuple = RowSlot(b, r);
		if (qual != NULL && !ExecQual(qual, econtext))
		{
			InstrCountFiltered1(node, 1);
			continue;
		}
		b->returned++;
		return proj != NULL ? ExecProject(proj) : econtext->ecxt_scantuple;
	}
}

static void
EndBatch(CustomScanState *node)
{
	BatchState *b = (BatchState *) node;

	DropBatch(b);
	ExecEndNode(b->child);
}

static void
ReScanBatch(CustomScanState *node)
{
	BatchState *b = (BatchState *) node;

	DropBatch(b);
	b->child_done = false;
	b->returned = 0;
	if (node->ss.ps.chgParam != NULL)
		UpdateChangedParamSet(b->child, node->ss.ps.chgParam);
	if (b->child->chgParam == NULL)
		ExecReScan(b->child);
}

/* EXPLAIN: which calls go in batches, which run row by row and why; with ANALYZE, what ran. */
static void
ExplainBatch(CustomScanState *node, List *ancestors, ExplainState *es)
{
	BatchState *b = (BatchState *) node;
	StringInfoData names;
	List	   *rbr = NIL;
	ListCell   *lc;

	initStringInfo(&names);
	for (int j = 0; j < b->n_calls; j++)
		appendStringInfo(&names, "%s%s", j > 0 ? ", " : "", get_func_name(b->calls[j].expr->funcid));
	ExplainPropertyText("Batched Calls", b->n_calls > 0 ? names.data : "none", es);
	if (b->n_waves > 1)
		ExplainPropertyInteger("Waves", NULL, b->n_waves, es);
	ExplainPropertyInteger("Batch Rows", NULL, b->batch_rows, es);
	if (b->bound >= 0)
		ExplainPropertyInteger("Row Bound", NULL, b->bound, es);
	foreach(lc, b->row_by_row)
		rbr = lappend(rbr, strVal(lfirst(lc)));
	if (rbr != NIL)
		ExplainPropertyList("Row-by-Row Calls", rbr, es);
	if (es->analyze)
	{
		ExplainPropertyInteger("Batches", NULL, b->n_batches, es);
		ExplainPropertyInteger("Requests", NULL, b->n_requests, es);
		ExplainPropertyInteger("Prompt Tokens", NULL, b->prompt_tokens, es);
		ExplainPropertyInteger("Completion Tokens", NULL, b->completion_tokens, es);
	}
}

static const CustomExecMethods batch_exec_methods = {
	.CustomName = CBLLM_BATCH_NAME,
	.BeginCustomScan = BeginBatch,
	.ExecCustomScan = ExecBatch,
	.EndCustomScan = EndBatch,
	.ReScanCustomScan = ReScanBatch,
	.ExplainCustomScan = ExplainBatch,
};

static Node *
CreateBatchState(CustomScan *cscan)
{
	BatchState *b = palloc0(sizeof(BatchState));

	NodeSetTag(b, T_CustomScanState);
	b->css.methods = &batch_exec_methods;
#if PG_VERSION_NUM >= 160000
	b->css.slotOps = &TTSOpsVirtual;	/* the scan slot holds copies: a virtual one */
#endif
	return (Node *) b;
}
