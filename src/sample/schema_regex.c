/*
 * schema_regex.c - ECMAScript regular expressions (the subset JSON Schema's `pattern` needs) and
 * deterministic automata over code points (written out as GBNF rules for JSON strings by
 * schema_dfa_emit.c).
 *
 * A pattern is parsed straight into a Thompson NFA (a counted repetition {m,n} copies its atom's
 * states), with ^ and $ as assertion edges; the subset construction (schema_regex_dfa.c) makes it a
 * DFA over code point ranges, bounded so that no pattern costs more than a fraction of a second.
 * JSON Schema patterns search: the NFA is wrapped in
 * "any string" loops, and the assertions hold only at the start (^) and end ($) of the whole string,
 * as in ECMAScript without the m flag. Supported: literals, escapes (\d \w \s \D \W \S \t \n \r \v \f
 * \0 \xHH \uHHHH \cX and escaped punctuation), classes with ranges and negation, '.', groups
 * (capturing, (?:...) and (?<name>...)), alternation, * + ? {m} {m,} {m,n} and their lazy forms, ^ and
 * $, and \p{..} / \P{..} of the general categories (as with ECMAScript's u flag). Refused with a
 * message naming the offset: backreferences, lookaround, word boundaries, subcategories, unknown
 * letter escapes.
 *
 * Automata: intersection, complement, literal sets and length ranges, trimmed and minimized
 * (schema_dfa_min.c), so every string constraint of a schema combines into one automaton.
 */
#include "sample/schema_internal.h"
#include "text/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- code point sets ------------------------------------------------------------------------- */

void kn_cset_free(kn_cset *s) {
    free(s->r);
    s->r = NULL;
    s->n = s->cap = 0;
}

/* Room for one more range in s; false when out of memory. */
static bool cset_room(kn_cset *s) {
    if (s->n < s->cap) return true;
    int nc = s->cap ? s->cap * 2 : 8;
    kn_crange *r = realloc(s->r, (size_t)nc * sizeof *r);
    if (!r) return false;
    s->r = r;
    s->cap = nc;
    return true;
}

bool kn_cset_add(kn_cset *s, uint32_t lo, uint32_t hi) {
    if (lo > hi) return true;
    /* i: the first range that ends at lo - 1 or later (it may touch or overlap [lo, hi]); ranges are
     * sorted and apart, so their ends are sorted too */
    int i = 0, j = s->n;
    while (i < j) {
        const int mid = i + (j - i) / 2;
        if (lo > 0 && s->r[mid].hi < lo - 1) i = mid + 1;
        else j = mid;
    }
    /* [i, j): the ranges that touch or overlap [lo, hi], merged into one */
    for (j = i; j < s->n && (hi == UINT32_MAX || s->r[j].lo <= hi + 1); j++) {
        if (s->r[j].lo < lo) lo = s->r[j].lo;
        if (s->r[j].hi > hi) hi = s->r[j].hi;
    }
    if (j == i) { /* none: insert */
        if (!cset_room(s)) return false;
        memmove(s->r + i + 1, s->r + i, (size_t)(s->n - i) * sizeof *s->r);
        s->n++;
    } else { /* keep the first, drop the others */
        memmove(s->r + i + 1, s->r + j, (size_t)(s->n - j) * sizeof *s->r);
        s->n -= j - i - 1;
    }
    s->r[i] = (kn_crange){lo, hi};
    return true;
}

bool kn_cset_add_set(kn_cset *s, const kn_cset *o) {
    for (int i = 0; i < o->n; i++)
        if (!kn_cset_add(s, o->r[i].lo, o->r[i].hi)) return false;
    return true;
}

bool kn_cset_negate(kn_cset *s) {
    kn_cset t = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > next && !kn_cset_add(&t, next, s->r[i].lo - 1)) goto fail;
        next = s->r[i].hi + 1;
    }
    if (next <= KN_CP_MAX && !kn_cset_add(&t, next, KN_CP_MAX)) goto fail;
    kn_cset_free(s);
    *s = t;
    return true;
fail:
    kn_cset_free(&t);
    return false;
}

bool kn_cset_has(const kn_cset *s, uint32_t c) {
    for (int i = 0; i < s->n; i++)
        if (c >= s->r[i].lo && c <= s->r[i].hi) return true;
    return false;
}

/* ---- NFA ------------------------------------------------------------------------------------- */

