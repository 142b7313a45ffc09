/*
 * guc.c: cbllm's configuration parameters.  Those that size shared memory
 * or the engine are fixed at server start; the per-request cap can change
 * with a reload, and the load wait is per session.
 */
#include "cbllm_pg.h"

#include "utils/guc.h"

#include "compat.h"

char	   *cbllm_model = NULL;
char	   *cbllm_chat_template = NULL;
char	   *cbllm_device = NULL;
int			cbllm_threads = 0;
int			cbllm_engines = 1;
int			cbllm_max_num_seqs = 64;
int			cbllm_max_num_batched_tokens = 2048;
int			cbllm_max_model_len = 0;
int			cbllm_kv_cache_size_mb = 0;
int			cbllm_block_size = 16;
int			cbllm_preempt_mode = 0;
int			cbllm_swap_space_mb = 0;
double		cbllm_gpu_memory_utilization = 0.9;
int			cbllm_load_format = 0;
int			cbllm_weight_format = 0;
int			cbllm_kv_cache_dtype = 0;
bool		cbllm_cuda_graphs = true;
bool		cbllm_enable_prefix_caching = true;
int			cbllm_max_queued_requests = 256;
int			cbllm_max_tokens_limit = 4096;
int			cbllm_max_prompt_bytes = 65536;
int			cbllm_output_buffer_bytes = 16384;
int			cbllm_load_timeout_ms = 60000;
int			cbllm_max_requests_per_session = 0;
int			cbllm_max_requests_per_role = 0;
int			cbllm_superuser_reserved_requests = 8;
int			cbllm_max_priority = CBLLM_MAX_PRIORITY;
int			cbllm_slot_wait_timeout_ms = 10000;
int			cbllm_result_memory_kb = 16384;
int			cbllm_stall_timeout_ms = 30000;
int			cbllm_prefix_cache_scope = PREFIX_SCOPE_ROLE;
double		cbllm_priority_aging = 1.0;
int			cbllm_max_step_ms = -1;
char	   *cbllm_engine_program = NULL;
bool		cbllm_restart_stalled_engine = false;
int			cbllm_batch_rows = -1;

static const struct config_enum_entry prefix_scope_options[] = {
	{"role", PREFIX_SCOPE_ROLE, false},
	{"database", PREFIX_SCOPE_DATABASE, false},
	{"cluster", PREFIX_SCOPE_CLUSTER, false},
	{NULL, 0, false}
};

static const struct config_enum_entry preempt_options[] = {
	{"auto", 0, false},
	{"recompute", 1, false},
	{"swap", 2, false},
	{NULL, 0, false}
};

/* cbllm.weight_format's values, by the enum's number: what the engine is passed */
const char *const cbllm_weight_formats[] = {
	"auto", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
	"q4_k_m", "q5_k_m",
};

static const struct config_enum_entry weight_format_options[] = {
	{"auto", 0, false},
	{"q8_0", 1, false},
	{"q4_0", 2, false},
	{"q4_1", 3, false},
	{"q5_0", 4, false},
	{"q5_1", 5, false},
	{"q2_k", 6, false},
	{"q3_k", 7, false},
	{"q4_k", 8, false},
	{"q5_k", 9, false},
	{"q6_k", 10, false},
	{"q4_k_m", 11, false},
	{"q5_k_m", 12, false},
	{NULL, 0, false}
};

/* cbllm.kv_cache_dtype's values, by the enum's number: what the engine is passed */
const char *const cbllm_kv_cache_dtypes[] = {"auto", "f32", "f16", "bf16"};

static const struct config_enum_entry kv_cache_dtype_options[] = {
	{"auto", 0, false},
	{"f32", 1, false},
	{"f16", 2, false},
	{"bf16", 3, false},
	{NULL, 0, false}
};

static const struct config_enum_entry load_format_options[] = {
	{"auto", 0, false},
	{"dummy", 1, false},
	{NULL, 0, false}
};

/* Check that the device is one this build supports. */
static bool
CheckDevice(char **newval, void **extra, GucSource source)
{
	if (*newval == NULL || strcmp(*newval, "cpu") == 0 || strcmp(*newval, "auto") == 0 ||
		strcmp(*newval, "cuda") == 0)
		return true;
	GUC_check_errdetail("cbllm.device must be \"cpu\", \"cuda\" or \"auto\".");
	return false;
}

