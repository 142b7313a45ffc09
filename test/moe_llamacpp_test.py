#!/usr/bin/python3
"""cbllm against llama.cpp on mixture-of-experts GGUF files (test/data/llamacpp-moe/), or on
another recording of the same kind (--data: test/data/llamacpp-hybrid/, Qwen3.5's hybrid files,
recorded by test/tools/record_hybrid_llamacpp.sh).

    test/moe_llamacpp_test.py --cli bin/cbllm-cli --models WORK/models [--data DIR]
                              [--only NAME,NAME...]

test/tools/record_moe_llamacpp.sh recorded llama.cpp's 16 greedy ids and top-2 logit margins
for three prompts on each of four files: F32 files of test/run-tests' Qwen3-MoE and Mixtral
checkpoints (run-tests makes them again from the same seeds: WORK/models/NAME.gguf/model.gguf)
and the 256-wide Qwen3-MoE as Q8_0 and Q4_K_M made by llama.cpp's own llama-quantize (kept in
test/data/llamacpp-moe/).  For each file cbllm's greedy ids (cbllm-cli greedy, the prompts
batched together, f32 KV) must be llama.cpp's at every step up to the first where llama.cpp's
margin is below the near-tie bound (F32: 0.005, where the two engines' logits differ by about
1e-5; quantized: 0.05, as both quantize activations to 8 bits, each its own way: their margins
differ by up to 0.03 on these files), or all 16;
they may part earlier only on a near-tie of cbllm's own between the same two tokens.  At least
8 steps a file must be compared.  Prints TAP.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "llamacpp-moe")
NEAR = {"f32": 0.005, "q8_0": 0.05, "q4_k_m": 0.05}


def model_path(name, models, data):
    stored = os.path.join(data, name + ".gguf")
    return stored if os.path.exists(stored) else os.path.join(models, name + ".gguf", "model.gguf")


def near_bound(name):
    return NEAR[name.rsplit("-", 1)[1]]


def compare(ref, got, near):
    """(steps compared, None) or (step, why) at the first unexplained difference."""
    for k, (want, have) in enumerate(zip(ref["ids"], got["ids"])):
        if ref["margins"][k] < near:
            return k, None
        if want != have:
            if got["seconds"][k] == want and got["margins"][k] < near:
                return k, None      # cbllm's own near-tie between the same two tokens
            return k, "step %d: llama.cpp %d (margin %.3f), cbllm %d (margin %.3f, runner-up %d)" % (
                k, want, ref["margins"][k], have, got["margins"][k], got["seconds"][k])
    return len(ref["ids"]), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="bin/cbllm-cli")
    ap.add_argument("--models", required=True)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--data", default=DATA, help="the recording's folder (default: %(default)s)")
    ap.add_argument("--only", help="a comma-separated list of the recording's models to compare "
                    "(default: all of them)")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    with open(os.path.join(a.data, "greedy.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    by_model = {}
    for r in records:
        if only is None or r["model"] in only:
            by_model.setdefault(r["model"], []).append(r)
    if only is not None and set(by_model) != only:
        print("not ok 1 - --only names models the recording lacks: %s" % sorted(only - set(by_model)))
        print("1..1")
        sys.exit(1)
    n = 0
    failed = 0
    for name, recs in by_model.items():
        path = model_path(name, a.models, a.data)
        stdin = "".join(json.dumps(r["prompt"]) + "\n" for r in recs)
        p = subprocess.run([a.cli, "greedy", "-m", path, "-n", "16", "--threads", a.threads,
                            "--kv-cache-dtype", "f32"], input=stdin, capture_output=True, text=True)
        got = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        n += 1
        if p.returncode != 0 or len(got) != len(recs):
            failed += 1
            print("not ok %d - %s: cbllm-cli greedy ran (%s)" % (n, name, p.stderr.strip()[-300:]))
            continue
        steps, whys = 0, []
        for r, g in zip(recs, got):
            k, why = compare(r, g, near_bound(name))
            steps += k
            if why:
                whys.append(why)
        ok = not whys and steps >= 8
        failed += not ok
        print("%s %d - %s: cbllm's greedy ids are llama.cpp's up to its near-ties (%d steps compared "
              "over %d prompts)" % ("ok" if ok else "not ok", n, name, steps, len(recs)))
        for w in whys:
            print("#   " + w)
    print("1..%d" % n)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
