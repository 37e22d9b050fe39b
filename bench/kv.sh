#!/bin/sh
# bench/kv.sh - the KV cache types side by side: quality and decode speed.
#   1. Perplexity (kiln perplexity, llama.cpp's method) of stories260K on bench/kv_stories.txt (short
#      stories written for this benchmark, not in the model's training data) per KV type, and the mean
#      KL divergence of each type's next-token distributions from f16's (--kl-save / --kl-base).
#   2. KV bytes per token per type (kiln serve --print-config) and decode speed at a 4k context
#      (kiln bench -d 4096) per type, the types interleaved round by round so the shared machine's
#      noise falls on all of them alike, on a synthetic llama (kiln-gen, git-ignored bench/models/).
# -m MODEL measures the quality of another model (bench/kv_model.sh trains one with 64-element heads:
# `bench/kv.sh -m bench/models/kv-trained -c 256 -Q`), -f TEXT on another text (that script's
# bench/models/kv-eval.txt); -Q skips the speed part.
# Usage: bench/kv.sh [-m MODEL] [-f TEXT] [-c CTX] [-r ROUNDS] [-d DEPTH] [-t THREADS] [-Q]
set -e
cd "$(dirname "$0")/.."
CTX=128 ROUNDS=3 DEPTH=4096 THREADS=1 M= QUALITY_ONLY= TEXT=bench/kv_stories.txt
while getopts m:f:c:r:d:t:Q o; do
  case $o in
    m) M=$OPTARG;; f) TEXT=$OPTARG;; c) CTX=$OPTARG;; r) ROUNDS=$OPTARG;; d) DEPTH=$OPTARG;; t) THREADS=$OPTARG;; Q) QUALITY_ONLY=1;;
    *) exit 2;;
  esac
done
make -s build/kiln build/kiln-gen >/dev/null
[ -n "$M" ] || M=${KILN_TEST_DATA:-../shared/data}/models/stories260K/stories260K.gguf
BASE=$(mktemp)
trap 'rm -f "$BASE"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(date -u +%Y-%m-%d)"
echo
echo "## Quality: $(basename "$M"), $TEXT, -c $CTX"
echo
echo "| KV type | rotation | PPL | vs f16 | mean KL from f16 | same top token |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
ppl() { build/kiln perplexity -m "$M" -f "$TEXT" -c "$CTX" -t "$THREADS" "$@" 2>/dev/null; }
f16=$(ppl --kl-save "$BASE" | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p')
echo "| f16 | off | $f16 | | 0 | 100% |"
for spec in bf16:auto q8_0:off q8_0:auto q4_0:off q4_0:auto tq4:auto tq3:auto; do
  t=${spec%%:*} r=${spec#*:}
  out=$(ppl --kv-type "$t" --kv-rotate "$r" --kl-base "$BASE")
  p=$(echo "$out" | sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p')
  kl=$(echo "$out" | sed -n 's/^Mean KL divergence from [^:]*: \([0-9.e-]*\).*/\1/p')
  top=$(echo "$out" | sed -n 's/.*same top token: \([0-9.]*%\).*/\1/p')
  rot=$r; [ "$r" = auto ] && case $t in q8_0|q4_0|tq4|tq3) rot=on;; *) rot=off;; esac
  echo "| $t | $rot | $p | $(awk "BEGIN{printf \"%+.3f%%\", ($p/$f16-1)*100}") | $kl | $top |"
done
[ -z "$QUALITY_ONLY" ] || exit 0
echo
S=bench/models/kv-llama-q4_0.gguf
mkdir -p bench/models
[ -f "$S" ] || build/kiln-gen --arch llama --vocab 512 --dim 512 --layers 4 --heads 8 --kv-heads 4 --head-dim 128 \
  --ffn 1376 --ctx 8192 --type Q4_0 --seed 1 -o "$S" >&2
echo "## Speed: $S (kiln-gen --arch llama --vocab 512 --dim 512 --layers 4 --heads 8 --kv-heads 4"
echo "## --head-dim 128 --ffn 1376 --ctx 8192 --type Q4_0 --seed 1), tg32 after $DEPTH tokens, $THREADS thread(s), $ROUNDS rounds"
echo
for t in f16 bf16 q8_0 q4_0 tq4 tq3; do
  printf '%s: %s\n' "$t" "$(build/kiln serve -m "$S" -c "$DEPTH" --kv-type "$t" --print-config 2>/dev/null | grep '^kv-type')"
done
echo
echo "| round | KV type | tg32 @ d$DEPTH t/s (median of 3) |"
echo "| ---: | --- | ---: |"
for r in $(seq "$ROUNDS"); do
  for t in f16 q8_0 q4_0 tq4 tq3 bf16; do
    v=$(build/kiln bench -m "$S" -p 0 -n 32 -d "$DEPTH" -r 3 -t "$THREADS" --kv-type "$t" --json 2>/dev/null |
      sed -n 's/.*"tps_median": \([0-9.]*\).*/\1/p')
    echo "| $r | $t | $v |"
  done
done
