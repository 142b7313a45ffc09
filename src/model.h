/*
 * model.h: a Llama-family checkpoint: its configuration (config.json) and its
 * weights, which stay in their stored dtype inside the safetensors mapping.
 *
 * The "dummy" load format (model_dummy.c) reads config.json alone and gives
 * every matrix deterministic pseudo-random bf16 values, for benchmarks of a
 * model's geometry without its weight files.  Element i of a dummy matrix is
 * dummy_value(dummy_seed, i) * dummy_scale, multiplied in f32 and rounded to
 * bf16 (nearest even); a device backend may generate it from those two fields
 * when data is NULL.
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
	const void *data;			/* (rows, cols); NULL for a dummy not filled on the host */
	uint64_t	dummy_seed;		/* nonzero: a dummy tensor whose values are
								 * dummy_value(dummy_seed, i) * dummy_scale */
	float		dummy_scale;	/* 1 / sqrt(cols) for a dummy tensor, 0 otherwise */
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
	st_archive *st;				/* NULL for the dummy format */
	bool		owns_matrices;	/* the matrices' data are malloc'd (dummy on the host) */
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

/* Parse the NUL-terminated text of a config.json; path names it in messages. */
int			model_config_parse(const char *json, const char *path, cbllm_model_config *cfg,
							   cbllm_err *err);

/* What model_load_ex loads, and from where. */
typedef struct model_load_params
{
	const char *dir;
	const char *format;			/* NULL or "auto" or "safetensors": the checkpoint;
								 * "dummy": random weights */
	bool		dummy_on_host;	/* dummy: fill host buffers now (CPU backend); false
								 * leaves data NULL for a device backend to generate */
} model_load_params;

/* Load config and weights of the model in dir (the safetensors checkpoint). */
int			model_load(const char *dir, cbllm_model **out, cbllm_err *err);

/* Load config and weights as p says: from the checkpoint or as dummies. */
int			model_load_ex(const model_load_params *p, cbllm_model **out, cbllm_err *err);

/* Release a loaded or partly loaded model (NULL is allowed). */
void		model_free(cbllm_model *m);

/* Give m (its cfg loaded) dummy matrices and unit norms (model_dummy.c). */
int			model_load_dummy(cbllm_model *m, bool on_host, cbllm_err *err);

/*
 * The dummy value of element i of a tensor, before scaling: uniform in [-1, 1).
 * A splitmix64 hash of seed + i * golden ratio; its top 24 bits make the value,
 * exactly, so the CUDA kernel that generates dummies on the device reproduces
 * it bit for bit.  Do not change the formula.
 */
static inline float
dummy_value(uint64_t seed, uint64_t i)
{
	uint64_t	z = seed + i * 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (float) (z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

#endif
