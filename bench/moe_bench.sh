#!/usr/bin/env bash
# bench/moe_bench.sh: cbllm against llama.cpp on mixtures of experts with real models' layer
# shapes and fewer layers (LAYERS, default 4) and a smaller vocabulary (8000), so that the
# experts dominate as in the full models; random F16 weights (bench/moe_gguf.py) quantized by
# llama.cpp's own llama-quantize, cached in ~/.cache/cbllm/bench:
#   qwen3    Qwen3-30B-A3B's shapes (hidden 2048, 32 query heads over 4 KV heads of 128, 128
#            experts of width 768, 8 per token) as Q4_K_M;
#   gpt-oss  gpt-oss-20b's (hidden 2880, 64 query heads over 8 KV heads of 64, 32 experts of
#            width 2880, 4 per token, attention sinks, biases, alternating 128-token windows) as
#            MXFP4_MOE (MXFP4 experts, the rest Q8_0), as the released file has it.
# Then bench/gguf_bench.sh on the file (decode at batch 1, 8 and 32, a 512-token prefill, REPS
# runs each, medians), and cbllm's count of experts read per decode step against a read per
# token (bench-steps).
#
# usage: bench/moe_bench.sh [REPS] [qwen3|gpt-oss]     (llama.cpp from test/tools/build_llamacpp.sh)
set -euo pipefail
reps=${1:-3}
which=${2:-qwen3}
layers=${LAYERS:-4}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}/bench
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
case "$which" in
	qwen3)
		name=qwen3-a3b-shapes-${layers}l type=Q4_K_M
		args=(--family qwen3_moe --hidden 2048 --heads 32 --kv-heads 4 --head-dim 128 --experts 128
			--experts-used 8 --moe-intermediate 768 --intermediate 6144 --max-pos 4096) ;;
	gpt-oss)
		name=gpt-oss-20b-shapes-${layers}l type=MXFP4_MOE
		args=(--family gpt_oss --hidden 2880 --heads 64 --kv-heads 8 --head-dim 64 --experts 32
			--experts-used 4 --intermediate 2880 --sliding-window 128 --rope-scaling
			'{"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false}') ;;
	*) echo "usage: bench/moe_bench.sh [REPS] [qwen3|gpt-oss]" >&2; exit 2 ;;
esac
file=$cache/$name-${type,,}.gguf
mkdir -p "$cache"
if [ ! -f "$file" ]; then
	cfg=$(mktemp -d)
	trap 'rm -rf "$cfg"' EXIT
	$PY "$repo/test/tools/gen_model.py" "$cfg/$name" "${args[@]}" --layers "$layers" --vocab 8000 \
		--seed 7 --no-weights >/dev/null
	$PY "$repo/bench/moe_gguf.py" "$cfg/$name" "$cfg/$name-f16.gguf"
	"$bin/llama-quantize" "$cfg/$name-f16.gguf" "$file.part" "$type" 2 >"$cfg/quantize.log" 2>&1 ||
		{ tail -5 "$cfg/quantize.log"; exit 1; }
	mv "$file.part" "$file"
fi
"$repo/bench/gguf_bench.sh" "$bin" "$reps" "$file"
echo "## experts read per decode step (cbllm)"
"$repo/bin/cbllm-cli" bench-steps -m "$file" --threads "${THREADS:-2}" --batch 1,8,32 --context 64 \
	--steps 16 --prefill 512 | grep '^# batch'
