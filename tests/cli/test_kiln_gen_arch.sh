# test_kiln_gen_arch.sh - kiln-gen's architectures and shapes: --arch for every family kiln runs (a
# file kiln loads, describes and generates from, deterministic for a seed), the presets of real
# shapes listed, --scale writing other weights into a file of the same layout, and
# clean errors for an unknown architecture or scaling.
. tests/cli/lib.sh
GEN="$BUILD/kiln-gen"
if [ ! -x "$GEN" ]; then skip kiln_gen_arch "no $GEN"; exit 0; fi

SHAPE="--vocab 512 --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 256 --type Q8_0 --seed 4"
for a in llama qwen2 qwen3 gemma2 gemma3 phi3 smollm3; do
  extra=""
  case $a in gemma*) extra="--head-dim 32 --sliding-window 4" ;; phi3) extra="--rope-scaling longrope --rope-orig-ctx 64 --ctx 256" ;; esac
  # shellcheck disable=SC2086
  if ! "$GEN" --arch $a $SHAPE $extra -o "$TMP/$a.gguf" 2>"$TMP/$a.gen"; then
    fail "kiln_gen_arch_$a" "kiln-gen failed: $(cat "$TMP/$a.gen")"; continue
  fi
  # shellcheck disable=SC2086
  "$GEN" --arch $a $SHAPE $extra -o "$TMP/$a-2.gguf" 2>/dev/null
  "$KILN" run -m "$TMP/$a.gguf" -p "Once upon a time" -n 12 --temp 0 -v >"$TMP/$a.out" 2>"$TMP/$a.err"; st=$?
  if [ $st -eq 0 ] && cmp -s "$TMP/$a.gguf" "$TMP/$a-2.gguf" && grep -q "$a 128d 2L 4H/2KV" "$TMP/$a.err" &&
     [ -s "$TMP/$a.out" ]; then pass "kiln_gen_arch_$a"; else
    fail "kiln_gen_arch_$a" "exit $st: $(head -c 400 "$TMP/$a.err")"; fi
done

"$GEN" --list-presets >"$TMP/presets"
if grep -q '^gemma3-4b ' "$TMP/presets" && grep -q '^phi3-mini ' "$TMP/presets" && grep -q '^tiny-gemma3 ' "$TMP/presets" &&
   grep -q '^tiny-gemma2 ' "$TMP/presets" && grep -q '^tiny-phi3 ' "$TMP/presets"; then pass kiln_gen_arch_presets; else
  fail kiln_gen_arch_presets "$(cat "$TMP/presets")"; fi

# --scale: the same file but every matrix S times larger (the norms are not matrices: same bytes)
"$GEN" --preset tiny-gemma3 --type F32 --seed 2 -o "$TMP/s1.gguf" 2>/dev/null
"$GEN" --preset tiny-gemma3 --type F32 --seed 2 --scale 4 -o "$TMP/s4.gguf" 2>/dev/null
if [ -s "$TMP/s1.gguf" ] && [ "$(wc -c <"$TMP/s1.gguf")" -eq "$(wc -c <"$TMP/s4.gguf")" ] && ! cmp -s "$TMP/s1.gguf" "$TMP/s4.gguf"; then
  pass kiln_gen_scale; else fail kiln_gen_scale "files missing, differently sized or identical"; fi

expect_exit kiln_gen_arch_unknown 1 "$GEN" --arch mamba $SHAPE -o "$TMP/x.gguf"
grep -q "gemma3" "$TMP/err" || fail kiln_gen_arch_unknown_names "the message does not list the architectures: $(cat "$TMP/err")"
expect_exit kiln_gen_rope_scaling_unknown 1 "$GEN" --arch llama $SHAPE --rope-scaling su -o "$TMP/x.gguf"
expect_exit kiln_gen_longrope_not_phi3 1 "$GEN" --arch llama $SHAPE --rope-scaling longrope -o "$TMP/x.gguf"
