#!/usr/bin/env bash
# bench/hybrid_bench.sh: cbllm against llama.cpp on Qwen3.5's hybrid (Gated DeltaNet linear
# attention in 3 of 4 layers, gated full attention in the 4th) at Qwen3.5-0.8B's whole geometry,
# and what its per-sequence state saves in cache memory against a pure-attention model of about
# the same size.  Random F16 weights (bench/hybrid_gguf.py, laid out as test/tools/hf_to_gguf.py
# lays them out) quantized to Q4_K_M by llama.cpp's own llama-quantize, cached in
# ~/.cache/cbllm/bench (CBLLM_CACHE overrides the ~/.cache/cbllm):
#   qwen3.5-0.8b-shapes  Qwen3.5-0.8B's text model: hidden 1024, 24 layers (18 linear, 6 full
#                        attention), 8 query heads over 2 KV heads of 256 (with the output
#                        gate), partial rotary 0.25, rope theta 1e7; linear attention of 16 key
#                        heads and 16 value heads of 128, conv kernel 4; intermediate 3584;
#                        vocabulary 248320, tied embeddings;
#   qwen3-0.6b-shapes    Qwen3-0.6B's: hidden 1024, 28 layers, 16 query heads over 8 KV heads
#                        of 128, intermediate 3072, vocabulary 151936, tied (the peer for the
#                        memory figures).
# Both vocabularies are Qwen3's tokenizer (test/data/tokenizers/qwen3, 151669 ids) padded with
# unused tokens to the model's rows: the benchmark feeds token ids, so only the rows matter.
#
# Prints the cache memory of each file, computed from its keys (bench/hybrid_memory.py: the
# state of one sequence, K and V per token in cbllm's f16 cache, and how many 4096-token
# sequences fit in 4 GiB: the hybrid's state and its 6 attention layers' K and V against the
# pure-attention model's K and V of all its layers), then bench/gguf_bench.sh on the hybrid
# file (decode at batch 1, 8 and 32, a 512-token prefill, REPS runs each, medians).
#
# usage: bench/hybrid_bench.sh [REPS] [hybrid|both|memory]
#   hybrid (default): times the Qwen3.5 file; both: the Qwen3 file too, after it; memory: makes
#   the files and prints the memory figures, nothing timed.  THREADS, BATCHES, CTX and GEN go
#   to gguf_bench.sh; CONTEXT (4096) and BUDGET_GIB (4) to the memory figures.
#   llama.cpp from test/tools/build_llamacpp.sh.
set -euo pipefail
reps=${1:-3}
what=${2:-hybrid}
case "$what" in
	hybrid | both | memory) ;;
	*) echo "usage: bench/hybrid_bench.sh [REPS] [hybrid|both|memory]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}/bench
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
tok=$repo/test/data/tokenizers/qwen3
tok_ids=151669 # the ids of Qwen3's tokenizer.json; the vocabularies are padded from it
type=Q4_K_M
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# make NAME VOCAB gen_model.py-ARGS...: $cache/NAME-q4_k_m.gguf unless it is there
make_file() {
	local name=$1 vocab=$2 file=$cache/$1-${type,,}.gguf
	shift 2
	[ -f "$file" ] && return 0
	echo "making $file" >&2
	$PY "$repo/test/tools/gen_model.py" "$work/$name" "$@" --tokenizer-from "$tok" \
		--pad-vocab $((vocab - tok_ids)) --seed 7 --no-weights >/dev/null
	$PY "$repo/bench/hybrid_gguf.py" "$work/$name" "$work/$name-f16.gguf" --seed 7 >&2
	"$bin/llama-quantize" "$work/$name-f16.gguf" "$file.part" "$type" 2 >"$work/quantize.log" 2>&1 ||
		{ tail -5 "$work/quantize.log" >&2; rm -f "$file.part"; exit 1; }
	rm -f "$work/$name-f16.gguf"
	mv "$file.part" "$file"
}
make_file qwen3.5-0.8b-shapes 248320 --family qwen3_5 --hidden 1024 --layers 24 --heads 8 \
	--kv-heads 2 --head-dim 256 --linear-k-heads 16 --linear-v-heads 16 --linear-key-dim 128 \
	--linear-value-dim 128 --conv-kernel 4 --full-attention-interval 4 \
	--partial-rotary-factor 0.25 --intermediate 3584 --max-pos 262144
make_file qwen3-0.6b-shapes 151936 --family qwen3 --hidden 1024 --layers 28 --heads 16 \
	--kv-heads 8 --head-dim 128 --intermediate 3072 --max-pos 40960
hybrid=$cache/qwen3.5-0.8b-shapes-${type,,}.gguf
dense=$cache/qwen3-0.6b-shapes-${type,,}.gguf

echo "## cache memory per sequence (computed from the files' keys, not measured)"
$PY "$repo/bench/hybrid_memory.py" --context "${CONTEXT:-4096}" --budget-gib "${BUDGET_GIB:-4}" \
	"$hybrid" "$dense"
echo
case "$what" in
	hybrid) "$repo/bench/gguf_bench.sh" "$bin" "$reps" "$hybrid" ;;
	both) "$repo/bench/gguf_bench.sh" "$bin" "$reps" "$hybrid" "$dense" ;;
	memory) ;;
esac
