#!/usr/bin/python3
"""A gpt-oss checkpoint with its experts as MXFP4, laid out as OpenAI's released checkpoint has them.

    test/tools/mxfp4_checkpoint.py SRC_DIR DST_DIR [--break short-scales|no-scales]

SRC_DIR is a gpt-oss checkpoint with float experts (gen_model.py --family gpt_oss): each
layer's mlp.experts.gate_up_proj [E, hidden, 2 I] and down_proj [E, I, hidden], stored
[in, out].  DST_DIR gets the same checkpoint with those two tensors replaced, as in
openai/gpt-oss-20b's model.safetensors, by
    mlp.experts.NAME_blocks  U8 [E, out, in / 32, 16]   rows (out) first; byte i of a group of
                                                        32 holds element 2i in its low nibble and
                                                        2i + 1 in its high one, E2M1 codes
    mlp.experts.NAME_scales  U8 [E, out, in / 32]       the group's factor 2^(scale - 127)
and config.json's quantization_config {"quant_method": "mxfp4", ...} as that checkpoint says it.
Each group of 32 is quantized by quant.py's MXFP4 quantizer (its codes and exponent, the
format GGUF files hold too, only laid out otherwise), so reference.py (mxfp4_dequant, as
transformers dequantizes) computes on exactly the values the file holds.  Every other tensor,
and every other file of SRC_DIR, is copied unchanged.  --break damages the last layer's
down_proj for the loader's error checks: its scales one group short (short-scales) or left out
(no-scales).
"""

import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import quant  # noqa: E402

ST_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1}


def read_raw(path):
    """(header dict, data bytes) of one safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    return header, raw[8 + n:]


def as_f32(buf, dtype, shape):
    """The tensor's values as float32 (its dtype F32, F16 or BF16)."""
    if dtype == "F32":
        v = np.frombuffer(buf, dtype="<f4")
    elif dtype == "F16":
        v = np.frombuffer(buf, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        v = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view("<f4")
    else:
        raise SystemExit("mxfp4_checkpoint.py: experts of dtype %s" % dtype)
    return v.reshape(shape)


def to_blocks_scales(w):
    """w [E, in, out] (float32) as (blocks [E, out, in/32, 16], scales [E, out, in/32]) uint8."""
    e, cols, rows = w.shape
    if cols % 32:
        raise SystemExit("mxfp4_checkpoint.py: an expert's input width %d is no multiple of 32" % cols)
    groups = np.ascontiguousarray(w.transpose(0, 2, 1)).reshape(-1, 32).astype(np.float32)
    blk = quant.mx_quant(groups)  # (n, 17): exponent, then GGUF's nibble order (j low, j + 16 high)
    codes = np.concatenate([blk[:, 1:] & 15, blk[:, 1:] >> 4], axis=1)  # (n, 32) in element order
    hf = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)  # element 2i low, 2i + 1 high
    g = cols // 32
    return hf.reshape(e, rows, g, 16), blk[:, 0].reshape(e, rows, g).copy()


def write_safetensors(path, tensors):
    """tensors: [(name, dtype, shape, bytes)] in order."""
    header, off = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for _, _, _, data in tensors:
            f.write(data)


def main():
    args = sys.argv[1:]
    breaking = None
    if len(args) == 4 and args[2] == "--break" and args[3] in ("short-scales", "no-scales"):
        breaking = args[3]
        args = args[:2]
    if len(args) != 2:
        raise SystemExit("usage: mxfp4_checkpoint.py SRC_DIR DST_DIR [--break short-scales|no-scales]")
    src, dst = args
    os.makedirs(dst, exist_ok=True)
    if os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        raise SystemExit("mxfp4_checkpoint.py: a sharded checkpoint (write it as one file)")
    for fname in os.listdir(src):
        if fname != "model.safetensors" and os.path.isfile(os.path.join(src, fname)):
            shutil.copyfile(os.path.join(src, fname), os.path.join(dst, fname))
    header, data = read_raw(os.path.join(src, "model.safetensors"))
    out, layers = [], 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        if name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            blocks, scales = to_blocks_scales(as_f32(buf, info["dtype"], info["shape"]))
            out.append((name + "_blocks", "U8", blocks.shape, blocks.tobytes()))
            out.append((name + "_scales", "U8", scales.shape, scales.tobytes()))
            layers += name.endswith("down_proj")
        else:
            out.append((name, info["dtype"], info["shape"], buf))
    if layers == 0:
        raise SystemExit("mxfp4_checkpoint.py: %s has no gpt-oss experts" % src)
    if breaking is not None:
        last = "model.layers.%d.mlp.experts.down_proj_scales" % (layers - 1)
        at = [i for i, t in enumerate(out) if t[0] == last][0]
        name, dtype, shape, data = out[at]
        if breaking == "no-scales":
            del out[at]
        else:
            e, rows, g = shape
            short = np.frombuffer(data, dtype=np.uint8).reshape(shape)[:, :, :g - 1]
            out[at] = (name, dtype, short.shape, short.tobytes())
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    cfg_path = os.path.join(dst, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
