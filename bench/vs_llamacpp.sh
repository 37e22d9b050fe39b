#!/bin/sh
# bench/vs_llamacpp.sh - kiln side by side with llama.cpp's llama-bench on the same GGUF files and
# thread counts. The synthetic presets are written by build/kiln-gen into a model directory (reused
# when present); then, round after round, every (model, thread count) is measured by kiln with each
# kernel set asked for and by llama-bench, one after the other, so that each round's figures see the
# same machine load. A ratio is kiln / llama.cpp within one round; the table gives the median over
# the rounds of each figure and of each ratio, and the load average at the start of every round.
# Usage: bench/vs_llamacpp.sh [-r ROUNDS] [-k REPS] [-p PROMPT] [-n GEN] [-t THREADS] [-s SETS]
#                             [-d DIR] [-F] LLAMA_BENCH [MODEL...]
#   LLAMA_BENCH  path of a llama-bench binary; when it is missing or not executable the script says
#                so and exits 0 (nothing is measured).
#   MODEL        a preset spec NAME:TYPE as in bench/run.sh (default: the 1B presets in Q4_0, Q8_0
#                and Q4_K, and the stories15M shape in Q8_0 and F32).
#   -s SETS      kiln kernel sets, comma-separated: auto (the best the CPU has) or a KILN_KERNELS
#                value (ref, avx2, avx2vnni, avx512); default avx2,auto.
#   -d DIR       model directory (default bench/models, git-ignored).
#   -F           write missing models with kiln-gen --fast (rows repeated: real-shaped files in minutes,
#                the same speed; the presets' full generation takes an hour on a loaded 2-core host).
#   -r ROUNDS (default 3), -k REPS: repetitions of each test within one invocation (default 3),
#   -p / -n: prompt and generated tokens (default 512 and 128), -t: thread counts (default 1,2).
#   -T LOG       no measuring: the table of the figures in LOG, the stderr of an earlier run (one that
#                was stopped before its table, too: its finished rounds).
# The raw figures of every round go to stderr as they come; the markdown table to stdout.
set -e
cd "$(dirname "$0")/.."
ROUNDS=3 REPS=3 PP=512 TG=128 THREADS=1,2 SETS=avx2,auto DIR=bench/models FAST="" LOG=""
while getopts r:k:p:n:t:s:d:FT: o; do
  case $o in
    r) ROUNDS=$OPTARG;; k) REPS=$OPTARG;; p) PP=$OPTARG;; n) TG=$OPTARG;; t) THREADS=$OPTARG;;
    s) SETS=$OPTARG;; d) DIR=$OPTARG;; F) FAST=--fast;; T) LOG=$OPTARG;; *) exit 2;;
  esac
done
shift $((OPTIND - 1))
# The table of recorded figures (MODEL THREADS TEST ENGINE ROUND TOKENS_PER_S lines) of file $1.
table() {
  awk -v sets="$SETS" '
  function median(s,   n, a, i, j, x) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
  }
  { key = $1 " " $2 " " $3; v[key, $4, $5] = $6; fig[key, $4] = fig[key, $4] " " $6
    if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
    if ($5 > nr) nr = $5 }
  END {
    ns = split(sets, S, ",")
    printf "| model | threads | test | llama.cpp t/s |"
    for (i = 1; i <= ns; i++) printf " kiln %s t/s | %s / llama.cpp |", S[i], S[i]
    printf "\n| --- | ---: | --- | ---: |"
    for (i = 1; i <= ns; i++) printf " ---: | ---: |"
    printf "\n"
    for (k = 1; k <= nk; k++) {
      key = order[k]; split(key, p, " ")
      l = median(fig[key, "llama.cpp"])
      printf "| %s | %s | %s | %s |", p[1], p[2], p[3], (l > 0 ? sprintf("%.1f", l) : "-")
      for (i = 1; i <= ns; i++) {
        e = "kiln-" S[i]; r = ""
        for (rd = 1; rd <= nr; rd++)
          if ((key, e, rd) in v && (key, "llama.cpp", rd) in v && v[key, "llama.cpp", rd] > 0)
            r = r " " v[key, e, rd] / v[key, "llama.cpp", rd]
        f = median(fig[key, e])
        printf " %s | %s |", (f > 0 ? sprintf("%.1f", f) : "-"), (r != "" ? sprintf("%.2fx", median(r)) : "-")
      }
      printf "\n"
    }
  }' "$1"
}

