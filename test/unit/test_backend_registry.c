/*
 * test_backend_registry.c: the backend registry.  Names resolve to their
 * entries ("cpu", "cuda" when built, NULL and "" as cpu); an unknown name,
 * and in a build without CUDA the name "cuda", fail with the engine's
 * messages; "auto" takes the first present backend by priority (cpu when no
 * device is present); each backend answers its KV layout (cpu: f32 K and V;
 * cuda: bf16, half of that).  A toy backend registered here (the CPU
 * backend under another name, with a KV layout, a pool size and weight
 * types of its own) is found by name, listed in the names, chosen by "auto"
 * ahead of cpu, and drives a whole engine: the engine sizes its pool with
 * the toy's answers (bytes per block, blocks for the budget), refuses a
 * model whose weight type the toy does not run, and generates the CPU's
 * tokens.  Added entries are checked, and removed.
 *
 * The engines run on a dummy model (config.json and a small tokenizer.json
 * written by this test into a mkdtemp() directory): no arguments.
 *
 * usage: test_backend_registry
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/cbllm.h"
#include "backend/backend_registry.h"
#include "fixture.h"
#include "tap.h"

#define BLOCK 4					/* KV positions per block in the engines */
#define TOY_BLOCKS 7			/* the toy's answer to "how many blocks fit" */
#define GEN 4

static const char *root;		/* the model directory, a fixture root */

/* The geometry of the model this test writes (config.json below); main fills its cache layers. */
static cbllm_model_config model_cfg = {.hidden = 64, .n_layers = 2, .n_heads = 4,
.n_kv_heads = 2, .head_dim = 16, .intermediate = 96, .vocab_size = 64, .max_pos = 128};

/* ------------------------------------------------------------ the toy backend */

static bool toy_present = true;	/* what its probe says */
static bool toy_runs_bf16 = true;	/* whether it runs bf16 matrices */
static backend_kv_budget toy_budget;	/* the budget of its last kv_blocks call */

/* The toy's probe: as the test sets it. */
static bool
ToyProbe(void)
{
	return toy_present;
}

/* The toy's pool size for any budget: TOY_BLOCKS, remembering the budget. */
static int
ToyKvBlocks(cbllm_backend *be, const backend_kv_budget *b, int *n_blocks, cbllm_err *err)
{
	toy_budget = *b;
	*n_blocks = TOY_BLOCKS;
	return CBLLM_OK;
}

/* The CPU backend under the toy's name, with the toy's pool size. */
static int
ToyCreate(const backend_params *p, cbllm_backend **out, cbllm_err *err)
{
	int			rc = cpu_backend_reg.create(p, out, err);

	if (rc == CBLLM_OK)
	{
		(*out)->name = "toy";
		(*out)->kv_blocks = ToyKvBlocks;
	}
	return rc;
}

/* The CPU's layout plus one f32 scale per position, layer, K and V: more bytes than the CPU's. */
static int
ToyKvLayout(const cbllm_model_config *cfg, int block_size, const char *kv_dtype,
			backend_kv_layout *out, cbllm_err *err)
{
	int			rc = cpu_backend_reg.kv_layout(cfg, block_size, kv_dtype, out, err);

	out->block_bytes += (size_t) 2 * block_size * cfg->n_layers * sizeof(float);
	return rc;
}

/* Every type, bf16 only while toy_runs_bf16. */
static bool
ToySupportsWeight(cbllm_dtype dt)
{
	return dt != CBLLM_BF16 || toy_runs_bf16;
}

/* A fixed bandwidth. */
static int
ToyCopyBandwidth(size_t bytes, double *gbps, cbllm_err *err)
{
	*gbps = 1.0;
	return CBLLM_OK;
}

static const backend_reg toy_reg = {
	.name = "toy",
	.priority = 50,				/* between cuda (100) and cpu (0) */
	.probe = ToyProbe,
	.create = ToyCreate,
	.kv_layout = ToyKvLayout,
	.supports_weight = ToySupportsWeight,
	.copy_bandwidth = ToyCopyBandwidth,
};

