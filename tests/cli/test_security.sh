# test_security.sh - what `kiln serve` lets a caller do, over loopback with curl: with --api-key every
# route of every API (OpenAI, Anthropic, Responses, Ollama, the helpers, /metrics, /stats) answers 401
# without the key and serves with it (Authorization: Bearer or x-api-key), while / (the chat page and
# its files) and /health stay public; no CORS without --cors (a foreign Origin and its preflight get
# 403, no response carries Access-Control-*), --cors ORIGIN allows exactly that origin; request paths
# never reach the filesystem; and each documented limit (headers, body, messages, tools, n) gets its
# 4xx while the server keeps serving. Bounded: two servers, ~80 requests, curl --max-time on each.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip security_tests "no $M"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip security_tests "curl is needed"; exit 0; fi

# start ARGS...: starts kiln serve on an ephemeral port; sets $pid and $base.
start() {
  : >"$TMP/s.err" # no earlier server's "listening on" line (the new process may not have truncated it yet)
  "$KILN" serve -m "$M" --port 0 --no-open "$@" >/dev/null 2>"$TMP/s.err" &
  pid=$!
  i=0
  while [ $i -lt 150 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do sleep 0.1; i=$((i + 1)); done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err")
  base="http://127.0.0.1:$port"
}
stop() { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; }

# code METHOD PATH [curl args...]: prints the status code (body in $TMP/body, headers in $TMP/hdr).
code() {
  m=$1; p=$2; shift 2
  curl -s --path-as-is --max-time 20 -X "$m" -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' "$@" "$base$p"
}

start --api-key sk-test
if [ -z "$port" ]; then fail security_server_starts "$(head -c 400 "$TMP/s.err")"; exit 0; fi

CHAT='{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}'
ROUTES="GET /v1/models
GET /models
GET /v1/models/stories260K
POST /v1/chat/completions
POST /chat/completions
POST /v1/completions
POST /completions
POST /tokenize
POST /detokenize
POST /apply-template
GET /metrics
GET /stats
POST /admin/cache/flush
POST /v1/messages
POST /v1/messages/count_tokens
POST /v1/responses
GET /v1/responses/resp_x
DELETE /v1/responses/resp_x
POST /api/chat
POST /api/generate
GET /api/tags
GET /api/ps
GET /api/version
POST /api/show
GET /no/such/route"
bad=""
echo "$ROUTES" >"$TMP/routes"
while read -r m p; do
  c=$(code "$m" "$p" -H 'Content-Type: application/json' --data-binary "$CHAT")
  [ "$m" = GET ] && c=$(code GET "$p")
  [ "$m" = DELETE ] && c=$(code DELETE "$p")
  [ "$c" = 401 ] || bad="$bad $m $p: $c;"
  c=$(code GET "$p" -H 'Authorization: Bearer sk-wrong')
  [ "$c" = 401 ] || bad="$bad $p (wrong key): $c;"
done <"$TMP/routes"
if [ -z "$bad" ]; then pass security_key_on_every_route; else fail security_key_on_every_route "$bad"; fi

# The error of each API names the key in that API's shape.
c=$(code POST /v1/messages -H 'Content-Type: application/json' --data-binary '{}')
if [ "$c" = 401 ] && grep -q '"type":"error"' "$TMP/body" && grep -q authentication_error "$TMP/body"; then
  pass security_key_anthropic_shape; else fail security_key_anthropic_shape "$c $(head -c 300 "$TMP/body")"; fi
c=$(code GET /api/tags)
if [ "$c" = 401 ] && grep -q '^{"error":"missing or incorrect API key' "$TMP/body"; then
  pass security_key_ollama_shape; else fail security_key_ollama_shape "$c $(head -c 300 "$TMP/body")"; fi

# Public: the page, its files and /health.
ok=""
for p in / /index.html /app.js /style.css /health /v1/health; do
  c=$(code GET "$p"); [ "$c" = 200 ] || ok="$ok $p: $c;"
done
if [ -z "$ok" ]; then pass security_public_routes; else fail security_public_routes "$ok"; fi

# With the key, in either header.
c1=$(code GET /v1/models -H 'Authorization: Bearer sk-test')
c2=$(code POST /v1/messages/count_tokens -H 'x-api-key: sk-test' -H 'Content-Type: application/json' \
  --data-binary '{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}')
c3=$(code GET /api/tags -H 'Authorization: Bearer sk-test')
c4=$(code POST /v1/chat/completions -H 'Authorization: Bearer sk-test' -H 'Content-Type: application/json' \
  --data-binary "$CHAT")
if [ "$c1$c2$c3$c4" = 200200200200 ]; then pass security_key_accepted; else
  fail security_key_accepted "models $c1, count_tokens $c2, tags $c3, chat $c4"; fi
# A key that is a prefix of the right one, or longer, is wrong.
c1=$(code GET /v1/models -H 'Authorization: Bearer sk-tes')
c2=$(code GET /v1/models -H 'Authorization: Bearer sk-test2')
c3=$(code GET /v1/models -H 'Authorization: sk-test')
if [ "$c1$c2$c3" = 401401401 ]; then pass security_key_exact; else fail security_key_exact "$c1 $c2 $c3"; fi

# ---- CORS: off by default ----
AUTH='Authorization: Bearer sk-test'
c=$(code GET /v1/models -H "$AUTH" -H 'Origin: http://evil.example')
if [ "$c" = 403 ] && ! grep -qi '^access-control' "$TMP/hdr"; then pass security_cors_off_foreign_origin; else
  fail security_cors_off_foreign_origin "$c $(cat "$TMP/hdr" | head -c 300)"; fi
c=$(code OPTIONS /v1/chat/completions -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: POST')
if [ "$c" = 403 ] && ! grep -qi '^access-control' "$TMP/hdr"; then pass security_cors_off_preflight; else
  fail security_cors_off_preflight "$c $(head -c 300 "$TMP/hdr")"; fi
c=$(code GET /v1/models -H "$AUTH" -H "Origin: $base")
if [ "$c" = 200 ] && ! grep -qi '^access-control' "$TMP/hdr"; then pass security_same_origin_no_cors_headers; else
  fail security_same_origin_no_cors_headers "$c $(head -c 300 "$TMP/hdr")"; fi

# ---- request paths never reach the filesystem ----
leak=""
for p in /../../../../etc/passwd /%2e%2e/%2e%2e/%2e%2e/etc/passwd /app.js/../../../etc/passwd //etc/passwd \
         /..%2f..%2f..%2fetc%2fpasswd /web/app.js /index.html%00.js "/$(pwd | sed 's,^/,,')/README.md"; do
  c=$(code GET "$p")
  # (a NUL cuts the path: /index.html%00.js is the embedded page, no file)
  if grep -q 'root:' "$TMP/body" || grep -q '^# kiln' "$TMP/body" ||
     { [ "$c" = 200 ] && [ "$p" != /index.html%00.js ]; }; then leak="$leak $p: $c;"; fi
done
if [ -z "$leak" ]; then pass security_paths_not_files; else fail security_paths_not_files "$leak"; fi

# ---- limits ----
# Headers: more than libmicrohttpd's per-connection memory (32 KiB) is refused with a 4xx.
big=$(head -c 40000 /dev/zero | tr '\0' a)
c=$(code GET /health -H "X-Big: $big")
case "$c" in 4*) pass security_limit_headers ;; *) fail security_limit_headers "status $c" ;; esac
# messages: SRV_MAX_MESSAGES (8192) on the chat route and on a translated one (Anthropic's).
python3 -c 'import json; print(json.dumps({"messages":[{"role":"user","content":"a"}]*8193,"max_tokens":1}))' >"$TMP/msgs"
c=$(code POST /v1/chat/completions -H "$AUTH" -H 'Content-Type: application/json' --data-binary @"$TMP/msgs")
if [ "$c" = 400 ] && grep -q "at most 8192" "$TMP/body"; then pass security_limit_messages; else
  fail security_limit_messages "$c $(head -c 300 "$TMP/body")"; fi
