/*
 * schema_dfa_emit.c - a deterministic automaton over code points (schema_regex.c) written out as the
 * GBNF rules of a JSON string: one rule per state, each character of a transition either literal (in a
 * class, or a negated class when shorter) or as the JSON escape it needs, so that the grammar admits
 * exactly the JSON string texts whose content the automaton accepts.
 */
#include "sample/schema_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends a code point as a character-class member (formatted by hand: a class of \p{L} is
 * thousands of members, written once per state that reads it). */
static void class_cp(kn_sbuf *b, uint32_t c) {
    char t[10];
    size_t n = 0;
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '"') {
        t[n++] = (char)c;
    } else if (c == '\\') {
        t[n++] = '\\', t[n++] = '\\';
    } else {
        const int digits = c < 0x80 ? 2 : c < 0x10000 ? 4 : 8; /* \xHH, \uHHHH, \UHHHHHHHH */
        t[n++] = '\\';
        t[n++] = c < 0x80 ? 'x' : c < 0x10000 ? 'u' : 'U';
        for (int i = digits - 1; i >= 0; i--) t[n++] = "0123456789ABCDEF"[(c >> (4 * i)) & 15];
    }
    kn_sbuf_put(b, t, n);
}

/* Appends the GBNF alternatives that write one character from the ranges t[0..n) (all with the same
 * target) as JSON string text: the literal characters in one class, escapes as literals. Returns
 * the number of alternatives written; b fails (nomem) when memory runs out. */
static int emit_chars(kn_sbuf *b, const kn_dtrans *t, int n, bool *used_jesc) {
    int alts = 0;
    /* literal: everything but '"', '\\', control characters and surrogates; written as a class
     * or as a negated one, whichever is shorter */
    kn_cset lit = {0}, neg = {0};
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = kn_cset_add(&lit, t[i].lo, t[i].hi);
    kn_cset specials = {0};
    ok = ok && kn_cset_add(&specials, 0, 0x1F) && kn_cset_add(&specials, '"', '"') &&
         kn_cset_add(&specials, '\\', '\\') && kn_cset_add(&specials, 0xD800, 0xDFFF);
    ok = ok && kn_cset_add_set(&neg, &lit) && kn_cset_negate(&neg) && kn_cset_add_set(&neg, &specials); /* not L */
    kn_cset_free(&lit);
    ok = ok && kn_cset_add_set(&lit, &neg) && kn_cset_negate(&lit); /* L minus the specials */
    kn_cset_free(&specials);
    if (ok && lit.n) {
        kn_sbuf pos, ng;
        kn_sbuf_init(&pos, 1 << 20);
        kn_sbuf_init(&ng, 1 << 20);
        for (int i = 0; i < lit.n; i++) {
            class_cp(&pos, lit.r[i].lo);
            if (lit.r[i].hi > lit.r[i].lo) {
                if (lit.r[i].hi > lit.r[i].lo + 1) kn_sbuf_puts(&pos, "-");
                class_cp(&pos, lit.r[i].hi);
            }
        }
        for (int i = 0; i < neg.n; i++) {
            uint32_t lo = neg.r[i].lo, hi = neg.r[i].hi;
            if (lo >= 0xD800 && hi <= 0xDFFF) continue; /* the compiler leaves surrogates out anyway */
            if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
            if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
            class_cp(&ng, lo);
            if (hi > lo) {
                if (hi > lo + 1) kn_sbuf_puts(&ng, "-");
                class_cp(&ng, hi);
            }
        }
        const bool use_neg = neg.n && ng.len < pos.len;
        kn_sbuf_puts(b, use_neg ? "[^" : "[");
        kn_sbuf_cat(b, use_neg ? &ng : &pos);
        kn_sbuf_puts(b, "]");
        alts++;
        kn_sbuf_free(&pos);
        kn_sbuf_free(&ng);
    }
    kn_cset_free(&lit);
    kn_cset_free(&neg);
    if (!ok) b->nomem = true; /* not a narrower grammar: the class is missing */
    /* escapes: one shared rule when every character that has one is in the set (the usual case) */
    bool all_esc = true;
    for (uint32_t c = 0; c <= '\\' && all_esc; c++) {
        if (c >= 0x20 && c != '"' && c != '/' && c != '\\') continue;
        bool in = false;
        for (int i = 0; i < n && !in; i++) in = c >= t[i].lo && c <= t[i].hi;
        all_esc = in;
    }
    if (all_esc) {
        kn_sbuf_printf(b, "%sjesc", alts ? " | " : "");
        *used_jesc = true;
        return alts + 1;
    }
    for (int i = 0; i < n; i++) {
        uint32_t lo = t[i].lo, hi = t[i].hi;
        if (lo > '\\') break;
        for (uint32_t c = lo; c <= hi && c <= '\\'; c++) {
            const char *esc = NULL;
            switch (c) {
                case '"': esc = "\"\\\\\\\"\""; break; /* "\\\"" */
                case '\\': esc = "\"\\\\\\\\\""; break;
                case '/': esc = "\"\\\\/\""; break;
                case '\b': esc = "\"\\\\b\""; break;
                case '\f': esc = "\"\\\\f\""; break;
                case '\n': esc = "\"\\\\n\""; break;
                case '\r': esc = "\"\\\\r\""; break;
                case '\t': esc = "\"\\\\t\""; break;
                default: break;
            }
            if (esc) {
                kn_sbuf_printf(b, "%s%s", alts ? " | " : "", esc);
                alts++;
            }
            if (c < 0x20) {
                static const char hex[] = "0123456789abcdef";
                unsigned lo4 = c & 0xF;
                kn_sbuf_printf(b, "%s\"\\\\u00%c%c\"", alts ? " | " : "", c < 0x10 ? '0' : '1', hex[lo4]);
                if (lo4 >= 10) kn_sbuf_printf(b, " | \"\\\\u00%c%c\"", c < 0x10 ? '0' : '1', hex[lo4] - 'a' + 'A');
                alts += 1 + (lo4 >= 10);
            }
        }
    }
    return alts;
}

