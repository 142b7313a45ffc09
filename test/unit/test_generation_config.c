/*
 * test_generation_config.c: a model's end-of-turn ids and sampling defaults.
 *
 * Without a model: config.json's and generation_config.json's eos_token_id
 * (an id or a list) are read and united, malformed fields are named, and the
 * sampling defaults are read only as given.
 *
 * With a model (argument TINY_DIR): a copy of it whose generation_config.json
 * lists an id the model generates greedily ends generation right there
 * (finish "stop"), wherever the id stands in the list; a request that leaves
 * its temperature to the model samples at generation_config.json's
 * temperature (the same tokens as that temperature given explicitly with the
 * same seed, other tokens than greedy), while one that gives temperature 0
 * stays greedy; and do_sample false leaves an unset temperature greedy.
 *
 * usage: test_generation_config TINY_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/cbllm.h"
#include "engine_run.h"
#include "fixture.h"
#include "model/generation_config.h"
#include "tap.h"

#define GEN 24

/* Parse a config.json text and a generation_config.json text (either NULL). */
static int
Parse(const char *config, const char *generation, cbllm_generation_config *g, cbllm_err *err)
{
	return generation_config_parse(config, "config.json", generation, "generation_config.json", g, err);
}

/* Whether the eos ids of g are exactly ids[0..n). */
static bool
EosAre(const cbllm_generation_config *g, const int32_t *ids, int n)
{
	if (g->n_eos != n)
		return false;
	for (int i = 0; i < n; i++)
		if (g->eos_ids[i] != ids[i])
			return false;
	return true;
}

/* The parsing rules. */
static void
TestParse(void)
{
	cbllm_generation_config g;
	cbllm_err	err;
	char		many[512];
	int			len;

	TAP_OK(Parse("{\"eos_token_id\": 2}", NULL, &g, &err) == CBLLM_OK && EosAre(&g, (int32_t[]) {2}, 1),
		   "config.json's single eos id is read");
	TAP_OK(Parse("{\"eos_token_id\": [128001, 128008, 128009]}", "{\"eos_token_id\": [128009, 7]}", &g, &err)
		   == CBLLM_OK && EosAre(&g, (int32_t[]) {128001, 128008, 128009, 7}, 4),
		   "both files' eos lists are united without repeats, in order");
	TAP_OK(Parse("{}", "{}", &g, &err) == CBLLM_OK && g.n_eos == 0 && !g.do_sample &&
		   !g.has_temperature && !g.has_top_p && !g.has_top_k, "no fields: no eos ids and no defaults");
	TAP_OK(Parse("{\"eos_token_id\": null}", NULL, &g, &err) == CBLLM_OK && g.n_eos == 0,
		   "a null eos_token_id is none");
	TAP_OK(Parse("{\"eos_token_id\": \"</s>\"}", NULL, &g, &err) == CBLLM_ERR_FORMAT &&
		   strstr(err.msg, "config.json: \"eos_token_id\" must be a token id") != NULL,
		   "a string eos_token_id is refused, naming the file and field: %s", err.msg);
	TAP_OK(Parse(NULL, "{\"eos_token_id\": [1, -3]}", &g, &err) == CBLLM_ERR_FORMAT &&
		   strstr(err.msg, "generation_config.json: \"eos_token_id\" must list token ids") != NULL,
		   "a negative id in the list is refused: %s", err.msg);
	len = snprintf(many, sizeof(many), "{\"eos_token_id\": [");
	for (int i = 0; i <= CBLLM_MAX_EOS_IDS; i++)
		len += snprintf(many + len, sizeof(many) - len, "%s%d", i ? ", " : "", i);
	snprintf(many + len, sizeof(many) - len, "]}");
	TAP_OK(Parse(many, NULL, &g, &err) == CBLLM_ERR_FORMAT && strstr(err.msg, "more than 16 ids") != NULL,
		   "a list longer than the table is refused: %s", err.msg);
	TAP_OK(Parse(NULL, "{\"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.95, \"top_k\": 20}", &g, &err)
		   == CBLLM_OK && g.do_sample && g.has_temperature && g.temperature == 0.6 && g.has_top_p &&
		   g.top_p == 0.95 && g.has_top_k && g.top_k == 20, "Qwen3's sampling defaults are read");
	TAP_OK(Parse(NULL, "{\"top_p\": 0}", &g, &err) == CBLLM_ERR_FORMAT &&
		   strstr(err.msg, "\"top_p\" must be a number in (0, 1]") != NULL, "top_p 0 is refused: %s", err.msg);
	TAP_OK(Parse(NULL, "{\"top_k\": 2.5}", &g, &err) == CBLLM_ERR_FORMAT &&
		   strstr(err.msg, "\"top_k\" must be an integer") != NULL, "a fractional top_k is refused: %s",
		   err.msg);
	TAP_OK(Parse(NULL, "{\"do_sample\": 1}", &g, &err) == CBLLM_ERR_FORMAT &&
		   strstr(err.msg, "\"do_sample\" must be true or false") != NULL, "a numeric do_sample is refused");
	TAP_OK(Parse("[1]", NULL, &g, &err) == CBLLM_ERR_FORMAT && strstr(err.msg, "not a JSON object") != NULL,
		   "a config that is not an object is refused");
}

static const char *tiny;

