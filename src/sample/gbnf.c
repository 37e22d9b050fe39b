/*
 * gbnf.c - the GBNF compiler: grammar text to a program over bytes (grammar_prog.h).
 *
 * The dialect is llama.cpp's: rules "name ::= alternatives" separated by line breaks (a rule may
 * continue on the next line after '|', '::=' or inside a group), '#' comments, literals "..." and
 * classes [...] / [^...] with the escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (each escape
 * is a code point, so "\xe9" is U+00E9, two bytes in UTF-8), '.', groups, '|', and the postfix
 * operators * + ? {m} {m,} {m,n}, which apply to everything since the last item began (as in
 * llama.cpp: "a"{2}* repeats "aa"); and kiln's counter operations "@count", "@+N{lo,hi}" and
 * "@{lo,hi}" (grammar_prog.h), elements that match the empty string, interned in an op table.
 *
 * Compilation is one pass of recursive descent (depth capped by KN_GBNF_MAX_NESTING) building rules
 * whose alternatives are runs of symbols, then three linear analyses: which rules can match the
 * empty string (nullable), whether a rule reaches itself through nullable prefixes (left recursion:
 * refused, the matcher could loop), and which rules can finish at all (productive: alternatives
 * that cannot are dropped, and a root that cannot is refused). Code points become UTF-8 bytes: a
 * literal character is a run of single-byte terminals; a class is split into ranges of equal
 * UTF-8 length and equal leading bytes, each a run of byte-range terminals (the standard way to
 * turn code-point ranges into byte automata), so a token that ends inside a character is matched
 * byte by byte like any other (a class written again, as the schema compiler writes a pattern's
 * class once per automaton state, calls the rule of its first copy). Negated classes and '.' cover
 * U+0000..U+10FFFF without the surrogates. Repetitions become generated rules: x* is
 * S ::= x S | "" with S's self-reference last (a tail call for the matcher), x{m,n} is m copies of
 * x followed by n-m nested optional rules.
 *
 * Stricter than llama.cpp where it would silently do something surprising: a rule defined twice, a
 * backwards range [z-a] and an empty class [] are errors. Simplifications that keep the language:
 * a group with one alternative is inlined, an alternative equal to an earlier one of the same rule
 * is dropped (it would only double the matcher's stacks), and alternatives that begin alike are
 * left-factored (gb_factor: a set of literals, such as a JSON Schema enum of thousands of strings,
 * becomes a byte trie, so the matcher follows one stack per way on rather than one per literal).
 * Last, the program is checked for ambiguity the matcher could not follow (kn_gprog_check): a
 * grammar that compiles does not fail on its first bytes for holding too many parser stacks.
 *
 * Every error is KILN_ERR_INVALID_ARG with "line L, column C: ..." (columns count characters);
 * running out of memory is KILN_ERR_NOMEM. Sizes are capped (text, repetition bounds, nesting,
 * program elements), so hostile text fails with a message, never a crash or unbounded work.
 */
#include "sample/grammar_prog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builder state -------------------------------------------------------------------------- */

typedef struct gb_vec { /* symbols (set index or KN_GP_REF) with the source offset of each */
    int32_t *v, *at;
    size_t n, cap;
} gb_vec;

typedef struct gb_rule {
    uint32_t name_off, name_len; /* user rules: the name in the text; helpers: 0 */
    int32_t owner;               /* the user rule whose text generated it (itself for user rules) */
    int32_t def_at, ref_at;      /* offsets of the definition and of the first reference; -1 = none */
    int32_t n_alts;
    bool helper, dead; /* dead: a group that was inlined into its user */
} gb_rule;

typedef struct gb_alt {
    int32_t rule;
    uint32_t start, len; /* symbols pool[start .. start+len) */
} gb_alt;

typedef struct gb_cprange {
    uint32_t lo, hi;
} gb_cprange;

/* A class compiled to a helper rule: its ranges (merged, ascending) are ranges[off .. off+n) of the
 * builder's memo pool. */
typedef struct gb_cmemo {
    uint32_t hash;
    int32_t rule; /* -1: an empty slot */
    bool neg;
    size_t off, n;
} gb_cmemo;

typedef struct gb {
    const char *src;
    size_t len, pos;
    unsigned flags; /* KN_GBNF_* */
    kiln_status st; /* KILN_OK until the first error */
    char msg[KN_ERRMSG_MAX];
    size_t emitted; /* program elements created so far (the size cap) */

    gb_rule *rules;
    size_t n_rules, cap_rules;
    int32_t *names; /* open addressing over user rule ids, -1 = empty */
    size_t names_cap, n_names;

    gb_vec pool; /* the symbols of finished alternatives */
    gb_alt *alts;
    size_t n_alts, cap_alts;
    gb_vec scratch[KN_GBNF_MAX_NESTING + 1]; /* the sequence being built at each nesting depth */

    uint64_t (*sets)[4];
    size_t n_sets, cap_sets;
    int32_t *set_tab; /* open addressing over set ids, -1 = empty */
    size_t set_tab_cap;

    kn_gop *ops; /* the counter operations */
    size_t n_ops, cap_ops;
    int32_t *op_tab; /* open addressing over op ids, -1 = empty */
    size_t op_tab_cap;

    int32_t byte_set[256]; /* the set id of each single byte, or -1 until needed */
    gb_cprange *ranges;    /* the class being parsed */
    size_t n_ranges, cap_ranges;

    gb_cmemo *cmemo; /* open addressing over the classes compiled to helper rules so far */
    size_t cmemo_cap, n_cmemo;
    gb_cprange *cmemo_ranges; /* their ranges */
    size_t n_cmemo_ranges, cap_cmemo_ranges;
} gb;

#define GB_NONE ((size_t)-1)

/* ---- errors --------------------------------------------------------------------------------- */

/* Line and column (1-based, columns in characters) of byte offset at. */
static void gb_loc(const gb *p, size_t at, int *line, int *col) {
    int l = 1, c = 1;
    if (at > p->len) at = p->len;
    for (size_t i = 0; i < at; i++) {
        uint8_t ch = (uint8_t)p->src[i];
        if (ch == '\n') l++, c = 1;
        else if ((ch & 0xC0) != 0x80) c++;
    }
    *line = l;
    *col = c;
}

/* Records the first error, "line L, column C: " + the message, and returns false. */
__attribute__((format(printf, 3, 4))) static bool gb_fail(gb *p, size_t at, const char *fmt, ...) {
    if (p->st) return false;
    int line, col;
    gb_loc(p, at, &line, &col);
    int k = snprintf(p->msg, sizeof p->msg, "line %d, column %d: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof p->msg) vsnprintf(p->msg + k, sizeof p->msg - (size_t)k, fmt, ap);
    va_end(ap);
    p->st = KILN_ERR_INVALID_ARG;
    return false;
}

static bool gb_nomem(gb *p) {
    if (!p->st) {
        snprintf(p->msg, sizeof p->msg, "out of memory compiling the grammar");
        p->st = KILN_ERR_NOMEM;
    }
    return false;
}

/* A short description of the byte at offset at, for messages. */
static const char *gb_what(const gb *p, size_t at, char buf[24]) {
    if (at >= p->len) return "the end of the grammar";
    uint8_t c = (uint8_t)p->src[at];
    if (c == '\n' || c == '\r') return "a line break";
    int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if (at + (size_t)i >= p->len || ((uint8_t)p->src[at + (size_t)i] & 0xC0) != 0x80) n = 0;
    if (c >= 0x20 && c < 0x7F) snprintf(buf, 24, "'%c'", c);
    else if (n) snprintf(buf, 24, "'%.*s'", n, p->src + at); /* a (probably valid) UTF-8 character */
    else snprintf(buf, 24, "byte 0x%02X", c);
    return buf;
}

/* Grows buf (*cap elements of elt bytes) to hold at least need. */
static bool gb_grow(gb *p, void **buf, size_t *cap, size_t need, size_t elt) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / elt) return gb_nomem(p);
        nc *= 2;
    }
    void *nb = realloc(*buf, nc * elt);
    if (!nb) return gb_nomem(p);
    *buf = nb;
    *cap = nc;
    return true;
}

/* Counts n new program elements against KN_GBNF_MAX_PROGRAM. */
static bool gb_budget(gb *p, size_t n, size_t at) {
    if (n > KN_GBNF_MAX_PROGRAM || p->emitted + n > KN_GBNF_MAX_PROGRAM)
        return gb_fail(p, at,
                       "the grammar is too large: more than %d program elements (every copy a repetition makes counts)",
                       KN_GBNF_MAX_PROGRAM);
    p->emitted += n;
    return true;
}

