#!/usr/bin/env bash
# quickstart.sh: everything from a fresh clone to a first answer.  Installs the
# Debian packages (as root), builds and installs cbllm, generates a small
# random model, starts a throw-away PostgreSQL cluster that preloads cbllm,
# then runs llm_generate and streams llm_generate_stream through psql.
#
# usage: bash quickstart.sh [MODEL_DIR]   (default: a generated tiny model)
# The cluster lives in /tmp/cbllm-quickstart and listens on port 5439 (a Unix
# socket in that directory only); CBLLM_QUICKSTART_DIR and CBLLM_QUICKSTART_PORT
# change them.  The packages are the ones listed in packages.txt.
set -euo pipefail
cd "$(dirname "$0")"
base=${CBLLM_QUICKSTART_DIR:-/tmp/cbllm-quickstart}
port=${CBLLM_QUICKSTART_PORT:-5439}
if [ "$(id -u)" = 0 ]; then
	asroot=()
	runas=(runuser -u postgres --)
else
	asroot=(sudo)
	runas=()
fi
# the packages, unless every one of them is installed already
packages=$(grep -v '^#' packages.txt)
# shellcheck disable=SC2086 # one word per package
if ! dpkg -s $packages >/dev/null 2>&1; then
	"${asroot[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${asroot[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $packages >/dev/null
fi
export PATH=/usr/lib/postgresql/15/bin:$PATH
make -s -j2
"${asroot[@]}" make -s install

# a fresh cluster and (unless one was given) a generated model, owned by the server's user
# (only a directory that is empty or holds an earlier quickstart is replaced)
if [ -n "$(ls -A "$base" 2>/dev/null)" ] && [ ! -f "$base/data/PG_VERSION" ]; then
	echo "quickstart.sh: $base exists and holds no earlier quickstart cluster; not replacing it" >&2
	exit 1
fi
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
