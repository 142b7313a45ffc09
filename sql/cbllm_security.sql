-- what one role can see of, and do to, another role's work
-- (runs after cbllm.sql, which created the extension and hold_slots)
CREATE ROLE regress_cbllm_alice LOGIN;
CREATE ROLE regress_cbllm_bob LOGIN;
CREATE ROLE regress_cbllm_watcher LOGIN IN ROLE pg_read_all_stats;

-- the prefix cache is scoped per role by default: a role reuses the KV of its
-- own earlier prompts, never another role's (it could learn from a hit that
-- someone sent the prompt).  Prompt tokens computed tell hits from misses.
SELECT name, setting, context FROM pg_settings WHERE name = 'cbllm.prefix_cache_scope';
CREATE TEMP TABLE probe (n serial, who text, computed bigint);
CREATE FUNCTION pg_temp.probe(k int) RETURNS bigint LANGUAGE sql AS
  $$ SELECT computed FROM probe ORDER BY n LIMIT 1 OFFSET k $$;
CREATE FUNCTION pg_temp.computed() RETURNS bigint LANGUAGE sql AS
  $$ SELECT tokens_prompt FROM cbllm_status() $$;
CREATE FUNCTION pg_temp.run_as(r text, p text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  t0 bigint := pg_temp.computed();
BEGIN
  EXECUTE format('SET ROLE %I', r);
  PERFORM llm_generate(p, 1);
  RESET ROLE;
  INSERT INTO probe (who, computed) VALUES (r, pg_temp.computed() - t0);
END $$;
\set secret 'The secret plan of the quarter is to merge with the largest competitor and keep it quiet until the announcement on Friday.'
SELECT pg_temp.run_as('regress_cbllm_alice', :'secret');
SELECT pg_temp.run_as('regress_cbllm_bob', :'secret');
SELECT pg_temp.run_as('regress_cbllm_alice', :'secret');
SELECT pg_temp.probe(0) > 32 AS prompt_spans_blocks,
       pg_temp.probe(1) = pg_temp.probe(0) AS other_role_gets_no_hit,
       pg_temp.probe(2) < pg_temp.probe(0) AS same_role_hits;
-- a trusted deployment can share one cache across the cluster
SET cbllm.prefix_cache_scope = 'cluster';
DELETE FROM probe;
SELECT pg_temp.run_as('regress_cbllm_alice', :'secret' || ' Shared.');
SELECT pg_temp.run_as('regress_cbllm_bob', :'secret' || ' Shared.');
SELECT pg_temp.probe(1) < pg_temp.probe(0) AS cluster_scope_shares;
RESET cbllm.prefix_cache_scope;
-- an unprivileged role cannot widen the scope
SET ROLE regress_cbllm_bob;
SET cbllm.prefix_cache_scope = 'cluster';
RESET ROLE;

-- cache counters and the model path only for superusers and pg_read_all_stats
SET ROLE regress_cbllm_bob;
SELECT state, model IS NULL AS model_hidden, kv_blocks_cached IS NULL AS cached_hidden,
       prefix_cache_hit_rate IS NULL AS hit_rate_hidden, tokens_prompt IS NULL AS prompt_tokens_hidden,
       tokens_generated IS NOT NULL AS throughput_shown
FROM cbllm_status();
RESET ROLE;
SET ROLE regress_cbllm_watcher;
SELECT model IS NOT NULL AS model_shown, kv_blocks_cached IS NOT NULL AS cached_shown
FROM cbllm_status();
RESET ROLE;

-- another role's requests: listed, without their details
SET ROLE regress_cbllm_alice;
BEGIN;
DECLARE c CURSOR FOR SELECT llm_generate_stream('alice is streaming', 300);
MOVE 1 IN c;
SELECT count(*) AS mine, bool_and(prompt_tokens IS NOT NULL) AS my_details_shown
FROM cbllm.requests WHERE role = current_user::regrole;
SELECT id AS alice_request FROM cbllm.requests WHERE role = current_user::regrole \gset
SET LOCAL ROLE regress_cbllm_bob;
SELECT count(*) AS others, bool_and(prompt_tokens IS NULL AND generated_tokens IS NULL
                                    AND ttft_ms IS NULL AND queued_ms IS NULL) AS details_hidden
FROM cbllm.requests WHERE id = :alice_request;
COMMIT;
RESET ROLE;

-- quotas hold for an unprivileged role too, which cannot raise them
SET ROLE regress_cbllm_bob;
SET cbllm.max_requests_per_session = 1000;
SET cbllm.slot_wait_timeout = '100ms';
SELECT hold_slots(17, 'bob');
RESET cbllm.slot_wait_timeout;
RESET ROLE;

DROP ROLE regress_cbllm_alice, regress_cbllm_bob, regress_cbllm_watcher;
