#!/usr/bin/env bash
# test/tools/record_hybrid_llamacpp.sh: record llama.cpp's greedy answers on Qwen3.5 (qwen35:
# Gated DeltaNet and gated full-attention layers) GGUF files, the reference a test holds cbllm
# to (run once, by hand; CI reads what it wrote).  llama.cpp comes from
# test/tools/build_llamacpp.sh.
#
# The files (test/tools/gen_model.py --family qwen3_5 checkpoints, 3 linear-attention layers and
# 1 full-attention layer each, written as GGUF by test/tools/hf_to_gguf.py):
#   qwen35-f32           the released layout (Qwen3_5ForConditionalGeneration), 2 key heads and
#                        4 value heads (the value heads reordered for llama.cpp), tied
#   qwen35-causal-f32    the flat Qwen3_5ForCausalLM layout, 4 key and 4 value heads, untied
#   qwen35-wide-f32      256 wide so that K-quants apply, 2 key and 4 value heads of 64
#   qwen35-wide-q8_0, -q4_k_m  that one quantized by llama.cpp's own llama-quantize, kept in
#                        test/data/llamacpp-hybrid/ (CI cannot quantize as llama.cpp)
# The F32 files CI makes again, bit for bit, from the same seeds.  For each file, four prompts
# (the last 60 tokens long: with its 16 tokens, over two chunks of cbllm's chunked delta rule):
# test/data/llamacpp-hybrid/greedy.jsonl gets one line per file and prompt,
# {"model", "prompt", "ids", "margins"}: llama.cpp's 16 greedy ids and its top-2 logit margins.
# Then the F32 files' ids are compared with test/tools/reference.py's (float64, from the
# checkpoints): the exit status is 1 when any differs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
out=$repo/test/data/llamacpp-hybrid
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
gen() { $PY "$repo/test/tools/gen_model.py" "$work/$1" --family qwen3_5 "${@:2}" >/dev/null; }
small=(--hidden 64 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 --linear-key-dim 16
	--linear-value-dim 16 --intermediate 160 --vocab 400)
gen qwen35 "${small[@]}" --linear-k-heads 2 --linear-v-heads 4 --seed 65
gen qwen35-causal "${small[@]}" --linear-k-heads 4 --linear-v-heads 4 --causal-lm --untied --seed 69
gen qwen35-wide --hidden 256 --layers 4 --heads 4 --kv-heads 2 --head-dim 64 --linear-k-heads 2 \
	--linear-v-heads 4 --linear-key-dim 64 --linear-value-dim 64 --intermediate 256 --vocab 400 \
	--seed 74
for m in qwen35 qwen35-causal qwen35-wide; do
	$PY "$repo/test/tools/hf_to_gguf.py" --type f32 "$work/$m" "$work/$m-f32.gguf"
done
for ty in q8_0 q4_k_m; do
	"$bin/llama-quantize" "$work/qwen35-wide-f32.gguf" "$out/qwen35-wide-$ty.gguf" \
		"${ty^^}" 2 >"$work/quantize.log" 2>&1 || { tail -5 "$work/quantize.log"; exit 1; }
done
prompts='[1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]
[1, 300, 12, 77, 5]
[1, 42, 42, 180, 99, 3, 250, 61, 128, 7, 15, 267, 200, 31, 8, 390, 2, 11]
[1, 133, 252, 371, 100, 219, 338, 67, 186, 305, 34, 153, 272, 391, 120, 239, 358, 87, 206, 325, 54, 173, 292, 21, 140, 259, 378, 107, 226, 345, 74, 193, 312, 41, 160, 279, 8, 127, 246, 365, 94, 213, 332, 61, 180, 299, 28, 147, 266, 385, 114, 233, 352, 81, 200, 319, 48, 167, 286, 15]'
: >"$out/greedy.jsonl"
for m in qwen35-f32 qwen35-causal-f32 qwen35-wide-f32 qwen35-wide-q8_0 qwen35-wide-q4_k_m; do
	f=$work/$m.gguf
	[ -f "$f" ] || f=$out/$m.gguf
	paste -d'\t' <(echo "$prompts") <(echo "$prompts" | "$bin/cbllm-llamacpp-record" greedy "$f" 16 2) |
		while IFS=$'\t' read -r p r; do
			$PY -c 'import json, sys; r = json.loads(sys.argv[3]); print(json.dumps({"model": sys.argv[1], "prompt": json.loads(sys.argv[2]), "ids": r["ids"], "margins": r["margins"]}))' \
				"$m" "$p" "$r"
		done >>"$out/greedy.jsonl"
done
echo "recorded $(wc -l <"$out/greedy.jsonl") answers in $out"
# the F32 files against the float64 reference
bad=0
while IFS=$'\t' read -r m p ids; do
	ref=$($PY "$repo/test/tools/reference.py" "$work/${m%-f32}" --greedy 16 --prompt-ids "$p")
	if [ "$ref" = "$ids" ]; then
		echo "$m [$p]: llama.cpp = reference.py"
	else
		echo "$m [$p]: llama.cpp $ids, reference.py $ref" >&2
		bad=1
	fi
done < <($PY -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["model"].endswith("-f32"):
        print("%s\t%s\t%s" % (r["model"], " ".join(map(str, r["prompt"])), " ".join(map(str, r["ids"]))))' \
	"$out/greedy.jsonl")
exit $bad
