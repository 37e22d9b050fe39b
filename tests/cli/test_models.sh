# test_models.sh - model discovery, `kiln ls`, automatic `kiln serve` (model choice, settings from
# the machine, --print-config sources), port fallback, the browser opener and the load progress bar.
# Everything runs in a temporary HOME: ~/.cache/kiln/models holds links to ../shared/data models, a
# corrupt file and a split model; KILN_MODELS names a directory with a generated model and a link
# to a file found elsewhere (listed once); a fake Hugging Face cache holds a generated model as a
# blob with two snapshot links (listed once). KILN_TEST_MEMORY (test-only) shrinks the "RAM" the
# automatic choices plan for.
. tests/cli/lib.sh
GEN="$BUILD/kiln-gen"
S="$DATA/models/stories260K/stories260K.gguf"
R="$DATA/models/llama-2-tiny-random/llama-2-tiny-random.gguf"
if [ ! -f "$S" ] || [ ! -f "$R" ]; then skip models_tests "no $S or $R"; exit 0; fi
if ! command -v python3 >/dev/null 2>&1; then skip models_tests "python3 is needed"; exit 0; fi
SA=$(cd "$(dirname "$S")" && pwd -P)/$(basename "$S")
RA=$(cd "$(dirname "$R")" && pwd)/$(basename "$R")

H="$TMP/home"
K="$H/.cache/kiln/models"
HUB="$H/.cache/huggingface/hub/models--acme--big-GGUF"
X="$TMP/extra"
mkdir -p "$K/sub" "$HUB/blobs" "$HUB/snapshots/rev1" "$HUB/snapshots/rev2" "$X" "$TMP/empty" "$TMP/bin"
ln -s "$SA" "$K/stories260K.gguf"
ln -s "$RA" "$K/sub/llama-2-tiny-random.gguf"
printf 'not a model at all' >"$K/bad.gguf"
printf 'GGUF' >"$K/huge-00001-of-00002.gguf"
printf 'GGUF' >"$K/huge-00002-of-00002.gguf"
# a 2.4 MiB qwen2 (F16, context 512) and a 9.5 MiB llama (F32, context 131072, 1 KiB of KV a token)
"$GEN" --preset tiny-qwen2 --type F16 --seed 3 -o "$X/q2.gguf" >/dev/null 2>&1 || { fail models_gen_qwen; exit 0; }
"$GEN" --preset tiny-llama --type F32 --layers 4 --ctx 131072 --seed 3 -o "$HUB/blobs/0123abcd" >/dev/null 2>&1 ||
  { fail models_gen_llama; exit 0; }
ln -s ../../blobs/0123abcd "$HUB/snapshots/rev1/big-F32.gguf"
ln -s ../../blobs/0123abcd "$HUB/snapshots/rev2/big-F32.gguf"
ln -s "$K/stories260K.gguf" "$TMP/single.gguf"
BIG="$HUB/snapshots/rev1/big-F32.gguf"

# k ARGS: kiln in the test HOME (in the foreground: a background job runs env itself, so that $!
# is kiln) with no outside model settings, no desktop and a lot of "RAM"
k() {
  env HOME="$H" KILN_MODELS="$X:$TMP/single.gguf" KILN_MODEL= KILN_PORT= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= \
      DISPLAY= WAYLAND_DISPLAY= KILN_TEST_MEMORY="${MEM:-1G}" "$KILN" "$@"
}
# nothing anywhere
k0() {
  env HOME="$TMP/empty" KILN_MODELS= KILN_MODEL= KILN_PORT= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= DISPLAY= \
      WAYLAND_DISPLAY= "$KILN" "$@"
}

# ---- kiln ls ----
k ls >"$TMP/ls" 2>"$TMP/ls.err"; st=$?
rows=$(tail -n +2 "$TMP/ls" | wc -l)
if [ $st -eq 0 ] && [ "$rows" -eq 4 ] && grep -q '^stories260K ' "$TMP/ls" && grep -q '^sub/llama-2-tiny-random ' "$TMP/ls" &&
   grep -q '^q2 .*qwen2 .*F16 ' "$TMP/ls" && grep -q '^acme/big-GGUF:big-F32 .*llama .*F32 .*131072' "$TMP/ls"; then
  pass ls_lists_all_places; else fail ls_lists_all_places "exit $st, $rows rows: $(cat "$TMP/ls" "$TMP/ls.err")"; fi
