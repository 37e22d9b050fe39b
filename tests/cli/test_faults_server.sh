# test_faults_server.sh - two faults of `kiln serve` that cost nothing but time if unnoticed, over
# loopback with curl:
#   - a client of a request that is not streamed goes away before the answer: its generation is
#     cancelled (both with and without engine isolation), seen in /stats as a completion with
#     fewer tokens than it would have made, and the engine idle again;
#   - a hung engine (--debug-crash's header X-Kiln-Debug-Hang: N stops the engine's thread at the
#     N-th token): the supervisor's watchdog (--engine-timeout 4) kills and restarts it, the request
#     in flight gets a 500 naming the timeout (a stream: an error event), and the next is served.
# Bounded: two servers, ~10 requests, curl --max-time on each; no wall-clock assertion (the times
# above are limits a passing run stays far from).
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip faults_server_tests "no $M"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip faults_server_tests "curl is needed"; exit 0; fi

start() {
  : >"$TMP/s.err" # no earlier server's "listening on" line (the new process may not have truncated it yet)
  "$KILN" serve -m "$M" --port 0 --no-open -c 4096 "$@" >/dev/null 2>"$TMP/s.err" &
  pid=$!
  i=0
  while [ $i -lt 600 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do
    sleep 0.1; i=$((i + 1))
  done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)
  base="http://127.0.0.1:$port"
  [ -n "$port" ] || stop # not up in time: not left running
}
stop() { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; }
J='Content-Type: application/json'
# stat KEY: an integer field of /stats
stat() { curl -s --max-time 10 "$base/stats" | sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }
# idle: waits (up to 20 s) until the engine has no row and no queued request
idle() {
  i=0
  while [ $i -lt 200 ]; do
    [ "$(stat active)" = 0 ] && [ "$(stat queued)" = 0 ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}

# 1. disconnect of a request that is not streamed, in both modes
LONG='{"messages":[{"role":"user","content":"hi"}],"max_tokens":4000,"ignore_eos":true}'
for mode in isolated single; do
  if [ $mode = single ]; then start --no-isolation; else start; fi
  if [ -z "$port" ]; then fail "faults_disconnect_$mode" "no server: $(head -c 300 "$TMP/s.err")"; continue; fi
  c0=$(stat completions)
  # the client gives up after 0.3 s, long before 4000 tokens
  curl -s --max-time 0.3 -o /dev/null -H "$J" --data-binary "$LONG" "$base/v1/chat/completions"
  i=0
  while [ $i -lt 200 ] && [ "$(stat completions)" = "$c0" ]; do sleep 0.1; i=$((i + 1)); done
  gen=$(stat generated_tokens)
  if idle && [ "$(stat completions)" = $((c0 + 1)) ] && [ -n "$gen" ] && [ "$gen" -lt 4000 ]; then
    pass "faults_disconnect_cancels_$mode"
  else
    fail "faults_disconnect_cancels_$mode" "completions $c0 -> $(stat completions), generated $gen (4000: not cancelled)"
  fi
  # the server still serves
  c=$(curl -s --max-time 20 -o /dev/null -w '%{http_code}' -H "$J" \
    --data-binary '{"messages":[{"role":"user","content":"hi"}],"max_tokens":8}' "$base/v1/chat/completions")
  if [ "$c" = 200 ]; then pass "faults_disconnect_serves_after_$mode"; else fail "faults_disconnect_serves_after_$mode" "$c"; fi
  stop
done

# 2. the watchdog: a hung engine is killed and restarted, the request in flight gets a 500 (4 s:
#    long enough that a heartbeat thread starved by a loaded machine is not taken for a hang)
start --debug-crash --engine-timeout 4
if [ -z "$port" ]; then fail faults_watchdog_server "no server: $(head -c 300 "$TMP/s.err")"; exit 0; fi
CHAT='{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"ignore_eos":true}'
c=$(curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' -H "$J" -H 'X-Kiln-Debug-Hang: 3' --data-binary "$CHAT" \
  "$base/v1/chat/completions")
if [ "$c" = 500 ] && grep -q '"message":"the engine stopped: no progress for 4 s (--engine-timeout); restarting"' "$TMP/body"; then
  pass faults_watchdog_500; else fail faults_watchdog_500 "$c $(head -c 300 "$TMP/body")"; fi
if grep -q "the engine made no progress for 4 s" "$TMP/s.err"; then pass faults_watchdog_logged; else
  fail faults_watchdog_logged "$(tail -c 400 "$TMP/s.err")"; fi
# a stream: its error event
c=$(curl -s -N --max-time 30 -o "$TMP/body" -w '%{http_code}' -H "$J" -H 'X-Kiln-Debug-Hang: 3' \
  --data-binary '{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"ignore_eos":true,"stream":true}' \
  "$base/v1/chat/completions")
if [ "$c" = 200 ] && tail -n 2 "$TMP/body" | grep -q '^data: {"error":{"message":"the engine stopped: no progress for 4 s'; then
  pass faults_watchdog_stream; else fail faults_watchdog_stream "$c $(tail -c 300 "$TMP/body")"; fi
# the next request is served by a new engine (waiting for it if need be)
c=$(curl -s --max-time 30 -o "$TMP/body" -w '%{http_code}' -H "$J" --data-binary "$CHAT" "$base/v1/chat/completions")
if [ "$c" = 200 ]; then pass faults_watchdog_next_served; else fail faults_watchdog_next_served "$c $(head -c 300 "$TMP/body")"; fi
# an engine that is busy but progressing is left alone: a generation longer than the timeout
c=$(curl -s --max-time 60 -o "$TMP/body" -w '%{http_code}' -H "$J" \
  --data-binary '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"ignore_eos":true}' "$base/v1/chat/completions")
r=$(stat engine_restarts)
if [ "$c" = 200 ] && [ "$r" = 2 ]; then pass faults_watchdog_spares_progress; else
  fail faults_watchdog_spares_progress "$c, restarts $r (2 expected)"; fi
stop
