# test_policy.sh - the CLI reads the library's policy instead of restating it. The sampling flags
# (run, chat's /set, serve) accept exactly the ranges of the library's one table
# (kiln_sampler_param_range in kiln.h): every bound is accepted, a value just outside each bound is
# a usage error naming the range, and --help prints the ranges. kiln ls --json reports the KV bytes
# per token the library estimates from a file's header.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip sampling_ranges "no $M"; exit 0; fi

# All lower bounds in one run, all upper bounds in another: both generate.
expect_exit run_lower_bounds 0 "$KILN" run -m "$M" -p "Once" -n 2 --temp 0 --top-k 0 --top-p 0 --min-p 0 \
  --repeat-penalty 0.001 --repeat-last-n 0 --presence-penalty -2 --frequency-penalty -2
expect_exit run_upper_bounds 0 "$KILN" run -m "$M" -p "Once" -n 2 --seed 1 --temp 2 --top-k 1073741824 --top-p 1 \
  --min-p 1 --repeat-penalty 100 --repeat-last-n 1048576 --presence-penalty 2 --frequency-penalty 2

# Just outside each bound: exit 2 with the range in the message.
while read -r flag below above range; do
  for v in "$below" "$above"; do
    "$KILN" run -m "$M" -n 1 "$flag" "$v" >"$TMP/out" 2>"$TMP/err"
    st=$?
    if [ $st -eq 2 ] && grep -qF -- "$flag must be" "$TMP/err" && grep -qF -- "$range" "$TMP/err"; then
      pass "run_rejects_${flag#--}_$v"
    else fail "run_rejects_${flag#--}_$v" "exit $st: $(head -c 300 "$TMP/err")"; fi
  done
done <<'TABLE'
--temp -0.0001 2.0001 [0, 2]
--top-k -1 1073741825 [0, 1073741824]
--top-p -0.0001 1.0001 [0, 1]
--min-p -0.0001 1.0001 [0, 1]
--repeat-penalty 0.00099 100.001 [0.001, 100]
--repeat-last-n -1 1048577 [0, 1048576]
--presence-penalty -2.0001 2.0001 [-2, 2]
--frequency-penalty -2.0001 2.0001 [-2, 2]
TABLE
expect_exit run_rejects_fractional_top_k 2 "$KILN" run -m "$M" -n 1 --top-k 2.5
expect_exit run_rejects_nan_temp 2 "$KILN" run -m "$M" -n 1 --temp nan

# kiln serve parses the same flags: a bound is taken, a value beyond it is refused before loading.
"$KILN" serve -m "$M" --print-config --temp 2 --presence-penalty -2 >"$TMP/cfg" 2>"$TMP/cfg.err"
st=$?
if [ $st -eq 0 ] && grep -q '^temp  *2  *(flag)' "$TMP/cfg" && grep -q '^presence  *-2  *(flag)' "$TMP/cfg"; then
  pass serve_accepts_bounds
else fail serve_accepts_bounds "exit $st: $(cat "$TMP/cfg" "$TMP/cfg.err" | head -c 600)"; fi
expect_exit serve_rejects_presence 2 "$KILN" serve -m "$M" --print-config --presence-penalty 2.5

# chat's /set uses the same table: in range taken, out of range one error line each.
printf '/set temp 2.5\n/set top_p 1.5\n/set repeat_penalty 0\n/set top_k 1073741825\n/set temp 2\n/set top_p 0.5\n/set\n' |
  "$KILN" chat -m "$M" >"$TMP/chat" 2>"$TMP/chat.err"
st=$?
if [ $st -eq 0 ] && [ "$(wc -l <"$TMP/chat.err")" -eq 4 ] && grep -q '\[0, 2\]' "$TMP/chat.err" &&
   grep -q 'temp 2 .*top_p 0.5' "$TMP/chat"; then pass chat_set_ranges
else fail chat_set_ranges "exit $st: $(cat "$TMP/chat" "$TMP/chat.err" | head -c 600)"; fi

# the help text shows each flag's range and default from the table
"$KILN" help run >"$TMP/help"
grep -q -- '--temp T .*(0 to 2, default 0.8)' "$TMP/help" && grep -q -- '--presence-penalty P .*(-2 to 2, default 0)' "$TMP/help" &&
  pass help_shows_ranges || fail help_shows_ranges "$(grep -- '--temp\|penalty' "$TMP/help")"

# kiln ls --json: stories260K has 5 layers of 4 KV heads of width 8 (n_embd 64 over 8 heads), so
# F16 KV takes 2 (K and V) * 5 * 4 * 8 * 2 bytes per token.
mkdir -p "$TMP/home/.cache/kiln/models"
ln -s "$(cd "$(dirname "$M")" && pwd)/$(basename "$M")" "$TMP/home/.cache/kiln/models/stories260K.gguf"
HOME="$TMP/home" KILN_MODELS= HF_HOME="$TMP/none" HF_HUB_CACHE="$TMP/none" "$KILN" ls --json >"$TMP/ls.json" 2>"$TMP/ls.err"
if python3 - "$TMP/ls.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
assert len(v) == 1 and v[0]["name"] == "stories260K", v
assert v[0]["kv_bytes_per_token"] == 2 * 5 * 4 * 8 * 2, v[0]
EOF
then pass ls_json_kv_bytes_per_token; else fail ls_json_kv_bytes_per_token "$(head -c 600 "$TMP/ls.json" "$TMP/ls.err")"; fi
