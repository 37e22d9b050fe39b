# test_format.sh - every C source and header is formatted as .clang-format says (generated tables
# excepted), so the style is checked, not remembered. Fix a failure with:
#   git ls-files '*.c' '*.h' | grep -v unicode_data.c | xargs clang-format -i
. tests/cli/lib.sh
if ! command -v clang-format >/dev/null 2>&1; then
  skip clang_format "clang-format is not installed (scripts/setup installs it)"
  exit 0
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files '*.c' '*.h' >"$TMP/files"
else
  find include src tests tools bench -name '*.[ch]' >"$TMP/files"
fi
grep -v 'src/text/unicode_data.c' "$TMP/files" >"$TMP/checked"
# One clang-format run over every file; each deviation is reported as "FILE:LINE:COL: error: ...".
if xargs clang-format --style=file --dry-run --Werror <"$TMP/checked" 2>"$TMP/err" >/dev/null && [ -s "$TMP/checked" ]; then
  pass clang_format
else
  bad=$(grep -o '^[^:]*:[0-9]*:[0-9]*: error' "$TMP/err" | cut -d: -f1 | sort -u | tr '\n' ' ')
  fail clang_format "not formatted: ${bad:-$(head -c 300 "$TMP/err")}"
fi
