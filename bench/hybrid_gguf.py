#!/usr/bin/python3
"""Write a Qwen3.5 (qwen35), Qwen3 (qwen3) or Gemma 4 (gemma4) GGUF file of a real geometry, F16.

    bench/hybrid_gguf.py CONFIG_DIR OUT.gguf [--seed S]

CONFIG_DIR holds a config.json and its tokenizer, as test/tools/gen_model.py --no-weights
writes them: --family qwen3_5 (either layout: the released one with text_config, or
--causal-lm's flat one) for Qwen3.5's hybrid of Gated DeltaNet and gated full attention, or
--family qwen3 for a pure-attention model of the same size to set beside it, or --family gemma4
(dense, either layout) for Gemma 4's sliding and full layers with KV sharing and per-layer
embeddings.  OUT.gguf gets
llama.cpp's qwen35 or qwen3 layout exactly as test/tools/hf_to_gguf.py writes it from a
checkpoint (its keys, through its own add_qwen35_hparams and add_hparams; its tensor names,
shapes, order and types): matrices F16; the 1-d tensors (norms, ssm_a, ssm_dt.bias) and
ssm_conv1d F32, as llama.cpp's converter keeps them.  Nothing is read but config.json and the
tokenizer, and each tensor is drawn and written a slice at a time, so a file of gigabytes
needs little memory.  llama-quantize then makes the benchmark's Q4_K_M of it
(bench/hybrid_bench.sh).

The values are random but of a trained model's scale, the same draws as gen_model.py's
checkpoints after hf_to_gguf.py's transforms: matrices ~ N(0, 1/sqrt(in)) (tied embeddings
too, since they are the output layer; untied ones N(0, 1)); every norm ~ 1 + N(0, 0.1) (the
(1 + w) norms stored with the 1 added, as hf_to_gguf.py stores them); ssm_a = -A with A
log-uniform on [0.05, 16]; ssm_dt.bias ~ 1 + N(0, 0.1); ssm_conv1d ~ N(0, 1/sqrt(K)); the
query channels of attn_qkv and ssm_conv1d (q + 2 k) / sqrt(5) of their own draw and the key
channels', so a token's query meets its own key as in gen_model.py.

The vocabulary: gguf_vocab.py's tokenizer_kvs of the tokenizer, then, where config.json's
vocab_size is larger (a real vocabulary of 248320 or 151936 rows over a smaller tokenizer,
gen_model.py --tokenizer-from ... --pad-vocab N), unused "[PAD<id>]" tokens up to it, as
llama.cpp's converter pads a vocabulary to the embedding's rows; config.json's bos and eos
ids fill in what the tokenizer lacks (hf_to_gguf.py's add_vocab).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "tools"))
import gguf_vocab  # noqa: E402
import gguf_writer  # noqa: E402
import hf_to_gguf  # noqa: E402

F32, F16 = 0, 1
A_RANGE = (0.05, 16.0)  # ssm_a = -A, A log-uniform on it (gen_model.py's A_RANGE)
SLICE_ELEMS = 1 << 24   # elements drawn at a time


def text_config(cfg):
    """Qwen3.5's text model config (nested under text_config in the released layout)."""
    return cfg["text_config"] if cfg.get("model_type") == "qwen3_5" else cfg


