/*
 * test_kernels_legacy.c - the SIMD kernels of the float formats (F32, F16, BF16) and the block formats of
 * 32 elements with one scale (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the table formats IQ4_NL, MXFP4, whose
 * E8M0 scales are also swept over every exponent on raw blocks), and the Q8_0 / Q8_1 activation
 * quantizers, against the scalar reference (kernel_check.h), for every kernel set this CPU can run: the
 * AVX2 set (built here from the reference set, so it is tested on AVX-512 machines too; with and without
 * AVX-VNNI) and the best set (AVX-512; also with its optional vdpbf16ps BF16 kernel). A set whose ISA the
 * CPU lacks is skipped.
 *
 * Tolerances, relative to |w| * |x| (the scale of the dot product):
 *   block formats  1e-6: the per-block integer sums are exact; only the fp32 accumulation of the
 *                  block terms differs from the reference (largest observed: 1.5e-7);
 *   F32, F16, exact BF16  1e-6: weights convert exactly to fp32; fp32 fma accumulation in 16 (8)
 *                  lanes vs the reference's double (largest observed: 1.5e-7 with AVX2);
 *   BF16 with vdpbf16ps  4e-3: the activations are rounded to bf16 (relative error <= 2^-9 each, so
 *                  the dot product is off by at most 2^-9 * sum|w_i x_i| <= 2^-9 |w| |x| ~ 2e-3;
 *                  largest observed: 2.5e-3 > e > 1.25e-3).
 * The quantizers must write the same bytes as the reference quantizers (a stricter check than
 * kernel_check.h's one step), also for odd lengths, zeros, huge and tiny values, infinities and NaN.
 */
#include "kernel_check.h"

#include "tensor/quant.h"

#include <float.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

/* Test hooks of the kernel files (not in kernels.h). */
bool kn__avx512_legacy_bf16_dot(kn_kernels *k, bool use_dot);
bool kn__avx2_legacy_vnni(kn_kernels *k, bool use_vnni);

#define TOL_INT      1e-6
#define TOL_FLOAT    1e-6
#define TOL_BF16_DOT 4e-3

/* ---- the kernel sets under test ---- */

static kn_kernels set_avx2, set_avx2_vnni, set_best, set_best_bf16;
static bool have_avx2, have_avx2_vnni, have_avx512, have_avx512_bf16;

static void make_sets(void) {
    const kn_cpu *c = kn_cpu_features();
    const kn_kernels *best = kn_kernels_get(KN_KERNELS_AUTO);
    have_avx2 = c->avx2 && c->fma && c->f16c;
    if (have_avx2) {
        set_avx2 = *kn_kernels_get(KN_KERNELS_REF);
        set_avx2.name = "avx2";
        kn_avx2_init_legacy(&set_avx2);
        set_avx2_vnni = set_avx2;
        set_avx2_vnni.name = "avx2+vnni";
        have_avx2_vnni = kn__avx2_legacy_vnni(&set_avx2_vnni, true);
        kn__avx2_legacy_vnni(&set_avx2, false);
    }
    have_avx512 = strcmp(best->name, "avx512") == 0;
    if (have_avx512) {
        set_best = *best;
        set_best_bf16 = *best;
        set_best_bf16.name = "avx512+bf16";
        have_avx512_bf16 = kn__avx512_legacy_bf16_dot(&set_best_bf16, true);
        kn__avx512_legacy_bf16_dot(&set_best, false);
    }
}

/* ---- GEMM tiles against the reference ---- */

static void check_type(const kn_kernels *set, bool have, const char *why, kn_dtype t, double tol) {
    if (!have) SKIP("%s", why);
    CHECKF(kc_check_type(set, t, tol) == 0, "%s %s", set->name, kn_type_traits_get(t)->name);
}

#define GEMM_TEST(SET, HAVE, WHY, TYPE, TOL)                                                                           \
    static void test_##SET##_##TYPE(void) { check_type(&set_##SET, HAVE, WHY, KN_##TYPE, TOL); }

