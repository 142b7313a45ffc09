-- llm_chat and its forms on a generated Qwen3-layout model with the real
-- Qwen3 tokenizer, chat template and generation_config.json.  The rendered
-- prompts and their ids are those of test/data/tokenizers/qwen3/chat.jsonl
-- (cases 3, 31 and 41), made by transformers.js and checked with Jinja2 and
-- HuggingFace's tokenizers library.
CREATE EXTENSION cbllm;
SELECT count(*) > 0 AS ready FROM cbllm_status() WHERE state = 'ready';
\set sys_user '[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "What is the capital of France?"}]'
\set thinking '[{"role": "user", "content": "Solve 12345678 * 87654321."}, {"role": "assistant", "content": "<think>\\nMultiply step by step.\\n</think>\\n\\n1082152022374638"}]'
\set tool '[{"role": "user", "content": "What time is it in Tokyo?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}}]}, {"role": "tool", "content": "{\\"time\\": \\"09:30\\"}"}]'

-- the template's prompts (chat.jsonl cases 3, 31, 41)
SELECT llm_apply_chat_template(:'sys_user');
SELECT llm_apply_chat_template(:'sys_user', add_generation_prompt => false);
SELECT llm_apply_chat_template(:'thinking');
SELECT llm_apply_chat_template(:'tool');
-- template variables: Qwen3's enable_thinking false writes an empty think block
SELECT llm_apply_chat_template(:'sys_user', template_kwargs => '{"enable_thinking": false}');
-- the argument wins over the same key in template_kwargs
SELECT llm_apply_chat_template(:'sys_user', false, '{"add_generation_prompt": true}')
     = llm_apply_chat_template(:'sys_user', add_generation_prompt => false) AS argument_wins;
-- the messages argument wins over a "messages" key in template_kwargs
SELECT llm_apply_chat_template(:'sys_user', template_kwargs => '{"messages": [{"role": "user", "content": "injected"}]}')
     = llm_apply_chat_template(:'sys_user') AS messages_argument_wins;
-- carriage returns in content are kept byte for byte (database text often has CRLF)
SELECT position(E'SELECT 1;\r\nSELECT 2;' IN
                llm_apply_chat_template(jsonb_build_array(jsonb_build_object('role', 'user', 'content', E'SELECT 1;\r\nSELECT 2;')))) > 0
       AS crlf_kept;
-- the prompt's ids: the special tokens are read as such, and no BOS is added
SELECT llm_tokenize(llm_apply_chat_template(:'sys_user'))
     = '{151644,8948,198,2610,525,264,10950,17847,13,151645,198,151644,872,198,3838,374,279,6722,315,9625,30,151645,198,151644,77091,198}'::int[]
       AS ids_as_chat_jsonl;

-- llm_chat generates from exactly that prompt
SELECT llm_chat(:'sys_user', max_tokens => 12, temperature => 0)
     = llm_generate(llm_apply_chat_template(:'sys_user'), max_tokens => 12, temperature => 0) AS chat_is_template_then_generate;
SELECT length(llm_chat(:'sys_user', max_tokens => 12, temperature => 0)) > 0 AS generates;
SELECT string_agg(p, '' ORDER BY n) = llm_chat(:'sys_user', max_tokens => 12, temperature => 0) AS stream_is_whole
FROM (SELECT p, row_number() OVER () AS n
      FROM llm_chat_stream(:'sys_user', max_tokens => 12, temperature => 0) p) s;
SELECT llm_chat_batch(ARRAY[:'sys_user', NULL, :'thinking']::jsonb[], max_tokens => 12, temperature => 0)
     = ARRAY[llm_chat(:'sys_user', max_tokens => 12, temperature => 0), NULL,
             llm_chat(:'thinking', max_tokens => 12, temperature => 0)] AS batch_in_order;
SELECT llm_result(llm_submit_chat(:'sys_user', max_tokens => 12, temperature => 0))
     = llm_chat(:'sys_user', max_tokens => 12, temperature => 0) AS submit_chat;
SELECT llm_chat(NULL) IS NULL AS null_gives_null;

-- generation_config.json's defaults (do_sample, temperature 0.6, top_p 0.95,
-- top_k 20) apply to the options a call leaves NULL, and only to those
SELECT llm_chat(:'sys_user', max_tokens => 16, seed => 7)
     = llm_chat(:'sys_user', max_tokens => 16, seed => 7, temperature => 0.6, top_p => 0.95, top_k => 20)
       AS defaults_are_the_models;
SELECT llm_chat(:'sys_user', max_tokens => 16, seed => 7)
     <> llm_chat(:'sys_user', max_tokens => 16, temperature => 0) AS defaults_sample;

-- bad messages: named by element
SELECT llm_chat('{"role": "user", "content": "hi"}');
SELECT llm_chat('[{"role": "user", "content": "hi"}, 5]');
SELECT llm_chat('[{"role": "user", "content": 42}]');
SELECT llm_chat('[{"content": "no role"}]');
SELECT llm_chat('[{"role": "user", "content": "hi"}]', template_kwargs => '[1]');
SELECT llm_apply_chat_template('"a string"');
-- nesting beyond what is parsed is named as such
SELECT llm_chat((repeat('[', 600) || repeat(']', 600))::jsonb);
SELECT llm_chat(:'sys_user', template_kwargs => ('{"a": ' || repeat('[', 600) || repeat(']', 600) || '}')::jsonb);
SELECT llm_chat_batch(ARRAY['[{"role": "user", "content": "ok"}]', '[{"role": "user", "content": 1}]']::jsonb[],
                      max_tokens => 4, temperature => 0, on_error => 'null') IS NOT NULL AS null_on_error;

-- reasoning: a <think> block (Qwen3's <think> and </think> tokens, which logit_bias makes the
-- model take where the regex allows them) is the reasoning column; the text after it, its
-- leading newlines dropped, is the text, and all llm_chat gives
\set think_bias '{"151667": 100, "151668": 100}'
\set think_re '<think>\\nAdd the digits\\.\\n</think>\\n\\nFour\\.'
SELECT text, reasoning, finish_reason
FROM llm_chat_completions(:'sys_user', max_tokens => 40, temperature => 0, regex => :'think_re', logit_bias => :'think_bias');
SELECT llm_chat(:'sys_user', max_tokens => 40, temperature => 0, regex => :'think_re', logit_bias => :'think_bias') AS chat_gives_text_only;
SELECT string_agg(p, '|') AS stream_gives_text_only
FROM llm_chat_stream(:'sys_user', max_tokens => 40, temperature => 0, regex => :'think_re', logit_bias => :'think_bias') p;
-- cut off inside the block: the reasoning so far, an empty text
SELECT text, reasoning, finish_reason
FROM llm_chat_completions(:'sys_user', max_tokens => 5, temperature => 0, regex => :'think_re', logit_bias => :'think_bias');
-- the tags spelled out of ordinary tokens (their ids forbidden) are text, not a block
SELECT text, reasoning IS NULL AS no_reasoning
FROM llm_chat_completions(:'sys_user', max_tokens => 40, temperature => 0, regex => :'think_re',
                          logit_bias => '{"151667": -100, "151668": -100}');
-- no block at all: the reasoning is NULL and the text is llm_chat's
SELECT reasoning IS NULL AS no_block_no_reasoning,
       text = llm_chat(:'sys_user', max_tokens => 12, temperature => 0) AS text_is_chat
FROM llm_chat_completions(:'sys_user', max_tokens => 12, temperature => 0);
