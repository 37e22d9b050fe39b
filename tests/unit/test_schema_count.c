/*
 * test_schema_count.c - strings with a pattern or format and a length range (schema_dfa_len.c: a
 * counter beside the automaton, or the product where guards cannot be exact), against references:
 *   - random patterns over {a, b, c} with random minLength / maxLength: every string up to eight
 *     characters accepted exactly when PCRE2 finds the pattern and the length is in range;
 *   - the matcher's invariant on the same grammars: every state reached (over all 256 bytes) can
 *     still be completed, so constrained generation never walks into a dead end;
 *   - formats with lengths users write (Pydantic's HttpUrl: uri, 1..2083; email with 254; the
 *     hostname's own 253): exact (no approximation reported), and the bounds hold at the edge;
 *   - item counts past the repetition limit (minItems / maxItems above 10,000) at their edges.
 */
#include "harness.h"
#include "sample/grammar_prog.h"
#include "sample/schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define ALPHA    "abc"
#define MAX_ENUM 8 /* strings up to this length are all checked */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* A random regex over {a, b, c} into out (depth-bounded). */
static void gen(char *out, size_t cap, int depth) {
    size_t k = strlen(out);
    if (k + 40 >= cap) return;
    unsigned r = depth > 2 ? rnd(3) : rnd(9);
    switch (r) {
        case 0: strcat(out, (const char *[]){"a", "b", "c"}[rnd(3)]); break;
        case 1: strcat(out, "[ab]"); break;
        case 2: strcat(out, "[bc]"); break;
        case 3:
        case 4:
            gen(out, cap, depth + 1);
            gen(out, cap, depth + 1);
            break;
        case 5:
            strcat(out, "(");
            gen(out, cap, depth + 1);
            strcat(out, "|");
            gen(out, cap, depth + 1);
            strcat(out, ")");
            break;
        default: {
            strcat(out, "(");
            gen(out, cap, depth + 1);
            static const char *ops[] = {")*", ")+", ")?", "){2}", "){1,3}", "){3,}", "){0,2}"};
            strcat(out, ops[rnd(7)]);
        }
    }
}

/* The grammar's state after the opening quote and the text s[0..n). */
static int32_t walk(kn_gstore *st, int32_t q, const char *s, size_t n) {
    for (size_t i = 0; i < n && q != KN_GS_DEAD; i++) q = kn_gstore_step(st, q, (uint8_t)s[i]);
    return q;
}

/* Every string over ALPHA up to MAX_ENUM characters: accepted by the grammar exactly when the
 * reference says so. A depth-first walk sharing the store's states between prefixes. */
static bool agree(kn_gstore *st, int32_t q, char *buf, size_t n, pcre2_code *re, pcre2_match_data *md, long lo, long hi,
                  char *why, size_t cap) {
    int32_t end = q == KN_GS_DEAD ? KN_GS_DEAD : kn_gstore_step(st, q, '"');
    bool got = end != KN_GS_DEAD && kn_gstore_accepting(st, end);
    bool want = pcre2_match(re, (PCRE2_SPTR)buf, n, 0, 0, md, NULL) >= 0 && (long)n >= lo && (long)n <= hi;
    if (got != want) {
        snprintf(why, cap, "\"%.*s\": grammar %s, reference %s", (int)n, buf, got ? "accepts" : "rejects",
                 want ? "accepts" : "rejects");
        return false;
    }
    if (n == MAX_ENUM) return true;
    for (const char *a = ALPHA; *a; a++) {
        buf[n] = *a;
        int32_t next = q == KN_GS_DEAD ? KN_GS_DEAD : kn_gstore_step(st, q, (uint8_t)*a);
        if (!agree(st, next, buf, n + 1, re, md, lo, hi, why, cap)) return false;
    }
    return true;
}

/* Whether every state the grammar's store reaches from its start (over every byte, up to max_states
 * states) can reach an accepting one: no dead ends. *n_states: how many were explored. */