#define NO_AVX2 "CPU lacks AVX2+FMA+F16C"
#define NO_VNNI "CPU lacks AVX-VNNI"
#define NO_512  "CPU lacks AVX-512 F/BW/VL/VNNI"
#define NO_BF16 "CPU lacks AVX512-BF16"

GEMM_TEST(avx2, have_avx2, NO_AVX2, F32, TOL_FLOAT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, F16, TOL_FLOAT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, BF16, TOL_FLOAT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, Q4_0, TOL_INT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, Q4_1, TOL_INT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, Q5_0, TOL_INT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, Q5_1, TOL_INT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, Q8_0, TOL_INT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, IQ4_NL, TOL_INT)
GEMM_TEST(avx2, have_avx2, NO_AVX2, MXFP4, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, Q4_0, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, Q4_1, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, Q5_0, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, Q5_1, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, Q8_0, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, IQ4_NL, TOL_INT)
GEMM_TEST(avx2_vnni, have_avx2_vnni, NO_VNNI, MXFP4, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, F32, TOL_FLOAT)
GEMM_TEST(best, have_avx512, NO_512, F16, TOL_FLOAT)
GEMM_TEST(best, have_avx512, NO_512, BF16, TOL_FLOAT)
GEMM_TEST(best_bf16, have_avx512_bf16, NO_BF16, BF16, TOL_BF16_DOT)
GEMM_TEST(best, have_avx512, NO_512, Q4_0, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, Q4_1, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, Q5_0, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, Q5_1, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, Q8_0, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, IQ4_NL, TOL_INT)
GEMM_TEST(best, have_avx512, NO_512, MXFP4, TOL_INT)

/* MXFP4 on raw blocks: every E8M0 exponent 0..252 (subnormal scales e <= 1 included; above, 12 times the
 * scale is no finite fp32), four rows of 5 blocks at a time (row r all at exponent e0 + r, random
 * nibbles) against four random Q8_0 activation rows (small scales where the weights are huge, so no sum
 * overflows); a 4x4 tile's outputs within TOL_INT of the reference relative to sum |w x| (dequantized),
 * each equal to its 1x1 call. */
static int mxfp4_exponents(const kn_kernels *set) {
    enum { NB = 5 };
    const int64_t n = 32 * NB;
    const size_t wrb = kn_row_bytes(KN_MXFP4, n), xrb = kn_row_bytes(KN_Q8_0, n);
    uint8_t w[4 * sizeof(kn_block_mxfp4) * NB], x[4 * sizeof(kn_block_q8_0) * NB];
    float wd[4 * 32 * NB], xd[4 * 32 * NB], o_ref[16], o[16], one;
    const kn_gemm_fn ref = kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), KN_MXFP4),
                     g = kn_kernels_gemm(set, KN_MXFP4);
    for (int e0 = 0; e0 <= 252; e0 += 4) {
        for (int r = 0; r < 4; r++) {
            kn_block_mxfp4 *b = (kn_block_mxfp4 *)(w + (size_t)r * wrb);
            kn_block_q8_0 *a = (kn_block_q8_0 *)(x + (size_t)r * xrb);
            for (int i = 0; i < NB; i++) {
                b[i].e = (uint8_t)(e0 + r < 252 ? e0 + r : 252);
                for (int k = 0; k < 16; k++) b[i].qs[k] = (uint8_t)(kc_gauss() * 1e3);
                a[i].d = kn_fp32_to_fp16(e0 > 200 ? 6e-8f : (float)(fabs(kc_gauss()) * 0.01 + 1e-4));
                for (int k = 0; k < 32; k++) a[i].qs[k] = (int8_t)(fmax(-127.0, fmin(127.0, kc_gauss() * 60.0)));
            }
            kn_mxfp4_to_float(b, wd + r * n, n);
            kn_q8_0_to_float(a, xd + r * n, n);
        }
        ref(n, w, wrb, 4, x, xrb, 4, o_ref, 4);
        g(n, w, wrb, 4, x, xrb, 4, o, 4);
        for (int t = 0; t < 4; t++)
            for (int r = 0; r < 4; r++) {
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[r * n + i] * xd[t * n + i]);
                g(n, w + (size_t)r * wrb, wrb, 1, x + (size_t)t * xrb, xrb, 1, &one, 1);
                if (!(fabs((double)o[t * 4 + r] - o_ref[t * 4 + r]) <= TOL_INT * mag) || one != o[t * 4 + r]) {
                    printf("  %s MXFP4 exponent %d (r=%d t=%d): %.9g, reference %.9g, 1x1 %.9g\n", set->name,
                           w[(size_t)r * wrb], r, t, o[t * 4 + r], o_ref[t * 4 + r], one);
                    return -1;
                }
            }
    }
    return 0;
}

