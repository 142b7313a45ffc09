#!/usr/bin/env bash
# bench/moe_bench.sh: cbllm against llama.cpp on a mixture of experts with Qwen3-30B-A3B's layer
# shapes (hidden 2048, 32 query heads over 4 KV heads of 128, 128 experts of width 768, 8 per
# token) and fewer layers (LAYERS, default 4) and a smaller vocabulary (8000), so that the experts
# dominate as in the 48-layer model: random F16 weights (bench/moe_gguf.py) made Q4_K_M by
# llama.cpp's own llama-quantize, cached in ~/.cache/cbllm/bench.  Then bench/gguf_bench.sh on
# the file (decode at batch 1, 8 and 32, a 512-token prefill, REPS runs each, medians), and
# cbllm's count of experts read per decode step against a read per token (bench-steps).
#
# usage: bench/moe_bench.sh [REPS]      (llama.cpp from test/tools/build_llamacpp.sh)
set -euo pipefail
reps=${1:-3}
layers=${LAYERS:-4}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}/bench
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
name=qwen3-a3b-shapes-${layers}l
file=$cache/$name-q4_k_m.gguf
mkdir -p "$cache"
if [ ! -f "$file" ]; then
	cfg=$(mktemp -d)
	trap 'rm -rf "$cfg"' EXIT
	$PY "$repo/test/tools/gen_model.py" "$cfg/$name" --family qwen3_moe --hidden 2048 --layers "$layers" \
		--heads 32 --kv-heads 4 --head-dim 128 --experts 128 --experts-used 8 --moe-intermediate 768 \
		--intermediate 6144 --vocab 8000 --seed 7 --max-pos 4096 --no-weights >/dev/null
	$PY "$repo/bench/moe_gguf.py" "$cfg/$name" "$cfg/$name-f16.gguf"
	"$bin/llama-quantize" "$cfg/$name-f16.gguf" "$file.part" Q4_K_M 2 >"$cfg/quantize.log" 2>&1 ||
		{ tail -5 "$cfg/quantize.log"; exit 1; }
	mv "$file.part" "$file"
fi
"$repo/bench/gguf_bench.sh" "$bin" "$reps" "$file"
echo "## experts read per decode step (cbllm)"
"$repo/bin/cbllm-cli" bench-steps -m "$file" --threads "${THREADS:-2}" --batch 1,8,32 --context 64 \
	--steps 16 --prefill 512 | grep '^# batch'
