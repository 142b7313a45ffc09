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
-- logprobs: a record per generated token, most likely alternatives first;
-- greedy decoding chooses the first alternative
SELECT completion, logprobs IS NULL AS no_logprobs_unless_asked
FROM llm_completions('Once upon a time', max_tokens => 4, temperature => 0);
SELECT completion, jsonb_array_length(logprobs) = completion_tokens AS a_record_per_token,
       (SELECT bool_and(jsonb_array_length(e->'top_logprobs') = 3
                        AND e->'top_logprobs'->0->'id' = e->'id'
                        AND e->'top_logprobs'->0->'logprob' = e->'logprob'
                        AND (e->>'logprob')::float8 <= 0
                        AND (e->'top_logprobs'->0->>'logprob')::float8
                            >= (e->'top_logprobs'->1->>'logprob')::float8
                        AND (e->'top_logprobs'->1->>'logprob')::float8
                            >= (e->'top_logprobs'->2->>'logprob')::float8)
        FROM jsonb_array_elements(logprobs) e) AS greedy_takes_the_first_of_3
FROM llm_completions('Once upon a time', max_tokens => 6, temperature => 0, logprobs => 3, n => 2);
SELECT (SELECT bool_and(e->'top_logprobs' = '[]' AND e ? 'token') FROM jsonb_array_elements(logprobs) e)
       AS zero_gives_the_chosen_token_only
FROM llm_completions('Once upon a time', max_tokens => 3, temperature => 0.7, seed => 1, logprobs => 0);
-- under a constraint the alternatives are the allowed tokens: they hold all the probability
SELECT text, (SELECT bool_and(abs((SELECT sum(exp((t->>'logprob')::float8))
                                   FROM jsonb_array_elements(e->'top_logprobs') t) - 1) < 1e-4)
              FROM jsonb_array_elements(logprobs) e) AS alternatives_hold_all_the_mass
FROM llm_completions('x', choices => ARRAY['yes', 'no'], temperature => 0, logprobs => 20);
SELECT * FROM llm_completions('x', logprobs => 21);
SELECT * FROM llm_completions('x', logprobs => -1);
