# kiln build: `make` builds build/kiln, build/libkiln.a, build/libkiln.so and the tools.
# `make run` and `make test` first run scripts/setup (installs missing Debian packages).
# Sources are found by wildcard: a new src/*/x.c or tests/unit/test_x.c needs no edit here.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
CFLAGS   ?=
WERROR   ?= -Werror
BASEFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter $(WERROR) \
            -fPIC -fopenmp -Iinclude -Isrc $(OPT) -g \
            $(shell pkg-config --cflags libpcre2-8 jansson sqlite3 libmicrohttpd 2>/dev/null)
ALLCFLAGS = $(BASEFLAGS) $(CFLAGS)
LIBS      = $(shell pkg-config --libs libpcre2-8 jansson sqlite3 2>/dev/null || echo -lpcre2-8 -ljansson -lsqlite3) \
            -fopenmp -lm -lpthread
# The HTTP server lives in the kiln binary only; the library does not depend on libmicrohttpd.
CLI_LIBS  = $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)

LIB_SRC  := $(sort $(wildcard src/base/*.c src/tensor/*.c src/model/*.c src/text/*.c \
                              src/sample/*.c src/engine/*.c src/cache/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c src/server/*.c))
TOOL_SRC := $(sort $(wildcard tools/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS    := $(TOOL_SRC:tools/%.c=$(BUILD)/%)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all run test asan setup clean check-header
all: $(BUILD)/kiln $(BUILD)/libkiln.a $(BUILD)/libkiln.so $(TOOLS) $(TESTS) $(BENCHES)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkiln.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libkiln.so: $(LIB_OBJ)
	$(CC) $(ALLCFLAGS) -shared -o $@ $^ $(LIBS)

$(BUILD)/kiln: $(CLI_OBJ) $(BUILD)/libkiln.a
	$(CC) $(ALLCFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libkiln.a $(LIBS) $(CLI_LIBS)

$(BUILD)/%: tools/%.c $(BUILD)/libkiln.a
	$(CC) $(ALLCFLAGS) -o $@ $< $(BUILD)/libkiln.a $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/harness.h $(BUILD)/libkiln.a
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -Itests/unit -o $@ $< $(BUILD)/libkiln.a $(LIBS) $(TEST_LDFLAGS)

# test_noalloc counts every allocation the library makes: it links with the allocator wrapped.
$(BUILD)/tests/test_noalloc: TEST_LDFLAGS = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=free

$(BUILD)/bench/%: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -o $@ $< $(LIBS)

setup:
	@scripts/setup

run: setup
	@$(MAKE) --no-print-directory all
	$(BUILD)/kiln run -m ../shared/data/models/stories260K/stories260K.gguf -p "Once upon a time"

test: setup
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/run.sh

# The suite under AddressSanitizer + UBSan, in its own build folder.
asan: setup
	@$(MAKE) --no-print-directory all BUILD=build-asan OPT=-O1 \
	  CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LIBS="$(LIBS) -fsanitize=address,undefined"
	@BUILD=build-asan KILN_TEST_CFLAGS="-fsanitize=address,undefined" ASAN_OPTIONS=detect_leaks=1 tests/run.sh

clean:
	rm -rf build build-asan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
