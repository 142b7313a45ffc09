-- cbllm.enrich and the asynchronous API (llm_submit / llm_result)
-- (runs after cbllm.sql, which created the extension)

-- llm_submit returns at once; llm_result collects, once, with the same text as llm_generate
SELECT llm_submit('The quick brown fox', 16) AS id \gset
SELECT llm_result(:id) = llm_generate('The quick brown fox', 16) AS async_matches_sync;
SET cbllm_test.id = :id;
DO $$
BEGIN
  PERFORM llm_result(current_setting('cbllm_test.id')::bigint);
EXCEPTION WHEN invalid_parameter_value THEN
  RAISE NOTICE 'a result is collected once (%)', SQLSTATE;
END $$;
-- many submitted before any is collected: the engine batches them
SELECT array_agg(llm_submit('prompt ' || i, 8) ORDER BY i) AS ids FROM generate_series(1, 10) i \gset
SELECT count(*) FILTER (WHERE llm_result(id) = llm_generate('prompt ' || n, 8)) AS matching
FROM unnest(:'ids'::bigint[]) WITH ORDINALITY AS t(id, n);
-- without wait: NULL while running (polled right after submitting), the text once done
SELECT llm_result(llm_submit('hi', 400), wait => false) IS NULL AS nowait_is_null_while_running;
SELECT llm_submit('hi', 200) AS id2 \gset
SET cbllm_test.id = :id2;
DO $$
DECLARE
  r text;
BEGIN
  FOR i IN 1..500 LOOP
    r := llm_result(current_setting('cbllm_test.id')::bigint, wait => false);
    EXIT WHEN r IS NOT NULL;
    PERFORM pg_sleep(0.02);
  END LOOP;
  RAISE NOTICE 'nowait eventually gives the text: %', r = llm_generate('hi', 200);
END $$;
SELECT llm_submit(NULL) IS NULL AS null_prompt_submits_nothing;
SELECT llm_result(-1);

-- a table with awkward names, a NULL prompt and a poisoned row (too long)
CREATE TABLE "Reviews; DROP TABLE x" ("key id" int PRIMARY KEY, "body text" text, "sum""mary" text);
INSERT INTO "Reviews; DROP TABLE x"
SELECT i, CASE WHEN i = 7 THEN repeat('long ', 600) WHEN i = 9 THEN NULL ELSE 'review number ' || i END, NULL
FROM generate_series(1, 25) i;
SET client_min_messages = warning;	-- progress NOTICEs carry timings
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'Summarise: ' || "body text"$$, 'sum"mary',
                  chunk_size => 10, max_tokens => 8);
SELECT count(*) FILTER (WHERE "sum""mary" IS NOT NULL) AS done,
       count(*) FILTER (WHERE "sum""mary" IS NULL) AS not_done
FROM "Reviews; DROP TABLE x";
SELECT bool_and("sum""mary" = llm_generate('Summarise: ' || "body text", 8)) AS same_as_llm_generate
FROM "Reviews; DROP TABLE x" WHERE "sum""mary" IS NOT NULL;
SELECT tbl, key_value, sqlstate, error FROM cbllm.enrich_errors ORDER BY key_value::int;
-- a second CALL only retries what is left (the two failing rows, again)
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'Summarise: ' || "body text"$$, 'sum"mary',
                  where_sql => $$"key id" <> 7$$, chunk_size => 10, max_tokens => 8);
SELECT count(*) AS errors_recorded FROM cbllm.enrich_errors;
RESET client_min_messages;

-- a prompt expression that fails on one row: that row is recorded, the others are done
CREATE TABLE calc (id int PRIMARY KEY, n int, out text);
INSERT INTO calc SELECT i, i - 3, NULL FROM generate_series(1, 6) i;
SET client_min_messages = warning;
CALL cbllm.enrich('calc', 'id', $$'value ' || (12 / n)::text$$, 'out', max_tokens => 4);
RESET client_min_messages;
SELECT id, out IS NOT NULL AS done FROM calc ORDER BY id;
SELECT key_value, sqlstate, error FROM cbllm.enrich_errors WHERE tbl = 'calc'::regclass;
DROP TABLE calc;

-- argument checks (without the PL/pgSQL context lines)
\set SHOW_CONTEXT never
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'no such column', $$'x'$$, 'sum"mary');
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'x'$$, 'no such column');
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'x'$$, 'key id');
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'x'$$, 'sum"mary', chunk_size => 0);
CALL cbllm.enrich('no_such_table', 'key id', $$'x'$$, 'sum"mary');
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', NULL, 'sum"mary');
DROP TABLE "Reviews; DROP TABLE x";
TRUNCATE cbllm.enrich_errors;
