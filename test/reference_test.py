#!/usr/bin/python3
"""Reference test: cbllm-cli against an independent float64 numpy forward.

    reference_test.py --cli bin/cbllm-cli --workdir DIR [--tol 1e-4] [--timeout 300]

For each geometry below, test/tools/gen_model.py writes a tiny random checkpoint into
DIR/NAME, and two things are compared with test/tools/reference.py:

  logits  `CLI logits -m MODEL --prompt-ids "..."` prints one line per prompt position
          with vocab_size numbers; at every position max|cli - ref| / max|ref| <= tol.
  greedy  `CLI generate -m MODEL --prompt-ids "..." -n 32 --temp 0 --ids` prints the
          generated ids on one line; they equal the reference's 32 argmax tokens (a CLI
          that stops at EOS may end right after an EOS the reference also produced).

The CLI takes the prompt ids verbatim (the prompt starts with BOS=1 itself; nothing is
added).  Two checks need no CLI: gen_model.py is deterministic, and a sharded model
holds exactly the weights of the same model in one file.  Output is TAP; the exit
status is 1 when any check failed.  A missing CLI gives "not ok" lines, not a crash.
"""

import argparse
import filecmp
import math
import os
import subprocess
import sys

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools")
GEN_MODEL = os.path.join(TOOLS, "gen_model.py")
REFERENCE = os.path.join(TOOLS, "reference.py")

PROMPT = [1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]  # BOS + 11 ids < 320
N_GEN = 32
EOS = 2

# name -> gen_model.py arguments (hidden 64, 2 layers, vocab 320 unless given)
GEOMETRIES = [
    ("mha-f32-untied", ["--seed", "1"]),
    # GQA with Llama-3's rope_theta and eps, so a config value ignored shows up
    ("gqa-f32-tied", ["--heads", "4", "--kv-heads", "2", "--tie", "--seed", "2",
                      "--rope-theta", "500000", "--rms-eps", "1e-6"]),
    ("gqa-bf16-2shards", ["--heads", "4", "--kv-heads", "2", "--dtype", "bf16",
                          "--shards", "2", "--seed", "3"]),
    ("f16-tied-h8kv2", ["--heads", "8", "--kv-heads", "2", "--dtype", "f16", "--tie",
                        "--seed", "4"]),
    # the window (8) is shorter than the prompt (12), so it matters for the logits too
    ("mistral-swa8-f32", ["--arch", "mistral", "--sliding-window", "8", "--layers", "3",
                          "--seed", "5"]),
]


class Tap:
    """Numbered TAP results, the plan printed at the end."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, ok, desc, diags=()):
        self.n += 1
        self.failed += not ok
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, desc))
        for line in diags:
            for part in str(line).splitlines() or [""]:
                print("# " + part)
        sys.stdout.flush()

    def finish(self):
        print("1..%d" % self.n)
        if self.failed:
            print("# %d of %d checks failed" % (self.failed, self.n))
        return 1 if self.failed else 0


# --------------------------------------------------------------------------- running

class RunError(Exception):
    """A command that could not run, timed out, or exited non-zero."""


def run(cmd, timeout):
    """Run cmd and return its stdout; raise RunError with the reason and stderr tail."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RunError("%s: %s" % (" ".join(cmd), e))
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-10:])
        raise RunError("%s: exit status %d\n%s" % (" ".join(cmd), r.returncode, tail))
    return r.stdout


def py(script, *args):
    """A command line running one of the Python tools with this interpreter."""
    return [sys.executable, script] + [str(a) for a in args]


def ids_arg(ids):
    return " ".join(str(t) for t in ids)


def parse_rows(text):
    """Lines of whitespace-separated floats -> list of lists."""
    return [[float(v) for v in line.split()] for line in text.splitlines() if line.strip()]


def parse_ids(text):
    """All whitespace-separated integers of the output (one line expected)."""
    return [int(t) for t in text.split()]


# --------------------------------------------------------------------------- comparisons

def logits_error(cli_rows, ref_rows):
    """Per position max|c - r| / max|r|; raises ValueError on a shape mismatch."""
    if len(cli_rows) != len(ref_rows):
        raise ValueError("CLI printed %d rows, expected %d" % (len(cli_rows), len(ref_rows)))
    errs = []
    for p, (c, r) in enumerate(zip(cli_rows, ref_rows)):
        if len(c) != len(r):
            raise ValueError("row %d has %d values, expected %d" % (p, len(c), len(r)))
        diff = max(abs(a - b) for a, b in zip(c, r))
        scale = max(abs(b) for b in r)
        errs.append(diff / scale if scale else (0.0 if diff == 0 else math.inf))
    return errs


def worst(errs):
    """Largest error, NaN if any is NaN (so a NaN never passes)."""
    return float("nan") if any(math.isnan(e) for e in errs) else max(errs)


# the comparison with float64 runs on an f32 KV cache (the CPU's auto is f16, whose
# rounding the family tests bound separately)
KV_F32 = ["--kv-cache-dtype", "f32"]


def greedy_matches(cli, ref):
    """Equal, or the CLI stopped right after an EOS that the reference also chose."""
    if cli == ref:
        return True
    return EOS in ref and cli == ref[:ref.index(EOS) + 1]


