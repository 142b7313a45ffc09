#!/usr/bin/env bash
# bench/gguf_bench.sh: cbllm against llama.cpp on the same GGUF files, same threads, one run
# right after the other, REPS times; prints each run and the medians.
#
# usage: bench/gguf_bench.sh LLAMA_BIN_DIR REPS FILE.gguf [FILE.gguf ...]
#
# Decode: tokens/s of steps at batch 1, 8 and 32 (BATCHES="1,8" changes them) with a 64-token
# context per sequence
# (cbllm-cli bench-steps --context 64 --steps 16; llama-batched-bench -npp 64 -ntg 16, whose
# S_TG is the same quantity); CTX and GEN override the 64 and the 16.  Prefill: one
# 512-token prompt (bench-steps --prefill 512; llama-batched-bench -npp 512 -ntg 1 -ub 512,
# S_PP).  Peak resident memory of each run from
# /usr/bin/time; cbllm's run holds a KV cache for 32 sequences of 520 positions in f32, llama's
# one of 4096 positions in f16 (both printed).  Threads: 2 (THREADS overrides).
set -uo pipefail
bin=${1:?usage: bench/gguf_bench.sh LLAMA_BIN_DIR REPS FILE.gguf ...}
reps=${2:?reps}
shift 2
threads=${THREADS:-2}
ctx=${CTX:-64}
gen=${GEN:-16}
batches=${BATCHES:-1,8,32}
maxb=$(echo "$batches" | tr ',' '\n' | sort -n | tail -1)
kvc=$((maxb * (ctx + gen) > 4096 ? maxb * (ctx + gen) : 4096))
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
rss_mb() { awk '/Maximum resident set size/ {printf "%.0f", $NF / 1024}' "$1"; }

for file in "$@"; do
	name=$(basename "$file" .gguf)
	echo "## $name ($(du -m "$file" | cut -f1) MB file), $threads threads"
	for r in $(seq 1 "$reps"); do
		/usr/bin/time -v "$repo/bin/cbllm-cli" bench-steps -m "$file" --threads "$threads" \
			--batch "$batches" --context "$ctx" --steps "$gen" --prefill 512 >"$tmp/c.out" 2>"$tmp/c.time"
		/usr/bin/time -v "$bin/llama-batched-bench" -m "$file" -t "$threads" -c "$kvc" -b 2048 \
			-ub 512 -npp "$ctx" -ntg "$gen" -npl "$batches" >"$tmp/l.out" 2>"$tmp/l.time"
		"$bin/llama-batched-bench" -m "$file" -t "$threads" -c 1024 -b 512 -ub 512 -npp 512 \
			-ntg 1 -npl 1 >"$tmp/lp.out" 2>&1
		for b in ${batches//,/ }; do
			awk -v b="$b" '$1 == b {print $3}' "$tmp/c.out" >>"$tmp/$name.cbllm.$b"
			awk -F'|' -v b="$b" -v c="$ctx" '$4 + 0 == b && $2 + 0 == c {print $9 + 0}' "$tmp/l.out" \
				>>"$tmp/$name.llama.$b"
		done
		awk '/^prefill/ {print $6}' "$tmp/c.out" >>"$tmp/$name.cbllm.pp"
		awk -F'|' '$2 + 0 == 512 {print $7 + 0}' "$tmp/lp.out" >>"$tmp/$name.llama.pp"
		rss_mb "$tmp/c.time" >>"$tmp/$name.cbllm.rss"
		echo >>"$tmp/$name.cbllm.rss"
		rss_mb "$tmp/l.time" >>"$tmp/$name.llama.rss"
		echo >>"$tmp/$name.llama.rss"
		echo "run $r: cbllm $(paste -sd' ' <(for k in ${batches//,/ } pp; do tail -1 "$tmp/$name.cbllm.$k"; done)) rss $(tail -1 "$tmp/$name.cbllm.rss") MB |" \
			"llama.cpp $(paste -sd' ' <(for k in ${batches//,/ } pp; do tail -1 "$tmp/$name.llama.$k"; done)) rss $(tail -1 "$tmp/$name.llama.rss") MB"
	done
	echo "| $name | cbllm tok/s | llama.cpp tok/s | ratio |"
	echo "|---|---|---|---|"
	for k in ${batches//,/ } pp; do
		c=$(median <"$tmp/$name.cbllm.$k")
		l=$(median <"$tmp/$name.llama.$k")
		label=$([ "$k" = pp ] && echo "prefill 512" || echo "decode batch $k")
		echo "| $label | $c | $l | $(awk -v c="$c" -v l="$l" 'BEGIN {printf "%.2f", c / l}') |"
	done
	echo "| peak RSS (MB) | $(grep . "$tmp/$name.cbllm.rss" | median) | $(grep . "$tmp/$name.llama.rss" | median) | |"
	grep -h "^# model\|^# cpu" "$tmp/c.out"
	grep -h "llama_kv_cache\|KV self size\|CPU KV buffer" "$tmp/l.time" "$tmp/l.out" 2>/dev/null | head -2 || true
done
