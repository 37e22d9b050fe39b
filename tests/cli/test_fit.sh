# test_fit.sh - the memory check before a load, and split models in `kiln ls`.
# KILN_TEST_MEMORY_AVAILABLE (test-only) replaces the memory available now: kiln run, chat, serve and
# kiln alone refuse a model whose weights, KV and compute buffers exceed it (exit 1 before loading,
# naming the figures and a context that would fit, which then does), warn when it fits only tightly,
# and load anyway with --fit off; a draft model counts; --print-config shows the figure; serve's
# automatic rows and the automatic model choice plan within what is available, so that they pass.
# A model split by kiln-gguf-split into 3 parts is one `kiln ls` row (total size, "parts": 3), runs
# by its name with the whole file's greedy text, and is checked with the weights of all its parts; a
# set with a part missing (the first one included) is left out with the reason, once.
. tests/cli/lib.sh
S="$DATA/models/stories260K/stories260K.gguf"
SPLIT="$BUILD/kiln-gguf-split"
if [ ! -f "$S" ]; then skip fit_tests "no $S"; exit 0; fi
if ! command -v python3 >/dev/null 2>&1; then skip fit_tests "python3 is needed"; exit 0; fi

# ka AVAIL ARGS: kiln with AVAIL bytes "available", in an empty HOME, no outside model settings
ka() {
  avail=$1; shift
  env HOME="$TMP/home" KILN_MODELS= KILN_MODEL="${KM:-}" KILN_PORT= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= \
      DISPLAY= WAYLAND_DISPLAY= KILN_TEST_MEMORY=1G KILN_TEST_MEMORY_AVAILABLE="$avail" "$KILN" "$@"
}
mkdir -p "$TMP/home/.cache/kiln/models"

# ---- refused: the weights alone exceed what is available ----
ka 1M run -m "$S" -p "Once upon a time" -n 8 --temp 0 >"$TMP/o1" 2>"$TMP/e1"; st=$?
if [ $st -eq 1 ] && [ ! -s "$TMP/o1" ] && grep -q "kiln run: stories260K.gguf does not fit in the memory available" "$TMP/e1" &&
   grep -q "1.0 MiB is available (KILN_TEST_MEMORY_AVAILABLE, for tests only)" "$TMP/e1" &&
   grep -q "of weights + .* of KV cache for [0-9]* tokens + .* of compute buffers" "$TMP/e1" &&
   grep -q "a smaller quant or a smaller model" "$TMP/e1" && grep -q -- "--fit off loads it anyway" "$TMP/e1"; then
  pass fit_run_refused; else fail fit_run_refused "exit $st: $(cat "$TMP/e1")"; fi

# ---- --fit off skips the check: the same text as without any limit ----
ka "" run -m "$S" -p "Once upon a time" -n 8 --temp 0 >"$TMP/free.txt" 2>/dev/null
ka 1M run -m "$S" -p "Once upon a time" -n 8 --temp 0 --fit off >"$TMP/off.txt" 2>"$TMP/e2"; st=$?
if [ $st -eq 0 ] && [ -s "$TMP/free.txt" ] && cmp -s "$TMP/free.txt" "$TMP/off.txt" && ! grep -q "fit" "$TMP/e2"; then
  pass fit_off_loads_anyway; else fail fit_off_loads_anyway "exit $st: $(cat "$TMP/e2")"; fi
expect_exit fit_bad_value 2 ka 1M run -m "$S" -p x --fit maybe
grep -q -- "--fit must be on or off" "$TMP/err" && pass fit_bad_value_named || fail fit_bad_value_named "$(cat "$TMP/err")"

# ---- a long context: refused with a -c that fits, and that -c then runs ----
# stories260K's KV is 640 bytes a token (5 layers, 4 KV heads of 8, f16): 65536 tokens are 40 MiB
ka 48M run -m "$S" -p "Once upon a time" -n 4 --temp 0 -c 65536 >/dev/null 2>"$TMP/e3"; st=$?
c=$(sed -n 's/.*a smaller context (-c \([0-9]*\) or less).*/\1/p' "$TMP/e3")
if [ $st -eq 1 ] && grep -q "40 MiB of KV cache for 65536 tokens" "$TMP/e3" && [ -n "$c" ] && [ "$c" -lt 65536 ] &&
   grep -q -- "--kv-type q8_0" "$TMP/e3"; then pass fit_suggests_ctx; else fail fit_suggests_ctx "exit $st: $(cat "$TMP/e3")"; fi
