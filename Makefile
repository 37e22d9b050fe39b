# kiln build: `make` builds build/kiln, build/libkiln.a, build/libkiln.so and the tools.
# `make run` and `make test` first run scripts/setup (installs missing Debian packages).
# Sources are found by wildcard: a new src/*/x.c or tests/unit/test_x.c needs no edit here.
#
# Who sees what:
#   - the library (src/ except cli and server) is compiled with -fvisibility=hidden: libkiln.so exports
#     only the kiln_* functions include/kiln.h marks KILN_API (tests/cli/test_exports.sh checks it);
#   - the CLI and the server see include/ and their own folders only, so an internal header there is
#     a build error;
#   - tools, tests and benchmarks see all of src/ and tools/lib/, and link libkiln-dev.a (code for
#     them only, such as the GGUF writer) and libkiln.a, where hidden symbols still link.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
CFLAGS   ?=
WERROR   ?= -Werror
BASEFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter $(WERROR) \
            -fPIC -Iinclude $(OPT) -g \
            $(shell pkg-config --cflags libpcre2-8 jansson sqlite3 libmicrohttpd libedit 2>/dev/null)
ALLCFLAGS = $(BASEFLAGS) $(CFLAGS)
LIBS      = $(shell pkg-config --libs libpcre2-8 jansson sqlite3 2>/dev/null || echo -lpcre2-8 -ljansson -lsqlite3) \
            -lm -lpthread
# The library runs its threads on its own pool (src/base/pool.c); only the generator tool and the
# bandwidth probe use OpenMP.
OMPFLAGS  = -fopenmp
# The HTTP server and the terminal chat live in the kiln binary only; the library does not depend
# on libmicrohttpd or libedit.
CLI_LIBS  = $(shell pkg-config --libs libmicrohttpd libedit 2>/dev/null || echo -lmicrohttpd -ledit)
# kiln pull downloads over HTTP(S) with libcurl: the kiln binary links it, the library does not.
CLI_LIBS += $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)

