# test_embed.sh - embeddings from the command line and over HTTP, on tiny embedding models written by
# kiln-gen (bert; nomic-bert and a Qwen3-Embedding-shaped qwen3 for `kiln embed`): `kiln embed -p`,
# lines of standard input as one batch (the same vectors as one by one), --plain, --dimensions, a
# generation model refused, an over-long text refused or truncated; then the client cases of
# tests/client/embeddings.test.mjs (the `openai` and `ollama` npm clients), skipped without node,
# npm or the registry.
kiln_override=${KILN:-}
. tests/cli/lib.sh
[ -n "$kiln_override" ] && KILN=$kiln_override
GEN="$BUILD/kiln-gen"
C=tests/client
for p in tiny-bert tiny-nomic-bert tiny-qwen3-embedding tiny-qwen3; do
  if ! "$GEN" --preset "$p" -o "$TMP/$p.gguf" >"$TMP/gen.log" 2>&1; then
    fail "kiln_gen_$p" "$(tail -n 2 "$TMP/gen.log")"; exit 0
  fi
done
B="$TMP/tiny-bert.gguf"

expect_exit embed_prompt 0 "$KILN" embed -m "$B" -p "the cat sat on the mat"
if [ "$(tr -cd ',' <"$TMP/out" | wc -c)" -eq 63 ] && head -c 1 "$TMP/out" | grep -q '\['; then pass embed_prompt_json
else fail embed_prompt_json "not one JSON array of 64 numbers: $(head -c 200 "$TMP/out")"; fi
cp "$TMP/out" "$TMP/one.json"

# lines of standard input, one batch: the first line's vector is the one -p gives
printf 'the cat sat on the mat\n\na brave little bird\n' | "$KILN" embed -m "$B" >"$TMP/batch" 2>"$TMP/err"
if [ "$(wc -l <"$TMP/batch")" -eq 2 ] && [ "$(head -n 1 "$TMP/batch")" = "$(cat "$TMP/one.json")" ]; then
  pass embed_stdin_batch
else fail embed_stdin_batch "$(head -c 300 "$TMP/batch") $(head -c 200 "$TMP/err")"; fi

expect_exit embed_plain 0 "$KILN" embed -m "$B" -p "hello" --plain --dimensions 8
if [ "$(wc -w <"$TMP/out")" -eq 8 ] && ! grep -q '\[' "$TMP/out"; then pass embed_plain_dims
else fail embed_plain_dims "$(head -c 200 "$TMP/out")"; fi

for p in tiny-nomic-bert tiny-qwen3-embedding; do
  expect_exit "embed_$p" 0 "$KILN" embed -m "$TMP/$p.gguf" -p "the cat"
done
expect_exit embed_generation_model 1 "$KILN" embed -m "$TMP/tiny-qwen3.gguf" -p "the cat"
if grep -q "not an embedding model" "$TMP/err"; then pass embed_generation_model_message
else fail embed_generation_model_message "$(head -c 300 "$TMP/err")"; fi
LONG=$(for i in $(seq 100); do printf 'the cat '; done)
expect_exit embed_too_long 1 "$KILN" embed -m "$B" -p "$LONG"
if grep -q "128 tokens" "$TMP/err"; then pass embed_too_long_message; else fail embed_too_long_message "$(head -c 300 "$TMP/err")"; fi
expect_exit embed_truncate 0 "$KILN" embed -m "$B" -p "$LONG" --truncate
expect_exit embed_chat_refused 1 "$KILN" run -m "$B" -p "hello" -n 4

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  skip embeddings_client_tests "node and npm are needed (Node 20 or later)"; exit 0
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  skip embeddings_client_tests "node $(node --version) is older than 20"; exit 0
fi
limit() { if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi; }
if [ ! -f "$C/node_modules/ollama/package.json" ] || [ ! -f "$C/node_modules/openai/package.json" ] ||
   [ ! -f "$C/node_modules/.package-lock.json" ] || [ "$C/package-lock.json" -nt "$C/node_modules/.package-lock.json" ]; then
  if ! (cd "$C" && limit 180 npm ci --no-audit --no-fund --prefer-offline) >"$TMP/npm.log" 2>&1; then
    skip embeddings_client_tests "npm ci failed in $C: $(tail -n 3 "$TMP/npm.log" | tr '\n' ' ' | cut -c 1-300)"
    exit 0
  fi
fi
KILN="$KILN" KILN_MODEL="$B" KILN_GEN_MODEL="$TMP/tiny-qwen3.gguf" limit 180 node "$C/embeddings.test.mjs"
