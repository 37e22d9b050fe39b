# test_templates.sh - `kiln template` and the Jinja2 interpreter against the reference: every real chat
# template in $DATA/chat-templates/llama.cpp and $DATA/chat-templates/llama.cpp-2026 is rendered with
# every context in tests/conformance/contexts (plain chats, tools, assistant tool_calls with and without
# reasoning_content, tool results, enable_thinking true and false, ...) by kiln and by Python's jinja2
# set up as Hugging Face's apply_chat_template (tests/conformance/jinja_oracle.py), each side in one
# process (`kiln template --batch`, jinja_oracle.py --batch). The outputs must be byte-identical, and a
# template that raises in Python must fail in kiln (an error; the messages may differ). One PASS/FAIL
# line per template, naming the first differing context with a diff excerpt; a template in KNOWN_FAILURES below is a SKIP with its reason while it differs (and a FAIL once it
# passes, so that the list stays true). Then the CLI's own behaviour: error positions, exit codes,
# --model with a GGUF that carries a template.
. tests/cli/lib.sh
C=tests/conformance/contexts
# Both renderers take strftime_now's "now" from here (2024-07-26 00:00:00 UTC).
SOURCE_DATE_EPOCH=1721952000
export SOURCE_DATE_EPOCH

# ---- CLI behaviour (no Python needed) ----
printf 'Hello {{ name }}!' >"$TMP/t1.jinja"
printf '{"name": "W\\u00f6rld"}' >"$TMP/c1.json"
"$KILN" template --template "$TMP/t1.jinja" --context "$TMP/c1.json" >"$TMP/o1" 2>"$TMP/e1"
printf 'Hello Wörld!' >"$TMP/w1"
cmp -s "$TMP/o1" "$TMP/w1" && pass template_renders_exactly || fail template_renders_exactly "$(head -c 200 "$TMP/o1") $(cat "$TMP/e1")"
printf 'line one\n{{ 1 +  }}\n' >"$TMP/bad.jinja"
expect_exit template_syntax_error 1 "$KILN" template --template "$TMP/bad.jinja" --context "$TMP/c1.json"
grep -q "line 2, column" "$TMP/err" && pass template_error_has_position || fail template_error_has_position "$(cat "$TMP/err")"
printf '{{ raise_exception("no way") }}' >"$TMP/raise.jinja"
expect_exit template_raise_exception 1 "$KILN" template --template "$TMP/raise.jinja" --context "$TMP/c1.json"
grep -q "no way" "$TMP/err" && pass template_raise_message || fail template_raise_message "$(cat "$TMP/err")"
printf '[1, 2]' >"$TMP/notobj.json"
expect_exit template_context_not_object 1 "$KILN" template --template "$TMP/t1.jinja" --context "$TMP/notobj.json"
printf '{"a": ' >"$TMP/broken.json"
expect_exit template_context_malformed 1 "$KILN" template --template "$TMP/t1.jinja" --context "$TMP/broken.json"
expect_exit template_missing_file 1 "$KILN" template --template "$TMP/nope.jinja"
expect_exit template_no_source 2 "$KILN" template --context "$TMP/c1.json"
expect_exit template_both_sources 2 "$KILN" template --template "$TMP/t1.jinja" -m "$TMP/x.gguf"
expect_exit template_bad_flag 2 "$KILN" template --template "$TMP/t1.jinja" --frobnicate
expect_exit template_missing_value 2 "$KILN" template --template
expect_exit template_help 0 "$KILN" help template

# --model: the template of a GGUF file, with bos/eos from its vocabulary
P3="$DATA/tokenizer-tests/llama.cpp-vocab/ggml-vocab-phi-3.gguf"
if [ -f "$P3" ]; then
  printf '{"messages": [{"role": "user", "content": "Hi"}]}' >"$TMP/chat.json"
  "$KILN" template --model "$P3" --context "$TMP/chat.json" >"$TMP/m1" 2>"$TMP/m1.err"
  printf '<s><|user|>\nHi<|end|>\n<|assistant|>\n' >"$TMP/m1.want"
  cmp -s "$TMP/m1" "$TMP/m1.want" && pass template_model_phi3 || fail template_model_phi3 "$(head -c 200 "$TMP/m1") $(cat "$TMP/m1.err")"
else
  skip template_model_phi3 "no $P3"
fi
S="$DATA/models/stories260K/stories260K.gguf"
if [ -f "$S" ]; then
  printf '{"messages": [{"role": "system", "content": "A"}, {"role": "user", "content": [{"type": "text", "text": "B"}, {"type": "text", "text": "C"}]}, {"role": "assistant", "content": null}]}' >"$TMP/chat2.json"
  "$KILN" template --model "$S" --context "$TMP/chat2.json" >"$TMP/m2" 2>"$TMP/m2.err"
  printf 'A\n\nBC' >"$TMP/m2.want"
  cmp -s "$TMP/m2" "$TMP/m2.want" && pass template_model_plain_fallback || fail template_model_plain_fallback "$(head -c 200 "$TMP/m2") $(cat "$TMP/m2.err")"
