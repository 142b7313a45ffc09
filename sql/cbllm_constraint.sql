-- Constrained output: json_schema, regex and choices; llm_generate_json;
-- cbllm.enrich into jsonb, integer and boolean columns.  The test model is
-- random, so its free text is noise: only the constraint makes an output
-- valid, and every check below is of validity, never of a text.
-- (runs after cbllm.sql, which created the extension)

-- choices: every sampled output is one of the strings
SELECT bool_and(llm_generate('pick a colour', temperature => 1, seed => s,
                             choices => ARRAY['red', 'green', 'blue', 'dark red']) =
                ANY (ARRAY['red', 'green', 'blue', 'dark red'])) AS choices_always_one_of_them
FROM generate_series(1, 25) s;
-- regex: every output fully matches
SELECT bool_and(llm_generate('a code', temperature => 1, seed => s,
                             regex => '[A-Z]{2}-[0-9]{3}( \(v[1-9]\))?') ~ '^[A-Z]{2}-[0-9]{3}( \(v[1-9]\))?$')
       AS regex_always_full_match
FROM generate_series(1, 25) s;
-- json_schema through llm_generate_json: a jsonb document with the fields the schema asks for
SELECT bool_and(jsonb_typeof(d) = 'object' AND (d->>'n')::int BETWEEN 1 AND 9
                AND d->>'kind' IN ('a', 'b') AND jsonb_typeof(d->'ok') = 'boolean'
                AND (NOT d ? 'tags' OR jsonb_array_length(d->'tags') <= 2))
       AS json_always_valid
FROM (SELECT llm_generate_json('a record', temperature => 1, seed => s, json_schema =>
        '{"type": "object",
          "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                         "kind": {"enum": ["a", "b"]},
                         "ok": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 5},
                                  "maxItems": 2}},
          "required": ["n", "kind", "ok"]}') AS d
      FROM generate_series(1, 25) s) t;
-- without a schema, llm_generate_json still returns some JSON value
SELECT jsonb_typeof(llm_generate_json('anything', temperature => 1, seed => 3)) IS NOT NULL
       AS any_json_value;
-- the array and streaming forms take the same options
SELECT bool_and(x IN ('yes', 'no')) AS array_form_valid
FROM unnest(llm_generate(ARRAY['a', 'b', 'c'], temperature => 1, seed => 5,
                         choices => ARRAY['yes', 'no'])) x;
SELECT string_agg(p, '') IN ('yes', 'no') AS stream_form_valid
FROM llm_generate_stream('a', temperature => 1, seed => 5, choices => ARRAY['yes', 'no']) p;
-- seeded sampling under a constraint is reproducible
SELECT llm_generate('x', temperature => 1, seed => 42, regex => '[a-z]{3,12}') =
       llm_generate('x', temperature => 1, seed => 42, regex => '[a-z]{3,12}') AS seeded_repeats;

-- errors: each names what is wrong
SELECT llm_generate('x', json_schema => '{"type": "array", "uniqueItems": true}');
SELECT llm_generate('x', json_schema => '{"type": "object", "properties": {"a": {"type": "string", "format": "hostname"}}}');
SELECT llm_generate('x', regex => '(?=a)b');
SELECT llm_generate('x', regex => 'a(b');
SELECT llm_generate('x', regex => '[a-z]', choices => ARRAY['a']);
SELECT llm_generate('x', choices => ARRAY['a', NULL]);
SELECT llm_generate('x', choices => ARRAY[]::text[]);
SELECT llm_generate('x', choices => ARRAY['a'], stop => ARRAY['.']);
-- a constraint max_tokens cannot hold: an error with the finish reason, never a cut text
SELECT llm_generate('x', regex => '[a-z]{60}', max_tokens => 3);
SELECT llm_generate(ARRAY['x', 'y'], regex => '[a-z]{60}', max_tokens => 3, on_error => 'null') AS nulls_on_error;

-- cbllm.enrich into typed columns: a jsonb column from a schema, an integer
-- and a boolean column from their types
SET client_min_messages = warning;	-- progress NOTICEs carry timings
CREATE TABLE facts (id int PRIMARY KEY, body text, doc jsonb, n int, flag boolean, short text);
INSERT INTO facts SELECT i, 'fact number ' || i FROM generate_series(1, 12) i;
CALL cbllm.enrich('facts', 'id', $$'Describe: ' || body$$, 'doc', chunk_size => 5, max_tokens => 80,
                  temperature => 1, seed => 7,
                  json_schema => '{"type": "object", "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 100}, "label": {"enum": ["good", "bad"]}}, "required": ["score", "label"]}');
SELECT count(*) AS rows, count(*) FILTER (WHERE (doc->>'score')::int BETWEEN 0 AND 100
                                          AND doc->>'label' IN ('good', 'bad')) AS valid_docs
FROM facts;
CALL cbllm.enrich('facts', 'id', $$'How many: ' || body$$, 'n', chunk_size => 4, max_tokens => 16,
                  temperature => 1, seed => 7);
SELECT count(*) FILTER (WHERE n IS NOT NULL) AS integers_written FROM facts;
CALL cbllm.enrich('facts', 'id', $$'True? ' || body$$, 'flag', max_tokens => 8, temperature => 1, seed => 7);
SELECT count(*) FILTER (WHERE flag IS NOT NULL) AS booleans_written FROM facts;
-- a row whose constraint max_tokens cannot hold goes to cbllm.enrich_errors with the reason
CALL cbllm.enrich('facts', 'id', $$'Spell: ' || body$$, 'short', where_sql => 'id <= 2',
                  max_tokens => 3, regex => '[a-z]{60}');
SELECT key_value, sqlstate, error FROM cbllm.enrich_errors WHERE tbl = 'facts'::regclass ORDER BY key_value;
-- reproducible sampled jobs: the same seed gives every row the same text
-- whatever the chunk size
CREATE TABLE again (id int PRIMARY KEY, body text, doc jsonb);
INSERT INTO again SELECT id, body FROM facts;
CALL cbllm.enrich('again', 'id', $$'Describe: ' || body$$, 'doc', chunk_size => 3, max_tokens => 80,
                  temperature => 1, seed => 7,
                  json_schema => '{"type": "object", "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 100}, "label": {"enum": ["good", "bad"]}}, "required": ["score", "label"]}');
SELECT count(*) FILTER (WHERE a.doc = f.doc) AS same_docs, count(*) AS rows
FROM again a JOIN facts f USING (id);
RESET client_min_messages;
-- a target column of a type that holds no generated value
CREATE TABLE stamps (id int PRIMARY KEY, at timestamptz);
INSERT INTO stamps VALUES (1);
CALL cbllm.enrich('stamps', 'id', $$'x'$$, 'at');
DELETE FROM cbllm.enrich_errors WHERE tbl = 'facts'::regclass;
DROP TABLE facts, again, stamps;
