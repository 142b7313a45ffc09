#!/usr/bin/python3
"""Write the seed corpus of every fuzz target into test/fuzz/corpus/<target>/.

    test/fuzz/make_corpus.py [--out DIR]

The seeds are made from the project's real fixtures, trimmed small, plus hand-made
edge cases:
  - config.json, tokenizer.json, tokenizer_config.json, safetensors headers and a
    sharded index from test/tools/gen_model.py (the tiny models of the engine tests);
  - the three real config.json files quoted in test/unit/fixture.c;
  - the Llama-2 tokenizer of test/data/llama2-tokenizer/, trimmed to its first pieces
    (and the pieces and merges that build them), renumbered densely;
  - small byte-level tokenizer.json files (GPT-2's 256 byte characters and a few merges,
    the Llama-3 split regex, ByteLevel, NFC, post-processors) and Gemma-style and
    Split-behaviour ones, so the fuzzer starts inside every pre-tokenizer and decoder;
  - for safetensors, the generated headers with every dimension cut to at most 2 (so
    the data is a few hundred bytes and every tensor is valid), and once verbatim with
    the data cut off (the truncated-file path);
  - for gguf, files written by test/tools/gguf_writer.py: the unit test's two well-formed
    files (every metadata type, F32/F16/quantized tensors), a small one, and its
    malformed cases (truncations, absurd counts, overlaps, bad alignment ...);
  - for tokenizer_gguf, tokenizer metadata written by test/tools/gguf_vocab.py: its tiny
    and malformed files, the trimmed Llama-2 tokenizer and the small byte-level ones;
  - for request_check and ipc, whose inputs are C structs, what test/fuzz/make_seeds.c
    writes through the real structs and ring (compiled here with $CC, default cc).
Files named crash-* or regress-* in the corpus are findings kept as regression inputs;
this script leaves them alone and rewrites only the seeds it makes.  The same
repository gives byte-identical seeds.
"""

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GEN_MODEL = os.path.join(ROOT, "test", "tools", "gen_model.py")
LLAMA2 = os.path.join(ROOT, "test", "data", "llama2-tokenizer")
TEST_FIXTURE = os.path.join(ROOT, "test", "unit", "fixture.c")
GEOMETRY = ["--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
            "--intermediate", "160", "--vocab", "400"]
SP = "\u2581"


def dumps(obj):
    """Compact, deterministic JSON (non-ASCII kept as UTF-8)."""
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")).encode()


class Corpus:
    """Writes seeds and remembers which files it wrote, per target."""

    def __init__(self, out):
        self.out = out
        self.written = {}

    def put(self, target, name, data):
        if isinstance(data, str):
            data = data.encode()
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        self.written.setdefault(target, set()).add(name)

    def prune(self):
        """Remove stale seeds (not findings) this run did not write."""
        for target, names in self.written.items():
            d = os.path.join(self.out, target)
            for n in os.listdir(d):
                if n not in names and not n.startswith(("crash-", "regress-")):
                    os.remove(os.path.join(d, n))


def gen_model(out, *args):
    subprocess.run([sys.executable, GEN_MODEL, out, *GEOMETRY, *args], check=True,
                   stdout=subprocess.DEVNULL)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def st_header(path):
    """The JSON header of a safetensors file (as an ordered dict) and its raw bytes."""
    b = read(path)
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[:8 + n]


def st_file(header, data=b""):
    """A safetensors file: 8-byte length, header JSON, data."""
    h = dumps(header)
    return struct.pack("<Q", len(h)) + h + data


