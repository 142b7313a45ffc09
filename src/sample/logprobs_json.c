/*
 * logprobs_json.c: per-token logprobs as JSON (logprobs_json.h).
 */
#include "sample/logprobs_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

/* A small appender that remembers the first failure. */
typedef struct jw
{
	cbllm_buf  *out;
	int			rc;
} jw;

static void
Put(jw *w, const char *s, size_t n)
{
	if (w->rc == CBLLM_OK)
		w->rc = cbllm_buf_append(w->out, s, n);
}

static void
PutS(jw *w, const char *s)
{
	Put(w, s, strlen(s));
}

/* Write s[0..n) as a JSON string; returns whether every byte was whole UTF-8 (NUL aside). */
static bool
PutString(jw *w, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *) s;
	bool		whole = true;
	char		esc[8];

	Put(w, "\"", 1);
	for (size_t i = 0; i < n;)
	{
		int			len = utf8_len(s + i, n - i);

		if (len == 0 || u[i] == 0)
		{
			whole = whole && u[i] == 0;
			Put(w, "\xEF\xBF\xBD", 3);
			i++;
			continue;
		}
		if (u[i] == '"' || u[i] == '\\')
		{
			esc[0] = '\\';
			esc[1] = (char) u[i];
			Put(w, esc, 2);
		}
		else if (u[i] < 0x20)
		{
			snprintf(esc, sizeof(esc), "\\u%04x", u[i]);
			PutS(w, esc);
		}
		else
			Put(w, s + i, (size_t) len);
		i += (size_t) len;
	}
	Put(w, "\"", 1);
	return whole;
}

/* The shortest decimal that reads back as x. */
static void
PutFloat(jw *w, float x)
{
	char		buf[32];

	for (int prec = 1; prec <= 9; prec++)
	{
		snprintf(buf, sizeof(buf), "%.*g", prec, (double) x);
		if (strtof(buf, NULL) == x)
			break;
	}
	PutS(w, buf);
}

/* "token", "id" and "logprob" of one token (and "bytes" when its text is not whole UTF-8). */
static void
PutToken(jw *w, const cbllm_tokenizer *tok, int32_t id, float logprob)
{
	char		one,
				buf[32];
	size_t		len = 0;
	const char *b = tokenizer_token_bytes(tok, id, &one, &len);

	if (b == NULL)
	{
		b = tokenizer_piece(tok, id);	/* a special token: its own text */
		b = b ? b : "";
		len = strlen(b);
	}
	PutS(w, "\"token\":");
	if (!PutString(w, b, len))
	{
		PutS(w, ",\"bytes\":[");
		for (size_t i = 0; i < len; i++)
		{
			snprintf(buf, sizeof(buf), i ? ",%u" : "%u", (unsigned) (unsigned char) b[i]);
			PutS(w, buf);
		}
		PutS(w, "]");
	}
	snprintf(buf, sizeof(buf), ",\"id\":%d,\"logprob\":", (int) id);
	PutS(w, buf);
	PutFloat(w, logprob);
}

int
logprobs_json_append(const cbllm_tokenizer *tok, const cbllm_logprob *lp, int n, bool *first,
					 cbllm_buf *out)
{
	jw			w = {out, CBLLM_OK};

	for (int i = 0; i < n; i++)
	{
		if (!*first)
			PutS(&w, ",");
		*first = false;
		PutS(&w, "{");
		PutToken(&w, tok, lp[i].id, lp[i].logprob);
		PutS(&w, ",\"top_logprobs\":[");
		for (int k = 0; k < lp[i].n_top && k < CBLLM_MAX_TOP_LOGPROBS; k++)
		{
			PutS(&w, k ? ",{" : "{");
			PutToken(&w, tok, lp[i].top_ids[k], lp[i].top_logprobs[k]);
			PutS(&w, "}");
		}
		PutS(&w, "]}");
	}
	return w.rc;
}
