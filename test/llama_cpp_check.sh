#!/usr/bin/env bash
# test/llama_cpp_check.sh: cbllm against llama.cpp on GGUF files that llama.cpp's own
# llama-quantize writes (a reference check; llama.cpp is not a dependency and CI does not run it).
#
# usage: test/llama_cpp_check.sh LLAMA_BIN_DIR [WORK_DIR]
#   LLAMA_BIN_DIR holds llama-quantize and llama-server (built, for instance, from the source
#   of the npm package node-llama-cpp with cmake); cbllm is built (make).
#
# A llama checkpoint made by test/tools/gen_model.py (hidden 256, 4 layers, the synthetic
# Llama-2-shaped tokenizer) and made decisive by test/tools/decisive_model.py (a random model's
# two best logits are often closer than 8-bit activations' noise, so two correct engines part
# ways within a few tokens; trained models, and this one, are not so) is converted to an F32
# GGUF file by test/tools/hf_to_gguf.py and
# quantized by llama-quantize to Q8_0, Q4_0, Q6_K (--pure: every matrix that type), Q4_K_M and
# Q5_K_M (llama.cpp's mixes: Q4_K or Q5_K with Q6_K for some matrices and the output).  For
# each file:
#   - test_model_gguf --type (the --pure files): cbllm binds llama.cpp's file to the
#     checkpoint's configuration, tokenizer-independent metadata and tensors, each matrix within
#     its type's rounding of the checkpoint's values;
#   - cbllm's prompt logits against reference.py's float64 logits of the weights the file holds
#     (test/tools/gguf_to_hf.py dequantizes them independently of the engine), printed;
#   - cbllm's 16 greedy tokens (cbllm-cli generate --ids) against llama-server's (/completion
#     with the same prompt ids, top-k 1), on prompts whose 16 tokens hold no EOS (llama.cpp's
#     ignore_eos masks EOS out of the logits, cbllm's only keeps generating past it), with
#     reference.py's float64 greedy tokens on the file's weights beside them.
# Prints one "ok"/"not ok" line per check and "N passed, N failed" last.
set -uo pipefail
bin=${1:?usage: test/llama_cpp_check.sh LLAMA_BIN_DIR [WORK_DIR]}
work=${2:-$(mktemp -d /tmp/cbllm-llamacpp.XXXXXX)}
repo=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
cli="$repo/bin/cbllm-cli"
port=${LLAMA_PORT:-18080}
pass=0
fail=0
check() { # check COND_STATUS TEXT
	if [ "$1" = 0 ]; then echo "ok - $2"; pass=$((pass + 1)); else echo "not ok - $2"; fail=$((fail + 1)); fi
}
mkdir -p "$work"
cd "$repo" || exit 1

$PY test/tools/gen_model.py "$work/hf" --hidden 256 --layers 4 --heads 8 --kv-heads 4 \
	--intermediate 768 --vocab 512 --seed 77 >/dev/null &&
	$PY test/tools/decisive_model.py "$work/hf" || exit 1
$PY test/tools/hf_to_gguf.py "$work/hf" "$work/f32.gguf" || exit 1
prompts=("1 15 267 42 300 7 99 180 3 250 61 128" "1 400 401 402 5 6 7" "1 33 33 33 33 200 18"
	"1 77" "1 90 91 92 93 94 95 96 97 98 99 100 101 102 103 104 105 106 107 108")

for spec in Q8_0:pure Q4_0:pure Q6_K:pure Q4_K_M:mix Q5_K_M:mix; do
	ty=${spec%%:*}
	kind=${spec##*:}
	file="$work/$ty.gguf"
	if [ "$kind" = pure ]; then
		"$bin/llama-quantize" --pure "$work/f32.gguf" "$file" "$ty" >"$work/$ty.quantize.log" 2>&1
	else
		"$bin/llama-quantize" "$work/f32.gguf" "$file" "$ty" >"$work/$ty.quantize.log" 2>&1
	fi
	check $? "llama-quantize writes $ty"
	mkdir -p "$work/$ty.dir" && ln -sf "$file" "$work/$ty.dir/model.gguf"
	if [ "$kind" = pure ]; then
		lower=$(echo "$ty" | tr 'A-Z' 'a-z')
		out=$(build/test/test_model_gguf --type "$lower" llama "$work/hf" "$work/$ty.dir" 2>&1)
		st=$?
		echo "$out" | grep -E '^(not )?ok' | sed 's/^/#   /'
		check $st "$ty: cbllm binds llama-quantize's file to the checkpoint (test_model_gguf --type $lower)"
	fi
	# the float64 reference on the file's own weights, and cbllm's logits against it
	$PY test/tools/gguf_to_hf.py "$file" "$work/$ty.f32" &&
		$PY test/tools/reference.py "$work/$ty.f32" --logits --prompt-ids "${prompts[0]}" \
			>"$work/$ty.ref.logits" &&
		"$cli" logits -m "$file" --prompt-ids "${prompts[0]}" >"$work/$ty.cbllm.logits"
	check $? "$ty: cbllm and the reference give logits"
	err=$($PY - "$work/$ty.cbllm.logits" "$work/$ty.ref.logits" <<'EOF'
import sys, numpy as np
a = np.loadtxt(sys.argv[1], ndmin=2); b = np.loadtxt(sys.argv[2], ndmin=2).reshape(a.shape)
print("%.4f" % max(np.abs(a[i] - b[i]).max() / np.abs(b[i]).max() for i in range(len(a))))
EOF
)
	echo "#   $ty: cbllm's prompt logits against the float64 reference: worst row rel err $err"
	awk -v e="$err" 'BEGIN { exit !(e <= 0.04) }'
	check $? "$ty: cbllm's logits are within 4% of the reference on the file's weights ($err)"

	# greedy tokens against llama-server
	"$bin/llama-server" -m "$file" --port "$port" -t 2 -c 256 -np 1 --no-warmup \
		>"$work/$ty.server.log" 2>&1 &
	server=$!
	for _ in $(seq 1 100); do
		curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
		sleep 0.2
	done
	for p in "${prompts[@]}"; do
		ids_json="[$(echo "$p" | tr ' ' ',')]"
		theirs=$(curl -sf "http://127.0.0.1:$port/completion" -H 'Content-Type: application/json' \
			-d "{\"prompt\": $ids_json, \"n_predict\": 16, \"top_k\": 1, \"temperature\": 0,
			     \"cache_prompt\": false, \"return_tokens\": true}" |
			$PY -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["tokens"])))')
		ours=$("$cli" generate -m "$file" --prompt-ids "$p" -n 16 --temp 0 --ids |
			tr '\n' ' ' | sed 's/ *$//')
		ref=$($PY test/tools/reference.py "$work/$ty.f32" --greedy 16 --prompt-ids "$p" |
			tr '\n' ' ' | sed 's/ *$//')
		echo "#   $ty prompt [$p]"
		echo "#     llama.cpp: $theirs"
		echo "#     cbllm:     $ours"
		echo "#     float64:   $ref (reference.py on the file's dequantized weights)"
		[ "$(echo "$theirs" | wc -w)" = 16 ] && [ "$theirs" = "$ours" ]
		check $? "$ty: cbllm's 16 greedy tokens are llama.cpp's on prompt [$p]"
	done
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
