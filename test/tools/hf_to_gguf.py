#!/usr/bin/python3
"""Convert a small HF checkpoint (as gen_model.py makes them) to one GGUF file.

    hf_to_gguf.py MODEL_DIR OUT.gguf [--eot-id ID] [--mtp] [--fuse-gate-up-exps]
                  [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|mxfp4]

Written from llama.cpp's conventions (its key names and what its converter does to each
family), sharing no code with it:
  - keys: general.architecture and the <arch>.* hyper-parameters (context_length,
    embedding_length, block_count, feed_forward_length, attention.head_count[_kv],
    attention.key_length/value_length, attention.layer_norm_rms_epsilon, rope.freq_base,
    rope.dimension_count, rope.scaling.*, attention.sliding_window), tokenizer.ggml.bos/eos ids;
  - llama and mistral (general.architecture "llama"): the q and k projections are permuted
    within each head so that RoPE rotates adjacent pairs (row 2i, 2i+1 of a head are its HF
    rows i and i + head_dim/2);
  - llama3 rope scaling: the tensor rope_freqs.weight, one divisor of the base frequency per
    dimension pair;
  - phi3: the fused attn_qkv and ffn_up (gate then up) tensors as the checkpoint has them;
    LongRoPE as rope_factors_long/short.weight, rope.scaling.attn_factor and
    rope.scaling.original_context_length;
  - gemma3: every norm stored with the 1 of (1 + w) added; rope.freq_base_swa (the local
    base) and attention.sliding_window_pattern;
  - tied embeddings: no output.weight;
  - mixtures of experts, as llama.cpp's converter stacks them: a sparse layer's router is
    blk.N.ffn_gate_inp.weight (ne [hidden, experts]) and its experts' gate, up and down
    projections are blk.N.ffn_gate_exps, ffn_up_exps and ffn_down_exps.weight, the experts
    along a new outermost dimension (numpy [experts, rows, cols], GGUF ne [cols, rows,
    experts]); <arch>.expert_count and <arch>.expert_used_count;
  - qwen3_moe (general.architecture "qwen3moe"): qwen3's keys and tensors (no q/k
    permutation), qwen3moe.expert_feed_forward_length (moe_intermediate_size) and
    feed_forward_length (intermediate_size).  Two things llama.cpp's qwen3moe does not
    have are written so the file still says them: a dense layer (mlp_only_layers,
    decoder_sparse_step) keeps ffn_gate, ffn_up and ffn_down, and norm_topk_prob false is
    qwen3moe.expert_weights_norm = false (the key llama.cpp's other MoE architectures read;
    llama.cpp's qwen3moe always renormalises);
  - mixtral (general.architecture "llama", q and k permuted as llama's): w1, w3 and w2 are
    the gate, up and down experts, feed_forward_length the experts' width;
  - gpt_oss (general.architecture "gpt-oss", as llama.cpp's converter writes GptOss, no q/k
    permutation): feed_forward_length and expert_feed_forward_length both intermediate_size,
    expert_count num_local_experts, expert_used_count num_experts_per_tok,
    attention.sliding_window, YaRN as rope.scaling.type "yarn", factor,
    original_context_length, yarn_beta_fast and yarn_beta_slow.  The tensors: blk.N.attn_norm,
    post_attention_norm (post_attention_layernorm), attn_q, attn_k, attn_v and attn_output
    with their biases, attn_sinks.weight (self_attn.sinks), ffn_gate_inp.weight and .bias
    (mlp.router), and the stacked experts split and turned to llama.cpp's [experts, rows,
    cols]: gate_up_proj [E, hidden, 2I] (stored [in, out], gate the even columns, up the odd)
    becomes ffn_gate_exps.weight and ffn_up_exps.weight [E, I, hidden] (ne [hidden, I, E]),
    down_proj [E, I, hidden] ffn_down_exps.weight [E, hidden, I], gate_up_proj_bias the F32
    ffn_gate_exps.bias and ffn_up_exps.bias [E, I] (even and odd), down_proj_bias
    ffn_down_exps.bias [E, hidden].  llama.cpp takes layer i as sliding when i is even (its
    gpt-oss pattern of 2, layer 0 sliding), as gpt-oss's layer_types alternate; other
    layer_types are written as attention.sliding_window_pattern, one bool per layer (the
    form llama.cpp reads for command-r and gemma3n).  Three things the GGUF cannot say are
    refused rather than dropped: a swiglu_limit other than 7 or swiglu_alpha other than 1.702
    (llama.cpp's fixed constants) and YaRN with truncate not false (every gpt-oss config's;
    GGUF has no key for it and gguf_to_hf.py writes it back false).
  - qwen3_5 (either layout; general.architecture "qwen35", as llama.cpp's converter writes
    Qwen3_5ForConditionalGeneration and Qwen3_5ForCausalLM): the text model only (model.visual.*
    left out, and mtp.* unless --mtp, below).  Keys: context_length,
    embedding_length, block_count, feed_forward_length, attention.head_count[_kv],
    attention.key_length and value_length (head_dim), attention.layer_norm_rms_epsilon,
    rope.freq_base (rope_theta), rope.dimension_count (int(head_dim * partial_rotary_factor)),
    rope.dimension_sections (int32 [s0, s1, s2, 0] of mrope_section, [11, 11, 10, 0] without
    one), ssm.conv_kernel, ssm.state_size (linear_key_head_dim), ssm.group_count (nk),
    ssm.time_step_rank (nv), ssm.inner_size (nv * linear_value_head_dim),
    attention.recurrent_layers (one bool per layer, true for linear_attention; written when
    config.json lists layer_types) and full_attention_interval.  llama.cpp takes the value
    head's width from ssm.state_size too, so dk != dv is refused.  Tensors: blk.N.attn_norm
    (input_layernorm), post_attention_norm (post_attention_layernorm), the full-attention
    layers' attn_q (q_proj as stored: per head its query rows, then its gate rows), attn_k,
    attn_v, attn_output, attn_q_norm and attn_k_norm, the linear ones' attn_qkv (in_proj_qkv),
    attn_gate (in_proj_z), ssm_beta (in_proj_b), ssm_alpha (in_proj_a), ssm_conv1d (conv1d
    [C, 1, K] as [C, K], F32 as llama.cpp keeps it), ssm_dt.bias (dt_bias), ssm_a (no
    .weight: -exp(A_log)), ssm_norm (linear_attn.norm) and ssm_out (out_proj), and ffn_gate,
    ffn_up and ffn_down; every (1 + w) norm (attn_norm, post_attention_norm, attn_q_norm,
    attn_k_norm, output_norm) is stored with the 1 added, ssm_norm as it is.  With nv > nk
    the value heads go from HF's grouped order (value head g * nv/nk + j the j-th of key head
    g) to llama.cpp's tiled one (at j * nk + g): the V rows of attn_qkv and the V channels of
    ssm_conv1d, attn_gate's rows, ssm_beta's and ssm_alpha's rows, ssm_a and ssm_dt, and
    ssm_out's columns;
  - qwen3_5_moe (either layout; general.architecture "qwen35moe", as llama.cpp's converter
    writes Qwen3_5MoeForConditionalGeneration and Qwen3_5MoeForCausalLM): qwen3_5's keys and
    transforms, but no feed_forward_length (the config has no intermediate_size; written if
    it has one), and expert_count (num_experts), expert_used_count (num_experts_per_tok),
    expert_feed_forward_length (moe_intermediate_size) and expert_shared_feed_forward_length
    (shared_expert_intermediate_size); no expert_weights_norm (llama.cpp's qwen35moe always
    renormalises, as HF's router does).  Every layer's MLP: ffn_gate_inp (mlp.gate, F32 [E,
    hidden], ne [hidden, E]), the released fused experts mlp.experts.gate_up_proj [E, 2I,
    hidden] split into ffn_gate_exps (its first I rows per expert) and ffn_up_exps (the last
    I), both [E, I, hidden] (ne [hidden, I, E]), mlp.experts.down_proj as ffn_down_exps [E,
    hidden, I] (ne [I, hidden, E]), the shared expert as ffn_gate_shexp, ffn_up_shexp [S,
    hidden] and ffn_down_shexp [hidden, S], and mlp.shared_expert_gate [1, hidden] as the F32
    ffn_gate_inp_shexp (ne [hidden, 1]).  Per-expert tensors (mlp.experts.E.{gate,up,
    down}_proj.weight) are stacked likewise.  --fuse-gate-up-exps keeps gate_up_proj whole as
    ffn_gate_up_exps [E, 2I, hidden] (ne [hidden, 2I, E]: gate rows, then up rows), as
    llama.cpp's converter does with that option.
  - --mtp (qwen3_5, qwen3_5_moe): the multi-token-prediction head too, as llama.cpp's
    converter writes it unless told --no-mtp: block_count is num_hidden_layers +
    mtp_num_hidden_layers, <arch>.nextn_predict_layers mtp_num_hidden_layers,
    attention.recurrent_layers gets a false per MTP layer; mtp.layers.j.* are block
    num_hidden_layers + j, named and transformed as a full-attention decoder layer's (norms
    with the 1 added, the MoE block's tensors for qwen3_5_moe), and on block L =
    num_hidden_layers mtp.fc is blk.L.nextn.eh_proj [hidden, 2 hidden] (ne [2 hidden,
    hidden]), mtp.pre_fc_norm_embedding blk.L.nextn.enorm, mtp.pre_fc_norm_hidden
    blk.L.nextn.hnorm and mtp.norm blk.L.nextn.shared_head_norm (those three with the 1
    added).  llama.cpp checks their shapes and then leaves them unused unless asked to load
    the MTP layers;
  - gemma4 (either layout; general.architecture "gemma4", as llama.cpp's converter writes
    Gemma4ForConditionalGeneration and Gemma4ForCausalLM): the text model only (vision and
    audio tensors left out).  Keys: context_length, embedding_length, block_count,
    feed_forward_length (an array per layer under use_double_wide_mlp: 2 intermediate_size on
    the KV-shared layers), attention.head_count, attention.head_count_kv (an array per layer,
    num_global_key_value_heads on full layers, when attention_k_eq_v gives them),
    attention.key_length and value_length (global_head_dim), key_length_swa and
    value_length_swa (head_dim), attention.layer_norm_rms_epsilon, rope.freq_base (full
    layers' rope_theta), rope.freq_base_swa (sliding layers'), rope.dimension_count
    (global_head_dim: proportional RoPE turns all of it) and rope.dimension_count_swa
    (head_dim), attention.sliding_window, attention.sliding_window_pattern (one bool per
    layer, true for sliding), attention.shared_kv_layers (num_kv_shared_layers),
    embedding_length_per_layer_input (hidden_size_per_layer_input, 0 without PLE),
    final_logit_softcapping when set, and with enable_moe_block expert_count, expert_used_count
    and expert_feed_forward_length.  Tensors: no norm shift (Gemma 4's norms scale by w);
    token_embd, output_norm, per_layer_token_embd (embed_tokens_per_layer), per_layer_model_proj
    (per_layer_model_projection), per_layer_proj_norm (per_layer_projection_norm); per layer
    attn_norm, attn_q, attn_q_norm, attn_k, attn_k_norm, attn_v, attn_output,
    post_attention_norm, ffn_norm (pre_feedforward_layernorm), ffn_gate, ffn_up, ffn_down,
    post_ffw_norm, inp_gate (per_layer_input_gate), proj (per_layer_projection), post_norm
    (post_per_layer_input_norm), layer_output_scale.weight (layer_scalar, [1]); the MoE
    block's ffn_gate_inp.weight (router.proj), ffn_gate_inp.scale (router.scale),
    ffn_down_exps.scale (router.per_expert_scale), ffn_gate_up_exps.weight (experts.gate_up_proj
    kept fused, [E, 2I, hidden]), ffn_down_exps.weight, pre_ffw_norm_2, post_ffw_norm_1 and
    post_ffw_norm_2; and rope_freqs.weight [global_head_dim / 2]: 1 for the
    int(global_head_dim * partial_rotary_factor / 2) rotated pairs, 1e30 for the others (their
    frequency divided to nothing), which is how llama.cpp's neox RoPE over the whole head
    gives proportional RoPE;
Matrices are stored in --type (the embeddings and the experts too: every row of every
expert quantized alone, rows along the innermost dimension; mxfp4 is every matrix as
gpt-oss's experts are, 32-element blocks of 4-bit floats under a shared power of two);
norms, biases (gpt-oss's 2-d expert biases too), sinks, factors and the routers stay F32,
as llama.cpp's converter keeps every 1-d tensor, every non-".weight" tensor, ffn_gate_inp and
ffn_gate_inp_shexp.
The tokenizer's metadata is gguf_vocab.py's tokenizer_kvs(model_dir); config.json's bos and eos
ids fill in what it lacks.

For the loader's error tests, --break WHAT:NAME writes one thing wrong: missing-key (the key
left out), key-type (the key written as a string), absurd-value (the integer key as 2^31),
missing-tensor, shape (the tensor's two dims swapped), rank (a dim of 1 added to the
tensor), type-id (the tensor stored as Q8_1, a ggml type cbllm does not load), ragged (the
tensor as Q8_0 with rows one element short of whole blocks).
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_vocab  # noqa: E402
import gguf_writer  # noqa: E402
import quant  # noqa: E402
from gen_model import f32_to_bf16_bits  # noqa: E402
from reference import load_weights  # noqa: E402

# --type: (ggml type id, block quantizer or None)
# --type -> ggml type id; the quantized ones are quant.py's (its name in upper case)
TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7,
         "q2_k": 10, "q3_k": 11, "q4_k": 12, "q5_k": 13, "q6_k": 14, "mxfp4": 39}

GGUF_ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
             "gemma3_text": "gemma3", "phi3": "phi3", "qwen3_moe": "qwen3moe",
             "mixtral": "llama", "gpt_oss": "gpt-oss", "qwen3_5": "qwen35",
             "qwen3_5_text": "qwen35", "qwen3_5_moe": "qwen35moe", "qwen3_5_moe_text": "qwen35moe",
             "gemma4": "gemma4", "gemma4_text": "gemma4"}
QWEN35_MULTIMODAL = ("qwen3_5", "qwen3_5_moe")  # the text model's fields under text_config

# HF tensor name (after "model.layers.N.") -> GGUF name (after "blk.N."); Gemma's two
# sandwich norms differ, below
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "self_attn.o_proj.weight": "attn_output.weight", "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",
}
# an expert's projection (after "experts.E.") -> its stacked GGUF tensor (after "blk.N.")
EXPERT_NAMES = {"gate_proj.weight": "ffn_gate_exps.weight", "up_proj.weight": "ffn_up_exps.weight",
                "down_proj.weight": "ffn_down_exps.weight", "w1.weight": "ffn_gate_exps.weight",
                "w3.weight": "ffn_up_exps.weight", "w2.weight": "ffn_down_exps.weight"}
GEMMA_LAYER_NAMES = {"post_attention_layernorm.weight": "post_attention_norm.weight"}
MODEL_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
               "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}


# gpt-oss's own per-layer names (after "model.layers.N."); its experts are split below
GPT_OSS_LAYER_NAMES = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight", "mlp.router.bias": "ffn_gate_inp.bias",
}


def gpt_oss_tensors(hf, t):
    """[(GGUF name, array)] of one gpt-oss checkpoint tensor: its stacked experts split into
    gate and up (even and odd columns of gate_up) and turned from [E, in, out] to llama.cpp's
    [E, out, in]; everything else one tensor under its llama.cpp name."""
    parts = hf.split(".", 3)
    if parts[:2] != ["model", "layers"] or len(parts) != 4:
        return [(gguf_name(hf, False), t)]
    p, rest = "blk.%s." % parts[2], parts[3]
    if rest == "mlp.experts.gate_up_proj":
        if t.ndim != 3 or t.shape[2] % 2:
            raise SystemExit("hf_to_gguf.py: %s has shape %s, not [E, H, 2I]" % (hf, t.shape))
        t = t.swapaxes(1, 2)  # [E, 2I, H]
        return [(p + "ffn_gate_exps.weight", t[:, 0::2]), (p + "ffn_up_exps.weight", t[:, 1::2])]
    if rest == "mlp.experts.gate_up_proj_bias":
        return [(p + "ffn_gate_exps.bias", t[..., 0::2]), (p + "ffn_up_exps.bias", t[..., 1::2])]
    if rest == "mlp.experts.down_proj":
        return [(p + "ffn_down_exps.weight", t.swapaxes(1, 2))]
    if rest == "mlp.experts.down_proj_bias":
        return [(p + "ffn_down_exps.bias", t)]
    name = GPT_OSS_LAYER_NAMES.get(rest) or LAYER_NAMES.get(rest)
    if name is None:
        raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
    return [(p + name, t)]


def gpt_oss_checks(cfg):
    """Refuse what a gpt-oss GGUF cannot say; the layer_types as a list of bools (sliding)."""
    if float(cfg.get("swiglu_limit", 7.0)) != 7.0:
        raise SystemExit("hf_to_gguf.py: swiglu_limit %s: llama.cpp's gpt-oss fixes it at 7"
                         % cfg["swiglu_limit"])
    if float(cfg.get("swiglu_alpha", 1.702)) != 1.702:
        raise SystemExit("hf_to_gguf.py: swiglu_alpha %s: llama.cpp's gpt-oss fixes it at 1.702"
                         % cfg["swiglu_alpha"])
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "yarn" and rs.get("truncate", True) is not False:
        raise SystemExit("hf_to_gguf.py: gpt-oss's YaRN with truncate %s: a gpt-oss GGUF has no "
                         "key for it and means truncate false" % rs.get("truncate", True))
    n = cfg["num_hidden_layers"]
    kinds = cfg.get("layer_types")
    if kinds is None:
        return [i % 2 == 0 for i in range(n)]
    if len(kinds) != n or any(k not in ("sliding_attention", "full_attention") for k in kinds):
        raise SystemExit("hf_to_gguf.py: layer_types %r are not %d sliding_attention or "
                         "full_attention" % (kinds, n))
    return [k == "sliding_attention" for k in kinds]


# Qwen3.5's per-layer names (after "model.layers.N." or "model.language_model.layers.N.")
QWEN35_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias", "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    # Qwen3.5-MoE's sparse block; mlp.experts.gate_up_proj is split below
    "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
# the multi-token-prediction head's own tensors (after "mtp.") -> after "blk.L." (L the first
# block after the decoder's), as llama.cpp's converter renames them; its layers' tensors are
# named as a decoder layer's
QWEN35_MTP_NAMES = {"fc.weight": "nextn.eh_proj.weight",
                    "pre_fc_norm_embedding.weight": "nextn.enorm.weight",
                    "pre_fc_norm_hidden.weight": "nextn.hnorm.weight",
                    "norm.weight": "nextn.shared_head_norm.weight"}
# the norms that scale by (1 + w): stored with the 1 added
QWEN35_ONE_PLUS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                   "self_attn.q_norm.weight", "self_attn.k_norm.weight")


def add_qwen35_hparams(w, text, arch, n_mtp):
    """The qwen35.* (or qwen35moe.*) keys of Qwen3.5's text config, as llama.cpp's converter
    writes them; n_mtp multi-token-prediction layers counted in block_count."""
    def key(k):
        return arch + "." + k
    n_heads = text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // n_heads
    nk, nv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    dk, dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
    if dk != dv:
        raise SystemExit("hf_to_gguf.py: linear_key_head_dim %d and linear_value_head_dim %d "
                         "differ: llama.cpp's qwen35 takes both from ssm.state_size" % (dk, dv))
    if nv % nk:
        raise SystemExit("hf_to_gguf.py: linear_num_value_heads must be a multiple of "
                         "linear_num_key_heads")
    rp = text.get("rope_parameters") or {}
    if rp.get("rope_type", "default") != "default":
        raise SystemExit("hf_to_gguf.py: qwen3_5 rope_type %s is not converted" % rp["rope_type"])
    factor = rp.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    section = list(rp.get("mrope_section", [11, 11, 10]))
    section = (section + [0] * 4)[:4]
    w.add(key("context_length"), "uint32", text.get("max_position_embeddings", 2048))
    w.add(key("embedding_length"), "uint32", text["hidden_size"])
    w.add(key("block_count"), "uint32", text["num_hidden_layers"] + n_mtp)
    if text.get("intermediate_size") is not None:  # Qwen3.5-MoE's config has none
        w.add(key("feed_forward_length"), "uint32", text["intermediate_size"])
    w.add(key("attention.head_count"), "uint32", n_heads)
    w.add(key("attention.head_count_kv"), "uint32", text.get("num_key_value_heads") or n_heads)
    w.add(key("attention.key_length"), "uint32", head_dim)
    w.add(key("attention.value_length"), "uint32", head_dim)
    w.add(key("attention.layer_norm_rms_epsilon"), "float32", text.get("rms_norm_eps", 1e-6))
    if arch == "qwen35moe":
        w.add(key("expert_count"), "uint32", text["num_experts"])
        w.add(key("expert_used_count"), "uint32", text["num_experts_per_tok"])
        w.add(key("expert_feed_forward_length"), "uint32", text["moe_intermediate_size"])
        w.add(key("expert_shared_feed_forward_length"), "uint32",
              text["shared_expert_intermediate_size"])
    w.add(key("rope.freq_base"), "float32",
          float(rp.get("rope_theta", text.get("rope_theta", 10000.0))))
    w.add(key("rope.dimension_count"), "uint32", int(head_dim * factor))
    w.add(key("rope.dimension_sections"), "array", ("int32", section))
    w.add(key("ssm.conv_kernel"), "uint32", text["linear_conv_kernel_dim"])
    w.add(key("ssm.state_size"), "uint32", dk)
    w.add(key("ssm.group_count"), "uint32", nk)
    w.add(key("ssm.time_step_rank"), "uint32", nv)
    w.add(key("ssm.inner_size"), "uint32", nv * dv)
    kinds = text.get("layer_types")
    if kinds is not None:
        if len(kinds) != text["num_hidden_layers"]:
            raise SystemExit("hf_to_gguf.py: layer_types has %d entries for %d layers"
                             % (len(kinds), text["num_hidden_layers"]))
        w.add(key("attention.recurrent_layers"), "array",
              ("bool", [k == "linear_attention" for k in kinds] + [False] * n_mtp))
    w.add(key("full_attention_interval"), "uint32", text.get("full_attention_interval", 4))
    if n_mtp:
        w.add(key("nextn_predict_layers"), "uint32", n_mtp)
    w.add(key("vocab_size"), "uint32", text["vocab_size"])


def v_heads_tiled(t, axis, nk, per_k, d):
    """t with its value heads (d wide each along axis) moved from HF's grouped order, head
    g * per_k + j the j-th of key head g, to llama.cpp's tiled one, that head at j * nk + g."""
    t = np.moveaxis(t, axis, 0)
    shape = t.shape
    t = t.reshape((nk, per_k, d) + shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(t, 0, axis)


def fuse_experts(weights, n):
    """weights with any per-expert tensors (X.mlp.experts.E.{gate,up,down}_proj.weight, as
    older checkpoints store them) replaced by the released stacked ones, X.mlp.experts.gate_up_proj
    [E, 2 I, hidden] (gate rows, then up rows) and X.mlp.experts.down_proj [E, hidden, I], in
    the place of their last expert; n the experts per layer."""
    pending, out = {}, {}
    for name, t in weights.items():
        head, sep, tail = name.partition(".mlp.experts.")
        parts = tail.split(".")
        if not sep or len(parts) != 3 or not parts[0].isdigit():
            out[name] = t
            continue
        if parts[1:] not in (["gate_proj", "weight"], ["up_proj", "weight"],
                             ["down_proj", "weight"]):
            raise SystemExit("hf_to_gguf.py: unknown tensor %s" % name)
        mats = pending.setdefault(head, {})
        if int(parts[0]) >= n or (int(parts[0]), parts[1]) in mats:
            raise SystemExit("hf_to_gguf.py: tensor %s: expert %s of %d" % (name, parts[0], n))
        mats[(int(parts[0]), parts[1])] = t
        if len(mats) == 3 * n:
            p = head + ".mlp.experts."
            out[p + "gate_up_proj"] = np.stack([np.concatenate([mats[(e, "gate_proj")],
                                                                mats[(e, "up_proj")]])
                                                for e in range(n)])
            out[p + "down_proj"] = np.stack([mats[(e, "down_proj")] for e in range(n)])
            del pending[head]
    if pending:
        raise SystemExit("hf_to_gguf.py: %s.mlp.experts lacks experts" % sorted(pending)[0])
    return out


def qwen35_tensors(weights, text, tied, n_mtp=0, fuse_gate_up=False):
    """[(GGUF name, array)] of a Qwen3.5 or Qwen3.5-MoE checkpoint's text model in file order,
    the vision tower (model.visual.*) left out and the multi-token-prediction head (mtp.*) too
    unless n_mtp (then its layers are blocks num_hidden_layers..., fc, the two pre-fc norms and
    its norm that first block's nextn.* tensors); (1 + w) norms with the 1 added, A_log as
    -exp(A_log), conv1d.weight [C, 1, K] as [C, K], with nv > nk the value heads in llama.cpp's
    tiled order, and the fused experts split into gate and up (kept whole as ffn_gate_up_exps
    with fuse_gate_up)."""
    nk, nv = text["linear_num_key_heads"], text["linear_num_value_heads"]
    dk, dv = text["linear_key_head_dim"], text["linear_value_head_dim"]
    per_k, key_rows = nv // nk, 2 * nk * dk
    first_mtp = text["num_hidden_layers"]
    out = []
    for hf, t in fuse_experts(weights, text.get("num_experts", 0)).items():
        if hf.startswith("model.visual.") or (tied and hf == "lm_head.weight"):
            continue
        if hf.startswith("mtp."):
            if not n_mtp:
                continue
            rest = hf[len("mtp."):]
            if rest in QWEN35_MTP_NAMES:  # the norms among them (1 + w)
                if QWEN35_MTP_NAMES[rest].endswith("norm.weight"):
                    t = (t.astype(np.float32) + np.float32(1)).astype(np.float64)
                out.append(("blk.%d.%s" % (first_mtp, QWEN35_MTP_NAMES[rest]), t))
                continue
            parts = rest.split(".", 2)  # layers, j, rest
            if len(parts) != 3 or parts[0] != "layers" or not parts[1].isdigit() or \
                    int(parts[1]) >= n_mtp:
                raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
            out += qwen35_layer_tensors(first_mtp + int(parts[1]), parts[2], t, hf, nk,
                                        per_k, key_rows, dv, fuse_gate_up)
            continue
        name = hf.replace("model.language_model.", "model.", 1)
        if name in MODEL_NAMES:
            if name == "model.norm.weight":
                t = (t.astype(np.float32) + np.float32(1)).astype(np.float64)
            out.append((MODEL_NAMES[name], t))
            continue
        parts = name.split(".", 3)
        if len(parts) != 4 or parts[:2] != ["model", "layers"] or not parts[2].isdigit():
            raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
        out += qwen35_layer_tensors(int(parts[2]), parts[3], t, hf, nk, per_k, key_rows, dv,
                                    fuse_gate_up)
    return out


def qwen35_layer_tensors(layer, rest, t, hf, nk, per_k, key_rows, dv, fuse_gate_up=False):
    """[(GGUF name, array)] of one tensor of Qwen3.5 decoder layer `layer` (rest: its name
    after the layer prefix)."""
    p = "blk.%d." % layer
    if rest == "mlp.experts.gate_up_proj":  # [E, 2 I, hidden]: gate rows, then up rows
        if t.ndim != 3 or t.shape[1] % 2:
            raise SystemExit("hf_to_gguf.py: %s has shape %s, not [E, 2I, H]" % (hf, t.shape))
        if fuse_gate_up:
            return [(p + "ffn_gate_up_exps.weight", t)]
        half = t.shape[1] // 2
        return [(p + "ffn_gate_exps.weight", t[:, :half]), (p + "ffn_up_exps.weight", t[:, half:])]
    if rest not in QWEN35_LAYER_NAMES:
        raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
    if rest in QWEN35_ONE_PLUS:
        t = (t.astype(np.float32) + np.float32(1)).astype(np.float64)
    elif rest == "linear_attn.A_log":
        t = -np.exp(t)
    elif rest == "linear_attn.conv1d.weight":
        t = t.reshape(t.shape[0], t.shape[-1])
    if per_k > 1 and rest.startswith("linear_attn."):
        if rest in ("linear_attn.in_proj_qkv.weight", "linear_attn.conv1d.weight"):
            t = np.concatenate([t[:key_rows], v_heads_tiled(t[key_rows:], 0, nk, per_k, dv)])
        elif rest == "linear_attn.in_proj_z.weight":
            t = v_heads_tiled(t, 0, nk, per_k, dv)
        elif rest in ("linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight",
                      "linear_attn.dt_bias", "linear_attn.A_log"):
            t = v_heads_tiled(t, 0, nk, per_k, 1)
        elif rest == "linear_attn.out_proj.weight":
            t = v_heads_tiled(t, 1, nk, per_k, dv)
    return [(p + QWEN35_LAYER_NAMES[rest], t)]


GEMMA4_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
    "post_per_layer_input_norm.weight": "post_norm.weight",
    "layer_scalar": "layer_output_scale.weight",
    "router.proj.weight": "ffn_gate_inp.weight", "router.scale": "ffn_gate_inp.scale",
    "router.per_expert_scale": "ffn_down_exps.scale",
    "experts.gate_up_proj": "ffn_gate_up_exps.weight", "experts.down_proj": "ffn_down_exps.weight",
    "pre_feedforward_layernorm_2.weight": "pre_ffw_norm_2.weight",
    "post_feedforward_layernorm_1.weight": "post_ffw_norm_1.weight",
    "post_feedforward_layernorm_2.weight": "post_ffw_norm_2.weight",
}
GEMMA4_MODEL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "model.embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
    "model.per_layer_model_projection.weight": "per_layer_model_proj.weight",
    "model.per_layer_projection_norm.weight": "per_layer_proj_norm.weight",
}
GEMMA4_SKIPPED = ("model.vision_tower.", "model.audio_tower.", "model.embed_vision.",
                  "model.embed_audio.")


