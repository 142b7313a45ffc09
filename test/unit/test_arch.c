/*
 * test_arch.c: the architecture table.  A toy architecture, "Llama with
 * attention biases", is added here by one table entry (arch_register) whose
 * feature flags turn on the bias tensor roles and the forward pass's bias
 * adds; its logits are checked against the independent float64 reference
 * (test/tools/reference.py, which adds the biases when config.json has
 * attention_bias).  Also: the walk over a model's tensors, tied lm_head,
 * what is refused and what a missing tensor says.
 *
 * usage: test_arch TOY_DIR PLAIN_DIR REF_LOGITS [DEVICE]
 *   TOY_DIR     gen_model.py --attn-bias --arch-name ToyBiasLlamaForCausalLM
 *   PLAIN_DIR   a Llama checkpoint of the same geometry without biases
 *   REF_LOGITS  reference.py TOY_DIR --logits --prompt-ids "<PROMPT below>"
 *   DEVICE      also run the toy model on this device ("cuda") against the CPU
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/cbllm.h"
#include "model/model.h"
#include "ref_check.h"
#include "tap.h"
#include "visit_count.h"

#define TOY_ARCH "ToyBiasLlamaForCausalLM"

static const int32_t PROMPT[] = {1, 15, 267, 42, 300, 7, 99, 180, 3, 250, 61, 128};

#define N_PROMPT ((int) (sizeof(PROMPT) / sizeof(PROMPT[0])))

static const char *toy_dir;
static const char *plain_dir;
static const char *ref_path;

/* The toy architecture: Llama's tensors and forward pass plus q, k, v and o biases. */
static const cbllm_arch ToyArch = {
	TOY_ARCH, "toy_bias_llama", "llama", ARCH_QKV_BIAS | ARCH_O_BIAS, ARCH_ACT_SILU
};

/* Before registration the toy architecture is refused, and its name is in the message. */
static void
TestUnregisteredRefused(void)
{
	cbllm_model *m = NULL;
	cbllm_err	err;
	int			rc = model_load(toy_dir, &m, &err);

	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && m == NULL && strstr(err.msg, TOY_ARCH) != NULL &&
		   strstr(err.msg, "LlamaForCausalLM") != NULL,
		   "an architecture not in the table is refused, naming it and the supported ones (%s)",
		   rc ? err.msg : "loaded");
}

/* Registering adds one entry; a second registration of the name is refused. */
static void
TestRegister(void)
{
	cbllm_err	err;
	char		names[640];
	const cbllm_arch *a;

	TAP_OK(arch_register(&ToyArch, &err) == CBLLM_OK, "arch_register adds the toy architecture");
	a = arch_find(TOY_ARCH, NULL);
	TAP_OK(a != NULL && a->features == (ARCH_QKV_BIAS | ARCH_O_BIAS) &&
		   arch_find(NULL, "toy_bias_llama") == a,
		   "arch_find finds it by architecture name and by model_type");
	TAP_OK(arch_register(&ToyArch, &err) == CBLLM_ERR_INVALID && strstr(err.msg, "already") != NULL,
		   "registering the same name twice is refused");
	arch_list_names(names, sizeof(names));
	TAP_OK(strncmp(names, "LlamaForCausalLM, MistralForCausalLM, ", 38) == 0 &&
		   strlen(names) > strlen(" and " TOY_ARCH) &&
		   strcmp(names + strlen(names) - strlen(" and " TOY_ARCH), " and " TOY_ARCH) == 0,
		   "the list of supported architectures names the new one last (%s)", names);
}

/* The toy model loads: its bias roles are bound, and the walk shows every tensor once. */
static void
TestToyLoadsBiases(void)
{
	cbllm_model *m = NULL;
	cbllm_err	err;
	visit_count c = {0};
	int			L;

	if (model_load(toy_dir, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "the toy model loads (%s)", err.msg);
		return;
	}
	L = m->cfg.n_layers;
	model_visit(m, CountTensor, &c, &err);
	TAP_OK(m->cfg.features == (ARCH_QKV_BIAS | ARCH_O_BIAS) && strcmp(m->cfg.arch, TOY_ARCH) == 0,
		   "config.json's architecture gives the model the table entry's features");
	TAP_OK(c.matrices == 2 + 7 * L && c.norms == 1 + 2 * L && c.biases == 4 * L &&
		   c.biases_set == 4 * L && c.tied == 0 && c.bad_index == 0,
		   "model_visit shows %d matrices numbered in order, %d norms and %d bound biases",
		   c.matrices, c.norms, c.biases);
	TAP_OK(m->layers[L - 1].bq != NULL && m->layers[L - 1].bo != NULL &&
		   m->layers[0].bk[0] != 0.0f,
		   "each layer's bq, bk, bv and bo hold the checkpoint's values");
	model_free(m);
}