static bool completable(const kiln_grammar *g, int max_states, int *n_states) {
    kn_gstore *st = NULL;
    if (kn_gstore_new(g, (size_t)256 << 20, &st)) return false;
    int32_t *succ = malloc((size_t)max_states * 256 * sizeof *succ);
    bool *good = calloc((size_t)max_states, 1);
    bool ok = succ && good;
    int32_t start = kn_gstore_start(st);
    int n = 0;
    if (ok && start >= 0) {
        /* states are numbered densely as they are created, so explore id order */
        for (int32_t q = 0; ok && q < max_states && q < ((const kn_gstore_head *)(const void *)st)->n_states; q++, n++)
            for (int b = 0; b < 256; b++) {
                int32_t t = kn_gstore_step(st, q, (uint8_t)b);
                succ[(size_t)q * 256 + (size_t)b] = t;
                if (t == KN_GS_DEAD && kn_gstore_failed(st)) ok = false;
            }
        for (int q = 0; q < n; q++) good[q] = kn_gstore_accepting(st, q);
        for (bool changed = true; ok && changed;) {
            changed = false;
            for (int q = n - 1; q >= 0; q--) {
                if (good[q]) continue;
                for (int b = 0; b < 256 && !good[q]; b++) {
                    int32_t t = succ[(size_t)q * 256 + (size_t)b];
                    if (t >= 0 && t < n && good[t]) good[q] = changed = true;
                }
            }
        }
        for (int q = 0; ok && q < n; q++) {
            bool leaves = false; /* a state whose successors were not all explored is not judged */
            for (int b = 0; b < 256; b++) leaves |= succ[(size_t)q * 256 + (size_t)b] >= n;
            if (!good[q] && !leaves) ok = false;
        }
    }
    *n_states = n;
    free(succ);
    free(good);
    kn_gstore_free(st);
    return ok;
}

static kiln_grammar *compile_schema(const char *schema) {
    kiln_grammar_params p = kiln_grammar_default_params();
    p.kind = KILN_GRAMMAR_JSON_SCHEMA;
    kiln_grammar *g = NULL;
    return kiln_grammar_compile(schema, strlen(schema), &p, &g) ? NULL : g;
}

/* Checks the string schema of pattern pat (anchored, over ALPHA) with lengths lo..hi against the
 * references; counts in *counted whether it took a counter, in *empty whether no string exists.
 * Returns false with why[] filled on a difference. */
static bool check_one(const char *pat, long lo, long hi, pcre2_match_data *md, int *counted, int *empty, char *why,
                      size_t cap) {
    char schema[700];
    snprintf(schema, sizeof schema, "{\"type\":\"string\",\"pattern\":\"%s\",\"minLength\":%ld,\"maxLength\":%ld}", pat,
             lo, hi);
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &ecode, &eoff, NULL);
    if (!re) return snprintf(why, cap, "PCRE2 refuses %s", pat), false;
    kiln_grammar *g = compile_schema(schema);
    bool ok = true;
    char buf[MAX_ENUM + 1];
    if (!g) { /* no string at all: the reference must agree that none up to hi matches */
        (*empty)++;
        for (long n = lo; n <= hi && n <= MAX_ENUM && ok; n++) /* every string of length n */
            for (long code = 0; ok && code < (long)pow(3, (double)n); code++) {
                long c = code;
                for (long i = 0; i < n; i++, c /= 3) buf[i] = ALPHA[c % 3];
                ok = pcre2_match(re, (PCRE2_SPTR)buf, (size_t)n, 0, 0, md, NULL) < 0;
            }
        if (!ok)
            snprintf(why, cap, "%s did not compile (%s) but \"%.*s\" matches", schema, kn_error_msg(), (int)hi, buf);
        pcre2_code_free(re);
        return ok;
    }
    *counted += strstr(kiln_grammar_gbnf(g), "@count") != NULL;
    kn_gstore *st = NULL;
    char diff[160] = "";
    int ns = 0;
    if (kn_gstore_new(g, 0, &st) == KILN_OK) {
        ok = agree(st, walk(st, kn_gstore_start(st), "\"", 1), buf, 0, re, md, lo, hi, diff, sizeof diff);
        kn_gstore_free(st);
    }
    if (!ok) snprintf(why, cap, "%s: %s", schema, diff);
    else if (!completable(g, 4000, &ns)) ok = false, snprintf(why, cap, "%s: a state cannot be completed", schema);
    kiln_grammar_free(g);
    pcre2_code_free(re);
    return ok;
}

static void test_random_patterns(void) {
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    int counted = 0, empty = 0;
    char why[900];
    /* lengths with gaps between a state's completions wider than maxLength - minLength: guards
     * cannot be exact there (after "bbc" with 3 characters, none of 0 or 5 more fits 6..7) */
    static const struct {
        const char *pat;
        long lo, hi;
    } fixed[] = {
        {"^(b|bb|bbb|bbbb)c(aaaaa)?$", 6, 7},
        {"^(a{5})*b?$", 6, 8},
        {"^(ab|c)*$", 0, 5},
        {"^a*$", 3, 3},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(fixed); i++)
        CHECKF(check_one(fixed[i].pat, fixed[i].lo, fixed[i].hi, md, &counted, &empty, why, sizeof why), "%s", why);
    counted = empty = 0;
    for (int round = 0; round < 150; round++) {
        char pat[512] = "^";
        gen(pat, sizeof pat - 2, 0);
        strcat(pat, "$");
        long lo = rnd(4) ? (long)rnd(5) : 0, hi = lo + (long)rnd(12);
        CHECKF(check_one(pat, lo, hi, md, &counted, &empty, why, sizeof why), "%s", why);
    }
    pcre2_match_data_free(md);
    printf("  150 random schemas: %d counted, %d with no string\n", counted, empty);
    CHECK(counted > 75);
}

