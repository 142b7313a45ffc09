#!/usr/bin/python3
"""A GGUF file of a Llama, Mixtral, Qwen3, Qwen3-MoE, gpt-oss, Qwen3.5, Qwen3.5-MoE or Gemma 4 model as a HuggingFace f32 checkpoint, for the reference.

    gguf_to_hf.py FILE.gguf OUT_DIR

The independent half of cbllm's GGUF checks: it shares no code with the C engine.  It reads
the file with its own parser (below), dequantizes every tensor with quant.py's numpy
dequantizers (from the formats' definitions), undoes the row permutation GGUF files apply
to the q and k projections of "llama" models (each head's rows stored as the pairs RoPE
rotates, interleaved, instead of HF's two halves), and writes OUT_DIR/config.json and
OUT_DIR/model.safetensors (F32), which reference.py runs in float64.  So the reference sees
exactly the weights the file holds, whatever made it (cbllm's converter or llama-quantize).

Converted: general.architecture "llama" (Llama, Mistral, TinyLlama; Mixtral when
llama.expert_count is there), "qwen3" and "qwen3moe", their <arch>.* hyper-parameters
(head_dim from attention.key_length, sliding_window from attention.sliding_window when
present), and the tensors token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v,
attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}, the qwen's blk.N.attn_q_norm and
attn_k_norm, output_norm and output (absent: tied).  A mixture of experts' router
blk.N.ffn_gate_inp becomes mlp.gate (Qwen3-MoE) or block_sparse_moe.gate (Mixtral), and
each stacked blk.N.ffn_{gate,up,down}_exps (ne [cols, rows, experts]) one tensor per expert:
mlp.experts.E.{gate,up,down}_proj or block_sparse_moe.experts.E.{w1,w3,w2}.  A Mixtral
file must have experts in every layer; a qwen3moe file's layers without ffn_gate_inp are
config.json's mlp_only_layers (decoder_sparse_step 1), its norm_topk_prob
qwen3moe.expert_weights_norm (true when absent, as llama.cpp's qwen3moe always
renormalises).

general.architecture "gpt-oss" (llama.cpp's converter's layout of GptOssForCausalLM) becomes
transformers' GptOss checkpoint: blk.N.attn_{q,k,v,output} weight and bias (no permutation),
attn_sinks.weight as self_attn.sinks, attn_norm and post_attention_norm as input_layernorm
and post_attention_layernorm, ffn_gate_inp weight and bias as mlp.router, and the experts
back in transformers' stacked [E, in, out] form: ffn_gate_exps and ffn_up_exps.weight
([E, I, hidden]) interleaved into mlp.experts.gate_up_proj [E, hidden, 2I] (gate the even
columns, up the odd), ffn_down_exps.weight [E, hidden, I] into mlp.experts.down_proj
[E, I, hidden], their biases into gate_up_proj_bias [E, 2I] and down_proj_bias.
config.json: head_dim from attention.key_length, intermediate_size from
expert_feed_forward_length, num_local_experts, num_experts_per_tok and experts_per_token,
sliding_window, layer_types from attention.sliding_window_pattern (a bool per layer, or a
period N: layer i sliding unless i % N == N - 1; absent, llama.cpp's gpt-oss period 2, layer 0
sliding), rope_scaling from rope.scaling.* (yarn: factor, original_max_position_embeddings,
beta_fast and beta_slow, 32 and 1 when absent as llama.cpp defaults them, attention_factor
when the file has one, and truncate false, gpt-oss's: the file has no key for it),
swiglu_limit 7 (llama.cpp's constant), attention_bias true.

general.architecture "qwen35" and "qwen35moe" (llama.cpp's converter's layout of Qwen3.5 and
Qwen3.5-MoE, as hf_to_gguf.py describes it) become the flat Qwen3_5ForCausalLM
(Qwen3_5MoeForCausalLM) checkpoint, model_type qwen3_5_text (qwen3_5_moe_text), tensors
model.*, every transform of the converter undone: the 1 taken off attn_norm,
post_attention_norm, attn_q_norm, attn_k_norm and output_norm (exactly: f - 1 of a float32
f in [0.5, 2] is exact, so reference.py's 1 + w is the file's value), A_log = log(-ssm_a)
(reference.py's -exp(A_log) then equals ssm_a to float32 rounding), ssm_conv1d [C, K] as
conv1d.weight [C, 1, K], the value heads (attn_qkv's V rows, ssm_conv1d's V channels,
attn_gate's rows, ssm_beta, ssm_alpha, ssm_a, ssm_dt, ssm_out's columns) from llama.cpp's
tiled order back to HF's grouped one, ffn_gate_exps and ffn_up_exps ([E, I, hidden] each)
stacked into mlp.experts.gate_up_proj [E, 2I, hidden] (ffn_gate_up_exps, when the file fused
them, taken as it is), ffn_down_exps as mlp.experts.down_proj, ffn_gate_inp as mlp.gate,
ffn_{gate,up,down}_shexp as mlp.shared_expert.*, ffn_gate_inp_shexp as
mlp.shared_expert_gate [1, hidden].  config.json: head_dim from attention.key_length,
partial_rotary_factor rope.dimension_count / head_dim, mrope_section the first three of
rope.dimension_sections, layer_types from attention.recurrent_layers (else
full_attention_interval), linear_* from ssm.group_count (key heads), ssm.time_step_rank
(value heads), ssm.state_size (both head widths), ssm.conv_kernel; intermediate_size from
feed_forward_length (required for qwen35); num_experts, num_experts_per_tok,
moe_intermediate_size and shared_expert_intermediate_size from expert_count,
expert_used_count, expert_feed_forward_length and expert_shared_feed_forward_length.  A file
with nextn_predict_layers 1 (block_count counts it) gives num_hidden_layers one less and
mtp_num_hidden_layers 1, and its last block back as the MTP head: mtp.layers.0.* named as a
decoder layer's, nextn.eh_proj as mtp.fc, nextn.enorm, nextn.hnorm and
nextn.shared_head_norm as mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden and mtp.norm
(the 1 taken off).  general.architecture "gemma4" becomes Gemma4ForCausalLM's flat checkpoint
(gguf_gemma4.py says how).  No tokenizer files are written.
Anything else is an error naming it.
"""

