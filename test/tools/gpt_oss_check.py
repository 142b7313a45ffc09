#!/usr/bin/python3
"""Check reference.py's gpt-oss forward by computations written apart from it.

    gpt_oss_check.py [--workdir DIR]

Prints TAP lines; the exit status is 1 when a check failed.

  experts   reference.moe_mlp on gpt-oss experts (random router, biases and stacked [in, out]
            matrices, scaled so that the SwiGLU's clamps act) against a loop over tokens,
            experts and output columns that reads the gate and up columns out of the
            interleaved matrix one by one, ranks the experts by (-logit, index) and clamps
            each value with min and max; with exactly tied logits the lower expert index
            must be chosen first.
  sinks     reference.attend against per-head, per-query loops (causal, windowed, grouped
            heads, prompt and cached steps, small and large sinks) that add exp(sink) to
            each row's denominator; with every sink at -inf it must be plain softmax
            attention.
  yarn      reference.yarn_rope against rope_ref.yarn when truncate is true; with factor 1
            it must be plain RoPE; for gen_model.py's gpt_oss context truncate false must
            move the frequencies; and the rotation against a per-pair rotation written as
            gpt-oss does it (first half x cos - second half x sin, ...) times the factor.
  layout    gen_model.py --family gpt_oss: config.json's fields are gpt-oss-20b's (less its
            MXFP4 quantization_config, plus torch_dtype) with its fixed values, and the
            tensors have the real checkpoint's names and shapes.
  model     reference.py's logits and 16 greedy tokens (KV cache) for such a checkpoint
            against a whole forward written here with loops and recomputed from scratch at
            every step; the run must clamp, the window must cut keys, and the sinks, YaRN's
            truncate and the window must each move the logits well past a float32 engine's
            error.
  wiring    the checkpoint with every sink at -inf, YaRN's factor 1 and the experts' down
            projections and biases 0 against a Llama checkpoint with the same attention,
            layer_types and an MLP of zeros: reference.py's logits must agree.
"""

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402
import rope_ref  # noqa: E402
import safetensors_f32  # noqa: E402

PROMPT = "1 15 267 42 300 7 99 180 3 250 61 128"
GEN = ["--family", "gpt_oss", "--hidden", "64", "--layers", "3", "--heads", "4", "--kv-heads",
       "2", "--head-dim", "32", "--experts", "8", "--experts-used", "4", "--intermediate", "32",
       "--vocab", "400", "--dtype", "bf16", "--seed", "66"]

# openai/gpt-oss-20b's config.json: its fields, and the values gen_model.py keeps
REAL_FIELDS = {
    "architectures", "attention_bias", "attention_dropout", "eos_token_id", "experts_per_token",
    "head_dim", "hidden_act", "hidden_size", "initial_context_length", "initializer_range",
    "intermediate_size", "layer_types", "max_position_embeddings", "model_type",
    "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
    "num_local_experts", "output_router_logits", "pad_token_id", "quantization_config",
    "rms_norm_eps", "rope_scaling", "rope_theta", "router_aux_loss_coef", "sliding_window",
    "swiglu_limit", "tie_word_embeddings", "transformers_version", "use_cache", "vocab_size"}
REAL_VALUES = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "hidden_act": "silu", "initializer_range": 0.02, "model_type": "gpt_oss",
    "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 150000,
    "router_aux_loss_coef": 0.9, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    "transformers_version": "4.55.0.dev0", "use_cache": True}
REAL_YARN = {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "rope_type": "yarn",
             "truncate": False}


class Tap:
    def __init__(self):
        self.n, self.failed = 0, 0

    def check(self, ok, desc):
        self.n += 1
        self.failed += not ok
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, desc))


def rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


# --------------------------------------------------------------------------- loops

