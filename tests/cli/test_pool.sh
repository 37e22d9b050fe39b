# test_pool.sh - the model pool of `kiln serve` (src/server/pool.c), over loopback with curl: one
# server serves stories260K (the default model) and a kiln-gen tiny model found through KILN_MODELS,
# each request answered by the model its "model" field names with the greedy text `kiln run` gives
# for that model (requests alternating, through OpenAI's and Ollama's routes, an alias, a path and
# a hosted API's name for the default); an unknown name is 404 in each API's shape; /v1/models,
# /api/ps and /stats show which are loaded; a crash in one model's engine answers its own request with a 500 while the other model
# keeps serving from the same engine process; with --max-models 1 concurrent first requests for a
# model wait for its load and all succeed, the least recently used model is unloaded and loaded
# again on demand, and a model that cannot get room while the other is busy gets 503 after
# --model-load-timeout; each model's SSD-tier entries are its own after a restart; and the same
# without isolation (all engines in one process). Bounded: four servers, ~45 requests, curl
# --max-time on each.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
GEN="$BUILD/kiln-gen"
if [ ! -f "$M" ] || [ ! -x "$GEN" ]; then skip pool_tests "no $M or $GEN"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip pool_tests "curl is needed"; exit 0; fi

# Only the models of this test are discovered.
mkdir -p "$TMP/models" "$TMP/home"
export HOME="$TMP/home" KILN_MODELS="$TMP/models" HF_HUB_CACHE="$TMP/home/hf" XDG_CACHE_HOME="$TMP/home/cache"
unset KILN_MODEL HF_HOME
"$GEN" --preset tiny-qwen2 --seed 5 -o "$TMP/models/tiny.gguf" >/dev/null 2>&1 || { fail pool_gen; exit 0; }
B="$TMP/models/tiny.gguf"

P="Once upon a time"
"$KILN" run -m "$M" -p "$P" -n 12 --temp 0 --ignore-eos >"$TMP/run_a" 2>/dev/null
"$KILN" run -m "$B" -p "$P" -n 12 --temp 0 --ignore-eos >"$TMP/run_b" 2>/dev/null
if cmp -s "$TMP/run_a" "$TMP/run_b"; then fail pool_models_differ "both models write the same text"; fi

