/*
 * test_regex.c - the regular expressions of JSON Schema patterns (schema_regex.c) against PCRE2, and
 * the code point sets they are built from against a bitmap.
 *
 * The differential test draws thousands of small patterns (literals, '.', classes with ranges and
 * negation, groups, alternation, the quantifiers * + ? {m} {m,} {m,n} and their lazy forms, ^ and $)
 * over a five-letter alphabet and checks, for every string of up to five letters, that the automaton
 * kn_dfa_regex builds accepts exactly the strings in which PCRE2 finds a match (PCRE2_UTF and
 * PCRE2_DOLLAR_ENDONLY: ECMAScript's $ without the m flag). Counted repetitions are copies of the
 * atom's states, a class is sorted once however its characters are written, and the subset
 * construction shares one class among its copies: each of those is checked here against an engine
 * that does none of it. Fixed patterns cover assertions in odd places, and the automata's bounds
 * (transitions) are checked at their edges.
 */
#include "harness.h"
#include "sample/schema_internal.h"
#include "text/unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
static int pick(int n) { return (int)(next() % (uint32_t)n); }

/* ---- code point sets against a bitmap ------------------------------------------------------- */

#define UNIVERSE 400

/* s is sorted, its ranges apart (not even adjacent), and holds exactly the code points of bits. */
static bool cset_is(const kn_cset *s, const bool *bits) {
    for (int i = 0; i < s->n; i++) {
        if (s->r[i].lo > s->r[i].hi) return false;
        if (i > 0 && s->r[i].lo <= s->r[i - 1].hi + 1) return false;
    }
    for (uint32_t c = 0; c < UNIVERSE + 8; c++)
        if (kn_cset_has(s, c) != (c < UNIVERSE && bits[c])) return false;
    return true;
}

/* Random ranges added in random order (single points, short and long ranges, overlapping, adjacent,
 * nested): after every addition the set is canonical and equals the bitmap of what was added. */
static void test_cset_add(void) {
    for (int round = 0; round < 300; round++) {
        kn_cset s = {0};
        bool bits[UNIVERSE] = {false};
        const int adds = 1 + pick(60);
        bool ok = true;
        for (int k = 0; k < adds && ok; k++) {
            uint32_t lo = (uint32_t)pick(UNIVERSE), len = pick(4) == 0 ? (uint32_t)pick(80) : (uint32_t)pick(3);
            uint32_t hi = lo + len < UNIVERSE ? lo + len : UNIVERSE - 1;
            CHECK(kn_cset_add(&s, lo, hi));
            for (uint32_t c = lo; c <= hi; c++) bits[c] = true;
            ok = cset_is(&s, bits);
            CHECKF(ok, "round %d: after adding [%u, %u] the set is wrong (%d ranges)", round, lo, hi, s.n);
        }
        kn_cset_free(&s);
    }
    /* the ends of the code space: ranges up to UINT32_MAX merge without overflowing */
    kn_cset s = {0};
    CHECK(kn_cset_add(&s, 10, 20) && kn_cset_add(&s, UINT32_MAX - 5, UINT32_MAX) &&
          kn_cset_add(&s, UINT32_MAX - 9, UINT32_MAX - 6) && kn_cset_add(&s, 0, 9));
    CHECK(s.n == 2 && s.r[0].lo == 0 && s.r[0].hi == 20 && s.r[1].lo == UINT32_MAX - 9 && s.r[1].hi == UINT32_MAX);
    CHECK(kn_cset_add(&s, 21, UINT32_MAX - 10));
    CHECK(s.n == 1 && s.r[0].lo == 0 && s.r[0].hi == UINT32_MAX);
    kn_cset_free(&s);
}

/* ---- patterns against PCRE2 ------------------------------------------------------------------- */

static const char ALPHA[] = "abcde";
static const uint32_t ALPHA_CP[] = {'a', 'b', 'c', 'd', 'e'}; /* the same, as code points */

static void gen_alt(char *p, size_t cap, size_t *n, int depth);