/* A backend ahead of every other whose device is never present. */
static bool
NeverProbe(void)
{
	return false;
}

static const backend_reg absent_reg = {
	.name = "absent",
	.priority = 1000,
	.probe = NeverProbe,
	.create = ToyCreate,
	.kv_layout = ToyKvLayout,
	.supports_weight = ToySupportsWeight,
	.copy_bandwidth = ToyCopyBandwidth,
};

/* ---------------------------------------------------------------- the model */

/* config.json of model_cfg and a tokenizer of 64 pieces: <unk>, <s>, </s> and 61 letters. */
static bool
WriteModel(void)
{
	char		tok[4096];
	size_t		n;

	n = (size_t) snprintf(tok, sizeof(tok),
						  "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {"
						  "\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2");
	for (int i = 3; i < 64 && n < sizeof(tok); i++)
		n += (size_t) snprintf(tok + n, sizeof(tok) - n, ", \"%c%c\": %d", 'a' + i % 26,
							   'a' + i / 26, i);
	if (n < sizeof(tok))
		snprintf(tok + n, sizeof(tok) - n, "}}}\n");
	return fixture_write_text(root, "config.json",
							  "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64,\n"
							  " \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"
							  " \"num_key_value_heads\": 2, \"intermediate_size\": 96,\n"
							  " \"vocab_size\": 64, \"max_position_embeddings\": 128,\n"
							  " \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,\n"
							  " \"bos_token_id\": 1, \"eos_token_id\": 2}\n") &&
		fixture_write_text(root, "tokenizer.json", tok);
}

/* An engine on device over the dummy model; kv_bytes 0 leaves the pool's size to the backend. */
static int
NewEngine(const char *device, size_t kv_bytes, cbllm_engine **e, cbllm_err *err)
{
	cbllm_engine_params p = {0};

	p.model_dir = root;
	p.device = device;
	p.load_format = "dummy";
	p.n_threads = 1;
	p.max_num_seqs = 4;
	p.max_num_batched_tokens = 64;
	p.block_size = BLOCK;
	p.kv_cache_bytes = kv_bytes;
	*e = NULL;
	return cbllm_engine_create(&p, e, err);
}

/* Greedy tokens of one prompt; false on an engine error. */
static bool
Generate(cbllm_engine *e, int32_t out[GEN])
{
	const int32_t ids[] = {1, 5, 9, 13, 17};
	cbllm_request_input in = {.ids = ids, .n_ids = 5};
	cbllm_sampling sp = cbllm_sampling_default();
	cbllm_output o = {0};
	cbllm_err	err;
	int64_t		id;
	int			active = 1,
				got = 0;

	sp.max_tokens = GEN;
	sp.ignore_eos = true;
	if (cbllm_engine_submit(e, &in, &sp, &id, &err) != CBLLM_OK)
		return false;
	while (active > 0 || o.finish == CBLLM_FINISH_NONE)
	{
		if (cbllm_engine_step(e, &active, &err) != CBLLM_OK ||
			cbllm_engine_take(e, id, &o, &err) != CBLLM_OK)
			return false;
		for (int i = 0; i < o.n_tokens && got < GEN; i++)
			out[got++] = o.tokens[i];
		if (o.finish != CBLLM_FINISH_NONE)
			break;
	}
	return got == GEN;
}

/* ---------------------------------------------------------------- the tests */