LIB_SRC  := $(sort $(wildcard src/base/*.c src/tensor/*.c src/model/*.c src/text/*.c src/text/jinja/*.c \
                              src/sample/*.c src/engine/*.c src/cache/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c src/server/*.c))
DEV_SRC  := $(sort $(wildcard tools/lib/*.c))
TOOL_SRC := $(sort $(wildcard tools/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
DEV_OBJ  := $(DEV_SRC:%.c=$(BUILD)/obj/%.o)
DEV_LIB  := $(BUILD)/libkiln-dev.a
# The browser chat page: web/* compiled into the kiln binary by scripts/embed.
WEB_SRC  := $(sort $(wildcard web/*.html web/*.js web/*.css web/*.svg web/*.png web/*.ico))
WEB_OBJ  := $(BUILD)/obj/gen/web_assets.o
TOOLS    := $(TOOL_SRC:tools/%.c=$(BUILD)/%)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all run test test-arm64 arm64-tests arm64-list asan setup clean check-header FORCE
all: $(BUILD)/kiln $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(TOOLS) $(TESTS) $(BENCHES)

# Include paths and visibility per part (see the top of this file). They are target-specific values
# of OBJFLAGS set on the object files themselves, so they never leak into another part's objects.
LIB_FLAGS    = -Isrc -fvisibility=hidden
CLI_FLAGS    = -Isrc/cli -Isrc/server
INTERNAL_INC = -Isrc -Itools/lib
$(LIB_OBJ): OBJFLAGS = $(LIB_FLAGS)
$(CLI_OBJ) $(WEB_OBJ): OBJFLAGS = $(CLI_FLAGS)
$(DEV_OBJ): OBJFLAGS = $(INTERNAL_INC)

# $(BUILD)/flags holds the compile flags and is rewritten only when they change; everything compiled
# depends on it, so a new OPT or CFLAGS, or a changed include or visibility rule, rebuilds what it
# affects, while an unrelated edit of this file rebuilds nothing. (FORCE runs the check every time;
# make looks at the file's time again afterwards.) The fuzzing builds add the files compiled without
# coverage or comparison tracing, so that a change of those lists reaches an existing build folder.
FLAGS_NOW = $(CC) $(ALLCFLAGS) | $(LIB_FLAGS) | $(CLI_FLAGS) | $(INTERNAL_INC) | $(OMPFLAGS)$(if \
  $(FUZZ_NOCMP_FLAGS), | $(FUZZ_NOCOV_OBJ) $(FUZZ_NOCOV_FLAGS) | $(FUZZ_NOCMP_OBJ) $(FUZZ_NOCMP_FLAGS))
$(BUILD)/flags: FORCE
	@mkdir -p $(dir $@)
	@echo '$(FLAGS_NOW)' | cmp -s - $@ || echo '$(FLAGS_NOW)' >$@
FORCE:

$(BUILD)/obj/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(OBJFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libkiln.so: $(LIB_OBJ)
	$(CC) $(ALLCFLAGS) -shared -o $@ $^ $(LIBS)

# Developer-only code (tools/lib: the GGUF writer) for tools, tests and benchmarks; never shipped.
$(DEV_LIB): $(DEV_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/kiln: $(CLI_OBJ) $(WEB_OBJ) $(BUILD)/libkiln.a
	$(CC) $(ALLCFLAGS) -o $@ $(CLI_OBJ) $(WEB_OBJ) $(BUILD)/libkiln.a $(LIBS) $(CLI_LIBS)

# Regenerated when a page file changes, or one is added or removed (the folder's time changes).
$(BUILD)/gen/web_assets.c: $(WEB_SRC) scripts/embed $(wildcard web)
	@mkdir -p $(dir $@)
	sh scripts/embed $@ $(WEB_SRC)

$(WEB_OBJ): $(BUILD)/gen/web_assets.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(OBJFLAGS) -MMD -MP -c $< -o $@

# Tools, tests and benchmarks are one file each, linked with the developer archive first (it calls
# into libkiln.a).
$(BUILD)/%: tools/%.c $(DEV_LIB) $(BUILD)/libkiln.a $(BUILD)/flags
	$(CC) $(ALLCFLAGS) $(INTERNAL_INC) $(OMPFLAGS) -o $@ $< $(DEV_LIB) $(BUILD)/libkiln.a $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/harness.h $(DEV_LIB) $(BUILD)/libkiln.a $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(INTERNAL_INC) -Itests/unit -o $@ $< $(DEV_LIB) $(BUILD)/libkiln.a $(LIBS) $(TEST_LDFLAGS)

# test_noalloc counts every allocation the library makes: it links with the allocator wrapped.
$(BUILD)/tests/test_noalloc: TEST_LDFLAGS = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=free

$(BUILD)/bench/%: bench/%.c $(DEV_LIB) $(BUILD)/libkiln.a $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(INTERNAL_INC) $(OMPFLAGS) -o $@ $< $(DEV_LIB) $(BUILD)/libkiln.a $(LIBS)

setup:
	@scripts/setup

run: setup
	@$(MAKE) --no-print-directory -j$$(nproc) all
	$(BUILD)/kiln run -m ../shared/data/models/stories260K/stories260K.gguf -p "Once upon a time"

test: setup
	@$(MAKE) --no-print-directory -j$$(nproc) all
	@BUILD=$(BUILD) tests/run.sh

# The ARM64 part of the suite alone: cross-builds the library and the unit tests named in ARM64_TESTS
# for aarch64 (Debian's gcc-aarch64-linux-gnu, linked statically against the arm64 builds of the
# libraries, which scripts/setup installs) into $(ARM64_BUILD), and runs them under qemu-user with
# `-cpu max` (tests/cli/test_arm64.sh; `make test` runs the same script). The tests are picked to
# finish in about two minutes on two cores under emulation (test_batch, for one, takes three more).
# Only the library objects those tests link are compiled: ARM64_SKIP_SRC names the sources none of
# them needs (the chat templates, tool calls, structured output, the serving
# engine), and test_arm64.sh builds the whole library instead when the tests no longer link without
# them (ARM64_SKIP_SRC= does the same by hand). No debug information (-g0): the build is for running.
ARM64_CC    ?= aarch64-linux-gnu-gcc
ARM64_BUILD ?= build-arm64
ARM64_TESTS ?= test_kernels_neon test_kernels_k test_attend test_glu test_sumexp test_logit_scan test_quant test_pack test_model_types
ARM64_LIBS   = -static -lpcre2-8 -ljansson -lsqlite3 -lm -lpthread
ARM64_SKIP_SRC ?= src/text/jinja/%.c src/text/toolcall%.c src/text/chat.c src/sample/schema%.c \
                  src/sample/grammar_api.c src/engine/engine.c src/engine/scheduler.c src/engine/text_api.c \
                  src/engine/embed.c src/model/info.c src/model/hf_inspect.c
# Debian's aarch64 GCC 12 stops with an internal error in its loop vectorizer on some test files
# (vect_transform_reduction); the kernels are written with intrinsics and do not need it.
ARM64_CFLAGS = -fno-tree-loop-vectorize -g0
export ARM64_CC ARM64_BUILD ARM64_TESTS
arm64-tests:
	@$(MAKE) --no-print-directory CC=$(ARM64_CC) BUILD=$(ARM64_BUILD) LIBS='$(ARM64_LIBS)' CFLAGS='$(ARM64_CFLAGS)' \
	  LIB_SRC='$(filter-out $(ARM64_SKIP_SRC),$(LIB_SRC))' $(addprefix $(ARM64_BUILD)/tests/,$(ARM64_TESTS))

arm64-list:
	@echo $(ARM64_TESTS)

test-arm64: setup
	@mkdir -p $(ARM64_BUILD)
	@sh tests/cli/test_arm64.sh | tee $(ARM64_BUILD)/test.log; ! grep -q '^FAIL' $(ARM64_BUILD)/test.log

# The public-header checks alone, a quick run while editing include/kiln.h: kiln.h compiles by itself
# as C11 and C++, programs using only it link against libkiln.so and libkiln.a, and libkiln.so exports
# exactly the header's functions (tests/cli/test_header.sh, test_exports.sh). `make test` runs the same
# scripts with the rest of the suite. Fails when a check prints FAIL.
check-header: $(BUILD)/kiln $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(DEV_LIB)
	@out=$$(BUILD=$(BUILD) sh tests/cli/test_header.sh; BUILD=$(BUILD) sh tests/cli/test_exports.sh); \
	  echo "$$out"; ! echo "$$out" | grep -q '^FAIL'

# The suite under AddressSanitizer + UBSan, in its own build folder. A program runs 2-5x slower under
# the sanitizers (test_faults_alloc, every allocation of its paths failed in turn: ~5 min of CPU), so
# each may take 1,800 s before it counts as hung (KILN_TEST_TIMEOUT overrides).
asan: setup
	@$(MAKE) --no-print-directory all BUILD=build-asan OPT=-O1 \
	  CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LIBS="$(LIBS) -fsanitize=address,undefined"
	@BUILD=build-asan KILN_TEST_CFLAGS="-fsanitize=address,undefined" ASAN_OPTIONS=detect_leaks=1 \
	  KILN_TEST_TIMEOUT=$${KILN_TEST_TIMEOUT:-1800} tests/run.sh

# ---- fuzzing (tests/fuzz/, docs/fuzzing.md) --------------------------------------------------------
# `make fuzz` builds the libFuzzer harnesses tests/fuzz/fuzz_*.c with clang under ASan + UBSan into
# $(FUZZ_BUILD)/ (the library, the developer archive and the server's objects are compiled there with
# the same sanitizers and coverage); `make fuzz-smoke` runs each harness FUZZ_SECONDS (30) from its
# corpus tests/fuzz/corpus/<harness>/ and fails on any crash, leak or timeout. `make test` runs a
# shorter smoke (tests/cli/test_fuzz_smoke.sh).
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_SAN      = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# The Jinja engine's budgets in the fuzzing builds: 1 MiB of work instead of 512 and 500 k evaluation
# steps instead of 20 M. Under the sanitizers a render runs 5-10 times slower, and a grown corpus is
# full of templates that spend a whole budget (joins of joins, `upper` of a string in a loop nest): at
# 64 MiB such units took 1-2 s each (a long run at 500 executions a second), at 4 MiB a pass over a
# grown corpus of 2,911 units took 27 s, at 1 MiB 9 s (a long run at 2,000+ a second), with 0.4% fewer
# edges. The budgets' logic is the same code; test_jinja checks the full ones.
# The same holds for a JSON Schema pattern's automaton: the fuzzing build bounds its subset
# construction (steps, held positions) and its states and transitions at an eighth of the shipped
# bounds (src/sample/schema_internal.h). A pass over 403 units of a grown grammar corpus took 16.1 s
# of CPU with the shipped bounds and 11.4 s with these, with 1.4% fewer features and as many edges;
# test_regex and test_schema check the shipped bounds.
FUZZ_DEFS     = -DKN_JINJA_MAX_WORK=1048576ull -DKN_JINJA_MAX_STEPS=500000ull -DKN_DFA_MAX_WORK=2500000 \
                -DKN_DFA_MAX_HELD=500000 -DKN_DFA_MAX_STATES=1500 -DKN_DFA_MAX_TRANS=125000
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS     = $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)
SERVER_OBJ    = $(filter $(BUILD)/obj/src/server/%,$(CLI_OBJ))
# clang ignores the kernels' `#pragma GCC target`: under clang their files get the same instruction
# sets as flags (the kernels are still chosen at run time by the CPU's features). The fuzzing build
# compiles them without sanitizers or coverage (FUZZ_KERNEL_FLAGS): the harnesses do not aim at the
# SIMD kernels (`make asan` runs their tests), and under ASan each of these files takes minutes.
# clang warns where gcc does not: gcc's build is the one held to -Werror (FUZZ_OBJ_FLAGS=-Wno-error).
ifneq ($(filter clang%,$(notdir $(CC))),)
$(filter $(BUILD)/obj/src/tensor/kernels_avx2%,$(LIB_OBJ)): OBJFLAGS = $(LIB_FLAGS) -Wno-unknown-pragmas \
  -mavx2 -mfma -mf16c $(FUZZ_KERNEL_FLAGS)
$(filter $(BUILD)/obj/src/tensor/kernels_avx512%,$(LIB_OBJ)): OBJFLAGS = $(LIB_FLAGS) -Wno-unknown-pragmas \
  -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mavx2 -mfma -mf16c $(FUZZ_KERNEL_FLAGS)
# Arithmetic over sizes its callers bound is compiled without the fuzzer's coverage and comparison
# tracing (FUZZ_NOCOV_FLAGS); AddressSanitizer and UBSan stay. SHA-256 (model fingerprints, cache keys)
# made a third of the gguf harness's time. The forward pass's ops (attention, norms, the matmul
# dispatch) and the sampler's arithmetic (top-k selection, sorting, the draw) run over shapes fixed
# when the model loads and options the request parsers have already checked; their tracing hooks, one
# per loop test, were 17% of the http harness's CPU time (perf), its user time 20-30% lower without.
FUZZ_NOCOV_OBJ = $(addprefix $(BUILD)/obj/src/,base/sha256.o tensor/attend.o tensor/ops.o sample/sampler.o sample/candsort.o)
$(FUZZ_NOCOV_OBJ): OBJFLAGS = $(LIB_FLAGS) $(FUZZ_NOCOV_FLAGS)
# Loops over a matcher's states, an automaton's transitions and an encoder's lattice keep their edge
# coverage but not the comparison tracing (FUZZ_NOCMP_FLAGS): their tests are of indices and sizes the
# code made itself, which the fuzzer's table of compared values cannot steer, and each test was a hook
# call (three quarters of the grammar harness's CPU time, perf). The parsers that read the input (GBNF,
# JSON Schema, patterns, tokenizer.json with its normalizer and pre-tokenizer settings) keep it. A replay
# of 600 units of grown corpora: grammar 18.2 s of CPU -> 6.4 s, tokenizer_json 3.9 s -> 2.5 s, same
# edges and features. The per-character passes over the text (the Unicode tables, UTF-8, normalizing,
# pre-tokenizing) followed: half of a later tokenizer_json run's CPU time was their character-class
# tests; replay 2.2-2.4 s -> 1.2-1.4 s, same edges and features.
FUZZ_NOCMP_OBJ = $(addprefix $(BUILD)/obj/src/,sample/gstore.o sample/schema_regex_dfa.o sample/schema_dfa.o \
  sample/schema_dfa_min.o sample/schema_dfa_emit.o text/unigram.o text/tok_tj_enc.o text/tok_util.o \
  text/unicode.o text/tok_tj_unicode.o text/tok_tj_norm.o text/tok_tj_pre.o)
$(FUZZ_NOCMP_OBJ): OBJFLAGS = $(LIB_FLAGS) $(FUZZ_NOCMP_FLAGS)
$(LIB_OBJ) $(CLI_OBJ) $(DEV_OBJ) $(WEB_OBJ): OBJFLAGS += $(FUZZ_OBJ_FLAGS)
endif
.PHONY: fuzz fuzz-bins fuzz-smoke
fuzz:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) OPT=-O1 \
	  CFLAGS="$(FUZZ_SAN) $(FUZZ_DEFS) -fsanitize=fuzzer-no-link" FUZZ_KERNEL_FLAGS=-fno-sanitize=all \
	  FUZZ_NOCOV_FLAGS=-fno-sanitize=fuzzer-no-link \
	  FUZZ_NOCMP_FLAGS=-fno-sanitize-coverage=trace-cmp FUZZ_OBJ_FLAGS=-Wno-error fuzz-bins

fuzz-bins: $(FUZZ_BINS)

# The smoke of `make test` (tests/cli/test_fuzz_smoke.sh) builds the same harnesses with the same
# sanitizers at -O0 (the kernels, which carry no sanitizers, at -O1) into $(FUZZ_SMOKE_BUILD): clang
# compiles the ~170 files about twice as fast, and a few seconds of fuzzing per harness need no
# optimised build. `make fuzz` stays the build for long runs.
FUZZ_SMOKE_BUILD ?= build-fuzz-smoke
.PHONY: fuzz-smoke-bins
fuzz-smoke-bins:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_SMOKE_BUILD) CC=$(FUZZ_CC) OPT=-O0 \
	  CFLAGS="$(FUZZ_SAN) $(FUZZ_DEFS) -fsanitize=fuzzer-no-link" FUZZ_KERNEL_FLAGS="-fno-sanitize=all -O1" \
	  FUZZ_NOCOV_FLAGS=-fno-sanitize=fuzzer-no-link \
	  FUZZ_NOCMP_FLAGS=-fno-sanitize-coverage=trace-cmp FUZZ_OBJ_FLAGS=-Wno-error fuzz-bins

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h tests/fuzz/fuzz_server.h $(DEV_LIB) $(BUILD)/libkiln.a $(SERVER_OBJ) $(WEB_OBJ) $(BUILD)/flags
	$(CC) $(ALLCFLAGS) -fsanitize=fuzzer $(INTERNAL_INC) -Isrc/server -Itests/fuzz -Itests/unit -o $@ $< $(SERVER_OBJ) \
	  $(WEB_OBJ) $(DEV_LIB) $(BUILD)/libkiln.a $(LIBS) $(CLI_LIBS) $(FUZZ_LDFLAGS)
# fuzz_api_faults fails one allocation of its second exchange: it links with the allocator wrapped.
$(BUILD)/fuzz_api_faults: FUZZ_LDFLAGS = $(ALLOC_WRAP)
$(BUILD)/fuzz_api_faults: tests/unit/faults_alloc.h

fuzz-smoke: fuzz
	@FUZZ_BUILD=$(FUZZ_BUILD) sh tests/fuzz/smoke.sh $(FUZZ_SECONDS)

clean:
	rm -rf build build-asan build-arm64 build-fuzz build-fuzz-smoke

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(DEV_OBJ:.o=.d) $(WEB_OBJ:.o=.d)

# The allocation-failure tests link with the allocator wrapped (tests/unit/faults_alloc.h).
ALLOC_WRAP = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=strdup
# test_faults_alloc fails the N-th allocation of the library.
$(BUILD)/tests/test_faults_alloc: TEST_LDFLAGS = $(ALLOC_WRAP)
$(BUILD)/tests/test_faults_alloc: tests/unit/faults_alloc.h
# test_faults_alloc_server fails the N-th allocation of the server's code and the library under it,
# with requests to a server inside the program (tests/fuzz/fuzz_server.h): it links the server's objects.
$(BUILD)/tests/test_faults_alloc_server: tests/unit/test_faults_alloc_server.c tests/unit/harness.h \
  tests/unit/faults_alloc.h tests/fuzz/fuzz.h tests/fuzz/fuzz_server.h $(SERVER_OBJ) $(WEB_OBJ) $(DEV_LIB) \
  $(BUILD)/libkiln.a $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(INTERNAL_INC) -Isrc/server -Itests/unit -Itests/fuzz -o $@ $< $(SERVER_OBJ) $(WEB_OBJ) \
	  $(DEV_LIB) $(BUILD)/libkiln.a $(LIBS) $(CLI_LIBS) $(ALLOC_WRAP)
