#!/usr/bin/python3
"""Check reference.py's Qwen3.5 forward by computations written apart from it.

    qwen35_check.py [--workdir DIR]

Prints TAP lines and "N checks passed" (or how many failed); the exit status is 1 when a
check failed.  Every computation on this side is written from the maths, not from
reference.py's code, and differs from it in form:

  delta rule  reference.delta_rule (one token at a time) against the chunked form of the
              gated delta rule (the WY / UT representation): within a chunk of C tokens
              with cumulative log decays G_t, the updates D (C x dv) solve the unit lower
              triangular system (I + A) D = diag(beta) V - diag(beta e^G) K S0, with
              A[t, s] = beta_t e^(G_t - G_s) k_t.k_s for s < t, through its inverse T (the UT
              transform); the outputs are e^G Q S0 + (L o Q K^T) D with L[t, s] =
              e^(G_t - G_s) for s <= t, and the state e^(G_last) S0 + (e^(G_last - G) K)^T D.
              Chunks of 1, 4, 5 and 64, decays down to -30, nonzero initial states.
  conv        reference.causal_conv against numpy's convolve per channel (the kernel
              reversed: conv1d correlates), and the history carried across calls.
  rope        reference.partial_rope against complex multiplication of the pairs
              (i, i + rot/2) of the rotated dimensions; and HF's interleaved mRoPE
              recomposition (written here from its description) with three equal position
              rows against the plain angles.
  attention   reference.gated_attention against a loop over heads and positions (per-head
              (1 + w) norms, complex RoPE, an explicit softmax, GQA, the sigmoid gate), the
              prompt in one call and in three.
  deltanet    reference.linear_attention against this file's composition (convolve, the
              chunked delta rule, the gated RMSNorm), nv = nk and nv = 2 nk, in one call and
              in three.
  model       reference.py's logits and greedy ids (its CLI) against a whole forward built
              here from the pieces above, which recomputes the whole sequence at every
              greedy step (so the CLI's cache is checked too): the released layout with
              nv = 2 nk, the flat Qwen3_5ForCausalLM layout with nv = nk, and BF16.
  layouts     gen_model.py's two layouts of one seed give reference.py the same logits
              (the vision and MTP tensors in the file ignored).
  wiring      a qwen3_5 checkpoint of full-attention layers only, partial_rotary_factor 1,
              with zero gate rows (sigmoid 1/2) and o_proj doubled, gives reference.py the
              logits its qwen3 forward gives for the same weights as a qwen3 checkpoint (the
              query rows of q_proj, o_proj not doubled, 1 added to every norm).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402
import rope_ref  # noqa: E402
import safetensors_f32  # noqa: E402

PROMPT = [1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]
N_GREEDY = 8


class Tap:
    def __init__(self):
        self.n, self.failed = 0, 0

    def check(self, ok, desc):
        self.n += 1
        self.failed += not ok
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, desc))
        sys.stdout.flush()


def rel_err(got, want):
    return float(np.abs(np.asarray(got) - np.asarray(want)).max() / np.abs(want).max())


# --------------------------------------------------------------------------- pieces

def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def swish(x):
    return x * sig(x)


def chunked_delta(q, k, v, g, beta, s0, chunk):
    """The gated delta rule in chunks (WY / UT form): q, k [T, H, dk], v [T, H, dv], g, beta
    [T, H], s0 [H, dk, dv] -> (out [T, H, dv], final state)."""
    n_tok, n_heads = q.shape[0], q.shape[1]
    out = np.zeros(v.shape)
    state = s0.copy()
    for h in range(n_heads):
        s = state[h]
        for c0 in range(0, n_tok, chunk):
            sl = slice(c0, min(c0 + chunk, n_tok))
            qc, kc, vc, bc = q[sl, h], k[sl, h], v[sl, h], beta[sl, h]
            gam = np.cumsum(g[sl, h])
            n = len(gam)
            diff = gam[:, None] - gam[None, :]
            lower = np.tril(np.ones((n, n)), -1).astype(bool)
            incl = np.tril(np.ones((n, n))).astype(bool)
            decay = np.where(incl, np.exp(np.where(incl, diff, 0.0)), 0.0)
            a = np.where(lower, bc[:, None] * decay * (kc @ kc.T), 0.0)
            t_inv = np.linalg.inv(np.eye(n) + a)          # the UT transform
            u = t_inv @ (bc[:, None] * vc)
            w = t_inv @ ((bc * np.exp(gam))[:, None] * kc)
            d = u - w @ s
            out[sl, h] = np.exp(gam)[:, None] * (qc @ s) + (decay * (qc @ kc.T)) @ d
            s = np.exp(gam[-1]) * s + (np.exp(gam[-1] - gam)[:, None] * kc).T @ d
        state[h] = s
    return out, state


def conv_by_convolve(x, history, w):
    """Causal depthwise conv of x [T, C] after history [K-1, C] with kernel w [C, K]."""
    rows = np.concatenate([history, x])
    k = w.shape[1]
    out = np.empty(x.shape)
    for c in range(x.shape[1]):
        full = np.convolve(rows[:, c], w[c, ::-1])  # full[r]: the output at row r of rows
        out[:, c] = full[k - 1:rows.shape[0]]
    return out


def rope_complex(x, pos, theta, rot):
    """RoPE of the first rot dimensions of x [..., T, d] as complex multiplication."""
    half = rot // 2
    inv = np.array([theta ** (-2.0 * i / rot) for i in range(half)])
    z = x[..., :half] + 1j * x[..., half:rot]
    z = z * np.exp(1j * np.outer(pos, inv))
    return np.concatenate([z.real, z.imag, x[..., rot:]], axis=-1)


def mrope_interleaved(pos3, inv, section):
    """HF's interleaved mRoPE angles [T, rot/2] of three position rows pos3 [3, T]: row 0's
    angles, with dimensions 1, 4, 7, ... (below 3 section[1]) taken from row 1 and 2, 5,
    8, ... (below 3 section[2]) from row 2."""
    freqs = [np.outer(p, inv) for p in pos3]
    out = freqs[0].copy()
    for row in (1, 2):
        for i in range(row, 3 * section[row], 3):
            out[:, i] = freqs[row][:, i]
    return out


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def naive_attention(p, h, pos, cache):
    """Gated full attention of rows h, written as loops; cache: dict of keys/values/positions
    per kv head, extended."""
    d, nh, nkv = p["head_dim"], p["heads"], p["kv_heads"]
    qg = h @ p["q_proj"].T
    kk = h @ p["k_proj"].T
    vv = h @ p["v_proj"].T
    out = np.zeros((h.shape[0], nh * d))
    new_k, new_v = [], []
    for j in range(nkv):
        kj = rms(kk[:, j * d:(j + 1) * d], 1.0 + p["k_norm"], p["eps"])
        new_k.append(rope_complex(kj, pos, p["theta"], p["rot"]))
        new_v.append(vv[:, j * d:(j + 1) * d])
    for j in range(nkv):
        cache["k"][j] = np.concatenate([cache["k"][j], new_k[j]])
        cache["v"][j] = np.concatenate([cache["v"][j], new_v[j]])
    cache["pos"] = np.concatenate([cache["pos"], pos])
    for hd in range(nh):
        kvh = hd // (nh // nkv)
        block = qg[:, 2 * d * hd:2 * d * (hd + 1)]
        qh = rope_complex(rms(block[:, :d], 1.0 + p["q_norm"], p["eps"]), pos, p["theta"], p["rot"])
        gate = block[:, d:]
        for t in range(h.shape[0]):
            scores = [float(qh[t] @ cache["k"][kvh][s]) / math.sqrt(d)
                      for s in range(len(cache["pos"])) if cache["pos"][s] <= pos[t]]
            top = max(scores)
            e = [math.exp(x - top) for x in scores]
            tot = sum(e)
            acc = np.zeros(d)
            for s, es in enumerate(e):
                acc += es / tot * cache["v"][kvh][s]
            out[t, hd * d:(hd + 1) * d] = acc * sig(gate[t])
    return out @ p["o_proj"].T


def own_deltanet(p, h, state):
    """The Gated DeltaNet layer of rows h from this file's pieces; state dict extended."""
    nk, nv, dk, dv = p["nk"], p["nv"], p["dk"], p["dv"]
    n = h.shape[0]
    qkv = h @ p["in_proj_qkv"].T
    x = swish(conv_by_convolve(qkv, state["hist"], p["conv"]))
    kk = p["conv"].shape[1]
    state["hist"] = np.concatenate([state["hist"], qkv])[-(kk - 1):]
    q = x[:, :nk * dk].reshape(n, nk, dk)
    k = x[:, nk * dk:2 * nk * dk].reshape(n, nk, dk)
    v = x[:, 2 * nk * dk:].reshape(n, nv, dv)
    q = q / np.sqrt((q ** 2).sum(-1, keepdims=True) + 1e-6) / math.sqrt(dk)
    k = k / np.sqrt((k ** 2).sum(-1, keepdims=True) + 1e-6)
    group = [j * nk // nv for j in range(nv)]  # value head j reads key head j // (nv/nk)
    q, k = q[:, group], k[:, group]
    a = h @ p["in_proj_a"].T + p["dt_bias"]
    g = -np.exp(p["A_log"]) * np.log1p(np.exp(a))
    beta = sig(h @ p["in_proj_b"].T)
    o, state["S"] = chunked_delta(q, k, v, g, beta, state["S"], 4)
    z = (h @ p["in_proj_z"].T).reshape(n, nv, dv)
    o = rms(o, p["norm"], p["eps"]) * swish(z)
    return o.reshape(n, nv * dv) @ p["out_proj"].T


# --------------------------------------------------------------------------- fake layers

def random_attention_params(rng, hidden, heads, kv_heads, d, rot):
    def lin(o, i):
        return rng.standard_normal((o, i)) / math.sqrt(i)
    return {"head_dim": d, "heads": heads, "kv_heads": kv_heads, "eps": 1e-6, "theta": 1e4,
            "rot": rot, "q_proj": lin(2 * heads * d, hidden), "k_proj": lin(kv_heads * d, hidden),
            "v_proj": lin(kv_heads * d, hidden), "o_proj": lin(hidden, heads * d),
            "q_norm": 0.1 * rng.standard_normal(d), "k_norm": 0.1 * rng.standard_normal(d)}


def random_deltanet_params(rng, hidden, nk, nv, dk, dv, kern):
    def lin(o, i):
        return rng.standard_normal((o, i)) / math.sqrt(i)
    conv_dim = 2 * nk * dk + nv * dv
    return {"nk": nk, "nv": nv, "dk": dk, "dv": dv, "eps": 1e-6,
            "in_proj_qkv": lin(conv_dim, hidden), "in_proj_z": lin(nv * dv, hidden),
            "in_proj_b": lin(nv, hidden), "in_proj_a": lin(nv, hidden),
            "conv": rng.standard_normal((conv_dim, kern)) / math.sqrt(kern),
            "dt_bias": 1 + 0.1 * rng.standard_normal(nv),
            "A_log": rng.uniform(math.log(0.05), math.log(16), nv),
            "norm": 1 + 0.1 * rng.standard_normal(dv), "out_proj": lin(hidden, nv * dv)}


def fake_model(att=None, dn=None):
    """A reference.Qwen35 holding one layer 0 made of the parameters above."""
    m = object.__new__(reference.Qwen35)
    w = {}
    if att is not None:
        m.n_heads, m.n_kv_heads, m.head_dim = att["heads"], att["kv_heads"], att["head_dim"]
        m.eps, m.rot = att["eps"], att["rot"]
        m.rope = rope_ref.Rope(rope_ref.base_inv(att["theta"], att["rot"]))
        for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
            w["model.layers.0.self_attn.%s.weight" % name] = att[name]
    if dn is not None:
        m.nk, m.nv, m.dk, m.dv, m.eps = dn["nk"], dn["nv"], dn["dk"], dn["dv"], dn["eps"]
        for name in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj", "norm"):
            w["model.layers.0.linear_attn.%s.weight" % name] = dn[name]
        w["model.layers.0.linear_attn.conv1d.weight"] = dn["conv"][:, None, :]
        w["model.layers.0.linear_attn.dt_bias"] = dn["dt_bias"]
        w["model.layers.0.linear_attn.A_log"] = dn["A_log"]
    m.w = w
    return m


# --------------------------------------------------------------------------- checks

def delta_checks(tap):
    rng = np.random.default_rng(21)
    for n_tok, heads, dk, dv, chunk, g_lo in [(13, 3, 8, 6, 4, -30.0), (13, 2, 8, 8, 1, -5.0),
                                              (17, 2, 16, 16, 5, -0.5), (40, 4, 8, 8, 64, -3.0),
                                              (9, 1, 4, 12, 3, -30.0)]:
        def unit(shape):
            x = rng.standard_normal(shape)
            return x / np.sqrt((x * x).sum(-1, keepdims=True))
        q, k = unit((n_tok, heads, dk)) / math.sqrt(dk), unit((n_tok, heads, dk))
        v = rng.standard_normal((n_tok, heads, dv))
        g = rng.uniform(g_lo, 0.0, (n_tok, heads))
        beta = rng.uniform(0.0, 1.0, (n_tok, heads))
        s0 = rng.standard_normal((heads, dk, dv))
        got, got_s = reference.delta_rule(q, k, v, g, beta, s0)
        want, want_s = chunked_delta(q, k, v, g, beta, s0, chunk)
        err = max(rel_err(got, want), rel_err(got_s, want_s))
        tap.check(err < 1e-10, "delta rule: token loop = chunked UT form (T %d, chunk %d, "
                  "decays to %g; rel err %.2g)" % (n_tok, chunk, g_lo, err))
    # a sequence in two calls, the state carried
    q, k = rng.standard_normal((2, 11, 2, 8)) / 3
    v = rng.standard_normal((11, 2, 8))
    g, beta = rng.uniform(-2, 0, (11, 2)), rng.uniform(0, 1, (11, 2))
    zero = np.zeros((2, 8, 8))
    whole, s_whole = reference.delta_rule(q, k, v, g, beta, zero)
    a, s_a = reference.delta_rule(q[:4], k[:4], v[:4], g[:4], beta[:4], zero)
    b, s_b = reference.delta_rule(q[4:], k[4:], v[4:], g[4:], beta[4:], s_a)
    err = max(rel_err(np.concatenate([a, b]), whole), rel_err(s_b, s_whole))
    tap.check(err < 1e-13, "delta rule: two calls with the state carried = one (rel err %.2g)" % err)


def conv_checks(tap):
    rng = np.random.default_rng(22)
    for n_tok, chans, kern in [(12, 7, 4), (3, 5, 4), (9, 4, 2), (6, 3, 1)]:
        x = rng.standard_normal((n_tok, chans))
        w = rng.standard_normal((chans, kern))
        hist = np.zeros((kern - 1, chans))
        got, new_hist = reference.causal_conv(x, hist, w)
        want = conv_by_convolve(x, hist, w)
        ok = rel_err(got, want) < 1e-13 and np.array_equal(
            new_hist, np.concatenate([hist, x])[len(x):] if kern > 1 else hist)
        tap.check(ok, "conv: causal depthwise conv = numpy convolve (T %d, K %d, rel err %.2g)"
                  % (n_tok, kern, rel_err(got, want)))
    x = rng.standard_normal((10, 6))
    w = rng.standard_normal((6, 4))
    whole, _ = reference.causal_conv(x, np.zeros((3, 6)), w)
    parts, hist = [], np.zeros((3, 6))
    for lo, hi in ((0, 1), (1, 3), (3, 10)):
        y, hist = reference.causal_conv(x[lo:hi], hist, w)
        parts.append(y)
    err = rel_err(np.concatenate(parts), whole)
    tap.check(err < 1e-14, "conv: one token, two, then seven with the history carried = all "
              "at once (rel err %.2g)" % err)


def rope_checks(tap):
    rng = np.random.default_rng(23)
    for d, rot, theta in [(32, 8, 1e7), (64, 16, 1e4), (16, 16, 1e6)]:
        x = rng.standard_normal((3, 9, d))
        pos = np.arange(5, 14, dtype=np.float64)
        got = reference.partial_rope(x, pos, rope_ref.Rope(rope_ref.base_inv(theta, rot)), rot)
        want = rope_complex(x, pos, theta, rot)
        err = rel_err(got, want)
        tap.check(err < 1e-12 and np.array_equal(got[..., rot:], x[..., rot:]),
                  "rope: partial rotate_half = complex multiplication (head %d, rot %d; "
                  "rel err %.2g)" % (d, rot, err))
    inv = rope_ref.base_inv(1e7, 64)
    pos = np.arange(20, dtype=np.float64)
    equal = mrope_interleaved(np.stack([pos] * 3), inv, [11, 11, 10])
    ok = np.array_equal(equal, np.outer(pos, inv))
    differ = mrope_interleaved(np.stack([pos, pos + 1, pos + 2]), inv, [11, 11, 10])
    tap.check(ok and not np.array_equal(differ, equal),
              "rope: interleaved mRoPE [11, 11, 10] with three equal position rows = plain RoPE")


def attention_checks(tap):
    rng = np.random.default_rng(24)
    for hidden, heads, kv_heads, d, rot in [(24, 4, 2, 16, 4), (16, 2, 2, 8, 8), (32, 6, 2, 12, 6)]:
        p = random_attention_params(rng, hidden, heads, kv_heads, d, rot)
        m = fake_model(att=p)
        h = rng.standard_normal((9, hidden))
        pos = np.arange(9, dtype=np.float64)
        cache = {"k": [np.zeros((0, d))] * kv_heads, "v": [np.zeros((0, d))] * kv_heads,
                 "pos": np.zeros(0)}
        want = naive_attention(p, h, pos, cache)
        e = np.zeros((kv_heads, 0, d))
        got = reference.gated_attention(m, 0, h, pos, [e, e, np.zeros(0)])
        err1 = rel_err(got, want)
        st, parts = [e, e, np.zeros(0)], []
        for lo, hi in ((0, 4), (4, 5), (5, 9)):
            parts.append(reference.gated_attention(m, 0, h[lo:hi], pos[lo:hi], st))
        err2 = rel_err(np.concatenate(parts), want)
        tap.check(max(err1, err2) < 1e-12, "attention: gated GQA attention = loops (%d heads, "
                  "%d kv, head %d, rot %d; one call %.2g, three %.2g)"
                  % (heads, kv_heads, d, rot, err1, err2))


def deltanet_checks(tap):
    rng = np.random.default_rng(25)
    for hidden, nk, nv, dk, dv, kern in [(24, 2, 2, 8, 8, 4), (24, 2, 4, 8, 8, 4),
                                         (16, 1, 3, 4, 6, 3)]:
        p = random_deltanet_params(rng, hidden, nk, nv, dk, dv, kern)
        m = fake_model(dn=p)
        h = rng.standard_normal((11, hidden))
        conv_dim = 2 * nk * dk + nv * dv
        mine = {"hist": np.zeros((kern - 1, conv_dim)), "S": np.zeros((nv, dk, dv))}
        want = own_deltanet(p, h, mine)
        st = [np.zeros((kern - 1, conv_dim)), np.zeros((nv, dk, dv))]
        got = reference.linear_attention(m, 0, h, st)
        err1 = rel_err(got, want)
        st, parts = [np.zeros((kern - 1, conv_dim)), np.zeros((nv, dk, dv))], []
        for lo, hi in ((0, 2), (2, 3), (3, 11)):
            parts.append(reference.linear_attention(m, 0, h[lo:hi], st))
        err2 = rel_err(np.concatenate(parts), want)
        err3 = rel_err(st[1], mine["S"])
        tap.check(max(err1, err2, err3) < 1e-10,
                  "deltanet: Gated DeltaNet layer = convolve + chunked delta rule + gated "
                  "norm (nk %d, nv %d, dk %d, dv %d, K %d; one call %.2g, three %.2g, "
                  "state %.2g)" % (nk, nv, dk, dv, kern, err1, err2, err3))


# --------------------------------------------------------------------------- whole models

def run(*args):
    return subprocess.run([sys.executable] + [str(a) for a in args], check=True,
                          capture_output=True, text=True).stdout


def ref_logits(model_dir, ids=PROMPT):
    out = run(os.path.join(HERE, "reference.py"), model_dir, "--logits",
              "--prompt-ids", " ".join(map(str, ids)))
    return np.array([[float(v) for v in line.split()] for line in out.splitlines()])


def ref_greedy(model_dir, n):
    out = run(os.path.join(HERE, "reference.py"), model_dir, "--greedy", n,
              "--prompt-ids", " ".join(map(str, PROMPT)))
    return [int(t) for t in out.split()]


def gen(path, *args):
    run(os.path.join(HERE, "gen_model.py"), path, *args)


class OwnModel:
    """A Qwen3.5 checkpoint read and run by this file's pieces."""

    def __init__(self, model_dir):
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        text = cfg.get("text_config", cfg)
        self.text = text
        w, raw = {}, reference.load_weights(model_dir)
        for name, t in raw.items():
            for pre in ("model.language_model.", "model."):
                if name.startswith(pre) and not name.startswith("model.visual."):
                    w[name[len(pre):]] = t
                    break
        self.w = w
        self.eps = text["rms_norm_eps"]
        rp = text["rope_parameters"]
        d = text["head_dim"]
        self.layers = []
        for i, kind in enumerate(text["layer_types"]):
            p = "layers.%d." % i
            if kind == "full_attention":
                att = {"head_dim": d, "heads": text["num_attention_heads"],
                       "kv_heads": text["num_key_value_heads"], "eps": self.eps,
                       "theta": rp["rope_theta"], "rot": int(d * rp["partial_rotary_factor"])}
                for n in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"):
                    att[n] = w[p + "self_attn.%s.weight" % n]
                self.layers.append(("att", att))
            else:
                dn = {"nk": text["linear_num_key_heads"], "nv": text["linear_num_value_heads"],
                      "dk": text["linear_key_head_dim"], "dv": text["linear_value_head_dim"],
                      "eps": self.eps}
                for n in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj",
                          "norm"):
                    dn[n] = w[p + "linear_attn.%s.weight" % n]
                dn["conv"] = w[p + "linear_attn.conv1d.weight"][:, 0, :]
                dn["dt_bias"] = w[p + "linear_attn.dt_bias"]
                dn["A_log"] = w[p + "linear_attn.A_log"]
                self.layers.append(("dn", dn))
        tied = cfg.get("tie_word_embeddings", False)
        self.head = w["embed_tokens.weight"] if tied else raw["lm_head.weight"]

    def logits(self, ids):
        """The logits of every position, the whole sequence at once."""
        x = self.w["embed_tokens.weight"][ids]
        pos = np.arange(len(ids), dtype=np.float64)
        for i, (kind, p) in enumerate(self.layers):
            h = rms(x, 1.0 + self.w["layers.%d.input_layernorm.weight" % i], self.eps)
            if kind == "att":
                cache = {"k": [np.zeros((0, p["head_dim"]))] * p["kv_heads"],
                         "v": [np.zeros((0, p["head_dim"]))] * p["kv_heads"], "pos": np.zeros(0)}
                x = x + naive_attention(p, h, pos, cache)
            else:
                conv_dim = 2 * p["nk"] * p["dk"] + p["nv"] * p["dv"]
                state = {"hist": np.zeros((p["conv"].shape[1] - 1, conv_dim)),
                         "S": np.zeros((p["nv"], p["dk"], p["dv"]))}
                x = x + own_deltanet(p, h, state)
            h = rms(x, 1.0 + self.w["layers.%d.post_attention_layernorm.weight" % i], self.eps)
            pre = "layers.%d.mlp." % i
            y = swish(h @ self.w[pre + "gate_proj.weight"].T) * (h @ self.w[pre + "up_proj.weight"].T)
            x = x + y @ self.w[pre + "down_proj.weight"].T
        return rms(x, 1.0 + self.w["norm.weight"], self.eps) @ self.head.T

    def greedy(self, ids, n):
        seq, out = list(ids), []
        for _ in range(n):
            out.append(int(np.argmax(self.logits(seq)[-1])))
            seq.append(out[-1])
        return out


