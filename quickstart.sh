#!/usr/bin/env bash
# quickstart.sh: everything from a fresh clone to a first answer.  Installs the
# Debian packages (as root), builds and installs cbllm, generates a small
# random model, starts a throw-away PostgreSQL cluster that preloads cbllm,
# then runs llm_generate and streams llm_generate_stream through psql.
#
# usage: bash quickstart.sh [MODEL_DIR]   (default: a generated tiny model)
set -euo pipefail
cd "$(dirname "$0")"
base=/tmp/cbllm-quickstart
port=5439
if [ "$(id -u)" = 0 ]; then
	if ! dpkg -s libcjson-dev libkrb5-dev python3-numpy postgresql-15 postgresql-server-dev-15 >/dev/null 2>&1; then
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends build-essential libcjson-dev \
			python3-numpy postgresql-15 postgresql-server-dev-15 >/dev/null
	fi
	runas=(runuser -u postgres --)
else
	runas=()
fi
export PATH=/usr/lib/postgresql/15/bin:$PATH
make -s -j2
if [ "$(id -u)" = 0 ]; then make -s install; else sudo make -s install; fi

# a fresh cluster and (unless one was given) a generated model, owned by the server's user
if [ -f "$base/data/postmaster.pid" ]; then "${runas[@]}" pg_ctl -D "$base/data" -m fast stop || true; fi
rm -rf "$base" && mkdir -p "$base"
model=${1:-$base/model}
if [ -z "${1:-}" ]; then
	/usr/bin/python3 test/tools/gen_model.py "$model" --hidden 256 --layers 4 --heads 8 \
		--kv-heads 4 --intermediate 688 --dtype bf16 >/dev/null
fi
[ ${#runas[@]} -gt 0 ] && chown -R postgres "$base"
"${runas[@]}" initdb -D "$base/data" -A trust >/dev/null
cat >>"$base/data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$base'
listen_addresses = ''
shared_preload_libraries = 'cbllm'
cbllm.model = '$model'
CONF
"${runas[@]}" pg_ctl -D "$base/data" -l "$base/server.log" -w start >/dev/null
psql=("${runas[@]}" psql -h "$base" -p "$port" -d postgres -X)
"${psql[@]}" -q -c "CREATE EXTENSION cbllm"
echo "== SELECT llm_generate('Once upon a time', 32)"
"${psql[@]}" -c "SELECT llm_generate('Once upon a time', 32)"
echo "== SELECT llm_generate_stream('Once upon a time', 32)   (rows arrive as they are generated)"
"${psql[@]}" -v FETCH_COUNT=1 -c "SELECT llm_generate_stream('Once upon a time', 32) AS piece"
"${psql[@]}" -x -c "SELECT state, model, device, cpu_isa, tokens_generated, steps FROM cbllm_status()"
cat <<MSG
The cluster is still running (the model is random, so its text is gibberish):
  ${runas[*]} psql -h $base -p $port -d postgres
Stop it with:
  ${runas[*]} pg_ctl -D $base/data stop
MSG
