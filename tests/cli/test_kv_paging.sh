#!/bin/sh
# test_kv_paging.sh - `kiln serve --kv-paging on|off`: --print-config names the choice, a bad value
# is a usage error, and a live server (curl on loopback) answers the same greedy completions with
# paging on (the default) and off, prefix-cache hits included, /stats reporting the block pool only
# when paging is on.
. "$(dirname "$0")/lib.sh"
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip kv_paging "no $M"; exit 0; fi

"$KILN" serve -m "$M" -c 256 --print-config >"$TMP/on" 2>&1
"$KILN" serve -m "$M" -c 256 --kv-paging off --print-config >"$TMP/off" 2>&1
if grep -q "^kv-paging .*on, blocks of 16 positions .*(default)" "$TMP/on" &&
   grep -q "^kv-paging .*off .*(flag --kv-paging)" "$TMP/off"; then pass kv_paging_print_config
else fail kv_paging_print_config "$(grep kv-paging "$TMP/on" "$TMP/off" | head -c 300)"; fi
expect_exit kv_paging_bad 2 "$KILN" serve -m "$M" --kv-paging maybe --print-config

if ! command -v curl >/dev/null 2>&1; then skip kv_paging_serve "curl is needed"; exit 0; fi
# serve FLAGS...: starts a server on a free port (--port 0; the port read from its "listening on"
# line), sends 3 greedy completions (the second repeats the first's long prompt: a prefix hit), writes
# their texts to $TMP/texts.$1 and /stats to $TMP/stats.$1.
serve() {
  tag=$1; shift
  : >"$TMP/log.$tag"
  "$KILN" serve -m "$M" -c 256 -t 1 --port 0 --no-open --no-isolation "$@" >"$TMP/log.$tag" 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/log.$tag"; do
    sleep 0.1; i=$((i + 1))
  done
  PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/log.$tag" | head -n 1)
  : >"$TMP/texts.$tag"
  for p in "Once upon a time, there was a little girl named Lily. She liked to play in the park with her" \
           "Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog" \
           "The sun was"; do
    { curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/completions" \
      -d "{\"prompt\": \"$p\", \"max_tokens\": 24, \"temperature\": 0}"; echo; } |
      sed -n 's/.*"text": *"\([^"]*\)".*/\1/p' >>"$TMP/texts.$tag"
  done
  curl -s "http://127.0.0.1:$PORT/stats" >"$TMP/stats.$tag"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}
serve on
serve off --kv-paging off
if [ "$(wc -l <"$TMP/texts.on")" -eq 3 ] && cmp -s "$TMP/texts.on" "$TMP/texts.off"; then pass kv_paging_same_output
else fail kv_paging_same_output "$(cat "$TMP/texts.on" "$TMP/texts.off" "$TMP/log.on" | head -c 600)"; fi
if grep -q '"kv_pool": *{[^}]*"enabled": *true[^}]*"blocks_used": *[1-9]' "$TMP/stats.on" &&
   grep -q '"kv_pool": *{ *"enabled": *false' "$TMP/stats.off"; then pass kv_paging_stats
else fail kv_paging_stats "$(head -c 400 "$TMP/stats.on")"; fi