static void put(char *p, size_t cap, size_t *n, const char *s) {
    size_t k = strlen(s);
    if (*n + k < cap) {
        memcpy(p + *n, s, k);
        *n += k;
        p[*n] = 0;
    }
}

/* A class: optionally negated, items in random order (letters, ranges a-c, letters outside the
 * alphabet), so that kn_cset_add sees sorted, reversed, overlapping and repeated input. */
static void gen_class(char *p, size_t cap, size_t *n) {
    put(p, cap, n, pick(3) == 0 ? "[^" : "[");
    const int items = 1 + pick(4);
    for (int i = 0; i < items; i++) {
        char item[4] = {ALPHA[pick(5)], 0, 0, 0};
        if (pick(3) == 0) {
            const int lo = pick(5), hi = lo + pick(5 - lo);
            item[0] = ALPHA[lo], item[1] = '-', item[2] = ALPHA[hi];
        } else if (pick(6) == 0) {
            item[0] = 'x';
        }
        put(p, cap, n, item);
    }
    put(p, cap, n, "]");
}

static void gen_atom(char *p, size_t cap, size_t *n, int depth) {
    const int k = pick(depth > 0 ? 10 : 7);
    const bool group = k >= 7;
    if (k < 3) {
        char c[2] = {ALPHA[pick(5)], 0};
        put(p, cap, n, c);
    } else if (k == 3) {
        put(p, cap, n, ".");
    } else if (k < 7) {
        gen_class(p, cap, n);
    } else {
        put(p, cap, n, pick(2) ? "(" : "(?:");
        gen_alt(p, cap, n, depth - 1);
        put(p, cap, n, ")");
    }
    /* a quantifier; not {0} after a group: PCRE2 then finds no match of "(x|^){0}c" in "ac", where
     * ECMAScript (and kiln) find one */
    static const char *const q[] = {"*", "+", "?", "{2}", "{0}", "{1,3}", "{2,}", "{0,2}", "{3}"};
    if (pick(3) == 0) {
        const int qi = pick(9);
        put(p, cap, n, group && qi == 4 ? "{0,2}" : q[qi]);
        if (pick(5) == 0) put(p, cap, n, "?"); /* lazy: the same language */
    }
}

static void gen_seq(char *p, size_t cap, size_t *n, int depth) {
    if (pick(6) == 0) put(p, cap, n, "^");
    const int atoms = pick(4);
    for (int i = 0; i < atoms; i++) gen_atom(p, cap, n, depth);
    if (pick(6) == 0) put(p, cap, n, "$");
}

static void gen_alt(char *p, size_t cap, size_t *n, int depth) {
    gen_seq(p, cap, n, depth);
    while (pick(4) == 0) {
        put(p, cap, n, "|");
        gen_seq(p, cap, n, depth);
    }
}

/* pat compiled by PCRE2 with ECMAScript's semantics for these patterns; NULL when it refuses it. */
static pcre2_code *pcre(const char *pat) {
    int ecode;
    PCRE2_SIZE eoff;
    return pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ecode, &eoff, NULL);
}

/* pat compiled by both; NULL when either refuses it (why says which), *re NULL too. */
static kn_dfa *both(const char *pat, pcre2_code **re, char *why, size_t cap) {
    kn_dfa *d = kn_dfa_regex(pat, why, cap);
    *re = pcre(pat);
    if (*re && d) return d;
    if (d) snprintf(why, cap, "PCRE2 refuses it");
    kn_dfa_free(d);
    pcre2_code_free(*re);
    *re = NULL;
    return NULL;
}