def gemma4_text(cfg):
    """Gemma 4's text fields (text_config in the released layout)."""
    return cfg["text_config"] if cfg.get("model_type") == "gemma4" else cfg


def gemma4_layer_types(text):
    """layer_types, the last forced full as HF's config does."""
    n = text["num_hidden_layers"]
    types = list(text.get("layer_types") or [
        "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)])
    types[-1] = "full_attention"
    return types


def add_gemma4_hparams(w, text):
    """The gemma4.* keys."""
    def key(k):
        return "gemma4." + k
    n = text["num_hidden_layers"]
    types = gemma4_layer_types(text)
    swa = [t == "sliding_attention" for t in types]
    n_shared = text.get("num_kv_shared_layers", 0) or 0
    hd = text["head_dim"]
    ghd = text.get("global_head_dim") or hd
    w.add(key("context_length"), "uint32", text.get("max_position_embeddings", 131072))
    w.add(key("embedding_length"), "uint32", text["hidden_size"])
    w.add(key("block_count"), "uint32", n)
    ff = text["intermediate_size"]
    if text.get("use_double_wide_mlp"):
        w.add(key("feed_forward_length"), "array",
              ("uint32", [ff * (2 if i >= n - n_shared else 1) for i in range(n)]))
    else:
        w.add(key("feed_forward_length"), "uint32", ff)
    w.add(key("attention.head_count"), "uint32", text["num_attention_heads"])
    nkv = text["num_key_value_heads"]
    gkv = text.get("num_global_key_value_heads")
    if text.get("attention_k_eq_v") and gkv is not None:
        w.add(key("attention.head_count_kv"), "array",
              ("uint32", [nkv if s else gkv for s in swa]))
    else:
        w.add(key("attention.head_count_kv"), "uint32", nkv)
    w.add(key("attention.key_length"), "uint32", ghd)
    w.add(key("attention.value_length"), "uint32", ghd)
    w.add(key("attention.key_length_swa"), "uint32", hd)
    w.add(key("attention.value_length_swa"), "uint32", hd)
    w.add(key("attention.layer_norm_rms_epsilon"), "float32", text.get("rms_norm_eps", 1e-6))
    rp = text["rope_parameters"]
    full, slid = rp["full_attention"], rp["sliding_attention"]
    if full.get("rope_type") != "proportional" or slid.get("rope_type", "default") != "default":
        raise SystemExit("hf_to_gguf.py: gemma4 needs proportional full and default sliding RoPE")
    if full.get("factor", 1.0) != 1.0 or slid.get("partial_rotary_factor", 1.0) != 1.0:
        raise SystemExit("hf_to_gguf.py: gemma4 RoPE factor or sliding partial rotary")
    w.add(key("rope.freq_base"), "float32", float(full["rope_theta"]))
    w.add(key("rope.freq_base_swa"), "float32", float(slid["rope_theta"]))
    w.add(key("rope.dimension_count"), "uint32", ghd)
    w.add(key("rope.dimension_count_swa"), "uint32", hd)
    w.add(key("attention.sliding_window"), "uint32", text.get("sliding_window", 512))
    w.add(key("attention.sliding_window_pattern"), "array", ("bool", swa))
    w.add(key("attention.shared_kv_layers"), "uint32", n_shared)
    w.add(key("embedding_length_per_layer_input"), "uint32",
          text.get("hidden_size_per_layer_input") or 0)
    if text.get("final_logit_softcapping"):
        w.add(key("final_logit_softcapping"), "float32", float(text["final_logit_softcapping"]))
    if text.get("enable_moe_block"):
        w.add(key("expert_count"), "uint32", text["num_experts"])
        w.add(key("expert_used_count"), "uint32", text["top_k_experts"])
        w.add(key("expert_feed_forward_length"), "uint32", text["moe_intermediate_size"])
    w.add(key("vocab_size"), "uint32", text["vocab_size"])
    n_rot = int(ghd * full.get("partial_rotary_factor", 1.0) / 2)
    return np.array([1.0] * n_rot + [1e30] * (ghd // 2 - n_rot), dtype="<f4")


def gemma4_tensors(weights, tied):
    """(GGUF name, array) of a Gemma 4 checkpoint's text tensors, in file order."""
    out = []
    for hf, t in weights.items():
        if hf.startswith("model.language_model."):
            hf = "model." + hf[len("model.language_model."):]
        elif hf.startswith(GEMMA4_SKIPPED):
            continue
        if hf == "lm_head.weight" and tied:
            continue
        if hf in GEMMA4_MODEL_NAMES:
            out.append((GEMMA4_MODEL_NAMES[hf], t))
            continue
        parts = hf.split(".", 3)
        rest = parts[3] if len(parts) == 4 and parts[:2] == ["model", "layers"] else None
        if rest not in GEMMA4_LAYER_NAMES:
            raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
        out.append(("blk.%s.%s" % (parts[2], GEMMA4_LAYER_NAMES[rest]), t))
    return out


def gguf_name(hf, gemma):
    """The GGUF name of an HF tensor name."""
    if hf in MODEL_NAMES:
        return MODEL_NAMES[hf]
    parts = hf.split(".", 3)  # model, layers, N, rest
    if parts[:2] != ["model", "layers"]:
        raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
    rest = parts[3]
    name = (GEMMA_LAYER_NAMES if gemma else {}).get(rest, LAYER_NAMES.get(rest))
    if name is None:
        raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
    return "blk.%s.%s" % (parts[2], name)


def expert_of(hf):
    """(layer, expert, stacked GGUF name) of an expert's tensor name, or None."""
    parts = hf.split(".")  # model layers N (mlp|block_sparse_moe) experts E proj weight
    if len(parts) != 8 or parts[:2] != ["model", "layers"] or parts[4] != "experts":
        return None
    name = EXPERT_NAMES.get(".".join(parts[6:]))
    if name is None:
        raise SystemExit("hf_to_gguf.py: unknown tensor %s" % hf)
    return int(parts[2]), int(parts[5]), "blk.%s.%s" % (parts[2], name)


def stack_experts(weights, n_experts):
    """The tensors in file order with each sparse layer's experts stacked: (HF name or None,
    GGUF name, array); a stack [experts, rows, cols] takes the place of its last expert."""
    pending, out = {}, []
    for hf, t in weights.items():
        ex = expert_of(hf)
        if ex is None:
            out.append((hf, None, t))
            continue
        _, e, name = ex
        mats = pending.setdefault(name, {})
        if e in mats or not 0 <= e < n_experts:
            raise SystemExit("hf_to_gguf.py: tensor %s: expert %d of %d" % (hf, e, n_experts))
        mats[e] = t
        if len(mats) == n_experts:
            out.append((None, name, np.stack([mats[i] for i in range(n_experts)])))
            del pending[name]
    if pending:
        raise SystemExit("hf_to_gguf.py: %s lacks experts" % sorted(pending)[0])
    return out


def permute_rows(w, n_head):
    """llama.cpp's q/k layout: within each head, rows (i, i + d/2) become rows (2i, 2i+1)."""
    rows = w.shape[0]
    return (w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def encode_matrix(w, type_name):
    """(ggml type id, bytes) of a 2-d (or stacked 3-d) float64 array in the requested type;
    the innermost dimension is the rows' length."""
    type_id = TYPES[type_name]
    x = np.ascontiguousarray(w, dtype=np.float32)
    if type_name == "f32":
        return type_id, x.astype("<f4").tobytes()
    if type_name == "f16":
        return type_id, x.astype("<f2").tobytes()
    if type_name == "bf16":
        return type_id, f32_to_bf16_bits(x).tobytes()
    block = quant.QK_K if type_name.endswith("_k") else quant.QK
    if x.shape[-1] % block != 0:
        raise SystemExit("hf_to_gguf.py: rows of %d are not whole blocks of %d"
                         % (x.shape[-1], block))
    return type_id, quant.quantize(type_name.upper(), x)


def llama3_factors(rs, theta, head_dim):
    """The per-pair divisors of the base frequencies that llama3 rope scaling amounts to."""
    factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    ctx = rs.get("original_max_position_embeddings", 8192)
    out = []
    for i in range(head_dim // 2):
        wavelen = 2 * math.pi * theta ** (2.0 * i / head_dim)
        if wavelen < ctx / hi:
            out.append(1.0)
        elif wavelen > ctx / lo:
            out.append(factor)
        else:
            smooth = (ctx / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype="<f4")


def add_hparams(w, cfg, arch, head_dim):
    """The <arch>.* keys of cfg; returns the extra F32 tensors (name, array) rope needs."""
    def key(k):
        return "%s.%s" % (arch, k)
    n_heads = cfg["num_attention_heads"]
    w.add(key("context_length"), "uint32", cfg.get("max_position_embeddings", 2048))
    w.add(key("embedding_length"), "uint32", cfg["hidden_size"])
    w.add(key("block_count"), "uint32", cfg["num_hidden_layers"])
    w.add(key("feed_forward_length"), "uint32", cfg["intermediate_size"])
    n_experts = cfg.get("num_local_experts", cfg.get("num_experts"))
    if n_experts:
        w.add(key("expert_count"), "uint32", n_experts)
        w.add(key("expert_used_count"), "uint32",
              cfg.get("num_experts_per_tok", cfg.get("experts_per_token")))
    if n_experts and cfg.get("moe_intermediate_size") is not None:
        w.add(key("expert_feed_forward_length"), "uint32", cfg["moe_intermediate_size"])
    if arch == "gpt-oss":  # the experts' width is intermediate_size
        w.add(key("expert_feed_forward_length"), "uint32", cfg["intermediate_size"])
    if n_experts and arch == "qwen3moe" and not cfg.get("norm_topk_prob", False):
        w.add(key("expert_weights_norm"), "bool", False)
    w.add(key("attention.head_count"), "uint32", n_heads)
    w.add(key("attention.head_count_kv"), "uint32", cfg.get("num_key_value_heads") or n_heads)
    if cfg.get("head_dim") is not None:
        w.add(key("attention.key_length"), "uint32", head_dim)
        w.add(key("attention.value_length"), "uint32", head_dim)
    w.add(key("attention.layer_norm_rms_epsilon"), "float32", cfg.get("rms_norm_eps", 1e-6))
    theta = float(cfg.get("rope_theta", 10000.0))
    w.add(key("rope.freq_base"), "float32", theta)
    w.add(key("rope.dimension_count"), "uint32", head_dim)
    w.add(key("vocab_size"), "uint32", cfg["vocab_size"])
    extra = []
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type"))
    if rtype == "linear":
        w.add(key("rope.scaling.type"), "string", "linear")
        w.add(key("rope.scaling.factor"), "float32", rs["factor"])
    elif rtype == "yarn":
        w.add(key("rope.scaling.type"), "string", "yarn")
        w.add(key("rope.scaling.factor"), "float32", rs["factor"])
        w.add(key("rope.scaling.original_context_length"), "uint32",
              rs.get("original_max_position_embeddings", cfg["max_position_embeddings"]))
        for hf_key, g_key in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"),
                              ("attention_factor", "yarn_attn_factor")):
            if rs.get(hf_key) is not None:
                w.add(key("rope.scaling." + g_key), "float32", rs[hf_key])
    elif rtype == "llama3":
        extra.append(("rope_freqs.weight", llama3_factors(rs, theta, head_dim)))
    elif rtype in ("longrope", "su"):
        orig = cfg["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / orig
        attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
        w.add(key("rope.scaling.attn_factor"), "float32", rs.get("attention_factor") or attn)
        extra.append(("rope_factors_long.weight", np.array(rs["long_factor"], dtype="<f4")))
        extra.append(("rope_factors_short.weight", np.array(rs["short_factor"], dtype="<f4")))
    elif rtype not in (None, "default"):
        raise SystemExit("hf_to_gguf.py: rope_scaling type %s is not converted" % rtype)
    if arch == "phi3" and cfg.get("original_max_position_embeddings") is not None:
        w.add(key("rope.scaling.original_context_length"), "uint32",
              cfg["original_max_position_embeddings"])
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:
        window = None
    if window and arch == "qwen2":
        raise SystemExit("hf_to_gguf.py: qwen2's max_window_layers windows have no GGUF key")
    if window:
        w.add(key("attention.sliding_window"), "uint32", window)
    if arch == "gpt-oss":
        sliding = gpt_oss_checks(cfg)
        if sliding != [i % 2 == 0 for i in range(len(sliding))]:  # not llama.cpp's default
            w.add(key("attention.sliding_window_pattern"), "array", ("bool", sliding))
    if arch == "gemma3":
        w.add(key("attention.sliding_window_pattern"), "uint32",
              cfg.get("sliding_window_pattern", 6))
        w.add(key("rope.freq_base_swa"), "float32", float(cfg.get("rope_local_base_freq", 10000)))
    return extra


def add_tensor(w, name, t, type_name):
    """Write t (numpy order, outermost first) under name: F32 for what llama.cpp's converter
    keeps so (1-d tensors, biases, the router, ssm_conv1d), --type for the other matrices."""
    if (t.ndim == 1 or not name.endswith(".weight") or name.endswith("ffn_gate_inp.weight")
            or name.endswith("ffn_gate_inp_shexp.weight") or name.endswith("ssm_conv1d.weight")):
        w.add_tensor(name, 0, list(reversed(t.shape)), np.ascontiguousarray(t, dtype="<f4"))
    else:
        type_id, data = encode_matrix(t, type_name)
        w.add_tensor(name, type_id, list(reversed(t.shape)), data)


def first_id(v):
    """A token id given as an integer or a list (its first)."""
    return v[0] if isinstance(v, list) else v


class BreakingWriter(gguf_writer.GGUFWriter):
    """A writer that gets one key or tensor wrong as --break says."""

    def __init__(self, what, name):
        super().__init__(version=3)
        self.what, self.name = what, name

    def add(self, key, vtype, value):
        if key == self.name and self.what == "missing-key":
            return
        if key == self.name and self.what == "key-type":
            vtype, value = "string", str(value)
        if key == self.name and self.what == "absurd-value":
            value = 1 << 31
        super().add(key, vtype, value)

    def add_tensor(self, name, type_id, dims, data, offset=None, place=True):
        if name == self.name and self.what == "missing-tensor":
            return
        if name == self.name and self.what == "shape":
            dims = dims[::-1]
        if name == self.name and self.what == "rank":
            dims = list(dims) + [1]
        if name == self.name and self.what == "type-id":
            q8_1 = 9  # 32 elements in 36 bytes
            type_id, data = q8_1, bytes(gguf_writer.tensor_nbytes(q8_1, dims))
        if name == self.name and self.what == "ragged":
            q8_0 = TYPES["q8_0"]
            dims = [dims[0] - 1] + list(dims[1:])
            type_id, data = q8_0, bytes(gguf_writer.tensor_nbytes(q8_0, dims))
        super().add_tensor(name, type_id, dims, data, offset, place)


BREAKS = ("missing-key", "key-type", "absurd-value", "missing-tensor", "shape", "rank",
          "type-id", "ragged")


def add_vocab(w, model_dir, cfg, eot_id):
    """The tokenizer's metadata, config.json's bos and eos ids where it lacks them."""
    vocab = gguf_vocab.tokenizer_kvs(model_dir)
    have = {k for k, _, _ in vocab}
    for k, v in (("tokenizer.ggml.bos_token_id", cfg.get("bos_token_id")),
                 ("tokenizer.ggml.eos_token_id", first_id(cfg.get("eos_token_id")))):
        if v is not None and k not in have:
            w.add(k, "uint32", v)
    for k, vtype, value in vocab:
        w.add(k, vtype, value)
    if eot_id is not None:
        w.add("tokenizer.ggml.eot_token_id", "uint32", eot_id)


def convert(model_dir, out_path, type_name, breaking=None, eot_id=None, mtp=False,
            fuse_gate_up=False):
    """Write model_dir's checkpoint to out_path (breaking: (what, name) or None; mtp: a
    Qwen3.5 checkpoint's multi-token-prediction head too)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = GGUF_ARCH.get(cfg.get("model_type"))
    if arch is None:
        raise SystemExit("hf_to_gguf.py: model_type %s is not converted" % cfg.get("model_type"))
    w = BreakingWriter(*breaking) if breaking else gguf_writer.GGUFWriter(version=3)
    w.add("general.architecture", "string", arch)
    w.add("general.name", "string", os.path.basename(os.path.normpath(model_dir)))
    if mtp and arch not in ("qwen35", "qwen35moe"):
        raise SystemExit("hf_to_gguf.py: --mtp is for qwen3_5 and qwen3_5_moe checkpoints")
    if fuse_gate_up and arch != "qwen35moe":
        raise SystemExit("hf_to_gguf.py: --fuse-gate-up-exps is for qwen3_5_moe checkpoints")
    if arch == "gemma4":
        text = gemma4_text(cfg)
        freqs = add_gemma4_hparams(w, text)
        add_vocab(w, model_dir, text, eot_id)
        tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
        for name, t in gemma4_tensors(load_weights(model_dir), tied):
            add_tensor(w, name, t, type_name)
        w.add_tensor("rope_freqs.weight", 0, [freqs.shape[0]], freqs)
        with open(out_path, "wb") as f:
            f.write(w.to_bytes())
        return
    if arch in ("qwen35", "qwen35moe"):
        text = cfg["text_config"] if cfg.get("model_type") in QWEN35_MULTIMODAL else cfg
        weights = load_weights(model_dir)
        n_mtp = 0
        if mtp:
            n_mtp = text.get("mtp_num_hidden_layers", 0)
            if not n_mtp or not any(n.startswith("mtp.layers.") for n in weights):
                raise SystemExit("hf_to_gguf.py: --mtp: %s has no multi-token-prediction layers"
                                 % model_dir)
        add_qwen35_hparams(w, text, arch, n_mtp)
        add_vocab(w, model_dir, text, eot_id)
        tied = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
        for name, t in qwen35_tensors(weights, text, tied, n_mtp, fuse_gate_up):
            add_tensor(w, name, t, type_name)
        with open(out_path, "wb") as f:
            f.write(w.to_bytes())
        return
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
    gemma = arch == "gemma3"
    extra = add_hparams(w, cfg, arch, head_dim)
    add_vocab(w, model_dir, cfg, eot_id)
    weights = load_weights(model_dir)
    n_experts = cfg.get("num_local_experts", cfg.get("num_experts")) or 0
    for hf, name, t in ([] if arch == "gpt-oss" else stack_experts(weights, n_experts)):
        if name is not None:  # a stack of experts
            type_id, data = encode_matrix(t, type_name)
            w.add_tensor(name, type_id, list(reversed(t.shape)), data)
            continue
        name = gguf_name(hf, gemma)
        if arch == "llama" and ".self_attn.q_proj." in hf:
            t = permute_rows(t, n_heads)
        elif arch == "llama" and ".self_attn.k_proj." in hf:
            t = permute_rows(t, n_kv)
        if gemma and hf.endswith("norm.weight"):
            t = (t.astype(np.float32) + np.float32(1)).astype(np.float64)
        if t.ndim == 1 or name.endswith("ffn_gate_inp.weight"):
            w.add_tensor(name, 0, list(reversed(t.shape)), t.astype("<f4"))
        else:
            type_id, data = encode_matrix(t, type_name)
            w.add_tensor(name, type_id, [t.shape[1], t.shape[0]], data)
    if arch == "gpt-oss":
        for hf, t in weights.items():
            for name, x in gpt_oss_tensors(hf, t):
                add_tensor(w, name, x, type_name)
    for name, t in extra:
        w.add_tensor(name, 0, [t.shape[0]], t)
    with open(out_path, "wb") as f:
        f.write(w.to_bytes())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--type", choices=sorted(TYPES), default="f32",
                   help="the matrices' type (norms, biases and routers stay F32)")
    p.add_argument("--eot-id", type=int, metavar="ID",
                   help="write tokenizer.ggml.eot_token_id (a chat model's end of turn, as "
                        "llama.cpp's converter writes it where it differs from eos)")
    p.add_argument("--mtp", action="store_true",
                   help="qwen3_5, qwen3_5_moe: write the multi-token-prediction head too, as "
                        "llama.cpp's converter does by default (blk.N.nextn.*, N = the layers)")
    p.add_argument("--fuse-gate-up-exps", action="store_true",
                   help="qwen3_5_moe: the experts' gate and up as one ffn_gate_up_exps, as "
                        "llama.cpp's converter writes them with this option")
    p.add_argument("--break", dest="breaking", metavar="WHAT:NAME",
                   help="write one thing wrong: " + ", ".join(BREAKS))
    a = p.parse_args(argv)
    breaking = None
    if a.breaking:
        breaking = tuple(a.breaking.split(":", 1))
        if len(breaking) != 2 or breaking[0] not in BREAKS:
            p.error("--break WHAT:NAME with WHAT one of " + ", ".join(BREAKS))
    convert(a.model_dir, a.out, a.type, breaking, a.eot_id, a.mtp, a.fuse_gate_up_exps)


if __name__ == "__main__":
    main()
