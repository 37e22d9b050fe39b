/*
 * test_schema_decimal.c - numbers under bounds that are not integers (schema_num.c compares the
 * fraction digits with the bound's), against exact decimal arithmetic: random minimum / maximum /
 * exclusive bounds with up to three fraction digits, with and without multipleOf 10^-m, and every
 * number of a grid (integer parts -25..25, no fraction or one to three fraction digits, trailing
 * zeros too) accepted exactly when its value is in range. No approximation may be reported.
 */
#include "harness.h"
#include "kiln.h"

#include <inttypes.h>

#define SCALE 10000 /* values in units of 10^-4: every number of the grid and every bound is exact */

static uint64_t rng = 0x2545f4914f6cdd1dull;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* A random decimal in (-21, 21) with up to three fraction digits, as text and as units. */
static void rnd_dec(char *t, size_t cap, int64_t *units) {
    const int ip = (int)rnd(21), fd = (int)rnd(4);
    int f = 0, p = 1;
    for (int i = 0; i < fd; i++) f = f * 10 + (int)rnd(10), p *= 10;
    const bool neg = rnd(2);
    if (fd) snprintf(t, cap, "%s%d.%0*d", neg ? "-" : "", ip, fd, f);
    else snprintf(t, cap, "%s%d", neg ? "-" : "", ip);
    *units = (neg ? -1 : 1) * ((int64_t)ip * SCALE + (fd ? (int64_t)f * (SCALE / p) : 0));
}

static kiln_grammar *compile(const char *schema) {
    kiln_grammar_params p = kiln_grammar_default_params();
    p.kind = KILN_GRAMMAR_JSON_SCHEMA;
    kiln_grammar *g = NULL;
    return kiln_grammar_compile(schema, strlen(schema), &p, &g) ? NULL : g;
}

static void test_random_bounds(void) {
    int compiled = 0, checked = 0;
    for (int round = 0; round < 160; round++) {
        char lt[32], ht[32];
        int64_t lu = 0, hu = 0;
        const bool has_lo = rnd(4) != 0, has_hi = rnd(4) != 0, lx = rnd(2), hx = rnd(2);
        rnd_dec(lt, sizeof lt, &lu);
        rnd_dec(ht, sizeof ht, &hu);
        const int m = (int)rnd(6) - 2; /* multipleOf 10^-m for m in 0..3; none below */
        char schema[256];
        int w = snprintf(schema, sizeof schema, "{\"type\":\"number\"");
        if (has_lo)
            w += snprintf(schema + w, sizeof schema - (size_t)w, ",\"%s\":%s", lx ? "exclusiveMinimum" : "minimum", lt);
        if (has_hi)
            w += snprintf(schema + w, sizeof schema - (size_t)w, ",\"%s\":%s", hx ? "exclusiveMaximum" : "maximum", ht);
        if (m >= 0)
            w += snprintf(schema + w, sizeof schema - (size_t)w, ",\"multipleOf\":%s",
                          (const char *[]){"1", "0.1", "0.01", "0.001"}[m]);
        snprintf(schema + w, sizeof schema - (size_t)w, "}");
        kiln_grammar *g = compile(schema);
        /* the reference's range is empty when no value of the grid's step fits; the grammar may then
         * fail to compile (no value at all) or admit values off the grid only */
        if (!g) continue;
        compiled++;
        CHECKF(!kiln_grammar_approximation(g), "%s: %s", schema, kiln_grammar_approximation(g));
        for (int ip = -25; ip <= 25; ip++)
            for (int fd = 0; fd <= 4; fd++) {
                const int count = fd == 0 ? 1 : fd == 1 ? 10 : fd == 2 ? 100 : fd == 3 ? 30 : 6;
                for (int k = 0; k < count; k++) {
                    int f = fd == 3   ? (int)rnd(1000)
                            : fd == 4 ? (int)rnd(100) * 100
                                      : k; /* 4 digits: a trailing zero pair */
                    if (ip == 0 && fd && f == 0 && rnd(2)) continue;
                    if (m == 0 && fd) continue; /* multipleOf 1: an integer, written without a fraction */
                    char t[40];
                    int64_t mag = (int64_t)abs(ip) * SCALE, p = 1;
                    for (int i = 0; i < fd; i++) p *= 10;
                    if (fd) mag += (int64_t)f * (SCALE / p);
                    /* negatives: "-0.x" for ip == 0 with a nonzero fraction; no "-0" of value zero */
                    bool neg = ip < 0 || (ip == 0 && fd && f && (k & 1));
                    if (neg && mag == 0) continue;
                    if (fd) snprintf(t, sizeof t, "%s%d.%0*d", neg ? "-" : "", abs(ip), fd, f);
                    else snprintf(t, sizeof t, "%s%d", neg ? "-" : "", abs(ip));
                    const int64_t v = neg ? -mag : mag;
                    bool want = true;
                    if (has_lo) want = want && (lx ? v > lu : v >= lu);
                    if (has_hi) want = want && (hx ? v < hu : v <= hu);
                    if (m >= 0) {
                        int64_t step = SCALE;
                        for (int i = 0; i < m; i++) step /= 10;
                        want = want && v % step == 0;
                    }
                    const bool got = kiln_grammar_accepts(g, t, strlen(t));
                    checked++;
                    if (got != want) kiln_grammar_free(g);
                    CHECKF(got == want, "%s: %s %s", schema, t, got ? "accepted" : "rejected");
                }
            }
        kiln_grammar_free(g);
    }
    printf("  %d schemas compiled, %d numbers checked\n", compiled, checked);
    CHECK(compiled > 100);
}

