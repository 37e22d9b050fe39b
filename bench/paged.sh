#!/bin/sh
# bench/paged.sh - paged KV against one contiguous cache per row (--kv-paging on/off): the memory of
# 8 rows sharing a 2,000-token prompt, and decode speed at a 4k context, both engines in one run
# (build/bench/paged, which alternates them), on the synthetic llama of bench/kv.sh (kiln-gen,
# git-ignored bench/models/).
# Usage: bench/paged.sh [-r REPS] [-n TOKENS] [-t THREADS]
set -e
cd "$(dirname "$0")/.."
REPS=5 N=64 THREADS=1
while getopts r:n:t: o; do
  case $o in r) REPS=$OPTARG;; n) N=$OPTARG;; t) THREADS=$OPTARG;; *) exit 2;; esac
done
make -s build/kiln-gen build/bench/paged >/dev/null
S=bench/models/kv-llama-q4_0.gguf
mkdir -p bench/models
[ -f "$S" ] || build/kiln-gen --arch llama --vocab 512 --dim 512 --layers 4 --heads 8 --kv-heads 4 --head-dim 128 \
  --ffn 1376 --ctx 8192 --type Q4_0 --seed 1 -o "$S" >&2
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $(date -u +%Y-%m-%d); model $S"
echo
build/bench/paged "$S" -P 2000 -D 4096 -n "$N" -r "$REPS" -t "$THREADS"
