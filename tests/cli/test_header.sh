# test_header.sh - include/kiln.h is all an application needs: it compiles alone as strict C11 and as
# C++, and a program that includes nothing else links against libkiln.so (which hides the library's
# interior) and libkiln.a, runs, and generates the same text either way and from C++.
. tests/cli/lib.sh
M="$DATA/models/stories260K/stories260K.gguf"
CC=${CC:-cc}
CXX=${CXX:-c++}
STRICT="-pedantic -Wall -Wextra -Werror"

printf '#include "kiln.h"\nint main(void) { return kiln_status_str(KILN_OK) == 0; }\n' >"$TMP/h.c"
if $CC -std=c11 $STRICT -Iinclude -c "$TMP/h.c" -o "$TMP/h.o" 2>"$TMP/err"; then
  pass header_c11_pedantic; else fail header_c11_pedantic "$(cat "$TMP/err")"; fi
have_cxx=0
if command -v "$CXX" >/dev/null 2>&1; then
  have_cxx=1
  if $CXX -x c++ -std=c++11 $STRICT -Iinclude -c "$TMP/h.c" -o "$TMP/h2.o" 2>"$TMP/err"; then
    pass header_cxx; else fail header_cxx "$(cat "$TMP/err")"; fi
else
  skip header_cxx "no C++ compiler"
fi

# The application: the error path of a failed load, then (given a model) 16 greedy tokens on one
# thread, printed. Valid C11 and C++11, so the same file checks both.
cat >"$TMP/app.c" <<'EOC'
#include "kiln.h"
#include <stdio.h>

static int on_token(const kiln_token_event *ev, void *user) {
    (void)user;
    fwrite(ev->text, 1, ev->text_len, stdout);
    return 0;
}

int main(int argc, char **argv) {
    kiln_model_params mp = kiln_model_default_params();
    kiln_model *model = NULL;
    kiln_status st = kiln_model_load("/nonexistent/kiln-app.gguf", &mp, &model);
    if (st != KILN_ERR_IO || model != NULL || kiln_last_error()[0] == '\0') {
        fprintf(stderr, "a missing file gave %s, \"%s\"\n", kiln_status_str(st), kiln_last_error());
        return 2;
    }
    printf("%s %s\n", kiln_version(), kiln_status_str(KILN_ERR_FORMAT));
    if (argc < 2) return 0;
    st = kiln_model_load(argv[1], &mp, &model);
    if (st != KILN_OK) { fprintf(stderr, "load: %s\n", kiln_last_error()); return 3; }
    kiln_session_params sp = kiln_session_default_params();
    sp.n_ctx = 128;
    sp.n_threads = 1;
    kiln_session *session = NULL;
    st = kiln_session_new(model, &sp, &session);
    if (st != KILN_OK) { fprintf(stderr, "session: %s\n", kiln_last_error()); return 4; }
    kiln_generate_params gp = kiln_generate_default_params();
    gp.max_tokens = 16;
    gp.sampling.temperature = 0;
    gp.on_token = on_token;
    kiln_generate_result res;
    st = kiln_generate(session, "Once upon a time", &gp, &res);
    if (st != KILN_OK || res.n_generated < 1) {
        fprintf(stderr, "generate: %s\n", kiln_session_last_error(session));
        return 5;
    }
    printf("\n%d tokens\n", (int)res.n_generated);
    kiln_session_free(session);
    kiln_model_free(model);
    return 0;
}
EOC
if [ -f "$M" ]; then ARGS=$M; else ARGS=; skip app_generates "no model at $M (only the error path runs)"; fi

# Against libkiln.so: -lkiln picks the shared library when both are in $BUILD; the check that the
# program really needs libkiln.so keeps it honest.
# shellcheck disable=SC2086
if $CC -std=c11 $STRICT $KILN_TEST_CFLAGS -Iinclude "$TMP/app.c" -L"$BUILD" -Wl,-rpath,"$PWD/$BUILD" -lkiln \
     -o "$TMP/app_so" 2>"$TMP/err"; then
  if ! readelf -d "$TMP/app_so" 2>/dev/null | grep -q 'NEEDED.*libkiln\.so'; then
    fail link_shared_library "the program does not load libkiln.so"
  elif "$TMP/app_so" $ARGS >"$TMP/out_so" 2>"$TMP/err"; then
    pass link_shared_library
  else
    fail link_shared_library "run: $(cat "$TMP/err")"
  fi
else
  fail link_shared_library "$(cat "$TMP/err")"
fi

# Against libkiln.a, with the libraries it needs.
LIBS=$(pkg-config --libs libpcre2-8 jansson sqlite3 2>/dev/null || echo -lpcre2-8 -ljansson -lsqlite3)
# shellcheck disable=SC2086
if $CC -std=c11 $STRICT $KILN_TEST_CFLAGS -Iinclude "$TMP/app.c" "$BUILD/libkiln.a" $LIBS -lm -lpthread \
     -o "$TMP/app_a" 2>"$TMP/err" && "$TMP/app_a" $ARGS >"$TMP/out_a" 2>"$TMP/err"; then
  pass link_static_library
else
  fail link_static_library "$(cat "$TMP/err")"
fi

# From C++, against libkiln.so (the header's extern "C" names match the library's).
if [ "$have_cxx" = 1 ]; then
  # shellcheck disable=SC2086
  if $CXX -x c++ -std=c++11 $STRICT $KILN_TEST_CFLAGS -Iinclude "$TMP/app.c" -x none -L"$BUILD" \
       -Wl,-rpath,"$PWD/$BUILD" -lkiln -o "$TMP/app_cxx" 2>"$TMP/err" && "$TMP/app_cxx" $ARGS >"$TMP/out_cxx" 2>"$TMP/err"; then
    pass link_shared_library_cxx
  else
    fail link_shared_library_cxx "$(cat "$TMP/err")"
  fi
fi

# The three programs print the same: the same library behind every way of linking it.
if [ -n "$ARGS" ] && [ -s "$TMP/out_so" ] && [ -s "$TMP/out_a" ]; then
  if ! grep -q ' tokens$' "$TMP/out_so"; then
    fail app_generates "no generation in: $(head -c 300 "$TMP/out_so")"
  elif ! cmp -s "$TMP/out_so" "$TMP/out_a"; then
    fail app_generates "shared and static programs differ: $(head -c 200 "$TMP/out_so") / $(head -c 200 "$TMP/out_a")"
  elif [ -s "$TMP/out_cxx" ] && ! cmp -s "$TMP/out_so" "$TMP/out_cxx"; then
    fail app_generates "C and C++ programs differ"
  else
    pass app_generates
  fi
fi
