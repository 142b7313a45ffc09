#!/usr/bin/python3
"""Independent float64 numpy forward of a HuggingFace Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, gpt-oss, Gemma-3, Phi-3, Qwen3.5, Qwen3.5-MoE or Gemma 4 checkpoint.

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

    qwen3_5      (HF's Qwen3_5ForConditionalGeneration, model_type qwen3_5, its text model's
                 fields under text_config and tensors under model.language_model.; or
                 Qwen3_5ForCausalLM, model_type qwen3_5_text, flat; model.visual.* and mtp.*
                 tensors are ignored, as HF's text model ignores them) a hybrid whose
                 layer_types (default: full when (i + 1) % full_attention_interval == 0, the
                 interval 4) mix gated full attention and Gated DeltaNet linear attention,
                 below.  Every RMSNorm but the DeltaNet's scales by (1 + w), eps
                 rms_norm_eps; the MLP is Llama's; the embeddings are the LM head when
                 tie_word_embeddings is true (the top-level value first, then
                 text_config's; HF's default false).
    qwen3_5_moe  (HF's Qwen3_5MoeForConditionalGeneration, model_type qwen3_5_moe, text_config
                 model_type qwen3_5_moe_text; or Qwen3_5MoeForCausalLM, qwen3_5_moe_text,
                 flat: Qwen3.5-35B-A3B, Qwen3.6-35B-A3B) as qwen3_5, and every layer's MLP
                 the sparse block below (HF's Qwen3_5MoeSparseMoeBlock).

Qwen3.5's gated full attention (HF's Qwen3_5Attention), per layer on h:
    q_proj gives each head 2 head_dim values: its query, then a gate of the same width;
    q and k RMSNormed per head by (1 + q_norm), (1 + k_norm); RoPE (rotate_half) on each
    head's first rotary_dim = int(head_dim * partial_rotary_factor) dimensions (default
    0.25) with inverse frequencies rope_theta^(-2i / rotary_dim), the rest unrotated (the
    text model's interleaved mRoPE with its three position rows equal, as they are for
    text); causal softmax(q k^T / sqrt(head_dim)) v with GQA;
    out = (attn * sigmoid(gate)) Wo^T.

Qwen3.5's Gated DeltaNet (HF's Qwen3_5GatedDeltaNet with its torch_recurrent_gated_delta_rule),
nk key heads of dk, nv value heads of dv (linear_num_key_heads, linear_key_head_dim, ...):
    qkv = h in_proj_qkv^T (2 nk dk + nv dv), z = h in_proj_z^T, b = h in_proj_b^T,
    a = h in_proj_a^T (nv each); qkv through the causal depthwise conv1d of conv1d.weight
    [C, 1, K] over the tokens (zeros before the first; tap K-1 the current token, no bias),
    then silu; split into q [nk, dk], k [nk, dk], v [nv, dv]; q and k divided by
    sqrt(sum(x^2) + 1e-6) per head, q times dk^-0.5; value head j reads key head
    j // (nv / nk); beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias);
    per token and value head, with the state S [dk, dv] zero at the start:
        S = exp(g) S;  delta = beta (v - S^T k);  S = S + k delta^T;  o = S^T q
    o = rmsnorm(o) * norm.weight (the weight itself, eps rms_norm_eps) * silu(z) per value
    head; out = o out_proj^T.
The cache keeps each full-attention layer's keys and values and each linear layer's last
K - 1 conv inputs and its state S.

Qwen3.5-MoE's sparse block, per token h (num_experts experts, num_experts_per_tok = k chosen):
    routed = the mixture-of-experts MLP below, its weights always renormalised (HF's
    Qwen3_5MoeTopKRouter divides by their sum; the config has no norm_topk_prob and one there
    is ignored), expert e's gate and up rows the first and second halves of
    mlp.experts.gate_up_proj[e] [2 I, hidden], its down mlp.experts.down_proj[e] [hidden, I]
    (or per-expert mlp.experts.E.{gate,up,down}_proj.weight);
    shared = (silu(h Wg_s^T) * h Wu_s^T) Wd_s^T of mlp.shared_expert.{gate,up,down}_proj;
    out = routed + sigmoid(h mlp.shared_expert_gate^T) * shared   (the gate [1, hidden]: one
    scalar per token).

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

    gemma4       (HF's Gemma4ForConditionalGeneration, model_type gemma4, text fields under
                 text_config and tensors under model.language_model.; or Gemma4ForCausalLM,
                 model_type gemma4_text, flat; model.vision_tower.*, model.audio_tower.*,
                 model.embed_vision.* and model.embed_audio.* ignored): Gemma 4, below.

Gemma 4's text decoder (HF's Gemma4TextModel and Gemma4ForCausalLM), L layers, per token:
    every RMSNorm is x (mean(x^2) + eps)^-0.5 w with w itself (not 1 + w), eps rms_norm_eps;
    x = embed[ids] * sqrt(hidden);
    with PLE (hidden_size_per_layer_input P > 0): tok = embed_tokens_per_layer[ids] * sqrt(P)
    as [L, P]; prj = (x per_layer_model_projection^T) * hidden^-0.5 as [L, P], each [P] slice
    RMSNormed by per_layer_projection_norm; ple = (prj + tok) * 2^-0.5;
    layer i of type t (layer_types: sliding_attention or full_attention), d = head_dim for
    sliding, global_head_dim for full layers; kv heads num_key_value_heads, or
    num_global_key_value_heads for full layers when attention_k_eq_v:
        h = rmsnorm(x) * input_layernorm
        q = h Wq^T per head RMSNormed by q_norm, then RoPE; unless layer i is KV-shared:
        k = h Wk^T per head RMSNormed by k_norm, then RoPE; v = h Wv^T (full layers with
        attention_k_eq_v: v = h Wk^T, the raw keys) RMSNormed per head without weight;
        RoPE rotate_half over all d: sliding layers inverse frequencies
        theta_s^(-2i/d) (rope_parameters.sliding_attention.rope_theta, 1e4), full layers
        "proportional": theta_f^(-2i/d) for i < int(partial_rotary_factor * d // 2) and 0
        (unrotated) for the other pairs (theta_f 1e6, factor 0.25);
        causal softmax(q k^T * 1.0) v with GQA (scale 1, no soft-capping), sliding layers
        only keys at positions > p - sliding_window;
        a KV-shared layer (i >= L - num_kv_shared_layers) has no k and v of its own: it
        attends to the cached keys and values of the last earlier non-shared layer of its
        type (HF's shared_kv_states);
        x += rmsnorm(attn Wo^T) * post_attention_layernorm
        h = rmsnorm(x) * pre_feedforward_layernorm;  m = (gelu_tanh(h Wg^T) * h Wu^T) Wd^T
        (a KV-shared layer's MLP twice intermediate_size wide under use_double_wide_mlp)
        with enable_moe_block: m = rmsnorm(m) * post_feedforward_layernorm_1 + rmsnorm(e) *
        post_feedforward_layernorm_2, e the experts' sum on rmsnorm(x) *
        pre_feedforward_layernorm_2: the router r = rmsnorm(x) (no weight) * router.scale *
        hidden^-0.5, p = softmax(r router.proj^T), the top_k_experts largest (the lower
        index first among equal ones), renormalised to sum 1, times
        router.per_expert_scale[e]; expert e: (gelu_tanh(y G_e^T) * y U_e^T) D_e^T with G_e,
        U_e the first and last moe_intermediate_size rows of experts.gate_up_proj[e] and D_e
        experts.down_proj[e];
        x += rmsnorm(m) * post_feedforward_layernorm
        with PLE: x += rmsnorm((gelu_tanh(x per_layer_input_gate^T) * ple[i])
        per_layer_projection^T) * post_per_layer_input_norm
        x *= layer_scalar
    logits = rmsnorm(x) * norm @ embed^T (lm_head^T when untied); with
    final_logit_softcapping c: logits = c tanh(logits / c).
The greedy cache keeps each non-shared layer's keys (normed and rotated) and values (normed).

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


# --------------------------------------------------------------------------- qwen3_5

QWEN35_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
QWEN35_MULTIMODAL = ("qwen3_5", "qwen3_5_moe")  # the text model's fields under text_config
L2_EPS = 1e-6  # the query's and key's L2 norm (HF's l2norm default, not rms_norm_eps)


class Qwen35:
    """A Qwen3.5 or Qwen3.5-MoE checkpoint in either layout: config values and the text
    model's weights, named model.* whichever layout they came from (model.visual.* and mtp.*
    dropped); for the MoE, each layer's Experts and SharedExpert."""

    def __init__(self, model_dir, cfg):
        text = cfg["text_config"] if cfg.get("model_type") in QWEN35_MULTIMODAL else cfg
        self.n_layers = text["num_hidden_layers"]
        self.n_heads = text["num_attention_heads"]
        self.n_kv_heads = text.get("num_key_value_heads") or self.n_heads
        self.head_dim = text.get("head_dim") or text["hidden_size"] // self.n_heads
        self.eps = text["rms_norm_eps"]
        if text.get("attention_bias"):
            raise SystemExit("reference.py: qwen3_5 with attention_bias is not supported")
        if text.get("hidden_act", "silu") != "silu":
            raise SystemExit("reference.py: qwen3_5's hidden_act must be silu")
        rp = text.get("rope_parameters") or text.get("rope_scaling") or {}
        if rp.get("rope_type", rp.get("type", "default")) != "default":
            raise SystemExit("reference.py: qwen3_5 rope_type %r is not supported"
                             % rp.get("rope_type", rp.get("type")))
        theta = rp.get("rope_theta", text.get("rope_theta", 10000.0))
        factor = rp.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
        self.rot = int(self.head_dim * factor)  # the rotated leading dimensions of a head
        self.rope = rope_ref.Rope(rope_ref.base_inv(theta, self.rot))
        interval = text.get("full_attention_interval", 4)
        self.types = text.get("layer_types") or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(self.n_layers)]
        if len(self.types) != self.n_layers or any(
                t not in ("full_attention", "linear_attention") for t in self.types):
            raise SystemExit("reference.py: layer_types %r" % (self.types,))
        self.nk, self.nv = text["linear_num_key_heads"], text["linear_num_value_heads"]
        self.dk, self.dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
        self.conv_k = text["linear_conv_kernel_dim"]
        if self.nv % self.nk:
            raise SystemExit("reference.py: linear_num_value_heads must be a multiple of "
                             "linear_num_key_heads")
        self.w = {}
        for name, t in load_weights(model_dir).items():
            if name.startswith("model.language_model."):
                self.w["model." + name[len("model.language_model."):]] = t
            elif not name.startswith(("model.visual.", "mtp.")):
                self.w[name] = t
        tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        self.lm_head = self.w["model.embed_tokens.weight" if tied else "lm_head.weight"]
        self.moe = text.get("model_type", cfg.get("model_type")) == "qwen3_5_moe_text" or \
            cfg.get("model_type") == "qwen3_5_moe"
        self.experts = self.shared = [None] * self.n_layers
        if self.moe:
            self.experts = [qwen35_experts(self.w, "model.layers.%d.mlp." % i, text)
                            for i in range(self.n_layers)]
            self.shared = [SharedExpert(self.w, "model.layers.%d.mlp." % i)
                           for i in range(self.n_layers)]

    def layer(self, i, name):
        """Layer i's tensor `name`, e.g. layer(0, 'linear_attn.A_log')."""
        return self.w["model.layers.%d.%s" % (i, name)]

    def empty_state(self):
        """The cache before the first token: per layer, a full-attention layer's keys,
        values [kv_heads, 0, head_dim] and key positions, or a linear one's conv history
        [K - 1, conv channels] and delta-rule state [nv, dk, dv], all zero."""
        layers = []
        for kind in self.types:
            if kind == "full_attention":
                e = np.zeros((self.n_kv_heads, 0, self.head_dim))
                layers.append([e, e, np.zeros(0)])
            else:
                channels = 2 * self.nk * self.dk + self.nv * self.dv
                layers.append([np.zeros((self.conv_k - 1, channels)),
                               np.zeros((self.nv, self.dk, self.dv))])
        return {"n": 0, "layers": layers}


