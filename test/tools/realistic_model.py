#!/usr/bin/python3
"""Give a generated checkpoint a trained model's magnitudes: sharp attention, wide logits.

    realistic_model.py MODEL_DIR [--attn-scale 8] [--logit-scale 6]

A random gen_model.py checkpoint has attention scores q.k / sqrt(head_dim) of about N(0, 1)
and logits within a few units of zero.  A trained model's scores reach tens (its attention
is sharp) and its logits span tens.  Rounding relative to the value rounded, as a
half-precision KV cache rounds keys and values, moves the logits of such a model much
more, so a bound measured on the random model says little about a real one.  This rewrites
MODEL_DIR/model.safetensors (an F32 checkpoint) so that

  - every layer's scores are attn-scale times larger: q and k each times sqrt(attn-scale),
    through q_proj and k_proj (weights and biases; the q and k rows of Phi-3's qkv_proj),
    or through q_norm and k_norm where the family norms each head after projecting it
    (Qwen3, Gemma-3);
  - the logits are logit-scale times larger: the final norm's weight times logit-scale.

Gemma stores a norm as w of (1 + w): its w becomes s * (1 + w) - 1.  RoPE is a rotation, so
scaling q and k before or after it is the same.  reference.py reads the result like any
checkpoint, so the float64 reference follows the rewritten weights.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402
import safetensors_f32  # noqa: E402


def scale_norm(t, name, s, gemma):
    """Multiply the norm vector name by s (its (1 + w) form for Gemma)."""
    t[name] = s * (1.0 + t[name]) - 1.0 if gemma else s * t[name]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--attn-scale", type=float, default=8.0)
    p.add_argument("--logit-scale", type=float, default=6.0)
    a = p.parse_args(argv)
    path = os.path.join(a.model_dir, "model.safetensors")
    with open(os.path.join(a.model_dir, "config.json")) as f:
        cfg = json.load(f)
    t = reference.read_safetensors(path)
    if any(v != "F32" for v in reference.DTYPES.values()):
        raise SystemExit("realistic_model.py: needs an F32 checkpoint (gen_model.py --dtype f32)")
    gemma = cfg.get("model_type") == "gemma3_text"
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    r = np.sqrt(a.attn_scale)
    for i in range(cfg["num_hidden_layers"]):
        pre = "model.layers.%d.self_attn." % i
        if pre + "q_norm.weight" in t:
            scale_norm(t, pre + "q_norm.weight", r, gemma)
            scale_norm(t, pre + "k_norm.weight", r, gemma)
        elif pre + "qkv_proj.weight" in t:  # rows: q, then k, then v
            qk_rows = (heads + kv_heads) * head_dim
            t[pre + "qkv_proj.weight"][:qk_rows] *= r
        else:
            for proj in ("q_proj", "k_proj"):
                for kind in ("weight", "bias"):
                    if pre + proj + "." + kind in t:
                        t[pre + proj + "." + kind] *= r
    scale_norm(t, "model.norm.weight", a.logit_scale, gemma)
    safetensors_f32.write(path, t)


if __name__ == "__main__":
    main()
