/* cli_tokenize.h: cbllm-cli tokenize and detokenize (text <-> ids, JSON Lines, a benchmark). */
#ifndef CBLLM_CLI_TOKENIZE_H
#define CBLLM_CLI_TOKENIZE_H

#include <stdbool.h>

typedef struct tokenize_opts
{
	const char *model_dir;		/* holds tokenizer.json (and tokenizer_config.json) */
	bool		raw;			/* tokenize: plain text, nothing added; detokenize: no clean-up */
	bool		no_bos;			/* tokenize: no special tokens added */
	bool		jsonl;			/* one JSON value per standard-input line */
	bool		special;		/* tokenize --jsonl: add the post-processor's special tokens */
	bool		literal;		/* tokenize --jsonl: added-token text stays text (no parse_special) */
	const char *bench_file;		/* tokenize --bench FILE: load time and encoding speed */
} tokenize_opts;

/* tokenize: standard input (or --bench FILE) to ids; returns the exit status. */
int			cli_tokenize_run(const tokenize_opts *o);

/* detokenize --jsonl: each line a JSON array of ids, each output line a JSON string. */
int			cli_detokenize_run(const tokenize_opts *o);

#endif
