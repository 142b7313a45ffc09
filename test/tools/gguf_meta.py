#!/usr/bin/python3
"""The metadata of a GGUF file (no tensors), and what a chat template needs of it.

    gguf_meta.py FILE.gguf [KEY ...]      prints the keys' values (all scalar keys without KEY)

Shares gguf_to_hf.py's little-endian reader; independent of the C engine.  chat_inputs()
gives the chat template (tokenizer.chat_template) and the texts of the BOS and EOS tokens,
which transformers would read from tokenizer_config.json as bos_token and eos_token.
"""

import json
import sys

import numpy as np

from gguf_to_hf import Reader


def read_meta(path):
    """The metadata dict of a GGUF file."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if bytes(data[:4]) != b"GGUF":
        raise SystemExit("gguf_meta.py: %s: not a GGUF file" % path)
    r = Reader(data)
    r.pos = 4
    if r.take("<I") not in (2, 3):
        raise SystemExit("gguf_meta.py: %s: unsupported GGUF version" % path)
    r.take("<Q")
    meta = {}
    for _ in range(r.take("<Q")):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    return meta


def chat_inputs(meta):
    """(template, {"bos_token": ..., "eos_token": ...}) of a GGUF file's metadata."""
    tokens = meta.get("tokenizer.ggml.tokens", [])
    special = {}
    for name in ("bos", "eos"):
        tid = meta.get("tokenizer.ggml.%s_token_id" % name)
        if tid is not None and 0 <= tid < len(tokens):
            special[name + "_token"] = tokens[tid]
    return meta.get("tokenizer.chat_template"), special


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: gguf_meta.py FILE.gguf [KEY ...]\n")
        return 2
    meta = read_meta(argv[1])
    keys = argv[2:] or [k for k, v in meta.items() if not isinstance(v, list)]
    for k in keys:
        print("%s = %s" % (k, json.dumps(meta.get(k), ensure_ascii=False)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
