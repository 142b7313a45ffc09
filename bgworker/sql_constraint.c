/*
 * sql_constraint.c: a call's json_schema, regex or choices made into the one
 * regex the engine constrains its output with (regex.h, json_schema.h), and
 * checked here, so that an unsupported schema keyword or a malformed
 * pattern is the caller's error at once, with the message naming it.
 */
#include "cbllm_pg.h"

#include <limits.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "constrain/json_schema.h"
#include "constrain/regex.h"

/* Raise err's message: a malformed constraint, or one of a form cbllm does not support. */
static void
RaiseCompile(int rc, const cbllm_err *err, cbllm_buf *held)
{
	char		msg[CBLLM_ERR_MSG_LEN];

	strlcpy(msg, err->msg, sizeof(msg));
	cbllm_buf_free(held);
	ereport(ERROR,
			(errcode(rc == CBLLM_ERR_UNSUPPORTED ? ERRCODE_FEATURE_NOT_SUPPORTED :
					 rc == CBLLM_ERR_NOMEM ? ERRCODE_OUT_OF_MEMORY :
					 ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s", msg)));
}

/* Append the regex of the choices array to re: the strings escaped, as alternatives. */
static void
ChoicesRegex(ArrayType *arr, cbllm_buf *re)
{
	char	  **strs;
	int		   *lens;
	int			n = CbllmTextArrayToModel(arr, "choices", "choices must not hold NULL", INT_MAX,
										  &strs, &lens);

	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("choices must hold at least one string")));
	for (int k = 0; k < n; k++)
	{
		if (lens[k] == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("choices must not hold an empty string")));
		if ((k > 0 && cbllm_buf_append(re, "|", 1) != CBLLM_OK) ||
			cbllm_buf_append(re, "(?:", 3) != CBLLM_OK || regex_escape(strs[k], lens[k], re) != CBLLM_OK ||
			cbllm_buf_append(re, ")", 1) != CBLLM_OK)
		{
			cbllm_buf_free(re);
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
		}
	}
}

/*
 * The last constraint this session compiled and found valid.  A constraint
 * is compiled here only to refuse a bad one at the call, naming the
 * problem; the engine compiles it again for its masks.  A job that submits
 * the same constraint for every row (cbllm.enrich, the array forms)
 * compiles it here once.
 */
static char *checked_regex = NULL;
static size_t checked_len = 0;

/* Whether re[0, len) is the constraint this session last found valid. */
static bool
CheckedBefore(const char *re, size_t len)
{
	return checked_regex != NULL && checked_len == len && memcmp(checked_regex, re ? re : "", len) == 0;
}

/* Remember re[0, len) as valid (in memory that outlives the call). */
static void
RememberChecked(const char *re, size_t len)
{
	char	   *copy = MemoryContextAlloc(TopMemoryContext, len + 1);

	memcpy(copy, re ? re : "", len);
	copy[len] = '\0';
	if (checked_regex != NULL)
		pfree(checked_regex);
	checked_regex = copy;
	checked_len = len;
}

/* Whether d matches the empty text and nothing else (the engine refuses such a constraint). */
static bool
OnlyEmpty(const cbllm_dfa *d)
{
	if (!d->accept[0])
		return false;
	for (int c = 0; c < d->n_classes; c++)
		if (d->next[c] >= 0)
			return false;
	return true;
}

/*
 * The regex of the call's constraint in UTF-8 (palloc'd, *len bytes), or
 * NULL when it has none.  A form that returns jsonb (llm_generate_json,
 * llm_chat_json) has only json_schema, and without it any JSON value.
 */
