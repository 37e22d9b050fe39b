# test_chat.sh - `kiln chat`: scripted turns on piped stdin (greedy replies equal to `kiln run` on
# the same rendered conversation, with and without a chat template, with the KV of earlier turns
# reused), the /commands and their errors, a conversation that outgrows the context, and the
# interactive path driven through a pseudo-terminal (streamed reply, Ctrl-C during a reply and at
# the prompt, keys typed during a reply held for the next prompt, up-arrow history, the history file,
# /quit and Ctrl-D, the terminal's settings back after a SIGTERM during a reply); a base model's reply
# cap and stop (stop_at), and a full context dropping the oldest turns.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip chat "no $M"; exit 0; fi

# ---- piped stdin, no chat template (the messages are joined by blank lines) ----
"$KILN" run -m "$M" -p "Once upon a time" -n 12 --temp 0 --ignore-eos >"$TMP/run1" 2>/dev/null
R1=$(tail -c +17 "$TMP/run1")   # the continuation after the 16-byte prompt, without the newline
"$KILN" run -m "$M" -p "$(printf 'Once upon a time\n\n%s\n\nThe cat' "$R1")" -n 12 --temp 0 --ignore-eos >"$TMP/run2" 2>/dev/null
R2=$(tail -c +$(( ${#R1} + 28 )) "$TMP/run2")
printf 'Once upon a time\nThe cat\n' | "$KILN" chat -m "$M" -n 12 --temp 0 --ignore-eos -v >"$TMP/c1" 2>"$TMP/c1.err"
printf '%s\n%s\n' "$R1" "$R2" >"$TMP/want1"
if [ -n "$R1" ] && [ -n "$R2" ] && cmp -s "$TMP/c1" "$TMP/want1"; then pass chat_pipe_two_turns_equal_run
else fail chat_pipe_two_turns_equal_run "got '$(cat "$TMP/c1")' want '$(cat "$TMP/want1")' $(head -c 300 "$TMP/c1.err")"; fi
[ "$(grep -c 'prompt [0-9]* tokens' "$TMP/c1.err")" -eq 2 ] && pass chat_verbose_stats || fail chat_verbose_stats "$(cat "$TMP/c1.err")"

# /clear forgets: "The cat" then gets the reply of a fresh start, not R2
"$KILN" run -m "$M" -p "The cat" -n 12 --temp 0 --ignore-eos >"$TMP/runc" 2>/dev/null
RC=$(tail -c +8 "$TMP/runc")
printf 'Once upon a time\n/clear\nThe cat\n' | "$KILN" chat -m "$M" -n 12 --temp 0 --ignore-eos >"$TMP/c2" 2>"$TMP/c2.err"
printf '%s\n%s\n' "$R1" "$RC" >"$TMP/want2"
if [ "$RC" != "$R2" ] && cmp -s "$TMP/c2" "$TMP/want2" && [ ! -s "$TMP/c2.err" ]; then pass chat_clear
else fail chat_clear "got '$(cat "$TMP/c2" "$TMP/c2.err")', want '$RC' (not '$R2')"; fi

# /system (and --system) puts a system message first
"$KILN" run -m "$M" -p "$(printf 'Lily\n\nOnce upon a time')" -n 12 --temp 0 --ignore-eos >"$TMP/run3" 2>/dev/null
RS=$(tail -c +23 "$TMP/run3")
printf 'hello\n/system Lily\nOnce upon a time\n' | "$KILN" chat -m "$M" -n 12 --temp 0 --ignore-eos >"$TMP/c4" 2>/dev/null
printf 'Once upon a time\n' | "$KILN" chat -m "$M" --system Lily -n 12 --temp 0 --ignore-eos >"$TMP/c5" 2>/dev/null
if [ -n "$RS" ] && [ "$(sed -n 2p "$TMP/c4")" = "$RS" ] && [ "$(cat "$TMP/c5")" = "$RS" ]; then pass chat_system
else fail chat_system "want '$RS' got '$(cat "$TMP/c4")' / '$(cat "$TMP/c5")'"; fi

# bad /set values, unknown settings and commands: one error line each, and the chat goes on
printf '/set temp abc\n/set top_k -5\n/set top_p 2\n/set nosuch 1\n/set temp\n/set seed -3\n/frobnicate\n/set temp 0\n/set max_tokens 12\nOnce upon a time\n' |
  "$KILN" chat -m "$M" --temp 0.9 -n 99 --ignore-eos >"$TMP/c6" 2>"$TMP/c6.err"
st=$?
if [ $st -eq 0 ] && [ "$(wc -l <"$TMP/c6.err")" -eq 7 ] && grep -q "temp" "$TMP/c6.err" && grep -q "nosuch" "$TMP/c6.err" &&
   grep -q "unknown command '/frobnicate'" "$TMP/c6.err" && [ "$(cat "$TMP/c6")" = "$R1" ]; then pass chat_set_errors_continue
else fail chat_set_errors_continue "exit $st, stdout '$(cat "$TMP/c6")', stderr: $(cat "$TMP/c6.err")"; fi
printf '/set seed 42\n/set top_k 7\n/set\n/help\n' | "$KILN" chat -m "$M" >"$TMP/c7" 2>"$TMP/c7.err"
grep -q 'seed 42' "$TMP/c7" && grep -q 'top_k 7' "$TMP/c7" && grep -q '/clear' "$TMP/c7" && [ ! -s "$TMP/c7.err" ] &&
  pass chat_set_show_help || fail chat_set_show_help "$(cat "$TMP/c7" "$TMP/c7.err")"
# seeded sampling is reproducible across chats
printf '/set seed 7\n/set temp 1\nLily\n' | "$KILN" chat -m "$M" -n 24 >"$TMP/s1" 2>/dev/null
printf 'Lily\n' | "$KILN" chat -m "$M" -n 24 --seed 7 --temp 1 >"$TMP/s2" 2>/dev/null
[ -s "$TMP/s1" ] && cmp -s "$TMP/s1" "$TMP/s2" && pass chat_seed || fail chat_seed "'$(cat "$TMP/s1")' vs '$(cat "$TMP/s2")'"

# a conversation that outgrows the context: a reply cut by it; the next turn drops the oldest turn
# (one line on stderr says so) and is answered as if it came first; /clear still starts afresh
"$KILN" run -m "$M" -p "The end" -c 24 -n -1 --temp 0 --ignore-eos >"$TMP/rune" 2>/dev/null
RE=$(tail -c +8 "$TMP/rune")
printf 'Once upon a time\nThe end\n/clear\nOnce upon a time\n' |
  "$KILN" chat -m "$M" -c 24 -n -1 --temp 0 --ignore-eos >"$TMP/c8" 2>"$TMP/c8.err"
st=$?
if [ $st -eq 0 ] && [ "$(grep -c 'context (24 tokens) is full: the reply was cut' "$TMP/c8.err")" -eq 3 ] &&
   [ "$(grep -c '^(the context is full: the 1 oldest turn was dropped)$' "$TMP/c8.err")" -eq 1 ] &&
   ! grep -q 'no longer fits' "$TMP/c8.err" && [ "$(wc -l <"$TMP/c8")" -eq 3 ] && [ -n "$RE" ] &&
   [ "$(sed -n 2p "$TMP/c8")" = "$RE" ] && [ "$(sed -n 1p "$TMP/c8")" = "$(sed -n 3p "$TMP/c8")" ]; then pass chat_context_full_drops_oldest
else fail chat_context_full_drops_oldest "exit $st, want line 2 '$RE': $(cat "$TMP/c8" "$TMP/c8.err")"; fi
# several short turns in a small context: the chat goes on, dropping what no longer fits
printf 'Lily\nTom\nThe dog\nThe cat\nA bird\nThe sun\n' |
  "$KILN" chat -m "$M" -c 48 -n 10 --temp 0 --ignore-eos >"$TMP/c9" 2>"$TMP/c9.err"
if [ $? -eq 0 ] && [ "$(wc -l <"$TMP/c9")" -eq 6 ] && grep -q 'oldest turns* w' "$TMP/c9.err" && ! grep -q 'no longer fits' "$TMP/c9.err"
then pass chat_many_turns_small_context; else fail chat_many_turns_small_context "$(cat "$TMP/c9" "$TMP/c9.err")"; fi
# a message that alone does not fit is refused, and the chat goes on
LONG=$(printf 'Lily went to the park. %.0s' 1 2 3 4 5 6 7 8 9 10)
printf '%s\nOnce upon a time\n' "$LONG" | "$KILN" chat -m "$M" -c 24 -n 6 --temp 0 --ignore-eos >"$TMP/c10" 2>"$TMP/c10.err"
if [ $? -eq 0 ] && grep -q 'message no longer fits the context.*/clear' "$TMP/c10.err" && [ "$(wc -l <"$TMP/c10")" -eq 1 ] &&
   [ -n "$(cat "$TMP/c10")" ]; then pass chat_message_too_long; else fail chat_message_too_long "$(cat "$TMP/c10" "$TMP/c10.err")"; fi

# a base model (no chat template): a reply is capped at 256 tokens and stops at a blank line by
# default (both shown by /set); --stop-at and /set stop_at change where it stops
printf 'Once upon a time\n/set\n' | "$KILN" chat -m "$M" --temp 0 --ignore-eos -v >"$TMP/b1" 2>"$TMP/b1.err"
grep -q 'generated 256 tokens' "$TMP/b1.err" && grep -q 'max_tokens 256  stop_at blank' "$TMP/b1" &&
  pass chat_base_defaults || fail chat_base_defaults "$(tail -n 2 "$TMP/b1") $(cat "$TMP/b1.err")"
"$KILN" run -m "$M" -p "Once upon a time" -n 256 --temp 0 --ignore-eos >"$TMP/runl" 2>/dev/null
RL=$(tail -c +17 "$TMP/runl" | head -n 1)   # the continuation up to its first line break
printf 'Once upon a time\n' | "$KILN" chat -m "$M" --temp 0 --ignore-eos --stop-at line >"$TMP/b2" 2>/dev/null
printf '/set stop_at line\nOnce upon a time\n/set stop_at none\n/set n 40\n/set\nOnce upon a time\n' |
  "$KILN" chat -m "$M" --temp 0 --ignore-eos -v >"$TMP/b3" 2>"$TMP/b3.err"
if [ -n "$RL" ] && [ "$(cat "$TMP/b2")" = "$RL" ] && [ "$(sed -n 1p "$TMP/b3")" = "$RL" ] &&
   grep -q 'max_tokens 40  stop_at none' "$TMP/b3" && grep -q 'generated 40 tokens' "$TMP/b3.err"
then pass chat_stop_at_line; else fail chat_stop_at_line "want '$RL' got '$(cat "$TMP/b2")' / $(cat "$TMP/b3" "$TMP/b3.err")"; fi
printf '/set stop_at paragraph\n/set\n' | "$KILN" chat -m "$M" >"$TMP/b4" 2>"$TMP/b4.err"
grep -q "stop_at is 'blank'" "$TMP/b4.err" && grep -q 'stop_at blank' "$TMP/b4" && pass chat_stop_at_bad ||
  fail chat_stop_at_bad "$(cat "$TMP/b4" "$TMP/b4.err")"
expect_exit chat_stop_at_flag_bad 2 "$KILN" chat -m "$M" --stop-at paragraph
expect_exit chat_stop_at_flag_missing 2 "$KILN" chat -m "$M" --stop-at

# usage errors; EOF at once ends the chat with 0
expect_exit chat_bad_flag 2 "$KILN" chat -m "$M" --no-such-flag
expect_exit chat_prompt_flag 2 "$KILN" chat -m "$M" -p hi
expect_exit chat_bad_temp 2 "$KILN" chat -m "$M" --temp x
expect_exit chat_no_model 1 "$KILN" chat </dev/null
expect_exit chat_help 0 "$KILN" help chat
expect_exit chat_eof 0 "$KILN" chat -m "$M" </dev/null

# ---- a model with a chat template: replies equal `kiln run` on the rendered conversation, and the
# second turn reuses the KV of the first ----
T="$DATA/chat-templates/llama.cpp/Qwen-Qwen2.5-7B-Instruct.jinja"
GEN="$BUILD/kiln-gen"
if [ -f "$T" ] && [ -x "$GEN" ] && "$GEN" --preset tiny-qwen2 --seed 5 --chat-template "$T" -o "$TMP/q.gguf" >/dev/null 2>&1; then
  Q="$TMP/q.gguf"
  # (--tool-format generic: the reply as it comes, not through the chat parser, which trims content)
  printf 'Hello there\nHow are you\n' | "$KILN" chat -m "$Q" -n 10 --temp 0 --ignore-eos -v --tool-format generic >"$TMP/q.out" 2>"$TMP/q.err"
  "$KILN" run -m "$Q" -p "Hello there" -n 10 --temp 0 --ignore-eos >"$TMP/q1" 2>/dev/null
  python3 - "$TMP" <<'EOF'
import json, sys
d = sys.argv[1]
r1 = open(d + "/q1", "rb").read()[:-1].decode()
msgs = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": r1},
        {"role": "user", "content": "How are you"}]
open(d + "/q2.json", "w").write(json.dumps({"messages": msgs, "add_generation_prompt": True}))
EOF
  "$KILN" template --model "$Q" --context "$TMP/q2.json" >"$TMP/q2.txt" 2>/dev/null
  "$KILN" run -m "$Q" --raw -f "$TMP/q2.txt" -n 10 --temp 0 --ignore-eos >"$TMP/q2" 2>/dev/null
  tail -c +$(($(wc -c <"$TMP/q2.txt") + 1)) "$TMP/q2" >"$TMP/q2.cont"
  cat "$TMP/q1" "$TMP/q2.cont" >"$TMP/q.want"
  cmp -s "$TMP/q.out" "$TMP/q.want" && pass chat_template_turns_equal_run || fail chat_template_turns_equal_run "$(head -c 300 "$TMP/q.err")"
  reused=$(sed -n 's/.*prompt [0-9]* tokens (\([0-9]*\) reused).*/\1/p' "$TMP/q.err" | sed -n 2p)
  [ "${reused:-0}" -gt 10 ] && pass chat_reuses_kv || fail chat_reuses_kv "$(cat "$TMP/q.err")"
  # with a chat template a reply runs to its end of turn: no cap, no stop at blank lines
  printf '/set\n' | "$KILN" chat -m "$Q" >"$TMP/q.set" 2>&1
  grep -q 'max_tokens -1  stop_at none' "$TMP/q.set" && pass chat_template_defaults || fail chat_template_defaults "$(cat "$TMP/q.set")"
else
  skip chat_template_turns_equal_run "no $T or $GEN"
fi

# ---- the terminal: driven through a pseudo-terminal ----
# ---- reasoning and tool calls through the chat parser ----
# A template whose generation prompt opens <think> makes the whole reply reasoning: on a pipe it is
# shown after "[reasoning] "; a hermes-format template leaves plain replies as they were; the
# deepseek-r1 format forced by --tool-format on a template that opens no thinking block shows content.
T26="$DATA/chat-templates/llama.cpp-2026"
if [ -f "$T26/Qwen3.5-4B.jinja" ]; then
  printf 'Hi\n' | "$KILN" chat -m "$M" --chat-template-file "$T26/Qwen3.5-4B.jinja" -n 12 --temp 0 --ignore-eos \
    >"$TMP/r1" 2>"$TMP/r1.err"
  # the same reply unparsed: --tool-format generic keeps a chat (which declares no tools) on the plain path
  printf 'Hi\n' | "$KILN" chat -m "$M" --chat-template-file "$T26/Qwen3.5-4B.jinja" -n 12 --temp 0 --ignore-eos \
    --tool-format generic >"$TMP/r1.plain" 2>/dev/null
  RR=$(sed 's/^[[:space:]]*//' "$TMP/r1.plain")
  if [ -n "$RR" ] && [ "$(cat "$TMP/r1")" = "[reasoning] $RR" ]; then pass chat_reasoning_prefixed
  else fail chat_reasoning_prefixed "got '$(cat "$TMP/r1")' want '[reasoning] $RR' $(head -c 300 "$TMP/r1.err")"; fi
  printf 'Hi\n' | "$KILN" chat -m "$M" --chat-template-file "$T26/Qwen-Qwen2.5-7B-Instruct.jinja" -n 12 --temp 0 \
    --ignore-eos >"$TMP/r2" 2>/dev/null
  printf 'Hi\n' | "$KILN" chat -m "$M" --chat-template-file "$T26/Qwen-Qwen2.5-7B-Instruct.jinja" -n 12 --temp 0 \
    --ignore-eos --tool-format deepseek-r1 >"$TMP/r3" 2>/dev/null
  if [ -s "$TMP/r2" ] && ! grep -q '\[reasoning\]' "$TMP/r2" && cmp -s "$TMP/r2" "$TMP/r3"; then pass chat_plain_reply_unchanged
  else fail chat_plain_reply_unchanged "'$(cat "$TMP/r2")' / '$(cat "$TMP/r3")'"; fi
  expect_exit chat_tool_format_unknown 2 "$KILN" chat -m "$M" --tool-format klingon
else
  skip chat_reasoning "no $T26"
fi

if ! python3 -c 'import pty' 2>/dev/null; then skip chat_pty "no python3 pty module"; exit 0; fi
mkdir -p "$TMP/home"
HOME="$TMP/home" python3 - "$KILN" "$M" "$R1" "$TMP/home" <<'EOF'
import os, pty, select, signal, sys, time
kiln, model, r1, home = sys.argv[1:5]
LIMIT = 120   # seconds before a wait counts as a hang (a failure guard, not a timing check)

def spawn(*args):
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.execv(kiln, [kiln, "chat", "-m", model] + list(args))
    return pid, fd

class Hang(Exception):
    pass

class Term:
    def __init__(self, *args):
        self.pid, self.fd = spawn(*args)
        self.buf = b""
        self.eof = False
    def fill(self, deadline):
        r, _, _ = select.select([self.fd], [], [], max(0, deadline - time.time()))
        if not r:
            raise Hang("timed out; last output %r" % self.buf[-300:])
        try:
            d = os.read(self.fd, 4096)
        except OSError:
            d = b""
        if not d:
            self.eof = True
            raise Hang("the chat ended; last output %r" % self.buf[-300:])
        self.buf += d
    def expect(self, pat):
        """Waits for pat; returns everything before it and consumes through it."""
        deadline = time.time() + LIMIT
        while pat not in self.buf:
            self.fill(deadline)
        i = self.buf.index(pat)
        got, self.buf = self.buf[:i], self.buf[i + len(pat):]
        return got
    def expect_bytes(self, n):
        deadline = time.time() + LIMIT
        while len(self.buf) < n:
            self.fill(deadline)
    def send(self, s):
        os.write(self.fd, s)
    def wait_exit(self):
        deadline = time.time() + LIMIT
        try:
            while not self.eof:
                self.fill(deadline)
        except Hang:
            pass
        for _ in range(LIMIT * 10):
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(st)
            time.sleep(0.1)
        return None
    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass

def check(name, ok, why=""):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)))

