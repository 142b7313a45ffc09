/*
 * cbllm-cli: drive the cbllm engine without a server.
 *
 *   cbllm-cli generate -m DIR (-p TEXT | --prompt-ids "1 2 3") [options]
 *   cbllm-cli tokenize -m DIR|FILE.gguf [--raw | --no-bos | --no-parse-special]  (text on standard input)
 *   cbllm-cli tokenize -m DIR --jsonl [--special] [--literal] | --bench FILE
 *   cbllm-cli detokenize -m DIR --jsonl [--raw]  (see cli_tokenize.c)
 *   cbllm-cli logits   -m DIR --prompt-ids "1 2 3"
 *   cbllm-cli perplexity -m DIR --context N   (text on standard input; cli_perplexity.c)
 *   cbllm-cli greedy   -m DIR -n N            (JSON id-array lines on standard input; cli_greedy.c)
 *   cbllm-cli bench    -m DIR [--concurrency 1,4,8,16,32] [--requests N] [--prompt-len A..B]
 *                      [--gen-len A..B] [--static | --static-admission] [--json] [--bandwidth GBPS]
 *                      (the serving workload; GBPS adds each decode step's bandwidth floor)
 *   cbllm-cli bench-hol -m DIR [--static | --static-admission] (the head-of-line case)
 *   cbllm-cli bench-steps -m DIR [--batch 1,8,32] [--context N] [--steps N] [--prefill N]
 *   cbllm-cli membw [--device cpu|cuda]        (copy bandwidth: "copy_bandwidth_GBps X")
 *
 * Every failure prints one line "cbllm-cli: error: ..." and exits 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "cli_bench.h"
#include "cli_constraint.h"
#include "cli_chat.h"
#include "cli_score.h"
#include "cli_tokenize.h"
#include "cli_workload.h"
#include "tokenizer/tokenizer.h"

/* Print the usage text. */
static void
Usage(FILE *f)
{
	fputs("usage:\n"
		  "  cbllm-cli generate -m DIR (-p TEXT | --prompt-ids \"ID ...\" | --messages JSON)\n"
		  "            [-n MAX_TOKENS] [--temp T] [--top-p P] [--top-k K] [--seed S] [--stop STR]...\n"
		  "            [--ids] [--ignore-eos] [--no-bos] [--template-kwargs JSON]\n"
		  "            [--json-schema FILE | --regex RE]   (the output must match; also for bench,\n"
		  "            which then prints the compile cost, and bench-steps, which times both)\n"
		  "  cbllm-cli tokenize -m DIR|FILE.gguf [--raw] [--no-bos] [--no-parse-special]\n"
		  "            reads text from standard input (--raw: no BOS, special-token text as text)\n"
		  "  cbllm-cli tokenize -m DIR --jsonl [--special] [--literal]   JSON string lines -> id\n"
		  "            array lines (--literal, or --no-parse-special: special-token text as text)\n"
		  "  cbllm-cli tokenize -m DIR --bench FILE   tokenizer load time and encoding MB/s\n"
		  "  cbllm-cli detokenize -m DIR --jsonl [--raw]     id array lines -> JSON string lines\n"
		  "  cbllm-cli logits -m DIR --prompt-ids \"ID ...\"\n"
		  "  cbllm-cli perplexity -m DIR --context N   perplexity of standard input, as llama-perplexity\n"
		  "  cbllm-cli greedy -m DIR -n N   JSON prompt-id array lines -> greedy ids, top-2 margins and runners-up\n"
		  "  cbllm-cli bench -m DIR [--concurrency 1,4,8,16,32] [--requests N] [--prompt-len A..B]\n"
		  "            [--gen-len A..B] [--prefix-len N] [--temp T] [--top-p P] [--seed S]\n"
		  "            [--static | --static-admission] [--json] [--bandwidth GBPS]\n"
		  "  cbllm-cli bench-hol -m DIR [--static | --static-admission]   (1 request of 500 tokens, 7 of 20)\n"
		  "  cbllm-cli bench-steps -m DIR [--batch 1,8,32] [--context N] [--steps N] [--prefill N]\n"
		  "            [--temp T] [--top-p P] [--top-k K]   (decode greedy without --temp)\n"
		  "            [--logprobs K]   (times the steps again reporting logprobs, K alternatives)\n"
		  "  cbllm-cli bench-sampler [--vocab N] [--batch B] [--threads N] [--temp T] [--top-p P]\n"
		  "            [--top-k K]   (sampling B rows of N logits; default 151936, 32, 0.7, 0.95)\n"
		  "  cbllm-cli membw [--device cpu|cuda]     device copy bandwidth (read + write) in GB/s\n"
		  "  cbllm-cli chat -m DIR --render         renders the JSON request on standard input\n"
		  "common options: --device cpu|cuda|auto  --threads N\n"
		  "                --isa auto|avx512vnni|avx512|avx2|generic\n"
		  "                --max-model-len N  --load-format auto|dummy  --gpu-memory-utilization F\n"
		  "                --weight-format auto|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|\n"
		  "                                q4_k_m|q5_k_m\n"
		  "                --kv-blocks N  --block-size N  --max-num-seqs N  --max-batched-tokens N\n"
		  "                --kv-cache-dtype auto|f32|f16|bf16\n"
		  "                --preempt auto|recompute|swap  --swap-blocks N  --no-prefix-cache\n"
		  "                --max-step-ms auto|off|MS  (prompt work beside decodes; auto: 2x a decode step)\n"
		  "                --no-cuda-graphs  --chat-template FILE\n"
		  "(generate: an option not given takes the model's generation_config.json default)\n",
		  f);
}

