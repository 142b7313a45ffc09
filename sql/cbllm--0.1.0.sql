-- cbllm 0.1.0: LLM inference inside PostgreSQL.
\echo Use "CREATE EXTENSION cbllm" to load this file. \quit

-- One prompt in, generated text out.  Greedy (temperature 0) by default, so
-- results are reproducible; NULL prompt gives NULL.
CREATE FUNCTION llm_generate(prompt text,
                             max_tokens integer DEFAULT 256,
                             temperature double precision DEFAULT 0,
                             top_p double precision DEFAULT 1,
                             top_k integer DEFAULT 0,
                             seed bigint DEFAULT NULL,
                             stop text[] DEFAULT NULL,
                             priority integer DEFAULT 0)
RETURNS text
AS 'MODULE_PATHNAME', 'llm_generate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Every prompt submitted at once so the engine batches them; results in
-- order.  on_error => 'null' turns a failing element into NULL (with a
-- WARNING) instead of failing the statement.
CREATE FUNCTION llm_generate(prompts text[],
                             max_tokens integer DEFAULT 256,
                             temperature double precision DEFAULT 0,
                             top_p double precision DEFAULT 1,
                             top_k integer DEFAULT 0,
                             seed bigint DEFAULT NULL,
                             stop text[] DEFAULT NULL,
                             priority integer DEFAULT 0,
                             on_error text DEFAULT 'raise')
RETURNS text[]
AS 'MODULE_PATHNAME', 'llm_generate_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- One row per text piece as it is generated (value per call): use it in the
-- target list or through a cursor to see pieces while generation continues.
CREATE FUNCTION llm_generate_stream(prompt text,
                                    max_tokens integer DEFAULT 256,
                                    temperature double precision DEFAULT 0,
                                    top_p double precision DEFAULT 1,
                                    top_k integer DEFAULT 0,
                                    seed bigint DEFAULT NULL,
                                    stop text[] DEFAULT NULL,
                                    priority integer DEFAULT 0)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'llm_generate_stream'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- The model's tokenizer, as it reads a prompt (with BOS).
CREATE FUNCTION llm_tokenize(text) RETURNS integer[]
AS 'MODULE_PATHNAME', 'llm_tokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE FUNCTION llm_detokenize(integer[]) RETURNS text
AS 'MODULE_PATHNAME', 'llm_detokenize'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

