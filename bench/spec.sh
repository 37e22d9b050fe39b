#!/bin/sh
# bench/spec.sh - the speculative decoding benchmark: generation tokens/s without speculation and
# with a method, side by side in one interleaved run (each repetition runs both, alternating which
# goes first, so both see the same load of a shared machine), on synthetic presets generated into
# the git-ignored bench/models/ as bench/run.sh does:
#   1. ngram at batch 1 on a copy task (goal >= 2x);
#   2. ngram at batch 1 on text that does not repeat (goal >= 0.97x);
#   3. draft at batch 1: the F16 model with its own Q4_0 copy as the draft (goal >= 1.5x);
#   4. ngram and draft at batch 8 (aggregate tokens/s of 8 rows, the short prompt; goal: not lower),
#      the draft also with 16 generated tokens (where its prompt work weighs most).
# A model of random weights does not copy its prompt: at the default weight scale its greedy output
# wanders (the non-repeating case, 2.), while with --scale 0.2 its output settles into repeating
# itself, which stands in for output that repeats its context (1., 3., 4.; it also makes the F16
# model and its Q4_0 copy agree, as a trained model and its quantized copy do).
# Batch 1 is `kiln bench --spec` (its gen test), batch 8 build/bench/spec_batch (which also prints each
# engine's CPU ms per generated token: the work, apart from the load). The load average is
# printed between the runs. On a shared machine, -k ROUNDS runs the whole set ROUNDS times (each
# row's ratio comes from one run; compare rounds), and -s TESTS picks tests (a comma list of
# ngram1,plain1,draft1,ngram8,draft8,draft8s; default all).
# Usage: bench/spec.sh [-m PRESET] [-n GEN] [-r REPS] [-t THREADS] [-k ROUNDS] [-s TESTS]
set -e
cd "$(dirname "$0")/.."
PRESET=llama-3.2-1b GEN=64 REPS=3 THREADS=2 ROUNDS=1 TESTS=ngram1,plain1,draft1,ngram8,draft8,draft8s
while getopts m:n:r:t:k:s: o; do
  case $o in
    m) PRESET=$OPTARG;; n) GEN=$OPTARG;; r) REPS=$OPTARG;; t) THREADS=$OPTARG;; k) ROUNDS=$OPTARG;; s) TESTS=$OPTARG;;
    *) exit 2;;
  esac
done
want() { case ",$TESTS," in *",$1,"*) return 0;; *) return 1;; esac; }
make -s build/kiln build/kiln-gen build/bench/spec_batch >/dev/null
mkdir -p bench/models
gen() {
  f="bench/models/$PRESET$2-$1.gguf"
  [ -f "$f" ] || build/kiln-gen --preset "$PRESET" --type "$1" --seed 1 ${2:+--scale ${2#-s}} -o "$f" >&2
  echo "$f"
}
T=$(gen F16 -s0.2) D=$(gen Q4_0 -s0.2)
if want plain1; then W=$(gen F16); fi
copy=bench/models/spec-copy.txt plain=bench/models/spec-plain.txt
para="The river keeps its own counsel in the dry months, when the stones along the bank lie bare and \
the herons stand in the shallows waiting for whatever the current brings them. Farmers walk down \
at dusk to look at the water and talk about the rain that did not come."
printf 'Repeat this text exactly, with the word "river" changed to "stream":\n\n%s\n\n%s\n\n%s\n\n' \
  "$para" "$para" "$para" > "$copy"
printf '%s\n' "Quarterly figures: north 41, south 17; the committee adjourned before noon. Vega, Orion \
and Lyra were bright; somebody mentioned forty-two lanterns, a broken violin, seven ledgers, and \
the ferry timetable for Tuesday." > "$plain"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| model | threads | test | none | method | acceptance | speedup |"
echo "| --- | ---: | --- | ---: | ---: | --- | ---: |"
B="build/kiln bench -p 0 -n $GEN -r $REPS -t $THREADS"
L() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }
S="build/bench/spec_batch $T -R 8 -r $REPS -t $THREADS -f $plain"
round=1
while [ "$round" -le "$ROUNDS" ]; do
  [ "$ROUNDS" -gt 1 ] && echo "round $round of $ROUNDS"
  if want ngram1; then $B -m "$T" --spec ngram -f "$copy" | grep gen; L; fi
  if want plain1; then $B -m "$W" --spec ngram -f "$plain" | grep gen; L; fi
  if want draft1; then $B -m "$T" --spec draft --draft-model "$D" -f "$copy" | grep gen; L; fi
  if want ngram8; then $S --spec ngram -n "$GEN"; L; fi
  if want draft8; then $S --spec draft --draft-model "$D" -n "$GEN"; L; fi
  if want draft8s; then $S --spec draft --draft-model "$D" -n 16; L; fi
  round=$((round + 1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
