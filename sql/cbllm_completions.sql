-- llm_completions: n completions of one prompt, a row each with its finish
-- reason and token counts.
-- (runs after cbllm.sql, which created the extension)

SELECT completion, finish_reason IN ('stop', 'length') AS ended,
       prompt_tokens = llm_token_count('Once upon a time') AS prompt_counted,
       completion_tokens BETWEEN 1 AND 8 AS completion_counted
FROM llm_completions('Once upon a time', max_tokens => 8, temperature => 1, seed => 5, n => 3);
-- seeded: completion i is the one the seed + i - 1 gives alone (the shared prompt KV changes nothing)
SELECT bool_and(c.text = llm_generate('Once upon a time', max_tokens => 8, temperature => 1,
                                      seed => 4 + c.completion)) AS same_as_alone,
       count(DISTINCT c.text) > 1 AS completions_differ
FROM llm_completions('Once upon a time', max_tokens => 8, temperature => 1, seed => 5, n => 4) c;
-- a constraint max_tokens cannot hold is a row with finish_reason length, not an error
SELECT completion, finish_reason, completion_tokens
FROM llm_completions('x', regex => '[a-z]{60}', max_tokens => 3, temperature => 0, n => 2);
-- a completed constraint: finish_reason constraint (or stop, at an end-of-turn token)
SELECT finish_reason IN ('constraint', 'stop') AS completed, text IN ('yes', 'no') AS valid
FROM llm_completions('x', choices => ARRAY['yes', 'no'], temperature => 0);
-- a NULL prompt gives no rows; n out of range is refused
SELECT count(*) AS rows_for_null FROM llm_completions(NULL);
SELECT * FROM llm_completions('x', n => 0);
SELECT * FROM llm_completions('x', n => 17);
