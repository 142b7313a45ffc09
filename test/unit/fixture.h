/*
 * fixture.h: the files the unit tests write.  A fixture root is a mkdtemp()
 * directory under /tmp with one numbered directory per case in it; into a
 * case go text and byte files, config.json files of tiny Llama checkpoints,
 * their weights as safetensors files (one file, or two shards with
 * model.safetensors.index.json; F32, F16, BF16 or I64 tensors whose values
 * are exact in every dtype), and the config.json files of Llama-2-7b-chat-hf,
 * TinyLlama-1.1B-Chat-v1.0 and Mistral-7B-v0.1 as HuggingFace ships them.
 * Nothing here prints a TAP check: every writer returns whether it worked.
 */
#ifndef CBLLM_TEST_FIXTURE_H
#define CBLLM_TEST_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One tensor to write into a safetensors file. */
typedef struct fixture_tensor
{
	char		name[96];
	const char *dtype;			/* written verbatim: "F32", "F16", "BF16", "I64"... */
	int			ndim;
	int64_t		shape[4];
	int			seed;			/* element i holds fixture_value(seed, i) */
	unsigned char *data;
	size_t		nbytes;			/* written verbatim into data_offsets */
	int			shard;			/* 0 or 1 in a sharded checkpoint */
} fixture_tensor;

/* A growable list of tensors. */
typedef struct fixture_tensors
{
	fixture_tensor *t;
	int			n;
} fixture_tensors;

/* The geometry of a tiny Llama checkpoint. */
typedef struct fixture_geom
{
	int			hidden;
	int			layers;
	int			heads;
	int			kv_heads;
	int			head_dim;		/* 0: not in config.json (hidden / heads) */
	int			inter;
	int			vocab;
	bool		tie;			/* tie_word_embeddings in config.json */
	bool		lm_head;		/* write lm_head.weight */
} fixture_geom;

/* The tiny checkpoint of the loader tests: hidden 16, 2 layers, 4 heads, 2 KV heads, untied. */
extern const fixture_geom fixture_tiny;

/* The shard file names of a two-shard checkpoint. */
extern const char *const fixture_shard_names[2];

/* The config.json texts of three real models, as HuggingFace ships them. */
extern const char *const fixture_llama2_7b_chat;
extern const char *const fixture_tinyllama_chat;
extern const char *const fixture_mistral_7b;

/* Make the fixture root /tmp/cbllm_<tag>_XXXXXX; returns its path, or NULL. */
const char *fixture_root_create(const char *tag);

/* Make the next numbered case directory under the root; caller frees the path. */
char	   *fixture_case_dir(const char *label);

/* Remove the fixture root and everything in it; whether it is gone. */
bool		fixture_root_remove(void);

/* Remove dir and everything in it; whether it is gone. */
bool		fixture_remove_tree(const char *dir);

/* Write n bytes to dir/name; whether it worked. */
bool		fixture_write_bytes(const char *dir, const char *name, const void *data, size_t n);

/* Write a NUL-terminated text to dir/name; whether it worked. */
bool		fixture_write_text(const char *dir, const char *name, const char *text);

/* The value of element i of the tensor with the given seed: exact in F16 and BF16. */
float		fixture_value(int seed, int64_t i);

/* Number of elements of a tensor. */
int64_t		fixture_tensor_elems(const fixture_tensor *t);

/* Append a tensor of shape (r) or (r, c) (c 0) filled from fixture_value in the given dtype. */
fixture_tensor *fixture_add_tensor(fixture_tensors *s, const char *name, const char *dtype,
								   int64_t r, int64_t c, int shard);

/* Find a tensor by name, or NULL. */
fixture_tensor *fixture_find_tensor(fixture_tensors *s, const char *name);

/* Remove a tensor by name. */
void		fixture_remove_tensor(fixture_tensors *s, const char *name);

/* Release every tensor. */
void		fixture_free_tensors(fixture_tensors *s);

/* Append the tensors of a tiny Llama checkpoint with mixed dtypes; layers after 0 go to shard 1. */
void		fixture_build_llama(fixture_tensors *s, const fixture_geom *g);

/* Write shard's tensors (all when shard < 0) as dir/name, less the last drop_tail bytes. */
bool		fixture_write_safetensors(const char *dir, const char *name, const fixture_tensors *s,
									  int shard, size_t drop_tail);

/* Write model.safetensors.index.json mapping every tensor to its shard. */
bool		fixture_write_index(const char *dir, const fixture_tensors *s);

/* config.json of g; act NULL: no hidden_act; extra: more members, each ", "-prefixed. */
char	   *fixture_config_json(const fixture_geom *g, const char *arch, const char *act,
								const char *extra);

/* Write config.json (LlamaForCausalLM, silu) and the weights, one file or two shards. */
bool		fixture_write_model(const char *dir, const fixture_geom *g, const fixture_tensors *s,
								bool sharded);

/* The tiny checkpoint twice over: as model.safetensors and as two shards with their index. */
typedef struct fixture_pair
{
	fixture_tensors s;			/* the tensors both hold */
	char	   *single;			/* the case directory of the single file */
	char	   *sharded;		/* the case directory of the shards and the index */
} fixture_pair;

/* Write the pair into two new case directories; whether both were written. */
bool		fixture_pair_write(fixture_pair *p);

/* Release the pair's tensors and paths. */
void		fixture_pair_free(fixture_pair *p);

#endif