class SharedExpert:
    """A Qwen3.5-MoE layer's shared expert (gate, up, down [hidden, S]) and its gate [1, hidden]."""

    def __init__(self, w, p):
        self.gate = w[p + "shared_expert.gate_proj.weight"]
        self.up = w[p + "shared_expert.up_proj.weight"]
        self.down = w[p + "shared_expert.down_proj.weight"]
        self.gate_w = w[p + "shared_expert_gate.weight"]


def qwen35_experts(w, p, text):
    """The Experts of a Qwen3.5-MoE layer whose MLP tensors follow prefix p: the router
    p + gate.weight, the experts stacked and fused as the released checkpoints hold them
    (experts.gate_up_proj [E, 2 I, hidden]: each expert's gate rows, then its up rows;
    experts.down_proj [E, hidden, I]) or one tensor per expert
    (experts.E.{gate,up,down}_proj.weight); the chosen weights always renormalised."""
    n, k = text.get("num_experts", 256), text.get("num_experts_per_tok", 8)
    router = w[p + "gate.weight"]
    if router.shape[0] != n:
        raise SystemExit("reference.py: %sgate.weight has %d rows for num_experts %d"
                         % (p, router.shape[0], n))
    if p + "experts.gate_up_proj" in w:
        gate_up, down = w[p + "experts.gate_up_proj"], w[p + "experts.down_proj"]
        width = gate_up.shape[1] // 2
        gate, up = gate_up[:, :width], gate_up[:, width:]
    else:
        gate, up, down = [np.stack([w["%sexperts.%d.%s.weight" % (p, e, name)] for e in range(n)])
                          for name in ("gate_proj", "up_proj", "down_proj")]
    if gate.shape[0] != n or down.shape[0] != n:
        raise SystemExit("reference.py: %sexperts hold %d experts for num_experts %d"
                         % (p, gate.shape[0], n))
    return Experts(router, gate, up, down, k, True)


