#!/usr/bin/env bash
# test/gpu/check.sh: the checks that need an NVIDIA GPU, as one script for a
# machine that has one: build with CUDA, then run every CUDA kernel against
# the CPU on random inputs (test/unit/test_cuda_ops.c).  It grows with the
# CUDA backend (greedy generation on both backends, the reference workload).
set -eu
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
make -s CUDA=1 build/test/test_cuda_ops
build/test/test_cuda_ops
