#!/usr/bin/python3
"""Generate a tiny, deterministic HuggingFace Llama (or Mistral) checkpoint.

    gen_model.py OUT_DIR [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 4]
                 [--intermediate 160] [--vocab 320] [--dtype f32|f16|bf16] [--tie]
                 [--seed 0] [--max-pos 2048] [--rope-theta 10000] [--rms-eps 1e-5]
                 [--shards 1] [--tokenizer-from DIR] [--arch llama|mistral]
                 [--sliding-window N] [--attn-bias] [--arch-name NAME] [--pad-vocab N]
                 [--tokens-beyond N] [--no-weights] [--head-dim N] [--query-pre-attn-scalar N]
                 [--family qwen2|qwen3|qwen3_moe|mixtral|gpt_oss|gemma3|llama3|llama3.1|phi3|
                           phi3-128k|qwen3_5|qwen3_5_moe|gemma4]
                 [--sliding-window-pattern N] [--rope-scaling JSON]
                 [--max-window-layers M] [--untied]
                 [--experts 8] [--experts-used 2] [--moe-intermediate 32] [--no-norm-topk]
                 [--decoder-sparse-step 1] [--mlp-only-layers "0,3"]
                 [--family qwen3_5 [--causal-lm] [--linear-k-heads 2] [--linear-v-heads N]
                  [--linear-key-dim 16] [--linear-value-dim N] [--conv-kernel 4]
                  [--full-attention-interval 4] [--partial-rotary-factor 0.25]]
                 [--family qwen3_5_moe [the qwen3_5 options] [--experts 8] [--experts-used 2]
                  [--moe-intermediate 32] [--shared-intermediate 48]]
                 [--family gemma4 [--causal-lm] [--head-dim 16] [--global-head-dim N]
                  [--sliding-window 512] [--sliding-window-pattern 5] [--kv-shared-layers N]
                  [--ple-dim N] [--double-wide-mlp] [--k-eq-v [--global-kv-heads N]]
                  [--partial-rotary-factor 0.25] [--softcap 30] [--experts N
                  [--experts-used 2] [--moe-intermediate 32]]]

OUT_DIR receives config.json, tokenizer.json, tokenizer_config.json and the weights,
either model.safetensors or (with --shards N > 1) model.safetensors.index.json plus
model-0000i-of-0000N.safetensors.  The same arguments give byte-identical files.

With --no-weights no weight file is written (and any old one is removed): the folder is
for cbllm's "dummy" load format, which generates bf16 weights from config.json alone, so
even Llama-2-7B's geometry (--hidden 4096 --layers 32 --heads 32 --kv-heads 32
--intermediate 11008 --vocab 32000 --max-pos 4096) takes a second.  --dtype then only
sets config.json's torch_dtype, bfloat16 unless given.

--attn-bias gives the q, k, v and o projections biases (config.json's attention_bias,
as HF Llama has it); --arch-name NAME writes NAME as config.json's architecture, for
tests of architectures that only a test registers.  --pad-vocab N makes config.json's
vocab_size N more than the tokenizer's ids, with embedding and lm_head rows for them, as
Qwen and Phi-3 checkpoints pad theirs.  --tokens-beyond N does the opposite: the tokenizer
gets N special added tokens past config.json's vocab_size, which has no embedding rows for
them, as Gemma-3's tokenizer.json holds <image_soft_token> = 262144 over 262144 rows; the
first is named <image_soft_token>, the others <beyond_K>.

--family NAME writes that family's real config.json layout (the fields and values of
Qwen2.5-0.5B-Instruct, Qwen3-0.6B or gemma-3-1b-it, shrunk to the sizes given) and
its tensors: qwen2 adds q, k and v biases; qwen3 explicit head_dim (--head-dim, default
hidden/heads) and per-head q_norm and k_norm; gemma3 those and Gemma's four norms per
layer (input, post_attention, pre_feedforward, post_feedforward), GELU-tanh,
query_pre_attn_scalar (--query-pre-attn-scalar, default head_dim), sliding_window
(default 512) and sliding_window_pattern (default 6).  These three tie their
embeddings, as the small sizes do, unless --untied (Qwen2.5-7B's layout: an lm_head).
Gemma stores its norms as w in (1 + w): they
are drawn ~ N(0, 0.1).

Two mixture-of-experts families, untied as their large checkpoints are:
--family qwen3_moe is Qwen3-30B-A3B's (Qwen3MoeForCausalLM: qwen3's attention, its
head_dim and q_norm and k_norm; config.json's num_experts, num_experts_per_tok,
moe_intermediate_size, norm_topk_prob, decoder_sparse_step, mlp_only_layers,
output_router_logits and router_aux_loss_coef).  Layer i's MLP is sparse when i is not
in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, as HF's Qwen3MoeDecoderLayer
decides: a router mlp.gate [experts, hidden] and experts mlp.experts.E.{gate,up,down}_proj
of width --moe-intermediate; the other layers keep the dense mlp.{gate,up,down}_proj of
width --intermediate.  --experts N (default 8) and --experts-used K (default 2) set
num_experts and num_experts_per_tok, --no-norm-topk norm_topk_prob false (default true:
the chosen experts' probabilities renormalised to sum 1), --decoder-sparse-step N
(default 1) and --mlp-only-layers "0,3" (default none) the dense layers.
--family mixtral is Mixtral-8x7B-v0.1's (MixtralForCausalLM: Llama's attention, every
layer sparse, num_local_experts --experts, num_experts_per_tok --experts-used, each
expert block_sparse_moe.experts.E.{w1,w2,w3} (gate, down, up) of width --intermediate
and the router block_sparse_moe.gate; rope_theta 1e6, sliding_window null unless
--sliding-window N).

A third, --family gpt_oss, is gpt-oss-20b's (GptOssForCausalLM, model_type gpt_oss, as
openai/gpt-oss-20b's config.json has it, in the dequantized layout transformers loads it into
and BF16 conversions store, not MXFP4's blocks and scales): explicit head_dim (--head-dim,
default hidden/heads), q, k, v and o biases (attention_bias true), per-head attention sinks
self_attn.sinks [heads] ~ N(0, 1), layer_types alternating sliding_attention (layer 0) and
full_attention with sliding_window 128 shrunk to 4 (--sliding-window N), rope_theta 150000,
YaRN rope_scaling (factor 32, beta_fast 32, beta_slow 1, truncate false) with
original_max_position_embeddings 4096 shrunk to 256 (initial_context_length likewise) and
max_position_embeddings 131072 to 8192 = factor x 256, swiglu_limit 7, eos 2, pad 0,
untied.  At 256, for head_dim 16 to 64, both ends of YaRN's ramp lie strictly between two
dimensions, so truncate false matters, and above 0 as at 4096 (a smaller context puts the
lower end below 0, where transformers clamps it and OpenAI's own formula does not), and the
ramp's first dimensions turn fast enough to move a short prompt's scores.  Every layer is a
mixture of --experts (num_local_experts) experts of which --experts-used
(num_experts_per_tok and experts_per_token) are chosen, each of width --intermediate
(intermediate_size): a router mlp.router.weight [experts, hidden] and mlp.router.bias
[experts], and the experts stacked, stored [in, out] (transposed against nn.Linear):
mlp.experts.gate_up_proj [experts, hidden, 2 x intermediate] (gate and up interleaved along
the last axis: gate the even columns, up the odd), gate_up_proj_bias [experts,
2 x intermediate], down_proj [experts, intermediate, hidden], down_proj_bias [experts,
hidden].  gate_up_proj is drawn ~ N(0, SWIGLU_SCALE / sqrt(hidden)) with SWIGLU_SCALE 3, so
that about 1% of the gate values pass the limit 7 and 2% of the up values pass +-7: the
clamps act on a short prompt.  --rope-scaling JSON replaces the YaRN object;
max_position_embeddings and initial_context_length then follow its factor and original
context.

--family llama3 is Llama-3.2-1B-Instruct's (tied, bos 1, an eos_token_id list, rope_scaling
llama3 with factor 32, low 1, high 4 and original_max_position_embeddings 8192 shrunk
to 64, max_position_embeddings 131072 to 1024, so that head_dim 16 has dimensions in
each of the three frequency bands); llama3.1 is Llama-3.1-8B-Instruct's (untied, factor
8); phi3 is Phi-3-mini-4k-instruct's (Phi3ForCausalLM: fused self_attn.qkv_proj and
mlp.gate_up_proj tensors, sliding_window 2047 shrunk to 7, dropouts, pad_token_id, an
eos list); phi3-128k is Phi-3-mini-128k-instruct's (longrope short_factor and
long_factor lists of head_dim / 2, original_max_position_embeddings 4096 shrunk to 8
and max_position_embeddings 131072 to 256).  --rope-scaling JSON sets config.json's
rope_scaling (e.g. '{"rope_type": "yarn", "factor": 4.0}') over any family's.  With
--family qwen2, --sliding-window N turns Qwen2's window on (use_sliding_window true)
for the layers from --max-window-layers M (default 0) on, as HF's Qwen2 applies it.

Weights are random (numpy default_rng(seed)), drawn tensor by tensor in file order and
written as soon as drawn, so a 130M-parameter model takes seconds and little memory:
  embeddings ~ N(0, 1) (N(0, 1/sqrt(hidden)) when tied, as they are the lm_head too),
  linear weights ~ N(0, 1/sqrt(in_features)), norm weights ~ 1 + N(0, 0.1),
  biases ~ N(0, 0.5), a mixture-of-experts router ~ N(0, ROUTER_SCALE / sqrt(hidden)),
  gpt-oss's attention sinks ~ N(0, 1) (a linear weight's in_features is axis 1 of gpt-oss's
  stacked [experts, in, out] matrices too).
With ROUTER_SCALE 2 the router's logits on an RMSNormed hidden state spread with a
standard deviation of about 2 rather than 1: for 8 experts and 2 used, the 2nd and 3rd
routing probabilities then differ by less than 1e-3 at about 1.3% of a layer's tokens
(1.5% at scale 1; a larger scale spreads the logits further but makes both probabilities
small, so their difference shrinks again: 6% at scale 4), and their logits by less than
1e-3 at 0.1% (0.2% at scale 1).  reference.py --router-margins states the smallest gaps of a run, for a
test to choose a seed or prompt where no choice hangs on a near tie.  Experts are drawn in
order, each one's matrices in its checkpoint order.
The draw order does not depend on --shards or --dtype, so a sharded model holds the same
values as an unsharded one, and an f16/bf16 model is the f32 one rounded to nearest-even.

--family qwen3_5 is Qwen3.5's dense hybrid, Qwen3.5-0.8B's config.json shrunk (tied unless
--untied, 4 layers unless --layers): layer i is "full_attention" when (i + 1) %
--full-attention-interval (default 4) == 0, Gated DeltaNet "linear_attention" otherwise, as
text_config's layer_types lists them.  The released layout (Qwen3_5ForConditionalGeneration,
model_type qwen3_5) nests the text model's fields under text_config, holds a small
vision_config and names the text model's tensors model.language_model.*; it also holds two
tiny vision-tower tensors, model.visual.patch_embed.proj.weight (5-d, a Conv3d's) and
model.visual.merger.linear_fc2.weight, which a text-only loader must skip.  --causal-lm writes
Qwen3_5ForCausalLM's flat layout instead (model_type qwen3_5_text, the text_config fields at
the top level, tensors model.*).  Both layouts also hold the released multi-token-prediction
head (mtp_num_hidden_layers 1), which HF's models ignore too: mtp.fc.weight [hidden,
2 hidden], mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight and mtp.norm.weight
[hidden], and one full-attention decoder layer mtp.layers.0.* (input_layernorm, the self_attn
tensors below, post_attention_layernorm and the family's MLP).  The text model's tensors are
drawn first (then the vision ones, then mtp.*), so one seed gives both layouts the same text
model.  A full-attention layer has self_attn.q_proj [2 heads head_dim, hidden]
(per head its query rows, then as many rows of its output gate), k_proj, v_proj, o_proj and
the per-head q_norm and k_norm; a linear one has linear_attn.in_proj_qkv [2 nk dk + nv dv,
hidden] (q, k, then v), in_proj_z [nv dv, hidden], in_proj_b and in_proj_a [nv, hidden],
conv1d.weight [2 nk dk + nv dv, 1, K], dt_bias [nv], A_log [nv], norm.weight [dv] and
out_proj [hidden, nv dv], with nk --linear-k-heads (default 2), nv --linear-v-heads (default
nk; a multiple of nk), dk --linear-key-dim (default 16), dv --linear-value-dim (default dk),
K --conv-kernel (default 4).  rope_parameters: rope_theta 1e7, partial_rotary_factor
(--partial-rotary-factor, default 0.25) and an interleaved mrope_section that splits the
rotary dimension's int(head_dim * factor) / 2 frequencies in three, the first ones one
larger ([11, 11, 10] at Qwen3.5's 64).  Every RMSNorm but linear_attn.norm scales by
(1 + w), so those weights are drawn ~ N(0, 0.1) (zero-centred, as Qwen3.5 stores them);
linear_attn.norm.weight and dt_bias ~ 1 + N(0, 0.1); conv1d.weight ~ N(0, 1/sqrt(K));
A_log = log A with A log-uniform on [0.05, 16]: HF initialises A uniform on [0.01, 16], which
makes almost every head forget its state within a token or two, while here about a third of
the heads keep a token for ten or more, so a short prompt exercises the recurrence.  The
query channels of in_proj_qkv and of conv1d.weight are drawn as (q + 2 k) / sqrt(5) of their
own draw q and the key channels' k (correlation 0.89), so that a token's query matches its
own key and keys like it, as a trained model's do: with independent ones, an L2-normalised
query and key of dk dimensions meet at a cosine of about 1/sqrt(dk), the DeltaNet's output
S^T q is then some 1/dk of v, and its RMSNormGated (eps 1e-6) works near its eps and
magnifies rounding: the logits of a Q8_0 file moved 2 to 5 times as far from the F32 ones as
a plain qwen3 model's of the same size do, against about 1.5 times with the correlation.

--family qwen3_5_moe is Qwen3.5-35B-A3B's (and Qwen3.6-35B-A3B's): qwen3_5's layers, layouts
(Qwen3_5MoeForConditionalGeneration, model_type qwen3_5_moe, text_config model_type
qwen3_5_moe_text; --causal-lm Qwen3_5MoeForCausalLM's flat one), vision and MTP tensors and
options, untied, every layer's MLP (the MTP layer's too) a sparse block: the router
mlp.gate.weight [E, hidden], the experts as the released safetensors store them, stacked and
fused with no .weight suffix, mlp.experts.gate_up_proj [E, 2 I, hidden] (per expert its I gate
rows, then its I up rows) and mlp.experts.down_proj [E, hidden, I], and the shared expert
mlp.shared_expert.{gate,up,down}_proj.weight of width S with its gate
mlp.shared_expert_gate.weight [1, hidden].  E is --experts (num_experts, default 8), the
chosen --experts-used (num_experts_per_tok, default 2), I --moe-intermediate
(moe_intermediate_size, default 32), S --shared-intermediate (shared_expert_intermediate_size,
default 48).  text_config has no intermediate_size and no norm_topk_prob (HF's router always
renormalises the chosen weights).  The stacked experts are drawn like E linear weights
(~ N(0, 1/sqrt(hidden)) and N(0, 1/sqrt(I))), the router like the other families'.

--family gemma4 is Gemma 4's text decoder (gemma-4-E2B/E4B, 31B and, with --experts, 26B-A4B),
as HF's modeling_gemma4.py defines it.  Its differences from gemma3, all read from HF's code:
  - layout: the release is Gemma4ForConditionalGeneration (model_type gemma4) with the text
    fields under text_config (model_type gemma4_text), vision_config and audio_config, and
    the text tensors under model.language_model.*; here also three tiny tensors a text loader
    must skip: model.vision_tower.patch_embedder.input_proj.weight,
    model.embed_vision.embedding_projection.weight and model.embed_audio.embedding_projection
    .weight.  --causal-lm writes Gemma4ForCausalLM's flat layout (model_type gemma4_text,
    tensors model.*).  Tied (tie_word_embeddings true; --untied adds lm_head.weight).
  - RMSNorm (Gemma4RMSNorm) scales by w itself, not (1 + w): x * (mean(x^2) + eps)^-0.5 * w,
    so every norm weight here is drawn ~ 1 + N(0, 0.1); eps rms_norm_eps (1e-6).
  - attention scale 1.0 (no query_pre_attn_scalar; q and k are RMSNormed per head by q_norm
    and k_norm); a v_norm without weight: v RMSNormed per head (eps rms_norm_eps), no scale;
    no attention soft-capping (attn_logit_softcapping gone).
  - layer_types lists "sliding_attention" / "full_attention" (default: full when (i + 1) % 6
    == 0; HF forces the last layer full); here full when (i + 1) % --sliding-window-pattern
    (default 5, E2B's 4:1) == 0, the last layer full.  Sliding layers attend to keys at
    positions p - sliding_window < k <= p (sliding_window default 512; --sliding-window).
  - head sizes per type: sliding layers head_dim (--head-dim) and num_key_value_heads; full
    layers global_head_dim (--global-head-dim, default 2 head_dim; 512 vs 256 in the
    release) and, when attention_k_eq_v (--k-eq-v, 31B and 26B-A4B), num_global_key_value_heads
    (--global-kv-heads, default --kv-heads) heads and no v_proj: the values are k_proj's
    output before k_norm (then v_norm'ed, unrotated).
  - RoPE per type from rope_parameters: sliding {"rope_type": "default", "rope_theta": 1e4}
    over all of head_dim; full {"rope_type": "proportional", "partial_rotary_factor": 0.25,
    "rope_theta": 1e6}: inverse frequencies theta^(-2i / global_head_dim) for i <
    int(factor * global_head_dim // 2) and 0 for the other pairs (unrotated), rotate_half
    over the whole head (pair i with i + global_head_dim / 2).  --partial-rotary-factor.
  - KV sharing: num_kv_shared_layers (--kv-shared-layers, default 0; E2B 20 of 35, E4B 18 of
    42): layers from L - n on have no k_proj, v_proj, k_norm (no tensors in the checkpoint);
    each reuses the keys and values (after norm and RoPE, the whole cache) of the last
    non-shared layer of its own type.  With use_double_wide_mlp (--double-wide-mlp, E2B) the
    shared layers' MLP is 2 intermediate_size wide.
  - per-layer embeddings (PLE), when hidden_size_per_layer_input P (--ple-dim, default 0 =
    off; E2B/E4B 256) > 0: embed_tokens_per_layer [vocab_size_per_layer_input, L P] scaled by
    sqrt(P), per_layer_model_projection [L P, hidden] of the scaled embeddings times
    hidden^-0.5, RMSNormed per layer slice by per_layer_projection_norm [P]; per_layer_input
    = (projection + token part) * 2^-0.5, a [L, P] per token.  After layer i's MLP residual:
    x += post_per_layer_input_norm((gelu_tanh(x per_layer_input_gate^T) * per_layer_input[i])
    per_layer_projection^T)  (gate [P, hidden], projection [hidden, P]).
  - every layer ends x *= layer_scalar (a [1] buffer stored in the checkpoint; drawn here
    ~ 1 + N(0, 0.1)).
  - final_logit_softcapping (--softcap, default 30): logits = c tanh(logits / c).
  - MoE (--experts N: enable_moe_block, num_experts, top_k_experts --experts-used,
    moe_intermediate_size --moe-intermediate): the dense MLP stays (a shared expert);
    h1 = post_feedforward_layernorm_1(mlp(pre_feedforward_layernorm(x))); the router on the
    residual x: r = rmsnorm(x) (no weight) * router.scale * hidden^-0.5, p = softmax(r
    router.proj^T), top k, renormalised, times router.per_expert_scale[e]; experts on
    pre_feedforward_layernorm_2(x): experts.gate_up_proj [E, 2 I, hidden] (gate rows, then
    up), experts.down_proj [E, hidden, I], gelu_tanh; h2 = post_feedforward_layernorm_2(sum);
    then post_feedforward_layernorm(h1 + h2) is the MLP's residual term.
  - config fields new to Gemma 4 (defaults in HF): global_head_dim (512),
    num_global_key_value_heads (None), attention_k_eq_v (false), num_kv_shared_layers (0),
    hidden_size_per_layer_input (256), vocab_size_per_layer_input (262144),
    use_double_wide_mlp (false), enable_moe_block (false), num_experts, top_k_experts,
    moe_intermediate_size (None), use_bidirectional_attention (None; "vision" in 31B/26B-A4B,
    only for image tokens), rope_parameters per layer type; bos 2, eos 1, pad 0 in the
    release (here the synthetic tokenizer's 1, 2, 0).
  - unchanged from gemma3: embeddings times sqrt(hidden), the sandwich norms
    (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
    post_feedforward_layernorm), GELU-tanh MLP, q_norm and k_norm before RoPE.
The PLE table is drawn ~ N(0, 1/sqrt(P)), so that times sqrt(P) it is O(1) like the
projection part.

Unless --tokenizer-from DIR is given (then DIR's tokenizer.json and tokenizer_config.json
are copied and their vocabulary size wins over --vocab), the tokenizer is a small
synthetic one in exactly the shape of Llama-2's tokenizer.json: <unk>=0, <s>=1, </s>=2,
byte pieces <0x00>..<0xFF> at 3..258, then pieces learnt by BPE over the built-in corpus
below (merges in learning order; once the corpus is exhausted, further merges join pairs
of existing pieces), and the single characters of the corpus last.
"""