/* Print an error line and return the exit status 1. */
static int
Fail(const char *msg)
{
	fprintf(stderr, "cbllm-cli: error: %s\n", msg);
	return 1;
}

/* Parse an integer option value strictly. */
static int
ParseInt(const char *s, long lo, long hi, long *out)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Parse a float option value strictly. */
static int
ParseFloat(const char *s, float *out)
{
	char	   *end;
	float		v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* Parse a double option value strictly. */
static int
ParseDouble(const char *s, double *out)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

/* Parse "1 2 3" (spaces or commas) into a malloc'd id array. */
static int
ParseIds(const char *s, int32_t **ids, int *n)
{
	int			cap = 16,
				k = 0;
	int32_t    *a = malloc(sizeof(int32_t) * cap);

	while (a != NULL && *s)
	{
		char	   *end;
		long		v;

		while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n')
			s++;
		if (*s == '\0')
			break;
		errno = 0;
		v = strtol(s, &end, 10);
		if (end == s || errno || v < 0 || v > INT32_MAX)
		{
			free(a);
			return -1;
		}
		if (k == cap)
		{
			int32_t    *b = realloc(a, sizeof(int32_t) * (cap *= 2));

			if (b == NULL)
			{
				free(a);
				return -1;
			}
			a = b;
		}
		a[k++] = (int32_t) v;
		s = end;
	}
	if (a == NULL)
		return -1;
	*ids = a;
	*n = k;
	return 0;
}

/* All options of all subcommands. */
typedef struct cli_opts
{
	cbllm_engine_params ep;
	cbllm_sampling sp;
	const char *prompt;
	const char *prompt_ids;
	bool		print_ids;
	bool		raw;
	bool		no_bos;
	const char *messages;		/* generate --messages: a JSON array of chat messages */
	const char *template_kwargs;	/* generate --template-kwargs: a JSON object */
	bool		temp_given;
	bool		top_p_given;
	bool		top_k_given;
	tokenize_opts tok;
	bench_opts	bench;
	int			vocab;			/* bench-sampler --vocab */
	workload_opts work;
	const char *json_schema;	/* --json-schema FILE */
	const char *regex;			/* --regex RE */
} cli_opts;

/* Parse argv[2..] into o; returns 0, or -1 after printing an error. */
static int
ParseArgs(int argc, char **argv, cli_opts *o)
{
	for (int i = 2; i < argc; i++)
	{
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		long		n;
		int			takes = 1;

		if (strcmp(a, "--ids") == 0)
			o->print_ids = true, takes = 0;
		else if (strcmp(a, "--raw") == 0)
			o->raw = o->tok.raw = true, takes = 0;
		else if (strcmp(a, "--jsonl") == 0)
			o->tok.jsonl = true, takes = 0;
		else if (strcmp(a, "--special") == 0)
			o->tok.special = true, takes = 0;
		else if (strcmp(a, "--no-bos") == 0)
			o->no_bos = true, takes = 0;
		else if (strcmp(a, "--no-parse-special") == 0 || strcmp(a, "--literal") == 0)
			o->tok.no_parse_special = true, takes = 0;
		else if (strcmp(a, "--ignore-eos") == 0)
			o->sp.ignore_eos = true, takes = 0;
		else if (strcmp(a, "--static") == 0)
			o->ep.batching = CBLLM_BATCH_STATIC_PADDED, takes = 0;
		else if (strcmp(a, "--static-admission") == 0)
			o->ep.batching = CBLLM_BATCH_STATIC_ADMISSION, takes = 0;
		else if (strcmp(a, "--json") == 0)
			o->work.json = true, takes = 0;
		else if (strcmp(a, "--no-prefix-cache") == 0)
			o->ep.no_prefix_caching = true, takes = 0;
		else if (strcmp(a, "--no-cuda-graphs") == 0)
			o->ep.no_cuda_graphs = true, takes = 0;
		else if (v == NULL)
		{
			fprintf(stderr, "cbllm-cli: error: option %s needs a value (or is unknown)\n", a);
			return -1;
		}
		else if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0)
			o->ep.model_dir = v;
		else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0)
			o->prompt = v;
		else if (strcmp(a, "--prompt-ids") == 0)
			o->prompt_ids = v;
		else if (strcmp(a, "--messages") == 0)
			o->messages = v;
		else if (strcmp(a, "--template-kwargs") == 0)
			o->template_kwargs = v;
		else if (strcmp(a, "--chat-template") == 0)
			o->ep.chat_template = v;
		else if (strcmp(a, "--isa") == 0)
			o->ep.cpu_isa = v;
		else if (strcmp(a, "--device") == 0)
			o->ep.device = v;
		else if (strcmp(a, "--weight-format") == 0)
			o->ep.weight_format = v;	/* checked by the engine, which lists the names */
		else if (strcmp(a, "--kv-cache-dtype") == 0)
			o->ep.kv_cache_dtype = v;	/* checked by the engine's backend */
		else if (strcmp(a, "--load-format") == 0)
		{
			if (strcmp(v, "auto") != 0 && strcmp(v, "dummy") != 0)
			{
				fprintf(stderr, "cbllm-cli: error: --load-format must be auto or dummy, "
						"not \"%s\"\n", v);
				return -1;
			}
			o->ep.load_format = v;
		}
		else if (strcmp(a, "--gpu-memory-utilization") == 0)
		{
			double		f;

			if (ParseDouble(v, &f) != 0 || !(f > 0 && f <= 1))
			{
				fprintf(stderr, "cbllm-cli: error: --gpu-memory-utilization must be a fraction "
						"in (0, 1], not \"%s\"\n", v);
				return -1;
			}
			o->ep.gpu_memory_utilization = f;
		}
		else if (strcmp(a, "--max-step-ms") == 0)
		{
			double		ms = 0;

			if (strcmp(v, "auto") == 0)
				ms = CBLLM_MAX_STEP_AUTO;
			else if (strcmp(v, "off") != 0 && (ParseDouble(v, &ms) != 0 || !(ms > 0 && ms < 1e9)))
			{
				fprintf(stderr, "cbllm-cli: error: --max-step-ms takes auto, off or a positive number "
						"of milliseconds, not \"%s\"\n", v);
				return -1;
			}
			o->ep.max_step_ms = ms;
		}
		else if (strcmp(a, "--bandwidth") == 0)
		{
			double		g;

			if (ParseDouble(v, &g) != 0 || !(g > 0 && g < 1e6))
			{
				fprintf(stderr, "cbllm-cli: error: --bandwidth must be a positive number "
						"of GB/s, not \"%s\"\n", v);
				return -1;
			}
			o->work.bandwidth_gbps = g;
		}
		else if (strcmp(a, "--temp") == 0 || strcmp(a, "--top-p") == 0)
		{
			bool		is_temp = a[2] == 't' && a[3] == 'e';

			if (ParseFloat(v, is_temp ? &o->sp.temperature : &o->sp.top_p) != 0)
			{
				fprintf(stderr, "cbllm-cli: error: bad value \"%s\" for %s\n", v, a);
				return -1;
			}
			*(is_temp ? &o->temp_given : &o->top_p_given) = true;
		}
		else if (strcmp(a, "--stop") == 0)
		{
			if (o->sp.n_stop == CBLLM_MAX_STOP)
			{
				fprintf(stderr, "cbllm-cli: error: at most %d --stop strings\n", CBLLM_MAX_STOP);
				return -1;
			}
			o->sp.stop[o->sp.n_stop++] = v;
		}
		else if (strcmp(a, "--bench") == 0)
			o->tok.bench_file = v;
		else if (strcmp(a, "--json-schema") == 0)
			o->json_schema = v;
		else if (strcmp(a, "--regex") == 0)
			o->regex = v;
		else if (strcmp(a, "--batch") == 0)
			o->bench.batches = v;
		else if (strcmp(a, "--concurrency") == 0)
			o->work.concurrency = v;
		else if (strcmp(a, "--preempt") == 0)
		{
			if (cbllm_preempt_mode_parse(v) < 0)
			{
				fprintf(stderr, "cbllm-cli: error: --preempt must be auto, recompute or swap\n");
				return -1;
			}
			o->ep.preempt_mode = cbllm_preempt_mode_parse(v);
		}
		else if (strcmp(a, "--prompt-len") == 0 || strcmp(a, "--gen-len") == 0)
		{
			bool		p = a[2] == 'p';

			if (workload_parse_range(v, p ? &o->work.prompt_min : &o->work.gen_min,
									 p ? &o->work.prompt_max : &o->work.gen_max) != 0)
			{
				fprintf(stderr, "cbllm-cli: error: %s takes N or A..B, not \"%s\"\n", a, v);
				return -1;
			}
		}
		else if (ParseInt(v, 0, 1L << 40, &n) != 0)
		{
			fprintf(stderr, "cbllm-cli: error: bad value \"%s\" for %s\n", v, a);
			return -1;
		}
		else if (strcmp(a, "--seed") == 0)
			o->sp.seed = (uint64_t) n, o->sp.has_seed = true;
		else if (strcmp(a, "-n") == 0 || strcmp(a, "--max-tokens") == 0)
			o->sp.max_tokens = (int) n;
		else if (strcmp(a, "--top-k") == 0)
			o->sp.top_k = (int) n, o->top_k_given = true;
		else if (strcmp(a, "--logprobs") == 0)
			o->bench.logprobs = true, o->bench.top_logprobs = (int) n;
		else if (strcmp(a, "--threads") == 0)
			o->ep.n_threads = (int) n;
		else if (strcmp(a, "--max-model-len") == 0)
			o->ep.max_model_len = (int) n;
		else if (strcmp(a, "--kv-blocks") == 0)
			o->ep.num_kv_blocks = (int) n;
		else if (strcmp(a, "--block-size") == 0)
			o->ep.block_size = (int) n;
		else if (strcmp(a, "--max-num-seqs") == 0)
			o->ep.max_num_seqs = (int) n;
		else if (strcmp(a, "--max-batched-tokens") == 0)
			o->ep.max_num_batched_tokens = (int) n;
		else if (strcmp(a, "--context") == 0)
			o->bench.context = (int) n;
		else if (strcmp(a, "--steps") == 0)
			o->bench.steps = (int) n;
		else if (strcmp(a, "--requests") == 0)
			o->work.requests = (int) n;
		else if (strcmp(a, "--prefix-len") == 0)
			o->work.prefix_len = n == 0 ? -1 : (int) n;
		else if (strcmp(a, "--swap-blocks") == 0)
			o->ep.num_swap_blocks = (int) n, o->ep.swap_space_bytes = n == 0 ? SIZE_MAX : 0;
		else if (strcmp(a, "--prefill") == 0)
			o->bench.prefill_len = (int) n;
		else if (strcmp(a, "--vocab") == 0)
			o->vocab = (int) n;
		else
		{
			fprintf(stderr, "cbllm-cli: error: unknown option %s\n", a);
			return -1;
		}
		i += takes;
	}
	if (o->ep.model_dir == NULL && strcmp(argv[1], "membw") != 0 && strcmp(argv[1], "bench-sampler") != 0)
	{
		fprintf(stderr, "cbllm-cli: error: -m DIR (the model directory) is required\n");
		return -1;
	}
	return 0;
}