import json
import os
import struct
import sys

import numpy as np

import quant
from gguf_gemma4 import gemma4_config, gemma4_hf_tensors

# ggml type id -> (name, elements per block, bytes per block)
GGML = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2)}
for _name, _nbytes in [(n, t[0]) for n, t in quant.TYPES.items()] + \
        [(n, t[0]) for n, t in quant.KTYPES.items()]:
    GGML[{"Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q2_K": 10, "Q3_K": 11,
          "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}[_name]] = (_name, 256 if _name.endswith("_K") else 32, _nbytes)
GGML[39] = ("MXFP4", quant.QK, quant.MX_BYTES)

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
QWEN3_LAYER = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
# a sparse layer's tensors: (Qwen3-MoE's HF name, Mixtral's) after "model.layers.N."; the
# stacked experts' HF names take "experts.E." before their last part
MOE_LAYER = {"ffn_gate_inp": ("mlp.gate", "block_sparse_moe.gate"),
             "ffn_gate_exps": ("mlp.gate_proj", "block_sparse_moe.w1"),
             "ffn_up_exps": ("mlp.up_proj", "block_sparse_moe.w3"),
             "ffn_down_exps": ("mlp.down_proj", "block_sparse_moe.w2")}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}
ARCHS = ("llama", "qwen3", "qwen3moe", "gpt-oss")
# gpt-oss's per-layer tensors other than the experts (after "blk.N."), and the HF names
GPT_OSS_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "attn_sinks.weight": "self_attn.sinks",
    "ffn_gate_inp.weight": "mlp.router.weight", "ffn_gate_inp.bias": "mlp.router.bias",
}
for _g, _h in (("attn_q", "q_proj"), ("attn_k", "k_proj"), ("attn_v", "v_proj"),
               ("attn_output", "o_proj")):
    for _s in ("weight", "bias"):
        GPT_OSS_LAYER["%s.%s" % (_g, _s)] = "self_attn.%s.%s" % (_h, _s)
