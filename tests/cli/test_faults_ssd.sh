# test_faults_ssd.sh - the SSD cache tier of `kiln serve` on a disk that fills up and on a directory
# that stops being writable, over loopback with curl: the failed writes give warnings (a few, not
# one per request), are counted in /stats (ssd_cache.errors), and the server keeps serving, with
# the same answers; files already on disk are still restored.
#
# The full disk is a 1 MiB tmpfs mounted in a private mount namespace (unshare -m: the script runs
# itself again inside one, so the mount goes away with it); where that is not allowed, a file-size
# limit (ulimit -f 256: a write past 256 KiB fails with EFBIG like a full disk) stands in for it.
# The unwritable directory is the tmpfs remounted read-only, else the directory made immutable
# (chattr +i, as root) or read-only (chmod, as another user). The first line printed says which.
# A directory that cannot be used at start is an error naming it (exit status 1), not a crash.
# Bounded: three servers, ~40 small requests.
if [ -z "$KILN_FAULTS_NS" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  KILN_FAULTS_NS=1 exec unshare -m sh "$0" "$@"
fi
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip faults_ssd_tests "no $M"; exit 0; fi
if ! command -v curl >/dev/null 2>&1; then skip faults_ssd_tests "curl is needed"; exit 0; fi
J='Content-Type: application/json'
DIR="$TMP/ssd"
mkdir -p "$DIR"
full=ulimit
if [ -n "$KILN_FAULTS_NS" ] && mount -t tmpfs -o size=1m tmpfs "$DIR" 2>/dev/null; then full=tmpfs; fi
echo "# full disk: $([ $full = tmpfs ] && echo 'a 1 MiB tmpfs' || echo 'ulimit -f 256 (no tmpfs mount allowed)')"

# start ARGS...: kiln serve with the SSD tier in $DIR; sets $pid, $base.
start() {
  (
    [ $full = ulimit ] && ulimit -f 256
    exec "$KILN" serve -m "$M" --port 0 --no-open -c 512 --ssd-cache "$DIR" --ssd-demote-idle 0 "$@"
  ) >/dev/null 2>"$TMP/s.err" &
  pid=$!
  i=0
  while [ $i -lt 300 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/s.err"; do
    sleep 0.1; i=$((i + 1))
  done
  port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/s.err" | head -n 1)
  base="http://127.0.0.1:$port"
}
stop() { kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; }
# ask PROMPT: a greedy chat completion's content; the status in $TMP/code
ask() {
  curl -s --max-time 30 -w '\n%{http_code}' -H "$J" --data-binary \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"max_tokens\":12,\"temperature\":0}" \
    "$base/v1/chat/completions" >"$TMP/resp"
  tail -n 1 "$TMP/resp" >"$TMP/code"
  sed -n 's/.*"content":"\([^"]*\)".*/\1/p' "$TMP/resp"
}
ssd_stat() { curl -s --max-time 10 "$base/stats" | sed -n "s/.*\"ssd_cache\":{[^}]*\"$1\":\([0-9]*\).*/\1/p"; }
# burst TAG N: N requests with new long prompts, one after another; counts answers other than 200
burst() {
  n5=0; b=0
  while [ $b -lt "$2" ]; do
    ask "$1 $b: once upon a time a small brown dog and a big red ball went to the park to play with the other kids all day" >/dev/null
    [ "$(cat "$TMP/code")" = 200 ] || n5=$((n5 + 1))
    b=$((b + 1))
  done
}
P0="Lily and her mom went to the store to buy some apples and a big cake for the party"

# 1. the disk fills up
start
if [ -z "$port" ]; then fail faults_ssd_full_starts "$(head -c 300 "$TMP/s.err")"; exit 0; fi
ref=$(ask "$P0")
burst full 16
errs=$(ssd_stat errors)
warns=$(grep -c 'SSD cache' "$TMP/s.err")
if [ "$n5" = 0 ] && [ "${errs:-0}" -gt 0 ]; then pass faults_ssd_full_keeps_serving; else
  fail faults_ssd_full_keeps_serving "$n5 failed answers, ssd errors ${errs:-?}; $(tail -c 300 "$TMP/s.err")"; fi
if grep -q 'SSD cache .*\(No space left on device\|File too large\|disk is full\)' "$TMP/s.err" && [ "$warns" -le 12 ]; then
  pass faults_ssd_full_warns; else fail faults_ssd_full_warns "$warns lines: $(grep 'SSD cache' "$TMP/s.err" | head -3)"; fi
h=$(curl -s --max-time 10 -w '%{http_code}' -o /dev/null "$base/health")
again=$(ask "$P0")
if [ "$h" = 200 ] && [ "$again" = "$ref" ] && [ -n "$ref" ]; then pass faults_ssd_full_same_answer; else
  fail faults_ssd_full_same_answer "health $h, '$again' vs '$ref'"; fi
stop
if kill -0 $pid 2>/dev/null; then fail faults_ssd_full_stops "still running"; fi

# 2. restarted on the full disk: it starts, restores what is there, keeps serving
start
if [ -n "$port" ] && [ "$(ask "$P0")" = "$ref" ] && [ "$(ssd_stat hits)" -ge 1 ]; then pass faults_ssd_full_restart_hits; else
  fail faults_ssd_full_restart_hits "hits $(ssd_stat hits); $(head -c 300 "$TMP/s.err")"; fi

# 3. the directory stops being writable while the server runs
if [ $full = tmpfs ]; then
  how="remounted read-only"
  mount -o remount,ro "$DIR" 2>/dev/null || how=""
elif [ "$(id -u)" = 0 ]; then
  how="chattr +i"
  chattr +i "$DIR" 2>/dev/null || how=""
else
  how="chmod a-w"
  chmod a-w "$DIR" || how=""
fi
if [ -z "$how" ]; then
  skip faults_ssd_unwritable "the directory cannot be made unwritable here"
else
  echo "# unwritable directory: $how"
  e0=$(ssd_stat errors)
  burst ro 8
  e1=$(ssd_stat errors)
  again=$(ask "$P0")
  if [ "$n5" = 0 ] && [ "$again" = "$ref" ] && [ "${e1:-0}" -gt "${e0:-0}" ]; then pass faults_ssd_unwritable_keeps_serving; else
    fail faults_ssd_unwritable_keeps_serving "$n5 failed, ssd errors $e0 -> $e1, '$again'; $(tail -c 300 "$TMP/s.err")"; fi
fi
stop
if [ -z "$(tail -n 20 "$TMP/s.err" | grep -i 'assert\|segment\|abort')" ]; then pass faults_ssd_unwritable_clean_stop; else
  fail faults_ssd_unwritable_clean_stop "$(tail -c 300 "$TMP/s.err")"; fi

# 4. a directory that cannot be used at start: an error naming it, exit status 1
if [ -n "$how" ]; then
  start
  st=$?
  wait $pid 2>/dev/null
  st=$?
  if [ -z "$port" ] && [ "$st" = 1 ] && grep -q "$DIR" "$TMP/s.err"; then pass faults_ssd_unwritable_at_start; else
    fail faults_ssd_unwritable_at_start "port '$port', exit $st: $(head -c 300 "$TMP/s.err")"; stop; fi
fi
case "$how" in
  "chattr +i") chattr -i "$DIR" ;;
  "chmod a-w") chmod u+w "$DIR" ;;
esac
[ $full = tmpfs ] && umount "$DIR" 2>/dev/null
exit 0