PROMPT = b">>> "
t = Term("--temp", "0", "-n", "12", "--ignore-eos", "-c", "60000")
step = "start"
try:
    t.expect(PROMPT)
    step = "chat_pty_stream"
    t.send(b"Once upon a time\r")
    t.expect(b"Once upon a time\r\n")          # the line as typed, echoed
    # (typed ahead of libedit's switch to raw mode, a line is echoed twice: by the terminal, then
    # by libedit; only the end of the output is the reply)
    reply = t.expect(PROMPT)
    check(step, reply.endswith(b"\r\n" + r1.encode() + b"\r\n\r\n") or reply == r1.encode() + b"\r\n\r\n",
          "reply %r, want %r" % (reply, r1))

    # a reply without a limit (the context is 60000 tokens): Ctrl-C once it streams
    step = "chat_pty_ctrl_c_reply"
    t.send(b"/set n -1\r")
    t.expect(PROMPT)
    t.send(b"Lily\r")
    t.expect(b"Lily\r\n")
    t.expect_bytes(40)
    # typed while the reply streams: not echoed into it (the reply goes on after the keys)
    t.send(b"xyzzy")
    t.expect_bytes(len(t.buf) + 80)
    t.send(b"\x03")
    stopped = t.expect(PROMPT)
    check(step, b"[reply stopped]" in stopped, "%r" % stopped[-200:])
    check("chat_pty_typed_not_in_reply", b"xyzz" not in stopped and b"yzzy" not in stopped, "%r" % stopped[-300:])

    # the keys wait for the next prompt, where they show as the line being typed
    step = "chat_pty_typed_at_next_prompt"
    held = t.expect(b"xyzzy")
    check(step, len(held) < 40, "%r before the typed text" % held)
    t.send(b"\x15")                           # Ctrl-U: the held line is not wanted

    step = "chat_pty_after_ctrl_c"
    t.send(b"/set n 8\r")
    t.expect(b"/set n 8\r\n")                 # (past the prompt libedit redraws for Ctrl-U)
    t.expect(PROMPT)
    t.send(b"Tom\r")
    t.expect(b"Tom\r\n")
    reply = t.expect(PROMPT)
    check(step, len(reply.strip()) > 0 and reply.endswith(b"\r\n\r\n"), "%r" % reply)

    step = "chat_pty_history_up"
    t.send(b"\x1b[A")                         # up arrow: the last line, Tom, comes back
    t.expect(b"Tom")
    t.send(b"\r")
    t.expect(b"\r\n")
    reply = t.expect(PROMPT)
    check(step, len(reply.strip()) > 0, "%r" % reply)

    step = "chat_pty_ctrl_c_prompt"
    t.send(b"abc")
    t.expect(b"abc")
    t.send(b"\x03")                           # discards the line
    t.expect(PROMPT)
    t.send(b"\x03")                           # a second one in a row: the hint
    hint = t.expect(PROMPT)
    check(step, b"/quit" in hint, "%r" % hint)

    step = "chat_pty_quit"
    t.send(b"/quit\r")
    code = t.wait_exit()
    check(step, code == 0, "exit %r" % code)

    step = "chat_history_file"
    try:
        hist = open(os.path.join(home, ".cache/kiln/chat_history"), "rb").read().replace(b"\\040", b" ")
    except OSError as e:
        hist = repr(e).encode()
    check(step, b"Once upon a time" in hist and b"Tom" in hist and b"/quit" in hist and b"abc" not in hist, "%r" % hist)
