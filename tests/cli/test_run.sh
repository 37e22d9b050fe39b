# test_run.sh - `kiln run` end to end: golden greedy output of the real stories260K model, seeded
# sampling, the summary line on a line of its own (a shared log, a terminal), and every kind of bad
# input (bad flags exit 2; bad files exit 1 with a message).
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
G="$DATA/models/stories260K/golden"
if [ ! -f "$M" ]; then skip run_golden "no $M"; exit 0; fi

"$KILN" run -m "$M" -p "Once upon a time" -n 200 --temp 0 >"$TMP/a" 2>"$TMP/a.err"
starts_with golden_once_upon_a_time "$TMP/a" "$G/greedy_once_upon_a_time_n64.txt"
"$KILN" run -m "$M" -p "" -n 300 --temp 0 >"$TMP/b" 2>"$TMP/b.err"
starts_with golden_noprompt "$TMP/b" "$G/greedy_noprompt_n256.txt"
grep -q "prompt .* tokens.*generated .* tokens" "$TMP/a.err" && pass run_summary_line || fail run_summary_line "$(cat "$TMP/a.err")"
# stdout and stderr in one log (2>&1, as in CI): the text ends with a newline before the summary, so
# the summary is a line of its own; the same through a terminal
"$KILN" run -m "$M" -p "Once upon a time" -n 12 --temp 0 --ignore-eos >"$TMP/log" 2>&1
if [ "$(tail -n 1 "$TMP/log" | cut -c 1-14)" = "kiln: prompt 5" ] && [ "$(head -n 1 "$TMP/log" | cut -c 1-17)" = "Once upon a time," ] &&
   [ "$(wc -l <"$TMP/log")" -eq 2 ]; then pass run_log_summary_own_line
else fail run_log_summary_own_line "$(cat "$TMP/log")"; fi
if python3 -c 'import pty' 2>/dev/null; then
  python3 - "$KILN" "$M" <<'EOF2'
import os, pty, select, sys, time
kiln, model = sys.argv[1:3]
pid, fd = pty.fork()
if pid == 0:
    os.execv(kiln, [kiln, "run", "-m", model, "-p", "Once upon a time", "-n", "12", "--temp", "0", "--ignore-eos"])
buf, deadline = b"", time.time() + 120   # a guard against a hang, not a timing check
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 1)
    if not r:
        continue
    try:
        d = os.read(fd, 4096)
    except OSError:
        d = b""
    if not d:
        break
    buf += d
os.waitpid(pid, 0)
lines = buf.split(b"\r\n")
ok = len(lines) >= 3 and lines[-1] == b"" and lines[-2].startswith(b"kiln: prompt 5") and b"Once upon a time," in lines[-3]
print("PASS run_pty_summary_own_line" if ok else "FAIL run_pty_summary_own_line: %r" % buf[-300:])
EOF2
else
  skip run_pty_summary_own_line "no python3 pty module"
fi

# greedy output is the same with one and two threads, F16 and F32 KV, small prefill chunks, mmap
"$KILN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 -t 1 >"$TMP/t1" 2>/dev/null
"$KILN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 -t 2 -b 3 >"$TMP/t2" 2>/dev/null
"$KILN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --mmap >"$TMP/t3" 2>/dev/null
cmp -s "$TMP/t1" "$TMP/t2" && cmp -s "$TMP/t1" "$TMP/t3" && pass greedy_same_threads_chunks_mmap || fail greedy_same_threads_chunks_mmap
"$KILN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --kv-type f32 >"$TMP/t4" 2>/dev/null
[ -s "$TMP/t4" ] && pass kv_f32_runs || fail kv_f32_runs

# the scalar reference kernels give the same greedy tokens as the SIMD ones
"$KILN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --kernels ref >"$TMP/k1" 2>/dev/null
cmp -s "$TMP/t1" "$TMP/k1" && pass kernels_ref_equals_auto || fail kernels_ref_equals_auto
expect_exit bad_kernels 2 "$KILN" run -m "$M" --kernels fast

