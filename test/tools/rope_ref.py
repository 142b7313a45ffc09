#!/usr/bin/python3
"""Positions in float64 numpy, from a HuggingFace config.json: RoPE and per-layer windows.

    rope_ref.py --cases-dir DIR

The reference's half of cbllm's positional code, sharing nothing with the C engine.
reference.py imports it; with --cases-dir it writes RoPE test cases for the unit test
test_rope: DIR/NAME.json (a config.json) and DIR/NAME.expect, the numbers this module
computes for it:

    layers R0:W0 R1:W1 ...       per layer: its RoPE (0 global, 1 local) and window (0 none)
    rope K ATTN LONG_FROM        RoPE K: the cos/sin factor, and the sequence length past
                                 which the long set applies (-1: one set)
    inv0 f_0 ... f_{d/2-1}       inverse frequencies of the short (or only) set
    inv1 ...                     of the long set (the same set when LONG_FROM is -1)

The RoPE types follow HF's rope_type definitions (modeling_rope_utils): default, linear,
llama3, yarn, dynamic and longrope (su).  Longrope chooses its set per sequence as HF
transformers does: long_factor for a sequence longer than original_max_position_embeddings
(seq_len = max(position_ids) + 1 of the forward), short_factor otherwise; reference.py
drops its cache and recomputes with the long set when generation passes that length, as
Phi-3's generate does.  One rule is cbllm's, as its rope.h states: dynamic NTK uses one
static base, the one HF reaches at seq_len = factor * max_position_embeddings.
"""

import argparse
import json
import math
import os

import numpy as np


class Rope:
    """One RoPE configuration turned into numbers: inv[0] the short (or only) set, inv[1]
    the long set, which a sequence longer than long_from takes."""

    def __init__(self, inv_short, inv_long=None, long_from=None, attn=1.0):
        self.inv = [inv_short, inv_short if inv_long is None else inv_long]
        self.long_from = long_from  # None: one set for every sequence
        self.attn = attn

    def takes_long(self, seq_len):
        """Whether a sequence of seq_len tokens takes the long set."""
        return self.long_from is not None and seq_len > self.long_from

    def angles(self, pos, long_=False):
        """cos and sin [T, d] (HF's cat(freqs, freqs)) at positions pos [T] in the long set
        or the short one, times attn."""
        freqs = np.outer(np.asarray(pos, dtype=np.float64), self.inv[1 if long_ else 0])
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb) * self.attn, np.sin(emb) * self.attn


def apply_rope(x, pos, rope, long_=False):
    """Rotate x [heads, T, d] at positions pos [T] (HF rotate_half) in the given set."""
    cos, sin = rope.angles(pos, long_)
    d = x.shape[-1]
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * cos + rotated * sin


def base_inv(theta, d):
    """1 / theta^(2i/d) for i < d/2."""
    return 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)


def scaling_type(rs):
    """rope_scaling's type under either key."""
    return rs.get("rope_type", rs.get("type"))


def llama3(theta, d, rs):
    """Llama 3.1's three wavelength bands against the original context."""
    inv = base_inv(theta, d)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    out = np.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    medium = (wavelen >= old / hi) & (wavelen <= old / lo)
    return np.where(medium, (1 - smooth) * inv / factor + smooth * inv, out)


