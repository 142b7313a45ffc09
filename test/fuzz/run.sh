#!/usr/bin/env bash
# test/fuzz/run.sh: build the libFuzzer targets (make fuzz) and fuzz them, or
# replay their corpus.
#
# usage: test/fuzz/run.sh SECONDS [TARGET...]
#            fuzz each target (by default every test/fuzz/fuzz_TARGET.c) for
#            SECONDS, one after another; new inputs go to build/fuzz/work/TARGET,
#            findings to build/fuzz/artifacts/TARGET, the log to
#            build/fuzz/fuzz-TARGET.log; one summary line per target; exit
#            status 1 when anything was found
#        test/fuzz/run.sh --replay [--require] [TARGET...]
#            run every file of test/fuzz/corpus/TARGET once through its fuzzer
#            (no fuzzing) and print one TAP line per target
#
# Without clang and libFuzzer the script says so and exits 0 (a skip), unless
# --require is given (test/run-tests gives it: CI installs them from
# packages.txt), when that is a failure.  FUZZ_CC names another clang.
set -u
cd "$(dirname "$0")/../.." || exit 1

# every test/fuzz/fuzz_<target>.c is a target (make fuzz builds those in FUZZ_TARGETS)
TARGETS=$(for f in test/fuzz/fuzz_*.c; do f=${f##*/fuzz_}; echo "${f%.c}"; done)
# the largest input worth mutating, per format (above every seed of its corpus)
declare -A MAX_LEN=([config]=8192 [safetensors]=32768 [safetensors_index]=16384
	[tokenizer]=65536 [tokenizer_config]=4096 [ipc]=4200 [chat_template]=8192 [gguf]=8192
	[tokenizer_gguf]=65536 [regex]=1024 [json_schema]=8192)
DEFAULT_MAX_LEN=4096
# both modes: a hang or a memory blow-up is a finding too
LIMITS="-timeout=10 -rss_limit_mb=2048"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

usage() {
	echo "usage: test/fuzz/run.sh SECONDS [TARGET...] | --replay [--require] [TARGET...]" >&2
	exit 2
}

replay=0
require=0
seconds=
while [ $# -gt 0 ]; do
	case "$1" in
		--replay) replay=1; shift ;;
		--require) require=1; shift ;;
		-h|--help) usage ;;
		-*) usage ;;
		*) if [ "$replay" = 0 ] && [ -z "$seconds" ]; then
			case "$1" in ''|*[!0-9]*) usage ;; esac
			seconds=$1
		else
			break
		fi
		shift ;;
	esac
done
[ "$replay" = 1 ] || [ -n "$seconds" ] || usage
if [ $# -gt 0 ]; then
	for t in "$@"; do
		case " $(echo $TARGETS) " in *" ${t#fuzz_} "*) ;;
			*) echo "run.sh: no fuzz target $t (targets:" $TARGETS")" >&2; exit 2 ;; esac
	done
	TARGETS=$(for t in "$@"; do echo "${t#fuzz_}"; done)
fi

# fail REASON: the fuzzers cannot be built or run here; a skip unless --require
fail_setup() {
	if [ "$require" = 1 ]; then
		echo "not ok 1 - fuzz: $1"
		echo "1..1"
		exit 1
	fi
	if [ "$replay" = 1 ]; then echo "1..0 # SKIP $1"; else echo "fuzz: skipped, $1"; fi
	exit 0
}

cc=${FUZZ_CC:-clang}
command -v "$cc" >/dev/null 2>&1 ||
	fail_setup "$cc is not installed (Debian: apt-get install clang libfuzzer-14-dev libclang-rt-14-dev)"
mkdir -p build/fuzz
probe=build/fuzz/probe
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return d == 0 && n > 0; }' >"$probe.c"
if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >"$probe.log" 2>&1; then
	fail_setup "$cc cannot link a libFuzzer program with ASan and UBSan ($(head -1 "$probe.log");\
 Debian: apt-get install libfuzzer-14-dev libclang-rt-14-dev)"
fi
rm -f "$probe" "$probe.c" "$probe.log"
if ! make -s -j2 fuzz FUZZ_CC="$cc" >build/fuzz/build.log 2>&1; then
	tail -20 build/fuzz/build.log
	echo "not ok 1 - fuzz: make fuzz failed (build/fuzz/build.log)"
	echo "1..1"
	exit 1
fi

if [ "$replay" = 1 ]; then
	n=0
	bad=0
	for t in $TARGETS; do
		n=$((n + 1))
		files=()
		for f in "test/fuzz/corpus/$t"/*; do [ -f "$f" ] && files+=("$f"); done
		log=build/fuzz/replay-$t.log
		if [ ! -x "build/fuzz/fuzz_$t" ]; then
			echo "not ok $n - fuzz_$t: make fuzz did not build it (is $t in the Makefile's FUZZ_TARGETS?)"
			bad=1
			continue
		fi
		if [ "${#files[@]}" -eq 0 ]; then
			echo "not ok $n - fuzz_$t: no corpus files in test/fuzz/corpus/$t"
			bad=1
			continue
		fi
		# given files (not directories), libFuzzer runs each once and stops
		# shellcheck disable=SC2086 # LIMITS is a list of options
		if "build/fuzz/fuzz_$t" $LIMITS "${files[@]}" >"$log" 2>&1; then
			echo "ok $n - fuzz_$t: replayed ${#files[@]} corpus files, no crash"
		else
			echo "not ok $n - fuzz_$t: a corpus file crashed, hung or leaked ($log)"
			grep '^Running: ' "$log" | tail -1 | sed 's/^/#   /'	# the last one run
			grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz property broken)' "$log" |
				head -5 | sed 's/^/#   /'
			bad=1
		fi
	done
	echo "1..$n"
	exit "$bad"
fi

found=0
for t in $TARGETS; do
	work=build/fuzz/work/$t
	art=build/fuzz/artifacts/$t
	log=build/fuzz/fuzz-$t.log
	mkdir -p "$work" "$art"
	before=$(find "$art" -type f | wc -l)
	start=$(date +%s)
	dict=()
	[ -f "test/fuzz/dict/$t.dict" ] && dict=(-dict="test/fuzz/dict/$t.dict")
	# shellcheck disable=SC2086 # LIMITS is a list of options
	"build/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len="${MAX_LEN[$t]:-$DEFAULT_MAX_LEN}" \
		$LIMITS "${dict[@]}" -print_final_stats=1 -artifact_prefix="$art/" \
		"$work" "test/fuzz/corpus/$t" >"$log" 2>&1
	rc=$?
	took=$(($(date +%s) - start))
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | sed 's/corp: //')
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
	new=$(find "$art" -type f | wc -l)
	new=$((new - before))
	echo "fuzz_$t: ${execs:-?} executions in ${took} s, coverage ${cov:-?} edges, corpus ${corp:-?}" \
		"(files/bytes), findings: $new (exit status $rc)"
	if [ "$new" -gt 0 ] || [ "$rc" -ne 0 ]; then
		found=1
		ls -t "$art" | head -n "$new" | sed "s|^|   $art/|"
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|fuzz property broken)' "$log" | head -5 | sed 's/^/   /'
	fi
done
exit "$found"
