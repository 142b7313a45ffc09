#!/usr/bin/env bash
# batch_node_bench.sh: plain SQL that calls llm_generate per row, with the batching node
# (cbllm.batch_rows default) and without it (cbllm.batch_rows = 0: one request at a time),
# against cbllm.enrich on the same rows, prompts and lengths, on a throw-away cluster.
# Per form, REPS runs one right after the other, the median wall time, rows/s, and the
# engine's mean batch size over the run (cbllm_status: batched sequences / steps):
#   update        UPDATE docs SET summary = llm_generate('Summarise: ' || body, MAX_TOKENS)
#   select        SELECT id, llm_generate(...) FROM docs  (the rows to the client)
#   filter        SELECT id FROM docs WHERE llm_generate('Is it about ...? ' || body, 1,
#                 choices => ARRAY['yes', 'no']) = 'yes'
#   enrich        CALL cbllm.enrich(... the update's prompt ...)
#
# usage: bench/batch_node_bench.sh MODEL [ROWS] [MAX_TOKENS] [REPS]   (defaults 300 16 3)
#   MODEL: a model directory or GGUF file (e.g. SmolLM2-135M-Instruct's Q4_1 file)
set -eu
cd "$(dirname "$0")/.."
model=$(realpath "$1")
rows=${2:-300}
maxtok=${3:-16}
reps=${4:-3}
# shellcheck source=bench/cluster.sh
. bench/cluster.sh
cluster_init batchbench 5493 "$model"
cat >>"$base/data/postgresql.conf" <<CONF
cbllm.max_num_seqs = 64
cbllm.max_model_len = 512
cbllm.max_queued_requests = 256
cbllm.enable_prefix_caching = off
CONF
cluster_start
"${psql[@]}" <<SQL
CREATE EXTENSION cbllm;
CREATE TABLE docs (id int PRIMARY KEY, body text, summary text);
INSERT INTO docs SELECT i, 'document ' || i || ' about ' || md5(i::text), NULL FROM generate_series(1, $rows) i;
SELECT llm_generate('warm up', 4);
SQL
prompt="'Summarise: ' || body"
declare -A sql=(
	[update]="UPDATE docs SET summary = llm_generate($prompt, $maxtok)"
	[select]="SELECT id, llm_generate($prompt, $maxtok) FROM docs"
	[filter]="SELECT id FROM docs WHERE llm_generate('Is it about a number? ' || body, 1, choices => ARRAY['yes', 'no']) = 'yes'"
	[enrich]="CALL cbllm.enrich('docs', 'id', \$\$$prompt\$\$, 'summary', chunk_size => 256, max_tokens => $maxtok)"
)
# run NAME SETTING SQL: one run; prints "seconds mean_batch"
run() {
	local before after t0 t1
	"${psql[@]}" -c "UPDATE docs SET summary = NULL"
	before=$("${psql[@]}" -c "SELECT steps || ' ' || batch_sequences FROM cbllm_status()")
	t0=$(date +%s.%N)
	"${psql[@]}" -c "SET client_min_messages = warning" -c "SET cbllm.batch_rows = $2" -c "$3" >/dev/null
	t1=$(date +%s.%N)
	after=$("${psql[@]}" -c "SELECT steps || ' ' || batch_sequences FROM cbllm_status()")
	awk -v a="$before" -v b="$after" -v t0="$t0" -v t1="$t1" 'BEGIN {
		split(a, x, " "); split(b, y, " ");
		printf "%.3f %.2f\n", t1 - t0, (y[2] - x[2]) / ((y[1] - x[1]) > 0 ? y[1] - x[1] : 1) }'
}
median() { sort -g | awk '{v[NR] = $0} END {print v[int((NR + 1) / 2)]}'; }
echo "# $rows rows, max_tokens $maxtok, $reps runs each (median), model $model"
printf "%-22s %9s %10s %11s\n" form seconds rows/s mean_batch
for form in update select filter enrich; do
	for mode in batched row-by-row; do
		[ $form = enrich ] && [ $mode = row-by-row ] && continue
		setting=-1
		[ $mode = row-by-row ] && setting=0
		for r in $(seq 1 "$reps"); do run "$form" "$setting" "${sql[$form]}"; done >"$base/runs"
		m=$(median <"$base/runs")
		awk -v n="$form $mode" -v m="$m" -v r="$rows" 'BEGIN { split(m, v, " ");
			printf "%-22s %9.2f %10.1f %11.2f\n", n, v[1], r / v[1], v[2] }'
	done
done