# start ARGS...: starts kiln serve on an ephemeral port; sets $pid, $base (stderr in $TMP/s.err).
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
children() { ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ' | sort | tr '\n' ' '; }
J='Content-Type: application/json'
# req PATH BODY OUT [curl args]: POST; prints the status, the body in OUT.
req() {
  p=$1; b=$2; o=$3; shift 3
  curl -s --max-time 60 -o "$o" -w '%{http_code}' -H "$J" --data-binary "$b" "$@" "$base$p"
}
# cmpl MODEL OUT: a greedy completion of $P by MODEL ("" leaves the field out); prints the status,
# the text in OUT.
cmpl() {
  if [ -n "$1" ]; then f="\"model\":\"$1\","; else f=""; fi
  c=$(req /v1/completions "{$f\"prompt\":\"$P\",\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}" "$2.json")
  python3 -c 'import json,sys; sys.stdout.write(sys.argv[2]+json.load(open(sys.argv[1]))["choices"][0]["text"]+"\n")' \
    "$2.json" "$P" >"$2" 2>/dev/null
  echo "$c"
}
# same NAME STATUS FILE WANT: passes when the status is 200 and FILE equals WANT.
same() {
  if [ "$2" = 200 ] && cmp -s "$3" "$4"; then pass "$1"; else
    fail "$1" "status $2: '$(head -c 200 "$3.json")' want '$(head -c 100 "$4")'"; fi
}

# ---- isolated: two models, alternating; an alias; 404; listings; a crash in one ----
start --model-alias small=tiny --debug-crash --ssd-cache "$TMP/kv"
if [ -z "$port" ]; then fail pool_server_starts "$(head -c 400 "$TMP/s.err")"; exit 0; fi
c=$(cmpl stories260K "$TMP/a1"); same pool_default_model "$c" "$TMP/a1" "$TMP/run_a"
c=$(cmpl tiny "$TMP/b1"); same pool_second_model_loads "$c" "$TMP/b1" "$TMP/run_b"
c=$(cmpl "" "$TMP/a2"); same pool_no_model_is_default "$c" "$TMP/a2" "$TMP/run_a"
c=$(cmpl small "$TMP/b2"); same pool_alias "$c" "$TMP/b2" "$TMP/run_b"
c=$(cmpl gpt-4o "$TMP/a3"); same pool_hosted_name_is_default "$c" "$TMP/a3" "$TMP/run_a"
c=$(cmpl "$B" "$TMP/b3"); same pool_by_path "$c" "$TMP/b3" "$TMP/run_b"
c=$(req /api/generate "{\"model\":\"tiny:latest\",\"prompt\":\"$P\",\"stream\":false,\"raw\":true,\"options\":{\"temperature\":0,\"num_predict\":12}}" "$TMP/o1")
python3 -c 'import json,sys; sys.stdout.write(sys.argv[2]+json.load(open(sys.argv[1]))["response"]+"\n")' "$TMP/o1" "$P" >"$TMP/o1.txt" 2>/dev/null
cp "$TMP/o1" "$TMP/o1.txt.json"
same pool_ollama_route "$c" "$TMP/o1.txt" "$TMP/run_b"
n=$(children | wc -w)
if [ "$n" = 2 ]; then pass pool_one_engine_per_model; else fail pool_one_engine_per_model "$n engine processes"; fi

c=$(req /v1/chat/completions '{"model":"nosuch","messages":[{"role":"user","content":"hi"}]}' "$TMP/e1")
if [ "$c" = 404 ] && grep -q '"code":"model_not_found"' "$TMP/e1" && grep -q "GET /v1/models" "$TMP/e1"; then
  pass pool_unknown_404; else fail pool_unknown_404 "$c $(head -c 300 "$TMP/e1")"; fi
c=$(req /api/chat '{"model":"nosuch","messages":[{"role":"user","content":"hi"}]}' "$TMP/e2")
c2=$(req /v1/messages '{"model":"nosuch","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' "$TMP/e3")
if [ "$c" = 404 ] && grep -q "^{\"error\":\"model 'nosuch' not found" "$TMP/e2" && [ "$c2" = 404 ] &&
   grep -q '"type":"error","error":{"type":"not_found_error"' "$TMP/e3"; then pass pool_unknown_404_shapes; else
  fail pool_unknown_404_shapes "$c $(head -c 200 "$TMP/e2") / $c2 $(head -c 200 "$TMP/e3")"; fi

curl -s --max-time 10 "$base/v1/models" >"$TMP/models.json"
python3 - "$TMP/models.json" <<'EOF' && pass pool_models_list || fail pool_models_list "$(head -c 400 "$TMP/models.json")"
import json, sys
d = {m["id"]: m for m in json.load(open(sys.argv[1]))["data"]}
assert d["stories260K"]["loaded"] is True and d["tiny"]["loaded"] is True, d
EOF
curl -s --max-time 10 "$base/api/ps" >"$TMP/ps.json"
curl -s --max-time 10 "$base/stats" >"$TMP/stats.json"
python3 - "$TMP/ps.json" "$TMP/stats.json" <<'EOF' && pass pool_ps_stats || fail pool_ps_stats "$(head -c 300 "$TMP/ps.json") $(head -c 600 "$TMP/stats.json")"
import json, sys
ps = sorted(m["name"] for m in json.load(open(sys.argv[1]))["models"])
assert ps == ["stories260K:latest", "tiny:latest"], ps
st = {m["id"]: m for m in json.load(open(sys.argv[2]))["pool"]["models"]}
assert st["stories260K"]["state"] == "ready" and st["tiny"]["state"] == "ready", st
assert st["tiny"]["aliases"] == ["small"], st
EOF

# a crash in tiny's engine: its request gets the 500, stories260K's engine keeps serving
before=$(children)
c=$(req /v1/completions '{"model":"tiny","prompt":"hi","max_tokens":20,"ignore_eos":true}' "$TMP/crash" -H 'X-Kiln-Debug-Crash: 3')
if [ "$c" = 500 ] && grep -q "the engine of 'tiny' stopped: signal 6 (Aborted); restarting" "$TMP/crash"; then
  pass pool_crash_answers_500; else fail pool_crash_answers_500 "$c $(head -c 300 "$TMP/crash")"; fi
c=$(cmpl stories260K "$TMP/a4"); same pool_other_model_serves_after_crash "$c" "$TMP/a4" "$TMP/run_a"
kept=0
for ch in $before; do case " $(children) " in *" $ch "*) kept=$((kept + 1)) ;; esac; done
if [ "$kept" = 1 ]; then pass pool_crash_restarts_only_its_engine; else
  fail pool_crash_restarts_only_its_engine "engines $before -> $(children)"; fi
c=$(cmpl tiny "$TMP/b4"); same pool_crashed_model_restarts "$c" "$TMP/b4" "$TMP/run_b"
stop

