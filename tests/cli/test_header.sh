# test_header.sh - include/kiln.h compiles alone as strict C11 and as C++.
. tests/cli/lib.sh
printf '#include "kiln.h"\nint main(void) { return kiln_status_str(KILN_OK) == 0; }\n' >"$TMP/h.c"
if cc -std=c11 -pedantic -Wall -Wextra -Werror -Iinclude -c "$TMP/h.c" -o "$TMP/h.o" 2>"$TMP/err"; then
  pass header_c11_pedantic; else fail header_c11_pedantic "$(cat "$TMP/err")"; fi
if command -v c++ >/dev/null 2>&1; then
  if c++ -x c++ -std=c++11 -pedantic -Wall -Wextra -Werror -Iinclude -c "$TMP/h.c" -o "$TMP/h2.o" 2>"$TMP/err"; then
    pass header_cxx; else fail header_cxx "$(cat "$TMP/err")"; fi
else
  skip header_cxx "no C++ compiler"
fi
# an application links libkiln.so and libkiln.a with nothing but the header
cat >"$TMP/app.c" <<'EOC'
#include "kiln.h"
#include <stdio.h>
int main(void) { printf("%s %s\n", kiln_version(), kiln_status_str(KILN_ERR_FORMAT)); return 0; }
EOC
if cc -std=c11 $KILN_TEST_CFLAGS -Iinclude "$TMP/app.c" -L"$BUILD" -Wl,-rpath,"$PWD/$BUILD" -lkiln -o "$TMP/app" 2>"$TMP/err" && "$TMP/app" >/dev/null; then
  pass link_shared_library; else fail link_shared_library "$(cat "$TMP/err")"; fi
