#!/usr/bin/python3
"""The tokenizer.ggml.* metadata of a HuggingFace tokenizer directory, as a GGUF converter writes it.

    test/tools/gguf_vocab.py MODEL_DIR OUT.gguf     a GGUF file holding only that metadata
    test/tools/gguf_vocab.py --bad DIR              malformed tokenizer metadata, one file per
                                                    fault, tiny valid ones, and DIR/expect.json
                                                    (see write_bad)

As a module: tokenizer_kvs(model_dir) returns [(key, vtype, value)] in gguf_writer.py's convention
(arrays as ("array", (elem_type, list))).

What is written follows llama.cpp's converter: a SentencePiece tokenizer (byte_fallback) is model
"llama" with tokens, scores and token types (normal 1, unknown 2, control 3, user-defined 4,
unused 5, byte 6); a byte-level one is model "gpt2" with tokens, token types and merges "a b",
and tokenizer.ggml.pre names its pre-tokenizer.  Added tokens that are special, or look special
(<|...|>, <unused...>, <mask>, <pad>), are control tokens; other added tokens are user-defined.

The converter reads a SentencePiece tokenizer's scores from tokenizer.model (the piece scores
SentencePiece merges by); from tokenizer.json alone it writes -1000 for every token, which loses
the merge order.  Here, with tokenizer.json alone, a piece's score comes from its merge rank: the
piece first made by merge r scores -(r + 1), so merging the adjacent pair whose merged piece
scores highest is merging by rank, as tokenizer.json's BPE does; pieces no merge makes score -1e9.
Unlike the converter, user-defined tokens keep their "▁" (it writes spaces), so that the GGUF
tokenizer is exactly the tokenizer.json one.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_writer import GGUFWriter  # noqa: E402

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNMERGED_SCORE = -1e9
# tokenizer.ggml.pre names of byte-level files that cbllm must read (llama.cpp's names)
KNOWN_PRE = ["default", "llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "dbrx", "smaug-bpe", "qwen2",
             "deepseek-r1-qwen", "stablelm2", "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "starcoder", "refact",
             "smollm", "codeshell", "command-r", "tekken", "gpt-4o", "qwen35", "falcon", "deepseek-coder",
             "deepseek-llm"]

# tokenizer.ggml.pre by the byte-level tokenizer's Split regex
PRE_BY_REGEX = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "llama-bpe",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "qwen2",
    # o200k (gpt-4o, gpt-oss)
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "gpt-4o",
}


def looks_special(text):
    """Whether an added token's text marks it as a control token though it is not special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or
            (text.startswith("<|") and text.endswith("|>")) or
            (text.startswith("<\uff5c") and text.endswith("\uff5c>")) or
            (text.startswith("<unused") and text.endswith(">")))


def merge_pairs(merges):
    """tokenizer.json merges ("a b" or ["a", "b"]) as pairs."""
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def pre_name(tj):
    """tokenizer.ggml.pre of a byte-level tokenizer.json."""
    pre = tj.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre])
    for st in steps:
        if st.get("type") == "Split" and "Regex" in st.get("pattern", {}):
            name = PRE_BY_REGEX.get(st["pattern"]["Regex"])
            if name is None:
                raise ValueError("no tokenizer.ggml.pre for the regex %r" % st["pattern"]["Regex"])
            return name
    if any(st.get("type") == "ByteLevel" and st.get("use_regex", True) for st in steps):
        return "gpt-2"
    raise ValueError("no tokenizer.ggml.pre for this pre-tokenizer")


def config_token(cfg, key):
    """A tokenizer_config.json token (string or {"content": ...}) as text, or None."""
    v = cfg.get(key)
    return v.get("content") if isinstance(v, dict) else v


def template_edges(tj):
    """Whether the post-processor's single template starts and ends with a special token."""
    post = tj.get("post_processor") or {}
    procs = post.get("processors", [post])
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            single = p["single"]
            return "SpecialToken" in single[0], "SpecialToken" in single[-1]
    return False, False


