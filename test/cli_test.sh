#!/usr/bin/env bash
# cli_test.sh: cbllm-cli as a user runs it: its output formats, its exit
# status, and one-line errors.  TAP output.
# usage: cli_test.sh MODEL_DIR LLAMA2_TOKENIZER_DIR LLAMA_CPP_VOCAB_DIR
set -u
cli=bin/cbllm-cli
model=$1
tokdir=$2
vocabs=$3
n=0
fails=0

# ok COND_STATUS NAME
ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}

out=$($cli generate -m "$model" -p "hello world" -n 12 --temp 0 --ids --ignore-eos)
ok $? "generate --ids exits 0"
[ "$(echo "$out" | wc -w)" -eq 12 ] && echo "$out" | grep -Eq '^[0-9]+( [0-9]+)*$'
ok $? "generate --ids prints exactly the 12 generated ids on one line ($out)"

again=$($cli generate -m "$model" -p "hello world" -n 12 --temp 0 --ids --ignore-eos)
[ "$out" = "$again" ]
ok $? "greedy generation is reproducible"

text=$($cli generate -m "$model" -p "hello world" -n 12 --temp 0.8 --seed 5 --top-p 0.9 --top-k 50)
ok $? "generate with sampling options prints text and exits 0"

ids=$(printf 'Hello world' | $cli tokenize -m "$tokdir" --raw)
[ "$ids" = "15043 3186" ]
ok $? "tokenize --raw of 'Hello world' with the Llama-2 vocabulary is 15043 3186 ($ids)"

ids=$(printf '<s>Hello' | $cli tokenize -m "$tokdir" --no-bos)
[ "$ids" = "1 15043" ]
ok $? "tokenize recognises <s> in the text ($ids)"

ids=$(printf '<s>Hello' | $cli tokenize -m "$tokdir")
[ "$ids" = "1 1 15043" ]
ok $? "tokenize adds the BOS before a text's own <s>, as HuggingFace's add_special_tokens does ($ids)"

ids=$(printf '"<s>Hello"\n"a b"\n' | $cli tokenize -m "$tokdir" --jsonl --special)
[ "$ids" = "$(printf '[1, 1, 15043]\n[1, 263, 289]')" ]
ok $? "tokenize --jsonl --special: one JSON id array per JSON string line ($ids)"

text=$(printf '[1, 15043]\n' | $cli detokenize -m "$tokdir" --jsonl)
[ "$text" = '"<s> Hello"' ]
ok $? "detokenize --jsonl: a JSON string per id array, special tokens kept ($text)"

