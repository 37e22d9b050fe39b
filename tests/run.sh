#!/bin/sh
# Runs every unit-test program in $BUILD/tests and every CLI test script in tests/cli, then prints
# the totals. Each program prints PASS/FAIL/SKIP lines; a program that exits non-zero without
# printing a FAIL line (a crash) counts as one failure. The last line reads
# "N passed, N failed, N skipped"; the exit status is non-zero when anything failed. Each program's
# wall time follows its output ("# took N s"), and the slowest are listed before the totals, so the
# suite's time budget can be watched. A program still running after KILN_TEST_TIMEOUT seconds (600
# by default) is killed and counts as a failure, so one hang cannot take the whole suite's time.
# The unit-test programs run KILN_TEST_JOBS at a time (2 by default, as many as the machines have
# cores; they are single-threaded for the most part and keep their files in directories of their
# own), their output printed afterwards in name order; the CLI scripts, which start servers and
# time their answers, run one at a time.
BUILD=${BUILD:-build}
export BUILD

# ---- one unit-test program (called by this script itself, through xargs) ----
# run.sh --one DIR PROGRAM: runs PROGRAM into DIR/NAME.out, its exit status in .st, its seconds in .time.
if [ "$1" = "--one" ]; then
  out="$2/$(basename "$3")"
  t0=$(date +%s)
  timeout -k 10 "${KILN_TEST_TIMEOUT:-600}" "$3" >"$out.out" 2>&1
  echo $? >"$out.st"
  echo $(($(date +%s) - t0)) >"$out.time"
  exit 0
fi
log=$(mktemp)
one=$(mktemp)
times=$(mktemp)
units=$(mktemp -d)
trap 'rm -rf "$log" "$one" "$times" "$units"' EXIT
# report NAME STATUS SECONDS: prints the output in $one of the program NAME that ended with STATUS
# after SECONDS, and adds it to the totals.
report() {
  echo "== $1"
  [ "$2" -eq 124 ] && echo "FAIL $1 (killed after ${KILN_TEST_TIMEOUT:-600} s: hung or far too slow)" >>"$one"
  cat "$one"
  echo "$3 $1" >>"$times"
  echo "# took $3 s"
  cat "$one" >>"$log"
  if [ "$2" -ne 0 ] && ! grep -q '^FAIL ' "$one"; then
    echo "FAIL $1 (exit status $2)" | tee -a "$log"
  fi
}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] && printf '%s\n' "$t"
done | xargs -P "${KILN_TEST_JOBS:-2}" -I{} sh "$0" --one "$units" {}
for t in "$BUILD"/tests/test_*; do
  [ -x "$t" ] || continue
  u="$units/$(basename "$t")"
  if [ -f "$u.st" ]; then
    cp "$u.out" "$one"
    report "$t" "$(cat "$u.st")" "$(cat "$u.time")"
  else
    echo "FAIL $t (did not run)" >"$one"
    report "$t" 1 0
  fi
done
for t in tests/cli/*.sh; do
  [ -f "$t" ] || continue
  t0=$(date +%s)
  timeout -k 10 "${KILN_TEST_TIMEOUT:-600}" sh "$t" >"$one" 2>&1
  st=$?
  report "sh $t" $st $(($(date +%s) - t0))
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