/* Names resolve to their entries; unknown and left-out names fail with the engine's messages. */
static void
TestNames(void)
{
	const backend_reg *r = NULL;
	cbllm_err	err;
	int			rc;

	TAP_OK(backend_registry_find("cpu") == &cpu_backend_reg && backend_registry_find("tpu") == NULL,
		   "find: \"cpu\" is the CPU backend's entry, \"tpu\" is no entry");
	TAP_OK(backend_registry_choose("cpu", &r, &err) == CBLLM_OK && r == &cpu_backend_reg,
		   "choose \"cpu\" gives the CPU backend");
	TAP_OK(backend_registry_choose(NULL, &r, &err) == CBLLM_OK && r == &cpu_backend_reg &&
		   backend_registry_choose("", &r, &err) == CBLLM_OK && r == &cpu_backend_reg,
		   "no device name (NULL or \"\") means cpu");
	rc = backend_registry_choose("cuda", &r, &err);
#ifdef CBLLM_WITH_CUDA
	TAP_OK(rc == CBLLM_OK && r == &cuda_backend_reg && backend_registry_find("cuda") == r,
		   "choose \"cuda\" gives the CUDA backend in a build with CUDA");
#else
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && r == NULL &&
		   strcmp(err.msg, "this build of cbllm has no CUDA support: rebuild with CUDA=1 where nvcc is installed") == 0 &&
		   backend_registry_find("cuda") != NULL && backend_registry_find("cuda")->create == NULL,
		   "choose \"cuda\" in a build without CUDA fails: %s", err.msg);
#endif
	rc = backend_registry_choose("tpu", &r, &err);
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && r == NULL &&
		   strcmp(err.msg, "unsupported device \"tpu\" (use \"cpu\", \"cuda\" or \"auto\")") == 0,
		   "an unknown name fails with the engine's message: %s", err.msg);
}

/* "auto" takes the first built backend whose device is present: cuda before cpu. */
static void
TestAuto(void)
{
	const backend_reg *r = NULL;
	const backend_reg *cuda = backend_registry_find("cuda");
	bool		gpu = cuda != NULL && cuda->create != NULL && cuda->probe();
	cbllm_err	err;

	TAP_OK(backend_registry_choose("auto", &r, &err) == CBLLM_OK &&
		   r == (gpu ? cuda : &cpu_backend_reg),
		   "auto picks %s (a CUDA device is %spresent)", r ? r->name : "nothing", gpu ? "" : "not ");
	if (!gpu)
		TAP_OK(r == &cpu_backend_reg, "auto picks cpu when no device is present");
}

/*
 * Each backend says how it stores a KV block: cpu f16 K and V by default,
 * f32 or bf16 when asked; cuda bf16 only.
 */
static void
TestKvLayouts(void)
{
	backend_kv_layout cpu,
				half,
				dev;
	cbllm_err	err = {{0}};
	size_t		f32 = (size_t) 2 * 16 * 2 * 2 * 16 * sizeof(float);
	int			rc;

	rc = cpu_backend_reg.kv_layout(&model_cfg, 16, "f32", &cpu, &err);
	TAP_OK(rc == CBLLM_OK && cpu.dtype == CBLLM_F32 && cpu.block_bytes == f32,
		   "cpu with kv_cache_dtype f32: %zu bytes a block of 16 positions, 2 layers, 2 KV heads of 16",
		   cpu.block_bytes);
	rc = cpu_backend_reg.kv_layout(&model_cfg, 16, NULL, &half, &err);
	TAP_OK(rc == CBLLM_OK && half.dtype == CBLLM_F16 && half.block_bytes == f32 / 2,
		   "cpu stores K and V in f16 by default (auto): %zu bytes a block, half", half.block_bytes);
	rc = cpu_backend_reg.kv_layout(&model_cfg, 16, "BF16", &half, &err);
	TAP_OK(rc == CBLLM_OK && half.dtype == CBLLM_BF16 && half.block_bytes == f32 / 2,
		   "cpu with kv_cache_dtype BF16 (any case): %zu bytes a block", half.block_bytes);
	rc = cpu_backend_reg.kv_layout(&model_cfg, 16, "q8_0", &half, &err);
	TAP_OK(rc == CBLLM_ERR_INVALID && strstr(err.msg, "q8_0") != NULL,
		   "kv_cache_dtype q8_0 is refused, naming it: %s", err.msg);
#ifdef CBLLM_WITH_CUDA
	rc = cuda_backend_reg.kv_layout(&model_cfg, 16, "auto", &dev, &err);
	TAP_OK(rc == CBLLM_OK && dev.dtype == CBLLM_BF16 && dev.block_bytes == f32 / 2,
		   "cuda stores K and V in bf16: %zu bytes, half the CPU's f32", dev.block_bytes);
	rc = cuda_backend_reg.kv_layout(&model_cfg, 16, "f16", &dev, &err);
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && strstr(err.msg, "bf16") != NULL,
		   "cuda refuses kv_cache_dtype f16: %s", err.msg);
