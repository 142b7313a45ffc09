/*
 * cli_constraint.c: the constraint options of cbllm-cli (generate, bench,
 * bench-steps) and the compile-cost report that bench prints with them.
 */
#include "cli_constraint.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "constrain/constraint.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "tokenizer/tokenizer.h"

/* Print an error; 1. */
static int
Err(const char *what, const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s%s%s\n", what, *what ? ": " : "", msg);
	return 1;
}

/* The plain regex of the schema file or of regex into out. */
static int
PlainRegex(const char *schema_file, const char *regex, cbllm_buf *out)
{
	cbllm_err	err;
	char	   *text;
	size_t		len;
	int			rc;

	if (regex != NULL)
		return cbllm_buf_append(out, regex, strlen(regex)) == CBLLM_OK ? 0 : Err("", "out of memory");
	if (cbllm_read_file(schema_file, &text, &len, &err) != CBLLM_OK)
		return Err("", err.msg);
	rc = json_schema_to_regex(text, len, out, &err);
	free(text);
	return rc == CBLLM_OK ? 0 : Err(schema_file, err.msg);
}

int
cli_constraint_regex(const char *schema_file, const char *regex, bool lines, cbllm_buf *out)
{
	cbllm_buf	one = {0};
	int			rc = PlainRegex(schema_file, regex, &one);

	if (rc == 0 && !lines)
		rc = cbllm_buf_append(out, one.data, one.len) == CBLLM_OK ? 0 : Err("", "out of memory");
	else if (rc == 0)
	{
		bool		ok = cbllm_buf_append(out, "(?:", 3) == CBLLM_OK &&
			cbllm_buf_append(out, one.data, one.len) == CBLLM_OK &&
			cbllm_buf_append(out, ")(?:\\n(?:", 9) == CBLLM_OK &&
			cbllm_buf_append(out, one.data, one.len) == CBLLM_OK &&
			cbllm_buf_append(out, "))*", 3) == CBLLM_OK;

		rc = ok ? 0 : Err("", "out of memory");
	}
	cbllm_buf_free(&one);
	return rc;
}

int
cli_constraint_report(const char *model_dir, const char *schema_file, const char *regex)
{
	cbllm_tokenizer *tok = NULL;
	constraint_vocab *v = NULL;
	constraint *c = NULL;
	cbllm_dfa  *d = NULL;
	cbllm_buf	re = {0};
	cbllm_err	err;
	uint32_t   *scratch = NULL;
	double		t0,
				t_regex,
				t_dfa,
				t_trie,
				t_compile,
				t_masks;
	int32_t		eos;
	int			rc = 1;

	if (tokenizer_load(model_dir, &tok, &err) != CBLLM_OK)
		return Err("the compile report needs the model directory's tokenizer.json", err.msg);
	t0 = cbllm_now();
	if (PlainRegex(schema_file, regex, &re) != 0)
		goto done;
	t_regex = cbllm_now() - t0;
	t0 = cbllm_now();
	if (regex_compile(re.data, re.len, &d, &err) != CBLLM_OK)
	{
		Err("", err.msg);
		goto done;
	}
	t_dfa = cbllm_now() - t0;
	eos = tokenizer_eos_id(tok);
	t0 = cbllm_now();
	if (constraint_vocab_build(tok, tokenizer_vocab_size(tok), &eos, eos >= 0, &v, &err) != CBLLM_OK)
	{
		Err("", err.msg);
		goto done;
	}
	t_trie = cbllm_now() - t0;
	t0 = cbllm_now();
	if (constraint_compile(v, re.data, re.len, &c, &err) != CBLLM_OK)
	{
		Err("", err.msg);
		goto done;
	}
	t_compile = cbllm_now() - t0;
	scratch = malloc(sizeof(uint32_t) * constraint_mask_words(v));
	t0 = cbllm_now();
	for (int32_t q = 0; scratch && q < d->n_states; q++)
	{
		constraint_step st;

		constraint_next(c, q, INT32_MAX, scratch, &st);
	}
	t_masks = cbllm_now() - t0;
	printf("# constraint: %zu bytes of regex%s, %d states, %d byte classes, vocabulary %d\n",
		   re.len, schema_file ? " from the schema" : "", d->n_states, d->n_classes,
		   tokenizer_vocab_size(tok));
	printf("# compile: schema to regex %.2f ms, regex to automaton %.2f ms (with the engine's "
		   "compile: %.2f ms); vocabulary trie %.1f ms once per engine; every state's mask %.1f ms "
		   "(%.3f ms a state, computed when first reached)\n",
		   t_regex * 1e3, t_dfa * 1e3, t_compile * 1e3, t_trie * 1e3, t_masks * 1e3,
		   t_masks * 1e3 / d->n_states);
	rc = 0;
done:
	free(scratch);
	constraint_free(c);
	constraint_vocab_free(v);
	dfa_free(d);
	cbllm_buf_free(&re);
	tokenizer_free(tok);
	return rc;
}
