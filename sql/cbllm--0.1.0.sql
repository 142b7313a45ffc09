-- cbllm 0.1.0: LLM inference inside PostgreSQL.
\echo Use "CREATE EXTENSION cbllm" to load this file. \quit

-- One prompt in, generated text out; NULL prompt gives NULL.  A NULL
-- temperature, top_p or top_k takes the model's default from its
-- generation_config.json when that asks for sampling ("do_sample": true),
-- else greedy decoding (temperature 0, reproducible), top_p 1 and top_k 0
-- (off).  Pass temperature => 0 for greedy output from any model.
CREATE FUNCTION llm_generate(prompt text,
                             max_tokens integer DEFAULT 256,
                             temperature double precision DEFAULT NULL,
                             top_p double precision DEFAULT NULL,
                             top_k integer DEFAULT NULL,
                             seed bigint DEFAULT NULL,
                             stop text[] DEFAULT NULL,
                             priority integer DEFAULT 0,
                             json_schema jsonb DEFAULT NULL,
                             regex text DEFAULT NULL,
                             choices text[] DEFAULT NULL,
                             min_p double precision DEFAULT NULL,
                             repetition_penalty double precision DEFAULT NULL,
                             frequency_penalty double precision DEFAULT NULL,
                             presence_penalty double precision DEFAULT NULL,
                             logit_bias jsonb DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'llm_generate'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Every prompt submitted at once so the engine batches them; results in
-- order.  on_error => 'null' turns a failing element into NULL (with a
-- WARNING) instead of failing the statement.
CREATE FUNCTION llm_generate(prompts text[],
                             max_tokens integer DEFAULT 256,
                             temperature double precision DEFAULT NULL,
                             top_p double precision DEFAULT NULL,
                             top_k integer DEFAULT NULL,
                             seed bigint DEFAULT NULL,
                             stop text[] DEFAULT NULL,
                             priority integer DEFAULT 0,
                             json_schema jsonb DEFAULT NULL,
                             regex text DEFAULT NULL,
                             choices text[] DEFAULT NULL,
                             min_p double precision DEFAULT NULL,
                             repetition_penalty double precision DEFAULT NULL,
                             frequency_penalty double precision DEFAULT NULL,
                             presence_penalty double precision DEFAULT NULL,
                             logit_bias jsonb DEFAULT NULL,
                             on_error text DEFAULT 'raise')
RETURNS text[]
AS 'MODULE_PATHNAME', 'llm_generate_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- One row per text piece as it is generated (value per call): use it in the
-- target list or through a cursor to see pieces while generation continues.
CREATE FUNCTION llm_generate_stream(prompt text,
                                    max_tokens integer DEFAULT 256,
                                    temperature double precision DEFAULT NULL,
                                    top_p double precision DEFAULT NULL,
                                    top_k integer DEFAULT NULL,
                                    seed bigint DEFAULT NULL,
                                    stop text[] DEFAULT NULL,
                                    priority integer DEFAULT 0,
                                    json_schema jsonb DEFAULT NULL,
                                    regex text DEFAULT NULL,
                                    choices text[] DEFAULT NULL,
                                    min_p double precision DEFAULT NULL,
                                    repetition_penalty double precision DEFAULT NULL,
                                    frequency_penalty double precision DEFAULT NULL,
                                    presence_penalty double precision DEFAULT NULL,
                                    logit_bias jsonb DEFAULT NULL)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'llm_generate_stream'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- Constrained output.  json_schema (a JSON Schema), regex (a regular
-- expression the whole output matches) or choices (the output is exactly one
-- of the strings) constrain what the model may generate: only tokens that
-- keep the text on its way to a valid document are sampled, and the output
-- ends once it is complete.  Give at most one of them.  An output that does
-- not complete its constraint within max_tokens is an error (finish reason
-- length), never an invalid text.  llm_generate_json returns the document
-- as jsonb (any JSON value when json_schema is NULL).
CREATE FUNCTION llm_generate_json(prompt text,
                                  max_tokens integer DEFAULT 256,
                                  temperature double precision DEFAULT NULL,
                                  top_p double precision DEFAULT NULL,
                                  top_k integer DEFAULT NULL,
                                  seed bigint DEFAULT NULL,
                                  stop text[] DEFAULT NULL,
                                  priority integer DEFAULT 0,
                                  json_schema jsonb DEFAULT NULL,
                                  min_p double precision DEFAULT NULL,
                                  repetition_penalty double precision DEFAULT NULL,
                                  frequency_penalty double precision DEFAULT NULL,
                                  presence_penalty double precision DEFAULT NULL,
                                  logit_bias jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'llm_generate_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Chat.  messages is a JSON array of {"role": ..., "content": ...} objects;
-- the model's chat template (tokenizer_config.json's chat_template, or
-- chat_template.jinja) renders it, with template_kwargs as extra template
-- variables (add_generation_prompt, true by default; enable_thinking;
-- reasoning_effort; tools; documents ...), and generation stops at the
-- model's end-of-turn tokens.  The options are llm_generate's.  A reasoning
-- model's answer is its content only: gpt-oss's final channel, or the text
-- after a <think> block (Qwen3, DeepSeek-R1); llm_chat_completions gives the
-- reasoning beside it.  Stop strings apply to the content.
CREATE FUNCTION llm_chat(messages jsonb,
                         max_tokens integer DEFAULT 256,
                         temperature double precision DEFAULT NULL,
                         top_p double precision DEFAULT NULL,
                         top_k integer DEFAULT NULL,
                         seed bigint DEFAULT NULL,
                         stop text[] DEFAULT NULL,
                         priority integer DEFAULT 0,
                         json_schema jsonb DEFAULT NULL,
                         regex text DEFAULT NULL,
                         choices text[] DEFAULT NULL,
                         min_p double precision DEFAULT NULL,
                         repetition_penalty double precision DEFAULT NULL,
                         frequency_penalty double precision DEFAULT NULL,
                         presence_penalty double precision DEFAULT NULL,
                         logit_bias jsonb DEFAULT NULL,
                         template_kwargs jsonb DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'llm_chat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- llm_chat's answer under a JSON schema, as jsonb (see llm_generate_json).
CREATE FUNCTION llm_chat_json(messages jsonb,
                              max_tokens integer DEFAULT 256,
                              temperature double precision DEFAULT NULL,
                              top_p double precision DEFAULT NULL,
                              top_k integer DEFAULT NULL,
                              seed bigint DEFAULT NULL,
                              stop text[] DEFAULT NULL,
                              priority integer DEFAULT 0,
                              json_schema jsonb DEFAULT NULL,
                              min_p double precision DEFAULT NULL,
                              repetition_penalty double precision DEFAULT NULL,
                              frequency_penalty double precision DEFAULT NULL,
                              presence_penalty double precision DEFAULT NULL,
                              logit_bias jsonb DEFAULT NULL,
                              template_kwargs jsonb DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'llm_chat_json'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- n completions of one prompt, a row each with what ended it and its token
-- counts: finish_reason is 'stop' (an end-of-turn token, or a stop string),
-- 'length' (max_tokens or max_model_len: an output cut short of its
-- constraint is such a row, not an error), 'constraint' (the output
-- completed its json_schema, regex or choices and nothing could follow) or
-- 'cancelled'.  The completions share the prompt's KV: the first computes
-- it, the others take its blocks and compute only its last partial block.
-- With a seed, completion i samples from seed + i - 1.  The options are
-- llm_generate's.  logprobs (NULL: none) asks for each generated token's
-- log-probability with that many most likely alternatives (0 to 20): a jsonb
-- array with an object per token, {"token", "id", "logprob",
-- "top_logprobs": [{"token", "id", "logprob"}, ...]}, from the distribution
-- after the penalties, logit_bias and constraint, at temperature 1 (a token
-- the constraint forbids is never an alternative).
CREATE FUNCTION llm_completions(prompt text,
                         max_tokens integer DEFAULT 256,
                         temperature double precision DEFAULT NULL,
                         top_p double precision DEFAULT NULL,
                         top_k integer DEFAULT NULL,
                         seed bigint DEFAULT NULL,
                         stop text[] DEFAULT NULL,
                         priority integer DEFAULT 0,
                         json_schema jsonb DEFAULT NULL,
                         regex text DEFAULT NULL,
                         choices text[] DEFAULT NULL,
                         min_p double precision DEFAULT NULL,
                         repetition_penalty double precision DEFAULT NULL,
                         frequency_penalty double precision DEFAULT NULL,
                         presence_penalty double precision DEFAULT NULL,
                         logit_bias jsonb DEFAULT NULL,
                         n integer DEFAULT 1,
                         logprobs integer DEFAULT NULL)
RETURNS TABLE (completion integer, text text, finish_reason text, prompt_tokens integer,
               completion_tokens integer, logprobs jsonb)
AS 'MODULE_PATHNAME', 'llm_completions'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

-- llm_completions for a conversation (as llm_chat), with each answer's
-- reasoning (gpt-oss's analysis channel, a <think> block's text) in its own
-- column after text, NULL when the model gave none.
CREATE FUNCTION llm_chat_completions(messages jsonb,
                         max_tokens integer DEFAULT 256,
                         temperature double precision DEFAULT NULL,
                         top_p double precision DEFAULT NULL,
                         top_k integer DEFAULT NULL,
                         seed bigint DEFAULT NULL,
                         stop text[] DEFAULT NULL,
                         priority integer DEFAULT 0,
                         json_schema jsonb DEFAULT NULL,
                         regex text DEFAULT NULL,
                         choices text[] DEFAULT NULL,
                         min_p double precision DEFAULT NULL,
                         repetition_penalty double precision DEFAULT NULL,
                         frequency_penalty double precision DEFAULT NULL,
                         presence_penalty double precision DEFAULT NULL,
                         logit_bias jsonb DEFAULT NULL,
                         n integer DEFAULT 1,
                         logprobs integer DEFAULT NULL,
                         template_kwargs jsonb DEFAULT NULL)
RETURNS TABLE (completion integer, text text, reasoning text, finish_reason text,
               prompt_tokens integer, completion_tokens integer, logprobs jsonb)
AS 'MODULE_PATHNAME', 'llm_chat_completions'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 1;

-- Every conversation submitted at once (one jsonb array of messages each),
-- answers in order; on_error as for llm_generate(text[]).  (A name of its
-- own: llm_chat('[...]') with an untyped literal must not be ambiguous.)
CREATE FUNCTION llm_chat_batch(conversations jsonb[],
                         max_tokens integer DEFAULT 256,
                         temperature double precision DEFAULT NULL,
                         top_p double precision DEFAULT NULL,
                         top_k integer DEFAULT NULL,
                         seed bigint DEFAULT NULL,
                         stop text[] DEFAULT NULL,
                         priority integer DEFAULT 0,
                         json_schema jsonb DEFAULT NULL,
                         regex text DEFAULT NULL,
                         choices text[] DEFAULT NULL,
                         min_p double precision DEFAULT NULL,
                         repetition_penalty double precision DEFAULT NULL,
                         frequency_penalty double precision DEFAULT NULL,
                         presence_penalty double precision DEFAULT NULL,
                         logit_bias jsonb DEFAULT NULL,
                         on_error text DEFAULT 'raise',
                         template_kwargs jsonb DEFAULT NULL)
RETURNS text[]
AS 'MODULE_PATHNAME', 'llm_chat_array'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The answer one row per text piece, as llm_generate_stream: its content
-- only, never the reasoning (which llm_chat_completions gives).
CREATE FUNCTION llm_chat_stream(messages jsonb,
                                max_tokens integer DEFAULT 256,
                                temperature double precision DEFAULT NULL,
                                top_p double precision DEFAULT NULL,
                                top_k integer DEFAULT NULL,
                                seed bigint DEFAULT NULL,
                                stop text[] DEFAULT NULL,
                                priority integer DEFAULT 0,
                                json_schema jsonb DEFAULT NULL,
                                regex text DEFAULT NULL,
                                choices text[] DEFAULT NULL,
                                min_p double precision DEFAULT NULL,
                                repetition_penalty double precision DEFAULT NULL,
                                frequency_penalty double precision DEFAULT NULL,
                                presence_penalty double precision DEFAULT NULL,
                                logit_bias jsonb DEFAULT NULL,
                                template_kwargs jsonb DEFAULT NULL)
RETURNS SETOF text
AS 'MODULE_PATHNAME', 'llm_chat_stream'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- The prompt the chat template makes of messages, for inspection.
CREATE FUNCTION llm_apply_chat_template(messages jsonb,
                                        add_generation_prompt boolean DEFAULT true,
                                        template_kwargs jsonb DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'llm_apply_chat_template'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

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
                             OUT batch_sequences bigint,
                             OUT results_parked integer,
                             OUT engine_pid integer,
                             OUT engine_restarts bigint,
                             OUT weight_types text,
                             OUT state_slots_total integer,
                             OUT state_slots_used integer,
                             OUT state_bytes bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'cbllm_status'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- Asynchronous use: submit now, collect later in the same session.  A
-- submitted request survives the transaction; one never collected is
-- cancelled when the session ends (or, with transaction_scoped, when the
-- transaction ends).
CREATE FUNCTION llm_submit(prompt text,
                           max_tokens integer DEFAULT 256,
                           temperature double precision DEFAULT NULL,
                           top_p double precision DEFAULT NULL,
                           top_k integer DEFAULT NULL,
                           seed bigint DEFAULT NULL,
                           stop text[] DEFAULT NULL,
                           priority integer DEFAULT 0,
                           json_schema jsonb DEFAULT NULL,
                           regex text DEFAULT NULL,
                           choices text[] DEFAULT NULL,
                           min_p double precision DEFAULT NULL,
                           repetition_penalty double precision DEFAULT NULL,
                           frequency_penalty double precision DEFAULT NULL,
                           presence_penalty double precision DEFAULT NULL,
                           logit_bias jsonb DEFAULT NULL,
                           transaction_scoped boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'llm_submit'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- llm_submit for a conversation (as llm_chat), collected with llm_result.
CREATE FUNCTION llm_submit_chat(messages jsonb,
                                max_tokens integer DEFAULT 256,
                                temperature double precision DEFAULT NULL,
                                top_p double precision DEFAULT NULL,
                                top_k integer DEFAULT NULL,
                                seed bigint DEFAULT NULL,
                                stop text[] DEFAULT NULL,
                                priority integer DEFAULT 0,
                                json_schema jsonb DEFAULT NULL,
                                regex text DEFAULT NULL,
                                choices text[] DEFAULT NULL,
                                min_p double precision DEFAULT NULL,
                                repetition_penalty double precision DEFAULT NULL,
                                frequency_penalty double precision DEFAULT NULL,
                                presence_penalty double precision DEFAULT NULL,
                                logit_bias jsonb DEFAULT NULL,
                                transaction_scoped boolean DEFAULT false,
                                template_kwargs jsonb DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'llm_submit_chat'
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
-- json_schema, regex or choices constrain each result as for llm_generate;
-- the target column may be text, varchar, jsonb or json, smallint, integer,
-- bigint or boolean, and a typed column without a constraint gets the one
-- its type implies (any JSON value; an integer in the type's range; true or
-- false).  A result that does not complete its constraint within max_tokens
-- fails its row.
-- A row that fails is recorded in cbllm.enrich_errors and skipped.  Rows are
-- locked while their chunk runs (FOR UPDATE SKIP LOCKED), so concurrent CALLs
-- on one table share the work instead of doing rows twice, and rows another
-- transaction holds are left for a later CALL.  When the request slots run
-- out, a chunk is cut short and the rest comes back in the next one.  It runs
-- with the caller's rights; identifiers are quoted, prompt_sql and where_sql
-- are SQL expressions over the table's columns.  For a chat model give
-- messages_sql instead of prompt_sql (pass NULL for prompt_sql): a jsonb
-- expression over the row that makes its messages array, rendered by the
-- model's chat template with template_kwargs.
--
-- search_path.  Nothing cbllm.enrich itself runs depends on the caller's
-- search_path, so a role that can create objects in a schema on that path
-- cannot get them run with the caller's rights; only the caller's own
-- expressions (and the table's triggers) see it.  Every function of the
-- extension written in SQL or PL/pgSQL runs with search_path = pg_catalog,
-- pg_temp (pg_temp last, so that temporary objects shadow nothing).  A
-- procedure that COMMITs cannot carry a SET clause, so cbllm.enrich itself
-- only loops and commits: its body names nothing but the job's fields and
-- cbllm's own functions, schema-qualified, called with arguments of their
-- exact types (no operator, no built-in function).  The work is done by
-- cbllm.enrich_begin, cbllm.enrich_chunk and cbllm.enrich_end, which call
-- the extension's SQL functions as @extschema@.f with every argument given,
-- in order and of its exact type, so that no other function of that name
-- (in a schema where others can create, such as public on PostgreSQL 14 and
-- older) can be a better match.  prompt_sql and where_sql were written by the caller, so the
-- statements that read them run under the caller's search_path, captured at
-- the start and set only around those statements, as are the UPDATEs (whose
-- triggers may rely on it); everything cbllm adds to those statements is
-- qualified: the table's schema, pg_catalog.text, OPERATOR(pg_catalog.=),
-- and rows are found again by tableoid and ctid (their lock holds them until
-- the chunk commits), never through the key type's own operators.  Each
-- expression must be one SQL expression (cbllm.check_expression) and is
-- spliced in parentheses, so it cannot add statements or clauses.
--
-- cbllm.enrich_errors: each role sees and deletes the errors of the jobs it
-- ran (row-level security).  The table belongs to pg_database_owner, so the
-- database's owner (who bypasses the policies as the table's owner) and
-- superusers see them all, and the owner's pg_dump of its database dumps
-- them.  Nobody else may INSERT: rows are written by
-- cbllm.record_enrich_error, which checks that the caller may UPDATE the
-- table the error is about and inserts as the table's owner, with the
-- caller's role in the row.  The table and its id sequence are dumped by
-- pg_dump (configuration tables of the extension), so a restored database
-- goes on numbering its errors after the last one.
CREATE SCHEMA cbllm;

CREATE TABLE cbllm.enrich_errors (
    id          bigserial PRIMARY KEY,
    tbl         regclass NOT NULL,
    key_value   text NOT NULL,
    sqlstate    text NOT NULL,
    error       text NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    role        regrole NOT NULL
);
GRANT USAGE ON SCHEMA cbllm TO PUBLIC;
ALTER TABLE cbllm.enrich_errors OWNER TO pg_database_owner;
ALTER TABLE cbllm.enrich_errors ENABLE ROW LEVEL SECURITY;
-- (to_regrole(quote_ident(...)): a role's name as an identifier, whatever its case)
CREATE POLICY enrich_errors_own_select ON cbllm.enrich_errors FOR SELECT TO PUBLIC
    USING (role OPERATOR(pg_catalog.=)
           (SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(current_user))));
CREATE POLICY enrich_errors_own_delete ON cbllm.enrich_errors FOR DELETE TO PUBLIC
    USING (role OPERATOR(pg_catalog.=)
           (SELECT pg_catalog.to_regrole(pg_catalog.quote_ident(current_user))));
GRANT SELECT, DELETE ON cbllm.enrich_errors TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('cbllm.enrich_errors', '');
SELECT pg_catalog.pg_extension_config_dump('cbllm.enrich_errors_id_seq', '');

-- One row of cbllm.enrich_errors for the calling role (see above).
CREATE FUNCTION cbllm.record_enrich_error(tbl regclass, key_value text, sqlstate text, error text)
RETURNS void
AS 'MODULE_PATHNAME', 'cbllm_record_enrich_error'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- expr, checked to be one SQL expression, in the parentheses to splice it
-- in; what names it in the error.
CREATE FUNCTION cbllm.check_expression(expr text, what text) RETURNS text
AS 'MODULE_PATHNAME', 'cbllm_check_expression'
LANGUAGE C STABLE STRICT PARALLEL UNSAFE;

-- tbl's schema-qualified, quoted name, to splice into a statement.
CREATE FUNCTION cbllm.enrich_table_name(tbl regclass) RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
SELECT format('%I.%I', n.nspname, c.relname)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = tbl
$$;

-- The state of one cbllm.enrich job, passed from chunk to chunk.  It holds
-- no SQL text that is spliced unchecked: each chunk checks the expressions
-- again and names the table from its OID.
CREATE TYPE cbllm.enrich_job AS (
    tbl           regclass,
    key_column    name,
    target_column name,
    prompt_sql    text,             -- NULL when messages_sql is given
    messages_sql  text,             -- the chat form: a jsonb expression of messages
    template_kwargs jsonb,          -- its template variables
    where_sql     text,             -- 'true' when none was given
    chunk_size    integer,
    max_tokens    integer,
    temperature   double precision,
    top_p         double precision,
    top_k         integer,
    seed          bigint,
    stop          text[],
    priority      integer,
    caller_path   text,             -- the caller's search_path, for their expressions
    todo          bigint,           -- rows to do when the job started
    done          bigint,
    failed        bigint,
    skip          text[],           -- keys of the rows that failed in this job
    started_at    timestamptz,
    tokens0       bigint,           -- the engine's tokens_generated at the start
    more          boolean,          -- false once a chunk found no row left
    json_schema   jsonb,            -- the constraint (at most one of the three), given or
    regex         text,             -- inferred from the target column's type
    choices       text[],
    target_cast   text,             -- the type results are cast to: a fixed pg_catalog name
    peers         text[],           -- conninfo of the servers the generation fans out to
    peer_down     boolean[],        -- a peer that failed: the rest of the job runs without it
    peer_rows     bigint[],         -- rows each peer generated
    dblink        name              -- the schema of the dblink extension (peers only)
);

-- Refuses what llm_submit would refuse of these options for every row (the
-- prompt is not looked at): called before a job reads its first row.
CREATE FUNCTION cbllm.enrich_check_options(prompt text, max_tokens integer,
                                           temperature double precision, top_p double precision,
                                           top_k integer, seed bigint, stop text[], priority integer,
                                           json_schema jsonb, regex text, choices text[])
RETURNS void
AS 'MODULE_PATHNAME', 'cbllm_enrich_check_options'
LANGUAGE C VOLATILE PARALLEL SAFE;

-- Checks the arguments and counts the rows to do.
CREATE FUNCTION cbllm.enrich_begin(tbl regclass, key_column name, prompt_sql text,
                                   target_column name, where_sql text, chunk_size integer,
                                   max_tokens integer, temperature double precision,
                                   top_p double precision, top_k integer, seed bigint,
                                   stop text[], priority integer, caller_path text,
                                   messages_sql text, template_kwargs jsonb,
                                   json_schema jsonb, regex text, choices text[],
                                   peers text[])
RETURNS cbllm.enrich_job
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $begin$
DECLARE
    job         cbllm.enrich_job;
    shown       text;
    kind        "char";
    target_type text;
    sql         text;
BEGIN
    -- it writes its results: say so before anything else, and where it can run
    IF pg_catalog.pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cbllm.enrich cannot run on a standby server: it writes its results to the table'
            USING ERRCODE = 'read_only_sql_transaction',
                  HINT = 'Run it on the primary.  On a standby, llm_generate, llm_chat and their array, stream and submit forms serve read-only transactions.';
    END IF;
    IF pg_catalog.current_setting('transaction_read_only') = 'on' THEN
        RAISE EXCEPTION 'cbllm.enrich cannot run in a read-only transaction: it writes its results to the table'
            USING ERRCODE = 'read_only_sql_transaction',
                  HINT = 'Run it where default_transaction_read_only is off.';
    END IF;
    IF tbl IS NULL OR key_column IS NULL OR target_column IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: tbl, key_column and target_column must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF (prompt_sql IS NULL) = (messages_sql IS NULL) THEN
        RAISE EXCEPTION 'cbllm.enrich: give exactly one of prompt_sql and messages_sql'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'prompt_sql makes a text prompt of each row; messages_sql makes a jsonb array of chat messages.';
    END IF;
    IF template_kwargs IS NOT NULL AND messages_sql IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: template_kwargs needs messages_sql'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF chunk_size IS NULL OR chunk_size < 1 OR chunk_size > 4096 THEN
        RAISE EXCEPTION 'cbllm.enrich: chunk_size must be between 1 and 4096, not %', chunk_size
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Each chunk is submitted at once and committed after it is written.';
    END IF;
    -- the table's name as the caller writes it, for messages
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
    shown := tbl::pg_catalog.text;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    SELECT relkind INTO kind FROM pg_class WHERE oid = tbl;
    IF kind IS NULL OR kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'cbllm.enrich: % is not a table', shown
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'Only the rows of a table or a partitioned table can be enriched.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_attribute
                    WHERE attrelid = tbl AND attname = key_column AND attnum > 0 AND NOT attisdropped) THEN
        RAISE EXCEPTION 'cbllm.enrich: column % does not exist in %', quote_ident(key_column), shown
            USING ERRCODE = 'undefined_column';
    END IF;
    SELECT format_type(atttypid, atttypmod) INTO target_type FROM pg_attribute
     WHERE attrelid = tbl AND attname = target_column AND attnum > 0 AND NOT attisdropped;
    IF target_type IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: column % does not exist in %', quote_ident(target_column), shown
            USING ERRCODE = 'undefined_column';
    END IF;
    -- the type a result is cast to, and the constraint a typed column implies
    -- when none is given: a jsonb or json column any JSON value, an integer
    -- column an integer in its range, a boolean column true or false
    job.json_schema := json_schema;
    job.regex := regex;
    job.choices := choices;
    IF target_type IN ('text', 'character varying') OR target_type LIKE 'character varying(%' THEN
        job.target_cast := 'pg_catalog.text';
    ELSIF target_type IN ('jsonb', 'json') THEN
        job.target_cast := 'pg_catalog.' || target_type;
        IF regex IS NULL AND choices IS NULL THEN
            job.json_schema := coalesce(json_schema, '{}');
        END IF;
    ELSIF target_type IN ('integer', 'bigint', 'smallint') THEN
        job.target_cast := CASE target_type WHEN 'integer' THEN 'pg_catalog.int4'
                                            WHEN 'bigint' THEN 'pg_catalog.int8'
                                            ELSE 'pg_catalog.int2' END;
        IF json_schema IS NULL AND regex IS NULL AND choices IS NULL THEN
            job.json_schema := pg_catalog.jsonb_build_object('type', 'integer',
                'minimum', CASE target_type WHEN 'smallint' THEN -32768 WHEN 'integer' THEN -2147483648
                                            ELSE -9223372036854775808 END,
                'maximum', CASE target_type WHEN 'smallint' THEN 32767 WHEN 'integer' THEN 2147483647
                                            ELSE 9223372036854775807 END);
        END IF;
    ELSIF target_type = 'boolean' THEN
        job.target_cast := 'pg_catalog.bool';
        IF json_schema IS NULL AND regex IS NULL AND choices IS NULL THEN
            job.json_schema := '{"type": "boolean"}';
        END IF;
    ELSE
        RAISE EXCEPTION 'cbllm.enrich: target column % is of type %', quote_ident(target_column), target_type
            USING ERRCODE = 'datatype_mismatch',
                  HINT = 'The target column must be text, varchar, jsonb, json, smallint, integer, bigint or boolean.';
    END IF;
    -- every generation option is checked here, as llm_submit would check it
    -- for each row, so that a bad one fails the CALL rather than every row
    IF template_kwargs IS NOT NULL AND jsonb_typeof(template_kwargs) <> 'object' THEN
        RAISE EXCEPTION 'template_kwargs must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM cbllm.enrich_check_options(NULL::text, max_tokens, temperature, top_p, top_k, seed, stop,
                                       coalesce(priority, 0), job.json_schema, job.regex, job.choices);
    job.tbl := tbl;
    job.key_column := key_column;
    job.target_column := target_column;
    job.prompt_sql := prompt_sql;
    job.messages_sql := messages_sql;
    job.template_kwargs := template_kwargs;
    job.where_sql := coalesce(nullif(btrim(where_sql), ''), 'true');
    IF prompt_sql IS NOT NULL THEN
        PERFORM cbllm.check_expression(job.prompt_sql, 'prompt_sql');
    ELSE
        PERFORM cbllm.check_expression(job.messages_sql, 'messages_sql');
    END IF;
    job.chunk_size := chunk_size;
    job.max_tokens := max_tokens;
    job.temperature := temperature;
    job.top_p := top_p;
    job.top_k := top_k;
    job.seed := seed;
    job.stop := stop;
    job.priority := priority;
    job.caller_path := caller_path;
    IF cardinality(peers) > 0 THEN
        IF array_position(peers, NULL) IS NOT NULL THEN
            RAISE EXCEPTION 'cbllm.enrich: peers must not hold NULL'
                USING ERRCODE = 'null_value_not_allowed';
        END IF;
        SELECT n.nspname INTO job.dblink
        FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
        WHERE e.extname = 'dblink';
        IF job.dblink IS NULL THEN
            RAISE EXCEPTION 'cbllm.enrich: peers need the dblink extension in this database'
                USING ERRCODE = 'undefined_function',
                      HINT = 'CREATE EXTENSION dblink;  (contrib, shipped with PostgreSQL)';
        END IF;
        job.peers := peers;
        job.peer_down := array_fill(false, ARRAY[cardinality(peers)]);
        job.peer_rows := array_fill(0::bigint, ARRAY[cardinality(peers)]);
    END IF;
    job.done := 0;
    job.failed := 0;
    job.skip := '{}';
    job.started_at := clock_timestamp();
    job.more := true;
    sql := format('SELECT pg_catalog.count(*) FROM %s WHERE %I IS NULL AND %I IS NOT NULL AND %s',
                  cbllm.enrich_table_name(tbl), target_column, key_column,
                  cbllm.check_expression(job.where_sql, 'where_sql'));
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
    EXECUTE sql INTO job.todo;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    -- (the view, bound to cbllm_status() when it was made: a call of a function without
    -- arguments cannot name its argument types, so a look-alike with a defaulted argument
    -- would make it ambiguous)
    SELECT tokens_out INTO job.tokens0 FROM cbllm.engine;
    RAISE NOTICE 'cbllm.enrich: % rows of % to do', job.todo, shown;
    RETURN job;
END
$begin$;

-- One row's request on this server's engine: its prompt (or, for the chat
-- form, its messages as jsonb text) with the job's options.
CREATE FUNCTION cbllm.enrich_submit(job cbllm.enrich_job, input text) RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $submit$
BEGIN
    -- every argument, in order, of its exact type (see search_path above)
    IF job.messages_sql IS NULL THEN
        RETURN @extschema@.llm_submit(input, job.max_tokens, job.temperature, job.top_p,
                                      job.top_k, job.seed, job.stop, job.priority,
                                      job.json_schema, job.regex, job.choices,
                                      NULL::float8, NULL::float8, NULL::float8, NULL::float8,
                                      NULL::jsonb, true);
    END IF;
    RETURN @extschema@.llm_submit_chat(input::jsonb, job.max_tokens, job.temperature,
                                       job.top_p, job.top_k, job.seed, job.stop,
                                       job.priority, job.json_schema, job.regex, job.choices,
                                       NULL::float8, NULL::float8, NULL::float8, NULL::float8,
                                       NULL::jsonb, true, job.template_kwargs);
END
$submit$;

-- The statement a peer runs for a batch of inputs: the array form of the
-- job's call, each failing element NULL (it is then redone here, where its
-- error is recorded).
CREATE FUNCTION cbllm.enrich_peer_sql(job cbllm.enrich_job, inputs text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $peer_sql$
SELECT format('SELECT %s.%s(%L::pg_catalog.%s[], %L::pg_catalog.int4, %L::pg_catalog.float8,'
              ' %L::pg_catalog.float8, %L::pg_catalog.int4, %L::pg_catalog.int8, %L::pg_catalog.text[],'
              ' %L::pg_catalog.int4, %L::pg_catalog.jsonb, %L::pg_catalog.text, %L::pg_catalog.text[],'
              ' NULL::pg_catalog.float8, NULL::pg_catalog.float8, NULL::pg_catalog.float8,'
              ' NULL::pg_catalog.float8, NULL::pg_catalog.jsonb, ''null''::pg_catalog.text%s)',
              '@extschema@',                   -- substituted already quoted
              CASE WHEN job.messages_sql IS NULL THEN 'llm_generate' ELSE 'llm_chat_batch' END,
              inputs, CASE WHEN job.messages_sql IS NULL THEN 'text' ELSE 'jsonb' END,
              job.max_tokens, job.temperature, job.top_p, job.top_k, job.seed, job.stop,
              job.priority, job.json_schema, job.regex, job.choices,
              CASE WHEN job.messages_sql IS NULL THEN ''
                   ELSE format(', %L::pg_catalog.jsonb', job.template_kwargs) END)
$peer_sql$;

-- The dblink connection of peer p, opened on first use (it lasts the job).
CREATE FUNCTION cbllm.enrich_peer_conn(job cbllm.enrich_job, p integer) RETURNS text
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $conn$
DECLARE
    name  text := 'cbllm_enrich_peer_' || p;
    open  text[];
BEGIN
    EXECUTE format('SELECT %I.dblink_get_connections()', job.dblink) INTO open;
    IF NOT coalesce(name = ANY (open), false) THEN
        EXECUTE format('SELECT %I.dblink_connect($1, $2)', job.dblink) USING name, job.peers[p];
    END IF;
    RETURN name;
END
$conn$;

-- Close the job's peer connections (those still open).
CREATE FUNCTION cbllm.enrich_peers_close(job cbllm.enrich_job) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $close$
DECLARE
    open  text[];
BEGIN
    IF job.dblink IS NULL THEN
        RETURN;
    END IF;
    EXECUTE format('SELECT %I.dblink_get_connections()', job.dblink) INTO open;
    FOR p IN 1 .. coalesce(cardinality(job.peers), 0) LOOP
        IF ('cbllm_enrich_peer_' || p) = ANY (coalesce(open, '{}')) THEN
            EXECUTE format('SELECT %I.dblink_disconnect($1)', job.dblink) USING 'cbllm_enrich_peer_' || p;
        END IF;
    END LOOP;
END
$close$;

-- Peer p failed: it takes no more of the job's rows, and its connection is dropped.
CREATE FUNCTION cbllm.enrich_peer_failed(job cbllm.enrich_job, p integer, why text)
RETURNS cbllm.enrich_job
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $failed$
BEGIN
    job.peer_down[p] := true;
    BEGIN
        EXECUTE format('SELECT %I.dblink_disconnect($1)', job.dblink) USING 'cbllm_enrich_peer_' || p;
    EXCEPTION WHEN OTHERS THEN
        NULL;                           -- it was not open, or is broken: gone either way
    END;
    RAISE NOTICE 'cbllm.enrich: peer % failed (%); its rows are generated here', p, why;
    RETURN job;
END
$failed$;

-- One chunk: lock up to chunk_size rows still to do, submit their prompts,
-- write the results, record the failures; more is false when no row was left.
-- With peers, the chunk's rows are dealt round-robin between this server and
-- the peers still up: a peer's share goes to it in one asynchronous dblink
-- call of the array form while this server's requests run; whatever a peer
-- does not answer (it failed, disconnected, or one element failed there) is
-- generated here.  Only this transaction writes, so a row is updated once
-- whatever a peer does.
CREATE FUNCTION cbllm.enrich_chunk(job cbllm.enrich_job) RETURNS cbllm.enrich_job
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $chunk$
DECLARE
    keys        text[];             -- the chunk's rows: key as text,
    rels        oid[];              -- the table (or partition) holding the row
    tids        tid[];              -- and the row's ctid
    sent        integer[] := '{}';  -- the indexes of the rows submitted
    ids         bigint[] := '{}';   -- and their request ids here (NULL for a NULL prompt or a peer's row)
    lane        integer[] := '{}';  -- and where each is generated: 0 here, p peer p
    inputs      text[] := '{}';     -- and its prompt (messages as jsonb text)
    results     text[] := '{}';     -- and a peer's answer
    asked       integer[];          -- per peer: 1 when its batch was sent
    live        integer[] := '{0}'; -- the lanes of this chunk: here, then the peers up
    batch       text[];
    got         text[];
    conn        text;
    prompt      text;
    messages    jsonb;
    res         text;
    req         bigint;
    n           bigint;
    k           integer;
    m           integer;
    tok         bigint;
    n_peers     integer := coalesce(cardinality(job.peers), 0);
    rel         text := cbllm.enrich_table_name(job.tbl);
    select_sql  text;
    prompt_sql  text;
    update_sql  text;
BEGIN
    IF rel IS NULL THEN
        RAISE EXCEPTION 'cbllm.enrich: the table % no longer exists', job.tbl::oid
            USING ERRCODE = 'undefined_table';
    END IF;
    select_sql := format(
        'SELECT pg_catalog.array_agg(s.k), pg_catalog.array_agg(s.r), pg_catalog.array_agg(s.t)'
        ' FROM (SELECT %2$s.%1$I::pg_catalog.text AS k, tableoid AS r, ctid AS t FROM %2$s'
        ' WHERE %3$I IS NULL AND %1$I IS NOT NULL AND %4$s'
        ' AND NOT (%1$I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1))'
        ' ORDER BY %2$s.%1$I LIMIT %5$s FOR UPDATE SKIP LOCKED) s',
        job.key_column, rel, job.target_column,
        cbllm.check_expression(job.where_sql, 'where_sql'), job.chunk_size);
    IF job.messages_sql IS NULL THEN
        prompt_sql := format(
            'SELECT %s::pg_catalog.text FROM %s'
            ' WHERE tableoid OPERATOR(pg_catalog.=) $1 AND ctid OPERATOR(pg_catalog.=) $2',
            cbllm.check_expression(job.prompt_sql, 'prompt_sql'), rel);
    ELSE
        prompt_sql := format(
            'SELECT %s::pg_catalog.jsonb FROM %s'
            ' WHERE tableoid OPERATOR(pg_catalog.=) $1 AND ctid OPERATOR(pg_catalog.=) $2',
            cbllm.check_expression(job.messages_sql, 'messages_sql'), rel);
    END IF;
    IF job.target_cast NOT IN ('pg_catalog.text', 'pg_catalog.jsonb', 'pg_catalog.json',
                               'pg_catalog.int4', 'pg_catalog.int8', 'pg_catalog.int2',
                               'pg_catalog.bool') THEN
        RAISE EXCEPTION 'cbllm.enrich: bad target type %', job.target_cast
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    update_sql := format(
        'UPDATE %s SET %I = $1::%s'
        ' WHERE tableoid OPERATOR(pg_catalog.=) $2 AND ctid OPERATOR(pg_catalog.=) $3',
        rel, job.target_column, job.target_cast);

    PERFORM pg_catalog.set_config('search_path', job.caller_path, true);
    EXECUTE select_sql INTO keys, rels, tids USING job.skip;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    IF keys IS NULL THEN
        job.more := false;
        RETURN job;
    END IF;
    FOR p IN 1 .. n_peers LOOP
        IF NOT job.peer_down[p] THEN
            live := live || p;
        END IF;
    END LOOP;

    FOR i IN 1 .. cardinality(keys) LOOP
        BEGIN
            -- the prompt row by row, so that an expression failing on one row
            -- (a bad cast, a division by zero) only fails that row
            PERFORM pg_catalog.set_config('search_path', job.caller_path, true);
            IF job.messages_sql IS NULL THEN
                EXECUTE prompt_sql INTO prompt USING rels[i], tids[i];
            ELSE
                EXECUTE prompt_sql INTO messages USING rels[i], tids[i];
                prompt := messages::text;
            END IF;
            GET DIAGNOSTICS n = ROW_COUNT;
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
            IF n <> 1 THEN
                RAISE EXCEPTION 'the row changed while its chunk ran'
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            -- round-robin over the lanes; a NULL prompt fails here, as without peers
            k := CASE WHEN prompt IS NULL THEN 0 ELSE live[1 + (i - 1) % cardinality(live)] END;
            req := CASE WHEN k = 0 THEN cbllm.enrich_submit(job, prompt) END;
        EXCEPTION
            WHEN insufficient_resources THEN
                -- every request slot is taken: collect this chunk first, the
                -- rest of the rows come back in the next chunk
                IF cardinality(sent) > 0 THEN
                    EXIT;
                END IF;
                RAISE;
            WHEN OTHERS THEN
                -- a prompt that fails to evaluate, or one llm_submit rejects
                -- (too many bytes, ...): record it
                PERFORM cbllm.record_enrich_error(job.tbl, keys[i], SQLSTATE, SQLERRM);
                job.skip := job.skip || keys[i];
                job.failed := job.failed + 1;
                CONTINUE;
        END;
        sent := sent || i;
        ids := ids || req;
        lane := lane || k;
        inputs := inputs || prompt;
        results := results || NULL::text;
    END LOOP;

    -- each peer's share in one asynchronous call
    asked := array_fill(0, ARRAY[greatest(n_peers, 1)]);
    FOR p IN 1 .. n_peers LOOP
        CONTINUE WHEN job.peer_down[p] OR NOT (p = ANY (lane));
        SELECT pg_catalog.array_agg(inputs[j] ORDER BY j) INTO batch
        FROM pg_catalog.generate_subscripts(lane, 1) j WHERE lane[j] = p;
        BEGIN
            conn := cbllm.enrich_peer_conn(job, p);
            EXECUTE format('SELECT %I.dblink_send_query($1, $2)', job.dblink)
                INTO m USING conn, cbllm.enrich_peer_sql(job, batch);
            IF m <> 1 THEN
                RAISE EXCEPTION 'the query could not be sent';
            END IF;
            asked[p] := 1;
        EXCEPTION WHEN OTHERS THEN
            job := cbllm.enrich_peer_failed(job, p, SQLERRM);
        END;
    END LOOP;

    -- the peers' answers; what one does not answer is generated here
    FOR p IN 1 .. n_peers LOOP
        CONTINUE WHEN NOT (p = ANY (lane));
        got := NULL;
        IF asked[p] = 1 THEN
            SELECT pg_catalog.count(*) INTO n FROM pg_catalog.unnest(lane) l WHERE l = p;
            BEGIN
                conn := 'cbllm_enrich_peer_' || p;
                EXECUTE format('SELECT r FROM %I.dblink_get_result($1) AS t(r pg_catalog.text[])',
                               job.dblink) INTO got USING conn;
                -- the end of the query's results, so that the connection takes the next one
                EXECUTE format('SELECT pg_catalog.count(*) FROM %I.dblink_get_result($1) AS t(r pg_catalog.text[])',
                               job.dblink) INTO m USING conn;
                IF got IS NULL OR cardinality(got) <> n THEN
                    RAISE EXCEPTION 'it answered % results for % prompts', coalesce(cardinality(got), 0), n;
                END IF;
            EXCEPTION WHEN OTHERS THEN
                job := cbllm.enrich_peer_failed(job, p, SQLERRM);
                got := NULL;
            END;
        END IF;
        m := 0;
        FOR j IN 1 .. cardinality(lane) LOOP
            CONTINUE WHEN lane[j] <> p;
            m := m + 1;
            IF got IS NOT NULL AND got[m] IS NOT NULL THEN
                results[j] := got[m];
                job.peer_rows[p] := job.peer_rows[p] + 1;
                CONTINUE;
            END IF;
            lane[j] := 0;
            BEGIN
                ids[j] := cbllm.enrich_submit(job, inputs[j]);
            EXCEPTION
                WHEN insufficient_resources THEN
                    lane[j] := -1;      -- no slot now: the row stays to do, for the next chunk
                WHEN OTHERS THEN
                    lane[j] := -1;
                    PERFORM cbllm.record_enrich_error(job.tbl, keys[sent[j]], SQLSTATE, SQLERRM);
                    job.skip := job.skip || keys[sent[j]];
                    job.failed := job.failed + 1;
            END;
        END LOOP;
    END LOOP;

    FOR j IN 1 .. cardinality(sent) LOOP
        CONTINUE WHEN lane[j] < 0;
        k := sent[j];
        BEGIN
            IF lane[j] > 0 THEN
                res := results[j];
            ELSE
                IF ids[j] IS NULL THEN
                    RAISE EXCEPTION 'the prompt is NULL' USING ERRCODE = 'null_value_not_allowed';
                END IF;
                res := @extschema@.llm_result(ids[j], true);
            END IF;
            PERFORM pg_catalog.set_config('search_path', job.caller_path, true);
            EXECUTE update_sql USING res, rels[k], tids[k];
            GET DIAGNOSTICS n = ROW_COUNT;
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
            IF n <> 1 THEN
                RAISE EXCEPTION 'the row changed while its chunk ran'
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            job.done := job.done + 1;
        EXCEPTION WHEN OTHERS THEN
            PERFORM cbllm.record_enrich_error(job.tbl, keys[k], SQLSTATE, SQLERRM);
            job.skip := job.skip || keys[k];
            job.failed := job.failed + 1;
        END;
    END LOOP;
    SELECT tokens_out INTO tok FROM cbllm.engine;
    RAISE NOTICE 'cbllm.enrich: % of % rows done, % failed, % tokens/s', job.done, job.todo, job.failed,
        round((tok - job.tokens0) / greatest(extract(epoch FROM clock_timestamp() - job.started_at), 0.001)::numeric, 1);
    RETURN job;
END
$chunk$;

-- The end of a job: its peers' connections closed, what they did reported.
CREATE FUNCTION cbllm.enrich_end(job cbllm.enrich_job) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $end$
BEGIN
    PERFORM cbllm.enrich_peers_close(job);
    IF cardinality(job.peers) > 0 THEN
        RAISE NOTICE 'cbllm.enrich: rows generated by each peer: %', job.peer_rows;
    END IF;
END
$end$;

-- The job: its arguments are checked and its rows counted by
-- cbllm.enrich_begin, each chunk is done by cbllm.enrich_chunk and committed
-- here, and cbllm.enrich_end ends it.  This body runs with the caller's
-- search_path (a procedure that commits cannot set its own), so it names
-- nothing that path could resolve: only the job's fields, the procedure's
-- arguments, cbllm's functions and pg_catalog.current_setting, all
-- schema-qualified and called with arguments of their exact types; no
-- operator and no other function (see above, and the test that plants
-- look-alikes of everything).
CREATE PROCEDURE cbllm.enrich(tbl regclass,
                              key_column name,
                              prompt_sql text,
                              target_column name,
                              where_sql text DEFAULT NULL,
                              chunk_size integer DEFAULT 256,
                              max_tokens integer DEFAULT 256,
                              temperature double precision DEFAULT NULL,
                              top_p double precision DEFAULT NULL,
                              top_k integer DEFAULT NULL,
                              seed bigint DEFAULT NULL,
                              stop text[] DEFAULT NULL,
                              priority integer DEFAULT 0,
                              messages_sql text DEFAULT NULL,
                              template_kwargs jsonb DEFAULT NULL,
                              json_schema jsonb DEFAULT NULL,
                              regex text DEFAULT NULL,
                              choices text[] DEFAULT NULL,
                              peers text[] DEFAULT NULL)
LANGUAGE plpgsql
AS $enrich$
DECLARE
    job cbllm.enrich_job;
BEGIN
    job := cbllm.enrich_begin(tbl, key_column, prompt_sql, target_column, where_sql, chunk_size,
                              max_tokens, temperature, top_p, top_k, seed, stop, priority,
                              pg_catalog.current_setting('search_path'), messages_sql,
                              template_kwargs, json_schema, regex, choices, peers);
    LOOP
        job := cbllm.enrich_chunk(job);
        EXIT WHEN NOT job.more;
        COMMIT;
    END LOOP;
    PERFORM cbllm.enrich_end(job);
END
$enrich$;

-- ---------------------------------------------------------------------------
-- Observability.  Reading these copies shared counters under short locks;
-- it never waits for the engine.

-- The engine: state, model, memory, queues, counters, uptime.
CREATE VIEW cbllm.engine AS
SELECT state, reason, model, device, cpu_isa, weight_types,
       kv_blocks_total, kv_blocks_used, kv_blocks_cached,
       swap_blocks_total, swap_blocks_used,
       requests_running, requests_waiting, requests_swapped,
       steps, mean_batch_size, tokens_prompt AS tokens_in, tokens_generated AS tokens_out,
       preemptions, preemptions_recompute, preemptions_swap,
       prefix_cache_hit_rate, worker_pid, engine_pid, engine_restarts, max_model_len, results_parked,
       state_slots_total, state_slots_used, state_bytes,
       now() - started_at AS uptime
FROM cbllm_status();

-- Each engine process (cbllm.engines sets how many): its state, process,
-- the requests it has, its KV cache and counters.  cbllm.engine is their sum.
CREATE FUNCTION cbllm.engines_snapshot(OUT engine integer, OUT state text, OUT reason text,
                                       OUT device text, OUT pid integer, OUT restarts bigint,
                                       OUT requests integer, OUT kv_blocks_total integer,
                                       OUT kv_blocks_used integer, OUT requests_running integer,
                                       OUT requests_waiting integer, OUT steps bigint,
                                       OUT tokens_in bigint, OUT tokens_out bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'cbllm_engines_status'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW cbllm.engines AS SELECT * FROM cbllm.engines_snapshot();

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
GRANT SELECT ON cbllm.engine, cbllm.engines, cbllm.requests, cbllm.stats TO PUBLIC;