import argparse
import json
import os
import shutil
import sys
from collections import Counter

import numpy as np

# A small lower-case English corpus for the synthetic tokenizer.  Capitals, digits and
# any other character are left to byte fallback, which keeps the base alphabet small.
CORPUS = """
the quick brown fox jumps over the lazy dog. the dog does not mind, for the sun is warm
and the grass is soft. after a while the fox comes back and sits down beside the dog,
and the two of them watch the clouds drift slowly over the hills.

a database is an organised collection of data that can be stored, queried and changed.
when many people use the same database at the same time, the server must keep each
transaction apart from the others, so that nobody reads data that is only half written.
an index lets the server find the rows it needs without reading the whole table.

language models read a sequence of tokens and predict the next one. each token is a
small piece of text, such as a word, part of a word, or a single byte. the model turns
every token into a vector, mixes the vectors with attention, and scores every possible
next token. the token with the highest score is chosen when the model is greedy.

it was a quiet morning in the little town by the river. the baker had opened his shop
early, and the smell of fresh bread filled the street. children walked to school with
their bags on their backs, talking about the games they would play in the afternoon.
an old man sat on a bench near the water, feeding the birds and reading his paper.

to make a good cup of tea, boil fresh water and pour it over the leaves. let it stand
for three or four minutes, then remove the leaves so that the tea does not become
bitter. some people like to add milk or sugar, while others drink it just as it is.
"""

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
N_BYTE_PIECES = 256
FIRST_LEARNT_ID = len(SPECIAL_TOKENS) + N_BYTE_PIECES  # 259, as in Llama-2
SPACE = "\u2581"  # "▁", SentencePiece's word-boundary mark

