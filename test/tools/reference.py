#!/usr/bin/python3
"""Independent float64 numpy forward of a HuggingFace Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, gpt-oss, Gemma-3 or Phi-3 checkpoint.

    reference.py MODEL_DIR --prompt-ids "1 5 9" [--logits] [--greedy N] [--router-margins]

The correctness oracle for cbllm: it shares no code with the C engine.  It reads
config.json and the safetensors weights (single file or sharded with an index), decodes
F32/F16/BF16 exactly into float64 and runs the HF Llama forward:

    x = embed[ids]
    per layer:  h = rmsnorm(x) * w_in;  q, k, v = h Wq^T, h Wk^T, h Wv^T
                (+ the q, k, v biases when config.json has attention_bias)
                RoPE (HF rotate_half) of the layer's RoPE configuration, causal
                softmax(q k^T / sqrt(head_dim)) v with GQA (query head j reads kv head
                j // (heads / kv_heads)) and, in a layer with a window W, only keys at
                positions > p - W (rope_ref.py: the RoPE variants and which layers
                have windows);
                x += attn Wo^T (+ the o bias);  h = rmsnorm(x) * w_post;  x += (silu(h Wg^T) * h Wu^T) Wd^T
    logits = rmsnorm(x) * w_norm @ lm_head^T   (embed^T when the embeddings are tied)

The families' differences, from their HF definitions (config.json's model_type):
    qwen2        q, k and v biases (no o bias), whatever attention_bias says
    qwen3        explicit head_dim; q and k RMSNormed per head (q_norm, k_norm) before RoPE
    gemma3_text  as qwen3, and: every RMSNorm scales by (1 + w); x = embed * sqrt(hidden)
                 (the scale rounded to bf16 for bf16 embeddings, as HF casts it to the
                 weights' type); attention output normed (post_attention_layernorm) before
                 its residual add, the MLP's input by pre_feedforward_layernorm and its
                 output by post_feedforward_layernorm before its add; GELU-tanh; softmax
                 scale query_pre_attn_scalar^-0.5; tied embeddings unless config.json says
                 otherwise.  Soft-capping must be null.
    qwen3_moe    as qwen3, and layer i's MLP a mixture of experts (below) when i is not in
                 mlp_only_layers and (i + 1) % decoder_sparse_step == 0 (HF's
                 Qwen3MoeDecoderLayer), the dense MLP otherwise; the chosen experts'
                 weights renormalised when norm_topk_prob (HF's default: false)
    mixtral      Llama's attention, every layer's MLP a mixture of experts, its weights
                 always renormalised (w1 the gate, w3 the up, w2 the down projection)
    gpt_oss      (HF's GptOssForCausalLM) explicit head_dim; q, k, v and o biases; per-layer
                 windows from layer_types; YaRN (below); attention SINKS: each query head h
                 has a learnt logit s_h (self_attn.sinks) that joins its softmax's
                 denominator: the masked scores q k^T / sqrt(head_dim) of a row and s_h are
                 softmaxed together and s_h's column dropped, so the row's weights sum to
                 less than 1; every layer's MLP gpt-oss's mixture of experts (below)

A mixture-of-experts MLP (HF's Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock), per token h:
    p = softmax(h router^T) over all experts; the k (num_experts_per_tok) largest p chosen,
    the lower expert index first among equal ones; w = their p (divided by their sum when
    renormalised);  out = sum over chosen e of w_e * (silu(h Wg_e^T) * h Wu_e^T) Wd_e^T

gpt-oss's (HF's GptOssTopKRouter and GptOssExperts), per token h, with the experts' matrices
stored [in, out] (gate_up_proj [n, hidden, 2 I], down_proj [n, I, hidden]; the released
checkpoint's MXFP4 _blocks and _scales are dequantized to that first, mxfp4_dequant):
    l = h router^T + router_bias; the k largest l chosen (the lower index first among equal
    ones); w = softmax over those k logits alone;
    gu = h gate_up_proj[e] + gate_up_proj_bias[e];  gate = gu[0::2], up = gu[1::2]
    (interleaved);  gate = min(gate, L);  up = clamp(up, -L, L)  (L = swiglu_limit, 7);
    y = (up + 1) * gate * sigmoid(1.702 gate);  out = sum over chosen e of
    w_e * (y down_proj[e] + down_proj_bias[e])

YaRN's correction range [low, high] (the dimensions between interpolated and original
frequencies) is floored and ceiled to whole dimensions, as transformers does unless
rope_scaling's truncate is false; gpt-oss's is, and then the fractional bounds are used
(yarn_rope here; rope_ref.py has the truncated form).  The attention factor multiplies cos
and sin, so scores grow by its square.

--logits prints one line per prompt position: vocab_size numbers in "%.17g".
--greedy N appends N argmax tokens (never stopping at EOS) and prints the generated ids
on one line.  Greedy decoding keeps a KV cache; each step runs only the new token.
--router-margins (a model with experts) writes to stderr, for every sparse layer and every
position the run computed, "router layer L pos P margin M logit-gap G experts E1 E2 ...":
M is the k-th largest routing probability minus the (k+1)-th, G the difference of their
router logits (log of their ratio), the experts the chosen ones in order; then the
summaries "router min margin M layer L pos P" and "router min logit-gap G layer L pos P".
gpt-oss chooses by logit and softmaxes only the chosen: its M is taken on the softmax over
all experts, and G is what decides.
A margin under about 1e-3 means a float32 engine could rightly choose other experts there;
G is the stricter measure (float32 router logits err by about 1e-6 of their size, and
two small probabilities can be close in M yet far apart in G).  With k equal to the
number of experts there is no (k+1)-th: M and G are inf.

Longrope (Phi-3 128k) chooses its factor set per sequence as transformers does: a forward
over a sequence longer than original_max_position_embeddings rotates every position with
long_factor, else with short_factor (rope_ref.py); the prompt's logits take the set of the
prompt's length.  When greedy decoding makes the sequence longer than that, the cache
(computed with the short set) is dropped and the whole sequence, generated tokens
included, is computed again with the long set, as Phi-3's prepare_inputs_for_generation
does at that length.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

import rope_ref


# --------------------------------------------------------------------------- loading

DTYPES = {}  # tensor name -> its file dtype ("F32", "BF16", ...)


def read_safetensors(path):
    """All tensors of one safetensors file as float64 arrays, keyed by name (dtypes in DTYPES)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    n = int(raw[:8].view("<u8")[0])
    header = json.loads(bytes(raw[8:8 + n]).decode("utf-8"))
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        DTYPES[name] = info["dtype"]
        out[name] = decode(raw[base + begin:base + end], info["dtype"]).reshape(info["shape"])
    return out


