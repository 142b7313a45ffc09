#!/usr/bin/env bash
# soak.sh: cbllm under chaos for about two minutes.  64 sessions issue mixed
# requests (short, long, streamed, array, llm_submit + llm_result, and CALL
# cbllm.enrich on a small table) with random cancels, statement timeouts and
# disconnects, while the engine dies twice (kill -9, then its model file
# truncated under it and put back) and an ordinary psql session commits a
# transaction every 100 ms.  The driver, bench/soak.c, checks every request
# (full result or a clear error, nothing hung); this script then checks that
# the ordinary session was never disconnected and committed everything, that
# the engine holds nothing once the clients are gone, that each enrichment
# row was updated exactly once, and that the server log shows no crash but
# the two injected engine deaths.  The last line is "soak: PASS" (exit
# status 0) or "soak: FAIL: reasons".
#
# It runs the installed extension on a throw-away cluster in a temporary
# directory, reachable only through its Unix socket there, with a generated
# deep model.  Not part of the default test run.
#
# usage: bench/soak.sh [--clients N] [--requests N] [--rows N] [--duration S]
#                      [--seed N] [--layers N] [--conf LINE]... [--keep]
#   defaults: 64 clients, 600 requests, 120 enrichment rows, at most 420 s of
#   requests, seed 1, a 64-layer model; --conf adds a postgresql.conf line
#   (e.g. "cbllm.kv_cache_size = '8MB'" to run under preemption); the
#   directory is kept when the run fails, or with --keep
set -eu
cd "$(dirname "$0")/.."
clients=64 requests=600 rows=120 duration=420 seed=1 layers=64 keep=0
conf=()
while [ $# -gt 0 ]; do
	case "$1" in
	--clients) clients=$2 ;;
	--requests) requests=$2 ;;
	--rows) rows=$2 ;;
	--duration) duration=$2 ;;
	--seed) seed=$2 ;;
	--layers) layers=$2 ;;
	--conf) conf+=("$2") ;;
	--keep) keep=1; shift; continue ;;
	*) sed -n 's/^# usage: /usage: /p' "$0" >&2; exit 2 ;;
	esac
	shift 2
done
bindir=$(pg_config --bindir)
if [ ! -x "$bindir/cbllm-engine" ]; then
	echo "soak: $bindir/cbllm-engine is missing: run make install first" >&2
	exit 2
fi
mkdir -p build
gcc -O2 -Wall -Wextra -Werror -I"$(pg_config --includedir)" bench/soak.c -L"$(pg_config --libdir)" -lpq -o build/soak

base=$(mktemp -d /tmp/cbllm-soak.XXXXXX)
port=5493
runas=()
if [ "$(id -u)" = 0 ]; then runas=(runuser -u postgres --); fi
# the deep model: the test model's widths and tokenizer with $layers decoder layers
/usr/bin/python3 test/tools/gen_model.py "$base/model" --hidden 64 --layers "$layers" --heads 4 \
	--kv-heads 2 --intermediate 160 --vocab 400 --dtype f32 --seed 1 --max-pos 1024 >/dev/null