static void check_exponents(const kn_kernels *set, bool have, const char *why) {
    if (!have) SKIP("%s", why);
    CHECK(mxfp4_exponents(set) == 0);
}
static void test_avx2_mxfp4_exponents(void) { check_exponents(&set_avx2, have_avx2, NO_AVX2); }
static void test_avx2_vnni_mxfp4_exponents(void) { check_exponents(&set_avx2_vnni, have_avx2_vnni, NO_VNNI); }
static void test_best_mxfp4_exponents(void) { check_exponents(&set_best, have_avx512, NO_512); }

/* ---- activation quantizers: the same bytes as the reference ---- */

/* Quantizes src (n elements) to type t with the set's quantizer and the reference one; both outputs
 * must be byte-identical, and the set's must not write past n / 32 blocks. Returns 0 or -1 (with a
 * message). */
static int quant_same(const kn_kernels *set, kn_dtype t, const float *src, int64_t n, const char *what) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const size_t bytes = kn_row_bytes(t, n / 32 * 32), guard = 64;
    uint8_t *a = malloc(bytes + guard), *b = malloc(bytes + guard);
    memset(a, 0xA5, bytes + guard);
    memset(b, 0xA5, bytes + guard);
    tr->from_float(src, a, n);
    kn_kernels_quantize(set, t)(src, b, n);
    int rc = 0;
    for (size_t i = 0; i < bytes + guard; i++) {
        if (a[i] != b[i]) {
            printf("  %s %s quantizer, %s, n=%lld: byte %zu (block %zu) is %d, reference %d%s\n", set->name, tr->name,
                   what, (long long)n, i, i / tr->block_bytes, b[i], a[i], i >= bytes ? " (past the row)" : "");
            rc = -1;
            break;
        }
    }
    free(a);
    free(b);
    return rc;
}

static int quant_checks(const kn_kernels *set, kn_dtype t) {
    enum { N = 4096 + 32 };
    float *x = malloc(sizeof(float) * N);
    int rc = 0;
    /* Gaussian rows of several magnitudes, odd lengths (a partial block is ignored) */
    const double scales[] = {1.0, 1e-3, 300.0, 6e4, 1e-6};
    const int64_t lens[] = {0, 1, 31, 32, 33, 64, 95, 96, 160, 4096, N};
    for (size_t si = 0; si < sizeof scales / sizeof scales[0] && !rc; si++) {
        for (int64_t i = 0; i < N; i++) x[i] = (float)(kc_gauss() * scales[si]);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0] && !rc; li++)
            rc = quant_same(set, t, x, lens[li], "gaussian");
    }
    /* blocks of special values: zeros, signed zeros, huge (the scale saturates), tiny (fp16 subnormal
     * and zero scales), infinities, NaN, halves (rounding ties), one outlier */
    for (int kind = 0; kind < 10 && !rc; kind++) {
        for (int64_t i = 0; i < 32 * 8; i++) {
            const float g = (float)kc_gauss();
            switch (kind) {
                case 0: x[i] = 0.0f; break;
                case 1: x[i] = (i & 1) ? -0.0f : 0.0f; break;
                case 2: x[i] = g * 1e30f; break;
                case 3: x[i] = g * FLT_MAX; break;
                case 4: x[i] = g * 1e-7f; break;
                case 5: x[i] = g * 1e-30f; break;
                case 6: x[i] = (i % 7 == 0) ? ((i & 8) ? INFINITY : -INFINITY) : g; break;
                case 7: x[i] = (i % 5 == 0) ? NAN : g; break;
                case 8: x[i] = (i % 32 == 0) ? 127.0f : (float)(i % 64) - 31.5f; break; /* d = 1: exact ties */
                default: x[i] = (i % 32 == 3) ? 1e4f : g; break;
            }
        }
        if (kind == 7)
            for (int64_t i = 32; i < 64; i++) x[i] = NAN; /* a block of only NaN */
        rc = quant_same(set, t, x, 32 * 8, "special values");
    }
    free(x);
    return rc;
}

