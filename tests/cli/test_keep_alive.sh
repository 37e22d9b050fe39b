# test_keep_alive.sh - Ollama's keep_alive on the model pool of `kiln serve` (pool.c, supervise.c,
# ollama.c), over loopback with curl: one server isolated, one without isolation, serving
# stories260K (the default model) and a kiln-gen tiny model found through KILN_MODELS. Checks: a
# value that is not a duration, a number or null is a 400 in Ollama's error shape; a model loaded
# with keep_alive "2s" shows expires_at about 2 s ahead in /api/ps (the default model: 2100) and is
# unloaded once idle that long; keep_alive 0 on a generation unloads its model right after the
# answer; Ollama's unload call ({"model", "keep_alive": 0}, no prompt) answers done_reason "unload"
# and unloads, and for a model that is not loaded answers without loading it; with no model loaded
# /api/ps is empty and /health is 200; a negative keep_alive keeps a model (2100); a number is
# seconds. Bounded: two servers, ~25 requests, each wait a few seconds at most.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
GEN="$BUILD/kiln-gen"
if [ ! -f "$M" ] || [ ! -x "$GEN" ]; then skip keep_alive_tests "no $M or $GEN"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip keep_alive_tests "curl is needed"; exit 0; fi

mkdir -p "$TMP/models" "$TMP/home"
export HOME="$TMP/home" KILN_MODELS="$TMP/models" HF_HUB_CACHE="$TMP/home/hf" XDG_CACHE_HOME="$TMP/home/cache"
unset KILN_MODEL HF_HOME
"$GEN" --preset tiny-qwen2 --seed 5 -o "$TMP/models/tiny.gguf" >/dev/null 2>&1 || { fail keep_alive_gen; exit 0; }

