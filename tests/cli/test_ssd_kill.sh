# test_ssd_kill.sh - kill -9 of `kiln serve` while its SSD cache tier writes, KILN_SSD_KILLS times
# (8 here; docs/reliability.md records a run of 50), over loopback with curl. One cache directory
# throughout; each round starts the server (isolated and --no-isolation in turn), and checks:
#   - it starts (the index opens; rows without a file and files without a row are reconciled),
#   - no temporary file of a dead writer is left after the start, and nothing is ever quarantined
#     (a cut write never becomes a cache file: files are renamed into place after fsync),
#   - the reference prompt's prefix is restored from SSD (a hit in /stats) and its greedy answer
#     equals the one computed without any cache (no damaged entry is served),
# then sends a burst of requests with new prompts (their prefixes go to the writer at once:
# --ssd-demote-idle 0) and kills the server with SIGKILL a random moment later. At the end, a last
# start: the index (sqlite3) and the *.kv files name the same entries, and a new prompt's prefix is
# written (the tier kept working). Bounded: about 3 s per round.
# Each start empties the server's log before launching it: the wait reads "listening on" from it,
# and a log left by the previous server (its line still there, the new process not yet running to
# truncate the file) made a start on a busy machine look done with no port, so it failed.
. tests/cli/lib.sh
# KILN_SSD_KILL_MODEL: another model for a long run (a larger KV per token makes longer writes, so
# more kills land inside one; docs/reliability.md)
M="${KILN_SSD_KILL_MODEL:-$DATA/models/stories260K/stories260K.gguf}"
if [ ! -f "$M" ]; then skip ssd_kill_tests "no $M"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip ssd_kill_tests "curl is needed"; exit 0; fi
KILLS=${KILN_SSD_KILLS:-8}
DELAY_MAX=${KILN_SSD_KILL_DELAY_MAX:-1.3} # the kill comes 0.02 s to this many seconds after a burst
DIR="$TMP/ssd"
J='Content-Type: application/json'

# launch ARGS...: kiln serve ARGS on an ephemeral port, waiting up to 30 s for it to listen; sets
# $pid, $port, $base, and when it did not come up $why (the server is then not left running).
launch() {
  : >"$TMP/s.err" # no earlier server's "listening on" line
  "$KILN" serve -m "$M" --port 0 --no-open -c 512 "$@" >/dev/null 2>"$TMP/s.err" &
  pid=$!
  i=0
  while [ $i -lt 300 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do
    sleep 0.1; i=$((i + 1))
  done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)
  base="http://127.0.0.1:$port"
  why=""
  [ -n "$port" ] && return
  if kill -0 $pid 2>/dev/null; then
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
    why="not listening after 30 s (stopped): $(tail -c 300 "$TMP/s.err" | tr '\n' ' ')"
  else
    wait $pid 2>/dev/null
    why="exited with status $? before listening: $(tail -c 300 "$TMP/s.err" | tr '\n' ' ')"
  fi
}
# start ARGS...: launch with the SSD tier in $DIR (--ssd-demote-idle 0: every prefix is written).
start() { launch --ssd-cache "$DIR" --ssd-demote-idle 0 "$@"; }
# ask PROMPT [N]: a greedy chat completion; prints its content
ask() {
  curl -s --max-time 30 -H "$J" --data-binary \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"max_tokens\":${2:-16},\"temperature\":0}" \
    "$base/v1/chat/completions" | sed -n 's/.*"content":"\([^"]*\)".*/\1/p'
}
ssd_stat() { curl -s --max-time 10 "$base/stats" | sed -n "s/.*\"ssd_cache\":{[^}]*\"$1\":\([0-9]*\).*/\1/p"; }
REF_PROMPT="Once upon a time there was a little girl named Lily who loved to play outside in the park with her dog"

# the reference answer, without any cache
launch
if [ -z "$port" ]; then fail ssd_kill_reference "the server $why"; exit 0; fi
REF=$(ask "$REF_PROMPT")
kill -TERM $pid; wait $pid 2>/dev/null
if [ -z "$REF" ]; then fail ssd_kill_reference "no answer: $(head -c 300 "$TMP/s.err")"; exit 0; fi