except Hang as e:
    print("FAIL %s: %s" % (step, e))
finally:
    t.kill()

# a base model in a small context: the reply stops at the cap (/set shows it), and a turn that no
# longer fits drops the oldest one with one dim line, instead of being refused
t = Term("--temp", "0", "-c", "40", "--ignore-eos")
step = "chat_pty_base_settings"
try:
    t.expect(PROMPT)
    t.send(b"/set\r")
    shown = t.expect(PROMPT)
    check(step, b"max_tokens 256  stop_at blank" in shown, "%r" % shown)
    step = "chat_pty_context_drops_oldest"
    t.send(b"Once upon a time\r")
    t.expect(b"Once upon a time\r\n")
    first = t.expect(PROMPT)
    t.send(b"Lily\r")
    t.expect(b"Lily\r\n")
    second = t.expect(PROMPT)
    note = b"\x1b[2m(the context is full: the 1 oldest turn was dropped)\x1b[0m"
    check(step, b"is full: the reply was cut" in first and note in second and second.count(b"oldest turn") == 1 and
          len(second.split(note)[1].strip()) > 0 and b"no longer fits" not in second, "%r / %r" % (first, second))
    t.send(b"/quit\r")
    t.wait_exit()
except Hang as e:
    print("FAIL %s: %s" % (step, e))
