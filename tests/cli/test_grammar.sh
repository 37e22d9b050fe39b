# test_grammar.sh - `kiln grammar` (compile a JSON Schema, GBNF grammar or JSON mode; --check;
# --print-gbnf; exit codes 0 / 1 rejected / 2 error) on the files in tests/cli/grammar/ and two
# real-world schemas of ../shared/data/json-schemas (read in place), and `kiln run` with a
# constraint on the real stories260K model. The server's side is tests/client/structured.test.mjs.
. tests/cli/lib.sh
G=tests/cli/grammar
S="$DATA/json-schemas"

# expect_out NAME CODE PATTERN CMD...: like expect_exit, and the command's stdout+stderr must match
# the extended regular expression PATTERN.
expect_out() {
  name=$1; code=$2; pat=$3; shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  got=$?
  if [ "$got" -ne "$code" ]; then
    fail "$name" "exit $got, expected $code; $(head -c 400 "$TMP/err")"; return; fi
  if ! cat "$TMP/out" "$TMP/err" | grep -Eq -- "$pat"; then
    fail "$name" "output does not match /$pat/: $(cat "$TMP/out" "$TMP/err" | head -c 400)"; return; fi
  pass "$name"
}

# ---- compiling ----
expect_out schema_compiles 0 'person.schema.json: compiles' "$KILN" grammar --schema $G/person.schema.json
expect_out gbnf_compiles 0 'object-a.gbnf: compiles' "$KILN" grammar --gbnf $G/object-a.gbnf
expect_out json_object_compiles 0 'JSON mode: compiles' "$KILN" grammar --json-object
expect_out schema_inline_text 0 'compiles' "$KILN" grammar --json-schema '{"type": "integer"}'
expect_out help_lists_exit_codes 0 'Exit status' "$KILN" help grammar
# A schema enforced approximately compiles with a note naming the keyword; an exact one has none.
printf '{"type": "object", "properties": {"to": {"type": "string", "format": "url"}}}' >"$TMP/host.schema.json"
expect_out schema_approximation_noted 0 "note: .*host.schema.json is enforced approximately.*#/properties/to/format" \
  "$KILN" grammar --schema "$TMP/host.schema.json"
expect_out schema_exact_compiles 0 'person.schema.json: compiles' "$KILN" grammar --schema $G/person.schema.json
if grep -q "note:" "$TMP/err"; then fail schema_exact_no_note "$(cat "$TMP/err")"; else pass schema_exact_no_note; fi

# Bad grammars and schemas: exit 2, the message names the place.
printf 'root ::= value\n' >"$TMP/undefined.gbnf"
expect_out gbnf_undefined_rule 2 'undefined.gbnf does not compile: .*line 1, column [0-9]+' \
  "$KILN" grammar --gbnf "$TMP/undefined.gbnf"
printf 'value ::= "a"\n' >"$TMP/noroot.gbnf"
expect_out gbnf_no_root 2 'noroot.gbnf does not compile: .*root' "$KILN" grammar --gbnf "$TMP/noroot.gbnf"
printf 'root ::= "x"\nlist ::= list "," item | item\nitem ::= "i"\n' >"$TMP/leftrec.gbnf"
expect_out gbnf_left_recursion 2 'leftrec.gbnf does not compile: .*line [0-9]+' "$KILN" grammar --gbnf "$TMP/leftrec.gbnf"
printf 'root ::= "unterminated\n' >"$TMP/syntax.gbnf"
expect_out gbnf_syntax_error 2 'syntax.gbnf does not compile: .*line 1, column [0-9]+' \
  "$KILN" grammar --gbnf "$TMP/syntax.gbnf"
printf '{"type": "object",' >"$TMP/notjson.schema.json"
expect_out schema_not_json 2 'notjson.schema.json does not compile' "$KILN" grammar --schema "$TMP/notjson.schema.json"
printf '{"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}' >"$TMP/remote.schema.json"
expect_out schema_remote_ref 2 'remote.schema.json does not compile: .*/properties/x' \
  "$KILN" grammar --schema "$TMP/remote.schema.json"
printf '{"type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}' >"$TMP/regex.schema.json"
expect_out schema_unsupported_regex 2 'regex.schema.json does not compile: .*/properties/x' \
  "$KILN" grammar --schema "$TMP/regex.schema.json"
head -c 1100000 /dev/zero | tr '\0' ' ' >"$TMP/huge.gbnf"
printf 'root ::= "a"\n' >>"$TMP/huge.gbnf"
expect_out gbnf_over_1mib 2 'huge.gbnf does not compile: .*bytes' "$KILN" grammar --gbnf "$TMP/huge.gbnf"

