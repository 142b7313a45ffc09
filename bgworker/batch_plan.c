/*
 * batch_plan.c: where the batching node goes (batch.h says what it is).
 *
 * A planner hook runs after PostgreSQL's planner and walks the finished
 * plan (and its subplans).  A node that projects (a scan, a join, a Result,
 * an Agg) and whose target list or filter calls a generating form gets a
 * "cbllm Batch" node in its place, over the node itself narrowed to the
 * leaves the Batch node reads.  A call is batched where every row evaluates
 * it: at the top of a target entry or a filter clause, or inside operators
 * and functions (which evaluate all their arguments); inside CASE (past its
 * first test), COALESCE (past its first argument), AND or OR (past their
 * first argument) a row may skip it, so it stays in the target list and runs
 * row by row, as do calls in aggregates' arguments, in a subquery's
 * parameters and in a join's own conditions.  Not wrapped at all: the inner
 * side of a merge join (which must mark and restore its position), plans
 * of scrollable cursors, and nodes that do not project.
 *
 * A LIMIT with a constant count directly above (through Results and
 * subquery scans without filters) bounds the rows a batch takes, so that
 * `... LIMIT 5` generates for 5 rows.
 */
#include "cbllm_pg.h"

#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "utils/lsyscache.h"

#include "batch.h"

static planner_hook_type prev_planner = NULL;

/* What the search of one node's expressions found. */
typedef struct FindCtx
{
	List	   *calls;			/* batched FuncExprs, inner waves first */
	List	   *waves;			/* (int) each one's wave */
	List	   *row_by_row;		/* (String) the calls left row by row, with why */
	const char *cond;			/* NULL where every row evaluates the expression, else why not */
	int			wave;			/* the highest wave under the current node */
} FindCtx;

/* The nodes the Batch node leaves to its child: what the child computes per row. */
static bool
IsLeaf(Node *n)
{
	return IsA(n, Var) || IsA(n, Aggref) || IsA(n, WindowFunc) || IsA(n, GroupingFunc) ||
		IsA(n, SubPlan) || IsA(n, AlternativeSubPlan) || IsA(n, PlaceHolderVar);
}

/* A generating form's call, or NULL. */
static FuncExpr *
FormCall(Node *n)
{
	return IsA(n, FuncExpr) && CbllmBatchFormOf(((FuncExpr *) n)->funcid) != NULL ?
		(FuncExpr *) n : NULL;
}

static bool FindWalker(Node *n, FindCtx *c);

/* Note a call left row by row. */
static void
NoteRowByRow(FindCtx *c, FuncExpr *f, const char *why)
{
	c->row_by_row = lappend(c->row_by_row,
							makeString(psprintf("%s (%s)", get_func_name(f->funcid), why)));
}

/* Whether n holds a form's call anywhere (leaves included). */
static bool
HasFormCall(Node *n, void *unused)
{
	if (n == NULL)
		return false;
	if (FormCall(n) != NULL)
		return true;
	return expression_tree_walker(n, HasFormCall, unused);
}

/* Note every form's call under n as row by row, for why. */
static bool
NoteAllWalker(Node *n, FindCtx *c)
{
	FuncExpr   *f;

	if (n == NULL)
		return false;
	if ((f = FormCall(n)) != NULL)
		NoteRowByRow(c, f, c->cond);
	return expression_tree_walker(n, NoteAllWalker, c);
}

/* Search n with c->cond set to why (NULL: unchanged). */
static void
FindUnder(Node *n, FindCtx *c, const char *why)
{
	const char *was = c->cond;

	if (why != NULL && c->cond == NULL)
		c->cond = why;
	(void) FindWalker(n, c);
	c->cond = was;
}

/*
 * Find the form's calls under n: each one every row evaluates goes in
 * c->calls after those in its arguments, with its wave; the others are
 * noted row by row.
 */
