/*
 * tok_tj_pre.c - the pre-tokenizers of a tokenizer.json pipeline. A section of text becomes a list
 * of words (spans of a buffer); each step rewrites every current word into zero or more words:
 *   Split       the matches of a regex (PCRE2, UTF + Unicode properties) or a literal, kept or removed
 *               by its behaviour (Removed / Isolated / MergedWithPrevious / MergedWithNext /
 *               Contiguous), or with invert the matches alone; Digits, Whitespace, WhitespaceSplit,
 *               Punctuation and BertPreTokenizer are Splits by fixed regexes (see tok_tj_load.c);
 *   ByteLevel   optionally a space in front, GPT-2's regex split (use_regex), then each byte written
 *               as its GPT-2 character;
 *   Metaspace   spaces replaced by the replacement character, one prepended (always / first section
 *               only / never), and with split a cut before each replacement character;
 *   Replace, FixedLength.
 * Regexes are compiled once at load; text that is not valid UTF-8 never matches (it stays in gaps).
 */
#include "text/tok_tj.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

void kn_tj_pre_free(kn_tj_pre *p) {
    if (p->re) pcre2_code_free(p->re);
    free(p->str);
    free(p->content);
    memset(p, 0, sizeof *p);
}

kiln_status kn_tj_compile(const char *re, size_t n, const char *where, pcre2_code **out) {
    int err;
    PCRE2_SIZE erroff;
    *out = pcre2_compile((PCRE2_SPTR)re, n, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &erroff, NULL);
    if (!*out) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return kn_error(KILN_ERR_FORMAT, "tokenizer.json: %s: the regex does not compile at offset %zu: %s", where,
                        (size_t)erroff, (const char *)msg);
    }
    pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    return KILN_OK;
}

static bool push(kn_spanvec *v, size_t off, size_t len) {
    if (len == 0) return true;
    if (v->n == v->cap && !kn_reserve((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v)) return false;
    v->v[v->n++] = (kn_span){off, len};
    return true;
}

kiln_status kn_tj_split(const pcre2_code *re, const char *lit, size_t lit_len, kn_tj_behavior b, bool invert,
                        const char *text, size_t n, size_t base, kn_spanvec *out) {
    /* collect the matches (as [s, e) pairs) first */
    kn_spanvec m = {0};
    kiln_status st = KILN_OK;
    if (re) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) return KILN_ERR_NOMEM;
        size_t pos = 0;
        while (pos <= n) {
            int rc = pcre2_match(re, (PCRE2_SPTR)text, n, pos, 0, md, NULL);
            if (rc < 0) break; /* no match, or a resource limit: the rest is one gap */
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            size_t s = ov[0], e = ov[1];
            if (e <= s) { /* an empty match: step over one character */
                if (s >= n) break;
                pos = s + 1;
                while (pos < n && ((uint8_t)text[pos] & 0xC0) == 0x80) pos++;
                continue;
            }
            if (m.n == m.cap && !kn_reserve((void **)&m.v, &m.cap, m.n + 1, sizeof *m.v)) {
                st = KILN_ERR_NOMEM;
                break;
            }
            m.v[m.n++] = (kn_span){s, e - s};
            pos = e;
        }
        pcre2_match_data_free(md);
    } else if (lit_len) {
        for (size_t i = 0; i + lit_len <= n;) {
            const char *f = memmem(text + i, n - i, lit, lit_len);
            if (!f) break;
            size_t s = (size_t)(f - text);
            if (m.n == m.cap && !kn_reserve((void **)&m.v, &m.cap, m.n + 1, sizeof *m.v)) {
                st = KILN_ERR_NOMEM;
                break;
            }
            m.v[m.n++] = (kn_span){s, lit_len};
            i = s + lit_len;
        }
    }
    if (st) {
        free(m.v);
        return st;
    }
    if (invert) { /* the matches are the pieces, the gaps the delimiters */
        kn_spanvec g = {0};
        size_t prev = 0;
        for (size_t i = 0; i <= m.n && !st; i++) {
            size_t s = i < m.n ? m.v[i].off : n;
            if (s > prev && !push(&g, prev, s - prev)) st = KILN_ERR_NOMEM;
            if (i < m.n) prev = m.v[i].off + m.v[i].len;
        }
        free(m.v);
        m = g;
        if (st) {
            free(m.v);
            return st;
        }
    }
    /* now m holds the delimiters, in order: walk gaps and delimiters, folding them as the
     * tokenizers library does (a piece merges into the last one pushed, or stands alone) */
    size_t prev = 0, first_out = out->n;
    bool prev_match = false;
    for (size_t i = 0; i <= m.n && !st; i++) {
        size_t s = i < m.n ? m.v[i].off : n, e = i < m.n ? m.v[i].off + m.v[i].len : n;
        for (int part = 0; part < 2 && !st; part++) {
            size_t ps = part ? s : prev, pe = part ? e : s;
            bool is_match = part == 1;
            if (pe <= ps || (part == 1 && i == m.n)) continue;
            bool merge = false;
            switch (b) {
                case KN_TJB_REMOVED:
                    if (is_match) {
                        prev_match = true;
                        continue;
                    }
                    break;
                case KN_TJB_ISOLATED: break;
                case KN_TJB_MERGED_PREV: merge = is_match && !prev_match; break;
                case KN_TJB_MERGED_NEXT: merge = prev_match; break;
                case KN_TJB_CONTIGUOUS: merge = is_match && prev_match; break;
            }
            if (merge && out->n > first_out) out->v[out->n - 1].len = base + pe - out->v[out->n - 1].off;
            else if (!push(out, base + ps, pe - ps)) st = KILN_ERR_NOMEM;
            prev_match = is_match;
        }
        prev = e;
    }
    free(m.v);
    return st;
}

