# test_tools.sh - `kiln perplexity` and `kiln tokenize` end to end.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
G="$DATA/models/stories260K/golden"
V="$DATA/tokenizer-tests/llama.cpp-vocab"
if [ ! -f "$M" ]; then skip tools "no $M"; exit 0; fi

cat "$G"/*.txt >"$TMP/text.txt"
"$KILN" perplexity -m "$M" -f "$TMP/text.txt" -c 64 >"$TMP/p1" 2>"$TMP/p1.err"
if grep -q '^\[1\][0-9.]*,\[2\]' "$TMP/p1" && grep -q '^Final estimate: PPL = [0-9.]* +/- [0-9.]*$' "$TMP/p1"; then
  pass perplexity_format; else fail perplexity_format "$(cat "$TMP/p1" "$TMP/p1.err")"; fi
# the model's own greedy stories are easy for it: a perplexity between 1 and 5
ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$TMP/p1")
if awk -v p="$ppl" 'BEGIN { exit !(p > 1 && p < 5) }'; then pass perplexity_plausible; else fail perplexity_plausible "PPL $ppl"; fi
# prefill chunking does not change the result
"$KILN" perplexity -m "$M" -f "$TMP/text.txt" -c 64 -b 7 -t 2 >"$TMP/p2" 2>/dev/null
cmp -s "$TMP/p1" "$TMP/p2" && pass perplexity_chunking_invariant || fail perplexity_chunking_invariant
printf 'Once upon a time' >"$TMP/short.txt"
expect_exit perplexity_text_too_short 1 "$KILN" perplexity -m "$M" -f "$TMP/short.txt" -c 64
expect_exit perplexity_needs_file 2 "$KILN" perplexity -m "$M"
expect_exit perplexity_missing_file 1 "$KILN" perplexity -m "$M" -f "$TMP/none.txt"

# tokenize
out=$("$KILN" tokenize -m "$M" -p "Once upon a time" --ids)
[ "$out" = "1 403 407 261 378" ] && pass tokenize_ids_bos || fail tokenize_ids_bos "$out"
out=$("$KILN" tokenize -m "$M" -p "Once upon a time" --ids --no-bos)
[ "$out" = "403 407 261 378" ] && pass tokenize_no_bos || fail tokenize_no_bos "$out"
"$KILN" tokenize -m "$M" -p "Once" >"$TMP/t" 2>&1
grep -q "403 -> ' Once'" "$TMP/t" && pass tokenize_pieces || fail tokenize_pieces "$(cat "$TMP/t")"
if [ -f "$V/ggml-vocab-gpt-2.gguf" ]; then
  out=$("$KILN" tokenize -m "$V/ggml-vocab-gpt-2.gguf" -p "Hello world" --ids --no-bos)
  [ "$out" = "15496 995" ] && pass tokenize_vocab_only_bpe || fail tokenize_vocab_only_bpe "$out"
  expect_exit run_vocab_only_fails 1 "$KILN" run -m "$V/ggml-vocab-gpt-2.gguf" -p hi
else
  skip tokenize_vocab_only_bpe "no vocab files"
fi
expect_exit tokenize_bad_flag 2 "$KILN" tokenize -m "$M" --frob
expect_exit tokenize_missing_model 1 "$KILN" tokenize -m "$TMP/none.gguf" -p hi