if [ -n "$c" ]; then
  ka 48M run -m "$S" -p "Once upon a time" -n 4 --temp 0 -c "$c" >"$TMP/o4" 2>"$TMP/e4"; st=$?
  if [ $st -eq 0 ] && [ -s "$TMP/o4" ] && ! grep -q "does not fit" "$TMP/e4"; then pass fit_suggested_ctx_runs; else
    fail fit_suggested_ctx_runs "exit $st with -c $c: $(cat "$TMP/e4")"; fi
fi
# a smaller KV type shrinks the need: q4_0 at 65536 tokens fits where f16 does not
ka 56M run -m "$S" -p x -n 1 -c 65536 >/dev/null 2>&1 && fail fit_f16_long_refused || pass fit_f16_long_refused
ka 56M run -m "$S" -p "Once upon a time" -n 4 --temp 0 -c 65536 --kv-type q4_0 >/dev/null 2>"$TMP/e5"; st=$?
[ $st -eq 0 ] && pass fit_counts_kv_type || fail fit_counts_kv_type "exit $st: $(cat "$TMP/e5")"

# a draft model's weights count too (speculative decoding loads both)
ka 1M run -m "$S" --draft-model "$S" -p x -n 1 >/dev/null 2>"$TMP/ed"; st=$?
[ $st -eq 1 ] && grep -q "(2.2 MiB of weights + 2.5 MiB of KV" "$TMP/ed" && grep -q "(1.1 MiB of weights + " "$TMP/e1" &&
  pass fit_counts_draft || fail fit_counts_draft "exit $st: $(cat "$TMP/ed")"

# ---- tight: a warning, and the run goes on ----
need=$(sed -n 's/.*it needs about \([0-9.]*\) MiB.*/\1/p' "$TMP/e1")
tight=$(python3 -c "print(int(float('$need') * 1.04 * 1048576))" 2>/dev/null)
ka "$tight" run -m "$S" -p "Once upon a time" -n 4 --temp 0 >"$TMP/o6" 2>"$TMP/e6"; st=$?
if [ $st -eq 0 ] && [ -s "$TMP/o6" ] && grep -q "kiln run: warning: stories260K.gguf fits only tightly" "$TMP/e6"; then
  pass fit_tight_warns; else fail fit_tight_warns "exit $st (need $need MiB, $tight available): $(cat "$TMP/e6")"; fi
roomy=$(python3 -c "print(int(float('$need') * 1.5 * 1048576))" 2>/dev/null)
ka "$roomy" run -m "$S" -p "Once upon a time" -n 4 --temp 0 >/dev/null 2>"$TMP/e7"; st=$?
[ $st -eq 0 ] && ! grep -q "warning" "$TMP/e7" && pass fit_roomy_silent || fail fit_roomy_silent "exit $st: $(cat "$TMP/e7")"

# ---- chat, serve and kiln alone check too, before anything is loaded or listened on ----
echo "Once upon a time" | ka 1M chat -m "$S" -n 4 >/dev/null 2>"$TMP/e8"; st=$?
[ $st -eq 1 ] && grep -q "kiln chat: stories260K.gguf does not fit" "$TMP/e8" && pass fit_chat_refused ||
  fail fit_chat_refused "exit $st: $(cat "$TMP/e8")"
ka 1M serve -m "$S" --port 0 --no-isolation >/dev/null 2>"$TMP/e9"; st=$?
if [ $st -eq 1 ] && grep -q "kiln serve: stories260K.gguf does not fit" "$TMP/e9" && ! grep -q "listening" "$TMP/e9"; then
  pass fit_serve_refused; else fail fit_serve_refused "exit $st: $(cat "$TMP/e9")"; fi
# eight rows of a long context: fewer rows are offered
ka 60M serve -m "$S" --port 0 -c 8192 --batch 8 >/dev/null 2>"$TMP/e10"; st=$?
if [ $st -eq 1 ] && grep -q "KV cache for 8 rows of 8192 tokens" "$TMP/e10" && grep -q "fewer rows (--batch [1-7])" "$TMP/e10"; then
  pass fit_serve_rows; else fail fit_serve_rows "exit $st: $(cat "$TMP/e10")"; fi
# --print-config shows the figure the check uses, without checking or loading
ka 100M serve -m "$S" --print-config >"$TMP/cfg" 2>/dev/null
grep -q "^fit  *needs [0-9.]* MiB of the 100 MiB available: weights, KV and .* of compute buffers *(KILN_TEST_MEMORY_AVAILABLE" "$TMP/cfg" &&
  pass fit_print_config || fail fit_print_config "$(grep ^fit "$TMP/cfg")"
# serve's automatic rows follow what is available now: 8 rows would not fit in 42M, one does, and
# the server starts (in the foreground of env, so that $! is kiln)
ka 42M serve -m "$S" --print-config >"$TMP/cfg2" 2>/dev/null
if grep -q "^memory .*lowered to what is available now" "$TMP/cfg2" && grep -q "^batch  *1 " "$TMP/cfg2"; then
  pass fit_auto_rows_follow_available; else fail fit_auto_rows_follow_available "$(grep -e ^memory -e ^batch "$TMP/cfg2")"; fi
