/*
 * test_glu.c - the gated activations (kn_glu_fn, src/tensor/act.c), gate = act(gate) * up:
 *   - the reference against SiLU and tanh-GELU computed in double precision (a few ulp; GELU's
 *     cancellation for large negative inputs bounded in absolute terms);
 *   - the best set's and every set's this CPU runs (avx2, avx2vnni, avx512; NEON under qemu) against
 *     the reference bit for bit, over lengths around the vector widths (the tail goes to the
 *     reference) and values that reach every branch of the exponential: zeros of both signs, the
 *     clamp bounds, infinities, NaN, subnormals and ordinary magnitudes.
 */
#include "harness.h"

#include "tensor/kernels.h"

#include <stdint.h>

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double urand(void) { /* [0, 1) */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ULL) >> 11) * 0x1.0p-53;
}

/* Element i of a test vector: specials first, then values of mixed magnitude. */
static float value(int i) {
    static const float special[] = {0.0f,   -0.0f,   1.0f,     -1.0f,     86.9f,   -86.9f,   87.0f,  -87.0f,
                                    88.0f,  -88.0f,  88.8f,    -88.8f,    100.0f,  -100.0f,  1e30f,  -1e30f,
                                    1e-40f, -1e-40f, INFINITY, -INFINITY, NAN,     43.6f,    -43.6f, -44.0f,
                                    5.0f,   -5.0f,   -9.5f,    12.0f,     3.4e38f, -3.4e38f, 1e-20f, -1e-20f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    if (i < ns) return special[i];
    const double scale[] = {0.1, 1.0, 4.0, 20.0, 60.0};
    return (float)((urand() * 2.0 - 1.0) * scale[i % 5]);
}

static bool same_bits(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }

static void test_ref_vs_double(void) {
    double worst_silu = 0, worst_gelu = 0;
    for (int i = 0; i < 200000; i++) {
        const float g = (float)((urand() * 2.0 - 1.0) * (i % 2 ? 12.0 : 60.0)), u = (float)(urand() * 4.0 - 2.0);
        float a = g, b = g;
        kn_glu_ref(&a, &u, 1, false);
        kn_glu_ref(&b, &u, 1, true);
        const double gd = g, ud = u;
        const double silu = gd / (1.0 + exp(-gd)) * ud;
        const double gelu = 0.5 * gd * (1.0 + tanh(0.7978845608028654 * (gd + 0.044715 * gd * gd * gd))) * ud;
        /* SiLU: relative; GELU: relative, or absolute on the scale |g u| where 1 + tanh cancels */
        const double es = fabs(a - silu) / fmax(fabs(silu), 1e-30);
        const double eg = fabs(b - gelu) / (1e-5 * fabs(gelu) + 0x1p-21 * fabs(gd * ud) + 1e-30);
        worst_silu = fmax(worst_silu, es);
        worst_gelu = fmax(worst_gelu, eg);
    }
    printf("  largest difference from double: SiLU %.3g relative, GELU %.3g of its bound\n", worst_silu, worst_gelu);
    CHECK(worst_silu < 1e-6);
    CHECK(worst_gelu <= 1.0);
    /* the saturated ends: SiLU(g) = g for large g, 0 for very negative g; no infinity from a finite input */
    float g[4] = {100.0f, -100.0f, 1e30f, -1e30f}, u[4] = {1, 1, 1, 1};
    kn_glu_ref(g, u, 4, false);
    CHECK(g[0] == 100.0f && fabsf(g[1]) < 1e-30f && g[2] == 1e30f && fabsf(g[3]) < 1e-6f);
    float h[2] = {100.0f, -100.0f};
    kn_glu_ref(h, u, 2, true);
    CHECK(h[0] == 100.0f && h[1] == 0.0f);
}

/* kn_glu_fn of set against the reference over lengths 0 .. 70 at offsets 0 .. 3 (unaligned). */
static int check_set(const kn_kernels *set) {
    enum { MAXN = 74 };
    for (int act = 0; act < 2; act++)
        for (int n = 0; n <= 70; n++)
            for (int off = 0; off < 4; off++) {
                float g1[MAXN], g2[MAXN], u[MAXN];
                for (int i = 0; i < n + off; i++) {
                    g1[i] = g2[i] = value((i * 7 + n) % 97);
                    u[i] = i % 9 == 0 ? 0.0f : (float)(urand() * 6.0 - 3.0);
                }
                kn_glu_ref(g1 + off, u + off, n, act);
                set->glu(g2 + off, u + off, n, act);
                for (int i = 0; i < n + off; i++)
                    if (!same_bits(g1[i], g2[i])) {
                        printf("  %s %s n=%d off=%d element %d: %.9g vs %.9g\n", set->name, act ? "gelu" : "silu", n,
                               off, i, g1[i], g2[i]);
                        return -1;
                    }
            }
    return 0;
}

static void test_best_equals_ref(void) {
    const kn_kernels *best = kn_kernels_get(KN_KERNELS_AUTO);
    if (best->glu == kn_glu_ref) SKIP("kernel set %s uses the reference activation", best->name);
    printf("  kernel set %s\n", best->name);
    CHECK(check_set(best) == 0);
}

static void test_avx2_equals_ref(void) { kt_check_named_set("avx2", "gated activation", check_set); }
static void test_avx2vnni_equals_ref(void) { kt_check_named_set("avx2vnni", "gated activation", check_set); }
static void test_avx512_equals_ref(void) { kt_check_named_set("avx512", "gated activation", check_set); }

int main(void) {
    RUN(test_ref_vs_double);
    RUN(test_best_equals_ref);
    RUN(test_avx2_equals_ref);
    RUN(test_avx2vnni_equals_ref);
    RUN(test_avx512_equals_ref);
    return kt_summary();
}