GEO = ["--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "32",
       "--linear-key-dim", "16", "--vocab", "400"]


def model_checks(tap, work):
    cases = [("released-nv2nk", ["--linear-k-heads", "2", "--linear-v-heads", "4", "--seed", "31"]),
             ("causal-lm-nv=nk", ["--causal-lm", "--linear-k-heads", "2", "--linear-v-heads", "2",
                                  "--untied", "--seed", "32"]),
             ("bf16-5layers", ["--layers", "5", "--full-attention-interval", "2", "--dtype", "bf16",
                               "--linear-k-heads", "1", "--linear-v-heads", "2",
                               "--conv-kernel", "3", "--seed", "33"])]
    for name, args in cases:
        path = os.path.join(work, name)
        gen(path, "--family", "qwen3_5", *(GEO + args))
        own = OwnModel(path)
        err = rel_err(ref_logits(path), own.logits(PROMPT))
        tap.check(err < 1e-10, "model: %s, reference.py's logits = this file's forward "
                  "(rel err %.2g)" % (name, err))
        got, want = ref_greedy(path, N_GREEDY), own.greedy(PROMPT, N_GREEDY)
        tap.check(got == want, "model: %s, reference.py's cached greedy ids = recomputed ones %s"
                  % (name, want))


def layout_checks(tap, work):
    args = ["--family", "qwen3_5"] + GEO + ["--linear-k-heads", "2", "--linear-v-heads", "4",
                                            "--untied", "--seed", "34"]
    a, b = os.path.join(work, "layout-released"), os.path.join(work, "layout-causal")
    gen(a, *args)
    gen(b, "--causal-lm", *args)
    names = set(reference.load_weights(a))
    visual = sum(n.startswith("model.visual.") for n in names)
    mtp = sum(n.startswith("mtp.") for n in names)
    same = np.array_equal(ref_logits(a), ref_logits(b))
    tap.check(same and visual == 2 and mtp == 15, "layouts: released (with %d vision and %d "
              "MTP tensors) and flat give the same logits" % (visual, mtp))


