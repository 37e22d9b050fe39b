#!/bin/sh
# bench/score.sh - what scoring a text costs: `/v1/completions` with `echo` and `logprobs` and
# `max_tokens: 0` (every prompt token's logprob: how evaluation harnesses score a text) against the
# plain prefill of the same prompt (`max_tokens: 0`, no echo), alternating, on `kiln serve` over a
# synthetic preset (bench/lib.sh: generated into the git-ignored bench/models/), with the
# prefix cache off so that every request computes its whole prompt. Prints the median seconds of
# each and the ratio.
# Usage: bench/score.sh [-m PRESET:TYPE] [-t THREADS] [-n PROMPT_TOKENS (about)] [-r ROUNDS] [-l LOGPROBS]
set -e
cd "$(dirname "$0")/.."
SPEC=llama-3.2-1b:Q4_0 THREADS="" N=512 ROUNDS=5 LP=1
while getopts m:t:n:r:l: o; do
  case $o in m) SPEC=$OPTARG;; t) THREADS=$OPTARG;; n) N=$OPTARG;; r) ROUNDS=$OPTARG;; l) LP=$OPTARG;; *) exit 2;; esac
done
. bench/lib.sh
make -s all >/dev/null
bench_model "$SPEC"
log=$(mktemp) body=$(mktemp) times=$(mktemp)
trap 'kill $pid 2>/dev/null; rm -f "$log" "$body" "$times"' EXIT
# shellcheck disable=SC2086
bench_serve --prompt-cache 0 -c $((N + 256)) ${THREADS:+-t $THREADS}
# A prompt of about N tokens of ids (the synthetic vocabulary spells no text), BOS first.
ids=$(awk -v n="$N" 'BEGIN { s = "1"; for (i = 1; i < n; i++) s = s "," (100 + (i * 7919) % 20000); print s }')
ask() { # ask NAME JSON-EXTRA: one request, its seconds appended to $times as "NAME SECONDS"
  printf '{"prompt":[%s],"max_tokens":0%s}' "$ids" "$2" >"$body"
  t=$(curl -s -o /dev/null -w '%{time_total}' -H 'Content-Type: application/json' --data-binary @"$body" \
    "http://127.0.0.1:$port/v1/completions")
  echo "$1 $t" >>"$times"
}
ask warm ''
for _ in $(seq 1 "$ROUNDS"); do
  ask prefill ''
  ask score ",\"echo\":true,\"logprobs\":$LP"
done
med() { grep "^$1 " "$times" | awk '{print $2}' | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
p=$(med prefill) s=$(med score)
echo "Model: $preset $type, $N prompt tokens, logprobs $LP, ${THREADS:-auto} threads, $ROUNDS rounds; $(date -u +%Y-%m-%d)"
echo "prefill (max_tokens 0): $p s, $(awk -v n="$N" -v t="$p" 'BEGIN { printf "%.1f", n / t }') tok/s"
echo "score (echo + logprobs): $s s, $(awk -v n="$N" -v t="$s" 'BEGIN { printf "%.1f", n / t }') tok/s"
echo "score / prefill time: $(awk -v a="$s" -v b="$p" 'BEGIN { printf "%.2fx", a / b }')"
