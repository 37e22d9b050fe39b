# test_mlx_panels.sh - an MLX 8-bit directory (kiln-gen's tiny-llama, every matrix a multiple of 16 rows, so
# each is repacked into 16-row panels where the kernel set has MLX8 panel kernels) generates the same
# greedy text, and the same perplexity digits, under the reference kernels (plain layout, scalar dot) as
# under every SIMD kernel set this CPU runs (an unsupported KILN_KERNELS name falls back to the best set).
# The prompt is long enough for prefill tiles of several tokens; decode runs one token at a time.
. tests/cli/lib.sh
GEN="$BUILD/kiln-gen"
HF="$BUILD/kiln-hf"
if [ ! -x "$GEN" ] || [ ! -x "$HF" ]; then skip mlx_panels "no $GEN or $HF"; exit 0; fi
"$GEN" --preset tiny-llama --type F32 --seed 3 -o "$TMP/tiny.gguf" >/dev/null 2>&1 &&
  "$HF" "$TMP/tiny.gguf" "$TMP/mlx8" --mlx-bits 8 --mlx-group 32 >/dev/null 2>&1 &&
  pass mlx_panels_model || { fail mlx_panels_model "kiln-gen / kiln-hf failed"; exit 0; }
P="Once upon a time there was a little dog who liked to run in the park with his friends every day"
KILN_KERNELS=ref "$KILN" run -m "$TMP/mlx8" -p "$P" -n 24 --temp 0 -v >"$TMP/ref.txt" 2>"$TMP/ref.err"
grep -q "MLX8" "$TMP/ref.err" && [ -s "$TMP/ref.txt" ] && pass mlx_panels_ref ||
  fail mlx_panels_ref "$(head -c 300 "$TMP/ref.err")"
printf '%s\n' "$P. $P, and one day he found a ball." >"$TMP/text.txt"
ppl() { KILN_KERNELS=$1 "$KILN" perplexity -m "$TMP/mlx8" -f "$TMP/text.txt" -c 16 2>/dev/null |
  sed -n 's/^Final estimate: PPL = \([0-9.]*\).*/\1/p'; }
PREF=$(ppl ref)
for s in avx2 avx2vnni avx512; do
  KILN_KERNELS=$s "$KILN" run -m "$TMP/mlx8" -p "$P" -n 24 --temp 0 >"$TMP/$s.txt" 2>/dev/null
  cmp -s "$TMP/ref.txt" "$TMP/$s.txt" && pass "mlx_panels_greedy_$s" ||
    fail "mlx_panels_greedy_$s" "ref: $(head -c 120 "$TMP/ref.txt") / $s: $(head -c 120 "$TMP/$s.txt")"
  PS=$(ppl $s)
  [ -n "$PREF" ] && [ "$PREF" = "$PS" ] && pass "mlx_panels_perplexity_$s" ||
    fail "mlx_panels_perplexity_$s" "ref '$PREF', $s '$PS'"
done
