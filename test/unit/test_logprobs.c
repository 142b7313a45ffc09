/*
 * test_logprobs.c: per-token logprobs (cbllm_sampling.logprobs,
 * cbllm_logprob) and their JSON (logprobs_json.h).
 *
 *   - each generated token has one record; its logprob and its top
 *     alternatives equal a log-softmax computed here in double precision
 *     from the model's own logits for the whole sequence
 *     (cbllm_engine_prompt_logits), after the request's logit_bias and
 *     penalties, at temperature 1, whatever temperature, top_p and min_p
 *     the draw used;
 *   - greedy decoding chooses the first alternative; alternatives come
 *     most likely first, ties by id;
 *   - under a constraint the alternatives are the allowed tokens only:
 *     with few enough of them they hold all the probability;
 *   - a request without logprobs has none;
 *   - the JSON of a run on the Llama-3 vocabulary parses, has a record per
 *     token with the same ids and logprobs, and its tokens (their "bytes"
 *     where a token is a piece of a character) spell the output text; a
 *     token that is part of a character has "bytes".
 *
 * usage: test_logprobs MODEL_DIR LLAMA3_MODEL_DIR
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "sample/logprobs_json.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

#define GEN 12
#define TOP 5

typedef struct run
{
	int32_t		tokens[GEN];
	cbllm_logprob lp[GEN];
	int			n;
	int			n_lp;
	bool		any_lp_pointer; /* a take returned logprobs */
	cbllm_buf	text;
} run;

static bool
Collect(void *arg, int i, const cbllm_output *o)
{
	run		   *r = arg;

	(void) i;
	if (o->logprobs != NULL)
		r->any_lp_pointer = true;
	for (int k = 0; k < o->n_tokens && r->n < GEN; k++)
		r->tokens[r->n++] = o->tokens[k];
	for (int k = 0; k < o->n_logprobs && r->n_lp < GEN; k++)
		r->lp[r->n_lp++] = o->logprobs[k];
	if (o->text_len > 0)
		cbllm_buf_append(&r->text, o->text, o->text_len);
	return true;
}

static cbllm_engine *
NewEngine(const char *dir)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.model_dir = dir;
	p.n_threads = 2;
	p.max_model_len = 128;
	p.kv_cache_dtype = "f32";
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
		TAP_DIAG("engine_create: %s", err.msg);
	return e;
}

static const int32_t prompt[] = {1, 15, 267, 42, 300, 7, 99, 180};
#define N_PROMPT ((int) (sizeof(prompt) / sizeof(prompt[0])))

/* Run one request of sp on prompt; false on an engine error. */
static bool
RunOne(cbllm_engine *e, const cbllm_sampling *sp, run *r)
{
	cbllm_request_input in = {.ids = prompt, .n_ids = N_PROMPT};
	int64_t		id;
	cbllm_err	err;

	memset(r, 0, sizeof(*r));
	if (cbllm_engine_submit(e, &in, sp, &id, &err) != CBLLM_OK)
	{
		TAP_DIAG("submit: %s", err.msg);
		return false;
	}
	return engine_run_to_end(e, &id, 1, 1000, Collect, r) >= 0;
}

/*
 * Check r's records against the log-softmax of the model's logits for the
 * sequence, with bias[] (vocab floats, or NULL) added first; the worst
 * difference goes to *worst.  false when a record disagrees.
 */