/* A JSON string of n characters: prefix, then fill up to n, then suffix. */
static char *text_of(const char *prefix, char fill, const char *suffix, size_t n) {
    size_t a = strlen(prefix), c = strlen(suffix);
    char *s = malloc(n + 3);
    if (!s || n < a + c) return free(s), NULL;
    s[0] = '"';
    memcpy(s + 1, prefix, a);
    memset(s + 1 + a, fill, n - a - c);
    memcpy(s + 1 + n - c, suffix, c);
    s[n + 1] = '"', s[n + 2] = 0;
    return s;
}

static bool accepts_n(const kiln_grammar *g, const char *prefix, char fill, const char *suffix, size_t n) {
    char *s = text_of(prefix, fill, suffix, n);
    bool ok = s && kiln_grammar_accepts(g, s, strlen(s));
    free(s);
    return ok;
}

static void test_formats_with_lengths(void) {
    static const struct {
        const char *schema, *prefix, *suffix;
        char fill;
        size_t max; /* longest accepted; max + 1 rejected */
        bool host;  /* a hostname: labels of 50 characters */
    } cases[] = {
        {"{\"type\":\"string\",\"format\":\"uri\",\"minLength\":1,\"maxLength\":2083}", "https://example.com/", "", 'p',
         2083, false},
        {"{\"type\":\"string\",\"format\":\"email\",\"maxLength\":254}", "", "@example.com", 'a', 254, false},
        {"{\"type\":\"string\",\"format\":\"uri-reference\",\"maxLength\":300}", "/a/", "?q", 'b', 300, false},
        /* plain strings past the repetition limit of 10,000 */
        {"{\"type\":\"string\",\"maxLength\":65535}", "", "", 'a', 65535, false},
        {"{\"type\":\"string\",\"minLength\":20000,\"maxLength\":20001}", "", "", 'a', 20001, false},
        /* the hostname's own 253 characters, and a user's shorter bound */
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "", "", 'x', 253, true},
        {"{\"type\":\"string\",\"format\":\"hostname\",\"maxLength\":100}", "", "", 'x', 100, true},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        char *gbnf = NULL;
        kn_schema_info info;
        const char *sc = cases[i].schema;
        CHECKF(kn_schema_to_gbnf_info(sc, strlen(sc), false, &gbnf, &info) == KILN_OK, "%s", kn_error_msg());
        bool counted = gbnf && strstr(gbnf, "@count");
        free(gbnf);
        CHECKF(!info.approx, "%s: %s", sc, info.approx_what);
        CHECKF(counted, "%s: no counter", sc);
        kiln_grammar *g = compile_schema(sc);
        CHECKF(g, "%s: %s", sc, kn_error_msg());
        size_t m = cases[i].max;
        if (cases[i].host) {         /* labels of at most 63 characters, dots between */
            char *s = malloc(m + 4); /* up to m + 1 characters, the quotes, the NUL */
            CHECK(s);
            for (size_t n = m; n <= m + 1; n++) {
                s[0] = '"';
                for (size_t k = 0; k < n; k++) s[1 + k] = k % 50 == 30 ? '.' : 'x';
                s[n + 1] = '"', s[n + 2] = 0;
                bool ok = kiln_grammar_accepts(g, s, strlen(s));
                if (ok != (n == m)) free(s), kiln_grammar_free(g);
                CHECKF(ok == (n == m), "%s: %zu characters %s", sc, n, ok ? "accepted" : "rejected");
            }
            s[0] = '"', memset(s + 1, 'x', 64), s[65] = '"', s[66] = 0; /* a label of 64 */
            bool long_label = kiln_grammar_accepts(g, s, strlen(s));
            s[64] = '"', s[65] = 0; /* of 63 */
            bool label63 = kiln_grammar_accepts(g, s, strlen(s));
            free(s);
            kiln_grammar_free(g);
            CHECK(!long_label && label63);
            continue;
        }
        bool at_max = accepts_n(g, cases[i].prefix, cases[i].fill, cases[i].suffix, m);
        bool over = accepts_n(g, cases[i].prefix, cases[i].fill, cases[i].suffix, m + 1);
        /* a short one; with a minLength above 1, the shortest and one under it */
        const char *mn = strstr(sc, "minLength\":");
        long minlen = mn ? atol(mn + 11) : 0;
        size_t lo = minlen > 1 ? (size_t)minlen : strlen(cases[i].prefix) + 12 + strlen(cases[i].suffix);
        bool short_ok = accepts_n(g, cases[i].prefix, cases[i].fill, cases[i].suffix, lo);
        bool under = minlen > 1 && accepts_n(g, cases[i].prefix, cases[i].fill, cases[i].suffix, lo - 1);
        kiln_grammar_free(g);
        CHECKF(at_max && !over && short_ok && !under, "%s: at the maximum %d, one over %d, short %d, one under %d", sc,
               at_max, over, short_ok, under);
    }
    /* guards cost the lengths times the automaton: past their bound (4,000,000), the product, here
     * too large: the length is reported as not enforced, in milliseconds */
    const char *huge = "{\"type\":\"string\",\"pattern\":\"^a*$\",\"maxLength\":16000000}";
    kiln_grammar *hg = compile_schema(huge);
    CHECK(hg && kiln_grammar_approximation(hg) && strstr(kiln_grammar_approximation(hg), "#/maxLength"));
    kiln_grammar_free(hg);
    /* propertyNames keep an automaton alone: a hostname's total length there is reported */
    const char *pn = "{\"type\":\"object\",\"propertyNames\":{\"format\":\"hostname\"}}";
    char *gbnf = NULL;
    kn_schema_info info;
    CHECK(kn_schema_to_gbnf_info(pn, strlen(pn), false, &gbnf, &info) == KILN_OK);
    free(gbnf);
    CHECK(info.approx && strstr(info.approx_what, "total length"));
}