GPT_OSS_EXPERTS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
                   "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias")


def gpt_oss_config(meta, n_vocab, tied):
    """config.json of a gpt-oss file, in transformers' GptOssConfig fields."""
    g = lambda k, d=None: meta.get("gpt-oss." + k, d)  # noqa: E731
    heads, layers = g("attention.head_count"), g("block_count")
    pattern = g("attention.sliding_window_pattern", 2)
    if isinstance(pattern, list):
        if len(pattern) != layers:
            raise SystemExit("gguf_to_hf.py: gpt-oss.attention.sliding_window_pattern has %d "
                             "entries for %d layers" % (len(pattern), layers))
        sliding = [bool(x) for x in pattern]
    else:
        sliding = [pattern == 0 or i % pattern < pattern - 1 for i in range(layers)]
    n_experts = g("expert_count")
    if not n_experts:
        raise SystemExit("gguf_to_hf.py: gpt-oss without gpt-oss.expert_count")
    k = g("expert_used_count")
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
           "attention_bias": True, "hidden_act": "silu",
           "hidden_size": g("embedding_length"), "num_hidden_layers": layers,
           "num_attention_heads": heads,
           "num_key_value_heads": g("attention.head_count_kv", heads),
           "head_dim": g("attention.key_length", g("embedding_length") // heads),
           "intermediate_size": g("expert_feed_forward_length", g("feed_forward_length")),
           "num_local_experts": n_experts, "num_experts_per_tok": k, "experts_per_token": k,
           "vocab_size": n_vocab, "max_position_embeddings": g("context_length"),
           "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
           "rope_theta": g("rope.freq_base", 10000.0), "rope_scaling": None,
           "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
           "sliding_window": g("attention.sliding_window"), "swiglu_limit": 7.0,
           "tie_word_embeddings": tied, "torch_dtype": "float32"}
    rtype = g("rope.scaling.type")
    if rtype == "yarn":
        orig = g("rope.scaling.original_context_length", g("context_length"))
        rs = {"rope_type": "yarn", "factor": g("rope.scaling.factor"),
              "original_max_position_embeddings": orig,
              "beta_fast": g("rope.scaling.yarn_beta_fast", 32.0),
              "beta_slow": g("rope.scaling.yarn_beta_slow", 1.0), "truncate": False}
        if g("rope.scaling.yarn_attn_factor") is not None:
            rs["attention_factor"] = g("rope.scaling.yarn_attn_factor")
        cfg["rope_scaling"], cfg["initial_context_length"] = rs, orig
    elif rtype not in (None, "none"):
        raise SystemExit("gguf_to_hf.py: gpt-oss.rope.scaling.type %r is not converted" % rtype)
    return cfg


def gpt_oss_tensors(tensors):
    """{HF name: array} of a gpt-oss file's dequantized tensors ({GGUF name: array})."""
    out, experts = {}, {}
    for name, w in tensors.items():
        if name in TOP:
            out[TOP[name]] = w
            continue
        parts = name.split(".", 2)
        if parts[0] != "blk" or len(parts) != 3 or not parts[1].isdigit() or not (
                parts[2] in GPT_OSS_LAYER or parts[2] in GPT_OSS_EXPERTS):
            raise SystemExit("gguf_to_hf.py: tensor %s is not one of a gpt-oss model" % name)
        if parts[2] in GPT_OSS_EXPERTS:
            experts.setdefault(parts[1], {})[parts[2]] = w
        else:
            out["model.layers.%s.%s" % (parts[1], GPT_OSS_LAYER[parts[2]])] = w
    for layer, ex in sorted(experts.items(), key=lambda kv: int(kv[0])):
        missing = [n for n in GPT_OSS_EXPERTS if n not in ex]
        if missing:
            raise SystemExit("gguf_to_hf.py: blk.%s.%s is missing" % (layer, missing[0]))
        gate, up = ex["ffn_gate_exps.weight"], ex["ffn_up_exps.weight"]  # [E, I, H]
        if gate.shape != up.shape:
            raise SystemExit("gguf_to_hf.py: blk.%s's gate and up experts differ in shape" % layer)
        e, i, h = gate.shape
        gate_up = np.empty((e, 2 * i, h), dtype=gate.dtype)
        gate_up[:, 0::2], gate_up[:, 1::2] = gate, up
        gb, ub = ex["ffn_gate_exps.bias"], ex["ffn_up_exps.bias"]  # [E, I]
        gate_up_bias = np.empty((e, 2 * i), dtype=gb.dtype)
        gate_up_bias[:, 0::2], gate_up_bias[:, 1::2] = gb, ub
        p = "model.layers.%s.mlp.experts." % layer
        out[p + "gate_up_proj"] = gate_up.swapaxes(1, 2)            # [E, H, 2I]
        out[p + "gate_up_proj_bias"] = gate_up_bias
        out[p + "down_proj"] = ex["ffn_down_exps.weight"].swapaxes(1, 2)  # [E, I, H]
        out[p + "down_proj_bias"] = ex["ffn_down_exps.bias"]
    return out