/* The text of the last groups of transitions written, by their ranges: the states of a counted class
 * ([\p{L}\p{N}]{1,20}: 20 states) read the same characters, thousands of ranges each time. */
#define CHARS_MEMO     8
/* A group whose text is at least this long is written once, as a rule of its own that the states
 * reading it name: the 41 states of ^[\p{L}\p{N} _-]{1,20}\P{Z}$ read two classes of 10 KB each,
 * which written into every state made 747 KB of GBNF and a program twenty times the size. */
#define CHARS_RULE_MIN 256
typedef struct chars_memo {
    kn_dtrans *r[CHARS_MEMO]; /* the group's ranges (targets ignored); NULL: an empty slot */
    int n[CHARS_MEMO];
    kn_sbuf text[CHARS_MEMO]; /* the alternatives, or the name of the rule holding them */
    int alts[CHARS_MEMO];     /* the alternatives text[] holds (1 for a rule's name) */
    int next;                 /* the slot to replace next */
} chars_memo;

static bool same_ranges(const kn_dtrans *a, const kn_dtrans *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i].lo != b[i].lo || a[i].hi != b[i].hi) return false;
    return true;
}

/* The text emit_chars writes for the ranges t[0..n) (*alts: its alternatives), from memo m when a group
 * of the same ranges is among the last CHARS_MEMO (a group that needed jesc set g->used_jesc when it
 * was first written); a text of CHARS_RULE_MIN bytes or more is written to g as a rule named from
 * base and its name returned instead. Owned by m, valid until the next call. */
static const kn_sbuf *emit_chars_memo(chars_memo *m, kn_gout *g, const char *base, const kn_dtrans *t, int n,
                                      int *alts) {
    for (int q = 0; q < CHARS_MEMO; q++)
        if (m->r[q] && m->n[q] == n && same_ranges(m->r[q], t, n)) {
            *alts = m->alts[q];
            return &m->text[q];
        }
    const int q = m->next;
    m->next = (q + 1) % CHARS_MEMO;
    free(m->r[q]);
    kn_sbuf_free(&m->text[q]);
    kn_sbuf_init(&m->text[q], KN_SCHEMA_MAX_GBNF);
    m->alts[q] = emit_chars(&m->text[q], t, n, &g->used_jesc);
    if (m->text[q].len >= CHARS_RULE_MIN && !m->text[q].nomem && !m->text[q].over) {
        char h[96];
        snprintf(h, sizeof h, "%s-chars", base);
        const char *nm = kn_gout_name(g, h);
        kn_gout_rule(g, nm, nm ? m->text[q].p : NULL);
        m->text[q].len = 0;
        kn_sbuf_puts(&m->text[q], nm ? nm : "");
        m->alts[q] = 1;
    }
    m->r[q] = malloc((size_t)n * sizeof *t);
    if (m->r[q]) memcpy(m->r[q], t, (size_t)n * sizeof *t);
    m->n[q] = n;
    *alts = m->alts[q];
    return &m->text[q];
}