/* A JSON array of n copies of item (caller frees). */
static char *array_of(const char *item, size_t n) {
    const size_t il = strlen(item);
    char *s = malloc(n * (il + 1) + 3);
    if (!s) return NULL;
    size_t k = 0;
    s[k++] = '[';
    for (size_t i = 0; i < n; i++) {
        if (i) s[k++] = ',';
        memcpy(s + k, item, il), k += il;
    }
    s[k++] = ']', s[k] = 0;
    return s;
}

/* Item counts past the repetition limit of 10,000: a counter beside the items, nested with the
 * counters of the items' own strings; next to prefixItems, still an approximation. */
static void test_array_counts(void) {
    static const struct {
        const char *schema, *item;
        size_t lo, hi; /* accepted counts; lo - 1 and hi + 1 rejected */
    } cases[] = {
        {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":10001,\"maxItems\":10003}", "7", 10001,
         10003},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"maxItems\":10005}", "\"ab\"", 0, 10005},
    };
    for (size_t i = 0; i < KN_ARRAY_LEN(cases); i++) {
        kiln_grammar *g = compile_schema(cases[i].schema);
        CHECKF(g && !kiln_grammar_approximation(g), "%s", cases[i].schema);
        /* the edges: hi accepted and hi + 1 rejected; with a minimum, lo too and lo - 1 rejected
         * (each check walks some 20,000 bytes, a state per count) */
        const size_t ns[] = {cases[i].hi, cases[i].hi + 1, cases[i].lo, cases[i].lo - 1};
        for (int k = 0; k < (cases[i].lo ? 4 : 2); k++) {
            char *t = array_of(cases[i].item, ns[k]);
            const bool got = t && kiln_grammar_accepts(g, t, strlen(t)), want = k % 2 == 0;
            free(t);
            if (got != want) kiln_grammar_free(g);
            CHECKF(got == want, "%s: %zu items %s", cases[i].schema, ns[k], got ? "accepted" : "rejected");
        }
        kiln_grammar_free(g);
    }
    /* the items' strings keep their own counts inside the array's */
    kiln_grammar *g = compile_schema(cases[1].schema);
    CHECK(g && !kiln_grammar_accepts(g, "[\"abcd\"]", 8) && kiln_grammar_accepts(g, "[\"ab\",\"\"]", 9));
    kiln_grammar_free(g);
    g = compile_schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"maxItems\":20000}");
    CHECK(g && kiln_grammar_approximation(g) && strstr(kiln_grammar_approximation(g), "#/maxItems"));
    kiln_grammar_free(g);
}

int main(void) {
    RUN(test_random_patterns);
    RUN(test_formats_with_lengths);
    RUN(test_array_counts);
    return kt_summary();
}
