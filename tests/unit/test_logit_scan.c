/*
 * test_logit_scan.c - the sampler's passes over a logits row (src/tensor/logit_scan.c):
 *   - the reference's contract on small rows: NaN read as -inf by the clean pass and skipped by the
 *     argmax, the first index of a tie (-0.0 equal to +0.0), -1 for a row of NaN, a strict bar;
 *   - the best set and every set this CPU runs (avx2, avx2vnni, avx512; NEON under qemu) against the
 *     reference: the cleaned row bit for bit (also in place), the count, the maximum (==), the index
 *     of the argmax and of the first value above bars taken from the row, over lengths around the
 *     vector widths and unrolls (0 .. 200) at unaligned starts, rows of ties, of NaN, of -inf, and a
 *     128k row with the maximum at its first, middle and last index.
 */
#include "harness.h"

#include "tensor/kernels.h"

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t urand32(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

static void test_ref_contract(void) {
    const float a[] = {NAN, -INFINITY, 1.0f, 3.0f, NAN, 3.0f, -2.0f};
    float w[7];
    int64_t c = -1;
    CHECK(kn_logits_clean_ref(a, w, 7, &c) == 3.0f && c == 4);
    CHECK(w[0] == -INFINITY && w[4] == -INFINITY && w[3] == 3.0f && w[6] == -2.0f);
    CHECK(kn_argmax_ref(a, 7) == 3); /* the first of the tie, NaN skipped */
    const float z[] = {-1.0f, -0.0f, 0.0f, -0.0f};
    CHECK(kn_argmax_ref(z, 4) == 1); /* -0.0 equals +0.0 */
    const float nans[] = {NAN, NAN, NAN};
    CHECK(kn_argmax_ref(nans, 3) == -1 && kn_argmax_ref(a, 0) == -1);
    const float ninf[] = {NAN, -INFINITY, -INFINITY};
    CHECK(kn_argmax_ref(ninf, 3) == 1); /* the first non-NaN */
    CHECK(kn_logits_clean_ref(ninf, w, 3, &c) == -INFINITY && c == 0);
    CHECK(kn_above_ref(a, 7, 1.0f) == 3 && kn_above_ref(a, 7, 3.0f) == 7 && kn_above_ref(a, 7, NAN) == 7);
    CHECK(kn_above_ref(a, 7, -INFINITY) == 2);
}

/* Row kind k of n values at x: random (with NaN, infinities, signed zeros and repeated values),
 * all one value, all NaN, all -inf, NaN and -inf mixed, small integers (many ties). */
static void fill(float *x, int64_t n, int k) {
    static const float special[] = {NAN, -INFINITY, INFINITY, 0.0f, -0.0f, 7.5f, -7.5f};
    for (int64_t i = 0; i < n; i++) {
        const uint32_t r = urand32();
        switch (k) {
            case 0: x[i] = r % 9 == 0 ? special[(r >> 8) % 7] : (float)((int32_t)(r >> 4) % 100000) / 1000.0f; break;
            case 1: x[i] = 2.5f; break;
            case 2: x[i] = NAN; break;
            case 3: x[i] = -INFINITY; break;
            case 4: x[i] = r % 2 ? NAN : -INFINITY; break;
            default: x[i] = (float)((int32_t)(r % 5) - 2) * (r & 64 ? 1.0f : -1.0f); break; /* ties, +-0 */
        }
    }
}

/* set against the reference on x[n]: clean (to a copy and in place), argmax, and above for a few bars. */
static int check_row(const kn_kernels *set, const float *x, int64_t n) {
    enum { MAXN = 131072 };
    static float w1[MAXN], w2[MAXN];
    int64_t c1 = -1, c2 = -2;
    const float m1 = kn_logits_clean_ref(x, w1, n, &c1), m2 = set->logits_clean(x, w2, n, &c2);
    if (c1 != c2 || !(m1 == m2) || memcmp(w1, w2, (size_t)n * sizeof *w1)) {
        printf("  %s clean n=%lld: count %lld vs %lld, max %g vs %g\n", set->name, (long long)n, (long long)c1,
               (long long)c2, m1, m2);
        return -1;
    }
    memcpy(w2, x, (size_t)n * sizeof *w2);
    if (set->logits_clean(w2, w2, n, &c2) != m1 || c2 != c1 || memcmp(w1, w2, (size_t)n * sizeof *w1)) {
        printf("  %s clean in place n=%lld\n", set->name, (long long)n);
        return -1;
    }
    const int64_t a1 = kn_argmax_ref(x, n), a2 = set->argmax(x, n);
    if (a1 != a2) {
        printf("  %s argmax n=%lld: %lld vs %lld\n", set->name, (long long)n, (long long)a1, (long long)a2);
        return -1;
    }
    for (int b = 0; b < 6; b++) {
        const float t = b == 0 ? -INFINITY : b == 1 ? NAN : n ? x[urand32() % n] : 0.0f;
        const int64_t i1 = kn_above_ref(x, n, t), i2 = set->above(x, n, t);
        if (i1 != i2) {
            printf("  %s above n=%lld t=%g: %lld vs %lld\n", set->name, (long long)n, t, (long long)i1, (long long)i2);
            return -1;
        }
    }
    return 0;
}

static int check_set(const kn_kernels *set) {
    enum { LONG = 128256 };
    static float x[LONG + 4];
    for (int k = 0; k < 6; k++)
        for (int64_t n = 0; n <= 200; n++)
            for (int off = 0; off < 4; off++) {
                fill(x, n + off, k);
                if (check_row(set, x + off, n)) return -1;
            }
    const int64_t at[] = {0, LONG / 2 + 3, LONG - 1}; /* the maximum first, inside, in the tail */
    for (int p = 0; p < 3; p++) {
        fill(x, LONG + 1, 0);
        for (int64_t i = 0; i <= LONG; i++)
            if (x[i] == INFINITY || x[i] == 7.5f) x[i] = 1.0f;
        x[1 + at[p]] = 200.0f;
        if (check_row(set, x + 1, LONG)) return -1;
    }
    return 0;
}

static void test_best_equals_ref(void) {
    const kn_kernels *best = kn_kernels_get(KN_KERNELS_AUTO);
    if (best->argmax == kn_argmax_ref) SKIP("kernel set %s uses the reference passes", best->name);
    printf("  kernel set %s\n", best->name);
    CHECK(check_set(best) == 0);
}

static void test_avx2_equals_ref(void) { kt_check_named_set("avx2", "logit passes", check_set); }
static void test_avx2vnni_equals_ref(void) { kt_check_named_set("avx2vnni", "logit passes", check_set); }
static void test_avx512_equals_ref(void) { kt_check_named_set("avx512", "logit passes", check_set); }

int main(void) {
    RUN(test_ref_contract);
    RUN(test_best_equals_ref);
    RUN(test_avx2_equals_ref);
    RUN(test_avx2vnni_equals_ref);
    RUN(test_avx512_equals_ref);
    return kt_summary();
}