static bool pcre_finds(pcre2_code *re, pcre2_match_data *md, const char *s, size_t n) {
    return pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* kn_sort_u64 against qsort: sizes around the insertion sort's cut (64) and large ones; values that
 * differ in one byte only, in the low bytes, in scattered bytes, in the top bit, and all equal. */
static void test_sort_u64(void) {
    static const size_t sizes[] = {0, 1, 2, 63, 64, 65, 1000, 100000};
    static const uint64_t masks[] = {0xFF00, 0xFFFFF, 0xFF00FF00FF00FF00ull, 0x80000000000000FFull, 0, ~0ull};
    uint64_t *v = malloc(100000 * sizeof *v), *w = malloc(100000 * sizeof *w), *tmp = malloc(100000 * sizeof *tmp);
    CHECK(v && w && tmp);
    for (size_t si = 0; v && w && tmp && si < sizeof sizes / sizeof *sizes; si++)
        for (size_t mi = 0; mi < sizeof masks / sizeof *masks; mi++) {
            const size_t n = sizes[si];
            for (size_t i = 0; i < n; i++) {
                const uint64_t r = (uint64_t)next() << 32 | next();
                v[i] = w[i] = (0x0123456789ABCDEFull & ~masks[mi]) | (r & masks[mi]);
            }
            kn_sort_u64(v, n, tmp);
            qsort(w, n, sizeof *w, cmp_u64);
            CHECKF(!memcmp(v, w, n * sizeof *v), "n %zu, mask %016llx", n, (unsigned long long)masks[mi]);
        }
    free(v);
    free(w);
    free(tmp);
}

/* Every string of up to max_len characters of alpha[0..n_alpha) (code points): the automaton accepts
 * it exactly when PCRE2 finds the pattern in it. Returns the number of strings that disagree (the
 * first few printed). */
static int compare_over(const char *pat, const kn_dfa *d, pcre2_code *re, pcre2_match_data *md, const uint32_t *alpha,
                        int n_alpha, int max_len) {
    int bad = 0;
    char s[64];
    for (int len = 0; len <= max_len; len++) {
        int total = 1;
        for (int i = 0; i < len; i++) total *= n_alpha;
        for (int x = 0; x < total; x++) {
            size_t n = 0;
            for (int i = 0, v = x; i < len; i++, v /= n_alpha)
                n += kn_utf8_encode(alpha[v % n_alpha], (uint8_t *)s + n);
            const bool want = pcre_finds(re, md, s, n);
            const bool got = kn_dfa_match(d, s, n);
            if (want != got && bad++ < 3)
                printf("  /%s/ on \"%.*s\": PCRE2 %s, kiln %s\n", pat, (int)n, s, want ? "matches" : "does not",
                       got ? "accepts" : "rejects");
        }
    }
    return bad;
}

/* Every string of up to 5 letters of the alphabet, as compare_over. */
static int compare(const char *pat, const kn_dfa *d, pcre2_code *re, pcre2_match_data *md) {
    return compare_over(pat, d, re, md, ALPHA_CP, 5, 5);
}

/* Each of pats[0..n) compiles and agrees with PCRE2 on every string of up to max_len characters of
 * alpha[0..n_alpha). */
static void check_patterns(const char *const *pats, size_t n, const uint32_t *alpha, int n_alpha, int max_len) {
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    for (size_t i = 0; i < n; i++) {
        pcre2_code *re;
        char why[256];
        kn_dfa *d = both(pats[i], &re, why, sizeof why);
        CHECKF(d, "/%s/: %s", pats[i], why);
        CHECKF(!d || compare_over(pats[i], d, re, md, alpha, n_alpha, max_len) == 0, "/%s/ disagrees with PCRE2",
               pats[i]);
        kn_dfa_free(d);
        pcre2_code_free(re);
    }
    pcre2_match_data_free(md);
}

static void test_vs_pcre2(void) {
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    int compared = 0, failed = 0, skipped = 0;
    for (int i = 0; i < 3000; i++) {
        char pat[256] = {0};
        size_t n = 0;
        gen_alt(pat, sizeof pat, &n, 2);
        pcre2_code *re = pcre(pat);
        char err[256];
        kn_dfa *d = kn_dfa_regex(pat, err, sizeof err);
        if (!re) { /* the generator writes only what both should take */
            CHECKF(false, "PCRE2 refuses /%s/", pat);
            kn_dfa_free(d);
            continue;
        }
        if (!d && (strstr(err, "automaton states") || strstr(err, "too costly"))) {
            skipped++; /* past a bound on the automaton: refused by design */
            pcre2_code_free(re);
            continue;
        }
        CHECKF(d != NULL, "/%s/: %s", pat, err);
        if (d) {
            const int bad = compare(pat, d, re, md);
            failed += bad > 0;
            CHECKF(bad == 0, "/%s/: %d strings disagree", pat, bad);
            compared++;
        }
        kn_dfa_free(d);
        pcre2_code_free(re);
    }
    printf("  %d patterns compared with PCRE2 on 3,906 strings each, %d disagreeing, %d past the automaton "
           "bounds\n",
           compared, failed, skipped);
    pcre2_match_data_free(md);
}

/* Long counted repetitions of groups and classes: copies of the atom's states, against PCRE2 on
 * strings around the counts. */
static void test_counted_copies(void) {
    static const char *const pats[] = {"^(?:ab|c){40}$", "^(a[bc]?){5,60}d$", "(?:[^a]b){30}$", "^([a-c]{2}|e){0,50}$"};
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
        pcre2_code *re;
        char why[256];
        kn_dfa *d = both(pats[i], &re, why, sizeof why);
        CHECKF(d, "/%s/: %s", pats[i], why);
        for (int t = 0; t < 2000; t++) {
            /* strings of repeated units, sometimes one unit altered */
            static const char *const units[] = {"ab", "c", "a", "ac", "bb", "d", "e", "aa"};
            char s[400];
            size_t n = 0;
            const int reps = pick(70);
            for (int k = 0; k < reps && n + 3 < sizeof s; k++) {
                const char *u = units[pick(3) == 0 ? pick(8) : (int)(i * 2 % 8)];
                memcpy(s + n, u, strlen(u));
                n += strlen(u);
            }
            if (pick(2)) s[n++] = 'd';
            const bool want = pcre_finds(re, md, s, n);
            CHECKF(kn_dfa_match(d, s, n) == want, "/%s/ on \"%.*s\": PCRE2 %d", pats[i], (int)n, s, want);
        }
        kn_dfa_free(d);
        pcre2_code_free(re);
    }
    pcre2_match_data_free(md);
}

