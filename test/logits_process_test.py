#!/usr/bin/env python3
"""logits_process_test.py: the sampling controls against a reference in Python.

test_logits_process (test/unit/test_logits_process.c) writes cases as JSON
lines: the controls (temperature, min_p, repetition_penalty,
frequency_penalty, presence_penalty, bias as [id, value] pairs), the token
history (the first n_prompt of them the prompt), an optional constraint mask
(0/1 per token), the input logits and cbllm's output (null for -inf).  Here
each output is recomputed from the documented rules (HF's repetition
penalty over prompt and output, OpenAI's frequency and presence penalties
over the output, logit_bias added, the mask, then min_p relative to the most
likely token at the request's temperature) and compared.

usage: logits_process_test.py FILE
"""
import json
import math
import sys

NEG = float("-inf")


def reference(case):
    out = [NEG if v is None else float(v) for v in case["logits"]]
    n = len(out)
    if case["mask"] is not None:
        out = [v if m else NEG for v, m in zip(out, case["mask"])]
    tokens = case["tokens"]
    gen = tokens[case["n_prompt"]:]
    r = case["repetition_penalty"]
    if r > 0 and r != 1:
        for t in set(tokens):
            if 0 <= t < n:
                out[t] = out[t] / r if out[t] > 0 else out[t] * r
    f, p = case["frequency_penalty"], case["presence_penalty"]
    if f != 0 or p != 0:
        for t in set(gen):
            if 0 <= t < n:
                out[t] -= gen.count(t) * f + p
    for t, b in case["bias"]:
        out[t] += b
    if case["min_p"] > 0 and case["temperature"] > 0:
        mx = max(out)
        if math.isfinite(mx):
            floor = mx + case["temperature"] * math.log(case["min_p"])
            out = [v if v >= floor else NEG for v in out]
    return out


def close(a, b):
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-4 * max(1.0, abs(a), abs(b))


def main():
    if len(sys.argv) != 2:
        print("usage: logits_process_test.py FILE", file=sys.stderr)
        return 2
    cases = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
    bad = []
    kinds = {"repetition": 0, "frequency/presence": 0, "bias": 0, "mask": 0, "min_p": 0}
    for i, c in enumerate(cases):
        want = reference(c)
        got = [NEG if v is None else float(v) for v in c["out"]]
        diffs = [j for j, (a, b) in enumerate(zip(want, got)) if not close(a, b)]
        # a logit within float rounding of the min_p floor may fall either side
        if diffs and c["min_p"] > 0:
            mx = max(v for v in want + got if math.isfinite(v))
            floor = mx + c["temperature"] * math.log(c["min_p"])
            raw = reference(dict(c, min_p=0))
            diffs = [j for j in diffs if abs(raw[j] - floor) > 1e-4 * max(1.0, abs(floor))]
        if diffs:
            bad.append((i, diffs[0], want[diffs[0]], got[diffs[0]]))
        kinds["repetition"] += c["repetition_penalty"] not in (0, 1)
        kinds["frequency/presence"] += c["frequency_penalty"] != 0 or c["presence_penalty"] != 0
        kinds["bias"] += bool(c["bias"])
        kinds["mask"] += c["mask"] is not None
        kinds["min_p"] += c["min_p"] > 0 and c["temperature"] > 0
    n = 0
    n += 1
    print("%s %d - %d of %d cases agree with the Python reference" % (
        "ok" if not bad else "not ok", n, len(cases) - len(bad), len(cases)))
    for i, j, w, g in bad[:5]:
        print("#   case %d token %d: reference %r, cbllm %r" % (i, j, w, g))
    for k, v in kinds.items():
        n += 1
        print("%s %d - %d cases exercise %s" % ("ok" if v >= 20 else "not ok", n, v, k))
    print("1..%d" % n)
    return 1 if bad or any(v < 20 for v in kinds.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
