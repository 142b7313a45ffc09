-- The sampling controls: min_p, repetition_penalty, frequency_penalty,
-- presence_penalty and logit_bias (test/logits_process_test.py checks their
-- arithmetic against a reference; here the SQL side of them).
-- (runs after cbllm.sql, which created the extension)

-- logit_bias +100 on one token: greedy decoding chooses it every time
SELECT llm_generate('hello', max_tokens => 5, temperature => 0, logit_bias => '{"123": 100}') =
       llm_detokenize(array_fill(123, ARRAY[5])) AS bias_wins;
-- min_p 1 keeps only the most likely token: sampling at any temperature is greedy
SELECT llm_generate('hello', max_tokens => 12, temperature => 1.5, seed => 3, min_p => 1) =
       llm_generate('hello', max_tokens => 12, temperature => 0) AS min_p_one_is_greedy;
-- penalties change greedy output, and the jsonb and chat forms take the controls too
SELECT llm_generate('hello', max_tokens => 24, temperature => 0, repetition_penalty => 3,
                    presence_penalty => 2) <>
       llm_generate('hello', max_tokens => 24, temperature => 0) AS penalties_change_output;
SELECT jsonb_typeof(llm_generate_json('n', temperature => 0, min_p => 0.1, frequency_penalty => 1,
                                      json_schema => '{"type": "integer"}')) AS json_form_number;
-- each control checked, quoting the argument as given
SELECT llm_generate('x', min_p => 1.5);
SELECT llm_generate('x', repetition_penalty => -1);
SELECT llm_generate('x', frequency_penalty => 3);
SELECT llm_generate('x', presence_penalty => -2.5);
SELECT llm_generate('x', logit_bias => '[1, 2]');
SELECT llm_generate('x', logit_bias => '{"abc": 1}');
SELECT llm_generate('x', logit_bias => '{"5": "high"}');
SELECT llm_generate('x', logit_bias => '{"5": 500}');
SELECT llm_generate('x', logit_bias => '{"99999999": 1}');
