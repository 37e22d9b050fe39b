# lib.sh - helpers for the CLI test scripts (sourced, not run). Each check prints one
# "PASS name" / "FAIL name" / "SKIP name: why" line for tests/run.sh to count.
BUILD=${BUILD:-build}
KILN="$BUILD/kiln"
DATA=${KILN_TEST_DATA:-../shared/data}
TMP=$(mktemp -d /tmp/kiln-cli-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; }
skip() { echo "SKIP $1: $2"; }

# expect_exit NAME CODE CMD...: runs CMD, passes when it exits with CODE and printed a message on
# stderr (for non-zero codes).
expect_exit() {
  name=$1; code=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  got=$?
  if [ "$got" -ne "$code" ]; then fail "$name" "exit $got, expected $code; stderr: $(head -c 300 "$TMP/err")"; return; fi
  if [ "$code" -ne 0 ] && [ ! -s "$TMP/err" ]; then fail "$name" "no message on stderr"; return; fi
  pass "$name"
}

# starts_with NAME FILE PREFIX_FILE: FILE begins with the bytes of PREFIX_FILE minus its final newline.
starts_with() {
  name=$1; file=$2; prefix=$3
  n=$(( $(wc -c <"$prefix") - 1 ))
  head -c "$n" "$prefix" >"$TMP/want"
  head -c "$n" "$file" >"$TMP/got"
  if cmp -s "$TMP/want" "$TMP/got"; then pass "$name"; else
    fail "$name" "output differs from $(basename "$prefix")"
    echo "  want: $(head -c 200 "$TMP/want")"
    echo "  got:  $(head -c 200 "$TMP/got")"
  fi
}