grep -q "bad.gguf: not a GGUF file" "$TMP/ls.err" && pass ls_corrupt_skipped_with_warning ||
  fail ls_corrupt_skipped_with_warning "$(cat "$TMP/ls.err")"
# a split model is read by its first part (whole); this one's parts are not GGUF: left out once
if grep -q "skipping .*huge-00001-of-00002.gguf: " "$TMP/ls.err" && ! grep -q "huge-00002" "$TMP/ls.err" &&
   ! grep -q huge "$TMP/ls"; then pass ls_split_noted_once; else fail ls_split_noted_once "$(cat "$TMP/ls.err")"; fi
[ "$(grep -c 'big-F32' "$TMP/ls")" -eq 1 ] && [ "$(grep -c 'stories260K' "$TMP/ls")" -eq 1 ] && pass ls_dedupes_links ||
  fail ls_dedupes_links "$(cat "$TMP/ls")"

k ls --json >"$TMP/ls.json" 2>/dev/null
if python3 - "$TMP/ls.json" "$SA" "$X/q2.gguf" "$BIG" <<'EOF'
import json, os, sys
v = json.load(open(sys.argv[1]))
by = {e["name"]: e for e in v}
assert sorted(by) == ["acme/big-GGUF:big-F32", "q2", "stories260K", "sub/llama-2-tiny-random"], sorted(by)
s, q, b = by["stories260K"], by["q2"], by["acme/big-GGUF:big-F32"]
assert s["file"] == sys.argv[2] and s["source"] == "kiln" and s["architecture"] == "llama", s
assert s["weight_type"] == "F32" and s["size_bytes"] == os.path.getsize(sys.argv[2]) and s["runnable"], s
assert q["architecture"] == "qwen2" and q["weight_type"] == "F16" and q["context_length"] == 512, q
assert q["source"] == "KILN_MODELS" and 1000000 < q["parameters"] < 2000000, q
assert b["path"] == sys.argv[4] and b["source"] == "huggingface" and b["context_length"] == 131072, b
assert b["size_bytes"] == os.path.getsize(sys.argv[4]) and b["file"].endswith("/blobs/0123abcd"), b
EOF
then pass ls_json_fields; else fail ls_json_fields "$(head -c 600 "$TMP/ls.json")"; fi

k0 ls >"$TMP/ls0" 2>&1; st=$?
if [ $st -eq 0 ] && grep -q "No models found" "$TMP/ls0" && grep -q "$TMP/empty/.cache/kiln/models" "$TMP/ls0" &&
   grep -q "kiln pull" "$TMP/ls0"; then pass ls_empty_says_where_and_how; else fail ls_empty_says_where_and_how "exit $st: $(cat "$TMP/ls0")"; fi
[ "$(k0 ls --json 2>/dev/null | tr -d ' \n')" = "[]" ] && pass ls_json_empty || fail ls_json_empty
expect_exit ls_bad_flag 2 k ls --frobnicate

# ---- automatic model choice ----
cfg() { k serve --print-config "$@" 2>"$TMP/cfg.err"; }
MEM=1G cfg >"$TMP/c1"; st=$?
if [ $st -eq 0 ] && grep -q "^model .*big-F32.gguf *(discovered acme/big-GGUF:big-F32: the largest of 4 fitting in 60% of 1.0 GiB)" "$TMP/c1"; then
  pass pick_largest_fitting; else fail pick_largest_fitting "exit $st: $(head -n 3 "$TMP/c1") $(cat "$TMP/cfg.err")"; fi