static int nfa_state(kn_nfa *a) {
    if (a->n >= KN_REGEX_MAX_NFA) {
        a->toobig = true;
        return -1;
    }
    if (a->n == a->cap) {
        int nc = a->cap ? a->cap * 2 : 64;
        kn_nstate *s = realloc(a->s, (size_t)nc * sizeof *s);
        if (!s) {
            a->nomem = true;
            return -1;
        }
        a->s = s;
        a->cap = nc;
    }
    a->s[a->n] = (kn_nstate){0};
    return a->n++;
}

static void nfa_edge(kn_nfa *a, int from, int kind, int to, int set) {
    if (from < 0 || to < 0) return;
    kn_nstate *s = &a->s[from];
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 2;
        kn_nedge *e = realloc(s->e, (size_t)nc * sizeof *e);
        if (!e) {
            a->nomem = true;
            return;
        }
        s->e = e;
        s->cap = nc;
    }
    s->e[s->n++] = (kn_nedge){kind, to, set};
}

/* The index of set *cs in a->sets, added if no equal set is there; takes ownership of *cs. -1 when
 * out of memory. Sharing ids keeps the subset construction's work per distinct class, not per copy. */
static int nfa_set(kn_nfa *a, kn_cset *cs) {
    int nk = 2 * cs->n, id = -1;
    int *key = malloc((size_t)(nk ? nk : 1) * sizeof *key);
    if (!key) goto fail;
    for (int i = 0; i < cs->n; i++) {
        key[2 * i] = (int)cs->r[i].lo; /* code points fit an int */
        key[2 * i + 1] = (int)cs->r[i].hi;
    }
    if ((id = kn_imap_get(&a->setids, key, nk)) >= 0) {
        free(key);
        kn_cset_free(cs);
        return id;
    }
    if (a->nsets == a->capsets) {
        int nc = a->capsets ? a->capsets * 2 : 16;
        kn_cset *s = realloc(a->sets, (size_t)nc * sizeof *s);
        if (!s) goto fail;
        a->sets = s;
        a->capsets = nc;
    }
    if (!kn_imap_put(&a->setids, key, nk, a->nsets)) goto fail;
    free(key);
    a->sets[a->nsets] = *cs;
    *cs = (kn_cset){0};
    return a->nsets++;
fail:
    free(key);
    a->nomem = true;
    kn_cset_free(cs);
    return -1;
}

static void nfa_free(kn_nfa *a) {
    for (int i = 0; i < a->n; i++) free(a->s[i].e);
    free(a->s);
    for (int i = 0; i < a->nsets; i++) kn_cset_free(&a->sets[i]);
    free(a->sets);
    kn_imap_free(&a->setids);
}

/* ---- regex parser: text -> NFA fragments ----------------------------------------------------- */

typedef struct frag {
    int start, end;
} frag;

/* A copy of fragment f, whose states are [first, last) (an atom's, made one after another): the
 * states again at the end of a, with their edges (those leaving the range kept as they are) and
 * classes (shared). A counted atom x{n} is n copies; copying costs the atom's states, not its text
 * parsed again (a class of thousands of characters repeated thousands of times took minutes). */
static frag nfa_copy(kn_nfa *a, int first, int last, frag f) {
    const int off = a->n - first;
    for (int i = first; i < last; i++) {
        if (nfa_state(a) < 0) return (frag){-1, -1};
        for (int k = 0; k < a->s[i].n; k++) {
            const kn_nedge e = a->s[i].e[k]; /* by value: nfa_edge may move the edge arrays */
            nfa_edge(a, i + off, e.kind, e.to >= first && e.to < last ? e.to + off : e.to, e.set);
        }
    }
    return (frag){f.start + off, f.end + off};
}

typedef struct rx {
    const char *p; /* the pattern (UTF-8) */
    size_t len, pos;
    kn_nfa *a;
    char *err;
    size_t errcap;
    bool failed;
    int depth;
} rx;

static void rx_fail(rx *r, const char *what) {
    if (r->failed) return;
    r->failed = true;
    snprintf(r->err, r->errcap, "%s at offset %zu", what, r->pos);
}

static frag frag_empty(rx *r) {
    int s = nfa_state(r->a), e = nfa_state(r->a);
    nfa_edge(r->a, s, KN_NE_EPS, e, 0);
    return (frag){s, e};
}