/* Fixed patterns: assertions in odd places (the start state is not the state of the same NFA set
 * reached later: "$^" once accepted every string) and classes of many characters in any order. */
static void test_fixed(void) {
    static const char *const pats[] = {
        "$^", "^$", "$$", "^^", "(?:a|$)(e|^$)", "a|$^", "(^|b)(c|$)", "[edcba]+$", "^[ecaeb-dd]{2}[^edc]"};
    check_patterns(pats, sizeof pats / sizeof *pats, ALPHA_CP, 5, 5);
}

/* "^[c0 c1 ... c999]" + tail: a class of 1,000 two-byte characters (U+0100, U+0102, ...) apart. */
static char *big_class(const char *tail) {
    char *p = malloc(2 + 2 * 1000 + strlen(tail) + 2);
    if (!p) return NULL;
    size_t n = 0;
    p[n++] = '^', p[n++] = '[';
    for (int i = 0; i < 1000; i++) {
        const unsigned c = 0x100u + 2u * (unsigned)i;
        p[n++] = (char)(0xC0 | (c >> 6)), p[n++] = (char)(0x80 | (c & 0x3F));
    }
    p[n++] = ']';
    strcpy(p + n, tail);
    return p;
}

/* The automata's bounds: a class of 1,000 characters repeated 600 times is 600,000 transitions, past
 * KN_DFA_MAX_TRANS (refused, naming it); 200 times compiles (the construction's states also take the
 * gaps between the characters, to states that cannot accept, which trimming drops); under a maxLength of 5,000
 * (5,000,000 transitions, 7 s to refuse as a grammar too large before the bound) the intersection stops. */