/* A directory that holds links to tiny's files and the given generation_config.json (NULL: none). */
static char *
ModelWith(const char *generation)
{
	static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json",
	"tokenizer_config.json"};
	char	   *dir = fixture_case_dir("model");
	char		from[4096],
				to[4096];

	if (dir == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
	{
		snprintf(from, sizeof(from), "%s/%s", tiny, files[i]);
		snprintf(to, sizeof(to), "%s/%s", dir, files[i]);
		if (access(from, F_OK) == 0 && symlink(from, to) != 0)
			return NULL;
	}
	if (generation != NULL && !fixture_write_text(dir, "generation_config.json", generation))
		return NULL;
	return dir;
}

/* What one request produced. */
typedef struct result
{
	int32_t		tokens[GEN + 1];
	int			n;
	cbllm_finish finish;
} result;

/* Collect a request's tokens and finish. */
static bool
Collect(void *arg, int i, const cbllm_output *o)
{
	result	   *r = (result *) arg + i;

	for (int k = 0; k < o->n_tokens && r->n <= GEN; k++)
		r->tokens[r->n++] = o->tokens[k];
	if (o->finish != CBLLM_FINISH_NONE)
		r->finish = o->finish;
	return true;
}

/* Generate GEN tokens from one prompt on dir's model with sp; false when anything fails. */
static bool
Generate(const char *dir, const cbllm_sampling *sp, result *r)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_request_input in = {.text = "the quick brown fox", .text_len = 19, .add_bos = true};
	int64_t		id;
	cbllm_err	err;
	bool		ok;

	memset(r, 0, sizeof(*r));
	p.model_dir = dir;
	p.n_threads = 2;
	p.max_num_seqs = 4;
	p.max_num_batched_tokens = 64;
	p.num_kv_blocks = 64;
	p.block_size = 4;
	p.max_model_len = 64;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
	{
		TAP_DIAG("engine_create: %s", err.msg);
		return false;
	}
	ok = cbllm_engine_submit(e, &in, sp, &id, &err) == CBLLM_OK &&
		engine_run_to_end(e, &id, 1, 1000, Collect, r) >= 0;
	if (!ok)
		TAP_DIAG("generate: %s", err.msg);
	cbllm_engine_destroy(e);
	return ok;
}

/* Whether two results have the same tokens. */
static bool
Same(const result *a, const result *b)
{
	return a->n == b->n && memcmp(a->tokens, b->tokens, sizeof(int32_t) * a->n) == 0;
}

/* End-of-turn ids and defaults in a running engine. */
static void
TestEngine(void)
{
	cbllm_sampling sp = cbllm_sampling_default();
	result		greedy,
				r,
				explicit;
	char		gen[256];
	int			at = -1;

	sp.max_tokens = GEN;
	sp.ignore_eos = false;
	if (!Generate(ModelWith(NULL), &sp, &greedy))
	{
		TAP_OK(false, "the model without generation_config.json generates");
		return;
	}
	/* the first generated id not seen before it: generation must stop exactly there */
	for (int k = 3; k < greedy.n && at < 0; k++)
	{
		bool		seen = false;

		for (int j = 0; j < k; j++)
			seen |= greedy.tokens[j] == greedy.tokens[k];
		if (!seen)
			at = k;
	}
	TAP_OK(greedy.n == GEN && greedy.finish == CBLLM_FINISH_LENGTH && at > 0,
		   "greedy generation without generation_config.json runs to max_tokens (stop candidate at %d)", at);
	if (at < 0)
		return;
	snprintf(gen, sizeof(gen), "{\"eos_token_id\": [99999, %d]}", greedy.tokens[at]);
	TAP_OK(Generate(ModelWith(gen), &sp, &r) && r.finish == CBLLM_FINISH_STOP && r.n == at + 1 &&
		   memcmp(r.tokens, greedy.tokens, sizeof(int32_t) * (at + 1)) == 0,
		   "an id second in generation_config.json's eos list ends generation where it is generated (%d tokens)",
		   r.n);

	/* sampling defaults: only for options left to the model, and only with do_sample */
	sp.has_seed = true;
	sp.seed = 42;
	sp.temperature = 0;
	sp.model_defaults = CBLLM_DEFAULT_TEMPERATURE;
	snprintf(gen, sizeof(gen), "{\"do_sample\": true, \"temperature\": 1.5}");
	TAP_OK(Generate(ModelWith(gen), &sp, &r) && !Same(&r, &greedy),
		   "an unset temperature samples at generation_config.json's 1.5 (not greedy)");
	sp.model_defaults = 0;
	sp.temperature = 1.5f;
	TAP_OK(Generate(ModelWith(NULL), &sp, &explicit) && Same(&r, &explicit),
		   "the same tokens as temperature 1.5 given explicitly with the same seed");
	sp.temperature = 0;
	TAP_OK(Generate(ModelWith(gen), &sp, &r) && Same(&r, &greedy),
		   "a temperature the caller gives (0) wins over the model's default");
	sp.model_defaults = CBLLM_DEFAULT_TEMPERATURE;
	TAP_OK(Generate(ModelWith("{\"do_sample\": false, \"temperature\": 1.5}"), &sp, &r) && Same(&r, &greedy),
		   "with do_sample false an unset temperature stays greedy");
}

int
main(int argc, char **argv)
{
	TestParse();
	if (argc < 2)
	{
		fprintf(stderr, "usage: %s TINY_DIR\n", argv[0]);
		return 2;
	}
	tiny = realpath(argv[1], NULL);	/* the links must not depend on the working directory */
	if (tiny == NULL)
	{
		fprintf(stderr, "%s: %s: no such directory\n", argv[0], argv[1]);
		return 2;
	}
	if (fixture_root_create("generation_config") == NULL)
	{
		TAP_OK(false, "fixture root");
		return tap_done();
	}
	TestEngine();
	fixture_root_remove();
	return tap_done();
}
