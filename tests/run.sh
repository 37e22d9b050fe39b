#!/bin/sh
# Runs every unit-test program in $BUILD/tests and every CLI test script in tests/cli, then prints
# the totals. Each program prints PASS/FAIL/SKIP lines; a program that exits non-zero without
# printing a FAIL line (a crash) counts as one failure. The last line reads
# "N passed, N failed, N skipped"; the exit status is non-zero when anything failed. Each program's
# wall time follows its output ("# took N s"), and the slowest are listed before the totals, so the
# suite's time budget can be watched. A program still running after KILN_TEST_TIMEOUT seconds (600
# by default) is killed and counts as a failure, so one hang cannot take the whole suite's time.
BUILD=${BUILD:-build}
export BUILD
log=$(mktemp)
one=$(mktemp)
times=$(mktemp)
trap 'rm -f "$log" "$one" "$times"' EXIT
run_one() {
  echo "== $*"
  t0=$(date +%s)
  timeout -k 10 "${KILN_TEST_TIMEOUT:-600}" "$@" >"$one" 2>&1
  st=$?
  [ $st -eq 124 ] && echo "FAIL $* (killed after ${KILN_TEST_TIMEOUT:-600} s: hung or far too slow)" >>"$one"
  cat "$one"
  dt=$(($(date +%s) - t0))
  echo "$dt $*" >>"$times"
  echo "# took $dt s"
  cat "$one" >>"$log"
  if [ $st -ne 0 ] && ! grep -q '^FAIL ' "$one"; then
    echo "FAIL $* (exit status $st)" | tee -a "$log"
  fi
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] && run_one "$t"
done
for t in tests/cli/*.sh; do
  [ -f "$t" ] && run_one sh "$t"
done
pass=$(grep -c '^PASS ' "$log")
fail=$(grep -c '^FAIL ' "$log")
skip=$(grep -c '^SKIP ' "$log")
echo
grep '^FAIL ' "$log" | sed 's/^/  /'
echo "slowest (seconds): $(sort -rn "$times" | head -8 | sed 's|^\([0-9]*\) .*[/ ]\([^/ ]*\)$|\2 \1|' | tr '\n' ',' | sed 's/,$//;s/,/, /g')"
# Which SIMD kernel sets the kernel tests ran ("KSET name: ..." lines) and which this CPU lacks, so a
# green run on one machine does not hide an untested set.
sets=$(sed -n 's/^KSET \([a-z0-9]*\):.*/\1/p' "$log" | sort -u | tr '\n' ' ')
nosets=$(grep -v '^SKIP arm64' "$log" | sed -n 's/^SKIP .*cannot run the \([a-z0-9]*\) kernel set.*/\1/p' | sort -u |
  tr '\n' ' ')
# the ARM64 sets tested under qemu (tests/cli/test_arm64.sh), when the cross tools are installed
armsets=$(sed -n 's/^PASS arm64[a-z0-9-]* test_kernels_neon: test_\(neon\|dotprod\|i8mm\)_.*/\1/p' "$log" | sort -u |
  tr '\n' ' ')
echo "kernel sets tested: ${sets:-none}; not on this CPU: ${nosets:-none}; ARM64 under qemu: ${armsets:-none}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