static frag frag_set(rx *r, kn_cset *cs) {
    int s = nfa_state(r->a), e = nfa_state(r->a);
    int id = nfa_set(r->a, cs);
    if (id >= 0) nfa_edge(r->a, s, KN_NE_SET, e, id);
    return (frag){s, e};
}

/* Decodes one UTF-8 code point at r->pos (invalid bytes stand for themselves). */
static uint32_t rx_cp(rx *r) { return kn_cp_next(r->p, r->len, &r->pos); }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool rx_hex(rx *r, int n, uint32_t *out) {
    uint32_t v = 0;
    if (r->pos + (size_t)n > r->len) return false;
    for (int i = 0; i < n; i++) {
        int h = hexval(r->p[r->pos + (size_t)i]);
        if (h < 0) return false;
        v = v * 16 + (uint32_t)h;
    }
    r->pos += (size_t)n;
    *out = v;
    return true;
}

/* The general categories \p{..} names (ECMAScript's u-flag syntax: Unicode's property value aliases),
 * as sets of enum kn_gc (text/unicode.h). */
#define GC(x)     (1u << KN_GC_##x)
#define GC_ALL    ((1u << KN_GC_COUNT) - 1)
#define GC_LETTER (GC(LU) | GC(LL) | GC(LT) | GC(LM) | GC(LO))
#define GC_PUNCT  (GC(PC) | GC(PD) | GC(PS) | GC(PE) | GC(PI) | GC(PF) | GC(PO))
static const struct {
    const char *name, *longname, *alias;
    uint32_t gcs;
} uprops[] = {
    {"L", "Letter", NULL, GC_LETTER},
    {"LC", "Cased_Letter", NULL, GC(LU) | GC(LL) | GC(LT)},
    {"Lu", "Uppercase_Letter", NULL, GC(LU)},
    {"Ll", "Lowercase_Letter", NULL, GC(LL)},
    {"Lt", "Titlecase_Letter", NULL, GC(LT)},
    {"Lm", "Modifier_Letter", NULL, GC(LM)},
    {"Lo", "Other_Letter", NULL, GC(LO)},
    {"M", "Mark", "Combining_Mark", GC(MN) | GC(MC) | GC(ME)},
    {"Mn", "Nonspacing_Mark", NULL, GC(MN)},
    {"Mc", "Spacing_Mark", NULL, GC(MC)},
    {"Me", "Enclosing_Mark", NULL, GC(ME)},
    {"N", "Number", NULL, GC(ND) | GC(NL) | GC(NO)},
    {"Nd", "Decimal_Number", "digit", GC(ND)},
    {"Nl", "Letter_Number", NULL, GC(NL)},
    {"No", "Other_Number", NULL, GC(NO)},
    {"P", "Punctuation", "punct", GC_PUNCT},
    {"Pc", "Connector_Punctuation", NULL, GC(PC)},
    {"Pd", "Dash_Punctuation", NULL, GC(PD)},
    {"Ps", "Open_Punctuation", NULL, GC(PS)},
    {"Pe", "Close_Punctuation", NULL, GC(PE)},
    {"Pi", "Initial_Punctuation", NULL, GC(PI)},
    {"Pf", "Final_Punctuation", NULL, GC(PF)},
    {"Po", "Other_Punctuation", NULL, GC(PO)},
    {"S", "Symbol", NULL, GC(SM) | GC(SC) | GC(SK) | GC(SO)},
    {"Sm", "Math_Symbol", NULL, GC(SM)},
    {"Sc", "Currency_Symbol", NULL, GC(SC)},
    {"Sk", "Modifier_Symbol", NULL, GC(SK)},
    {"So", "Other_Symbol", NULL, GC(SO)},
    {"Z", "Separator", NULL, GC(ZS) | GC(ZL) | GC(ZP)},
    {"Zs", "Space_Separator", NULL, GC(ZS)},
    {"Zl", "Line_Separator", NULL, GC(ZL)},
    {"Zp", "Paragraph_Separator", NULL, GC(ZP)},
    {"C", "Other", NULL, GC(CC) | GC(CF) | GC(CS) | GC(CO) | GC(CN)},
    {"Cc", "Control", "cntrl", GC(CC)},
    {"Cf", "Format", NULL, GC(CF)},
    {"Cs", "Surrogate", NULL, GC(CS)},
    {"Co", "Private_Use", NULL, GC(CO)},
    {"Cn", "Unassigned", NULL, GC(CN)},
};

