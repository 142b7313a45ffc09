/*
 * sql_generate.c: llm_generate (one prompt, or an array submitted at once),
 * llm_generate_stream (one row per text piece, value per call), llm_submit
 * and llm_result, and their argument handling.  The bodies take the form's
 * input through a CbllmPrepareFn, so llm_chat and its forms (sql_chat.c)
 * are the same functions over chat messages.
 */
#include "cbllm_pg.h"
#include "api/cbllm.h"

#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(llm_generate);
PG_FUNCTION_INFO_V1(llm_generate_json);
PG_FUNCTION_INFO_V1(llm_completions);
PG_FUNCTION_INFO_V1(llm_generate_array);
PG_FUNCTION_INFO_V1(llm_generate_stream);
PG_FUNCTION_INFO_V1(llm_submit);
PG_FUNCTION_INFO_V1(llm_result);

/* An llm_submit id: the slot in the low 16 bits, its serial above. */
#define ASYNC_SLOT_BITS 16

/*
 * Refuse a priority above the role's cbllm.max_priority (one outside the
 * range of priorities is left to the one check, which says so).
 */
static inline void
CheckPriorityAllowed(int priority)
{
	if (priority > cbllm_max_priority && priority <= CBLLM_MAX_PRIORITY)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("priority %d is above the highest this role may ask for, %d", priority,
						cbllm_max_priority),
				 errdetail("cbllm.max_priority is %d for role \"%s\".", cbllm_max_priority,
						   GetUserNameFromId(GetUserId(), false)),
				 errhint("Ask for a priority of at most %d, or ask a superuser to raise cbllm.max_priority for the role.",
						 cbllm_max_priority)));
}

/*
 * Read the options shared by every form: (input, max_tokens, temperature,
 * top_p, top_k, seed, stop, priority) at argument positions 1..7.  NULL
 * options take their defaults; a NULL temperature, top_p or top_k is left to
 * the model's generation_config.json.
 */
void
CbllmReadOptions(FunctionCallInfo fcinfo, CbllmRequestArgs *a, int kind)
{
	memset(a, 0, sizeof(*a));
	CbllmDefaultParams(&a->params, kind);
	if (!PG_ARGISNULL(1))
		a->params.max_tokens = PG_GETARG_INT32(1);
	if (!PG_ARGISNULL(2))
		a->params.temperature = PG_GETARG_FLOAT8(2);
	else
		a->params.defaults |= CBLLM_DEFAULT_TEMPERATURE;
	if (!PG_ARGISNULL(3))
		a->params.top_p = PG_GETARG_FLOAT8(3);
	else
		a->params.defaults |= CBLLM_DEFAULT_TOP_P;
	if (!PG_ARGISNULL(4))
		a->params.top_k = PG_GETARG_INT32(4);
	else
		a->params.defaults |= CBLLM_DEFAULT_TOP_K;
	a->params.has_seed = !PG_ARGISNULL(5);
	if (a->params.has_seed)
		a->params.seed = (uint64) PG_GETARG_INT64(5);
	if (!PG_ARGISNULL(7))
		a->params.priority = PG_GETARG_INT32(7);
	CheckPriorityAllowed(a->params.priority);
	if (!PG_ARGISNULL(6))
	{
		char	  **strs;
		int		   *lens;

		a->params.n_stop = CbllmTextArrayToModel(PG_GETARG_ARRAYTYPE_P(6), "stop",
												 "stop strings must not be NULL", CBLLM_MAX_STOP,
												 &strs, &lens);
		if (a->params.n_stop > CBLLM_MAX_STOP)
			CbllmCheckArgs(a);	/* refuses the count; no string was read */
		for (int k = 0; k < a->params.n_stop; k++)
		{
			a->stop[k] = strs[k];
			a->params.stop_len[k] = lens[k];
		}
	}
	a->constraint = CbllmConstraintRegex(fcinfo, &a->params.constraint_len);
	CbllmReadControls(fcinfo, a);
	if (a->constraint != NULL && a->params.n_stop > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stop cannot be combined with json_schema, regex or choices"),
				 errdetail("A stop string would cut the output short of what the constraint requires."),
				 errhint("The output ends by itself once the constraint is complete.")));
}

