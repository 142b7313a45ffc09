/*
 * sql_chat.c: llm_chat (one conversation), llm_chat_batch (an array of them
 * submitted at once), llm_chat_stream, llm_submit_chat and
 * llm_apply_chat_template.
 *
 * A conversation is a jsonb array of messages ({"role": ..., "content":
 * ...}); the engine renders it with the model's chat template (the
 * template's own checks, such as alternating roles, are its errors) and
 * generates from the rendered prompt, stopping at the model's end-of-turn
 * tokens.  The request's input is the messages' JSON text, a NUL byte, and
 * the template variables' JSON object (template_kwargs, "{}" for none):
 * CBLLM_CHAT_PAYLOAD in request_kind.h.  template_kwargs is the last
 * argument of every form.
 */
#include "cbllm_pg.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

PG_FUNCTION_INFO_V1(llm_chat);
PG_FUNCTION_INFO_V1(llm_chat_json);
PG_FUNCTION_INFO_V1(llm_chat_completions);
PG_FUNCTION_INFO_V1(llm_chat_array);
PG_FUNCTION_INFO_V1(llm_chat_stream);
PG_FUNCTION_INFO_V1(llm_submit_chat);
PG_FUNCTION_INFO_V1(llm_apply_chat_template);

/* A jsonb's text in the model's encoding (palloc'd), or NULL with msg when it cannot be converted. */
static char *
JsonbToModel(Jsonb *j, int *len, char *msg)
{
	char	   *s = JsonbToCString(NULL, &j->root, VARSIZE(j));

	return CbllmTextToModel(s, (int) strlen(s), len, msg);
}

/* Whether j is a JSON array (what every form's messages must be). */
static bool
IsArray(Jsonb *j)
{
	return JB_ROOT_IS_ARRAY(j) && !JB_ROOT_IS_SCALAR(j);
}

/*
 * The payload of messages and template variables (NULL: none) into a, as
 * the engine reads it.  False with the sqlstate and message of the problem.
 */
static bool
SetChatPayload(CbllmRequestArgs *a, Jsonb *messages, Jsonb *vars, int *code, char *msg)
{
	char	   *m,
			   *v = "{}",
			   *payload;
	int			mlen,
				vlen = 2;

	if (!IsArray(messages))
	{
		*code = ERRCODE_INVALID_PARAMETER_VALUE;
		snprintf(msg, CBLLM_ERROR_LEN, "messages must be a JSON array of message objects");
		return false;
	}
	if (vars != NULL && !(JB_ROOT_IS_OBJECT(vars)))
	{
		*code = ERRCODE_INVALID_PARAMETER_VALUE;
		snprintf(msg, CBLLM_ERROR_LEN, "template_kwargs must be a JSON object");
		return false;
	}
	/* the size limit first, on the stored sizes: a huge jsonb is refused before it is printed */
	a->params.prompt_len = (int) Min((Size) VARSIZE(messages) + (vars ? VARSIZE(vars) : 0),
									 (Size) PG_INT32_MAX);
	if (a->params.prompt_len > cbllm_max_prompt_bytes)
		return CbllmArgsError(a, code, msg);
	if ((m = JsonbToModel(messages, &mlen, msg)) == NULL ||
		(vars != NULL && (v = JsonbToModel(vars, &vlen, msg)) == NULL))
	{
		*code = ERRCODE_CHARACTER_NOT_IN_REPERTOIRE;
		a->params.prompt_len = 0;
		return false;
	}
	payload = palloc((Size) mlen + 1 + vlen + 1);
	memcpy(payload, m, mlen);
	payload[mlen] = '\0';
	memcpy(payload + mlen + 1, v, vlen);
	payload[mlen + 1 + vlen] = '\0';
	a->prompt = payload;
	a->params.prompt_len = mlen + 1 + vlen;
	return CbllmArgsError(a, code, msg);
}

/* A form's input: one conversation, with template_kwargs from the form's last argument. */
bool
CbllmPrepareChat(CbllmRequestArgs *a, Datum input, FunctionCallInfo fcinfo, int *code, char *msg)
{
	int			last = PG_NARGS() - 1;

	return SetChatPayload(a, DatumGetJsonbP(input), PG_ARGISNULL(last) ? NULL : PG_GETARG_JSONB_P(last),
						  code, msg);
}