CREATE FUNCTION llm_token_count(text) RETURNS integer
AS 'MODULE_PATHNAME', 'llm_token_count'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- The engine's state and counters.
CREATE FUNCTION cbllm_status(OUT state text,
                             OUT reason text,
                             OUT model text,
                             OUT device text,
                             OUT cpu_isa text,
                             OUT kv_blocks_total integer,
                             OUT kv_blocks_used integer,
                             OUT requests_running integer,
                             OUT requests_waiting integer,
                             OUT tokens_prompt bigint,
                             OUT tokens_generated bigint,
                             OUT steps bigint,
                             OUT mean_batch_size double precision,
                             OUT preemptions bigint,
                             OUT worker_pid integer,
                             OUT max_model_len integer,
                             OUT kv_blocks_cached integer,
                             OUT swap_blocks_total integer,
                             OUT swap_blocks_used integer,
                             OUT requests_swapped integer,
                             OUT preemptions_recompute bigint,
                             OUT preemptions_swap bigint,
                             OUT prefix_cache_hit_rate double precision,
                             OUT started_at timestamptz,
                             OUT batch_sequences bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'cbllm_status'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- Asynchronous use: submit now, collect later in the same session.  A
-- submitted request survives the transaction; one never collected is
-- cancelled when the session ends (or, with transaction_scoped, when the
-- transaction ends).
CREATE FUNCTION llm_submit(prompt text,
                           max_tokens integer DEFAULT 256,
                           temperature double precision DEFAULT 0,
                           top_p double precision DEFAULT 1,
                           top_k integer DEFAULT 0,
                           seed bigint DEFAULT NULL,
                           stop text[] DEFAULT NULL,
                           priority integer DEFAULT 0,
                           transaction_scoped boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'llm_submit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The text of a submitted request; with wait => false, NULL while it runs.
CREATE FUNCTION llm_result(id bigint, wait boolean DEFAULT true)
RETURNS text
AS 'MODULE_PATHNAME', 'llm_result'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

-- ---------------------------------------------------------------------------
-- Table enrichment: cbllm.enrich fills target_column from a prompt expression
-- for every row where it is NULL, a chunk of rows at a time: the chunk's
-- prompts are all submitted before any is awaited (so the engine batches
-- them), results are written, and each chunk is committed, so an interrupted
-- job loses at most one chunk and a second CALL continues where it stopped.
-- A row that fails is recorded in cbllm.enrich_errors and skipped.  Rows are
-- locked while their chunk runs (FOR UPDATE SKIP LOCKED), so concurrent CALLs
-- on one table share the work instead of doing rows twice, and rows another
-- transaction holds are left for a later CALL.  When the request slots run
-- out, a chunk is cut short and the rest comes back in the next one.  It runs
-- with the caller's rights; identifiers are quoted, prompt_sql and where_sql
-- are SQL expressions over the table's columns.
CREATE SCHEMA cbllm;

CREATE TABLE cbllm.enrich_errors (
    id          bigserial PRIMARY KEY,
    tbl         regclass NOT NULL,
    key_value   text NOT NULL,
    sqlstate    text NOT NULL,
    error       text NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now()
);
GRANT USAGE ON SCHEMA cbllm TO PUBLIC;
GRANT SELECT, INSERT ON cbllm.enrich_errors TO PUBLIC;
GRANT USAGE ON SEQUENCE cbllm.enrich_errors_id_seq TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('cbllm.enrich_errors', '');

CREATE PROCEDURE cbllm.enrich(tbl regclass,
                              key_column name,
                              prompt_sql text,
                              target_column name,
                              where_sql text DEFAULT NULL,
                              chunk_size integer DEFAULT 256,
                              max_tokens integer DEFAULT 256,
                              temperature double precision DEFAULT 0,
                              top_p double precision DEFAULT 1,
                              top_k integer DEFAULT 0,
                              seed bigint DEFAULT NULL,
                              stop text[] DEFAULT NULL,
                              priority integer DEFAULT 0)
LANGUAGE plpgsql
AS $enrich$
DECLARE
    key_type    text;
    target_type text;
    filter      text := coalesce(nullif(btrim(where_sql), ''), 'true');
    todo        bigint;
    done        bigint := 0;
    failed      bigint := 0;
    skip        text[] := '{}';
    ids         bigint[];
    keys        text[];
    r           record;
    res         text;
    prompt      text;
    t0          timestamptz := clock_timestamp();
    tok0        bigint;
    tok         bigint;
    n_seen      integer;
    req         bigint;
BEGIN
    IF tbl IS NULL OR key_column IS NULL OR prompt_sql IS NULL OR target_column IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: tbl, key_column, prompt_sql and target_column must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF chunk_size IS NULL OR chunk_size < 1 OR chunk_size > 4096 THEN
        RAISE EXCEPTION 'cbllm.enrich: chunk_size must be between 1 and 4096, not %', chunk_size
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Each chunk is submitted at once and committed after it is written.';
    END IF;
    SELECT format_type(atttypid, atttypmod) INTO key_type FROM pg_attribute
     WHERE attrelid = tbl AND attname = key_column AND attnum > 0 AND NOT attisdropped;
    IF key_type IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: column % does not exist in %', quote_ident(key_column), tbl
            USING ERRCODE = 'undefined_column';
    END IF;
    SELECT format_type(atttypid, atttypmod) INTO target_type FROM pg_attribute
     WHERE attrelid = tbl AND attname = target_column AND attnum > 0 AND NOT attisdropped;
    IF target_type IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: column % does not exist in %', quote_ident(target_column), tbl
            USING ERRCODE = 'undefined_column';
    END IF;
    IF target_type NOT IN ('text', 'character varying') AND target_type NOT LIKE 'character varying(%' THEN
        RAISE EXCEPTION 'cbllm.enrich: target column % is of type %, not text', quote_ident(target_column), target_type
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    EXECUTE format('SELECT count(*) FROM %s WHERE %I IS NULL AND (%s)', tbl, target_column, filter)
       INTO todo;
    SELECT tokens_generated INTO tok0 FROM cbllm_status();
    RAISE NOTICE 'cbllm.enrich: % rows of % to do', todo, tbl;
    LOOP
        ids := '{}';
        keys := '{}';
        n_seen := 0;
        FOR r IN EXECUTE format(
            'SELECT %1$I::text AS k FROM %2$s'
            ' WHERE %3$I IS NULL AND (%4$s) AND NOT (%1$I::text = ANY ($1))'
            ' ORDER BY %1$I LIMIT %5$s FOR UPDATE SKIP LOCKED',
            key_column, tbl, target_column, filter, chunk_size) USING skip
        LOOP
            n_seen := n_seen + 1;
            BEGIN
                -- the prompt row by row, so that an expression failing on one row
                -- (a bad cast, a division by zero) only fails that row
                EXECUTE format('SELECT (%s)::text FROM %s WHERE %I = $1::%s',
                               prompt_sql, tbl, key_column, key_type)
                   INTO prompt USING r.k;
                req := llm_submit(prompt, max_tokens, temperature, top_p, top_k, seed, stop,
                                 priority, transaction_scoped => true);
            EXCEPTION
                WHEN insufficient_resources THEN
                    -- every request slot is taken: collect this chunk first, the
                    -- rest of the rows come back in the next chunk
                    IF cardinality(keys) > 0 THEN
                        EXIT;
                    END IF;
                    RAISE;
                WHEN OTHERS THEN
                    -- a prompt that fails to evaluate, or one llm_submit rejects
                    -- (too many bytes, ...): record it
                    INSERT INTO cbllm.enrich_errors (tbl, key_value, sqlstate, error)
                    VALUES (tbl, r.k, SQLSTATE, SQLERRM);
                    skip := skip || r.k;
                    failed := failed + 1;
                    CONTINUE;
            END;
            keys := keys || r.k;
            ids := ids || req;
        END LOOP;
        EXIT WHEN n_seen = 0;
        FOR i IN 1 .. cardinality(keys) LOOP
            BEGIN
                IF ids[i] IS NULL THEN
                    RAISE EXCEPTION 'the prompt is NULL' USING ERRCODE = 'null_value_not_allowed';
                END IF;
                res := llm_result(ids[i]);
                EXECUTE format('UPDATE %s SET %I = $1 WHERE %I = $2::%s', tbl, target_column,
                               key_column, key_type) USING res, keys[i];
                done := done + 1;
            EXCEPTION WHEN OTHERS THEN
                INSERT INTO cbllm.enrich_errors (tbl, key_value, sqlstate, error)
                VALUES (tbl, keys[i], SQLSTATE, SQLERRM);
                skip := skip || keys[i];
                failed := failed + 1;
            END;
        END LOOP;
        SELECT tokens_generated INTO tok FROM cbllm_status();
        RAISE NOTICE 'cbllm.enrich: % of % rows done, % failed, % tokens/s', done, todo, failed,
            round((tok - tok0) / greatest(extract(epoch FROM clock_timestamp() - t0), 0.001)::numeric, 1);
        COMMIT;
    END LOOP;
END
$enrich$;

-- ---------------------------------------------------------------------------
-- Observability.  Reading these copies shared counters under short locks;
-- it never waits for the engine.

-- The engine: state, model, memory, queues, counters, uptime.
CREATE VIEW cbllm.engine AS
SELECT state, reason, model, device, cpu_isa,
       kv_blocks_total, kv_blocks_used, kv_blocks_cached,
       swap_blocks_total, swap_blocks_used,
       requests_running, requests_waiting, requests_swapped,
       steps, mean_batch_size, tokens_prompt AS tokens_in, tokens_generated AS tokens_out,
       preemptions, preemptions_recompute, preemptions_swap,
       prefix_cache_hit_rate, worker_pid, max_model_len,
       now() - started_at AS uptime
FROM cbllm_status();

-- One row per live request.
CREATE FUNCTION cbllm.requests_snapshot(OUT id bigint, OUT pid integer, OUT role oid,
                                        OUT state text, OUT priority integer,
                                        OUT prompt_tokens integer, OUT generated_tokens integer,
                                        OUT submitted_at timestamptz, OUT age_ms double precision,
                                        OUT ttft_ms double precision, OUT queued_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'cbllm_requests'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW cbllm.requests AS
SELECT r.id, r.pid, r.role::regrole AS role, r.state, r.priority, r.prompt_tokens,
       r.generated_tokens, r.submitted_at, r.age_ms, r.queued_ms, r.ttft_ms
FROM cbllm.requests_snapshot() r;

-- Latency percentiles since the last cbllm.reset_stats(): time to first
-- token, inter-token latency, queue time, end-to-end (log-spaced histograms:
-- percentiles are within 12%).
CREATE FUNCTION cbllm.latency_snapshot(OUT metric text, OUT samples bigint, OUT mean_ms double precision,
                                       OUT p50_ms double precision, OUT p90_ms double precision,
                                       OUT p99_ms double precision, OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'cbllm_latency'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW cbllm.stats AS SELECT * FROM cbllm.latency_snapshot();

CREATE FUNCTION cbllm.reset_stats() RETURNS void
AS 'MODULE_PATHNAME', 'cbllm_reset_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE EXECUTE ON FUNCTION cbllm.reset_stats() FROM PUBLIC;
GRANT SELECT ON cbllm.engine, cbllm.requests, cbllm.stats TO PUBLIC;
