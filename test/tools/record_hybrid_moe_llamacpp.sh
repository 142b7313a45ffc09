#!/usr/bin/env bash
# test/tools/record_hybrid_moe_llamacpp.sh: record llama.cpp's greedy answers on Qwen3.5-MoE
# (qwen35moe: Gated DeltaNet and gated full-attention layers, every MLP a sparse block of routed
# experts plus a gated shared expert) GGUF files, the reference a test holds cbllm to (run once,
# by hand; CI reads what it wrote).  llama.cpp comes from test/tools/build_llamacpp.sh.
#
# The files (test/tools/gen_model.py --family qwen3_5_moe checkpoints, 3 linear-attention layers
# and 1 full-attention layer each, written as GGUF by test/tools/hf_to_gguf.py):
#   qwen35moe-f32         the released layout (Qwen3_5MoeForConditionalGeneration), 2 key heads
#                         and 4 value heads (the value heads reordered for llama.cpp), 8 experts
#                         of 32, 2 chosen, a shared expert of 48
#   qwen35moe-mtp-f32     that checkpoint written with --mtp: its multi-token-prediction head as
#                         a fifth block (blk.4.nextn.* and the MTP layer's attention and experts,
#                         block_count 5, qwen35moe.nextn_predict_layers 1), as llama.cpp's own
#                         converter writes the released files; llama.cpp must answer as without
#   qwen35moe-fused-f32   that checkpoint with the experts' gate and up as one ffn_gate_up_exps
#                         (hf_to_gguf.py --fuse-gate-up-exps, llama.cpp's --fuse-gate-up-exps)
#   qwen35moe-causal-f32  the flat Qwen3_5MoeForCausalLM layout, 4 key and 4 value heads, 6
#                         experts of 24, 3 chosen, a shared expert of 40
#   qwen35-mtp-f32        the dense Qwen3.5 checkpoint of test/data/llamacpp-hybrid's qwen35-f32
#                         (the same arguments and seed) written with --mtp
#   qwen35moe-wide-f32    256 wide so that K-quants apply to most matrices, 2 key and 4 value
#                         heads of 64, 8 experts of 32, 2 chosen, a shared expert of 64
#   qwen35moe-wide-q8_0, -q4_k_m  that one quantized by llama.cpp's own llama-quantize, kept in
#                         test/data/llamacpp-hybrid-moe/ (CI cannot quantize as llama.cpp)
# The F32 files CI makes again, bit for bit, from the same seeds.  For each file, three prompts:
# test/data/llamacpp-hybrid-moe/greedy.jsonl gets one line per file and prompt,
# {"model", "prompt", "ids", "margins"}: llama.cpp's 16 greedy ids and its top-2 logit margins.
# Then the F32 files' ids are compared with test/tools/reference.py's (float64, from the
# checkpoints), and reference.py's smallest router logit gap on each is printed: the exit status
# is 1 when any ids differ.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$("$repo/test/tools/build_llamacpp.sh" | tail -1)
PY=/usr/bin/python3
out=$repo/test/data/llamacpp-hybrid-moe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
gen() { $PY "$repo/test/tools/gen_model.py" "$work/$1" "${@:2}" >/dev/null; }
small=(--hidden 64 --layers 4 --heads 4 --kv-heads 2 --head-dim 32 --linear-key-dim 16
	--linear-value-dim 16 --vocab 400)
gen qwen35moe --family qwen3_5_moe "${small[@]}" --linear-k-heads 2 --linear-v-heads 4 \
	--experts 8 --experts-used 2 --moe-intermediate 32 --shared-intermediate 48 --seed 96
gen qwen35moe-causal --family qwen3_5_moe "${small[@]}" --linear-k-heads 4 --linear-v-heads 4 \
	--causal-lm --experts 6 --experts-used 3 --moe-intermediate 24 --shared-intermediate 40 \
	--seed 110
gen qwen35 --family qwen3_5 "${small[@]}" --intermediate 160 --linear-k-heads 2 \
	--linear-v-heads 4 --seed 65
gen qwen35moe-wide --family qwen3_5_moe --hidden 256 --layers 4 --heads 4 --kv-heads 2 \
	--head-dim 64 --linear-k-heads 2 --linear-v-heads 4 --linear-key-dim 64 \
	--linear-value-dim 64 --experts 8 --experts-used 2 --moe-intermediate 32 \
	--shared-intermediate 64 --vocab 400 --seed 106
conv() { $PY "$repo/test/tools/hf_to_gguf.py" --type f32 "$work/$1" "$work/$2.gguf" "${@:3}"; }
conv qwen35moe qwen35moe-f32
conv qwen35moe qwen35moe-mtp-f32 --mtp
conv qwen35moe qwen35moe-fused-f32 --fuse-gate-up-exps
conv qwen35moe-causal qwen35moe-causal-f32
conv qwen35 qwen35-mtp-f32 --mtp
conv qwen35moe-wide qwen35moe-wide-f32
for ty in q8_0 q4_k_m; do
	"$bin/llama-quantize" "$work/qwen35moe-wide-f32.gguf" "$out/qwen35moe-wide-$ty.gguf" \
		"${ty^^}" 2 >"$work/quantize.log" 2>&1 || { tail -5 "$work/quantize.log"; exit 1; }
done
prompts='[1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]
[1, 300, 12, 77, 5]
[1, 42, 42, 180, 99, 3, 250, 61, 128, 7, 15, 267, 200, 31, 8, 390, 2, 11]'
models=(qwen35moe-f32 qwen35moe-mtp-f32 qwen35moe-fused-f32 qwen35moe-causal-f32 qwen35-mtp-f32
	qwen35moe-wide-f32 qwen35moe-wide-q8_0 qwen35moe-wide-q4_k_m)
: >"$out/greedy.jsonl"
for m in "${models[@]}"; do
	f=$work/$m.gguf
	[ -f "$f" ] || f=$out/$m.gguf
	paste -d'\t' <(echo "$prompts") <(echo "$prompts" | "$bin/cbllm-llamacpp-record" greedy "$f" 16 2) |
		while IFS=$'\t' read -r p r; do
			$PY -c 'import json, sys; r = json.loads(sys.argv[3]); print(json.dumps({"model": sys.argv[1], "prompt": json.loads(sys.argv[2]), "ids": r["ids"], "margins": r["margins"]}))' \
				"$m" "$p" "$r"
		done >>"$out/greedy.jsonl"
done
echo "recorded $(wc -l <"$out/greedy.jsonl") answers in $out"
# the F32 files against the float64 reference on their checkpoints
checkpoint() { local c=${1%-f32}; c=${c%-mtp}; echo "${c%-fused}"; }
bad=0
while IFS=$'\t' read -r m p ids; do
	c=$(checkpoint "$m")
	margins=(--router-margins)
	[ "$c" != qwen35 ] || margins=()
	ref=$($PY "$repo/test/tools/reference.py" "$work/$c" --greedy 16 --prompt-ids "$p" \
		"${margins[@]}" 2>"$work/margins")
	gap=$(grep '^router min logit-gap' "$work/margins" || echo "router: none (dense)")
	if [ "$ref" = "$ids" ]; then
		echo "$m [$p]: llama.cpp = reference.py; ${gap#router }"
	else
		echo "$m [$p]: llama.cpp $ids, reference.py $ref; ${gap#router }" >&2
		bad=1
	fi
done < <($PY -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["model"].endswith("-f32"):
        print("%s\t%s\t%s" % (r["model"], " ".join(map(str, r["prompt"])), " ".join(map(str, r["ids"]))))' \
	"$out/greedy.jsonl")
exit $bad
