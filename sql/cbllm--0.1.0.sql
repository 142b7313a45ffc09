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
                             OUT max_model_len integer)
RETURNS record
AS 'MODULE_PATHNAME', 'cbllm_status'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;