env HOME="$TMP/home" KILN_MODELS= KILN_MODEL= KILN_PORT= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= DISPLAY= WAYLAND_DISPLAY= \
    KILN_TEST_MEMORY=1G KILN_TEST_MEMORY_AVAILABLE=42M "$KILN" serve -m "$S" --port 0 --no-isolation >/dev/null 2>"$TMP/s.err" &
pid=$!
i=0
while [ $i -lt 200 ] && ! grep -q "listening on\|does not fit\|cannot" "$TMP/s.err" 2>/dev/null; do i=$((i + 1)); sleep 0.1; done
kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
grep -q "listening on" "$TMP/s.err" && ! grep -q "does not fit" "$TMP/s.err" && pass fit_auto_serves ||
  fail fit_auto_serves "$(cat "$TMP/s.err")"
# the automatic model choice plans within what is available now too: the larger model is chosen
# with room to spare, the smaller one when only it passes the check
GEN="$BUILD/kiln-gen"
mkdir -p "$TMP/pick"
ln -s "$(cd "$(dirname "$S")" && pwd)/$(basename "$S")" "$TMP/pick/small.gguf"
if "$GEN" --preset tiny-llama --type F32 --layers 4 --seed 3 -o "$TMP/pick/big.gguf" >/dev/null 2>&1; then
  kp() { env HOME="$TMP/home" KILN_MODELS="$TMP/pick" KILN_MODEL= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= \
       KILN_TEST_MEMORY=1G KILN_TEST_MEMORY_AVAILABLE="$1" "$KILN" serve --print-config 2>/dev/null | grep "^model "; }
  kp 1G | grep -q "big.gguf .*(discovered big: the largest of 2 fitting in 60% of 1.0 GiB)" && pass fit_pick_roomy ||
    fail fit_pick_roomy "$(kp 1G)"
  kp 40M | grep -q "small.gguf .*(discovered small: the largest of 2 fitting in the 40 MiB available now)" &&
    pass fit_pick_follows_available || fail fit_pick_follows_available "$(kp 40M)"
else fail fit_pick_gen; fi
KM="$S" ka 1M >/dev/null 2>"$TMP/e11"; st=$?
[ $st -eq 1 ] && grep -q "kiln serve: stories260K.gguf does not fit" "$TMP/e11" && pass fit_kiln_alone_refused ||
  fail fit_kiln_alone_refused "exit $st: $(cat "$TMP/e11")"

# ---- cgroup limits lower what is available (a fake tree: KILN_TEST_CGROUP_FS stands for "/") ----
CG="$TMP/cg"
mkdir -p "$CG/proc/self" "$CG/sys/fs/cgroup/user.slice/app" "$CG/sys/fs/cgroup/memory/box"
kc() { env KILN_TEST_CGROUP_FS="$CG" KILN_TEST_MEMORY_AVAILABLE= "$KILN" serve -m "$S" --print-config 2>/dev/null | grep "^fit "; }
# v2: the process's own cgroup (limit 100 MiB, 20 used of which 5 inactive file pages) leaves 85 MiB
echo "0::/user.slice/app" >"$CG/proc/self/cgroup"
echo 104857600 >"$CG/sys/fs/cgroup/user.slice/app/memory.max"
echo 20971520 >"$CG/sys/fs/cgroup/user.slice/app/memory.current"
printf 'anon 1\ninactive_file 5242880\nactive_file 0\n' >"$CG/sys/fs/cgroup/user.slice/app/memory.stat"
echo max >"$CG/sys/fs/cgroup/user.slice/memory.max"
kc | grep -q "of the 85 MiB available: .*(the cgroup memory limit less its usage;" && pass fit_cgroup_v2 ||
  fail fit_cgroup_v2 "$(kc)"
# an ancestor's tighter limit wins: 60 MiB, 10 used
echo 62914560 >"$CG/sys/fs/cgroup/user.slice/memory.max"
echo 10485760 >"$CG/sys/fs/cgroup/user.slice/memory.current"
kc | grep -q "of the 50 MiB available: " && pass fit_cgroup_v2_ancestor || fail fit_cgroup_v2_ancestor "$(kc)"
# v1: the memory controller's line; its unlimited value reads as no limit
printf '4:memory:/box\n3:cpu:/other\n' >"$CG/proc/self/cgroup"
echo 41943040 >"$CG/sys/fs/cgroup/memory/box/memory.limit_in_bytes"
echo 10485760 >"$CG/sys/fs/cgroup/memory/box/memory.usage_in_bytes"
printf 'cache 1\ntotal_inactive_file 0\n' >"$CG/sys/fs/cgroup/memory/box/memory.stat"
echo 9223372036854771712 >"$CG/sys/fs/cgroup/memory/memory.limit_in_bytes"
kc | grep -q "of the 30 MiB available: " && pass fit_cgroup_v1 || fail fit_cgroup_v1 "$(kc)"
echo 9223372036854771712 >"$CG/sys/fs/cgroup/memory/box/memory.limit_in_bytes"
kc | grep -q "(MemAvailable;" && pass fit_cgroup_unlimited || fail fit_cgroup_unlimited "$(kc)"