ST_DTYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
BYTES_PER_ELEM = {"f32": 4, "f16": 2, "bf16": 2}


# --------------------------------------------------------------------------- arguments

def parse_args(argv):
    """Parse and validate the command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int,
                   help="decoder layers (default 2; 4 for qwen3_5 and qwen3_5_moe, 6 for gemma4)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=160)
    p.add_argument("--vocab", type=int, default=320)
    p.add_argument("--dtype", choices=sorted(ST_DTYPE),
                   help="weight dtype (default f32; bf16 with --no-weights)")
    p.add_argument("--tie", action="store_true", help="tie lm_head to the embeddings")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-pos", type=int, default=2048)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-eps", type=float, default=1e-5)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--tokenizer-from", metavar="DIR")
    p.add_argument("--arch", choices=["llama", "mistral"], default="llama")
    p.add_argument("--sliding-window", type=int, metavar="N")
    p.add_argument("--attn-bias", action="store_true",
                   help="biases on the q, k, v and o projections")
    p.add_argument("--arch-name", metavar="NAME", help="config.json's architecture name")
    p.add_argument("--pad-vocab", type=int, default=0, metavar="N",
                   help="vocab_size N beyond the tokenizer's ids")
    p.add_argument("--tokens-beyond", type=int, default=0, metavar="N",
                   help="N tokenizer entries past vocab_size, without embedding rows")
    p.add_argument("--no-weights", action="store_true",
                   help="write config and tokenizer only, for the dummy load format")
    p.add_argument("--family", choices=sorted(FAMILIES),
                   help="a family's real config.json layout and tensors")
    p.add_argument("--rope-scaling", metavar="JSON", type=json.loads,
                   help="config.json's rope_scaling object")
    p.add_argument("--max-window-layers", type=int, metavar="M",
                   help="qwen2 with --sliding-window: layers from M on have the window")
    p.add_argument("--head-dim", type=int,
                   help="explicit head_dim (qwen3, qwen3_moe, gemma3, gpt_oss, qwen3_5, "
                        "qwen3_5_moe)")
    p.add_argument("--query-pre-attn-scalar", type=float, help="gemma3's attention scale^-2")
    p.add_argument("--sliding-window-pattern", type=int, help="gemma3, gemma4: every Nth layer global")
    p.add_argument("--untied", action="store_true", help="a family's model with an lm_head")
    p.add_argument("--experts", type=int, metavar="N",
                   help="qwen3_moe, mixtral, gpt_oss, qwen3_5_moe: experts per sparse layer "
                        "(default 8)")
    p.add_argument("--experts-used", type=int, metavar="K",
                   help="qwen3_moe, mixtral, gpt_oss, qwen3_5_moe: experts chosen per token "
                        "(default 2)")
    p.add_argument("--moe-intermediate", type=int, metavar="N",
                   help="qwen3_moe, qwen3_5_moe: an expert's width (default 32)")
    p.add_argument("--shared-intermediate", type=int, metavar="N",
                   help="qwen3_5_moe: the shared expert's width (default 48)")
    p.add_argument("--no-norm-topk", action="store_true",
                   help="qwen3_moe: norm_topk_prob false (the chosen weights not renormalised)")
    p.add_argument("--decoder-sparse-step", type=int, metavar="N",
                   help="qwen3_moe: layer i sparse when (i + 1) %% N == 0 (default 1)")
    p.add_argument("--mlp-only-layers", type=layer_list, metavar="LIST",
                   help='qwen3_moe: comma-separated dense layers, e.g. "0,3" (default none)')
    p.add_argument("--causal-lm", action="store_true",
                   help="qwen3_5, qwen3_5_moe, gemma4: the flat ...ForCausalLM layout (default: the "
                        "released ...ForConditionalGeneration one)")
    p.add_argument("--linear-k-heads", type=int, metavar="N",
                   help="qwen3_5, qwen3_5_moe: linear_num_key_heads (default 2)")
    p.add_argument("--linear-v-heads", type=int, metavar="N",
                   help="qwen3_5, qwen3_5_moe: linear_num_value_heads (default --linear-k-heads)")
    p.add_argument("--linear-key-dim", type=int, metavar="N",
                   help="qwen3_5, qwen3_5_moe: linear_key_head_dim (default 16)")
    p.add_argument("--linear-value-dim", type=int, metavar="N",
                   help="qwen3_5, qwen3_5_moe: linear_value_head_dim (default --linear-key-dim)")
    p.add_argument("--conv-kernel", type=int, metavar="K",
                   help="qwen3_5, qwen3_5_moe: linear_conv_kernel_dim (default 4)")
    p.add_argument("--full-attention-interval", type=int, metavar="N",
                   help="qwen3_5, qwen3_5_moe: layer i full attention when (i + 1) %% N == 0 "
                        "(default 4)")
    p.add_argument("--partial-rotary-factor", type=float, metavar="F",
                   help="qwen3_5, qwen3_5_moe, gemma4 (full layers): the rotated share (default 0.25)")
    p.add_argument("--global-head-dim", type=int, metavar="N",
                   help="gemma4: full layers' head_dim (default 2 --head-dim)")
    p.add_argument("--global-kv-heads", type=int, metavar="N",
                   help="gemma4 with --k-eq-v: full layers' kv heads (default --kv-heads)")
    p.add_argument("--k-eq-v", action="store_true",
                   help="gemma4: attention_k_eq_v (full layers: no v_proj, values = keys)")
    p.add_argument("--kv-shared-layers", type=int, metavar="N",
                   help="gemma4: num_kv_shared_layers (default 0)")
    p.add_argument("--ple-dim", type=int, metavar="N",
                   help="gemma4: hidden_size_per_layer_input (default 0: no PLE)")
    p.add_argument("--double-wide-mlp", action="store_true",
                   help="gemma4: use_double_wide_mlp (shared layers' MLP twice as wide)")
    p.add_argument("--softcap", type=float, metavar="C",
                   help="gemma4: final_logit_softcapping (default 30; 0: null)")
    a = p.parse_args(argv)
    check_gemma4_args(p, a)
    if a.dtype is None:
        a.dtype = "bf16" if a.no_weights else "f32"
    if a.layers is None:
        a.layers = 4 if a.family in QWEN35_FAMILIES else 2
    check_qwen35_args(p, a)

    for name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "max_pos", "shards"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    check_moe_args(p, a)
    if a.family is None and (a.head_dim or a.query_pre_attn_scalar or a.sliding_window_pattern):
        p.error("--head-dim, --query-pre-attn-scalar and --sliding-window-pattern need --family")
    if a.head_dim is None:
        a.head_dim = a.hidden // a.heads
    elif a.family in ("qwen2", "mixtral"):
        p.error("--head-dim: %s configs have none" % a.family)
    if a.hidden % a.heads and a.family not in ("qwen3", "qwen3_moe", "gemma3", "gpt_oss",
                                               "qwen3_5", "qwen3_5_moe", "gemma4"):
        p.error("--hidden (%d) must be a multiple of --heads (%d)" % (a.hidden, a.heads))
    if a.heads % a.kv_heads:
        p.error("--heads (%d) must be a multiple of --kv-heads (%d)" % (a.heads, a.kv_heads))
    if a.head_dim % 2:
        p.error("head_dim = %d must be even for RoPE" % a.head_dim)
    if a.untied and (a.family is None or a.tie):
        p.error("--untied needs --family and no --tie")
    if a.family is not None:
        a.tie = FAMILY_TIED.get(a.family, True) and not a.untied
    if a.max_window_layers is not None and (a.family != "qwen2" or a.sliding_window is None):
        p.error("--max-window-layers needs --family qwen2 and --sliding-window")
    if a.sliding_window is not None and a.family not in ("gemma3", "qwen2", "phi3", "mixtral",
                                                         "gpt_oss", "gemma4"):
        if a.arch != "mistral":
            p.error("--sliding-window needs --arch mistral")
        if a.sliding_window < 1:
            p.error("--sliding-window must be at least 1")
    if a.family == "gpt_oss" and a.sliding_window is not None and a.sliding_window < 1:
        p.error("--sliding-window must be at least 1")
    if a.tokens_beyond and (a.pad_vocab or a.tokenizer_from):
        p.error("--tokens-beyond goes with neither --pad-vocab nor --tokenizer-from")
    if a.no_weights and a.shards != 1:
        p.error("--shards needs weights: it cannot go with --no-weights")
    n_tensors = len(tensor_specs(a, a.vocab))
    if a.shards > n_tensors:
        p.error("--shards %d is more than the %d tensors" % (a.shards, n_tensors))
    return a


QWEN35_DEFAULTS = {"linear_k_heads": 2, "linear_key_dim": 16, "conv_kernel": 4,
                   "full_attention_interval": 4, "partial_rotary_factor": 0.25}


def check_qwen35_args(p, a):
    """Validate the options of qwen3_5 and qwen3_5_moe and fill in their defaults."""
    own = ("causal_lm", "linear_k_heads", "linear_v_heads", "linear_key_dim",
           "linear_value_dim", "conv_kernel", "full_attention_interval", "partial_rotary_factor")
    if a.family == "gemma4":
        own = ("linear_k_heads", "linear_v_heads", "linear_key_dim", "linear_value_dim",
               "conv_kernel", "full_attention_interval")
    if a.family not in QWEN35_FAMILIES:
        for name in own:
            if getattr(a, name) not in (None, False):
                p.error("--%s needs --family qwen3_5 or qwen3_5_moe" % name.replace("_", "-"))
        return
    for name, value in QWEN35_DEFAULTS.items():
        if getattr(a, name) is None:
            setattr(a, name, value)
    if a.linear_v_heads is None:
        a.linear_v_heads = a.linear_k_heads
    if a.linear_value_dim is None:
        a.linear_value_dim = a.linear_key_dim
    for name in ("linear_k_heads", "linear_v_heads", "linear_key_dim", "linear_value_dim",
                 "conv_kernel", "full_attention_interval"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.linear_v_heads % a.linear_k_heads:
        p.error("--linear-v-heads (%d) must be a multiple of --linear-k-heads (%d)"
                % (a.linear_v_heads, a.linear_k_heads))
    head_dim = a.head_dim or a.hidden // a.heads
    rot = int(head_dim * a.partial_rotary_factor)
    if rot < 2 or rot % 2:
        p.error("the rotary dimension int(head_dim %d * %g) = %d must be even and at least 2"
                % (head_dim, a.partial_rotary_factor, rot))


GEMMA4_OWN = ("global_head_dim", "global_kv_heads", "k_eq_v", "kv_shared_layers", "ple_dim",
              "double_wide_mlp", "softcap")


def check_gemma4_args(p, a):
    """Validate gemma4's options and fill in their defaults (a.moe: --experts given)."""
    if a.family != "gemma4":
        for name in GEMMA4_OWN:
            if getattr(a, name) not in (None, False):
                p.error("--%s needs --family gemma4" % name.replace("_", "-"))
        return
    a.moe = a.experts is not None
    if a.layers is None:
        a.layers = 6
    if a.head_dim is None:
        a.head_dim = 16
    if a.global_head_dim is None:
        a.global_head_dim = 2 * a.head_dim
    if a.global_kv_heads is not None and not a.k_eq_v:
        p.error("--global-kv-heads needs --k-eq-v")
    if a.global_kv_heads is None:
        a.global_kv_heads = a.kv_heads
    a.kv_shared_layers = a.kv_shared_layers or 0
    a.ple_dim = a.ple_dim or 0
    if a.softcap is None:
        a.softcap = 30.0
    if a.sliding_window_pattern is None:
        a.sliding_window_pattern = 5
    if a.partial_rotary_factor is None:
        a.partial_rotary_factor = 0.25
    if a.heads % a.global_kv_heads:
        p.error("--heads must be a multiple of --global-kv-heads")
    if a.global_head_dim % 2 or a.global_head_dim < 2:
        p.error("--global-head-dim must be even")
    if not 0 <= a.kv_shared_layers < a.layers:
        p.error("--kv-shared-layers must lie in 0..%d" % (a.layers - 1))
    types = gemma4_layer_types(a)
    first = a.layers - a.kv_shared_layers
    for t in set(types[first:]):
        if t not in types[:first]:
            p.error("--kv-shared-layers: no earlier %s layer to share with" % t)