/*
 * Set the prompt of a (in UTF-8, the model's encoding) and check everything,
 * without raising: false with the sqlstate and message of the problem.  A
 * text over the size limit is refused before it is converted.
 */
static bool
PreparePrompt(CbllmRequestArgs *a, Datum input, FunctionCallInfo fcinfo, int *code, char *msg)
{
	text	   *prompt = DatumGetTextPP(input);
	int			raw = VARSIZE_ANY_EXHDR(prompt);

	a->prompt = VARDATA_ANY(prompt);
	a->params.prompt_len = raw;
	if (raw > cbllm_max_prompt_bytes)
		return CbllmArgsError(a, code, msg);	/* reports the size; UTF-8 is no shorter */
	a->prompt = CbllmTextToModel(VARDATA_ANY(prompt), raw, &a->params.prompt_len, msg);
	if (a->prompt == NULL)
	{
		*code = ERRCODE_CHARACTER_NOT_IN_REPERTOIRE;
		a->params.prompt_len = 0;
		return false;
	}
	return CbllmArgsError(a, code, msg);
}

/* Prepare a's input with prep and check everything, raising the first problem (what names the input). */
static void
PrepareOrRaise(CbllmPrepareFn prep, CbllmRequestArgs *a, Datum input, FunctionCallInfo fcinfo,
			   const char *what)
{
	int			code = 0;
	char		msg[CBLLM_ERROR_LEN];

	if (prep(a, input, fcinfo, &code, msg))
		return;
	if (code == ERRCODE_CHARACTER_NOT_IN_REPERTOIRE)
		ereport(ERROR, (errcode(code), errmsg("cannot pass %s to the model: %s", what, msg)));
	CbllmCheckArgs(a);			/* raises with its hint when the arguments are the problem */
	ereport(ERROR, (errcode(code ? code : ERRCODE_INVALID_PARAMETER_VALUE), errmsg("%s", msg)));
}

/*
 * Read the options and the input of a call of form f from fcinfo into a,
 * with the checks and errors of the form's own function: what the batching
 * node (batch_exec.c) does for each row's call before it submits them all.
 */
void
CbllmPrepareCall(FunctionCallInfo fcinfo, const CbllmBatchForm *f, CbllmRequestArgs *a)
{
	CbllmReadOptions(fcinfo, a, f->kind);
	PrepareOrRaise(f->prep, a, PG_GETARG_DATUM(0), fcinfo, "the prompt");
}

/* The SQL value of form f's output (len bytes of the model's UTF-8). */
Datum
CbllmFormResult(const CbllmBatchForm *f, const char *s, int len)
{
	text	   *t = CbllmTextFromModel(s, len);

	if (!f->json)
		return PointerGetDatum(t);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(text_to_cstring(t)));
}

/* One input in, generated text out: the body of llm_generate and llm_chat. */
Datum
CbllmGenerateOne(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep)
{
	CbllmRequestArgs a;
	CbllmHandle h = {.slot = -1};
	StringInfoData buf;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	CbllmReadOptions(fcinfo, &a, kind);
	PrepareOrRaise(prep, &a, PG_GETARG_DATUM(0), fcinfo, "the prompt");
	CbllmSubmitOrFail(&a, &h);
	initStringInfo(&buf);
	CbllmCollect(&h, &buf);
	PG_RETURN_TEXT_P(CbllmTextFromModel(buf.data, buf.len));
}

/* llm_generate(prompt text, ...options) returns text */
Datum
llm_generate(PG_FUNCTION_ARGS)
{
	return CbllmGenerateOne(fcinfo, CBLLM_REQ_GENERATE, PreparePrompt);
}

/*
 * CbllmGenerateOne's text as jsonb: the body of llm_generate_json and
 * llm_chat_json, whose output the constraint makes a JSON document.
 */