def qwen35_moe_mlp(m, i, h, pos):
    """Layer i's sparse MoE block on rows h at positions pos (HF's Qwen3_5MoeSparseMoeBlock):
    the routed experts' weighted sum plus sigmoid(h shared_expert_gate^T) times the shared
    expert's SwiGLU MLP."""
    routed = moe_mlp(m.experts[i], h, silu, i, pos)
    sh = m.shared[i]
    shared = (silu(h @ sh.gate.T) * (h @ sh.up.T)) @ sh.down.T
    return routed + sigmoid(h @ sh.gate_w.T) * shared


def rmsnorm1p(x, w, eps):
    """Qwen3.5's RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + w) (w stored zero-centred)."""
    return rmsnorm(x, 1.0 + w, eps)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    """torch's softplus (beta 1, threshold 20): x itself above 20."""
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def l2norm(x, eps=L2_EPS):
    """x / sqrt(sum(x^2) + eps) over the last axis (HF's l2norm)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def causal_conv(x, history, w):
    """The depthwise causal conv1d of new rows x [T, C] after the K - 1 rows history [K-1, C]
    (zeros before the first token), kernel w [C, K] (conv1d.weight without its middle axis):
    out[t, c] = sum_j w[c, j] * rows[t + j, c] over rows = history then x, tap K - 1 the
    current token.  Returns (out [T, C], the last K - 1 rows as the new history); no bias, no
    activation."""
    k = w.shape[1]
    rows = np.concatenate([history, x], axis=0)
    out = np.zeros_like(x)
    for j in range(k):
        out += rows[j:j + x.shape[0]] * w[:, j]
    return out, rows[rows.shape[0] - (k - 1):]


def delta_rule(q, k, v, g, beta, state):
    """The gated delta rule one token at a time (HF's torch_recurrent_gated_delta_rule),
    q, k [T, H, dk] (already one per value head), v [T, H, dv], g, beta [T, H], state
    [H, dk, dv]: per token S = S exp(g); delta = (v - k^T S) beta; S += k delta^T; out = q^T S.
    Returns (out [T, H, dv], the new state)."""
    s = state.copy()
    out = np.zeros(v.shape)
    for t in range(q.shape[0]):
        s = s * np.exp(g[t])[:, None, None]
        kv_mem = np.einsum("hk,hkv->hv", k[t], s)
        delta = (v[t] - kv_mem) * beta[t][:, None]
        s = s + k[t][:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hk,hkv->hv", q[t], s)
    return out, s


def gated_rmsnorm(x, z, w, eps):
    """Qwen3.5's RMSNormGated: rmsnorm(x) * w (w itself, not 1 + w) * silu(z)."""
    return rmsnorm(x, w, eps) * silu(z)


def linear_attention(m, i, h, layer_state):
    """Layer i's Gated DeltaNet on new rows h [T, hidden] (HF's Qwen3_5GatedDeltaNet);
    updates layer_state [conv history, delta-rule state]."""
    t_len = h.shape[0]
    qkv = h @ m.layer(i, "linear_attn.in_proj_qkv.weight").T
    z = (h @ m.layer(i, "linear_attn.in_proj_z.weight").T).reshape(t_len, m.nv, m.dv)
    b = h @ m.layer(i, "linear_attn.in_proj_b.weight").T
    a = h @ m.layer(i, "linear_attn.in_proj_a.weight").T
    conv_w = m.layer(i, "linear_attn.conv1d.weight")[:, 0, :]
    qkv, layer_state[0] = causal_conv(qkv, layer_state[0], conv_w)
    qkv = silu(qkv)
    key_dim = m.nk * m.dk
    q = l2norm(qkv[:, :key_dim].reshape(t_len, m.nk, m.dk)) * m.dk ** -0.5
    k = l2norm(qkv[:, key_dim:2 * key_dim].reshape(t_len, m.nk, m.dk))
    v = qkv[:, 2 * key_dim:].reshape(t_len, m.nv, m.dv)
    q, k = np.repeat(q, m.nv // m.nk, axis=1), np.repeat(k, m.nv // m.nk, axis=1)
    beta = sigmoid(b)
    g = -np.exp(m.layer(i, "linear_attn.A_log")) * softplus(a + m.layer(i, "linear_attn.dt_bias"))
    out, layer_state[1] = delta_rule(q, k, v, g, beta, layer_state[1])
    out = gated_rmsnorm(out, z, m.layer(i, "linear_attn.norm.weight"), m.eps)
    return out.reshape(t_len, m.nv * m.dv) @ m.layer(i, "linear_attn.out_proj.weight").T


def partial_rope(x, pos, rope, rot):
    """RoPE (rotate_half) of the first rot dimensions of x [heads, T, d]; the rest as is."""
    return np.concatenate([rope_ref.apply_rope(x[..., :rot], pos, rope), x[..., rot:]], axis=-1)


def gated_attention(m, i, h, pos, layer_state):
    """Layer i's gated full attention on new rows h [T, hidden] at positions pos (HF's
    Qwen3_5Attention); updates layer_state [keys, values, key positions]."""
    t_len, d = h.shape[0], m.head_dim
    qg = (h @ m.layer(i, "self_attn.q_proj.weight").T).reshape(t_len, m.n_heads, 2 * d)
    q, gate = qg[..., :d], qg[..., d:].reshape(t_len, m.n_heads * d)
    k = (h @ m.layer(i, "self_attn.k_proj.weight").T).reshape(t_len, m.n_kv_heads, d)
    v = (h @ m.layer(i, "self_attn.v_proj.weight").T).reshape(t_len, m.n_kv_heads, d)
    q = rmsnorm1p(q, m.layer(i, "self_attn.q_norm.weight"), m.eps).transpose(1, 0, 2)
    k = rmsnorm1p(k, m.layer(i, "self_attn.k_norm.weight"), m.eps).transpose(1, 0, 2)
    q, k = partial_rope(q, pos, m.rope, m.rot), partial_rope(k, pos, m.rope, m.rot)
    ks = np.concatenate([layer_state[0], k], 1)
    vs = np.concatenate([layer_state[1], v.transpose(1, 0, 2)], 1)
    kpos = np.append(layer_state[2], pos)
    layer_state[:] = [ks, vs, kpos]
    out = attend(q, ks, vs, pos, kpos, None, d ** -0.5) * sigmoid(gate)
    return out @ m.layer(i, "self_attn.o_proj.weight").T


def qwen35_forward(m, ids, state):
    """Logits [T, vocab] of tokens ids after the state's tokens; extends the state."""
    pos = np.arange(state["n"], state["n"] + len(ids), dtype=np.float64)
    state["n"] += len(ids)
    x = m.w["model.embed_tokens.weight"][np.asarray(ids)]
    for i in range(m.n_layers):
        h = rmsnorm1p(x, m.layer(i, "input_layernorm.weight"), m.eps)
        if m.types[i] == "full_attention":
            x = x + gated_attention(m, i, h, pos, state["layers"][i])
        else:
            x = x + linear_attention(m, i, h, state["layers"][i])
        h = rmsnorm1p(x, m.layer(i, "post_attention_layernorm.weight"), m.eps)
        if m.moe:
            x = x + qwen35_moe_mlp(m, i, h, pos)
            continue
        mlp = silu(h @ m.layer(i, "mlp.gate_proj.weight").T) * (h @ m.layer(i, "mlp.up_proj.weight").T)
        x = x + mlp @ m.layer(i, "mlp.down_proj.weight").T
    return rmsnorm1p(x, m.w["model.norm.weight"], m.eps) @ m.lm_head.T


def qwen35_greedy(m, ids, n):
    """The n argmax tokens that follow prompt ids, each step one token on the state."""
    state = m.empty_state()
    logits, out = qwen35_forward(m, list(ids), state), []
    for step in range(n):
        out.append(int(np.argmax(logits[-1])))
        if step + 1 < n:
            logits = qwen35_forward(m, [out[-1]], state)
    return out


# --------------------------------------------------------------------------- gemma4

GEMMA4_TYPES = ("gemma4", "gemma4_text")
GEMMA4_SKIPPED = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.",
                  "model.embed_audio.")


class Gemma4:
    """A Gemma 4 checkpoint in either layout: config values and the text model's weights,
    named model.* whichever layout they came from (vision and audio tensors dropped)."""

    def __init__(self, model_dir, cfg):
        text = cfg["text_config"] if cfg.get("model_type") == "gemma4" else cfg
        self.cfg = text
        self.n_layers = text["num_hidden_layers"]
        self.hidden = text["hidden_size"]
        self.n_heads = text["num_attention_heads"]
        self.eps = text.get("rms_norm_eps", 1e-6)
        self.window = text.get("sliding_window", 512)
        self.softcap = text.get("final_logit_softcapping")
        if text.get("attention_bias"):
            raise SystemExit("reference.py: gemma4 with attention_bias is not supported")
        if text.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            raise SystemExit("reference.py: gemma4's hidden_activation must be gelu_pytorch_tanh")
        self.types = text.get("layer_types") or [
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
            for i in range(self.n_layers)]
        self.types = list(self.types)
        self.types[-1] = "full_attention"  # as HF's config forces it
        k_eq_v = bool(text.get("attention_k_eq_v", False))
        rp = text.get("rope_parameters") or {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                               "rope_theta": 1000000.0}}
        self.ropes, self.dims, self.kv_heads, self.v_is_k = [], [], [], []
        for t in self.types:
            full = t == "full_attention"
            d = (text.get("global_head_dim") or text["head_dim"]) if full else text["head_dim"]
            self.dims.append(d)
            nkv = text["num_key_value_heads"]
            if full and k_eq_v and text.get("num_global_key_value_heads") is not None:
                nkv = text["num_global_key_value_heads"]
            self.kv_heads.append(nkv)
            self.v_is_k.append(full and k_eq_v)
            self.ropes.append(gemma4_inv_freq(rp[t], d))
        n_shared = text.get("num_kv_shared_layers", 0) or 0
        first = self.n_layers - n_shared
        # the layer whose keys and values layer i attends to (itself unless KV-shared)
        self.kv_source = []
        for i, t in enumerate(self.types):
            if i < first:
                self.kv_source.append(i)
            else:
                earlier = [j for j in range(first) if self.types[j] == t]
                if not earlier:
                    raise SystemExit("reference.py: layer %d has no %s layer to share" % (i, t))
                self.kv_source.append(earlier[-1])
        self.ple = text.get("hidden_size_per_layer_input") or 0
        self.moe = bool(text.get("enable_moe_block"))
        self.top_k = text.get("top_k_experts")
        self.w = {}
        for name, t in load_weights(model_dir).items():
            if name.startswith("model.language_model."):
                self.w["model." + name[len("model.language_model."):]] = t
            elif not name.startswith(GEMMA4_SKIPPED):
                self.w[name] = t
        tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
        self.lm_head = self.w["model.embed_tokens.weight" if tied else "lm_head.weight"]

    def layer(self, i, name):
        """Layer i's tensor `name`, e.g. layer(0, 'self_attn.q_proj.weight')."""
        return self.w["model.layers.%d.%s" % (i, name)]

    def norm(self, i, name, x):
        """RMSNorm of x by layer i's norm `name` (Gemma 4: the weight itself)."""
        return rmsnorm(x, self.layer(i, name + ".weight"), self.eps)

    def empty_cache(self):
        """Per layer: keys, values [kv_heads, 0, d] and key positions (KV-shared layers' unused)."""
        return [(np.zeros((self.kv_heads[i], 0, self.dims[i])),
                 np.zeros((self.kv_heads[i], 0, self.dims[i])), np.zeros(0))
                for i in range(self.n_layers)]