/* The prompt o->messages (with o->template_kwargs) make through e's chat template; 0 or 1 (printed). */
static int
RenderMessages(cbllm_engine *e, const cli_opts *o, cbllm_buf *out)
{
	const char *vars = o->template_kwargs ? o->template_kwargs : "{}";
	size_t		mlen = strlen(o->messages),
				vlen = strlen(vars);
	char	   *payload = malloc(mlen + 1 + vlen);
	cbllm_err	err;
	int			rc;

	if (payload == NULL)
		return Fail("out of memory");
	memcpy(payload, o->messages, mlen);
	payload[mlen] = '\0';
	memcpy(payload + mlen + 1, vars, vlen);
	rc = cbllm_engine_render_chat(e, payload, mlen + 1 + vlen, out, &err);
	free(payload);
	return rc == CBLLM_OK ? 0 : Fail(err.msg);
}

/* generate: stream text (or print ids) of one request. */
static int
CmdGenerate(cli_opts *o)
{
	cbllm_engine *e;
	cbllm_err	err;
	cbllm_request_input in = {0};
	int32_t    *ids = NULL;
	int64_t		id;
	int			active = 1,
				status = 0;
	bool		first = true;

	cbllm_buf	rendered = {0};

	if ((o->prompt != NULL) + (o->prompt_ids != NULL) + (o->messages != NULL) != 1)
		return Fail("give exactly one of -p TEXT, --prompt-ids \"ID ...\" and --messages JSON");
	if (o->prompt_ids != NULL && ParseIds(o->prompt_ids, &ids, &in.n_ids) != 0)
		return Fail("--prompt-ids must be non-negative integers separated by spaces");
	if (o->prompt != NULL)
	{
		in.text = o->prompt;
		in.text_len = strlen(o->prompt);
		in.add_bos = !o->no_bos;
	}
	in.ids = ids;
	if (o->ep.max_num_seqs == 0)
		o->ep.max_num_seqs = 4;
	if (cbllm_engine_create(&o->ep, &e, &err) != CBLLM_OK)
	{
		free(ids);
		return Fail(err.msg);
	}
	o->sp.model_defaults = (o->temp_given ? 0 : CBLLM_DEFAULT_TEMPERATURE) |
		(o->top_p_given ? 0 : CBLLM_DEFAULT_TOP_P) | (o->top_k_given ? 0 : CBLLM_DEFAULT_TOP_K);
	if (o->messages != NULL && (status = RenderMessages(e, o, &rendered)) == 0)
	{
		in.text = rendered.data ? rendered.data : "";
		in.text_len = rendered.len;
		in.add_bos = false;		/* the template writes its own */
	}
	if (status == 0 && cbllm_engine_submit(e, &in, &o->sp, &id, &err) != CBLLM_OK)
		status = Fail(err.msg);
	while (status == 0 && active > 0)
	{
		cbllm_output out;

		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK ||
			cbllm_engine_take(e, id, &out, &err) != CBLLM_OK)
		{
			status = Fail(err.msg);
			break;
		}
		if (o->print_ids)
			for (int i = 0; i < out.n_tokens; i++, first = false)
				printf(first ? "%d" : " %d", out.tokens[i]);
		else
			fwrite(out.text, 1, out.text_len, stdout);
		fflush(stdout);
		if (out.finish == CBLLM_FINISH_ERROR)
			status = Fail(out.error);
		if (out.finish != CBLLM_FINISH_NONE)
			break;
	}
	if (status == 0)
		printf("\n");
	cbllm_engine_destroy(e);
	cbllm_buf_free(&rendered);
	free(ids);
	return status;
}