python3 -c 'import json; print(json.dumps({"model":"claude-x","messages":[{"role":"user","content":"a"}]*8193,"max_tokens":1}))' >"$TMP/amsgs"
c=$(code POST /v1/messages -H 'x-api-key: sk-test' -H 'Content-Type: application/json' --data-binary @"$TMP/amsgs")
if [ "$c" = 400 ] && grep -q "at most 8192" "$TMP/body"; then pass security_limit_messages_anthropic; else
  fail security_limit_messages_anthropic "$c $(head -c 300 "$TMP/body")"; fi
# tools: SRV_MAX_TOOLS (512)
python3 -c 'import json; print(json.dumps({"messages":[{"role":"user","content":"a"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"f%d" % i}} for i in range(513)]}))' >"$TMP/tools"
c=$(code POST /v1/chat/completions -H "$AUTH" -H 'Content-Type: application/json' --data-binary @"$TMP/tools")
if [ "$c" = 400 ] && grep -q "at most 512" "$TMP/body"; then pass security_limit_tools; else
  fail security_limit_tools "$c $(head -c 300 "$TMP/body")"; fi
# n: at most 16 choices
c=$(code POST /v1/chat/completions -H "$AUTH" -H 'Content-Type: application/json' \
  --data-binary '{"messages":[{"role":"user","content":"a"}],"max_tokens":1,"n":17}')
