#!/usr/bin/env bash
# test/gpu/check.sh: the checks that need an NVIDIA GPU, as one script for a
# machine that has one: build with CUDA, then run every CUDA kernel against
# the CPU on random inputs (test/unit/test_cuda_ops.c).  It grows with the
# CUDA backend (greedy generation on both backends, the reference workload).
set -eu
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
make -s CUDA=1 all
model=$(mktemp -d)
/usr/bin/python3 test/tools/gen_model.py "$model" --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
	--intermediate 160 --vocab 400 --dtype bf16 --seed 1 >/dev/null || python3 test/tools/gen_model.py \
	"$model" --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 160 --vocab 400 --dtype bf16 --seed 1
build/test/test_cuda_ops "$model"
echo "== greedy tokens, CPU then GPU"
bin/cbllm-cli generate -m "$model" --prompt-ids "1 15 267 42 300 7 99 180" -n 16 --ids --device cpu
bin/cbllm-cli generate -m "$model" --prompt-ids "1 15 267 42 300 7 99 180" -n 16 --ids --device cuda
