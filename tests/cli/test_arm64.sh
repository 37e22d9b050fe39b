#!/bin/sh
# test_arm64.sh - the ARM64 part of the suite: cross-builds the unit tests named in ARM64_TESTS (the
# kernel and model tests; Makefile) for aarch64 into $ARM64_BUILD and runs them under qemu-user.
#   qemu -cpu max         every test: the NEON set with dotprod and i8mm, bit-identical to the
#                         reference (the NEON kernel test also checks the neon and neon+dotprod sets);
#   qemu -cpu cortex-a76  the NEON kernel test again on a CPU with dotprod but no i8mm: the library
#                         must choose neon+dotprod, and no dotprod kernel may use an i8mm instruction;
#   qemu -cpu cortex-a72  and on one with neither (Raspberry Pi 4 class): the plain neon set.
# The build compiles only the library objects these tests link (ARM64_SKIP_SRC in the Makefile) and
# falls back to the whole library, with a note, when that no longer links. The emulated programs run
# two at a time (the machines have two cores), longest first; their output is printed afterwards in
# the fixed order below, each with its time. Under emulation the programs see KILN_TEST_EMULATED=1
# (test_model_types leaves its resident-memory check to the native run there).
# Each line a test program prints is relabelled "arm64 <program>: ..." ("arm64-a76 ...", ...), so the
# totals of tests/run.sh count them apart from the native ones; the last lines name the kernel sets
# that ran. Skipped (one SKIP line) when the cross compiler or qemu-aarch64 is missing.
ARM64_CC=${ARM64_CC:-aarch64-linux-gnu-gcc}
ARM64_BUILD=${ARM64_BUILD:-build-arm64}
SYSROOT=${ARM64_SYSROOT:-/usr/aarch64-linux-gnu}
# A hang's bound per emulated program. test_model_types, the longest, takes 110-160 s under qemu with
# the machine's two cores to itself and its neighbour, and 240-282 s in suites that shared the cores with
# other work (two fuzzers, a sanitizer build).
LIMIT=${ARM64_TEST_LIMIT:-480}
export ARM64_BUILD ARM64_SYSROOT="$SYSROOT" ARM64_TEST_LIMIT="$LIMIT"

# ---- one emulated program (called by this script itself, two at a time through xargs) ----
# test_arm64.sh --one LABEL CPU PROGRAM: runs PROGRAM under qemu into $ARM64_BUILD/PROGRAM.LABEL.out,
# with its exit status in .st and its wall time in seconds in .time.
if [ "$1" = "--one" ]; then
  label=$2; cpu=$3; prog=$4
  out="$ARM64_BUILD/$prog.$label"
  t0=$(date +%s)
  KILN_TEST_EMULATED=1 timeout "$LIMIT" qemu-aarch64 -cpu "$cpu" -L "$SYSROOT" "$ARM64_BUILD/tests/$prog" \
    >"$out.out" 2>&1
  echo $? >"$out.st"
  echo $(($(date +%s) - t0)) >"$out.time"
  exit 0
fi

ARM64_TESTS=${ARM64_TESTS:-$(MAKEFLAGS= make -s --no-print-directory arm64-list)}
if ! command -v "$ARM64_CC" >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
  echo "SKIP arm64: $ARM64_CC or qemu-aarch64 not installed (scripts/setup installs them)"
  exit 0
fi
for lib in pcre2-8 jansson sqlite3; do
  if [ ! -f "/usr/lib/aarch64-linux-gnu/lib$lib.a" ]; then
    echo "SKIP arm64: the arm64 build of lib$lib is not installed (scripts/setup installs it)"
    exit 0
  fi
done
mkdir -p "$ARM64_BUILD"
# A make of its own (not the jobserver of a calling make), two jobs as the machines have.
build() {
  MAKEFLAGS= make -s -j2 arm64-tests ARM64_CC="$ARM64_CC" ARM64_BUILD="$ARM64_BUILD" ARM64_TESTS="$ARM64_TESTS" "$@" \
    >"$ARM64_BUILD/build.log" 2>&1
}
t0=$(date +%s)
if ! build; then
  mv "$ARM64_BUILD/build.log" "$ARM64_BUILD/build-reduced.log"
  if ! build ARM64_SKIP_SRC=; then
    tail -20 "$ARM64_BUILD/build.log"
    echo "FAIL arm64 build (see $ARM64_BUILD/build.log)"
    exit 1
  fi
  echo "# arm64: the tests no longer link without the sources of ARM64_SKIP_SRC (Makefile; see" \
    "$ARM64_BUILD/build-reduced.log): built the whole library"
fi
echo "# arm64: build took $(($(date +%s) - t0)) s"

# The runs: LABEL CPU PROGRAM, one a line, in the order their output is printed.
runs=$(for t in $ARM64_TESTS; do echo "arm64 max $t"; done
  echo "arm64-a76 cortex-a76 test_kernels_neon"
  echo "arm64-a72 cortex-a72 test_kernels_neon")
echo "$runs" | while read -r label cpu prog; do rm -f "$ARM64_BUILD/$prog.$label.out" "$ARM64_BUILD/$prog.$label.st"; done
# Longest first (the model and kernel tests), so that the two slots finish together.
{
  echo "$runs" | grep -E ' (test_model_types|test_kernels_neon)$'
  echo "$runs" | grep -vE ' (test_model_types|test_kernels_neon)$'
} | xargs -P 2 -L 1 sh "$0" --one

echo "$runs" | while read -r label cpu prog; do
  out="$ARM64_BUILD/$prog.$label"
  sed -e "s/^\(PASS\|FAIL\|SKIP\) /\1 $label $prog: /" "$out.out" 2>/dev/null
  st=$(cat "$out.st" 2>/dev/null || echo "none")
  if [ "$st" != 0 ] && ! grep -q '^FAIL ' "$out.out" 2>/dev/null; then
    echo "FAIL $label $prog (exit status $st; 124: over the $LIMIT s limit)"
  fi
  echo "# $label $prog took $(cat "$out.time" 2>/dev/null) s"
done

# Which kernel sets ran where (test_kernels_neon prints the library's choice and runs the lesser sets).
for l in arm64 arm64-a76 arm64-a72; do
  echo "# $l: $(grep -h 'kernel set chosen' "$ARM64_BUILD/test_kernels_neon.$l.out" | sed 's/.*chosen: //');" \
    "sets tested: $(grep -h '^PASS test_\(neon\|dotprod\|i8mm\)_' "$ARM64_BUILD/test_kernels_neon.$l.out" |
      sed 's/^PASS test_\([a-z0-9]*\)_.*/\1/' | sort -u | tr '\n' ' ')"
done
