# test_isolation.sh - crash isolation of `kiln serve` (src/server/isolate.h), over loopback with curl:
# the engine runs in a child process; --debug-crash lets a request abort it (X-Kiln-Debug-Crash: N,
# at its N-th token, 0: in the handler). A crash mid-request answers 500 in the API's error shape
# naming the signal, a crash mid-stream ends the stream with an error event in its format, /health
# says "restarting" while no engine serves, the next request is served by a new engine, no zombie
# is left and the supervisor's descriptors come back to where they were; SIGTERM stops both
# processes (exit 0), kill -9 of the supervisor takes the engine with it, too many fast crashes in
# a row make the supervisor give up (exit 1), and --no-isolation keeps one process. Bounded: three
# servers, ~40 requests, curl --max-time on each.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip isolation_tests "no $M"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip isolation_tests "curl is needed"; exit 0; fi

# start ARGS...: starts kiln serve on an ephemeral port; sets $pid, $base (stderr in $TMP/s.err).
start() {
  : >"$TMP/s.err" # no earlier server's "listening on" line (the new process may not have truncated it yet)
  "$KILN" serve -m "$M" --port 0 --no-open "$@" >/dev/null 2>"$TMP/s.err" &
  pid=$!
  wait_line "listening on" 1
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)
  base="http://127.0.0.1:$port"
}
# wait_line TEXT N: waits (up to 20 s) until stderr has N lines with TEXT, or the server is gone.
wait_line() {
  i=0
  while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null && [ "$(grep -c "$1" "$TMP/s.err")" -lt "$2" ]; do
    sleep 0.1; i=$((i + 1))
  done
}
child() { ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ' | head -n 1; }
nfds() { ls "/proc/$pid/fd" 2>/dev/null | wc -l; }
J='Content-Type: application/json'
CHAT='{"messages":[{"role":"user","content":"hi"}],"max_tokens":40}'
# req PATH BODY [curl args]: POST; prints the status, body in $TMP/body.
req() {
  p=$1; b=$2; shift 2
  curl -s -N --max-time 20 -o "$TMP/body" -w '%{http_code}' -H "$J" --data-binary "$b" "$@" "$base$p"
}
# healthy: waits (up to 20 s) until /health answers 200; prints what it saw on the way.
healthy() {
  seen=""
  i=0
  while [ $i -lt 200 ]; do
    h=$(curl -s --max-time 5 -w ' %{http_code}' "$base/health")
    seen="$seen|$h"
    [ "${h##* }" = 200 ] && break
    sleep 0.1; i=$((i + 1))
  done
  echo "$seen"
}

start --debug-crash
if [ -z "$port" ]; then fail isolation_server_starts "$(head -c 400 "$TMP/s.err")"; exit 0; fi
c0=$(child)
if [ -n "$c0" ] && [ "$c0" != "$pid" ]; then pass isolation_engine_in_child; else
  fail isolation_engine_in_child "no child process of $pid"; fi
c=$(req /v1/chat/completions "$CHAT")
fds0=$(nfds)
if [ "$c" = 200 ]; then pass isolation_serves; else fail isolation_serves "$c $(head -c 300 "$TMP/body")"; fi

# 1. a crash mid-generation of a request that is not streamed: 500 naming the signal
c=$(req /v1/chat/completions "$CHAT" -H 'X-Kiln-Debug-Crash: 3')
if [ "$c" = 500 ] && grep -q '"message":"the engine stopped: signal 6 (Aborted); restarting","type":"server_error"' "$TMP/body"; then
  pass isolation_crash_non_stream_500; else fail isolation_crash_non_stream_500 "$c $(head -c 300 "$TMP/body")"; fi
h=$(healthy)
c=$(req /v1/chat/completions "$CHAT")
c1=$(child)
if [ "$c" = 200 ] && [ -n "$c1" ] && [ "$c1" != "$c0" ]; then pass isolation_next_request_served; else
  fail isolation_next_request_served "$c, engine $c0 -> $c1, health $h"; fi

# 2. mid-stream: the stream has begun (200, a chunk) and ends with an error event
c=$(req /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":40,"stream":true}' -H 'X-Kiln-Debug-Crash: 4')
if [ "$c" = 200 ] && grep -q '^data: {"id":"chatcmpl' "$TMP/body" &&
   tail -n 2 "$TMP/body" | grep -q '^data: {"error":{"message":"the engine stopped: signal 6 (Aborted); restarting"'; then
  pass isolation_crash_mid_stream; else fail isolation_crash_mid_stream "$c $(tail -c 400 "$TMP/body")"; fi
healthy >/dev/null

# 3. Anthropic's stream: its error event
c=$(req /v1/messages '{"model":"claude-x","max_tokens":40,"stream":true,"messages":[{"role":"user","content":"hi"}]}' -H 'X-Kiln-Debug-Crash: 4')
if [ "$c" = 200 ] && grep -q '^event: error' "$TMP/body" &&
   grep -q '^data: {"type":"error","error":{"type":"api_error","message":"the engine stopped: signal 6' "$TMP/body"; then
  pass isolation_crash_anthropic_stream; else fail isolation_crash_anthropic_stream "$c $(tail -c 400 "$TMP/body")"; fi
healthy >/dev/null

# 4. Ollama's route, not streamed: its error shape; right after, /health says "restarting" (the
#    fourth fast crash waits 800 ms before the restart), and a request sent meanwhile waits for the
#    new engine
c=$(req /api/chat '{"model":"stories260K","stream":false,"messages":[{"role":"user","content":"hi"}]}' -H 'X-Kiln-Debug-Crash: 2')
cp "$TMP/body" "$TMP/ollama"
curl -s --max-time 20 -o /dev/null -w '%{http_code}' -H "$J" --data-binary "$CHAT" "$base/v1/chat/completions" >"$TMP/held" &
held=$!
h=$(healthy)
wait $held
if [ "$(cat "$TMP/held")" = 200 ]; then pass isolation_request_waits_for_restart; else
  fail isolation_request_waits_for_restart "status $(cat "$TMP/held")"; fi
if [ "$c" = 500 ] && grep -q '^{"error":"the engine stopped: signal 6 (Aborted); restarting"}$' "$TMP/ollama"; then
  pass isolation_crash_ollama; else fail isolation_crash_ollama "$c $(head -c 300 "$TMP/ollama")"; fi
case "$h" in
  '|{"status":"restarting"} 503'*'|{"status":"ok"} 200') pass isolation_health_restarting ;;
  *) fail isolation_health_restarting "$h" ;;
