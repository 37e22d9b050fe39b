/*
 * tok_tj_unicode.c - the Unicode normalization forms the tokenizer.json normalizers ask for, over
 * UTF-8: full canonical decomposition (unicode.h's NFD table, Hangul algorithmically), canonical
 * ordering of combining marks, and for NFC canonical composition. Ill-formed bytes pass through.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

kiln_status kn_tj_unicode_form(const char *in, size_t n, bool compose, bool compat, kn_bvec *out) {
    out->n = 0;
    if (compose) return kn_bvec_append(out, in, n) ? KILN_OK : KILN_ERR_NOMEM;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = kn_utf8_decode((const uint8_t *)in + i, n - i, &adv);
        if (cp == KN_UTF8_INVALID) {
            if (!kn_bvec_append(out, in + i, adv)) return KILN_ERR_NOMEM;
        } else {
            uint32_t d[4];
            size_t k = kn_ucd_nfd(cp, d);
            for (size_t x = 0; x < k; x++) {
                uint8_t enc[4];
                size_t m = kn_utf8_encode(d[x], enc);
                if (!kn_bvec_append(out, enc, m)) return KILN_ERR_NOMEM;
            }
        }
        i += adv;
    }
    return KILN_OK;
}