model=$base/model/model.safetensors
cp "$model" "$model.saved"
cp build/soak "$base/soak"
if [ ${#runas[@]} -gt 0 ]; then chown -R postgres "$base"; fi
"${runas[@]}" "$bindir/initdb" -D "$base/data" -A trust >/dev/null
cat >>"$base/data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$base'
listen_addresses = ''
max_connections = 200
shared_preload_libraries = 'cbllm'
cbllm.model = '$base/model'
cbllm.threads = 2
cbllm.max_model_len = 512
cbllm.max_queued_requests = 256
cbllm.max_requests_per_role = 256
cbllm.max_tokens_limit = 1000
CONF
for line in "${conf[@]}"; do echo "$line" >>"$base/data/postgresql.conf"; done
log=$base/log
"${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -l "$log" -w start >/dev/null
stop() { "${runas[@]}" "$bindir/pg_ctl" -D "$base/data" -m fast stop >/dev/null 2>&1 || true; }
trap 'stop; echo "soak: stopped early; files kept in $base" >&2' EXIT
trap 'exit 1' INT TERM
psql=("${runas[@]}" "$bindir/psql" -h "$base" -p "$port" -d postgres -XAt -v ON_ERROR_STOP=1)
q() { "${psql[@]}" -c "$1"; }

q "CREATE EXTENSION cbllm" >/dev/null
for _ in $(seq 600); do [ "$(q "SELECT state FROM cbllm_status()")" = ready ] && break; sleep 0.2; done
# the enrichment table, with an audit trigger counting the UPDATEs of each row and
# each row's reference text (generated one row at a time, before any chaos)
"${psql[@]}" -q <<SQL
CREATE TABLE soak_docs (id int PRIMARY KEY, body text NOT NULL, summary text);
INSERT INTO soak_docs SELECT i, 'document ' || i || ' about ' || md5(i::text), NULL
FROM generate_series(1, $rows) i;
CREATE TABLE soak_audit (id int PRIMARY KEY, updates int NOT NULL);
CREATE FUNCTION soak_audit() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO soak_audit VALUES (NEW.id, 1)
    ON CONFLICT (id) DO UPDATE SET updates = soak_audit.updates + 1;
    RETURN NEW;
END \$\$;
CREATE TRIGGER soak_audit AFTER UPDATE OF summary ON soak_docs
FOR EACH ROW EXECUTE FUNCTION soak_audit();
CREATE TABLE soak_docs_ref AS SELECT id, llm_generate('Summarise: ' || body, 16) AS summary FROM soak_docs;
CREATE TABLE soak_ordinary (n int PRIMARY KEY);
SQL
supervisor0=$(q "SELECT worker_pid || ' ' || engine_restarts FROM cbllm_status()")

# the ordinary session: one psql, a transaction every 100 ms until the driver is done
ordinary() {
	local n=0 until=$((SECONDS + 1200))
	trap '' PIPE	# if psql is gone, stop writing and say how far it got
	echo "SELECT 'pid ' || pg_backend_pid();"
	while [ ! -e "$base/done" ] && [ $SECONDS -lt $until ]; do
		echo "BEGIN; INSERT INTO soak_ordinary VALUES ($((n + 1))); SELECT 'count ' || count(*) FROM soak_ordinary; COMMIT;" ||
			break
		n=$((n + 1))
		sleep 0.1
	done
	echo "SELECT 'pid ' || pg_backend_pid();" || true
	echo "$n" >"$base/ordinary.sent"
}
ordinary | "${psql[@]}" >"$base/ordinary.out" 2>&1 &
ordinary_job=$!

set +e
"${runas[@]}" "$base/soak" "$base" $port "$model" "$clients" "$requests" "$rows" "$duration" "$seed" |
	tee "$base/driver.out"
set -e
touch "$base/done"
ordinary_rc=0
wait $ordinary_job || ordinary_rc=$?

reasons=()
while IFS= read -r line; do reasons+=("${line#fail: }"); done < <(grep '^fail: ' "$base/driver.out")
grep -q '^soak: .*chaos over' "$base/driver.out" || reasons+=("the driver did not finish")

# the ordinary session: psql never lost its connection, the same backend at the
# start and the end, every transaction committed and saw its own row
sent=$(cat "$base/ordinary.sent" 2>/dev/null || echo 0)
read -r commits counts_ok pids < <(awk '/^COMMIT$/ {c++} /^count / {k++; if ($2 == k) ok++}
	/^pid / {p[++np] = $2} END {print c + 0, ok + 0, (np == 2 && p[1] == p[2]) ? p[1] : "changed"}' "$base/ordinary.out")
stored=$(q "SELECT count(*) FROM soak_ordinary")
echo "check: ordinary session: psql exit status $ordinary_rc, backend $pids, $sent transactions sent," \
	"$commits committed, $counts_ok saw their own row, $stored rows stored"
if [ "$ordinary_rc" != 0 ] || [ "$pids" = changed ] || [ "$sent" -lt 10 ] || [ "$commits" != "$sent" ] ||
	[ "$counts_ok" != "$sent" ] || [ "$stored" != "$sent" ]; then
	reasons+=("the ordinary session was disconnected or did not commit every transaction")
	grep -m3 -E 'ERROR|FATAL|server closed|connection' "$base/ordinary.out" | sed 's/^/ordinary: /'
fi

# the engine holds nothing once every client is gone (bounded wait)
idle_sql="SELECT format('running %s, waiting %s, kv_blocks_used %s, results_parked %s, cbllm.requests %s rows, \
client backends %s, state %s', requests_running, requests_waiting, kv_blocks_used, results_parked, r.n, b.n, state)
  || CASE WHEN requests_running = 0 AND requests_waiting = 0 AND kv_blocks_used = 0 AND results_parked = 0
          AND r.n = 0 AND b.n = 0 AND state = 'ready' THEN ': idle' ELSE '' END
FROM cbllm_status(), (SELECT count(*) n FROM cbllm.requests) r,
     (SELECT count(*) n FROM pg_stat_activity WHERE application_name LIKE 'soak-client-%') b"
t=$SECONDS
for _ in $(seq 150); do idle=$(q "$idle_sql"); case "$idle" in *': idle') break ;; esac; sleep 0.2; done
echo "check: engine once the clients left: $idle (after $((SECONDS - t)) s)"
case "$idle" in *': idle') ;; *) reasons+=("the engine still held requests, KV blocks or results 30 s after the clients left") ;; esac

