#!/usr/bin/env bash
# test/quickstart_test.sh: quickstart.sh as a user runs it (bash quickstart.sh),
# then what it printed.  With the real model (SmolLM2-135M-Instruct, downloaded
# once): answers that are English and right (Paris; PostgreSQL is a database;
# the five reviews and the question classified as a person would), a stream of
# several rows, an engine that is ready.  Where the model could not be
# downloaded, quickstart.sh says so and uses a random model: then only the
# answers' presence is checked, and the checks of their content say they were
# skipped and why.  Then it stops the cluster quickstart.sh leaves running.
# TAP output.
#
# quickstart.sh installs packages (when some are missing) and runs make install.
# Its cluster goes to a fresh directory of its own here (CBLLM_QUICKSTART_DIR)
# and listens on a Unix socket in that directory only, so it meets no other
# cluster on the machine, not even a user's own quickstart.
#
# usage: test/quickstart_test.sh
set -u
cd "$(dirname "$0")/.." || exit 1
export PATH=/usr/lib/postgresql/15/bin:$PATH
runas=()
if [ "$(id -u)" = 0 ]; then runas=(runuser -u postgres --); fi
n=0
fails=0

# ok STATUS NAME: one TAP line
ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}

# quickstart.sh replaces its directory, so the directory is a name not yet taken
base=$(mktemp -u /tmp/cbllm-quickstart-test.XXXXXX)
out=$(mktemp /tmp/cbllm-quickstart-test.XXXXXX.out)
stop_cluster() {
	[ -f "$base/data/postmaster.pid" ] || return 0
	"${runas[@]}" pg_ctl -D "$base/data" -m fast -w stop >/dev/null
}
trap 'stop_cluster; rm -rf "$base" "$out"' EXIT

CBLLM_QUICKSTART_DIR=$base timeout 600 bash quickstart.sh >"$out" 2>&1
rc=$?
sed 's/^/# /' "$out"
ok $rc "bash quickstart.sh exits 0 (status $rc)"

# psql's aligned output: the marker line quickstart.sh prints, the column
# header, the dashes, then the rows, then "(N rows)"
# rows MARKER: the value lines of the result printed after MARKER
rows() {
	awk -v marker="$1" '
		index($0, marker) == 1 { found = 1; next }
		found && /^[-+]+$/ { inrows = 1; next }
		inrows && /^\([0-9]+ rows?\)$/ { exit }
		inrows { print }
	' "$out"
}
answer=$(rows "== SELECT llm_generate('The capital of France is'")
[ -n "$(printf '%s' "$answer" | tr -d ' \t\n+')" ]
ok $? "llm_generate printed a non-empty answer ($(printf '%s' "$answer" | head -c 80 | tr '\n' ' '))"
if grep -q "could not be downloaded" "$out"; then
	reason="the model could not be downloaded here, so quickstart.sh used a random model"
	for what in "llm_generate names Paris" "llm_chat says what PostgreSQL is" "the streamed answer" \
		"the choices classification" "cbllm.enrich classified the five reviews"; do
		n=$((n + 1))
		echo "ok $n # SKIP $what: $reason"
	done
	pieces=$(grep -A200 -F "== SELECT llm_generate_stream(" "$out" | grep -m1 -E '^\([0-9]+ rows?\)$' | tr -dc 0-9)
	[ "${pieces:-0}" -ge 4 ]
	ok $? "llm_generate_stream printed several rows (${pieces:-no} rows, at least 4 wanted)"
else
	grep -q "^fetch_models: smollm2-135m-instruct-q4_1: .* MB" "$out"
	ok $? "quickstart.sh says which model it downloaded (or found in the cache) and how big"
	printf '%s' "$answer" | grep -q "Paris"
	ok $? "llm_generate completes 'The capital of France is' with Paris"
	chat=$(rows "== SELECT llm_chat('[{\"role\": \"user\", \"content\": \"What is PostgreSQL?\"}]'")
	printf '%s' "$chat" | grep -qi "database"
	ok $? "llm_chat answers 'What is PostgreSQL?' in English, as a database ($(printf '%s' "$chat" | head -c 80))"
	pieces=$(grep -A200 -F "== SELECT llm_chat_stream(" "$out" | grep -m1 -E '^\([0-9]+ rows?\)$' | tr -dc 0-9)
	[ "${pieces:-0}" -ge 4 ]
	ok $? "llm_chat_stream printed its answer as several rows (${pieces:-no} rows, at least 4 wanted)"
	label=$(rows "== SELECT llm_generate(sentiment_prompt(" | tr -d ' ')
	[ "$label" = negative ]
	ok $? "the choices classification calls a cold meal and a rude waiter negative (${label:-nothing})"
	table=$(rows "== SELECT id, sentiment, body FROM reviews" | awk -F'|' '{ gsub(/ /, "", $1); gsub(/ /, "", $2); printf "%s:%s ", $1, $2 }')
	[ "$table" = "1:positive 2:negative 3:positive 4:negative 5:positive " ]
	ok $? "cbllm.enrich classified the five reviews as a person would ($table)"
fi

grep -Eq '^state +\| ready$' "$out"
ok $? "cbllm_status() says the engine is ready"

grep -q "Stop it with:" "$out" && [ -f "$base/data/postmaster.pid" ]
ok $? "the cluster is left running, and quickstart.sh says how to stop it"

stop_cluster && [ ! -f "$base/data/postmaster.pid" ]
ok $? "pg_ctl stop stops the quickstart cluster"

echo "1..$n"
[ $fails -eq 0 ]