def yarn(theta, d, rs, max_pos):
    """YaRN: a linear ramp between interpolated and original frequencies, plus mscale."""
    factor = rs["factor"]
    orig = rs.get("original_max_position_embeddings") or max_pos
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def dim_of(rotations):
        return d * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    # truncate (true when absent) rounds the correction range out to whole dimensions;
    # gpt-oss's configs set it false and keep the fractional bounds
    if rs.get("truncate", True):
        low = max(math.floor(dim_of(beta_fast)), 0)
        high = min(math.ceil(dim_of(beta_slow)), d - 1)
    else:
        low = max(dim_of(beta_fast), 0)
        high = min(dim_of(beta_slow), d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    inv = base_inv(theta, d)
    inv = (inv / factor) * ramp + inv * (1 - ramp)

    def m(s, k):
        return 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0

    attn = rs.get("attention_factor")
    if attn is None:
        ms, ms_all = rs.get("mscale"), rs.get("mscale_all_dim")
        attn = m(factor, ms) / m(factor, ms_all) if ms and ms_all else m(factor, 1)
    return inv, attn


def longrope(theta, d, rs, cfg):
    """Phi-3's LongRoPE: per-dimension short/long rescale factors and one attention factor."""
    max_pos = cfg["max_position_embeddings"]
    if cfg.get("original_max_position_embeddings"):
        orig = cfg["original_max_position_embeddings"]
        factor = max_pos / orig
    else:
        orig = rs.get("original_max_position_embeddings") or max_pos
        factor = rs["factor"]
    attn = rs.get("attention_factor")
    if attn is None:
        attn = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(orig))
    inv = base_inv(theta, d)
    short = inv / np.asarray(rs["short_factor"], dtype=np.float64)
    long_ = inv / np.asarray(rs["long_factor"], dtype=np.float64)
    return Rope(short, long_, orig, attn)


def global_rope(cfg, d):
    """The RoPE of rope_theta and rope_scaling."""
    theta = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = scaling_type(rs) if rs else "default"
    if kind == "default":
        return Rope(base_inv(theta, d))
    if kind == "linear":
        return Rope(base_inv(theta, d) / rs["factor"])
    if kind == "llama3":
        return Rope(llama3(theta, d, rs))
    if kind == "yarn":
        inv, attn = yarn(theta, d, rs, cfg.get("max_position_embeddings", 2048))
        return Rope(inv, attn=attn)
    if kind == "dynamic":
        f, max_pos = rs["factor"], cfg.get("max_position_embeddings", 2048)
        seq_len = f * max_pos  # the static rule: HF's base at the longest scaled context
        base = theta * ((f * seq_len / max_pos) - (f - 1)) ** (d / (d - 2))
        return Rope(base_inv(base, d))
    if kind in ("longrope", "su"):
        return longrope(theta, d, rs, cfg)
    raise SystemExit("rope_ref.py: unsupported rope_scaling type %r" % kind)


def layer_kinds(cfg):
    """Per layer: True when it is a sliding-window layer (before use_sliding_window)."""
    n = cfg["num_hidden_layers"]
    if cfg.get("layer_types") is not None:
        return [t == "sliding_attention" for t in cfg["layer_types"]]
    if cfg.get("sliding_window_pattern"):
        return [(i + 1) % cfg["sliding_window_pattern"] != 0 for i in range(n)]
    if "max_window_layers" in cfg:
        return [i >= cfg["max_window_layers"] for i in range(n)]
    return [True] * n


def layer_positions(cfg, d):
    """(RoPEs [global, local?], per layer (rope index, window or None))."""
    window = cfg.get("sliding_window") or None
    if cfg.get("use_sliding_window") is False:
        window = None
    ropes = [global_rope(cfg, d)]
    if cfg.get("rope_local_base_freq"):
        ropes.append(Rope(base_inv(cfg["rope_local_base_freq"], d)))
    layers = []
    for sliding in layer_kinds(cfg):
        w = window if sliding else None
        layers.append((1 if sliding and len(ropes) == 2 else 0, w))
    return ropes, layers


# --------------------------------------------------------------------------- unit-test cases

def phi3_factors(n, top):
    """A smooth list of n factors rising from 1 to top, shaped like Phi-3's."""
    return [float(1 + (top - 1) * (i / (n - 1)) ** 2) for i in range(n)]