def qwen35_tensors(t, tied):
    """(name, type, dims innermost first, kind) of every tensor of a qwen35 file, in
    hf_to_gguf.py's order (gen_model.py's checkpoint order, the text model only)."""
    h, v, hd = t["hidden_size"], t["vocab_size"], t["head_dim"]
    nq, nkv = t["num_attention_heads"], t["num_key_value_heads"]
    nk, nv = t["linear_num_key_heads"], t["linear_num_value_heads"]
    dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
    kern, inter = t["linear_conv_kernel_dim"], t["intermediate_size"]
    conv = 2 * nk * dk + nv * dv
    qk = ("query_like_key", nk * dk)
    out = [("token_embd.weight", F16, [h, v], "linear" if tied else "embed")]
    for i, kind in enumerate(t["layer_types"]):
        b = "blk.%d." % i
        out.append((b + "attn_norm.weight", F32, [h], "norm"))
        if kind == "full_attention":  # attn_q: per head its query rows, then its gate rows
            out += [(b + "attn_q.weight", F16, [h, 2 * nq * hd], "linear"),
                    (b + "attn_k.weight", F16, [h, nkv * hd], "linear"),
                    (b + "attn_v.weight", F16, [h, nkv * hd], "linear"),
                    (b + "attn_output.weight", F16, [nq * hd, h], "linear"),
                    (b + "attn_q_norm.weight", F32, [hd], "norm"),
                    (b + "attn_k_norm.weight", F32, [hd], "norm")]
        elif kind == "linear_attention":
            out += [(b + "attn_qkv.weight", F16, [h, conv], ("linear",) + qk),
                    (b + "attn_gate.weight", F16, [h, nv * dv], "linear"),
                    (b + "ssm_beta.weight", F16, [h, nv], "linear"),
                    (b + "ssm_alpha.weight", F16, [h, nv], "linear"),
                    (b + "ssm_conv1d.weight", F32, [kern, conv], ("conv",) + qk),
                    (b + "ssm_dt.bias", F32, [nv], "norm"),
                    (b + "ssm_a", F32, [nv], "a"),
                    (b + "ssm_norm.weight", F32, [dv], "norm"),
                    (b + "ssm_out.weight", F16, [nv * dv, h], "linear")]
        else:
            raise SystemExit("hybrid_gguf.py: layer %d is %r" % (i, kind))
        out += [(b + "post_attention_norm.weight", F32, [h], "norm"),
                (b + "ffn_gate.weight", F16, [h, inter], "linear"),
                (b + "ffn_up.weight", F16, [h, inter], "linear"),
                (b + "ffn_down.weight", F16, [inter, h], "linear")]
    out.append(("output_norm.weight", F32, [h], "norm"))
    if not tied:
        out.append(("output.weight", F16, [h, v], "linear"))
    return out


def qwen3_tensors(c, tied):
    """(name, type, dims innermost first, kind) of every tensor of a (dense) qwen3 file."""
    h, v, hd = c["hidden_size"], c["vocab_size"], c["head_dim"]
    nq, nkv, inter = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    out = [("token_embd.weight", F16, [h, v], "linear" if tied else "embed")]
    for i in range(c["num_hidden_layers"]):
        b = "blk.%d." % i
        out += [(b + "attn_norm.weight", F32, [h], "norm"),
                (b + "attn_q.weight", F16, [h, nq * hd], "linear"),
                (b + "attn_k.weight", F16, [h, nkv * hd], "linear"),
                (b + "attn_v.weight", F16, [h, nkv * hd], "linear"),
                (b + "attn_output.weight", F16, [nq * hd, h], "linear"),
                (b + "attn_q_norm.weight", F32, [hd], "norm"),
                (b + "attn_k_norm.weight", F32, [hd], "norm"),
                (b + "ffn_norm.weight", F32, [h], "norm"),
                (b + "ffn_gate.weight", F16, [h, inter], "linear"),
                (b + "ffn_up.weight", F16, [h, inter], "linear"),
                (b + "ffn_down.weight", F16, [inter, h], "linear")]
    out.append(("output_norm.weight", F32, [h], "norm"))
    if not tied:
        out.append(("output.weight", F16, [h, v], "linear"))
    return out