Datum
CbllmGenerateJson(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep)
{
	Datum		t = CbllmGenerateOne(fcinfo, kind, prep);

	if (fcinfo->isnull)
		PG_RETURN_NULL();
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(TextDatumGetCString(t)));
}

/* The finish reason a row of llm_completions shows. */
static const char *
FinishReason(int finish)
{
	switch (finish)
	{
		case CBLLM_FINISH_STOP:
			return "stop";
		case CBLLM_FINISH_LENGTH:
			return "length";
		case CBLLM_FINISH_CONSTRAINT:
			return "constraint";
		case CBLLM_FINISH_ABORT:
			return "cancelled";
		default:
			return "error";
	}
}

/*
 * A chat answer's reasoning as a text value (NULL when there was none); a
 * NUL byte, which a text cannot hold, becomes U+FFFD as in the answer.
 */
static Datum
ReasoningDatum(StringInfo r, bool *isnull)
{
	StringInfoData clean;

	*isnull = r->len == 0;
	if (*isnull)
		return (Datum) 0;
	initStringInfo(&clean);
	for (int i = 0; i < r->len; i++)
	{
		if (r->data[i] == '\0')
			appendBinaryStringInfo(&clean, "\xEF\xBF\xBD", 3);
		else
			appendStringInfoChar(&clean, r->data[i]);
	}
	return PointerGetDatum(CbllmTextFromModel(clean.data, clean.len));
}

/*
 * n completions of one input (argument CBLLM_ARG_FORM), a row each: its
 * number, text, (for a chat: its reasoning,) finish reason, token counts and, when asked (argument
 * CBLLM_ARG_LOGPROBS), its per-token logprobs as a jsonb array
 * (logprobs_json.h).  The n requests are submitted together, each after
 * the first sharing the first's prompt KV (it waits for the first to
 * compute the prompt, then takes its blocks from the prefix cache); a
 * seeded call gives completion i the seed + i - 1.  The finish reason is
 * reported, never raised: an output cut short of its constraint is a row
 * with finish_reason 'length'.  The body of llm_completions and
 * llm_chat_completions.
 */
Datum
CbllmCompletions(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			n = PG_NARGS() > CBLLM_ARG_FORM && !PG_ARGISNULL(CBLLM_ARG_FORM) ?
		PG_GETARG_INT32(CBLLM_ARG_FORM) : 1;
	bool		logprobs = PG_NARGS() > CBLLM_ARG_LOGPROBS && !PG_ARGISNULL(CBLLM_ARG_LOGPROBS);
	CbllmRequestArgs a;
	CbllmHandle h[CBLLM_MAX_COMPLETIONS];

	if (n < 1 || n > CBLLM_MAX_COMPLETIONS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("n must be between 1 and %d, not %d", CBLLM_MAX_COMPLETIONS, n)));
	InitMaterializedSRF(fcinfo, 0);
	if (PG_ARGISNULL(0))
		return (Datum) 0;
	CbllmReadOptions(fcinfo, &a, kind);
	a.params.report_finish = 1;
	/* its range is checked with the other arguments' */
	a.params.logprobs = logprobs;
	a.params.top_logprobs = logprobs ? PG_GETARG_INT32(CBLLM_ARG_LOGPROBS) : 0;
	PrepareOrRaise(prep, &a, PG_GETARG_DATUM(0), fcinfo, "the prompt");
	for (int i = 0; i < n; i++)
	{
		CbllmRequestArgs b = a;

		if (a.params.has_seed)
			b.params.seed = a.params.seed + (uint64) i;
		if (i > 0)
		{
			b.params.share_slot = h[0].slot + 1;
			b.params.share_serial = h[0].serial;
		}
		memset(&h[i], 0, sizeof(h[i]));
		h[i].slot = -1;
		CbllmSubmitOrFail(&b, &h[i]);
	}
	for (int i = 0; i < n; i++)
	{
		StringInfoData buf,
					lp,
					rs;
		CbllmSideParts side;
		CbllmReadResult res;
		Datum		v[7];
		bool		nulls[7] = {false};
		int			c = 0;

		initStringInfo(&buf);
		initStringInfo(&lp);
		initStringInfo(&rs);
		appendStringInfoChar(&lp, '[');
		side.logprobs = logprobs ? &lp : NULL;
		side.reasoning = &rs;
		CbllmCollectResult(&h[i], &buf, &side, &res);
		appendStringInfoChar(&lp, ']');
		v[c++] = Int32GetDatum(i + 1);
		v[c++] = PointerGetDatum(CbllmTextFromModel(buf.data, buf.len));
		if (kind == CBLLM_REQ_CHAT)
		{
			v[c] = ReasoningDatum(&rs, &nulls[c]);
			c++;
		}
		v[c++] = CStringGetTextDatum(FinishReason(res.finish));
		v[c++] = Int32GetDatum(res.progress.n_prompt);
		v[c++] = Int32GetDatum(res.progress.n_generated);
		if (logprobs)
			v[c] = DirectFunctionCall1(jsonb_in, CStringGetDatum(lp.data));
		else
			nulls[c] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
		pfree(buf.data);
		pfree(lp.data);
		pfree(rs.data);
	}
	return (Datum) 0;
}

