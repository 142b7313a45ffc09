#!/usr/bin/env bash
# enrich_bench.sh: enrich ROWS rows with cbllm.enrich and with a plain row-by-row
# UPDATE ... SET col = llm_generate(...), same prompts and lengths, on a
# throw-away cluster; prints the wall time of each and the engine's mean batch
# size during each (from cbllm.engine: steps and batched sequences).
#
# usage: bench/enrich_bench.sh MODEL_DIR [ROWS] [MAX_TOKENS] [CHUNK]   (defaults 2000 16 256)
set -eu
cd "$(dirname "$0")/.."
model=$(realpath "$1")
rows=${2:-2000}
maxtok=${3:-16}
chunk=${4:-256}
# shellcheck source=bench/cluster.sh
. bench/cluster.sh
cluster_init enrichbench 5492 "$model"
cat >>"$base/data/postgresql.conf" <<CONF
cbllm.max_num_seqs = 256
cbllm.max_model_len = 512
cbllm.max_queued_requests = 512
cbllm.enable_prefix_caching = off
CONF
cluster_start
"${psql[@]}" <<SQL
CREATE EXTENSION cbllm;
CREATE TABLE docs (id int PRIMARY KEY, body text, summary text);
INSERT INTO docs SELECT i, 'document ' || i || ' about ' || md5(i::text), NULL FROM generate_series(1, $rows) i;
SQL
# measure NAME SQL: run SQL, print wall time and the mean batch size of the steps it caused
measure() {
	local before after t0 t1
	before=$("${psql[@]}" -c "SELECT steps || ' ' || batch_sequences FROM cbllm_status()")
	t0=$(date +%s.%N)
	"${psql[@]}" -c "SET client_min_messages = warning" -c "$2" >/dev/null
	t1=$(date +%s.%N)
	after=$("${psql[@]}" -c "SELECT steps || ' ' || batch_sequences FROM cbllm_status()")
	awk -v n="$1" -v a="$before" -v b="$after" -v t0="$t0" -v t1="$t1" -v r="$rows" 'BEGIN {
		split(a, x, " "); split(b, y, " ");
		printf "%-10s %8.2f s  %7.1f rows/s  mean batch %6.2f  (%d steps)\n", n, t1 - t0, r / (t1 - t0),
			(y[2] - x[2]) / (y[1] - x[1]), y[1] - x[1] }'
}
echo "# $rows rows, max_tokens $maxtok, model $model"
measure "row-by-row" "UPDATE docs SET summary = llm_generate('Summarise: ' || body, $maxtok)"
"${psql[@]}" -c "UPDATE docs SET summary = NULL"
measure "enrich" "CALL cbllm.enrich('docs', 'id', \$\$'Summarise: ' || body\$\$, 'summary', chunk_size => $chunk, max_tokens => $maxtok)"
"${psql[@]}" -c "SELECT count(*) FILTER (WHERE summary IS NULL) || ' rows left undone' FROM docs"
