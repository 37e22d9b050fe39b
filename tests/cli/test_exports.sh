# test_exports.sh - the library's interior stays inside: libkiln.so exports exactly the kiln_*
# functions include/kiln.h declares (each marked KILN_API; everything else is hidden by
# -fvisibility=hidden), the CLI and the server use nothing else, and developer-only code (tools/lib,
# e.g. the GGUF writer) is not in the shipped libraries. Needs nm (binutils) and a C preprocessor.
. tests/cli/lib.sh
SO="$BUILD/libkiln.so"
AR="$BUILD/libkiln.a"
DEV="$BUILD/libkiln-dev.a"
CC=${CC:-cc}

if ! command -v nm >/dev/null 2>&1; then
  skip exports "nm not installed"
  exit 0
fi
for f in "$SO" "$AR" "$DEV"; do
  [ -f "$f" ] || { fail exports "$f missing (run make)"; exit 0; }
done

# kiln_* functions declared in the public header: the preprocessed header with its comments gone,
# every kiln_NAME( that is not a function-pointer typedef (those read "(*kiln_NAME)(").
if ! "$CC" -E -P -Iinclude include/kiln.h >"$TMP/kiln.i" 2>"$TMP/err"; then
  fail exports "preprocessing include/kiln.h: $(cat "$TMP/err")"
  exit 0
fi
tr '\n' ' ' <"$TMP/kiln.i" | grep -oE 'kiln_[A-Za-z0-9_]+[[:space:]]*\(' | grep -oE 'kiln_[A-Za-z0-9_]+' |
  sort -u >"$TMP/declared"
# Names starting with "_" are reserved for the toolchain (a sanitizer build adds some); any other
# dynamic symbol the library defines is exported.
nm -D --defined-only "$SO" | awk '$3 !~ /^_/ { print $2, $3 }' | sort -k2 >"$TMP/exported_all"
awk '{ print $2 }' "$TMP/exported_all" | sort -u >"$TMP/exported"

n_decl=$(wc -l <"$TMP/declared")
n_exp=$(wc -l <"$TMP/exported")
if [ "$n_decl" -lt 40 ]; then
  fail exports_header_parsed "only $n_decl kiln_* functions found in include/kiln.h"
else
  pass exports_header_parsed
fi

# 1. Every exported symbol is a function the header declares.
comm -13 "$TMP/declared" "$TMP/exported" >"$TMP/extra"
if [ -s "$TMP/extra" ]; then
  fail exports_only_declared "$(wc -l <"$TMP/extra") exported symbols not declared in kiln.h: $(head -20 "$TMP/extra" | tr '\n' ' ')"
else
  pass exports_only_declared
fi
awk '$1 != "T" && $1 != "W" && $1 != "i" { print $2 " (" $1 ")" }' "$TMP/exported_all" >"$TMP/data"
if [ -s "$TMP/data" ]; then
  fail exports_functions_only "exported data: $(head -20 "$TMP/data" | tr '\n' ' ')"
else
  pass exports_functions_only
fi

# 2. Every function the header declares is exported (a declaration without KILN_API is hidden).
comm -23 "$TMP/declared" "$TMP/exported" >"$TMP/missing"
if [ -s "$TMP/missing" ]; then
  fail exports_all_declared "declared in kiln.h but not exported (KILN_API missing, or no definition): $(tr '\n' ' ' <"$TMP/missing")"
else
  pass exports_all_declared
fi

# 3. No internal symbol, by name: the kn_* prefix of the library's interior.
n_kn=$(grep -c '^kn_' "$TMP/exported")
if [ "$n_kn" -ne 0 ]; then
  fail exports_no_internal "$n_kn kn_* symbols exported, e.g. $(grep '^kn_' "$TMP/exported" | head -5 | tr '\n' ' ')"
else
  pass exports_no_internal
fi
echo "  libkiln.so exports $n_exp symbols; kiln.h declares $n_decl functions"

# 4. The CLI and the server (linked statically, where hidden symbols would still resolve) call only
#    exported functions: no undefined reference of theirs names a symbol libkiln.a defines but
#    libkiln.so hides.
nm -g --defined-only "$AR" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$TMP/lib_defined"
objs=$(ls "$BUILD"/obj/src/cli/*.o "$BUILD"/obj/src/server/*.o "$BUILD"/obj/gen/*.o 2>/dev/null)
if [ -z "$objs" ]; then
  fail front_ends_use_public_api "no object files under $BUILD/obj/src/cli and $BUILD/obj/src/server"
else
  # shellcheck disable=SC2086
  nm -u $objs | awk 'NF >= 2 { print $NF }' | sort -u >"$TMP/fe_undef"
  comm -12 "$TMP/fe_undef" "$TMP/lib_defined" | comm -23 - "$TMP/exported" >"$TMP/fe_internal"
  if [ -s "$TMP/fe_internal" ]; then
    fail front_ends_use_public_api "CLI/server call hidden library symbols: $(tr '\n' ' ' <"$TMP/fe_internal")"
  else
    pass front_ends_use_public_api
  fi
fi

# 5. The CLI and the server include only the public header and their own headers: the build gives
#    them no -Isrc, and a path ("../model/x.h") is refused here. The generated page source counts
#    as the server's.
grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' src/cli/*.c src/cli/*.h src/server/*.c src/server/*.h \
  "$BUILD"/gen/*.c 2>/dev/null | grep -E '#[[:space:]]*include[[:space:]]*"[^"]*/' >"$TMP/incl"
if [ -s "$TMP/incl" ]; then
  fail front_ends_include_public_only "$(head -5 "$TMP/incl" | tr '\n' ' ')"
else
  pass front_ends_include_public_only
fi

# 6. Developer-only code is in libkiln-dev.a and in neither shipped library.
nm -g --defined-only "$DEV" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$TMP/dev_defined"
nm --defined-only "$SO" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$TMP/so_all"
if [ ! -s "$TMP/dev_defined" ] || ! grep -q '^kn_gguf_writer_create$' "$TMP/dev_defined"; then
  fail dev_code_in_dev_archive "kn_gguf_writer_create not in $DEV"
else
  pass dev_code_in_dev_archive
fi
cat "$TMP/lib_defined" "$TMP/so_all" | sort -u | comm -12 - "$TMP/dev_defined" >"$TMP/shipped_dev"
if [ -s "$TMP/shipped_dev" ]; then
  fail dev_code_not_shipped "in libkiln.a/.so: $(head -10 "$TMP/shipped_dev" | tr '\n' ' ')"
else
  pass dev_code_not_shipped
fi