def loop_experts(router, router_bias, gate_up, gate_up_bias, down, down_bias, k, h,
                 limit=7.0, alpha=1.702, counts=None):
    """gpt-oss's MLP for rows h, one token, one expert, one output column at a time.
    counts (a dict) gains the number of gate values above the limit and of up values
    outside +-limit."""
    n, width = router.shape[0], down.shape[1]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        logits = [float(np.dot(router[e], h[t])) + float(router_bias[e]) for e in range(n)]
        chosen = sorted(range(n), key=lambda e: (-logits[e], e))[:k]
        top = max(logits[e] for e in chosen)
        z = sum(math.exp(logits[e] - top) for e in chosen)
        for e in chosen:
            y = np.zeros(width)
            for j in range(width):
                gate_col, up_col = gate_up[e][:, 2 * j], gate_up[e][:, 2 * j + 1]
                g = float(np.dot(h[t], gate_col)) + float(gate_up_bias[e][2 * j])
                u = float(np.dot(h[t], up_col)) + float(gate_up_bias[e][2 * j + 1])
                if counts is not None:
                    counts["gate"] = counts.get("gate", 0) + (g > limit)
                    counts["up"] = counts.get("up", 0) + (abs(u) > limit)
                g = min(g, limit)
                u = max(-limit, min(u, limit))
                y[j] = (u + 1.0) * g * (1.0 / (1.0 + math.exp(-alpha * g)))
            expert = down_bias[e].copy()
            for j in range(width):
                expert += y[j] * down[e][j]
            out[t] += math.exp(logits[e] - top) / z * expert
    return out


def loop_attend(q, ks, vs, pos, kpos, window, scale, sinks=None):
    """Attention of queries q [heads, T, d] over keys and values [kv_heads, S, d], one head
    and one query at a time; sinks[j] adds exp(sinks[j]) to head j's denominators."""
    heads, t_len, d = q.shape
    group = heads // ks.shape[0]
    out = np.zeros((t_len, heads * d))
    for j in range(heads):
        kv = j // group
        for t in range(t_len):
            keys = [s for s in range(ks.shape[1]) if kpos[s] <= pos[t]
                    and (window is None or kpos[s] > pos[t] - window)]
            logits = [float(np.dot(q[j, t], ks[kv, s])) * scale for s in keys]
            top = max(logits + ([float(sinks[j])] if sinks is not None else []))
            z = sum(math.exp(v - top) for v in logits)
            if sinks is not None:
                z += math.exp(float(sinks[j]) - top)
            acc = np.zeros(d)
            for s, v in zip(keys, logits):
                acc += math.exp(v - top) / z * vs[kv, s]
            out[t, j * d:(j + 1) * d] = acc
    return out


def yarn_bounds(cfg, d):
    """YaRN's ramp ends before any flooring or clamping: the (fractional) pair indices
    whose wavelength fits beta_fast and beta_slow times into the original context."""
    theta, rs = float(cfg["rope_theta"]), cfg["rope_scaling"]
    orig = float(rs["original_max_position_embeddings"])

    def dim_of(turns):  # 2 pi turns / freq_i = orig  <=>  i = dim_of(turns)
        return d / 2.0 * math.log(orig / (2.0 * math.pi * turns)) / math.log(theta)

    return dim_of(rs["beta_fast"]), dim_of(rs["beta_slow"])


