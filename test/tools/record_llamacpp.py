#!/usr/bin/python3
"""Record llama.cpp's answers on the real models, once, into test/data/real/MODEL/*.json.

    record_llamacpp.py --bin LLAMA_BIN --model NAME=FILE.gguf [--model ...] [--out test/data/real]

LLAMA_BIN is test/tools/build_llamacpp.sh's folder: llama-perplexity and cbllm-llamacpp-record
(test/tools/llamacpp_record.c) built against the same libllama.  test/tools/record_llamacpp.sh
runs this with the fetched models.  For each model it writes:

  greedy.json      the prompts of test/data/real/prompts.json (the chat ones rendered with the
                   file's own chat template by Python Jinja2, add_generation_prompt true; plain
                   text where the file has no template, "chat" false then), each
                   tokenized by llama.cpp (BOS as the vocabulary says, special-token text parsed),
                   with llama.cpp's N greedy ids and each step's top-1 minus top-2 logit
  tokenize.json    the ids llama.cpp gives each text of test/data/real/texts.json, in two modes:
                   "parsed" (parse_special true, add_special false) for every text and
                   "literal" (parse_special false) for the texts that hold special-token text;
                   and "with_bos" (add_special true, parse_special true) for a few texts
  perplexity.json  llama-perplexity's estimates on test/data/real/alice-chapter1.txt at
                   contexts of 128 and 1024 tokens (2 threads), with their chunk counts
"""

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gguf_meta  # noqa: E402
import render_chat  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(REPO, "test", "data", "real")
CONTEXTS = (128, 1024)   # 1024: half of each chunk lies beyond Gemma-3's 512-token window
THREADS = 2
SPECIAL_MARKS = ("<|", "|>", "<s>", "</s>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
                 "_of_turn>")
WITH_BOS_TEXTS = 8


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_lines(cmd, lines):
    """Run cmd with one JSON value per input line; one parsed JSON value per output line."""
    data = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines)
    out = subprocess.run(cmd, input=data.encode("utf-8"), stdout=subprocess.PIPE, check=True).stdout
    result = [json.loads(line) for line in out.decode("utf-8").splitlines()]
    if len(result) != len(lines):
        raise SystemExit("%s gave %d lines for %d" % (cmd[1], len(result), len(lines)))
    return result


def record_tokenize(rec, model, texts):
    literal = [t for t in texts if any(m in t for m in SPECIAL_MARKS)]
    with_bos = texts[:WITH_BOS_TEXTS]
    modes = []
    for name, add, parse, chosen in (("parsed", 0, 1, texts), ("literal", 0, 0, literal),
                                     ("with_bos", 1, 1, with_bos)):
        ids = run_lines([rec, "tokenize", model, str(add), str(parse)], chosen)
        modes.append({"mode": name, "add_special": bool(add), "parse_special": bool(parse),
                      "cases": [{"text": t, "ids": i} for t, i in zip(chosen, ids)]})
    return modes


def record_greedy(rec, model, meta, prompts, n):
    template, tokens = gguf_meta.chat_inputs(meta)
    texts = []
    chat = [p["chat"] and template is not None for p in prompts]
    for p, c in zip(prompts, chat):
        if c:
            req = {"messages": [{"role": "user", "content": p["text"]}], "add_generation_prompt": True}
            texts.append(render_chat.render(template, tokens, req))
        else:
            texts.append(p["text"])
    # the prompt as llama.cpp reads a prompt: BOS as the vocabulary says, special text parsed
    prompt_ids = run_lines([rec, "tokenize", model, "1", "1"], texts)
    results = run_lines([rec, "greedy", model, str(n), str(THREADS)], prompt_ids)
    return [{"text": p["text"], "chat": c, "prompt": t, "prompt_ids": i,
             "ids": r["ids"], "margins": r["margins"]}
            for p, c, t, i, r in zip(prompts, chat, texts, prompt_ids, results)]


def record_perplexity(bindir, model, text_path, context):
    out = subprocess.run([os.path.join(bindir, "llama-perplexity"), "-m", model, "-f", text_path,
                          "-c", str(context), "-t", str(THREADS)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, check=True).stdout.decode("utf-8", "replace")
    est = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    chunks = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", out)
    ntok = re.search(r"tokenizes to only (\d+) tokens", out)
    if est is None or chunks is None or ntok is not None:
        raise SystemExit("llama-perplexity gave no estimate:\n" + out[-3000:])
    return {"context": context, "chunks": int(chunks.group(1)),
            "perplexity": float(est.group(1)), "plus_minus": float(est.group(2))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=FILE.gguf")
    ap.add_argument("--out", default=DATA)
    ap.add_argument("--version", default="", help="what llama.cpp this is, for the files")
    args = ap.parse_args()
    rec = os.path.join(args.bin, "cbllm-llamacpp-record")
    with open(os.path.join(DATA, "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]
    with open(os.path.join(DATA, "prompts.json"), encoding="utf-8") as f:
        pj = json.load(f)
    text_path = os.path.join(DATA, "alice-chapter1.txt")
    for spec in args.model:
        name, path = spec.split("=", 1)
        meta = gguf_meta.read_meta(path)
        info = json.loads(subprocess.run([rec, "info", path], stdout=subprocess.PIPE,
                                         check=True).stdout)
        head = {"model": name, "file_sha256": sha256(path), "llama_cpp": args.version, "vocab": info}
        outdir = os.path.join(args.out, name)
        os.makedirs(outdir, exist_ok=True)
        files = {
            "tokenize.json": dict(head, modes=record_tokenize(rec, path, texts)),
            "greedy.json": dict(head, n_predict=pj["n_predict"], threads=THREADS,
                                prompts=record_greedy(rec, path, meta, pj["prompts"], pj["n_predict"])),
            "perplexity.json": dict(head, text="alice-chapter1.txt", threads=THREADS,
                                    runs=[record_perplexity(args.bin, path, text_path, c) for c in CONTEXTS]),
        }
        for fname, obj in files.items():
            with open(os.path.join(outdir, fname), "w", encoding="utf-8") as f:
                json.dump(obj, f, ensure_ascii=False, indent=1)
                f.write("\n")
            print("record_llamacpp: wrote %s" % os.path.join(outdir, fname))
    return 0


if __name__ == "__main__":
    sys.exit(main())
