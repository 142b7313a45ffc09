#!/usr/bin/python3
"""A GGUF file of a Llama-architecture model as a HuggingFace f32 checkpoint, for the reference.

    gguf_to_hf.py FILE.gguf OUT_DIR

The independent half of cbllm's GGUF checks: it shares no code with the C engine.  It reads
the file with its own parser (below), dequantizes every tensor with quant.py's numpy
dequantizers (from the formats' definitions), undoes the row permutation GGUF files apply
to the q and k projections of "llama" models (each head's rows stored as the pairs RoPE
rotates, interleaved, instead of HF's two halves), and writes OUT_DIR/config.json and
OUT_DIR/model.safetensors (F32), which reference.py runs in float64.  So the reference sees
exactly the weights the file holds, whatever made it (cbllm's converter or llama-quantize).

Only what a plain Llama (and Mistral, TinyLlama) file holds is converted: general.architecture
"llama", llama.* hyper-parameters, the tensors token_embd, blk.N.{attn_norm, attn_q, attn_k,
attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, output_norm and output (absent:
tied).  Anything else is an error naming it.
"""

import json
import os
import struct
import sys

import numpy as np

import quant

# ggml type id -> (name, elements per block, bytes per block)
GGML = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2)}
for _name, _nbytes in [(n, t[0]) for n, t in quant.TYPES.items()] + \
        [(n, t[0]) for n, t in quant.KTYPES.items()]:
    GGML[{"Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q2_K": 10, "Q3_K": 11,
          "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}[_name]] = (_name, 256 if _name.endswith("_K") else 32, _nbytes)

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
          11: "<q", 12: "<d"}


class Reader:
    """Sequential little-endian reads over the file's bytes."""

    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype == 8:
            return self.string()
        if vtype == 9:
            et = self.take("<I")
            return [self.value(et) for _ in range(self.take("<Q"))]
        return self.take(SCALAR[vtype])


def read_gguf(path):
    """(metadata dict, {name: (type id, dims innermost first, bytes)}) of a GGUF file."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    r = Reader(data)
    if bytes(data[:4]) != b"GGUF":
        raise SystemExit("gguf_to_hf.py: %s: not a GGUF file" % path)
    r.pos = 4
    version = r.take("<I")
    if version not in (2, 3):
        raise SystemExit("gguf_to_hf.py: %s: version %d" % (path, version))
    n_tensors, n_kvs = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kvs):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        infos.append((name, r.take("<I"), dims, r.take("<Q")))
    align = meta.get("general.alignment", 32)
    start = (r.pos + align - 1) // align * align
    tensors = {}
    for name, type_id, dims, offset in infos:
        if type_id not in GGML:
            raise SystemExit("gguf_to_hf.py: tensor %s: ggml type %d not supported" % (name, type_id))
        _, blk, size = GGML[type_id]
        nbytes = int(np.prod(dims)) // blk * size
        tensors[name] = (type_id, dims, data[start + offset:start + offset + nbytes])
    return meta, tensors


def dequantize(type_id, dims, raw):
    """The tensor as a float32 array of shape reversed(dims) (rows outermost)."""
    name, blk, size = GGML[type_id]
    shape = list(reversed(dims))
    if name == "F32":
        return np.frombuffer(raw, dtype="<f4").reshape(shape).copy()
    if name == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float32).reshape(shape)
    if name == "BF16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view("<f4").reshape(shape)
    return quant.dequantize(name, raw).reshape(shape)


def unpermute(w, n_head):
    """Undo GGUF's q/k row order: per head, rows (pair i, half h) back to (half h, pair i)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
         "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}


def hf_config(meta, n_vocab, tied):
    """config.json of the file's llama.* hyper-parameters."""
    if meta.get("general.architecture") != "llama":
        raise SystemExit("gguf_to_hf.py: only general.architecture llama, not %r"
                         % meta.get("general.architecture"))
    g = lambda k, d=None: meta.get("llama." + k, d)  # noqa: E731
    heads = g("attention.head_count")
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": g("embedding_length"), "num_hidden_layers": g("block_count"),
            "num_attention_heads": heads,
            "num_key_value_heads": g("attention.head_count_kv", heads),
            "intermediate_size": g("feed_forward_length"), "vocab_size": n_vocab,
            "max_position_embeddings": g("context_length"),
            "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
            "rope_theta": g("rope.freq_base", 10000.0), "tie_word_embeddings": tied,
            "torch_dtype": "float32"}


def convert(path, out_dir):
    """Write out_dir's config.json and model.safetensors from the GGUF file at path."""
    meta, tensors = read_gguf(path)
    tied = "output.weight" not in tensors
    n_vocab = tensors["token_embd.weight"][1][1]
    cfg = hf_config(meta, n_vocab, tied)
    out = {}
    for name, (type_id, dims, raw) in tensors.items():
        parts = name.split(".")
        if name in TOP:
            hf = TOP[name]
        elif parts[0] == "blk" and len(parts) == 4 and parts[2] in LAYER and parts[3] == "weight":
            hf = "model.layers.%s.%s.weight" % (parts[1], LAYER[parts[2]])
        else:
            raise SystemExit("gguf_to_hf.py: tensor %s is not one of a llama model" % name)
        w = dequantize(type_id, dims, raw)
        if parts[-2] == "attn_q":
            w = unpermute(w, cfg["num_attention_heads"])
        elif parts[-2] == "attn_k":
            w = unpermute(w, cfg["num_key_value_heads"])
        out[hf] = np.ascontiguousarray(w, dtype="<f4")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    header, offset = {}, 0
    for name, w in out.items():
        header[name] = {"dtype": "F32", "shape": list(w.shape),
                        "data_offsets": [offset, offset + w.nbytes]}
        offset += w.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for w in out.values():
            f.write(w.tobytes())


def main(argv):
    if len(argv) != 3:
        raise SystemExit("usage: gguf_to_hf.py FILE.gguf OUT_DIR")
    convert(argv[1], argv[2])


if __name__ == "__main__":
    main(sys.argv)