def loop_inv_freq(cfg, d):
    """YaRN's inverse frequencies and attention factor, one pair of dimensions at a time."""
    theta = float(cfg["rope_theta"])
    rs = cfg.get("rope_scaling")
    base = [theta ** (-2.0 * i / d) for i in range(d // 2)]
    if not rs:
        return base, 1.0
    factor = float(rs["factor"])
    lo, hi = yarn_bounds(cfg, d)
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, d - 1)
    if hi == lo:
        hi += 0.001
    inv = []
    for i in range(d // 2):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0: original, 1: interpolated
        inv.append(base[i] / factor if ramp == 1.0 else
                   base[i] if ramp == 0.0 else ramp * base[i] / factor + (1 - ramp) * base[i])
    attn = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    return inv, attn


def loop_rotate(x, positions, inv, attn):
    """x [heads, T, d] rotated as gpt-oss does: pairs (i, i + d/2), cos and sin times attn."""
    d = x.shape[-1]
    out = np.empty_like(x)
    for t, p in enumerate(positions):
        for i in range(d // 2):
            c, s = math.cos(p * inv[i]) * attn, math.sin(p * inv[i]) * attn
            a, b = x[:, t, i], x[:, t, i + d // 2]
            out[:, t, i], out[:, t, i + d // 2] = a * c - b * s, b * c + a * s
    return out


# --------------------------------------------------------------------------- a whole forward

def read_weights(path):
    """A safetensors file's tensors as float64 (F32, F16 or BF16), read here."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if info["dtype"] == "BF16":
            x = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view("<f4")
        else:
            x = np.frombuffer(buf, {"F32": "<f4", "F16": "<f2"}[info["dtype"]])
        out[name] = x.astype(np.float64).reshape(info["shape"])
    return out, header


def loop_forward(model_dir, ids, counts=None, cuts=None):
    """Logits [T, vocab] of ids, from nothing (no cache); counts gains the clamps, cuts the
    number of causal keys a window removed."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w, _ = read_weights(os.path.join(model_dir, "model.safetensors"))
    heads, kvh, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, k = cfg["rms_norm_eps"], cfg["num_experts_per_tok"]
    inv, attn = loop_inv_freq(cfg, d)

    def norm(x, weight):
        return np.array([r / math.sqrt(float(np.mean(r * r)) + eps) * weight for r in x])

    x = np.array([w["model.embed_tokens.weight"][t] for t in ids])
    positions = list(range(len(ids)))
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = norm(x, w[p + "input_layernorm.weight"])

        def proj(name, n):
            y = h @ w[p + "self_attn.%s.weight" % name].T + w[p + "self_attn.%s.bias" % name]
            return y.reshape(len(ids), n, d).transpose(1, 0, 2)

        q = loop_rotate(proj("q_proj", heads), positions, inv, attn)
        kk = loop_rotate(proj("k_proj", kvh), positions, inv, attn)
        v = proj("v_proj", kvh)
        window = cfg["sliding_window"] if cfg["layer_types"][i] == "sliding_attention" else None
        if cuts is not None and window is not None:
            cuts[0] += sum(max(0, t + 1 - window) for t in positions)
        sinks = w.get(p + "self_attn.sinks")
        a = loop_attend(q, kk, v, positions, positions, window, d ** -0.5, sinks)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T + w[p + "self_attn.o_proj.bias"]
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        e = p + "mlp.experts."
        x = x + loop_experts(w[p + "mlp.router.weight"], w[p + "mlp.router.bias"],
                             w[e + "gate_up_proj"], w[e + "gate_up_proj_bias"],
                             w[e + "down_proj"], w[e + "down_proj_bias"], k, h,
                             cfg.get("swiglu_limit", 7.0), 1.702, counts)
    return norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T


def loop_greedy(model_dir, ids, n):
    seq, out = list(ids), []
    for _ in range(n):
        out.append(int(np.argmax(loop_forward(model_dir, seq)[-1])))
        seq.append(out[-1])
    return out


# --------------------------------------------------------------------------- checks

def experts_checks(tap):
    rng = np.random.default_rng(21)
    hidden, width, rows = 24, 10, 30
    for n, k, scale in [(8, 2, 3.0), (8, 4, 3.0), (4, 4, 3.5), (16, 4, 4.0), (3, 1, 3.0)]:
        router = rng.standard_normal((n, hidden)) * 2.0 / np.sqrt(hidden)
        router_bias = rng.standard_normal(n) * 0.5
        gate_up = rng.standard_normal((n, hidden, 2 * width)) * scale / np.sqrt(hidden)
        gate_up_bias = rng.standard_normal((n, 2 * width)) * 0.5
        down = rng.standard_normal((n, width, hidden)) / np.sqrt(width)
        down_bias = rng.standard_normal((n, hidden)) * 0.5
        h = rng.standard_normal((rows, hidden))
        ex = reference.GptOssExperts(router, router_bias, gate_up, gate_up_bias, down,
                                     down_bias, k)
        got = reference.moe_mlp(ex, h, None, 0, np.arange(rows))
        counts = {}
        want = loop_experts(router, router_bias, gate_up, gate_up_bias, down, down_bias, k, h,
                            counts=counts)
        err = rel(got, want)
        tap.check(err < 1e-12 and counts["gate"] > 0 and counts["up"] > 0,
                  "experts: %d experts, k %d, %d gate and %d up values clamped (rel err %.2g)"
                  % (n, k, counts["gate"], counts["up"], err))
    # exact ties: repeated router rows and biases make bit-identical logits
    n, k = 6, 2
    base = rng.standard_normal((3, hidden)) / np.sqrt(hidden)
    router, router_bias = base[[0, 1, 0, 2, 1, 0]], np.zeros(n)
    gate_up = rng.standard_normal((n, hidden, 2 * width)) / np.sqrt(hidden)
    gate_up_bias, down_bias = np.zeros((n, 2 * width)), np.zeros((n, hidden))
    down = rng.standard_normal((n, width, hidden)) / np.sqrt(width)
    h = rng.standard_normal((rows, hidden))
    ex = reference.GptOssExperts(router, router_bias, gate_up, gate_up_bias, down, down_bias, k)
    chosen = reference.route_gpt_oss(ex, h)[0]
    want = [sorted(range(n), key=lambda e: (-float(h[t] @ router[e]), e))[:k]
            for t in range(rows)]
    tap.check(np.array_equal(chosen, np.array(want)),
              "experts: exact ties choose the lower expert index first")
    got = reference.moe_mlp(ex, h, None, 0, np.arange(rows))
    want = loop_experts(router, router_bias, gate_up, gate_up_bias, down, down_bias, k, h)
    tap.check(rel(got, want) < 1e-12, "experts: exact ties, outputs (rel err %.2g)"
              % rel(got, want))
    # the router's bias decides between experts whose weights are equal
    router = np.repeat(base[:1], 4, axis=0)
    ex = reference.GptOssExperts(router, np.array([0.0, 0.3, -0.2, 0.1]), gate_up[:4],
                                 gate_up_bias[:4], down[:4], down_bias[:4], 2)
    chosen = reference.route_gpt_oss(ex, h)[0]
    tap.check((chosen == [1, 3]).all(), "experts: the router bias breaks equal logits")


def sink_checks(tap):
    rng = np.random.default_rng(22)
    d = 16
    cases = [  # heads, kv_heads, first position, new rows, window, sink scale
        (4, 2, 0, 12, None, 1.0), (4, 2, 0, 12, 4, 1.0), (4, 4, 0, 12, 1, 1.0),
        (8, 2, 12, 1, None, 1.0), (8, 2, 12, 1, 4, 3.0), (4, 1, 7, 5, 3, 5.0),
        (4, 2, 0, 12, 4, 0.0)]
    for heads, kvh, start, t_len, window, sink_scale in cases:
        s_len = start + t_len
        q = rng.standard_normal((heads, t_len, d))
        ks, vs = rng.standard_normal((kvh, s_len, d)), rng.standard_normal((kvh, s_len, d))
        pos = np.arange(start, s_len, dtype=np.float64)
        kpos = np.arange(s_len, dtype=np.float64)
        sinks = rng.standard_normal(heads) * sink_scale + (2.0 if sink_scale > 2 else 0.0)
        got = reference.attend(q, ks, vs, pos, kpos, window, d ** -0.5, sinks)
        want = loop_attend(q, ks, vs, pos, kpos, window, d ** -0.5, sinks)
        err = rel(got, want)
        tap.check(err < 1e-12, "sinks: %d heads over %d, rows %d..%d, window %s, sinks x%g "
                  "(rel err %.2g)" % (heads, kvh, start, s_len - 1, window, sink_scale, err))
    q = rng.standard_normal((4, 12, d))
    ks, vs = rng.standard_normal((2, 12, d)), rng.standard_normal((2, 12, d))
    pos = np.arange(12, dtype=np.float64)
    for window in (None, 4):
        a = reference.attend(q, ks, vs, pos, pos, window, d ** -0.5, np.full(4, -np.inf))
        b = reference.attend(q, ks, vs, pos, pos, window, d ** -0.5, None)
        c = reference.attend(q, ks, vs, pos, pos, window, d ** -0.5, np.full(4, -1e4))
        tap.check(rel(a, b) < 1e-15 and rel(c, b) < 1e-15,
                  "sinks: at -inf (or -1e4) the attention is plain softmax's, window %s "
                  "(rel err %.2g)" % (window, max(rel(a, b), rel(c, b))))


def yarn_checks(tap):
    rng = np.random.default_rng(23)
    for name in ("yarn", "yarn-mscale", "yarn-attention-factor"):
        cfg = copy.deepcopy(rope_ref.CASES[name])
        d = cfg["hidden_size"] // cfg["num_attention_heads"]
        want = rope_ref.global_rope(cfg, d)
        got = reference.yarn_rope(cfg, d)
        ok = rel(got.inv[0], want.inv[0]) < 1e-15 and abs(got.attn - want.attn) < 1e-15
        tap.check(ok, "yarn: truncate true is rope_ref's YaRN (%s)" % name)
    for d, truncate in ((16, False), (32, False), (64, True)):
        cfg = {"rope_theta": 150000, "max_position_embeddings": 64,
               "rope_scaling": {"rope_type": "yarn", "factor": 1.0, "beta_fast": 32.0,
                                "beta_slow": 1.0, "original_max_position_embeddings": 64,
                                "truncate": truncate}}
        r = reference.yarn_rope(cfg, d)
        ok = rel(r.inv[0], rope_ref.base_inv(150000, d)) < 1e-15 and r.attn == 1.0
        x = rng.standard_normal((2, 6, d))
        pos = np.arange(6, dtype=np.float64)
        plain = rope_ref.apply_rope(x, pos, rope_ref.Rope(rope_ref.base_inv(150000, d)))
        ok = ok and rel(rope_ref.apply_rope(x, pos, r), plain) < 1e-15
        tap.check(ok, "yarn: factor 1 is plain RoPE (head_dim %d, truncate %s)" % (d, truncate))
    with tempfile.TemporaryDirectory() as work:  # gen_model.py's YaRN object
        run(os.path.join(HERE, "gen_model.py"), work, *GEN, "--no-weights")
        gen = json.load(open(os.path.join(work, "config.json")))
    for d in (16, 32, 64):
        cfg = {"rope_theta": gen["rope_theta"], "rope_scaling": dict(gen["rope_scaling"]),
               "max_position_embeddings": gen["max_position_embeddings"]}
        lo, hi = yarn_bounds(cfg, d)
        inside = 0 < lo < hi < d // 2 - 1 and lo != math.floor(lo) and hi != math.ceil(hi)
        exact = reference.yarn_rope(cfg, d)
        cfg["rope_scaling"]["truncate"] = True
        floored = reference.yarn_rope(cfg, d)
        moved = rel(exact.inv[0], floored.inv[0])
        cfg["rope_scaling"]["truncate"] = False
        inv, attn = loop_inv_freq(cfg, d)
        x = rng.standard_normal((3, 9, d))
        pos = np.arange(20, 29, dtype=np.float64)
        err = rel(rope_ref.apply_rope(x, pos, exact), loop_rotate(x, pos, inv, attn))
        attn = abs(exact.attn - (0.1 * math.log(32) + 1)) < 1e-15
        tap.check(inside and moved > 1e-3 and err < 1e-13 and attn,
                  "yarn: gen_model's context, head_dim %d: ramp %.3f..%.3f inside (0, %d), "
                  "truncate false moves the frequencies by %.2g, rotation as gpt-oss's (rel err "
                  "%.2g)" % (d, lo, hi, d // 2 - 1, moved, err))


def run(*args):
    subprocess.run([sys.executable] + [str(a) for a in args], check=True,
                   stdout=subprocess.DEVNULL)


def ref_out(model_dir, *flags):
    out = subprocess.run([sys.executable, os.path.join(HERE, "reference.py"), model_dir,
                          "--prompt-ids", PROMPT] + list(flags), check=True,
                         capture_output=True, text=True).stdout
    return [[float(v) for v in line.split()] for line in out.splitlines()]


def layout_checks(tap, model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    fields = set(cfg) == (REAL_FIELDS - {"quantization_config"}) | {"torch_dtype"}
    values = all(cfg[f] == v for f, v in REAL_VALUES.items())
    rs = cfg["rope_scaling"]
    yarn = all(rs[f] == v for f, v in REAL_YARN.items()) and set(rs) == set(REAL_YARN) | {
        "original_max_position_embeddings"}
    context = (cfg["initial_context_length"] == rs["original_max_position_embeddings"] and
               cfg["max_position_embeddings"] == rs["factor"] * cfg["initial_context_length"])
    kinds = cfg["layer_types"] == [("sliding_attention", "full_attention")[i % 2]
                                   for i in range(cfg["num_hidden_layers"])]
    k = cfg["num_experts_per_tok"] == cfg["experts_per_token"]
    tap.check(fields and values and yarn and context and kinds and k,
              "layout: config.json has gpt-oss-20b's fields and fixed values (fields %s, values "
              "%s, yarn %s, context %s, layer_types %s, k twice %s)"
              % (fields, values, yarn, context, kinds, k))
    hid, heads, kvh, d = (cfg[f] for f in ("hidden_size", "num_attention_heads",
                                           "num_key_value_heads", "head_dim"))
    n, inter, vocab = cfg["num_local_experts"], cfg["intermediate_size"], cfg["vocab_size"]
    want = {"model.embed_tokens.weight": [vocab, hid], "model.norm.weight": [hid],
            "lm_head.weight": [vocab, hid]}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        want.update({
            p + "input_layernorm.weight": [hid], p + "post_attention_layernorm.weight": [hid],
            p + "self_attn.q_proj.weight": [heads * d, hid],
            p + "self_attn.q_proj.bias": [heads * d],
            p + "self_attn.k_proj.weight": [kvh * d, hid], p + "self_attn.k_proj.bias": [kvh * d],
            p + "self_attn.v_proj.weight": [kvh * d, hid], p + "self_attn.v_proj.bias": [kvh * d],
            p + "self_attn.o_proj.weight": [hid, heads * d], p + "self_attn.o_proj.bias": [hid],
            p + "self_attn.sinks": [heads],
            p + "mlp.router.weight": [n, hid], p + "mlp.router.bias": [n],
            p + "mlp.experts.gate_up_proj": [n, hid, 2 * inter],
            p + "mlp.experts.gate_up_proj_bias": [n, 2 * inter],
            p + "mlp.experts.down_proj": [n, inter, hid],
            p + "mlp.experts.down_proj_bias": [n, hid]})
    _, header = read_weights(os.path.join(model_dir, "model.safetensors"))
    got = {name: info["shape"] for name, info in header.items()}
    tap.check(got == want and all(info["dtype"] == "BF16" for info in header.values()),
              "layout: the %d tensors have gpt-oss's BF16 names and shapes" % len(want))


def model_checks(tap, model_dir):
    ids = [int(t) for t in PROMPT.split()]
    counts, cuts = {}, [0]
    want = loop_forward(model_dir, ids, counts, cuts)
    got = np.array(ref_out(model_dir, "--logits"))
    err = rel(got, want)
    tap.check(err < 1e-12, "model: reference.py's logits are the loop forward's (rel err %.2g)"
              % err)
    tap.check(counts["gate"] > 0 and counts["up"] > 0 and cuts[0] > 0,
              "model: the prompt clamps %d gate and %d up values, the windows cut %d keys"
              % (counts["gate"], counts["up"], cuts[0]))
    greedy = [int(v) for v in ref_out(model_dir, "--greedy", "16")[0]]
    loop = loop_greedy(model_dir, ids, 16)
    tap.check(greedy == loop, "model: reference.py's 16 greedy tokens (KV cache) are the "
              "recomputing loop's: %s" % " ".join(map(str, greedy)))
    # what each feature moves: an engine that lost it would be this far off (float32: ~1e-6)
    cfg_path = os.path.join(model_dir, "config.json")
    cfg = json.load(open(cfg_path))
    w, _ = read_weights(os.path.join(model_dir, "model.safetensors"))
    variants = {}
    c = copy.deepcopy(cfg)
    c["rope_scaling"]["truncate"] = True
    variants["YaRN truncated"] = (c, w)
    c = copy.deepcopy(cfg)
    c["sliding_window"] = 4096
    variants["no window"] = (c, w)
    c = copy.deepcopy(cfg)
    c["rope_scaling"] = None
    variants["no YaRN"] = (c, w)
    variants["no sinks"] = (cfg, {n: (np.full_like(t, -np.inf) if n.endswith(".sinks") else t)
                                  for n, t in w.items()})
    moved = {}
    for name, (c, weights) in variants.items():
        d = model_dir + "-variant"
        os.makedirs(d, exist_ok=True)
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
        safetensors_f32.write(os.path.join(d, "model.safetensors"), weights)
        moved[name] = rel(np.array(ref_out(d, "--logits")), got)
    tap.check(all(v > 1e-3 for v in moved.values()),
              "model: each feature moves the logits: " +
              ", ".join("%s %.2g" % kv for kv in sorted(moved.items())))


def wiring_checks(tap, model_dir, work):
    """Sinks at -inf, YaRN factor 1 and zero experts: Llama's attention with biases, an
    explicit head_dim and per-layer windows, and no MLP."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w, _ = read_weights(os.path.join(model_dir, "model.safetensors"))
    neutral = dict(w)
    for name in w:
        if name.endswith(".sinks"):
            neutral[name] = np.full_like(w[name], -np.inf)
        if ".experts.down_proj" in name:
            neutral[name] = np.zeros_like(w[name])
    g = os.path.join(work, "gpt_oss-neutral")
    os.makedirs(g, exist_ok=True)
    c = copy.deepcopy(cfg)
    c["rope_scaling"]["factor"] = 1.0
    c["max_position_embeddings"] = c["initial_context_length"]
    json.dump(c, open(os.path.join(g, "config.json"), "w"), indent=2)
    safetensors_f32.write(os.path.join(g, "model.safetensors"), neutral)

    llama = {n: t for n, t in w.items() if ".mlp." not in n and not n.endswith(".sinks")}
    hid, inter = cfg["hidden_size"], cfg["intermediate_size"]
    for i in range(cfg["num_hidden_layers"]):
        for name, shape in (("gate_proj", (inter, hid)), ("up_proj", (inter, hid)),
                            ("down_proj", (hid, inter))):
            llama["model.layers.%d.mlp.%s.weight" % (i, name)] = np.zeros(shape)
    lcfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_act": "silu", "attention_bias": True, "tie_word_embeddings": False}
    for f in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta",
              "layer_types", "sliding_window", "max_position_embeddings"):
        lcfg[f] = cfg[f]
    lm = os.path.join(work, "llama-equivalent")
    os.makedirs(lm, exist_ok=True)
    json.dump(lcfg, open(os.path.join(lm, "config.json"), "w"), indent=2)
    safetensors_f32.write(os.path.join(lm, "model.safetensors"), llama)
    for d in (g, lm):
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(model_dir, f), os.path.join(d, f))
    a, b = np.array(ref_out(g, "--logits")), np.array(ref_out(lm, "--logits"))
    err = rel(a, b)
    tap.check(err < 1e-12, "wiring: gpt_oss with sinks -inf, YaRN factor 1 and zero experts is "
              "Llama with its attention (rel err %.2g)" % err)


def checkpoint_checks(tap, work):
    model_dir = os.path.join(work, "gpt_oss")
    run(os.path.join(HERE, "gen_model.py"), model_dir, *GEN)
    layout_checks(tap, model_dir)
    model_checks(tap, model_dir)
    wiring_checks(tap, model_dir, work)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", help="where the checkpoints go (default: a temporary "
                   "directory, removed)")
    a = p.parse_args(argv)
    tap = Tap()
    experts_checks(tap)
    sink_checks(tap)
    yarn_checks(tap)
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        checkpoint_checks(tap, a.workdir)
    else:
        with tempfile.TemporaryDirectory() as work:
            checkpoint_checks(tap, work)
    print("1..%d" % tap.n)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