def decode(buf, dtype):
    """Little-endian bytes of one tensor -> float64, exactly."""
    if dtype == "F32":
        return buf.view("<f4").astype(np.float64)
    if dtype == "F16":
        return buf.view("<f2").astype(np.float64)
    if dtype == "BF16":  # bf16 is the upper half of a float32
        return (buf.view("<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
    if dtype == "U8":  # an MXFP4 tensor's blocks or scales (mxfp4_dequant)
        return np.asarray(buf, dtype=np.uint8).astype(np.float64)
    raise SystemExit("reference.py: unsupported dtype %s" % dtype)


def load_weights(model_dir):
    """Tensors from model.safetensors, or from every shard named in the index."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        return read_safetensors(os.path.join(model_dir, "model.safetensors"))
    with open(index) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    weights = {}
    for fname in files:
        weights.update(read_safetensors(os.path.join(model_dir, fname)))
    return weights


class Model:
    """Config values and weights the forward needs."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv_heads = cfg.get("num_key_value_heads") or self.n_heads
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        # per layer: (RoPE index into self.ropes, window or None), from rope_ref.py
        self.ropes, self.positions = rope_ref.layer_positions(cfg, self.head_dim)
        rs = cfg.get("rope_scaling") or {}
        if rs and rope_ref.scaling_type(rs) == "yarn" and rs.get("truncate", True) is False:
            self.ropes[0] = yarn_rope(cfg, self.head_dim)
        family = cfg.get("model_type", "llama")
        gemma = family == "gemma3_text"
        for cap in ("final_logit_softcapping", "attn_logit_softcapping"):
            if cfg.get(cap) is not None:
                raise SystemExit("reference.py: %s is not supported" % cap)
        # the projections with biases
        self.biases = {"q_proj", "k_proj", "v_proj"} if family == "qwen2" else (
            {"q_proj", "k_proj", "v_proj", "o_proj"} if cfg.get("attention_bias") else set())
        self.qk_norm = family in ("qwen3", "qwen3_moe", "gemma3_text")
        self.norm_offset = 1.0 if gemma else 0.0   # Gemma's RMSNorm scales by (1 + w)
        self.sandwich = gemma                      # norms on the attention and MLP outputs
        self.act = cfg.get("hidden_activation") or cfg.get("hidden_act", "silu")
        self.scale = cfg.get("query_pre_attn_scalar", self.head_dim) ** -0.5
        self.w = load_weights(model_dir)
        self.split_fused(cfg)
        self.experts = moe_layers(cfg, self.w)
        self.sinks = [self.w["model.layers.%d.self_attn.sinks" % i] if family == "gpt_oss"
                      else None for i in range(self.n_layers)]
        self.embed_scale = 1.0
        if gemma:
            self.embed_scale = np.sqrt(cfg["hidden_size"])
            if DTYPES["model.embed_tokens.weight"] == "BF16":
                self.embed_scale = round_bf16(self.embed_scale)
        tied = cfg.get("tie_word_embeddings", gemma)
        self.lm_head = self.w["model.embed_tokens.weight" if tied else "lm_head.weight"]

    def split_fused(self, cfg):
        """Phi-3's fused projections as the separate ones: qkv_proj's output is q, then k,
        then v (Phi3Attention slices it so), and gate_up_proj's is gate, then up (Phi3MLP
        chunks it in two)."""
        q_rows, kv_rows = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        for i in range(self.n_layers):
            p = "model.layers.%d." % i
            qkv = self.w.pop(p + "self_attn.qkv_proj.weight", None)
            if qkv is not None:
                self.w[p + "self_attn.q_proj.weight"] = qkv[:q_rows]
                self.w[p + "self_attn.k_proj.weight"] = qkv[q_rows:q_rows + kv_rows]
                self.w[p + "self_attn.v_proj.weight"] = qkv[q_rows + kv_rows:]
            gate_up = self.w.pop(p + "mlp.gate_up_proj.weight", None)
            if gate_up is not None:
                half = gate_up.shape[0] // 2
                self.w[p + "mlp.gate_proj.weight"] = gate_up[:half]
                self.w[p + "mlp.up_proj.weight"] = gate_up[half:]

    def layer(self, i, name):
        """Weight `name` of layer i, e.g. layer(0, 'self_attn.q_proj')."""
        return self.w["model.layers.%d.%s.weight" % (i, name)]

    def linear(self, i, name, x):
        """x @ W^T of projection `name` of layer i, plus its bias when the model has one."""
        y = x @ self.layer(i, name).T
        if name.startswith("self_attn.") and name[len("self_attn."):] in self.biases:
            y = y + self.w["model.layers.%d.%s.bias" % (i, name)]
        return y

    def norm(self, x, name):
        """RMSNorm of x by weight `name` (1 + w for Gemma)."""
        return rmsnorm(x, self.w[name] + self.norm_offset, self.eps)

    def layer_norm(self, i, name, x):
        """RMSNorm of x by layer i's norm `name`, e.g. layer_norm(0, 'input_layernorm', x)."""
        return self.norm(x, "model.layers.%d.%s.weight" % (i, name))


class Experts:
    """One sparse layer's router [n, hidden] and its n experts' gate, up and down matrices."""

    def __init__(self, router, gate, up, down, k, renorm):
        self.router, self.gate, self.up, self.down = router, gate, up, down
        self.k, self.renorm = k, renorm


class GptOssExperts:
    """One gpt-oss layer's router [n, hidden] and bias [n], and its n experts stacked as
    stored: gate_up [n, hidden, 2 I] (gate and up interleaved), gate_up_bias [n, 2 I],
    down [n, I, hidden], down_bias [n, hidden]; k chosen per token; the SwiGLU's limit and
    sigmoid gain."""

    def __init__(self, router, router_bias, gate_up, gate_up_bias, down, down_bias, k,
                 limit=7.0, alpha=1.702):
        self.router, self.router_bias = router, router_bias
        self.gate_up, self.gate_up_bias = gate_up, gate_up_bias
        self.down, self.down_bias = down, down_bias
        self.k, self.limit, self.alpha = k, limit, alpha


def moe_layers(cfg, w):
    """Per layer: its Experts, or None for a dense MLP (config.json's model_type decides)."""
    family = cfg.get("model_type")
    n_layers = cfg["num_hidden_layers"]
    if family == "gpt_oss":
        return gpt_oss_layers(cfg, w)
    if family == "mixtral":
        n, block, renorm = cfg["num_local_experts"], "block_sparse_moe", True
        names = ("w1", "w3", "w2")  # gate, up, down
        sparse = [True] * n_layers
    elif family == "qwen3_moe":
        # transformers 5 may write the count under Mixtral's name (its attribute_map)
        n = cfg.get("num_experts", cfg.get("num_local_experts"))
        block, renorm = "mlp", bool(cfg.get("norm_topk_prob", False))
        names = ("gate_proj", "up_proj", "down_proj")
        step, dense = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers") or []
        sparse = [i not in dense and n > 0 and (i + 1) % step == 0 for i in range(n_layers)]
    else:
        return [None] * n_layers
    out = []
    for i in range(n_layers):
        if not sparse[i]:
            out.append(None)
            continue
        p = "model.layers.%d.%s." % (i, block)
        mats = [[w["%sexperts.%d.%s.weight" % (p, e, m)] for e in range(n)] for m in names]
        out.append(Experts(w[p + "gate.weight"], *mats, cfg["num_experts_per_tok"], renorm))
    return out


def gpt_oss_layers(cfg, w):
    """Every gpt-oss layer's GptOssExperts.  config.json names k twice (num_experts_per_tok,
    and experts_per_token from OpenAI's own format): they must agree."""
    k = cfg.get("num_experts_per_tok", cfg.get("experts_per_token"))
    if cfg.get("experts_per_token", k) != k:
        raise SystemExit("reference.py: num_experts_per_tok %s and experts_per_token %s differ"
                         % (k, cfg["experts_per_token"]))
    limit, alpha = cfg.get("swiglu_limit", 7.0), cfg.get("swiglu_alpha", 1.702)
    out = []
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d.mlp." % i
        for name in ("gate_up_proj", "down_proj"):
            if p + "experts." + name not in w:  # the released checkpoint's MXFP4 experts
                w[p + "experts." + name] = mxfp4_dequant(w.pop(p + "experts." + name + "_blocks"),
                                                         w.pop(p + "experts." + name + "_scales"))
        out.append(GptOssExperts(
            w[p + "router.weight"], w[p + "router.bias"], w[p + "experts.gate_up_proj"],
            w[p + "experts.gate_up_proj_bias"], w[p + "experts.down_proj"],
            w[p + "experts.down_proj_bias"], k, limit, alpha))
    return out


FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                       -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_dequant(blocks, scales):
    """gpt-oss's MXFP4 experts as transformers' convert_moe_packed_tensors reads them: blocks
    (E, out, G, 16) bytes whose low nibble is element 2i and high nibble element 2i + 1 of a
    group of 32, each an E2M1 value, times 2^(scales - 127) (scales (E, out, G)); returned
    [in, out] as the BF16 checkpoint stores the same matrices (E, G * 32, out)."""
    b = blocks.astype(np.int64)
    vals = np.empty(b.shape[:-1] + (32,))
    vals[..., 0::2] = FP4_VALUES[b & 15]
    vals[..., 1::2] = FP4_VALUES[b >> 4]
    vals = vals * np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    e, rows, g = scales.shape
    return vals.reshape(e, rows, g * 32).transpose(0, 2, 1)


def yarn_rope(cfg, d):
    """YaRN as transformers' _compute_yarn_parameters computes it, truncate included: the
    correction range's bounds are floored and ceiled only when rope_scaling's truncate is
    true (its default).  A rope_ref.Rope."""
    rs = cfg["rope_scaling"]
    theta = cfg.get("rope_theta", 10000.0)
    orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
    factor = rs.get("factor") or cfg["max_position_embeddings"] / orig
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def dim_of(rotations):  # the dimension whose wavelength fits `rotations` times in orig
        return d * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    inv = rope_ref.base_inv(theta, d)
    inv = (inv / factor) * ramp + inv * (1.0 - ramp)

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn = rs.get("attention_factor")
    if attn is None:
        ms, ms_all = rs.get("mscale"), rs.get("mscale_all_dim")
        attn = mscale(factor, ms) / mscale(factor, ms_all) if ms and ms_all else mscale(factor)
    return rope_ref.Rope(inv, attn=attn)


# --------------------------------------------------------------------------- forward

def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w, over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def round_bf16(v):
    """v rounded to the nearest bfloat16 (ties to even), as a float."""
    u = int(np.array(v, dtype="<f4").view("<u4"))
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return float(np.array(u, dtype="<u4").view("<f4"))


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """GELU's tanh approximation (PyTorch gelu(approximate="tanh"))."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


ACTIVATIONS = {"silu": silu, "gelu_pytorch_tanh": gelu_tanh}


ROUTER_LOG = []  # (layer, position, margin, logit gap, chosen experts) of every routed token


def route(ex, h):
    """The experts chosen for each row of h [T, hidden] and their weights: (chosen [T, k],
    weights [T, k], margins [T], logit gaps [T]); the margin is the k-th probability minus
    the (k+1)-th, the gap the difference of their logits."""
    logits = h @ ex.router.T
    prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
    prob /= prob.sum(axis=-1, keepdims=True)
    # a stable sort of -p: the larger probability first, the lower index among equal ones
    order = np.argsort(-prob, axis=-1, kind="stable")
    chosen = order[:, :ex.k]
    weights = np.take_along_axis(prob, chosen, axis=-1)
    if ex.renorm:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    margins = gaps = np.full(h.shape[0], np.inf)
    if ex.k < prob.shape[-1]:
        pair = order[:, ex.k - 1:ex.k + 1]
        ranked = np.take_along_axis(prob, pair, axis=-1)
        margins = ranked[:, 0] - ranked[:, 1]
        ranked = np.take_along_axis(logits, pair, axis=-1)
        gaps = ranked[:, 0] - ranked[:, 1]
    return chosen, weights, margins, gaps


def route_gpt_oss(ex, h):
    """route() for gpt-oss: the k largest of the biased router logits chosen (the lower
    index first among equal ones), weighted by the softmax over those k logits; the margin
    is taken on the softmax over all experts, the gap on the logits."""
    logits = h @ ex.router.T + ex.router_bias
    order = np.argsort(-logits, axis=-1, kind="stable")
    chosen = order[:, :ex.k]
    top = np.take_along_axis(logits, chosen, axis=-1)
    weights = np.exp(top - top.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    margins = gaps = np.full(h.shape[0], np.inf)
    if ex.k < logits.shape[-1]:
        prob = np.exp(logits - logits.max(axis=-1, keepdims=True))
        prob /= prob.sum(axis=-1, keepdims=True)
        pair = order[:, ex.k - 1:ex.k + 1]
        ranked = np.take_along_axis(prob, pair, axis=-1)
        margins = ranked[:, 0] - ranked[:, 1]
        ranked = np.take_along_axis(logits, pair, axis=-1)
        gaps = ranked[:, 0] - ranked[:, 1]
    return chosen, weights, margins, gaps


def gpt_oss_expert(ex, e, x):
    """Expert e of gpt-oss on one row x [hidden]: the clamped SwiGLU of its interleaved
    gate and up columns, then its down projection, biases included."""
    gate_up = x @ ex.gate_up[e] + ex.gate_up_bias[e]
    gate, up = gate_up[0::2], gate_up[1::2]
    gate = np.minimum(gate, ex.limit)
    up = np.clip(up, -ex.limit, ex.limit)
    glu = gate / (1.0 + np.exp(-ex.alpha * gate))
    return ((up + 1.0) * glu) @ ex.down[e] + ex.down_bias[e]


def moe_mlp(ex, h, act, layer, pos):
    """The mixture-of-experts MLP of rows h at positions pos (logged in ROUTER_LOG)."""
    if isinstance(ex, GptOssExperts):
        chosen, weights, margins, gaps = route_gpt_oss(ex, h)
        out = np.zeros_like(h)
        for t in range(h.shape[0]):
            ROUTER_LOG.append((layer, int(pos[t]), margins[t], gaps[t],
                               [int(e) for e in chosen[t]]))
            for e, wt in zip(chosen[t], weights[t]):
                out[t] += wt * gpt_oss_expert(ex, e, h[t])
        return out
    chosen, weights, margins, gaps = route(ex, h)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        ROUTER_LOG.append((layer, int(pos[t]), margins[t], gaps[t],
                           [int(e) for e in chosen[t]]))
        for e, wt in zip(chosen[t], weights[t]):
            y = act(ex.gate[e] @ h[t]) * (ex.up[e] @ h[t])
            out[t] += wt * (ex.down[e] @ y)
    return out


def attention(m, i, h, pos, cache, long_):
    """Self-attention of layer i for new rows h [T, hidden] at positions pos, rotated in the
    long RoPE factor set or the short one; grows cache."""
    def heads(name, n):  # [T, n * head_dim] -> [n, T, head_dim]
        y = m.linear(i, "self_attn." + name, h)
        return y.reshape(h.shape[0], n, m.head_dim).transpose(1, 0, 2)

    q, k = heads("q_proj", m.n_heads), heads("k_proj", m.n_kv_heads)
    if m.qk_norm:  # each head RMSNormed over head_dim
        q, k = m.layer_norm(i, "self_attn.q_norm", q), m.layer_norm(i, "self_attn.k_norm", k)
    rope_index, window = m.positions[i]
    q = rope_ref.apply_rope(q, pos, m.ropes[rope_index], long_)
    k = rope_ref.apply_rope(k, pos, m.ropes[rope_index], long_)
    v = heads("v_proj", m.n_kv_heads)
    ks, vs, kpos = cache[i]
    ks, vs, kpos = np.concatenate([ks, k], 1), np.concatenate([vs, v], 1), np.append(kpos, pos)
    cache[i] = (ks, vs, kpos)

    out = attend(q, ks, vs, pos, kpos, window, m.scale, m.sinks[i])
    return m.linear(i, "self_attn.o_proj", out)


def attend(q, ks, vs, pos, kpos, window, scale, sinks=None):
    """Causal softmax attention of queries q [heads, T, d] at positions pos over keys and
    values [kv_heads, S, d] at positions kpos (query head j reads kv head j // (heads /
    kv_heads)), within the window when one is given; with sinks [heads], head j's logit
    sinks[j] joins each of its rows' softmax as one more column, dropped afterwards.
    Returns [T, heads * d]."""
    group = q.shape[0] // ks.shape[0]
    ks, vs = np.repeat(ks, group, axis=0), np.repeat(vs, group, axis=0)  # head j -> kv j // group
    scores = q @ ks.transpose(0, 2, 1) * scale                         # [heads, T, S]
    allowed = kpos[None, :] <= pos[:, None]
    if window is not None:
        allowed &= kpos[None, :] > pos[:, None] - window
    scores = np.where(allowed, scores, -np.inf)
    if sinks is None:
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
    else:
        sink = np.broadcast_to(np.asarray(sinks, dtype=np.float64)[:, None, None],
                               scores.shape[:2] + (1,))
        both = np.concatenate([scores, sink], axis=-1)                 # [heads, T, S + 1]
        p = np.exp(both - both.max(axis=-1, keepdims=True))
        p = (p / p.sum(axis=-1, keepdims=True))[..., :-1]               # the sink's column dropped
    return (p @ vs).transpose(1, 0, 2).reshape(q.shape[1], q.shape[0] * q.shape[2])


def takes_long(m, seq_len):
    """Whether a sequence of seq_len tokens rotates with the long RoPE factor set."""
    return any(r.takes_long(seq_len) for r in m.ropes)


def forward(m, ids, cache, long_=None):
    """Logits [T, vocab] for tokens ids that follow the cache's tokens; extends the cache.
    long_: the RoPE factor set (None: the one of the sequence's length after ids)."""
    start = len(cache[0][2])
    if long_ is None:
        long_ = takes_long(m, start + len(ids))
    pos = np.arange(start, start + len(ids), dtype=np.float64)
    x = m.w["model.embed_tokens.weight"][np.asarray(ids)] * m.embed_scale
    act = ACTIVATIONS[m.act]
    for i in range(m.n_layers):
        h = m.layer_norm(i, "input_layernorm", x)
        a = attention(m, i, h, pos, cache, long_)
        if m.sandwich:
            a = m.layer_norm(i, "post_attention_layernorm", a)
        x = x + a
        h = m.layer_norm(i, "pre_feedforward_layernorm" if m.sandwich else
                         "post_attention_layernorm", x)
        if m.experts[i] is not None:
            mlp = moe_mlp(m.experts[i], h, act, i, pos)
        else:
            mlp = act(h @ m.layer(i, "mlp.gate_proj").T) * (h @ m.layer(i, "mlp.up_proj").T)
            mlp = mlp @ m.layer(i, "mlp.down_proj").T
        if m.sandwich:
            mlp = m.layer_norm(i, "post_feedforward_layernorm", mlp)
        x = x + mlp
    return m.norm(x, "model.norm.weight") @ m.lm_head.T


def empty_cache(m):
    """Per layer: keys [kv_heads, 0, head_dim], values likewise, key positions [0]."""
    e = np.zeros((m.n_kv_heads, 0, m.head_dim))
    return [(e, e, np.zeros(0)) for _ in range(m.n_layers)]


def greedy(m, ids, n):
    """The n argmax tokens that follow prompt ids.  The cache holds one RoPE factor set; a
    sequence that grows into the long set drops it and is computed again (see above)."""
    seq = list(ids)
    long_ = takes_long(m, len(seq))
    cache = empty_cache(m)
    logits, out = forward(m, seq, cache, long_), []
    for step in range(n):
        out.append(int(np.argmax(logits[-1])))
        seq.append(out[-1])
        if step + 1 == n:
            break
        if not long_ and takes_long(m, len(seq)):
            long_, cache = True, empty_cache(m)
            logits = forward(m, seq, cache, True)
        else:
            logits = forward(m, [out[-1]], cache, long_)
    return out


# --------------------------------------------------------------------------- main

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("--prompt-ids", required=True, help='space-separated token ids, e.g. "1 5 9"')
    p.add_argument("--logits", action="store_true",
                   help="print the logits of every prompt position")
    p.add_argument("--greedy", type=int, metavar="N", help="print N greedily generated ids")
    p.add_argument("--router-margins", action="store_true",
                   help="write every routed token's top-k margin, and the smallest, to stderr")
    a = p.parse_args(argv)
    ids = [int(t) for t in a.prompt_ids.split()]
    if not ids:
        p.error("--prompt-ids is empty")
    if not a.logits and a.greedy is None:
        p.error("nothing to do: give --logits and/or --greedy N")

    m = Model(a.model_dir)
    if a.router_margins and all(ex is None for ex in m.experts):
        p.error("--router-margins: the model has no mixture-of-experts layer")
    vocab = m.w["model.embed_tokens.weight"].shape[0]
    if any(t < 0 or t >= vocab for t in ids):
        p.error("prompt ids must lie in 0..%d" % (vocab - 1))
    out = sys.stdout
    if a.logits:
        for row in forward(m, ids, empty_cache(m)):
            out.write(" ".join("%.17g" % v for v in row) + "\n")
    if a.greedy is not None:
        out.write(" ".join(str(t) for t in greedy(m, ids, a.greedy)) + "\n")
    if a.router_margins:
        write_margins(sys.stderr)


def write_margins(f):
    """ROUTER_LOG's lines, then the smallest margin's and the smallest logit gap's."""
    for layer, pos, margin, gap, chosen in ROUTER_LOG:
        f.write("router layer %d pos %d margin %.6g logit-gap %.6g experts %s\n"
                % (layer, pos, margin, gap, " ".join(str(e) for e in chosen)))
    for what, col in (("margin", 2), ("logit-gap", 3)):
        r = min(ROUTER_LOG, key=lambda r: r[col])
        f.write("router min %s %.6g layer %d pos %d\n" % (what, r[col], r[0], r[1]))


if __name__ == "__main__":
    main()
