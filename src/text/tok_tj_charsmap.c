/*
 * tok_tj_charsmap.c - the Precompiled normalizer: a SentencePiece normalization rule set compiled
 * into a "precompiled charsmap", which tokenizers of SentencePiece-converted models carry (T5,
 * ALBERT, XLM-RoBERTa and the embedding models built on it). The charsmap is
 *     uint32 LE trie_size | trie_size bytes: a double-array trie (uint32 LE units) | replacement blob
 * The trie maps UTF-8 input strings to offsets into the blob, which holds NUL-terminated
 * replacement strings. A unit of the array is either an inner unit (bits 0..7 its label, bit 8 "has
 * a leaf", bits 10..31 an offset, shifted left by 8 more when bit 9 is set) or a leaf unit (bit 31
 * set, bits 0..30 the value). From the unit at position p, the child with label c sits at
 * p ^ offset(unit) ^ c; a key's value is in the child with label 0 of its last unit.
 *
 * Loading checks everything a lookup can reach: the sizes, each reachable leaf's place and value (an
 * offset at a character boundary of the blob, which must be valid UTF-8), so that a malformed
 * charsmap is a load error naming what is wrong; lookups still bounds-check every index.
 *
 * Normalization follows Hugging Face's tokenizers (the reference for tokenizer.json), which differs
 * from SentencePiece's own longest-match walk: the text is cut into grapheme clusters; a cluster
 * shorter than 6 bytes is looked up whole, and when some prefix of it is a key the replacement of the
 * shortest such prefix stands for the whole cluster; otherwise each character is looked up alone
 * and replaced, or kept. kiln finds clusters with the rules that can make one shorter than 6 bytes
 * (a base followed by marks, ZWJ/ZWNJ or emoji modifiers; CR LF; prepended concatenation marks;
 * nothing joins a control character); longer clusters (Hangul syllable sequences, regional
 * indicator pairs, emoji ZWJ sequences, which kiln may cut after the joiner) are looked up per
 * character either way.
 * Ill-formed UTF-8 bytes pass through unchanged.
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

#define KN_CHARSMAP_MAX ((size_t)64 << 20) /* decoded bytes */

struct kn_tj_charsmap {
    uint32_t *unit; /* [n_unit] the trie */
    uint32_t n_unit;
    char *blob; /* [n_blob] replacement strings (NUL-terminated, the last may end at n_blob) */
    uint32_t n_blob;
};

void kn_tj_charsmap_free(kn_tj_charsmap *cm) {
    if (!cm) return;
    free(cm->unit);
    free(cm->blob);
    free(cm);
}

static inline bool has_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t leaf_value(uint32_t u) { return u & 0x7FFFFFFFu; }
static inline uint32_t unit_label(uint32_t u) { return u & (0x80000000u | 0xFFu); }
static inline uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

static kiln_status bad(const char *path, const char *what) {
    return kn_error(KILN_ERR_FORMAT, "%s: precompiled_charsmap %s", path, what);
}

/* Walks every unit a lookup can reach from the root (each base once) and checks the leaves. */
static kiln_status check_trie(const kn_tj_charsmap *cm, const char *path) {
    uint32_t n = cm->n_unit;
    uint8_t *seen = calloc((n + 7) / 8, 1);
    uint32_t *stack = malloc((size_t)n * sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return KILN_ERR_NOMEM;
    }
    kiln_status st = KILN_OK;
    uint32_t sp = 0, root = unit_offset(cm->unit[0]);
    if (root < n) {
        seen[root >> 3] |= (uint8_t)(1u << (root & 7));
        stack[sp++] = root;
    }
    while (sp > 0 && !st) {
        uint32_t base = stack[--sp];
        for (uint32_t c = 1; c < 256; c++) {
            uint32_t p = base ^ c;
            if (p >= n || unit_label(cm->unit[p]) != c) continue;
            uint32_t next = p ^ unit_offset(cm->unit[p]);
            if (has_leaf(cm->unit[p])) {
                uint32_t v = next < n ? leaf_value(cm->unit[next]) : UINT32_MAX;
                if (next >= n) st = bad(path, "has a leaf outside its trie");
                else if (v >= cm->n_blob) st = bad(path, "has a replacement offset past its strings");
                else if (((uint8_t)cm->blob[v] & 0xC0) == 0x80)
                    st = bad(path, "has a replacement offset inside a character");
                if (st) break;
            }
            if (next < n && !(seen[next >> 3] & (1u << (next & 7)))) {
                seen[next >> 3] |= (uint8_t)(1u << (next & 7));
                stack[sp++] = next;
            }
        }
    }
    free(seen);
    free(stack);
    return st;
}

