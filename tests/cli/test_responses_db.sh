# test_responses_db.sh - stored responses of /v1/responses kept in the SSD tier's SQLite database
# (kiln serve --ssd-cache DIR: DIR/responses.sqlite), over loopback with curl: a response stored by
# one server is returned by GET and continued with previous_response_id by the next server on the
# same DIR; a DELETE is still a 404 after a restart; a damaged responses.sqlite gives a warning on
# stderr and the server still serves and stores (in memory). Bounded: four servers, ~12 requests,
# curl --max-time on each.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip responses_db_tests "no $M"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip responses_db_tests "curl is needed"; exit 0; fi
D="$TMP/ssd"

# start: starts kiln serve --ssd-cache $D on an ephemeral port; sets $pid, $base (stderr in $TMP/s.err).
start() {
  : >"$TMP/s.err"
  "$KILN" serve -m "$M" --port 0 --no-open --ssd-cache "$D" >/dev/null 2>"$TMP/s.err" &
  pid=$!
  i=0
  while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do
    sleep 0.1; i=$((i + 1))
  done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)
  base="http://127.0.0.1:$port"
}
# stop: SIGTERM, waits for the exit (up to 20 s).
stop() {
  kill -TERM $pid 2>/dev/null
  i=0
  while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
}
# req METHOD PATH [BODY]: prints the status, body in $TMP/body.
req() {
  if [ -n "${3:-}" ]; then
    curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' -X "$1" -H 'Content-Type: application/json' \
      --data-binary "$3" "$base$2"
  else curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' -X "$1" "$base$2"; fi
}
rid() { sed -n 's/^{"id":"\(resp_[A-Za-z0-9]*\)".*/\1/p' "$TMP/body"; }

# 1. store two responses, then restart on the same directory
start
if [ -z "$port" ]; then fail responses_db_server_starts "$(head -c 400 "$TMP/s.err")"; exit 0; fi
c=$(req POST /v1/responses '{"input":"Tell me a story","max_output_tokens":6}')
id1=$(rid); cp "$TMP/body" "$TMP/first"
c2=$(req POST /v1/responses '{"input":"Once upon a time","max_output_tokens":6}')
id2=$(rid)
if [ "$c" = 200 ] && [ "$c2" = 200 ] && [ -n "$id1" ] && [ -n "$id2" ] && [ -f "$D/responses.sqlite" ]; then
  pass responses_db_stored; else fail responses_db_stored "$c $c2 '$id1' '$id2' $(head -c 300 "$TMP/body")"; fi
stop
start

# 2. after the restart: GET returns the same response; previous_response_id continues it
c=$(req GET "/v1/responses/$id1")
if [ "$c" = 200 ] && cmp -s "$TMP/body" "$TMP/first"; then pass responses_db_get_after_restart; else
  fail responses_db_get_after_restart "$c $(head -c 300 "$TMP/body")"; fi
c=$(req POST /v1/responses "{\"input\":\"And then?\",\"max_output_tokens\":4,\"previous_response_id\":\"$id1\"}")
if [ "$c" = 200 ] && grep -q "\"previous_response_id\":\"$id1\"" "$TMP/body"; then
  pass responses_db_continue_after_restart; else fail responses_db_continue_after_restart "$c $(head -c 300 "$TMP/body")"; fi
c=$(req POST /v1/responses '{"input":"x","previous_response_id":"resp_none"}')
if [ "$c" = 400 ] && grep -q previous_response_not_found "$TMP/body"; then pass responses_db_unknown_id_400; else
  fail responses_db_unknown_id_400 "$c $(head -c 300 "$TMP/body")"; fi

# 3. DELETE (of a response only on disk), then GET = 404, also after another restart
c=$(req DELETE "/v1/responses/$id2")
c2=$(req GET "/v1/responses/$id2")
stop
start
c3=$(req GET "/v1/responses/$id2")
c4=$(req DELETE "/v1/responses/$id2")
c5=$(req GET "/v1/responses/$id1")
if [ "$c" = 200 ] && [ "$c2" = 404 ] && [ "$c3" = 404 ] && [ "$c4" = 404 ] && [ "$c5" = 200 ]; then
  pass responses_db_delete_after_restart; else fail responses_db_delete_after_restart "$c $c2 $c3 $c4 $c5"; fi
stop

# 4. a damaged database: a warning, and the server serves and stores in memory
rm -f "$D"/responses.sqlite*
head -c 8192 /dev/urandom >"$D/responses.sqlite"
start
c=$(req POST /v1/responses '{"input":"Tell me a story","max_output_tokens":4}')
id3=$(rid)
c2=$(req GET "/v1/responses/$id3")
if [ "$c" = 200 ] && [ "$c2" = 200 ] && grep -q "warning: stored responses: cannot use .*responses.sqlite" "$TMP/s.err"; then
  pass responses_db_damaged_memory_only; else
  fail responses_db_damaged_memory_only "$c $c2 $(grep -i responses "$TMP/s.err" | head -c 300)"; fi
stop
