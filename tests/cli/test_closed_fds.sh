# test_closed_fds.sh - kiln started with standard input, output or error closed: every verb opens
# the closed ones on /dev/null before it runs, so no file or pipe it opens later takes their place.
# `kiln chat <&-` used to read its own internal pipe as its input and hang; `kiln run >&- 2>&-`
# is checked while it runs (blocked reading its prompt from a FIFO): descriptors 0, 1 and 2 are
# /dev/null, not a file it opened. Every wait is bounded.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip closed_fds "no $M"; exit 0; fi

# ---- kiln chat with stdin closed: no input, so no turn; it exits at once ----
timeout 30 "$KILN" chat -m "$M" -n 8 <&- >"$TMP/c1" 2>"$TMP/c1.err"
st=$?
if [ $st -eq 0 ] && [ ! -s "$TMP/c1" ]; then pass chat_stdin_closed
else fail chat_stdin_closed "exit $st (124: hung), stdout '$(head -c 200 "$TMP/c1")', stderr: $(head -c 300 "$TMP/c1.err")"; fi

# ---- kiln chat with all three closed ----
timeout 30 "$KILN" chat -m "$M" -n 8 <&- >&- 2>&-
st=$?
[ $st -eq 0 ] && pass chat_all_std_closed || fail chat_all_std_closed "exit $st (124: hung)"

# ---- kiln run with stdout and stderr closed, seen from /proc while it waits for its prompt ----
if [ ! -d /proc/self/fd ]; then skip run_stdout_stderr_closed "no /proc"; exit 0; fi
mkfifo "$TMP/prompt"
"$KILN" run -m "$M" -f "$TMP/prompt" -n 8 --temp 0 --ignore-eos >&- 2>&- &
pid=$!
exe=$(cd "$(dirname "$KILN")" && pwd -P)/$(basename "$KILN")
fds=""
i=0
while [ $i -lt 100 ]; do   # up to 10 s for kiln to start and open its descriptors
  if [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ]; then
    fds="$(readlink "/proc/$pid/fd/0" 2>/dev/null) $(readlink "/proc/$pid/fd/1" 2>/dev/null) $(readlink "/proc/$pid/fd/2" 2>/dev/null)"
    [ "$fds" = "/dev/null /dev/null /dev/null" ] && break
  fi
  sleep 0.1
  i=$((i + 1))
done
# Let it go on: the prompt through the FIFO (bounded: the writer's open waits for a reader).
timeout 10 sh -c 'printf "Once upon a time" >"$1"' sh "$TMP/prompt"
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
wait "$pid"
st=$?
if [ "$fds" = "/dev/null /dev/null /dev/null" ] && [ $st -eq 0 ]; then pass run_stdout_stderr_closed
else fail run_stdout_stderr_closed "descriptors 0 1 2 were '$fds' (want /dev/null each), exit $st"; fi
