#!/usr/bin/env bash
# test/gpu/check.sh: every check that needs an NVIDIA GPU, as one script that
# finishes in under 8 minutes on one H200:
#
#   1. build with CUDA (sm_90 only, to save time; CUDA_ARCH overrides);
#   2. every CUDA kernel against the CPU on random inputs, graphs, dummy
#      weights (build/test/test_cuda_ops), device sampling
#      (build/test/test_cuda_sample), mixtures of experts (build/test/test_moe
#      --device cuda), hybrid models (build/test/test_hybrid --device cuda: the
#      linear attention's kernels and states on the device), Gemma 4
#      (build/test/test_gemma4 --device cuda: per-layer head sizes up to 512, KV
#      shared between layers, per-layer inputs, its experts); the quantized kernels
#      of every GGUF block type against the reference dequantizer
#      (build/test/test_cuda_quant), and a small llama in five of the types
#      against the float64 reference (build/test/test_model_gguf);
#   3. the engine on both backends on a tiny generated model: logits close,
#      greedy tokens equal for 16 steps, graphs on and off, swap, seeds, the
#      memory budget (build/test/test_engine_cuda), and the greedy ids side
#      by side from cbllm-cli;
#   3b. the layer families (Qwen2, Qwen3, Gemma-3) and the positional variants
#      (Llama-3, Phi-3 4k and 128k, YaRN, dynamic NTK, mixed windows, Gemma-3's
#      local layers) on the GPU against the float64 reference and the CPU
#      (build/test/test_families), and longrope's factor set per sequence, the
#      switch included, against the CPU (build/test/test_longrope);
#   4. the reference workload on Llama-2-7B geometry with dummy bf16 weights
#      made on the device, at concurrency 1, 4, 8, 16, 32, with the decode
#      step time beside the bandwidth floor (the measured copy bandwidth);
#      decode steps at fixed batch sizes 1, 8, 32 and one prefill; and
#      concurrency 1 without CUDA graphs, for their effect; then a shorter
#      run on Llama-3.1-8B geometry (GQA 32/8, vocab 128256, untied, llama3
#      RoPE scaling; max_position_embeddings 8192 to keep its tables small);
#   4b. a short workload (concurrency 1 and 16) and decode steps on
#      Qwen2.5-7B-Instruct's geometry (q, k, v biases, 28 query heads over 4
#      KV heads, a 152064-row lm_head);
#   4c. Llama-2-7B geometry as Q4_K_M (dummy weights quantized at load): decode
#      steps at batch 1, 8, 32 (the fused kernel, then bf16 tiles) and a
#      prefill, and a short workload at concurrency 1;
#   5. the same workload through HuggingFace transformers (a time budget per
#      level), and one table of both.
#
# usage: test/gpu/check.sh [OUT_DIR]     (default $OUT, else build/gpu-check)
#        CHECK_EMULATED=1 test/gpu/check.sh   rehearse it here without a GPU:
#            the emulated device, a tiny model instead of 7B, no transformers
#
# It needs nvcc, make, gcc and python3 with numpy; the libraries the build
# links (test/gpu/deps.txt: cJSON, PCRE2, utf8proc) come from the system or,
# where they are missing, from the Debian packages that test/gpu/fetch-deps.sh
# puts in .deps/ (test/gpu/rehearse.sh proves a build with none installed).  Each part runs even
# when an earlier one failed; the last line counts the parts that failed.
set -u
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-build/gpu-check}}
mkdir -p "$out"
log="$out/check.log"
exec > >(tee "$log") 2>&1
emulated=${CHECK_EMULATED:-0}
failed=()
PY=python3
$PY -c 'import numpy' 2>/dev/null || PY=/usr/bin/python3

part() { echo; echo "== $*  ($(date +%T))"; }
fail() { echo "FAILED: $*"; failed+=("$*"); }

part "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
nvcc --version | tail -2 || true
nproc

part "libraries"
# shellcheck source=test/gpu/deps.sh
. test/gpu/deps.sh
gpu_deps || fail "libraries"

part "build"
if [ "$emulated" = 1 ]; then
	make -s -j"$(nproc)" all build/emu/cbllm-cli || fail "build"
	cli=build/emu/cbllm-cli
	engine_prog=build/emu/cbllm-engine
	device_tests=(build/test/test_cuda_ops_emu build/test/test_engine_cuda_emu \
		build/test/test_families_emu build/test/test_cuda_quant_emu build/test/test_model_gguf_emu \
		build/test/test_longrope_emu build/test/test_cuda_sample_emu build/test/test_moe_emu \
		build/test/test_hybrid_emu build/test/test_gemma4_emu)
