/*
 * ref_check.h: how the architecture tests hold the engine to the float64
 * reference (test/tools/reference.py): read its numbers, run a prompt
 * through an engine for its logits or greedy tokens, and measure the worst
 * row's relative error.
 */
#ifndef CBLLM_TEST_REF_CHECK_H
#define CBLLM_TEST_REF_CHECK_H

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "compare.h"
#include "engine_run.h"
#include "tap.h"

/* Exactly n numbers from the text file path (malloc'd floats), or NULL with a diagnostic. */
static inline float *
ref_read_numbers(const char *path, size_t n)
{
	FILE	   *f = fopen(path, "r");
	float	   *v = malloc(sizeof(float) * (n ? n : 1));
	size_t		got = 0;
	float		extra;

	if (f == NULL || v == NULL)
	{
		TAP_DIAG("cannot read %s", path);
		if (f)
			fclose(f);
		free(v);
		return NULL;
	}
	while (got < n && fscanf(f, "%f", &v[got]) == 1)
		got++;
	if (got != n || fscanf(f, "%f", &extra) == 1)
	{
		TAP_DIAG("%s holds %s numbers than the %zu expected", path, got != n ? "fewer" : "more", n);
		free(v);
		v = NULL;
	}
	fclose(f);
	return v;
}

/* What ref_engine_sized gives an engine besides its model and device. */
typedef struct ref_engine_size
{
	int			max_seqs;
	int			max_tokens;		/* per step */
	int			kv_blocks;		/* of 4 positions */
	int			max_len;
	const char *kv_dtype;		/* cbllm_engine_params.kv_cache_dtype; NULL: on the CPU f32, the
								 * exact one the float64 comparisons hold (its auto is f16), on
								 * a device its own (auto) */
	cbllm_preempt preempt;		/* when the pool runs out (0: auto) */
	int			swap_blocks;	/* host swap area in blocks (0: the engine's default) */
} ref_engine_size;

/* An engine over dir on device (NULL: the CPU) of two threads and size sz, or NULL. */
static inline cbllm_engine *
ref_engine_sized(const char *dir, const char *device, ref_engine_size sz)
{
	cbllm_engine_params p = {0};
	cbllm_engine *e = NULL;
	cbllm_err	err;

	p.model_dir = dir;
	p.device = device;
	p.n_threads = 2;
	p.max_num_seqs = sz.max_seqs;
	p.max_num_batched_tokens = sz.max_tokens;
	p.num_kv_blocks = sz.kv_blocks;
	p.block_size = 4;
	p.max_model_len = sz.max_len;
	p.kv_cache_dtype = sz.kv_dtype != NULL ? sz.kv_dtype :
		device == NULL || strcmp(device, "cpu") == 0 ? "f32" : NULL;
	p.preempt_mode = sz.preempt;
	p.num_swap_blocks = sz.swap_blocks;
	if (cbllm_engine_create(&p, &e, &err) != CBLLM_OK)
	{
		TAP_DIAG("engine_create (%s): %s", device ? device : "cpu", err.msg);
		return NULL;
	}
	return e;
}

/* An engine with room for a few short prompts. */
static inline cbllm_engine *
ref_engine(const char *dir, const char *device)
{
	return ref_engine_sized(dir, device, (ref_engine_size) {4, 64, 32, 64, NULL, 0, 0});
}

/*
 * The prompt's logits (n, vocab) from an engine over dir on device of size
 * sz (cbllm_engine_prompt_logits runs max_seqs of its tokens a step), or
 * NULL; *vocab gets vocab.
 */
