#!/usr/bin/env bash
# test/tools/record_moe_llamacpp.sh: record llama.cpp's greedy answers on mixture-of-experts GGUF
# files, the reference test/moe_llamacpp_test.py holds cbllm to (run once, by hand; CI reads
# what it wrote).  llama.cpp comes from test/tools/build_llamacpp.sh.
#
# The files (all experts in every layer, as llama.cpp's qwen3moe requires):
#   qwen3_moe, mixtral          F32 files of test/run-tests' checkpoints (test/tools/hf_to_gguf.py;
#                               CI makes them again, bit for bit, from the same seeds)
#   qwen3_moe-wide-q8_0, -q4_k_m  the 256-wide one quantized by llama.cpp's own llama-quantize,
#                               kept in test/data/llamacpp-moe/ (CI cannot quantize as llama.cpp)
# Not gpt-oss: llama.cpp rounds its YaRN correction range, which its config says not to
# (truncate false), and so parts from the float64 reference (test_moe holds cbllm to that).
# For each, three prompts: test/data/llamacpp-moe/greedy.jsonl gets one line per file and prompt,
# {"model", "prompt", "ids", "margins"}: llama.cpp's 16 greedy ids and its top-2 logit margins.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
out=$repo/test/data/llamacpp-moe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gen() { $PY "$repo/test/tools/gen_model.py" "$work/$1" "${@:2}" >/dev/null; }
gen qwen3_moe --family qwen3_moe --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 \
	--experts 8 --experts-used 2 --moe-intermediate 32 --intermediate 160 --vocab 400 --seed 51
gen mixtral --family mixtral --hidden 64 --layers 2 --heads 4 --kv-heads 2 --experts 4 \
	--experts-used 2 --intermediate 48 --vocab 400 --seed 52
gen qwen3_moe-wide --family qwen3_moe --hidden 256 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 \
	--experts 4 --experts-used 2 --moe-intermediate 256 --intermediate 512 --vocab 400 --seed 58
for m in qwen3_moe mixtral qwen3_moe-wide; do
	$PY "$repo/test/tools/hf_to_gguf.py" --type f32 "$work/$m" "$work/$m-f32.gguf"
done
for ty in q8_0 q4_k_m; do
	"$bin/llama-quantize" "$work/qwen3_moe-wide-f32.gguf" "$out/qwen3_moe-wide-$ty.gguf" \
		"${ty^^}" 2 >"$work/quantize.log" 2>&1 || { tail -5 "$work/quantize.log"; exit 1; }
done
prompts='[1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]
[1, 300, 12, 77, 5]
[1, 42, 42, 180, 99, 3, 250, 61, 128, 7, 15, 267, 200, 31, 8, 390, 2, 11]'
: >"$out/greedy.jsonl"
for m in qwen3_moe-f32 mixtral-f32 qwen3_moe-wide-q8_0 qwen3_moe-wide-q4_k_m; do
	f=$work/$m.gguf
	[ -f "$f" ] || f=$out/$m.gguf
	paste -d'\t' <(echo "$prompts") <(echo "$prompts" | "$bin/cbllm-llamacpp-record" greedy "$f" 16 2) |
		while IFS=$'\t' read -r p r; do
			$PY -c 'import json, sys; r = json.loads(sys.argv[3]); print(json.dumps({"model": sys.argv[1], "prompt": json.loads(sys.argv[2]), "ids": r["ids"], "margins": r["margins"]}))' \
				"$m" "$p" "$r"
		done >>"$out/greedy.jsonl"
done
echo "recorded $(wc -l <"$out/greedy.jsonl") answers in $out"