/* llm_completions(prompt text, ...options, n integer) returns a row per completion */
Datum
llm_completions(PG_FUNCTION_ARGS)
{
	return CbllmCompletions(fcinfo, CBLLM_REQ_GENERATE, PreparePrompt);
}

/* llm_generate_json(prompt text, ...options, json_schema jsonb) returns jsonb */
Datum
llm_generate_json(PG_FUNCTION_ARGS)
{
	return CbllmGenerateJson(fcinfo, CBLLM_REQ_GENERATE, PreparePrompt);
}

/*
 * An array of inputs in (argument 0), an array of texts out: every element
 * is submitted before any is awaited, so the engine batches them; results
 * come back in order.  NULL elements give NULL.  With on_error 'null'
 * (argument on_error_arg) a failing element gives NULL (and a WARNING)
 * instead of an error.  The body of the array forms of llm_generate and
 * llm_chat.
 */
Datum
CbllmGenerateArray(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep, int on_error_arg)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int16		elem_len;
	bool		elem_byval;
	char		elem_align;
	CbllmRequestArgs a;
	CbllmRequestArgs *prepared;
	bool	   *bad;
	CbllmHandle *hs;
	Datum	   *out;
	bool	   *out_null;
	bool		null_on_error = false;
	int			next = 0;
	int			dims[1],
				lbs[1] = {1};

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (!PG_ARGISNULL(on_error_arg))
	{
		char	   *mode = text_to_cstring(PG_GETARG_TEXT_PP(on_error_arg));

		if (strcmp(mode, "null") == 0)
			null_on_error = true;
		else if (strcmp(mode, "raise") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("on_error must be 'raise' or 'null', not '%s'", mode)));
	}
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the inputs must be a one-dimensional array")));
	get_typlenbyvalalign(ARR_ELEMTYPE(arr), &elem_len, &elem_byval, &elem_align);
	deconstruct_array(arr, ARR_ELEMTYPE(arr), elem_len, elem_byval, elem_align, &elems, &nulls, &n);
	CbllmReadOptions(fcinfo, &a, kind);
	hs = palloc0(sizeof(CbllmHandle) * (n > 0 ? n : 1));
	out = palloc0(sizeof(Datum) * (n > 0 ? n : 1));
	out_null = palloc(sizeof(bool) * (n > 0 ? n : 1));
	prepared = palloc0(sizeof(CbllmRequestArgs) * (n > 0 ? n : 1));
	bad = palloc0(sizeof(bool) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
	{
		int			code = 0;
		char		msg[CBLLM_ERROR_LEN];

		hs[i].slot = -1;
		out_null[i] = true;
		if (nulls[i])
			continue;
		/* each element's own problems (too large, not convertible, malformed) are that element's */
		prepared[i] = a;
		if (!prep(&prepared[i], elems[i], fcinfo, &code, msg))
		{
			if (!null_on_error)
			{
				if (code == ERRCODE_CHARACTER_NOT_IN_REPERTOIRE)
					ereport(ERROR, (errcode(code),
									errmsg("cannot pass element %d to the model: %s", i + 1, msg)));
				CbllmCheckArgs(&prepared[i]);
				ereport(ERROR, (errcode(code ? code : ERRCODE_INVALID_PARAMETER_VALUE),
								errmsg("element %d: %s", i + 1, msg)));
			}
			ereport(WARNING,
					(errcode(code), errmsg("cbllm: element %d failed: %s", i + 1, msg)));
			bad[i] = true;
		}
	}
	CbllmWaitReady();
	/* submit as many as slots allow, then collect in order, submitting more as slots free */
	for (int i = 0; i < n; i++)
	{
		StringInfoData buf;
		bool		failed;
		int			code;
		char		msg[CBLLM_ERROR_LEN];

		for (; next < n; next++)
		{
			if (nulls[next] || bad[next])
				continue;
			if (!CbllmSubmit(&prepared[next], &hs[next], next == i))
				break;
		}
		if (nulls[i] || bad[i])
			continue;
		initStringInfo(&buf);
		while (!CbllmPoll(&hs[i], &buf, &failed, &code, msg))
			CbllmWait(&hs[i]);
		CbllmRelease(&hs[i]);
		if (failed && !null_on_error)
			CbllmRaiseFailure(code, msg);
		if (failed)
			ereport(WARNING,
					(errcode(code ? code : ERRCODE_INTERNAL_ERROR),
					 errmsg("cbllm: element %d failed: %s", i + 1, msg)));
		else
		{
			out[i] = PointerGetDatum(CbllmTextFromModel(buf.data, buf.len));
			out_null[i] = false;
		}
		pfree(buf.data);
	}
	dims[0] = n;
	PG_RETURN_ARRAYTYPE_P(construct_md_array(out, out_null, n > 0 ? 1 : 0, dims, lbs, TEXTOID,
											 -1, false, TYPALIGN_INT));
}

