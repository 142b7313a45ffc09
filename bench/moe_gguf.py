#!/usr/bin/python3
"""Write a mixture-of-experts GGUF file of a large geometry, F16, tensor by tensor.

    bench/moe_gguf.py CONFIG_DIR OUT.gguf [--seed S] [--q4-k-m-bytes]

CONFIG_DIR holds a qwen3_moe or gpt_oss config.json and its tokenizer
(test/tools/gen_model.py --family qwen3_moe|gpt_oss ... --no-weights writes one); OUT.gguf
gets llama.cpp's qwen3moe or gpt-oss layout, as test/tools/hf_to_gguf.py writes it, with
random F16 weights (N(0, 1/sqrt(in)), the routers twice that, norms ones; gpt-oss's biases
N(0, 0.02) and sinks N(0, 1), in F32 as llama.cpp keeps them), streamed to the file a tensor
at a time, so that a file of several GB needs little memory.  llama-quantize then makes the
benchmark's Q4_K_M or MXFP4 file of it (bench/moe_bench.sh).

--q4-k-m-bytes (qwen3_moe) writes the matrices as Q4_K_M's types directly instead, random
blocks with small finite scales (Q4_K; Q6_K for the output, and for the value and down
projections of the first and last eighth of the layers and every third between, as
llama-quantize chooses them): no F16 file of four times the size first, for measuring what a
whole 30B-A3B file costs in memory (bench/moe_rss.sh), not its numbers.
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

F16, F32 = 1, 0


def gpt_oss_tensors(cfg):
    """(name, type, dims innermost first, kind) of every tensor of a gpt-oss file, in file order."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    e, f = cfg["num_local_experts"], cfg["intermediate_size"]
    out = [("token_embd.weight", F16, [h, v], "embed")]
    for layer in range(cfg["num_hidden_layers"]):
        b = "blk.%d." % layer
        out += [(b + "attn_norm.weight", F32, [h], "norm"),
                (b + "attn_q.weight", F16, [h, q], "linear"), (b + "attn_q.bias", F32, [q], "bias"),
                (b + "attn_k.weight", F16, [h, kv], "linear"), (b + "attn_k.bias", F32, [kv], "bias"),
                (b + "attn_v.weight", F16, [h, kv], "linear"), (b + "attn_v.bias", F32, [kv], "bias"),
                (b + "attn_output.weight", F16, [q, h], "linear"),
                (b + "attn_output.bias", F32, [h], "bias"),
                (b + "attn_sinks.weight", F32, [cfg["num_attention_heads"]], "sink"),
                (b + "post_attention_norm.weight", F32, [h], "norm"),
                (b + "ffn_gate_inp.weight", F32, [h, e], "router"),
                (b + "ffn_gate_inp.bias", F32, [e], "bias"),
                (b + "ffn_gate_exps.weight", F16, [h, f, e], "linear"),
                (b + "ffn_gate_exps.bias", F32, [f, e], "bias"),
                (b + "ffn_up_exps.weight", F16, [h, f, e], "linear"),
                (b + "ffn_up_exps.bias", F32, [f, e], "bias"),
                (b + "ffn_down_exps.weight", F16, [f, h, e], "linear"),
                (b + "ffn_down_exps.bias", F32, [h, e], "bias")]
    out += [("output_norm.weight", F32, [h], "norm"), ("output.weight", F16, [h, v], "linear")]
    return out


def tensors(cfg):
    """(name, type, dims innermost first, kind) of every tensor, in file order."""
    if cfg.get("model_type") == "gpt_oss":
        return gpt_oss_tensors(cfg)
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    e, f = cfg["num_experts"], cfg["moe_intermediate_size"]
    out = [("token_embd.weight", F16, [h, v], "embed")]
    for layer in range(cfg["num_hidden_layers"]):
        b = "blk.%d." % layer
        out += [(b + "attn_norm.weight", F32, [h], "norm"),
                (b + "attn_q.weight", F16, [h, q], "linear"),
                (b + "attn_k.weight", F16, [h, kv], "linear"),
                (b + "attn_v.weight", F16, [h, kv], "linear"),
                (b + "attn_q_norm.weight", F32, [hd], "norm"),
                (b + "attn_k_norm.weight", F32, [hd], "norm"),
                (b + "attn_output.weight", F16, [q, h], "linear"),
                (b + "ffn_norm.weight", F32, [h], "norm"),
                (b + "ffn_gate_inp.weight", F32, [h, e], "router"),
                (b + "ffn_gate_exps.weight", F16, [h, f, e], "linear"),
                (b + "ffn_up_exps.weight", F16, [h, f, e], "linear"),
                (b + "ffn_down_exps.weight", F16, [f, h, e], "linear")]
    out += [("output_norm.weight", F32, [h], "norm"), ("output.weight", F16, [h, v], "linear")]
    return out


