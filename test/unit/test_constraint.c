/*
 * test_constraint.c: constrained decoding (constraint.h, engine_constraint.c).
 *
 *   - the masked copy of the logits;
 *   - masks from the trie walk equal a brute-force check of every token's
 *     bytes, on the real tokenizers of test/data/tokenizers (whose tokens
 *     span several JSON characters), along random paths through the
 *     automata of a regex, a list of choices and a JSON schema; end-of-turn
 *     ids exactly at full matches; the budget rule keeps exactly the tokens
 *     after which the rest fits;
 *   - decoding from random logits with the sampler under each kind of
 *     constraint on the Llama-3 and Qwen3 tokenizers, and the engine on
 *     random models (one with a small tokenizer, others with real ones):
 *     every text ends as a full match.  The texts go to OUT_DIR/NAME.jsonl,
 *     which test/constraint_test.py checks independently (Python's json,
 *     jsonschema and re).
 *
 * usage: test_constraint TOKENIZERS_DIR OUT_DIR N MODEL_DIR [MODEL_DIR N]...
 *   N: generations per constraint, tokenizer and model
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/cbllm.h"
#include "constrain/constraint.h"
#include "engine_run.h"
#include "base/rng.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "sample/sampler.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"

/* A constraint of each kind, as a user gives it and as its regex. */
typedef struct spec
{
	const char *kind;			/* "regex", "choices" or "json" */
	const char *name;
	const char *text;			/* the regex; the choices separated by '\n'; the schema */
	int			max_tokens;
} spec;

static const spec specs[] = {
	{"regex", "name", "[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?", 24},
	{"regex", "phone", "\\d{3}-\\d{4}", 16},
	{"regex", "unicode", "[a-zé😀 ]{3,12}!", 40},
	{"regex", "answer", "(yes|no|maybe)(, because [a-z ]{1,30})?\\.", 48},
	{"choices", "sentiment", "positive\nnegative\nneutral", 8},
	{"choices", "prefixes", "Par\nParis\nLondon, UK\n1", 8},
	{"json", "person",
		"{\"type\":\"object\",\"properties\":{"
		"\"name\":{\"type\":\"string\",\"maxLength\":20},"
		"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
		"\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3},"
		"\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
		"\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},\"required\":[\"city\"]}},"
	"\"required\":[\"name\",\"age\"]}", 160},
	{"json", "items_ref",
		"{\"$defs\":{\"item\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
		"\"ok\":{\"type\":\"boolean\"}},\"required\":[\"id\",\"ok\"]}},"
	"\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/item\"},\"minItems\":1,\"maxItems\":4}", 160},
	{"json", "any_of",
		"{\"type\":\"object\",\"properties\":{"
		"\"v\":{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"null\"},{\"const\":\"n/a\"}]},"
		"\"e\":{\"enum\":[\"red\",\"green\",1,true]},"
		"\"when\":{\"type\":\"string\",\"format\":\"date\"}},"
	"\"required\":[\"v\",\"e\"]}", 120},
};

#define N_SPECS (int) (sizeof(specs) / sizeof(specs[0]))