start() {
  : >"$TMP/s.err" # no earlier server's "listening on" line (the new process may not have truncated it yet)
  "$KILN" serve -m "$M" --port 0 --no-open "$@" >/dev/null 2>"$TMP/s.err" &
  pid=$!
  i=0
  while [ $i -lt 200 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do sleep 0.1; i=$((i + 1)); done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)
  base="http://127.0.0.1:$port"
}
stop() { kill -TERM $pid; wait $pid; }
children() { ps -o pid= --ppid "$pid" 2>/dev/null | wc -l | tr -d ' '; }
# wait_for WANT SECS CMD...: waits until CMD prints exactly WANT (up to SECS s); true when it does.
wait_for() {
  want=$1 secs=$2 i=0
  shift 2
  while [ $i -lt $((secs * 10)) ]; do
    [ "$("$@")" = "$want" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  return 1
}
# wait_children N SECS: until the server has N engine children (an unloaded model leaves /api/ps
# before its child has exited and been reaped).
wait_children() { wait_for "$1" "$2" children; }
J='Content-Type: application/json'
# req PATH BODY OUT: POST; prints the status, the body in OUT.
req() { curl -s --max-time 30 -o "$3" -w '%{http_code}' -H "$J" --data-binary "$2" "$base$1"; }
# ps_names: the names /api/ps lists, sorted, space-separated.
ps_names() {
  curl -s --max-time 10 "$base/api/ps" >"$TMP/ps.json"
  python3 -c 'import json,sys; print(" ".join(sorted(m["name"] for m in json.load(open(sys.argv[1]))["models"])))' \
    "$TMP/ps.json" 2>/dev/null
}
# wait_ps WANT SECS: until /api/ps lists exactly WANT.
wait_ps() { wait_for "$1" "$2" ps_names; }
# expires NAME: seconds from now until NAME's expires_at in /api/ps (integer; 2100 gives a huge one)
expires() {
  curl -s --max-time 10 "$base/api/ps" >"$TMP/ps2.json"
  python3 - "$TMP/ps2.json" "$1" <<'EOF'
import datetime, json, sys
for m in json.load(open(sys.argv[1]))["models"]:
    if m["name"] == sys.argv[2]:
        t = m["expires_at"]
        base, frac = t.rstrip("Z").split(".") if "." in t else (t.rstrip("Z"), "0")
        at = datetime.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
        now = datetime.datetime.now(datetime.timezone.utc)
        print(int(round((at - now).total_seconds() + float("0." + frac))))
EOF
}
G='"prompt":"Once upon a time","stream":false,"options":{"num_predict":4,"temperature":0}'

# ---- isolated ----
start
if [ -z "$port" ]; then fail keep_alive_server_starts "$(head -c 400 "$TMP/s.err")"; exit 0; fi
c1=$(req /api/generate '{"model":"tiny","prompt":"hi","keep_alive":"5 minutes"}' "$TMP/e1")
c2=$(req /api/chat '{"model":"stories260K","messages":[{"role":"user","content":"hi"}],"keep_alive":true}' "$TMP/e2")
c3=$(req /api/embed '{"model":"stories260K","input":"hi","keep_alive":{"s":1}}' "$TMP/e3")
if [ "$c1" = 400 ] && [ "$c2" = 400 ] && [ "$c3" = 400 ] && grep -q '^{"error":"keep_alive must be a duration' "$TMP/e1" &&
   grep -q '^{"error":"keep_alive' "$TMP/e2"; then pass keep_alive_bad_value_400; else
  fail keep_alive_bad_value_400 "$c1 $c2 $c3: $(head -c 200 "$TMP/e1") $(head -c 200 "$TMP/e2")"; fi

c=$(req /api/generate '{"model":"tiny","keep_alive":"2s"}' "$TMP/l1")
left=$(expires tiny:latest); kept=$(expires stories260K:latest)
if [ "$c" = 200 ] && grep -q '"done_reason":"load"' "$TMP/l1" && [ "${left:-99}" -ge 0 ] && [ "${left:-99}" -le 2 ] &&
   [ "${kept:-0}" -gt 100000000 ]; then pass keep_alive_ps_expires_at; else
  fail keep_alive_ps_expires_at "$c $(head -c 200 "$TMP/l1"); tiny in ${left:-?} s, default in ${kept:-?} s"; fi
if wait_ps "stories260K:latest" 8 && grep -q "unloading model 'tiny' (idle for its keep_alive, 2 s)" "$TMP/s.err" &&
   wait_children 1 5; then pass keep_alive_duration_unloads; else
  fail keep_alive_duration_unloads "ps: $(ps_names); $(children) engines; $(tail -c 300 "$TMP/s.err")"; fi

c=$(req /api/generate "{\"model\":\"tiny\",$G,\"keep_alive\":0}" "$TMP/g1")
if [ "$c" = 200 ] && grep -q '"done":true' "$TMP/g1" && wait_ps "stories260K:latest" 5; then
  pass keep_alive_zero_unloads_after_response; else
  fail keep_alive_zero_unloads_after_response "$c $(head -c 200 "$TMP/g1"); ps: $(ps_names)"; fi

c=$(req /api/chat '{"model":"stories260K","messages":[],"keep_alive":0}' "$TMP/u1")
if [ "$c" = 200 ] && grep -q '"done_reason":"unload"' "$TMP/u1" && grep -q '"message":{' "$TMP/u1" && wait_ps "" 5 &&
   wait_children 0 5; then pass keep_alive_unload_call; else
  fail keep_alive_unload_call "$c $(head -c 200 "$TMP/u1"); ps: $(ps_names); $(children) engines"; fi
h=$(curl -s --max-time 10 -o "$TMP/h" -w '%{http_code}' "$base/health")
c=$(req /api/generate '{"model":"tiny","keep_alive":0}' "$TMP/u2")
if [ "$h" = 200 ] && [ "$c" = 200 ] && grep -q '"model":"tiny","created_at"' "$TMP/u2" &&
   grep -q '"done_reason":"unload"' "$TMP/u2" && wait_children 0 5; then pass keep_alive_nothing_loaded; else
  fail keep_alive_nothing_loaded "health $h; $c $(head -c 200 "$TMP/u2"); $(children) engines"; fi

c=$(req /api/generate "{\"model\":\"tiny\",$G,\"keep_alive\":\"-1m\"}" "$TMP/g2")
left=$(expires tiny:latest)
if [ "$c" = 200 ] && [ "${left:-0}" -gt 100000000 ]; then pass keep_alive_negative_keeps; else
  fail keep_alive_negative_keeps "$c $(head -c 200 "$TMP/g2"); tiny in ${left:-?} s"; fi
stop

# ---- without isolation ----
start --no-isolation
c=$(req /api/generate "{\"model\":\"tiny\",$G,\"keep_alive\":1}" "$TMP/g3")
if [ "$c" = 200 ] && wait_ps "stories260K:latest" 6 &&
   grep -q "unloading model 'tiny' (idle for its keep_alive, 1 s)" "$TMP/s.err"; then pass keep_alive_inproc_seconds; else
  fail keep_alive_inproc_seconds "$c $(head -c 200 "$TMP/g3"); ps: $(ps_names)"; fi
c=$(req /api/generate '{"model":"stories260K","keep_alive":0}' "$TMP/u3")
h=$(curl -s --max-time 10 -o "$TMP/h" -w '%{http_code}' "$base/health")
if [ "$c" = 200 ] && grep -q '"done_reason":"unload"' "$TMP/u3" && wait_ps "" 5 && [ "$h" = 200 ]; then
  pass keep_alive_inproc_unload_call; else
  fail keep_alive_inproc_unload_call "$c $(head -c 200 "$TMP/u3"); ps: $(ps_names); health $h"; fi
c=$(req /api/generate "{\"model\":\"stories260K\",$G}" "$TMP/g4")
c2=$(req /api/generate '{"model":"stories260K","keep_alive":"1x"}' "$TMP/e4")
if [ "$c" = 200 ] && grep -q '"response":"' "$TMP/g4" && [ "$(ps_names)" = "stories260K:latest" ] && [ "$c2" = 400 ]; then
  pass keep_alive_inproc_reloads; else
  fail keep_alive_inproc_reloads "$c $(head -c 200 "$TMP/g4"); ps: $(ps_names); bad value: $c2"; fi
stop