def wiring_checks(tap, work):
    src, dst = os.path.join(work, "all-full"), os.path.join(work, "all-full-as-qwen3")
    gen(src, "--family", "qwen3_5", *(GEO + ["--full-attention-interval", "1",
                                             "--partial-rotary-factor", "1", "--untied",
                                             "--layers", "2", "--seed", "35"]))
    cfg = json.load(open(os.path.join(src, "config.json")))
    text = cfg["text_config"]
    w = {k: v for k, v in reference.load_weights(src).items()}
    d, heads = text["head_dim"], text["num_attention_heads"]
    new_src = {}
    q3 = {}
    for name, t in w.items():
        if name.startswith(("model.visual.", "mtp.")):
            new_src[name] = t
            continue
        flat = name.replace("model.language_model.", "model.")
        if name.endswith("self_attn.q_proj.weight"):
            t = t.reshape(heads, 2, d, -1).copy()
            t[:, 1] = 0.0                                   # the gate rows: sigmoid(0) = 1/2
            new_src[name] = t.reshape(2 * heads * d, -1)
            q3[flat] = t[:, 0].reshape(heads * d, -1)
            continue
        if name.endswith("o_proj.weight"):      # doubled, for the gate's 1/2
            new_src[name] = 2.0 * t
        elif name.endswith("norm.weight"):      # w such that 1 + w is exact in float32
            one_plus = np.float32(1.0) + t.astype(np.float32)
            t = (one_plus - np.float32(1.0)).astype(np.float64)
            new_src[name] = t
            t = one_plus.astype(np.float64)
        else:
            new_src[name] = t
        q3[flat] = t
    safetensors_f32.write(os.path.join(src, "model.safetensors"), new_src)
    os.makedirs(dst, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(src, f)) as i, open(os.path.join(dst, f), "w") as o:
            o.write(i.read())
    qcfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": text["hidden_size"], "intermediate_size": text["intermediate_size"],
            "num_hidden_layers": text["num_hidden_layers"], "num_attention_heads": heads,
            "num_key_value_heads": text["num_key_value_heads"], "head_dim": d,
            "rms_norm_eps": text["rms_norm_eps"], "rope_theta": text["rope_parameters"]["rope_theta"],
            "max_position_embeddings": text["max_position_embeddings"], "vocab_size": text["vocab_size"],
            "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False}
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(qcfg, f, indent=2)
    safetensors_f32.write(os.path.join(dst, "model.safetensors"), q3)
    a, b = ref_logits(src), ref_logits(dst)
    err = rel_err(a, b)
    tap.check(err < 1e-12, "wiring: all-full-attention qwen3_5 with zero gates = its qwen3 "
              "rewrite (rel err %.2g)" % err)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", help="where the generated checkpoints go (default: a temporary "
                   "directory, removed)")
    a = p.parse_args(argv)
    tap = Tap()
    delta_checks(tap)
    conv_checks(tap)
    rope_checks(tap)
    attention_checks(tap)
    deltanet_checks(tap)

    def models(work):
        model_checks(tap, work)
        layout_checks(tap, work)
        wiring_checks(tap, work)
    if a.workdir:
        os.makedirs(a.workdir, exist_ok=True)
        models(a.workdir)
    else:
        with tempfile.TemporaryDirectory() as work:
            models(work)
    print("1..%d" % tap.n)
    if tap.failed:
        print("%d of %d checks failed" % (tap.failed, tap.n))
        return 1
    print("%d checks passed" % tap.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
