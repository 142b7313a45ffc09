#!/usr/bin/env bash
# bench/moe_rss.sh: what a whole Qwen3-30B-A3B Q4_K_M file costs in memory: a file of its
# geometry (48 layers, hidden 2048, 128 experts of width 768, 8 per token, its 151936-token
# vocabulary) written by bench/moe_gguf.py --q4-k-m-bytes directly in Q4_K_M's types with
# random blocks (about 18.4 GB, the size of the released file), then cbllm's peak resident
# memory (GNU time) loading it and decoding at batch 1 and 8, beside the file's size, and
# llama.cpp's on the same file.  Random blocks: the figures are memory and speed, not text.
# The file is removed afterwards unless KEEP=1.
#
# usage: bench/moe_rss.sh [LAYERS]        (48 by default; llama.cpp from test/tools/build_llamacpp.sh)
set -euo pipefail
layers=${1:-48}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}/bench
PY=/usr/bin/python3
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
mkdir -p "$cache"
cfg=$(mktemp -d)
file=$cache/qwen3-30b-a3b-shapes-${layers}l-q4_k_m-bytes.gguf
trap 'rm -rf "$cfg"; [ -n "${KEEP:-}" ] || rm -f "$file"' EXIT
$PY "$repo/test/tools/gen_model.py" "$cfg/qwen3-a3b" --family qwen3_moe --hidden 2048 --heads 32 \
	--kv-heads 4 --head-dim 128 --experts 128 --experts-used 8 --moe-intermediate 768 \
	--intermediate 6144 --max-pos 4096 --layers "$layers" --seed 7 --no-weights \
	--tokenizer-from "$repo/test/data/tokenizers/qwen3" >/dev/null
[ -f "$file" ] || $PY "$repo/bench/moe_gguf.py" "$cfg/qwen3-a3b" "$file" --q4-k-m-bytes
echo "## $(basename "$file"): $(du -m "$file" | cut -f1) MB, $(free -m | awk '/^Mem:/ {print $2}') MB of memory"
/usr/bin/time -v "$repo/bin/cbllm-cli" bench-steps -m "$file" --threads "${THREADS:-2}" --batch 1,8 \
	--context 32 --steps 8 --prefill 64 >"$cfg/c.out" 2>"$cfg/c.time"
grep -E '^(1|8) |^prefill|weights' "$cfg/c.out" || true
awk '/Maximum resident set size/ {printf "cbllm peak RSS: %.0f MB\n", $NF / 1024}' "$cfg/c.time"
/usr/bin/time -v "$bin/llama-batched-bench" -m "$file" -t "${THREADS:-2}" -c 1024 -b 512 -ub 512 \
	-npp 32 -ntg 8 -npl 1,8 >"$cfg/l.out" 2>"$cfg/l.time" || echo "llama.cpp failed: $(tail -2 "$cfg/l.time")"
grep -E '^\|' "$cfg/l.out" | tail -3 || true
awk '/Maximum resident set size/ {printf "llama.cpp peak RSS: %.0f MB\n", $NF / 1024}' "$cfg/l.time"