char *
CbllmConstraintRegex(FunctionCallInfo fcinfo, int *len)
{
	bool		json_form = get_fn_expr_rettype(fcinfo->flinfo) == JSONBOID;
	int			nargs = PG_NARGS();
	bool		schema = nargs > CBLLM_ARG_JSON_SCHEMA && !PG_ARGISNULL(CBLLM_ARG_JSON_SCHEMA);
	bool		regex = !json_form && nargs > CBLLM_ARG_REGEX && !PG_ARGISNULL(CBLLM_ARG_REGEX);
	bool		choices = !json_form && nargs > CBLLM_ARG_CHOICES && !PG_ARGISNULL(CBLLM_ARG_CHOICES);
	cbllm_buf	re = {0};
	cbllm_err	err;
	cbllm_dfa  *dfa = NULL;
	char	   *out;
	int			rc;

	*len = 0;
	if (schema + regex + choices > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("give at most one of json_schema, regex and choices")));
	if (schema || json_form)
	{
		Jsonb	   *j = schema ? PG_GETARG_JSONB_P(CBLLM_ARG_JSON_SCHEMA) : NULL;
		char	   *s = j ? JsonbToCString(NULL, &j->root, VARSIZE(j)) : pstrdup("{}");
		char		msg[CBLLM_ERROR_LEN];
		int			n;
		char	   *u = CbllmTextToModel(s, strlen(s), &n, msg);

		if (u == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
					 errmsg("cannot pass json_schema to the model: %s", msg)));
		if ((rc = json_schema_to_regex(u, n, &re, &err)) != CBLLM_OK)
			RaiseCompile(rc, &err, &re);
	}
	else if (regex)
	{
		int			n;
		char	   *u = CbllmTextToModelOrError(PG_GETARG_TEXT_PP(CBLLM_ARG_REGEX), &n);

		if (cbllm_buf_append(&re, u, n) != CBLLM_OK)
			ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	}
	else if (choices)
		ChoicesRegex(PG_GETARG_ARRAYTYPE_P(CBLLM_ARG_CHOICES), &re);
	else
		return NULL;
	if (CheckedBefore(re.data, re.len))
		;						/* this session compiled it already: it is valid */
	else if ((rc = regex_compile(re.data ? re.data : "", re.len, &dfa, &err)) != CBLLM_OK)
		RaiseCompile(rc, &err, &re);
	else if (OnlyEmpty(dfa))
	{
		dfa_free(dfa);
		cbllm_buf_free(&re);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the constraint admits only the empty text: there is nothing to generate"),
				 errhint("An empty regex (or one like '()') matches nothing but the empty text.")));
	}
	else
		RememberChecked(re.data, re.len);
	dfa_free(dfa);
	if (re.len > (size_t) cbllm_max_prompt_bytes)
	{
		size_t		n = re.len;

		cbllm_buf_free(&re);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the constraint's regex is too large: %zu bytes, the limit is %d", n,
						cbllm_max_prompt_bytes),
				 errhint("Raise cbllm.max_prompt_bytes (requires a restart).")));
	}
	out = palloc(re.len + 1);
	memcpy(out, re.data ? re.data : "", re.len);
	out[re.len] = '\0';
	*len = (int) re.len;
	cbllm_buf_free(&re);
	return out;
}

/* The float8 argument at position i, or dflt when NULL or absent. */
static double
Float8Arg(FunctionCallInfo fcinfo, int i, double dflt)
{
	return PG_NARGS() > i && !PG_ARGISNULL(i) ? PG_GETARG_FLOAT8(i) : dflt;
}

/* logit_bias: a JSON object of token id (as a key) to bias, into a->bias. */
static void
ReadLogitBias(Jsonb *j, CbllmRequestArgs *a)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	cbllm_bias_entry *bias;
	int			n = 0,
				cap;
	char	   *key = NULL;

	if (!JB_ROOT_IS_OBJECT(j) || JB_ROOT_IS_SCALAR(j))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("logit_bias must be a JSON object of token ids to biases"),
				 errhint("For example {\"128000\": -100, \"42\": 5}.")));
	cap = JB_ROOT_COUNT(j);
	if (cap > CBLLM_MAX_LOGIT_BIAS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("logit_bias may hold at most %d entries, not %d", CBLLM_MAX_LOGIT_BIAS, cap)));
	bias = palloc(sizeof(cbllm_bias_entry) * (cap > 0 ? cap : 1));
	it = JsonbIteratorInit(&j->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
		{
			char	   *end;
			long		id = strtol(key, &end, 10);
			double		b;

			if (*key == '\0' || *end != '\0' || id < 0 || id > INT32_MAX)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("logit_bias keys must be token ids, not \"%s\"", key)));
			if (v.type != jbvNumeric)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("logit_bias for token %s must be a number", key)));
			b = DatumGetFloat8(DirectFunctionCall1(numeric_float8, NumericGetDatum(v.val.numeric)));
			if (!(b >= -CBLLM_MAX_BIAS && b <= CBLLM_MAX_BIAS))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("logit_bias for token %s must be between -%d and %d, not %g", key,
								CBLLM_MAX_BIAS, CBLLM_MAX_BIAS, b)));
			bias[n].id = (int32) id;
			bias[n].bias = (float) b;
			n++;
		}
	}
	a->bias = bias;
	a->params.n_bias = n;
}

/* min_p, repetition_penalty, frequency_penalty, presence_penalty and logit_bias of the call. */
void
CbllmReadControls(FunctionCallInfo fcinfo, CbllmRequestArgs *a)
{
	int			base = get_fn_expr_rettype(fcinfo->flinfo) == JSONBOID ?
		CBLLM_ARG_CONTROLS_JSON : CBLLM_ARG_CONTROLS;

	a->params.min_p = Float8Arg(fcinfo, base, 0);
	a->params.repetition_penalty = Float8Arg(fcinfo, base + 1, 1);
	a->params.frequency_penalty = Float8Arg(fcinfo, base + 2, 0);
	a->params.presence_penalty = Float8Arg(fcinfo, base + 3, 0);
	if (PG_NARGS() > base + 4 && !PG_ARGISNULL(base + 4))
		ReadLogitBias(PG_GETARG_JSONB_P(base + 4), a);
}