/* llm_generate(prompts text[], ...options, on_error text) returns text[] */
Datum
llm_generate_array(PG_FUNCTION_ARGS)
{
	return CbllmGenerateArray(fcinfo, CBLLM_REQ_GENERATE, PreparePrompt, CBLLM_ARG_FORM);
}

typedef struct StreamState
{
	CbllmHandle h;
	bool		done;
} StreamState;

/* ExprContext shutdown: the scan was abandoned (LIMIT, cursor closed, error). */
static void
StreamShutdown(Datum arg)
{
	StreamState *st = (StreamState *) DatumGetPointer(arg);

	if (!st->done)
		CbllmCancel(&st->h);
	st->done = true;
}

/* One row per text piece as it is generated: the body of llm_generate_stream and llm_chat_stream. */
Datum
CbllmGenerateStream(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep)
{
	FuncCallContext *fctx;
	StreamState *st;
	StringInfoData buf;
	bool		failed = false;
	int			code = 0;
	char		msg[CBLLM_ERROR_LEN];

	if (SRF_IS_FIRSTCALL())
	{
		MemoryContext old;
		CbllmRequestArgs a;
		ReturnSetInfo *rsi = (ReturnSetInfo *) fcinfo->resultinfo;

		fctx = SRF_FIRSTCALL_INIT();
		if (PG_ARGISNULL(0))
			SRF_RETURN_DONE(fctx);
		/* the state outlives the SRF's own context: the shutdown callback reads it */
		old = MemoryContextSwitchTo(rsi != NULL && IsA(rsi, ReturnSetInfo) && rsi->econtext ?
									rsi->econtext->ecxt_per_query_memory :
									fctx->multi_call_memory_ctx);
		st = palloc0(sizeof(StreamState));
		st->h.slot = -1;
		fctx->user_fctx = st;
		MemoryContextSwitchTo(old);
		CbllmReadOptions(fcinfo, &a, kind);
		PrepareOrRaise(prep, &a, PG_GETARG_DATUM(0), fcinfo, "the prompt");
		CbllmSubmitOrFail(&a, &st->h);
		if (rsi != NULL && IsA(rsi, ReturnSetInfo) && rsi->econtext != NULL)
			RegisterExprContextCallback(rsi->econtext, StreamShutdown, PointerGetDatum(st));
	}
	fctx = SRF_PERCALL_SETUP();
	st = fctx->user_fctx;
	if (st == NULL || st->done)
		SRF_RETURN_DONE(fctx);
	CbllmFlushClient();			/* the previous piece's row goes out before we wait */
	initStringInfo(&buf);
	for (;;)
	{
		bool		over = CbllmPollPiece(&st->h, &buf, &failed, &code, msg);

		if (buf.len > 0)
			break;				/* one piece: return it as a row */
		if (over)
		{
			st->done = true;
			CbllmRelease(&st->h);
			if (failed)
				CbllmRaiseFailure(code, msg);
			SRF_RETURN_DONE(fctx);
		}
		CbllmWait(&st->h);
	}
	SRF_RETURN_NEXT(fctx, PointerGetDatum(CbllmTextFromModel(buf.data, buf.len)));
}