if [ "$c" = 400 ] && grep -q '"param":"n"' "$TMP/body"; then pass security_limit_n; else
  fail security_limit_n "$c $(head -c 300 "$TMP/body")"; fi
# still serving
c=$(code POST /v1/chat/completions -H "$AUTH" -H 'Content-Type: application/json' --data-binary "$CHAT")
if [ "$c" = 200 ]; then pass security_serving_after_limits; else fail security_serving_after_limits "$c"; fi
stop

# ---- --cors ORIGIN allows that origin only; --max-body-mb ----
start --cors http://app.example --max-body-mb 1
c=$(code OPTIONS /v1/chat/completions -H 'Origin: http://app.example' -H 'Access-Control-Request-Method: POST' \
  -H 'Access-Control-Request-Headers: authorization, content-type')
if [ "$c" = 204 ] && grep -qi '^access-control-allow-origin: http://app.example' "$TMP/hdr" &&
   grep -qi '^access-control-allow-headers: authorization, content-type' "$TMP/hdr"; then
  pass security_cors_preflight_allowed; else fail security_cors_preflight_allowed "$c $(head -c 400 "$TMP/hdr")"; fi
c=$(code GET /v1/models -H 'Origin: http://app.example')
if [ "$c" = 200 ] && grep -qi '^access-control-allow-origin: http://app.example' "$TMP/hdr"; then
  pass security_cors_allowed_origin; else fail security_cors_allowed_origin "$c $(head -c 400 "$TMP/hdr")"; fi
c=$(code GET /v1/models -H 'Origin: http://other.example')
if [ "$c" = 403 ] && ! grep -qi '^access-control' "$TMP/hdr"; then pass security_cors_other_origin; else
  fail security_cors_other_origin "$c $(head -c 300 "$TMP/hdr")"; fi
head -c 1100000 /dev/zero | tr '\0' ' ' >"$TMP/big"
c=$(code POST /v1/chat/completions -H 'Content-Type: application/json' --data-binary @"$TMP/big")
if [ "$c" = 413 ] && grep -q "limit of 1048576 bytes" "$TMP/body"; then pass security_limit_body; else
  fail security_limit_body "$c $(head -c 300 "$TMP/body")"; fi
c=$(code GET /health)
if [ "$c" = 200 ]; then pass security_serving_after_body_limit; else fail security_serving_after_body_limit "$c"; fi
stop