def base_config(**kw):
    """A small Llama config.json dict with kw on top."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
           "intermediate_size": 64, "vocab_size": 32, "rms_norm_eps": 1e-5,
           "max_position_embeddings": 4096}
    cfg.update(kw)
    return cfg


CASES = {
    "default": base_config(rope_theta=500000.0),
    "linear": base_config(rope_scaling={"type": "linear", "factor": 4.0}),
    # Llama-3.2-1B's values, and a shrunk original context that splits head_dim 128 in 3 bands
    "llama3": base_config(rope_theta=500000.0, max_position_embeddings=131072,
                          rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 8192}),
    "llama3-small": base_config(rope_theta=500000.0, max_position_embeddings=512,
                                rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                              "original_max_position_embeddings": 64}),
    "yarn": base_config(rope_theta=1000000.0, max_position_embeddings=32768,
                        rope_scaling={"type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 32768}),
    "yarn-mscale": base_config(rope_scaling={"rope_type": "yarn", "factor": 40.0,
                                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                                             "mscale_all_dim": 0.5,
                                             "original_max_position_embeddings": 4096}),
    "yarn-attention-factor": base_config(rope_scaling={"rope_type": "yarn", "factor": 8.0,
                                                       "attention_factor": 1.25}),
    # gpt-oss-20b's rope_scaling: the correction range's bounds kept fractional
    "yarn-no-truncate": base_config(rope_theta=150000.0, max_position_embeddings=131072,
                                    rope_scaling={"rope_type": "yarn", "factor": 32.0,
                                                  "beta_fast": 32.0, "beta_slow": 1.0,
                                                  "original_max_position_embeddings": 4096,
                                                  "truncate": False}),
    "dynamic": base_config(max_position_embeddings=2048,
                           rope_scaling={"type": "dynamic", "factor": 2.0}),
    "phi3-128k": base_config(hidden_size=192, rope_theta=10000.0, max_position_embeddings=131072,
                             original_max_position_embeddings=4096, sliding_window=262144,
                             rope_scaling={"type": "longrope",
                                           "short_factor": phi3_factors(48, 1.1),
                                           "long_factor": phi3_factors(48, 40.0)}),
    "su-scaling-factor": base_config(hidden_size=32, max_position_embeddings=512,
                                     rope_scaling={"type": "su", "factor": 4.0,
                                                   "original_max_position_embeddings": 128,
                                                   "short_factor": phi3_factors(8, 1.5),
                                                   "long_factor": phi3_factors(8, 6.0)}),
    "gemma3-pattern": base_config(num_hidden_layers=7, rope_theta=1000000.0,
                                  rope_local_base_freq=10000.0, sliding_window=512,
                                  sliding_window_pattern=6,
                                  rope_scaling={"rope_type": "linear", "factor": 8.0}),
    "layer-types": base_config(sliding_window=16, rope_local_base_freq=10000.0,
                               rope_theta=1000000.0,
                               layer_types=["sliding_attention", "full_attention",
                                            "sliding_attention", "full_attention"]),
    "qwen2-no-window": base_config(sliding_window=32768, use_sliding_window=False,
                                   max_window_layers=2, rope_theta=1000000.0),
    "qwen2-window-from-layer-2": base_config(sliding_window=32, use_sliding_window=True,
                                             max_window_layers=2),
    "mistral-window": base_config(sliding_window=4096),
    "phi3-mini-4k": base_config(hidden_size=192, sliding_window=2047,
                                original_max_position_embeddings=4096, rope_scaling=None),
}


def write_cases(out_dir):
    """Each case's config.json and the numbers this module gives for it."""
    os.makedirs(out_dir, exist_ok=True)
    for name, cfg in CASES.items():
        d = cfg["hidden_size"] // cfg["num_attention_heads"]
        ropes, layers = layer_positions(cfg, d)
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(cfg, f, indent=2)
        lines = ["layers " + " ".join("%d:%d" % (r, w or 0) for r, w in layers)]
        for k, r in enumerate(ropes):
            lines.append("rope %d %.17g %d" % (k, r.attn, -1 if r.long_from is None else r.long_from))
            for s in range(2):
                lines.append("inv%d " % s + " ".join("%.17g" % v for v in r.inv[s]))
        with open(os.path.join(out_dir, name + ".expect"), "w") as f:
            f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases-dir", required=True, metavar="DIR")
    a = p.parse_args()
    write_cases(a.cases_dir)


if __name__ == "__main__":
    main()