/* logits: one line of vocab_size floats per prompt position. */
static int
CmdLogits(cli_opts *o)
{
	cbllm_engine *e;
	cbllm_engine_info info;
	cbllm_err	err;
	int32_t    *ids;
	int			n;
	float	   *lg;
	int			status = 0;

	if (o->prompt_ids == NULL || ParseIds(o->prompt_ids, &ids, &n) != 0 || n == 0)
		return Fail("logits needs --prompt-ids \"ID ...\" with at least one id");
	if (cbllm_engine_create(&o->ep, &e, &err) != CBLLM_OK)
	{
		free(ids);
		return Fail(err.msg);
	}
	cbllm_engine_get_info(e, &info);
	lg = malloc(sizeof(float) * (size_t) n * info.vocab_size);
	if (lg == NULL)
		status = Fail("out of memory");
	else if (cbllm_engine_prompt_logits(e, ids, n, lg, &err) != CBLLM_OK)
		status = Fail(err.msg);
	else
		for (int p = 0; p < n; p++)
		{
			for (int v = 0; v < info.vocab_size; v++)
				printf(v ? " %.9g" : "%.9g", lg[(size_t) p * info.vocab_size + v]);
			printf("\n");
		}
	free(lg);
	free(ids);
	cbllm_engine_destroy(e);
	return status;
}