/* Bounds users write: a probability, a temperature, a price; and the approximation that remains
 * (a bound with more fraction digits than kiln compares). */
static void test_common_bounds(void) {
    kiln_grammar *g = compile("{\"type\":\"number\",\"minimum\":0,\"maximum\":1.5}");
    CHECK(g && !kiln_grammar_approximation(g));
    CHECK(kiln_grammar_accepts(g, "1.5", 3) && kiln_grammar_accepts(g, "1.50", 4) && kiln_grammar_accepts(g, "0.7", 3));
    CHECK(!kiln_grammar_accepts(g, "1.51", 4) && !kiln_grammar_accepts(g, "2", 1) &&
          !kiln_grammar_accepts(g, "1.6", 3));
    kiln_grammar_free(g);
    g = compile("{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"exclusiveMaximum\":0.9}");
    CHECK(g && !kiln_grammar_approximation(g));
    CHECK(kiln_grammar_accepts(g, "0.10001", 7) && kiln_grammar_accepts(g, "0.89", 4));
    CHECK(!kiln_grammar_accepts(g, "0.1", 3) && !kiln_grammar_accepts(g, "0.100", 5) &&
          !kiln_grammar_accepts(g, "0.9", 3) && !kiln_grammar_accepts(g, "0.05", 4));
    kiln_grammar_free(g);
    g = compile("{\"type\":\"number\",\"minimum\":0.01,\"multipleOf\":0.01}");
    CHECK(g && kiln_grammar_accepts(g, "0.01", 4) && kiln_grammar_accepts(g, "19.99", 5) &&
          !kiln_grammar_accepts(g, "0.005", 5) && !kiln_grammar_accepts(g, "0", 1));
    kiln_grammar_free(g);
    g = compile("{\"type\":\"number\",\"maximum\":1e-60}"); /* 60 fraction digits: widened, reported */
    CHECK(g && kiln_grammar_approximation(g) && strstr(kiln_grammar_approximation(g), "#/maximum"));
    kiln_grammar_free(g);
}

int main(void) {
    RUN(test_random_bounds);
    RUN(test_common_bounds);
    return kt_summary();
}
