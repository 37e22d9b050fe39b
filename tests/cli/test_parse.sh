# test_parse.sh - `kiln parse`: a model's raw reply on stdin -> the OpenAI message, with the state the
# template's generation prompt leaves (an opened thinking block), tools, kwargs, --tool-format, the
# streamed deltas (--deltas) and the errors. Outputs are compared exactly (--seed fixes the ids kiln
# makes for calls the model writes without one).
. tests/cli/lib.sh
T="$DATA/chat-templates/llama.cpp-2026"
if [ ! -d "$T" ]; then skip parse "no $T"; exit 0; fi

# check NAME WANT_FILE GOT_FILE
check() {
  if cmp -s "$2" "$3"; then pass "$1"; else fail "$1" "want $(cat "$2") got $(head -c 600 "$3") $(head -c 300 "$TMP/err")"; fi
}

cat >"$TMP/tools.json" <<'EOF'
[{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                 "required": ["city"]}}}]
EOF

# Hermes / Qwen2.5: content before a call, the call with its arguments
printf 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>' >"$TMP/raw1"
"$KILN" parse --template "$T/Qwen-Qwen2.5-7B-Instruct.jinja" --tools "$TMP/tools.json" --seed 1 <"$TMP/raw1" >"$TMP/out1" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":"Let me look.\n","tool_calls":[{"id":"call_zvlZ6MRqCXMUnxuYUQYyy6NH","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":2}"}}]}' >"$TMP/want1"
check parse_hermes_call "$TMP/want1" "$TMP/out1"

# DeepSeek R1 distill: the generation prompt opens <think>, so the reply starts in reasoning
printf 'The user greets me.</think>\n\nHello!' | "$KILN" parse --template "$T/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja" >"$TMP/out2" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":"Hello!","reasoning_content":"The user greets me."}' >"$TMP/want2"
check parse_prompt_opened_thinking "$TMP/want2" "$TMP/out2"

# Qwen3.5: enable_thinking through --chat-template-kwargs decides whether the prompt opens <think>
printf 'Hi there.' | "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --chat-template-kwargs '{"enable_thinking": false}' >"$TMP/out3" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":"Hi there."}' >"$TMP/want3"
check parse_kwargs_thinking_off "$TMP/want3" "$TMP/out3"
printf 'Greeting.\n</think>\n\nHi there.' | "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --chat-template-kwargs '{"enable_thinking": true}' >"$TMP/out4" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":"Hi there.","reasoning_content":"Greeting."}' >"$TMP/want4"
check parse_kwargs_thinking_on "$TMP/want4" "$TMP/out4"
# ... and with --reasoning-format none the thinking block stays in content, opening marker included
printf 'Greeting.\n</think>\n\nHi there.' | "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --chat-template-kwargs '{"enable_thinking": true}' \
  --reasoning-format none >"$TMP/out5" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":"<think>\nGreeting.\n</think>\n\nHi there."}' >"$TMP/want5"
check parse_reasoning_none "$TMP/want5" "$TMP/out5"

# Qwen3-Coder XML parameters: a string parameter stays a string, an integer one becomes a number
printf '<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>' |
  "$KILN" parse --template "$T/Qwen3-Coder.jinja" --tools "$TMP/tools.json" --seed 1 >"$TMP/out6" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":null,"tool_calls":[{"id":"call_zvlZ6MRqCXMUnxuYUQYyy6NH","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"42\",\"days\":3}"}}]}' >"$TMP/want6"
check parse_xml_typed_values "$TMP/want6" "$TMP/out6"

# gpt-oss harmony: analysis is reasoning, a message to functions.x is a call
printf '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Oslo"}' |
  "$KILN" parse --template "$T/openai-gpt-oss-120b.jinja" --tools "$TMP/tools.json" --seed 1 >"$TMP/out7" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":null,"reasoning_content":"Need weather.","tool_calls":[{"id":"call_zvlZ6MRqCXMUnxuYUQYyy6NH","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]}' >"$TMP/want7"
check parse_harmony "$TMP/want7" "$TMP/out7"

# --tool-format overrides the template's format; Mistral's made-up ids are 9 alphanumerics
printf '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}' | "$KILN" parse --template "$T/Qwen-Qwen2.5-7B-Instruct.jinja" \
  --tool-format mistral --seed 1 >"$TMP/out8" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":null,"tool_calls":[{"id":"zvlZ6MRqC","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]}' >"$TMP/want8"
