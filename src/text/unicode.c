/*
 * unicode.c - UTF-8 decoding/encoding and lookups in the generated Unicode tables (unicode_data.c):
 * general category and its class, White_Space, simple lowercase and canonical decomposition. Every function accepts
 * any input: ill-formed UTF-8 is reported, never read past, and code points beyond U+10FFFF get the
 * "other" class.
 */
#include "text/unicode.h"

#include <string.h>

/* Decodes one character; see unicode.h. The accepted ranges follow Unicode Table 3-7 (well-formed
 * byte sequences), so overlongs and surrogates are rejected at the second byte. */
uint32_t kn_utf8_decode(const uint8_t *s, size_t len, size_t *adv) {
    uint8_t b0 = s[0];
    if (b0 < 0x80) {
        *adv = 1;
        return b0;
    }
    size_t need;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        *adv = 1;
        return KN_UTF8_INVALID;
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= len) {
            *adv = i;
            return KN_UTF8_INVALID;
        }
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *adv = i;
            return KN_UTF8_INVALID;
        }
        cp = (cp << 6) | (b & 0x3F);
    }
    *adv = need + 1;
    return cp;
}

bool kn_utf8_incomplete(const uint8_t *s, size_t len) {
    if (len == 0) return false;
    size_t adv;
    uint32_t cp = kn_utf8_decode(s, len, &adv);
    /* Ill-formed only because the bytes ran out: the maximal subpart is all of s. */
    return cp == KN_UTF8_INVALID && adv == len && len < 4 && s[0] >= 0xC2 && s[0] <= 0xF4;
}

size_t kn_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = KN_UNICODE_REPLACEMENT;
    if (cp < 0x10000) return kn_utf8_encode(cp, out);
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* The class of an ASCII character, without the table search (the same answers: test_unicode). */
static uint8_t ascii_flags(uint32_t c) {
    if (c < 0x20 || c == 0x7F) return KN_UCD_OTHER;
    if (c == ' ') return KN_UCD_SEPARATOR;
    if (c >= '0' && c <= '9') return KN_UCD_NUMBER;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return KN_UCD_LETTER;
    return strchr("$+<=>^`|~", (int)c) ? KN_UCD_SYMBOL : KN_UCD_PUNCT;
}

uint8_t kn_ucd_category(uint32_t cp) {
    if (cp > 0x10FFFF) return KN_GC_CN;
    /* last range whose start <= cp */
    size_t lo = 0, hi = kn_ucd_n_ranges;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (kn_ucd_ranges[mid].start <= cp) lo = mid;
        else hi = mid;
    }
    return kn_ucd_ranges[lo].gc;
}

uint8_t kn_ucd_flags(uint32_t cp) {
    static const uint8_t of[KN_GC_COUNT] = {
        [KN_GC_LU] = KN_UCD_LETTER,     [KN_GC_LL] = KN_UCD_LETTER,     [KN_GC_LT] = KN_UCD_LETTER,
        [KN_GC_LM] = KN_UCD_LETTER,     [KN_GC_LO] = KN_UCD_LETTER,     [KN_GC_MN] = KN_UCD_MARK_NONSPACING,
        [KN_GC_MC] = KN_UCD_MARK_OTHER, [KN_GC_ME] = KN_UCD_MARK_OTHER, [KN_GC_ND] = KN_UCD_NUMBER,
        [KN_GC_NL] = KN_UCD_NUMBER,     [KN_GC_NO] = KN_UCD_NUMBER,     [KN_GC_PC] = KN_UCD_PUNCT,
        [KN_GC_PD] = KN_UCD_PUNCT,      [KN_GC_PS] = KN_UCD_PUNCT,      [KN_GC_PE] = KN_UCD_PUNCT,
        [KN_GC_PI] = KN_UCD_PUNCT,      [KN_GC_PF] = KN_UCD_PUNCT,      [KN_GC_PO] = KN_UCD_PUNCT,
        [KN_GC_SM] = KN_UCD_SYMBOL,     [KN_GC_SC] = KN_UCD_SYMBOL,     [KN_GC_SK] = KN_UCD_SYMBOL,
        [KN_GC_SO] = KN_UCD_SYMBOL,     [KN_GC_ZS] = KN_UCD_SEPARATOR,  [KN_GC_ZL] = KN_UCD_SEPARATOR,
        [KN_GC_ZP] = KN_UCD_SEPARATOR,  [KN_GC_CC] = KN_UCD_OTHER,      [KN_GC_CF] = KN_UCD_OTHER,
        [KN_GC_CS] = KN_UCD_OTHER,      [KN_GC_CO] = KN_UCD_OTHER,      [KN_GC_CN] = KN_UCD_OTHER,
    };
    return cp < 0x80 ? ascii_flags(cp) : of[kn_ucd_category(cp)];
}

bool kn_ucd_is_whitespace(uint32_t cp) {
    switch (cp) {
        case 0x09:
        case 0x0A:
        case 0x0B:
        case 0x0C:
        case 0x0D:
        case 0x20:
        case 0x85:
        case 0xA0:
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x202F:
        case 0x205F:
        case 0x3000: return true;
        default: return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* Binary search over a table whose rows start with a code point, sorted ascending. */
static long find_row(const uint32_t *table, size_t n_rows, size_t row_len, uint32_t cp) {
    size_t lo = 0, hi = n_rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t v = table[mid * row_len];
        if (v == cp) return (long)mid;
        if (v < cp) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

uint32_t kn_ucd_tolower(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    long r = find_row(&kn_ucd_lower[0][0], kn_ucd_n_lower, 2, cp);
    return r < 0 ? cp : kn_ucd_lower[r][1];
}

size_t kn_ucd_nfd(uint32_t cp, uint32_t out[4]) {
    /* Hangul syllables: algorithmic decomposition into L V (T) jamo. */
    enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, NV = 21, NT = 28, NS = 19 * 21 * 28 };
    if (cp >= SBASE && cp < SBASE + NS) {
        uint32_t s = cp - SBASE;
        out[0] = LBASE + s / (NV * NT);
        out[1] = VBASE + (s % (NV * NT)) / NT;
        if (s % NT == 0) return 2;
        out[2] = TBASE + s % NT;
        return 3;
    }
    if (cp < 0xC0) {
        out[0] = cp;
        return 1;
    }
    long r = find_row(&kn_ucd_nfd_table[0][0], kn_ucd_n_nfd_table, 5, cp);
    if (r < 0) {
        out[0] = cp;
        return 1;
    }
    size_t n = 0;
    for (int i = 1; i <= 4 && kn_ucd_nfd_table[r][i]; i++) out[n++] = kn_ucd_nfd_table[r][i];
    return n;
}