#else
	(void) dev;
#endif
}

/* A backend registered by the caller is found, listed and chosen by auto by priority. */
static void
TestRegister(void)
{
	const backend_reg *r = NULL;
	const backend_reg *cuda = backend_registry_find("cuda");
	bool		gpu = cuda != NULL && cuda->create != NULL && cuda->probe();
	backend_reg nameless = toy_reg;
	char		names[256];
	cbllm_err	err;

	TAP_OK(backend_registry_add(&toy_reg, &err) == CBLLM_OK &&
		   backend_registry_add(&absent_reg, &err) == CBLLM_OK,
		   "register the toy backend and one whose device is never present");
	TAP_OK(backend_registry_choose("toy", &r, &err) == CBLLM_OK && r == &toy_reg,
		   "choose \"toy\" gives the registered toy backend");
	backend_registry_names(names, sizeof(names), "\"");
	TAP_OK(strcmp(names, "\"absent\", \"cpu\", \"cuda\", \"toy\" or \"auto\"") == 0,
		   "the names list every entry in name order, then auto: %s", names);
	TAP_OK(backend_registry_choose("auto", &r, &err) == CBLLM_OK && r == (gpu ? cuda : &toy_reg),
		   "auto skips the absent backend and picks %s, ahead of cpu by priority",
		   r ? r->name : "nothing");
	toy_present = false;
	TAP_OK(backend_registry_choose("auto", &r, &err) == CBLLM_OK &&
		   r == (gpu ? cuda : &cpu_backend_reg),
		   "with the toy's device gone, auto picks %s", r ? r->name : "nothing");
	toy_present = true;
	TAP_OK(backend_registry_add(&toy_reg, &err) == CBLLM_ERR_INVALID,
		   "a second backend named toy is refused: %s", err.msg);
	nameless.name = "auto";
	TAP_OK(backend_registry_add(&nameless, &err) == CBLLM_ERR_INVALID,
		   "a backend named auto is refused: %s", err.msg);
	nameless.name = "half";
	nameless.kv_layout = NULL;
	TAP_OK(backend_registry_add(&nameless, &err) == CBLLM_ERR_INVALID,
		   "a built backend without a KV layout is refused: %s", err.msg);
}

