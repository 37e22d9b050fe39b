# test_choices.sh - `n` > 1 on the chat and completions routes of `kiln serve` with the `openai` npm
# client: the cases live in tests/client/choices.test.mjs (one PASS/FAIL/SKIP line each). This
# script installs the npm packages of tests/client (npm ci, when node_modules is missing or older
# than the lock file) and skips without node, npm, the registry or the model. KILN may name another
# kiln binary (default $BUILD/kiln).
kiln_override=${KILN:-}
. tests/cli/lib.sh
[ -n "$kiln_override" ] && KILN=$kiln_override
M="$DATA/models/stories260K/stories260K.gguf"
C=tests/client
if [ ! -f "$M" ]; then skip choices_tests "no $M"; exit 0; fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  skip choices_tests "node and npm are needed (Node 20 or later)"; exit 0
fi
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  skip choices_tests "node $(node --version) is older than 20"; exit 0
fi

# a time limit for commands that could hang (npm on a dead network), where coreutils has one
limit() { if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi; }

if [ ! -f "$C/node_modules/openai/package.json" ] ||
   [ ! -f "$C/node_modules/.package-lock.json" ] || [ "$C/package-lock.json" -nt "$C/node_modules/.package-lock.json" ]; then
  if ! (cd "$C" && limit 180 npm ci --no-audit --no-fund --prefer-offline) >"$TMP/npm.log" 2>&1; then
    skip choices_tests "npm ci failed in $C: $(tail -n 3 "$TMP/npm.log" | tr '\n' ' ' | cut -c 1-300)"
    exit 0
  fi
fi

KILN="$KILN" KILN_MODEL="$M" limit 180 node "$C/choices.test.mjs"