static bool
FindWalker(Node *n, FindCtx *c)
{
	FuncExpr   *f;
	ListCell   *lc;

	if (n == NULL)
		return false;
	if (IsLeaf(n))
	{
		const char *was = c->cond;

		c->cond = IsA(n, Aggref) || IsA(n, WindowFunc) ? "inside an aggregate's arguments" :
			IsA(n, SubPlan) || IsA(n, AlternativeSubPlan) ? "in a subquery's parameters" :
			"inside a computed column";
		(void) NoteAllWalker(n, c);
		c->cond = was;
		return false;
	}
	if ((f = FormCall(n)) != NULL)
	{
		int			outer = c->wave;

		if (c->cond != NULL)
		{
			NoteRowByRow(c, f, c->cond);
			(void) expression_tree_walker(n, FindWalker, c);
			return false;
		}
		if (list_member_ptr(c->calls, f))
			return false;		/* the planner's tlists may share a node: one call */
		/* its wave: one past the highest of the calls in its arguments */
		c->wave = 0;
		(void) expression_tree_walker(n, FindWalker, c);
		c->calls = lappend(c->calls, f);
		c->waves = lappend_int(c->waves, c->wave + 1);
		c->wave = Max(outer, c->wave + 1);
		return false;
	}
	switch (nodeTag(n))
	{
		case T_BoolExpr:
			{
				BoolExpr   *b = (BoolExpr *) n;

				foreach(lc, b->args)
					FindUnder(lfirst(lc), c, foreach_current_index(lc) == 0 || b->boolop == NOT_EXPR ?
							  NULL : b->boolop == AND_EXPR ? "inside AND" : "inside OR");
				return false;
			}
		case T_CaseExpr:
			{
				CaseExpr   *ce = (CaseExpr *) n;

				FindUnder((Node *) ce->arg, c, NULL);
				foreach(lc, ce->args)
				{
					CaseWhen   *w = lfirst(lc);

					FindUnder((Node *) w->expr, c, foreach_current_index(lc) == 0 ? NULL : "inside CASE");
					FindUnder((Node *) w->result, c, "inside CASE");
				}
				FindUnder((Node *) ce->defresult, c, "inside CASE");
				return false;
			}
		case T_CoalesceExpr:
			foreach(lc, ((CoalesceExpr *) n)->args)
				FindUnder(lfirst(lc), c, foreach_current_index(lc) == 0 ? NULL : "inside COALESCE");
			return false;
		case T_FuncExpr:
		case T_OpExpr:
		case T_DistinctExpr:
		case T_NullIfExpr:
		case T_ScalarArrayOpExpr:
		case T_RelabelType:
		case T_CoerceViaIO:
		case T_ConvertRowtypeExpr:
		case T_CollateExpr:
		case T_ArrayExpr:
		case T_RowExpr:
		case T_MinMaxExpr:
		case T_NullTest:
		case T_BooleanTest:
		case T_CoerceToDomain:
		case T_FieldSelect:
		case T_SubscriptingRef:
		case T_TargetEntry:
		case T_List:
			return expression_tree_walker(n, FindWalker, c);
		default:
			{
				/* anything else may evaluate its arguments for some rows only */
				const char *was = c->cond;

				if (c->cond == NULL)
					c->cond = "inside an expression that may skip it";
				(void) expression_tree_walker(n, FindWalker, c);
				c->cond = was;
			}
			return false;
	}
}

/* The nodes a Batch node may take the place of: those that compute a target list per row. */
static bool
Projects(Plan *p)
{
	switch (nodeTag(p))
	{
		case T_SeqScan:
		case T_SampleScan:
		case T_IndexScan:
		case T_IndexOnlyScan:
		case T_BitmapHeapScan:
		case T_TidScan:
		case T_TidRangeScan:
		case T_SubqueryScan:
		case T_FunctionScan:
		case T_TableFuncScan:
		case T_ValuesScan:
		case T_CteScan:
		case T_NamedTuplestoreScan:
		case T_WorkTableScan:
		case T_NestLoop:
		case T_MergeJoin:
		case T_HashJoin:
		case T_Result:
		case T_Agg:
			return true;
		default:
			return false;
	}
}

/* Where the Batch node reads the leaves and the calls' results. */
typedef struct RewriteCtx
{
	List	   *leaves;			/* (Node *) the child's columns, in order */
	List	   *calls;			/* (FuncExpr *) the batched calls: columns after the leaves */
	bool		collect;		/* first pass: gather the leaves */
	int			outer_upto;		/* scan columns up to this one become OUTER_VAR (EXPLAIN's tlist) */
} RewriteCtx;

/* A Var of column attno of varno with n's type. */
static Var *
ColumnVar(int varno, int attno, Node *n)
{
	return makeVar(varno, attno, exprType(n), exprTypmod(n), exprCollation(n), 0);
}

/*
 * Gather the leaves of n (collect), or rewrite n over the Batch node's scan
 * tuple: each leaf to its column, each batched call to its result's column.
 */
static Node *
RewriteMutator(Node *n, RewriteCtx *r)
{
	ListCell   *lc;

	if (n == NULL)
		return NULL;
	if (!r->collect)
		foreach(lc, r->calls)
			if (lfirst(lc) == (void *) n)
				return (Node *) ColumnVar(INDEX_VAR, list_length(r->leaves) + foreach_current_index(lc) + 1, n);
	if (IsLeaf(n))
	{
		int			i = 0;

		while (i < list_length(r->leaves) && !equal(list_nth(r->leaves, i), n))
			i++;
		if (r->collect)
		{
			if (i == list_length(r->leaves))
				r->leaves = lappend(r->leaves, n);
			return n;
		}
		if (i == list_length(r->leaves))
			elog(ERROR, "cbllm: a leaf of the batched expressions was not gathered");
		return (Node *) ColumnVar(i + 1 <= r->outer_upto ? OUTER_VAR : INDEX_VAR, i + 1, n);
	}
	return expression_tree_mutator(n, RewriteMutator, r);
}

