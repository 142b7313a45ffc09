/*
 * sql_tokenize.c: llm_tokenize, llm_detokenize and llm_token_count.  These
 * run in the calling backend with the model's tokenizer, loaded once per
 * backend from cbllm.model, so they need neither the worker nor a slot.
 */
#include "cbllm_pg.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "../src/tokenizer.h"

PG_FUNCTION_INFO_V1(llm_tokenize);
PG_FUNCTION_INFO_V1(llm_detokenize);
PG_FUNCTION_INFO_V1(llm_token_count);

static cbllm_tokenizer *tokenizer = NULL;

/* The backend's tokenizer, loaded on first use. */
static cbllm_tokenizer *
GetTokenizer(void)
{
	cbllm_err	err;

	if (tokenizer != NULL)
		return tokenizer;
	CbllmCheckLoaded();
	if (cbllm_model == NULL || cbllm_model[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("no model is configured"),
				 errhint("Set cbllm.model to a HuggingFace model directory and restart the server.")));
	if (tokenizer_load(cbllm_model, &tokenizer, &err) != CBLLM_OK)
	{
		tokenizer = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot load the tokenizer"),
				 errdetail("%s", err.msg),
				 errhint("Check cbllm.model.")));
	}
	return tokenizer;
}

/* Token ids of t as the engine sees a prompt (BOS added, special tokens parsed). */
static int32 *
Encode(text *t, int *n)
{
	cbllm_tokenizer *tok = GetTokenizer();
	tokenizer_encode_opts o = {.add_bos = true, .parse_special = true};
	int32_t    *ids;
	int32	   *out;
	cbllm_err	err;

	if (tokenizer_encode(tok, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), o, &ids, n, &err) != CBLLM_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("cannot tokenize the text: %s", err.msg)));
	out = palloc(sizeof(int32) * (*n > 0 ? *n : 1));
	memcpy(out, ids, sizeof(int32) * *n);
	free(ids);
	return out;
}

/* llm_tokenize(text) returns int[] */
Datum
llm_tokenize(PG_FUNCTION_ARGS)
{
	int			n;
	int32	   *ids = Encode(PG_GETARG_TEXT_PP(0), &n);
	Datum	   *d = palloc(sizeof(Datum) * (n > 0 ? n : 1));

	for (int i = 0; i < n; i++)
		d[i] = Int32GetDatum(ids[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(d, n, INT4OID, 4, true, TYPALIGN_INT));
}

/* llm_token_count(text) returns int */
Datum
llm_token_count(PG_FUNCTION_ARGS)
{
	int			n;

	(void) Encode(PG_GETARG_TEXT_PP(0), &n);
	PG_RETURN_INT32(n);
}

/* llm_detokenize(int[]) returns text (special tokens are dropped, as in generated text) */
Datum
llm_detokenize(PG_FUNCTION_ARGS)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(0);
	cbllm_tokenizer *tok = GetTokenizer();
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	int32_t    *ids;
	cbllm_buf	out = {0};
	cbllm_err	err;
	text	   *result;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token ids must be a one-dimensional integer array")));
	deconstruct_array(arr, INT4OID, 4, true, TYPALIGN_INT, &elems, &nulls, &n);
	ids = palloc(sizeof(int32_t) * (n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("token ids must not be NULL")));
		ids[i] = DatumGetInt32(elems[i]);
		if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(tok))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("token id %d is outside the vocabulary of %d", ids[i],
							tokenizer_vocab_size(tok))));
	}
	if (tokenizer_decode(tok, ids, n, true, &out, &err) != CBLLM_OK)
	{
		cbllm_buf_free(&out);
		ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("cannot decode: %s", err.msg)));
	}
	result = cstring_to_text_with_len(out.data ? out.data : "", out.len);
	cbllm_buf_free(&out);
	PG_RETURN_TEXT_P(result);
}
