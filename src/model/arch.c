/*
 * arch.c: the architecture table, the tensor-role table and the walk over a
 * model's tensors that every loader, the device upload and the accounting
 * share (arch.h).
 */
#include "model/arch.h"

#include <stdio.h>
#include <string.h>

#include "base/join_names.h"
#include "model/model.h"

#define ARCH_MAX_EXTRA 8		/* architectures arch_register may add */

/* The architectures cbllm runs. */
static const cbllm_arch BuiltinArchs[] = {
	{.hf_name = "LlamaForCausalLM", .model_type = "llama", .gguf_name = "llama",
		.features = ARCH_GGUF_PERMUTED_QK, .activation = ARCH_ACT_SILU},
	{.hf_name = "MistralForCausalLM", .model_type = "mistral", .gguf_name = "llama",
		.features = ARCH_GGUF_PERMUTED_QK, .activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen2ForCausalLM", .model_type = "qwen2", .gguf_name = "qwen2",
		.features = ARCH_QKV_BIAS, .activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen3ForCausalLM", .model_type = "qwen3", .gguf_name = "qwen3",
		.features = ARCH_QK_NORM, .activation = ARCH_ACT_SILU},
	{.hf_name = "Gemma3ForCausalLM", .model_type = "gemma3_text", .gguf_name = "gemma3",
		.features = ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_SANDWICH_NORM | ARCH_EMBED_SCALE |
		ARCH_TIED_DEFAULT, .activation = ARCH_ACT_GELU_TANH},
	{.hf_name = "Phi3ForCausalLM", .model_type = "phi3", .gguf_name = "phi3",
		.features = ARCH_FUSED_QKV | ARCH_FUSED_GATE_UP, .activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen3MoeForCausalLM", .model_type = "qwen3_moe", .gguf_name = "qwen3moe",
		.features = ARCH_QK_NORM, .activation = ARCH_ACT_SILU},
	/* llama.cpp writes Mixtral as "llama" with experts: the llama row above is found first */
	{.hf_name = "MixtralForCausalLM", .model_type = "mixtral", .gguf_name = "llama",
		.features = ARCH_GGUF_PERMUTED_QK | ARCH_MOE_BLOCK_SPARSE, .activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen3_5ForConditionalGeneration", .model_type = "qwen3_5", .gguf_name = "qwen35",
		.features = ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_LINEAR_ATTN | ARCH_ATTN_GATE |
		ARCH_TEXT_CONFIG, .activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen3_5ForCausalLM", .model_type = "qwen3_5_text", .gguf_name = "qwen35",
		.features = ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_LINEAR_ATTN | ARCH_ATTN_GATE,
	.activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen3_5MoeForConditionalGeneration", .model_type = "qwen3_5_moe",
		.gguf_name = "qwen35moe",
		.features = ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_LINEAR_ATTN | ARCH_ATTN_GATE |
		ARCH_TEXT_CONFIG | ARCH_SHARED_EXPERT, .activation = ARCH_ACT_SILU},
	{.hf_name = "Qwen3_5MoeForCausalLM", .model_type = "qwen3_5_moe_text", .gguf_name = "qwen35moe",
		.features = ARCH_QK_NORM | ARCH_NORM_PLUS_ONE | ARCH_LINEAR_ATTN | ARCH_ATTN_GATE |
		ARCH_SHARED_EXPERT, .activation = ARCH_ACT_SILU},
	{.hf_name = "Gemma4ForConditionalGeneration", .model_type = "gemma4", .gguf_name = "gemma4",
		.features = ARCH_QK_NORM | ARCH_SANDWICH_NORM | ARCH_EMBED_SCALE | ARCH_TIED_DEFAULT |
		ARCH_TEXT_CONFIG | ARCH_GEMMA4, .activation = ARCH_ACT_GELU_TANH},
	{.hf_name = "Gemma4ForCausalLM", .model_type = "gemma4_text", .gguf_name = "gemma4",
		.features = ARCH_QK_NORM | ARCH_SANDWICH_NORM | ARCH_EMBED_SCALE | ARCH_TIED_DEFAULT |
		ARCH_GEMMA4, .activation = ARCH_ACT_GELU_TANH},
	{.hf_name = "GptOssForCausalLM", .model_type = "gpt_oss", .gguf_name = "gpt-oss",
		.features = ARCH_QKV_BIAS | ARCH_O_BIAS | ARCH_GPT_OSS | ARCH_ATTN_SINKS | ARCH_MOE_BIASES,
	.activation = ARCH_ACT_SWIGLU_OAI},
};

#define N_BUILTIN ((int) (sizeof(BuiltinArchs) / sizeof(BuiltinArchs[0])))

static cbllm_arch ExtraArchs[ARCH_MAX_EXTRA];
static int	n_extra;

#define MODEL_FIELD(f) offsetof(cbllm_model, f)
#define LAYER_FIELD(f) offsetof(cbllm_layer, f)
#define L_HF(name) "model.layers.%d." name	/* a layer tensor's safetensors name */
#define L_GGUF(name) "blk.%d." name	/* and its GGUF name */
#define E_HF(name) "model.layers.%d.mlp.experts.%d." name	/* an expert's safetensors name */
#define E_MIXTRAL(name) "model.layers.%d.block_sparse_moe.experts.%d." name	/* Mixtral's */
#define E_STACK(name) "model.layers.%d.mlp.experts." name	/* gpt-oss's, all experts in one */
#define E_G4(name) "model.layers.%d.experts." name	/* Gemma 4's, all experts in one */
#define EXPERT_FIELD(f) offsetof(cbllm_expert, f)