/* n over the Batch node's scan tuple (a copy). */
static Node *
Rewrite(Node *n, RewriteCtx *r, bool outer)
{
	r->collect = false;
	r->outer_upto = outer ? list_length(r->leaves) : 0;
	return RewriteMutator(n, r);
}

/* Rewrite a batched call's arguments (the call itself is its own column). */
static FuncExpr *
RewriteCall(FuncExpr *f, RewriteCtx *r, bool outer)
{
	FuncExpr   *g = (FuncExpr *) copyObject(f);

	g->args = (List *) Rewrite((Node *) f->args, r, outer);
	return g;
}

/* The largest plan_node_id under p (so that new nodes get unused ones). */
static int
MaxNodeId(Plan *p)
{
	int			m;
	ListCell   *lc;

	if (p == NULL)
		return 0;
	m = Max(p->plan_node_id, Max(MaxNodeId(p->lefttree), MaxNodeId(p->righttree)));
	if (IsA(p, Append))
		foreach(lc, ((Append *) p)->appendplans)
			m = Max(m, MaxNodeId(lfirst(lc)));
	else if (IsA(p, MergeAppend))
		foreach(lc, ((MergeAppend *) p)->mergeplans)
			m = Max(m, MaxNodeId(lfirst(lc)));
	else if (IsA(p, SubqueryScan))
		m = Max(m, MaxNodeId(((SubqueryScan *) p)->subplan));
	else if (IsA(p, CustomScan))
		foreach(lc, ((CustomScan *) p)->custom_plans)
			m = Max(m, MaxNodeId(lfirst(lc)));
	return m;
}

typedef struct WalkCtx
{
	int			next_id;		/* the next unused plan_node_id */
} WalkCtx;

/* Put a Batch node in p's place when p calls a form, with bound rows at most (-1: any). */
static Plan *
MaybeWrap(Plan *p, WalkCtx *w, int bound)
{
	FindCtx		f = {0};
	RewriteCtx	r = {0};
	List	   *moved = NIL,
			   *kept = NIL,
			   *tlist = NIL,
			   *scan_tlist = NIL,
			   *exprs = NIL;
	ListCell   *lc;
	CustomScan *cs;

	/*
	 * A Result of no input makes one row: nothing to batch (and PL/pgSQL
	 * evaluates such a plan's expression itself, expecting the Result).
	 */
	if (!Projects(p) || (IsA(p, Result) && p->lefttree == NULL) ||
		!HasFormCall((Node *) list_make2(p->targetlist, p->qual), NULL))
		return p;
	(void) FindWalker((Node *) p->targetlist, &f);
	/* the filter clauses that call a form move up; the others stay with the node */
	foreach(lc, p->qual)
	{
		if (HasFormCall(lfirst(lc), NULL))
		{
			moved = lappend(moved, lfirst(lc));
			(void) FindWalker(lfirst(lc), &f);
		}
		else
			kept = lappend(kept, lfirst(lc));
	}
	r.calls = f.calls;
	r.collect = true;
	(void) RewriteMutator((Node *) p->targetlist, &r);
	(void) RewriteMutator((Node *) moved, &r);

	cs = makeNode(CustomScan);
	cs->scan.plan.startup_cost = p->startup_cost;
	cs->scan.plan.total_cost = p->total_cost;
	cs->scan.plan.plan_rows = p->plan_rows;
	cs->scan.plan.plan_width = p->plan_width;
	cs->scan.plan.plan_node_id = w->next_id++;
	cs->scan.plan.parallel_safe = false;
	cs->scan.plan.extParam = bms_copy(p->extParam);
	cs->scan.plan.allParam = bms_copy(p->allParam);
	cs->scan.scanrelid = 0;
	foreach(lc, p->targetlist)
	{
		TargetEntry *te = flatCopyTargetEntry(lfirst(lc));

		te->expr = (Expr *) Rewrite((Node *) te->expr, &r, false);
		tlist = lappend(tlist, te);
	}
	cs->scan.plan.targetlist = tlist;
	cs->scan.plan.qual = (List *) Rewrite((Node *) moved, &r, false);
	foreach(lc, r.leaves)
		scan_tlist = lappend(scan_tlist,
							 makeTargetEntry((Expr *) ColumnVar(OUTER_VAR, foreach_current_index(lc) + 1, lfirst(lc)),
											 foreach_current_index(lc) + 1, NULL, false));
	foreach(lc, f.calls)
	{
		scan_tlist = lappend(scan_tlist,
							 makeTargetEntry((Expr *) RewriteCall(lfirst(lc), &r, true),
											 list_length(scan_tlist) + 1, NULL, false));
		exprs = lappend(exprs, RewriteCall(lfirst(lc), &r, false));
	}
	cs->custom_scan_tlist = scan_tlist;
	cs->custom_exprs = exprs;
	cs->custom_private = list_make4(makeInteger(bound), makeInteger(list_length(r.leaves)),
									f.waves, f.row_by_row);
	cs->methods = &cbllm_batch_scan_methods;

	/* the node itself now outputs the leaves and filters with its own clauses */
	p->targetlist = NIL;
	foreach(lc, r.leaves)
		p->targetlist = lappend(p->targetlist,
								makeTargetEntry(copyObject(lfirst(lc)), foreach_current_index(lc) + 1,
												NULL, false));
	p->qual = kept;
	cs->custom_plans = list_make1(p);
	/*
	 * also as the outer plan, for EXPLAIN alone: it resolves the scan
	 * tlist's OUTER_VAR columns against it (the executor runs custom_plans)
	 */
	cs->scan.plan.lefttree = p;
	return (Plan *) cs;
}