# the SSD tier: each model's cached prefixes, written at the stop, are its own after a restart
start --ssd-cache "$TMP/kv"
c=$(cmpl tiny "$TMP/b5")
stop
n=$(grep -c 'SSD cache .*: [1-9][0-9]* entries of this model' "$TMP/s.err")
if [ "$c" = 200 ] && [ "$n" = 2 ] && [ -z "$(ls "$TMP/kv/quarantine")" ]; then pass pool_ssd_per_model; else
  fail pool_ssd_per_model "$c, $n models with entries: $(grep 'SSD' "$TMP/s.err" | head -c 400)"; fi

# ---- isolated, --max-models 1: concurrent first requests wait for the load; LRU unload, reload ----
start --max-models 1 --model-load-timeout 3 --timeout 10
clients=""
for k in 1 2 3; do
  cmpl tiny "$TMP/c$k" >"$TMP/c$k.code" &
  clients="$clients $!"
done
for k in $clients; do wait "$k"; done
bad=""
for k in 1 2 3; do { [ "$(cat "$TMP/c$k.code")" = 200 ] && cmp -s "$TMP/c$k" "$TMP/run_b"; } || bad="$bad $k:$(cat "$TMP/c$k.code")"; done
if [ -z "$bad" ]; then pass pool_concurrent_first_requests_wait; else fail pool_concurrent_first_requests_wait "$bad"; fi
curl -s --max-time 10 "$base/stats" >"$TMP/stats2.json"
n=$(children | wc -w)
if [ "$n" = 1 ] && grep -q "unloading model 'stories260K' (least recently used)" "$TMP/s.err" &&
   python3 -c 'import json,sys; s={m["id"]: m["state"] for m in json.load(open(sys.argv[1]))["pool"]["models"]}; assert s=={"stories260K":"unloaded","tiny":"ready"}, s' "$TMP/stats2.json"; then
  pass pool_lru_unloads; else fail pool_lru_unloads "$n engines; $(head -c 300 "$TMP/stats2.json")"; fi
c=$(cmpl stories260K "$TMP/a5"); same pool_unloaded_model_reloads "$c" "$TMP/a5" "$TMP/run_a"
if grep -q "unloading model 'tiny' (least recently used)" "$TMP/s.err"; then pass pool_lru_unloads_again; else
  fail pool_lru_unloads_again "$(tail -c 400 "$TMP/s.err")"; fi
# a request for stories260K whose body is still coming holds its engine: tiny cannot be loaded in its
# place, and a request for it gets 503 after --model-load-timeout; once the holder is gone, it loads
python3 - "$port" "$TMP/held" <<'EOF' &
import os, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
body = '{"model":"stories260K","prompt":"' + "x" * 20000
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           "Content-Length: %d\r\n\r\n%s" % (len(body) + 1000, body)).encode())
open(sys.argv[2], "w").close()
for _ in range(100):  # until the script says so (10 s at most)
    if os.path.exists(sys.argv[2] + ".release"):
        break
    time.sleep(0.1)
s.close()
EOF
holder=$!
i=0
while [ $i -lt 100 ] && [ ! -f "$TMP/held" ]; do sleep 0.1; i=$((i + 1)); done
sleep 1 # the supervisor routes the stalled request after 200 ms
c=$(cmpl tiny "$TMP/t1")
if [ "$c" = 503 ] && grep -q '"code":"model_loading"' "$TMP/t1.json" && grep -q "not ready after 3 s" "$TMP/t1.json"; then
  pass pool_load_timeout_503; else fail pool_load_timeout_503 "$c $(head -c 300 "$TMP/t1.json")"; fi
: >"$TMP/held.release"
wait $holder
c=$(cmpl tiny "$TMP/t2"); same pool_loads_once_room_is_free "$c" "$TMP/t2" "$TMP/run_b"
stop

# ---- without isolation: all engines in one process ----
start --no-isolation --max-models 1 --model-alias small=tiny
c=$(cmpl small "$TMP/b6"); same pool_inproc_second_model "$c" "$TMP/b6" "$TMP/run_b"
c=$(cmpl stories260K "$TMP/a6"); same pool_inproc_default_reloads "$c" "$TMP/a6" "$TMP/run_a"
c=$(cmpl tiny "$TMP/b7"); same pool_inproc_alternating "$c" "$TMP/b7" "$TMP/run_b"
c=$(req /v1/completions '{"model":"nosuch","prompt":"hi"}' "$TMP/e4")
n=$(children | wc -w)
if [ "$c" = 404 ] && grep -q model_not_found "$TMP/e4" && [ "$n" = 0 ] &&
   [ "$(grep -c "unloading model" "$TMP/s.err")" = 3 ]; then pass pool_inproc_lru_and_404; else
  fail pool_inproc_lru_and_404 "$c, $n children, $(tail -c 300 "$TMP/s.err")"; fi
stop
