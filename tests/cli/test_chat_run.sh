# test_chat_run.sh - `kiln run` on a model with a chat template: the prompt goes in as a user
# message rendered by the template (the same text `kiln template --model` renders), and --raw sends
# it as it is.
. tests/cli/lib.sh
T="$DATA/chat-templates/llama.cpp/Qwen-Qwen2.5-7B-Instruct.jinja"
GEN="$BUILD/kiln-gen"
if [ ! -f "$T" ] || [ ! -x "$GEN" ]; then skip chat_run "no $T or $GEN"; exit 0; fi
M="$TMP/chat.gguf"
"$GEN" --preset tiny-qwen2 --seed 5 --chat-template "$T" -o "$M" >/dev/null 2>&1 || { fail chat_run_gen; exit 0; }

printf '{"messages":[{"role":"user","content":"Hello there"}],"add_generation_prompt":true}' >"$TMP/ctx.json"
"$KILN" template --model "$M" --context "$TMP/ctx.json" >"$TMP/rendered" 2>"$TMP/err"
grep -q '<|im_start|>user' "$TMP/rendered" && pass chat_run_template_renders || fail chat_run_template_renders "$(cat "$TMP/err")"

"$KILN" run -m "$M" -p "Hello there" -n 12 --temp 0 --ignore-eos >"$TMP/chat.out" 2>"$TMP/chat.err"
"$KILN" run -m "$M" --raw -f "$TMP/rendered" -n 12 --temp 0 --ignore-eos >"$TMP/raw.out" 2>/dev/null
# --raw echoes the prompt first; the continuation must be the same.
raw_cont=$(tail -c +$(($(wc -c <"$TMP/rendered") + 1)) "$TMP/raw.out")
chat_out=$(cat "$TMP/chat.out")
if [ -n "$chat_out" ] && [ "$chat_out" = "$raw_cont" ]; then pass chat_run_uses_template
else fail chat_run_uses_template "chat '$chat_out' vs raw '$raw_cont' $(cat "$TMP/chat.err")"; fi
grep -q 'prompt [0-9]* tokens' "$TMP/chat.err" && pass chat_run_summary || fail chat_run_summary "$(cat "$TMP/chat.err")"

# --raw with the plain text is a different prompt, so (almost surely) a different continuation.
"$KILN" run -m "$M" --raw -p "Hello there" -n 12 --temp 0 --ignore-eos >"$TMP/plain.out" 2>/dev/null
[ "$(cat "$TMP/plain.out")" != "Hello there$chat_out" ] && pass chat_run_raw_differs || fail chat_run_raw_differs
