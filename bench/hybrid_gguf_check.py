#!/usr/bin/python3
"""Hold bench/hybrid_gguf.py's files to test/tools/hf_to_gguf.py's on small models.

    bench/hybrid_gguf_check.py

For a few small test/tools/gen_model.py configs (Qwen3.5 in the released layout, tied, value
heads twice the key heads; the flat Qwen3_5ForCausalLM layout, untied; a tokenizer padded to a
larger vocab_size; a dense qwen3), writes the checkpoint and converts it with hf_to_gguf.py
--type f16, writes hybrid_gguf.py's file from the same config.json, and compares: every key
(order and value; the padded vocabulary's added "[PAD<id>]" tokens aside), every tensor's
name, order, type and dims, the files' sizes, and each tensor's mean and standard deviation
(the draws differ, their scales must not).  Exit status 1 on any difference.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "test", "tools")
sys.path.insert(0, TOOLS)
from gguf_to_hf import dequantize, read_gguf  # noqa: E402

PY = "/usr/bin/python3"
SMALL = ["--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
         "--intermediate", "256"]
CASES = {
    "released": ["--family", "qwen3_5", "--layers", "8", "--linear-k-heads", "2",
                 "--linear-v-heads", "4", "--linear-key-dim", "64", "--vocab", "400"],
    "causal-untied": ["--family", "qwen3_5", "--causal-lm", "--untied", "--layers", "4",
                      "--linear-k-heads", "2", "--linear-key-dim", "32", "--vocab", "400"],
    "padded-vocab": ["--family", "qwen3_5", "--layers", "4", "--linear-k-heads", "2",
                     "--linear-key-dim", "32", "--tokenizer-from",
                     os.path.join(HERE, "..", "test", "data", "tokenizers", "qwen3"),
                     "--pad-vocab", "100"],
    "qwen3": ["--family", "qwen3", "--layers", "3", "--vocab", "400"],
}
PADDED = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores")


def compare(name, ref_path, new_path):
    """The differences between the two files, as lines."""
    m1, t1 = read_gguf(ref_path)
    m2, t2 = read_gguf(new_path)
    bad, padded = [], False
    for k in PADDED:  # hf_to_gguf.py does not pad: the padding is checked, then left aside
        if k in m1 and len(m2.get(k, [])) > len(m1[k]):
            n, padded = len(m1[k]), True
            want = {"tokenizer.ggml.tokens": ["[PAD%d]" % i for i in range(n, len(m2[k]))],
                    "tokenizer.ggml.token_type": [5] * (len(m2[k]) - n),  # unused
                    "tokenizer.ggml.scores": [np.float32(-1e9)] * (len(m2[k]) - n)}[k]
            if m2[k][n:] != want:
                bad.append("%s: %s padded with %r..." % (name, k, m2[k][n:n + 2]))
            m2[k] = m2[k][:n]
    if list(m1) != list(m2):
        bad.append("%s: keys %s / %s" % (name, list(m1), list(m2)))
    bad += ["%s: key %s: %.60r / %.60r" % (name, k, m1[k], m2.get(k)) for k in m1
            if m1[k] != m2.get(k)]
    if list(t1) != list(t2):
        bad.append("%s: tensors %s / %s" % (name, list(t1), list(t2)))
    for k, (ty, dims, raw) in t1.items():
        if k not in t2 or t2[k][:2] != (ty, dims):
            bad.append("%s: %s is %s / %s" % (name, k, (ty, dims), t2.get(k, ())[:2]))
            continue
        x = dequantize(ty, dims, raw).astype(np.float64)
        y = dequantize(*t2[k]).astype(np.float64)
        if k.endswith(".ssm_a"):  # -A, A log-uniform on [0.05, 16]: few values, a wide spread
            ok = x.max() < 0 and y.max() <= -0.05 and y.min() >= -16
        else:  # the means within 5 standard errors (the spread of a few values taken as at
            # least the norms' 0.1); the spreads within a quarter (tensors of 256 or more)
            se = max(x.std(), y.std(), 0.1 if x.size < 256 else 0.01) * np.sqrt(2.0 / x.size)
            ok = abs(x.mean() - y.mean()) <= 5 * se and (
                x.size < 256 or abs(x.std() - y.std()) <= 0.25 * x.std())
        if not ok:
            bad.append("%s: %s: mean %.4f sd %.4f / mean %.4f sd %.4f"
                       % (name, k, x.mean(), x.std(), y.mean(), y.std()))
    s1, s2 = os.path.getsize(ref_path), os.path.getsize(new_path)
    if not padded and s1 != s2:
        bad.append("%s: %d bytes / %d" % (name, s1, s2))
    return bad


def main():
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            d = os.path.join(tmp, name)
            subprocess.run([PY, os.path.join(TOOLS, "gen_model.py"), d] + SMALL + args +
                           ["--seed", "3"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([PY, os.path.join(TOOLS, "hf_to_gguf.py"), "--type", "f16", d,
                            d + "-ref.gguf"], check=True)
            subprocess.run([PY, os.path.join(HERE, "hybrid_gguf.py"), d, d + "-new.gguf"],
                           check=True, stdout=subprocess.DEVNULL)
            diff = compare(name, d + "-ref.gguf", d + "-new.gguf")
            print("%-14s %s" % (name, "same layout" if not diff else "DIFFERS"))
            bad += diff
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