def gemma4_layer_types(a):
    """Per layer "sliding_attention" or "full_attention": full when (i + 1) % pattern == 0,
    and the last layer full (HF's Gemma4TextConfig forces it)."""
    n = a.sliding_window_pattern
    types = ["full_attention" if (i + 1) % n == 0 else "sliding_attention"
             for i in range(a.layers)]
    types[-1] = "full_attention"
    return types


def layer_list(text):
    """--mlp-only-layers' value: comma-separated layer indices, in any order."""
    try:
        return sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError("not a comma-separated list of layers: %r" % text)


MOE_DEFAULTS = {"experts": 8, "experts_used": 2, "moe_intermediate": 32,
                "decoder_sparse_step": 1, "mlp_only_layers": [], "shared_intermediate": 48}
# the options only some mixture-of-experts families have, and those families
MOE_OPTION_FAMILIES = {"moe_intermediate": ("qwen3_moe", "qwen3_5_moe", "gemma4"),
                       "decoder_sparse_step": ("qwen3_moe",), "mlp_only_layers": ("qwen3_moe",),
                       "shared_intermediate": ("qwen3_5_moe",)}


def check_moe_args(p, a):
    """Validate the mixture-of-experts options and fill in their defaults."""
    moe = a.family in MOE_FAMILIES or (a.family == "gemma4" and a.experts is not None)
    if a.family == "gemma4" and not moe and (a.experts_used or a.moe_intermediate):
        p.error("--experts-used and --moe-intermediate need --experts with --family gemma4")
    for name in MOE_DEFAULTS:
        flag = "--" + name.replace("_", "-")
        given = getattr(a, name) is not None
        if given and not moe:
            p.error("%s needs --family %s" % (flag, ", ".join(MOE_FAMILIES)))
        only = MOE_OPTION_FAMILIES.get(name)
        if given and only and a.family not in only:
            p.error("%s needs --family %s" % (flag, " or ".join(only)))
        if not given:
            setattr(a, name, MOE_DEFAULTS[name])
    if a.no_norm_topk and a.family != "qwen3_moe":
        p.error("--no-norm-topk needs --family qwen3_moe")
    if not moe:
        return
    for name in ("experts", "experts_used", "moe_intermediate", "decoder_sparse_step",
                 "shared_intermediate"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.experts_used > a.experts:
        p.error("--experts-used (%d) is more than --experts (%d)" % (a.experts_used, a.experts))
    if any(i < 0 or i >= a.layers for i in a.mlp_only_layers):
        p.error("--mlp-only-layers: layers lie in 0..%d" % (a.layers - 1))


def sparse_layer(a, i):
    """Whether layer i's MLP is a mixture of experts (HF Qwen3MoeDecoderLayer's rule;
    every Mixtral and gpt-oss layer is)."""
    if a.family in ("mixtral", "gpt_oss"):
        return True
    if a.family != "qwen3_moe":
        return False
    return (i not in a.mlp_only_layers and a.experts > 0
            and (i + 1) % a.decoder_sparse_step == 0)


# --------------------------------------------------------------------------- tokenizer

def corpus_words():
    """The corpus as SentencePiece sees it: Counter of '▁word' strings."""
    return Counter(SPACE + w for w in CORPUS.split())


def corpus_alphabet(words):
    """Distinct characters of the corpus, most frequent first (ties by code point)."""
    chars = Counter()
    for w, n in words.items():
        for c in w:
            chars[c] += n
    return sorted(chars, key=lambda c: (-chars[c], c))


def train_bpe(words, n_merges):
    """Plain BPE: repeatedly merge the most frequent adjacent pair (ties: smallest pair).

    Returns the merges in learning order as (left, right) tuples; stops early when
    every word has become a single piece.
    """
    seqs = {tuple(w): n for w, n in words.items()}
    merges = []
    while len(merges) < n_merges:
        pairs = Counter()
        for seq, n in seqs.items():
            for pair in zip(seq, seq[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda pr: (-pairs[pr], pr))
        merges.append(best)
        seqs = {merge_pair(seq, best): n for seq, n in seqs.items()}
    return merges


def merge_pair(seq, pair):
    """Replace every occurrence of the adjacent pair in seq by its concatenation."""
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and (seq[i], seq[i + 1]) == pair:
            out.append(seq[i] + seq[i + 1])
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return tuple(out)


def fill_merges(pieces, known, n_more):
    """Further merges once the corpus is exhausted: concatenate pairs of existing pieces.

    Pairs are taken in a fixed order (earlier pieces first), skipping any result that is
    already a piece, so each fill merge adds exactly one new piece.
    """
    out = []
    for s in range(len(pieces)):
        for t in range(s + 1):
            for pair in ((pieces[s], pieces[t]), (pieces[t], pieces[s])):
                joined = pair[0] + pair[1]
                if joined in known:
                    continue
                known.add(joined)
                out.append(pair)
                if len(out) == n_more:
                    return out
    raise SystemExit("gen_model.py: cannot make %d more merges" % n_more)


def build_tokenizer(vocab_size, beyond=0):
    """A Llama-2-shaped tokenizer.json dict with exactly vocab_size pieces, and beyond special
    added tokens after them."""
    words = corpus_words()
    alphabet = corpus_alphabet(words)
    n_merges = vocab_size - FIRST_LEARNT_ID - len(alphabet)
    if n_merges < 0:
        raise SystemExit("gen_model.py: --vocab %d is too small: the synthetic tokenizer needs at "
                         "least %d (3 special + 256 byte pieces + %d characters)"
                         % (vocab_size, FIRST_LEARNT_ID + len(alphabet), len(alphabet)))
    merges = train_bpe(words, n_merges)
    known = set(alphabet) | {a + b for a, b in merges}
    if len(merges) < n_merges:
        learnt = [a + b for a, b in merges] + alphabet
        merges += fill_merges(learnt, known, n_merges - len(merges))

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for b in range(N_BYTE_PIECES):
        vocab["<0x%02X>" % b] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    for c in alphabet:
        vocab[c] = len(vocab)
    assert len(vocab) == vocab_size
    extra = ["<image_soft_token>"] + ["<beyond_%d>" % k for k in range(1, beyond)]
    return llama2_tokenizer_json(vocab, ["%s %s" % m for m in merges], extra[:beyond])


def llama2_tokenizer_json(vocab, merges, extra=()):
    """Wrap a BPE vocabulary and merge list in Llama-2's tokenizer.json structure; extra
    names special tokens added after the vocabulary's ids."""
    specials = list(enumerate(SPECIAL_TOKENS)) + [(len(vocab) + k, t) for k, t in enumerate(extra)]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in specials]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPACE},
            {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": "<unk>",
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
            "vocab": vocab, "merges": merges},
    }


