# cbllm: LLM inference inside PostgreSQL.
#
#   make              build the engine library, bin/cbllm-cli and the unit tests
#   make check-all    run every test (unit, reference, ...): test/run-tests
#   make install      install bin/cbllm-cli and bin/cbllm-engine next to pg_config's programs
#
# The engine core (src/) is plain C11 and builds without PostgreSQL.

EXTENSION   = cbllm
EXTVERSION  = 0.1.0
MODULE_big  = cbllm
OBJS        = bgworker/cbllm.o bgworker/guc.o bgworker/channel.o bgworker/worker.o \
              bgworker/client.o bgworker/sql_generate.o bgworker/sql_tokenize.o \
              bgworker/sql_status.o bgworker/stats.o bgworker/slot.o bgworker/sql_text.o \
              bgworker/sql_enrich.o bgworker/engine_proc.o bgworker/worker_requests.o \
              bgworker/sql_chat.o bgworker/sql_constraint.o bgworker/batch_plan.o \
              bgworker/batch_exec.o
DATA        = sql/cbllm--$(EXTVERSION).sql
PG_CPPFLAGS = -Isrc -MMD -MP  # -MMD -MP: each object writes its header dependencies (bgworker/x.d)
PG_CFLAGS   = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
              -Wno-sign-compare -Wno-implicit-fallthrough
SHLIB_LINK  = build/libcbllm_engine.a $(if $(filter 1,$(CUDA)),$(CUDA_LIB)) -lcjson $(TOK_LIBS) -lm -lpthread $(if $(filter 1,$(CUDA)),$(CUDA_LIBS))

PG_CONFIG  ?= pg_config
PGXS       := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

ENGINE_CC      ?= gcc
ENGINE_OPT     ?= -O2
ENGINE_CFLAGS   = -std=c11 -D_GNU_SOURCE $(ENGINE_OPT) -g -fPIC -pthread \
                  -Wall -Wextra -Werror -Wno-unused-parameter -Isrc
# the tokenizer's regexes (PCRE2) and Unicode normal forms (utf8proc)
TOK_LIBS        = -lpcre2-8 -lutf8proc
ENGINE_LIBS     = -lcjson $(TOK_LIBS) -lm -pthread

# ISA-specific kernels are compiled with their own flags and chosen at run
# time (cpu_features.c), so one build runs on any x86-64.
AVX2_FLAGS    = -mavx2 -mfma -mf16c
AVX512_FLAGS  = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c

# The engine's folders, each a subsystem (src/README.md says what each may
# use; test/check_includes.py holds the tree to it).  Every .c file of a
# folder is part of the engine, but for src/backend/cuda, which the CUDA
# build adds below; of that folder every build has the backend's table of
# weight types (cuda_dtype_traits.c, plain data), so that what the CUDA
# backend runs can be asked and tested in a build without it.
ENGINE_DIRS = base api dtype formats model tokenizer chat constrain sample kv backend backend/cpu \
              sched engine ipc
