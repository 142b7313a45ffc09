#!/usr/bin/env bash
# bench/gemma4_bench.sh: cbllm against llama.cpp on Gemma 4 at Gemma-4-E2B's whole text
# geometry, and what its KV sharing and per-layer head sizes make of the cache per token.
# Random F16 weights (bench/hybrid_gguf.py, laid out as test/tools/hf_to_gguf.py lays them
# out) quantized to Q4_K_M by llama.cpp's own llama-quantize, cached in ~/.cache/cbllm/bench
# (CBLLM_CACHE overrides the ~/.cache/cbllm):
#   gemma4-e2b-shapes  hidden 1536, 35 layers (every fifth full attention, the others sliding
#                      with a window of 512), 8 query heads over 1 KV head of 256 on sliding
#                      layers and 512 on full ones (proportional RoPE on a quarter), the last 20
#                      layers KV-shared with a double-wide MLP (12288; 6144 in the others),
#                      per-layer embeddings of 256, soft-capping 30, vocabulary 262144, tied.
# The vocabulary is Qwen3's tokenizer (test/data/tokenizers/qwen3, 151669 ids) padded with
# unused tokens to the model's rows: the benchmark feeds token ids, so only the rows matter.
#
# Prints the cache's bytes per token (computed from the geometry: cbllm's f16 cache holds the
# 15 layers that compute K and V, each at its own width, against all 35 layers at the widest
# width), then bench/gguf_bench.sh on the file (decode at batch 1, 8 and 32, a 512-token
# prefill, REPS runs each, medians).
#
# usage: bench/gemma4_bench.sh [REPS] [time|memory]
#   THREADS, BATCHES, CTX and GEN go to gguf_bench.sh.  llama.cpp from
#   test/tools/build_llamacpp.sh.
set -euo pipefail
reps=${1:-3}
what=${2:-time}
case "$what" in
	time | memory) ;;
	*) echo "usage: bench/gemma4_bench.sh [REPS] [time|memory]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}/bench
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
tok=$repo/test/data/tokenizers/qwen3
tok_ids=151669
vocab=262144
type=Q4_K_M
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
file=$cache/gemma4-e2b-shapes-${type,,}.gguf
if [ ! -f "$file" ]; then
	echo "making $file" >&2
	$PY "$repo/test/tools/gen_model.py" "$work/gemma4-e2b" --family gemma4 --hidden 1536 \
		--layers 35 --heads 8 --kv-heads 1 --head-dim 256 --global-head-dim 512 \
		--sliding-window 512 --sliding-window-pattern 5 --kv-shared-layers 20 --ple-dim 256 \
		--double-wide-mlp --intermediate 6144 --softcap 30 --max-pos 131072 \
		--tokenizer-from "$tok" --pad-vocab $((vocab - tok_ids)) --seed 7 --no-weights >/dev/null
	$PY "$repo/bench/hybrid_gguf.py" "$work/gemma4-e2b" "$work/gemma4-e2b-f16.gguf" --seed 7 >&2
	"$bin/llama-quantize" "$work/gemma4-e2b-f16.gguf" "$file.part" "$type" 2 >"$work/quantize.log" 2>&1 ||
		{ tail -5 "$work/quantize.log" >&2; rm -f "$file.part"; exit 1; }
	rm -f "$work/gemma4-e2b-f16.gguf"
	mv "$file.part" "$file"
fi

echo "## KV cache per token, f16 (computed from the geometry, not measured)"
# 35 layers, full every fifth; the first 15 compute K and V: 3 full (512), 12 sliding (256)
own=$(( (3 * 512 + 12 * 256) * 2 * 2 ))
all=$(( 35 * 512 * 2 * 2 ))
echo "cbllm: $own bytes (15 layers with K and V, each at its own head size); every layer at the widest: $all bytes ($(awk -v a="$all" -v o="$own" 'BEGIN {printf "%.1f", a / o}')x)"
echo
[ "$what" = time ] && "$repo/bench/gguf_bench.sh" "$bin" "$reps" "$file"
exit 0