static bool named(const char *s, size_t n, const char *name) {
    return name && strlen(name) == n && !memcmp(s, name, n);
}

/* The general categories property s[n] stands for: a General_Category value (its short or long name
 * or its alias, alone or after "General_Category=" or "gc="), or the binary property Any (every
 * category) or Assigned (all but Cn); 0 for any other name. */
static uint32_t property_gcs(const char *s, size_t n) {
    const size_t k = n > 3 && !memcmp(s, "gc=", 3) ? 3 : n > 17 && !memcmp(s, "General_Category=", 17) ? 17 : 0;
    if (!k && named(s, n, "Any")) return GC_ALL;
    if (!k && named(s, n, "Assigned")) return GC_ALL & ~GC(CN);
    for (size_t i = 0; i < sizeof uprops / sizeof *uprops; i++)
        if (named(s + k, n - k, uprops[i].name) || named(s + k, n - k, uprops[i].longname) ||
            named(s + k, n - k, uprops[i].alias))
            return uprops[i].gcs;
    return 0;
}

/* Adds the code points of the general categories in gcs, or (gcs 0) ASCII's, negated: every other
 * one, to cs. */
static bool add_property(kn_cset *cs, uint32_t gcs, bool negated) {
    kn_cset t = {0};
    bool ok = gcs || kn_cset_add(&t, 0, 0x7F);
    for (size_t i = 0; i < kn_ucd_n_ranges && gcs && ok; i++) {
        const uint32_t end = i + 1 < kn_ucd_n_ranges ? kn_ucd_ranges[i + 1].start - 1 : KN_CP_MAX;
        if (gcs >> kn_ucd_ranges[i].gc & 1) ok = kn_cset_add(&t, kn_ucd_ranges[i].start, end);
    }
    if (ok && negated) ok = kn_cset_negate(&t);
    ok = ok && kn_cset_add_set(cs, &t);
    kn_cset_free(&t);
    return ok;
}

/* \p{NAME} / \P{NAME} (r->pos at the brace): the code points of property NAME (property_gcs, or
 * ASCII) added to cs, negated for \P. False (with the failure set) for any other NAME. */
static bool rx_property(rx *r, bool negated, kn_cset *cs) {
    const char *close = r->pos < r->len && r->p[r->pos] == '{' ? memchr(r->p + r->pos, '}', r->len - r->pos) : NULL;
    if (!close) {
        rx_fail(r, "\\p and \\P need a {name}");
        return false;
    }
    const char *name = r->p + r->pos + 1;
    const size_t n = (size_t)(close - name);
    const uint32_t gcs = property_gcs(name, n);
    if (!gcs && !named(name, n, "ASCII")) {
        const char *eq = memchr(name, '=', n);
        const size_t k = eq ? (size_t)(eq - name) : 0;
        if (named(name, k, "Script") || named(name, k, "sc") || named(name, k, "Script_Extensions") ||
            named(name, k, "scx"))
            rx_fail(r, "Unicode scripts (\\p{Script=..}) are not supported");
        else
            rx_fail(r, "unsupported Unicode property (kiln knows the general categories, e.g. L, Lu, Nd, P, and Any, "
                       "ASCII, Assigned)");
        return false;
    }
    r->pos += n + 2;
    if (!add_property(cs, gcs, negated)) r->a->nomem = true;
    return true;
}

static bool add_class_escape(kn_cset *cs, char c) {
    kn_cset t = {0};
    bool ok = true;
    switch (c | 0x20) {
        case 'd': ok = kn_cset_add(&t, '0', '9'); break;
        case 'w':
            ok = kn_cset_add(&t, '0', '9') && kn_cset_add(&t, 'A', 'Z') && kn_cset_add(&t, '_', '_') &&
                 kn_cset_add(&t, 'a', 'z');
            break;
        case 's':
            ok = kn_cset_add(&t, 9, 13) && kn_cset_add(&t, ' ', ' ') && kn_cset_add(&t, 0xA0, 0xA0) &&
                 kn_cset_add(&t, 0x1680, 0x1680) && kn_cset_add(&t, 0x2000, 0x200A) &&
                 kn_cset_add(&t, 0x2028, 0x2029) && kn_cset_add(&t, 0x202F, 0x202F) &&
                 kn_cset_add(&t, 0x205F, 0x205F) && kn_cset_add(&t, 0x3000, 0x3000) && kn_cset_add(&t, 0xFEFF, 0xFEFF);
            break;
    }
    if (ok && c >= 'A' && c <= 'Z') ok = kn_cset_negate(&t);
    ok = ok && kn_cset_add_set(cs, &t);
    kn_cset_free(&t);
    return ok;
}