ENGINE_SRCS = $(foreach d,$(ENGINE_DIRS),$(sort $(wildcard src/$(d)/*.c))) \
              src/backend/cuda/cuda_dtype_traits.c

ENGINE_OBJS = $(patsubst src/%.c,build/%.o,$(ENGINE_SRCS))
ENGINE_LIB  = build/libcbllm_engine.a

UNIT_TESTS = \
	build/test/test_utf8 \
	build/test/test_tokenizer \
	build/test/test_tokenizer_vectors \
	build/test/test_model_config \
	build/test/test_safetensors \
	build/test/test_gguf \
	build/test/test_tokenizer_gguf \
	build/test/test_tokenizer_llama_cpp \
	build/test/test_model_load \
	build/test/test_model_dummy \
	build/test/test_sampler \
	build/test/test_regex \
	build/test/test_json_schema \
	build/test/test_constraint \
	build/test/test_logits_process \
	build/test/test_logprobs \
	build/test/test_completions \
	build/test/test_kv_cache \
	build/test/test_block_manager \
	build/test/test_engine \
	build/test/test_scheduler \
	build/test/test_scheduler_plan \
	build/test/test_scheduler_fair \
	build/test/test_scheduler_aging \
	build/test/test_engine_ipc \
	build/test/test_request_check \
	build/test/test_backend_registry \
	build/test/test_arch \
	build/test/test_families \
	build/test/test_moe \
	build/test/test_hybrid \
	build/test/test_gemma4 \
	build/test/test_longrope \
	build/test/test_model_gguf \
	build/test/test_engine_gguf \
	build/test/test_dtype \
	build/test/test_dtype_quant \
	build/test/test_quantize \
	build/test/test_quant_kernels \
	build/test/test_weight_pack \
	build/test/test_float_pack \
	build/test/test_attention_kernels \
	build/test/test_weight_format \
	build/test/test_vocab_padding \
	build/test/test_generation_config \
	build/test/test_chat_template \
	build/test/test_reasoning \
	build/test/test_rope \
	build/test/test_join_names

CLI = bin/cbllm-cli
# the engine process the PostgreSQL supervisor starts (tools/cbllm-engine.c)
ENGINE_PROG = bin/cbllm-engine

# CUDA.  The real-CUDA build is optional: built when nvcc is found (or
# CUDA=1), skipped with CUDA=0; it needs no GPU to build.  The kernels form
# build/libcbllm_cuda.a, linked into cbllm.so, bin/cbllm-cli and the GPU
# tests (build/test/test_cuda_ops, test_cuda_sample, test_engine_cuda).
#
# The emulated device is always built, nvcc or not: the same kernels compiled
# by g++ against a CPU emulator of CUDA (test/cuda_emu) form
# build/emu/libcbllm_cuda_emu.a, which the *_emu test programs (and
# build/emu/cbllm-cli) link instead, so every build runs the CUDA backend
# without a GPU.  They need an engine built with CUDA support
# (-DCBLLM_WITH_CUDA, with src/backend/cuda/backend_cuda.c): with CUDA=1 that is
# build/libcbllm_engine.a itself; with CUDA=0 a second copy of the engine,
# build/emu/libcbllm_engine_emu.a, is compiled for them.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(wildcard $(CUDA_HOME)/bin/nvcc)
CUDA      ?= $(if $(NVCC),1,0)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80
CUDA_LIBS  = -L$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart_static -ldl -lrt -lpthread -lstdc++ \
             -Wl,-rpath,$(CUDA_HOME)/lib64
CUDA_KERNELS = cuda_runtime_ops cuda_ops cuda_gemm cuda_quant cuda_attention cuda_sample cuda_moe \
               cuda_linear_attn
# the backend's plain-C files, compiled into the engine built with CUDA support
CUDA_HOST    = backend_cuda cuda_weights cuda_swap cuda_experts cuda_state
CUDA_LIB     = build/libcbllm_cuda.a
CUDA_EMU_LIB = build/emu/libcbllm_cuda_emu.a
EMU_TESTS    = build/test/test_cuda_ops_emu build/test/test_cuda_sample_emu build/test/test_cuda_quant_emu build/test/test_engine_cuda_emu build/test/test_arch_emu \
               build/test/test_vocab_padding_emu build/test/test_families_emu \
               build/test/test_longrope_emu build/test/test_model_gguf_emu build/test/test_moe_emu \
               build/test/test_hybrid_emu build/test/test_gemma4_emu \
               build/emu/cbllm-engine
# the engine again after the kernels: they report errors through its base (cbllm_fail)
EMU_LIBS     = $(CUDA_EMU_LIB) $(EMU_ENGINE_LIB) -lcjson $(TOK_LIBS) -lm -pthread -lstdc++
UNIT_TESTS  += $(EMU_TESTS)
ifeq ($(CUDA),1)
ifeq ($(NVCC),)
$(error CUDA=1 needs nvcc and there is none in $(CUDA_HOME)/bin: set NVCC or CUDA_HOME, or build with CUDA=0)
endif
UNIT_TESTS    += build/test/test_cuda_ops build/test/test_cuda_sample build/test/test_cuda_quant build/test/test_engine_cuda
ENGINE_CFLAGS += -DCBLLM_WITH_CUDA
ENGINE_OBJS   += $(patsubst %,build/backend/cuda/%.o,$(CUDA_HOST))
ENGINE_LIBS   := $(CUDA_LIB) $(ENGINE_LIB) $(ENGINE_LIBS) $(CUDA_LIBS)
EMU_ENGINE_LIB = $(ENGINE_LIB)
else
EMU_ENGINE_LIB = build/emu/libcbllm_engine_emu.a
endif
EMU_ENGINE_CFLAGS = $(filter-out -DCBLLM_WITH_CUDA,$(ENGINE_CFLAGS)) -DCBLLM_WITH_CUDA
EMU_ENGINE_OBJS   = $(patsubst src/%.c,build/emu/engine/%.o,$(ENGINE_SRCS)) \
                    $(patsubst %,build/emu/engine/backend/cuda/%.o,$(CUDA_HOST))

.PHONY: engine unit-tests check-all clean-engine install-cli cuda-config

all: engine $(CLI) $(ENGINE_PROG) unit-tests

engine: $(ENGINE_LIB)

# Extra flags of single files, by file name (the emulated device's engine
# compiles them with the same):
#  - the quantizers at -O3, which vectorises their search across its trials (2.4x at load);
#  - the sampler and the attention softmax at -O3, which vectorises their passes;
#  - the kernels at -O3 so that register tiles unroll fully, each with its instruction set.
XFLAGS_quantize            = -O3
XFLAGS_sampler             = -O3
XFLAGS_softmax             = -O3
XFLAGS_kernels_generic     = -O3
XFLAGS_kernels_avx2        = -O3 $(AVX2_FLAGS)
XFLAGS_kernels_avx512      = -O3 $(AVX512_FLAGS)
XFLAGS_kernels_avx512vnni  = -O3 $(AVX512_FLAGS) -mavx512vnni

# Header dependencies come from the compiler (-MMD: build/.../x.d beside x.o).
DEPFLAGS = -MMD -MP

build/%.o: src/%.c
	@mkdir -p $(@D)
	$(ENGINE_CC) $(ENGINE_CFLAGS) $(XFLAGS_$(notdir $*)) $(DEPFLAGS) -c $< -o $@

build build/test bin:
	mkdir -p $@

$(ENGINE_LIB): $(ENGINE_OBJS)
	rm -f $@
	ar rcs $@ $^

CLI_SRCS = tools/cbllm-cli.c tools/cli_bench.c tools/cli_workload.c tools/cli_chat.c tools/cli_tokenize.c \
           tools/cli_constraint.c tools/cli_perplexity.c tools/cli_greedy.c

$(CLI): $(CLI_SRCS) tools/*.h $(ENGINE_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB)) | bin
	$(ENGINE_CC) $(ENGINE_CFLAGS) -Itools $(CLI_SRCS) $(ENGINE_LIB) $(ENGINE_LIBS) -o $@

$(ENGINE_PROG): tools/cbllm-engine.c $(ENGINE_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB)) | bin
	$(ENGINE_CC) $(ENGINE_CFLAGS) tools/cbllm-engine.c $(ENGINE_LIB) $(ENGINE_LIBS) -o $@

# every test program is linked with the fixture writer (test/unit/fixture.h)
TEST_FIXTURE = test/unit/fixture.c

# (a test program rebuilds when the engine library does, which every header it
# includes rebuilds, or when a header of test/unit changes)
build/test/%: test/unit/%.c $(TEST_FIXTURE) test/unit/*.h $(ENGINE_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB)) | build/test
	$(ENGINE_CC) $(ENGINE_CFLAGS) -Itest/unit $< $(TEST_FIXTURE) $(ENGINE_LIB) $(ENGINE_LIBS) -o $@

# the same test programs on the emulated device
build/test/test_cuda_ops_emu build/test/test_cuda_sample_emu build/test/test_cuda_quant_emu: build/test/%_emu: test/unit/%.c test/unit/*.h \
		$(EMU_ENGINE_LIB) $(CUDA_EMU_LIB) | build/test
	$(ENGINE_CC) $(EMU_ENGINE_CFLAGS) -Itest/unit $< $(EMU_ENGINE_LIB) $(EMU_LIBS) -o $@

build/test/test_engine_cuda_emu: test/unit/test_engine_cuda.c test/unit/*.h $(EMU_ENGINE_LIB) $(CUDA_EMU_LIB) | build/test
	$(ENGINE_CC) $(EMU_ENGINE_CFLAGS) -DCBLLM_CUDA_EMU -Itest/unit $< $(EMU_ENGINE_LIB) $(EMU_LIBS) -o $@

build/test/test_arch_emu build/test/test_vocab_padding_emu build/test/test_families_emu \
		build/test/test_longrope_emu build/test/test_model_gguf_emu build/test/test_moe_emu \
		build/test/test_hybrid_emu build/test/test_gemma4_emu: \
		build/test/%_emu: test/unit/%.c test/unit/*.h \
		$(EMU_ENGINE_LIB) $(CUDA_EMU_LIB) | build/test
	$(ENGINE_CC) $(EMU_ENGINE_CFLAGS) -Itest/unit $< $(EMU_ENGINE_LIB) $(EMU_LIBS) -o $@

# the command-line tool on the emulated device, for rehearsing test/gpu/check.sh without a GPU
build/emu/cbllm-cli: $(CLI_SRCS) tools/*.h $(EMU_ENGINE_LIB) $(CUDA_EMU_LIB) | build/emu
	$(ENGINE_CC) $(EMU_ENGINE_CFLAGS) -Itools $(CLI_SRCS) $(EMU_ENGINE_LIB) $(EMU_LIBS) -o $@

# the engine process on the emulated device, for test_engine_ipc's CUDA run
build/emu/cbllm-engine: tools/cbllm-engine.c $(EMU_ENGINE_LIB) $(CUDA_EMU_LIB) | build/emu
	$(ENGINE_CC) $(EMU_ENGINE_CFLAGS) tools/cbllm-engine.c $(EMU_ENGINE_LIB) $(EMU_LIBS) -o $@

# the engine with CUDA support for the emulated device (CUDA=0 builds only),
# each file with the flags it gets above
build/emu/engine/%.o: src/%.c
	@mkdir -p $(@D)
	$(ENGINE_CC) $(EMU_ENGINE_CFLAGS) $(XFLAGS_$(notdir $*)) $(DEPFLAGS) -c $< -o $@

build/emu/libcbllm_engine_emu.a: $(EMU_ENGINE_OBJS)
	rm -f $@
	ar rcs $@ $^

build/cuda build/emu build/emu/engine:
	mkdir -p $@

build/cuda/%.o: src/backend/cuda/%.cu | build/cuda
	$(NVCC) -O2 -std=c++17 $(CUDA_ARCH) -Isrc -Xcompiler -fPIC,-Wall,-Wextra,-Werror -MMD -MP -c $< -o $@

$(CUDA_LIB): $(patsubst %,build/cuda/%.o,$(CUDA_KERNELS))
	rm -f $@
	ar rcs $@ $^

# EMU_OPT: the emulator's and emulated kernels' optimisation (and sanitizer) flags
EMU_OPT     ?= -O1 -g
EMU_CXXFLAGS = -std=c++17 $(EMU_OPT) -fPIC -Wall -Wextra -Werror -Wno-unused-parameter \
               -Wno-unknown-pragmas -DCBLLM_CUDA_EMU -Isrc -Itest/cuda_emu/include -Itest/cuda_emu

build/emu/%.o: src/backend/cuda/%.cu | build/emu
	g++ $(EMU_CXXFLAGS) $(DEPFLAGS) -x c++ -c $< -o $@

build/emu/cuda_emu.o: test/cuda_emu/cuda_emu.cc | build/emu
	g++ $(EMU_CXXFLAGS) $(DEPFLAGS) -c $< -o $@

$(CUDA_EMU_LIB): $(patsubst %,build/emu/%.o,$(CUDA_KERNELS)) build/emu/cuda_emu.o
	rm -f $@
	ar rcs $@ $^

unit-tests: $(UNIT_TESTS)

check-all: all
	test/run-tests

# what this build does about CUDA (test/run-tests reports it)
cuda-config:
	@echo "CUDA=$(CUDA)"
	@echo "NVCC=$(NVCC)"

clean-engine:
	rm -rf build bin

# ---------------------------------------------------------------- fuzzing
# libFuzzer targets for the parsers of untrusted files (test/fuzz/README.md).
# Each test/fuzz/fuzz_<what>.c is linked with the engine sources it needs,
# compiled by clang with AddressSanitizer and UndefinedBehaviorSanitizer
# (Debian: clang, libfuzzer-14-dev, libclang-rt-14-dev).  Not part of "all":
# test/fuzz/run.sh builds them ("make fuzz") and runs or replays them.
FUZZ_CC      ?= clang
FUZZ_SAN      = -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   = -std=c11 -D_GNU_SOURCE -g -O1 $(FUZZ_SAN) -Wall -Wextra -Werror \
                -Wno-unused-parameter -Isrc -Itest/fuzz
FUZZ_TARGETS  = config safetensors safetensors_index tokenizer tokenizer_config ipc request_check \
                chat_template gguf tokenizer_gguf regex json_schema reasoning
FUZZ_BINS     = $(patsubst %,build/fuzz/fuzz_%,$(FUZZ_TARGETS))

.PHONY: fuzz
fuzz: $(FUZZ_BINS)

# the engine sources (compiled for fuzzing) that each target needs
FUZZ_DTYPE_OBJS = $(patsubst %,build/fuzz/obj/%.o,dtype dtype_quant dtype_kquant quantize util join_names)
build/fuzz/fuzz_config:            build/fuzz/obj/model_config.o build/fuzz/obj/model_config_rope.o \
                                   build/fuzz/obj/model_config_hybrid.o build/fuzz/obj/model_config_gemma4.o \
                                   build/fuzz/obj/rope.o build/fuzz/obj/arch.o build/fuzz/obj/util.o \
                                   build/fuzz/obj/join_names.o
build/fuzz/fuzz_safetensors:       build/fuzz/obj/safetensors.o $(FUZZ_DTYPE_OBJS)
build/fuzz/fuzz_safetensors_index: build/fuzz/obj/safetensors.o $(FUZZ_DTYPE_OBJS)
FUZZ_TOK_OBJS = $(patsubst %,build/fuzz/obj/%.o,tokenizer_load tokenizer tokenizer_norm tokenizer_pretok \
                tokenizer_decode util)
build/fuzz/fuzz_tokenizer:         $(FUZZ_TOK_OBJS)
build/fuzz/fuzz_tokenizer_config:  $(FUZZ_TOK_OBJS)
build/fuzz/fuzz_gguf:               build/fuzz/obj/gguf.o build/fuzz/obj/util.o
build/fuzz/fuzz_tokenizer_gguf:     $(FUZZ_TOK_OBJS) build/fuzz/obj/tokenizer_gguf.o build/fuzz/obj/tokenizer_gguf_pre.o \
                                    build/fuzz/obj/gguf.o
build/fuzz/fuzz_ipc:                build/fuzz/obj/ipc.o build/fuzz/obj/request_params.o
build/fuzz/fuzz_request_check:      build/fuzz/obj/request_params.o
FUZZ_REGEX_OBJS = $(patsubst %,build/fuzz/obj/%.o,regex_parse regex_class regex_write regex_dfa regex_nfa \
                  regex_byteclass regex_subset regex_minimise util)
FUZZ_JSON_SCHEMA_OBJS = $(patsubst %,build/fuzz/obj/%.o,json_schema json_schema_emit json_schema_value \
                        json_schema_keywords json_schema_number json_schema_string json_schema_format \
                        json_schema_object json_schema_array)
build/fuzz/fuzz_regex:              $(FUZZ_REGEX_OBJS)
build/fuzz/fuzz_json_schema:        $(FUZZ_JSON_SCHEMA_OBJS) $(FUZZ_REGEX_OBJS)
build/fuzz/fuzz_chat_template:      $(patsubst %,build/fuzz/obj/%.o,jinja_value jinja_lex jinja_parse jinja_eval \
                                   jinja_builtins jinja_methods jinja chat_template util)
build/fuzz/fuzz_reasoning:          build/fuzz/obj/reasoning.o build/fuzz/obj/util.o

build/fuzz/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/*.h | build/fuzz
	$(FUZZ_CC) $(FUZZ_CFLAGS) $< $(filter %.o,$^) -lcjson $(TOK_LIBS) -lm -o $@

# the fuzz objects are named by file alone: vpath finds each in its folder
vpath %.c $(addprefix src/,$(ENGINE_DIRS))
build/fuzz/obj/%.o: %.c | build/fuzz/obj
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(DEPFLAGS) -c $< -o $@

build/fuzz build/fuzz/obj:
	mkdir -p $@

# the header dependencies every compile above wrote (none before the first build)
-include $(shell find build -name '*.d' 2>/dev/null)

ifneq ($(PGXS),)
EXTRA_CLEAN = build bin
# no LLVM bitcode: the engine is linked in statically and clang may be absent
override with_llvm = no
include $(PGXS)
$(shlib): $(ENGINE_LIB) $(if $(filter 1,$(CUDA)),$(CUDA_LIB))
# PGXS rules do not track headers: the glue's objects write their own (PG_CPPFLAGS)
-include $(OBJS:.o=.d)
EXTRA_CLEAN += $(OBJS:.o=.d)
install: install-cli
install-cli: $(CLI) $(ENGINE_PROG)
	$(INSTALL_PROGRAM) $(CLI) '$(DESTDIR)$(bindir)/cbllm-cli'
	$(INSTALL_PROGRAM) $(ENGINE_PROG) '$(DESTDIR)$(bindir)/cbllm-engine'
else
clean: clean-engine
install: install-cli
install-cli: $(CLI) $(ENGINE_PROG)
	install -D -m 755 $(CLI) $(DESTDIR)/usr/local/bin/cbllm-cli
	install -D -m 755 $(ENGINE_PROG) $(DESTDIR)/usr/local/bin/cbllm-engine
endif