static void test_bounds(void) {
    char err[256], *p = big_class("{600}$");
    kn_dfa *d = p ? kn_dfa_regex(p, err, sizeof err) : NULL;
    CHECKF(p && !d && strstr(err, "500000 transitions"), "%s", p ? err : "out of memory");
    free(p);
    p = big_class("{200}$");
    d = p ? kn_dfa_regex(p, err, sizeof err) : NULL;
    CHECKF(d, "%s", p ? err : "out of memory");
    char s[401];
    for (int i = 0; i < 200; i++) s[2 * i] = (char)0xC4, s[2 * i + 1] = (char)0x80; /* U+0100 */
    CHECK(kn_dfa_match(d, s, 400) && !kn_dfa_match(d, s, 398));
    kn_dfa_free(d);
    free(p);
    p = big_class("+$");
    d = p ? kn_dfa_regex(p, err, sizeof err) : NULL;
    kn_dfa *len = kn_dfa_length(0, 5000), *both_ = d && len ? kn_dfa_and(d, len) : NULL;
    CHECK(d && len && !both_ && kn_dfa_toobig());
    kn_dfa_free(d);
    kn_dfa_free(len);
    free(p);
}

/* Classes that cut a state's code points into many intervals, which the subset construction
 * follows once per distinct set of classes holding them (remembered up to 16 per state): letters
 * and digits of every script with a few ASCII characters, overlapping classes, and 21 staggered
 * classes (26 distinct sets in one state, past the memo), against PCRE2 on every string of up to
 * three characters from a sample of 14 (ASCII, Latin, Greek, Cyrillic, kana, CJK, an Arabic digit,
 * a combining mark, a space of another kind). */
static void test_many_intervals(void) {
    static const char *const pats[] = {
        "^[\\p{L}\\p{N} _-]{1,3}$",
        "^[\\P{L}\\p{N} _-]{1,2}\\P{Z}$",
        "^\\p{Lu}[\\p{L}\\p{M}' -]{0,2}$",
        "^(?:\\p{L}|\\p{N}x|[\\p{Ll}\\p{Nd}]y)+$",
        "[\\p{Lo}\\p{Nd}]{2}",
        "^(?:[a-e]0|[b-f]1|[c-g]2|[d-h]3|[e-i]4|[f-j]5|[g-k]6|[h-l]7|[i-m]8|[j-n]9|[k-o]a|[l-p]b|[m-q]c|"
        "[n-r]d|[o-s]e|[p-t]f|[q-u]g|[r-v]h|[s-w]i|[t-x]j|[u-y]k)+$",
    };
    static const uint32_t sample[] = {'a',   'Z',   '5',    ' ',    '_',   '-',   0xE9,
                                      0x3A9, 0x436, 0x30AB, 0x4E00, 0x663, 0x301, 0x3000};
    check_patterns(pats, sizeof pats / sizeof *pats, sample, (int)(sizeof sample / sizeof *sample), 3);
    /* the staggered classes between two letters: the digit or letter after each must match */
    char err[256];
    kn_dfa *d = kn_dfa_regex(pats[sizeof pats / sizeof *pats - 1], err, sizeof err);
    CHECK(d && !kn_dfa_match(d, "a0k6u", 5) && kn_dfa_match(d, "a0k6uk", 6) && !kn_dfa_match(d, "a1", 2));
    kn_dfa_free(d);
}

/* \p{..} and \P{..} (the general categories, ECMAScript's u-flag syntax) against PCRE2 on every code
 * point below U+3000 and every 13th above (no surrogates: not text), one alone and in a class: every
 * category and subcategory by its short name; long names, aliases, "gc=", Any, ASCII and Assigned
 * against what PCRE2 10.42 writes for them. The tables are Unicode 14.0, as Debian's PCRE2 10.42.
 * Scripts and other properties are refused with a message. */
