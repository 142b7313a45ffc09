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
-- without wait: NULL while running (polled right after submitting, with the
-- engine busy on 12 long requests of the same transaction), the text once done
BEGIN;
SELECT count(llm_submit('keep the engine busy ' || i, 1000, stop => NULL, transaction_scoped => true))
       AS busy_requests
FROM generate_series(1, 12) i;
SELECT llm_result(llm_submit('hi', 400, transaction_scoped => true), wait => false) IS NULL
       AS nowait_is_null_while_running;
ROLLBACK;
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
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'x'$$, 'tableoid');
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', $$'x'$$, 'sum"mary', chunk_size => 0);
CALL cbllm.enrich('no_such_table', 'key id', $$'x'$$, 'sum"mary');
CALL cbllm.enrich('"Reviews; DROP TABLE x"', 'key id', NULL, 'sum"mary');
CREATE VIEW reviews_view AS SELECT * FROM "Reviews; DROP TABLE x";
CALL cbllm.enrich('reviews_view', 'key id', $$'x'$$, 'sum"mary');
DROP VIEW reviews_view;
DROP TABLE "Reviews; DROP TABLE x";

-- each error row names the role that ran the job
SELECT count(*) AS errors, bool_and(role = to_regrole(quote_ident(current_user))) AS all_name_the_caller
FROM cbllm.enrich_errors;

-- prompt_sql and where_sql are one SQL expression each: statements, lists
-- and clauses spliced after an expression are refused before any row is read
CREATE TABLE x (id int PRIMARY KEY, body text, out text);
INSERT INTO x VALUES (1, 'first; (one)', NULL), (2, 'second', NULL);
CALL cbllm.enrich('x', 'id', 'body', 'out', where_sql => 'true); DROP TABLE x; SELECT (1');
CALL cbllm.enrich('x', 'id', 'body', 'out', where_sql => 'true) UNION SELECT (false');
CALL cbllm.enrich('x', 'id', 'body', 'out', where_sql => 'true) FROM pg_class WHERE (true');
CALL cbllm.enrich('x', 'id', 'body', 'out', where_sql => 'true) --');
CALL cbllm.enrich('x', 'id', '1), (2', 'out');
CALL cbllm.enrich('x', 'id', 'body /* unterminated', 'out');
SELECT count(*) AS rows_of_x_still_there, count(out) AS rows_written FROM x;
-- what cbllm.check_expression accepts and why it refuses the rest
CREATE FUNCTION pg_temp.verdict(expr text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  detail text;
BEGIN
  PERFORM cbllm.check_expression(expr, 'prompt_sql');
  RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
  GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
  RETURN SQLSTATE || ' ' || SQLERRM || ': ' || detail;
END $$;
SELECT e AS expression, pg_temp.verdict(e) FROM (VALUES
  ($$body$$), ($$'a;b)' || body$$), ($$upper(body) -- a trailing comment$$),
  ($$(SELECT max(id) FROM x)::text$$), ($$SELECT 1 UNION SELECT 2$$),
  ($$CASE WHEN id > 1 THEN 'many' END$$), ($$row_number() OVER ()$$),
  ($$true); DROP TABLE x; SELECT (1$$), ($$1); (2$$), ($$1), (2$$),
  ($$true) UNION SELECT (false$$), ($$true) INTERSECT SELECT (false$$),
  ($$true) FROM pg_class WHERE (true$$), ($$true) WHERE (true$$),
  ($$1) INTO stolen WHERE (true$$), ($$1) GROUP BY (1$$), ($$true) HAVING (true$$),
  ($$1) WINDOW w AS ($$), ($$1) ORDER BY (1$$), ($$1) LIMIT (1$$), ($$1) OFFSET (1$$),
  ($$true) --$$), ($$true /* open$$), ($$'open$$), ($$$x$ open$$), ($$$$), ($$;$$),
  ($$body || $1$$)) v(e);
-- ordinary expressions still work: subqueries, function calls, casts, string
-- literals holding ';' and ')', a trailing comment
SET client_min_messages = warning;
CALL cbllm.enrich('x', 'id', $$upper(body) || ' ;) ' || id::text || (SELECT count(*) FROM x) -- note$$, 'out',
                  where_sql => $$body <> 'no;)' AND id IN (SELECT id FROM x) -- note$$, max_tokens => 4);
RESET client_min_messages;
SELECT id, out = llm_generate(upper(body) || ' ;) ' || id::text || 2, 4) AS same_as_llm_generate
FROM x ORDER BY id;

-- the caller's expressions see the caller's search_path
CREATE SCHEMA tools;
CREATE FUNCTION tools.shout(t text) RETURNS text LANGUAGE sql AS $$SELECT upper(t) || '!'$$;
UPDATE x SET out = NULL;
SET search_path = tools, public;
SET client_min_messages = warning;
CALL cbllm.enrich('x', 'id', 'shout(body)', 'out', where_sql => $$shout(body) <> '!'$$, max_tokens => 4);
RESET client_min_messages;
RESET search_path;
SELECT id, out = llm_generate(upper(body) || '!', 4) AS same_as_llm_generate FROM x ORDER BY id;
DROP SCHEMA tools CASCADE;
DROP TABLE x;

-- a partitioned table: rows are found again by partition and ctid, so rows
-- at the same ctid in two partitions each get their own prompt's text
CREATE TABLE parted (id int PRIMARY KEY, body text, out text) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (1) TO (100);
CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (200);
INSERT INTO parted VALUES (1, 'left', NULL), (100, 'right', NULL), (2, 'left two', NULL), (101, 'right two', NULL);
SELECT count(DISTINCT ctid) AS distinct_ctids_of_4_rows FROM parted;
SET client_min_messages = warning;
CALL cbllm.enrich('parted', 'id', 'body', 'out', chunk_size => 3, max_tokens => 6);
RESET client_min_messages;
SELECT id, out = llm_generate(body, 6) AS same_as_llm_generate FROM parted ORDER BY id;
DROP TABLE parted;

-- a row whose key is NULL cannot be named in cbllm.enrich_errors: it is left
-- alone, and the rest are done
CREATE TABLE nokey (id int, body text, out text);
INSERT INTO nokey VALUES (1, 'a', NULL), (NULL, 'b', NULL), (3, NULL, NULL);
SET client_min_messages = warning;
CALL cbllm.enrich('nokey', 'id', 'body', 'out', max_tokens => 4);
RESET client_min_messages;
SELECT id, body, out IS NOT NULL AS done FROM nokey ORDER BY id;
SELECT key_value, error FROM cbllm.enrich_errors WHERE tbl = 'nokey'::regclass;
DROP TABLE nokey;

-- every SQL function of cbllm.enrich runs with a fixed search_path; the
-- procedure cannot (it commits), and calls only schema-qualified functions
SELECT p.oid::regprocedure AS function, p.prokind, p.proconfig
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.pronamespace = 'cbllm'::regnamespace AND l.lanname IN ('sql', 'plpgsql')
  AND p.proname LIKE 'enrich%'
ORDER BY p.proname;
TRUNCATE cbllm.enrich_errors;