def tokenizer_config(max_pos):
    """tokenizer_config.json for the synthetic tokenizer."""
    return {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
            "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": max_pos,
            "tokenizer_class": "LlamaTokenizer"}


def copied_vocab_size(tok_dir):
    """Vocabulary size of an existing tokenizer.json: one more than its largest id."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def write_tokenizer(a, out_dir):
    """Write or copy tokenizer.json and tokenizer_config.json; return the vocab size."""
    if a.tokenizer_from:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(a.tokenizer_from, name), os.path.join(out_dir, name))
        return copied_vocab_size(a.tokenizer_from)
    write_json(os.path.join(out_dir, "tokenizer.json"), build_tokenizer(a.vocab, a.tokens_beyond),
               compact=True)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), tokenizer_config(a.max_pos))
    return a.vocab  # the embeddings' rows: any --tokens-beyond lie past them


# --------------------------------------------------------------------------- config

def model_config(a, vocab_size):
    """The HF config.json dict."""
    if a.family is not None:
        cfg = FAMILIES[a.family](a, vocab_size)
        if a.rope_scaling is not None:
            cfg["rope_scaling"] = a.rope_scaling
        if a.family == "qwen2" and a.sliding_window is not None:
            cfg.update({"use_sliding_window": True, "sliding_window": a.sliding_window,
                        "max_window_layers": a.max_window_layers or 0})
        return cfg
    arch = a.arch_name or {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}[a.arch]
    cfg = {
        "architectures": [arch], "model_type": a.arch,
        "hidden_size": a.hidden, "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "vocab_size": vocab_size,
        "max_position_embeddings": a.max_pos, "rope_theta": a.rope_theta,
        "rms_norm_eps": a.rms_eps, "tie_word_embeddings": a.tie,
        "torch_dtype": TORCH_DTYPE[a.dtype], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "attention_bias": a.attn_bias, "attention_dropout": 0.0,
        "initializer_range": 0.02, "use_cache": True,
    }
    if a.arch == "llama":
        cfg.update({"mlp_bias": False, "pretraining_tp": 1, "rope_scaling": a.rope_scaling})
    else:
        cfg["sliding_window"] = a.sliding_window
        if a.rope_scaling is not None:
            cfg["rope_scaling"] = a.rope_scaling
    return cfg


def llama3_config(a, vocab_size, factor=32.0, tied=True):
    """Llama-3.2-1B-Instruct's config.json (or, factor 8 untied, Llama-3.1-8B's), shrunk:
    bos 128000 and the eos list 128001, 128008, 128009 mapped to ids of the small vocab,
    the llama3 rope_scaling with its original context shrunk 128-fold."""
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": [2, 8, 9],
        "head_dim": a.head_dim, "hidden_act": "silu", "hidden_size": a.hidden,
        "initializer_range": 0.02, "intermediate_size": a.intermediate,
        "max_position_embeddings": 1024, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": a.heads, "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": factor, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": tied,
        "torch_dtype": TORCH_DTYPE[a.dtype], "transformers_version": "4.45.0.dev0",
        "use_cache": True, "vocab_size": vocab_size,
    }


def llama31_config(a, vocab_size):
    """Llama-3.1-8B-Instruct's config.json, shrunk: untied, llama3 rope_scaling factor 8."""
    return llama3_config(a, vocab_size, factor=8.0, tied=False)


def phi3_factors(n, top):
    """n LongRoPE rescale factors rising smoothly from 1 to top, shaped like Phi-3's lists."""
    return [round(1.0 + (top - 1.0) * (i / max(n - 1, 1)) ** 2, 6) for i in range(n)]


