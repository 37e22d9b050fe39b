#!/bin/sh
# bench/prefix.sh - the prefix cache benchmark: time to first token of a request with a long
# shared prefix, cold, on a RAM hit, and on an SSD hit after a restart of the server (also with the
# cache files dropped from the page cache), on a synthetic preset generated into the git-ignored
# bench/models/ as bench/run.sh does. The measuring is bench/prefix.mjs (it starts and restarts
# `kiln serve --ssd-cache` itself); targets: RAM hit <= 5% of cold, SSD hit <= 10% of cold.
# Usage: bench/prefix.sh [-m PRESET:TYPE] [-p PREFIX_TOKENS] [-r ROUNDS] [-t THREADS]
set -e
cd "$(dirname "$0")/.."
SPEC=llama-3.2-1b:Q4_0 PREFIX=2000 ROUNDS=3 THREADS=""
while getopts m:p:r:t: o; do
  case $o in m) SPEC=$OPTARG;; p) PREFIX=$OPTARG;; r) ROUNDS=$OPTARG;; t) THREADS=$OPTARG;; *) exit 2;; esac
done
make -s build/kiln build/kiln-gen >/dev/null
mkdir -p bench/models
preset=${SPEC%%:*} type=${SPEC#*:}
f="bench/models/$preset-$type.gguf"
[ -f "$f" ] || build/kiln-gen --preset "$preset" --type "$type" --seed 1 -o "$f" >&2
echo "Model: $preset $type; prefix $PREFIX tokens + 8 new; $ROUNDS rounds; $(date -u +%Y-%m-%d)"
echo
node bench/prefix.mjs build/kiln "$f" --prefix "$PREFIX" --rounds "$ROUNDS" ${THREADS:+--threads "$THREADS"}
