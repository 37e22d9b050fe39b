# test_server.sh - `kiln serve` end to end with the official openai npm client: the cases live in
# tests/client/server.test.mjs (and hostile.test.mjs, cache.test.mjs, structured.test.mjs, tools.test.mjs,
# aisdk.test.mjs with the Vercel AI SDK as a second client), which start their own servers
# on ephemeral ports and print one PASS/FAIL/SKIP line per case. A few checks that need no node
# come first (--print-config sources, the no-key warning). This script installs the client (npm ci,
# when node_modules is missing or older than the lock file) and skips gracefully without node, npm,
# the registry or the model. KILN may name another kiln binary (default $BUILD/kiln).
kiln_override=${KILN:-}
. tests/cli/lib.sh
[ -n "$kiln_override" ] && KILN=$kiln_override
M="$DATA/models/stories260K/stories260K.gguf"
C=tests/client
if [ ! -f "$M" ]; then skip server_tests "no $M"; exit 0; fi

# ---- checks without node: --print-config sources, the no-key warning ----

# A flag given with the default's value is still reported as the flag's.
"$KILN" serve -m "$M" --print-config --max-queue 64 --prefill-chunk 64 --timeout 5 >"$TMP/cfg" 2>"$TMP/cfg.err"
if grep -q "^max-queue *64 *(flag --max-queue)" "$TMP/cfg" && grep -q "^prefill-chunk *64 *(flag --prefill-chunk)" "$TMP/cfg" &&
   grep -q "^timeout *5 s *(flag --timeout)" "$TMP/cfg" && grep -q "^max-body *8 MiB *(default)" "$TMP/cfg" &&
   grep -q "^max-conns-ip *256 *(default)" "$TMP/cfg" && grep -q "^cors *none *(default" "$TMP/cfg"; then
  pass serve_config_sources_by_flag; else fail serve_config_sources_by_flag "$(cat "$TMP/cfg" "$TMP/cfg.err" | head -c 1500)"; fi
expect_exit serve_cors_bad_origin 2 "$KILN" serve -m "$M" --cors localhost:3000 --print-config
expect_exit serve_allow_host_empty 2 "$KILN" serve -m "$M" --allow-host "" --print-config

# serve_warns NAME WANT CMD...: starts CMD (a kiln serve, or one that execs it), stops it once it
# listens or exits, and passes when stderr has the no-key warning (WANT=yes) or not (WANT=no).
serve_warns() {
  name=$1; want=$2; shift 2
  : >"$TMP/w.err"
  "$@" >/dev/null 2>"$TMP/w.err" &
  pid=$!
  i=0
  while [ $i -lt 100 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/w.err"; do sleep 0.1; i=$((i + 1)); done
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
  if grep -q "warning: listening on .* without --api-key" "$TMP/w.err"; then got=yes; else got=no; fi
  if [ "$got" = "$want" ]; then pass "$name"; else fail "$name" "warning: $got, expected $want: $(head -c 400 "$TMP/w.err")"; fi
}
# loopback in forms a string compare misses: no warning
serve_warns serve_no_warning_numeric_loopback no "$KILN" serve -m "$M" --host 2130706433 --port 0 --no-open
serve_warns serve_no_warning_localhost no "$KILN" serve -m "$M" --host localhost --port 0 --no-open
# A name is resolved, not read: with /etc/hosts replaced in a private mount namespace, a name that
# starts with "127." but resolves elsewhere warns, a loopback name does not.
if unshare --user --map-root-user --mount true 2>/dev/null; then
  printf '10.9.8.7 127.evil\n127.0.0.3 quiet.test\n' >"$TMP/hosts"
  ns="mount --bind $TMP/hosts /etc/hosts && exec \"\$@\""
  serve_warns serve_warning_name_resolving_elsewhere yes unshare --user --map-root-user --mount sh -c "$ns" sh \
    "$KILN" serve -m "$M" --host 127.evil --port 0 --no-open
  serve_warns serve_no_warning_loopback_name no unshare --user --map-root-user --mount sh -c "$ns" sh \
    "$KILN" serve -m "$M" --host quiet.test --port 0 --no-open
else
  skip serve_warning_name_resolving_elsewhere "unshare --user --mount is not permitted here"
fi

# A model file whose name is not UTF-8: its id is shown with the bad byte escaped, and served.
cp "$M" "$TMP/m$(printf '\377').gguf"
: >"$TMP/id.err"
"$KILN" serve -m "$TMP/m$(printf '\377').gguf" --port 0 --no-open >/dev/null 2>"$TMP/id.err" &
pid=$!
i=0
while [ $i -lt 100 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/id.err"; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/id.err")
models=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$port/v1/models" 2>&1)
kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
case "$models" in
  *'"id":"m\\xff"'*' 200') pass serve_model_id_not_utf8 ;;
  *) fail serve_model_id_not_utf8 "$models $(head -c 300 "$TMP/id.err")" ;;