# ---- split models: one row in kiln ls, run by name, checked whole ----
if [ ! -x "$SPLIT" ]; then skip fit_split "no $SPLIT"; exit 0; fi
M="$TMP/home/.cache/kiln/models"
"$SPLIT" "$S" "$M/st" 3 >/dev/null 2>"$TMP/split.err" || { fail fit_split_writes "$(cat "$TMP/split.err")"; exit 0; }
ka "" ls >"$TMP/ls" 2>"$TMP/ls.err"; st=$?
total=$(cat "$M"/st-0000?-of-00003.gguf | wc -c)
if [ $st -eq 0 ] && [ "$(tail -n +2 "$TMP/ls" | wc -l)" -eq 1 ] && grep -q "^st  *llama " "$TMP/ls" &&
   grep -q "st-00001-of-00003.gguf$" "$TMP/ls" && ! grep -q "skipping" "$TMP/ls.err"; then pass ls_split_one_row; else
  fail ls_split_one_row "exit $st: $(cat "$TMP/ls" "$TMP/ls.err")"; fi
ka "" ls --json >"$TMP/ls.json" 2>/dev/null
if python3 - "$TMP/ls.json" "$total" "$S" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
assert len(v) == 1, v
e = v[0]
assert e["name"] == "st" and e["parts"] == 3 and e["runnable"], e
assert e["size_bytes"] == int(sys.argv[2]), (e["size_bytes"], sys.argv[2])
assert e["path"].endswith("/st-00001-of-00003.gguf"), e
EOF
then pass ls_split_json; else fail ls_split_json "$(head -c 600 "$TMP/ls.json")"; fi
ka "" run -m "$S" -p "Once upon a time" -n 16 --temp 0 >"$TMP/whole.txt" 2>/dev/null
ka "" run st -p "Once upon a time" -n 16 --temp 0 >"$TMP/byname.txt" 2>"$TMP/byname.err"; st=$?
[ $st -eq 0 ] && [ -s "$TMP/whole.txt" ] && cmp -s "$TMP/whole.txt" "$TMP/byname.txt" && pass run_split_by_name ||
  fail run_split_by_name "exit $st: $(head -c 300 "$TMP/byname.err")"
# the check counts the weights of every part: the same figure as the single file's
ka 1M run st -p x -n 1 >/dev/null 2>"$TMP/e12"; st=$?
w1=$(sed -n 's/.*about [^(]*(\([^ ]* [A-Za-z]*\) of weights.*/\1/p' "$TMP/e1")
w2=$(sed -n 's/.*about [^(]*(\([^ ]* [A-Za-z]*\) of weights.*/\1/p' "$TMP/e12")
[ $st -eq 1 ] && [ -n "$w1" ] && [ "$w1" = "$w2" ] && pass fit_split_weights_whole ||
  fail fit_split_weights_whole "exit $st, '$w1' vs '$w2': $(cat "$TMP/e12")"
# a part missing: left out, with the reason naming it
mv "$M/st-00002-of-00003.gguf" "$TMP/p2"
ka "" ls >"$TMP/ls2" 2>"$TMP/ls2.err"
if ! grep -q "^st " "$TMP/ls2" && grep -q "st-00002-of-00003.gguf: missing" "$TMP/ls2.err"; then pass ls_split_missing_part; else
  fail ls_split_missing_part "$(cat "$TMP/ls2" "$TMP/ls2.err")"; fi
mv "$TMP/p2" "$M/st-00002-of-00003.gguf"
mv "$M/st-00001-of-00003.gguf" "$TMP/p1"
ka "" ls >"$TMP/ls3" 2>"$TMP/ls3.err"
if ! grep -q "^st " "$TMP/ls3" && [ "$(grep -c skipping "$TMP/ls3.err")" -eq 1 ] &&
   grep -q "st-00003-of-00003.gguf: the first part of its split model, .*st-00001-of-00003.gguf, is missing" "$TMP/ls3.err"; then
  pass ls_split_missing_first_part; else fail ls_split_missing_first_part "$(cat "$TMP/ls3" "$TMP/ls3.err")"; fi