else
  skip template_model_plain_fallback "no $S"
fi

# ---- conformance with Python's jinja2 ----
# KNOWN_FAILURES: "folder/template-name|reason" lines for templates kiln does not yet render exactly.
# (None today: all 72 templates of both folders render byte-identically.)
KNOWN_FAILURES=""

known_reason() {
  printf '%s\n' "$KNOWN_FAILURES" | while IFS='|' read -r k why; do
    if [ "$k" = "$1" ]; then echo "$why"; fi
  done
}

PY=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import jinja2' >/dev/null 2>&1; then PY=$p; break; fi
done
if [ -z "$PY" ]; then skip template_conformance "no python3 with jinja2 (scripts/setup installs python3-jinja2)"; exit 0; fi

# oracle FOLDER: starts Python's renderings of every template of $DATA/chat-templates/FOLDER with every
# context in the background (the two folders' at once, one a core); conform waits for its folder's.
oracle() {
  T="$DATA/chat-templates/$1"
  [ -d "$T" ] || return 0
  mkdir -p "$TMP/$1/oracle" "$TMP/$1/kiln"
  ("$PY" tests/conformance/jinja_oracle.py --batch "$TMP/$1/oracle" "$T"/*.jinja -- "$C"/*.json 2>"$TMP/$1/oracle.err"
    echo $? >"$TMP/$1/oracle.st") &
}

# conform FOLDER: every template of $DATA/chat-templates/FOLDER against every context.
conform() {
  folder=$1
  T="$DATA/chat-templates/$folder"
  if [ ! -d "$T" ]; then skip "template_conformance_$folder" "no $T"; return; fi
  O="$TMP/$folder/oracle"
  K="$TMP/$folder/kiln"
  t0=$(date +%s.%N)
  # kiln renders every pair in one process, into .out files, or .err files where rendering failed
  # (the one-pair command's exit status 1, which the CLI checks above cover)
  if ! "$KILN" template --batch "$K" "$T"/*.jinja -- "$C"/*.json 2>"$TMP/$folder/kiln.err"; then
    fail "template_kiln_batch_runs_$folder" "$(head -c 300 "$TMP/$folder/kiln.err")"
    return
  fi
  t1=$(date +%s.%N)
  while [ ! -s "$TMP/$folder/oracle.st" ]; do sleep 0.2; done
  if [ "$(cat "$TMP/$folder/oracle.st")" != 0 ]; then
    fail "template_oracle_runs_$folder" "$(head -c 300 "$TMP/$folder/oracle.err")"
    return
  fi
  t2=$(date +%s.%N)
  # the pairs whose outputs differ, one name a line (one diff instead of a cmp per pair)
  differ=$(diff -rq "$O" "$K" 2>/dev/null | sed -n 's|^Files .*/\([^/]*\)\.out and .* differ$|\1|p')
  pairs=0
  ntemplates=0
  npass=0
  for t in "$T"/*.jinja; do
    name=${t##*/}
    name=${name%.jinja}
    ntemplates=$((ntemplates + 1))
    bad=""
    for c in "$C"/*.json; do
      cn=${c##*/}
      cn=${cn%.json}
      base="${name}__$cn"
      pairs=$((pairs + 1))
      if [ -f "$O/$base.raised" ]; then
        if [ ! -f "$K/$base.err" ]; then
          bad="$cn: Python raised ($(head -c 200 "$O/$base.raised")) but kiln rendered it"
          break
        fi
      elif [ -f "$K/$base.err" ]; then
        bad="$cn: kiln failed: $(head -c 300 "$K/$base.err")"
        break
      elif [ ! -f "$K/$base.out" ] || [ ! -f "$O/$base.out" ]; then
        bad="$cn: no output (oracle or kiln)"
        break
      else
        case "
$differ
" in
          *"
$base
"*)
            bad="$cn: output differs from Python's ($(cmp "$O/$base.out" "$K/$base.out" 2>&1 | head -n 1))"
            break
            ;;
        esac
      fi
    done
    why=$(known_reason "$folder/$name")
    if [ -z "$bad" ]; then
      npass=$((npass + 1))
      if [ -n "$why" ]; then
        fail "template_$name" "renders exactly now: remove it from KNOWN_FAILURES"
      else
        pass "template_$name"
      fi
    elif [ -n "$why" ]; then
      skip "template_$name" "known failure: $why ($bad)"
    else
      fail "template_$name" "$bad"
      if [ -f "$O/$base.out" ] && [ -f "$K/$base.out" ]; then
        diff "$O/$base.out" "$K/$base.out" | head -n 12 | sed 's/^/  /'
      fi
    fi
  done
  echo "# $folder: $npass of $ntemplates templates byte-identical; $pairs template x context pairs: kiln" \
    "$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }") s, then $(awk "BEGIN { printf \"%.1f\", $t2 - $t1 }") s waiting" \
    "for the python oracle (both folders' run at once)"
}

oracle llama.cpp
oracle llama.cpp-2026
conform llama.cpp
conform llama.cpp-2026
wait
