/*
 * sql_enrich.c: the C helpers of cbllm.enrich (the procedure and its
 * per-chunk functions are PL/pgSQL, in the extension script).
 *
 * cbllm.check_expression: prompt_sql and where_sql are spliced into the
 * statements cbllm.enrich builds, so each must be one SQL expression and
 * nothing more.  The text is parsed as
 *
 *     SELECT (expr
 *     )
 *
 * (the newline ends a trailing -- comment before the closing parenthesis)
 * and must give exactly one plain SELECT with one unnamed target and no
 * other clause.  Then "(expr\n)" is one complete expression and the lexer
 * ends outside any string or comment, so the text returned, that
 * expression in one more pair of parentheses, is one atomic operand
 * wherever it is spliced: nothing in expr can close a parenthesis of the
 * statement around it, end the statement or comment out what follows.
 * Parameters ($1) are refused too: the statements it goes into have their
 * own.
 *
 * cbllm.record_enrich_error: rows of cbllm.enrich_errors are written only
 * here.  No role holds INSERT on the table, and row-level security lets
 * each role see and delete only the rows of the jobs it ran (the table's
 * owner and superusers see them all).  The function takes the caller's
 * role, checks that it may UPDATE the table the row is about (as an
 * enrichment job on that table must), and inserts the row, with the role,
 * as the owner of cbllm.enrich_errors, in a restricted security context
 * with search_path pg_catalog, pg_temp, through one fully qualified
 * statement.
 */
#include "cbllm_pg.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parser.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(cbllm_check_expression);
PG_FUNCTION_INFO_V1(cbllm_record_enrich_error);
PG_FUNCTION_INFO_V1(cbllm_enrich_check_options);

#define ENRICH_SCHEMA			"cbllm"
#define ENRICH_ERRORS_TABLE		"enrich_errors"
#define ENRICH_SEARCH_PATH		"pg_catalog, pg_temp"

/*
 * The raw parse tree of sql, or NIL with the parser's error in *edata_out.
 * The parser only allocates memory, but its error is caught the safe way,
 * in a subtransaction.
 */
static List *
ParseCatchingError(const char *sql, ErrorData **edata_out)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	List	   *volatile tree = NIL;

	*edata_out = NULL;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		tree = raw_parser(sql, RAW_PARSE_DEFAULT);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		*edata_out = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		tree = NIL;
	}
	PG_END_TRY();
	return tree;
}

/* Walker: true at the first ParamRef, whose number goes to *(int *) context. */
static bool
FindParamRef(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, ParamRef))
	{
		*(int *) context = ((ParamRef *) node)->number;
		return true;
	}
	return raw_expression_tree_walker(node, FindParamRef, context);
}

/*
 * Why the parse tree of "SELECT (expr\n)" is not one plain expression (an
 * errdetail sentence), or NULL when it is.
 */
static char *
WhyNotOneExpression(List *tree)
{
	SelectStmt *s;
	ResTarget  *target;
	const char *clause = NULL;
	int			param = 0;

	if (list_length(tree) != 1)
		return psprintf("The text holds %d SQL statements.", list_length(tree));
	if (!IsA(linitial_node(RawStmt, tree)->stmt, SelectStmt))
		return pstrdup("The text is not an expression.");
	s = (SelectStmt *) linitial_node(RawStmt, tree)->stmt;
	if (s->op != SETOP_NONE)
		clause = "UNION, INTERSECT or EXCEPT";
	else if (s->withClause)
		clause = "a WITH clause";
	else if (s->distinctClause)
		clause = "DISTINCT";
	else if (s->intoClause)
		clause = "an INTO clause";
	else if (s->fromClause)
		clause = "a FROM clause";
	else if (s->whereClause)
		clause = "a WHERE clause";
	else if (s->groupClause || s->groupDistinct)
		clause = "a GROUP BY clause";
	else if (s->havingClause)
		clause = "a HAVING clause";
	else if (s->windowClause)
		clause = "a WINDOW clause";
	else if (s->valuesLists)
		clause = "a VALUES list";
	else if (s->sortClause)
		clause = "an ORDER BY clause";
	else if (s->limitCount || s->limitOffset)
		clause = "a LIMIT or OFFSET clause";
	else if (s->lockingClause)
		clause = "a locking clause";
	if (clause)
		return psprintf("After the expression the text has %s.", clause);
	if (list_length(s->targetList) != 1)
		return psprintf("The text is a list of %d expressions.", list_length(s->targetList));
	target = linitial_node(ResTarget, s->targetList);
	if (target->name != NULL)
		return pstrdup("The text gives the expression a name.");
	if (FindParamRef(target->val, &param))
		return psprintf("The expression refers to the parameter $%d.", param);
	return NULL;
}

static void RaiseNotOneExpression(int code, const char *what, const char *detail) pg_attribute_noreturn();