/* llm_chat(messages jsonb, ...options, template_kwargs jsonb) returns text */
Datum
llm_chat(PG_FUNCTION_ARGS)
{
	return CbllmGenerateOne(fcinfo, CBLLM_REQ_CHAT, CbllmPrepareChat);
}

/* llm_chat_completions(messages jsonb, ...options, n integer, template_kwargs jsonb) returns rows */
Datum
llm_chat_completions(PG_FUNCTION_ARGS)
{
	return CbllmCompletions(fcinfo, CBLLM_REQ_CHAT, CbllmPrepareChat);
}

/* llm_chat_json(messages jsonb, ...options, json_schema jsonb, template_kwargs jsonb) returns jsonb */
Datum
llm_chat_json(PG_FUNCTION_ARGS)
{
	return CbllmGenerateJson(fcinfo, CBLLM_REQ_CHAT, CbllmPrepareChat);
}

/* llm_chat_batch(conversations jsonb[], ...options, on_error text, template_kwargs jsonb) returns text[] */
Datum
llm_chat_array(PG_FUNCTION_ARGS)
{
	return CbllmGenerateArray(fcinfo, CBLLM_REQ_CHAT, CbllmPrepareChat, CBLLM_ARG_FORM);
}

/* llm_chat_stream(messages jsonb, ...options, template_kwargs jsonb) returns setof text */
Datum
llm_chat_stream(PG_FUNCTION_ARGS)
{
	return CbllmGenerateStream(fcinfo, CBLLM_REQ_CHAT, CbllmPrepareChat);
}

/* llm_submit_chat(messages jsonb, ...options, transaction_scoped boolean, template_kwargs jsonb) returns bigint */
Datum
llm_submit_chat(PG_FUNCTION_ARGS)
{
	return CbllmSubmitAsync(fcinfo, CBLLM_REQ_CHAT, CbllmPrepareChat, CBLLM_ARG_FORM);
}

/* vars with key set to the boolean value (replacing the key if vars has it); vars may be NULL. */
static Jsonb *
WithBool(Jsonb *vars, const char *key, bool value)
{
	JsonbParseState *st = NULL;
	JsonbValue	k,
				v;
	JsonbValue *res;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	if (vars != NULL && JB_ROOT_IS_OBJECT(vars))
	{
		JsonbIterator *it = JsonbIteratorInit(&vars->root);
		JsonbIteratorToken tok;
		bool		skip = false;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			if (tok == WJB_KEY)
			{
				skip = v.val.string.len == (int) strlen(key) &&
					memcmp(v.val.string.val, key, v.val.string.len) == 0;
				if (!skip)
					pushJsonbValue(&st, WJB_KEY, &v);
			}
			else if (tok == WJB_VALUE && !skip)
				pushJsonbValue(&st, WJB_VALUE, &v);
		}
	}
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = (int) strlen(key);
	v.type = jbvBool;
	v.val.boolean = value;
	pushJsonbValue(&st, WJB_KEY, &k);
	pushJsonbValue(&st, WJB_VALUE, &v);
	res = pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(res);
}

/*
 * llm_apply_chat_template(messages jsonb, add_generation_prompt boolean,
 * template_kwargs jsonb) returns text: the prompt the model's chat template
 * makes of the messages, as llm_chat would generate from it (the argument
 * add_generation_prompt wins over the same key in template_kwargs).
 */
Datum
llm_apply_chat_template(PG_FUNCTION_ARGS)
{
	CbllmRequestArgs a;
	bool		agp = PG_ARGISNULL(1) ? true : PG_GETARG_BOOL(1);
	Jsonb	   *vars = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	StringInfoData out;
	int			code = 0;
	char		msg[CBLLM_ERROR_LEN];

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	if (vars != NULL && !JB_ROOT_IS_OBJECT(vars))
		ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						errmsg("template_kwargs must be a JSON object")));
	memset(&a, 0, sizeof(a));
	CbllmDefaultParams(&a.params, CBLLM_REQ_RENDER);
	if (!SetChatPayload(&a, PG_GETARG_JSONB_P(0), WithBool(vars, "add_generation_prompt", agp),
						&code, msg))
	{
		CbllmCheckArgs(&a);
		ereport(ERROR, (errcode(code), errmsg("%s", msg)));
	}
	initStringInfo(&out);
	CbllmAskEngine(CBLLM_REQ_RENDER, a.prompt, a.params.prompt_len, &out);
	PG_RETURN_TEXT_P(CbllmTextFromModel(out.data, out.len));
}
