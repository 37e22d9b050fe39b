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
bad=""
while read -r f; do
  [ -f "$f" ] || continue
  clang-format --style=file "$f" | cmp -s - "$f" || bad="$bad $f"
done <"$TMP/checked"
if [ -z "$bad" ]; then pass clang_format; else fail clang_format "not formatted:$bad"; fi
