#!/bin/sh
# Runs every fuzzing harness built in $FUZZ_BUILD (default build-fuzz) for SECONDS (first argument,
# default 30) from its corpus tests/fuzz/corpus/<name>/, FUZZ_JOBS harnesses at a time (default 1),
# or only the harnesses named after SECONDS. New inputs go to a scratch folder (the corpus in the
# tree is never written); an input that crashes, leaks, trips a sanitizer or runs past FUZZ_TIMEOUT
# seconds (default 25: generous, as the machines running the suite are often loaded) is saved
# as $FUZZ_BUILD/artifacts/<name>-crash-... (or leak-, timeout-, oom-). Prints one line per harness:
# "PASS fuzz <name>: R runs in S s", "FAIL fuzz <name>: ..." (with the end of its log) or
# "SKIP fuzz <name>: reason" (its test data is missing); exits non-zero when one failed.
# `make fuzz-smoke` runs it for 30 s per harness; `make test` for a few seconds (test_fuzz_smoke.sh).
secs=${1:-30}
[ $# -gt 0 ] && shift
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
jobs=${FUZZ_JOBS:-1}
limit=${FUZZ_TIMEOUT:-25}
data=${KILN_TEST_DATA:-../shared/data}
corpus=tests/fuzz/corpus
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$FUZZ_BUILD/artifacts"

names="$*"
if [ -z "$names" ]; then
  for b in "$FUZZ_BUILD"/fuzz_*; do
    [ -x "$b" ] && names="$names ${b##*/fuzz_}"
  done
fi
if [ -z "$names" ]; then
  echo "FAIL fuzz: no harness in $FUZZ_BUILD (run make fuzz)"
  exit 1
fi

# Seeds from the test data that are not copied into the tree: the real chat templates.
extra_seeds() {
  case $1 in
  jinja) for d in "$data"/chat-templates/*/; do [ -d "$d" ] && echo "$d"; done ;;
  esac
}

run_one() {
  name=$1
  log="$scratch/$name.log"
  mkdir -p "$scratch/$name" "$corpus/$name"
  # shellcheck disable=SC2046
  timeout -k 10 $((secs + 120)) "$FUZZ_BUILD/fuzz_$name" -max_total_time="$secs" -timeout="$limit" -rss_limit_mb=3072 \
    -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/artifacts/$name-" \
    "$scratch/$name" "$corpus/$name" $(extra_seeds "$name") >"$log" 2>&1
  st=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if grep -q '^FUZZ-SKIP ' "$log"; then
    echo "SKIP fuzz $name: $(sed -n 's/^FUZZ-SKIP //p' "$log" | head -n 1)"
  elif [ $st -eq 0 ] && [ -n "$runs" ]; then
    echo "PASS fuzz $name: $runs runs in $secs s"
  else
    echo "FAIL fuzz $name: exit status $st after ${runs:-?} runs (inputs in $FUZZ_BUILD/artifacts/)"
    grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==|^fuzz:|Test unit written' "$log" | head -n 20 | sed 's/^/    /'
    tail -n 5 "$log" | sed 's/^/    /'
  fi
}

out="$scratch/results"
: >"$out"
set -- $names
while [ $# -gt 0 ]; do
  batch=""
  i=0
  while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
    batch="$batch $1"
    shift
    i=$((i + 1))
  done
  for n in $batch; do
    run_one "$n" >"$scratch/$n.result" &
  done
  wait
  for n in $batch; do
    cat "$scratch/$n.result"
    cat "$scratch/$n.result" >>"$out"
  done
done
! grep -q '^FAIL ' "$out"
