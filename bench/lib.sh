# shellcheck shell=sh disable=SC2034,SC2154
# bench/lib.sh - what the server benchmarks share (sourced by bench/serve.sh and bench/score.sh, run
# from the repository root): a synthetic preset model and a `kiln serve` started on a free port.

# bench_model PRESET:TYPE: sets f to bench/models/PRESET-TYPE.gguf (git-ignored), generating it with
# kiln-gen when missing, as bench/run.sh does; preset and type are set too.
bench_model() {
  preset=${1%%:*} type=${1#*:}
  mkdir -p bench/models
  f="bench/models/$preset-$type.gguf"
  [ -f "$f" ] || build/kiln-gen --preset "$preset" --type "$type" --seed 1 -o "$f" >&2
}

# bench_serve ARGS...: starts `kiln serve -m $f --port 0 ARGS...` in the background, its log in the
# file $log (the caller's), and waits until it listens: sets pid and port; exits after showing the
# log when it does not come up within a minute.
bench_serve() {
  build/kiln serve -m "$f" --port 0 "$@" 2>"$log" &
  pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$log" >&2; exit 1; }
}