MEM=8M cfg >"$TMP/c2"
grep -q "^model .*/q2.gguf *(discovered q2: the largest of 4 fitting" "$TMP/c2" && pass pick_skips_what_does_not_fit ||
  fail pick_skips_what_does_not_fit "$(head -n 3 "$TMP/c2")"
MEM=1M cfg >"$TMP/c3"; st=$?
if [ $st -eq 0 ] && grep -q "^model .*llama-2-tiny-random.gguf *(discovered sub/llama-2-tiny-random: the smallest of 4; none fits" "$TMP/c3" &&
   grep -q "warning: no model found fits" "$TMP/cfg.err"; then pass pick_smallest_when_none_fits; else
  fail pick_smallest_when_none_fits "exit $st: $(head -n 2 "$TMP/c3") $(cat "$TMP/cfg.err")"; fi
grep -q "^memory .*(env KILN_TEST_MEMORY, for tests only)" "$TMP/c3" && pass test_memory_shown || fail test_memory_shown

k0 serve --print-config >/dev/null 2>"$TMP/none.err"; st=$?
if [ $st -eq 1 ] && grep -q "no model to run" "$TMP/none.err" && grep -q "kiln pull ORG/NAME" "$TMP/none.err" &&
   grep -q -- "-m PATH" "$TMP/none.err" && grep -q "$TMP/empty/.cache/kiln/models" "$TMP/none.err"; then
  pass none_found_exit1_howto; else fail none_found_exit1_howto "exit $st: $(cat "$TMP/none.err")"; fi
k0 >/dev/null 2>"$TMP/none2.err"; st=$?
[ $st -eq 1 ] && grep -q "no model to run" "$TMP/none2.err" && pass kiln_alone_none_found || fail kiln_alone_none_found "exit $st"
# kiln chat without -m: the same choice as kiln serve (here the one model in KILN_MODELS), or the how-to
echo "Once upon a time" | env HOME="$TMP/empty" KILN_MODELS="$TMP/single.gguf" KILN_MODEL= HF_HUB_CACHE= HF_HOME= \
  XDG_CACHE_HOME= "$KILN" chat -n 4 --temp 0 >"$TMP/chat.out" 2>"$TMP/chat.err"; st=$?
if [ $st -eq 0 ] && grep -q "kiln chat: .*single.gguf (discovered" "$TMP/chat.err" && [ -s "$TMP/chat.out" ]; then
  pass chat_picks_model; else fail chat_picks_model "exit $st: $(cat "$TMP/chat.err")"; fi
k0 chat </dev/null >/dev/null 2>"$TMP/chat0.err"; st=$?
[ $st -eq 1 ] && grep -q "no model to run" "$TMP/chat0.err" && pass chat_none_found || fail chat_none_found "exit $st"

# ---- --print-config sources ----
cfg -m "$R" -t 3 --temp 0.5 >"$TMP/c4"
if grep -q "^model .*llama-2-tiny-random.gguf *(flag -m)" "$TMP/c4" && grep -q "^threads *3 *(flag -t)" "$TMP/c4" &&
   grep -q "^temp *0.5 *(flag)" "$TMP/c4" && grep -q "^top-p *0.95 *(default)" "$TMP/c4"; then pass config_flag_sources; else
  fail config_flag_sources "$(cat "$TMP/c4")"; fi
env KILN_MODEL="$S" HOME="$H" KILN_TEST_MEMORY=1G "$KILN" serve --print-config >"$TMP/c5" 2>/dev/null
if grep -q "^model .*stories260K.gguf *(env KILN_MODEL)" "$TMP/c5" && grep -q "^threads .*(machine: physical cores)" "$TMP/c5" &&
   grep -q "^port *8080 *(default; the next 20 are tried when taken)" "$TMP/c5" &&
   grep -q "^prompt-cache .*(machine: 1/8 of 1.0 GiB, at most 8 GiB)" "$TMP/c5"; then pass config_env_and_machine_sources; else
  fail config_env_and_machine_sources "$(cat "$TMP/c5")"; fi