Q4_K, Q6_K = 12, 14


def more_bits(layer, n):
    """Whether llama-quantize's Q4_K_M gives this layer's value and down projections Q6_K."""
    return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2


def q4_k_m_types(specs, n_layers):
    """specs with each F16 matrix given its Q4_K_M type."""
    out = []
    for name, ttype, dims, kind in specs:
        if ttype == F16:
            layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
            six = name == "output.weight" or (
                layer >= 0 and ("attn_v" in name or "ffn_down" in name) and more_bits(layer, n_layers))
            ttype = Q6_K if six else Q4_K
        out.append((name, ttype, dims, kind))
    return out


def write_blocks(f, rng, ttype, dims):
    """Random Q4_K or Q6_K blocks, their f16 scales set small and finite, a slice at a time."""
    size, d_off = (144, [0, 2]) if ttype == Q4_K else (210, [208])
    n = gguf_writer.tensor_nbytes(ttype, dims) // size
    small = np.frombuffer(np.float16(1e-3).tobytes(), np.uint8)
    per = 1 << 16
    for b0 in range(0, n, per):
        k = min(per, n - b0)
        blk = rng.integers(0, 256, (k, size), dtype=np.uint8)
        for o in d_off:
            blk[:, o:o + 2] = small
        f.write(blk.tobytes())


def write_data(f, rng, ttype, dims, kind):
    """Random values of the tensor, a 2-d slice at a time."""
    rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
    cols = dims[0]
    scale = {"embed": 1.0, "linear": 1 / np.sqrt(cols), "router": 2 / np.sqrt(cols),
             "bias": 0.02, "sink": 1.0}.get(kind)
    per = max(1, (1 << 24) // cols)
    for r0 in range(0, rows, per):
        n = min(per, rows - r0)
        if kind == "norm":
            x = np.ones((n, cols), np.float32)
        else:
            x = rng.standard_normal((n, cols), np.float32) * np.float32(scale)
        f.write(x.astype("<f2" if ttype == F16 else "<f4").tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config_dir")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--q4-k-m-bytes", action="store_true",
                    help="the matrices as Q4_K_M's types, random blocks (qwen3_moe)")
    a = ap.parse_args()
    with open(os.path.join(a.config_dir, "config.json")) as fh:
        cfg = json.load(fh)
    arch = {"qwen3_moe": "qwen3moe", "gpt_oss": "gpt-oss"}.get(cfg.get("model_type"))
    if arch is None:
        raise SystemExit("moe_gguf.py: a qwen3_moe or gpt_oss config is needed")
    w = gguf_writer.GGUFWriter(version=3)
    w.add("general.architecture", "string", arch)
    w.add("general.name", "string", os.path.basename(os.path.normpath(a.config_dir)))
    hf_to_gguf.add_hparams(w, cfg, arch, cfg["head_dim"])
    for k, vtype, value in gguf_vocab.tokenizer_kvs(a.config_dir):
        w.add(k, vtype, value)
    specs = tensors(cfg)
    if a.q4_k_m_bytes:
        if arch != "qwen3moe":
            raise SystemExit("moe_gguf.py: --q4-k-m-bytes is for a qwen3_moe config")
        specs = q4_k_m_types(specs, cfg["num_hidden_layers"])
        w.add("general.file_type", "uint32", 15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    offset = 0
    for name, ttype, dims, _ in specs:
        nbytes = gguf_writer.tensor_nbytes(ttype, dims)
        w.add_tensor(name, ttype, dims, b"", offset=offset, place=False)
        offset = (offset + nbytes + w.alignment - 1) // w.alignment * w.alignment
    header = w.to_bytes()          # the header, padded to the data section; no data placed
    rng = np.random.default_rng(a.seed)
    with open(a.out, "wb") as f:
        f.write(header)
        start = f.tell()
        for (name, ttype, dims, kind), t in zip(specs, w.tensors):
            f.write(bytes(start + t["offset"] - f.tell()))
            if ttype in (Q4_K, Q6_K):
                write_blocks(f, rng, ttype, dims)
            else:
                write_data(f, rng, ttype, dims, kind)
    print("%s: %.2f GB, %d tensors" % (a.out, os.path.getsize(a.out) / 1e9, len(specs)))


if __name__ == "__main__":
    main()