check parse_tool_format_override "$TMP/want8" "$TMP/out8"

# --deltas fed one byte at a time: reasoning, content, then the call's first delta with id and name;
# the argument fragments add up to the final arguments, and markup never shows as content
printf '<think>Plan.</think>Checking <tool_call>{"name": "get_weather", "arguments": {"city": "Nice"}}</tool_call>' |
  "$KILN" parse --template "$T/Qwen-Qwen3-0.6B.jinja" --deltas --chunk 1 --seed 1 >"$TMP/out9" 2>"$TMP/err"
last=$(tail -n 1 "$TMP/out9")
if grep -q '"content":"<' "$TMP/out9" || grep -q '"content":"[^"]*<tool' "$TMP/out9"; then
  fail parse_deltas_no_markup "$(cat "$TMP/out9")"
else pass parse_deltas_no_markup; fi
r=$(grep -c '"reasoning_content":' "$TMP/out9")
first=$(grep -m1 -n '"tool_calls"' "$TMP/out9" | cut -d: -f1)
if [ "$(sed -n "${first}p" "$TMP/out9" | grep -c '"id":"call_zvlZ6MRqCXMUnxuYUQYyy6NH"')" = 1 ] &&
   [ "$(grep -c '"id":' "$TMP/out9")" = 2 ] && [ "$r" -ge 2 ]; then
  pass parse_deltas_first_has_id
else fail parse_deltas_first_has_id "$(cat "$TMP/out9")"; fi
case "$last" in
  *'"arguments":"{\"city\":\"Nice\"}"'*) pass parse_deltas_final ;;
  *) fail parse_deltas_final "$last" ;;
esac
PY=$(command -v python3)
if [ -n "$PY" ]; then
  if "$PY" - "$TMP/out9" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
final, deltas = lines[-1], lines[:-1]
content = "".join(d.get("content", "") for d in deltas)
reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d)
ok = content == final["content"] and reasoning == final["reasoning_content"]
ok = ok and args == final["tool_calls"][0]["function"]["arguments"]
sys.exit(0 if ok else 1)
EOF
  then pass parse_deltas_rebuild_message; else fail parse_deltas_rebuild_message "$(cat "$TMP/out9")"; fi
else
  skip parse_deltas_rebuild_message "no python3"
fi

# a template that does not render with these inputs: a warning, and the reply is still parsed
printf 'Just text.' | "$KILN" parse --template "$T/fireworks-ai-llama-3-firefunction-v2.jinja" --tools "$TMP/tools.json" >"$TMP/out10" 2>"$TMP/err"
printf '%s\n' '{"role":"assistant","content":"Just text."}' >"$TMP/want10"
check parse_unrenderable_template "$TMP/want10" "$TMP/out10"
grep -q warning "$TMP/err" && pass parse_unrenderable_warns || fail parse_unrenderable_warns "$(cat "$TMP/err")"

# --list-formats, help, errors
"$KILN" parse --list-formats >"$TMP/formats" 2>&1
grep -q '^hermes ' "$TMP/formats" && grep -q '^gpt-oss ' "$TMP/formats" && pass parse_list_formats || fail parse_list_formats "$(head -3 "$TMP/formats")"
expect_exit parse_help 0 "$KILN" help parse
expect_exit parse_needs_template 2 "$KILN" parse
expect_exit parse_unknown_format 1 "$KILN" parse --tool-format no-such </dev/null
expect_exit parse_bad_reasoning_format 2 "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --reasoning-format maybe
expect_exit parse_bad_kwargs 2 "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --chat-template-kwargs '{"a":'
expect_exit parse_kwargs_not_object 2 "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --chat-template-kwargs '[1]'
printf '{"type": "function"}' >"$TMP/bad_tools.json"
expect_exit parse_tools_not_array 1 "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --tools "$TMP/bad_tools.json"
printf '[{"type": "function", "function": {"description": "no name"}}]' >"$TMP/noname.json"
expect_exit parse_tool_without_name 1 "$KILN" parse --template "$T/Qwen3.5-4B.jinja" --tools "$TMP/noname.json" </dev/null
grep -q 'tools\[0\]' "$TMP/err" && pass parse_tool_without_name_message || fail parse_tool_without_name_message "$(cat "$TMP/err")"
expect_exit parse_missing_template 1 "$KILN" parse --template "$TMP/none.jinja"
expect_exit parse_bad_flag 2 "$KILN" parse --frobnicate
