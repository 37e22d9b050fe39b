#!/bin/sh
# bench/serve.sh - the serving benchmark: starts `kiln serve` on a synthetic preset (generated into
# the git-ignored bench/models/ as bench/run.sh does), runs bench/load.mjs against it (aggregate
# tok/s and TTFT at 1, 2, 4, 8, 16 concurrent streams, and a request joining 7 running streams),
# and prints `kiln bench`'s single-stream tg figure for the same model beside it.
# Usage: bench/serve.sh [-m PRESET:TYPE] [-b BATCH] [-t THREADS] [-- load.mjs options]
set -e
cd "$(dirname "$0")/.."
SPEC=llama-3.2-1b:Q4_0 BATCH=8 THREADS=""
while getopts m:b:t: o; do
  case $o in m) SPEC=$OPTARG;; b) BATCH=$OPTARG;; t) THREADS=$OPTARG;; *) exit 2;; esac
done
shift $((OPTIND - 1))
. bench/lib.sh
make -s all >/dev/null
bench_model "$SPEC"
tflag=""
[ -n "$THREADS" ] && tflag="-t $THREADS"
log=$(mktemp)
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
# shellcheck disable=SC2086
bench_serve --batch "$BATCH" -c 1024 $tflag
echo "Model: $preset $type, kiln serve --batch $BATCH $tflag; $(date -u +%Y-%m-%d)"
echo
node bench/load.mjs "http://127.0.0.1:$port" "$@"
kill -TERM $pid
wait $pid || true
echo
# shellcheck disable=SC2086
build/kiln bench -m "$f" -p 0 -n 128 -r 3 ${THREADS:+-t $THREADS} | tail -n 1
