#!/bin/sh
# test_fuzz_smoke.sh - the fuzzing smoke test of `make test`: builds the libFuzzer harnesses of
# tests/fuzz with ASan + UBSan at -O0 (make fuzz-smoke-bins, into $FUZZ_BUILD, default
# build-fuzz-smoke: about half the compile time of the optimised `make fuzz` build) and runs each
# from its corpus for FUZZ_SMOKE_SECONDS (default 4), two at a time (FUZZ_JOBS), through
# tests/fuzz/smoke.sh, which prints one PASS / FAIL / SKIP line per harness. A crash, leak,
# sanitizer report or timeout fails the harness. `make fuzz-smoke` is the longer run (30 s per
# harness, optimised build); docs/fuzzing.md has the long runs. Skipped (one SKIP line) when clang
# cannot build a libFuzzer program (scripts/setup installs clang and libclang-rt-dev).
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz-smoke}
FUZZ_CC=${FUZZ_CC:-clang}
secs=${FUZZ_SMOKE_SECONDS:-4}
export FUZZ_BUILD

probe=$(mktemp -d /tmp/kiln-fuzz-probe-XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' >"$probe/p.c"
if ! command -v "$FUZZ_CC" >/dev/null 2>&1; then
  echo "SKIP fuzz: $FUZZ_CC is not installed (scripts/setup installs clang and libclang-rt-dev)"
  exit 0
fi
if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" >"$probe/log" 2>&1; then
  echo "SKIP fuzz: $FUZZ_CC cannot link libFuzzer programs (scripts/setup installs libclang-rt-dev): $(head -c 200 "$probe/log")"
  exit 0
fi
# A make of its own (not the jobserver of a calling make), two jobs as the machines have.
if ! MAKEFLAGS= make -s -j2 fuzz-smoke-bins FUZZ_SMOKE_BUILD="$FUZZ_BUILD" FUZZ_CC="$FUZZ_CC" >"$probe/build" 2>&1; then
  echo "FAIL fuzz build: make fuzz-smoke-bins failed"
  tail -n 20 "$probe/build" | sed 's/^/    /'
  exit 1
fi
FUZZ_JOBS=${FUZZ_JOBS:-2} sh tests/fuzz/smoke.sh "$secs"
