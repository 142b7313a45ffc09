#!/usr/bin/env bash
# fair_share_bench.sh: one role floods the engine, another asks a short question.
#
# Role "flood" runs FLOODERS sessions, each a 64-prompt array call of
# FLOOD_TOKENS tokens a prompt, so that together they hold every running
# sequence of the engine.  Role "short" then times a 4-token llm_generate,
# REPEAT times, and the same call with nothing else running.  Prints the
# medians, their ratio, and the engine's mean step time under the flood, so
# that "within 2x its unloaded time plus one step" can be read off.
#
# Each flooded measurement starts a fresh flood and cancels it afterwards.
#
# usage: bench/fair_share_bench.sh MODEL_DIR [FLOODERS] [FLOOD_TOKENS] [REPEAT]   (defaults 2 400 5)
set -eu
cd "$(dirname "$0")/.."
model=$(realpath "$1")
flooders=${2:-2}
flood_tokens=${3:-400}
repeat=${4:-5}
# shellcheck source=bench/cluster.sh
. bench/cluster.sh
cluster_init fairbench 5493 "$model"
cat >>"$base/data/postgresql.conf" <<CONF
cbllm.max_num_seqs = 64
cbllm.max_model_len = 1024
cbllm.max_queued_requests = 256
cbllm.max_requests_per_session = 64
cbllm.max_requests_per_role = 128
CONF
cluster_start
"${psql[@]}" -c "CREATE EXTENSION cbllm" -c "CREATE ROLE flood LOGIN" -c "CREATE ROLE short LOGIN"
"${psql[@]}" -c "SELECT llm_generate('warm up', 8, temperature => 0)" >/dev/null
"${psql[@]}" <<'SQL'
CREATE FUNCTION public.short_ms() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
BEGIN
	PERFORM llm_generate('What is the capital of France?', 4, temperature => 0);
	RETURN round(extract(epoch FROM clock_timestamp() - t0) * 1000);
END $$;
SQL

# short_call: how long one short request of role "short" takes inside the server, in ms
# (connecting is left out: it is the same with or without the flood)
short_call() {
	"${psql[@]}" -U short -c "SELECT public.short_ms()"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

unloaded=$(for _ in $(seq "$repeat"); do short_call; done | median)

# the flood never ends early: its requests cannot sample the end-of-sequence token
eos=$(/usr/bin/python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["eos_token_id"]; print(e[0] if isinstance(e, list) else e)' "$model/config.json")
flood_live() { "${psql[@]}" -c "SELECT count(*) FROM cbllm.requests WHERE role = 'flood'::regrole"; }
# flooded_call: start the flood, wait until all its prompts are in, time one
# short call (printed: its ms, then the flood's steps and microseconds over
# one second before it), then cancel the flood and wait until it is gone
flooded_call() {
	local pids=() s0 s1 t0 t1 ms
	for f in $(seq "$flooders"); do
		"${psql[@]}" -U flood -c "SELECT count(*) FROM unnest(llm_generate(
			(SELECT array_agg('flood $f prompt ' || i || ' ' || md5(i::text)) FROM generate_series(1, 64) i),
			$flood_tokens, temperature => 0.8, seed => $f, logit_bias => '{\"$eos\": -100}'))" >/dev/null 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 300); do
		[ "$(flood_live)" -ge $((64 * flooders)) ] && break
		sleep 0.1
	done
	# the flood's own step time, over one second
	s0=$("${psql[@]}" -c "SELECT steps FROM cbllm_status()")
	t0=$(date +%s%N)
	sleep 1
	s1=$("${psql[@]}" -c "SELECT steps FROM cbllm_status()")
	t1=$(date +%s%N)
	ms=$(short_call)
	echo "$ms $((s1 - s0)) $(((t1 - t0) / 1000))"
	"${psql[@]}" -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE usename = 'flood'" >/dev/null
	wait "${pids[@]}" 2>/dev/null || true
	for _ in $(seq 300); do
		[ "$(flood_live)" -eq 0 ] && break
		sleep 0.1
	done
}
runs=$(for _ in $(seq "$repeat"); do flooded_call; done)
loaded=$(echo "$runs" | awk '{ print $1 }' | median)
step_ms=$(echo "$runs" | awk '{ s += $2; t += $3 } END { printf "%.1f", s ? t / 1000 / s : 0 }')
times=$(echo "$runs" | awk '{ print $1 }' | tr '\n' ' ')
echo "# model $model; $flooders flooding sessions of 64 prompts x $flood_tokens tokens; medians of $repeat"
echo "short request unloaded:      $unloaded ms"
echo "each under flood (ms): "$times
echo "short request under flood:   $loaded ms  ($(awk -v a="$loaded" -v b="$unloaded" 'BEGIN { printf "%.1f", a / b }')x)"
echo "engine step under flood:     $step_ms ms"
echo "bound 2 x unloaded + 1 step: $(awk -v u="$unloaded" -v s="$step_ms" 'BEGIN { printf "%.1f", 2 * u + s }') ms"
