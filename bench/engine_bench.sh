#!/usr/bin/env bash
# engine_bench.sh: the engine-core figures on this machine: memory read
# bandwidth and FP32 FMA peak (bench/probe_*.c), then cbllm-cli bench on a
# generated ~130M-parameter model (hidden 768, 12 layers, vocab 32000) in F32
# and BF16 (cbllm-cli bench-steps): decode tokens/s at batch 1, 8, 32 and prefill tokens/s.
#
# usage: bench/engine_bench.sh [WORKDIR] [RUNS]   (default build/bench, 3 runs each)
set -eu
cd "$(dirname "$0")/.."
work=${1:-build/bench}
runs=${2:-3}
threads=$(nproc)
mkdir -p "$work"
make -s all
gcc -O2 -pthread bench/probe_membw.c -o "$work/probe_membw"
gcc -O3 -pthread bench/probe_fma.c -o "$work/probe_fma"
for dt in f32 bf16; do
	[ -f "$work/m130-$dt/config.json" ] ||
		/usr/bin/python3 test/tools/gen_model.py "$work/m130-$dt" --hidden 768 --layers 12 \
			--heads 12 --kv-heads 12 --intermediate 2048 --dtype $dt --max-pos 4096 \
			--tokenizer-from test/data/llama2-tokenizer >/dev/null
done
echo "# machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for r in $(seq "$runs"); do
	"$work/probe_membw" "$threads"
	"$work/probe_fma" "$threads"
done
for dt in f32 bf16; do
	for r in $(seq "$runs"); do
		bin/cbllm-cli bench-steps -m "$work/m130-$dt" --batch 1,8,32 --context 64 --steps 24 \
			--prefill 256 --threads "$threads"
	done
done
