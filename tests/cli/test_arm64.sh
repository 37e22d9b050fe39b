#!/bin/sh
# test_arm64.sh - the ARM64 part of the suite: cross-builds the unit tests named in ARM64_TESTS (the
# kernel and model tests; Makefile) for aarch64 into $ARM64_BUILD and runs them under qemu-user.
#   qemu -cpu max         every test: the NEON set with dotprod and i8mm, bit-identical to the
#                         reference (the NEON kernel test also checks the neon and neon+dotprod sets);
#   qemu -cpu cortex-a76  the NEON kernel test again on a CPU with dotprod but no i8mm: the library
#                         must choose neon+dotprod;
#   qemu -cpu cortex-a72  and on one with neither (Raspberry Pi 4 class): the plain neon set.
# Each line a test program prints is relabelled "arm64 <program>: ..." ("arm64-a76 ...", ...), so the
# totals of tests/run.sh count them apart from the native ones; the last lines name the kernel sets
# that ran. Skipped (one SKIP line) when the cross compiler or qemu-aarch64 is missing.
ARM64_CC=${ARM64_CC:-aarch64-linux-gnu-gcc}
ARM64_BUILD=${ARM64_BUILD:-build-arm64}
ARM64_TESTS=${ARM64_TESTS:-$(MAKEFLAGS= make -s --no-print-directory arm64-list)}
SYSROOT=${ARM64_SYSROOT:-/usr/aarch64-linux-gnu}
LIMIT=${ARM64_TEST_LIMIT:-240}

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
if ! MAKEFLAGS= make -s -j2 arm64-tests ARM64_CC="$ARM64_CC" ARM64_BUILD="$ARM64_BUILD" ARM64_TESTS="$ARM64_TESTS" \
    >"$ARM64_BUILD/build.log" 2>&1; then
  tail -20 "$ARM64_BUILD/build.log"
  echo "FAIL arm64 build (see $ARM64_BUILD/build.log)"
  exit 1
fi

# run LABEL CPU PROGRAM: runs one test program under qemu, relabelling its lines.
run() {
  label=$1; cpu=$2; prog=$3
  out="$ARM64_BUILD/$prog.$label.out"
  timeout "$LIMIT" qemu-aarch64 -cpu "$cpu" -L "$SYSROOT" "$ARM64_BUILD/tests/$prog" >"$out" 2>&1
  st=$?
  sed -e "s/^\(PASS\|FAIL\|SKIP\) /\1 $label $prog: /" "$out"
  if [ $st -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
    echo "FAIL $label $prog (exit status $st; 124: over the $LIMIT s limit)"
  fi
}

for t in $ARM64_TESTS; do
  run arm64 max "$t"
done
run arm64-a76 cortex-a76 test_kernels_neon
run arm64-a72 cortex-a72 test_kernels_neon

# Which kernel sets ran where (test_kernels_neon prints the library's choice and runs the lesser sets).
for l in arm64 arm64-a76 arm64-a72; do
  echo "# $l: $(grep -h 'kernel set chosen' "$ARM64_BUILD/test_kernels_neon.$l.out" | sed 's/.*chosen: //');" \
    "sets tested: $(grep -h '^PASS test_\(neon\|dotprod\|i8mm\)_' "$ARM64_BUILD/test_kernels_neon.$l.out" |
      sed 's/^PASS test_\([a-z0-9]*\)_.*/\1/' | sort -u | tr '\n' ' ')"
done