# the enrichment: every row done, updated exactly once, with its reference text
read -r n_rows n_audit min_up max_up differ errs < <(q "SELECT count(*), count(a.id), coalesce(min(a.updates), 0),
  coalesce(max(a.updates), 0), count(*) FILTER (WHERE d.summary IS DISTINCT FROM f.summary),
  (SELECT count(*) FROM cbllm.enrich_errors)
FROM soak_docs d LEFT JOIN soak_audit a USING (id) JOIN soak_docs_ref f USING (id)" | tr '|' ' ')
bystate=$(q "SELECT coalesce(string_agg(n || ' ' || sqlstate, ', '), 'none') FROM
  (SELECT sqlstate, count(*) n FROM cbllm.enrich_errors GROUP BY 1 ORDER BY 1) e")
echo "check: enrichment: $n_rows rows, $n_audit audited, updates per row $min_up..$max_up, $differ differ" \
	"from the reference; $errs row failures recorded on the way (by sqlstate: $bystate)"
if [ "$n_rows" != "$rows" ] || [ "$n_audit" != "$rows" ] || [ "$min_up" != 1 ] || [ "$max_up" != 1 ]; then
	reasons+=("the enrichment rows were not each updated exactly once")
fi
[ "$differ" = 0 ] || reasons+=("$differ enriched rows are missing or differ from their reference")

# the supervisor ran throughout and counted exactly the two injected engine deaths
read -r worker0 restarts0 <<<"$supervisor0"
read -r worker1 restarts1 < <(q "SELECT worker_pid || ' ' || engine_restarts FROM cbllm_status()")
echo "check: supervisor $worker0 then $worker1, engine restarts $restarts0 then $restarts1"
[ "$worker1" = "$worker0" ] || reasons+=("the supervisor was replaced")
[ "$restarts1" = $((restarts0 + 2)) ] || reasons+=("engine_restarts did not go up by exactly the two injected deaths")

# the server log: no crash, and the engine deaths are exactly the injected ones
crashes=$(grep -cE 'terminated by signal|terminating any other active server processes|exited with exit code|PANIC:' "$log" || true)
deaths=$(grep -c 'cbllm: the cbllm engine process' "$log" || true)
sigkill=$(grep 'cbllm: the cbllm engine process' "$log" | grep -c 'killed by SIGKILL' || true)
sigbus=$(grep 'cbllm: the cbllm engine process' "$log" | grep -c 'died of SIGBUS' || true)
grep -E 'cbllm: the cbllm engine process|terminated by signal|terminating any other|exited with exit code|PANIC:' "$log" |
	head -8 | sed 's/^/log: /'
echo "check: server log: $crashes crash lines, $deaths engine deaths ($sigkill SIGKILL, $sigbus SIGBUS)"
[ "$crashes" = 0 ] || reasons+=("the server log shows $crashes crash lines")
[ "$deaths" = 2 ] && [ "$sigkill" = 1 ] && [ "$sigbus" = 1 ] ||
	reasons+=("the engine deaths in the server log are not exactly the two injected ones")

stop
trap - EXIT
if [ ${#reasons[@]} -eq 0 ]; then
	if [ $keep -eq 1 ]; then echo "soak: files kept in $base"; else rm -rf "$base"; fi
	echo "soak: PASS"
	exit 0
fi
echo "soak: files kept in $base"
printf 'soak: FAIL: %s' "${reasons[0]}"
printf '; %s' "${reasons[@]:1}"
echo
exit 1