/* Grows v to hold at least need symbols. */
static bool gb_vec_reserve(gb *p, gb_vec *v, size_t need) {
    if (need <= v->cap) return true;
    size_t cap = v->cap;
    if (!gb_grow(p, (void **)&v->v, &cap, need, sizeof *v->v)) return false;
    cap = v->cap;
    if (!gb_grow(p, (void **)&v->at, &cap, need, sizeof *v->at)) return false;
    v->cap = cap;
    return true;
}

static bool gb_vec_push(gb *p, gb_vec *v, int32_t sym, size_t at) {
    if (!gb_vec_reserve(p, v, v->n + 1)) return false;
    v->v[v->n] = sym;
    v->at[v->n] = (int32_t)at;
    v->n++;
    return true;
}

/* Appends a new symbol to a sequence (counted against the program size). */
static bool gb_emit(gb *p, gb_vec *seq, int32_t sym, size_t at) {
    return gb_budget(p, 1, at) && gb_vec_push(p, seq, sym, at);
}

/* ---- rules, alternatives, sets -------------------------------------------------------------- */

static int32_t gb_new_rule(gb *p, int32_t owner, bool helper) {
    if (!gb_grow(p, (void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) return -1;
    int32_t id = (int32_t)p->n_rules++;
    p->rules[id] = (gb_rule){.owner = owner < 0 ? id : owner, .def_at = -1, .ref_at = -1, .helper = helper};
    return id;
}

static uint32_t gb_hash_bytes(const void *data, size_t n) {
    const uint8_t *b = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* The id of the user rule named src[off .. off+len), created on first mention. */
static int32_t gb_rule_named(gb *p, size_t off, size_t len) {
    if (p->n_names * 2 >= p->names_cap) {
        size_t nc = p->names_cap ? p->names_cap * 2 : 64;
        int32_t *nt = malloc(nc * sizeof *nt);
        if (!nt) return gb_nomem(p), -1;
        memset(nt, 0xff, nc * sizeof *nt);
        for (size_t i = 0; i < p->names_cap; i++) {
            int32_t r = p->names[i];
            if (r < 0) continue;
            size_t h = gb_hash_bytes(p->src + p->rules[r].name_off, p->rules[r].name_len) & (nc - 1);
            while (nt[h] >= 0) h = (h + 1) & (nc - 1);
            nt[h] = r;
        }
        free(p->names);
        p->names = nt;
        p->names_cap = nc;
    }
    size_t h = gb_hash_bytes(p->src + off, len) & (p->names_cap - 1);
    for (; p->names[h] >= 0; h = (h + 1) & (p->names_cap - 1)) {
        const gb_rule *r = &p->rules[p->names[h]];
        if (r->name_len == len && memcmp(p->src + r->name_off, p->src + off, len) == 0) return p->names[h];
    }
    int32_t id = gb_new_rule(p, -1, false);
    if (id < 0) return -1;
    p->rules[id].name_off = (uint32_t)off;
    p->rules[id].name_len = (uint32_t)len;
    p->names[h] = id;
    p->n_names++;
    return id;
}

/* Finishes an alternative of rule: moves syms[n] (with offsets) into the pool. */
static bool gb_add_alt(gb *p, int32_t rule, const int32_t *syms, const int32_t *ats, size_t n, size_t at) {
    if (!gb_budget(p, 1, at)) return false; /* its end marker */
    if (!gb_grow(p, (void **)&p->alts, &p->cap_alts, p->n_alts + 1, sizeof *p->alts)) return false;
    size_t start = p->pool.n;
    if (!gb_vec_reserve(p, &p->pool, start + n)) return false;
    if (n) {
        memcpy(p->pool.v + start, syms, n * sizeof *syms);
        memcpy(p->pool.at + start, ats, n * sizeof *ats);
        p->pool.n = start + n;
    }
    p->alts[p->n_alts++] = (gb_alt){.rule = rule, .start = (uint32_t)start, .len = (uint32_t)n};
    p->rules[rule].n_alts++;
    return true;
}

static uint32_t gb_hash_set(const uint64_t s[4]) {
    uint64_t h = s[0] * 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 31) ^ s[1]) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 31) ^ s[2]) * 0x94d049bb133111ebull;
    h = (h ^ (h >> 31) ^ s[3]) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

/* The id of byte set s (interned). */
static int32_t gb_set_id(gb *p, const uint64_t s[4]) {
    if (p->n_sets * 2 >= p->set_tab_cap) {
        size_t nc = p->set_tab_cap ? p->set_tab_cap * 2 : 64;
        int32_t *nt = malloc(nc * sizeof *nt);
        if (!nt) return gb_nomem(p), -1;
        memset(nt, 0xff, nc * sizeof *nt);
        for (size_t i = 0; i < p->n_sets; i++) {
            size_t h = gb_hash_set(p->sets[i]) & (nc - 1);
            while (nt[h] >= 0) h = (h + 1) & (nc - 1);
            nt[h] = (int32_t)i;
        }
        free(p->set_tab);
        p->set_tab = nt;
        p->set_tab_cap = nc;
    }
    size_t h = gb_hash_set(s) & (p->set_tab_cap - 1);
    for (; p->set_tab[h] >= 0; h = (h + 1) & (p->set_tab_cap - 1))
        if (memcmp(p->sets[p->set_tab[h]], s, 32) == 0) return p->set_tab[h];
    if (!gb_grow(p, (void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets)) return -1;
    memcpy(p->sets[p->n_sets], s, 32);
    p->set_tab[h] = (int32_t)p->n_sets;
    return (int32_t)p->n_sets++;
}

static void gb_set_range(uint64_t s[4], unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) s[b >> 6] |= 1ull << (b & 63);
}

/* ---- characters ----------------------------------------------------------------------------- */

static int gb_peek(const gb *p, size_t k) { return p->pos + k < p->len ? (uint8_t)p->src[p->pos + k] : -1; }

static bool gb_is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

/* Skips blanks and comments, and line breaks when nl_ok. */
static void gb_space(gb *p, bool nl_ok) {
    for (;;) {
        int c = gb_peek(p, 0);
        if (c == ' ' || c == '\t' || (nl_ok && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->src[p->pos] != '\n' && p->src[p->pos] != '\r') p->pos++;
        } else {
            return;
        }
    }
}

static int gb_utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

static int gb_utf8_encode(uint32_t cp, uint8_t out[4]) {
    int n = gb_utf8_len(cp);
    if (n == 1) {
        out[0] = (uint8_t)cp;
    } else {
        for (int i = n - 1; i > 0; i--, cp >>= 6) out[i] = (uint8_t)(0x80 | (cp & 0x3F));
        out[0] = (uint8_t)((n == 2 ? 0xC0 : n == 3 ? 0xE0 : 0xF0) | cp);
    }
    return n;
}

/* Reads one character of a literal or class at the cursor: an escape or one UTF-8 character. */
static bool gb_char(gb *p, uint32_t *cp) {
    size_t at = p->pos;
    uint8_t c = (uint8_t)p->src[at];
    if (c == '\\') {
        int e = gb_peek(p, 1);
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = gb_peek(p, 2 + (size_t)i);
                int d = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (d < 0) return gb_fail(p, at, "the escape \\%c needs %d hex digits", e, digits);
                v = v << 4 | (uint32_t)d;
            }
            if (v > 0x10FFFF)
                return gb_fail(p, at, "the escape \\%c%.*s is beyond U+10FFFF", e, digits, p->src + at + 2);
            if (v >= 0xD800 && v <= 0xDFFF)
                return gb_fail(p, at, "the escape \\%c%.*s is a UTF-16 surrogate, not a character", e, digits,
                               p->src + at + 2);
            p->pos += 2 + (size_t)digits;
            *cp = v;
            return true;
        }
        switch (e) {
            case 'n': *cp = '\n'; break;
            case 'r': *cp = '\r'; break;
            case 't': *cp = '\t'; break;
            case '\\':
            case '"':
            case '[':
            case ']': *cp = (uint32_t)e; break;
            case -1: return gb_fail(p, at, "a '\\' at the end of the grammar");
            default: {
                char buf[24];
                return gb_fail(p, at, "unknown escape '\\' followed by %s", gb_what(p, at + 1, buf));
            }
        }
        p->pos += 2;
        return true;
    }
    if (c < 0x80) {
        *cp = c;
        p->pos++;
        return true;
    }
    int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || p->len - at < (size_t)n) return gb_fail(p, at, "invalid UTF-8");
    uint32_t v = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (int i = 1; i < n; i++) {
        uint8_t k = (uint8_t)p->src[at + (size_t)i];
        if ((k & 0xC0) != 0x80) return gb_fail(p, at, "invalid UTF-8");
        v = v << 6 | (k & 0x3F);
    }
    if (gb_utf8_len(v) != n || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return gb_fail(p, at, "invalid UTF-8");
    p->pos += (size_t)n;
    *cp = v;
    return true;
}