/*
 * Every tensor role, in load order (arch_tensor says what each field means;
 * a field left out is 0: no needs, no unless, not tied, not read per step).
 * Gemma's post_attention_layernorm norms the attention's output, not the
 * MLP's input as Llama's does: two rows bind the MLP's input norm, one per
 * naming, told apart by ARCH_SANDWICH_NORM.  Phi-3's fused projections bind
 * wq, wk, wv and w_gate, w_up as row blocks of one stored tensor each
 * (FusedTensors below).  A layer with experts (cfg.layer_moe) has a router
 * and each expert's three matrices instead of the dense MLP; Mixtral names
 * them its own way (ARCH_MOE_BLOCK_SPARSE), gpt-oss stacks them, with
 * biases (ARCH_GPT_OSS, ARCH_MOE_BIASES: arch_hf_layout).
 */
static const arch_tensor Tensors[] = {
	{.role = "the embeddings", .hf = "model.embed_tokens.weight", .gguf = "token_embd.weight",
		.kind = ARCH_MATRIX, .scope = ARCH_BEFORE_LAYERS, .rows = DIM_VOCAB, .cols = DIM_HIDDEN,
		.offset = MODEL_FIELD(embed)},
	{.role = "the per-layer embeddings", .hf = "model.embed_tokens_per_layer.weight",
		.gguf = "per_layer_token_embd.weight", .kind = ARCH_MATRIX, .scope = ARCH_BEFORE_LAYERS,
		.rows = DIM_PLE_VOCAB, .cols = DIM_PLE_ALL, .needs = ARCH_PLE,
		.offset = MODEL_FIELD(embed_ple)},
	{.role = "the per-layer projection", .hf = "model.per_layer_model_projection.weight",
		.gguf = "per_layer_model_proj.weight", .kind = ARCH_MATRIX, .scope = ARCH_BEFORE_LAYERS,
		.rows = DIM_PLE_ALL, .cols = DIM_HIDDEN, .needs = ARCH_PLE, .per_step = true,
		.offset = MODEL_FIELD(w_ple_model_proj)},
	{.role = "the per-layer projection norm", .hf = "model.per_layer_projection_norm.weight",
		.gguf = "per_layer_proj_norm.weight", .kind = ARCH_NORM, .scope = ARCH_BEFORE_LAYERS,
		.rows = DIM_PLE, .cols = DIM_ONE, .needs = ARCH_PLE,
		.offset = MODEL_FIELD(ple_proj_norm)},
	{.role = "attn_norm", .hf = L_HF("input_layernorm.weight"), .gguf = L_GGUF("attn_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.offset = LAYER_FIELD(attn_norm)},
	{.role = "wq", .hf = L_HF("self_attn.q_proj.weight"), .gguf = L_GGUF("attn_q.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_Q, .cols = DIM_HIDDEN,
		.unless = ARCH_FUSED_QKV | ARCH_ATTN_GATE, .per_step = true, .offset = LAYER_FIELD(wq),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "wq", .hf = L_HF("self_attn.q_proj.weight"), .gguf = L_GGUF("attn_q.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_Q_GATED, .cols = DIM_HIDDEN,
		.needs = ARCH_ATTN_GATE, .per_step = true, .offset = LAYER_FIELD(wq),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "bq", .hf = L_HF("self_attn.q_proj.bias"), .gguf = L_GGUF("attn_q.bias"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_Q, .cols = DIM_ONE,
		.needs = ARCH_QKV_BIAS, .offset = LAYER_FIELD(bq),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "wk", .hf = L_HF("self_attn.k_proj.weight"), .gguf = L_GGUF("attn_k.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_KV, .cols = DIM_HIDDEN,
		.unless = ARCH_FUSED_QKV, .per_step = true, .offset = LAYER_FIELD(wk),
		.mixer = ARCH_KV_LAYERS},
	{.role = "bk", .hf = L_HF("self_attn.k_proj.bias"), .gguf = L_GGUF("attn_k.bias"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_KV, .cols = DIM_ONE,
		.needs = ARCH_QKV_BIAS, .offset = LAYER_FIELD(bk),
		.mixer = ARCH_KV_LAYERS},
	{.role = "wv", .hf = L_HF("self_attn.v_proj.weight"), .gguf = L_GGUF("attn_v.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_KV, .cols = DIM_HIDDEN,
		.unless = ARCH_FUSED_QKV, .per_step = true, .offset = LAYER_FIELD(wv),
		.mixer = ARCH_V_LAYERS},
	{.role = "bv", .hf = L_HF("self_attn.v_proj.bias"), .gguf = L_GGUF("attn_v.bias"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_KV, .cols = DIM_ONE,
		.needs = ARCH_QKV_BIAS, .offset = LAYER_FIELD(bv),
		.mixer = ARCH_V_LAYERS},
	{.role = "wq", .hf = L_HF("self_attn.qkv_proj.weight"), .gguf = L_GGUF("attn_qkv.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_Q, .cols = DIM_HIDDEN,
		.needs = ARCH_FUSED_QKV, .per_step = true, .offset = LAYER_FIELD(wq),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "wk", .hf = L_HF("self_attn.qkv_proj.weight"), .gguf = L_GGUF("attn_qkv.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_KV, .cols = DIM_HIDDEN,
		.needs = ARCH_FUSED_QKV, .per_step = true, .offset = LAYER_FIELD(wk),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "wv", .hf = L_HF("self_attn.qkv_proj.weight"), .gguf = L_GGUF("attn_qkv.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_KV, .cols = DIM_HIDDEN,
		.needs = ARCH_FUSED_QKV, .per_step = true, .offset = LAYER_FIELD(wv),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "q_norm", .hf = L_HF("self_attn.q_norm.weight"), .gguf = L_GGUF("attn_q_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HEAD, .cols = DIM_ONE,
		.needs = ARCH_QK_NORM, .offset = LAYER_FIELD(q_norm),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "k_norm", .hf = L_HF("self_attn.k_norm.weight"), .gguf = L_GGUF("attn_k_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HEAD, .cols = DIM_ONE,
		.needs = ARCH_QK_NORM, .offset = LAYER_FIELD(k_norm),
		.mixer = ARCH_KV_LAYERS},
	{.role = "sinks", .hf = L_HF("self_attn.sinks"), .gguf = L_GGUF("attn_sinks.weight"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_HEADS, .cols = DIM_ONE,
		.needs = ARCH_ATTN_SINKS, .offset = LAYER_FIELD(sinks),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "wo", .hf = L_HF("self_attn.o_proj.weight"), .gguf = L_GGUF("attn_output.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_Q,
		.per_step = true, .offset = LAYER_FIELD(wo),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "bo", .hf = L_HF("self_attn.o_proj.bias"), .gguf = L_GGUF("attn_output.bias"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_O_BIAS, .offset = LAYER_FIELD(bo),
		.mixer = ARCH_ATTN_LAYERS},
	{.role = "w_lin_qkv", .hf = L_HF("linear_attn.in_proj_qkv.weight"),
		.gguf = L_GGUF("attn_qkv.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_LIN_QKV, .cols = DIM_HIDDEN, .needs = ARCH_LINEAR_ATTN, .per_step = true,
		.offset = LAYER_FIELD(w_lin_qkv), .mixer = ARCH_LINEAR_LAYERS},
	{.role = "w_lin_z", .hf = L_HF("linear_attn.in_proj_z.weight"),
		.gguf = L_GGUF("attn_gate.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_LIN_V, .cols = DIM_HIDDEN, .needs = ARCH_LINEAR_ATTN, .per_step = true,
		.offset = LAYER_FIELD(w_lin_z), .mixer = ARCH_LINEAR_LAYERS},
	{.role = "w_lin_b", .hf = L_HF("linear_attn.in_proj_b.weight"),
		.gguf = L_GGUF("ssm_beta.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_LIN_HEADS, .cols = DIM_HIDDEN, .needs = ARCH_LINEAR_ATTN, .per_step = true,
		.offset = LAYER_FIELD(w_lin_b), .mixer = ARCH_LINEAR_LAYERS},
	{.role = "w_lin_a", .hf = L_HF("linear_attn.in_proj_a.weight"),
		.gguf = L_GGUF("ssm_alpha.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_LIN_HEADS, .cols = DIM_HIDDEN, .needs = ARCH_LINEAR_ATTN, .per_step = true,
		.offset = LAYER_FIELD(w_lin_a), .mixer = ARCH_LINEAR_LAYERS},
	{.role = "lin_conv", .hf = L_HF("linear_attn.conv1d.weight"),
		.gguf = L_GGUF("ssm_conv1d.weight"), .kind = ARCH_BIAS, .scope = ARCH_LAYER,
		.rows = DIM_LIN_QKV, .cols = DIM_LIN_CONV, .needs = ARCH_LINEAR_ATTN,
		.offset = LAYER_FIELD(lin_conv), .mixer = ARCH_LINEAR_LAYERS},
	{.role = "lin_dt_bias", .hf = L_HF("linear_attn.dt_bias"), .gguf = L_GGUF("ssm_dt.bias"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_LIN_HEADS, .cols = DIM_ONE,
		.needs = ARCH_LINEAR_ATTN, .offset = LAYER_FIELD(lin_dt_bias),
		.mixer = ARCH_LINEAR_LAYERS},
	{.role = "lin_a", .hf = L_HF("linear_attn.A_log"), .gguf = L_GGUF("ssm_a"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_LIN_HEADS, .cols = DIM_ONE,
		.needs = ARCH_LINEAR_ATTN, .offset = LAYER_FIELD(lin_a), .mixer = ARCH_LINEAR_LAYERS,
		.hf_neg_exp = true},
	{.role = "lin_norm", .hf = L_HF("linear_attn.norm.weight"), .gguf = L_GGUF("ssm_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_LIN_VDIM, .cols = DIM_ONE,
		.needs = ARCH_LINEAR_ATTN, .plain_norm = true, .offset = LAYER_FIELD(lin_norm),
		.mixer = ARCH_LINEAR_LAYERS},
	{.role = "w_lin_out", .hf = L_HF("linear_attn.out_proj.weight"),
		.gguf = L_GGUF("ssm_out.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_HIDDEN, .cols = DIM_LIN_V, .needs = ARCH_LINEAR_ATTN, .per_step = true,
		.offset = LAYER_FIELD(w_lin_out), .mixer = ARCH_LINEAR_LAYERS},
	{.role = "mlp_norm",
		.hf = L_HF("post_attention_layernorm.weight"), .gguf = L_GGUF("ffn_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.unless = ARCH_SANDWICH_NORM | ARCH_GPT_OSS | ARCH_LINEAR_ATTN,
		.offset = LAYER_FIELD(mlp_norm)},
	{.role = "mlp_norm",
		.hf = L_HF("post_attention_layernorm.weight"), .gguf = L_GGUF("post_attention_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_GPT_OSS, .offset = LAYER_FIELD(mlp_norm)},
	{.role = "mlp_norm",
		.hf = L_HF("post_attention_layernorm.weight"), .gguf = L_GGUF("post_attention_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_LINEAR_ATTN, .offset = LAYER_FIELD(mlp_norm)},
	{.role = "attn_out_norm",
		.hf = L_HF("post_attention_layernorm.weight"), .gguf = L_GGUF("post_attention_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_SANDWICH_NORM, .offset = LAYER_FIELD(attn_out_norm)},
	{.role = "mlp_norm",
		.hf = L_HF("pre_feedforward_layernorm.weight"), .gguf = L_GGUF("ffn_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_SANDWICH_NORM, .offset = LAYER_FIELD(mlp_norm)},
	{.role = "w_gate", .hf = L_HF("mlp.gate_proj.weight"), .gguf = L_GGUF("ffn_gate.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_INTERMEDIATE, .cols = DIM_HIDDEN,
		.unless = ARCH_FUSED_GATE_UP, .per_step = true,
		.offset = LAYER_FIELD(w_gate), .layers = ARCH_DENSE_LAYERS},
	{.role = "w_up", .hf = L_HF("mlp.up_proj.weight"), .gguf = L_GGUF("ffn_up.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_INTERMEDIATE, .cols = DIM_HIDDEN,
		.unless = ARCH_FUSED_GATE_UP, .per_step = true,
		.offset = LAYER_FIELD(w_up), .layers = ARCH_DENSE_LAYERS},
	{.role = "w_gate", .hf = L_HF("mlp.gate_up_proj.weight"), .gguf = L_GGUF("ffn_up.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_INTERMEDIATE, .cols = DIM_HIDDEN,
		.needs = ARCH_FUSED_GATE_UP, .per_step = true,
		.offset = LAYER_FIELD(w_gate), .layers = ARCH_DENSE_LAYERS},
	{.role = "w_up", .hf = L_HF("mlp.gate_up_proj.weight"), .gguf = L_GGUF("ffn_up.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_INTERMEDIATE, .cols = DIM_HIDDEN,
		.needs = ARCH_FUSED_GATE_UP, .per_step = true,
		.offset = LAYER_FIELD(w_up), .layers = ARCH_DENSE_LAYERS},
	{.role = "w_down", .hf = L_HF("mlp.down_proj.weight"), .gguf = L_GGUF("ffn_down.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_INTERMEDIATE,
		.per_step = true, .offset = LAYER_FIELD(w_down), .layers = ARCH_DENSE_LAYERS},
	{.role = "router", .hf = L_HF("mlp.gate.weight"), .gguf = L_GGUF("ffn_gate_inp.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_EXPERTS, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE, .unless = ARCH_MOE_BLOCK_SPARSE | ARCH_GPT_OSS | ARCH_GEMMA4, .per_step = true,
		.offset = LAYER_FIELD(router), .layers = ARCH_MOE_LAYERS},
	{.role = "router", .hf = L_HF("mlp.router.weight"), .gguf = L_GGUF("ffn_gate_inp.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_EXPERTS, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_GPT_OSS, .per_step = true, .offset = LAYER_FIELD(router),
		.layers = ARCH_MOE_LAYERS},
	{.role = "router bias", .hf = L_HF("mlp.router.bias"), .gguf = L_GGUF("ffn_gate_inp.bias"),
		.kind = ARCH_BIAS, .scope = ARCH_LAYER, .rows = DIM_EXPERTS, .cols = DIM_ONE,
		.needs = ARCH_MOE | ARCH_MOE_BIASES, .offset = LAYER_FIELD(router_bias),
		.layers = ARCH_MOE_LAYERS},
	{.role = "router", .hf = L_HF("block_sparse_moe.gate.weight"),
		.gguf = L_GGUF("ffn_gate_inp.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_EXPERTS, .cols = DIM_HIDDEN, .needs = ARCH_MOE | ARCH_MOE_BLOCK_SPARSE,
		.per_step = true, .offset = LAYER_FIELD(router), .layers = ARCH_MOE_LAYERS},
	{.role = "expert w_gate", .hf = E_HF("gate_proj.weight"), .gguf = L_GGUF("ffn_gate_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE, .unless = ARCH_MOE_BLOCK_SPARSE | ARCH_GPT_OSS | ARCH_MOE_STACKED_ROWS |
		ARCH_GEMMA4,
		.offset = EXPERT_FIELD(w_gate)},
	{.role = "expert w_up", .hf = E_HF("up_proj.weight"), .gguf = L_GGUF("ffn_up_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE, .unless = ARCH_MOE_BLOCK_SPARSE | ARCH_GPT_OSS | ARCH_MOE_STACKED_ROWS |
		ARCH_GEMMA4,
		.offset = EXPERT_FIELD(w_up)},
	{.role = "expert w_down", .hf = E_HF("down_proj.weight"), .gguf = L_GGUF("ffn_down_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_HIDDEN, .cols = DIM_EXPERT_FF,
		.needs = ARCH_MOE, .unless = ARCH_MOE_BLOCK_SPARSE | ARCH_GPT_OSS | ARCH_MOE_STACKED_ROWS |
		ARCH_GEMMA4,
		.offset = EXPERT_FIELD(w_down)},
	{.role = "expert w_gate", .hf = E_STACK("gate_up_proj"), .gguf = L_GGUF("ffn_gate_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_MOE_STACKED_ROWS, .offset = EXPERT_FIELD(w_gate),
		.hf_layout = ARCH_HF_ROWS_FIRST},
	{.role = "expert w_up", .hf = E_STACK("gate_up_proj"), .gguf = L_GGUF("ffn_up_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_MOE_STACKED_ROWS, .offset = EXPERT_FIELD(w_up),
		.hf_layout = ARCH_HF_ROWS_SECOND},
	{.role = "expert w_down", .hf = E_STACK("down_proj"), .gguf = L_GGUF("ffn_down_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_HIDDEN, .cols = DIM_EXPERT_FF,
		.needs = ARCH_MOE | ARCH_MOE_STACKED_ROWS, .offset = EXPERT_FIELD(w_down),
		.hf_layout = ARCH_HF_ROWS},
	{.role = "expert w_gate", .hf = E_MIXTRAL("w1.weight"), .gguf = L_GGUF("ffn_gate_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_MOE_BLOCK_SPARSE, .offset = EXPERT_FIELD(w_gate)},
	{.role = "expert w_up", .hf = E_MIXTRAL("w3.weight"), .gguf = L_GGUF("ffn_up_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_MOE_BLOCK_SPARSE, .offset = EXPERT_FIELD(w_up)},
	{.role = "expert w_down", .hf = E_MIXTRAL("w2.weight"), .gguf = L_GGUF("ffn_down_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_HIDDEN, .cols = DIM_EXPERT_FF,
		.needs = ARCH_MOE | ARCH_MOE_BLOCK_SPARSE, .offset = EXPERT_FIELD(w_down)},
	{.role = "expert w_gate", .hf = E_STACK("gate_up_proj"), .gguf = L_GGUF("ffn_gate_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_GPT_OSS, .offset = EXPERT_FIELD(w_gate),
		.hf_layout = ARCH_HF_STACKED_EVEN},
	{.role = "expert w_up", .hf = E_STACK("gate_up_proj"), .gguf = L_GGUF("ffn_up_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_GPT_OSS, .offset = EXPERT_FIELD(w_up),
		.hf_layout = ARCH_HF_STACKED_ODD},
	{.role = "expert w_down", .hf = E_STACK("down_proj"), .gguf = L_GGUF("ffn_down_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_HIDDEN, .cols = DIM_EXPERT_FF,
		.needs = ARCH_MOE | ARCH_GPT_OSS, .offset = EXPERT_FIELD(w_down),
		.hf_layout = ARCH_HF_STACKED},
	{.role = "expert gate bias", .hf = E_STACK("gate_up_proj_bias"),
		.gguf = L_GGUF("ffn_gate_exps.bias"), .kind = ARCH_BIAS, .scope = ARCH_EXPERT,
		.rows = DIM_EXPERT_FF, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_MOE_BIASES,
		.offset = EXPERT_FIELD(b_gate), .hf_layout = ARCH_HF_STACKED_EVEN},
	{.role = "expert up bias", .hf = E_STACK("gate_up_proj_bias"),
		.gguf = L_GGUF("ffn_up_exps.bias"), .kind = ARCH_BIAS, .scope = ARCH_EXPERT,
		.rows = DIM_EXPERT_FF, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_MOE_BIASES,
		.offset = EXPERT_FIELD(b_up), .hf_layout = ARCH_HF_STACKED_ODD},
	{.role = "expert down bias", .hf = E_STACK("down_proj_bias"),
		.gguf = L_GGUF("ffn_down_exps.bias"), .kind = ARCH_BIAS, .scope = ARCH_EXPERT,
		.rows = DIM_HIDDEN, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_MOE_BIASES,
		.offset = EXPERT_FIELD(b_down), .hf_layout = ARCH_HF_STACKED},
	{.role = "router", .hf = L_HF("router.proj.weight"), .gguf = L_GGUF("ffn_gate_inp.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_EXPERTS, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_GEMMA4, .per_step = true, .offset = LAYER_FIELD(router),
		.layers = ARCH_MOE_LAYERS},
	{.role = "router scale", .hf = L_HF("router.scale"), .gguf = L_GGUF("ffn_gate_inp.scale"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_MOE | ARCH_GEMMA4, .plain_norm = true, .offset = LAYER_FIELD(router_scale),
		.layers = ARCH_MOE_LAYERS},
	{.role = "expert scale", .hf = L_HF("router.per_expert_scale"),
		.gguf = L_GGUF("ffn_down_exps.scale"), .kind = ARCH_NORM, .scope = ARCH_LAYER,
		.rows = DIM_EXPERTS, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_GEMMA4, .plain_norm = true,
		.offset = LAYER_FIELD(expert_scale), .layers = ARCH_MOE_LAYERS},
	{.role = "expert w_gate", .hf = E_G4("gate_up_proj"), .gguf = L_GGUF("ffn_gate_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_GEMMA4, .offset = EXPERT_FIELD(w_gate),
		.hf_layout = ARCH_HF_ROWS_FIRST},
	{.role = "expert w_up", .hf = E_G4("gate_up_proj"), .gguf = L_GGUF("ffn_up_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_EXPERT_FF, .cols = DIM_HIDDEN,
		.needs = ARCH_MOE | ARCH_GEMMA4, .offset = EXPERT_FIELD(w_up),
		.hf_layout = ARCH_HF_ROWS_SECOND},
	{.role = "expert w_down", .hf = E_G4("down_proj"), .gguf = L_GGUF("ffn_down_exps.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_EXPERT, .rows = DIM_HIDDEN, .cols = DIM_EXPERT_FF,
		.needs = ARCH_MOE | ARCH_GEMMA4, .offset = EXPERT_FIELD(w_down),
		.hf_layout = ARCH_HF_ROWS},
	{.role = "dense_out_norm", .hf = L_HF("post_feedforward_layernorm_1.weight"),
		.gguf = L_GGUF("post_ffw_norm_1.weight"), .kind = ARCH_NORM, .scope = ARCH_LAYER,
		.rows = DIM_HIDDEN, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_GEMMA4,
		.offset = LAYER_FIELD(dense_out_norm), .layers = ARCH_MOE_LAYERS},
	{.role = "moe_in_norm", .hf = L_HF("pre_feedforward_layernorm_2.weight"),
		.gguf = L_GGUF("pre_ffw_norm_2.weight"), .kind = ARCH_NORM, .scope = ARCH_LAYER,
		.rows = DIM_HIDDEN, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_GEMMA4,
		.offset = LAYER_FIELD(moe_in_norm), .layers = ARCH_MOE_LAYERS},
	{.role = "moe_out_norm", .hf = L_HF("post_feedforward_layernorm_2.weight"),
		.gguf = L_GGUF("post_ffw_norm_2.weight"), .kind = ARCH_NORM, .scope = ARCH_LAYER,
		.rows = DIM_HIDDEN, .cols = DIM_ONE, .needs = ARCH_MOE | ARCH_GEMMA4,
		.offset = LAYER_FIELD(moe_out_norm), .layers = ARCH_MOE_LAYERS},
	{.role = "shared w_gate", .hf = L_HF("mlp.shared_expert.gate_proj.weight"),
		.gguf = L_GGUF("ffn_gate_shexp.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_SHARED_FF, .cols = DIM_HIDDEN, .needs = ARCH_MOE | ARCH_SHARED_EXPERT,
		.per_step = true, .offset = LAYER_FIELD(w_sh_gate), .layers = ARCH_MOE_LAYERS},
	{.role = "shared w_up", .hf = L_HF("mlp.shared_expert.up_proj.weight"),
		.gguf = L_GGUF("ffn_up_shexp.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_SHARED_FF, .cols = DIM_HIDDEN, .needs = ARCH_MOE | ARCH_SHARED_EXPERT,
		.per_step = true, .offset = LAYER_FIELD(w_sh_up), .layers = ARCH_MOE_LAYERS},
	{.role = "shared w_down", .hf = L_HF("mlp.shared_expert.down_proj.weight"),
		.gguf = L_GGUF("ffn_down_shexp.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_HIDDEN, .cols = DIM_SHARED_FF, .needs = ARCH_MOE | ARCH_SHARED_EXPERT,
		.per_step = true, .offset = LAYER_FIELD(w_sh_down), .layers = ARCH_MOE_LAYERS},
	{.role = "shared gate", .hf = L_HF("mlp.shared_expert_gate.weight"),
		.gguf = L_GGUF("ffn_gate_inp_shexp.weight"), .kind = ARCH_MATRIX, .scope = ARCH_LAYER,
		.rows = DIM_ONE, .cols = DIM_HIDDEN, .needs = ARCH_MOE | ARCH_SHARED_EXPERT,
		.per_step = true, .offset = LAYER_FIELD(w_sh_router), .layers = ARCH_MOE_LAYERS},
	{.role = "mlp_out_norm",
		.hf = L_HF("post_feedforward_layernorm.weight"), .gguf = L_GGUF("post_ffw_norm.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.needs = ARCH_SANDWICH_NORM, .offset = LAYER_FIELD(mlp_out_norm)},
	{.role = "ple_gate", .hf = L_HF("per_layer_input_gate.weight"), .gguf = L_GGUF("inp_gate.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_PLE, .cols = DIM_HIDDEN,
		.needs = ARCH_PLE, .per_step = true, .offset = LAYER_FIELD(w_ple_gate)},
	{.role = "ple_proj", .hf = L_HF("per_layer_projection.weight"), .gguf = L_GGUF("proj.weight"),
		.kind = ARCH_MATRIX, .scope = ARCH_LAYER, .rows = DIM_HIDDEN, .cols = DIM_PLE,
		.needs = ARCH_PLE, .per_step = true, .offset = LAYER_FIELD(w_ple_proj)},
	{.role = "ple_norm", .hf = L_HF("post_per_layer_input_norm.weight"),
		.gguf = L_GGUF("post_norm.weight"), .kind = ARCH_NORM, .scope = ARCH_LAYER,
		.rows = DIM_HIDDEN, .cols = DIM_ONE, .needs = ARCH_PLE, .offset = LAYER_FIELD(ple_norm)},
	{.role = "layer_scalar", .hf = L_HF("layer_scalar"), .gguf = L_GGUF("layer_output_scale.weight"),
		.kind = ARCH_NORM, .scope = ARCH_LAYER, .rows = DIM_ONE, .cols = DIM_ONE,
		.needs = ARCH_GEMMA4, .plain_norm = true, .offset = LAYER_FIELD(layer_scalar)},
	{.role = "the final norm", .hf = "model.norm.weight", .gguf = "output_norm.weight",
		.kind = ARCH_NORM, .scope = ARCH_AFTER_LAYERS, .rows = DIM_HIDDEN, .cols = DIM_ONE,
		.offset = MODEL_FIELD(final_norm)},
	{.role = "lm_head", .hf = "lm_head.weight", .gguf = "output.weight",
		.kind = ARCH_MATRIX, .scope = ARCH_AFTER_LAYERS, .rows = DIM_VOCAB, .cols = DIM_HIDDEN,
		.tied = true, .per_step = true, .offset = MODEL_FIELD(lm_head)},
};

#define N_TENSORS ((int) (sizeof(Tensors) / sizeof(Tensors[0])))

/* The fused tensors: Phi-3's q, k, v projection (rows q, then k, then v) and gate, up. */
static const arch_fused FusedTensors[] = {
	{.hf = "model.layers.%d.self_attn.qkv_proj.weight", .n_parts = 3,
		.rows = {DIM_Q, DIM_KV, DIM_KV},
		.field = {LAYER_FIELD(wq), LAYER_FIELD(wk), LAYER_FIELD(wv)}},
	{.hf = "model.layers.%d.mlp.gate_up_proj.weight", .n_parts = 2,
		.rows = {DIM_INTERMEDIATE, DIM_INTERMEDIATE},
		.field = {LAYER_FIELD(w_gate), LAYER_FIELD(w_up)}},
};

#define N_FUSED ((int) (sizeof(FusedTensors) / sizeof(FusedTensors[0])))

/* Entry i of the builtin and registered architectures together. */
static const cbllm_arch *
ArchAt(int i)
{
	return i < N_BUILTIN ? &BuiltinArchs[i] : &ExtraArchs[i - N_BUILTIN];
}

/* The architecture named by hf_name, else by model_type; NULL when neither is known. */
const cbllm_arch *
arch_find(const char *hf_name, const char *model_type)
{
	for (int i = 0; hf_name != NULL && i < N_BUILTIN + n_extra; i++)
		if (strcmp(ArchAt(i)->hf_name, hf_name) == 0)
			return ArchAt(i);
	for (int i = 0; hf_name == NULL && model_type != NULL && i < N_BUILTIN + n_extra; i++)
		if (strcmp(ArchAt(i)->model_type, model_type) == 0)
			return ArchAt(i);
	return NULL;
}

/* The first architecture of GGUF name name (len bytes, not NUL-terminated). */
const cbllm_arch *
arch_find_gguf(const char *name, size_t len)
{
	for (int i = 0; i < N_BUILTIN + n_extra; i++)
	{
		const char *g = ArchAt(i)->gguf_name;

		if (g != NULL && strlen(g) == len && memcmp(g, name, len) == 0)
			return ArchAt(i);
	}
	return NULL;
}

/* "A, B and C" of every architecture's HF name. */
void
arch_list_names(char *buf, size_t size)
{
	const char *names[N_BUILTIN + ARCH_MAX_EXTRA];
	int			n = N_BUILTIN + n_extra;

	for (int i = 0; i < n; i++)
		names[i] = ArchAt(i)->hf_name;
	cbllm_join_names(buf, size, names, n, "and", "");
}

/* "a, b and c" of every distinct GGUF general.architecture, in table order. */
void
arch_list_gguf_names(char *buf, size_t size)
{
	const char *names[N_BUILTIN + ARCH_MAX_EXTRA];
	int			n = 0;

	for (int i = 0; i < N_BUILTIN + n_extra; i++)
	{
		const char *g = ArchAt(i)->gguf_name;
		bool		seen = g == NULL;

		for (int j = 0; j < n && !seen; j++)
			seen = strcmp(names[j], g) == 0;
		if (!seen)
			names[n++] = g;
	}
	cbllm_join_names(buf, size, names, n, "and", "");
}

/* Add an architecture to the table. */
int
arch_register(const cbllm_arch *a, cbllm_err *err)
{
	if (a->hf_name == NULL || a->model_type == NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "an architecture needs an HF name and a model type");
	if (arch_find(a->hf_name, NULL) != NULL)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "architecture \"%s\" is already known",
						  a->hf_name);
	if (n_extra == ARCH_MAX_EXTRA)
		return cbllm_fail(err, CBLLM_ERR_INVALID, "no room for architecture \"%s\" (%d added already)",
						  a->hf_name, ARCH_MAX_EXTRA);
	ExtraArchs[n_extra++] = *a;
	return CBLLM_OK;
}

/* The tensor roles in load order. */
const arch_tensor *
arch_tensors(int *n_out)
{
	*n_out = N_TENSORS;
	return Tensors;
}

/* The role marked tied: the one the embeddings stand for with tie_word_embeddings. */
const arch_tensor *
arch_tied_tensor(void)
{
	for (int i = 0; i < N_TENSORS; i++)
		if (Tensors[i].tied)
			return &Tensors[i];
	return NULL;
}

/* The length of dimension d in a model of configuration cfg. */
int64_t
arch_dim_size(const cbllm_model_config *cfg, arch_dim d)
{
	switch (d)
	{
		case DIM_ONE:
			return 1;
		case DIM_HIDDEN:
			return cfg->hidden;
		case DIM_HEAD:
			return cfg->head_dim;
		case DIM_Q:
			return (int64_t) cfg->n_heads * cfg->head_dim;
		case DIM_KV:
			return (int64_t) cfg->n_kv_heads * cfg->head_dim;
		case DIM_INTERMEDIATE:
			return cfg->intermediate;
		case DIM_VOCAB:
			return cfg->vocab_size;
		case DIM_EXPERTS:
			return cfg->n_experts;
		case DIM_EXPERT_FF:
			return cfg->expert_intermediate;
		case DIM_HEADS:
			return cfg->n_heads;
		case DIM_Q_GATED:
			return (int64_t) 2 * cfg->n_heads * cfg->head_dim;
		case DIM_LIN_QKV:
			return (int64_t) 2 * cfg->lin_k_heads * cfg->lin_k_dim +
				(int64_t) cfg->lin_v_heads * cfg->lin_v_dim;
		case DIM_LIN_V:
			return (int64_t) cfg->lin_v_heads * cfg->lin_v_dim;
		case DIM_LIN_HEADS:
			return cfg->lin_v_heads;
		case DIM_LIN_VDIM:
			return cfg->lin_v_dim;
		case DIM_LIN_CONV:
			return cfg->lin_conv;
		case DIM_SHARED_FF:
			return cfg->shared_intermediate;
		case DIM_PLE:
			return cfg->ple_dim;
		case DIM_PLE_ALL:
			return (int64_t) cfg->n_layers * cfg->ple_dim;
		case DIM_PLE_VOCAB:
			return cfg->ple_vocab;
	}
	return 0;
}

/* The length of dimension d in layer (a layer's own head size, kv heads and MLP width). */
int64_t
arch_layer_dim_size(const cbllm_model_config *cfg, arch_dim d, int layer)
{
	if (layer < 0 || layer >= cfg->n_layers)
		return arch_dim_size(cfg, d);
	switch (d)
	{
		case DIM_HEAD:
			return cfg->layer_head_dim[layer];
		case DIM_Q:
			return (int64_t) cfg->n_heads * cfg->layer_head_dim[layer];
		case DIM_Q_GATED:
			return (int64_t) 2 * cfg->n_heads * cfg->layer_head_dim[layer];
		case DIM_KV:
			return (int64_t) cfg->layer_kv_heads[layer] * cfg->layer_head_dim[layer];
		case DIM_INTERMEDIATE:
			return cfg->layer_ff[layer];
		default:
			return arch_dim_size(cfg, d);
	}
}

/* The stored tensor role t is rows of, and where its own rows start. */
void
arch_stored_rows(const arch_tensor *t, const cbllm_model_config *cfg, int64_t *stored_rows,
				 int64_t *first_row)
{
	*stored_rows = arch_dim_size(cfg, t->rows);
	*first_row = 0;
	for (int i = 0; i < N_FUSED; i++)
	{
		const arch_fused *f = &FusedTensors[i];
		int64_t		at = 0,
					mine = -1;

		if (t->scope != ARCH_LAYER || strcmp(f->hf, t->hf) != 0)
			continue;
		for (int p = 0; p < f->n_parts; p++)
		{
			if (f->field[p] == t->offset)
				mine = at;
			at += arch_dim_size(cfg, f->rows[p]);
		}
		if (mine >= 0)
		{
			*stored_rows = at;
			*first_row = mine;
		}
	}
}

/* Tensor t's name in safetensors (gguf false) or GGUF files, for layer or -1 and an expert's role's expert. */
void
arch_tensor_name(const arch_tensor *t, int layer, int expert, bool gguf, char *buf, size_t size)
{
	const char *pattern = gguf ? t->gguf : t->hf;

	if (t->scope == ARCH_EXPERT && !gguf)
		snprintf(buf, size, pattern, layer, expert);
	else if (t->scope == ARCH_LAYER || t->scope == ARCH_EXPERT)
		snprintf(buf, size, pattern, layer);
	else
		snprintf(buf, size, "%s", pattern);
}

/* "model.x" as a multimodal checkpoint names its decoder's tensor: "model.language_model.x". */
void
arch_hf_checkpoint_name(uint32_t features, char *buf, size_t size)
{
	const char *lm = "model.language_model.";
	size_t		len = strlen(buf);

	if (!(features & ARCH_TEXT_CONFIG) || strncmp(buf, "model.", 6) != 0 ||
		len + strlen(lm) - 6 + 1 > size)
		return;
	memmove(buf + strlen(lm), buf + 6, len - 6 + 1);
	memcpy(buf, lm, strlen(lm));
}

/* Describe role t of layer (or -1) and expert (or -1) of m in mt, numbering its matrix with *index. */
static void
DescribeTensor(const cbllm_model *m, const arch_tensor *t, int layer, int expert,
			   uint64_t *index, model_tensor *mt)
{
	char	   *base = expert >= 0 ? (char *) &m->layers[layer].experts[expert] :
		layer >= 0 ? (char *) &m->layers[layer] : (char *) m;

	memset(mt, 0, sizeof(*mt));
	mt->t = t;
	mt->layer = layer;
	mt->expert = expert;
	mt->rows = arch_layer_dim_size(&m->cfg, t->rows, layer);
	mt->cols = arch_layer_dim_size(&m->cfg, t->cols, layer);
	arch_stored_rows(t, &m->cfg, &mt->stored_rows, &mt->first_row);
	if (mt->first_row == 0 && mt->stored_rows == arch_dim_size(&m->cfg, t->rows))
		mt->stored_rows = mt->rows; /* a tensor of its own: the layer's rows */
	mt->tied = t->tied && m->lm_head_tied;
	if (t->kind == ARCH_MATRIX)
	{
		mt->matrix = (cbllm_weight *) (base + t->offset);
		if (!mt->tied)
			mt->index = (*index)++;
	}
	else
		mt->vector = (float **) (base + t->offset);
}

/* Whether layer tensor t exists in layer l of a model of configuration cfg. */
static bool
InLayer(const arch_tensor *t, const cbllm_model_config *cfg, int l)
{
	if (t->mixer != ARCH_ANY_MIXER && (t->mixer == ARCH_LINEAR_LAYERS) != (cfg->layer_linear[l] != 0))
		return false;
	if ((t->mixer == ARCH_KV_LAYERS || t->mixer == ARCH_V_LAYERS) && cfg->layer_kv_source[l] != l)
		return false;
	if (t->mixer == ARCH_V_LAYERS && cfg->layer_v_is_k[l])
		return false;
	switch (t->layers)
	{
		case ARCH_EVERY_LAYER:
			return true;
		case ARCH_DENSE_LAYERS:	/* Gemma 4's layers keep their dense MLP beside the experts */
			return !cfg->layer_moe[l] || (cfg->features & ARCH_GEMMA4);
		case ARCH_MOE_LAYERS:
			return cfg->layer_moe[l];
	}
	return false;
}

/* Call fn for the roles of scope in layer (-1 outside the layers) and expert (-1 for none). */
static int
VisitRoles(const cbllm_model *m, arch_scope scope, int layer, int expert, uint64_t *index,
		   model_visit_fn fn, void *arg, cbllm_err *err)
{
	model_tensor mt;
	int			rc;

	for (int i = 0; i < N_TENSORS; i++)
	{
		if (Tensors[i].scope != scope || !arch_has_tensor(&Tensors[i], m->cfg.features) ||
			(scope == ARCH_LAYER && !InLayer(&Tensors[i], &m->cfg, layer)))
			continue;
		DescribeTensor(m, &Tensors[i], layer, expert, index, &mt);
		if ((rc = fn(arg, &mt, err)) != 0)
			return rc;
	}
	return CBLLM_OK;
}

/* Call fn for the roles of one scope: each layer's, then its experts', for ARCH_LAYER. */
static int
VisitScope(const cbllm_model *m, arch_scope scope, uint64_t *index, model_visit_fn fn,
		   void *arg, cbllm_err *err)
{
	int			rc;

	if (scope != ARCH_LAYER)
		return VisitRoles(m, scope, -1, -1, index, fn, arg, err);
	for (int l = 0; l < m->cfg.n_layers; l++)
	{
		if ((rc = VisitRoles(m, ARCH_LAYER, l, -1, index, fn, arg, err)))
			return rc;
		for (int e = 0; m->cfg.layer_moe[l] && e < m->cfg.n_experts; e++)
			if ((rc = VisitRoles(m, ARCH_EXPERT, l, e, index, fn, arg, err)))
				return rc;
	}
	return CBLLM_OK;
}

/* Call fn for every tensor of m: before the layers, each layer's, after the layers. */
int
model_visit(const cbllm_model *m, model_visit_fn fn, void *arg, cbllm_err *err)
{
	uint64_t	index = 0;
	int			rc;

	if ((rc = VisitScope(m, ARCH_BEFORE_LAYERS, &index, fn, arg, err)) ||
		(rc = VisitScope(m, ARCH_LAYER, &index, fn, arg, err)))
		return rc;
	return VisitScope(m, ARCH_AFTER_LAYERS, &index, fn, arg, err);
}