def st_shrink(header):
    """The header with every dimension cut to at most 2, offsets packed, zero data."""
    out, off = {}, 0
    for name, ent in header.items():
        if name == "__metadata__":
            out[name] = ent
            continue
        shape = [min(d, 2) for d in ent["shape"]]
        n = {"F32": 4, "F16": 2, "BF16": 2}[ent["dtype"]]
        for d in shape:
            n *= d
        out[name] = {"dtype": ent["dtype"], "shape": shape, "data_offsets": [off, off + n]}
        off += n
    return st_file(out, bytes(range(256)) * (off // 256) + bytes(off % 256))


def loader_configs():
    """The real config.json texts quoted in fixture.c, by variable name (less "fixture_")."""
    src = read(TEST_FIXTURE).decode()
    found = {}
    for name in ("llama2_7b_chat", "tinyllama_chat", "mistral_7b"):
        m = re.search(r"const char \*const fixture_" + name + r" =\s*((?:\"(?:[^\"\\]|\\.)*\"\s*)+);", src)
        if m is None:
            sys.exit(f"make_corpus.py: fixture_{name} not found in {TEST_FIXTURE}")
        text = "".join(json.loads(s) for s in re.findall(r"\"(?:[^\"\\]|\\.)*\"", m.group(1)))
        found[name] = text
    return found


def llama2_trimmed(keep_below=384):
    """The Llama-2 tokenizer.json cut to its first pieces and what builds them."""
    tok = json.loads(read(os.path.join(LLAMA2, "tokenizer.json")))
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    keep = {p for p, i in vocab.items() if i < keep_below}
    by_result = {}
    for m in merges:
        a, b = m.split(" ")
        by_result.setdefault(a + b, (a, b))
    todo = list(keep)
    while todo:                            # the pieces that merge into a kept piece
        p = todo.pop()
        for q in by_result.get(p, ()):
            if q not in keep and q in vocab:
                keep.add(q)
                todo.append(q)
    kept = sorted(keep, key=lambda p: vocab[p])
    tok["model"]["vocab"] = {p: i for i, p in enumerate(kept)}
    tok["model"]["merges"] = [m for m in merges
                              if all(x in keep for x in m.split(" ")) and m.replace(" ", "") in keep]
    return dumps(tok)


def configs(c, gen, real):
    for name, d in (("gen_llama_f32", "f32"), ("gen_mistral_swa_f16", "mistral"),
                    ("gen_llama_bf16_tied", "bf16")):
        c.put("config", name + ".json", read(os.path.join(gen, d, "config.json")))
    for name, text in real.items():
        c.put("config", name + ".json", text)
    base = json.loads(read(os.path.join(gen, "f32", "config.json")))
    edits = {
        "rope_linear": {"rope_scaling": {"type": "linear", "factor": 4.0}},
        "rope_type_llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        "head_dim_explicit": {"head_dim": 32, "hidden_size": 72},
        "eos_list": {"eos_token_id": [2, 32000, 7]},
        "kv_heads_not_dividing": {"num_key_value_heads": 3},
        "hidden_act_gelu": {"hidden_act": "gelu"},
        "fractional_size": {"hidden_size": 64.5},
        "negative_layers": {"num_hidden_layers": -2},
        "string_size": {"vocab_size": "400"},
        "nulls": {"rope_theta": None, "rms_norm_eps": None, "bos_token_id": None},
        "bias_true": {"attention_bias": True},
    }
    for name, e in edits.items():
        c.put("config", name + ".json", dumps({**base, **e}))
    c.put("config", "model_type_only.json", dumps(
        {"model_type": "mistral", "hidden_size": 16, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 24, "vocab_size": 32}))
    c.put("config", "empty_object.json", "{}")
    c.put("config", "array.json", "[1, 2, 3]")
    c.put("config", "truncated.json", read(os.path.join(gen, "f32", "config.json"))[:200])


def safetensors(c, gen):
    for name, path in (("gen_f32", "f32/model.safetensors"),
                       ("gen_f16_mistral", "mistral/model.safetensors"),
                       ("gen_bf16_shard1", "bf16/model-00001-of-00002.safetensors"),
                       ("gen_bf16_shard2", "bf16/model-00002-of-00002.safetensors")):
        header, raw = st_header(os.path.join(gen, path))
        c.put("safetensors", name + "_shrunk.safetensors", st_shrink(header))
        if name == "gen_f32":
            c.put("safetensors", name + "_header_data_cut.safetensors", raw + bytes(64))
    w = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    cases = {
        "empty_header": ({}, b""),
        "metadata_only": ({"__metadata__": {"format": "pt"}}, b""),
        "scalar": ({"s": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}}, bytes(2)),
        "zero_elements": ({"z": {"dtype": "F16", "shape": [0, 7], "data_offsets": [0, 0]}}, b""),
        "four_dims": ({"t": {"dtype": "F32", "shape": [1, 2, 1, 2], "data_offsets": [0, 16]}}, bytes(16)),
        "five_dims": ({"t": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [0, 4]}}, bytes(4)),
        "dtype_i64": ({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8)),
        "same_name_twice": ({"a": w, "b": w}, bytes(16)),
        "offsets_backwards": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, bytes(8)),
        "offsets_strings": ({"a": {"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]}}, bytes(4)),
        "negative_dim": ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b""),
        "bytes_unlike_shape": ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),
        "past_the_end": ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8)),
    }
    for name, (header, data) in cases.items():
        c.put("safetensors", name + ".safetensors", st_file(header, data))
    c.put("safetensors", "header_length_too_big.safetensors", struct.pack("<Q", 4096) + b"{}" + bytes(54))
    c.put("safetensors", "header_not_json.safetensors", struct.pack("<Q", 8) + b"not json")
    c.put("safetensors", "header_array.safetensors", struct.pack("<Q", 6) + b"[1, 2]")
    c.put("safetensors", "seven_bytes.safetensors", bytes(7))