# llama.cpp's vocab-only GGUF files (no tensors): the tokenizer from their metadata
spm=$vocabs/ggml-vocab-llama-spm.gguf
[ "$(od -An -tu8 -j8 -N8 "$spm" | tr -d ' ')" = 0 ]
ok $? "ggml-vocab-llama-spm.gguf holds no tensors"
ids=$(printf 'Hello world' | $cli tokenize -m "$spm" --raw)
[ "$ids" = "15043 3186" ]
ok $? "tokenize -m FILE.gguf --raw of 'Hello world' is llama.cpp's 15043 3186 ($ids)"
ids=$(printf 'Hello world' | $cli tokenize -m "$spm")
[ "$ids" = "1 15043 3186" ]
ok $? "tokenize -m FILE.gguf adds the file's BOS by default ($ids)"
ids=$(printf '<s>Hello' | $cli tokenize -m "$spm" --no-bos)
[ "$ids" = "1 15043" ]
ok $? "tokenize -m FILE.gguf --no-bos takes the text's <s> as the token ($ids)"
ids=$(printf '<s>Hello' | $cli tokenize -m "$spm" --no-bos --no-parse-special)
[ "$ids" = "529 29879 29958 10994" ]
ok $? "tokenize --no-parse-special takes <s> as plain text ($ids)"
ids=$(printf '"<|im_start|>Hi"\n' | $cli tokenize -m "$vocabs/ggml-vocab-qwen2.gguf" --jsonl --no-parse-special)
[ "$ids" = "[27, 91, 318, 4906, 91, 29, 13048]" ]
ok $? "tokenize --jsonl --no-parse-special: <|im_start|> as plain text ($ids)"
text=$(printf '[1, 15043, 3186]\n' | $cli detokenize -m "$spm" --jsonl)
[ "$text" = '"<s> Hello world"' ]
ok $? "detokenize -m FILE.gguf --jsonl ($text)"
err=$(printf 'x' | $cli tokenize -m "$vocabs/ggml-vocab-bert-bge.gguf" 2>&1 >/dev/null)
[ $? -ne 0 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q 'ggml-vocab-bert-bge.gguf: .*"bert"'
ok $? "an unsupported GGUF tokenizer is a one-line error naming the file and the model ($err)"

err=$($cli generate -m /nonexistent -p x 2>&1 >/dev/null)
rc=$?
[ $rc -ne 0 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "config.json"
ok $? "a missing model fails with one error line naming config.json ($err)"

err=$($cli generate -m "$model" -p x --max-tokens abc 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "bad value"
ok $? "a non-numeric option value is a one-line error ($err)"

err=$($cli generate -m "$model" -p x --temp -1 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "temperature"
ok $? "a negative temperature is refused ($err)"

err=$($cli frobnicate -m "$model" 2>&1 >/dev/null)
[ $? -ne 0 ]
ok $? "an unknown command exits non-zero"

bench=$($cli bench-steps -m "$model" --batch 1,4 --context 8 --steps 4 --prefill 16 --threads 2)
[ $? -eq 0 ] && echo "$bench" | grep -Eq '^4 +[0-9.]+ +[0-9.]+' && echo "$bench" | grep -q '^prefill'
ok $? "bench-steps prints a row per batch size and the prefill line"

bench=$($cli bench -m "$model" --concurrency 1,4 --requests 6 --prompt-len 10..40 --gen-len 5..12 --prefix-len 16 --json --threads 2)
[ $? -eq 0 ] && [ "$(echo "$bench" | grep -c '"concurrency"')" -eq 2 ] &&
	echo "$bench" | grep -q '"concurrency": 4, "requests": 6' && echo "$bench" | grep -q '"prefix_hit_rate"'
ok $? "bench --json prints one JSON object per concurrency level"

bench=$($cli bench -m "$model" --concurrency 4 --requests 6 --prompt-len 10..40 --gen-len 5..12 --static --json --threads 2)
[ $? -eq 0 ] && echo "$bench" | grep -q '"mode": "static"'
ok $? "bench --static runs the same workload with padded static batching"

bench=$($cli bench -m "$model" --concurrency 4 --requests 6 --prompt-len 10..40 --gen-len 5..12 --static-admission --json --threads 2)
[ $? -eq 0 ] && echo "$bench" | grep -q '"mode": "static-admission"'
ok $? "bench --static-admission runs it with batches admitted only when nothing runs"

half=$($cli generate -m "$model" -p "hello world" -n 12 --temp 0 --ids --ignore-eos --kv-cache-dtype f16)
[ $? -eq 0 ] && [ "$(echo "$half" | wc -w)" -eq 12 ]
ok $? "generate with --kv-cache-dtype f16 prints its 12 ids ($half)"

err=$($cli generate -m "$model" -p x --kv-cache-dtype q8_0 2>&1 >/dev/null)
[ $? -ne 0 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "kv_cache_dtype \"q8_0\""
ok $? "--kv-cache-dtype q8_0 is a one-line error naming it ($err)"

err=$($cli bench -m "$model" --max-step-ms fast 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "auto, off or a positive number"
ok $? "--max-step-ms refuses a value that is no duration ($err)"

err=$($cli bench -m "$model" --prompt-len 40..10 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "A..B"
ok $? "a reversed range is refused ($err)"

bench=$($cli bench -m "$model" --concurrency 1,4 --requests 6 --prompt-len 10..20 --gen-len 5..12 --bandwidth 20 --json --threads 2)
[ $? -eq 0 ] && [ "$(echo "$bench" | grep -Ec '"decode_step_ms": \{"p50": [0-9.]+\}, "decode_steps": [1-9][0-9]*, "floor_ms": \{"p50": [0-9.]+\}, "x_floor": [0-9.]+\}$')" -eq 2 ]
ok $? "bench --bandwidth --json adds the decode step, its floor and their ratio to every level"

bench=$($cli bench -m "$model" --concurrency 4 --requests 6 --prompt-len 10..20 --gen-len 5..12 --json --threads 2)
[ $? -eq 0 ] && echo "$bench" | grep -q '"floor_ms": {"p50": null}, "x_floor": null}$' &&
	echo "$bench" | grep -Eq '"decode_step_ms": \{"p50": [0-9.]+\}'
ok $? "bench --json without --bandwidth times decode steps and gives a null floor"

bench=$($cli bench -m "$model" --concurrency 4 --requests 6 --prompt-len 10..20 --gen-len 5..12 --bandwidth 20 --threads 2)
[ $? -eq 0 ] && echo "$bench" | head -1 | grep -Eq 'decode_ms +floor_ms +x_floor$' &&
	echo "$bench" | grep -Eq '^4 .* [0-9.]+ +[0-9.]+ +[0-9.]+$'
ok $? "bench --bandwidth prints the decode_ms, floor_ms and x_floor columns"

for bad in 0 1.5 -0.2 abc; do
	err=$($cli bench -m "$model" --gpu-memory-utilization "$bad" 2>&1 >/dev/null)
	[ $? -ne 0 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "gpu-memory-utilization must be a fraction"
	ok $? "--gpu-memory-utilization $bad is refused with one error line ($err)"
done

err=$($cli generate -m "$model" -p x --load-format bogus 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "load-format must be auto or dummy"
ok $? "an unknown --load-format is refused ($err)"

err=$($cli bench -m "$model" --bandwidth -5 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "bandwidth must be a positive number"
ok $? "a negative --bandwidth is refused ($err)"

out=$($cli generate -m "$model" -p "hello world" -n 4 --temp 0 --ids --ignore-eos --load-format auto --gpu-memory-utilization 0.5)
[ $? -eq 0 ] && [ "$(echo "$out" | wc -w)" -eq 4 ]
ok $? "--load-format auto and a valid --gpu-memory-utilization are accepted ($out)"

out=$($cli membw --device cpu)
[ $? -eq 0 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -Eq '^copy_bandwidth_GBps [0-9]+\.[0-9]$' &&
	awk '{ exit !($2 > 0) }' <<<"$out"
ok $? "membw --device cpu prints one line copy_bandwidth_GBps with a positive number ($out)"

err=$($cli membw --device tpu 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "cpu, cuda or auto"
ok $? "membw refuses an unknown device ($err)"

echo "1..$n"
[ $fails -eq 0 ]