def divergence_note(model, ref, cli, timeout):
    """Where the CLI left the reference, and how close the reference's choice was."""
    k = next((i for i, (a, b) in enumerate(zip(cli, ref)) if a != b), min(len(cli), len(ref)))
    notes = ["cli: %s" % ids_arg(cli), "ref: %s" % ids_arg(ref),
             "first difference at generated token %d" % k]
    if k < len(ref) and k < len(cli):
        try:
            last = parse_rows(run(py(REFERENCE, model, "--prompt-ids", ids_arg(PROMPT + ref[:k]),
                                     "--logits"), timeout))[-1]
        except RunError as e:
            return notes + ["reference logits at the difference failed: %s" % e]
        top = sorted(range(len(last)), key=lambda t: -last[t])[:2]
        notes.append("reference there: top1 %d (%.6g), top2 %d (%.6g), CLI's %d scores %.6g"
                     % (top[0], last[top[0]], top[1], last[top[1]], cli[k], last[cli[k]]
                        if 0 <= cli[k] < len(last) else float("nan")))
    return notes


# --------------------------------------------------------------------------- checks

def check_geometry(tap, a, name, gen_args):
    """Generate one model and compare the CLI's logits and greedy ids with the reference."""
    model = os.path.join(a.workdir, name)
    logits_desc = ("%s: logits at all %d prompt positions match float64 reference"
                   % (name, len(PROMPT)))
    greedy_desc = "%s: greedy %d tokens identical to float64 reference" % (name, N_GEN)
    try:
        run(py(GEN_MODEL, model, *gen_args), a.timeout)
        out = run(py(REFERENCE, model, "--prompt-ids", ids_arg(PROMPT), "--logits",
                     "--greedy", N_GEN), a.timeout).splitlines()
        ref_rows, ref_ids = parse_rows("\n".join(out[:-1])), parse_ids(out[-1])
    except RunError as e:
        for desc in (logits_desc, greedy_desc):
            tap.check(False, desc, ["model or reference failed:", e])
        return

    cli_ok = os.path.isfile(a.cli) and os.access(a.cli, os.X_OK)
    missing = ["CLI not found or not executable: %s" % a.cli]

    if not cli_ok:
        tap.check(False, logits_desc, missing)
    else:
        try:
            cli_rows = parse_rows(run([a.cli, "logits", "-m", model, "--prompt-ids",
                                       ids_arg(PROMPT)] + KV_F32, a.timeout))
            errs = logits_error(cli_rows, ref_rows)
            w = worst(errs)
            tap.check(w <= a.tol, "%s (worst rel err %.2g, limit %.0e)" % (logits_desc, w, a.tol),
                      [] if w <= a.tol else
                      ["rel err per position: " + " ".join("%.2g" % e for e in errs)])
        except (RunError, ValueError) as e:
            tap.check(False, logits_desc, [e])

    if not cli_ok:
        tap.check(False, greedy_desc, missing)
        return
    try:
        cli_ids = parse_ids(run([a.cli, "generate", "-m", model, "--prompt-ids", ids_arg(PROMPT),
                                 "-n", str(N_GEN), "--temp", "0", "--ids"] + KV_F32, a.timeout))
        ok = greedy_matches(cli_ids, ref_ids)
        notes = [] if ok else divergence_note(model, ref_ids, cli_ids, a.timeout)
        tap.check(ok, greedy_desc, notes)
    except (RunError, ValueError) as e:
        tap.check(False, greedy_desc, [e])


def same_files(d1, d2):
    """(equal, file count, differing names): the two folders hold byte-identical files."""
    names1, names2 = sorted(os.listdir(d1)), sorted(os.listdir(d2))
    if names1 != names2:
        return False, len(names1), sorted(set(names1) ^ set(names2))
    _, mismatch, errors = filecmp.cmpfiles(d1, d2, names1, shallow=False)
    return not mismatch and not errors, len(names1), mismatch + errors


def check_determinism(tap, a):
    """Two gen_model.py runs with the same arguments give byte-identical folders."""
    args = ["--heads", "4", "--kv-heads", "2", "--dtype", "bf16", "--shards", "3", "--tie",
            "--vocab", "600", "--seed", "11"]
    dirs = [os.path.join(a.workdir, "determinism-%d" % i) for i in (1, 2)]
    desc = "gen_model.py: same arguments give byte-identical files"
    try:
        for d in dirs:
            run(py(GEN_MODEL, d, *args), a.timeout)
    except RunError as e:
        tap.check(False, desc, [e])
        return
    ok, n, diff = same_files(*dirs)
    tap.check(ok, "%s (%d files)" % (desc, n), [] if ok else ["differ: %s" % " ".join(diff)])


def check_shards(tap, a):
    """The 2-shard bf16 model and the same model in one file give identical reference logits."""
    name, gen_args = GEOMETRIES[2]
    one = os.path.join(a.workdir, name + "-1file")
    args = list(gen_args)
    args[args.index("--shards") + 1] = "1"
    desc = "reference.py: %s and its 1-file twin give bit-identical logits" % name
    try:
        run(py(GEN_MODEL, one, *args), a.timeout)
        ref_cmd = lambda m: run(py(REFERENCE, m, "--prompt-ids", ids_arg(PROMPT), "--logits"),
                                a.timeout)
        ok = ref_cmd(one) == ref_cmd(os.path.join(a.workdir, name))
        tap.check(ok, desc)
    except RunError as e:
        tap.check(False, desc, [e])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", required=True, help="path of the cbllm-cli binary")
    p.add_argument("--workdir", required=True, help="folder for the generated models")
    p.add_argument("--tol", type=float, default=1e-4, help="max relative logits error")
    p.add_argument("--timeout", type=float, default=300, help="seconds per command")
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)

    tap = Tap()
    if not (os.path.isfile(a.cli) and os.access(a.cli, os.X_OK)):
        print("# %s is missing: every CLI check will fail" % a.cli)
    for name, gen_args in GEOMETRIES:
        check_geometry(tap, a, name, gen_args)
    check_shards(tap, a)
    check_determinism(tap, a)
    return tap.finish()


if __name__ == "__main__":
    sys.exit(main())