/* llm_generate_stream(prompt text, ...options) returns setof text, one row per piece */
Datum
llm_generate_stream(PG_FUNCTION_ARGS)
{
	return CbllmGenerateStream(fcinfo, CBLLM_REQ_GENERATE, PreparePrompt);
}

/*
 * Queue a request and return its id at once: the body of llm_submit and
 * llm_submit_chat.  The request belongs to the session: it survives the
 * transaction and is cancelled when the session ends without collecting it;
 * with transaction_scoped (argument scoped_arg) it is cancelled when the
 * transaction ends instead (what a batch job that collects before each
 * COMMIT wants, so that an interruption leaves nothing running).
 */
Datum
CbllmSubmitAsync(FunctionCallInfo fcinfo, int kind, CbllmPrepareFn prep, int scoped_arg)
{
	CbllmRequestArgs a;
	CbllmHandle h = {.slot = -1, .async = true};

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	h.session = PG_NARGS() <= scoped_arg || PG_ARGISNULL(scoped_arg) || !PG_GETARG_BOOL(scoped_arg);
	CbllmReadOptions(fcinfo, &a, kind);
	PrepareOrRaise(prep, &a, PG_GETARG_DATUM(0), fcinfo, "the prompt");
	CbllmSubmitOrFail(&a, &h);
	PG_RETURN_INT64((int64) ((h.serial << ASYNC_SLOT_BITS) | (uint64) h.slot));
}

/* llm_submit(prompt text, ...options, transaction_scoped boolean) returns bigint */
Datum
llm_submit(PG_FUNCTION_ARGS)
{
	return CbllmSubmitAsync(fcinfo, CBLLM_REQ_GENERATE, PreparePrompt, CBLLM_ARG_FORM);
}

/*
 * Text collected so far for this session's llm_submit requests, by slot
 * (a slow collector must not leave the worker holding the whole output).
 */
typedef struct AsyncText
{
	uint64		serial;
	StringInfoData text;
} AsyncText;

static AsyncText *async_text = NULL;

/* The collected-text buffer of handle h, emptied when h is a new request. */
static StringInfo
AsyncBuffer(const CbllmHandle *h)
{
	AsyncText  *a;

	if (async_text == NULL)
		async_text = MemoryContextAllocZero(TopMemoryContext,
											sizeof(AsyncText) * cbllm_shared->n_slots);
	a = &async_text[h->slot];
	if (a->text.data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&a->text);
		MemoryContextSwitchTo(old);
	}
	if (a->serial != h->serial)
	{
		resetStringInfo(&a->text);
		a->serial = h->serial;
	}
	return &a->text;
}

/*
 * llm_result(id bigint, wait boolean DEFAULT true) returns text: the text of a
 * request from llm_submit.  Without wait it returns NULL while the request is
 * still running (taking in what has arrived so far).  A result can be
 * collected once; a failed request raises its error.
 */
