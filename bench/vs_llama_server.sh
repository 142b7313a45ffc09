#!/usr/bin/env bash
# bench/vs_llama_server.sh: the serving workload against llama.cpp's llama-server and against
# cbllm through PostgreSQL sessions, the same F16 GGUF file for both, one driver for both
# (bench/serve_bench.c: closed-loop clients, llama-server's /completion streamed over HTTP,
# cbllm's llm_generate_stream over libpq), one system right after the other at each level,
# REPS times, then the medians side by side.
#
# usage: bench/vs_llama_server.sh LLAMA_BIN_DIR [LEVELS] [REQUESTS] [REPS] [WORKDIR]
#   LLAMA_BIN_DIR  llama.cpp's built tools (llama-server)
#   LEVELS         concurrency levels (default 1,8,32)
#   REQUESTS       requests per level (default 32)
#   REPS           runs per level and system (default 3)
#   WORKDIR        where the model and its GGUF file are (default build/bench/vs, as
#                  bench/vs_llamacpp.sh makes them)
#
# The workload of the issue's serving table: prompts of 50..200 words, 20..100 new tokens,
# temperature 0.7, top-p 0.95. Both servers get THREADS (default 2) compute threads and as many
# sequences at once as the largest level, each with room for 512 positions.
set -euo pipefail
bin=${1:?usage: bench/vs_llama_server.sh LLAMA_BIN_DIR [LEVELS] [REQUESTS] [REPS] [WORKDIR]}
levels=${2:-1,8,32}
requests=${3:-32}
reps=${4:-3}
cd "$(dirname "$0")/.."
work=$(realpath -m "${5:-build/bench/vs}")
threads=${THREADS:-2}
maxseqs=$(echo "$levels" | tr ',' '\n' | sort -n | tail -1)
ctx=512
hport=8097
pport=5497
mkdir -p "$work"
make -s all
[ -f "$work/m134/config.json" ] ||
	/usr/bin/python3 test/tools/gen_model.py "$work/m134" --hidden 768 --layers 12 --heads 12 \
		--kv-heads 12 --intermediate 2048 --dtype f32 --max-pos 4096 --seed 5 \
		--tokenizer-from test/data/tokenizers/llama2 >/dev/null
[ -f "$work/m134-f16.gguf" ] ||
	/usr/bin/python3 test/tools/hf_to_gguf.py --type f16 "$work/m134" "$work/m134-f16.gguf" >/dev/null
model="$work/m134-f16.gguf"
gcc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" bench/serve_bench.c \
	-L"$(pg_config --libdir)" -lpq -o build/serve_bench

base=$(mktemp -d /tmp/cbllm-vsserver.XXXXXX)
chmod 755 "$base"
runas=()
if [ "$(id -u)" = 0 ]; then runas=(runuser -u postgres --); chown postgres "$base"; fi
pgbin=$(pg_config --bindir)
hpid=
cleanup() {
	[ -n "$hpid" ] && kill "$hpid" 2>/dev/null || true
	"${runas[@]}" "$pgbin/pg_ctl" -D "$base/data" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$base"
}
trap cleanup EXIT

# llama-server: one slot per client, each with ctx positions
"$bin/llama-server" -m "$model" -t "$threads" -tb "$threads" -np "$maxseqs" -c $((maxseqs * ctx)) \
	--host 127.0.0.1 --port $hport --no-webui >"$base/llama-server.log" 2>&1 &
hpid=$!
for _ in $(seq 120); do
	curl -sf "http://127.0.0.1:$hport/health" >/dev/null && break
	sleep 1
done
curl -sf "http://127.0.0.1:$hport/health" >/dev/null ||
	{ echo "llama-server did not start:"; tail -20 "$base/llama-server.log"; exit 1; }

# cbllm: a throw-away cluster on a Unix socket
"${runas[@]}" "$pgbin/initdb" -D "$base/data" -A trust >/dev/null
cat >>"$base/data/postgresql.conf" <<CONF
port = $pport
unix_socket_directories = '$base'
listen_addresses = ''
max_connections = $((maxseqs + 20))
shared_preload_libraries = 'cbllm'
cbllm.model = '$model'
cbllm.threads = $threads
cbllm.max_num_seqs = $maxseqs
cbllm.max_model_len = $ctx
CONF
"${runas[@]}" "$pgbin/pg_ctl" -D "$base/data" -l "$base/pg.log" -w start >/dev/null
"${runas[@]}" "$pgbin/psql" -h "$base" -p $pport -d postgres -qXc "CREATE EXTENSION cbllm"
"${runas[@]}" "$pgbin/psql" -h "$base" -p $pport -d postgres -qXAtc \
	"SELECT llm_generate('warm up', 4)" >/dev/null
curl -sf "http://127.0.0.1:$hport/completion" -d '{"prompt": "warm up", "n_predict": 4}' >/dev/null

echo "# $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $threads threads each;" \
	"$(basename "$model"); $requests requests a level; prompts 50..200 words, 20..100 new tokens"
out="$base/runs"
for r in $(seq "$reps"); do
	for c in ${levels//,/ }; do
		# the same prompts for both systems, new ones at each run
		build/serve_bench "http:127.0.0.1:$hport" "$c" "$requests" 50 200 20 100 "$r" | tee -a "$out"
		"${runas[@]}" build/serve_bench "pg:host=$base port=$pport dbname=postgres" "$c" \
			"$requests" 50 200 20 100 "$r" | tee -a "$out"
	done
done
echo "# medians of $reps runs: llama-server / cbllm"
/usr/bin/python3 - "$out" <<'EOF'
import re, statistics, sys
print("| concurrency | tok/s llama-server / cbllm | TTFT p50 ms | ITL p50 ms | ITL p99 ms |")
print("|---|---|---|---|---|")
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) concurrency (\d+) requests \d+: ttft_ms mean [\d.]+ p50 ([\d.]+) p99 [\d.]+"
                 r" itl_ms mean [\d.]+ p50 ([\d.]+) p99 ([\d.]+) pieces_per_s [\d.]+ tokens_per_s ([\d.]+)", line)
    if m:
        rows.setdefault((int(m.group(2)), m.group(1)), []).append(
            [float(m.group(6)), float(m.group(3)), float(m.group(4)), float(m.group(5))])
for c in sorted({k[0] for k in rows}):
    med = {s: [statistics.median(x[i] for x in rows.get((c, s), [[float("nan")] * 4]))
               for i in range(4)] for s in ("llama-server", "cbllm")}
    a, b = med["llama-server"], med["cbllm"]
    print("| %d | %.1f / %.1f (%.2fx) | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f |" %
          (c, a[0], b[0], b[0] / a[0], a[1], b[1], a[2], b[2], a[3], b[3]))
EOF