/* ---- character classes ---------------------------------------------------------------------- */

typedef struct gb_seq { /* a run of 1..4 byte sets matching the UTF-8 encodings of a code-point range */
    int n;
    uint64_t s[4][4];
} gb_seq;

typedef struct gb_seqs {
    gb_seq *v;
    size_t n, cap;
} gb_seqs;

/* Appends the byte-range run for lo..hi, which have the same UTF-8 length and differ only where the
 * split below allows (each byte position then spans one contiguous range). */
static bool gb_seq_add(gb *p, gb_seqs *out, uint32_t lo, uint32_t hi) {
    if (!gb_grow(p, (void **)&out->v, &out->cap, out->n + 1, sizeof *out->v)) return false;
    gb_seq *q = &out->v[out->n++];
    memset(q, 0, sizeof *q);
    uint8_t a[4], b[4];
    q->n = gb_utf8_encode(lo, a);
    gb_utf8_encode(hi, b);
    for (int i = 0; i < q->n; i++) gb_set_range(q->s[i], a[i], b[i]);
    return true;
}

/* Splits code points lo..hi (no surrogates) into runs of byte ranges: first at the UTF-8 length
 * boundaries, then where the continuation bytes of lo or hi are not at their extremes. The
 * recursion is bounded by the encoding length (a few levels). */
static bool gb_utf8_split(gb *p, gb_seqs *out, uint32_t lo, uint32_t hi) {
    if (lo > hi) return true;
    static const uint32_t lim[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= lim[i] && hi > lim[i])
            return gb_utf8_split(p, out, lo, lim[i]) && gb_utf8_split(p, out, lim[i] + 1, hi);
    int n = gb_utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) return gb_utf8_split(p, out, lo, lo | m) && gb_utf8_split(p, out, (lo | m) + 1, hi);
            if ((hi & m) != m) return gb_utf8_split(p, out, lo, (hi & ~m) - 1) && gb_utf8_split(p, out, hi & ~m, hi);
        }
    }
    return gb_seq_add(p, out, lo, hi);
}