finally:
    t.kill()

# Ctrl-D on an empty line leaves with 0; the history of the last chat comes back with up arrow
t = Term("--temp", "0", "-n", "4")
step = "chat_pty_ctrl_d"
try:
    t.expect(PROMPT)
    t.send(b"\x1b[A")
    t.expect(b"/quit")
    t.send(b"\x15")                           # Ctrl-U: clear the line again
    t.send(b"\x04")
    code = t.wait_exit()
    check(step, code == 0, "exit %r" % code)
except Hang as e:
    print("FAIL %s: %s" % (step, e))
finally:
    t.kill()
# a signal that ends the chat during a reply (while the terminal's echo is held off) puts the
# terminal's settings back first
import termios
t = Term("--temp", "0", "-n", "-1", "--ignore-eos", "-c", "60000")
step = "chat_pty_sigterm_restores_terminal"
try:
    t.expect(PROMPT)
    before = termios.tcgetattr(t.fd)[3]
    t.send(b"Lily\r")
    t.expect(b"Lily\r\n")
    t.expect_bytes(40)
    during = termios.tcgetattr(t.fd)[3]
    os.kill(t.pid, signal.SIGTERM)
    code = t.wait_exit()
    after = termios.tcgetattr(t.fd)[3]
    check(step, not (during & termios.ECHO) and (after & termios.ECHO) and (after & termios.ICANON) and code == -signal.SIGTERM,
          "lflag before %#x during %#x after %#x, exit %r" % (before, during, after, code))
except (Hang, termios.error) as e:
    print("FAIL %s: %s" % (step, e))
finally:
    t.kill()
EOF