# seeds: same seed, same text; different seeds, different text
"$KILN" run -m "$M" -p "Lily" -n 64 --temp 1 --seed 42 >"$TMP/s1" 2>/dev/null
"$KILN" run -m "$M" -p "Lily" -n 64 --temp 1 --seed 42 >"$TMP/s2" 2>/dev/null
"$KILN" run -m "$M" -p "Lily" -n 64 --temp 1 --seed 43 >"$TMP/s3" 2>/dev/null
cmp -s "$TMP/s1" "$TMP/s2" && pass same_seed_same_text || fail same_seed_same_text
cmp -s "$TMP/s1" "$TMP/s3" && fail different_seed_different_text || pass different_seed_different_text

# -n counts new tokens; -f reads the prompt from a file
printf 'Once upon a time' >"$TMP/prompt.txt"
"$KILN" run -m "$M" -f "$TMP/prompt.txt" -n 200 --temp 0 >"$TMP/f" 2>/dev/null
cmp -s "$TMP/f" "$TMP/a" && pass prompt_from_file || fail prompt_from_file
"$KILN" run -m "$M" -p "Once" -n 5 --temp 0 --ignore-eos 2>"$TMP/n.err" >/dev/null
grep -q "generated 5 tokens" "$TMP/n.err" && pass n_counts_new_tokens || fail n_counts_new_tokens "$(cat "$TMP/n.err")"

# bad usage: exit 2
expect_exit bad_flag 2 "$KILN" run -m "$M" --no-such-flag
expect_exit missing_value 2 "$KILN" run -m "$M" -n
expect_exit bad_number 2 "$KILN" run -m "$M" -n abc
expect_exit bad_temp 2 "$KILN" run -m "$M" --temp -1
expect_exit unknown_verb 2 "$KILN" frobnicate
# no arguments = `kiln serve` with automatic choices: with no model anywhere, exit 1 and say how
# to get one (tests/cli/test_models.sh covers the rest)
mkdir -p "$TMP/nohome"
expect_exit no_args 1 env HOME="$TMP/nohome" KILN_MODEL= KILN_MODELS= HF_HUB_CACHE= HF_HOME= XDG_CACHE_HOME= "$KILN"
expect_exit version 0 "$KILN" --version
expect_exit help 0 "$KILN" help run

# bad files: exit 1 with a message
expect_exit missing_file 1 "$KILN" run -m "$TMP/nope.gguf" -p hi
expect_exit directory 1 "$KILN" run -m "$TMP" -p hi
: >"$TMP/empty.gguf"
expect_exit empty_file 1 "$KILN" run -m "$TMP/empty.gguf" -p hi
head -c 5000 "$M" >"$TMP/trunc.gguf"
expect_exit truncated_file 1 "$KILN" run -m "$TMP/trunc.gguf" -p hi
head -c 1100000 "$M" >"$TMP/trunc2.gguf"
expect_exit truncated_in_tensors 1 "$KILN" run -m "$TMP/trunc2.gguf" -p hi
printf 'not a model at all' >"$TMP/text.gguf"
expect_exit not_gguf 1 "$KILN" run -m "$TMP/text.gguf" -p hi
expect_exit no_model_flag 1 "$KILN" run -p hi
expect_exit prompt_too_long 1 "$KILN" run -m "$M" -c 8 -p "Once upon a time there was a little girl named Lily who loved to play"

# the other real model (F16 weights, full Llama-2 vocabulary) loads and generates
R="$DATA/models/llama-2-tiny-random/llama-2-tiny-random.gguf"
if [ -f "$R" ]; then
  expect_exit tiny_random_f16_runs 0 "$KILN" run -m "$R" -p "Hello world" -n 16 --temp 0
else
  skip tiny_random_f16_runs "no $R"
fi