cfg -m sub/llama-2-tiny-random >"$TMP/c6"
grep -q "^model *$K/sub/llama-2-tiny-random.gguf *(flag -m: sub/llama-2-tiny-random)" "$TMP/c6" && pass model_by_name || fail model_by_name "$(head -n 1 "$TMP/c6")"
# context: the training length (131072) limited to 16384, halved when 8 rows of KV do not fit in
# the memory left after weights and prompt cache; rows cut when even 2048 does not fit
MEM=1G cfg -m "$BIG" >"$TMP/c7"
grep -q "^ctx *16384 *(model n_ctx_train 131072, automatic limit 16384" "$TMP/c7" && pass ctx_automatic_limit ||
  fail ctx_automatic_limit "$(grep ^ctx "$TMP/c7")"
MEM=200M cfg -m "$BIG" >"$TMP/c8"
grep -q "^ctx *8192 *(model n_ctx_train 131072, capped by machine RAM" "$TMP/c8" && pass ctx_capped_by_ram ||
  fail ctx_capped_by_ram "$(grep ^ctx "$TMP/c8")"
MEM=30M cfg -m "$BIG" >"$TMP/c9"
if grep -q "^ctx *2048 " "$TMP/c9" && grep -q "^batch *2 *(machine: the KV of 2 row(s) fits" "$TMP/c9"; then pass rows_capped_by_ram; else
  fail rows_capped_by_ram "$(grep -e ^ctx -e ^batch "$TMP/c9")"; fi
MEM=30M cfg -m "$BIG" -c 1000 --batch 5 --port 9999 >"$TMP/c10"
if grep -q "^ctx *1000 *(flag -c)" "$TMP/c10" && grep -q "^batch *5 *(flag --batch)" "$TMP/c10" &&
   grep -q "^port *9999 *(flag --port)" "$TMP/c10"; then pass config_flags_win; else fail config_flags_win "$(cat "$TMP/c10")"; fi
grep -q "^open browser *no *(not a terminal)" "$TMP/c10" && pass config_browser_not_tty || fail config_browser_not_tty

# ---- serving without -m ----
# wait_listen FILE: the port from "listening on http://HOST:PORT" (polls up to ~20 s), or nothing
wait_listen() {
  i=0
  while [ $i -lt 200 ]; do
    p=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$1" 2>/dev/null)
    [ -n "$p" ] && { echo "$p"; return; }
    grep -q "stopped\|cannot" "$1" 2>/dev/null && return
    i=$((i + 1)); sleep 0.1
  done
}
# stop PID: SIGTERM, then its exit status
stop() { kill -TERM "$1" 2>/dev/null; wait "$1"; }

env HOME="$H" KILN_MODELS="$X:$TMP/single.gguf" KILN_MODEL= KILN_PORT= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= \
    DISPLAY= WAYLAND_DISPLAY= KILN_TEST_MEMORY=1G "$KILN" serve --port 0 >/dev/null 2>"$TMP/s1.err" &
pid=$!
port=$(wait_listen "$TMP/s1.err")
if [ -n "$port" ] && curl -s "http://127.0.0.1:$port/health" | grep -q ok &&
   curl -s "http://127.0.0.1:$port/v1/models" | grep -q '"big-F32"'; then pass serve_without_m_serves; else
  fail serve_without_m_serves "$(cat "$TMP/s1.err")"; fi
stop $pid; st=$?
[ $st -eq 0 ] && pass serve_without_m_sigterm_exit0 || fail serve_without_m_sigterm_exit0 "exit $st"
grep -q "discovered acme/big-GGUF:big-F32" "$TMP/s1.err" && pass serve_says_which_model || fail serve_says_which_model
if grep -q "$(printf '\r')" "$TMP/s1.err" || grep -q "loading" "$TMP/s1.err"; then fail no_progress_bar_without_tty; else
  pass no_progress_bar_without_tty; fi

