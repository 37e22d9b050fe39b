# test_spec.sh - speculative decoding from the CLI and the server on stories260K: kiln run's greedy
# output is the same with --spec none, ngram and draft (the model as its own draft), the summary
# reports the proposals; bad flags (an unknown method, --spec-max 0 or beyond 16, draft without a
# model, a draft of another vocabulary) fail with a message; kiln serve --spec ngram gives the same
# reply with "speculative": false or not, rejects a non-boolean value, and reports the proposed and
# accepted tokens per method in /stats and /metrics.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then skip spec_cli "no $M"; exit 0; fi

P="Once upon a time, there was a little girl. Once upon a time, there was a little"
"$KILN" run -m "$M" -p "$P" -n 80 --temp 0 --ignore-eos >"$TMP/none" 2>"$TMP/none.err"
"$KILN" run -m "$M" -p "$P" -n 80 --temp 0 --ignore-eos --spec ngram --spec-max 5 >"$TMP/ngram" 2>"$TMP/ngram.err"
"$KILN" run -m "$M" -p "$P" -n 80 --temp 0 --ignore-eos --draft-model "$M" >"$TMP/draft" 2>"$TMP/draft.err"
if [ -s "$TMP/none" ] && cmp -s "$TMP/none" "$TMP/ngram"; then pass spec_run_ngram_same; else
  fail spec_run_ngram_same "$(head -c 300 "$TMP/ngram") $(cat "$TMP/ngram.err")"; fi
if [ -s "$TMP/none" ] && cmp -s "$TMP/none" "$TMP/draft"; then pass spec_run_draft_same; else
  fail spec_run_draft_same "$(head -c 300 "$TMP/draft") $(cat "$TMP/draft.err")"; fi
if grep -q "speculative (ngram): proposed [1-9][0-9]* tokens, accepted [1-9]" "$TMP/ngram.err"; then
  pass spec_run_summary; else fail spec_run_summary "$(cat "$TMP/ngram.err")"; fi
# seeded sampling: the same text with and without speculation
"$KILN" run -m "$M" -p "$P" -n 40 --temp 0.8 --seed 7 >"$TMP/s0" 2>/dev/null
"$KILN" run -m "$M" -p "$P" -n 40 --temp 0.8 --seed 7 --spec ngram >"$TMP/s1" 2>/dev/null
if [ -s "$TMP/s0" ] && cmp -s "$TMP/s0" "$TMP/s1"; then pass spec_run_sampled_same; else fail spec_run_sampled_same; fi

expect_exit spec_unknown_method 2 "$KILN" run -m "$M" -p x --spec fast
grep -q "none, ngram or draft" "$TMP/err" && pass spec_unknown_method_message || fail spec_unknown_method_message "$(cat "$TMP/err")"
expect_exit spec_max_zero 2 "$KILN" run -m "$M" -p x --spec ngram --spec-max 0
expect_exit spec_max_huge 2 "$KILN" run -m "$M" -p x --spec ngram --spec-max 1000
expect_exit spec_draft_without_model 2 "$KILN" run -m "$M" -p x --spec draft
expect_exit spec_draft_model_with_ngram 2 "$KILN" run -m "$M" -p x --spec ngram --draft-model "$M"
expect_exit spec_bench_flags 2 "$KILN" bench -m "$M" --spec nope
if "$BUILD/kiln-gen" --preset tiny-llama --vocab 600 --seed 3 -o "$TMP/v600.gguf" >/dev/null 2>&1; then
  expect_exit spec_draft_other_vocab 1 "$KILN" run -m "$M" -p x --draft-model "$TMP/v600.gguf"
  grep -q "vocabulary" "$TMP/err" && pass spec_draft_other_vocab_message || fail spec_draft_other_vocab_message "$(cat "$TMP/err")"
else
  fail spec_draft_other_vocab "kiln-gen failed"
fi

# the server
"$KILN" serve -m "$M" --port 0 --no-open --spec ngram --spec-max 6 >/dev/null 2>"$TMP/srv.err" &
pid=$!
i=0
while [ $i -lt 300 ] && kill -0 $pid 2>/dev/null && ! grep -q "listening on" "$TMP/srv.err"; do sleep 0.1; i=$((i + 1)); done
port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/srv.err")
if [ -z "$port" ]; then
  fail spec_serve "the server did not start: $(head -c 300 "$TMP/srv.err")"
else
  U="http://127.0.0.1:$port"
  body() { printf '{"prompt": "%s", "max_tokens": 60, "temperature": 0, "ignore_eos": true%s}' "$P" "$1"; }
  curl -s -m 120 "$U/v1/completions" -H 'Content-Type: application/json' -d "$(body '')" >"$TMP/c1"
  curl -s -m 120 "$U/v1/completions" -H 'Content-Type: application/json' -d "$(body ', "speculative": false')" >"$TMP/c2"
  t1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$TMP/c1" 2>/dev/null)
  t2=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$TMP/c2" 2>/dev/null)
  if [ -n "$t1" ] && [ "$t1" = "$t2" ]; then pass spec_serve_same_reply; else
    fail spec_serve_same_reply "$(head -c 300 "$TMP/c1") | $(head -c 300 "$TMP/c2")"; fi
  code=$(curl -s -m 30 -o "$TMP/c3" -w '%{http_code}' "$U/v1/completions" -H 'Content-Type: application/json' \
    -d "$(body ', "speculative": "yes"')")
  if [ "$code" = 400 ] && grep -q speculative "$TMP/c3"; then pass spec_serve_bad_value; else
    fail spec_serve_bad_value "$code $(head -c 300 "$TMP/c3")"; fi
  curl -s -m 30 "$U/stats" >"$TMP/stats"
  if python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["speculative"]
assert s["ngram"]["proposed"] > 0 and 0 < s["ngram"]["accepted"] <= s["ngram"]["proposed"], s
assert s["draft"]["proposed"] == 0, s' "$TMP/stats" 2>"$TMP/stats.err"; then pass spec_serve_stats; else
    fail spec_serve_stats "$(head -c 400 "$TMP/stats") $(cat "$TMP/stats.err")"; fi
  curl -s -m 30 "$U/metrics" >"$TMP/metrics"
  if grep -q '^kiln_spec_proposed_tokens_total{method="ngram"} [1-9]' "$TMP/metrics" &&
     grep -q '^kiln_spec_accepted_tokens_total{method="ngram"} [1-9]' "$TMP/metrics"; then pass spec_serve_metrics; else
    fail spec_serve_metrics "$(grep spec "$TMP/metrics")"; fi
fi
kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