static void check_quant(const kn_kernels *set, bool have, const char *why) {
    if (!have) SKIP("%s", why);
    CHECK(quant_checks(set, KN_Q8_0) == 0);
    CHECK(quant_checks(set, KN_Q8_1) == 0);
}

static void test_avx2_quantizers(void) { check_quant(&set_avx2, have_avx2, NO_AVX2); }
static void test_best_quantizers(void) { check_quant(&set_best, have_avx512, NO_512); }

/* The AVX2 block kernels with and without AVX-VNNI give the same integers, hence the same floats. */
static void test_avx2_vnni_identical(void) {
    if (!have_avx2_vnni) SKIP(NO_VNNI);
    const kn_dtype types[] = {KN_Q4_0, KN_Q4_1, KN_Q5_0, KN_Q5_1, KN_Q8_0, KN_IQ4_NL, KN_MXFP4};
    const int64_t n = 32 * 23;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const kn_type_traits *tr = kn_type_traits_get(types[ti]), *at = kn_type_traits_get(tr->vec_dot_type);
        const size_t wrb = kn_row_bytes(types[ti], n), arb = kn_row_bytes(tr->vec_dot_type, n);
        float *f = malloc(sizeof(float) * (size_t)n);
        uint8_t *w = malloc(wrb * 4), *x = malloc(arb * 4);
        for (int r = 0; r < 4; r++) {
            for (int64_t i = 0; i < n; i++) f[i] = (float)kc_gauss();
            tr->from_float(f, w + (size_t)r * wrb, n);
            for (int64_t i = 0; i < n; i++) f[i] = (float)kc_gauss();
            at->from_float(f, x + (size_t)r * arb, n);
        }
        float o1[16], o2[16];
        set_avx2.gemm[types[ti]](n, w, wrb, 4, x, arb, 4, o1, 4);
        set_avx2_vnni.gemm[types[ti]](n, w, wrb, 4, x, arb, 4, o2, 4);
        const int same = memcmp(o1, o2, sizeof o1) == 0;
        free(f);
        free(w);
        free(x);
        CHECKF(same, "%s", tr->name);
    }
}

/* ---- no reads outside the rows ---- */

/* A buffer of `bytes` placed so that it ends exactly at an inaccessible page (at_end) or starts exactly
 * after one: a kernel reading past the end (or before the start) of its rows faults. */
typedef struct guarded {
    uint8_t *map, *p;
    size_t map_len;
} guarded;

static int guarded_alloc(guarded *g, size_t bytes, bool at_end) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (bytes + page - 1) / page * page;
    g->map_len = body + 2 * page;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return -1;
    if (mprotect(g->map, page, PROT_NONE) || mprotect(g->map + page + body, page, PROT_NONE)) return -1;
    g->p = at_end ? g->map + page + body - bytes : g->map + page;
    return 0;
}

static void guarded_free(guarded *g) { munmap(g->map, g->map_len); }

/* Runs the set's GEMM for type t on rows that end at (or start after) an inaccessible page, for
 * every tile shape and several row lengths; a fault fails the test program. */
