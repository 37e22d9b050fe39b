#!/bin/sh
# bench/kv_model.sh - makes bench/models/kv-trained/, a small llama trained here with 64-element
# attention heads, for the KV-type quality benchmark (bench/kv.sh -m bench/models/kv-trained -c 256).
#   1. kiln serves stories260K (the test data's model) and bench/kv_corpus.py samples N stories from it
#      (deterministic: fixed seeds), as token ids;
#   2. bench/kv_train.py trains a dim-256, 4-layer model (4 query heads and 2 KV heads of 64, 3.4 M
#      parameters) on them with Debian's PyTorch, and writes a Hugging Face directory with stories260K's
#      tokenizer, which kiln loads as it is.
# It also samples bench/models/kv-eval.txt (64 more stories, other seeds), a larger evaluation text
# for `bench/kv.sh -f`. About 10 minutes of sampling and 20-25 of training on two Zen 5 cores.
# Needs Debian's python3-torch, python3-numpy and an optimized BLAS (libopenblas0-pthread): installed
# here with apt-get when missing (benchmark-only dependencies; the build and the tests do not use them).
# -d 128 -o bench/models/kv-trained-128 gives the 128-element-head model.
# Usage: bench/kv_model.sh [-n SAMPLES] [-s STEPS] [-d HEAD_DIM] [-o OUTDIR]
set -e
cd "$(dirname "$0")/.."
N=3400 STEPS=500 HD=64 OUT=bench/models/kv-trained
while getopts n:s:d:o: o; do
  case $o in n) N=$OPTARG;; s) STEPS=$OPTARG;; d) HD=$OPTARG;; o) OUT=$OPTARG;; *) exit 2;; esac
done
need=""
for p in python3-torch python3-numpy libopenblas0-pthread; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need="$need $p"
done
[ -z "$need" ] || { echo "installing$need" >&2; apt-get install -y $need >/dev/null; }
make -s build/kiln build/kiln-hf >/dev/null
M=${KILN_TEST_DATA:-../shared/data}/models/stories260K/stories260K.gguf
W=$(mktemp -d)
trap 'kill $SRV 2>/dev/null; rm -rf "$W"' EXIT
mkdir -p bench/models
IDS=bench/models/kv-corpus-$N.jsonl
PORT=${KV_PORT:-8397}
build/kiln serve -m "$M" --port "$PORT" --batch 32 -c 512 >"$W/serve.log" 2>&1 &
SRV=$!
i=0
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
  i=$((i + 1)); [ $i -lt 100 ] || { cat "$W/serve.log" >&2; exit 1; }; sleep 0.1
done
if [ ! -f "$IDS" ]; then
  python3 bench/kv_corpus.py "$PORT" "$N" "$IDS.tmp"
  mv "$IDS.tmp" "$IDS"
fi
# a second evaluation text, ten times the size of bench/kv_stories.txt: 64 samples of other seeds
if [ ! -f bench/models/kv-eval.txt ]; then
  python3 bench/kv_corpus.py "$PORT" 64 bench/models/kv-eval.tmp.txt 1000001
  mv bench/models/kv-eval.tmp.txt bench/models/kv-eval.txt
fi
# the benchmark's text as token ids, for the trainer's own perplexity figure (kiln's must match it)
python3 -c 'import json, sys; print(json.dumps({"content": open(sys.argv[1]).read()}))' bench/kv_stories.txt |
  curl -sf "http://127.0.0.1:$PORT/tokenize" -H 'Content-Type: application/json' --data-binary @- |
  python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["tokens"]))' >"$W/eval.json"
kill $SRV; SRV=
build/kiln-hf "$M" "$W/tok" --dtype f32 >/dev/null
/usr/bin/python3 bench/kv_train.py --tokens "$IDS" --tokenizer-dir "$W/tok" --out "$OUT" \
  --head-dim "$HD" --steps "$STEPS" --eval-ids "$W/eval.json"
echo "kiln on the written directory:"
build/kiln perplexity -m "$OUT" -f bench/kv_stories.txt -c 256 2>/dev/null | grep '^Final'
