#!/usr/bin/env bash
# test/tools/build_llamacpp.sh: build llama.cpp from the source distribution of
# llama-cpp-python (its vendor/llama.cpp is llama.cpp whole), as the reference that
# test/tools/record_llamacpp.sh records and the peer that bench/ measures.  llama.cpp is
# never a dependency of cbllm: CI only reads what was recorded from it.
#
# usage: test/tools/build_llamacpp.sh
#   CBLLM_CACHE (default ~/.cache/cbllm) holds pip/ (the downloaded sdist) and
#   llama.cpp-VERSION/ (src/, build/); a second run reuses both.
#
# Builds the shared libllama, llama-perplexity, llama-batched-bench, llama-tokenize and
# llama-quantize, then test/tools/llamacpp_record.c against the library.  Prints the folder
# holding the binaries on its last line.  Takes 10-15 minutes on 2 cores the first time.
# Exit status: 0 built; 3 the registry could not be reached; 1 anything else.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${CBLLM_CACHE:-$HOME/.cache/cbllm}
version=0.3.36
sdist=llama_cpp_python-$version.tar.gz
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
dest=$cache/llama.cpp-$version
jobs=${JOBS:-$(nproc)}
mkdir -p "$cache/pip" "$dest"

if [ ! -f "$cache/pip/$sdist" ]; then
	if ! python3 -m pip download -q --no-deps --no-binary :all: -d "$cache/pip" \
		"llama-cpp-python==$version" >"$dest/pip.log" 2>&1; then
		echo "could not download llama-cpp-python $version (network unreachable?): see $dest/pip.log" >&2
		exit 3
	fi
fi
got=$(sha256sum "$cache/pip/$sdist" | cut -d' ' -f1)
if [ "$got" != "$sdist_sha256" ]; then
	echo "$cache/pip/$sdist has sha256 $got, not the pinned $sdist_sha256" >&2
	exit 1
fi
if [ ! -f "$dest/src/CMakeLists.txt" ]; then
	rm -rf "$dest/src" "$dest/unpack" && mkdir -p "$dest/unpack"
	tar -xzf "$cache/pip/$sdist" -C "$dest/unpack" "llama_cpp_python-$version/vendor/llama.cpp"
	mv "$dest/unpack/llama_cpp_python-$version/vendor/llama.cpp" "$dest/src"
	rm -rf "$dest/unpack"
fi
# the CPU's instruction sets named one by one rather than GGML_NATIVE, leaving AMX out: a virtual
# machine may list AMX among its CPU flags and yet fault on its tile instructions (SIGILL), and
# -march=native would build them in
isa=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
flags=$(grep -m1 '^flags' /proc/cpuinfo)
for f in avx512f:GGML_AVX512 avx512vbmi:GGML_AVX512_VBMI avx512_vnni:GGML_AVX512_VNNI \
	avx512_bf16:GGML_AVX512_BF16 avx_vnni:GGML_AVX_VNNI; do
	if [[ " $flags " == *" ${f%%:*} "* ]]; then isa+=("-D${f##*:}=ON"); else isa+=("-D${f##*:}=OFF"); fi
done
cmake -S "$dest/src" -B "$dest/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON "${isa[@]}" \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
	-DLLAMA_BUILD_TESTS=OFF >"$dest/cmake.log" 2>&1 || { tail -20 "$dest/cmake.log" >&2; exit 1; }
cmake --build "$dest/build" -j"$jobs" --target llama llama-perplexity llama-batched-bench llama-tokenize llama-quantize \
	>"$dest/build.log" 2>&1 || { tail -20 "$dest/build.log" >&2; exit 1; }
bin=$dest/build/bin
gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I"$dest/src/include" -I"$dest/src/ggml/include" \
	"$repo/test/tools/llamacpp_record.c" -L"$bin" -lllama -lggml -lggml-base -lcjson -Wl,-rpath,"$bin" \
	-o "$bin/cbllm-llamacpp-record"
echo "llama.cpp of llama-cpp-python $version built in $bin" >&2
echo "$bin"