def tokenizer_kvs(model_dir):
    """The tokenizer.ggml.* (and tokenizer.chat_template) metadata of a HF tokenizer directory."""
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    cfg = {}
    cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    model = tj["model"]
    spm = bool(model.get("byte_fallback"))
    vocab = model["vocab"]
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    n = max(list(vocab.values()) + list(added)) + 1
    tokens = ["[PAD%d]" % i for i in range(n)]
    types = [UNUSED] * n
    for piece, i in vocab.items():
        tokens[i] = piece
        types[i] = BYTE if spm and re.fullmatch(r"<0x[0-9A-F]{2}>", piece) else NORMAL
    unk = model.get("unk_token")
    if unk is not None and unk in vocab:
        types[vocab[unk]] = UNKNOWN
    for i, a in added.items():
        tokens[i] = a["content"]
        if types[i] != UNKNOWN:
            types[i] = CONTROL if a["special"] or looks_special(a["content"]) else USER_DEFINED
    by_text = {t: i for i, t in enumerate(tokens)}
    kvs = [("tokenizer.ggml.model", "string", "llama" if spm else "gpt2"),
           ("tokenizer.ggml.pre", "string", "default" if spm else pre_name(tj)),
           ("tokenizer.ggml.tokens", "array", ("string", tokens))]
    pairs = merge_pairs(model.get("merges", []))
    if spm:
        scores = [UNMERGED_SCORE] * n
        for r in range(len(pairs) - 1, -1, -1):
            scores[vocab[pairs[r][0] + pairs[r][1]]] = -(r + 1.0)
        kvs.append(("tokenizer.ggml.scores", "array", ("float32", scores)))
    kvs.append(("tokenizer.ggml.token_type", "array", ("int32", types)))
    if not spm:
        kvs.append(("tokenizer.ggml.merges", "array", ("string", [a + " " + b for a, b in pairs])))
    for key, name in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                      ("pad_token", "padding")):
        text = config_token(cfg, key)
        if text is not None and text in by_text:
            kvs.append(("tokenizer.ggml.%s_token_id" % name, "uint32", by_text[text]))
    bos_edge, eos_edge = template_edges(tj)
    kvs.append(("tokenizer.ggml.add_bos_token", "bool", bool(cfg.get("add_bos_token", bos_edge))))
    kvs.append(("tokenizer.ggml.add_eos_token", "bool", bool(cfg.get("add_eos_token", eos_edge))))
    if spm:
        norm = json.dumps(tj.get("normalizer"))
        kvs.append(("tokenizer.ggml.add_space_prefix", "bool", '"Prepend"' in norm))
    if isinstance(cfg.get("chat_template"), str):
        kvs.append(("tokenizer.chat_template", "string", cfg["chat_template"]))
    return kvs


def write_gguf(kvs, path):
    """A GGUF file holding kvs and no tensors."""
    w = GGUFWriter()
    for key, vtype, value in kvs:
        w.add(key, vtype, value)
    with open(path, "wb") as f:
        f.write(w.to_bytes())


def tiny_bpe():
    """A small valid byte-level vocabulary: a, b, ab by merge "a b", and a control token."""
    return [("tokenizer.ggml.model", "string", "gpt2"),
            ("tokenizer.ggml.pre", "string", "gpt-2"),
            ("tokenizer.ggml.tokens", "array", ("string", ["a", "b", "ab", "<|end|>"])),
            ("tokenizer.ggml.token_type", "array", ("int32", [1, 1, 1, 3])),
            ("tokenizer.ggml.merges", "array", ("string", ["a b"])),
            ("tokenizer.ggml.eos_token_id", "uint32", 3)]


def tiny_spm():
    """A small valid SentencePiece vocabulary: "ab" outscores "▁a", which has the lower id."""
    return [("tokenizer.ggml.model", "string", "llama"),
            ("tokenizer.ggml.tokens", "array", ("string", ["<unk>", "<s>", "</s>", "\u2581", "a", "b",
                                                           "\u2581a", "ab"])),
            ("tokenizer.ggml.scores", "array", ("float32", [0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -5.0, -1.0])),
            ("tokenizer.ggml.token_type", "array", ("int32", [2, 3, 3, 1, 1, 1, 1, 1])),
            ("tokenizer.ggml.bos_token_id", "uint32", 1)]