/* ---- steps that rewrite the text ---------------------------------------------------------------- */

static bool add_word(kn_tj_words *o, const char *s, size_t n) {
    size_t off = o->buf.n;
    return kn_bvec_append(&o->buf, s, n) && push(&o->w, off, n);
}

static kiln_status bytelevel(const kn_tj_pre *p, const kn_tj_words *in, kn_tj_words *out) {
    uint8_t map[256][2], map_len[256];
    for (int b = 0; b < 256; b++) map_len[b] = (uint8_t)kn_utf8_encode(kn_bpe_byte_char((uint8_t)b), map[b]);
    kn_bvec tmp = {0};
    kn_spanvec parts = {0};
    kiln_status st = KILN_OK;
    for (size_t k = 0; k < in->w.n && !st; k++) {
        const char *s = in->buf.v + in->w.v[k].off;
        size_t n = in->w.v[k].len;
        tmp.n = 0;
        if (p->f[0] && (n == 0 || s[0] != ' ') && !kn_bvec_append(&tmp, " ", 1)) st = KILN_ERR_NOMEM;
        if (!st && !kn_bvec_append(&tmp, s, n)) st = KILN_ERR_NOMEM;
        if (st) break;
        parts.n = 0;
        if (p->re) st = kn_tj_split(p->re, NULL, 0, KN_TJB_ISOLATED, false, tmp.v, tmp.n, 0, &parts);
        else if (!push(&parts, 0, tmp.n)) st = KILN_ERR_NOMEM;
        for (size_t i = 0; i < parts.n && !st; i++) {
            size_t off = out->buf.n;
            if (!kn_reserve((void **)&out->buf.v, &out->buf.cap, out->buf.n + 2 * parts.v[i].len, 1)) {
                st = KILN_ERR_NOMEM;
                break;
            }
            const uint8_t *q = (const uint8_t *)tmp.v + parts.v[i].off;
            for (size_t x = 0; x < parts.v[i].len; x++) {
                memcpy(out->buf.v + out->buf.n, map[q[x]], map_len[q[x]]);
                out->buf.n += map_len[q[x]];
            }
            if (!push(&out->w, off, out->buf.n - off)) st = KILN_ERR_NOMEM;
        }
    }
    free(tmp.v);
    free(parts.v);
    return st;
}

static kiln_status metaspace(const kn_tj_pre *p, const kn_tj_words *in, size_t section_index, kn_tj_words *out) {
    kn_bvec tmp = {0};
    kiln_status st = KILN_OK;
    for (size_t k = 0; k < in->w.n && !st; k++) {
        const char *s = in->buf.v + in->w.v[k].off;
        size_t n = in->w.v[k].len;
        tmp.n = 0;
        for (size_t i = 0; i < n && !st; i++)
            if (!(s[i] == ' ' ? kn_bvec_append(&tmp, p->str, p->str_len) : kn_bvec_append(&tmp, s + i, 1)))
                st = KILN_ERR_NOMEM;
        if (st) break;
        bool starts = tmp.n >= p->str_len && memcmp(tmp.v, p->str, p->str_len) == 0;
        bool prepend = !starts && (p->scheme == KN_TJ_PREPEND_ALWAYS ||
                                   (p->scheme == KN_TJ_PREPEND_FIRST && section_index == 0 && k == 0));
        size_t base = out->buf.n;
        if ((prepend && !kn_bvec_append(&out->buf, p->str, p->str_len)) || !kn_bvec_append(&out->buf, tmp.v, tmp.n)) {
            st = KILN_ERR_NOMEM;
            break;
        }
        size_t len = out->buf.n - base;
        if (p->f[0])
            st =
                kn_tj_split(NULL, p->str, p->str_len, KN_TJB_MERGED_NEXT, false, out->buf.v + base, len, base, &out->w);
        else if (!push(&out->w, base, len)) st = KILN_ERR_NOMEM;
    }
    free(tmp.v);
    return st;
}

