/* cli_constraint.h: cbllm-cli's --json-schema and --regex, and what compiling one costs. */
#ifndef CBLLM_CLI_CONSTRAINT_H
#define CBLLM_CLI_CONSTRAINT_H

#include <stdbool.h>

#include "base/util.h"

/*
 * The regex of --json-schema FILE (schema_file) or --regex (regex) into out;
 * 0, or 1 after printing the error.  With lines, the pattern admits the
 * documents one per line, never ending (JSON Lines): bench-steps times steps
 * of sequences that must not finish.
 */
int			cli_constraint_regex(const char *schema_file, const char *regex, bool lines,
								 cbllm_buf *out);

/*
 * Print what compiling the constraint costs on model_dir's tokenizer: the
 * schema to its regex, the regex to its automaton, the vocabulary's trie
 * (once per engine) and every state's mask (what lazily computed masks add
 * up to at most).  0, or 1 after printing the error.
 */
int			cli_constraint_report(const char *model_dir, const char *schema_file, const char *regex);

#endif
