#!/usr/bin/env bash
# cli_test.sh: cbllm-cli as a user runs it: its output formats, its exit
# status, and one-line errors.  TAP output.
# usage: cli_test.sh MODEL_DIR LLAMA2_TOKENIZER_DIR
set -u
cli=bin/cbllm-cli
model=$1
tokdir=$2
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

ids=$(printf '<s>Hello' | $cli tokenize -m "$tokdir")
[ "$ids" = "1 15043" ]
ok $? "tokenize recognises <s> in the text and does not add a second BOS ($ids)"

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
ok $? "bench --static runs the same workload with static batching"

err=$($cli bench -m "$model" --prompt-len 40..10 2>&1 >/dev/null)
[ $? -ne 0 ] && echo "$err" | grep -q "A..B"
ok $? "a reversed range is refused ($err)"

echo "1..$n"
[ $fails -eq 0 ]