# a port taken by another listener: the default is skipped (KILN_PORT stands for 8080 here),
# an explicit --port fails
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$TMP/lport" &
lpid=$!
i=0; while [ ! -s "$TMP/lport" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
LP=$(cat "$TMP/lport")
if [ -z "$LP" ]; then
  skip port_fallback "the python3 listener did not start"
else
  env HOME="$H" KILN_PORT="$LP" KILN_MODELS= KILN_MODEL= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= DISPLAY= "$KILN" \
      >/dev/null 2>"$TMP/s2.err" &
  pid=$!
  port=$(wait_listen "$TMP/s2.err")
  if [ -n "$port" ] && [ "$port" != "$LP" ] && grep -q "port $LP is in use; using port $port" "$TMP/s2.err" &&
     curl -s "http://127.0.0.1:$port/health" | grep -q ok; then pass port_fallback; else
    fail port_fallback "listener $LP, got '$port': $(cat "$TMP/s2.err")"; fi
  stop $pid >/dev/null
  k serve -m "$S" --port "$LP" >/dev/null 2>"$TMP/s3.err"; st=$?
  if [ $st -eq 1 ] && grep -q "port $LP on 127.0.0.1 is already in use" "$TMP/s3.err" && ! grep -q "listening" "$TMP/s3.err"; then
    pass explicit_taken_port_exit1; else fail explicit_taken_port_exit1 "exit $st: $(cat "$TMP/s3.err")"; fi
fi
kill $lpid 2>/dev/null; wait $lpid 2>/dev/null

# ---- progress bar and browser on a terminal (script(1) gives the command a pty) ----
"$KILN" run -m "$BIG" -n 1 -p hi >/dev/null 2>"$TMP/r.err"
if grep -q "loading" "$TMP/r.err" || grep -q "$(printf '\r')" "$TMP/r.err"; then fail run_no_progress_without_tty "$(cat "$TMP/r.err")"; else
  pass run_no_progress_without_tty; fi
if ! command -v script >/dev/null 2>&1 || ! script -qec true /dev/null </dev/null >/dev/null 2>&1; then
  skip progress_bar_on_tty "no working script(1)"
  skip browser_opened_on_tty "no working script(1)"
else
  script -qec "$KILN run -m $BIG -n 1 -p hi" /dev/null </dev/null >"$TMP/tty.out" 2>&1
  if grep -q "loading big-F32.gguf \[#*\] 100%" "$TMP/tty.out"; then pass progress_bar_on_tty; else
    fail progress_bar_on_tty "$(head -c 300 "$TMP/tty.out")"; fi
  # a fake xdg-open records the URL it was asked to open
  printf '#!/bin/sh\necho "$1" >>"%s/opened"\n' "$TMP" >"$TMP/bin/xdg-open"
  chmod +x "$TMP/bin/xdg-open"
  for mode in open no-open; do
    rm -f "$TMP/opened"
    flag=; [ $mode = no-open ] && flag=--no-open
    env PATH="$TMP/bin:$PATH" DISPLAY=:99 script -qec "exec $KILN serve -m $S --port 0 $flag" /dev/null </dev/null \
        >"$TMP/b.out" 2>&1 &
    spid=$!
    port=$(wait_listen "$TMP/b.out")
    if [ $mode = open ]; then
      i=0; while [ ! -s "$TMP/opened" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
      if [ -n "$port" ] && grep -q "^http://127.0.0.1:$port/$" "$TMP/opened" 2>/dev/null; then pass browser_opened_on_tty; else
        fail browser_opened_on_tty "port '$port', opened '$(cat "$TMP/opened" 2>/dev/null)': $(head -c 300 "$TMP/b.out")"; fi
    else
      [ -n "$port" ] && curl -s "http://127.0.0.1:$port/health" >/dev/null
      if [ -n "$port" ] && [ ! -e "$TMP/opened" ]; then pass no_open_flag; else fail no_open_flag "port '$port'"; fi
    fi
    kpid=$(pgrep -P $spid 2>/dev/null | head -n 1)
    if [ -n "$kpid" ]; then kill -TERM "$kpid"; else kill -TERM $spid; fi
    wait $spid || true # its status is script(1)'s: serve_without_m_sigterm_exit0 checks kiln's own
  done
fi
