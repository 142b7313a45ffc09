/*
 * sql_tokenize.c: llm_tokenize, llm_detokenize and llm_token_count.  They
 * ask the engine, through a request slot like any generation: the worker
 * tokenizes with the model it has loaded, so every session sees exactly the
 * tokens generation sees, no backend parses the tokenizer files (or keeps a
 * copy of them), the prompt size limit applies, and a long call stays
 * cancellable.
 */
#include "cbllm_pg.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(llm_tokenize);
PG_FUNCTION_INFO_V1(llm_detokenize);
PG_FUNCTION_INFO_V1(llm_token_count);

/* Run one request of the given kind on len bytes of input; its whole output goes to out. */
void
CbllmAskEngine(int kind, const char *input, int len, StringInfo out)
{
	CbllmRequestArgs a;
	CbllmHandle h = {.slot = -1};
	bool		failed;
	int			code;
	char		msg[CBLLM_ERROR_LEN];

	memset(&a, 0, sizeof(a));
	CbllmDefaultParams(&a.params, kind);
	a.prompt = input;
	a.params.prompt_len = len;
	CbllmCheckArgs(&a);
	CbllmSubmitOrFail(&a, &h);
	while (!CbllmPoll(&h, out, &failed, &code, msg))
		CbllmWait(&h);
	CbllmRelease(&h);
	if (failed && code == ERRCODE_INVALID_PARAMETER_VALUE)
		ereport(ERROR, (errcode(code), errmsg("%s", msg)));	/* the caller's argument */
	if (failed)
		CbllmRaiseFailure(code, msg);
}

/* Text as UTF-8 for the engine, its size checked before it is converted. */
static char *
InputText(text *t, int *len)
{
	CbllmRequestArgs a;

	memset(&a, 0, sizeof(a));
	a.params.kind = CBLLM_REQ_TOKENIZE;
	a.params.prompt_len = VARSIZE_ANY_EXHDR(t);
	CbllmCheckArgs(&a);			/* refuses an oversized text before any work */
	return CbllmTextToModelOrError(t, len);
}

/* llm_tokenize(text) returns int[]: the ids of the text as the engine reads a prompt (with BOS) */
Datum
llm_tokenize(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *s = InputText(PG_GETARG_TEXT_PP(0), &len);
	StringInfoData out;
	int			n;
	Datum	   *d;

	initStringInfo(&out);
	CbllmAskEngine(CBLLM_REQ_TOKENIZE, s, len, &out);
	n = out.len / (int) sizeof(int32);
	d = palloc(sizeof(Datum) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
	{
		int32		id;

		memcpy(&id, out.data + (Size) i * sizeof(int32), sizeof(int32));
		d[i] = Int32GetDatum(id);
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(d, n, INT4OID, 4, true, TYPALIGN_INT));
}

/* llm_token_count(text) returns int */
Datum
llm_token_count(PG_FUNCTION_ARGS)
{
	int			len;
	char	   *s = InputText(PG_GETARG_TEXT_PP(0), &len);
	StringInfoData out;
	int32		n;

	initStringInfo(&out);
	CbllmAskEngine(CBLLM_REQ_TOKEN_COUNT, s, len, &out);
	if (out.len != sizeof(int32))
		elog(ERROR, "cbllm: token count reply of %d bytes", out.len);
	memcpy(&n, out.data, sizeof(n));
	PG_RETURN_INT32(n);
}

/* llm_detokenize(int[]) returns text (special tokens are dropped, as in generated text) */
Datum
llm_detokenize(PG_FUNCTION_ARGS)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(0);
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int32	   *ids;
	StringInfoData out;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token ids must be a one-dimensional integer array")));
	deconstruct_array(arr, INT4OID, 4, true, TYPALIGN_INT, &elems, &nulls, &n);
	ids = palloc(sizeof(int32) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("token ids must not be NULL")));
		ids[i] = DatumGetInt32(elems[i]);
	}
	initStringInfo(&out);
	CbllmAskEngine(CBLLM_REQ_DETOKENIZE, (const char *) ids, n * (int) sizeof(int32), &out);
	PG_RETURN_TEXT_P(CbllmTextFromModel(out.data, out.len));
}