def gemma4_inv_freq(params, d):
    """A layer type's inverse frequencies for head size d: "default" theta^(-2i/d) for every
    pair; "proportional" those for i < int(partial_rotary_factor * d // 2), 0 for the rest."""
    theta = params.get("rope_theta", 10000.0)
    kind = params.get("rope_type", "default")
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if kind == "proportional":
        n_rot = int(params.get("partial_rotary_factor", 1.0) * d // 2)
        inv[n_rot:] = 0.0
    elif kind != "default":
        raise SystemExit("reference.py: gemma4 rope_type %r is not supported" % kind)
    factor = params.get("factor", 1.0)
    return inv / factor


def rope_half(x, pos, inv):
    """rotate_half RoPE of x [heads, T, d] at positions pos with d/2 inverse frequencies."""
    ang = pos[:, None] * inv[None, :]                       # [T, d/2]
    cos, sin = np.cos(ang), np.sin(ang)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def gemma4_attention(m, i, h, pos, cache):
    """Layer i's attention on new rows h [T, hidden] at positions pos; grows cache[i] unless
    the layer is KV-shared (then it reads its source layer's cache)."""
    t_len, d = h.shape[0], m.dims[i]
    q = (h @ m.layer(i, "self_attn.q_proj.weight").T).reshape(t_len, m.n_heads, d)
    q = rmsnorm(q, m.layer(i, "self_attn.q_norm.weight"), m.eps).transpose(1, 0, 2)
    q = rope_half(q, pos, m.ropes[i])
    src = m.kv_source[i]
    if src == i:
        nkv = m.kv_heads[i]
        k = (h @ m.layer(i, "self_attn.k_proj.weight").T).reshape(t_len, nkv, d)
        v = k if m.v_is_k[i] else (h @ m.layer(i, "self_attn.v_proj.weight").T).reshape(
            t_len, nkv, d)
        k = rmsnorm(k, m.layer(i, "self_attn.k_norm.weight"), m.eps).transpose(1, 0, 2)
        k = rope_half(k, pos, m.ropes[i])
        v = rmsnorm(v, 1.0, m.eps).transpose(1, 0, 2)
        ks, vs, kpos = cache[i]
        cache[i] = (np.concatenate([ks, k], 1), np.concatenate([vs, v], 1), np.append(kpos, pos))
    ks, vs, kpos = cache[src]
    window = m.window if m.types[i] == "sliding_attention" else None
    out = attend(q, ks, vs, pos, kpos, window, 1.0)
    return out @ m.layer(i, "self_attn.o_proj.weight").T


def gemma4_per_layer_inputs(m, ids, x):
    """PLE's per-layer inputs [T, L, P] of tokens ids with scaled embeddings x [T, hidden]."""
    n, p = m.n_layers, m.ple
    tok = m.w["model.embed_tokens_per_layer.weight"][np.asarray(ids)] * np.sqrt(p)
    prj = (x @ m.w["model.per_layer_model_projection.weight"].T) * m.hidden ** -0.5
    prj = rmsnorm(prj.reshape(-1, n, p), m.w["model.per_layer_projection_norm.weight"], m.eps)
    return (prj + tok.reshape(-1, n, p)) * 2.0 ** -0.5


def gemma4_moe(m, i, x, pos):
    """Layer i's experts' output for the residual rows x [T, hidden] (before its norm)."""
    r = rmsnorm(x, 1.0, m.eps) * m.layer(i, "router.scale") * m.hidden ** -0.5
    logits = r @ m.layer(i, "router.proj.weight").T
    y = m.norm(i, "pre_feedforward_layernorm_2", x)
    gate_up, down = m.layer(i, "experts.gate_up_proj"), m.layer(i, "experts.down_proj")
    scale = m.layer(i, "router.per_expert_scale")
    width = down.shape[2]
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        p = np.exp(logits[t] - logits[t].max())
        p /= p.sum()
        order = np.argsort(-p, kind="stable")
        chosen = order[:m.top_k]
        w = p[chosen] / p[chosen].sum()
        if m.top_k < len(p):
            ROUTER_LOG.append((i, int(pos[t]), float(p[order[m.top_k - 1]] - p[order[m.top_k]]),
                               float(logits[t][order[m.top_k - 1]] - logits[t][order[m.top_k]]),
                               [int(e) for e in chosen]))
        for e, we in zip(chosen, w):
            g, u = gate_up[e][:width], gate_up[e][width:]
            out[t] += we * scale[e] * ((gelu_tanh(y[t] @ g.T) * (y[t] @ u.T)) @ down[e].T)
    return out


def gemma4_forward(m, ids, cache):
    """Logits [T, vocab] of tokens ids after the cache's tokens; extends the cache."""
    start = max(len(c[2]) for c in cache)
    pos = np.arange(start, start + len(ids), dtype=np.float64)
    x = m.w["model.embed_tokens.weight"][np.asarray(ids)] * np.sqrt(m.hidden)
    ple = gemma4_per_layer_inputs(m, ids, x) if m.ple else None
    for i in range(m.n_layers):
        a = gemma4_attention(m, i, m.norm(i, "input_layernorm", x), pos, cache)
        x = x + m.norm(i, "post_attention_layernorm", a)
        h = m.norm(i, "pre_feedforward_layernorm", x)
        mlp = gelu_tanh(h @ m.layer(i, "mlp.gate_proj.weight").T) * (
            h @ m.layer(i, "mlp.up_proj.weight").T)
        mlp = mlp @ m.layer(i, "mlp.down_proj.weight").T
        if m.moe:
            mlp = (m.norm(i, "post_feedforward_layernorm_1", mlp)
                   + m.norm(i, "post_feedforward_layernorm_2", gemma4_moe(m, i, x, pos)))
        x = x + m.norm(i, "post_feedforward_layernorm", mlp)
        if ple is not None:
            g = gelu_tanh(x @ m.layer(i, "per_layer_input_gate.weight").T) * ple[:, i, :]
            x = x + m.norm(i, "post_per_layer_input_norm",
                           g @ m.layer(i, "per_layer_projection.weight").T)
        x = x * m.layer(i, "layer_scalar")
    logits = rmsnorm(x, m.w["model.norm.weight"], m.eps) @ m.lm_head.T
    if m.softcap:
        logits = m.softcap * np.tanh(logits / m.softcap)
    return logits


def gemma4_greedy(m, ids, n):
    """The n argmax tokens that follow prompt ids, each step one token on the cache."""
    cache = m.empty_cache()
    logits, out = gemma4_forward(m, list(ids), cache), []
    for step in range(n):
        out.append(int(np.argmax(logits[-1])))
        if step + 1 < n:
            logits = gemma4_forward(m, [out[-1]], cache)
    return out


def load_model(model_dir):
    """A Qwen35 for a qwen3_5 checkpoint, a Gemma4 for a gemma4 one, else a Model."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") in QWEN35_TYPES:
        return Qwen35(model_dir, cfg)
    if cfg.get("model_type") in GEMMA4_TYPES:
        return Gemma4(model_dir, cfg)
    return Model(model_dir)


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

    m = load_model(a.model_dir)
    qwen35 = isinstance(m, Qwen35)
    if isinstance(m, Gemma4):
        return gemma4_main(p, a, m, ids)
    if a.router_margins and all(ex is None for ex in m.experts):
        p.error("--router-margins: the model has no mixture-of-experts layer")
    vocab = m.w["model.embed_tokens.weight"].shape[0]
    if any(t < 0 or t >= vocab for t in ids):
        p.error("prompt ids must lie in 0..%d" % (vocab - 1))
    out = sys.stdout
    if a.logits:
        rows = qwen35_forward(m, ids, m.empty_state()) if qwen35 else forward(m, ids, empty_cache(m))
        for row in rows:
            out.write(" ".join("%.17g" % v for v in row) + "\n")
    if a.greedy is not None:
        gen = qwen35_greedy(m, ids, a.greedy) if qwen35 else greedy(m, ids, a.greedy)
        out.write(" ".join(str(t) for t in gen) + "\n")
    if a.router_margins:
        write_margins(sys.stderr)


def gemma4_main(p, a, m, ids):
    """main's work for a Gemma 4 checkpoint."""
    if a.router_margins and not m.moe:
        p.error("--router-margins: the model has no mixture-of-experts layer")
    vocab = m.w["model.embed_tokens.weight"].shape[0]
    if any(t < 0 or t >= vocab for t in ids):
        p.error("prompt ids must lie in 0..%d" % (vocab - 1))
    if a.logits:
        for row in gemma4_forward(m, ids, m.empty_cache()):
            sys.stdout.write(" ".join("%.17g" % v for v in row) + "\n")
    if a.greedy is not None:
        sys.stdout.write(" ".join(str(t) for t in gemma4_greedy(m, ids, a.greedy)) + "\n")
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