static inline float *
ref_engine_logits_sized(const char *dir, const char *device, ref_engine_size sz,
						const int32_t *prompt, int n, int *vocab)
{
	cbllm_engine *e = ref_engine_sized(dir, device, sz);
	cbllm_engine_info info;
	cbllm_err	err;
	float	   *out;

	if (e == NULL)
		return NULL;
	cbllm_engine_get_info(e, &info);
	*vocab = info.vocab_size;
	out = malloc(sizeof(float) * n * info.vocab_size);
	if (out != NULL && cbllm_engine_prompt_logits(e, prompt, n, out, &err) != CBLLM_OK)
	{
		TAP_DIAG("prompt_logits: %s", err.msg);
		free(out);
		out = NULL;
	}
	cbllm_engine_destroy(e);
	return out;
}

/*
 * The prompt's logits (n, vocab) from an engine over dir on device keeping
 * its KV cache as kv_dtype (NULL: f32), or NULL; *vocab gets vocab.
 */
static inline float *
ref_engine_logits_kv(const char *dir, const char *device, const char *kv_dtype,
					 const int32_t *prompt, int n, int *vocab)
{
	return ref_engine_logits_sized(dir, device, (ref_engine_size) {4, 64, 32, 64, kv_dtype, 0, 0},
								   prompt, n, vocab);
}

/* The prompt's logits (n, vocab) from an engine over dir on device, or NULL; *vocab gets vocab. */
static inline float *
ref_engine_logits(const char *dir, const char *device, const int32_t *prompt, int n, int *vocab)
{
	return ref_engine_logits_kv(dir, device, NULL, prompt, n, vocab);
}

/* Where ref_collect puts a request's tokens. */
typedef struct ref_tokens
{
	int32_t    *ids;
	int			n;
	int			cap;
} ref_tokens;

/* Append request 0's new tokens. */
static inline bool
ref_collect(void *arg, int i, const cbllm_output *o)
{
	ref_tokens *t = arg;

	for (int k = 0; k < o->n_tokens && t->n < t->cap; k++)
		t->ids[t->n++] = o->tokens[k];
	return o->finish != CBLLM_FINISH_ERROR;
}

/* The n_gen greedy tokens after prompt, never stopping at EOS, into out; the count made, or -1. */
static inline int
ref_engine_greedy(const char *dir, const char *device, const int32_t *prompt, int n,
				  int n_gen, int32_t *out)
{
	cbllm_engine *e = ref_engine(dir, device);
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_request_input in = {0};
	ref_tokens	t = {out, 0, n_gen};
	int64_t		id;
	cbllm_err	err;
	int			rc = -1;

	if (e == NULL)
		return -1;
	sp.max_tokens = n_gen;
	sp.ignore_eos = true;
	in.ids = prompt;
	in.n_ids = n;
	if (cbllm_engine_submit(e, &in, &sp, &id, &err) != CBLLM_OK)
		TAP_DIAG("submit: %s", err.msg);
	else if (engine_run_to_end(e, &id, 1, INT_MAX, ref_collect, &t) >= 0)
		rc = t.n;
	cbllm_engine_destroy(e);
	return rc;
}

/*
 * The check that a device's logits for prompt (n rows) are the CPU's, got
 * (n, vocab), within the bf16 path's tolerance; what names the model.
 */
static inline void
ref_check_device(const char *dir, const char *device, const int32_t *prompt, int n,
				 const float *got, int vocab, const char *what)
{
	int			dvocab = 0;
	float	   *dev = got != NULL ? ref_engine_logits(dir, device, prompt, n, &dvocab) : NULL;
	double		gap = dev != NULL && dvocab == vocab ?
		RelErr(dev, got, (size_t) n * vocab) : INFINITY;

	TAP_OK(gap < 5e-2, "on %s the %s logits match the CPU's (rel err %.2g < 5e-2)", device, what,
		   gap);
	free(dev);
}

/* The largest relative error of a row of got (rows, vocab) against ref. */
static inline double
ref_worst_row(const float *got, const float *ref, int rows, int vocab)
{
	double		worst = 0;

	for (int t = 0; t < rows; t++)
	{
		double		e = RelErr(got + (size_t) t * vocab, ref + (size_t) t * vocab, vocab);

		worst = e > worst ? e : worst;
	}
	return worst;
}

#endif