static void test_properties(void) {
    static const char *const gcs[] = {"L",  "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",  "Nd",
                                      "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",  "Sm",
                                      "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Co", "Cn"};
    static const struct {
        const char *kiln, *pcre;
    } pairs[] = {
        {"^\\P{L}$", NULL},
        {"^[\\p{N}\\p{Z}x]$", NULL},
        {"^[^\\p{L}]$", NULL},
        {"^\\P{Lu}$", NULL},
        {"^[\\p{Ll}\\p{Nd}]$", NULL},
        {"^\\p{LC}$", "^\\p{L&}$"},
        {"^\\p{Cased_Letter}$", "^\\p{L&}$"},
        {"^\\p{Uppercase_Letter}$", "^\\p{Lu}$"},
        {"^\\p{gc=Lo}$", "^\\p{Lo}$"},
        {"^\\p{General_Category=Decimal_Number}$", "^\\p{Nd}$"},
        {"^\\p{digit}$", "^\\p{Nd}$"},
        {"^\\p{punct}$", "^\\p{P}$"},
        {"^\\p{Combining_Mark}$", "^\\p{M}$"},
        {"^\\p{Any}$", "^\\p{Any}$"},
        {"^\\P{Assigned}$", "^\\p{Cn}$"},
        {"^\\p{ASCII}$", "^[\\x00-\\x7f]$"},
        {"^\\P{ASCII}$", "^[^\\x00-\\x7f]$"},
    };
    const size_t n_gc = sizeof gcs / sizeof *gcs, n_pairs = sizeof pairs / sizeof *pairs;
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    int bad = 0;
    for (size_t i = 0; i < n_gc + n_pairs; i++) {
        char k[64], p[64];
        if (i < n_gc) snprintf(k, sizeof k, "^\\p{%s}$", gcs[i]), snprintf(p, sizeof p, "%s", k);
        else
            snprintf(k, sizeof k, "%s", pairs[i - n_gc].kiln),
                snprintf(p, sizeof p, "%s", pairs[i - n_gc].pcre ? pairs[i - n_gc].pcre : k);
        char why[256];
        kn_dfa *d = kn_dfa_regex(k, why, sizeof why);
        pcre2_code *re = pcre(p);
        CHECKF(d && re, "/%s/: %s", k, d ? "PCRE2 refuses it" : why);
        for (uint32_t c = 0; d && re && c <= KN_CP_MAX; c += c < 0x3000 ? 1 : 13) {
            if (c >= 0xD800 && c <= 0xDFFF) continue;
            uint8_t s[4];
            const size_t n = kn_utf8_encode(c, s);
            if (kn_dfa_match(d, (const char *)s, n) != pcre_finds(re, md, (const char *)s, n) && bad++ < 5)
                printf("  /%s/ on U+%04X: PCRE2 %d\n", k, c, pcre_finds(re, md, (const char *)s, n));
        }
        kn_dfa_free(d);
        pcre2_code_free(re);
    }
    CHECKF(bad == 0, "%d code points disagree", bad);
    pcre2_match_data_free(md);
    char err[256];
    kn_dfa *l = kn_dfa_regex("^\\p{Letter}\\P{Mark}$", err, sizeof err);
    CHECKF(l, "%s", err);
    CHECK(kn_dfa_match(l, "a1", 2) && kn_dfa_match(l, "\xc3\xa9x", 3) && !kn_dfa_match(l, "1a", 2) &&
          !kn_dfa_match(l, "e\xcc\x81", 3)); /* e and a combining acute: a mark */
    kn_dfa_free(l);
    CHECK(!kn_dfa_regex("\\p{Script=Greek}", err, sizeof err) && strstr(err, "scripts"));
    CHECK(!kn_dfa_regex("\\p{scx=Latn}", err, sizeof err) && strstr(err, "scripts"));
    static const char *const refused[] = {"\\p{Alphabetic}", "\\p{lu}",  "\\p{gc=Any}",     "\\p{Greek}",
                                          "\\p{}",           "\\p{gc=}", "\\p{L}\\p{Emoji}"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        CHECKF(!kn_dfa_regex(refused[i], err, sizeof err) && strstr(err, "unsupported Unicode property"), "%s: %s",
               refused[i], err);
    CHECK(!kn_dfa_regex("a\\p", err, sizeof err) && strstr(err, "need a {name}"));
}

int main(void) {
    RUN(test_cset_add);
    RUN(test_sort_u64);
    RUN(test_fixed);
    RUN(test_vs_pcre2);
    RUN(test_counted_copies);
    RUN(test_bounds);
    RUN(test_properties);
    RUN(test_many_intervals);
    return kt_summary();
}
