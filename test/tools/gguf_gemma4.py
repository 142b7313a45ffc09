"""gguf_to_hf.py's Gemma 4: a "gemma4" GGUF file (llama.cpp's converter's layout, as
hf_to_gguf.py describes it) back to the flat Gemma4ForCausalLM checkpoint (model_type
gemma4_text) that reference.py runs.

The tensors keep their values (Gemma 4's norms scale by w, with no 1 to take off; the experts'
gate_up_proj stays fused): each GGUF name maps back to its HF name through the converter's own
tables, inverted, and rope_freqs.weight is dropped (it is how llama.cpp spells proportional
RoPE: its count of 1s is the rotated pairs).  config.json from the gemma4.* keys:
  layer_types        attention.sliding_window_pattern (true: sliding_attention);
  head_dim           attention.key_length_swa; global_head_dim attention.key_length;
  num_key_value_heads, num_global_key_value_heads  attention.head_count_kv (an array per
                     layer: the sliding layers' and the full layers'), attention_k_eq_v when a
                     full layer has no attn_v;
  intermediate_size  feed_forward_length (an array: the first layer's, use_double_wide_mlp
                     when the KV-shared layers' are twice it);
  rope_parameters    full: proportional, rope.freq_base, partial_rotary_factor 2 x (rotated
                     pairs) / global_head_dim; sliding: default, rope.freq_base_swa;
  the window, num_kv_shared_layers, hidden_size_per_layer_input (and
  vocab_size_per_layer_input from per_layer_token_embd's rows), final_logit_softcapping, the
  experts (expert_count, expert_used_count, expert_feed_forward_length).
"""
import numpy as np

from hf_to_gguf import GEMMA4_LAYER_NAMES, GEMMA4_MODEL_NAMES

LAYER = {g: h for h, g in GEMMA4_LAYER_NAMES.items()}
TOP = {g: h for h, g in GEMMA4_MODEL_NAMES.items()}


def gemma4_config(meta, n_vocab, tied, tensors):
    """config.json of a gemma4 file's keys; tensors: {GGUF name: (type, dims, raw)}."""
    g = lambda k, d=None: meta.get("gemma4." + k, d)  # noqa: E731
    n = g("block_count")
    swa = list(g("attention.sliding_window_pattern"))
    if len(swa) != n:
        raise SystemExit("gguf_to_hf.py: gemma4.attention.sliding_window_pattern has %d entries "
                         "for %d blocks" % (len(swa), n))
    kv = g("attention.head_count_kv")
    kv = list(kv) if isinstance(kv, (list, tuple)) else [kv] * n
    ff = g("feed_forward_length")
    ff = list(ff) if isinstance(ff, (list, tuple)) else [ff] * n
    n_shared = g("attention.shared_kv_layers", 0)
    full = [i for i in range(n) if not swa[i]]
    k_eq_v = any("blk.%d.attn_v.weight" % i not in tensors and i < n - n_shared for i in full)
    ghd = g("attention.key_length")
    freqs = tensors.get("rope_freqs.weight")
    n_rot = ghd // 2
    if freqs is not None:
        n_rot = int(np.sum(np.frombuffer(freqs[2], dtype="<f4") == 1.0))
    cfg = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
           "attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": k_eq_v,
           "hidden_activation": "gelu_pytorch_tanh",
           "hidden_size": g("embedding_length"), "num_hidden_layers": n,
           "intermediate_size": ff[0],
           "use_double_wide_mlp": any(ff[i] == 2 * ff[0] for i in range(n - n_shared, n)),
           "num_attention_heads": g("attention.head_count"),
           "num_key_value_heads": kv[swa.index(True)] if True in swa else kv[0],
           "num_global_key_value_heads": kv[full[0]] if k_eq_v else None,
           "head_dim": g("attention.key_length_swa"), "global_head_dim": ghd,
           "layer_types": ["sliding_attention" if s else "full_attention" for s in swa],
           "sliding_window": g("attention.sliding_window"),
           "num_kv_shared_layers": n_shared,
           "hidden_size_per_layer_input": g("embedding_length_per_layer_input", 0),
           "vocab_size_per_layer_input": (tensors["per_layer_token_embd.weight"][1][1]
                                          if "per_layer_token_embd.weight" in tensors else n_vocab),
           "final_logit_softcapping": g("final_logit_softcapping"),
           "max_position_embeddings": g("context_length"),
           "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
           "rope_parameters": {
               "full_attention": {"partial_rotary_factor": 2 * n_rot / ghd,
                                  "rope_theta": g("rope.freq_base"),
                                  "rope_type": "proportional"},
               "sliding_attention": {"rope_theta": g("rope.freq_base_swa"),
                                     "rope_type": "default"}},
           "enable_moe_block": g("expert_count") is not None,
           "num_experts": g("expert_count"), "top_k_experts": g("expert_used_count"),
           "moe_intermediate_size": g("expert_feed_forward_length"),
           "tie_word_embeddings": tied, "vocab_size": n_vocab, "torch_dtype": "float32"}
    if any(ff[i] != ff[0] * (2 if cfg["use_double_wide_mlp"] and i >= n - n_shared else 1)
           for i in range(n)):
        raise SystemExit("gguf_to_hf.py: gemma4.feed_forward_length %s is not one width (twice "
                         "it on the KV-shared layers)" % ff)
    return cfg


def gemma4_hf_tensors(tensors):
    """{HF name: array} of a gemma4 file's dequantized tensors ({GGUF name: array})."""
    out = {}
    for name, w in tensors.items():
        if name == "rope_freqs.weight":
            continue
        if name in TOP:
            out[TOP[name]] = w
            continue
        parts = name.split(".", 2)
        if parts[0] != "blk" or len(parts) != 3 or parts[2] not in LAYER:
            raise SystemExit("gguf_to_hf.py: tensor %s is not one of a gemma4 model" % name)
        out["model.layers.%s.%s" % (parts[1], LAYER[parts[2]])] = w
    return out
