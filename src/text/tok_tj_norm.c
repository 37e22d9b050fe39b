/*
 * tok_tj_norm.c - the normalizers of a tokenizer.json pipeline, each a pass from one UTF-8 buffer to
 * another: Unicode forms (NFC / NFD / NFKC / NFKD, tok_tj_unicode.c), Lowercase, StripAccents, Strip,
 * Prepend, Replace (a literal or a regex), BertNormalizer and Precompiled (tok_tj_charsmap.c).
 * Ill-formed UTF-8 bytes pass through every step unchanged (a JavaScript oracle never sees them; the Rust library
 * rejects them).
 *
 * Where the Rust library and the JS port differ, kiln follows the Rust one, which is what models
 * were trained with: StripAccents removes nonspacing marks (Mn) only; Lowercase is the simple
 * per-character mapping.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

void kn_tj_norm_free(kn_tj_norm *nm) {
    free(nm->str);
    free(nm->content);
    if (nm->re) pcre2_code_free(nm->re);
    kn_tj_charsmap_free(nm->cmap);
    memset(nm, 0, sizeof *nm);
}

/* The tokenizers library's Chinese-character ranges (BertNormalizer pads them with spaces). */
static bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Maps each character through f (ill-formed bytes copied). f returns false to drop the character,
 * or writes its replacement (up to 3 code points) into rep / *nrep. */
typedef bool (*char_fn)(const kn_tj_norm *nm, uint32_t cp, uint32_t rep[3], int *nrep);

static kiln_status map_chars(const kn_tj_norm *nm, const char *in, size_t n, char_fn f, kn_bvec *out) {
    enum { MAX_OUT = 3 * 4 }; /* the most bytes one character becomes: 3 code points of 4 bytes */
    out->n = 0;
    for (size_t i = 0; i < n;) {
        if (out->cap - out->n < MAX_OUT && !kn_reserve((void **)&out->v, &out->cap, out->n + MAX_OUT, 1))
            return KILN_ERR_NOMEM;
        uint8_t *o = (uint8_t *)out->v; /* room for MAX_OUT bytes at o + out->n */
        size_t adv;
        uint32_t cp = kn_utf8_decode((const uint8_t *)in + i, n - i, &adv);
        if (cp == KN_UTF8_INVALID) {
            memcpy(o + out->n, in + i, adv); /* adv <= 3: one ill-formed sequence */
            out->n += adv;
        } else {
            uint32_t rep[3];
            int nrep = 0;
            if (f(nm, cp, rep, &nrep))
                for (int k = 0; k < nrep; k++) out->n += kn_utf8_encode(rep[k], o + out->n);
        }
        i += adv;
    }
    return KILN_OK;
}

static bool f_lower(const kn_tj_norm *nm, uint32_t cp, uint32_t rep[3], int *nrep) {
    rep[0] = kn_ucd_tolower(cp);
    *nrep = 1;
    return true;
}

static bool f_strip_accents(const kn_tj_norm *nm, uint32_t cp, uint32_t rep[3], int *nrep) {
    if (kn_ucd_flags(cp) & KN_UCD_MARK_NONSPACING) return false;
    rep[0] = cp;
    *nrep = 1;
    return true;
}

/* BertNormalizer's clean_text and handle_chinese_chars (the flags of nm). */
static bool f_bert_clean(const kn_tj_norm *nm, uint32_t cp, uint32_t rep[3], int *nrep) {
    if (nm->f[0]) {
        if (cp == 0 || cp == 0xFFFD) return false;
        bool ws = cp == '\t' || cp == '\n' || cp == '\r' || kn_ucd_is_whitespace(cp);
        if (!ws && (kn_ucd_flags(cp) & KN_UCD_OTHER)) return false;
        if (ws) cp = ' ';
    }
    if (nm->f[1] && is_cjk(cp)) {
        rep[0] = ' ', rep[1] = cp, rep[2] = ' ';
        *nrep = 3;
        return true;
    }
    rep[0] = cp;
    *nrep = 1;
    return true;
}

static kiln_status strip(const kn_tj_norm *nm, const char *in, size_t n, kn_bvec *out) {
    size_t s = 0, e = n;
    while (nm->f[0] && s < e) {
        size_t adv;
        uint32_t cp = kn_utf8_decode((const uint8_t *)in + s, e - s, &adv);
        if (cp == KN_UTF8_INVALID || !kn_ucd_is_whitespace(cp)) break;
        s += adv;
    }
    while (nm->f[1] && e > s) {
        size_t b = e - 1;
        while (b > s && ((uint8_t)in[b] & 0xC0) == 0x80 && e - b < 4) b--;
        size_t adv;
        uint32_t cp = kn_utf8_decode((const uint8_t *)in + b, e - b, &adv);
        if (cp == KN_UTF8_INVALID || b + adv != e || !kn_ucd_is_whitespace(cp)) break;
        e = b;
    }
    out->n = 0;
    return kn_bvec_append(out, in + s, e - s) ? KILN_OK : KILN_ERR_NOMEM;
}