# the reference prompt's prefix on SSD (a clean stop flushes it)
start
if [ -z "$port" ]; then fail ssd_kill_restarts "the first server with the SSD tier $why"; exit 0; fi
ask "$REF_PROMPT" >/dev/null
kill -TERM $pid; wait $pid 2>/dev/null
n0=$(ls "$DIR" | grep -c '\.kv$')

bad_start=""; bad_tmp=""; bad_hit=""; cut=0; k=1
while [ $k -le "$KILLS" ]; do
  if [ $((k % 2)) = 0 ]; then start --no-isolation; else start; fi
  if [ -z "$port" ]; then bad_start="$bad_start round $k: $why;"; k=$((k + 1)); continue; fi
  tmps=$(ls "$DIR" | grep -c '\.tmp\.')
  [ "$tmps" = 0 ] || bad_tmp="$bad_tmp round $k: $tmps temporary files;"
  got=$(ask "$REF_PROMPT")
  hits=$(ssd_stat hits)
  if [ "$got" != "$REF" ] || [ "${hits:-0}" -lt 1 ]; then bad_hit="$bad_hit round $k: hits ${hits:-?}, '$got';"; fi
  # a burst of new prefixes, then SIGKILL while the writer works
  j=0
  while [ $j -lt 6 ]; do
    ask "In round $k story $j a $(od -An -N4 -tu4 /dev/urandom | tr -d ' ') bird sang in the tall green tree near the river" 8 >/dev/null &
    j=$((j + 1))
  done
  sleep "$(od -An -N1 -tu1 /dev/urandom | awk -v hi="$DELAY_MAX" '{ printf "%.3f", 0.02 + $1 / 255 * (hi - 0.02) }')"
  kill -9 $pid
  wait $pid 2>/dev/null
  wait 2>/dev/null
  [ "$(ls "$DIR" | grep -c '\.tmp\.')" = 0 ] || cut=$((cut + 1))
  k=$((k + 1))
done
echo "# $KILLS kills, $cut of them with a write cut short (a temporary file left); $(ls "$DIR" | grep -c '\.kv$') cache files after them, $n0 before"
if [ -z "$bad_start" ]; then pass ssd_kill_restarts; else fail ssd_kill_restarts "$bad_start"; fi
if [ -z "$bad_tmp" ]; then pass ssd_kill_temporaries_removed; else fail ssd_kill_temporaries_removed "$bad_tmp"; fi
if [ -z "$bad_hit" ]; then pass ssd_kill_hit_same_answer; else fail ssd_kill_hit_same_answer "want '$REF':$bad_hit"; fi
q=$(ls "$DIR/quarantine" 2>/dev/null | wc -l)
if [ "$q" = 0 ]; then pass ssd_kill_nothing_quarantined; else fail ssd_kill_nothing_quarantined "$q files: $(ls "$DIR/quarantine" | head -3)"; fi

# the last start: index and files agree; the tier grew
start
if [ -n "$port" ] && [ "$(ask "$REF_PROMPT")" = "$REF" ]; then pass ssd_kill_final_start; else
  fail ssd_kill_final_start "${why:-$(head -c 300 "$TMP/s.err")}"; fi
nk=$(ls "$DIR" | grep -c '\.kv$')
ask "After all the rounds a quiet cat slept on the warm mat by the door" >/dev/null
kill -TERM $pid; wait $pid 2>/dev/null
n1=$(ls "$DIR" | grep -c '\.kv$')
if command -v sqlite3 >/dev/null 2>&1; then
  ls "$DIR" | grep '\.kv$' | LC_ALL=C sort >"$TMP/files"
  sqlite3 "$DIR/index.sqlite" 'select file from entries order by file' >"$TMP/rows" 2>"$TMP/sq.err"
  if cmp -s "$TMP/files" "$TMP/rows"; then pass ssd_kill_index_consistent; else
    fail ssd_kill_index_consistent "files vs rows: $(diff "$TMP/files" "$TMP/rows" | head -5 | tr '\n' ' ') $(cat "$TMP/sq.err")"; fi
else
  skip ssd_kill_index_consistent "sqlite3 is needed"
fi
if [ "$n1" -gt "$nk" ]; then pass ssd_kill_tier_keeps_writing; else fail ssd_kill_tier_keeps_writing "$nk -> $n1 files"; fi
