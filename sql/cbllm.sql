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
SELECT llm_generate('x', temperature => 1e300);
SELECT llm_token_count(repeat('a', 50 * 1024 * 1024));
SELECT llm_tokenize(repeat('a', 70000));

-- a top_p too small for the engine's floats keeps the top token only: greedy
SELECT llm_generate('hi', 8, temperature => 0.9, top_p => 1e-300, seed => 1) = llm_generate('hi', 8)
       AS tiny_top_p_is_greedy;
-- on_error => 'null' covers an element that is too large too
SELECT r[1] IS NOT NULL AS good_element_kept, r[2] IS NULL AS oversized_element_null
FROM (SELECT llm_generate(ARRAY['hi', repeat('x', 70000)], 4, on_error => 'null') AS r) s;

-- no NUL byte and no invalid UTF-8 in a text value: <0x00> and a lone <0xC5> become U+FFFD
SELECT llm_detokenize(ARRAY[3]) = U&'\FFFD' AS nul_replaced,
       llm_detokenize(ARRAY[3 + 197]) = U&'\FFFD' AS invalid_byte_replaced,
       length(convert_to(llm_detokenize(ARRAY[3, 3]), 'UTF8')) AS bytes_of_two_replacements;
-- long pieces through the smallest output ring (this instance runs with it): the
-- ids of a 60 kB text, and a long generation, arrive whole
SELECT array_length(llm_tokenize(repeat('ab ', 20000)), 1) = llm_token_count(repeat('ab ', 20000))
       AS long_tokenize_arrives_whole,
       llm_token_count(repeat('ab ', 20000)) > 10000 AS many_tokens;
SELECT llm_detokenize(llm_tokenize(repeat('ab ', 5000))) = repeat('ab ', 5000) AS long_round_trip;
SELECT string_agg(p, '' ORDER BY n) = llm_generate('The quick brown fox', 400)
       AS long_stream_concatenates_to_text
FROM llm_generate_stream('The quick brown fox', 400) WITH ORDINALITY AS s(p, n);

-- quotas: by default a session holds at most a quarter of the slots (16 of
-- the 64 here) and a role half of them; a call past a limit waits
-- cbllm.slot_wait_timeout (cancellably) and then fails clearly, and the
-- aborted transaction gives every slot back
SELECT name, setting, context FROM pg_settings
WHERE name IN ('cbllm.max_requests_per_session', 'cbllm.max_requests_per_role',
               'cbllm.slot_wait_timeout', 'cbllm.result_memory', 'cbllm.output_buffer_size')
ORDER BY name;
-- hold_slots(n, tag): n streams that each hold a slot until the transaction ends
CREATE FUNCTION hold_slots(n integer, tag text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  c refcursor;
  piece text;
BEGIN
  FOR i IN 1..n LOOP
    c := tag || i;
    OPEN c FOR SELECT llm_generate_stream('hold a slot ' || i, 20);
    FETCH c INTO piece;
  END LOOP;
END $$;
SET cbllm.slot_wait_timeout = '200ms';
DO $$
BEGIN
  PERFORM hold_slots(16, 'hold');
  PERFORM llm_generate('one too many', 4);
END $$;
-- the role's limit (set lower than the session's here)
SET cbllm.max_requests_per_session = 64;
SET cbllm.max_requests_per_role = 8;
DO $$
BEGIN
  PERFORM hold_slots(8, 'hold');
  PERFORM llm_generate('one too many', 4);
END $$;
-- every slot taken (both limits raised to all 64): the next request fails after its wait
SET cbllm.max_requests_per_role = 64;
DO $$
BEGIN
  PERFORM hold_slots(64, 'hold');
  PERFORM llm_generate('one too many', 4);
END $$;
RESET cbllm.max_requests_per_session;
RESET cbllm.max_requests_per_role;
SELECT llm_generate('a slot is free again', 4) IS NOT NULL AS slots_released;

-- finished llm_submit results leave their slots: 40 uncollected requests
-- (more than the session may hold) all finish, and are all collected later
DO $$
DECLARE
  ids bigint[] := '{}';
  n integer := 0;
BEGIN
  FOR i IN 1..40 LOOP
    ids := ids || llm_submit('parked ' || i, 4);
  END LOOP;
  FOR i IN 1..40 LOOP
    IF llm_result(ids[i]) = llm_generate('parked ' || i, 4) THEN
      n := n + 1;
    END IF;
  END LOOP;
  RAISE NOTICE '% of 40 parked results collected and equal to a direct call', n;
END $$;
RESET cbllm.slot_wait_timeout;

-- what llm_result says of an id (its number masked, for a stable output)
CREATE FUNCTION pg_temp.result_of(id bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  RETURN 'collected: ' || llm_result(id);
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM, '[0-9]+', 'N');
END $$;

-- a subtransaction that rolls back takes back the requests it submitted:
-- 40 of them (more than the session's quota) leave nothing behind
DO $$
BEGIN
  FOR i IN 1..40 LOOP
    BEGIN
      PERFORM llm_submit('rolled back ' || i, 200);
      RAISE EXCEPTION 'roll back';
    EXCEPTION WHEN raise_exception THEN
      NULL;
    END;
  END LOOP;
END $$;
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN NOT EXISTS (SELECT FROM cbllm.requests WHERE pid = pg_backend_pid());
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS requests_left FROM cbllm.requests WHERE pid = pg_backend_pid();
SELECT results_parked AS results_left FROM cbllm_status();
SELECT llm_generate('served after the rollbacks', 4) IS NOT NULL AS served_after_rollbacks;
BEGIN;
SAVEPOINT s;
SELECT llm_submit('taken back', 200) AS rolled_back_id \gset
ROLLBACK TO s;
SELECT pg_temp.result_of(:rolled_back_id) AS rolled_back_request;
ROLLBACK;
-- a request submitted in a committed subtransaction survives
BEGIN;
SAVEPOINT s;
SELECT llm_submit('kept', 4) AS kept_id \gset
RELEASE s;
COMMIT;
SELECT llm_result(:kept_id) = llm_generate('kept', 4) AS committed_subtransaction_request_kept;

-- llm_result does not take another call's request, such as an open stream
BEGIN;
DECLARE c CURSOR FOR SELECT llm_generate_stream('my stream', 40);
MOVE 1 IN c;
SELECT pg_temp.result_of((SELECT id FROM cbllm.requests WHERE pid = pg_backend_pid()))
       AS stream_id_refused;
DO $$
DECLARE
  c refcursor := 'c';
  piece text;
  n integer := 0;
BEGIN
  LOOP
    FETCH c INTO piece;
    EXIT WHEN NOT FOUND;
    n := n + 1;
  END LOOP;
  RAISE NOTICE 'the stream still flows: %', n > 0;
END $$;
COMMIT;

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
-- the GPU and weight settings and their defaults (they take effect at server start)
SELECT name, setting, context FROM pg_settings
WHERE name IN ('cbllm.gpu_memory_utilization', 'cbllm.cuda_graphs', 'cbllm.load_format',
               'cbllm.weight_format')
ORDER BY name;
