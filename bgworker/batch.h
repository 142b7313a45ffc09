/*
 * batch.h: the batching node, between its planning (batch_plan.c) and its
 * execution (batch_exec.c).
 *
 * PostgreSQL calls a scalar function a row at a time, so a plain
 * `SELECT llm_generate(p) FROM t` or `UPDATE t SET s = llm_generate(...)`
 * would send one request, wait for it, and send the next.  After planning,
 * batch_plan.c looks for plan nodes whose target list or filter calls one of
 * cbllm's generating forms (CbllmBatchFormOf) and puts a CustomScan, "cbllm
 * Batch", in the node's place: the node keeps its rows and its cheap
 * filters but outputs only the values the calls and the rest of its target
 * list read ("leaves": columns, aggregates, subplans); the Batch node pulls
 * up to cbllm.batch_rows of those rows, evaluates every call's arguments,
 * submits all the requests at once, and returns the rows in order as their
 * results arrive, computing the original target list and the filters that
 * call the forms with the results in place of the calls.
 *
 * Its scan tuple (custom_scan_tlist) is the child's leaves, then one column
 * per batched call.  The plan carries:
 *   custom_plans     the child (the original node, narrowed);
 *   custom_exprs     the batched calls (FuncExpr) in order, their arguments
 *                    over the scan tuple (INDEX_VAR);
 *   custom_private   BATCH_PRIV_* below.
 * A call inside another's arguments is in a later wave: every call of
 * wave w is answered before wave w + 1's arguments are evaluated.  Calls the
 * node cannot batch without changing what the statement does (inside CASE,
 * COALESCE, AND or OR, where a row may not evaluate them) stay in the target
 * list and run row by row; EXPLAIN names them and says why.
 */
#ifndef CBLLM_BATCH_H
#define CBLLM_BATCH_H

#include "nodes/extensible.h"

#define CBLLM_BATCH_NAME "cbllm Batch"

/* custom_private: a list of these, in this order */
#define BATCH_PRIV_BOUND 0		/* Integer: rows a LIMIT above will take (-1: no bound) */
#define BATCH_PRIV_LEAVES 1		/* Integer: the child's columns (leaves) in the scan tuple */
#define BATCH_PRIV_WAVES 2		/* IntList: each batched call's wave, from 1 */
#define BATCH_PRIV_ROW_BY_ROW 3 /* list of String: each call left row by row, with why */
#define BATCH_PRIV_N 4

extern const CustomScanMethods cbllm_batch_scan_methods;

#endif
