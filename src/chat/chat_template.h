/*
 * chat_template.h: a model's chat template, loaded from its tokenizer files
 * and rendered from a JSON list of messages into the prompt text, byte for
 * byte as transformers' apply_chat_template(..., tokenize=False) renders it.
 *
 * The template comes from DIR/chat_template.jinja when that file exists,
 * else from tokenizer_config.json's "chat_template" (a string, or a list of
 * {"name", "template"} whose "default" entry is used).  The render's
 * variables are messages, add_generation_prompt, tools and documents (none
 * unless given), the config's special tokens that are set (bos_token,
 * eos_token, unk_token, sep_token, pad_token, cls_token, mask_token: a string
 * or an object's "content"; additional_special_tokens as a list), then every
 * key of kwargs, which replaces a default of the same name.
 *
 * A message is an object with a string "role" and a "content" that is a
 * string, null, or a list of parts (objects such as {"type": "text", "text":
 * ...}), passed to the template as given; any other keys (tool_calls,
 * reasoning_content, name...) pass through too.  A "messages" key of kwargs
 * replaces the list like any other variable and is checked the same way
 * (cbllm-cli passes its whole request as kwargs, so that numbers keep the
 * form they were written in).
 */
#ifndef CBLLM_CHAT_TEMPLATE_H
#define CBLLM_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/util.h"

typedef struct cbllm_chat cbllm_chat;	/* a model's compiled chat template and its special tokens */

/* Load dir's template: dir/chat_template.jinja if present, else tokenizer_config.json "chat_template"
 * (string, or list of {name, template}: "default"). *out = NULL with CBLLM_OK when the model has none. */
int			chat_load(const char *dir, cbllm_chat **out, cbllm_err *err);

/* The same from texts in memory (config_json: tokenizer_config.json text or NULL; jinja: template file text or NULL). */
int			chat_load_from(const char *config_json, size_t config_len, const char *jinja, size_t jinja_len,
						   cbllm_chat **out, cbllm_err *err);

/* Render messages (a JSON array text: [{"role","content",...}, ...]) with add_generation_prompt and
 * kwargs (a JSON object text or NULL: its keys become template variables, overriding the defaults;
 * e.g. {"enable_thinking": false, "tools": [...]}) into out (replacing its contents). */
int			chat_render(const cbllm_chat *c, const char *messages_json, size_t messages_len,
						bool add_generation_prompt, const char *kwargs_json, size_t kwargs_len,
						cbllm_buf *out, cbllm_err *err);

void		chat_free(cbllm_chat *c);

#endif
