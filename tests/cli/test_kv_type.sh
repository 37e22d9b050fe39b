#!/bin/sh
# test_kv_type.sh - the KV cache type flags of the CLI: every type runs (kiln run, kiln bench with
# a depth, kiln perplexity with --kl-save / --kl-base), keys and values apart, f16 is the default
# (same output as without the flag), --print-config reports the bytes per token, and a bad type is
# a usage error whose message lists the types.
. "$(dirname "$0")/lib.sh"
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip kv_type "no $M"; exit 0; fi

expect_exit kv_type_bad 2 "$KILN" run -m "$M" -p "Once" -n 4 --kv-type q9_0
if grep -q "q9_0" "$TMP/err" && grep -q "f16, f32, bf16, q8_0, q4_0, tq4, tq3" "$TMP/err"; then pass kv_type_bad_lists
else fail kv_type_bad_lists "$(head -c 300 "$TMP/err")"; fi
expect_exit kv_type_bad_v 2 "$KILN" run -m "$M" -p "Once" -n 4 --cache-type-v nope
expect_exit kv_rotate_bad 2 "$KILN" run -m "$M" -p "Once" -n 4 --kv-rotate maybe

"$KILN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 >"$TMP/plain" 2>/dev/null
"$KILN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 --kv-type f16 >"$TMP/f16" 2>/dev/null
if [ -s "$TMP/plain" ] && cmp -s "$TMP/plain" "$TMP/f16"; then pass kv_type_f16_default
else fail kv_type_f16_default "f16 output differs from the default"; fi
ok=1
for t in f32 bf16 q8_0 q4_0 tq4 tq3; do
  "$KILN" run -m "$M" -p "Once upon a time" -n 24 --temp 0 -t 1 --kv-type "$t" >"$TMP/$t" 2>"$TMP/err" || {
    ok=0; echo "  $t: $(head -c 200 "$TMP/err")"; }
  [ -s "$TMP/$t" ] || ok=0
done
"$KILN" run -m "$M" -p "Once" -n 8 -t 1 --kv-type-k q8_0 --cache-type-v q4_0 --kv-rotate off >/dev/null 2>"$TMP/err" ||
  { ok=0; echo "  mixed: $(head -c 200 "$TMP/err")"; }
if [ $ok = 1 ]; then pass kv_type_all_run; else fail kv_type_all_run; fi

if "$KILN" bench -m "$M" -p 0 -n 4 -d 40 -r 1 -t 1 --kv-type tq4 >"$TMP/bench" 2>"$TMP/err" &&
   grep -q "tg4 @ d40" "$TMP/bench"; then pass kv_type_bench_depth
else fail kv_type_bench_depth "$(head -c 300 "$TMP/err")"; fi

printf 'Once upon a time, there was a little girl named Lily. She liked to play in the park. %.0s' \
  1 2 3 4 5 6 7 8 9 10 11 12 >"$TMP/text"
if "$KILN" perplexity -m "$M" -f "$TMP/text" -c 64 -t 1 --kl-save "$TMP/base" >/dev/null 2>"$TMP/err" &&
   "$KILN" perplexity -m "$M" -f "$TMP/text" -c 64 -t 1 --kl-base "$TMP/base" >"$TMP/same" 2>&1 &&
   "$KILN" perplexity -m "$M" -f "$TMP/text" -c 64 -t 1 --kv-type q4_0 --kl-base "$TMP/base" >"$TMP/q4" 2>&1 &&
   grep -q "Mean KL divergence from .*: 0.000000 " "$TMP/same" && grep -q "same top token: 100.00%" "$TMP/same" &&
   grep -q "Mean KL divergence" "$TMP/q4" && ! grep -q "Mean KL divergence from .*: 0.000000 " "$TMP/q4"; then
  pass kv_type_kl_base
else fail kv_type_kl_base "$(cat "$TMP/err" "$TMP/same" "$TMP/q4" | tail -c 400)"; fi
if ! "$KILN" perplexity -m "$M" -f "$TMP/text" -c 32 -t 1 --kl-base "$TMP/base" >/dev/null 2>"$TMP/err" &&
   grep -q "not a --kl-save file" "$TMP/err"; then pass kv_type_kl_mismatch
else fail kv_type_kl_mismatch "$(head -c 300 "$TMP/err")"; fi

"$KILN" serve -m "$M" -c 256 --kv-type q8_0 --print-config >"$TMP/cfg" 2>&1
if grep -q "^kv-type .*K q8_0, V q8_0, rotation auto; 400 bytes per token" "$TMP/cfg"; then pass kv_type_print_config
else fail kv_type_print_config "$(grep kv "$TMP/cfg" | head -c 300)"; fi
