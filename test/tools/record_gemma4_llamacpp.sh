#!/usr/bin/env bash
# test/tools/record_gemma4_llamacpp.sh: record llama.cpp's greedy answers on Gemma 4 (gemma4)
# GGUF files, the reference a test holds cbllm to (run once, by hand; CI reads what it wrote).
# llama.cpp comes from test/tools/build_llamacpp.sh.
#
# The files (test/tools/gen_model.py --family gemma4 checkpoints, 8 layers: sliding, sliding,
# full, ... with the last full, written as GGUF by test/tools/hf_to_gguf.py):
#   gemma4-e-f32     E2B-style, the released layout (Gemma4ForConditionalGeneration): sliding
#                    head_dim 16 and full 32, window 4, proportional RoPE on a quarter of the
#                    full heads, per-layer embeddings (PLE) of 8, the last 2 layers KV-shared
#                    with the double-wide MLP, soft-capping 10
#   gemma4-moe-f32   26B-A4B-style, the flat Gemma4ForCausalLM layout: attention_k_eq_v with 1
#                    global kv head, 4 experts of which 2 chosen beside the dense MLP, no PLE
#   gemma4-wide-f32  E2B-style, 256 wide (head_dim 64 and 128), 4 layers (sliding, sliding,
#                    full, full; the last KV-shared), 2 heads and 1 kv head, untied, for K-quants
#   gemma4-wide-q8_0, -q4_k_m  that one quantized by llama.cpp's llama-quantize, kept in
#                    test/data/llamacpp-gemma4/
# llama.cpp reuses the KV cache of layer L - n - 2 for shared sliding layers and L - n - 1 for
# shared full ones (n = num_kv_shared_layers), so those two must be sliding and full: HF's rule
# (the last non-shared layer of the same type) then picks the same layers.
# The F32 files CI makes again, bit for bit, from the same seeds.  For each file, three prompts:
# greedy.jsonl gets one line per file and prompt, {"model", "prompt", "ids", "margins"}.
# Then the F32 files' ids are compared with test/tools/reference.py's: exit status 1 if any differs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
out=$repo/test/data/llamacpp-gemma4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
gen() { $PY "$repo/test/tools/gen_model.py" "$work/$1" --family gemma4 "${@:2}" >/dev/null; }
common=(--layers 8 --heads 4 --kv-heads 2 --sliding-window 4 --sliding-window-pattern 3 --vocab 400)
gen gemma4-e "${common[@]}" --hidden 64 --head-dim 16 --global-head-dim 32 --kv-shared-layers 2 \
	--ple-dim 8 --double-wide-mlp --intermediate 96 --softcap 10 --seed 41
gen gemma4-moe "${common[@]}" --hidden 64 --head-dim 16 --global-head-dim 32 --k-eq-v \
	--global-kv-heads 1 --experts 4 --experts-used 2 --moe-intermediate 32 --intermediate 96 \
	--causal-lm --seed 43
gen gemma4-wide --layers 4 --heads 2 --kv-heads 1 --sliding-window 4 --sliding-window-pattern 3 \
	--vocab 400 --hidden 256 --head-dim 64 --global-head-dim 128 --kv-shared-layers 1 \
	--ple-dim 32 --double-wide-mlp --intermediate 256 --softcap 10 --untied --seed 47
for m in gemma4-e gemma4-moe gemma4-wide; do
	$PY "$repo/test/tools/hf_to_gguf.py" --type f32 "$work/$m" "$work/$m-f32.gguf"
done
for ty in q8_0 q4_k_m; do
	"$bin/llama-quantize" "$work/gemma4-wide-f32.gguf" "$out/gemma4-wide-$ty.gguf" \
		"${ty^^}" 2 >"$work/quantize.log" 2>&1 || { tail -5 "$work/quantize.log"; exit 1; }
done
prompts='[1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]
[1, 300, 12, 77, 5]
[1, 42, 42, 180, 99, 3, 250, 61, 128, 7, 15, 267, 200, 31, 8, 390, 2, 11]'
: >"$out/greedy.jsonl"
for m in gemma4-e-f32 gemma4-moe-f32 gemma4-wide-f32 gemma4-wide-q8_0 gemma4-wide-q4_k_m; do
	f=$work/$m.gguf
	[ -f "$f" ] || f=$out/$m.gguf
	paste -d'\t' <(echo "$prompts") <(echo "$prompts" | "$bin/cbllm-llamacpp-record" greedy "$f" 16 2 2>/dev/null) |
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