/* The rows a Limit node with constant count and offset lets through, or -1. */
static int
LimitBound(Limit *l)
{
	Const	   *count = (Const *) l->limitCount,
			   *offset = (Const *) l->limitOffset;
	int64		n;

	if (count == NULL || !IsA(count, Const) || count->constisnull ||
		(offset != NULL && (!IsA(offset, Const))))
		return -1;
	n = DatumGetInt64(count->constvalue);
	if (offset != NULL && !offset->constisnull)
		n += DatumGetInt64(offset->constvalue);
	return n < 0 || n > PG_INT32_MAX ? -1 : (int) n;
}

/*
 * Walk p's tree, children first, putting Batch nodes where they go; bound
 * is what a LIMIT right above lets through (-1: no bound), and no_wrap says
 * p must stay as it is (a merge join's inner side).
 */
static Plan *
Walk(Plan *p, WalkCtx *w, int bound, bool no_wrap)
{
	ListCell   *lc;
	int			pass = p != NULL && p->qual == NIL ? bound : -1;

	if (p == NULL)
		return NULL;
	switch (nodeTag(p))
	{
		case T_Limit:
			p->lefttree = Walk(p->lefttree, w, LimitBound((Limit *) p), false);
			return p;
		case T_Result:
			p->lefttree = Walk(p->lefttree, w, pass, false);
			break;
		case T_SubqueryScan:
			((SubqueryScan *) p)->subplan = Walk(((SubqueryScan *) p)->subplan, w, pass, false);
			break;
		case T_Append:
			foreach(lc, ((Append *) p)->appendplans)
				lfirst(lc) = Walk(lfirst(lc), w, -1, false);
			break;
		case T_MergeAppend:
			foreach(lc, ((MergeAppend *) p)->mergeplans)
				lfirst(lc) = Walk(lfirst(lc), w, -1, false);
			break;
		case T_CustomScan:
			foreach(lc, ((CustomScan *) p)->custom_plans)
				lfirst(lc) = Walk(lfirst(lc), w, -1, false);
			break;
		case T_MergeJoin:
			p->lefttree = Walk(p->lefttree, w, -1, false);
			p->righttree = Walk(p->righttree, w, -1, true);
			break;
		default:
			p->lefttree = Walk(p->lefttree, w, -1, false);
			p->righttree = Walk(p->righttree, w, -1, false);
			break;
	}
	return no_wrap ? p : MaybeWrap(p, w, bound);
}

/* The planner, then Batch nodes where a plan calls the generating forms row by row. */
static PlannedStmt *
BatchPlanner(Query *parse, const char *query_string, int cursor_options, ParamListInfo params)
{
	PlannedStmt *stmt = prev_planner != NULL ?
		prev_planner(parse, query_string, cursor_options, params) :
		standard_planner(parse, query_string, cursor_options, params);
	WalkCtx		w;
	ListCell   *lc;

	if (cbllm_batch_rows == 0 || (cursor_options & CURSOR_OPT_SCROLL) ||
		stmt->commandType == CMD_UTILITY)
		return stmt;
	w.next_id = MaxNodeId(stmt->planTree);
	foreach(lc, stmt->subplans)
		w.next_id = Max(w.next_id, MaxNodeId(lfirst(lc)));
	w.next_id++;
	stmt->planTree = Walk(stmt->planTree, &w, -1, false);
	foreach(lc, stmt->subplans)
		lfirst(lc) = Walk(lfirst(lc), &w, -1, false);
	return stmt;
}

/* Install the planner hook and make the node's methods known by name. */
void
CbllmBatchInit(void)
{
	RegisterCustomScanMethods(&cbllm_batch_scan_methods);
	prev_planner = planner_hook;
	planner_hook = BatchPlanner;
}