/* Define every cbllm.* parameter. */
void
CbllmDefineGucs(void)
{
	DefineCustomStringVariable("cbllm.model",
							   "Directory of the HuggingFace model the engine loads.",
							   "Empty: the engine starts without a model.",
							   &cbllm_model, "", PGC_POSTMASTER, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("cbllm.chat_template",
							   "A Jinja chat template file that replaces the model's own.",
							   "Empty: the model's chat template (tokenizer_config.json or chat_template.jinja).",
							   &cbllm_chat_template, "", PGC_POSTMASTER, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("cbllm.device", "Compute device: cpu, cuda, or auto (cuda when a GPU is present).", NULL,
							   &cbllm_device, "auto", PGC_POSTMASTER, 0, CheckDevice, NULL, NULL);
	DefineCustomRealVariable("cbllm.gpu_memory_utilization",
							 "Fraction of the GPU's memory cbllm may use for weights, workspace and the KV cache.",
							 "With cbllm.kv_cache_size 0 the KV cache takes what is left of it after the weights.",
							 &cbllm_gpu_memory_utilization, 0.9, 0.01, 1.0, PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("cbllm.cuda_graphs", "Replay decode steps from CUDA graphs on the GPU.",
							 NULL, &cbllm_cuda_graphs, true, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("cbllm.load_format",
							 "How the weights are loaded: auto (the safetensors files) or dummy (random weights from config.json alone, for benchmarks).",
							 NULL, &cbllm_load_format, 0, load_format_options, PGC_POSTMASTER,
							 GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomEnumVariable("cbllm.weight_format",
							 "Quantize the float (F32, F16, BF16) weight matrices at load: auto keeps them as stored; q8_0, q4_k and the other GGUF types convert them.",
							 NULL, &cbllm_weight_format, 0, weight_format_options, PGC_POSTMASTER,
							 GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomEnumVariable("cbllm.kv_cache_dtype",
							 "Element type of the KV cache: auto (f16 on the CPU, bf16 on a GPU), f32, f16 or bf16 (f32 takes twice the memory of the others).",
							 NULL, &cbllm_kv_cache_dtype, 0, kv_cache_dtype_options, PGC_POSTMASTER,
							 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.threads", "Compute threads of the engine (0: one per CPU).",
							NULL, &cbllm_threads, 0, 0, 1024, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.engines",
							"Engine processes, each with its own copy of the model and KV cache "
							"(data parallel); engine k uses GPU k modulo the GPUs there are.",
							NULL, &cbllm_engines, 1, 1, CBLLM_MAX_ENGINES, PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_num_seqs", "Most sequences in one engine step.", NULL,
							&cbllm_max_num_seqs, 64, 1, 4096, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_num_batched_tokens", "Most tokens in one engine step.",
							NULL, &cbllm_max_num_batched_tokens, 2048, 1, 1 << 20, PGC_POSTMASTER,
							0, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_model_len",
							"Longest sequence, prompt plus output, in tokens (0: the model's).",
							NULL, &cbllm_max_model_len, 0, 0, 1 << 24, PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.kv_cache_size", "Memory for the KV cache (0: automatic).",
							NULL, &cbllm_kv_cache_size_mb, 0, 0, INT_MAX / 2, PGC_POSTMASTER,
							GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.block_size", "Positions per KV cache block.", NULL,
							&cbllm_block_size, 16, 1, 1024, PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("cbllm.preempt_mode",
							 "How requests are preempted when the KV cache is full.", NULL,
							 &cbllm_preempt_mode, 0, preempt_options, PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.swap_space", "Host memory for swapped-out KV blocks (0: a quarter of the KV cache).",
							NULL, &cbllm_swap_space_mb, 0, 0, INT_MAX / 2, PGC_POSTMASTER,
							GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomBoolVariable("cbllm.enable_prefix_caching", "Reuse the KV of shared prompt prefixes.",
							 NULL, &cbllm_enable_prefix_caching, true, PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_queued_requests",
							"Request slots: most requests queued or running at once.", NULL,
							&cbllm_max_queued_requests, 256, 1, 65536, PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_tokens_limit", "Largest max_tokens a request may ask for.",
							NULL, &cbllm_max_tokens_limit, 4096, 1, 1 << 24, PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_prompt_bytes", "Largest prompt, in bytes, with its stop strings.",
							NULL, &cbllm_max_prompt_bytes, 65536, 1024, 64 << 20, PGC_POSTMASTER,
							GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.output_buffer_size",
							"Shared output buffer per request; the worker holds what does not fit.",
							"At least two of the largest output frames.",
							&cbllm_output_buffer_bytes, 16384, CBLLM_MIN_OUTPUT_BUFFER, 64 << 20, PGC_POSTMASTER,
							GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.load_timeout", "How long a call waits for the model to load.",
							NULL, &cbllm_load_timeout_ms, 60000, 0, INT_MAX, PGC_USERSET,
							GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.batch_rows",
							"Rows whose llm_generate, llm_chat and their _json forms' calls a statement submits at once (-1: cbllm.max_num_seqs times cbllm.engines; 0: one row at a time, no batching node).",
							"The batching node takes the place of a plan node that calls them per row (EXPLAIN shows it as cbllm Batch).",
							&cbllm_batch_rows, -1, -1, 65536, PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_requests_per_session",
							"Most requests one session may hold at once (0: a quarter of cbllm.max_queued_requests).",
							"A request holds a slot from its submission until its result is read or parked.",
							&cbllm_max_requests_per_session, 0, 0, 65536, PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_requests_per_role",
							"Most requests all sessions of one role may hold at once (0: a quarter of cbllm.max_queued_requests).",
							NULL, &cbllm_max_requests_per_role, 0, 0, 65536, PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.superuser_reserved_requests",
							"Request slots kept for superusers: other roles cannot take the last ones free.",
							"At most half of cbllm.max_queued_requests.",
							&cbllm_superuser_reserved_requests, 8, 0, 65536, PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_priority",
							"Highest priority a request of this role may ask for.",
							"Set per role by a superuser (ALTER ROLE ... SET cbllm.max_priority = 0), so that a role cannot put its requests ahead of everyone's.",
							&cbllm_max_priority, CBLLM_MAX_PRIORITY, -CBLLM_MAX_PRIORITY, CBLLM_MAX_PRIORITY,
							PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.slot_wait_timeout",
							"How long a call waits for a request slot (or for its quota) before it fails.",
							NULL, &cbllm_slot_wait_timeout_ms, 10000, 0, INT_MAX, PGC_USERSET,
							GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.result_memory",
							"Shared memory for finished llm_submit results waiting for llm_result.",
							"A result that does not fit stays in its request slot until it is collected.",
							&cbllm_result_memory_kb, 16384, 1024, INT_MAX / 1024, PGC_POSTMASTER,
							GUC_UNIT_KB, NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.stall_timeout",
							"How long the worker may go without a sign of life before cbllm_status() reports it stalled.",
							NULL, &cbllm_stall_timeout_ms, 30000, 1000, INT_MAX, PGC_SIGHUP,
							GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomEnumVariable("cbllm.prefix_cache_scope",
							 "Who shares cached prompt prefixes: role (default), database or cluster.",
							 "A wider scope lets requests of different roles reuse each other's cached KV, and so learn whether another role sent a prompt.",
							 &cbllm_prefix_cache_scope, PREFIX_SCOPE_ROLE, prefix_scope_options,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomRealVariable("cbllm.priority_aging",
							 "Priority points a waiting request gains per second of waiting (0: strict priorities).",
							 NULL, &cbllm_priority_aging, 1.0, 0.0, 1e6, PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("cbllm.max_step_ms",
							"While sequences decode, an engine step takes prompt tokens only up to this duration (-1: twice a decode step; 0: no limit).",
							"Long prompts are then prefilled in chunks beside the decoding sequences, whose next tokens never wait for a whole prompt; the engine measures its cost per prompt token as it runs.",
							&cbllm_max_step_ms, -1, -1, 600000, PGC_POSTMASTER, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("cbllm.engine_program",
							   "The engine program the supervisor starts (empty: cbllm-engine beside postgres).",
							   NULL, &cbllm_engine_program, "", PGC_POSTMASTER, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomBoolVariable("cbllm.restart_stalled_engine",
							 "Kill and restart an engine that made no progress for cbllm.stall_timeout while requests wait.",
							 NULL, &cbllm_restart_stalled_engine, false, PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	MarkGUCPrefixReserved("cbllm");
}
