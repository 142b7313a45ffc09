/*
 * model.h: a Llama-family checkpoint: its configuration (config.json) and its
 * weights, which stay in their stored dtype inside the safetensors mapping.
 */
#ifndef CBLLM_MODEL_H
#define CBLLM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "safetensors.h"
#include "util.h"

typedef struct cbllm_model_config
{
	char		arch[64];		/* "LlamaForCausalLM", "MistralForCausalLM" */
	int			hidden;			/* hidden_size */
	int			n_layers;		/* num_hidden_layers */
	int			n_heads;		/* num_attention_heads */
	int			n_kv_heads;		/* num_key_value_heads (GQA when < n_heads) */
	int			head_dim;		/* head_dim, or hidden / n_heads */
	int			intermediate;	/* intermediate_size */
	int			vocab_size;
	int			max_pos;		/* max_position_embeddings */
	int			sliding_window; /* 0: attend to the whole context */
	float		rope_theta;
	float		rope_scale;		/* linear rope_scaling factor, 1 when none */
	float		rms_eps;
	bool		tie_embeddings;
	int32_t		bos_id;			/* -1 when absent */
	int32_t		eos_id;			/* -1 when absent */
} cbllm_model_config;

/* A weight matrix in its stored dtype, row-major (rows, cols). */
typedef struct cbllm_weight
{
	cbllm_dtype dtype;
	int64_t		rows;
	int64_t		cols;
	const void *data;
} cbllm_weight;

typedef struct cbllm_layer
{
	float	   *attn_norm;		/* (hidden), converted to f32 */
	cbllm_weight wq;			/* (n_heads * head_dim, hidden) */
	cbllm_weight wk;			/* (n_kv_heads * head_dim, hidden) */
	cbllm_weight wv;			/* (n_kv_heads * head_dim, hidden) */
	cbllm_weight wo;			/* (hidden, n_heads * head_dim) */
	float	   *mlp_norm;		/* (hidden), converted to f32 */
	cbllm_weight w_gate;		/* (intermediate, hidden) */
	cbllm_weight w_up;			/* (intermediate, hidden) */
	cbllm_weight w_down;		/* (hidden, intermediate) */
} cbllm_layer;

typedef struct cbllm_model
{
	cbllm_model_config cfg;
	const char *dir;			/* the caller's string, valid during model_load only */
	st_archive *st;
	cbllm_weight embed;			/* (vocab, hidden) */
	cbllm_layer *layers;		/* (n_layers) */
	float	   *final_norm;		/* (hidden), converted to f32 */
	cbllm_weight lm_head;		/* (vocab, hidden); the embedding when tied */
	size_t		weight_bytes;	/* bytes of all matrices as stored */
	size_t		step_weight_bytes;	/* bytes of the layer matrices and lm_head */
	int64_t		matmul_params;	/* elements of the layer matrices and lm_head */
} cbllm_model;

/* Parse dir/config.json; errors name the file and the problem. */
int			model_config_load(const char *dir, cbllm_model_config *cfg, cbllm_err *err);

/* Load config and weights of the model in dir. */
int			model_load(const char *dir, cbllm_model **out, cbllm_err *err);
void		model_free(cbllm_model *m);

#endif