def tiny_gemma4():
    """A small Gemma 4 vocabulary: merge "▁ a" is listed before "a b" though "ab" scores higher;
    its keys ask for no BOS and a space before the text, which llama.cpp overrides."""
    return [("tokenizer.ggml.model", "string", "gemma4"),
            ("tokenizer.ggml.tokens", "array", ("string", ["<pad>", "<eos>", "<bos>", "<unk>", "▁", "a", "b",
                                                           "▁a", "ab", "<0x7A>"])),
            ("tokenizer.ggml.scores", "array", ("float32", [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -5.0, -1.0, 0.0])),
            ("tokenizer.ggml.token_type", "array", ("int32", [3, 3, 3, 2, 1, 1, 1, 1, 1, 6])),
            ("tokenizer.ggml.merges", "array", ("string", ["▁ a", "a b"])),
            ("tokenizer.ggml.bos_token_id", "uint32", 2),
            ("tokenizer.ggml.eos_token_id", "uint32", 1),
            ("tokenizer.ggml.add_bos_token", "bool", False),
            ("tokenizer.ggml.add_space_prefix", "bool", True)]


def replace(kvs, key, vtype=None, value=None):
    """kvs with key's entry replaced (or removed when vtype is None)."""
    out = [kv for kv in kvs if kv[0] != key]
    return out + [(key, vtype, value)] if vtype is not None else out


def bad_cases():
    """(file name, metadata, expected message) for each way the metadata can be wrong."""
    b, s = tiny_bpe(), tiny_spm()
    return [
        ("no_model", replace(b, "tokenizer.ggml.model"), "tokenizer.ggml.model is missing"),
        ("model_bert", replace(b, "tokenizer.ggml.model", "string", "bert"),
         "tokenizer.ggml.model \"bert\" is not supported"),
        ("pre_unknown", replace(b, "tokenizer.ggml.pre", "string", "frobnicate"),
         "tokenizer.ggml.pre \"frobnicate\" is not a known pre-tokenizer"),
        ("tokens_int", replace(b, "tokenizer.ggml.tokens", "array", ("int32", [1, 2])),
         "tokenizer.ggml.tokens must be an array of string"),
        ("tokens_empty", replace(b, "tokenizer.ggml.tokens", "array", ("string", [])),
         "tokenizer.ggml.tokens has 0 tokens"),
        ("tokens_repeat", replace(b, "tokenizer.ggml.tokens", "array", ("string", ["a", "b", "ab", "b"])),
         "tokenizer.ggml.tokens[3] repeats tokens[1]"),
        ("tokens_utf8", replace(b, "tokenizer.ggml.tokens", "array", ("string", ["a", "b", "ab", b"\xff"])),
         "tokenizer.ggml.tokens[3] is not valid UTF-8"),
        ("token_too_long", replace(b, "tokenizer.ggml.tokens", "array", ("string", ["a", "b", "ab", "x" * 5000])),
         "tokenizer.ggml.tokens[3] has 5000 bytes (at most 4096 allowed)"),
        ("token_nul", replace(b, "tokenizer.ggml.tokens", "array", ("string", ["a", "b\0", "ab", "c"])),
         "tokenizer.ggml.tokens[1] holds a NUL byte"),
        ("token_empty_repeats_name", replace(b, "tokenizer.ggml.tokens", "array",
                                             ("string", ["a", "", "ab", "[EMPTY_1]"])),
         "tokenizer.ggml.tokens[3] repeats tokens[1] \"[EMPTY_1]\""),
        ("types_count", replace(b, "tokenizer.ggml.token_type", "array", ("int32", [1, 1])),
         "tokenizer.ggml.token_type has 2 entries for 4 tokens"),
        ("types_value", replace(b, "tokenizer.ggml.token_type", "array", ("int32", [1, 1, 9, 3])),
         "tokenizer.ggml.token_type[2] = 9 is not a token type"),
        ("types_float", replace(b, "tokenizer.ggml.token_type", "array", ("float32", [1, 1, 1, 3])),
         "tokenizer.ggml.token_type must be an array of int32"),
        ("merges_missing", replace(b, "tokenizer.ggml.merges"), "tokenizer.ggml.merges is missing"),
        ("merge_unknown", replace(b, "tokenizer.ggml.merges", "array", ("string", ["a b", "a c"])),
         "tokenizer.ggml.merges[1] names a piece that is not a token"),
        ("merge_no_space", replace(b, "tokenizer.ggml.merges", "array", ("string", ["ab"])),
         "tokenizer.ggml.merges[0] is not two pieces joined by one space"),
        ("merge_result", replace(b, "tokenizer.ggml.merges", "array", ("string", ["b a"])),
         "tokenizer.ggml.merges[0]: the merged piece is not a token"),
        ("eos_range", replace(b, "tokenizer.ggml.eos_token_id", "uint32", 4),
         "tokenizer.ggml.eos_token_id = 4 is not a token id"),
        ("eos_string", replace(b, "tokenizer.ggml.eos_token_id", "string", "3"),
         "tokenizer.ggml.eos_token_id must be an integer"),
        ("add_bos_u8", replace(b, "tokenizer.ggml.add_bos_token", "uint8", 1),
         "tokenizer.ggml.add_bos_token"),
        ("spm_no_scores", replace(s, "tokenizer.ggml.scores"), "tokenizer.ggml.scores is missing"),
        ("spm_scores_count", replace(s, "tokenizer.ggml.scores", "array", ("float32", [0.0])),
         "tokenizer.ggml.scores has 1 entries for 8 tokens"),
        ("spm_scores_int", replace(s, "tokenizer.ggml.scores", "array", ("int32", [0] * 8)),
         "tokenizer.ggml.scores must be an array of float32"),
        ("spm_score_nan", replace(s, "tokenizer.ggml.scores", "array",
                                  ("float32", [0.0, float("nan"), 0.0, -1.0, -2.0, -2.0, -5.0, -1.0])),
         "tokenizer.ggml.scores[1] is not a finite number"),
        ("pad_range", replace(b, "tokenizer.ggml.padding_token_id", "int32", -2),
         "tokenizer.ggml.padding_token_id = -2 is not a token id"),
        ("spm_space_prefix_str", replace(s, "tokenizer.ggml.add_space_prefix", "string", "no"),
         "tokenizer.ggml.add_space_prefix"),
        ("spm_bos_range", replace(s, "tokenizer.ggml.bos_token_id", "uint32", 600000),
         "tokenizer.ggml.bos_token_id = 600000 is not a token id"),
    ]