esac

# after four crashes in a row: served, no zombie, the supervisor's descriptors as before
c=$(req /v1/chat/completions "$CHAT")
zombies=$(ps -o stat= --ppid "$pid" | grep -c Z)
fds1=$(nfds)
if [ "$c" = 200 ] && [ "$zombies" = 0 ] && [ "$fds1" = "$fds0" ]; then pass isolation_no_zombie_no_fd_leak; else
  fail isolation_no_zombie_no_fd_leak "status $c, zombies $zombies, fds $fds0 -> $fds1"; fi
if [ "$(grep -c 'the engine stopped: signal 6 (Aborted); restarting' "$TMP/s.err")" = 4 ]; then
  pass isolation_crash_logged; else fail isolation_crash_logged "$(head -c 600 "$TMP/s.err")"; fi
st=$(curl -s --max-time 10 "$base/stats")
me=$(curl -s --max-time 10 "$base/metrics" | grep '^kiln_engine_restarts_total')
case "$st" in
  *'"engine_restarts":4'*) [ "$me" = "kiln_engine_restarts_total 4" ] && pass isolation_restarts_counted ||
    fail isolation_restarts_counted "metrics: '$me'" ;;
  *) fail isolation_restarts_counted "$(printf '%s' "$st" | head -c 300)" ;;
esac

# SIGTERM: both processes stop, exit 0
c2=$(child)
kill -TERM $pid
wait $pid
st=$?
sleep 0.2
if [ $st = 0 ] && ! kill -0 "$c2" 2>/dev/null && grep -q "kiln serve: stopped" "$TMP/s.err"; then
  pass isolation_sigterm_stops_both; else fail isolation_sigterm_stops_both "exit $st, engine $c2 alive?"; fi