else
	make -s -j"$(nproc)" CUDA=1 CUDA_ARCH="${CUDA_ARCH:--gencode arch=compute_90,code=sm_90}" all || fail "build"
	cli=bin/cbllm-cli
	engine_prog=bin/cbllm-engine
	device_tests=(build/test/test_cuda_ops build/test/test_engine_cuda build/test/test_families \
		build/test/test_cuda_quant build/test/test_model_gguf build/test/test_longrope \
		build/test/test_cuda_sample build/test/test_moe build/test/test_hybrid build/test/test_gemma4)
fi

models=$(mktemp -d)
$PY test/tools/gen_model.py "$models/tiny" --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
	--intermediate 160 --vocab 400 --dtype bf16 --seed 1 >/dev/null || fail "tiny model"
$PY test/tools/gen_model.py "$models/tiny-dummy" --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
	--intermediate 160 --vocab 400 --no-weights >/dev/null || fail "tiny dummy model"

part "kernels against the CPU"
"${device_tests[0]}" | tee "$out/kernels.tap"
[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/kernels.tap" || fail "kernel checks"

part "device sampling against the distributions it must draw from"
"${device_tests[6]}" | tee "$out/sampling.tap"
[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/sampling.tap" || fail "sampling checks"

part "quantized kernels against the reference dequantizer"
"${device_tests[3]}" | tee "$out/quant_kernels.tap"
[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/quant_kernels.tap" || fail "quantized kernel checks"

part "quantized GGUF models on the GPU against the float64 reference on their dequantized weights"
$PY test/tools/gen_model.py "$models/llama256" --hidden 256 --layers 2 --heads 4 --kv-heads 2 \
	--intermediate 512 --vocab 400 --seed 41 >/dev/null || fail "llama256 model"
for ty in q8_0 q4_0 q4_k q5_k q6_k mxfp4; do
	mkdir -p "$models/llama256-$ty" &&
		$PY test/tools/hf_to_gguf.py --type "$ty" "$models/llama256" "$models/llama256-$ty/model.gguf" &&
		$PY test/tools/gguf_to_hf.py "$models/llama256-$ty/model.gguf" "$models/llama256-$ty.f32" &&
		$PY test/tools/reference.py "$models/llama256-$ty.f32" --logits \
			--prompt-ids "1 15 267 42 300 7 99 180 3 250 61 128" >"$models/llama256-$ty.logits" ||
		{ fail "llama256 $ty model"; continue; }
	"${device_tests[4]}" --type "$ty" llama "$models/llama256" "$models/llama256-$ty" \
		"$models/llama256-$ty.logits" cuda | tee "$out/gguf_$ty.tap"
	[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/gguf_$ty.tap" || fail "llama256 $ty checks"
done

part "engine on both backends"
"${device_tests[1]}" "$models/tiny" "$models/tiny-dummy" | tee "$out/engine.tap"
[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/engine.tap" || fail "engine checks"

part "the engine process on the GPU, through its channel"
build/test/test_engine_ipc "$engine_prog" "$models/tiny" cuda | tee "$out/engine_ipc.tap"
[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/engine_ipc.tap" || fail "engine process checks"

part "the layer families on the GPU: the float64 reference, then the CPU"
fam_ids="1 15 267 42 300 7 99 180 3 250 61 128"
# each: the name test_families knows it by, then gen_model.py's arguments (as test/run-tests)
fam_args=("qwen2 --family qwen2 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 11"
	"qwen3 --family qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --seed 12"
	"gemma3 --family gemma3 --hidden 80 --layers 5 --heads 4 --kv-heads 2 --head-dim 32 --query-pre-attn-scalar 24 --sliding-window 4 --sliding-window-pattern 3 --seed 13"
	"gemma3-bf16 --family gemma3 --dtype bf16 --hidden 80 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --query-pre-attn-scalar 24 --sliding-window-pattern 1 --seed 14"
	"llama3 --family llama3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 21"
	"phi3 --family phi3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 23"
	"phi3-128k --family phi3-128k --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 24"
	"qwen2-yarn --family qwen2 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 25 --max-pos 64 --rope-scaling {\"type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":16}"
	"qwen2-window --family qwen2 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 26 --sliding-window 5 --max-window-layers 1"
	"llama-dynamic --hidden 64 --layers 2 --heads 4 --kv-heads 2 --seed 27 --max-pos 64 --rope-scaling {\"type\":\"dynamic\",\"factor\":4.0}"
	"gemma3-local --family gemma3 --hidden 80 --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --query-pre-attn-scalar 24 --sliding-window 5 --sliding-window-pattern 2 --rope-scaling {\"rope_type\":\"linear\",\"factor\":8.0} --seed 28")
for a in "${fam_args[@]}"; do
	f=${a%% *}
	# shellcheck disable=SC2086
	$PY test/tools/gen_model.py "$models/$f" ${a#* } --intermediate 160 --vocab 400 >/dev/null &&
		$PY test/tools/reference.py "$models/$f" --logits --prompt-ids "$fam_ids" >"$models/$f.logits" &&
		$PY test/tools/reference.py "$models/$f" --greedy 16 --prompt-ids "$fam_ids" >"$models/$f.greedy" ||
		{ fail "$f model"; continue; }
	"${device_tests[2]}" "$f" "$models/$f" "$models/$f.logits" "$models/$f.greedy" cuda |
		tee "$out/families_$f.tap"
	[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/families_$f.tap" || fail "$f checks"
done

part "mixtures of experts on the GPU: the CPU's logits, and each prompt's tokens batched, chunked and swapped"
moe_args=("qwen3_moe --family qwen3_moe --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --experts 8 --experts-used 2 --moe-intermediate 32 --intermediate 160 --seed 51"
	"mixtral --family mixtral --hidden 64 --layers 2 --heads 4 --kv-heads 2 --experts 4 --experts-used 2 --intermediate 48 --seed 52")
for a in "${moe_args[@]}"; do
	f=${a%% *}
	# shellcheck disable=SC2086
	$PY test/tools/gen_model.py "$models/$f" ${a#* } --vocab 400 >/dev/null &&
		$PY test/tools/reference.py "$models/$f" --logits --prompt-ids "$fam_ids" >"$models/$f.logits" &&
		$PY test/tools/reference.py "$models/$f" --greedy 16 --prompt-ids "$fam_ids" >"$models/$f.greedy" ||
		{ fail "$f model"; continue; }
	"${device_tests[7]}" --device cuda "$f" "$models/$f" "$models/$f.logits" "$models/$f.greedy" |
		tee "$out/moe_$f.tap"
	[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/moe_$f.tap" || fail "$f checks"
done

part "hybrid models on the GPU (Qwen3.5 and Qwen3.5-MoE): the CPU's logits, and each prompt's tokens batched, chunked, swapped and recomputed"
hybrid_args=("qwen3_5 --family qwen3_5 --intermediate 160 --seed 71"
	"qwen3_5_moe --family qwen3_5_moe --experts 8 --experts-used 2 --moe-intermediate 32 --shared-intermediate 48 --seed 96")
for a in "${hybrid_args[@]}"; do
	f=${a%% *}
	# shellcheck disable=SC2086
	$PY test/tools/gen_model.py "$models/$f" ${a#* } --hidden 64 --layers 4 --heads 4 --kv-heads 2 \
		--head-dim 32 --linear-k-heads 2 --linear-v-heads 4 --linear-key-dim 16 --linear-value-dim 16 \
		--vocab 400 >/dev/null &&
		$PY test/tools/reference.py "$models/$f" --logits --prompt-ids "$fam_ids" >"$models/$f.logits" &&
		$PY test/tools/reference.py "$models/$f" --greedy 16 --prompt-ids "$fam_ids" >"$models/$f.greedy" ||
		{ fail "$f model"; continue; }
	"${device_tests[8]}" --device cuda "$models/$f" "$models/$f.logits" "$models/$f.greedy" "1 1 1 0" |
		tee "$out/hybrid_$f.tap"
	[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/hybrid_$f.tap" || fail "$f checks"
done

part "Gemma 4 on the GPU (E2B's layout with KV sharing and per-layer inputs; 26B-A4B's experts): the CPU's logits, and each prompt's tokens batched, chunked, swapped and recomputed"
g4_args=("gemma4-e --layers 8 --hidden 64 --global-head-dim 32 --kv-shared-layers 2 --ple-dim 8 --double-wide-mlp --softcap 10 --seed 41"
	"gemma4-moe --layers 8 --hidden 64 --global-head-dim 32 --k-eq-v --global-kv-heads 1 --experts 4 --experts-used 2 --moe-intermediate 32 --causal-lm --seed 43"
	"gemma4-e512 --layers 4 --hidden 128 --global-head-dim 512 --kv-shared-layers 1 --seed 44")
for a in "${g4_args[@]}"; do
	f=${a%% *}
	# shellcheck disable=SC2086
	$PY test/tools/gen_model.py "$models/$f" --family gemma4 ${a#* } --heads 4 --kv-heads 2 \
		--head-dim 16 --sliding-window 4 --sliding-window-pattern 3 --intermediate 96 --vocab 400 \
		--dtype bf16 >/dev/null || { fail "$f model"; continue; }
	"${device_tests[9]}" --device cuda "$models/$f" | tee "$out/gemma4_$f.tap"
	[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/gemma4_$f.tap" || fail "$f checks"
done

part "longrope's per-sequence factor set on the GPU: the float64 reference on the CPU, then the GPU against it"
$PY test/tools/gen_model.py "$models/phi3-longrope" --family phi3-128k --hidden 64 --layers 2 --heads 4 \
	--kv-heads 2 --intermediate 160 --vocab 400 --seed 24 >/dev/null &&
	$PY test/tools/decisive_model.py "$models/phi3-longrope" --signal 0.2 >/dev/null &&
	$PY test/tools/reference.py "$models/phi3-longrope" --greedy 16 --prompt-ids "1 15 267 42 300" \
		>"$models/phi3-longrope.short" &&
	$PY test/tools/reference.py "$models/phi3-longrope" --greedy 16 --prompt-ids "$fam_ids" \
		>"$models/phi3-longrope.long" || fail "phi3-longrope model"
"${device_tests[5]}" "$models/phi3-longrope" "$models/phi3-longrope.short" "$models/phi3-longrope.long" cuda |
	tee "$out/longrope.tap"
[ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q '^not ok' "$out/longrope.tap" || fail "longrope checks"

part "greedy tokens, CPU then GPU"
ids="1 15 267 42 300 7 99 180"
a=$(bin/cbllm-cli generate -m "$models/tiny" --prompt-ids "$ids" -n 16 --ids --device cpu)
b=$($cli generate -m "$models/tiny" --prompt-ids "$ids" -n 16 --ids --device cuda)
echo "cpu:  $a"
echo "cuda: $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "greedy tokens differ"

part "copy bandwidth"
bw=$($cli membw --device cuda | awk '/copy_bandwidth_GBps/ {print $2}')
echo "device copy bandwidth: ${bw:-?} GB/s (bytes read + written)"
[ -n "$bw" ] || { fail "bandwidth"; bw=4000; }

# the workload: 7B geometry on a GPU, a tiny model when rehearsing
if [ "$emulated" = 1 ]; then
	wl_model=$models/tiny-dummy
	wl=(--concurrency 1,4 --requests 6 --prompt-len 10..20 --gen-len 8..16)
	steps=(--batch 1,8 --context 16 --steps 4 --prefill 32)
	hf_budget=0
	l3_model=$models/tiny-dummy
	l3_wl=(--concurrency 1 --requests 2 --prompt-len 10..20 --gen-len 8..16)
	l3_steps=(--batch 1 --context 16 --steps 4 --prefill 32)
	# the 8B config is still written, so that its preparation is rehearsed too
	l3_config=$models/llama-3.1-8b-dummy
else
	l3_config=$models/llama-3.1-8b-dummy
	l3_model=$l3_config
	l3_wl=(--concurrency 1,8 --requests 16 --prompt-len 50..200 --gen-len 50..100)
	l3_steps=(--batch 1,8,32 --context 256 --steps 16 --prefill 512)
	wl_model=$models/llama-2-7b-dummy
	$PY test/tools/gen_model.py "$wl_model" --hidden 4096 --layers 32 --heads 32 --kv-heads 32 \
		--intermediate 11008 --vocab 32000 --max-pos 4096 --no-weights >/dev/null || fail "7B config"
	wl=(--concurrency 1,4,8,16,32 --requests 50 --prompt-len 50..200 --gen-len 100..500)
	steps=(--batch 1,8,32 --context 256 --steps 32 --prefill 512)
	hf_budget=${HF_BUDGET:-20}
fi
# Llama-3.1-8B: the tokenizer's 32000 ids padded to its vocabulary of 128256
$PY test/tools/gen_model.py "$l3_config" --hidden 4096 --layers 32 --heads 32 --kv-heads 8 \
	--intermediate 14336 --vocab 32000 --pad-vocab 96256 --max-pos 8192 --rope-theta 500000 \
	--rope-scaling '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
		"high_freq_factor": 4.0, "original_max_position_embeddings": 8192}' \
	--rms-eps 1e-5 --no-weights >/dev/null || fail "Llama-3.1-8B config"

part "cbllm: the reference workload, dummy bf16 weights on the device"
$cli bench -m "$wl_model" --device cuda --load-format dummy "${wl[@]}" --temp 0.7 --top-p 0.95 \
	--seed 1 --bandwidth "$bw" --json >"$out/cbllm.json" || fail "cbllm bench"
cat "$out/cbllm.json"

part "cbllm: decode steps at fixed batch sizes (context 256) and one prefill of 512 tokens"
$cli bench-steps -m "$wl_model" --device cuda --load-format dummy "${steps[@]}" || fail "bench-steps"

part "cbllm: concurrency 1 without CUDA graphs"
$cli bench -m "$wl_model" --device cuda --load-format dummy --no-cuda-graphs --concurrency 1 \
	--requests 5 "${wl[@]:4}" --temp 0.7 --top-p 0.95 --seed 1 --bandwidth "$bw" || fail "eager bench"

part "cbllm: Llama-3.1-8B geometry, dummy bf16 weights on the device"
$cli bench -m "$l3_model" --device cuda --load-format dummy "${l3_wl[@]}" --temp 0.7 --top-p 0.95 \
	--seed 1 --bandwidth "$bw" || fail "Llama-3.1-8B bench"
$cli bench-steps -m "$l3_model" --device cuda --load-format dummy "${l3_steps[@]}" ||
	fail "Llama-3.1-8B bench-steps"

part "cbllm: Qwen2.5-7B-Instruct geometry, dummy bf16 weights on the device"
if [ "$emulated" = 1 ]; then
	qwen_model=$models/qwen2-dummy
	$PY test/tools/gen_model.py "$qwen_model" --family qwen2 --hidden 64 --layers 2 --heads 4 \
		--kv-heads 2 --intermediate 160 --vocab 400 --no-weights --untied >/dev/null ||
		fail "Qwen2 dummy config"
	qwl=(--concurrency 1,4 --requests 6 --prompt-len 10..20 --gen-len 8..16)
	qsteps=(--batch 1,8 --context 16 --steps 4 --prefill 32)
else
	qwen_model=$models/qwen2.5-7b-dummy
	# the tokenizer's 151665 ids padded to vocab_size 152064, as the checkpoint pads them
	$PY test/tools/gen_model.py "$qwen_model" --family qwen2 --hidden 3584 --layers 28 --heads 28 \
		--kv-heads 4 --intermediate 18944 --vocab 151665 --pad-vocab 399 --max-pos 32768 \
		--no-weights --untied >/dev/null || fail "Qwen2.5-7B config"
	qwl=(--concurrency 1,16 --requests 16 --prompt-len 50..200 --gen-len 50..150)
	qsteps=(--batch 1,32 --context 256 --steps 32 --prefill 512)
fi
$cli bench -m "$qwen_model" --device cuda --load-format dummy "${qwl[@]}" --temp 0.7 --top-p 0.95 \
	--seed 1 --bandwidth "$bw" --json >"$out/cbllm_qwen2.json" || fail "Qwen2.5-7B bench"
cat "$out/cbllm_qwen2.json"
$cli bench-steps -m "$qwen_model" --device cuda --load-format dummy "${qsteps[@]}" ||
	fail "Qwen2.5-7B bench-steps"

part "cbllm: Llama-2-7B geometry as Q4_K_M (dummy weights quantized at load)"
# Q4_K layers, Q6_K for the lm_head and the favoured layers' attn_v and ffn_down
$cli bench-steps -m "$wl_model" --device cuda --load-format dummy --weight-format q4_k_m \
	"${steps[@]}" || fail "Q4_K_M bench-steps"
$cli bench -m "$wl_model" --device cuda --load-format dummy --weight-format q4_k_m \
	--concurrency 1 --requests 4 "${wl[@]:4}" --temp 0.7 --top-p 0.95 --seed 1 --bandwidth "$bw" ||
	fail "Q4_K_M bench"

part "transformers: the same workload"
if [ "$hf_budget" -gt 0 ]; then
	PYTHONUNBUFFERED=1 timeout 240 $PY test/gpu/hf_baseline.py "${wl[@]}" --time-budget "$hf_budget" \
		--bandwidth "$bw" --json >"$out/transformers.json" || fail "transformers baseline"
	cat "$out/transformers.json"
else
	$PY test/gpu/hf_baseline.py "${wl[@]}" --dry-run --fake-step-ms 1 --json >"$out/transformers.json" ||
		fail "transformers dry run"
	echo "(rehearsal: a fake transformers run)"
fi

part "table"
$PY bench/gpu_table.py "$out/cbllm.json" "$out/transformers.json" | tee "$out/table.md" || fail "table"

rm -rf "$models"
echo
if [ ${#failed[@]} -eq 0 ]; then
	echo "gpu check: all parts passed"
else
	echo "gpu check: ${#failed[@]} part(s) failed: ${failed[*]}"
fi
exit ${#failed[@]}
