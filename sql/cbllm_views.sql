-- observability views: cbllm.engine, cbllm.requests, cbllm.stats
SELECT cbllm.reset_stats();
SELECT metric, samples, mean_ms IS NULL AS no_mean_yet, since IS NOT NULL AS has_reset_time
FROM cbllm.stats ORDER BY metric;
SELECT llm_generate('counting latencies', 20) IS NOT NULL AS generated;
SELECT metric, samples > 0 AS has_samples, p50_ms > 0 AND p50_ms <= p90_ms AND p90_ms <= p99_ms AS ordered
FROM cbllm.stats ORDER BY metric;
SELECT metric, samples FROM cbllm.stats WHERE metric IN ('ttft', 'e2e', 'queue') ORDER BY metric;

-- the engine view
SELECT state, device, kv_blocks_total > 0 AS has_kv, kv_blocks_used, requests_running,
       requests_waiting, requests_swapped, steps > 0 AS has_steps,
       tokens_out >= 20 AS counted_tokens, uptime > interval '0' AS has_uptime,
       prefix_cache_hit_rate BETWEEN 0 AND 1 AS hit_rate_is_a_rate
FROM cbllm.engine;

-- a live request shows up in cbllm.requests while a cursor streams it, and leaves with it
BEGIN;
DECLARE c CURSOR FOR SELECT llm_generate_stream('watch me', 400);
MOVE 1 IN c;
SELECT count(*) AS live, bool_and(pid = pg_backend_pid()) AS mine,
       bool_and(role = current_user::regrole) AS my_role,
       bool_and(state IN ('prefill', 'decode', 'done')) AS sensible_state,
       bool_and(prompt_tokens > 0 AND ttft_ms >= 0) AS has_ttft,
       bool_and(queued_ms >= 0 AND queued_ms <= ttft_ms) AS queued_before_first_token
FROM cbllm.requests;
CLOSE c;
COMMIT;
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    EXIT WHEN NOT EXISTS (SELECT FROM cbllm.requests);
    PERFORM pg_sleep(0.05);
  END LOOP;
END $$;
SELECT count(*) AS live_after_close FROM cbllm.requests;
