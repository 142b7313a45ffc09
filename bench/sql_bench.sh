#!/usr/bin/env bash
# sql_bench.sh: the serving workload through PostgreSQL sessions (bench/serve_bench.c,
# libpq single-row mode, timing each streamed piece) next to cbllm-cli bench on
# the same model and engine settings, at several concurrency levels.
#
# usage: bench/sql_bench.sh MODEL_DIR [LEVELS] [REQUESTS] [PROMPT A..B] [GEN A..B]
#        (defaults: 1,8,32  32  50..200  100..200)
set -eu
cd "$(dirname "$0")/.."
model=$(realpath "$1")
levels=${2:-1,8,32}
requests=${3:-32}
prompt=${4:-50..200}
gen=${5:-100..200}
base=$(mktemp -d /tmp/cbllm-sqlbench.XXXXXX)
port=5491
runas=()
if [ "$(id -u)" = 0 ]; then runas=(runuser -u postgres --); chown postgres "$base"; fi
bindir=$(pg_config --bindir)
make -s all
gcc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" bench/serve_bench.c -L"$(pg_config --libdir)" -lpq -o build/serve_bench
maxseqs=$(echo "$levels" | tr ',' '\n' | sort -n | tail -1)
"${runas[@]}" "$bindir/initdb" -D "$base/data" -A trust >/dev/null
cat >>"$base/data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$base'
listen_addresses = ''
max_connections = 100
shared_preload_libraries = 'cbllm'
cbllm.model = '$model'
cbllm.max_num_seqs = $maxseqs
cbllm.max_model_len = 1024
CONF
"${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -l "$base/log" -w start >/dev/null
trap '"${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -m fast stop >/dev/null; rm -rf "$base"' EXIT
"${runas[@]}" "$bindir/psql" -h "$base" -p $port -d postgres -qXc "CREATE EXTENSION cbllm"
"${runas[@]}" "$bindir/psql" -h "$base" -p $port -d postgres -qXAtc "SELECT llm_generate('warm up', 4)" >/dev/null
pmin=${prompt%..*}; pmax=${prompt#*..}; gmin=${gen%..*}; gmax=${gen#*..}
echo "# SQL sessions (llm_generate_stream, single-row mode); prompts $prompt words, $gen new tokens"
for c in ${levels//,/ }; do
	"${runas[@]}" build/serve_bench "pg:host=$base port=$port dbname=postgres" "$c" "$requests" \
		"$pmin" "$pmax" "$gmin" "$gmax"
done
echo "# streaming overhead: 200 tokens, llm_generate vs a cursor fetching one piece at a time (median of 5)"
psql=("${runas[@]}" "$bindir/psql" -h "$base" -p $port -d postgres -qXAt)
for mode in plain cursor; do
	for r in 1 2 3 4 5; do
		t0=$(date +%s.%N)
		if [ $mode = plain ]; then
			"${psql[@]}" -c "SELECT length(llm_generate('stream overhead $r', 200, stop => NULL))" >/dev/null
		else
			"${psql[@]}" -v FETCH_COUNT=1 -c "SELECT llm_generate_stream('stream overhead $r', 200)" >/dev/null
		fi
		awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {print a - b}'
	done | sort -n | sed -n 3p | awk -v m=$mode '{printf "%s: %.1f ms per 200-token request\n", m, $1 * 1000}'
done
"${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -m fast stop >/dev/null
trap 'rm -rf "$base"' EXIT
echo "# cbllm-cli bench, same engine settings, in-process; prompts $prompt tokens"
bin/cbllm-cli bench -m "$model" --concurrency "$levels" --requests "$requests" --prompt-len "$prompt" \
	--gen-len "$gen" --max-num-seqs "$maxseqs" --max-model-len 1024