def write_bad(out):
    """The malformed files, the tiny ones (tiny_bpe with "\u0120b" under each known
    pre-tokenizer name as pre_NAME.gguf) and out/expect.json: {"refused": {file: message}, "pre": [file]}."""
    os.makedirs(out, exist_ok=True)
    expect = {"refused": {}, "pre": []}
    for name, kvs, msg in bad_cases():
        write_gguf(kvs, os.path.join(out, name + ".gguf"))
        expect["refused"][name + ".gguf"] = msg
    for name, kvs in (("tiny_bpe", tiny_bpe()), ("tiny_spm", tiny_spm()), ("tiny_gemma4", tiny_gemma4()),
                      ("tiny_bpe_empty", replace(tiny_bpe(), "tokenizer.ggml.tokens", "array",
                                                 ("string", ["a", "b", "ab", ""]))),
                      ("tiny_bpe_eos_none", replace(tiny_bpe(), "tokenizer.ggml.eos_token_id", "uint32", 0xFFFFFFFF)),
                      # <s> and </s> stored as user-defined tokens, as Gemma-3's files store them
                      ("tiny_spm_user", replace(tiny_spm(), "tokenizer.ggml.token_type", "array",
                                                ("int32", [2, 4, 4, 1, 1, 1, 1, 1])))):
        write_gguf(kvs, os.path.join(out, name + ".gguf"))
    spaced = replace(replace(replace(tiny_bpe(), "tokenizer.ggml.tokens", "array",
                                     ("string", ["a", "b", "ab", "<|end|>", "\u0120", "\u0120b"])),
                             "tokenizer.ggml.token_type", "array", ("int32", [1, 1, 1, 3, 1, 1])),
                     "tokenizer.ggml.merges", "array", ("string", ["a b", "\u0120 b"]))
    for pre in KNOWN_PRE:
        write_gguf(replace(spaced, "tokenizer.ggml.pre", "string", pre), os.path.join(out, "pre_%s.gguf" % pre))
        expect["pre"].append("pre_%s.gguf" % pre)
    with open(os.path.join(out, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bad", metavar="DIR", help="write the malformed fixtures into DIR")
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("out", nargs="?")
    a = ap.parse_args()
    if a.bad:
        write_bad(a.bad)
    elif a.model_dir and a.out:
        write_gguf(tokenizer_kvs(a.model_dir), a.out)
    else:
        ap.error("give MODEL_DIR OUT.gguf, or --bad DIR")


if __name__ == "__main__":
    main()