# Qwen3.5's per-layer GGUF names (after "blk.N.") -> HF names (after "model.layers.N.")
QWEN35_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
    "attn_gate.weight": "linear_attn.in_proj_z.weight",
    "ssm_beta.weight": "linear_attn.in_proj_b.weight",
    "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_dt.bias": "linear_attn.dt_bias", "ssm_a": "linear_attn.A_log",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight", "ffn_down_exps.weight": "mlp.experts.down_proj",
    "ffn_gate_up_exps.weight": "mlp.experts.gate_up_proj",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
}
# the (1 + w) norms, stored with the 1 added
QWEN35_ONE_PLUS = ("attn_norm.weight", "post_attention_norm.weight", "attn_q_norm.weight",
                   "attn_k_norm.weight")
# the MTP block's own tensors (after "blk.L.") -> after "mtp."; the norms among them (1 + w)
QWEN35_NEXTN = {"nextn.eh_proj.weight": "fc.weight",
                "nextn.enorm.weight": "pre_fc_norm_embedding.weight",
                "nextn.hnorm.weight": "pre_fc_norm_hidden.weight",
                "nextn.shared_head_norm.weight": "norm.weight"}


def qwen35_config(meta, n_vocab, tied):
    """config.json of a qwen35 or qwen35moe file: the flat Qwen3_5ForCausalLM (or
    Qwen3_5MoeForCausalLM) layout, model_type qwen3_5_text (qwen3_5_moe_text)."""
    arch = meta["general.architecture"]
    g = lambda k, d=None: meta.get(arch + "." + k, d)  # noqa: E731
    moe = arch == "qwen35moe"
    heads = g("attention.head_count")
    n_mtp = g("nextn_predict_layers", 0)
    layers = g("block_count") - n_mtp
    if n_mtp > 1:
        raise SystemExit("gguf_to_hf.py: %s.nextn_predict_layers %d: one MTP layer is converted"
                         % (arch, n_mtp))
    head_dim = g("attention.key_length", g("embedding_length") // heads)
    rot = g("rope.dimension_count", head_dim)
    sections = list(g("rope.dimension_sections", [11, 11, 10, 0]))[:3]
    recurrent = g("attention.recurrent_layers")
    interval = g("full_attention_interval", 4)
    if recurrent is None:
        recurrent = [(i + 1) % interval != 0 for i in range(layers)]
    elif len(recurrent) != layers + n_mtp:
        raise SystemExit("gguf_to_hf.py: %s.attention.recurrent_layers has %d entries for %d "
                         "blocks" % (arch, len(recurrent), layers + n_mtp))
    nk, nv, d = g("ssm.group_count"), g("ssm.time_step_rank"), g("ssm.state_size")
    if g("ssm.inner_size") != nv * d:
        raise SystemExit("gguf_to_hf.py: %s.ssm.inner_size %s is not time_step_rank %d x "
                         "state_size %d" % (arch, g("ssm.inner_size"), nv, d))
    if g("rope.scaling.type") not in (None, "none"):
        raise SystemExit("gguf_to_hf.py: %s.rope.scaling.type %r is not converted"
                         % (arch, g("rope.scaling.type")))
    cfg = {"architectures": ["Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"],
           "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text",
           "attention_bias": False, "attn_output_gate": True, "hidden_act": "silu",
           "hidden_size": g("embedding_length"), "num_hidden_layers": layers,
           "num_attention_heads": heads,
           "num_key_value_heads": g("attention.head_count_kv", heads),
           "head_dim": head_dim, "full_attention_interval": interval,
           "layer_types": ["linear_attention" if r else "full_attention"
                           for r in recurrent[:layers]],
           "linear_conv_kernel_dim": g("ssm.conv_kernel"), "linear_key_head_dim": d,
           "linear_value_head_dim": d, "linear_num_key_heads": nk,
           "linear_num_value_heads": nv, "max_position_embeddings": g("context_length"),
           "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
           "rope_parameters": {"mrope_interleaved": True, "mrope_section": sections,
                               "partial_rotary_factor": rot / head_dim,
                               "rope_theta": g("rope.freq_base", 10000.0),
                               "rope_type": "default"},
           "mtp_num_hidden_layers": n_mtp, "mtp_use_dedicated_embeddings": False,
           "tie_word_embeddings": tied, "vocab_size": n_vocab, "torch_dtype": "float32"}
    if g("feed_forward_length") is not None:
        cfg["intermediate_size"] = g("feed_forward_length")
    elif not moe:
        raise SystemExit("gguf_to_hf.py: qwen35 without qwen35.feed_forward_length")
    if moe:  # llama.cpp's defaults where a width is missing
        k = g("expert_used_count")
        cfg.update({"num_experts": g("expert_count"), "num_experts_per_tok": k,
                    "moe_intermediate_size": g("expert_feed_forward_length",
                                               (g("feed_forward_length") or 0) // k),
                    "shared_expert_intermediate_size": g("expert_shared_feed_forward_length",
                                                         g("feed_forward_length"))})
    return cfg


def v_heads_grouped(t, axis, nk, per_k, d):
    """t with its value heads (d wide each along axis) moved back from llama.cpp's tiled order
    (head j * nk + g) to HF's grouped one (head g * per_k + j, the j-th of key head g)."""
    t = np.moveaxis(t, axis, 0)
    shape = t.shape
    t = t.reshape((per_k, nk, d) + shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(t, 0, axis)


def qwen35_hf_tensors(tensors, cfg):
    """{HF name: array} of a qwen35 or qwen35moe file's dequantized tensors ({GGUF name:
    array}), every transform of the converter undone: the 1 taken off the (1 + w) norms,
    ssm_a (-exp(A_log)) back to A_log, ssm_conv1d [C, K] to [C, 1, K], the value heads back in
    HF's grouped order, ffn_gate_exps and ffn_up_exps (or ffn_gate_up_exps) fused into
    mlp.experts.gate_up_proj [E, 2I, hidden], ffn_gate_inp_shexp as [1, hidden]; blocks past
    the decoder's are mtp.layers.*, their nextn.* tensors mtp.fc and the MTP norms."""
    layers, per_k = cfg["num_hidden_layers"], cfg["linear_num_value_heads"] // cfg[
        "linear_num_key_heads"]
    nk, d = cfg["linear_num_key_heads"], cfg["linear_value_head_dim"]
    key_rows = 2 * nk * cfg["linear_key_head_dim"]
    out, experts = {}, {}
    for name, w in tensors.items():
        if name in TOP:
            if name == "output_norm.weight":
                w = w - np.float32(1)
            out[TOP[name]] = w
            continue
        parts = name.split(".", 2)
        if parts[0] != "blk" or len(parts) != 3 or not parts[1].isdigit():
            raise SystemExit("gguf_to_hf.py: tensor %s is not one of a %s model"
                             % (name, cfg["model_type"]))
        block, rest = int(parts[1]), parts[2]
        p = ("model.layers.%d." % block if block < layers
             else "mtp.layers.%d." % (block - layers))
        if block >= layers and rest in QWEN35_NEXTN:
            if rest != "nextn.eh_proj.weight":
                w = w - np.float32(1)
            out["mtp." + QWEN35_NEXTN[rest]] = w
            continue
        if rest in ("ffn_gate_exps.weight", "ffn_up_exps.weight"):
            experts.setdefault(p, {})[rest] = w
            if len(experts[p]) == 2:
                ex = experts.pop(p)
                out[p + "mlp.experts.gate_up_proj"] = np.concatenate(
                    [ex["ffn_gate_exps.weight"], ex["ffn_up_exps.weight"]], axis=1)
            continue
        if rest not in QWEN35_LAYER:
            raise SystemExit("gguf_to_hf.py: tensor %s is not one of a %s model"
                             % (name, cfg["model_type"]))
        if rest in QWEN35_ONE_PLUS:
            w = w - np.float32(1)
        elif rest == "ssm_a":
            w = np.log(-w.astype(np.float64))
        elif rest == "ssm_conv1d.weight":
            w = w.reshape(w.shape[0], 1, w.shape[1])
        elif rest == "ffn_gate_inp_shexp.weight":
            w = w.reshape(1, -1)
        if per_k > 1 and rest in ("attn_qkv.weight", "ssm_conv1d.weight"):
            w = np.concatenate([w[:key_rows], v_heads_grouped(w[key_rows:], 0, nk, per_k, d)])
        elif per_k > 1 and rest == "attn_gate.weight":
            w = v_heads_grouped(w, 0, nk, per_k, d)
        elif per_k > 1 and rest in ("ssm_beta.weight", "ssm_alpha.weight", "ssm_dt.bias",
                                    "ssm_a"):
            w = v_heads_grouped(w, 0, nk, per_k, 1)
        elif per_k > 1 and rest == "ssm_out.weight":
            w = v_heads_grouped(w, 1, nk, per_k, d)
        out[p + QWEN35_LAYER[rest]] = w
    if experts:
        p = sorted(experts)[0]
        raise SystemExit("gguf_to_hf.py: %s has only %s" % (p, ", ".join(experts[p])))
    return out


def hf_config(meta, n_vocab, tied, sparse):
    """config.json of the file's <arch>.* hyper-parameters; sparse: the layers that hold
    experts (ffn_gate_inp)."""
    arch = meta.get("general.architecture")
    if arch not in ARCHS:
        raise SystemExit("gguf_to_hf.py: only general.architecture %s, not %r"
                         % (", ".join(ARCHS), arch))
    g = lambda k, d=None: meta.get(arch + "." + k, d)  # noqa: E731
    heads, layers = g("attention.head_count"), g("block_count")
    n_experts = g("expert_count", 0)
    if sparse and not n_experts:
        raise SystemExit("gguf_to_hf.py: layer %d has experts but the file has no "
                         "%s.expert_count" % (sparse[0], arch))
    if arch == "llama" and n_experts and len(sparse) != layers:
        raise SystemExit("gguf_to_hf.py: a llama file's experts must be in every layer (Mixtral)")
    if arch == "qwen3moe" and not n_experts:
        raise SystemExit("gguf_to_hf.py: qwen3moe without qwen3moe.expert_count")
    model = {"llama": ("LlamaForCausalLM", "llama"), "qwen3": ("Qwen3ForCausalLM", "qwen3"),
             "qwen3moe": ("Qwen3MoeForCausalLM", "qwen3_moe")}[arch]
    if arch == "llama" and n_experts:
        model = ("MixtralForCausalLM", "mixtral")
    cfg = {"architectures": [model[0]], "model_type": model[1],
           "hidden_size": g("embedding_length"), "num_hidden_layers": layers,
           "num_attention_heads": heads,
           "num_key_value_heads": g("attention.head_count_kv", heads),
           "intermediate_size": g("feed_forward_length"), "vocab_size": n_vocab,
           "max_position_embeddings": g("context_length"),
           "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
           "rope_theta": g("rope.freq_base", 10000.0), "tie_word_embeddings": tied,
           "torch_dtype": "float32"}
    if g("attention.key_length") is not None:
        cfg["head_dim"] = g("attention.key_length")
    if g("attention.sliding_window") is not None:
        cfg["sliding_window"] = g("attention.sliding_window")
    if model[1] == "mixtral":
        cfg.update({"num_local_experts": n_experts,
                    "num_experts_per_tok": g("expert_used_count")})
    if model[1] == "qwen3_moe":
        cfg.update({"num_experts": n_experts, "num_experts_per_tok": g("expert_used_count"),
                    "moe_intermediate_size": g("expert_feed_forward_length"),
                    "norm_topk_prob": bool(g("expert_weights_norm", True)),
                    "decoder_sparse_step": 1,
                    "mlp_only_layers": [i for i in range(layers) if i not in sparse]})
    return cfg


def hf_tensors(name, w, cfg):
    """(HF name, array) pairs of GGUF tensor name holding w (dequantized): one per expert
    for a stack of experts, with llama's q/k rows back in HF's order."""
    if name in TOP:
        return [(TOP[name], w)]
    parts = name.split(".")
    layer_names = dict(LAYER, **QWEN3_LAYER) if cfg["model_type"].startswith("qwen3") else LAYER
    moe = cfg["model_type"] in ("qwen3_moe", "mixtral")
    if parts[0] != "blk" or len(parts) != 4 or parts[3] != "weight" or not (
            parts[2] in layer_names or moe and parts[2] in MOE_LAYER):
        raise SystemExit("gguf_to_hf.py: tensor %s is not one of a %s model"
                         % (name, cfg["model_type"]))
    p = "model.layers.%s." % parts[1]
    if parts[2] in MOE_LAYER:
        hf = MOE_LAYER[parts[2]][cfg["model_type"] == "mixtral"]
        if parts[2] == "ffn_gate_inp":
            return [(p + hf + ".weight", w)]
        block, proj = hf.rsplit(".", 1)
        return [("%s%s.experts.%d.%s.weight" % (p, block, e, proj), w[e])
                for e in range(w.shape[0])]
    if cfg["model_type"] in ("llama", "mixtral") and parts[2] == "attn_q":
        w = unpermute(w, cfg["num_attention_heads"])
    elif cfg["model_type"] in ("llama", "mixtral") and parts[2] == "attn_k":
        w = unpermute(w, cfg["num_key_value_heads"])
    return [(p + layer_names[parts[2]] + ".weight", w)]


def convert(path, out_dir):
    """Write out_dir's config.json and model.safetensors from the GGUF file at path."""
    meta, tensors = read_gguf(path)
    tied = "output.weight" not in tensors
    n_vocab = tensors["token_embd.weight"][1][1]
    out = {}
    if meta.get("general.architecture") in ("qwen35", "qwen35moe"):
        cfg = qwen35_config(meta, n_vocab, tied)
        for hf, w in qwen35_hf_tensors({name: dequantize(*t)
                                        for name, t in tensors.items()}, cfg).items():
            out[hf] = np.ascontiguousarray(w, dtype="<f4")
    elif meta.get("general.architecture") == "gemma4":
        cfg = gemma4_config(meta, n_vocab, tied, tensors)
        for hf, w in gemma4_hf_tensors({name: dequantize(*t)
                                        for name, t in tensors.items()}).items():
            out[hf] = np.ascontiguousarray(w, dtype="<f4")
    elif meta.get("general.architecture") == "gpt-oss":
        cfg = gpt_oss_config(meta, n_vocab, tied)
        for hf, w in gpt_oss_tensors({name: dequantize(*t) for name, t in tensors.items()}).items():
            out[hf] = np.ascontiguousarray(w, dtype="<f4")
    else:
        sparse = sorted(int(n.split(".")[1]) for n in tensors
                        if n.startswith("blk.") and n.endswith(".ffn_gate_inp.weight"))
        cfg = hf_config(meta, n_vocab, tied, sparse)
        for name, (type_id, dims, raw) in tensors.items():
            for hf, w in hf_tensors(name, dequantize(type_id, dims, raw), cfg):
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
