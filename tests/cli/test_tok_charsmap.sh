# test_tok_charsmap.sh - the Precompiled normalizer of tokenizer.json against SentencePiece itself:
# tests/conformance/charsmap_oracle.py trains a tiny Unigram model with SentencePiece's NFKC rules, writes
# the tokenizer.json a Hugging Face conversion gives it (its precompiled charsmap in a Precompiled
# normalizer) and compares kiln-tokjson's ids and decoded text with SentencePiece's on texts full of
# what the charsmap rewrites. Skips without SentencePiece (Debian's python3-sentencepiece and
# sentencepiece, which scripts/setup installs).
. tests/cli/lib.sh
T="$BUILD/kiln-tokjson"
if [ ! -x "$T" ]; then fail tok_charsmap "no $T (make builds it)"; exit 0; fi
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import sentencepiece' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ] || ! command -v spm_normalize >/dev/null 2>&1; then
  skip tok_charsmap_sentencepiece "SentencePiece is not installed (python3-sentencepiece, sentencepiece)"; exit 0
fi
if timeout 120 "$PY" tests/conformance/charsmap_oracle.py "$T" "$TMP" >"$TMP/log" 2>&1; then
  pass "tok_charsmap_sentencepiece ($(tail -n 1 "$TMP/log"))"
else
  fail tok_charsmap_sentencepiece "$(tail -n 5 "$TMP/log" | tr '\n' ' ' | cut -c 1-600)"
fi

# a broken charsmap (a leaf outside its trie) is a load error naming the step, not a crash
printf '{"model": {"type": "Unigram", "vocab": [["a", -1.0]]}, "normalizer": {"type": "Precompiled", "precompiled_charsmap": "CAAAAAAAAAABAQQA"}}' >"$TMP/bad.json"
expect_exit tok_charsmap_malformed 1 "$T" "$TMP/bad.json"
grep -q 'normalizer: precompiled_charsmap' "$TMP/err" && pass tok_charsmap_malformed_msg ||
  fail tok_charsmap_malformed_msg "$(cat "$TMP/err")"