/* The engine sizes its pool with the backend's answers and runs the toy like the CPU. */
static void
TestEngines(void)
{
	backend_kv_layout cpu_kv,
				toy_kv;
	cbllm_engine *cpu = NULL,
			   *toy = NULL,
			   *e = NULL;
	cbllm_engine_info ci = {0},
				ti = {0};
	int32_t		a[GEN] = {0},
				b[GEN] = {0};
	cbllm_err	err;
	int			rc;

	cpu_backend_reg.kv_layout(&model_cfg, BLOCK, NULL, &cpu_kv, NULL);
	toy_reg.kv_layout(&model_cfg, BLOCK, NULL, &toy_kv, NULL);
	rc = NewEngine("cpu", 40 * cpu_kv.block_bytes, &cpu, &err);
	if (rc == CBLLM_OK)
		cbllm_engine_get_info(cpu, &ci);
	TAP_OK(rc == CBLLM_OK && strcmp(ci.device, "cpu") == 0 &&
		   ci.kv_bytes_per_token * BLOCK == cpu_kv.block_bytes && ci.num_kv_blocks == 40,
		   "cpu engine: %zu KV bytes per position and 40 blocks, from the CPU's layout (%s)",
		   ci.kv_bytes_per_token, rc ? err.msg : "ok");
	rc = NewEngine("toy", 40 * cpu_kv.block_bytes, &toy, &err);
	if (rc == CBLLM_OK)
		cbllm_engine_get_info(toy, &ti);
	TAP_OK(rc == CBLLM_OK && strcmp(ti.device, "toy") == 0 &&
		   ti.kv_bytes_per_token * BLOCK == toy_kv.block_bytes &&
		   ti.kv_bytes_per_token != ci.kv_bytes_per_token &&
		   ti.num_kv_blocks == (int) (40 * cpu_kv.block_bytes / toy_kv.block_bytes),
		   "toy engine: %zu KV bytes per position and %d blocks of the same budget, from the toy's layout (%s)",
		   ti.kv_bytes_per_token, ti.num_kv_blocks, rc ? err.msg : "ok");
	TAP_OK(cpu != NULL && toy != NULL && Generate(cpu, a) && Generate(toy, b) &&
		   memcmp(a, b, sizeof(a)) == 0,
		   "the toy backend generates the CPU's greedy tokens (%d %d %d %d)", b[0], b[1], b[2], b[3]);
	cbllm_engine_destroy(cpu);
	cbllm_engine_destroy(toy);
	memset(&ti, 0, sizeof(ti));
	rc = NewEngine("toy", 0, &e, &err);
	if (rc == CBLLM_OK)
		cbllm_engine_get_info(e, &ti);
	TAP_OK(rc == CBLLM_OK && ti.num_kv_blocks == TOY_BLOCKS && toy_budget.max_seqs == 4 &&
		   toy_budget.block_size == BLOCK && toy_budget.memory_fraction == 0.9,
		   "with no KV size the pool is the toy's answer to the engine's budget: %d blocks (%s)",
		   ti.num_kv_blocks, rc ? err.msg : "ok");
	cbllm_engine_destroy(e);
	toy_runs_bf16 = false;
	rc = NewEngine("toy", 0, &e, &err);
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && e == NULL &&
		   strcmp(err.msg, "the toy backend does not run BF16 weights") == 0,
		   "a model of a weight type the backend does not run is refused: %s",
		   rc ? err.msg : "(it started)");
	toy_runs_bf16 = true;
	rc = NewEngine("tpu", 0, &e, &err);
	TAP_OK(rc == CBLLM_ERR_UNSUPPORTED && e == NULL && strstr(err.msg, "unsupported device \"tpu\"") != NULL,
		   "the engine refuses an unknown device: %s", rc ? err.msg : "(it started)");
}

/* Removed entries are gone; the built-in ones stay. */
static void
TestRemove(void)
{
	const backend_reg *r = NULL;
	char		names[256];
	cbllm_err	err;

	backend_registry_remove(&toy_reg);
	backend_registry_remove(&absent_reg);
	backend_registry_names(names, sizeof(names), "");
	TAP_OK(backend_registry_find("toy") == NULL &&
		   backend_registry_choose("toy", &r, &err) == CBLLM_ERR_UNSUPPORTED &&
		   strcmp(names, "cpu, cuda or auto") == 0,
		   "removed backends are gone, the built-in ones stay: %s", names);
}

int
main(void)
{
	model_config_cache_layers(&model_cfg);
	root = fixture_root_create("registry");
	if (root == NULL || !WriteModel())
	{
		TAP_OK(false, "write the dummy model into %s", root ? root : "a mkdtemp() directory");
		return tap_done();
	}
	TestNames();
	TestAuto();
	TestKvLayouts();
	TestRegister();
	TestEngines();
	TestRemove();
	TAP_OK(fixture_root_remove(), "remove the model directory %s", root);
	return tap_done();
}
