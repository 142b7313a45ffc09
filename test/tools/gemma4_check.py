#!/usr/bin/python3
"""Check reference.py's Gemma 4 pieces against computations written apart from them.

    gemma4_check.py

Generates small gemma4 checkpoints (gen_model.py) in a temporary folder and checks:
  - proportional RoPE: rope_half against a loop that turns each pair (j, j + d/2) by its own
    angle, and the pairs past int(factor * d // 2) left as they are;
  - attention: gemma4_attention's output for a fresh layer against a per-query, per-head loop
    (scale 1, window, GQA, v RMSNormed without weight);
  - KV sharing: a shared layer's attention equals recomputing it with the source layer's own
    k_proj / k_norm / v_proj on that layer's inputs (HF: the source layer's keys and values);
  - the KV cache: the prompt's logits in one pass equal those of one token at a time;
  - the two layouts (Gemma4ForConditionalGeneration and Gemma4ForCausalLM, one seed) give the
    same logits; soft-capping: c tanh(raw / c) of the logits without it;
  - PLE composition written out per layer against gemma4_per_layer_inputs.
Prints a TAP line per check and "N checks passed", or exits 1 at the first failure.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model  # noqa: E402
import reference as ref  # noqa: E402

PASSED = [0]


def check(what, ok):
    """One TAP line; the first failure ends the run (exit status 1)."""
    PASSED[0] += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", PASSED[0], what))
    if not ok:
        print("1..%d" % PASSED[0])
        sys.exit(1)


def close(a, b, tol=1e-10):
    return np.allclose(a, b, rtol=tol, atol=tol)


GEOM = ["--family", "gemma4", "--hidden", "64", "--layers", "8", "--heads", "4", "--kv-heads", "2",
        "--head-dim", "16", "--global-head-dim", "32", "--sliding-window", "4",
        "--sliding-window-pattern", "3", "--kv-shared-layers", "2", "--ple-dim", "8",
        "--double-wide-mlp", "--intermediate", "96", "--vocab", "400", "--softcap", "10",
        "--seed", "41"]
IDS = [1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128]


def rope_loop(x, pos, inv):
    out = x.copy()
    half = x.shape[-1] // 2
    for t, p in enumerate(pos):
        for j in range(half):
            c, s = np.cos(p * inv[j]), np.sin(p * inv[j])
            a, b = x[..., t, j], x[..., t, j + half]
            out[..., t, j], out[..., t, j + half] = a * c - b * s, b * c + a * s
    return out


def attn_loop(m, i, h, pos, src):
    """Layer i's attention output on rows h, keys and values from layer src's weights."""
    d, nh, nkv = m.dims[i], m.n_heads, m.kv_heads[src]
    out = np.zeros((len(pos), nh * d))
    def norm(v, w):
        return v / np.sqrt(np.mean(v * v) + m.eps) * w
    for t in range(len(pos)):
        for hh in range(nh):
            g = hh // (nh // nkv)
            q = (h[t] @ m.layer(i, "self_attn.q_proj.weight").T)[hh * d:(hh + 1) * d]
            q = rope_loop(norm(q, m.layer(i, "self_attn.q_norm.weight"))[None, None],
                          pos[t:t + 1], m.ropes[i])[0, 0]
            scores, vals = [], []
            for s in range(len(pos)):
                if pos[s] > pos[t] or (m.types[i] == "sliding_attention" and
                                       pos[s] <= pos[t] - m.window):
                    continue
                k = (h[s] @ m.layer(src, "self_attn.k_proj.weight").T)[g * d:(g + 1) * d]
                vname = "self_attn.k_proj.weight" if m.v_is_k[src] else "self_attn.v_proj.weight"
                v = (h[s] @ m.layer(src, vname).T)[g * d:(g + 1) * d]
                k = rope_loop(norm(k, m.layer(src, "self_attn.k_norm.weight"))[None, None],
                              pos[s:s + 1], m.ropes[src])[0, 0]
                scores.append(q @ k)
                vals.append(norm(v, 1.0))
            p = np.exp(np.array(scores) - max(scores))
            out[t, hh * d:(hh + 1) * d] = (p / p.sum()) @ np.array(vals)
    return out @ m.layer(i, "self_attn.o_proj.weight").T


def main():
    work = tempfile.mkdtemp()
    a, b, c = (os.path.join(work, n) for n in ("rel", "flat", "nocap"))
    gen_model.main([a] + GEOM)
    gen_model.main([b] + GEOM + ["--causal-lm"])
    gen_model.main([c] + GEOM[:-4] + ["--softcap", "0", "--seed", "41"])
    m = ref.load_model(a)
    rng = np.random.default_rng(0)
    pos = np.arange(6, dtype=np.float64) + 3
    for i in (0, 2):  # a sliding and a full layer's RoPE
        x = rng.standard_normal((2, 6, m.dims[i]))
        y = ref.rope_half(x, pos, m.ropes[i])
        check("rope layer %d" % i, close(y, rope_loop(x, pos, m.ropes[i])))
        if m.types[i] == "full_attention":
            n_rot = int(0.25 * m.dims[i] // 2)
            half = m.dims[i] // 2
            check("unrotated pairs", close(y[..., n_rot:half], x[..., n_rot:half]) and
                  close(y[..., half + n_rot:], x[..., half + n_rot:]))
    h = rng.standard_normal((7, 64))
    p7 = np.arange(7, dtype=np.float64)
    for i in range(m.n_layers):
        cache = m.empty_cache()
        if m.kv_source[i] != i:  # fill the source layer's cache with the same rows
            ref.gemma4_attention(m, m.kv_source[i], h, p7, cache)
        got = ref.gemma4_attention(m, i, h, p7, cache)
        check("attention layer %d (source %d)" % (i, m.kv_source[i]),
              close(got, attn_loop(m, i, h, p7, m.kv_source[i])))
    check("shared layers read 4 and 5", m.kv_source[6:] == [4, 5])
    full = ref.gemma4_forward(m, IDS, m.empty_cache())
    cache = m.empty_cache()
    step = np.concatenate([ref.gemma4_forward(m, [t], cache) for t in IDS])
    check("cache one token at a time", close(full, step, 1e-9))
    check("layouts", close(full, ref.gemma4_forward(ref.load_model(b), IDS,
                                                    ref.load_model(b).empty_cache())))
    mc = ref.load_model(c)
    raw = ref.gemma4_forward(mc, IDS, mc.empty_cache())
    check("soft-capping", close(full, 10.0 * np.tanh(raw / 10.0)))
    check("soft-capping bends", np.abs(full - raw).max() > 1e-2)
    x = m.w["model.embed_tokens.weight"][IDS] * np.sqrt(64)
    ple = ref.gemma4_per_layer_inputs(m, IDS, x)
    for i in range(m.n_layers):
        tok = m.w["model.embed_tokens_per_layer.weight"][IDS][:, i * 8:(i + 1) * 8] * np.sqrt(8)
        prj = x @ m.w["model.per_layer_model_projection.weight"][i * 8:(i + 1) * 8].T / 8.0
        prj = prj / np.sqrt(np.mean(prj ** 2, axis=1, keepdims=True) + 1e-6) * \
            m.w["model.per_layer_projection_norm.weight"]
        check("PLE layer %d" % i, close(ple[:, i], (prj + tok) / np.sqrt(2)))
    print("1..%d" % PASSED[0])
    print("%d checks passed" % PASSED[0])


if __name__ == "__main__":
    main()
