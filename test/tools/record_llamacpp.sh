#!/usr/bin/env bash
# test/tools/record_llamacpp.sh: record llama.cpp's answers on the real models into
# test/data/real/MODEL/{greedy,tokenize,perplexity}.json (test/tools/record_llamacpp.py says
# what each holds).  Run once, by hand, when the models, the prompts or the texts change; the
# files are committed and test/real_models_test.py compares cbllm against them without
# llama.cpp.
#
# usage: test/tools/record_llamacpp.sh
# Builds llama.cpp from the llama-cpp-python sdist (test/tools/build_llamacpp.sh, cached) and
# fetches the models (test/tools/fetch_models.sh, cached).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(test/tools/build_llamacpp.sh | tail -1)
mapfile -t files < <(test/tools/fetch_models.sh smollm2-135m-instruct-q4_1 gemma3-270m-q4_k_m)
/usr/bin/python3 test/tools/record_llamacpp.py --bin "$bin" \
	--version "llama.cpp vendored in llama-cpp-python 0.3.36 (sdist sha256 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e)" \
	--model "smollm2-135m-instruct-q4_1=${files[0]}" --model "gemma3-270m-q4_k_m=${files[1]}"