/* The regex of spec s into out (a fresh buffer); false with a diagnostic on failure. */
static bool
SpecRegex(const spec *s, cbllm_buf *out)
{
	cbllm_err	err;

	memset(out, 0, sizeof(*out));
	if (strcmp(s->kind, "regex") == 0)
		return cbllm_buf_append(out, s->text, strlen(s->text)) == CBLLM_OK;
	if (strcmp(s->kind, "choices") == 0)
	{
		const char *p = s->text;

		for (;;)
		{
			const char *nl = strchr(p, '\n');
			size_t		n = nl ? (size_t) (nl - p) : strlen(p);

			if (cbllm_buf_append(out, "(?:", 3) != CBLLM_OK || regex_escape(p, n, out) != CBLLM_OK ||
				cbllm_buf_append(out, ")", 1) != CBLLM_OK)
				return false;
			if (nl == NULL)
				return true;
			if (cbllm_buf_append(out, "|", 1) != CBLLM_OK)
				return false;
			p = nl + 1;
		}
	}
	if (json_schema_to_regex(s->text, strlen(s->text), out, &err) != CBLLM_OK)
	{
		TAP_DIAG("%s: %s", s->name, err.msg);
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ apply */

static void
TestApply(void)
{
	enum
	{
		N = 100
	};
	uint32_t	mask[(N + 31) / 32] = {0};
	float		l[N],
				o[N];
	bool		ok = true;

	for (int i = 0; i < N; i++)
	{
		l[i] = (float) i - 50;
		if (i % 3 == 0 || (i >= 32 && i < 64))
			mask[i >> 5] |= 1u << (i & 31);
	}
	constraint_apply(mask, l, N, o);
	for (int i = 0; i < N; i++)
		ok &= (i % 3 == 0 || (i >= 32 && i < 64)) ? o[i] == l[i] : o[i] == -INFINITY;
	TAP_OK(ok, "constraint_apply keeps exactly the masked logits (full, empty, mixed and tail words)");
}

/* ------------------------------------------------------------ masks against brute force */

/* Whether token t may follow q, by walking its bytes alone; *after its state. */
static bool
BruteAllowed(const cbllm_dfa *d, const cbllm_tokenizer *tok, int32_t q, int32_t t, int32_t *after)
{
	char		one;
	size_t		len;
	const char *b = tokenizer_token_bytes(tok, t, &one, &len);

	if (b == NULL || len == 0)
		return false;
	for (size_t i = 0; i < len && q >= 0; i++)
		q = dfa_next(d, q, (uint8_t) b[i]);
	*after = q;
	return q >= 0;
}

/*
 * Compare the mask of state q with every token's own walk, unbudgeted and
 * with a budget of remaining tokens.  Returns false at the first difference.
 */
static bool
CheckState(constraint *c, const cbllm_dfa *d, const cbllm_tokenizer *tok, int n_logits,
		   const int32_t *eos, int n_eos, int32_t q, int remaining, uint32_t *scratch, char *why,
		   size_t why_len)
{
	constraint_step st;
	int			n = 0,
				fit = 0;

	constraint_next(c, q, remaining, scratch, &st);
	/* the budget applies unless no token fits it (then every way on is offered) */
	for (int32_t t = 0; t < n_logits && remaining < INT32_MAX; t++)
	{
		int32_t		after;

		fit += BruteAllowed(d, tok, q, t, &after) && d->dist[after] <= remaining - 1;
	}
	if (fit == 0 && !d->accept[q])
		remaining = INT32_MAX;
	for (int32_t t = 0; t < n_logits; t++)
	{
		int32_t		after;
		bool		is_eos = false,
					want,
					got = (st.mask[t >> 5] >> (t & 31)) & 1;

		for (int k = 0; k < n_eos; k++)
			is_eos |= eos[k] == t;
		if (is_eos)
			want = d->accept[q];
		else
		{
			want = BruteAllowed(d, tok, q, t, &after);
			if (want && remaining < INT32_MAX && d->dist[after] > remaining - 1)
				want = false;
			n += want;
		}
		if (want != got)
		{
			snprintf(why, why_len, "state %d, remaining %d: token %d (%s) is %s in the mask", q,
					 remaining, t, tokenizer_piece(tok, t) ? tokenizer_piece(tok, t) : "?",
					 got ? "set" : "clear");
			return false;
		}
	}
	if (n != st.n_allowed && !(n == 0 && !d->accept[q]))
	{
		snprintf(why, why_len, "state %d: n_allowed %d, counted %d", q, st.n_allowed, n);
		return false;
	}
	return true;
}

/* Masks of states along random paths through spec s's automaton, for tokenizer tok. */
static void
TestMasks(const char *tok_name, const cbllm_tokenizer *tok, const spec *s)
{
	cbllm_buf	re;
	constraint_vocab *v = NULL;
	constraint *c = NULL;
	cbllm_err	err;
	int32_t		eos[1] = {tokenizer_eos_id(tok)};
	int			n_logits = tokenizer_vocab_size(tok);
	uint32_t   *scratch;
	cbllm_rng	rng;
	char		why[512] = "";
	bool		ok = true;
	int			states = 0;

	if (!SpecRegex(s, &re))
	{
		TAP_OK(false, "%s %s: the constraint compiles", tok_name, s->name);
		return;
	}
	ok = constraint_vocab_build(tok, n_logits, eos, eos[0] >= 0, &v, &err) == CBLLM_OK &&
		constraint_compile(v, re.data, re.len, &c, &err) == CBLLM_OK;
	if (!ok)
	{
		TAP_OK(false, "%s %s: compiles (%s)", tok_name, s->name, err.msg);
		constraint_vocab_free(v);
		cbllm_buf_free(&re);
		return;
	}
	scratch = malloc(sizeof(uint32_t) * constraint_mask_words(v));
	rng_seed(&rng, 7);
	{
		/* random walks by bytes over the automaton */
		const cbllm_dfa *d = constraint_dfa(c);

		for (int walk = 0; walk < 3 && ok; walk++)
		{
			int32_t		q = 0;

			for (int step = 0; step < 40 && ok; step++)
			{
				int32_t		nexts[256],
							k = 0;
				int			rem = (int) (rng_next(&rng) % 4) == 0 ? 1 + (int) (rng_next(&rng) % 12) :
					INT32_MAX;

				ok = CheckState(c, d, tok, n_logits, eos, eos[0] >= 0, q, rem, scratch, why,
								sizeof(why));
				states++;
				for (int b = 0; b < 256; b++)
					if (dfa_next(d, q, (uint8_t) b) >= 0)
						nexts[k++] = dfa_next(d, q, (uint8_t) b);
				if (k == 0)
					break;
				q = nexts[rng_next(&rng) % k];
			}
		}
	}
	TAP_OK(ok, "%s %s: the masks of %d states along random paths equal every token's own walk, "
		   "budgeted and not%s%s", tok_name, s->name, states, ok ? "" : ": ", why);
	free(scratch);
	constraint_free(c);
	constraint_vocab_free(v);
	cbllm_buf_free(&re);
}

/* ------------------------------------------------------------ decoding */

/* Write s[0..n) as a JSON string. */
static void
JsonString(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++)
	{
		unsigned char ch = (unsigned char) s[i];

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* One line of OUT_DIR's files: the constraint as given, the text and how it finished. */
static void
WriteLine(FILE *f, const spec *s, const char *text, size_t n, const char *finish)
{
	fprintf(f, "{\"kind\":\"%s\",\"name\":\"%s\",\"constraint\":", s->kind, s->name);
	JsonString(f, s->text, strlen(s->text));
	fprintf(f, ",\"finish\":\"%s\",\"text\":", finish);
	JsonString(f, text, n);
	fputs("}\n", f);
}

/*
 * n generations under spec s from random logits: the sampler at
 * temperature 1 over the masked logits, as the engine samples a
 * constrained row.  Returns how many ended as a full match.
 */
static int
DecodeRandom(const cbllm_tokenizer *tok, constraint_vocab *v, const spec *s, int n, FILE *out)
{
	cbllm_buf	re;
	constraint *c = NULL;
	cbllm_err	err;
	int			n_logits = tokenizer_vocab_size(tok),
				good = 0;
	float	   *logits = malloc(sizeof(float) * n_logits),
			   *masked = malloc(sizeof(float) * n_logits);
	uint32_t   *scratch = malloc(sizeof(uint32_t) * constraint_mask_words(v));
	cbllm_sampler *smp = NULL;
	sampler_params sp = {1.0f, 1.0f, 0};
	int32_t		eos = tokenizer_eos_id(tok);

	if (!SpecRegex(s, &re) || constraint_compile(v, re.data, re.len, &c, &err) != CBLLM_OK ||
		sampler_create(n_logits, &smp, &err) != CBLLM_OK)
		goto done;
	for (int g = 0; g < n; g++)
	{
		cbllm_rng	rng;
		cbllm_buf	text = {0};
		tokenizer_stream ts;
		int32_t		q = CONSTRAINT_START;
		const char *finish = "length";

		rng_seed(&rng, 1000 + g);
		tokenizer_stream_init(&ts, false, true);
		for (int k = 0; k < s->max_tokens; k++)
		{
			constraint_step st;
			int32_t		t;

			for (int i = 0; i < n_logits; i++)
				logits[i] = (float) (rng_uniform(&rng) * 8.0);
			constraint_next(c, q, s->max_tokens - k, scratch, &st);
			if (st.n_allowed == 0 && !st.complete)
			{
				finish = "dead";
				break;
			}
			constraint_apply(st.mask, logits, n_logits, masked);
			t = sampler_sample(smp, masked, &sp, &rng);
			if (t == eos)
			{
				finish = "stop";
				break;
			}
			q = constraint_advance(c, q, t);
			if (q < 0)
			{
				finish = "invalid";
				break;
			}
			tokenizer_stream_push(tok, &ts, t, &text);
			if (constraint_final(c, q))
			{
				finish = "constraint";
				break;
			}
		}
		if (strcmp(finish, "length") == 0 && q >= 0 && constraint_complete(c, q))
			finish = "constraint";
		tokenizer_stream_flush(&ts, &text);
		good += (strcmp(finish, "stop") == 0 || strcmp(finish, "constraint") == 0) &&
			dfa_match(constraint_dfa(c), text.data ? text.data : "", text.len);
		WriteLine(out, s, text.data ? text.data : "", text.len, finish);
		cbllm_buf_free(&text);
	}
done:
	sampler_free(smp);
	constraint_free(c);
	cbllm_buf_free(&re);
	free(logits);
	free(masked);
	free(scratch);
	return good;
}

/* The random-logit decodes and the mask checks on one tokenizer. */
static void
TestTokenizer(const char *dir, const char *name, const char *out_dir, int n, bool decode)
{
	char		path[1024];
	cbllm_tokenizer *tok = NULL;
	constraint_vocab *v = NULL;
	cbllm_err	err;
	FILE	   *out = NULL;
	int32_t		eos;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (tokenizer_load(path, &tok, &err) != CBLLM_OK)
	{
		TAP_OK(false, "tokenizer %s loads (%s)", name, err.msg);
		return;
	}
	for (int i = 0; i < N_SPECS; i++)
		if (i % 3 == 0 || decode)
			TestMasks(name, tok, &specs[i]);
	eos = tokenizer_eos_id(tok);
	if (decode && constraint_vocab_build(tok, tokenizer_vocab_size(tok), &eos, eos >= 0, &v,
										 &err) == CBLLM_OK)
	{
		snprintf(path, sizeof(path), "%s/%s.jsonl", out_dir, name);
		out = fopen(path, "w");
		for (int i = 0; i < N_SPECS && out; i++)
		{
			int			good = DecodeRandom(tok, v, &specs[i], n, out);

			TAP_OK(good == n, "%s %s %s: %d of %d generations from random logits end as a full match",
				   name, specs[i].kind, specs[i].name, good, n);
		}
		if (out)
			fclose(out);
		TAP_OK(out != NULL, "%s: the texts are written to %s", name, path);
	}
	constraint_vocab_free(v);
	tokenizer_free(tok);
}

/* ------------------------------------------------------------ the engine */

typedef struct engine_texts
{
	cbllm_buf  *text;			/* (n) */
	cbllm_finish *finish;		/* (n) */
} engine_texts;

/* Collect request i's text and finish. */
static bool
Collect(void *arg, int i, const cbllm_output *o)
{
	engine_texts *t = arg;

	if (o->text_len > 0 && cbllm_buf_append(&t->text[i], o->text, o->text_len) != CBLLM_OK)
		return false;
	t->finish[i] = o->finish;
	return true;
}

/* n seeded, sampled generations under spec s on an engine of max_seqs sequences. */
static bool
EngineRun(const char *model_dir, const spec *s, int n, int max_seqs, engine_texts *t)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;
	cbllm_buf	re;
	int64_t    *ids = calloc(n, sizeof(int64_t));
	bool		ok = SpecRegex(s, &re) && ids != NULL;

	p.model_dir = model_dir;
	p.n_threads = 2;
	p.max_num_seqs = max_seqs;
	p.max_model_len = 256;
	if (ok && cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
	{
		TAP_DIAG("engine_create: %s", err.msg);
		ok = false;
	}
	for (int i = 0; ok && i < n; i++)
	{
		cbllm_request_input in = {.text = "the answer is", .text_len = 13, .add_bos = true};
		cbllm_sampling sp = cbllm_sampling_default();

		sp.temperature = 1.0f;
		sp.has_seed = true;
		sp.seed = 77 + i;
		sp.max_tokens = s->max_tokens;
		sp.constraint = re.data;
		sp.constraint_len = re.len;
		if (cbllm_engine_submit(e, &in, &sp, &ids[i], &err) != CBLLM_OK)
		{
			TAP_DIAG("submit: %s", err.msg);
			ok = false;
		}
	}
	if (ok)
		ok = engine_run_to_end(e, ids, n, 1000000, Collect, t) >= 0;
	cbllm_engine_destroy(e);
	cbllm_buf_free(&re);
	free(ids);
	return ok;
}

/* Every spec on the engine: all valid, written out, and the same texts from another batch size. */
static void
TestEngine(const char *model_dir, const char *out_dir, int n)
{
	char		path[1024];
	const char *name = strrchr(model_dir, '/') ? strrchr(model_dir, '/') + 1 : model_dir;
	FILE	   *out;

	snprintf(path, sizeof(path), "%s/engine-%s.jsonl", out_dir, name);
	out = fopen(path, "w");
	TAP_OK(out != NULL, "engine on %s: the texts are written to %s", name, path);
	if (out == NULL)
		return;
	for (int k = 0; k < N_SPECS; k++)
	{
		engine_texts a = {calloc(n, sizeof(cbllm_buf)), calloc(n, sizeof(cbllm_finish))};
		engine_texts b = {calloc(n, sizeof(cbllm_buf)), calloc(n, sizeof(cbllm_finish))};
		const spec *s = &specs[k];
		cbllm_buf	re;
		cbllm_dfa  *d = NULL;
		cbllm_err	err;
		int			good = 0,
					same = 0,
					n_b = n < 40 ? n : 40;
		bool		ran = SpecRegex(s, &re) && regex_compile(re.data, re.len, &d, &err) == CBLLM_OK &&
			EngineRun(model_dir, s, n, 16, &a) && EngineRun(model_dir, s, n_b, 3, &b);

		for (int i = 0; ran && i < n; i++)
		{
			const char *txt = a.text[i].data ? a.text[i].data : "";

			good += (a.finish[i] == CBLLM_FINISH_STOP || a.finish[i] == CBLLM_FINISH_CONSTRAINT) &&
				dfa_match(d, txt, a.text[i].len);
			WriteLine(out, s, txt, a.text[i].len, cbllm_finish_name(a.finish[i]));
			if (i < n_b)
				same += a.text[i].len == b.text[i].len &&
					(a.text[i].len == 0 || memcmp(a.text[i].data, b.text[i].data, a.text[i].len) == 0);
		}
		TAP_OK(ran && good == n, "engine on %s, %s %s: %d of %d seeded sampled generations end as a full match",
			   name, s->kind, s->name, good, n);
		TAP_OK(ran && same == n_b, "engine on %s, %s %s: %d of %d texts are the same from batches of 16 and of 3",
			   name, s->kind, s->name, same, n_b);
		for (int i = 0; i < n; i++)
		{
			cbllm_buf_free(&a.text[i]);
			cbllm_buf_free(&b.text[i]);
		}
		free(a.text);
		free(a.finish);
		free(b.text);
		free(b.finish);
		dfa_free(d);
		cbllm_buf_free(&re);
	}
	fclose(out);
}

int
main(int argc, char **argv)
{
	int			n = argc > 3 ? atoi(argv[3]) : 0;
	static const char *const toks[] = {"llama3_1", "qwen3", "llama2", "gemma3", "mistral7b"};

	if (argc < 5 || argc % 2 != 1 || n <= 0)
	{
		fprintf(stderr, "usage: test_constraint TOKENIZERS_DIR OUT_DIR N MODEL_DIR [MODEL_DIR N]...\n");
		return 2;
	}
	mkdir(argv[2], 0777);
	TestApply();
	for (int i = 0; i < (int) (sizeof(toks) / sizeof(toks[0])); i++)
		TestTokenizer(argv[1], toks[i], argv[2], n, i < 2);
	TestEngine(argv[4], argv[2], n);
	for (int i = 5; i + 1 < argc; i += 2)
		TestEngine(argv[i], argv[2], atoi(argv[i + 1]));
	return tap_done();
}