Datum
llm_result(PG_FUNCTION_ARGS)
{
	int64		id = PG_GETARG_INT64(0);
	bool		wait = PG_ARGISNULL(1) ? true : PG_GETARG_BOOL(1);
	CbllmHandle h;
	StringInfo	buf;
	bool		failed,
				over;
	int			code;
	char		msg[CBLLM_ERROR_LEN];
	text	   *result;

	if (id < 0 || cbllm_shared == NULL ||
		!CbllmFindOwned((int) (id & ((1 << ASYNC_SLOT_BITS) - 1)),
						(uint64) id >> ASYNC_SLOT_BITS, true, &h))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("no cbllm request %lld in this session", (long long) id),
				 errdetail("A request id comes from llm_submit in the same session, and its result can be collected once.")));
	buf = AsyncBuffer(&h);
	while (!(over = CbllmPoll(&h, buf, &failed, &code, msg)) && wait)
		CbllmWait(&h);
	if (!over)
		PG_RETURN_NULL();
	CbllmRelease(&h);
	if (failed)
	{
		resetStringInfo(buf);
		CbllmRaiseFailure(code, msg);
	}
	result = CbllmTextFromModel(buf->data, buf->len);
	resetStringInfo(buf);
	PG_RETURN_TEXT_P(result);
}

/*
 * The forms the batching node runs in batches: one input in, one value out,
 * each call a request of its own.  By the C function's name; a function
 * counts only when it is this library's (pg_proc.probin names it).
 */
static const CbllmBatchForm batch_forms[] = {
	{"llm_generate", CBLLM_REQ_GENERATE, PreparePrompt, false},
	{"llm_generate_json", CBLLM_REQ_GENERATE, PreparePrompt, true},
	{"llm_chat", CBLLM_REQ_CHAT, CbllmPrepareChat, false},
	{"llm_chat_json", CBLLM_REQ_CHAT, CbllmPrepareChat, true},
};

/* Which functions are which form, looked up once per function (-1: none). */
typedef struct FormCacheEntry
{
	Oid			funcid;
	int			form;
} FormCacheEntry;

static FormCacheEntry form_cache[64];
static int	n_form_cache = 0;

/* A function was created, replaced or dropped: look every one up again. */
static void
ForgetForms(Datum arg, int cacheid, uint32 hashvalue)
{
	n_form_cache = 0;
}

/* The form of function funcid, from its catalog row (-1: not one). */
static int
LookUpForm(Oid funcid)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	int			form = -1;
	bool		isnull;
	Datum		bin,
				src;

	if (!HeapTupleIsValid(tup))
		return -1;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	bin = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_probin, &isnull);
	if (proc->prolang == ClanguageId && !proc->proretset && !isnull)
	{
		char	   *lib = TextDatumGetCString(bin),
				   *name;
		size_t		n = strlen(lib);

		src = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		name = isnull ? NULL : TextDatumGetCString(src);
		if (name != NULL && n >= 5 && strcmp(lib + n - 5, "cbllm") == 0)
			for (int i = 0; i < (int) lengthof(batch_forms); i++)
				if (strcmp(name, batch_forms[i].symbol) == 0)
					form = i;
	}
	ReleaseSysCache(tup);
	return form;
}

/* The form function funcid is, or NULL: whether a call of it can go in a batch. */
const CbllmBatchForm *
CbllmBatchFormOf(Oid funcid)
{
	static bool registered = false;
	int			form;

	for (int i = 0; i < n_form_cache; i++)
		if (form_cache[i].funcid == funcid)
			return form_cache[i].form < 0 ? NULL : &batch_forms[form_cache[i].form];
	if (!registered)
	{
		CacheRegisterSyscacheCallback(PROCOID, ForgetForms, (Datum) 0);
		registered = true;
	}
	form = LookUpForm(funcid);
	if (n_form_cache == lengthof(form_cache))
		n_form_cache = 0;
	form_cache[n_form_cache++] = (FormCacheEntry) {funcid, form};
	return form < 0 ? NULL : &batch_forms[form];
}
