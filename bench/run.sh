#!/bin/sh
# bench/run.sh - kiln's reproducible CPU benchmark. Builds kiln, probes the machine's ceilings before
# each model (bench/probe.c: read bandwidth on 1 and 2 threads, int8 and fp32 peaks of one core), generates
# the synthetic presets with build/kiln-gen into bench/models/ (git-ignored; reused when present),
# runs `kiln bench` on each, and prints a markdown table with every pp/tg figure beside its
# ceiling as a fraction:
#   tg ceiling = read bandwidth (same thread count) / bytes of weights per token
#   pp ceiling = compute peak x threads / (2 x parameters) tokens/s (int8 peak for quantized
#                weights, fp32 peak for F32/F16/BF16)
# Usage: bench/run.sh [-r REPS] [-p PROMPT] [-n GEN] [-t THREADS] [MODEL...]
#   MODEL is a preset spec NAME:TYPE (default: the list below).
# KILN_KERNELS=avx2|avx2vnni|avx512 in the environment runs kiln with that kernel set (where the CPU has
# it) and takes the pp ceilings from that level's peaks (plain AVX2: vpmaddubsw; AVX-VNNI: 256-bit
# vpdpbusd; both with 256-bit FMA for float weights).
set -e
cd "$(dirname "$0")/.."
REPS=5 PP=512 TG=128 THREADS=1,2
while getopts r:p:n:t: o; do
  case $o in r) REPS=$OPTARG;; p) PP=$OPTARG;; n) TG=$OPTARG;; t) THREADS=$OPTARG;; *) exit 2;; esac
done
shift $((OPTIND - 1))
SPECS=${*:-"llama-3.2-1b:Q4_0 llama-3.2-1b:Q8_0 llama-3.2-1b:Q4_K qwen2.5-0.5b:Q8_0 stories15m:F32"}

make -s all >/dev/null
mkdir -p bench/models
# The machine is probed again before each model: on a shared host the bandwidth and the clock move
# within minutes, and a figure is compared with the ceiling measured beside it.
probe() {
  probe=$(build/bench/probe)
  echo "probe: $probe" >&2
  BW1=$(num read_gbs_1t) BW2=$(num read_gbs_2t) I8=$(num int8_gops_1core) F32=$(num fp32_gflops_1core)
  case ${KILN_KERNELS:-} in
    avx2) I8=$(num int8_avx2_gops_1core) F32=$(num fp32_avx2_gflops_1core);;
    avx2vnni) I8=$(num int8_avxvnni_gops_1core) F32=$(num fp32_avx2_gflops_1core);;
  esac
}
num() { echo "$probe" | sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"; }
probes=""

echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); kernel set ${KILN_KERNELS:-auto (the best)}; ceilings from the probe run before each model (listed below the table)"
echo
echo "| model | type | size MiB | threads | test | t/s (median) | min .. max | ceiling t/s | fraction |"
echo "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |"
for spec in $SPECS; do
  preset=${spec%%:*} type=${spec#*:}
  f="bench/models/$preset-$type.gguf"
  [ -f "$f" ] || build/kiln-gen --preset "$preset" --type "$type" --seed 1 -o "$f" >&2
  probe
  probes="$probes
- $preset $type: read $BW1 GB/s (1 thread) / $BW2 GB/s (2 threads), int8 peak $I8 GOP/s, fp32 peak $F32 GFLOP/s per core"
  build/kiln bench -m "$f" -p "$PP" -n "$TG" -t "$THREADS" -r "$REPS" --json >bench/models/.last.json
  size=$(stat -c %s "$f")
  params=$(build/kiln run -m "$f" -n 0 -v 2>&1 | sed -n 's/.*, \([0-9.]*\) M params.*/\1/p')
  while read -r line; do
    test=$(echo "$line" | sed -n 's/.*"test": "\([a-z0-9]*\)".*/\1/p')
    th=$(echo "$line" | sed -n 's/.*"threads": \([0-9]*\).*/\1/p')
    med=$(echo "$line" | sed -n 's/.*"tps_median": \([0-9.]*\).*/\1/p')
    lo=$(echo "$line" | sed -n 's/.*"tps_min": \([0-9.]*\).*/\1/p')
    hi=$(echo "$line" | sed -n 's/.*"tps_max": \([0-9.]*\).*/\1/p')
    case $test in
      tg*) bw=$BW1; [ "$th" -ge 2 ] && bw=$BW2
           ceil=$(awk -v b="$bw" -v s="$size" 'BEGIN { printf "%.1f", b * 1e9 / s }');;
      pp*) peak=$I8; case $type in F32|F16|BF16) peak=$F32;; esac
           ceil=$(awk -v i="$peak" -v t="$th" -v p="$params" 'BEGIN { printf "%.1f", i * 1e9 * t / (2 * p * 1e6) }');;
    esac
    frac=$(awk -v m="$med" -v c="$ceil" 'BEGIN { printf "%.0f%%", 100 * m / c }')
    echo "| $preset | $type | $(awk -v s="$size" 'BEGIN { printf "%.0f", s / 1048576 }') | $th | $test | $med | $lo .. $hi | $ceil | $frac |"
  done <bench/models/.last.json
done
echo
echo "Probes:$probes"
