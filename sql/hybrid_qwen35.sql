-- A hybrid model through SQL: a generated Qwen3.5 checkpoint (three Gated
-- DeltaNet linear-attention layers to one gated attention layer) in its
-- released multimodal layout.  Each running sequence holds a slot of the
-- engine's linear-attention state cache; prefix caching is off for such a
-- model, since a cached prefix has no recurrent state to resume from.
CREATE EXTENSION cbllm;
SELECT count(*) > 0 AS ready FROM cbllm_status() WHERE state = 'ready';

-- the state cache is in the engine's view: one slot per sequence a step may hold
SELECT state_slots_total > 0 AS has_state_slots,
       state_bytes > 0 AS state_memory_counted,
       state_bytes % state_slots_total = 0 AS whole_slots,
       state_slots_used
FROM cbllm.engine;

-- several rows of one statement, each continuing its own state, greedy
CREATE TABLE prompts AS SELECT i, 'prompt number ' || i AS p FROM generate_series(1, 4) i;
CREATE TABLE answers AS SELECT i, llm_generate(p, 10, temperature => 0) AS a FROM prompts;
SELECT count(*) AS answered, bool_and(length(a) > 0) AS all_generated FROM answers;

-- each answer again, alone: the same text
SELECT bool_and(llm_generate(p, 10, temperature => 0) = a) AS same_alone
FROM prompts JOIN answers USING (i);

-- a prompt already seen is computed again (no prefix cache), and nothing holds a slot after
SELECT llm_generate('prompt number 1', 10, temperature => 0) = (SELECT a FROM answers WHERE i = 1)
       AS same_again;
SELECT state_slots_used, prefix_cache_hit_rate FROM cbllm.engine;