# Big enums compile and check (left-factored into a trie); a grammar too ambiguous for the matcher
# is refused when it compiles (exit 2), naming the cause.
python3 -c 'print("root ::= " + " | ".join("\"%d\"" % i for i in range(10000)))' >"$TMP/enum.gbnf"
expect_out gbnf_enum_10000_compiles 0 'enum.gbnf: compiles' "$KILN" grammar --gbnf "$TMP/enum.gbnf"
printf '9876\n' >"$TMP/n9876.json"
printf '10000\n' >"$TMP/n10000.json"
expect_out gbnf_enum_10000_checks 0 'accepted' "$KILN" grammar --gbnf "$TMP/enum.gbnf" --check "$TMP/n9876.json"
expect_out gbnf_enum_10000_rejects 1 'not in the language' "$KILN" grammar --gbnf "$TMP/enum.gbnf" --check "$TMP/n10000.json"
python3 -c 'import json; print(json.dumps({"type": "string", "enum": ["code-%05d" % i for i in range(5000)]}))' \
  >"$TMP/enum.schema.json"
printf '"code-04321"\n' >"$TMP/code.json"
expect_out schema_enum_5000_checks 0 'accepted' "$KILN" grammar --schema "$TMP/enum.schema.json" --check "$TMP/code.json"
printf 'root ::= ("a"?){5000}\n' >"$TMP/ambiguous.gbnf"
expect_out gbnf_too_ambiguous 2 'ambiguous.gbnf does not compile: .*line 1, column 1: the grammar is too ambiguous' \
  "$KILN" grammar --gbnf "$TMP/ambiguous.gbnf"

# Usage: exit 2.
expect_out no_constraint 2 'give --schema FILE' "$KILN" grammar
expect_out two_constraints 2 'both give a constraint' "$KILN" grammar --schema $G/person.schema.json --json-object
expect_out unknown_flag 2 "unknown option '--frob'" "$KILN" grammar --json-object --frob
expect_out check_needs_file 2 '--check needs a file' "$KILN" grammar --json-object --check
expect_out missing_schema_file 2 'cannot open' "$KILN" grammar --schema "$TMP/nope.json"

# ---- --check: both serializations must be accepted ----
expect_out check_valid 0 'person.valid.json: accepted \(compact and pretty-printed\)' \
  "$KILN" grammar --schema $G/person.schema.json --check $G/person.valid.json
for bad in enum range extra missing items; do
  expect_out "check_rejects_$bad" 1 "person.bad-$bad.json' is not in the language: both" \
    "$KILN" grammar --schema $G/person.schema.json --check $G/person.bad-$bad.json
done
# several instances: the worst result counts
expect_out check_several 1 'person.bad-enum.json' \
  "$KILN" grammar --schema $G/person.schema.json --check $G/person.valid.json --check $G/person.bad-enum.json
# a grammar that takes only one of the two forms: the message says which was rejected
expect_out check_compact_only 1 'its pretty-printed \(indent 2\) form is rejected' \
  "$KILN" grammar --gbnf $G/compact-only.gbnf --check $G/a1.json
expect_out check_pretty_only 1 'its compact form is rejected' "$KILN" grammar --gbnf $G/pretty-only.gbnf --check $G/a1.json
expect_out check_gbnf_both_forms 0 'accepted' "$KILN" grammar --gbnf $G/object-a.gbnf --check $G/a1.json
expect_out check_gbnf_rejects 1 'not in the language' "$KILN" grammar --gbnf $G/object-a.gbnf --check $G/a-string.json
# strict mode: additionalProperties defaults to false
expect_out check_open_schema_extra 0 'accepted' "$KILN" grammar --schema $G/open.schema.json --check $G/open.extra.json
expect_out check_strict_rejects_extra 1 'not in the language' \
  "$KILN" grammar --schema $G/open.schema.json --strict --check $G/open.extra.json
# JSON mode: objects only
printf '[1, 2]' >"$TMP/array.json"
printf '"text"' >"$TMP/string.json"
expect_out check_json_object 0 'accepted' "$KILN" grammar --json-object --check $G/person.valid.json
expect_out check_json_object_array 1 'not in the language' "$KILN" grammar --json-object --check "$TMP/array.json"
expect_out check_json_object_string 1 'not in the language' "$KILN" grammar --json-object --check "$TMP/string.json"
# an instance that is not JSON, or missing: exit 2
printf '{"a": }' >"$TMP/broken.json"
expect_out check_not_json 2 "broken.json' is not JSON: line 1, column" "$KILN" grammar --json-object --check "$TMP/broken.json"
expect_out check_missing_instance 2 'cannot open' "$KILN" grammar --json-object --check "$TMP/nope.json"

# ---- --print-gbnf: the grammar a schema runs, and it runs the same as a GBNF file ----
"$KILN" grammar --schema $G/person.schema.json --print-gbnf >"$TMP/person.gbnf" 2>"$TMP/err"
if [ $? -eq 0 ] && grep -q '^root ::=' "$TMP/person.gbnf"; then pass print_gbnf_schema; else
  fail print_gbnf_schema "$(head -c 300 "$TMP/person.gbnf" "$TMP/err")"; fi
