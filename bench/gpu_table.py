#!/usr/bin/env python3
"""gpu_table.py: cbllm and HuggingFace transformers side by side, as one
markdown table.

usage: gpu_table.py CBLLM_JSONL TRANSFORMERS_JSONL [--title TEXT]

CBLLM_JSONL is the output of `cbllm-cli bench --json` (one object per level,
"mode" continuous or static) and TRANSFORMERS_JSONL that of
`test/gpu/hf_baseline.py --json` ("mode" transformers).  Lines that are not
JSON objects (comments, log lines) are skipped.  Each concurrency level gets
one row per engine; a cbllm row's "cbllm speed-up" is its tokens/s over the
transformers tokens/s at the same concurrency.  A level that transformers cut
short (--time-budget) shows how many of its requests completed.
"""
import argparse
import json
import sys

COLUMNS = ["concurrency", "engine", "TTFT p50 (ms)", "TTFT p99 (ms)", "ITL p50 (ms)",
           "ITL p99 (ms)", "tokens/s", "decode step ms", "floor ms", "x floor", "cbllm speed-up"]


def read_levels(path):
    """The JSON objects of a file of JSON lines, skipping every other line."""
    levels = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                sys.exit(f"gpu_table.py: {path}:{n}: not JSON: {e}")
            if "concurrency" in rec and "tokens_per_s" in rec:
                levels.append(rec)
    return levels


def num(v, digits):
    """A number with digits decimals, or "-" when missing."""
    return "-" if v is None else f"{v:,.{digits}f}"


def sub(rec, key, field):
    """rec[key][field], or None when either is missing or null."""
    return (rec.get(key) or {}).get(field)


def engine_name(rec):
    """The engine column: cbllm's batching mode, or transformers and its completed share."""
    mode = rec.get("mode", "?")
    if mode == "transformers":
        name = "transformers"
        if rec.get("cut_short"):
            name += f" ({rec.get('requests')} of {rec.get('requests_planned')} requests)"
        return name
    return f"cbllm ({mode})"


def row(rec, hf_tps):
    """The cells of one table row."""
    speedup = ""
    if rec.get("mode") != "transformers" and hf_tps:
        speedup = f"{rec['tokens_per_s'] / hf_tps:.2f}x"
    return [str(rec["concurrency"]), engine_name(rec),
            num(sub(rec, "ttft_ms", "p50"), 1), num(sub(rec, "ttft_ms", "p99"), 1),
            num(sub(rec, "itl_ms", "p50"), 2), num(sub(rec, "itl_ms", "p99"), 2),
            num(rec.get("tokens_per_s"), 1), num(sub(rec, "decode_step_ms", "p50"), 3),
            num(sub(rec, "floor_ms", "p50"), 3), num(rec.get("x_floor"), 2), speedup]


def table(cbllm, hf):
    """The markdown lines: one row per engine per concurrency, cbllm first."""
    hf_by_c = {r["concurrency"]: r for r in hf}
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if i < 2 else "---:" for i in range(len(COLUMNS))) + "|"]
    for c in sorted({r["concurrency"] for r in cbllm} | set(hf_by_c)):
        hf_rec = hf_by_c.get(c)
        hf_tps = hf_rec["tokens_per_s"] if hf_rec else None
        for rec in [r for r in cbllm if r["concurrency"] == c] + ([hf_rec] if hf_rec else []):
            lines.append("| " + " | ".join(row(rec, hf_tps)) + " |")
    return lines


def main(argv):
    """Read both files and print the table."""
    ap = argparse.ArgumentParser(description="cbllm vs transformers as a markdown table")
    ap.add_argument("cbllm", help="JSON lines of cbllm-cli bench --json")
    ap.add_argument("transformers", help="JSON lines of test/gpu/hf_baseline.py --json")
    ap.add_argument("--title", help="a heading line above the table")
    args = ap.parse_args(argv)
    cbllm = [r for r in read_levels(args.cbllm) if r.get("mode") != "transformers"]
    hf = [r for r in read_levels(args.transformers) if r.get("mode") == "transformers"]
    if not cbllm and not hf:
        sys.exit("gpu_table.py: no benchmark levels in either file")
    if args.title:
        print(f"### {args.title}\n")
    print("\n".join(table(cbllm, hf)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
