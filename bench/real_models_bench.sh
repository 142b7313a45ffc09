#!/usr/bin/env bash
# bench/real_models_bench.sh: cbllm against llama.cpp on the two real GGUF files of
# test/data/real (SmolLM2-135M-Instruct Q4_1, Gemma-3 270M Q4_K_M), through bench/gguf_bench.sh:
# decode at batch 1 and 8 (a 128-token context, 32 new tokens), a 512-token prefill, peak RSS,
# 2 threads, REPS runs of each one right after the other, medians printed.
#
# usage: bench/real_models_bench.sh [REPS]      (default 3)
# The models come from test/tools/fetch_models.sh and llama.cpp from test/tools/build_llamacpp.sh
# (both cached).  Run it on a quiet machine.
set -euo pipefail
reps=${1:-3}
cd "$(dirname "$0")/.."
make -s all
bin=$(test/tools/build_llamacpp.sh | tail -1)
mapfile -t files < <(test/tools/fetch_models.sh)
echo "# machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
THREADS=${THREADS:-2} CTX=128 GEN=32 BATCHES=1,8 bench/gguf_bench.sh "$bin" "$reps" "${files[@]}"