/* The error for an expression argument (what) that is not one SQL expression. */
static void
RaiseNotOneExpression(int code, const char *what, const char *detail)
{
	ereport(ERROR,
			(errcode(code),
			 errmsg("%s must be a single SQL expression", what),
			 errdetail("%s", detail),
			 errhint("Pass one expression over the table's columns, as it would appear in a select list or a WHERE clause.")));
}

/*
 * cbllm.check_expression(expr text, what text) returns text: expr, checked
 * to be one SQL expression, in the parentheses to splice it in; what names
 * it in the error.
 */
Datum
cbllm_check_expression(PG_FUNCTION_ARGS)
{
	char	   *expr = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *what = text_to_cstring(PG_GETARG_TEXT_PP(1));
	char	   *wrapped = psprintf("(%s\n)", expr);
	ErrorData  *edata;
	List	   *tree;
	char	   *why;

	tree = ParseCatchingError(psprintf("SELECT %s", wrapped), &edata);
	if (edata != NULL)
	{
		size_t		len = strlen(edata->message);

		/* an unterminated string or comment is quoted to the end: drop the "\n)" added */
		if (len >= 3 && strcmp(edata->message + len - 3, "\n)\"") == 0)
			strcpy(edata->message + len - 3, "\"");
		RaiseNotOneExpression(edata->sqlerrcode, what,
							  psprintf("The text does not parse as an expression: %s.", edata->message));
	}
	why = WhyNotOneExpression(tree);
	if (why != NULL)
		RaiseNotOneExpression(ERRCODE_INVALID_PARAMETER_VALUE, what, why);
	PG_RETURN_TEXT_P(cstring_to_text(psprintf("(%s)", wrapped)));
}

/* Error unless role may UPDATE relid (the table, or at least one of its columns). */
static inline void
CheckMayEnrich(Oid relid, Oid role)
{
	if (pg_class_aclcheck(relid, role, ACL_UPDATE) == ACLCHECK_OK)
		return;
	if (pg_attribute_aclcheck_all(relid, role, ACL_UPDATE, ACLMASK_ANY) == ACLCHECK_OK)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to record enrichment errors for table %s",
					get_rel_name(relid)),
			 errdetail("Only a role that may update a table can record errors of enriching it.")));
}

/* The owner of cbllm.enrich_errors. */
static Oid
ErrorTableOwner(void)
{
	Oid			relid;
	HeapTuple	tup;
	Oid			owner;

	relid = get_relname_relid(ENRICH_ERRORS_TABLE, get_namespace_oid(ENRICH_SCHEMA, false));
	if (!OidIsValid(relid))
		elog(ERROR, "table %s.%s does not exist", ENRICH_SCHEMA, ENRICH_ERRORS_TABLE);
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * cbllm.record_enrich_error(tbl regclass, key_value text, sqlstate text,
 * error text): one row of cbllm.enrich_errors for the calling role.
 */
Datum
cbllm_record_enrich_error(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	Oid			owner;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
	Oid			types[5] = {REGCLASSOID, TEXTOID, TEXTOID, TEXTOID, REGROLEOID};
	Datum		values[5];

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("cbllm.record_enrich_error: tbl, key_value, sqlstate and error must not be NULL")));
	CheckMayEnrich(PG_GETARG_OID(0), caller);
	owner = ErrorTableOwner();

	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = PG_GETARG_DATUM(3);
	values[4] = ObjectIdGetDatum(caller);

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", ENRICH_SEARCH_PATH, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		int			rc;

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		rc = SPI_execute_with_args("INSERT INTO " ENRICH_SCHEMA "." ENRICH_ERRORS_TABLE
								   " (tbl, key_value, sqlstate, error, role)"
								   " VALUES ($1, $2, $3, $4, $5)",
								   5, types, values, NULL, false, 0);
		if (rc != SPI_OK_INSERT || SPI_processed != 1)
			elog(ERROR, "inserting into %s.%s failed: %s", ENRICH_SCHEMA, ENRICH_ERRORS_TABLE,
				 SPI_result_code_string(rc));
		SPI_finish();
		AtEOXact_GUC(true, save_nestlevel);
	}
	PG_FINALLY();
	{
		/* on an error the (sub)transaction's abort pops the GUC nest level */
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	PG_RETURN_VOID();
}

/*
 * cbllm.enrich_check_options(prompt, max_tokens, temperature, top_p, top_k,
 * seed, stop, priority, json_schema, regex, choices): raise the error that
 * llm_submit would raise for every row of a job with these options, before
 * the job reads its first row.  The prompt is left out of the check (each
 * row has its own).
 */
Datum
cbllm_enrich_check_options(PG_FUNCTION_ARGS)
{
	CbllmRequestArgs a;

	CbllmReadOptions(fcinfo, &a, CBLLM_REQ_GENERATE);
	a.prompt = "";
	a.params.prompt_len = 0;
	CbllmCheckArgs(&a);
	PG_RETURN_VOID();
}
