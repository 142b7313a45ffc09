#!/usr/bin/env bash
# bench/vs_llamacpp.sh: cbllm against llama.cpp on float weights (F32, F16, BF16), the same
# GGUF file for both, one run right after the other, REPS times (medians printed).
#
# usage: bench/vs_llamacpp.sh LLAMA_BIN_DIR [REPS] [WORKDIR]
#   LLAMA_BIN_DIR  llama.cpp's built tools (llama-batched-bench)
#   REPS           runs per file (default 3)
#   WORKDIR        where the generated model and its GGUF files go (default build/bench/vs)
#
# The model: a 134M-parameter Llama geometry with random weights (hidden 768, 12 layers,
# 12 heads, intermediate 2048, vocabulary 32000 with the Llama-2 tokenizer, untied), made by
# test/tools/gen_model.py and written as GGUF by test/tools/hf_to_gguf.py.  Decode at batch
# 1, 8 and 32 with a 128-token context and 64 new tokens (llama-batched-bench -npp 128 -ntg
# 64; cbllm-cli bench-steps --context 128 --steps 64), and a 512-token prefill, through
# bench/gguf_bench.sh.  The machine's read bandwidth and FMA peak (bench/probe_*.c) are
# printed first, so that a figure can be read as a share of either.
set -euo pipefail
bin=${1:?usage: bench/vs_llamacpp.sh LLAMA_BIN_DIR [REPS] [WORKDIR]}
reps=${2:-3}
cd "$(dirname "$0")/.."
work=${3:-build/bench/vs}
threads=${THREADS:-2}
mkdir -p "$work"
make -s all
gcc -O2 -pthread bench/probe_membw.c -o "$work/probe_membw"
gcc -O3 -pthread bench/probe_fma.c -o "$work/probe_fma"
[ -f "$work/m134/config.json" ] ||
	/usr/bin/python3 test/tools/gen_model.py "$work/m134" --hidden 768 --layers 12 --heads 12 \
		--kv-heads 12 --intermediate 2048 --dtype f32 --max-pos 4096 --seed 5 \
		--tokenizer-from test/data/tokenizers/llama2 >/dev/null
files=()
for ty in f32 f16 bf16; do
	[ -f "$work/m134-$ty.gguf" ] ||
		/usr/bin/python3 test/tools/hf_to_gguf.py --type "$ty" "$work/m134" "$work/m134-$ty.gguf" >/dev/null
	files+=("$work/m134-$ty.gguf")
done
echo "# machine: $(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $threads threads"
for r in $(seq "$reps"); do
	"$work/probe_membw" "$threads"
	"$work/probe_fma" "$threads"
done
THREADS=$threads CTX=128 GEN=64 bench/gguf_bench.sh "$bin" "$reps" "${files[@]}"