/* A plain Llama model has no bias roles: the flags decide which tensors exist. */
static void
TestPlainHasNoBiases(void)
{
	cbllm_model *m = NULL;
	cbllm_err	err;
	visit_count c = {0};

	if (model_load(plain_dir, &m, &err) != CBLLM_OK)
	{
		TAP_OK(false, "the plain model loads (%s)", err.msg);
		return;
	}
	model_visit(m, CountTensor, &c, &err);
	TAP_OK((m->cfg.features & ~ARCH_GGUF_PERMUTED_QK) == 0 && c.biases == 0 && m->layers[0].bq == NULL &&
		   c.matrices == 2 + 7 * m->cfg.n_layers,
		   "a Llama model has no bias tensors and 7 matrices a layer plus embeddings and lm_head");
	model_free(m);
}

/* Link dir/name to the absolute path of from/name; 0 on success. */
static int
LinkInto(const char *dir, const char *from, const char *name)
{
	char		src[4096],
				dst[4096],
				abs[PATH_MAX];

	snprintf(src, sizeof(src), "%s/%s", from, name);
	snprintf(dst, sizeof(dst), "%s/%s", dir, name);
	return realpath(src, abs) != NULL ? symlink(abs, dst) : -1;
}

/* A checkpoint without the biases the architecture needs fails naming the first missing one. */
static void
TestMissingBiasNamed(void)
{
	char		dir[] = "/tmp/cbllm_arch_XXXXXX";
	char		dst[4096];
	cbllm_model *m = NULL;
	cbllm_err	err;
	int			rc = -1;

	if (mkdtemp(dir) != NULL)
	{
		if (LinkInto(dir, toy_dir, "config.json") == 0)
		{
			if (LinkInto(dir, plain_dir, "model.safetensors") == 0)
				rc = model_load(dir, &m, &err);
			snprintf(dst, sizeof(dst), "%s/model.safetensors", dir);
			unlink(dst);
		}
		snprintf(dst, sizeof(dst), "%s/config.json", dir);
		unlink(dst);
		rmdir(dir);
	}
	TAP_OK(rc == CBLLM_ERR_FORMAT && m == NULL &&
		   strstr(err.msg, "missing tensor \"model.layers.0.self_attn.q_proj.bias\"") != NULL,
		   "toy config over unbiased weights: the missing q_proj.bias is named (%s)",
		   rc == -1 ? "no fixture" : rc ? err.msg : "loaded");
	model_free(m);
}

/* The dummy format walks the same table: zero biases, and the same seeds as for Llama. */
static void
TestDummyWalksTable(void)
{
	model_load_params toy = {.dir = toy_dir, .format = "dummy", .dummy_on_host = true};
	model_load_params plain = {.dir = plain_dir, .format = "dummy", .dummy_on_host = false};
	cbllm_model *a = NULL,
			   *b = NULL;
	cbllm_err	err;
	bool		zeros = true;

	if (model_load_ex(&toy, &a, &err) != CBLLM_OK || model_load_ex(&plain, &b, &err) != CBLLM_OK)
	{
		TAP_OK(false, "both models load as dummies (%s)", err.msg);
		model_free(a);
		return;
	}
	for (int l = 0; l < a->cfg.n_layers; l++)
		for (int i = 0; i < a->cfg.hidden; i++)
			zeros = zeros && a->layers[l].bo[i] == 0.0f && a->layers[l].bq[i] == 0.0f;
	TAP_OK(zeros, "dummy biases are zeros");
	TAP_OK(a->layers[1].w_down.dummy_seed == b->layers[1].w_down.dummy_seed &&
		   a->lm_head.dummy_seed == b->lm_head.dummy_seed &&
		   a->layers[0].wq.dummy_seed != a->layers[0].wk.dummy_seed,
		   "matrices keep their dummy seeds when the architecture adds vectors");
	model_free(a);
	model_free(b);
}

/* The toy model's logits match the float64 reference, and a device's match the CPU's. */
static void
TestToyLogits(const char *device)
{
	int			vocab = 0;
	float	   *got = ref_engine_logits(toy_dir, NULL, PROMPT, N_PROMPT, &vocab);
	float	   *ref = got != NULL ? ref_read_numbers(ref_path, (size_t) N_PROMPT * vocab) : NULL;
	double		worst = ref != NULL ? ref_worst_row(got, ref, N_PROMPT, vocab) : INFINITY;

	TAP_OK(ref != NULL && worst <= 1e-4,
		   "toy architecture's prompt logits match the float64 reference (worst rel err %.2g <= 1e-4)",
		   worst);
	if (device != NULL)
		ref_check_device(toy_dir, device, PROMPT, N_PROMPT, got, vocab, "toy architecture's");
	free(got);
	free(ref);
}

int
main(int argc, char **argv)
{
	if (argc < 4)
	{
		fprintf(stderr, "usage: test_arch TOY_DIR PLAIN_DIR REF_LOGITS [DEVICE]\n");
		return 2;
	}
	toy_dir = argv[1];
	plain_dir = argv[2];
	ref_path = argv[3];
	TestUnregisteredRefused();
	TestRegister();
	TestToyLoadsBiases();
	TestPlainHasNoBiases();
	TestMissingBiasNamed();
	TestDummyWalksTable();
	TestToyLogits(argc > 4 ? argv[4] : NULL);
	return tap_done();
}