if [ -n "$LOG" ]; then
  grep -v '^round' "$LOG" >"${TMPDIR:-/tmp}/vs_llamacpp.$$"
  table "${TMPDIR:-/tmp}/vs_llamacpp.$$"
  rm -f "${TMPDIR:-/tmp}/vs_llamacpp.$$"
  exit 0
fi
LB=${1:-}
if [ -z "$LB" ] || [ ! -x "$LB" ]; then
  echo "vs_llamacpp: skipped: no llama-bench binary given or '$LB' is not executable" >&2
  echo "usage: bench/vs_llamacpp.sh [-r ROUNDS] [-k REPS] [-p N] [-n N] [-t 1,2] [-s avx2,auto] [-d DIR] LLAMA_BENCH [MODEL...]" >&2
  exit 0
fi
shift
SPECS=${*:-"llama-3.2-1b:Q4_0 llama-3.2-1b:Q8_0 llama-3.2-1b:Q4_K stories15m:Q8_0 stories15m:F32"}

if [ ! -x build/kiln ] || [ ! -x build/kiln-gen ]; then make -s build/kiln build/kiln-gen >/dev/null; fi
mkdir -p "$DIR"
for spec in $SPECS; do
  f="$DIR/${spec%%:*}-${spec#*:}.gguf"
  # shellcheck disable=SC2086
  [ -f "$f" ] || build/kiln-gen --preset "${spec%%:*}" --type "${spec#*:}" --seed 1 $FAST -o "$f" >&2
done

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
threads=$(echo "$THREADS" | tr , ' ') sets=$(echo "$SETS" | tr , ' ')
loads=""
# One line per figure: MODEL THREADS TEST ENGINE ROUND TOKENS_PER_S
for round in $(seq 1 "$ROUNDS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  loads="$loads $load"
  echo "round $round: load average $load" >&2
  for spec in $SPECS; do
    f="$DIR/${spec%%:*}-${spec#*:}.gguf"
    for t in $threads; do
      for set in $sets; do
        if [ "$set" = auto ]; then kk=""; else kk=$set; fi
        KILN_KERNELS=$kk build/kiln bench -m "$f" -p "$PP" -n "$TG" -t "$t" -r "$REPS" --json 2>/dev/null |
          sed -n 's/.*"test": "\([a-z0-9]*\)".*"tps_median": \([0-9.]*\).*/\1 \2/p' |
          while read -r test tps; do echo "$spec $t $test kiln-$set $round $tps"; done | tee -a "$raw" >&2
      done
      # llama-bench: the median of its samples (as kiln bench reports)
      "$LB" -m "$f" -p "$PP" -n "$TG" -t "$t" -r "$REPS" -o jsonl 2>/dev/null |
        sed -n 's/.*"n_prompt": \([0-9]*\), "n_gen": \([0-9]*\),.*"samples_ts": \[\([^]]*\)\].*/\1 \2 \3/p' |
        while read -r np ng samples; do
          if [ "$np" -gt 0 ]; then test=pp$np; else test=tg$ng; fi
          med=$(echo "$samples" | tr -d ' ' | tr , '\n' | sort -g |
            awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
          echo "$spec $t $test llama.cpp $round $med"
        done | tee -a "$raw" >&2
    done
  done
done

echo "kiln side by side with llama.cpp: $(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "llama-bench: $LB; kiln sets: $SETS; $ROUNDS rounds of $REPS repetitions; load average at each round's start:$loads"
echo
table "$raw"