esac

# --max-tokens-limit: a request asking for more (or for no limit) ends at the limit with "length";
# one asking for fewer gets what it asked; --print-config names the flag.
"$KILN" serve -m "$M" --max-tokens-limit 3 --print-config >"$TMP/cfg" 2>&1
if grep -q "^max-tokens-limit *3 *(flag --max-tokens-limit)" "$TMP/cfg"; then pass serve_max_tokens_limit_config
else fail serve_max_tokens_limit_config "$(head -c 800 "$TMP/cfg")"; fi
: >"$TMP/lim.err"
"$KILN" serve -m "$M" --max-tokens-limit 3 --port 0 --no-open >/dev/null 2>"$TMP/lim.err" &
pid=$!
i=0
while [ $i -lt 100 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/lim.err"; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/lim.err")
ask() { curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/completions" -d "$1"; }
more=$(ask '{"prompt": "Once upon a time", "max_tokens": 50, "ignore_eos": true}')
unset_=$(ask '{"prompt": "Once upon a time", "ignore_eos": true}')
fewer=$(ask '{"prompt": "Once upon a time", "max_tokens": 2, "ignore_eos": true}')
kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
case "$more" in *'"finish_reason":"length"'*'"completion_tokens":3,'*) pass serve_max_tokens_limit_clamps ;;
  *) fail serve_max_tokens_limit_clamps "$more $(head -c 300 "$TMP/lim.err")" ;; esac
case "$unset_" in *'"finish_reason":"length"'*'"completion_tokens":3,'*) pass serve_max_tokens_limit_unset ;;
  *) fail serve_max_tokens_limit_unset "$unset_" ;; esac
case "$fewer" in *'"completion_tokens":2,'*) pass serve_max_tokens_limit_fewer ;;
  *) fail serve_max_tokens_limit_fewer "$fewer" ;; esac
expect_exit serve_max_tokens_limit_negative 2 "$KILN" serve -m "$M" --max-tokens-limit -1 --print-config

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  skip server_tests "node and npm are needed (Node 20 or later)"; exit 0
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  skip server_tests "node $(node --version) is older than 20"; exit 0
fi

# a time limit for commands that could hang (npm on a dead network), where coreutils has one
limit() { if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi; }

if [ ! -f "$C/node_modules/openai/package.json" ] || [ ! -f "$C/node_modules/ai/package.json" ] ||
   [ ! -f "$C/node_modules/.package-lock.json" ] ||
   [ "$C/package-lock.json" -nt "$C/node_modules/.package-lock.json" ]; then
  if ! (cd "$C" && limit 180 npm ci --no-audit --no-fund --prefer-offline) >"$TMP/npm.log" 2>&1; then
    skip server_tests "npm ci failed in $C: $(tail -n 3 "$TMP/npm.log" | tr '\n' ' ' | cut -c 1-300)"
    exit 0
  fi
fi

KILN="$KILN" KILN_MODEL="$M" limit 170 node "$C/server.test.mjs"
# Hostile and broken clients: stalled connections, connection limits, Host / Origin / body type.
KILN="$KILN" KILN_MODEL="$M" limit 110 node "$C/hostile.test.mjs"
# The SSD tier of the prefix cache: restarts, damaged files, kill -9, the flush route.
KILN="$KILN" KILN_MODEL="$M" limit 90 node "$C/cache.test.mjs"
# Structured output: response_format, json_schema, grammar, end to end and every bad input.
KILN="$KILN" KILN_MODEL="$M" limit 180 node "$C/structured.test.mjs"
# Tool calls: tools, tool_choice, streaming deltas, runTools, multi-turn history, every bad input.
KILN="$KILN" KILN_MODEL="$M" limit 180 node "$C/tools.test.mjs"
# Tool calls with the Vercel AI SDK: generateText and streamText with toolChoice required.
KILN="$KILN" KILN_MODEL="$M" limit 120 node "$C/aisdk.test.mjs"