def gemma4_tensors(t, tied):
    """(name, type, dims innermost first, kind) of every tensor of a dense gemma4 file, in
    hf_to_gguf.py's order (gen_model.py's: the model's, then each layer's), rope_freqs last
    (the full layers' proportional RoPE: 1 for the pairs that turn, 1e30 for the others)."""
    h, v, n = t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]
    nq, nkv, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    ghd, inter = t["global_head_dim"], t["intermediate_size"]
    ple = t.get("hidden_size_per_layer_input") or 0
    n_shared = t.get("num_kv_shared_layers") or 0
    if t.get("enable_moe_block") or t.get("attention_k_eq_v"):
        raise SystemExit("hybrid_gguf.py: gemma4 with experts or attention_k_eq_v is not written")
    types = hf_to_gguf.gemma4_layer_types(t)
    out = [("token_embd.weight", F16, [h, v], "linear" if tied else "embed")]
    if ple:
        out += [("per_layer_token_embd.weight", F16, [n * ple, v], "linear"),
                ("per_layer_model_proj.weight", F16, [h, n * ple], "linear"),
                ("per_layer_proj_norm.weight", F32, [ple], "norm")]
    for i, kind in enumerate(types):
        b = "blk.%d." % i
        d = ghd if kind == "full_attention" else hd
        shared = i >= n - n_shared
        width = inter * (2 if t.get("use_double_wide_mlp") and shared else 1)
        out += [(b + "attn_norm.weight", F32, [h], "norm"),
                (b + "attn_q.weight", F16, [h, nq * d], "linear"),
                (b + "attn_q_norm.weight", F32, [d], "norm")]
        if not shared:
            out += [(b + "attn_k.weight", F16, [h, nkv * d], "linear"),
                    (b + "attn_v.weight", F16, [h, nkv * d], "linear"),
                    (b + "attn_k_norm.weight", F32, [d], "norm")]
        out += [(b + "attn_output.weight", F16, [nq * d, h], "linear"),
                (b + "post_attention_norm.weight", F32, [h], "norm"),
                (b + "ffn_norm.weight", F32, [h], "norm"),
                (b + "ffn_gate.weight", F16, [h, width], "linear"),
                (b + "ffn_up.weight", F16, [h, width], "linear"),
                (b + "ffn_down.weight", F16, [width, h], "linear"),
                (b + "post_ffw_norm.weight", F32, [h], "norm")]
        if ple:
            out += [(b + "inp_gate.weight", F16, [h, ple], "linear"),
                    (b + "proj.weight", F16, [ple, h], "linear"),
                    (b + "post_norm.weight", F32, [h], "norm")]
        out.append((b + "layer_output_scale.weight", F32, [1], "norm"))
    out.append(("output_norm.weight", F32, [h], "norm"))
    if not tied:
        out.append(("output.weight", F16, [h, v], "linear"))
    out.append(("rope_freqs.weight", F32, [ghd // 2], "rope_freqs"))
    return out


def draw(rng, n, cols, kind):
    """n rows of cols float32 values of the kind (dims innermost first: a row is dims[0])."""
    if kind == "a":
        lo, hi = np.log(A_RANGE[0]), np.log(A_RANGE[1])
        return -np.exp(rng.uniform(lo, hi, (n, cols))).astype(np.float32)
    x = rng.standard_normal((n, cols), dtype=np.float32)
    if kind == "norm":
        x *= np.float32(0.1)
        x += np.float32(1.0)
    elif kind == "linear":
        x *= np.float32(1.0 / np.sqrt(cols))
    elif kind == "conv":
        x *= np.float32(1.0 / np.sqrt(cols))
    elif kind != "embed":
        raise ValueError(kind)
    return x


def write_data(f, rng, ttype, dims, kind):
    """The tensor's values, a slice of rows at a time (the query-like-key ones whole: their
    first n rows are mixed with the next n)."""
    cols = dims[0]
    rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    enc = "<f2" if ttype == F16 else "<f4"
    if isinstance(kind, np.ndarray):
        f.write(kind.astype(enc).tobytes())
        return
    if isinstance(kind, tuple):
        base, _, n = kind
        x = draw(rng, rows, cols, base)
        x[:n] = (x[:n] + np.float32(2) * x[n:2 * n]) / np.float32(np.sqrt(5.0))
        f.write(x.astype(enc).tobytes())
        return
    per = max(1, SLICE_ELEMS // cols)
    for r0 in range(0, rows, per):
        f.write(draw(rng, min(per, rows - r0), cols, kind).astype(enc).tobytes())


def add_vocab(w, config_dir, c):
    """hf_to_gguf.py's add_vocab, the token list padded with unused tokens to vocab_size."""
    kvs = gguf_vocab.tokenizer_kvs(config_dir)
    n = c["vocab_size"]
    for i, (k, vtype, value) in enumerate(kvs):
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            et, items = value
            if len(items) > n:
                raise SystemExit("hybrid_gguf.py: the tokenizer has %d ids, vocab_size is %d"
                                 % (len(items), n))
            pad = {"tokenizer.ggml.tokens": ["[PAD%d]" % j for j in range(len(items), n)],
                   "tokenizer.ggml.token_type": [gguf_vocab.UNUSED] * (n - len(items)),
                   "tokenizer.ggml.scores": [gguf_vocab.UNMERGED_SCORE] * (n - len(items))}[k]
            kvs[i] = (k, vtype, (et, list(items) + pad))
    have = {k for k, _, _ in kvs}
    for k, v in (("tokenizer.ggml.bos_token_id", c.get("bos_token_id")),
                 ("tokenizer.ggml.eos_token_id", hf_to_gguf.first_id(c.get("eos_token_id")))):
        if v is not None and k not in have:
            w.add(k, "uint32", v)
    for k, vtype, value in kvs:
        w.add(k, vtype, value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config_dir")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    with open(os.path.join(a.config_dir, "config.json")) as fh:
        cfg = json.load(fh)
    arch = {"qwen3_5": "qwen35", "qwen3_5_text": "qwen35", "qwen3": "qwen3", "gemma4": "gemma4",
            "gemma4_text": "gemma4"}.get(cfg.get("model_type"))
    if arch is None:
        raise SystemExit("hybrid_gguf.py: a qwen3_5, qwen3 or gemma4 config is needed")
    w = gguf_writer.GGUFWriter(version=3)
    w.add("general.architecture", "string", arch)
    w.add("general.name", "string", os.path.basename(os.path.normpath(a.config_dir)))
    if arch == "gemma4":
        c = hf_to_gguf.gemma4_text(cfg)
        tied = cfg.get("tie_word_embeddings", c.get("tie_word_embeddings", True))
        freqs = hf_to_gguf.add_gemma4_hparams(w, c)
        specs = [(nm, ty, d, freqs if k == "rope_freqs" else k)
                 for nm, ty, d, k in gemma4_tensors(c, tied)]
    elif arch == "qwen35":
        c = text_config(cfg)
        tied = cfg.get("tie_word_embeddings", c.get("tie_word_embeddings", False))
        hf_to_gguf.add_qwen35_hparams(w, c)
        specs = qwen35_tensors(c, tied)
    else:
        c = cfg
        tied = cfg.get("tie_word_embeddings", False)
        c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
        if hf_to_gguf.add_hparams(w, c, arch, c["head_dim"]):
            raise SystemExit("hybrid_gguf.py: rope scaling with tensors of its own is not written")
        specs = qwen3_tensors(c, tied)
    add_vocab(w, a.config_dir, c)
    offset = 0
    for name, ttype, dims, _ in specs:
        w.add_tensor(name, ttype, dims, b"", offset=offset, place=False)
        nbytes = gguf_writer.tensor_nbytes(ttype, dims)
        offset = (offset + nbytes + w.alignment - 1) // w.alignment * w.alignment
    header = w.to_bytes()  # the header, padded to the data section; no data placed
    rng = np.random.default_rng(a.seed)
    with open(a.out, "wb") as f:
        f.write(header)
        start = f.tell()
        for (name, ttype, dims, kind), t in zip(specs, w.tensors):
            f.write(bytes(start + t["offset"] - f.tell()))
            write_data(f, rng, ttype, dims, kind)
            end = t["offset"] + gguf_writer.tensor_nbytes(ttype, dims)
            if f.tell() - start != end:
                raise SystemExit("hybrid_gguf.py: %s ends at %d, not %d"
                                 % (name, f.tell() - start, end))
    n_params = sum(int(np.prod(d)) for _, _, d, _ in specs)
    print("%s: %.2f GB, %d tensors, %.1fM parameters" % (a.out, os.path.getsize(a.out) / 1e9,
                                                         len(specs), n_params / 1e6))


if __name__ == "__main__":
    main()