/* Replaces every occurrence of a literal or every match of a regex by content. */
static kiln_status replace(const pcre2_code *re, const char *lit, size_t lit_len, const char *content,
                           size_t content_len, const char *in, size_t n, kn_bvec *out) {
    out->n = 0;
    if (!re) {
        if (lit_len == 0) return kn_bvec_append(out, in, n) ? KILN_OK : KILN_ERR_NOMEM;
        size_t i = 0;
        while (i < n) {
            const char *m = n - i >= lit_len ? memmem(in + i, n - i, lit, lit_len) : NULL;
            if (!m) break;
            size_t at = (size_t)(m - in);
            if (!kn_bvec_append(out, in + i, at - i) || !kn_bvec_append(out, content, content_len))
                return KILN_ERR_NOMEM;
            i = at + lit_len;
        }
        return kn_bvec_append(out, in + i, n - i) ? KILN_OK : KILN_ERR_NOMEM;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return KILN_ERR_NOMEM;
    size_t pos = 0, done = 0;
    kiln_status st = KILN_OK;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)in, n, pos, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (!kn_bvec_append(out, in + done, s - done) || !kn_bvec_append(out, content, content_len)) {
            st = KILN_ERR_NOMEM;
            break;
        }
        done = e;
        if (e > s) pos = e;
        else {
            if (s >= n) break;
            pos = s + kn_utf8_lead_len((uint8_t)in[s]);
            if (pos > n) pos = n;
            if (!kn_bvec_append(out, in + s, pos - s)) {
                st = KILN_ERR_NOMEM;
                break;
            }
            done = pos;
        }
    }
    pcre2_match_data_free(md);
    if (!st && !kn_bvec_append(out, in + done, n - done)) st = KILN_ERR_NOMEM;
    return st;
}

static kiln_status step(const kn_tj_norm *nm, const char *in, size_t n, kn_bvec *out) {
    switch (nm->type) {
        case KN_TJN_NFC: return kn_tj_unicode_form(in, n, true, false, out);
        case KN_TJN_NFD: return kn_tj_unicode_form(in, n, false, false, out);
        case KN_TJN_NFKC: return kn_tj_unicode_form(in, n, true, true, out);
        case KN_TJN_NFKD: return kn_tj_unicode_form(in, n, false, true, out);
        case KN_TJN_LOWERCASE: return map_chars(nm, in, n, f_lower, out);
        case KN_TJN_STRIP_ACCENTS: return map_chars(nm, in, n, f_strip_accents, out);
        case KN_TJN_STRIP: return strip(nm, in, n, out);
        case KN_TJN_PREPEND:
            out->n = 0;
            if (n && !kn_bvec_append(out, nm->str, nm->str_len)) return KILN_ERR_NOMEM;
            return kn_bvec_append(out, in, n) ? KILN_OK : KILN_ERR_NOMEM;
        case KN_TJN_PRECOMPILED: return kn_tj_charsmap_apply(nm->cmap, in, n, out);
        case KN_TJN_REPLACE: return replace(nm->re, nm->str, nm->str_len, nm->content, nm->content_len, in, n, out);
        case KN_TJN_BERT: {
            kn_bvec a = {0}, b = {0};
            kiln_status st = map_chars(nm, in, n, f_bert_clean, &a);
            const kn_bvec *cur = &a;
            if (!st && nm->f[3]) {
                st = map_chars(nm, a.v, a.n, f_lower, &b);
                cur = &b;
            }
            if (!st && nm->f[2]) {
                kn_bvec d = {0};
                st = kn_tj_unicode_form(cur->v, cur->n, false, false, &d);
                if (!st) st = map_chars(nm, d.v, d.n, f_strip_accents, out);
                free(d.v);
            } else if (!st) {
                out->n = 0;
                if (!kn_bvec_append(out, cur->v, cur->n)) st = KILN_ERR_NOMEM;
            }
            free(a.v);
            free(b.v);
            return st;
        }
    }
    return KILN_ERR_INTERNAL;
}

kiln_status kn_tj_normalize(const kn_tj *tj, const char *in, size_t n, kn_bvec *out) {
    out->n = 0;
    if (tj->n_norm == 0) return kn_bvec_append(out, in, n) ? KILN_OK : KILN_ERR_NOMEM;
    kn_bvec a = {0}, b = {0};
    kiln_status st = KILN_OK;
    const char *cur = in;
    size_t cn = n;
    for (int i = 0; i < tj->n_norm && !st; i++) {
        kn_bvec *dst = (i & 1) ? &b : &a;
        st = step(&tj->norm[i], cur, cn, dst);
        cur = dst->v ? dst->v : "";
        cn = dst->n;
    }
    if (!st && !kn_bvec_append(out, cur, cn)) st = KILN_ERR_NOMEM;
    free(a.v);
    free(b.v);
    return st;
}