/* Parses the escape after a backslash (r->pos is past it). Either fills *cp with one code point
 * (returns 1) or adds a class (\d ...) to *cs (returns 2); 0 on error. in_class: \b is backspace. */
static int rx_escape(rx *r, bool in_class, uint32_t *cp, kn_cset *cs) {
    if (r->pos >= r->len) {
        rx_fail(r, "pattern ends with a backslash");
        return 0;
    }
    char c = r->p[r->pos];
    switch (c) {
        case 'd':
        case 'D':
        case 'w':
        case 'W':
        case 's':
        case 'S':
            r->pos++;
            if (!add_class_escape(cs, c)) r->a->nomem = true;
            return 2;
        case 't': r->pos++, *cp = '\t'; return 1;
        case 'n': r->pos++, *cp = '\n'; return 1;
        case 'r': r->pos++, *cp = '\r'; return 1;
        case 'v': r->pos++, *cp = '\v'; return 1;
        case 'f': r->pos++, *cp = '\f'; return 1;
        case 'x':
            r->pos++;
            if (!rx_hex(r, 2, cp)) {
                rx_fail(r, "bad \\x escape");
                return 0;
            }
            return 1;
        case 'u':
            r->pos++;
            if (!rx_hex(r, 4, cp)) {
                rx_fail(r, "bad \\u escape");
                return 0;
            }
            if (*cp >= 0xD800 && *cp <= 0xDBFF && r->pos + 6 <= r->len && r->p[r->pos] == '\\' &&
                r->p[r->pos + 1] == 'u') {
                size_t save = r->pos;
                uint32_t lo;
                r->pos += 2;
                if (rx_hex(r, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF)
                    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                else r->pos = save;
            }
            return 1;
        case 'c':
            if (r->pos + 1 < r->len && ((r->p[r->pos + 1] | 0x20) >= 'a' && (r->p[r->pos + 1] | 0x20) <= 'z')) {
                *cp = (uint32_t)(r->p[r->pos + 1] & 0x1F);
                r->pos += 2;
                return 1;
            }
            rx_fail(r, "bad \\c escape");
            return 0;
        case '0':
            if (r->pos + 1 < r->len && r->p[r->pos + 1] >= '0' && r->p[r->pos + 1] <= '9') {
                rx_fail(r, "octal escapes are not supported");
                return 0;
            }
            r->pos++, *cp = 0;
            return 1;
        case 'b':
            if (in_class) {
                r->pos++, *cp = 8;
                return 1;
            }
            rx_fail(r, "word boundaries (\\b) are not supported");
            return 0;
        case 'B': rx_fail(r, "word boundaries (\\B) are not supported"); return 0;
        case 'k': rx_fail(r, "backreferences (\\k) are not supported"); return 0;
        case 'p': /* a general category, as ECMAScript with the u flag */
        case 'P': r->pos++; return rx_property(r, c == 'P', cs) ? 2 : 0;
        default: break;
    }
    if (c >= '1' && c <= '9') {
        rx_fail(r, "backreferences are not supported");
        return 0;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        rx_fail(r, "unknown escape");
        return 0;
    }
    *cp = rx_cp(r);
    return 1;
}

/* Appends [lo, hi] to raw, unsorted (the class parser's buffer); false when out of memory. */
static bool crange_push(kn_cset *raw, uint32_t lo, uint32_t hi) {
    if (!cset_room(raw)) return false;
    raw->r[raw->n++] = (kn_crange){lo, hi};
    return true;
}

static int cmp_crange(const void *a, const void *b) {
    const kn_crange *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static frag rx_class(rx *r) {
    kn_cset cs = {0}, raw = {0}; /* raw: the class's characters and ranges as written, sorted at the end */
    bool neg = false;
    r->pos++; /* '[' */
    if (r->pos < r->len && r->p[r->pos] == '^') neg = true, r->pos++;
    for (;;) {
        if (r->pos >= r->len) {
            rx_fail(r, "unterminated character class");
            break;
        }
        if (r->p[r->pos] == ']') {
            r->pos++;
            break;
        }
        uint32_t lo = 0;
        int k;
        if (r->p[r->pos] == '\\') {
            r->pos++;
            k = rx_escape(r, true, &lo, &cs);
            if (!k) break;
        } else {
            lo = rx_cp(r);
            k = 1;
        }
        /* a range a-b: only between single characters; otherwise '-' is a literal */
        if (k == 1 && r->pos + 1 < r->len && r->p[r->pos] == '-' && r->p[r->pos + 1] != ']') {
            size_t save = r->pos;
            r->pos++;
            uint32_t hi = 0;
            kn_cset tmp = {0};
            int k2;
            if (r->p[r->pos] == '\\') {
                r->pos++;
                k2 = rx_escape(r, true, &hi, &tmp);
                if (!k2) {
                    kn_cset_free(&tmp);
                    break;
                }
            } else {
                hi = rx_cp(r);
                k2 = 1;
            }
            if (k2 == 1) {
                if (hi < lo) {
                    kn_cset_free(&tmp);
                    rx_fail(r, "character class range out of order");
                    break;
                }
                if (!crange_push(&raw, lo, hi)) r->a->nomem = true;
                kn_cset_free(&tmp);
                continue;
            }
            /* [a-\d]: a, '-', and the class */
            kn_cset_free(&tmp);
            r->pos = save;
        }
        if (k == 1 && !crange_push(&raw, lo, lo)) r->a->nomem = true;
    }
    /* in order, each range joins the set at its end: a class of many characters in any order costs
     * a sort, not an insertion each */
    if (raw.n) qsort(raw.r, (size_t)raw.n, sizeof *raw.r, cmp_crange);
    for (int i = 0; i < raw.n; i++)
        if (!kn_cset_add(&cs, raw.r[i].lo, raw.r[i].hi)) r->a->nomem = true;
    kn_cset_free(&raw);
    if (neg && !kn_cset_negate(&cs)) r->a->nomem = true;
    if (r->failed) {
        kn_cset_free(&cs);
        return frag_empty(r);
    }
    return frag_set(r, &cs);
}

static frag rx_disj(rx *r);

/* One atom at r->pos (not a quantifier, not '|' or ')'). */
static frag rx_atom(rx *r) {
    char c = r->p[r->pos];
    kn_cset cs = {0};
    if (c == '(') {
        r->pos++;
        if (r->pos < r->len && r->p[r->pos] == '?') {
            if (r->pos + 1 < r->len && r->p[r->pos + 1] == ':') {
                r->pos += 2;
            } else if (r->pos + 2 < r->len && r->p[r->pos + 1] == '<' && r->p[r->pos + 2] != '=' &&
                       r->p[r->pos + 2] != '!') {
                const char *gt = memchr(r->p + r->pos, '>', r->len - r->pos);
                if (!gt) {
                    rx_fail(r, "bad group name");
                    return frag_empty(r);
                }
                r->pos = (size_t)(gt - r->p) + 1;
            } else {
                rx_fail(r, "lookaround assertions are not supported");
                return frag_empty(r);
            }
        }
        if (++r->depth > 200) {
            rx_fail(r, "groups nest too deeply");
            return frag_empty(r);
        }
        frag f = rx_disj(r);
        r->depth--;
        if (r->failed) return f;
        if (r->pos >= r->len || r->p[r->pos] != ')') {
            rx_fail(r, "missing )");
            return f;
        }
        r->pos++;
        return f;
    }
    if (c == '[') return rx_class(r);
    if (c == '.') {
        r->pos++;
        if (!kn_cset_add(&cs, '\n', '\n') || !kn_cset_add(&cs, '\r', '\r') || !kn_cset_add(&cs, 0x2028, 0x2029) ||
            !kn_cset_negate(&cs))
            r->a->nomem = true;
        return frag_set(r, &cs);
    }
    if (c == '\\') {
        r->pos++;
        uint32_t cp = 0;
        int k = rx_escape(r, false, &cp, &cs);
        if (!k) {
            kn_cset_free(&cs);
            return frag_empty(r);
        }
        if (k == 1 && !kn_cset_add(&cs, cp, cp)) r->a->nomem = true;
        return frag_set(r, &cs);
    }
    if (c == '*' || c == '+' || c == '?') {
        rx_fail(r, "nothing to repeat");
        return frag_empty(r);
    }
    uint32_t cp = rx_cp(r);
    if (!kn_cset_add(&cs, cp, cp)) r->a->nomem = true;
    return frag_set(r, &cs);
}

/* A {m}, {m,} or {m,n} quantifier at r->pos: returns true and moves past it, else leaves pos (a
 * brace that is not a quantifier is a literal, as ECMAScript's web-compatible grammar says). */
static bool rx_braces(rx *r, long *m, long *n) {
    size_t p = r->pos + 1;
    long a = 0, b;
    bool digits = false;
    while (p < r->len && r->p[p] >= '0' && r->p[p] <= '9') {
        a = a * 10 + (r->p[p++] - '0');
        if (a > 100000) a = 100000;
        digits = true;
    }
    if (!digits) return false;
    b = a;
    if (p < r->len && r->p[p] == ',') {
        p++;
        b = -1;
        bool d2 = false;
        long v = 0;
        while (p < r->len && r->p[p] >= '0' && r->p[p] <= '9') {
            v = v * 10 + (r->p[p++] - '0');
            if (v > 100000) v = 100000;
            d2 = true;
        }
        if (d2) b = v;
    }
    if (p >= r->len || r->p[p] != '}') return false;
    *m = a;
    *n = b;
    r->pos = p + 1;
    return true;
}

static frag rx_concat(rx *r, frag a, frag b) {
    nfa_edge(r->a, a.end, KN_NE_EPS, b.start, 0);
    return (frag){a.start, b.end};
}

static frag rx_star(rx *r, frag a) {
    int s = nfa_state(r->a), e = nfa_state(r->a);
    nfa_edge(r->a, s, KN_NE_EPS, a.start, 0);
    nfa_edge(r->a, s, KN_NE_EPS, e, 0);
    nfa_edge(r->a, a.end, KN_NE_EPS, a.start, 0);
    nfa_edge(r->a, a.end, KN_NE_EPS, e, 0);
    return (frag){s, e};
}

/* A sequence of terms up to '|' or ')' or the end. */
static frag rx_seq(rx *r) {
    frag f = frag_empty(r);
    while (!r->failed && !r->a->nomem && !r->a->toobig && r->pos < r->len && r->p[r->pos] != '|' &&
           r->p[r->pos] != ')') {
        char c = r->p[r->pos];
        if (c == '^' || c == '$') {
            r->pos++;
            int s = nfa_state(r->a), e = nfa_state(r->a);
            nfa_edge(r->a, s, c == '^' ? KN_NE_BOL : KN_NE_EOL, e, 0);
            f = rx_concat(r, f, (frag){s, e});
            continue;
        }
        const int first = r->a->n; /* the atom's states: [first, last) */
        frag t = rx_atom(r);
        if (r->failed) break;
        const int last = r->a->n;
        size_t after = r->pos;
        long m = 1, n = 1;
        if (r->pos < r->len) {
            char q = r->p[r->pos];
            if (q == '*') m = 0, n = -1, r->pos++;
            else if (q == '+') m = 1, n = -1, r->pos++;
            else if (q == '?') m = 0, n = 1, r->pos++;
            else if (q == '{' && rx_braces(r, &m, &n)) {
                if (n >= 0 && n < m) {
                    rx_fail(r, "numbers out of order in {} quantifier");
                    break;
                }
            }
            if (r->pos != after && r->pos < r->len && r->p[r->pos] == '?') r->pos++; /* lazy */
        }
        if (m == 1 && n == 1) {
            f = rx_concat(r, f, t);
            continue;
        }
        /* copies: t is the first; each further one a copy of its states */
        long copies = n < 0 ? (m > 0 ? m : 1) : (n > 0 ? n : 1);
        frag *parts = malloc((size_t)copies * sizeof *parts);
        if (!parts) {
            r->a->nomem = true;
            break;
        }
        parts[0] = t;
        for (long i = 1; i < copies && !r->a->toobig && !r->a->nomem; i++) parts[i] = nfa_copy(r->a, first, last, t);
        if (r->failed || r->a->toobig || r->a->nomem) {
            free(parts);
            break;
        }
        if (n < 0) {
            /* m copies, the last one starred-plus: x{m,} = x^(m-1) x+ ; m = 0: x* */
            for (long i = 0; i < copies; i++) {
                frag p = parts[i];
                if (i == copies - 1) {
                    frag s = rx_star(r, p);
                    if (m > 0) {
                        /* x+ = x x*: reuse p as the mandatory copy would need another; use the star's
                         * structure with an edge that forbids skipping: s minus its skip edge */
                        s = (frag){p.start, p.end};
                        nfa_edge(r->a, p.end, KN_NE_EPS, p.start, 0);
                    }
                    f = rx_concat(r, f, s);
                } else {
                    f = rx_concat(r, f, p);
                }
            }
        } else if (n == 0) {
            /* x{0}: matches the empty string; the parsed copy is left unreachable */
        } else {
            /* m mandatory copies, then n-m optional ones nested: (x(x(x)?)?)? */
            for (long i = 0; i < m; i++) f = rx_concat(r, f, parts[i]);
            if (n > m) {
                int tail_end = nfa_state(r->a);
                for (long i = m; i < n; i++) {
                    nfa_edge(r->a, i == m ? f.end : parts[i - 1].end, KN_NE_EPS, parts[i].start, 0);
                    nfa_edge(r->a, i == m ? f.end : parts[i - 1].end, KN_NE_EPS, tail_end, 0);
                }
                nfa_edge(r->a, parts[n - 1].end, KN_NE_EPS, tail_end, 0);
                f.end = tail_end;
            }
        }
        free(parts);
    }
    return f;
}

static frag rx_disj(rx *r) {
    frag f = rx_seq(r);
    if (r->failed || r->pos >= r->len || r->p[r->pos] != '|') return f;
    int s = nfa_state(r->a), e = nfa_state(r->a);
    nfa_edge(r->a, s, KN_NE_EPS, f.start, 0);
    nfa_edge(r->a, f.end, KN_NE_EPS, e, 0);
    while (!r->failed && r->pos < r->len && r->p[r->pos] == '|') {
        r->pos++;
        frag g = rx_seq(r);
        nfa_edge(r->a, s, KN_NE_EPS, g.start, 0);
        nfa_edge(r->a, g.end, KN_NE_EPS, e, 0);
    }
    return (frag){s, e};
}

kn_dfa *kn_dfa_regex(const char *pattern, char *err, size_t errcap) {
    kn_nfa a = {0};
    rx r = {.p = pattern, .len = strlen(pattern), .a = &a, .err = err, .errcap = errcap};
    if (errcap) err[0] = 0;
    /* .* (pattern) .* with "any" including line terminators */
    kn_cset any = {0};
    if (!kn_cset_add(&any, 0, KN_CP_MAX)) a.nomem = true;
    int s0 = nfa_state(&a);
    int anyset = nfa_set(&a, &any);
    nfa_edge(&a, s0, KN_NE_SET, s0, anyset);
    frag f = rx_disj(&r);
    if (!r.failed && r.pos < r.len) rx_fail(&r, "unmatched )");
    int s1 = nfa_state(&a);
    nfa_edge(&a, s0, KN_NE_EPS, f.start, 0);
    nfa_edge(&a, f.end, KN_NE_EPS, s1, 0);
    nfa_edge(&a, s1, KN_NE_SET, s1, anyset);
    kn_dfa *d = NULL;
    /* the NFA's bound or memory first: the parse stops there, and whatever it then says of the
     * rest of the pattern ("missing )") is not the pattern's fault */
    if (a.toobig) {
        snprintf(err, errcap, "the pattern expands to more than %d automaton states", KN_REGEX_MAX_NFA);
    } else if (a.nomem) {
        snprintf(err, errcap, "out of memory");
    } else if (r.failed) {
    } else {
        kn_dfa_toobig_clear();
        bool too_complex = false;
        d = kn_nfa_subset(&a, s0, s1, &too_complex);
        if (!d && kn_dfa_toobig())
            snprintf(err, errcap, "the pattern needs more than %d automaton states or %d transitions",
                     KN_DFA_MAX_STATES, KN_DFA_MAX_TRANS);
        else if (!d && too_complex)
            snprintf(err, errcap,
                     "the pattern is too costly to compile (its automaton would take more than %d steps "
                     "or hold more than %d pattern positions)",
                     KN_DFA_MAX_WORK, KN_DFA_MAX_HELD);
        else if (!d) snprintf(err, errcap, "out of memory");
    }
    nfa_free(&a);
    return d;
}