static int gb_cmp_range(const void *a, const void *b) {
    const gb_cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

typedef struct gb_key { /* a run, keyed by its length and a hash of its sets but one position */
    int n;
    uint32_t h, i;
} gb_key;

static int gb_cmp_key(const void *a, const void *b) {
    const gb_key *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Whether runs a and b (of equal length) have the same sets everywhere but at position skip. */
static bool gb_seq_same_but(const gb_seq *a, const gb_seq *b, int skip) {
    for (int k = 0; k < a->n; k++)
        if (k != skip && memcmp(a->s[k], b->s[k], 32)) return false;
    return true;
}

/* Merges runs that differ only in their first set (last = false) or only in their last (last =
 * true): the union of two such runs is again a run. Sorting by a hash of the other positions finds
 * them in O(n log n); equal hashes are confirmed before merging. */
static bool gb_seq_merge_at(gb *p, gb_seqs *q, bool last) {
    if (q->n < 2) return true;
    gb_key *keys = malloc(q->n * sizeof *keys);
    if (!keys) return gb_nomem(p);
    for (size_t i = 0; i < q->n; i++) {
        const gb_seq *r = &q->v[i];
        int skip = last ? r->n - 1 : 0;
        uint32_t h = 2166136261u;
        for (int k = 0; k < r->n; k++)
            if (k != skip) h = (h ^ gb_hash_set(r->s[k])) * 16777619u;
        keys[i] = (gb_key){.n = r->n, .h = h, .i = (uint32_t)i};
    }
    qsort(keys, q->n, sizeof *keys, gb_cmp_key);
    bool *gone = calloc(q->n, sizeof *gone);
    if (!gone) return free(keys), gb_nomem(p);
    for (size_t i = 0; i < q->n;) {
        size_t j = i + 1;
        while (j < q->n && keys[j].n == keys[i].n && keys[j].h == keys[i].h) j++;
        for (size_t a = i; a < j; a++) { /* a group of equal hashes: merge each into the first equal one */
            gb_seq *ra = &q->v[keys[a].i];
            if (gone[keys[a].i]) continue;
            int skip = last ? ra->n - 1 : 0;
            for (size_t b = a + 1; b < j; b++) {
                gb_seq *rb = &q->v[keys[b].i];
                if (gone[keys[b].i] || !gb_seq_same_but(ra, rb, skip)) continue;
                for (int w = 0; w < 4; w++) ra->s[skip][w] |= rb->s[skip][w];
                gone[keys[b].i] = true;
            }
        }
        i = j;
    }
    size_t m = 0;
    for (size_t i = 0; i < q->n; i++)
        if (!gone[i]) q->v[m++] = q->v[i];
    q->n = m;
    free(keys);
    free(gone);
    return true;
}

/* ---- classes compiled once ------------------------------------------------------------------ */

/* A grammar written by a program repeats its classes: the schema compiler writes a pattern's class once
 * per automaton state that reads it (20 copies of the thousands of ranges of [\p{L}\p{N}] for {1,20}).
 * Each distinct multi-byte class becomes one helper rule, which every later copy calls; the language
 * is the same, the program holds one copy, and the UTF-8 split runs once. */

static uint32_t gb_class_hash(const gb_cprange *r, size_t n, bool neg) {
    return gb_hash_bytes(r, n * sizeof *r) ^ (neg ? 0x9e3779b9u : 0);
}

/* The helper rule of an earlier class equal to (r[0..n), neg), -1 when there is none. */
static int32_t gb_class_find(const gb *p, const gb_cprange *r, size_t n, bool neg, uint32_t h) {
    if (!p->cmemo_cap) return -1;
    for (size_t i = h & (p->cmemo_cap - 1);; i = (i + 1) & (p->cmemo_cap - 1)) {
        const gb_cmemo *e = &p->cmemo[i];
        if (e->rule < 0) return -1;
        if (e->hash == h && e->neg == neg && e->n == n && !memcmp(p->cmemo_ranges + e->off, r, n * sizeof *r))
            return e->rule;
    }
}

static void gb_class_slot(gb_cmemo *tab, size_t cap, gb_cmemo e) {
    size_t i = e.hash & (cap - 1);
    while (tab[i].rule >= 0) i = (i + 1) & (cap - 1);
    tab[i] = e;
}

/* Remembers that the class (r[0..n), neg) became helper rule; false when out of memory. */
static bool gb_class_remember(gb *p, const gb_cprange *r, size_t n, bool neg, uint32_t h, int32_t rule) {
    if ((p->n_cmemo + 1) * 2 > p->cmemo_cap) {
        size_t nc = p->cmemo_cap ? p->cmemo_cap * 2 : 16;
        gb_cmemo *nt = malloc(nc * sizeof *nt);
        if (!nt) return gb_nomem(p);
        for (size_t i = 0; i < nc; i++) nt[i].rule = -1;
        for (size_t i = 0; i < p->cmemo_cap; i++)
            if (p->cmemo[i].rule >= 0) gb_class_slot(nt, nc, p->cmemo[i]);
        free(p->cmemo);
        p->cmemo = nt;
        p->cmemo_cap = nc;
    }
    if (!gb_grow(p, (void **)&p->cmemo_ranges, &p->cap_cmemo_ranges, p->n_cmemo_ranges + n, sizeof *r)) return false;
    memcpy(p->cmemo_ranges + p->n_cmemo_ranges, r, n * sizeof *r);
    gb_class_slot(p->cmemo, p->cmemo_cap, (gb_cmemo){h, rule, neg, p->n_cmemo_ranges, n});
    p->n_cmemo_ranges += n;
    p->n_cmemo++;
    return true;
}

/* Fewer, wider runs: same leading bytes first (ranges that share a lead byte), then same tails. */
static bool gb_seq_merge(gb *p, gb_seqs *q) {
    return gb_seq_merge_at(p, q, true) && gb_seq_merge_at(p, q, false) && gb_seq_merge_at(p, q, true);
}

/* Appends to seq the symbols of the class of code points p->ranges (negated when neg): one
 * terminal when every member is one byte, an inline run when it is one run, else a reference to a
 * rule with one alternative per run (made for the first copy of the class, called by the others). */
static bool gb_class(gb *p, gb_vec *seq, bool neg, int32_t owner, size_t at) {
    gb_cprange *r = p->ranges;
    size_t n = p->n_ranges;
    bool sorted = true; /* as a program writes them */
    for (size_t i = 1; i < n && sorted; i++) sorted = r[i - 1].lo < r[i].lo;
    if (!sorted) qsort(r, n, sizeof *r, gb_cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* merge overlapping and adjacent ranges */
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    n = m;
    const uint32_t key = gb_class_hash(r, n, neg);
    const int32_t known = gb_class_find(p, r, n, neg, key);
    if (known >= 0) return gb_emit(p, seq, KN_GP_REF(known), at);
    gb_seqs runs = {0};
    uint64_t one[4] = {0}; /* the one-byte members */
    bool ok = true;
    uint32_t next = 0; /* negation: the first code point not yet covered */
    for (size_t i = 0; ok && i <= n; i++) {
        uint32_t lo, hi;
        if (neg) {
            lo = next;
            hi = i < n ? (r[i].lo ? r[i].lo - 1 : 0) : 0x10FFFF;
            bool empty = i < n ? r[i].lo <= next : next > 0x10FFFF;
            if (i < n) next = r[i].hi + 1;
            if (empty) continue;
        } else {
            if (i == n) break;
            lo = r[i].lo, hi = r[i].hi;
        }
        /* without the surrogates D800..DFFF */
        uint32_t parts[2][2] = {{lo, hi < 0xD800 ? hi : 0xD7FF}, {lo > 0xDFFF ? lo : 0xE000, hi}};
        for (int k = 0; ok && k < 2; k++) {
            uint32_t a = parts[k][0], b = parts[k][1];
            if (a > b) continue;
            if (a < 0x80) {
                gb_set_range(one, a, b < 0x80 ? b : 0x7F);
                if (b < 0x80) continue;
                a = 0x80;
            }
            ok = gb_utf8_split(p, &runs, a, b);
        }
    }
    if (!ok || !gb_seq_merge(p, &runs)) return free(runs.v), false;
    bool has_one = one[0] | one[1];
    size_t n_alts = runs.n + has_one;
    if (n_alts <= 1 && runs.n == 1) { /* one multi-byte run: inline */
        for (int k = 0; ok && k < runs.v[0].n; k++) {
            int32_t sid = gb_set_id(p, runs.v[0].s[k]);
            ok = sid >= 0 && gb_emit(p, seq, sid, at);
        }
        free(runs.v);
        return ok;
    }
    if (runs.n == 0) { /* one byte each (or nothing: an empty set, whose alternatives are dropped) */
        free(runs.v);
        int32_t sid = gb_set_id(p, one);
        return sid >= 0 && gb_emit(p, seq, sid, at);
    }
    int32_t h = gb_new_rule(p, owner, true);
    ok = h >= 0;
    int32_t syms[4], ats[4] = {(int32_t)at, (int32_t)at, (int32_t)at, (int32_t)at};
    if (ok && has_one) {
        syms[0] = gb_set_id(p, one);
        ok = syms[0] >= 0 && gb_budget(p, 1, at) && gb_add_alt(p, h, syms, ats, 1, at);
    }
    for (size_t i = 0; ok && i < runs.n; i++) {
        for (int k = 0; ok && k < runs.v[i].n; k++) ok = (syms[k] = gb_set_id(p, runs.v[i].s[k])) >= 0;
        ok = ok && gb_budget(p, (size_t)runs.v[i].n, at) && gb_add_alt(p, h, syms, ats, (size_t)runs.v[i].n, at);
    }
    free(runs.v);
    return ok && gb_class_remember(p, r, n, neg, key, h) && gb_emit(p, seq, KN_GP_REF(h), at);
}

static bool gb_add_range(gb *p, uint32_t lo, uint32_t hi) {
    if (!gb_grow(p, (void **)&p->ranges, &p->cap_ranges, p->n_ranges + 1, sizeof *p->ranges)) return false;
    p->ranges[p->n_ranges++] = (gb_cprange){lo, hi};
    return true;
}

/* [...] or [^...] at the cursor. */
static bool gb_parse_class(gb *p, gb_vec *seq, int32_t owner) {
    size_t open = p->pos++;
    bool neg = gb_peek(p, 0) == '^';
    if (neg) p->pos++;
    p->n_ranges = 0;
    for (;;) {
        if (p->pos >= p->len) return gb_fail(p, open, "unterminated character class");
        if (p->src[p->pos] == ']') break;
        size_t at = p->pos;
        uint32_t lo, hi;
        if (!gb_char(p, &lo)) return false;
        hi = lo;
        if (gb_peek(p, 0) == '-' && gb_peek(p, 1) != ']' && gb_peek(p, 1) >= 0) {
            p->pos++;
            if (!gb_char(p, &hi)) return false;
            if (hi < lo) return gb_fail(p, at, "bad range in character class: U+%04X-U+%04X is backwards", lo, hi);
        }
        if (!gb_add_range(p, lo, hi)) return false;
    }
    p->pos++;
    if (!p->n_ranges) return gb_fail(p, open, "empty character class");
    return gb_class(p, seq, neg, owner, open);
}

/* "..." at the cursor: one terminal per byte of the UTF-8 encoding of each character. */
static bool gb_parse_literal(gb *p, gb_vec *seq) {
    size_t open = p->pos++;
    for (;;) {
        if (p->pos >= p->len) return gb_fail(p, open, "unterminated string literal");
        if (p->src[p->pos] == '"') break;
        size_t at = p->pos;
        uint32_t cp;
        if (!gb_char(p, &cp)) return false;
        uint8_t bytes[4];
        int n = gb_utf8_encode(cp, bytes);
        for (int i = 0; i < n; i++) {
            int32_t sid = p->byte_set[bytes[i]];
            if (sid < 0) {
                uint64_t s[4] = {0};
                s[bytes[i] >> 6] = 1ull << (bytes[i] & 63);
                sid = p->byte_set[bytes[i]] = gb_set_id(p, s);
            }
            if (sid < 0 || !gb_emit(p, seq, sid, at)) return false;
        }
    }
    p->pos++;
    return true;
}

/* ---- numbers ------------------------------------------------------------------------------- */

/* A decimal number at the cursor, at most limit (what: its name for the message). */
static bool gb_number(gb *p, long *out, long limit, const char *what) {
    size_t at = p->pos;
    long v = 0;
    while (gb_peek(p, 0) >= '0' && gb_peek(p, 0) <= '9') {
        if (v <= limit) v = v * 10 + (p->src[p->pos] - '0');
        p->pos++;
    }
    if (v > limit)
        return gb_fail(p, at, "%s %.*s is above the limit of %ld", what, (int)(p->pos - at), p->src + at, limit);
    *out = v;
    return true;
}

/* A repetition bound at the cursor (at most KN_GBNF_MAX_REPEAT). */
static bool gb_bound(gb *p, long *out) { return gb_number(p, out, KN_GBNF_MAX_REPEAT, "repetition bound"); }

/* ---- counters ------------------------------------------------------------------------------- */

/* The element of counter operation o (interned, through a hash table: equal operations are one
 * element, so alternatives that begin with the same guard are factored together). */
static int32_t gb_op_id(gb *p, kn_gop o) {
    if (p->n_ops * 2 >= p->op_tab_cap) {
        size_t nc = p->op_tab_cap ? p->op_tab_cap * 2 : 64;
        int32_t *nt = malloc(nc * sizeof *nt);
        if (!nt) return gb_nomem(p), -1;
        memset(nt, 0xff, nc * sizeof *nt);
        for (size_t i = 0; i < p->n_ops; i++) {
            size_t h = gb_hash_bytes(&p->ops[i], sizeof o) & (nc - 1);
            while (nt[h] >= 0) h = (h + 1) & (nc - 1);
            nt[h] = (int32_t)i;
        }
        free(p->op_tab);
        p->op_tab = nt;
        p->op_tab_cap = nc;
    }
    size_t h = gb_hash_bytes(&o, sizeof o) & (p->op_tab_cap - 1);
    for (; p->op_tab[h] >= 0; h = (h + 1) & (p->op_tab_cap - 1))
        if (!memcmp(&p->ops[p->op_tab[h]], &o, sizeof o)) return KN_GP_OP(p->op_tab[h]);
    if (!gb_grow(p, (void **)&p->ops, &p->cap_ops, p->n_ops + 1, sizeof *p->ops)) return -1;
    p->ops[p->n_ops] = o;
    p->op_tab[h] = (int32_t)p->n_ops;
    return KN_GP_OP(p->n_ops++);
}

/* A counter bound at the cursor and the character end after it (consumed). */
static bool gb_guard_bound(gb *p, long *out, int end) {
    char buf[24];
    if (gb_peek(p, 0) < '0' || gb_peek(p, 0) > '9')
        return gb_fail(p, p->pos, "expected '{lo,hi}' in a counter guard, found %s", gb_what(p, p->pos, buf));
    if (!gb_number(p, out, KN_GBNF_MAX_COUNT, "counter bound")) return false;
    if (gb_peek(p, 0) != end)
        return gb_fail(p, p->pos, "expected '{lo,hi}' in a counter guard, found %s", gb_what(p, p->pos, buf));
    p->pos++;
    return true;
}

/* A counter operation at the cursor (on '@'): "@count" pushes a counter, "@+N{lo,hi}" adds N to
 * it and requires lo <= value <= hi, "@{lo,hi}" only requires it. Appended to seq. */
static bool gb_parse_op(gb *p, gb_vec *seq) {
    size_t at = p->pos++;
    char buf[24];
    kn_gop o = {0};
    if (p->pos + 5 <= p->len && !memcmp(p->src + p->pos, "count", 5) && !gb_is_word(gb_peek(p, 5))) {
        p->pos += 5;
        o.push = 1;
    } else {
        long inc = 0, lo, hi;
        if (gb_peek(p, 0) == '+') {
            p->pos++;
            if (gb_peek(p, 0) < '0' || gb_peek(p, 0) > '9')
                return gb_fail(p, p->pos, "expected a number after '@+', found %s", gb_what(p, p->pos, buf));
            if (!gb_number(p, &inc, KN_GBNF_MAX_COUNT, "counter bound")) return false;
        }
        if (gb_peek(p, 0) != '{')
            return gb_fail(p, p->pos, "expected '@count', '@+N{lo,hi}' or '@{lo,hi}', found %s",
                           gb_what(p, p->pos, buf));
        p->pos++;
        if (!gb_guard_bound(p, &lo, ',') || !gb_guard_bound(p, &hi, '}')) return false;
        if (lo > hi) return gb_fail(p, at, "bad counter guard {%ld,%ld}: the minimum is above the maximum", lo, hi);
        o.inc = (int32_t)inc, o.lo = (int32_t)lo, o.hi = (int32_t)hi;
    }
    int32_t e = gb_op_id(p, o);
    return e >= 0 && gb_emit(p, seq, e, at);
}

/* ---- repetition ----------------------------------------------------------------------------- */

/* Rewrites seq[item ..] (the last item) as repeated m..n times (n < 0: unbounded), the operator
 * being at offset at. The item becomes one symbol x (a new rule when it is several); then
 *   x{m,}  = x (m times) S,          S ::= x S | ""
 *   x{m,n} = x (m times) R_(n-m),    R_k ::= x R_(k-1) | "",  R_1 ::= x | ""
 * with every recursive reference last in its alternative. */
static bool gb_repeat(gb *p, gb_vec *seq, size_t item, int32_t owner, long m, long n, size_t at) {
    if (item == GB_NONE || item >= seq->n) {
        char buf[24];
        return gb_fail(p, at, "nothing to repeat before %s", gb_what(p, at, buf));
    }
    int32_t syms[2], ats[2] = {(int32_t)at, (int32_t)at};
    if (seq->n - item > 1) {
        int32_t h = gb_new_rule(p, owner, true);
        if (h < 0 || !gb_add_alt(p, h, seq->v + item, seq->at + item, seq->n - item, at)) return false;
        seq->n = item;
        if (!gb_vec_push(p, seq, KN_GP_REF(h), at)) return false;
    }
    int32_t x = seq->v[item], x_at = seq->at[item];
    seq->n = item;
    size_t extra = n < 0 ? 1 : (size_t)(n - m);
    if (!gb_budget(p, (size_t)m + extra * 2, at)) return false; /* the symbols; gb_add_alt counts the ends */
    for (long i = 0; i < m; i++)
        if (!gb_vec_push(p, seq, x, (size_t)x_at)) return false;
    if (n < 0) {
        int32_t s = gb_new_rule(p, owner, true);
        if (s < 0) return false;
        syms[0] = x, syms[1] = KN_GP_REF(s);
        ats[0] = x_at;
        if (!gb_add_alt(p, s, syms, ats, 2, at) || !gb_add_alt(p, s, NULL, NULL, 0, at)) return false;
        return gb_vec_push(p, seq, KN_GP_REF(s), at);
    }
    int32_t prev = -1;
    for (long k = 0; k < n - m; k++) {
        int32_t r = gb_new_rule(p, owner, true);
        if (r < 0) return false;
        syms[0] = x, syms[1] = KN_GP_REF(prev);
        ats[0] = x_at;
        if (!gb_add_alt(p, r, syms, ats, prev >= 0 ? 2 : 1, at) || !gb_add_alt(p, r, NULL, NULL, 0, at)) return false;
        prev = r;
    }
    return prev < 0 || gb_vec_push(p, seq, KN_GP_REF(prev), at);
}

/* ---- rules and sequences -------------------------------------------------------------------- */

static bool gb_alternates(gb *p, int32_t rule, int32_t owner, int depth, bool nested);

/* Parses a sequence into seq until a token that cannot continue it ('|', ')', a line break outside
 * a group, the end). */
static bool gb_sequence(gb *p, gb_vec *seq, int32_t owner, int depth, bool nested) {
    size_t item = GB_NONE;
    char buf[24];
    for (;;) {
        int c = gb_peek(p, 0);
        size_t at = p->pos;
        long m = 0, n = -1;
        if (c == '"') {
            item = seq->n;
            if (!gb_parse_literal(p, seq)) return false;
        } else if (c == '[') {
            item = seq->n;
            if (!gb_parse_class(p, seq, owner)) return false;
        } else if (c == '.') {
            item = seq->n;
            p->pos++;
            p->n_ranges = 0;
            if (!gb_add_range(p, 0, 0x10FFFF) || !gb_class(p, seq, false, owner, at)) return false;
        } else if (gb_is_word(c)) {
            size_t start = p->pos;
            while (gb_is_word(gb_peek(p, 0))) p->pos++;
            int32_t r = gb_rule_named(p, start, p->pos - start);
            if (r < 0) return false;
            if (p->rules[r].ref_at < 0) p->rules[r].ref_at = (int32_t)start;
            item = seq->n;
            if (!gb_emit(p, seq, KN_GP_REF(r), start)) return false;
        } else if (c == '(') {
            if (depth >= KN_GBNF_MAX_NESTING)
                return gb_fail(p, at, "groups are nested more than %d deep", KN_GBNF_MAX_NESTING);
            p->pos++;
            gb_space(p, true);
            int32_t g = gb_new_rule(p, owner, true);
            if (g < 0 || !gb_alternates(p, g, owner, depth + 1, true)) return false;
            if (gb_peek(p, 0) != ')') {
                int line, col;
                gb_loc(p, at, &line, &col);
                return gb_fail(p, p->pos, "expected ')' to close the group opened at line %d, column %d, found %s",
                               line, col, gb_what(p, p->pos, buf));
            }
            p->pos++;
            item = seq->n;
            if (p->rules[g].n_alts == 1) { /* one alternative: inline it (it is the last one added) */
                gb_alt a = p->alts[--p->n_alts];
                p->rules[g].n_alts = 0;
                p->rules[g].dead = true;
                for (uint32_t i = 0; i < a.len; i++)
                    if (!gb_vec_push(p, seq, p->pool.v[a.start + i], (size_t)p->pool.at[a.start + i])) return false;
                p->pool.n = a.start;
            } else if (!gb_vec_push(p, seq, KN_GP_REF(g), at)) {
                return false;
            }
        } else if (c == '*' || c == '+' || c == '?') {
            /* operators in a row are one: e++ is e+, e?? is e?, any other mix e*; nested, each would
             * multiply the matcher's parser stacks (twelve '+' cost 40 ms a mask on a 151,669-token
             * vocabulary, just below the ambiguity limit) */
            bool all_plus = true, all_opt = true;
            for (; c == '*' || c == '+' || c == '?'; c = gb_peek(p, 0)) {
                all_plus = all_plus && c == '+';
                all_opt = all_opt && c == '?';
                p->pos++;
                gb_space(p, nested);
            }
            m = all_plus, n = all_opt ? 1 : -1;
            if (!gb_repeat(p, seq, item, owner, m, n, at)) return false;
        } else if (c == '{') {
            p->pos++;
            gb_space(p, nested);
            if (gb_peek(p, 0) < '0' || gb_peek(p, 0) > '9')
                return gb_fail(p, p->pos, "expected a number after '{', found %s", gb_what(p, p->pos, buf));
            if (!gb_bound(p, &m)) return false;
            gb_space(p, nested);
            if (gb_peek(p, 0) == '}') {
                n = m;
            } else if (gb_peek(p, 0) == ',') {
                p->pos++;
                gb_space(p, nested);
                if (gb_peek(p, 0) >= '0' && gb_peek(p, 0) <= '9') {
                    if (!gb_bound(p, &n)) return false;
                    gb_space(p, nested);
                }
                if (gb_peek(p, 0) != '}')
                    return gb_fail(p, p->pos, "expected '}' to close the repetition, found %s",
                                   gb_what(p, p->pos, buf));
            } else {
                return gb_fail(p, p->pos, "expected ',' or '}' in the repetition, found %s", gb_what(p, p->pos, buf));
            }
            p->pos++;
            if (n >= 0 && m > n)
                return gb_fail(p, at, "bad repetition bounds {%ld,%ld}: the minimum is above the maximum", m, n);
            if (!gb_repeat(p, seq, item, owner, m, n, at)) return false;
        } else if (c == '@') {
            item = seq->n;
            if (!gb_parse_op(p, seq)) return false;
        } else if (c == '<') {
            return gb_fail(p, at, "token references (<...>) are not supported: write the text as a literal");
        } else {
            return true;
        }
        gb_space(p, nested);
    }
}

/* Parses alternatives separated by '|' into rule, building each in the scratch sequence of depth. */
static bool gb_alternates(gb *p, int32_t rule, int32_t owner, int depth, bool nested) {
    gb_vec *seq = &p->scratch[depth];
    for (;;) {
        seq->n = 0;
        if (!gb_sequence(p, seq, owner, depth, nested)) return false;
        if (!gb_add_alt(p, rule, seq->v, seq->at, seq->n, p->pos)) return false;
        if (gb_peek(p, 0) != '|') return true;
        p->pos++;
        gb_space(p, true);
    }
}

/* One rule definition at the cursor, through the line break that ends it. */
static bool gb_rule_def(gb *p) {
    char buf[24];
    size_t start = p->pos;
    while (gb_is_word(gb_peek(p, 0))) p->pos++;
    if (p->pos == start) return gb_fail(p, start, "expected a rule name, found %s", gb_what(p, start, buf));
    int nlen = (int)(p->pos - start);
    int32_t r = gb_rule_named(p, start, p->pos - start);
    if (r < 0) return false;
    if (p->rules[r].def_at >= 0) {
        int line, col;
        gb_loc(p, (size_t)p->rules[r].def_at, &line, &col);
        return gb_fail(p, start, "rule '%.*s' is defined twice (first at line %d, column %d)", nlen, p->src + start,
                       line, col);
    }
    p->rules[r].def_at = (int32_t)start;
    gb_space(p, false);
    if (p->pos + 3 > p->len || memcmp(p->src + p->pos, "::=", 3) != 0)
        return gb_fail(p, p->pos, "expected '::=' after the rule name '%.*s', found %s", nlen, p->src + start,
                       gb_what(p, p->pos, buf));
    p->pos += 3;
    gb_space(p, true);
    if (!gb_alternates(p, r, r, 0, false)) return false;
    int c = gb_peek(p, 0);
    if (c == '\r') p->pos += gb_peek(p, 1) == '\n' ? 2 : 1;
    else if (c == '\n') p->pos++;
    else if (c >= 0)
        return gb_fail(p, p->pos, "unexpected %s in rule '%.*s'", gb_what(p, p->pos, buf), nlen, p->src + start);
    gb_space(p, true);
    return true;
}

/* ---- analyses ------------------------------------------------------------------------------- */

typedef struct gb_an {
    int32_t *off;                          /* [n_rules + 1]: rule r's alternatives are order[off[r] .. off[r+1]) */
    int32_t *order;                        /* [n_alts]: alternative indices grouped by rule */
    uint8_t *nullable, *productive, *keep; /* per rule, per rule, per alternative */
} gb_an;

static bool gb_is_empty_set(const gb *p, int32_t sym) {
    return sym >= 0 && !KN_GP_IS_OP(sym) && !(p->sets[sym][0] | p->sets[sym][1] | p->sets[sym][2] | p->sets[sym][3]);
}

/* Marks in flag[] the rules that derive the empty string (productive = false) or some finite byte
 * string (productive = true): a worklist over "alternatives whose references are not yet known to
 * qualify", linear in the program size. */
static bool gb_fixpoint(gb *p, bool productive, uint8_t *flag) {
    size_t nr = p->n_rules, na = p->n_alts;
    int32_t *cnt = calloc(na ? na : 1, sizeof *cnt), *occ_off = calloc(nr + 1, sizeof *occ_off);
    int32_t *queue = malloc((nr ? nr : 1) * sizeof *queue), *cur = malloc((nr ? nr : 1) * sizeof *cur);
    int32_t *occ = NULL;
    bool ok = cnt && occ_off && queue && cur;
    size_t n_occ = 0;
    for (size_t a = 0; ok && a < na; a++) { /* cnt[a]: references not yet known to qualify; -1 = never */
        const gb_alt *al = &p->alts[a];
        for (uint32_t i = 0; i < al->len && cnt[a] >= 0; i++) {
            int32_t s = p->pool.v[al->start + i]; /* a counter op: nullable and productive */
            if (s < 0) cnt[a]++;
            else if (!KN_GP_IS_OP(s) && (!productive || gb_is_empty_set(p, s))) cnt[a] = -1;
        }
        if (cnt[a] < 0) continue;
        for (uint32_t i = 0; i < al->len; i++) {
            int32_t s = p->pool.v[al->start + i];
            if (s < 0) occ_off[KN_GP_RULE(s) + 1]++, n_occ++;
        }
    }
    if (ok) ok = (occ = malloc((n_occ ? n_occ : 1) * sizeof *occ)) != NULL;
    if (ok) { /* occ[occ_off[t] .. occ_off[t+1]): the qualifying-candidate alternatives that reference t */
        for (size_t r = 0; r < nr; r++) occ_off[r + 1] += occ_off[r];
        memcpy(cur, occ_off, nr * sizeof *cur);
        for (size_t a = 0; a < na; a++) {
            if (cnt[a] < 0) continue;
            const gb_alt *al = &p->alts[a];
            for (uint32_t i = 0; i < al->len; i++) {
                int32_t s = p->pool.v[al->start + i];
                if (s < 0) occ[cur[KN_GP_RULE(s)]++] = (int32_t)a;
            }
        }
        size_t qn = 0;
        for (size_t a = 0; a < na; a++)
            if (cnt[a] == 0 && !flag[p->alts[a].rule]) flag[p->alts[a].rule] = 1, queue[qn++] = p->alts[a].rule;
        while (qn) {
            int32_t t = queue[--qn];
            for (int32_t k = occ_off[t]; k < occ_off[t + 1]; k++) {
                int32_t a = occ[k];
                if (--cnt[a] == 0 && !flag[p->alts[a].rule]) flag[p->alts[a].rule] = 1, queue[qn++] = p->alts[a].rule;
            }
        }
    }
    free(cnt), free(occ_off), free(queue), free(cur), free(occ);
    return ok || gb_nomem(p);
}

/* The name of rule r for messages: its owner's name. */
static void gb_rule_name(const gb *p, int32_t r, const char **s, int *n) {
    const gb_rule *u = &p->rules[p->rules[r].owner];
    *s = p->src + u->name_off;
    *n = (int)u->name_len;
}

/* Fails when some rule reaches itself through references preceded only by nullable symbols. An
 * iterative depth-first search over those "left edges" (a cycle is an edge to a rule on the path). */
static bool gb_left_recursion(gb *p, const gb_an *an) {
    size_t nr = p->n_rules;
    typedef struct {
        int32_t rule, alt, sym;
    } frame;
    uint8_t *color = calloc(nr ? nr : 1, 1);
    frame *st = malloc((nr ? nr : 1) * sizeof *st);
    if (!color || !st) return free(color), free(st), gb_nomem(p);
    bool ok = true;
    for (size_t r0 = 0; ok && r0 < nr; r0++) {
        if (color[r0]) continue;
        size_t sp = 0;
        st[sp++] = (frame){(int32_t)r0, 0, 0};
        color[r0] = 1;
        while (ok && sp) {
            frame *f = &st[sp - 1];
            int32_t n_alt = an->off[f->rule + 1] - an->off[f->rule];
            if (f->alt >= n_alt) {
                color[f->rule] = 2;
                sp--;
                continue;
            }
            const gb_alt *al = &p->alts[an->order[an->off[f->rule] + f->alt]];
            if ((uint32_t)f->sym >= al->len) {
                f->alt++, f->sym = 0;
                continue;
            }
            int32_t s = p->pool.v[al->start + (uint32_t)f->sym];
            size_t s_at = (size_t)p->pool.at[al->start + (uint32_t)f->sym];
            if (KN_GP_IS_OP(s)) { /* matches the empty string */
                f->sym++;
                continue;
            }
            if (s >= 0) {
                f->alt++, f->sym = 0;
                continue;
            }
            int32_t t = KN_GP_RULE(s);
            if (an->nullable[t]) f->sym++;
            else f->alt++, f->sym = 0;
            if (color[t] == 1) {
                const char *name;
                int nlen;
                gb_rule_name(p, t, &name, &nlen);
                ok = gb_fail(p, s_at, "left recursion in rule '%.*s': it can reach itself without matching a byte",
                             nlen, name);
            } else if (color[t] == 0) {
                color[t] = 1;
                st[sp++] = (frame){t, 0, 0};
            }
        }
    }
    free(color), free(st);
    return ok;
}

/* ---- the program ---------------------------------------------------------------------------- */

/* Lays out the kept alternatives of every live rule as the final program. */
static bool gb_emit_program(gb *p, const gb_an *an, kn_gprog *out) {
    size_t n_elem = 0, n_alt = 0;
    for (size_t a = 0; a < p->n_alts; a++)
        if (an->keep[a]) n_elem += p->alts[a].len + 1, n_alt++;
    size_t nr = p->n_rules;
    size_t sz_elem = n_elem * 4, sz_off = (nr + 1) * 4, sz_pos = n_alt * 4;
    size_t head = (sz_elem + sz_off + sz_pos + 31) & ~(size_t)31;
    char *mem = calloc(1, head + p->n_sets * 32 + p->n_ops * sizeof(kn_gop) + (2 * p->n_ops + 1) * 4 + 32);
    if (!mem) return gb_nomem(p);
    int32_t *elem = (int32_t *)mem, *alt_off = (int32_t *)(mem + sz_elem),
            *alt_pos = (int32_t *)(mem + sz_elem + sz_off);
    uint64_t(*sets)[4] = (uint64_t(*)[4])(mem + head);
    if (p->n_sets) memcpy(sets, p->sets, p->n_sets * 32);
    kn_gop *ops = (kn_gop *)(mem + head + p->n_sets * 32);
    if (p->n_ops) memcpy(ops, p->ops, p->n_ops * sizeof *ops);
    int32_t *bound = (int32_t *)(ops + p->n_ops);
    int32_t e = 0, k = 0;
    for (size_t r = 0; r < nr; r++) {
        alt_off[r] = k;
        for (int32_t i = an->off[r]; i < an->off[r + 1]; i++) {
            int32_t a = an->order[i];
            if (!an->keep[a]) continue;
            alt_pos[k++] = e;
            const gb_alt *al = &p->alts[a];
            if (al->len) memcpy(elem + e, p->pool.v + al->start, al->len * 4);
            e += (int32_t)al->len;
            elem[e++] = KN_GP_END;
        }
    }
    alt_off[nr] = k;
    *out = (kn_gprog){.n_elem = e,
                      .elem = elem,
                      .n_rule = (int32_t)nr,
                      .alt_off = alt_off,
                      .alt_pos = alt_pos,
                      .n_set = (int32_t)p->n_sets,
                      .set = (const uint64_t(*)[4])sets,
                      .n_op = (int32_t)p->n_ops,
                      .op = ops,
                      .mem = mem};
    if (!kn_gprog_count_facts(out, bound)) {
        kn_gprog_free(out);
        return gb_nomem(p);
    }
    return true;
}

/* Drops (keep[a] = 0) every alternative equal to an earlier kept one of the same rule: the same
 * language twice would only make the matcher follow twice as many stacks. */
static bool gb_dedup(gb *p, uint8_t *keep) {
    size_t cap = 64;
    while (cap < p->n_alts * 2) cap *= 2;
    int32_t *tab = malloc(cap * sizeof *tab);
    if (!tab) return gb_nomem(p);
    memset(tab, 0xff, cap * sizeof *tab);
    for (size_t a = 0; a < p->n_alts; a++) {
        if (!keep[a]) continue;
        const gb_alt *al = &p->alts[a];
        const int32_t *v = al->len ? p->pool.v + al->start : NULL;
        uint32_t h = (gb_hash_bytes(v, al->len * sizeof *v) ^ (uint32_t)al->rule) * 2654435761u;
        for (size_t k = h & (cap - 1);; k = (k + 1) & (cap - 1)) {
            if (tab[k] < 0) {
                tab[k] = (int32_t)a;
                break;
            }
            const gb_alt *o = &p->alts[tab[k]];
            if (o->rule == al->rule && o->len == al->len &&
                (!al->len || !memcmp(p->pool.v + o->start, v, al->len * sizeof *v))) {
                keep[a] = 0;
                break;
            }
        }
    }
    free(tab);
    return true;
}

/* ---- left factoring ------------------------------------------------------------------------- */

static int gb_cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct gb_fwork { /* a rule to factor: its alternatives are list[off .. off+n) */
    int32_t rule;
    size_t off, n;
} gb_fwork;

/* Left-factors the kept alternatives of every rule: alternatives that begin with the same symbol
 * (the same byte set, or a reference to the same rule) are merged into one, their longest common
 * prefix followed by a reference to a new rule whose alternatives are what follows the prefix in
 * each (A ::= x y B | x y C  becomes  A ::= x y A1, A1 ::= B | C), and the new rules are factored in
 * turn. A set of literals becomes a byte trie, so the matcher's state after any prefix holds one
 * stack per way on instead of one per literal. The language is unchanged (concatenation
 * distributes over alternation), and so are the analyses: no rule becomes nullable or
 * unproductive, and a new rule is entered only after its prefix, whose first symbol the merged
 * alternatives shared, so it adds no left edge that was not there. The tails are not copied: an
 * alternative's symbols are a slice of the pool, and its tail is the same slice shortened. Work is
 * linear in the symbols plus a sort per rule. keep (*keep_cap entries) grows with the alternatives
 * the pass adds (kept). */
static bool gb_factor(gb *p, const gb_an *an, uint8_t **keep, size_t *keep_cap) {
    size_t na = p->n_alts, n_list = 0;
    int32_t *list = malloc((na ? na : 1) * sizeof *list);
    uint64_t *keys = malloc((na ? na : 1) * sizeof *keys);
    gb_fwork *work = NULL;
    size_t n_work = 0, cap_work = 0;
    bool ok = list && keys;
    if (!ok) gb_nomem(p);
    for (size_t r = 0; ok && r < p->n_rules; r++) {
        size_t off = n_list;
        for (int32_t i = an->off[r]; i < an->off[r + 1]; i++)
            if ((*keep)[an->order[i]]) list[n_list++] = an->order[i];
        if (n_list - off < 2) continue;
        ok = gb_grow(p, (void **)&work, &cap_work, n_work + 1, sizeof *work);
        if (ok) work[n_work++] = (gb_fwork){(int32_t)r, off, n_list - off};
    }
    gb_vec *pre = &p->scratch[0]; /* the common prefix being factored out (the pool may move) */
    while (ok && n_work) {
        gb_fwork w = work[--n_work];
        int32_t *L = list + w.off;
        size_t nk = 0; /* the alternatives with a first symbol, sorted by it (then by index) */
        for (size_t i = 0; i < w.n; i++) {
            const gb_alt *al = &p->alts[L[i]];
            if (al->len) keys[nk++] = (uint64_t)(uint32_t)p->pool.v[al->start] << 32 | (uint32_t)L[i];
        }
        if (nk < 2) continue;
        qsort(keys, nk, sizeof *keys, gb_cmp_u64);
        for (size_t i = 0; i < nk; i++) L[i] = (int32_t)(uint32_t)keys[i]; /* groups are runs of L now */
        for (size_t i = 0; ok && i < nk;) {
            size_t j = i + 1;
            while (j < nk && keys[j] >> 32 == keys[i] >> 32) j++;
            if (j - i < 2) {
                i = j;
                continue;
            }
            const gb_alt *a0 = &p->alts[L[i]];
            uint32_t k = a0->len; /* the longest common prefix of the group */
            for (size_t g = i + 1; g < j; g++) {
                const gb_alt *ag = &p->alts[L[g]];
                uint32_t m = 1, lim = ag->len < k ? ag->len : k;
                while (m < lim && p->pool.v[ag->start + m] == p->pool.v[a0->start + m]) m++;
                k = m;
            }
            int32_t nr = gb_new_rule(p, p->rules[w.rule].owner, true);
            pre->n = 0;
            ok = nr >= 0 && gb_vec_reserve(p, pre, (size_t)k + 1);
            if (ok) {
                memcpy(pre->v, p->pool.v + a0->start, k * sizeof *pre->v);
                memcpy(pre->at, p->pool.at + a0->start, k * sizeof *pre->at);
                pre->v[k] = KN_GP_REF(nr);
                pre->at[k] = pre->at[0];
                pre->n = (size_t)k + 1;
            }
            for (size_t g = i; ok && g < j; g++) { /* the group's alternatives become nr's tails */
                gb_alt *ag = &p->alts[L[g]];
                ag->rule = nr, ag->start += k, ag->len -= k;
                p->rules[w.rule].n_alts--;
                p->rules[nr].n_alts++;
            }
            ok = ok && gb_add_alt(p, w.rule, pre->v, pre->at, pre->n, (size_t)pre->at[0]) &&
                 gb_grow(p, (void **)keep, keep_cap, p->n_alts, 1) &&
                 gb_grow(p, (void **)&work, &cap_work, n_work + 1, sizeof *work);
            if (ok) {
                (*keep)[p->n_alts - 1] = 1;
                work[n_work++] = (gb_fwork){nr, w.off + i, j - i};
            }
            i = j;
        }
    }
    free(list), free(keys), free(work);
    return ok;
}

/* Rebuilds an's grouping of the alternatives by rule (off, order) after alternatives and rules
 * were added or moved. */
static bool gb_group(gb *p, gb_an *an) {
    size_t nr = p->n_rules, na = p->n_alts;
    int32_t *off = calloc(nr + 1, sizeof *off), *order = malloc((na ? na : 1) * sizeof *order),
            *cur = malloc((nr ? nr : 1) * sizeof *cur);
    if (!off || !order || !cur) return free(off), free(order), free(cur), gb_nomem(p);
    for (size_t a = 0; a < na; a++) off[p->alts[a].rule + 1]++;
    for (size_t r = 0; r < nr; r++) off[r + 1] += off[r];
    memcpy(cur, off, nr * sizeof *cur);
    for (size_t a = 0; a < na; a++) order[cur[p->alts[a].rule]++] = (int32_t)a;
    free(cur), free(an->off), free(an->order);
    an->off = off;
    an->order = order;
    return true;
}

/* Refuses a program the matcher could not run: its start state, or a state a few bytes on, would
 * hold more parser stacks than the matcher allows (kn_gprog_check). Frees *out when it refuses. */
static bool gb_check(gb *p, int32_t root, kn_gprog *out) {
    char why[KN_ERRMSG_MAX - 64];
    kiln_status st = kn_gprog_check(out, why, sizeof why);
    if (!st) return true;
    kn_gprog_free(out);
    if (st == KILN_ERR_NOMEM) return gb_nomem(p);
    return gb_fail(p, (size_t)p->rules[root].def_at, "the grammar is too ambiguous: %s", why);
}

/* Checks the parsed rules (definitions, root, left recursion, productivity) and emits the program. */
static bool gb_finish(gb *p, kn_gprog *out) {
    int32_t root = -1;
    size_t first_undef = GB_NONE;
    int32_t undef = -1;
    for (size_t r = 0; r < p->n_rules; r++) {
        const gb_rule *u = &p->rules[r];
        if (u->helper) continue;
        if (u->name_len == 4 && memcmp(p->src + u->name_off, "root", 4) == 0) root = (int32_t)r;
        if (u->def_at < 0 && (size_t)u->ref_at < first_undef) first_undef = (size_t)u->ref_at, undef = (int32_t)r;
    }
    if (undef >= 0)
        return gb_fail(p, first_undef, "undefined rule '%.*s'", (int)p->rules[undef].name_len,
                       p->src + p->rules[undef].name_off);
    if (root < 0) return gb_fail(p, 0, "the grammar has no rule named 'root' (where matching starts)");
    size_t nr = p->n_rules, na = p->n_alts;
    gb_an an = {0};
    an.off = calloc(nr + 1, sizeof *an.off);
    an.order = malloc((na ? na : 1) * sizeof *an.order);
    an.nullable = calloc(nr ? nr : 1, 1);
    an.productive = calloc(nr ? nr : 1, 1);
    an.keep = calloc(na ? na : 1, 1);
    bool ok = an.off && an.order && an.nullable && an.productive && an.keep;
    if (!ok) gb_nomem(p);
    if (ok) {
        for (size_t a = 0; a < na; a++) an.off[p->alts[a].rule + 1]++;
        for (size_t r = 0; r < nr; r++) an.off[r + 1] += an.off[r];
        int32_t *cur = malloc((nr ? nr : 1) * sizeof *cur);
        ok = cur != NULL;
        if (ok) {
            memcpy(cur, an.off, nr * sizeof *cur);
            for (size_t a = 0; a < na; a++) an.order[cur[p->alts[a].rule]++] = (int32_t)a;
            free(cur);
        } else {
            gb_nomem(p);
        }
    }
    ok = ok && gb_fixpoint(p, false, an.nullable) && gb_left_recursion(p, &an) && gb_fixpoint(p, true, an.productive);
    if (ok) {
        for (size_t a = 0; a < na; a++) {
            const gb_alt *al = &p->alts[a];
            bool keep = an.productive[al->rule];
            for (uint32_t i = 0; keep && i < al->len; i++) {
                int32_t s = p->pool.v[al->start + i];
                keep = s >= 0 ? !gb_is_empty_set(p, s) : an.productive[KN_GP_RULE(s)];
            }
            an.keep[a] = keep;
        }
        ok = gb_dedup(p, an.keep);
        if (ok && !an.productive[root])
            ok = gb_fail(p, (size_t)p->rules[root].def_at,
                         "rule 'root' matches no text: each alternative recurses forever or needs a character no class "
                         "allows");
    }
    if (ok && !(p->flags & KN_GBNF_NO_FACTOR)) {
        size_t keep_cap = na ? na : 1;
        ok = gb_factor(p, &an, &an.keep, &keep_cap) && gb_group(p, &an);
    }
    if (ok) {
        ok = gb_emit_program(p, &an, out);
        if (ok) out->root = root;
    }
    free(an.off), free(an.order), free(an.nullable), free(an.productive), free(an.keep);
    if (ok && !(p->flags & KN_GBNF_NO_CHECK)) ok = gb_check(p, root, out);
    return ok;
}

static void gb_free(gb *p) {
    free(p->rules), free(p->names), free(p->pool.v), free(p->pool.at), free(p->alts), free(p->sets), free(p->set_tab),
        free(p->ranges), free(p->ops), free(p->op_tab), free(p->cmemo), free(p->cmemo_ranges);
    for (int i = 0; i <= KN_GBNF_MAX_NESTING; i++) free(p->scratch[i].v), free(p->scratch[i].at);
}

kiln_status kn_gbnf_parse(const char *text, size_t len, kn_gprog *out) { return kn_gbnf_parse_ex(text, len, 0, out); }

kiln_status kn_gbnf_parse_ex(const char *text, size_t len, unsigned flags, kn_gprog *out) {
    memset(out, 0, sizeof *out);
    if (!text && len) return kn_error(KILN_ERR_INVALID_ARG, "the grammar text is NULL");
    const unsigned cap = flags & KN_GBNF_GENERATED ? KN_GBNF_MAX_GENERATED : KILN_GRAMMAR_MAX_TEXT;
    if (len > cap)
        return kn_error(KILN_ERR_INVALID_ARG, "line 1, column 1: the grammar is %zu bytes; at most %u are accepted",
                        len, cap);
    gb *p = calloc(1, sizeof *p);
    if (!p) return kn_error(KILN_ERR_NOMEM, "out of memory compiling the grammar");
    memset(p->byte_set, 0xff, sizeof p->byte_set);
    p->src = text ? text : "";
    p->len = len;
    p->flags = flags;
    gb_space(p, true);
    while (p->pos < p->len && gb_rule_def(p)) {}
    if (!p->st) gb_finish(p, out);
    kiln_status st = p->st;
    if (st) kn_error(st, "%s", p->msg);
    gb_free(p);
    free(p);
    return st;
}

void kn_gprog_free(kn_gprog *p) {
    if (!p) return;
    free(p->mem);
    memset(p, 0, sizeof *p);
}