# kill -9 of the supervisor takes the engine with it
start
c3=$(child)
kill -9 $pid
wait $pid 2>/dev/null
i=0
while [ $i -lt 50 ] && [ -n "$c3" ] && kill -0 "$c3" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
if [ -n "$c3" ] && ! kill -0 "$c3" 2>/dev/null; then pass isolation_kill9_takes_engine; else
  fail isolation_kill9_takes_engine "engine '$c3' still running"; fi

# Fast crashes in a row: the supervisor gives up (exit 1); the Responses API's stream error event,
# and a crash in the handler before any token, on the way.
start --debug-crash
# Every request in flight gets the error: three streams and one plain request, long ones, while a
# fifth makes the engine abort.
clients=""
for k in 1 2 3; do
  curl -s -N --max-time 30 -o "$TMP/inflight$k" -H "$J" "$base/v1/completions" \
    --data-binary '{"prompt":"Once","max_tokens":2000,"ignore_eos":true,"stream":true}' &
  clients="$clients $!"
done
curl -s --max-time 30 -o "$TMP/inflight4" -H "$J" "$base/v1/completions" \
  --data-binary '{"prompt":"Once","max_tokens":2000,"ignore_eos":true}' &
clients="$clients $!"
sleep 1
req /v1/completions '{"prompt":"Once","max_tokens":50,"stream":true}' -H 'X-Kiln-Debug-Crash: 10' >/dev/null
for k in $clients; do wait "$k"; done
bad=""
for k in 1 2 3; do
  tail -n 2 "$TMP/inflight$k" | grep -q '^data: {"error":{"message":"the engine stopped: signal 6' || bad="$bad stream$k"
done
grep -q '^{"error":{"message":"the engine stopped: signal 6' "$TMP/inflight4" || bad="$bad plain"
if [ -z "$bad" ]; then pass isolation_crash_fails_all_in_flight; else
  fail isolation_crash_fails_all_in_flight "no error for$bad: $(tail -c 200 "$TMP/inflight4")"; fi
healthy >/dev/null
c=$(req /v1/responses '{"input":"hi","max_output_tokens":60,"stream":true}' -H 'X-Kiln-Debug-Crash: 12')
if [ "$c" = 200 ] && grep -q '^event: error' "$TMP/body" && grep -q '"type":"error","code":"server_error","message":"the engine stopped' "$TMP/body"; then
  pass isolation_crash_responses_stream; else fail isolation_crash_responses_stream "$c $(tail -c 400 "$TMP/body")"; fi
healthy >/dev/null
c=$(req /v1/completions '{"prompt":"hi","max_tokens":4}' -H 'X-Kiln-Debug-Crash: 0')
if [ "$c" = 500 ] && grep -q 'the engine stopped: signal 6' "$TMP/body"; then pass isolation_crash_in_handler; else
  fail isolation_crash_in_handler "$c $(head -c 300 "$TMP/body")"; fi
k=3
while [ $k -lt 8 ] && kill -0 $pid 2>/dev/null; do
  healthy >/dev/null
  req /v1/completions '{"prompt":"hi","max_tokens":4}' -H 'X-Kiln-Debug-Crash: 0' >/dev/null
  k=$((k + 1))
done
i=0
while [ $i -lt 100 ] && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
wait $pid
st=$?
if [ $st = 1 ] && grep -q "the engine stopped 5 times in a row within 10 s of starting; giving up" "$TMP/s.err"; then
  pass isolation_gives_up; else fail isolation_gives_up "exit $st: $(tail -c 400 "$TMP/s.err")"; fi

# --no-isolation: one process, the debug header ignored without --debug-crash
start --no-isolation
c=$(req /v1/chat/completions "$CHAT" -H 'X-Kiln-Debug-Crash: 1')
st=$(curl -s --max-time 10 "$base/stats")
if [ -z "$(child)" ] && [ "$c" = 200 ] && [ "${st#*engine_restarts}" = "$st" ]; then pass isolation_off_one_process; else
  fail isolation_off_one_process "child '$(child)', status $c, stats $(printf '%s' "$st" | head -c 200)"; fi
kill -TERM $pid; wait $pid
