-- cbllm: the SQL API against a tiny generated model (random weights, so the
-- text is gibberish; the tests check properties that hold for any model).
CREATE EXTENSION cbllm;

-- the engine runs in the background worker and has loaded the model
SELECT state, device, kv_blocks_total > 0 AS has_kv_cache, worker_pid IS NOT NULL AS has_worker,
       max_model_len
FROM cbllm_status();

-- greedy by default, so results are reproducible
SELECT llm_generate('The quick brown fox', 16) = llm_generate('The quick brown fox', 16)
       AS greedy_is_deterministic;
SELECT length(llm_generate('The quick brown fox', 16)) > 0 AS generates_text;
SELECT llm_generate('hi', 4) = llm_generate(prompt => 'hi', max_tokens => 4, temperature => 0,
                                            top_p => 1, top_k => 0, seed => NULL, stop => NULL,
                                            priority => 0) AS defaults_are_greedy;
SELECT llm_generate('hi') = llm_generate('hi', 256) AS default_max_tokens_is_256;

-- NULL prompts give NULL
SELECT llm_generate(NULL::text) IS NULL AS null_prompt_gives_null;
SELECT llm_generate(NULL::text[]) IS NULL AS null_array_gives_null;
SELECT count(*) AS null_prompt_streams_nothing FROM llm_generate_stream(NULL);

-- a seeded sampled request is reproducible
SELECT llm_generate('hi', 24, temperature => 0.9, seed => 7)
     = llm_generate('hi', 24, temperature => 0.9, seed => 7) AS seeded_is_reproducible;
SELECT llm_generate('hi', 24, temperature => 0.9, top_p => 0.9, top_k => 40, seed => 7)
    <> llm_generate('hi', 24, temperature => 0.9, top_p => 0.9, top_k => 40, seed => 8)
    AS seeds_differ;

-- max_tokens bounds the output: more tokens never give a shorter prefix
SELECT starts_with(llm_generate('The quick brown fox', 12), llm_generate('The quick brown fox', 6))
       AS longer_run_extends_shorter;

-- stop strings end the text before their first occurrence
WITH full_text AS (SELECT llm_generate('The quick brown fox', 40) AS t),
     stop AS (SELECT t, substr(t, length(t) / 2, 2) AS s FROM full_text)
SELECT llm_generate('The quick brown fox', 40, stop => ARRAY[s])
       = substr(t, 1, strpos(t, s) - 1) AS stop_string_cuts_text
FROM stop;

-- streaming: the pieces put together are the whole text
SELECT string_agg(p, '' ORDER BY n) = llm_generate('The quick brown fox', 16)
       AS stream_concatenates_to_text,
       count(*) > 1 AS several_pieces
FROM llm_generate_stream('The quick brown fox', 16) WITH ORDINALITY AS s(p, n);

-- a cursor delivers pieces while the generation goes on, and closing it aborts it
BEGIN;
DECLARE c CURSOR FOR SELECT llm_generate_stream('The quick brown fox', 200);
MOVE 3 IN c;
CLOSE c;
COMMIT;
SELECT count(*) AS rows_with_limit FROM (SELECT llm_generate_stream('hi', 200) LIMIT 2) s;

-- the array form: every element at once, results in order, NULL for NULL
SELECT array_length(llm_generate(ARRAY['a', 'b', 'c'], 8), 1) AS three_results;
SELECT (llm_generate(ARRAY['The quick brown fox', NULL, 'hi'], 16))[1]
       = llm_generate('The quick brown fox', 16) AS array_matches_single,
       (llm_generate(ARRAY['The quick brown fox', NULL, 'hi'], 16))[2] IS NULL AS null_element,
       (llm_generate(ARRAY['The quick brown fox', NULL, 'hi'], 16))[3]
       = llm_generate('hi', 16) AS order_kept;
SELECT llm_generate(ARRAY[]::text[]) AS empty_array;
-- on_error => 'null': a failing element is NULL (with a warning), the rest is kept
SELECT r[1] = llm_generate('hi', 4) AS good_element_kept, r[2] IS NULL AS bad_element_null
FROM (SELECT llm_generate(ARRAY['hi', repeat('long ', 600)], 4, on_error => 'null') AS r) s;

-- tokenizer functions
SELECT llm_tokenize('hello world');
SELECT llm_detokenize(llm_tokenize('hello world'));
SELECT llm_token_count('hello world') = array_length(llm_tokenize('hello world'), 1)
       AS count_matches_tokenize;
SELECT llm_tokenize('<s>hello') = llm_tokenize('hello') AS bos_not_added_twice;
SELECT llm_tokenize(NULL) IS NULL AS strict_tokenize;

-- every error a user can make, with its message and hint
\set VERBOSITY default
SELECT llm_generate('x', temperature => -1);
SELECT llm_generate('x', temperature => 'NaN');
SELECT llm_generate('x', top_p => 0);
SELECT llm_generate('x', top_p => 1.5);
SELECT llm_generate('x', top_k => -1);
SELECT llm_generate('x', max_tokens => 0);
SELECT llm_generate('x', max_tokens => 1001);
SELECT llm_generate('x', priority => 5000);
SELECT llm_generate('x', stop => ARRAY['']);
SELECT llm_generate('x', stop => ARRAY[NULL]::text[]);
SELECT llm_generate('x', stop => ARRAY['a','b','c','d','e','f','g','h','i']);
SELECT llm_generate(repeat('long ', 600), 4);
SELECT llm_generate(ARRAY['x'], on_error => 'ignore');
SELECT llm_generate(ARRAY['hi', repeat('long ', 600)], 4);
SELECT llm_detokenize(ARRAY[999999]);

-- every request slot taken (64 here): the next request fails clearly, and the
-- aborted transaction gives all the slots back
DO $$
DECLARE
  c refcursor;
  piece text;
BEGIN
  FOR i IN 1..64 LOOP
    c := 'hold' || i;
    OPEN c FOR SELECT llm_generate_stream('hold a slot ' || i, 20);
    FETCH c INTO piece;
  END LOOP;
  PERFORM llm_generate('one too many', 4);
END $$;
SELECT llm_generate('a slot is free again', 4) IS NOT NULL AS slots_released;

-- nothing is left running (cancellation is asynchronous: wait up to 10 s), and
-- the functions are volatile
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN (SELECT requests_running + requests_waiting + kv_blocks_used FROM cbllm_status()) = 0;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT requests_running, requests_waiting, kv_blocks_used FROM cbllm_status();
SELECT proname, provolatile, proisstrict FROM pg_proc
WHERE proname LIKE 'llm%' OR proname = 'cbllm_status' ORDER BY proname, pronargs;
-- the GPU settings and their defaults (they take effect at server start)
SELECT name, setting, context FROM pg_settings
WHERE name IN ('cbllm.gpu_memory_utilization', 'cbllm.cuda_graphs', 'cbllm.load_format')
ORDER BY name;
