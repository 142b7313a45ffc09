#!/usr/bin/env bash
# mxfp4_checkpoint_test.sh: a gpt-oss checkpoint whose MXFP4 experts' blocks and scales
# (stored apart, as the released checkpoint has them) do not fit is refused at load with an
# error that names the tensors, and nothing runs.  TAP output.
# usage: mxfp4_checkpoint_test.sh MXFP4_SOURCE_DIR WORKDIR
#   MXFP4_SOURCE_DIR  a gpt-oss checkpoint with float experts and its tokenizer
#                     (test/tools/mxfp4_checkpoint.py's SRC_DIR)
set -u
cli=bin/cbllm-cli
PY=/usr/bin/python3
src=$1
work=$2
n=0

ok() {
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi
}

mkdir -p "$work"
for how in short-scales no-scales; do
	rm -rf "$work/$how"
	$PY test/tools/mxfp4_checkpoint.py "$src" "$work/$how" --break "$how" || { ok 1 "mxfp4_checkpoint.py --break $how"; continue; }
	out=$($cli logits -m "$work/$how" --prompt-ids "1 2 3" 2>&1 >/dev/null)
	status=$?
	case $how in
		short-scales) want='down_proj_scales".*expected U8' what="one group short" ;;
		no-scales) want='"model.layers.[0-9]*.mlp.experts.down_proj_blocks" without "[^"]*down_proj_scales"'
			what="left out" ;;
	esac
	[ "$status" -ne 0 ] && echo "$out" | grep -Eq "$want"
	ok $? "a checkpoint whose last MXFP4 down_proj scales are $what is refused, naming them: $out"
done
echo "1..$n"