static int bounds_checks(const kn_kernels *set, kn_dtype t) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const kn_dtype at = tr->vec_dot_type;
    const int64_t lens[] = {32, 64, 96, 224, 256, 288, 1056, 4096};
    const int64_t flens[] = {1, 7, 15, 17, 33, 100};
    const bool blocks = tr->block_size > 1;
    const int nl = blocks ? (int)(sizeof lens / sizeof lens[0]) : (int)(sizeof flens / sizeof flens[0]);
    for (int li = 0; li < nl; li++) {
        const int64_t n = blocks ? lens[li] : flens[li];
        const size_t wrb = kn_row_bytes(t, n), arb = kn_row_bytes(at, n);
        float *f = malloc(sizeof(float) * (size_t)n);
        for (int end = 0; end < 2; end++) {
            guarded gw, gx;
            if (guarded_alloc(&gw, 4 * wrb, end) || guarded_alloc(&gx, 4 * arb, end)) return -1;
            for (int r = 0; r < 4; r++) {
                for (int64_t i = 0; i < n; i++) f[i] = (float)kc_gauss();
                tr->from_float(f, gw.p + (size_t)r * wrb, n);
                kn_type_traits_get(at)->from_float(f, gx.p + (size_t)r * arb, n);
            }
            float out[16];
            for (int nr = 1; nr <= 4; nr++)
                for (int nt = 1; nt <= 4; nt++) {
                    /* the last nr rows and nt tokens of the buffers */
                    kn_kernels_gemm(set, t)(n, gw.p + (size_t)(4 - nr) * wrb, wrb, nr, gx.p + (size_t)(4 - nt) * arb,
                                            arb, nt, out, 4);
                    kn_kernels_gemm(set, t)(n, gw.p, wrb, nr, gx.p, arb, nt, out, 4);
                }
            guarded_free(&gw);
            guarded_free(&gx);
        }
        free(f);
    }
    return 0;
}

static void check_bounds(const kn_kernels *set, bool have, const char *why) {
    if (!have) SKIP("%s", why);
    const kn_dtype types[] = {KN_F32,  KN_F16,  KN_BF16, KN_Q4_0,   KN_Q4_1,
                              KN_Q5_0, KN_Q5_1, KN_Q8_0, KN_IQ4_NL, KN_MXFP4};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) CHECK(bounds_checks(set, types[i]) == 0);
}

static void test_avx2_bounds(void) { check_bounds(&set_avx2, have_avx2, NO_AVX2); }
static void test_avx2_vnni_bounds(void) { check_bounds(&set_avx2_vnni, have_avx2_vnni, NO_VNNI); }
static void test_best_bounds(void) { check_bounds(&set_best, have_avx512, NO_512); }
static void test_best_bf16_bounds(void) { check_bounds(&set_best_bf16, have_avx512_bf16, NO_BF16); }

int main(void) {
    make_sets();
    RUN(test_best_Q4_0);
    RUN(test_best_Q8_0);
    RUN(test_best_Q4_1);
    RUN(test_best_Q5_0);
    RUN(test_best_Q5_1);
    RUN(test_best_IQ4_NL);
    RUN(test_best_MXFP4);
    RUN(test_best_mxfp4_exponents);
    RUN(test_best_F32);
    RUN(test_best_F16);
    RUN(test_best_BF16);
    RUN(test_best_bf16_BF16);
    RUN(test_avx2_Q4_0);
    RUN(test_avx2_Q8_0);
    RUN(test_avx2_Q4_1);
    RUN(test_avx2_Q5_0);
    RUN(test_avx2_Q5_1);
    RUN(test_avx2_IQ4_NL);
    RUN(test_avx2_MXFP4);
    RUN(test_avx2_mxfp4_exponents);
    RUN(test_avx2_F32);
    RUN(test_avx2_F16);
    RUN(test_avx2_BF16);
    RUN(test_avx2_vnni_Q4_0);
    RUN(test_avx2_vnni_Q8_0);
    RUN(test_avx2_vnni_Q4_1);
    RUN(test_avx2_vnni_Q5_0);
    RUN(test_avx2_vnni_Q5_1);
    RUN(test_avx2_vnni_IQ4_NL);
    RUN(test_avx2_vnni_MXFP4);
    RUN(test_avx2_vnni_mxfp4_exponents);
    RUN(test_avx2_vnni_identical);
    RUN(test_best_quantizers);
    RUN(test_avx2_quantizers);
    RUN(test_best_bounds);
    RUN(test_best_bf16_bounds);
    RUN(test_avx2_bounds);
    RUN(test_avx2_vnni_bounds);
    return kt_summary();
}