def index(c, gen):
    c.put("safetensors_index", "gen_bf16_2_shards.index.json",
          read(os.path.join(gen, "bf16", "model.safetensors.index.json")))
    s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    cases = {
        "same_shard_many_times": {"weight_map": {"a": s1, "b": s1, "c": s2, "d": s1}},
        "slash_in_name": {"weight_map": {"a": s1, "b": "../model.safetensors"}},
        "value_not_a_string": {"weight_map": {"a": 1}},
        "weight_map_array": {"weight_map": [s1]},
        "no_weight_map": {"metadata": {"total_size": 16}},
        "empty_weight_map": {"weight_map": {}},
        "shard_that_fails": {"weight_map": {"a": s1, "b": "stop.safetensors", "c": s2}},
        "empty_name": {"weight_map": {"a": ""}},
    }
    for name, obj in cases.items():
        c.put("safetensors_index", name + ".json", dumps(obj))
    c.put("safetensors_index", "not_json.json", "{\"weight_map\": {\"a\": ")


SMALL_VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "ab": 5, SP: 6, SP + "a": 7}
LLAMA_NORM = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": SP},
    {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}


def byte_level_chars():
    """GPT-2's bytes_to_unicode: the character that stands for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level_cases():
    """Small byte-level (GPT-2 / Llama-3 / Qwen style) and Gemma-style tokenizer.json files."""
    chars = byte_level_chars()
    vocab = {chars[b]: b for b in range(256)}
    merges = []
    for a, b in (("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("e", "l"), ("el", "l"), ("1", "2")):
        vocab.setdefault(a + b, len(vocab))
        merges.append([a, b])
    bl = {"type": "BPE", "vocab": vocab, "merges": merges, "unk_token": None}
    added = [{"id": len(vocab), "content": "<|begin_of_text|>", "special": True},
             {"id": len(vocab) + 1, "content": "<think>", "special": False}]
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
                                                         "ids": [len(vocab)]}}}
    sp_vocab = {**SMALL_VOCAB, **{"<0x%02X>" % b: 8 + b for b in range(256)}, "<bos>": 264}
    return {
        "bytelevel_llama3": {
            "model": {**bl, "ignore_merges": True}, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
            "post_processor": {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True}, template]},
            "decoder": {"type": "ByteLevel"}, "added_tokens": added},
        "bytelevel_gpt2_nfc": {
            "model": {**bl, "merges": [" ".join(m) for m in merges]},
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
            "post_processor": {"type": "RobertaProcessing", "cls": ["<|begin_of_text|>", len(vocab)],
                               "sep": ["<think>", len(vocab) + 1]},
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteLevel"}]},
            "added_tokens": added},
        "split_behaviors": {
            "model": {**bpe_small(), "byte_fallback": True, "vocab": sp_vocab},
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFD"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious"},
                {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "MergedWithNext",
                 "invert": True},
                {"type": "Split", "pattern": {"Regex": "a*"}, "behavior": "Contiguous"},
                {"type": "Split", "pattern": {"String": "b"}, "behavior": "Removed"}]},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Strip", "content": "a", "start": 1, "stop": 1},
                {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always"},
                {"type": "ByteFallback"}, {"type": "Fuse"}]}},
        "gemma_like": {
            "model": {**bpe_small(), "byte_fallback": True, "fuse_unk": True, "vocab": sp_vocab},
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SP},
            "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                              "behavior": "MergedWithPrevious", "invert": False},
            "post_processor": {**template, "single": [
                {"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A"}}],
                "special_tokens": {"<bos>": {"id": "<bos>", "ids": [264]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": SP}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]},
            "added_tokens": [
                {"id": 264, "content": "<bos>", "special": True},
                {"id": 265, "content": "\n\n", "special": False},
                {"id": 266, "content": SP + SP, "special": False},
                {"id": 267, "content": "hey", "special": False, "single_word": True}]},
        "split_bad_regex": {"model": bpe_small(), "pre_tokenizer": {
            "type": "Split", "pattern": {"Regex": "(\\p{L"}, "behavior": "Isolated"}},
    }


def bpe_small():
    return {"type": "BPE", "vocab": SMALL_VOCAB, "merges": [["a", "b"], [SP, "a"]],
            "unk_token": "<unk>"}


def tokenizers(c, gen):
    c.put("tokenizer", "gen_synthetic_400.json", read(os.path.join(gen, "f32", "tokenizer.json")))
    c.put("tokenizer", "llama2_trimmed.json", llama2_trimmed())
    bpe = {"type": "BPE", "vocab": SMALL_VOCAB, "merges": [["a", "b"], [SP, "a"]],
           "unk_token": "<unk>"}
    cases = {
        "small_added_lstrip_rstrip": {
            "model": {**bpe, "fuse_unk": True, "byte_fallback": False},
            "normalizer": LLAMA_NORM, "pre_tokenizer": None,
            "added_tokens": [
                {"id": 1, "content": "<s>", "special": True},
                {"id": 8, "content": "<sep>", "special": False, "lstrip": True, "rstrip": True,
                 "normalized": False},
                {"id": 9, "content": "hey", "special": False, "normalized": True}]},
        "metaspace_first": {
            "model": {**bpe, "merges": ["a b", SP + " a"]}, "normalizer": None,
            "pre_tokenizer": {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first",
                              "split": True}},
        "metaspace_add_prefix_space": {
            "model": bpe, "pre_tokenizer": {"type": "Metaspace", "add_prefix_space": False}},
        "no_unk": {"model": {**bpe, "merges": [], "unk_token": None}},
        "ignore_merges": {"model": {**bpe, "ignore_merges": True}, "normalizer": LLAMA_NORM},
        "no_type_merges_only": {"model": {"vocab": SMALL_VOCAB, "merges": []}},
        "empty_vocab": {"model": {"type": "BPE", "vocab": {}, "merges": []}},
        "sparse_ids": {"model": {"type": "BPE", "vocab": {"a": 0, "b": 90, "ab": 7},
                                 "merges": ["a b"]}},
        "added_beyond_vocab": {"model": bpe, "added_tokens": [
            {"id": 8, "content": "<x>", "special": True},
            {"id": 9, "content": "<y>", "special": True, "lstrip": True}]},
        "added_overrides_piece": {"model": bpe, "normalizer": LLAMA_NORM, "added_tokens": [
            {"id": 5, "content": "AB", "special": False, "normalized": True}]},
        "nested_sequence": {"model": bpe, "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Sequence", "normalizers": [LLAMA_NORM, {"type": "Prepend", "prepend": ""}]},
            {"type": "Replace", "pattern": {"String": "ab"}, "content": "ba"}]}},
        "byte_fallback_pieces": {"model": {
            "type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "merges": [],
            "vocab": {"<unk>": 0, **{"<0x%02X>" % b: b + 1 for b in range(256)}}}},
        "model_type_wordpiece": {"model": {"type": "WordPiece", "vocab": {}}},
        "regex_replace": {"model": bpe, "normalizer": {
            "type": "Replace", "pattern": {"Regex": " "}, "content": "x"}},
        "dropout": {"model": {**bpe, "dropout": 0.1}},
    }
    cases.update(byte_level_cases())
    for name, obj in cases.items():
        c.put("tokenizer", name + ".json", dumps(obj))
    c.put("tokenizer", "vocab_id_huge.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e300}}}")
    c.put("tokenizer", "invalid_json.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1,")


def tokenizer_configs(c, gen):
    c.put("tokenizer_config", "llama2.json", read(os.path.join(LLAMA2, "tokenizer_config.json")))
    c.put("tokenizer_config", "gen_synthetic.json",
          read(os.path.join(gen, "f32", "tokenizer_config.json")))
    cases = {
        "object_tokens": {"add_bos_token": False, "bos_token": {"content": "<s>", "lstrip": False},
                          "eos_token": None},
        "add_eos": {"add_bos_token": True, "add_eos_token": True, "bos_token": "<s>",
                    "eos_token": "</s>"},
        "chat_eos": {"bos_token": "<s>", "eos_token": "<|im_end|>", "pad_token": "<pad>",
                     "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"},
        "vocab_piece_as_bos": {"bos_token": SP + "a", "eos_token": "ab"},
        "unknown_token": {"bos_token": "<nope>"},
        "bos_a_number": {"bos_token": 5},
        "add_bos_a_string": {"add_bos_token": "true"},
        "empty_object": {},
    }
    for name, obj in cases.items():
        c.put("tokenizer_config", name + ".json", dumps(obj))
    c.put("tokenizer_config", "array.json", "[]")
    c.put("tokenizer_config", "invalid_json.json", "{\"bos_token\": ")


def chat_templates(c):
    """Seeds of fuzz_chat_template: a real or published template, a NUL, and a message list."""
    sys.path.insert(0, os.path.join(ROOT, "test"))
    import chat_template_test
    templates = {"llama2": chat_template_test.LLAMA2_TEMPLATE, "mistral": chat_template_test.MISTRAL_TEMPLATE,
                 "features": chat_template_test.FEATURES_TEMPLATE}
    messages = [m for _, m in chat_template_test.cases()[:6:2]]
    for model in ("llama3_1", "qwen3", "gemma3"):
        cfg = json.loads(read(os.path.join(ROOT, "test", "data", "tokenizers", model, "tokenizer_config.json")))
        templates[model] = cfg["chat_template"]
    for name, text in sorted(templates.items()):
        c.put("chat_template", name + ".jinja", text)
        for i, req in enumerate(messages):
            c.put("chat_template", "%s_%d.bin" % (name, i), text.encode() + b"\0" + dumps(req["messages"]))
    c.put("chat_template", "syntax.jinja", "{% for x in %}{{ 'a' ~ }}{% endif %}{{ x|wordwrap }}")


def reasoning(c):
    """Seeds of fuzz_reasoning: answers as fuzz_reasoning.c reads them (format byte, records)."""
    def text(t):
        return bytes([len(t)]) + t.encode()
    channel, message, start, end, ret, think, unthink = 0x83, 0x82, 0x80, 0x81, 0x85, 0x87, 0x88
    c.put("reasoning", "harmony_whole", bytes([0, channel]) + text("analysis") + bytes([message]) +
          text("Think. ") + bytes([end, start]) + text("assistant") + bytes([channel]) + text("final") +
          bytes([message]) + text("Answer") + bytes([ret]))
    c.put("reasoning", "harmony_tool", bytes([3, channel]) + text("commentary to=functions.f ") +
          bytes([0x84]) + text("json") + bytes([message]) + text('{"a": 1}') + bytes([0x86]))
    c.put("reasoning", "harmony_plain", bytes([0]) + text("no markers <|channel|> at all"))
    c.put("reasoning", "think_whole", bytes([1]) + text("\n") + bytes([think]) + text("\nhmm\n") +
          bytes([unthink]) + text("\n\nok"))
    c.put("reasoning", "think_opened", bytes([5]) + text("inside") + bytes([unthink]) + text(" after"))
    c.put("reasoning", "none", bytes([2]) + text("<think>x</think> y") + bytes([think]))


def gguf(c):
    sys.path.insert(0, os.path.join(ROOT, "test", "tools"))
    import gguf_writer
    for name, version, alignment in (("every_type_v3", 3, 64), ("every_type_v2", 2, None)):
        c.put("gguf", name + ".gguf", gguf_writer.good_file(version, alignment)[0])
    c.put("gguf", "small.gguf", gguf_writer.small().to_bytes())
    for name, data, _ in gguf_writer.bad_files():
        c.put("gguf", "bad_" + name + ".gguf", data)


def tokenizer_gguf(c, tmp):
    """GGUF files of tokenizer metadata, written by test/tools/gguf_vocab.py: its tiny and
    malformed ones, the trimmed Llama-2 tokenizer and the byte-level cases it can describe."""
    sys.path.insert(0, os.path.join(ROOT, "test", "tools"))
    import gguf_vocab
    out = os.path.join(tmp, "tokenizer_gguf")
    gguf_vocab.write_bad(out)
    for name in sorted(os.listdir(out)):
        if name.endswith(".gguf"):
            c.put("tokenizer_gguf", name, read(os.path.join(out, name)))
    cases = {"llama2_trimmed": json.loads(llama2_trimmed())}
    cases.update(byte_level_cases())
    for name, obj in cases.items():
        d = os.path.join(tmp, "tokenizer_gguf_" + name)
        os.makedirs(d)
        with open(os.path.join(d, "tokenizer.json"), "wb") as f:
            f.write(dumps(obj))
        try:
            kvs = gguf_vocab.tokenizer_kvs(d)
        except (ValueError, KeyError, TypeError):
            continue                       # a pre-tokenizer GGUF has no name for
        gguf_vocab.write_gguf(kvs, os.path.join(d, "t.gguf"))
        c.put("tokenizer_gguf", name + ".gguf", read(os.path.join(d, "t.gguf")))


def binary_seeds(c, tmp):
    """The request_check and ipc seeds, written by make_seeds.c through the real structs."""
    prog = os.path.join(tmp, "make_seeds")
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-D_GNU_SOURCE", "-I", os.path.join(ROOT, "src"),
                    os.path.join(ROOT, "test", "fuzz", "make_seeds.c"), os.path.join(ROOT, "src", "ipc.c"),
                    os.path.join(ROOT, "src", "request_params.c"), "-lm", "-o", prog], check=True)
    out = os.path.join(tmp, "seeds")
    for target in ("request_check", "ipc"):
        os.makedirs(os.path.join(out, target))
    subprocess.run([prog, out], check=True)
    for target in ("request_check", "ipc"):
        for name in sorted(os.listdir(os.path.join(out, target))):
            c.put(target, name, read(os.path.join(out, target, name)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "test", "fuzz", "corpus"))
    a = p.parse_args()
    c = Corpus(a.out)
    with tempfile.TemporaryDirectory() as gen:
        gen_model(os.path.join(gen, "f32"), "--dtype", "f32")
        gen_model(os.path.join(gen, "bf16"), "--dtype", "bf16", "--shards", "2", "--tie")
        gen_model(os.path.join(gen, "mistral"), "--dtype", "f16", "--arch", "mistral",
                  "--sliding-window", "8")
        configs(c, gen, loader_configs())
        safetensors(c, gen)
        index(c, gen)
        tokenizers(c, gen)
        tokenizer_configs(c, gen)
        binary_seeds(c, gen)
        chat_templates(c)
        reasoning(c)
        gguf(c)
        tokenizer_gguf(c, gen)
    c.prune()


if __name__ == "__main__":
    main()