static kiln_status replace_words(const kn_tj_pre *p, const kn_tj_words *in, kn_tj_words *out) {
    kiln_status st = KILN_OK;
    for (size_t k = 0; k < in->w.n && !st; k++) {
        const char *s = in->buf.v + in->w.v[k].off;
        size_t n = in->w.v[k].len, i = 0, base = out->buf.n;
        kn_spanvec m = {0};
        if ((st = kn_tj_split(p->re, p->str, p->str_len, KN_TJB_ISOLATED, true, s, n, 0, &m))) break;
        /* m: the gaps between matches (invert); write gap, content, gap, ... */
        for (size_t g = 0; g < m.n && !st; g++) {
            if (m.v[g].off > i && !kn_bvec_append(&out->buf, p->content, p->content_len)) st = KILN_ERR_NOMEM;
            if (!st && !kn_bvec_append(&out->buf, s + m.v[g].off, m.v[g].len)) st = KILN_ERR_NOMEM;
            i = m.v[g].off + m.v[g].len;
        }
        if (!st && i < n && !kn_bvec_append(&out->buf, p->content, p->content_len)) st = KILN_ERR_NOMEM;
        free(m.v);
        if (!st && !push(&out->w, base, out->buf.n - base)) st = KILN_ERR_NOMEM;
    }
    return st;
}

static kiln_status fixed_length(const kn_tj_pre *p, const kn_tj_words *in, kn_tj_words *out) {
    for (size_t k = 0; k < in->w.n; k++) {
        const char *s = in->buf.v + in->w.v[k].off;
        size_t n = in->w.v[k].len;
        for (size_t i = 0; i < n;) {
            size_t j = i;
            for (size_t c = 0; c < p->n && j < n; c++) {
                size_t adv;
                kn_utf8_decode((const uint8_t *)s + j, n - j, &adv);
                j += adv;
            }
            if (!add_word(out, s + i, j - i)) return KILN_ERR_NOMEM;
            i = j;
        }
    }
    return KILN_OK;
}

kiln_status kn_tj_pretokenize(const kn_tj *tj, const char *in, size_t n, size_t section_index, kn_tj_words *out,
                              kn_tj_words *tmp) {
    out->buf.n = out->w.n = 0;
    if (!add_word(out, in, n)) return KILN_ERR_NOMEM;
    for (int i = 0; i < tj->n_pre; i++) {
        const kn_tj_pre *p = &tj->pre[i];
        kiln_status st = KILN_OK;
        tmp->w.n = 0;
        if (p->type == KN_TJP_SPLIT) { /* the text stays: only the spans change */
            for (size_t k = 0; k < out->w.n && !st; k++)
                st = kn_tj_split(p->re, p->str, p->str_len, p->behavior, p->invert, out->buf.v + out->w.v[k].off,
                                 out->w.v[k].len, out->w.v[k].off, &tmp->w);
            kn_spanvec sw = out->w;
            out->w = tmp->w;
            tmp->w = sw;
            if (st) return st;
            continue;
        }
        tmp->buf.n = 0;
        switch (p->type) {
            case KN_TJP_BYTELEVEL: st = bytelevel(p, out, tmp); break;
            case KN_TJP_METASPACE: st = metaspace(p, out, section_index, tmp); break;
            case KN_TJP_REPLACE: st = replace_words(p, out, tmp); break;
            case KN_TJP_FIXEDLEN: st = fixed_length(p, out, tmp); break;
            default: st = kn_error(KILN_ERR_INTERNAL, "pre-tokenizer step %d", (int)p->type);
        }
        kn_tj_words sw = *out;
        *out = *tmp;
        *tmp = sw;
        if (st) return st;
    }
    return KILN_OK;
}
