#!/usr/bin/python3
"""Check reference.py's Qwen3.5 and Qwen3.5-MoE forwards by computations written apart from it.

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
  moe         reference.qwen35_moe_mlp (Qwen3.5-MoE's sparse block: a loop over tokens and
              their chosen experts, plus the shared expert times the sigmoid of its gate)
              against a dense masked form: every expert on every row from the fused
              gate_up_proj cut in halves, weights p_e for the experts ranked below k (ties to
              the lower index), renormalised; 1 to 7 of 3 to 16 experts, flat to sharp
              routers, the fused and the per-expert tensor layouts, exact ties; and with no
              routed output and a zero gate, half the shared expert computed row by row.
  model       reference.py's logits and greedy ids (its CLI) against a whole forward built
              here from the pieces above, which recomputes the whole sequence at every
              greedy step (so the CLI's cache is checked too): the released layout with
              nv = 2 nk, the flat Qwen3_5ForCausalLM layout with nv = nk, and BF16; the same
              three for qwen3_5_moe (8 experts k 2, 4 experts k 2, 6 experts k 3).
  gguf        hf_to_gguf.py at F32 (--mtp, and --fuse-gate-up-exps once) then gguf_to_hf.py
              gives back every tensor of the text model (and the MTP head) bit for bit, but
              the (1 + w) norms and A_log within float32 rounding; reference.py's logits on
              that within 1e-5 and its greedy ids the same; dense and MoE, both layouts.
  layouts     gen_model.py's two layouts of one seed give reference.py the same logits
              (the vision and MTP tensors in the file ignored), for qwen3_5 and qwen3_5_moe.
  wiring      a qwen3_5 checkpoint of full-attention layers only, partial_rotary_factor 1,
              with zero gate rows (sigmoid 1/2) and o_proj doubled, gives reference.py the
              logits its qwen3 forward gives for the same weights as a qwen3 checkpoint (the
              query rows of q_proj, o_proj not doubled, 1 added to every norm); and a
              qwen3_5_moe checkpoint whose experts are all expert 0 and whose shared-expert
              gate is zero gives the logits of the qwen3_5 checkpoint whose dense MLP is
              expert 0 and the shared expert side by side (width I + S, the shared expert's
              down columns halved).
  router      reference.py --router-margins on a qwen3_5_moe checkpoint logs every layer's
              every routed token and the two summaries.
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


def own_sparse_block(p, h):
    """Qwen3.5-MoE's sparse block of rows h computed densely: every expert on every row (the
    fused gate_up_proj [E, 2 I, hidden] applied whole, then cut in its gate and up halves),
    weighted by p_e where e ranks below k (its rank: the experts with a larger p, or an
    equal p and a lower index) and 0 elsewhere, the weights divided by their row sums; plus
    the shared expert times the sigmoid of its one-row gate."""
    logits = h @ p["router"].T
    prob = np.exp(logits - logits.max(axis=1, keepdims=True))
    prob /= prob.sum(axis=1, keepdims=True)
    n = prob.shape[1]
    lower = np.arange(n)[None, :] < np.arange(n)[:, None]          # [e, j]: j < e
    above = (prob[:, None, :] > prob[:, :, None]) | (
        (prob[:, None, :] == prob[:, :, None]) & lower[None])
    wts = np.where(above.sum(axis=2) < p["k"], prob, 0.0)
    wts /= wts.sum(axis=1, keepdims=True)
    gu = np.einsum("eoh,th->teo", p["gate_up"], h)
    width = gu.shape[2] // 2
    y = np.einsum("ehi,tei->teh", p["down"], swish(gu[..., :width]) * gu[..., width:])
    routed = np.einsum("te,teh->th", wts, y)
    shared = (swish(h @ p["s_gate"].T) * (h @ p["s_up"].T)) @ p["s_down"].T
    gate = sig(h @ p["s_gate_w"][0])
    return routed + gate[:, None] * shared


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


def random_moe_params(rng, hidden, n, k, width, shared, scale):
    def lin(*shape):
        return rng.standard_normal(shape) / math.sqrt(shape[-1])
    return {"router": rng.standard_normal((n, hidden)) * scale / math.sqrt(hidden), "k": k,
            "gate_up": lin(n, 2 * width, hidden), "down": lin(n, hidden, width),
            "s_gate": lin(shared, hidden), "s_up": lin(shared, hidden),
            "s_down": lin(hidden, shared), "s_gate_w": lin(1, hidden)}


def moe_tensors(p, prefix, per_expert=False):
    """The checkpoint tensors of a sparse block's parameters p, named after prefix: the
    released fused layout, or one tensor per expert."""
    w = {prefix + "gate.weight": p["router"],
         prefix + "shared_expert.gate_proj.weight": p["s_gate"],
         prefix + "shared_expert.up_proj.weight": p["s_up"],
         prefix + "shared_expert.down_proj.weight": p["s_down"],
         prefix + "shared_expert_gate.weight": p["s_gate_w"]}
    if not per_expert:
        w[prefix + "experts.gate_up_proj"] = p["gate_up"]
        w[prefix + "experts.down_proj"] = p["down"]
        return w
    width = p["gate_up"].shape[1] // 2
    for e in range(p["router"].shape[0]):
        w[prefix + "experts.%d.gate_proj.weight" % e] = p["gate_up"][e, :width]
        w[prefix + "experts.%d.up_proj.weight" % e] = p["gate_up"][e, width:]
        w[prefix + "experts.%d.down_proj.weight" % e] = p["down"][e]
    return w


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


def moe_checks(tap):
    rng = np.random.default_rng(26)
    hidden, rows = 24, 30
    for n, k, width, shared, scale, per_expert in [
            (8, 2, 10, 12, 2.0, False), (8, 2, 10, 12, 2.0, True), (4, 4, 6, 6, 1.0, False),
            (16, 1, 8, 20, 6.0, False), (3, 2, 5, 7, 0.1, True), (8, 7, 4, 4, 3.0, False)]:
        p = random_moe_params(rng, hidden, n, k, width, shared, scale)
        m = object.__new__(reference.Qwen35)
        w = moe_tensors(p, "model.layers.0.mlp.", per_expert)
        text = {"num_experts": n, "num_experts_per_tok": k}
        m.experts = [reference.qwen35_experts(w, "model.layers.0.mlp.", text)]
        m.shared = [reference.SharedExpert(w, "model.layers.0.mlp.")]
        h = rng.standard_normal((rows, hidden))
        got = reference.qwen35_moe_mlp(m, 0, h, np.arange(rows))
        want = own_sparse_block(p, h)
        err = rel_err(got, want)
        tap.check(err < 1e-12, "moe: sparse block (routed experts + gated shared expert) = "
                  "dense masked form (%d experts, k %d, router scale %g, %s; rel err %.2g)"
                  % (n, k, scale, "per-expert tensors" if per_expert else "fused", err))
    # exact ties: repeated router rows; the lower index first on both sides
    p = random_moe_params(rng, hidden, 6, 2, 5, 5, 1.0)
    p["router"] = p["router"][[0, 1, 0, 2, 1, 0]]
    m = object.__new__(reference.Qwen35)
    w = moe_tensors(p, "p.")
    m.experts = [reference.qwen35_experts(w, "p.", {"num_experts": 6, "num_experts_per_tok": 2})]
    m.shared = [reference.SharedExpert(w, "p.")]
    h = rng.standard_normal((rows, hidden))
    err = rel_err(reference.qwen35_moe_mlp(m, 0, h, np.arange(rows)), own_sparse_block(p, h))
    tap.check(err < 1e-12, "moe: exact routing ties choose the lower expert index (rel err %.2g)"
              % err)
    # the shared expert alone: with its gate at zero it enters at half weight
    p = random_moe_params(rng, hidden, 4, 2, 6, 9, 1.0)
    p["s_gate_w"] = np.zeros((1, hidden))
    only_shared = dict(p, down=np.zeros_like(p["down"]))
    w = moe_tensors(only_shared, "p.")
    m.experts = [reference.qwen35_experts(w, "p.", {"num_experts": 4, "num_experts_per_tok": 2})]
    m.shared = [reference.SharedExpert(w, "p.")]
    h = rng.standard_normal((rows, hidden))
    want = 0.5 * np.stack([p["s_down"] @ (swish(p["s_gate"] @ r) * (p["s_up"] @ r)) for r in h])
    err = rel_err(reference.qwen35_moe_mlp(m, 0, h, np.arange(rows)), want)
    tap.check(err < 1e-13, "moe: zero routed experts and a zero shared gate leave half the "
              "shared expert, row by row (rel err %.2g)" % err)


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
        self.moe = None
        if text["model_type"] == "qwen3_5_moe_text":
            self.moe = []
            for i in range(len(self.layers)):
                pre = "layers.%d.mlp." % i
                self.moe.append({
                    "router": w[pre + "gate.weight"], "k": text["num_experts_per_tok"],
                    "gate_up": w[pre + "experts.gate_up_proj"],
                    "down": w[pre + "experts.down_proj"],
                    "s_gate": w[pre + "shared_expert.gate_proj.weight"],
                    "s_up": w[pre + "shared_expert.up_proj.weight"],
                    "s_down": w[pre + "shared_expert.down_proj.weight"],
                    "s_gate_w": w[pre + "shared_expert_gate.weight"]})

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
            if self.moe is not None:
                x = x + own_sparse_block(self.moe[i], h)
                continue
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


MOE = ["--experts", "8", "--experts-used", "2", "--moe-intermediate", "32",
       "--shared-intermediate", "48"]


def model_checks(tap, work):
    cases = [("released-nv2nk", ["--linear-k-heads", "2", "--linear-v-heads", "4", "--seed", "31"]),
             ("causal-lm-nv=nk", ["--causal-lm", "--linear-k-heads", "2", "--linear-v-heads", "2",
                                  "--untied", "--seed", "32"]),
             ("bf16-5layers", ["--layers", "5", "--full-attention-interval", "2", "--dtype", "bf16",
                               "--linear-k-heads", "1", "--linear-v-heads", "2",
                               "--conv-kernel", "3", "--seed", "33"]),
             ("moe-released-nv2nk", ["--family", "qwen3_5_moe", "--linear-k-heads", "2",
                                     "--linear-v-heads", "4", "--seed", "41"] + MOE),
             ("moe-causal-lm-nv=nk", ["--family", "qwen3_5_moe", "--causal-lm", "--linear-k-heads",
                                      "2", "--linear-v-heads", "2", "--experts", "4",
                                      "--experts-used", "2", "--moe-intermediate", "24",
                                      "--shared-intermediate", "40", "--seed", "42"]),
             ("moe-bf16-5layers-k3", ["--family", "qwen3_5_moe", "--layers", "5",
                                      "--full-attention-interval", "2", "--dtype", "bf16",
                                      "--linear-k-heads", "1", "--linear-v-heads", "2",
                                      "--experts", "6", "--experts-used", "3", "--seed", "43"])]
    for name, args in cases:
        path = os.path.join(work, name)
        family = [] if "--family" in args else ["--family", "qwen3_5"]
        gen(path, *(family + GEO + args))
        own = OwnModel(path)
        err = rel_err(ref_logits(path), own.logits(PROMPT))
        tap.check(err < 1e-10, "model: %s, reference.py's logits = this file's forward "
                  "(rel err %.2g)" % (name, err))
        got, want = ref_greedy(path, N_GREEDY), own.greedy(PROMPT, N_GREEDY)
        tap.check(got == want, "model: %s, reference.py's cached greedy ids = recomputed ones %s"
                  % (name, want))


def layout_checks(tap, work):
    for family, extra, n_mtp in (("qwen3_5", ["--untied", "--seed", "34"], 15),
                                 ("qwen3_5_moe", ["--seed", "44"] + MOE, 19)):
        args = ["--family", family] + GEO + ["--linear-k-heads", "2", "--linear-v-heads", "4"]
        a = os.path.join(work, "layout-released-" + family)
        b = os.path.join(work, "layout-causal-" + family)
        gen(a, *(args + extra))
        gen(b, "--causal-lm", *(args + extra))
        names = set(reference.load_weights(a))
        visual = sum(n.startswith("model.visual.") for n in names)
        mtp = sum(n.startswith("mtp.") for n in names)
        same = np.array_equal(ref_logits(a), ref_logits(b))
        tap.check(same and visual == 2 and mtp == n_mtp, "layouts: %s released (with %d vision "
                  "and %d MTP tensors) and flat give the same logits" % (family, visual, mtp))


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


def moe_wiring_checks(tap, work):
    """A qwen3_5_moe checkpoint whose experts are all copies of expert 0 and whose shared
    expert gate is zero (sigmoid 1/2) is, layer by layer, the dense MLP of width I + S whose
    gate and up rows are expert 0's then the shared expert's and whose down columns are
    expert 0's then half the shared expert's: reference.py must give it the logits of that
    qwen3_5 (dense) checkpoint."""
    src, dst = os.path.join(work, "moe-equal-experts"), os.path.join(work, "moe-as-dense")
    gen(src, "--family", "qwen3_5_moe", "--causal-lm", *(GEO + MOE + [
        "--linear-k-heads", "2", "--linear-v-heads", "4", "--seed", "45"]))
    cfg = json.load(open(os.path.join(src, "config.json")))
    w = reference.load_weights(src)
    moe_w, dense_w = {}, {}
    for name, t in w.items():
        moe_w[name] = t
        if ".mlp." not in name:
            dense_w[name] = t
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d.mlp." % i
        gate_up, down = w[p + "experts.gate_up_proj"], w[p + "experts.down_proj"]
        moe_w[p + "experts.gate_up_proj"] = np.repeat(gate_up[:1], gate_up.shape[0], axis=0)
        moe_w[p + "experts.down_proj"] = np.repeat(down[:1], down.shape[0], axis=0)
        moe_w[p + "shared_expert_gate.weight"] = np.zeros_like(w[p + "shared_expert_gate.weight"])
        width = gate_up.shape[1] // 2
        sh = p + "shared_expert."
        dense_w[p + "gate_proj.weight"] = np.concatenate([gate_up[0, :width],
                                                          w[sh + "gate_proj.weight"]])
        dense_w[p + "up_proj.weight"] = np.concatenate([gate_up[0, width:],
                                                        w[sh + "up_proj.weight"]])
        dense_w[p + "down_proj.weight"] = np.concatenate(
            [down[0], 0.5 * w[sh + "down_proj.weight"]], axis=1)
    safetensors_f32.write(os.path.join(src, "model.safetensors"), moe_w)
    os.makedirs(dst, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(src, f)) as i, open(os.path.join(dst, f), "w") as o:
            o.write(i.read())
    dcfg = {k: v for k, v in cfg.items() if k not in (
        "moe_intermediate_size", "num_experts", "num_experts_per_tok", "output_router_logits",
        "router_aux_loss_coef", "shared_expert_intermediate_size")}
    dcfg.update({"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
                 "intermediate_size": cfg["moe_intermediate_size"] +
                 cfg["shared_expert_intermediate_size"]})
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(dcfg, f, indent=2)
    safetensors_f32.write(os.path.join(dst, "model.safetensors"), dense_w)
    err = rel_err(ref_logits(src), ref_logits(dst))
    tap.check(err < 1e-12, "wiring: qwen3_5_moe with equal experts and a zero shared-expert "
              "gate = its dense qwen3_5 rewrite (rel err %.2g)" % err)


def gguf_roundtrip_checks(tap, work):
    """hf_to_gguf.py at F32 (with and without --mtp), then gguf_to_hf.py, gives back the
    checkpoint's text model (and MTP head): every tensor bit for bit but the (1 + w) norms,
    stored with the 1 added (back within float32's rounding of 1 + w), and A_log, stored as
    -exp(A_log) (back within float32's relative rounding); and reference.py's logits and
    greedy ids on what came back match the checkpoint's.  Also with the experts' gate and up
    written as one ffn_gate_up_exps."""
    for name, flags in (("released-nv2nk", ["--mtp"]), ("causal-lm-nv=nk", []),
                        ("moe-released-nv2nk", ["--mtp"]), ("moe-causal-lm-nv=nk", []),
                        ("moe-bf16-5layers-k3", ["--mtp", "--fuse-gate-up-exps"])):
        src = os.path.join(work, name)
        mtp = "--mtp" in flags
        gguf, back = src + ".gguf", src + "-back"
        run(os.path.join(HERE, "hf_to_gguf.py"), src, gguf, "--type", "f32", *flags)
        run(os.path.join(HERE, "gguf_to_hf.py"), gguf, back)
        cfg = json.load(open(os.path.join(src, "config.json")))
        tied = cfg.get("tie_word_embeddings", False)
        want = {}
        for n, t in reference.load_weights(src).items():
            if n.startswith("model.visual.") or (n.startswith("mtp.") and not mtp) or (
                    tied and n == "lm_head.weight"):
                continue
            want[n.replace("model.language_model.", "model.", 1)] = t
        got = reference.load_weights(back)
        bad, worst_norm, worst_a = [], 0.0, 0.0
        for n in sorted(set(want) | set(got)):
            if n not in want or n not in got or want[n].shape != got[n].shape:
                bad.append(n)
                continue
            diff = np.abs(got[n] - want[n]).max()
            if n.endswith(("layernorm.weight", "q_norm.weight", "k_norm.weight", "mtp.norm.weight",
                           "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight")) or \
                    n == "model.norm.weight":
                worst_norm = max(worst_norm, diff)
                ok = diff <= 2.0 ** -23
            elif n.endswith("A_log"):
                rel = float((np.abs(got[n] - want[n]) / np.abs(want[n])).max())
                worst_a = max(worst_a, rel)
                ok = rel < 1e-6
            else:
                ok = diff == 0
            if not ok:
                bad.append(n)
        tap.check(not bad and len(got) == len(want),
                  "gguf: %s%s through hf_to_gguf.py and gguf_to_hf.py at F32: %d tensors back, "
                  "exact but the norms (within %.2g) and A_log (within %.2g relative)%s"
                  % (name, "".join(" " + f for f in flags), len(got), worst_norm, worst_a,
                     "; wrong: " + ", ".join(bad[:4]) if bad else ""))
        err = rel_err(ref_logits(back), ref_logits(src))
        same = ref_greedy(back, N_GREEDY) == ref_greedy(src, N_GREEDY)
        tap.check(err < 1e-5 and same, "gguf: %s, reference.py's logits on what came back "
                  "(rel err %.2g) and its greedy ids (%s)" % (name, err,
                                                             "the same" if same else "differ"))


def router_margin_checks(tap, work):
    """reference.py --router-margins on a qwen3_5_moe checkpoint: a line per layer and
    position, and the two summaries."""
    path = os.path.join(work, "moe-released-nv2nk")
    res = subprocess.run([sys.executable, os.path.join(HERE, "reference.py"), path, "--greedy",
                          "4", "--router-margins", "--prompt-ids", " ".join(map(str, PROMPT))],
                         check=True, capture_output=True, text=True)
    lines = res.stderr.splitlines()
    per_pos = [ln for ln in lines if ln.startswith("router layer ")]
    summaries = [ln for ln in lines if ln.startswith("router min ")]
    layers = json.load(open(os.path.join(path, "config.json")))["text_config"]["num_hidden_layers"]
    want = layers * (len(PROMPT) + 3)
    tap.check(len(per_pos) == want and len(summaries) == 2,
              "router margins: qwen3_5_moe logs %d routed tokens (want %d) and %s"
              % (len(per_pos), want, "; ".join(summaries)))


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
    moe_checks(tap)

    def models(work):
        model_checks(tap, work)
        gguf_roundtrip_checks(tap, work)
        layout_checks(tap, work)
        wiring_checks(tap, work)
        moe_wiring_checks(tap, work)
        router_margin_checks(tap, work)
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