kiln_status kn_tj_charsmap_parse(const uint8_t *data, size_t n, const char *path, kn_tj_charsmap **out) {
    *out = NULL;
    if (n > KN_CHARSMAP_MAX) return bad(path, "is over 64 MiB");
    if (n < 8) return bad(path, "is too short for a trie");
    uint32_t trie_size = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (trie_size == 0 || trie_size % 4) return bad(path, "has a trie size that is not a positive multiple of 4");
    if (trie_size > n - 4) return bad(path, "has a trie larger than itself");
    size_t n_blob = n - 4 - trie_size;
    /* the strings must be valid UTF-8 (NUL bytes end them) */
    for (size_t i = 0; i < n_blob;) {
        size_t adv;
        if (kn_utf8_decode(data + 4 + trie_size + i, n_blob - i, &adv) == KN_UTF8_INVALID)
            return bad(path, "has replacement strings that are not valid UTF-8");
        i += adv;
    }
    kn_tj_charsmap *cm = calloc(1, sizeof *cm);
    if (!cm) return KILN_ERR_NOMEM;
    cm->n_unit = trie_size / 4;
    cm->n_blob = (uint32_t)n_blob;
    cm->unit = malloc((size_t)cm->n_unit * sizeof *cm->unit);
    cm->blob = malloc(n_blob ? n_blob : 1);
    if (!cm->unit || !cm->blob) {
        kn_tj_charsmap_free(cm);
        return KILN_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < cm->n_unit; i++) {
        const uint8_t *u = data + 4 + (size_t)i * 4;
        cm->unit[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    if (n_blob) memcpy(cm->blob, data + 4 + trie_size, n_blob);
    kiln_status st = check_trie(cm, path);
    if (st) {
        kn_tj_charsmap_free(cm);
        return st;
    }
    *out = cm;
    return KILN_OK;
}

static int b64_value(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

kiln_status kn_tj_charsmap_from_base64(const char *b64, size_t n, const char *path, kn_tj_charsmap **out) {
    *out = NULL;
    while (n > 0 && b64[n - 1] == '=') n--;
    if (n / 4 * 3 > KN_CHARSMAP_MAX) return bad(path, "is over 64 MiB");
    if (n % 4 == 1) return bad(path, "is not valid base64");
    uint8_t *buf = malloc(n / 4 * 3 + 3);
    if (!buf) return KILN_ERR_NOMEM;
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((uint8_t)b64[i]);
        if (v < 0) {
            free(buf);
            return bad(path, "is not valid base64");
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[k++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    kiln_status st = kn_tj_charsmap_parse(buf, k, path, out);
    free(buf);
    return st;
}

/* The replacement of the shortest key that is a prefix of s[0..n) (stopping at a NUL byte), as
 * blob + *len; NULL when no key is. */
static const char *lookup(const kn_tj_charsmap *cm, const uint8_t *s, size_t n, size_t *len) {
    const uint32_t nu = cm->n_unit;
    uint32_t pos = unit_offset(cm->unit[0]);
    for (size_t i = 0; i < n && s[i]; i++) {
        pos ^= s[i];
        if (pos >= nu || unit_label(cm->unit[pos]) != s[i]) return NULL;
        uint32_t u = cm->unit[pos];
        pos ^= unit_offset(u);
        if (has_leaf(u)) {
            if (pos >= nu) return NULL;
            uint32_t v = leaf_value(cm->unit[pos]);
            if (v >= cm->n_blob) return NULL;
            const char *r = cm->blob + v;
            const char *z = memchr(r, 0, cm->n_blob - v);
            *len = z ? (size_t)(z - r) : cm->n_blob - v;
            return r;
        }
    }
    return NULL;
}

/* Grapheme_Cluster_Break = Control (Cc, Cf, Zl, Zp less the joiners): nothing attaches to it. */
static bool is_control(uint32_t cp) {
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029) return true;
    return cp == 0xAD || cp == 0x61C || cp == 0x180E || cp == 0x200B || cp == 0x200E || cp == 0x200F ||
           (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF ||
           (cp >= 0xFFF0 && cp <= 0xFFFB) || (cp >= 0xE0000 && cp <= 0xE001F);
}

/* Characters that attach to the one before: Extend, ZWJ and SpacingMark (marks, less the spacing
 * marks of Myanmar, Tai Tham, Tai Viet and Ahom that Unicode leaves out of SpacingMark). */
static bool is_extend(uint32_t cp) {
    if (kn_ucd_flags(cp) & KN_UCD_MARK_NONSPACING) return true;
    if (kn_ucd_flags(cp) & KN_UCD_MARK_OTHER)
        return !(cp == 0x102B || cp == 0x102C || cp == 0x1038 || (cp >= 0x1062 && cp <= 0x1064) ||
                 (cp >= 0x1067 && cp <= 0x106D) || cp == 0x1083 || (cp >= 0x1087 && cp <= 0x108C) || cp == 0x108F ||
                 (cp >= 0x109A && cp <= 0x109C) || cp == 0x1A61 || cp == 0x1A63 || cp == 0x1A64 || cp == 0xAA7B ||
                 cp == 0xAA7D || cp == 0x11720 || cp == 0x11721);
    return cp == 0x200C || cp == 0x200D || cp == 0xFF9E || cp == 0xFF9F || (cp >= 0x1F3FB && cp <= 0x1F3FF) ||
           (cp >= 0xE0020 && cp <= 0xE007F) || cp == 0x0E33 || cp == 0x0EB3;
}

/* Prepended_Concatenation_Mark and the other Prepend characters: they attach to the one after. */
static bool is_prepend(uint32_t cp) {
    return (cp >= 0x600 && cp <= 0x605) || cp == 0x6DD || cp == 0x70F || cp == 0x890 || cp == 0x891 || cp == 0x8E2 ||
           cp == 0x110BD || cp == 0x110CD;
}

/* The end of the grapheme cluster that starts at in[i] (a well-formed character cp of length adv). */
static size_t cluster_end(const uint8_t *in, size_t n, size_t i, uint32_t cp, size_t adv) {
    size_t e = i + adv;
    if (cp == '\r') return e < n && in[e] == '\n' ? e + 1 : e;
    if (is_control(cp) || cp == '\n') return e;
    while (is_prepend(cp) && e < n) { /* a prepend joins what follows unless it is a control */
        size_t a;
        uint32_t c = kn_utf8_decode(in + e, n - e, &a);
        if (c == KN_UTF8_INVALID || is_control(c) || c == '\r' || c == '\n') return e;
        cp = c;
        e += a;
    }
    while (e < n) {
        size_t a;
        uint32_t c = kn_utf8_decode(in + e, n - e, &a);
        if (c == KN_UTF8_INVALID || !is_extend(c)) break;
        e += a;
    }
    return e;
}

kiln_status kn_tj_charsmap_apply(const kn_tj_charsmap *cm, const char *text, size_t n, kn_bvec *out) {
    const uint8_t *in = (const uint8_t *)text;
    out->n = 0;
    for (size_t i = 0; i < n;) {
        size_t adv, rlen;
        uint32_t cp = kn_utf8_decode(in + i, n - i, &adv);
        if (cp == KN_UTF8_INVALID) {
            if (!kn_bvec_append(out, in + i, adv)) return KILN_ERR_NOMEM;
            i += adv;
            continue;
        }
        size_t e = cluster_end(in, n, i, cp, adv);
        const char *r = e - i < 6 ? lookup(cm, in + i, e - i, &rlen) : NULL;
        if (r) {
            if (!kn_bvec_append(out, r, rlen)) return KILN_ERR_NOMEM;
            i = e;
            continue;
        }
        while (i < e) { /* each character alone */
            kn_utf8_decode(in + i, e - i, &adv);
            r = lookup(cm, in + i, adv, &rlen);
            if (!(r ? kn_bvec_append(out, r, rlen) : kn_bvec_append(out, in + i, adv))) return KILN_ERR_NOMEM;
            i += adv;
        }
    }
    return KILN_OK;
}