def phi3_config(a, vocab_size, long_context=False):
    """Phi-3-mini-4k-instruct's config.json (or the 128k one's), shrunk: the eos list
    32000, 32001, 32007 and pad 32000 mapped to ids of the small vocab."""
    hd = a.head_dim
    cfg = {
        "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "auto_map": {
            "AutoConfig": "configuration_phi3.Phi3Config",
            "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
        "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": [2, 5, 7],
        "hidden_act": "silu", "hidden_size": a.hidden, "initializer_range": 0.02,
        "intermediate_size": a.intermediate, "max_position_embeddings": 64,
        "model_type": "phi3", "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "original_max_position_embeddings": 64, "pad_token_id": 2, "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "sliding_window": a.sliding_window or 7, "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[a.dtype], "transformers_version": "4.40.2",
        "use_cache": True, "vocab_size": vocab_size,
    }
    if long_context:
        cfg.update({
            "max_position_embeddings": 256, "original_max_position_embeddings": 8,
            "sliding_window": 512,
            "rope_scaling": {"type": "longrope", "short_factor": phi3_factors(hd // 2, 1.2),
                             "long_factor": phi3_factors(hd // 2, 24.0)}})
    return cfg


def phi3_128k_config(a, vocab_size):
    """Phi-3-mini-128k-instruct's config.json, shrunk."""
    return phi3_config(a, vocab_size, long_context=True)


def qwen2_config(a, vocab_size):
    """Qwen2.5-0.5B-Instruct's config.json, shrunk: no attention_bias field (the biases
    are the architecture's), a sliding window present but off."""
    return {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": a.hidden, "initializer_range": 0.02, "intermediate_size": a.intermediate,
        "max_position_embeddings": a.max_pos, "max_window_layers": a.layers,
        "model_type": "qwen2", "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": a.max_pos,
        "tie_word_embeddings": a.tie, "torch_dtype": TORCH_DTYPE[a.dtype],
        "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False,
        "vocab_size": vocab_size,
    }


def qwen3_config(a, vocab_size):
    """Qwen3-0.6B's config.json, shrunk: explicit head_dim, no biases, no window."""
    return {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
        "head_dim": a.head_dim, "hidden_act": "silu", "hidden_size": a.hidden,
        "initializer_range": 0.02, "intermediate_size": a.intermediate,
        "max_position_embeddings": a.max_pos, "max_window_layers": a.layers,
        "model_type": "qwen3", "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": a.tie,
        "torch_dtype": TORCH_DTYPE[a.dtype], "transformers_version": "4.51.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": vocab_size,
    }


def qwen3_moe_config(a, vocab_size):
    """Qwen3-30B-A3B's config.json, shrunk: qwen3's fields and the experts' (untied, as the
    30B is)."""
    cfg = qwen3_config(a, vocab_size)
    cfg.update({
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "decoder_sparse_step": a.decoder_sparse_step, "mlp_only_layers": a.mlp_only_layers,
        "moe_intermediate_size": a.moe_intermediate, "norm_topk_prob": not a.no_norm_topk,
        "num_experts": a.experts, "num_experts_per_tok": a.experts_used,
        "output_router_logits": False, "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.001,
    })
    return cfg


def mixtral_config(a, vocab_size):
    """Mixtral-8x7B-v0.1's config.json, shrunk: intermediate_size is an expert's width."""
    return {
        "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": a.hidden, "initializer_range": 0.02,
        "intermediate_size": a.intermediate, "max_position_embeddings": a.max_pos,
        "model_type": "mixtral", "num_attention_heads": a.heads,
        "num_experts_per_tok": a.experts_used, "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads, "num_local_experts": a.experts,
        "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02, "sliding_window": a.sliding_window,
        "tie_word_embeddings": False, "torch_dtype": TORCH_DTYPE[a.dtype],
        "transformers_version": "4.36.0.dev0", "use_cache": True, "vocab_size": vocab_size,
    }


GPT_OSS_YARN = {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                "original_max_position_embeddings": 256, "rope_type": "yarn", "truncate": False}


def gpt_oss_config(a, vocab_size):
    """openai/gpt-oss-20b's config.json, shrunk (without its MXFP4 quantization_config, as a
    BF16 conversion stores it): eos 200002 and pad 199999 mapped to ids of the small vocab,
    the original context 4096 to 256 and max_position_embeddings to factor x 256, the window
    128 to 4."""
    rs = a.rope_scaling or GPT_OSS_YARN
    orig = rs.get("original_max_position_embeddings") or GPT_OSS_YARN[
        "original_max_position_embeddings"]
    max_pos = int(round((rs.get("factor") or 1.0) * orig))
    kinds = ("sliding_attention", "full_attention")
    return {
        "architectures": ["GptOssForCausalLM"], "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 2, "experts_per_token": a.experts_used,
        "head_dim": a.head_dim, "hidden_act": "silu", "hidden_size": a.hidden,
        "initial_context_length": orig, "initializer_range": 0.02,
        "intermediate_size": a.intermediate,
        "layer_types": [kinds[i % 2] for i in range(a.layers)],
        "max_position_embeddings": max_pos, "model_type": "gpt_oss",
        "num_attention_heads": a.heads, "num_experts_per_tok": a.experts_used,
        "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "num_local_experts": a.experts, "output_router_logits": False, "pad_token_id": 0,
        "rms_norm_eps": 1e-05, "rope_scaling": dict(GPT_OSS_YARN), "rope_theta": 150000,
        "router_aux_loss_coef": 0.9, "sliding_window": a.sliding_window or 4,
        "swiglu_limit": 7.0, "tie_word_embeddings": False,
        "torch_dtype": TORCH_DTYPE[a.dtype], "transformers_version": "4.55.0.dev0",
        "use_cache": True, "vocab_size": vocab_size,
    }


def gemma3_config(a, vocab_size):
    """gemma-3-1b-it's config.json, shrunk: no tie_word_embeddings field (tied is
    Gemma's default), an eos_token_id list, soft-capping null."""
    untied = {} if a.tie else {"tie_word_embeddings": False}
    return {**untied,
        "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": None, "bos_token_id": 1,
        "cache_implementation": "hybrid", "eos_token_id": [2, 106],
        "final_logit_softcapping": None, "head_dim": a.head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": a.hidden,
        "initializer_range": 0.02, "intermediate_size": a.intermediate,
        "max_position_embeddings": a.max_pos, "model_type": "gemma3_text",
        "num_attention_heads": a.heads, "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads, "pad_token_id": 0,
        "query_pre_attn_scalar": a.query_pre_attn_scalar or a.head_dim,
        "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None,
        "rope_theta": 1000000, "sliding_window": a.sliding_window or 512,
        "sliding_window_pattern": a.sliding_window_pattern or 6,
        "torch_dtype": TORCH_DTYPE[a.dtype], "transformers_version": "4.50.0.dev0",
        "use_cache": True, "vocab_size": vocab_size,
    }


def qwen35_layer_types(a):
    """Per layer "linear_attention" or "full_attention" (HF's default from the interval)."""
    return ["full_attention" if (i + 1) % a.full_attention_interval == 0 else "linear_attention"
            for i in range(a.layers)]


def qwen35_mrope_section(rot):
    """mrope_section for a rotary dimension rot: rot / 2 frequencies split in three, the
    first ones one larger where it does not divide (Qwen3.5's 32 gives [11, 11, 10])."""
    base, rem = divmod(rot // 2, 3)
    return [base + (k < rem) for k in range(3)]


def qwen35_text_config(a, vocab_size):
    """Qwen3.5-0.8B's text_config, shrunk: eos 248044 mapped to 2, rope_theta 1e7, the
    rotary dimension's mrope_section."""
    rot = int(a.head_dim * a.partial_rotary_factor)
    return {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True,
        "dtype": TORCH_DTYPE[a.dtype], "eos_token_id": 2,
        "full_attention_interval": a.full_attention_interval, "head_dim": a.head_dim,
        "hidden_act": "silu", "hidden_size": a.hidden, "initializer_range": 0.02,
        "intermediate_size": a.intermediate, "layer_types": qwen35_layer_types(a),
        "linear_conv_kernel_dim": a.conv_kernel, "linear_key_head_dim": a.linear_key_dim,
        "linear_num_key_heads": a.linear_k_heads, "linear_num_value_heads": a.linear_v_heads,
        "linear_value_head_dim": a.linear_value_dim, "mamba_ssm_dtype": "float32",
        "max_position_embeddings": a.max_pos, "mlp_only_layers": [],
        "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False, "num_attention_heads": a.heads,
        "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": qwen35_mrope_section(rot),
                            "partial_rotary_factor": a.partial_rotary_factor,
                            "rope_theta": 10000000, "rope_type": "default"},
        "tie_word_embeddings": a.tie, "use_cache": True, "vocab_size": vocab_size,
    }


def qwen35_moe_text_config(a, vocab_size):
    """Qwen3.5-35B-A3B's text_config, shrunk: qwen3_5's without intermediate_size (every
    layer's MLP is sparse), with the experts' fields (no norm_topk_prob: the router always
    renormalises)."""
    text = qwen35_text_config(a, vocab_size)
    del text["intermediate_size"]
    text.update({"model_type": "qwen3_5_moe_text", "moe_intermediate_size": a.moe_intermediate,
                 "num_experts": a.experts, "num_experts_per_tok": a.experts_used,
                 "output_router_logits": False, "router_aux_loss_coef": 0.001,
                 "shared_expert_intermediate_size": a.shared_intermediate})
    return text


QWEN35_VISION = {"hidden_size": 16, "in_channels": 3, "patch_size": 2, "temporal_patch_size": 2,
                 "spatial_merge_size": 2}


def qwen35_config(a, vocab_size):
    """Qwen3.5-0.8B's config.json (Qwen3_5ForConditionalGeneration: the text model under
    text_config, a vision tower's vision_config, the vision token ids mapped to the last
    five ids of the vocabulary), or with --causal-lm Qwen3_5ForCausalLM's flat one; for
    qwen3_5_moe Qwen3.5-35B-A3B's (Qwen3_5MoeForConditionalGeneration, model_type
    qwen3_5_moe, its vision_config's model_type qwen3_5_moe as the release has it; or
    Qwen3_5MoeForCausalLM's flat one)."""
    moe = a.family == "qwen3_5_moe"
    text = qwen35_moe_text_config(a, vocab_size) if moe else qwen35_text_config(a, vocab_size)
    name = "Qwen3_5Moe" if moe else "Qwen3_5"
    if a.causal_lm:
        return {"architectures": [name + "ForCausalLM"], **text,
                "transformers_version": "4.57.0.dev0"}
    v = QWEN35_VISION
    first = vocab_size - 5  # vision_start, vision_end, (vision_pad), image, video
    return {
        "architectures": [name + "ForConditionalGeneration"], "image_token_id": first + 3,
        "model_type": a.family, "text_config": text, "tie_word_embeddings": a.tie,
        "transformers_version": "4.57.0.dev0", "video_token_id": first + 4,
        "vision_config": {
            "deepstack_visual_indexes": [], "depth": 1, "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": v["hidden_size"], "in_channels": v["in_channels"],
            "initializer_range": 0.02, "intermediate_size": 2 * v["hidden_size"],
            "model_type": a.family, "num_heads": 2, "num_position_embeddings": 16,
            "out_hidden_size": a.hidden, "patch_size": v["patch_size"],
            "spatial_merge_size": v["spatial_merge_size"],
            "temporal_patch_size": v["temporal_patch_size"]},
        "vision_end_token_id": first + 1, "vision_start_token_id": first,
    }


def gemma4_text_config(a, vocab_size):
    """Gemma 4's text_config (gemma-4-E2B's fields), shrunk to the options' geometry."""
    text = {
        "attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": a.k_eq_v,
        "bos_token_id": 1, "dtype": TORCH_DTYPE[a.dtype], "enable_moe_block": a.moe,
        "eos_token_id": 2, "final_logit_softcapping": a.softcap or None,
        "global_head_dim": a.global_head_dim, "head_dim": a.head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": a.hidden,
        "hidden_size_per_layer_input": a.ple_dim, "initializer_range": 0.02,
        "intermediate_size": a.intermediate, "layer_types": gemma4_layer_types(a),
        "max_position_embeddings": a.max_pos, "model_type": "gemma4_text",
        "moe_intermediate_size": a.moe_intermediate if a.moe else None,
        "num_attention_heads": a.heads, "num_experts": a.experts if a.moe else None,
        "num_global_key_value_heads": a.global_kv_heads if a.k_eq_v else None,
        "num_hidden_layers": a.layers, "num_key_value_heads": a.kv_heads,
        "num_kv_shared_layers": a.kv_shared_layers, "pad_token_id": 0,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": a.partial_rotary_factor,
                               "rope_theta": 1000000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
        "sliding_window": a.sliding_window or 512, "tie_word_embeddings": a.tie,
        "top_k_experts": a.experts_used if a.moe else None,
        "use_bidirectional_attention": "vision" if a.k_eq_v else None, "use_cache": True,
        "use_double_wide_mlp": a.double_wide_mlp, "vocab_size": vocab_size,
        "vocab_size_per_layer_input": vocab_size,
    }
    return text


GEMMA4_VISION = {"hidden_size": 16, "patch_size": 2}
GEMMA4_AUDIO = {"hidden_size": 16, "output_proj_dims": 24}


def gemma4_config(a, vocab_size):
    """Gemma4ForConditionalGeneration's config.json (text_config, a small vision_config and
    audio_config, the multimodal token ids mapped to the vocabulary's last seven ids), or with
    --causal-lm Gemma4ForCausalLM's flat one."""
    text = gemma4_text_config(a, vocab_size)
    if a.causal_lm:
        return {"architectures": ["Gemma4ForCausalLM"], **text,
                "transformers_version": "5.5.0.dev0"}
    v, au = GEMMA4_VISION, GEMMA4_AUDIO
    first = vocab_size - 7
    return {
        "architectures": ["Gemma4ForConditionalGeneration"],
        "audio_config": {"hidden_size": au["hidden_size"], "model_type": "gemma4_audio",
                         "num_attention_heads": 2, "num_hidden_layers": 1,
                         "output_proj_dims": au["output_proj_dims"]},
        "audio_token_id": first, "boa_token_id": first + 1, "boi_token_id": first + 2,
        "dtype": TORCH_DTYPE[a.dtype], "eoa_token_index": first + 3,
        "eoi_token_id": first + 4, "image_token_id": first + 5, "initializer_range": 0.02,
        "model_type": "gemma4", "text_config": text, "tie_word_embeddings": a.tie,
        "transformers_version": "5.5.0.dev0", "video_token_id": first + 6,
        "vision_config": {"head_dim": 8, "hidden_size": v["hidden_size"],
                          "intermediate_size": 2 * v["hidden_size"],
                          "model_type": "gemma4_vision", "num_attention_heads": 2,
                          "num_hidden_layers": 1, "num_key_value_heads": 2,
                          "patch_size": v["patch_size"]},
    }


FAMILIES = {"qwen2": qwen2_config, "qwen3": qwen3_config, "qwen3_moe": qwen3_moe_config,
            "mixtral": mixtral_config, "gpt_oss": gpt_oss_config, "gemma3": gemma3_config,
            "llama3": llama3_config, "llama3.1": llama31_config, "phi3": phi3_config,
            "phi3-128k": phi3_128k_config, "qwen3_5": qwen35_config,
            "qwen3_5_moe": qwen35_config, "gemma4": gemma4_config}
FAMILY_TIED = {"llama3.1": False, "phi3": False, "phi3-128k": False,  # the others: tied
               "qwen3_moe": False, "mixtral": False, "gpt_oss": False, "qwen3_5_moe": False}
MOE_FAMILIES = ("qwen3_moe", "mixtral", "gpt_oss", "qwen3_5_moe")
QWEN35_FAMILIES = ("qwen3_5", "qwen3_5_moe")
ROUTER_SCALE = 2.0  # a router's weights ~ N(0, ROUTER_SCALE / sqrt(hidden)): see above
SWIGLU_SCALE = 3.0  # gpt-oss's gate_up_proj ~ N(0, SWIGLU_SCALE / sqrt(hidden)): see above
FUSED_FAMILIES = ("phi3", "phi3-128k")
A_RANGE = (0.05, 16.0)  # Qwen3.5's decay rates A = exp(A_log): see above  # qkv_proj and gate_up_proj are one tensor each


def write_json(path, obj, compact=False):
    """Write JSON deterministically: tokenizer.json on one line as HF does, configs indented."""
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            f.write(json.dumps(obj, ensure_ascii=False))
        else:
            f.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------- weights

def tensor_specs(a, vocab):
    """(name, shape, kind) of every tensor in HF order; kind is embed, linear, router, norm,
    norm0, bias, sink or swiglu."""
    if a.family in QWEN35_FAMILIES:
        return qwen35_specs(a, vocab)
    if a.family == "gemma4":
        return gemma4_specs(a, vocab)
    hd = a.head_dim
    fused = a.family in FUSED_FAMILIES
    gpt_oss = a.family == "gpt_oss"
    qkv_bias = a.attn_bias or a.family in ("qwen2", "gpt_oss")
    qk_norm = a.family in ("qwen3", "qwen3_moe", "gemma3")
    gemma = a.family == "gemma3"
    norm = "norm0" if gemma else "norm"  # Gemma's norms are w in (1 + w)
    # Tied, the embeddings are the lm_head too: scaled like a linear weight they no longer
    # dominate the residual stream, which would make greedy decoding repeat the last token.
    specs = [("model.embed_tokens.weight", (vocab, a.hidden), "linear" if a.tie else "embed")]
    for i in range(a.layers):
        p = "model.layers.%d." % i
        specs.append((p + "input_layernorm.weight", (a.hidden,), norm))
        if fused:  # rows: q, then k, then v
            specs.append((p + "self_attn.qkv_proj.weight",
                          ((a.heads + 2 * a.kv_heads) * hd, a.hidden), "linear"))
        else:
            specs += [
                (p + "self_attn.q_proj.weight", (a.heads * hd, a.hidden), "linear"),
                (p + "self_attn.k_proj.weight", (a.kv_heads * hd, a.hidden), "linear"),
                (p + "self_attn.v_proj.weight", (a.kv_heads * hd, a.hidden), "linear"),
            ]
        specs.append((p + "self_attn.o_proj.weight", (a.hidden, a.heads * hd), "linear"))
        if qkv_bias:
            specs += [
                (p + "self_attn.q_proj.bias", (a.heads * hd,), "bias"),
                (p + "self_attn.k_proj.bias", (a.kv_heads * hd,), "bias"),
                (p + "self_attn.v_proj.bias", (a.kv_heads * hd,), "bias"),
            ]
        if a.attn_bias or gpt_oss:
            specs.append((p + "self_attn.o_proj.bias", (a.hidden,), "bias"))
        if gpt_oss:  # one learnt logit per query head, joining its softmax
            specs.append((p + "self_attn.sinks", (a.heads,), "sink"))
        if qk_norm:
            specs += [
                (p + "self_attn.q_norm.weight", (hd,), norm),
                (p + "self_attn.k_norm.weight", (hd,), norm),
            ]
        specs.append((p + "post_attention_layernorm.weight", (a.hidden,), norm))
        if gemma:
            specs.append((p + "pre_feedforward_layernorm.weight", (a.hidden,), norm))
        if sparse_layer(a, i):
            specs += moe_specs(a, p)
        elif fused:  # rows: gate, then up
            specs.append((p + "mlp.gate_up_proj.weight", (2 * a.intermediate, a.hidden),
                          "linear"))
            specs.append((p + "mlp.down_proj.weight", (a.hidden, a.intermediate), "linear"))
        else:
            specs += [
                (p + "mlp.gate_proj.weight", (a.intermediate, a.hidden), "linear"),
                (p + "mlp.up_proj.weight", (a.intermediate, a.hidden), "linear"),
                (p + "mlp.down_proj.weight", (a.hidden, a.intermediate), "linear"),
            ]
        if gemma:
            specs.append((p + "post_feedforward_layernorm.weight", (a.hidden,), norm))
    specs.append(("model.norm.weight", (a.hidden,), norm))
    if not a.tie:
        specs.append(("lm_head.weight", (vocab, a.hidden), "linear"))
    return specs


def qwen35_specs(a, vocab):
    """Qwen3.5's tensors (qwen3_5 and qwen3_5_moe): the text model's (under
    model.language_model., or model. with --causal-lm), then two tiny vision-tower tensors
    (released layout only) and the multi-token-prediction head (mtp.*), which HF's text model
    ignores as the loaders must.  The text model's tensors come first so that both layouts
    draw the same values."""
    lm = "model." if a.causal_lm else "model.language_model."
    h = a.hidden
    specs = [(lm + "embed_tokens.weight", (vocab, h), "linear" if a.tie else "embed")]
    for i, kind in enumerate(qwen35_layer_types(a)):
        p = lm + "layers.%d." % i
        specs.append((p + "input_layernorm.weight", (h,), "norm0"))
        specs += (qwen35_attention_specs(a, p) if kind == "full_attention"
                  else qwen35_linear_specs(a, p))
        specs.append((p + "post_attention_layernorm.weight", (h,), "norm0"))
        specs += qwen35_mlp_specs(a, p)
    specs.append((lm + "norm.weight", (h,), "norm0"))
    if not a.tie:
        specs.append(("lm_head.weight", (vocab, h), "linear"))
    if not a.causal_lm:
        v = QWEN35_VISION
        t, s = v["temporal_patch_size"], v["patch_size"]
        specs += [("model.visual.patch_embed.proj.weight",
                   (v["hidden_size"], v["in_channels"], t, s, s), "linear"),
                  ("model.visual.merger.linear_fc2.weight",
                   (h, v["hidden_size"] * v["spatial_merge_size"] ** 2), "linear")]
    # the released multi-token-prediction head: fc joins the normed embedding of the next
    # token and the normed hidden state, then one full-attention decoder layer and its norm
    specs += [("mtp.fc.weight", (h, 2 * h), "linear")]
    specs.append(("mtp.layers.0.input_layernorm.weight", (h,), "norm0"))
    specs += qwen35_attention_specs(a, "mtp.layers.0.")
    specs.append(("mtp.layers.0.post_attention_layernorm.weight", (h,), "norm0"))
    specs += qwen35_mlp_specs(a, "mtp.layers.0.")
    specs += [("mtp.norm.weight", (h,), "norm0"),
              ("mtp.pre_fc_norm_embedding.weight", (h,), "norm0"),
              ("mtp.pre_fc_norm_hidden.weight", (h,), "norm0")]
    return specs


def qwen35_attention_specs(a, p):
    """A gated full-attention layer's tensors after prefix p; q_proj: per head, head_dim
    query rows then head_dim gate rows."""
    h, hd = a.hidden, a.head_dim
    return [(p + "self_attn.q_proj.weight", (2 * a.heads * hd, h), "linear"),
            (p + "self_attn.k_proj.weight", (a.kv_heads * hd, h), "linear"),
            (p + "self_attn.v_proj.weight", (a.kv_heads * hd, h), "linear"),
            (p + "self_attn.o_proj.weight", (h, a.heads * hd), "linear"),
            (p + "self_attn.q_norm.weight", (hd,), "norm0"),
            (p + "self_attn.k_norm.weight", (hd,), "norm0")]


def qwen35_linear_specs(a, p):
    """A Gated DeltaNet layer's tensors after prefix p."""
    h = a.hidden
    nk, nv, dk, dv = a.linear_k_heads, a.linear_v_heads, a.linear_key_dim, a.linear_value_dim
    conv_dim = 2 * nk * dk + nv * dv
    qk = ("query_like_key", nk * dk)  # see draw_tensor
    return [(p + "linear_attn.in_proj_qkv.weight", (conv_dim, h), ("linear",) + qk),
            (p + "linear_attn.in_proj_z.weight", (nv * dv, h), "linear"),
            (p + "linear_attn.in_proj_b.weight", (nv, h), "linear"),
            (p + "linear_attn.in_proj_a.weight", (nv, h), "linear"),
            (p + "linear_attn.conv1d.weight", (conv_dim, 1, a.conv_kernel), ("conv",) + qk),
            (p + "linear_attn.dt_bias", (nv,), "dt_bias"),
            (p + "linear_attn.A_log", (nv,), "a_log"),
            (p + "linear_attn.norm.weight", (dv,), "norm"),
            (p + "linear_attn.out_proj.weight", (h, nv * dv), "linear")]


def qwen35_mlp_specs(a, p):
    """A layer's MLP after prefix p: qwen3_5's dense one, or qwen3_5_moe's sparse block as the
    released checkpoints store it: the router mlp.gate [E, hidden], the experts stacked and
    fused, mlp.experts.gate_up_proj [E, 2 I, hidden] (per expert its I gate rows, then its I
    up rows; no .weight suffix) and mlp.experts.down_proj [E, hidden, I], the shared expert
    mlp.shared_expert.{gate,up,down}_proj and its gate mlp.shared_expert_gate [1, hidden]."""
    h = a.hidden
    if a.family != "qwen3_5_moe":
        return [(p + "mlp.gate_proj.weight", (a.intermediate, h), "linear"),
                (p + "mlp.up_proj.weight", (a.intermediate, h), "linear"),
                (p + "mlp.down_proj.weight", (h, a.intermediate), "linear")]
    e, i, s = a.experts, a.moe_intermediate, a.shared_intermediate
    return [(p + "mlp.gate.weight", (e, h), "router"),
            (p + "mlp.experts.gate_up_proj", (e, 2 * i, h), "stacked"),
            (p + "mlp.experts.down_proj", (e, h, i), "stacked"),
            (p + "mlp.shared_expert.gate_proj.weight", (s, h), "linear"),
            (p + "mlp.shared_expert.up_proj.weight", (s, h), "linear"),
            (p + "mlp.shared_expert.down_proj.weight", (h, s), "linear"),
            (p + "mlp.shared_expert_gate.weight", (1, h), "linear")]


def gemma4_specs(a, vocab):
    """Gemma 4's tensors: the text model's (under model.language_model., or model. with
    --causal-lm), then (released layout) three tiny vision and audio tensors a text loader
    skips.  No k_proj, v_proj or k_norm in a KV-shared layer, no v_proj in a full layer with
    attention_k_eq_v; v_norm has no weight."""
    lm = "model." if a.causal_lm else "model.language_model."
    h, L, P = a.hidden, a.layers, a.ple_dim
    types = gemma4_layer_types(a)
    first_shared = L - a.kv_shared_layers
    specs = [(lm + "embed_tokens.weight", (vocab, h), "linear" if a.tie else "embed")]
    if P:
        specs += [(lm + "embed_tokens_per_layer.weight", (vocab, L * P), ("std", P ** -0.5)),
                  (lm + "per_layer_model_projection.weight", (L * P, h), "linear"),
                  (lm + "per_layer_projection_norm.weight", (P,), "norm")]
    for i, kind in enumerate(types):
        p = lm + "layers.%d." % i
        full = kind == "full_attention"
        hd = a.global_head_dim if full else a.head_dim
        kv = a.global_kv_heads if full and a.k_eq_v else a.kv_heads
        shared = i >= first_shared
        specs += [(p + "input_layernorm.weight", (h,), "norm"),
                  (p + "self_attn.q_proj.weight", (a.heads * hd, h), "linear"),
                  (p + "self_attn.q_norm.weight", (hd,), "norm")]
        if not shared:
            specs.append((p + "self_attn.k_proj.weight", (kv * hd, h), "linear"))
            if not (full and a.k_eq_v):
                specs.append((p + "self_attn.v_proj.weight", (kv * hd, h), "linear"))
            specs.append((p + "self_attn.k_norm.weight", (hd,), "norm"))
        width = a.intermediate * (2 if a.double_wide_mlp and shared else 1)
        specs += [(p + "self_attn.o_proj.weight", (h, a.heads * hd), "linear"),
                  (p + "post_attention_layernorm.weight", (h,), "norm"),
                  (p + "pre_feedforward_layernorm.weight", (h,), "norm"),
                  (p + "mlp.gate_proj.weight", (width, h), "linear"),
                  (p + "mlp.up_proj.weight", (width, h), "linear"),
                  (p + "mlp.down_proj.weight", (h, width), "linear")]
        if a.moe:
            e, m = a.experts, a.moe_intermediate
            specs += [(p + "router.proj.weight", (e, h), "router"),
                      (p + "router.scale", (h,), "norm"),
                      (p + "router.per_expert_scale", (e,), "norm"),
                      (p + "experts.gate_up_proj", (e, 2 * m, h), "stacked"),
                      (p + "experts.down_proj", (e, h, m), "stacked"),
                      (p + "post_feedforward_layernorm_1.weight", (h,), "norm"),
                      (p + "pre_feedforward_layernorm_2.weight", (h,), "norm"),
                      (p + "post_feedforward_layernorm_2.weight", (h,), "norm")]
        specs.append((p + "post_feedforward_layernorm.weight", (h,), "norm"))
        if P:
            specs += [(p + "per_layer_input_gate.weight", (P, h), "linear"),
                      (p + "per_layer_projection.weight", (h, P), "linear"),
                      (p + "post_per_layer_input_norm.weight", (h,), "norm")]
        specs.append((p + "layer_scalar", (1,), "norm"))
    specs.append((lm + "norm.weight", (h,), "norm"))
    if not a.tie:
        specs.append(("lm_head.weight", (vocab, h), "linear"))
    if not a.causal_lm:
        v, au = GEMMA4_VISION, GEMMA4_AUDIO
        specs += [("model.vision_tower.patch_embedder.input_proj.weight",
                   (v["hidden_size"], 3 * v["patch_size"] ** 2), "linear"),
                  ("model.embed_vision.embedding_projection.weight", (h, v["hidden_size"]),
                   "linear"),
                  ("model.embed_audio.embedding_projection.weight",
                   (h, au["output_proj_dims"]), "linear")]
    return specs


def moe_specs(a, p):
    """A sparse layer's router and experts, after the layer prefix p: Qwen3-MoE's
    mlp.gate and mlp.experts.E.{gate,up,down}_proj, Mixtral's block_sparse_moe.gate and
    block_sparse_moe.experts.E.{w1,w2,w3} (gate, down, up), or gpt-oss's biased router and
    stacked [experts, in, out] matrices with their biases."""
    if a.family == "gpt_oss":
        e, h, i = a.experts, a.hidden, a.intermediate
        return [(p + "mlp.router.weight", (e, h), "router"),
                (p + "mlp.router.bias", (e,), "bias"),
                (p + "mlp.experts.gate_up_proj", (e, h, 2 * i), "swiglu"),
                (p + "mlp.experts.gate_up_proj_bias", (e, 2 * i), "bias"),
                (p + "mlp.experts.down_proj", (e, i, h), "linear"),
                (p + "mlp.experts.down_proj_bias", (e, h), "bias")]
    if a.family == "mixtral":
        block, width = p + "block_sparse_moe.", a.intermediate
        names = (("w1", "in"), ("w2", "out"), ("w3", "in"))
    else:
        block, width = p + "mlp.", a.moe_intermediate
        names = (("gate_proj", "in"), ("up_proj", "in"), ("down_proj", "out"))
    specs = [(block + "gate.weight", (a.experts, a.hidden), "router")]
    for e in range(a.experts):
        for name, side in names:
            shape = (width, a.hidden) if side == "in" else (a.hidden, width)
            specs.append((block + "experts.%d.%s.weight" % (e, name), shape, "linear"))
    return specs


def draw_tensor(rng, shape, kind):
    """Draw one float32 tensor with the scale its kind needs to keep activations O(1).
    A kind (base, "query_like_key", n) is base's draw whose first n rows (Qwen3.5's query
    channels) become (q + 2 k) / sqrt(5) of themselves and the next n (the key channels)."""
    if isinstance(kind, tuple) and kind[0] == "std":  # ~ N(0, kind[1])
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(kind[1])
    if isinstance(kind, tuple):
        base, _, n = kind
        x = draw_tensor(rng, shape, base)
        x[:n] = (x[:n] + np.float32(2) * x[n:2 * n]) / np.float32(np.sqrt(5.0))
        return x
    if kind == "a_log":  # log(A), A log-uniform on A_RANGE
        lo, hi = np.log(A_RANGE[0]), np.log(A_RANGE[1])
        return rng.uniform(lo, hi, shape).astype(np.float32)
    x = rng.standard_normal(shape, dtype=np.float32)
    if kind == "conv":  # a depthwise kernel over shape[-1] taps
        x *= np.float32(1.0 / np.sqrt(shape[-1]))
    elif kind == "linear":
        x *= np.float32(1.0 / np.sqrt(shape[1]))
    elif kind == "stacked":  # [experts, out, in]: a linear weight per expert
        x *= np.float32(1.0 / np.sqrt(shape[-1]))
    elif kind == "router":
        x *= np.float32(ROUTER_SCALE / np.sqrt(shape[1]))
    elif kind == "swiglu":
        x *= np.float32(SWIGLU_SCALE / np.sqrt(shape[1]))
    elif kind in ("norm", "dt_bias"):
        x *= np.float32(0.1)
        x += np.float32(1.0)
    elif kind == "norm0":
        x *= np.float32(0.1)
    elif kind == "bias":
        x *= np.float32(0.5)
    return x


def f32_to_bf16_bits(x):
    """Round float32 to bfloat16 (nearest, ties to even) and return the uint16 bits."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").reshape(-1)
    out = np.empty(u.shape, dtype="<u2")
    step = 1 << 20  # in chunks, to keep the temporaries small
    for s in range(0, u.size, step):
        c = u[s:s + step]
        half_minus_one_plus_lsb = np.uint32(0x7FFF) + ((c >> np.uint32(16)) & np.uint32(1))
        out[s:s + step] = (c + half_minus_one_plus_lsb) >> np.uint32(16)
    return out.reshape(np.shape(x))


def encode(x, dtype):
    """float32 array -> little-endian array in the file dtype."""
    if dtype == "f32":
        return x.astype("<f4", copy=False)
    if dtype == "f16":
        return x.astype("<f2")
    return f32_to_bf16_bits(x)


def split_shards(specs, n_shards, dtype):
    """Split the tensor list, in order, into n_shards non-empty runs of about equal bytes."""
    sizes = [int(np.prod(s)) * BYTES_PER_ELEM[dtype] for _, s, _ in specs]
    total, shards, start, done = sum(sizes), [], 0, 0
    for k in range(1, n_shards):
        end = start + 1  # at least one tensor per shard ...
        done += sizes[start]
        while end < len(specs) - (n_shards - k) and done + sizes[end] <= total * k / n_shards:
            done += sizes[end]  # ... and leave at least one for each later shard
            end += 1
        shards.append(specs[start:end])
        start = end
    shards.append(specs[start:])
    return shards


def safetensors_header(specs, dtype):
    """The JSON header, space-padded to a multiple of 8 bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in specs:
        nbytes = int(np.prod(shape)) * BYTES_PER_ELEM[dtype]
        header[name] = {"dtype": ST_DTYPE[dtype], "shape": list(shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return raw + b" " * (-len(raw) % 8)


def write_safetensors(path, specs, dtype, rng):
    """Write one safetensors file, drawing each tensor from rng just before writing it."""
    header = safetensors_header(specs, dtype)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for _, shape, kind in specs:
            f.write(memoryview(encode(draw_tensor(rng, shape, kind), dtype)).cast("B"))


def remove_old_weights(out_dir):
    """Delete weight files a previous run left in out_dir, so no stale layout remains."""
    for name in sorted(os.listdir(out_dir)):
        if name in ("model.safetensors", "model.safetensors.index.json") or (
                name.startswith("model-") and name.endswith(".safetensors")):
            os.remove(os.path.join(out_dir, name))


def write_weights(a, out_dir, vocab):
    """Write model.safetensors, or the shards and their index."""
    remove_old_weights(out_dir)
    specs = tensor_specs(a, vocab)
    rng = np.random.default_rng(a.seed)
    if a.shards == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), specs, a.dtype, rng)
        return
    weight_map, total = {}, 0
    for k, part in enumerate(split_shards(specs, a.shards, a.dtype), 1):
        fname = "model-%05d-of-%05d.safetensors" % (k, a.shards)
        write_safetensors(os.path.join(out_dir, fname), part, a.dtype, rng)
        for name, shape, _ in part:
            weight_map[name] = fname
            total += int(np.prod(shape)) * BYTES_PER_ELEM[a.dtype]
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_json(os.path.join(out_dir, "model.safetensors.index.json"), index)


# --------------------------------------------------------------------------- main

def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(a.out_dir, exist_ok=True)
    vocab = write_tokenizer(a, a.out_dir) + a.pad_vocab
    write_json(os.path.join(a.out_dir, "config.json"), model_config(a, vocab))
    if a.no_weights:
        remove_old_weights(a.out_dir)
    else:
        write_weights(a, a.out_dir, vocab)


if __name__ == "__main__":
    main()
