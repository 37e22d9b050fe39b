# test_gguf_split.sh - split GGUF models (PREFIX-0000i-of-0000N.gguf): stories260K split by
# kiln-gguf-split into 3 parts runs from any part with exactly the whole file's greedy text; a
# missing part, a part of another split beside the set and a part that disagrees with its name
# exit 1 with a message naming the file.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
SPLIT="$BUILD/kiln-gguf-split"
if [ ! -f "$M" ]; then skip gguf_split "no $M"; exit 0; fi
if [ ! -x "$SPLIT" ]; then skip gguf_split "no $SPLIT"; exit 0; fi

mkdir -p "$TMP/s"
"$SPLIT" "$M" "$TMP/s/st" 3 2>"$TMP/split.err" && [ -s "$TMP/s/st-00003-of-00003.gguf" ] && pass gguf_split_writes ||
  fail gguf_split_writes "$(cat "$TMP/split.err")"
"$KILN" run -m "$M" -p "Once upon a time" -n 32 --temp 0 >"$TMP/whole.txt" 2>/dev/null
for i in 1 2; do
  "$KILN" run -m "$TMP/s/st-0000$i-of-00003.gguf" -p "Once upon a time" -n 32 --temp 0 >"$TMP/p$i.txt" 2>"$TMP/p.err"
  [ -s "$TMP/whole.txt" ] && cmp -s "$TMP/whole.txt" "$TMP/p$i.txt" && pass gguf_split_runs_from_part_$i ||
    fail gguf_split_runs_from_part_$i "$(head -c 300 "$TMP/p.err")"
done
"$KILN" inspect "$TMP/s/st-00001-of-00003.gguf" >"$TMP/i.txt" 2>&1
grep -q "blk.0.attn_q.weight" "$TMP/i.txt" && grep -q "output_norm.weight" "$TMP/i.txt" && pass gguf_split_inspect ||
  fail gguf_split_inspect "$(head -c 300 "$TMP/i.txt")"

# a missing part is named
mv "$TMP/s/st-00002-of-00003.gguf" "$TMP/p2"
expect_exit gguf_split_missing 1 "$KILN" run -m "$TMP/s/st-00001-of-00003.gguf" -p x -n 1
grep -q "st-00002-of-00003.gguf: missing" "$TMP/err" && pass gguf_split_missing_named ||
  fail gguf_split_missing_named "$(cat "$TMP/err")"
mv "$TMP/p2" "$TMP/s/st-00002-of-00003.gguf"
# a part of an older split of the same name beside the set is named
cp "$TMP/s/st-00003-of-00003.gguf" "$TMP/s/st-00002-of-00004.gguf"
expect_exit gguf_split_stray 1 "$KILN" run -m "$TMP/s/st-00001-of-00003.gguf" -p x -n 1
grep -q "st-00002-of-00004.gguf: not part of the split model of 3 parts" "$TMP/err" && pass gguf_split_stray_named ||
  fail gguf_split_stray_named "$(cat "$TMP/err")"
rm "$TMP/s/st-00002-of-00004.gguf"
# a part whose metadata disagrees with its place in the set
cp "$TMP/s/st-00002-of-00003.gguf" "$TMP/p2"
cp "$TMP/s/st-00003-of-00003.gguf" "$TMP/s/st-00002-of-00003.gguf"
expect_exit gguf_split_wrong_part 1 "$KILN" run -m "$TMP/s/st-00001-of-00003.gguf" -p x -n 1
grep -q "st-00002-of-00003.gguf: its split.no" "$TMP/err" && pass gguf_split_wrong_part_named ||
  fail gguf_split_wrong_part_named "$(cat "$TMP/err")"