int
main(int argc, char **argv)
{
	cli_opts	o;
	static cbllm_buf constraint;	/* lives as long as the command */

	memset(&o, 0, sizeof(o));
	o.sp = cbllm_sampling_default();
	o.sp.max_tokens = 64;
	o.ep.max_step_ms = CBLLM_MAX_STEP_AUTO;
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
	{
		Usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 1 : 0;
	}
	if (strcmp(argv[1], "chat") == 0)
		return cli_chat_main(argc, argv);
	if (ParseArgs(argc, argv, &o) != 0)
		return 1;
	if (o.json_schema != NULL && o.regex != NULL)
		return Fail("give at most one of --json-schema and --regex");
	if (o.json_schema != NULL || o.regex != NULL)
	{
		bool		lines = strcmp(argv[1], "bench-steps") == 0;

		if (cli_constraint_regex(o.json_schema, o.regex, lines, &constraint) != 0)
			return 1;
		o.sp.constraint = o.work.constraint = o.bench.constraint = constraint.data;
		o.sp.constraint_len = o.work.constraint_len = o.bench.constraint_len = constraint.len;
		if ((strcmp(argv[1], "bench") == 0 || lines) &&
			cli_constraint_report(o.ep.model_dir, o.json_schema, o.regex) != 0)
			return 1;
	}
	if (strcmp(argv[1], "generate") == 0)
		return CmdGenerate(&o);
	o.tok.model_dir = o.ep.model_dir;
	o.tok.no_bos = o.no_bos;
	if (strcmp(argv[1], "tokenize") == 0)
		return cli_tokenize_run(&o.tok);
	if (strcmp(argv[1], "detokenize") == 0)
		return cli_detokenize_run(&o.tok);
	if (strcmp(argv[1], "logits") == 0)
		return CmdLogits(&o);
	if (strcmp(argv[1], "perplexity") == 0)
		return cli_perplexity_run(&o.ep, o.bench.context);
	if (strcmp(argv[1], "greedy") == 0)
		return cli_greedy_run(&o.ep, o.sp.max_tokens);
	if (strcmp(argv[1], "bench") == 0)
	{
		o.work.temperature = o.temp_given ? o.sp.temperature : -1;
		o.work.top_p = o.top_p_given ? o.sp.top_p : 0;
		o.work.seed = o.sp.has_seed ? (unsigned) o.sp.seed : 1;
		return cli_workload_run(&o.ep, &o.work);
	}
	if (strcmp(argv[1], "bench-hol") == 0)
		return cli_hol_run(&o.ep, 20, 500, 64);
	if (strcmp(argv[1], "bench-steps") == 0)
	{
		o.bench.temperature = o.temp_given ? o.sp.temperature : 0;
		o.bench.top_p = o.top_p_given ? o.sp.top_p : 0;
		o.bench.top_k = o.top_k_given ? o.sp.top_k : 0;
		return cli_bench_run(&o.ep, &o.bench);
	}
	if (strcmp(argv[1], "bench-sampler") == 0)
	{
		sampler_bench_opts so = {o.vocab, o.bench.batches ? atoi(o.bench.batches) : 0,
			o.ep.n_threads, o.temp_given ? o.sp.temperature : 0.7f,
		o.top_p_given ? o.sp.top_p : 0.95f, o.top_k_given ? o.sp.top_k : 0};

		return cli_sampler_bench_run(&so);
	}
	if (strcmp(argv[1], "membw") == 0)
		return cli_membw_run(o.ep.device);
	fprintf(stderr, "cbllm-cli: error: unknown command \"%s\"\n", argv[1]);
	Usage(stderr);
	return 1;
}
