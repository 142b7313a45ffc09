/*
 * generation_config.h: what a model directory says about generating with it,
 * beside its weights: the token ids that end a turn, and the sampling
 * defaults of generation_config.json.
 *
 * End-of-turn ids are the union of
 *   - config.json "eos_token_id" (an id or a list of ids),
 *   - generation_config.json "eos_token_id" (likewise; chat checkpoints such
 *     as Llama-3.1-Instruct list <|end_of_text|>, <|eom_id|> and <|eot_id|>),
 *   - the tokenizer's eos_token (tokenizer_config.json), added by the engine,
 * so that generation stops wherever any of them says a turn ends.
 *
 * Sampling defaults (temperature, top_p, top_k) apply to a request only for
 * the options its caller left unset (CBLLM_DEFAULT_* bits, request_kind.h),
 * and only when generation_config.json asks for sampling ("do_sample": true,
 * as HuggingFace's generate reads it); otherwise an unset option keeps the
 * engine's own default (greedy).
 */
#ifndef CBLLM_GENERATION_CONFIG_H
#define CBLLM_GENERATION_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/util.h"

#define CBLLM_MAX_EOS_IDS 16	/* end-of-turn ids of one model */

typedef struct cbllm_generation_config
{
	int			n_eos;
	int32_t		eos_ids[CBLLM_MAX_EOS_IDS];	/* distinct, in the order first seen */
	bool		do_sample;		/* generation_config.json asks for sampling */
	bool		has_temperature, has_top_p, has_top_k;	/* which defaults it gives */
	double		temperature;	/* >= 0 */
	double		top_p;			/* (0, 1] */
	int			top_k;			/* >= 0 */
} cbllm_generation_config;

/*
 * Read dir/config.json's and dir/generation_config.json's eos ids and
 * defaults (a missing generation_config.json is no error; a malformed one,
 * or a field of the wrong type, is named in the message).
 */
int			generation_config_load(const char *dir, cbllm_generation_config *g, cbllm_err *err);

/* The same from texts in memory (either may be NULL); names are for messages. */
int			generation_config_parse(const char *config_json, const char *config_name,
									const char *generation_json, const char *generation_name,
									cbllm_generation_config *g, cbllm_err *err);

/* Add an end-of-turn id (ignoring a repeat); CBLLM_ERR_INVALID when the table is full. */
int			generation_config_add_eos(cbllm_generation_config *g, int32_t id, cbllm_err *err);

/* Remove an end-of-turn id (none: nothing to do). */
void		generation_config_remove_eos(cbllm_generation_config *g, int32_t id);

/* Whether id ends a turn. */
bool		generation_config_is_eos(const cbllm_generation_config *g, int32_t id);

#endif
