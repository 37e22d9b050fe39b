/*
 * test_sumexp.c - a softmax's normalizer (kn_sumexp_fn, src/tensor/sumexp.c), sum_i e^((x[i] - sub) *
 * scale) in double, and the exponentials it stores:
 *   - the reference against the sum computed with double exponentials, on vocabulary-sized rows of
 *     several spreads (relative 1e-6: each float exponential is within 2 ulp);
 *   - the best set's and every set's this CPU runs (avx2, avx2vnni, avx512; NEON under qemu) against
 *     the reference bit for bit, sum and stored exponentials, over lengths around the 16 lanes,
 *     unaligned starts, scales, a long row, and values that reach every branch of the exponential
 *     (NaN, infinities, the clamp bounds).
 */
#include "harness.h"

#include "tensor/kernels.h"

#include <stdint.h>

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static double urand(void) { /* [0, 1) */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ULL) >> 11) * 0x1.0p-53;
}

static void test_ref_vs_double(void) {
    enum { N = 128256 };
    float *x = malloc(N * sizeof *x);
    CHECK(x);
    const double spreads[] = {0.01, 1.0, 5.0, 30.0};
    double worst = 0;
    for (int si = 0; si < 4; si++) {
        float mx = -INFINITY;
        for (int i = 0; i < N; i++) {
            x[i] = (float)((urand() * 2 - 1) * spreads[si]);
            mx = x[i] > mx ? x[i] : mx;
        }
        double want = 0;
        for (int i = 0; i < N; i++) want += exp((double)x[i] - mx);
        const double got = kn_sumexp_ref(x, N, mx, 1.0f, NULL);
        worst = fmax(worst, fabs(got - want) / want);
    }
    free(x);
    printf("  largest relative difference from double exponentials: %.3g\n", worst);
    CHECK(worst < 1e-6);
    const float one[1] = {2.5f}, none[2] = {-INFINITY, NAN};
    float e[2] = {-1, -1};
    CHECK(kn_sumexp_ref(one, 1, 2.5f, 0.7f, e) == 1.0 && e[0] == 1.0f);
    CHECK(kn_sumexp_ref(none, 2, 0.0f, 1.0f, e) == 0.0 && e[0] == 0.0f && e[1] == 0.0f);
    CHECK(kn_sumexp_ref(one, 0, 0.0f, 1.0f, NULL) == 0.0);
    const float two[2] = {0.0f, -1.0f}; /* the scale: e^(-1 * 2) */
    CHECK(fabs(kn_sumexp_ref(two, 2, 0.0f, 2.0f, NULL) - (1.0 + exp(-2.0))) < 1e-6);
}

static float value(int i) {
    static const float special[] = {0.0f, -0.0f, NAN, -INFINITY, INFINITY, -87.0f, -86.9f, -88.0f, 88.0f, 100.0f};
    if (i % 13 == 0) return special[(i / 13) % 10];
    return (float)((urand() * 2 - 1) * 40.0);
}

static bool same(double a, double b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

/* set->sumexp against the reference, from x + off over n elements: the sum, and the stored
 * exponentials (when asked) bit for bit. */
static int check_one(const kn_kernels *set, const float *x, int n, float sub, float scale, bool store) {
    enum { LONG = 50021 };
    static float e1[LONG], e2[LONG];
    const double a = kn_sumexp_ref(x, n, sub, scale, store ? e1 : NULL);
    const double b = set->sumexp(x, n, sub, scale, store ? e2 : NULL);
    if (!same(a, b) || (store && memcmp(e1, e2, (size_t)n * sizeof *e1))) {
        printf("  %s n=%d sub=%g scale=%g store=%d: %.17g vs %.17g\n", set->name, n, sub, scale, store, a, b);
        return -1;
    }
    return 0;
}

/* set->sumexp against the reference over lengths 0 .. 70 at offsets 0 .. 3, and a long row. */
static int check_set(const kn_kernels *set) {
    enum { LONG = 50021 };
    static float x[LONG];
    const float scales[] = {1.0f, 1.25f, 0.5f, 3.0f};
    for (int n = 0; n <= 70; n++)
        for (int off = 0; off < 4; off++) {
            for (int i = 0; i < n + off; i++) x[i] = value(i * 7 + n);
            if (check_one(set, x + off, n, n % 3 ? 3.0f : 0.0f, scales[(n + off) % 4], (n + off) % 2)) return -1;
        }
    for (int i = 0; i < LONG; i++) x[i] = (float)((urand() * 2 - 1) * 20.0);
    return check_one(set, x + 1, LONG - 1, 20.0f, 1.0f, false) || check_one(set, x + 1, LONG - 1, 20.0f, 1.25f, true);
}

static void test_best_equals_ref(void) {
    const kn_kernels *best = kn_kernels_get(KN_KERNELS_AUTO);
    if (best->sumexp == kn_sumexp_ref) SKIP("kernel set %s uses the reference sum", best->name);
    printf("  kernel set %s\n", best->name);
    CHECK(check_set(best) == 0);
}

static void test_avx2_equals_ref(void) { kt_check_named_set("avx2", "log-softmax sum", check_set); }
static void test_avx2vnni_equals_ref(void) { kt_check_named_set("avx2vnni", "log-softmax sum", check_set); }
static void test_avx512_equals_ref(void) { kt_check_named_set("avx512", "log-softmax sum", check_set); }

int main(void) {
    RUN(test_ref_vs_double);
    RUN(test_best_equals_ref);
    RUN(test_avx2_equals_ref);
    RUN(test_avx2vnni_equals_ref);
    RUN(test_avx512_equals_ref);
    return kt_summary();
}
