-- gpt-oss's harmony chat format on a generated gpt-oss model with a test
-- tokenizer at gpt-oss's ids and gpt-oss's own chat template and
-- generation_config.json (test/tools/harmony_tokenizer.py).  The answers are
-- forced: a regex spells a whole harmony answer, and logit_bias makes the
-- model take the marker tokens (<|channel|>, <|message|>, <|end|>,
-- <|start|>) where the regex allows them rather than spelling them out
-- character by character.  (In that tokenizer the markers are not special,
-- which in gpt-oss's they are: a constraint never allows a special token.)
CREATE EXTENSION cbllm;
SELECT count(*) > 0 AS ready FROM cbllm_status() WHERE state = 'ready';
\set hi '[{"role": "user", "content": "Hi"}]'
\set bias '{"200005": 100, "200006": 100, "200007": 100, "200008": 100}'
\set answer '<\\|channel\\|>analysis<\\|message\\|>The user greets\\. Reply\\.<\\|end\\|><\\|start\\|>assistant<\\|channel\\|>final<\\|message\\|>Hello!'

-- the prompt: the system message with its reasoning effort, the user turn, the generation prompt
SELECT llm_apply_chat_template(:'hi') LIKE
       '<|start|>system<|message|>You are ChatGPT%Reasoning: medium%<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant'
       AS harmony_prompt;
SELECT position('Reasoning: high' IN llm_apply_chat_template(:'hi', template_kwargs => '{"reasoning_effort": "high"}')) > 0
       AS reasoning_effort_reaches_template;
-- its markers are gpt-oss's ids
SELECT (llm_tokenize(llm_apply_chat_template(:'hi')))[1] = 200006 AS starts_with_start_marker;
SELECT (llm_tokenize(llm_apply_chat_template(:'hi')))[array_length(llm_tokenize(llm_apply_chat_template(:'hi')), 1) - 1] = 200006
       AS generation_prompt_is_start_assistant;

-- the answer: the analysis channel is the reasoning, the final channel the text
SELECT completion, text, reasoning, finish_reason
FROM llm_chat_completions(:'hi', max_tokens => 120, temperature => 0, regex => :'answer', logit_bias => :'bias');
-- the model did write the markers' ids, not their characters
SELECT jsonb_path_query_array(logprobs, '$[*].id') @> '[200005, 200008, 200007, 200006]' AS markers_are_tokens,
       completion_tokens < 60 AS markers_are_single_tokens
FROM llm_chat_completions(:'hi', max_tokens => 120, temperature => 0, regex => :'answer', logit_bias => :'bias',
                          logprobs => 0);
-- llm_chat, llm_chat_batch, llm_submit_chat and llm_chat_stream give the final channel only
SELECT llm_chat(:'hi', max_tokens => 120, temperature => 0, regex => :'answer', logit_bias => :'bias') AS chat;
SELECT llm_chat_batch(ARRAY[:'hi', :'hi']::jsonb[], max_tokens => 120, temperature => 0, regex => :'answer',
                      logit_bias => :'bias') AS batch;
SELECT llm_result(llm_submit_chat(:'hi', max_tokens => 120, temperature => 0, regex => :'answer',
                                  logit_bias => :'bias')) AS submitted;
SELECT string_agg(p, '|') AS stream_rows
FROM llm_chat_stream(:'hi', max_tokens => 120, temperature => 0, regex => :'answer', logit_bias => :'bias') p;
-- the same prompt through llm_generate is no chat: the whole text, the markers' texts in it
SELECT llm_generate(llm_apply_chat_template(:'hi'), max_tokens => 120, temperature => 0, regex => :'answer',
                    logit_bias => :'bias') AS raw_generate;
-- cut off by max_tokens inside the analysis: the partial reasoning, no text, finish_reason length
SELECT text, reasoning, finish_reason
FROM llm_chat_completions(:'hi', max_tokens => 8, temperature => 0, regex => :'answer', logit_bias => :'bias');
-- the markers spelled out (their ids forbidden) are ordinary text: no channel, all of it the text
SELECT text, reasoning IS NULL AS no_reasoning
FROM llm_chat_completions(:'hi', max_tokens => 120, temperature => 0, regex => :'answer',
                          logit_bias => '{"200005": -100, "200006": -100, "200007": -100, "200008": -100}');
-- an assistant turn's thinking is not rendered once a later user turn follows (gpt-oss drops past reasoning)
SELECT position('secret plan' IN llm_apply_chat_template(
         '[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "thinking": "secret plan"},
           {"role": "user", "content": "c"}]')) = 0 AS past_thinking_dropped;