static bool
AgreesWithLogits(cbllm_engine *e, const run *r, const float *bias, double *worst)
{
	cbllm_engine_info info;
	int32_t		seq[N_PROMPT + GEN];
	int			n = N_PROMPT + r->n - 1;
	float	   *logits;
	double	   *l;
	cbllm_err	err;
	bool		ok = r->n_lp == r->n && r->n > 0;

	cbllm_engine_get_info(e, &info);
	memcpy(seq, prompt, sizeof(prompt));
	memcpy(seq + N_PROMPT, r->tokens, sizeof(int32_t) * r->n);
	logits = malloc(sizeof(float) * (size_t) n * info.vocab_size);
	l = malloc(sizeof(double) * info.vocab_size);
	*worst = 0;
	if (logits == NULL || l == NULL ||
		cbllm_engine_prompt_logits(e, seq, n, logits, &err) != CBLLM_OK)
		ok = false;
	for (int j = 0; ok && j < r->n; j++)
	{
		const float *row = logits + (size_t) (N_PROMPT - 1 + j) * info.vocab_size;
		const cbllm_logprob *rec = &r->lp[j];
		double		mx = -INFINITY,
					sum = 0,
					lse;

		for (int v = 0; v < info.vocab_size; v++)
		{
			l[v] = (double) row[v] + (bias ? bias[v] : 0);
			mx = l[v] > mx ? l[v] : mx;
		}
		for (int v = 0; v < info.vocab_size; v++)
			sum += exp(l[v] - mx);
		lse = mx + log(sum);
		ok &= rec->id == r->tokens[j];
		*worst = fmax(*worst, fabs(rec->logprob - (l[rec->id] - lse)));
		ok &= rec->n_top == TOP;
		for (int k = 0; ok && k < rec->n_top; k++)
		{
			int			above = 0;

			*worst = fmax(*worst, fabs(rec->top_logprobs[k] - (l[rec->top_ids[k]] - lse)));
			/* alternative k has exactly k tokens clearly more likely than it */
			for (int v = 0; v < info.vocab_size; v++)
				above += l[v] > l[rec->top_ids[k]] + 1e-4;
			ok &= above <= k;
			if (k > 0)
				ok &= rec->top_logprobs[k] <= rec->top_logprobs[k - 1];
		}
	}
	free(logits);
	free(l);
	return ok && *worst < 2e-3;
}