const char *kn_dfa_emit_string(kn_gout *g, const kn_dfa *d, const char *hint, const kn_dfa_count *cnt) {
    const char *base = kn_gout_name(g, hint);
    if (!base) return NULL;
    char **names = calloc((size_t)d->n, sizeof *names);
    kn_sbuf body;
    kn_sbuf_init(&body, KN_SCHEMA_MAX_GBNF);
    chars_memo groups = {0};
    const char *ret = NULL;
    if (!names) goto done;
    for (int i = 0; i < d->n; i++) {
        char h[96];
        snprintf(h, sizeof h, "%s-%d", base, i);
        const char *nm = kn_gout_name(g, h);
        if (!nm) goto done;
        names[i] = (char *)nm;
    }
    body.len = 0;
    kn_sbuf_printf(&body, "\"\\\"\" %s%s", cnt ? "@count " : "", names[0]);
    kn_gout_rule(g, base, body.p);
    for (int i = 0; i < d->n; i++) {
        const kn_dstate *s = &d->s[i];
        body.len = 0;
        int alts = 0;
        if (s->acc && (!cnt || (cnt->lo[i] <= cnt->hi[i] && cnt->hi[i] >= cnt->min))) {
            if (cnt && cnt->min > 0) kn_sbuf_printf(&body, "@{%ld,%ld} ", cnt->min, cnt->max);
            kn_sbuf_puts(&body, "\"\\\"\"");
            alts++;
        }
        /* group transitions by target */
        bool *done_t = calloc((size_t)s->ntr + 1, sizeof *done_t);
        kn_dtrans *grp = malloc(((size_t)s->ntr + 1) * sizeof *grp);
        if (!done_t || !grp) {
            free(done_t);
            free(grp);
            goto done;
        }
        for (int k = 0; k < s->ntr; k++) {
            if (done_t[k]) continue;
            const int to = s->tr[k].to;
            char guard[48] = "";
            if (cnt && cnt->lo[to] > cnt->hi[to]) continue; /* never entered with an allowed count */
            if (cnt) snprintf(guard, sizeof guard, "@+1{%d,%d} ", cnt->lo[to], cnt->hi[to]);
            int ng = 0;
            for (int j = k; j < s->ntr; j++)
                if (!done_t[j] && s->tr[j].to == s->tr[k].to) grp[ng++] = s->tr[j], done_t[j] = true;
            int na = 0;
            const kn_sbuf *chars = emit_chars_memo(&groups, g, base, grp, ng, &na);
            body.nomem |= chars->nomem; /* even with no alternative written: a group is missing */
            body.over |= chars->over;
            if (na) {
                if (alts) kn_sbuf_puts(&body, " | ");
                kn_sbuf_puts(&body, na > 1 ? "(" : "");
                kn_sbuf_cat(&body, chars);
                kn_sbuf_printf(&body, "%s %s%s", na > 1 ? ")" : "", guard, names[to]);
                alts++;
            }
        }
        free(done_t);
        free(grp);
        if (!alts) kn_sbuf_puts(&body, "[^\\x00-\\U0010FFFF]"); /* unreachable: trimmed automata */
        kn_gout_rule(g, names[i], body.p);
    }
    if (!body.nomem && !body.over) ret = base;
done:
    for (int q = 0; q < CHARS_MEMO; q++) free(groups.r[q]), kn_sbuf_free(&groups.text[q]);
    kn_sbuf_free(&body);
    free(names);
    return ret;
}
