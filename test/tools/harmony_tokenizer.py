#!/usr/bin/python3
"""Write a small test tokenizer in gpt-oss's shape (o200k_harmony) into a model directory.

    test/tools/harmony_tokenizer.py DIR [--template FILE] [--all-special]

tokenizer.json: byte-level BPE with the o200k pre-tokenizer as gpt-oss's tokenizer.json has it
(the Split regex, then ByteLevel), the 256 byte pieces and a few merges, filler pieces no merge
reaches up to id 199997, and the harmony tokens at gpt-oss's ids: <|startoftext|> 199998,
<|endoftext|> 199999, <|return|> 200002, <|constrain|> 200003, <|channel|> 200005, <|start|>
200006, <|end|> 200007, <|message|> 200008, <|call|> 200012 (the ids between are reserved
tokens, as in the real file), its post-processor ByteLevel as transformers' tiktoken converter
writes gpt-oss's (so no BOS is added to a prompt).  One difference from the real file: <|start|>, <|end|>,
<|message|>, <|channel|> and <|constrain|> are added tokens that are not special, so that a
regex constraint (which never allows a special token) can force a whole harmony answer; the
ids, and so what cbllm does with them, are the real ones (--all-special makes them special as
the real file has them, for the checks of which ids stop generation).  tokenizer_config.json names
<|return|> as eos and <|endoftext|> as pad, as gpt-oss's does; generation_config.json and
config.json's eos ids are gpt-oss's ([200002, 199999, 200012]); chat_template.jinja is
--template (gpt-oss's template, test/data/templates/openai-gpt-oss.jinja, by default).
Run it on a directory gen_model.py wrote (--family gpt_oss --tokenizer-from DIR reads the
vocabulary size from an earlier run, or pass the model directory itself afterwards).
"""

import argparse
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
O200K_REGEX = (
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
FIRST_SPECIAL = 199998
HARMONY = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>",
           200003: "<|constrain|>", 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>",
           200008: "<|message|>", 200012: "<|call|>"}
NOT_SPECIAL = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"}
MERGE_WORDS = ["assistant", "analysis", "final", "commentary", "system", "user", "developer",
               "message", "Reasoning", "Hello", "the", "The"]


def byte_chars():
    """GPT-2's map of the 256 bytes to printable characters (ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def tokenizer_json(all_special=False):
    """The tokenizer.json dict (every harmony token special with all_special)."""
    chars = byte_chars()
    vocab = {c: i for i, c in enumerate(chars)}
    merges = []
    for w in MERGE_WORDS:
        cur = w[0]
        for c in w[1:]:
            if cur + c not in vocab:
                merges.append("%s %s" % (cur, c))
                vocab[cur + c] = len(vocab)
            cur += c
    while len(vocab) < FIRST_SPECIAL:
        vocab["\u0100filler%d" % len(vocab)] = len(vocab)
    last = max(HARMONY)
    added = []
    for i in range(FIRST_SPECIAL, last + 1):
        text = HARMONY.get(i, "<|reserved_%d|>" % i)
        added.append({"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": all_special or text not in NOT_SPECIAL})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": O200K_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        # as transformers' tiktoken converter writes it (gpt-oss's file too): no BOS is added
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--template", default=os.path.join(HERE, "..", "data", "templates", "openai-gpt-oss.jinja"))
    ap.add_argument("--all-special", action="store_true", help="the harmony tokens special, as in the real file")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    with open(os.path.join(a.dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(a.all_special), f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(a.dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
                   "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    shutil.copyfile(a.template, os.path.join(a.dir, "chat_template.jinja"))
    cfg_path = os.path.join(a.dir, "config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        cfg.update(bos_token_id=199998, eos_token_id=200002, pad_token_id=199999)
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2)
    with open(os.path.join(a.dir, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token_id": 199998, "do_sample": True, "eos_token_id": [200002, 199999, 200012],
                   "pad_token_id": 199999, "transformers_version": "4.55.0"}, f, indent=2)


if __name__ == "__main__":
    main()