int
main(int argc, char **argv)
{
	cbllm_engine *e;
	cbllm_sampling sp;
	run			r;
	double		worst;
	bool		ok;

	if (argc != 3)
	{
		fprintf(stderr, "usage: test_logprobs MODEL_DIR LLAMA3_MODEL_DIR\n");
		return 2;
	}
	e = NewEngine(argv[1]);
	TAP_OK(e != NULL, "engine on the small model");
	if (e == NULL)
		return tap_done();

	/* greedy */
	sp = cbllm_sampling_default();
	sp.max_tokens = GEN;
	sp.ignore_eos = true;
	sp.logprobs = true;
	sp.top_logprobs = TOP;
	ok = RunOne(e, &sp, &r);
	TAP_OK(ok && r.n == GEN && r.n_lp == GEN, "greedy: a record for each of the %d tokens (%d)",
		   GEN, r.n_lp);
	ok = true;
	for (int j = 0; j < r.n_lp; j++)
		ok &= r.lp[j].top_ids[0] == r.tokens[j] && r.lp[j].top_logprobs[0] == r.lp[j].logprob &&
			r.lp[j].logprob <= 0;
	TAP_OK(ok && r.n_lp > 0, "greedy: the chosen token is the first alternative, with its logprob");
	TAP_OK(AgreesWithLogits(e, &r, NULL, &worst),
		   "greedy: logprobs and alternatives equal the log-softmax of the model's logits "
		   "(worst difference %.2g)", worst);
	cbllm_buf_free(&r.text);

	/* sampled: temperature, top_p and min_p narrow the draw, not the reported distribution */
	sp.temperature = 0.7f;
	sp.top_p = 0.9f;
	sp.min_p = 0.05f;
	sp.has_seed = true;
	sp.seed = 7;
	ok = RunOne(e, &sp, &r);
	TAP_OK(ok && r.n_lp == GEN && AgreesWithLogits(e, &r, NULL, &worst),
		   "sampled (temperature 0.7, top_p 0.9, min_p 0.05): logprobs at temperature 1 before "
		   "min_p and top_p (worst difference %.2g)", worst);
	cbllm_buf_free(&r.text);

	/* logit_bias shifts the reported distribution */
	{
		cbllm_engine_info info;
		int32_t		ids[2] = {5, 77};
		float		vals[2] = {3.0f, -2.5f};
		float	   *bias;

		cbllm_engine_get_info(e, &info);
		bias = calloc(info.vocab_size, sizeof(float));
		bias[5] = 3.0f;
		bias[77] = -2.5f;
		sp = cbllm_sampling_default();
		sp.max_tokens = GEN;
		sp.ignore_eos = true;
		sp.logprobs = true;
		sp.top_logprobs = TOP;
		sp.n_bias = 2;
		sp.bias_ids = ids;
		sp.bias_values = vals;
		ok = RunOne(e, &sp, &r);
		TAP_OK(ok && AgreesWithLogits(e, &r, bias, &worst),
			   "logit_bias: logprobs after the bias (worst difference %.2g)", worst);
		cbllm_buf_free(&r.text);
		free(bias);
	}

	/* a constraint: the alternatives are the allowed tokens, which hold all the mass */
	{
		static const char re[] = "(yes|no)";

		sp = cbllm_sampling_default();
		sp.max_tokens = GEN;
		sp.logprobs = true;
		sp.top_logprobs = CBLLM_MAX_TOP_LOGPROBS;
		sp.constraint = re;
		sp.constraint_len = strlen(re);
		ok = RunOne(e, &sp, &r);
		for (int j = 0; ok && j < r.n_lp; j++)
		{
			double		mass = 0;

			ok &= r.lp[j].n_top >= 1 && r.lp[j].n_top < CBLLM_MAX_TOP_LOGPROBS;
			for (int k = 0; k < r.lp[j].n_top; k++)
				mass += exp(r.lp[j].top_logprobs[k]);
			ok &= fabs(mass - 1) < 1e-4;
		}
		TAP_OK(ok && r.n_lp == r.n && r.n > 0,
			   "constraint: fewer than %d alternatives at each of %d steps, all the mass among them",
			   CBLLM_MAX_TOP_LOGPROBS, r.n);
		cbllm_buf_free(&r.text);
	}

	/* none asked, none given */
	sp = cbllm_sampling_default();
	sp.max_tokens = 4;
	ok = RunOne(e, &sp, &r);
	TAP_OK(ok && r.n > 0 && r.n_lp == 0 && !r.any_lp_pointer, "no logprobs unless asked");
	cbllm_buf_free(&r.text);
	sp.logprobs = true;
	sp.top_logprobs = CBLLM_MAX_TOP_LOGPROBS + 1;
	{
		cbllm_request_input in = {.ids = prompt, .n_ids = N_PROMPT};
		int64_t		id;
		cbllm_err	err;

		TAP_OK(cbllm_engine_submit(e, &in, &sp, &id, &err) == CBLLM_ERR_INVALID &&
			   strstr(err.msg, "logprobs must be between 0 and 20") != NULL,
			   "top_logprobs 21 is refused: %s", err.msg);
	}
	cbllm_engine_destroy(e);

	/* the JSON, on a real vocabulary */
	e = NewEngine(argv[2]);
	TAP_OK(e != NULL, "engine on the Llama-3 vocabulary");
	if (e != NULL)
	{
		const cbllm_tokenizer *tok = cbllm_engine_tokenizer(e);
		cbllm_buf	js = {0},
					spelled = {0};
		bool		first = true;
		cJSON	   *doc;
		int			n_bytes_tokens = 0;

		sp = cbllm_sampling_default();
		sp.max_tokens = GEN;
		sp.ignore_eos = true;
		sp.temperature = 1;
		sp.has_seed = true;
		sp.seed = 3;
		sp.logprobs = true;
		sp.top_logprobs = 3;
		ok = RunOne(e, &sp, &r);
		cbllm_buf_append(&js, "[", 1);
		/* in two parts, as the engine process writes it take by take */
		ok &= logprobs_json_append(tok, r.lp, 5, &first, &js) == CBLLM_OK;
		ok &= logprobs_json_append(tok, r.lp + 5, r.n_lp - 5, &first, &js) == CBLLM_OK;
		cbllm_buf_append(&js, "]", 2);
		doc = cJSON_Parse(js.data);
		TAP_OK(ok && doc != NULL && cJSON_GetArraySize(doc) == r.n_lp && r.n_lp == GEN,
			   "the JSON parses, a record per token (%d)", doc ? cJSON_GetArraySize(doc) : -1);
		ok = doc != NULL;
		for (int j = 0; ok && j < cJSON_GetArraySize(doc); j++)
		{
			cJSON	   *o = cJSON_GetArrayItem(doc, j);
			cJSON	   *tk = cJSON_GetObjectItem(o, "token");
			cJSON	   *by = cJSON_GetObjectItem(o, "bytes");
			cJSON	   *top = cJSON_GetObjectItem(o, "top_logprobs");

			ok &= cJSON_IsString(tk) &&
				cJSON_GetObjectItem(o, "id")->valueint == r.lp[j].id &&
				(float) cJSON_GetObjectItem(o, "logprob")->valuedouble == r.lp[j].logprob &&
				cJSON_GetArraySize(top) == r.lp[j].n_top;
			for (int k = 0; ok && k < cJSON_GetArraySize(top); k++)
				ok &= cJSON_GetObjectItem(cJSON_GetArrayItem(top, k), "id")->valueint ==
					r.lp[j].top_ids[k];
			if (!ok)
				break;
			if (by != NULL)
			{
				n_bytes_tokens++;
				for (int k = 0; k < cJSON_GetArraySize(by); k++)
				{
					char		c = (char) cJSON_GetArrayItem(by, k)->valueint;

					cbllm_buf_append(&spelled, &c, 1);
				}
			}
			else
				cbllm_buf_append(&spelled, tk->valuestring, strlen(tk->valuestring));
		}
		TAP_OK(ok, "each record has the token's id, its logprob read back exactly, and its "
			   "alternatives");
		TAP_OK(ok && spelled.len == r.text.len &&
			   memcmp(spelled.data, r.text.data, r.text.len) == 0,
			   "the tokens spell the output text (%zu bytes, %d tokens with bytes)", r.text.len,
			   n_bytes_tokens);
		cJSON_Delete(doc);
		cbllm_buf_free(&js);
		cbllm_buf_free(&spelled);
		cbllm_buf_free(&r.text);

		/* a token that is a piece of a character */
		{
			int32_t		piece = -1;
			cbllm_logprob rec = {0};
			char		one;
			size_t		len;

			for (int32_t id = 0; id < tokenizer_vocab_size(tok) && piece < 0; id++)
			{
				const char *b = tokenizer_token_bytes(tok, id, &one, &len);

				if (b != NULL && len == 1 && (unsigned char) b[0] >= 0xC2 &&
					(unsigned char) b[0] <= 0xF4)
					piece = id;
			}
			rec.id = piece;
			rec.logprob = -1.5f;
			first = true;
			memset(&js, 0, sizeof(js));
			ok = piece >= 0 && logprobs_json_append(tok, &rec, 1, &first, &js) == CBLLM_OK;
			doc = ok ? cJSON_Parse(js.data) : NULL;
			ok = doc != NULL && cJSON_IsArray(cJSON_GetObjectItem(doc, "bytes")) &&
				strcmp(cJSON_GetObjectItem(doc, "token")->valuestring, "\xEF\xBF\xBD") == 0;
			TAP_OK(ok, "a lead byte alone (token %d) is U+FFFD with its bytes: %s", piece,
				   js.data ? js.data : "");
			cJSON_Delete(doc);
			cbllm_buf_free(&js);
		}
		cbllm_engine_destroy(e);
	}
	return tap_done();
}