expect_out printed_gbnf_accepts_valid 0 'accepted' "$KILN" grammar --gbnf "$TMP/person.gbnf" --check $G/person.valid.json
expect_out printed_gbnf_rejects_invalid 1 'not in the language' \
  "$KILN" grammar --gbnf "$TMP/person.gbnf" --check $G/person.bad-range.json
"$KILN" grammar --gbnf $G/object-a.gbnf --print-gbnf >"$TMP/a.gbnf" 2>/dev/null
grep -q 'root' "$TMP/a.gbnf" && pass print_gbnf_gbnf || fail print_gbnf_gbnf "$(head -c 300 "$TMP/a.gbnf")"
"$KILN" grammar --json-object --print-gbnf >"$TMP/obj.gbnf" 2>/dev/null
grep -q '^root ::=' "$TMP/obj.gbnf" && pass print_gbnf_json_object || fail print_gbnf_json_object "$(head -c 300 "$TMP/obj.gbnf")"

# ---- real-world schemas, read in place: their valid instances pass, their invalid ones fail ----
if ! command -v python3 >/dev/null 2>&1; then
  skip shared_schemas "python3 is needed to read the test entries"
elif [ ! -d "$S" ]; then
  skip shared_schemas "no $S"
else
  for entry in "Github_easy---o10065" "Github_trivial---o67200"; do
    # the entry's schema and each test instance into $TMP (the data stays where it is)
    python3 - "$S/$entry.json" "$TMP/$entry" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
json.dump(d["schema"], open(sys.argv[2] + ".schema.json", "w"))
for i, t in enumerate(d["tests"]):
    json.dump(t["data"], open("%s.%d.%s.json" % (sys.argv[2], i, "valid" if t["valid"] else "invalid"), "w"))
EOF
    for inst in "$TMP/$entry".*.valid.json; do
      expect_out "shared_${entry}_$(basename "$inst" .json | sed 's/.*\.\([0-9]*\)\.valid/\1/')_valid" 0 'accepted' \
        "$KILN" grammar --schema "$TMP/$entry.schema.json" --check "$inst"
    done
    for inst in "$TMP/$entry".*.invalid.json; do
      expect_out "shared_${entry}_$(basename "$inst" .json | sed 's/.*\.\([0-9]*\)\.invalid/\1/')_invalid" 1 \
        'not in the language' "$KILN" grammar --schema "$TMP/$entry.schema.json" --check "$inst"
    done
  done
fi

# ---- kiln run with a constraint, on the real stories260K model ----
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip run_constrained "no $M"; exit 0; fi
"$KILN" run -m "$M" -p "" --grammar-file $G/yesno.gbnf -n 20 --temp 0 >"$TMP/yn" 2>"$TMP/yn.err"
case "$(cat "$TMP/yn")" in
  yes. | no.) pass run_grammar_file_greedy ;;
  *) fail run_grammar_file_greedy "output '$(head -c 200 "$TMP/yn")': $(head -c 300 "$TMP/yn.err")" ;;
esac
n_ok=0
for seed in 1 2 3 4 5; do
  "$KILN" run -m "$M" -p "" --json-schema $G/small.schema.json -n 200 --temp 1 --seed $seed >"$TMP/gen.json" 2>/dev/null &&
    "$KILN" grammar --schema $G/small.schema.json --check "$TMP/gen.json" >/dev/null 2>"$TMP/gen.err" &&
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if set(d)=={"ok","n","pet"} else 1)' \
      "$TMP/gen.json" && n_ok=$((n_ok + 1))
done
if [ $n_ok -eq 5 ]; then pass run_json_schema_sampled_valid; else
  fail run_json_schema_sampled_valid "$n_ok of 5 valid; last: $(head -c 200 "$TMP/gen.json") $(head -c 200 "$TMP/gen.err")"; fi
"$KILN" run -m "$M" -p "" --json-schema '{"type": "integer", "minimum": 10, "maximum": 20}' -n 20 --temp 1 --seed 9 \
  >"$TMP/int" 2>/dev/null
v=$(cat "$TMP/int")
if [ -n "$v" ] && [ "$v" -ge 10 ] 2>/dev/null && [ "$v" -le 20 ]; then pass run_json_schema_inline; else
  fail run_json_schema_inline "output '$(head -c 100 "$TMP/int")'"; fi
"$KILN" run -m "$M" -p "" --json-object -n 300 --temp 0 >"$TMP/obj" 2>"$TMP/obj.err"
if head -c 1 "$TMP/obj" | grep -q '{'; then pass run_json_object_starts_object; else
  fail run_json_object_starts_object "output '$(head -c 200 "$TMP/obj")'"; fi
# a grammar that does not compile fails before the model loads: exit 1, the place named
expect_out run_bad_grammar 1 'does not compile: .*line 1' "$KILN" run -m "$M" --grammar 'root ::= nothing' -p hi
expect_out run_two_constraints 2 'both give a constraint' "$KILN" run -m "$M" --json-object --grammar-file $G/yesno.gbnf
