/*
 * test_kernels_neon.c - the ARM64 NEON kernel sets against the scalar reference, bit for bit
 * (tolerance 0, kernel_check.h): every weight type's GEMM tile (outputs and the tile contract), the
 * Q8_0 / Q8_1 / Q8_K activation quantizers (identical bytes, also on special values) and attention
 * (F16 and F32 rows, and the Q8_0 and TQ4 KV formats).
 * Three sets are built here and tested wherever they can run:
 *   neon          the float formats, attention (F16, F32, Q8_0, TQ4) and the quantizers (every ARM64 CPU);
 *   neon+dotprod  plus the block formats, the low-bit and table ones (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4)
 *                 and the MLX 8-bit ones (MLX8, MLX8_F32) included (CPUs with the dotprod extension);
 *   neon+i8mm     with the 2x2 SMMLA kernels over most of those (CPUs with i8mm too).
 * The set the library chooses must be the best the CPU reports. On other CPUs every test is skipped
 * with the reason; `make test-arm64` runs this program under qemu-user (tests/cli/test_arm64.sh).
 */
#include "kernel_check.h"

#include "tensor/quant.h"

#include <float.h>
#include <stdbool.h>
#include <stddef.h>

static kn_kernels set_neon, set_dotprod, set_i8mm;
static bool have_neon, have_dotprod, have_i8mm;
static const char *why_neon = "not an ARM64 build", *why_dotprod = "not an ARM64 build",
                  *why_i8mm = "not an ARM64 build";

static void make_sets(void) {
    const kn_cpu *c = kn_cpu_features();
    set_neon = *kn_kernels_get(KN_KERNELS_REF);
    set_neon.name = "neon";
    have_neon = c->neon && kn_neon_init_float(&set_neon);
#if defined(__aarch64__)
    if (!c->neon) why_neon = why_dotprod = "CPU lacks NEON";
#endif
    set_dotprod = set_neon;
    if (have_neon && !c->dotprod) why_dotprod = "CPU lacks the dotprod extension";
    have_dotprod = have_neon && c->dotprod && kn_neon_init_dotprod(&set_dotprod);
    set_i8mm = set_dotprod;
    if (have_neon) why_i8mm = have_dotprod ? "CPU lacks the i8mm extension" : why_dotprod;
    have_i8mm = have_dotprod && c->i8mm && kn_neon_init_i8mm(&set_i8mm);
}

/* ---- GEMM tiles ---- */

static void check_type(const kn_kernels *set, bool have, const char *why, kn_dtype t) {
    if (!have) SKIP("%s", why);
    CHECKF(kc_check_type(set, t, 0.0) == 0, "%s %s", set->name, kn_type_traits_get(t)->name);
}

#define GEMM_TEST(SET, TYPE)                                                                                           \
    static void test_##SET##_##TYPE(void) { check_type(&set_##SET, have_##SET, why_##SET, KN_##TYPE); }
GEMM_TEST(neon, F32)
GEMM_TEST(neon, F16)
GEMM_TEST(neon, BF16)
GEMM_TEST(dotprod, Q4_0)
GEMM_TEST(dotprod, Q4_1)
GEMM_TEST(dotprod, Q5_0)
GEMM_TEST(dotprod, Q5_1)
GEMM_TEST(dotprod, Q8_0)
GEMM_TEST(dotprod, Q4_K)
GEMM_TEST(dotprod, Q5_K)
GEMM_TEST(dotprod, Q6_K)
GEMM_TEST(i8mm, Q4_0)
GEMM_TEST(i8mm, Q4_1)
GEMM_TEST(i8mm, Q5_1)
GEMM_TEST(i8mm, Q8_0)
GEMM_TEST(i8mm, Q4_K)
GEMM_TEST(i8mm, Q5_K)
GEMM_TEST(i8mm, Q6_K)

/* The block kernels on raw random bytes (any finite scale, any quant):
 * the integer paths must still equal the reference exactly. */
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd32(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

/* Makes the random scales of a weight block finite: the high byte of each fp16 scale loses the bits
 * that would make it inf/NaN (whose payloads are not the point), an fp32 one (MLX8_F32) the top exponent
 * bit; MXFP4's exponent byte goes to 100..155 (the products stay finite). */
static void finite_scales(kn_dtype t, uint8_t *blk) {
    switch (t) {
        case KN_Q6_K: blk[offsetof(kn_block_q6_k, d) + 1] &= 0x3B; break;
        case KN_Q2_K:
            blk[offsetof(kn_block_q2_k, d) + 1] &= 0x3B;
            blk[offsetof(kn_block_q2_k, dmin) + 1] &= 0x3B;
            break;
        case KN_Q3_K: blk[offsetof(kn_block_q3_k, d) + 1] &= 0x3B; break;
        case KN_MXFP4: blk[0] = (uint8_t)(100 + blk[0] % 56); break;
        case KN_MLX8_F32:
            blk[3] &= 0xBF;
            blk[7] &= 0xBF;
            break;
        case KN_Q4_0:
        case KN_Q5_0:
        case KN_Q8_0:
        case KN_IQ4_NL:
        case KN_IQ4_XS: blk[1] &= 0x3B; break;
        default: /* d and m (or dmin) first */
            blk[1] &= 0x3B;
            blk[3] &= 0x3B;
            break;
    }
}

/* Random rows of weight type t (nb blocks of 4 rows) and of its activation type (activation quants in
 * -127..127 as every quantizer writes them, true Q8_K bsums, finite scales); malloc'd. */
static void random_rows(kn_dtype t, int64_t n, uint8_t **wp, uint8_t **xp) {
    const kn_type_traits *tr = kn_type_traits_get(t), *at = kn_type_traits_get(tr->vec_dot_type);
    const size_t wrb = kn_row_bytes(t, n), arb = kn_row_bytes(tr->vec_dot_type, n);
    uint8_t *w = malloc(wrb * 4), *x = malloc(arb * 4);
    for (size_t i = 0; i < wrb * 4; i++) w[i] = (uint8_t)rnd32();
    for (size_t i = 0; i < arb * 4; i++) x[i] = (uint8_t)rnd32();
    for (int64_t b = 0; b < 4 * (n / tr->block_size); b++) finite_scales(t, w + (size_t)b * tr->block_bytes);
    for (int64_t b = 0; b < 4 * (n / at->block_size); b++) {
        uint8_t *blk = x + (size_t)b * at->block_bytes;
        if (tr->vec_dot_type == KN_Q8_K) {
            const float d = (float)(rnd32() % 1000) * 1e-5f;
            memcpy(blk, &d, sizeof d);
            kn_block_q8_k *q = (kn_block_q8_k *)(void *)blk;
            for (int i = 0; i < 256; i++)
                if (q->qs[i] == -128) q->qs[i] = -127;
            for (int j = 0; j < 16; j++) { /* the true sums: random ones could overflow int32 in Q6_K */
                int s = 0;
                for (int i = 0; i < 16; i++) s += q->qs[16 * j + i];
                q->bsums[j] = (int16_t)s;
            }
        } else {
            const size_t q0 = tr->vec_dot_type == KN_Q8_1 ? 4 : 2;
            blk[1] &= 0x3B;
            if (q0 == 4) blk[3] &= 0x3B;
            for (int i = 0; i < 32; i++)
                if (blk[q0 + i] == 0x80) blk[q0 + i] = 0x81;
        }
    }
    *wp = w;
    *xp = x;
}

static void check_raw(const kn_kernels *set, bool have, const char *why) {
    if (!have) SKIP("%s", why);
    const kn_dtype types[] = {KN_Q4_0, KN_Q4_1, KN_Q5_0,   KN_Q5_1,   KN_Q8_0,  KN_Q4_K, KN_Q5_K,    KN_Q6_K,
                              KN_Q2_K, KN_Q3_K, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4, KN_MLX8, KN_MLX8_F32};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const kn_type_traits *tr = kn_type_traits_get(types[ti]);
        const int64_t n = tr->block_size * 7;
        const size_t wrb = kn_row_bytes(types[ti], n), arb = kn_row_bytes(tr->vec_dot_type, n);
        uint8_t *w, *x;
        random_rows(types[ti], n, &w, &x);
        /* a full 4x4 tile and a 3x3 one (the odd row and token of the 2x2 kernels) */
        float ref[16], got[16];
        bool same = true;
        for (int k = 4; k >= 3; k--) {
            memset(ref, 0, sizeof ref);
            memset(got, 0, sizeof got);
            kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), types[ti])(n, w, wrb, k, x, arb, k, ref, 4);
            set->gemm[types[ti]](n, w, wrb, k, x, arb, k, got, 4);
            same = same && memcmp(ref, got, sizeof ref) == 0;
        }
        free(w);
        free(x);
        CHECKF(same, "%s %s on raw blocks", set->name, tr->name);
    }
}

/* The low-bit, table and MLX 8-bit formats (Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, MLX8, MLX8_F32), whose
 * reference quantizers are slow under emulation: reference-quantized rows at one size (kc_check_gemm: the activation
 * quantizer, a 4x4 tile, each output against its 1x1 call), then raw rows (every scale and code pattern) of 1, 2 and 5
 * blocks in every tile shape up to 4x4, bit-identical to the reference and to the 1x1 calls. */
static void check_lowbit(const kn_kernels *set, bool have, const char *why, kn_dtype t) {
    if (!have) SKIP("%s", why);
    const kn_type_traits *tr = kn_type_traits_get(t);
    CHECKF(kn_kernels_gemm(set, t) != kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), t), "%s has a %s kernel",
           set->name, tr->name);
    CHECKF(kc_check_gemm(set, t, 2 * tr->block_size, 4, 4, 0.0) == 0, "%s %s", set->name, tr->name);
    const int64_t nbs[] = {1, 2, 5};
    kn_gemm_fn ref = kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), t), g = kn_kernels_gemm(set, t);
    for (size_t k = 0; k < sizeof nbs / sizeof nbs[0]; k++) {
        const int64_t n = nbs[k] * tr->block_size;
        const size_t wrb = kn_row_bytes(t, n), arb = kn_row_bytes(tr->vec_dot_type, n);
        uint8_t *w, *x;
        random_rows(t, n, &w, &x);
        enum { LDO = 6 }; /* a leading dimension larger than the tile: entries r >= nr stay untouched */
        float out_ref[4 * LDO], out[4 * LDO], one;
        bool same = true;
        for (int nr = 1; nr <= 4 && same; nr++) {
            for (int nt = 1; nt <= 4 && same; nt++) {
                for (int i = 0; i < 4 * LDO; i++) out[i] = out_ref[i] = -12345.0f;
                ref(n, w, wrb, nr, x, arb, nt, out_ref, LDO);
                g(n, w, wrb, nr, x, arb, nt, out, LDO);
                same = memcmp(out, out_ref, sizeof out) == 0;
                for (int tt = 0; tt < nt && same; tt++) {
                    for (int r = 0; r < nr && same; r++) {
                        g(n, w + (size_t)r * wrb, wrb, 1, x + (size_t)tt * arb, arb, 1, &one, 1);
                        same = memcmp(&one, &out[tt * LDO + r], sizeof one) == 0;
                    }
                }
                if (!same)
                    printf("  %s %s raw, %lld blocks, tile %dx%d\n", set->name, tr->name, (long long)nbs[k], nr, nt);
            }
        }
        free(w);
        free(x);
        CHECK(same);
    }
}
#define LOWBIT_TEST(SET, TYPE)                                                                                         \
    static void test_##SET##_##TYPE(void) { check_lowbit(&set_##SET, have_##SET, why_##SET, KN_##TYPE); }
LOWBIT_TEST(dotprod, Q2_K)
LOWBIT_TEST(dotprod, Q3_K)
LOWBIT_TEST(dotprod, IQ4_NL)
LOWBIT_TEST(dotprod, IQ4_XS)
LOWBIT_TEST(dotprod, MXFP4)
LOWBIT_TEST(dotprod, MLX8)
LOWBIT_TEST(dotprod, MLX8_F32)
LOWBIT_TEST(i8mm, Q2_K)
LOWBIT_TEST(i8mm, Q3_K)
LOWBIT_TEST(i8mm, IQ4_NL)
LOWBIT_TEST(i8mm, IQ4_XS)
LOWBIT_TEST(i8mm, MXFP4)

static void test_dotprod_raw(void) { check_raw(&set_dotprod, have_dotprod, why_dotprod); }
static void test_i8mm_raw(void) { check_raw(&set_i8mm, have_i8mm, why_i8mm); }

/* ---- activation quantizers: the reference's bytes ---- */

static int quant_same(const kn_kernels *set, kn_dtype t, const float *src, int64_t n, const char *what) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const int64_t bs = tr->block_size;
    const size_t bytes = kn_row_bytes(t, n / bs * bs), guard = 64;
    uint8_t *a = malloc(bytes + guard), *b = malloc(bytes + guard);
    memset(a, 0xA5, bytes + guard);
    memset(b, 0xA5, bytes + guard);
    tr->from_float(src, a, n);
    kn_kernels_quantize(set, t)(src, b, n);
    int rc = 0;
    for (size_t i = 0; i < bytes + guard; i++) {
        if (a[i] != b[i]) {
            printf("  %s %s quantizer, %s, n=%lld: byte %zu (block %zu) is %d, reference %d\n", set->name, tr->name,
                   what, (long long)n, i, i / tr->block_bytes, b[i], a[i]);
            rc = -1;
            break;
        }
    }
    free(a);
    free(b);
    return rc;
}

static int quant_checks(const kn_kernels *set, kn_dtype t) {
    enum { N = 4096 + 256 };
    float *x = malloc(sizeof(float) * N);
    int rc = 0;
    const double scales[] = {1.0, 1e-3, 300.0, 6e4, 1e-6};
    const int64_t lens[] = {0, 1, 31, 32, 33, 96, 255, 256, 257, 512, 4096, N};
    for (size_t si = 0; si < sizeof scales / sizeof scales[0] && !rc; si++) {
        for (int64_t i = 0; i < N; i++) x[i] = (float)(kc_gauss() * scales[si]);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0] && !rc; li++)
            rc = quant_same(set, t, x, lens[li], "gaussian");
    }
    /* zeros, signed zeros, huge, tiny, infinities, NaN (also a whole block), exact ties, an outlier */
    for (int kind = 0; kind < 10 && !rc; kind++) {
        for (int64_t i = 0; i < 1024; i++) {
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
                case 8: x[i] = (i % 32 == 0) ? 127.0f : (float)(i % 64) - 31.5f; break;
                default: x[i] = (i % 32 == 3) ? 1e4f : g; break;
            }
        }
        if (kind == 7)
            for (int64_t i = 256; i < 512; i++) x[i] = NAN;
        rc = quant_same(set, t, x, 1024, "special values");
    }
    free(x);
    return rc;
}

static void test_neon_quantizers(void) {
    if (!have_neon) SKIP("%s", why_neon);
    CHECK(quant_checks(&set_neon, KN_Q8_0) == 0);
    CHECK(quant_checks(&set_neon, KN_Q8_1) == 0);
    CHECK(quant_checks(&set_neon, KN_Q8_K) == 0);
}

/* ---- attention: the reference's bits, F16 and F32 caches ---- */

static void test_neon_attention(void) {
    if (!have_neon) SKIP("%s", why_neon);
    const int hds[] = {8, 12, 24, 64, 100, 128};
    const int32_t lens[] = {1, 15, 16, 17, 40, 100};
    enum { MAXN = 100, MAXHD = 128 };
    uint8_t *k = malloc((size_t)MAXN * MAXHD * 4), *v = malloc((size_t)MAXN * MAXHD * 4);
    float q[KN_ATTEND_MAX_Q * MAXHD], o1[KN_ATTEND_MAX_Q * MAXHD], o2[KN_ATTEND_MAX_Q * MAXHD];
    for (int f16 = 0; f16 < 2; f16++) {
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++) {
            const int hd = hds[hi];
            const size_t stride = (size_t)hd * (f16 ? 2 : 4);
            for (int i = 0; i < MAXN * hd; i++) {
                const float kf = (float)kc_gauss() * 2.0f, vf = (float)kc_gauss();
                if (f16) {
                    ((uint16_t *)k)[i] = kn_fp32_to_fp16(kf);
                    ((uint16_t *)v)[i] = kn_fp32_to_fp16(vf);
                } else {
                    ((float *)k)[i] = kf;
                    ((float *)v)[i] = vf;
                }
            }
            for (int i = 0; i < KN_ATTEND_MAX_Q * hd; i++) q[i] = (float)kc_gauss();
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const int nq = 1 + (int)(li % KN_ATTEND_MAX_Q);
                const float scale = 1.0f / sqrtf((float)hd);
                const uint8_t *kk = k, *vv = v;
                const kn_attend_rows r = kn_attend_rows_flat(&kk, &vv, stride, stride);
                (f16 ? kn_attend_f16_ref : kn_attend_f32_ref)(&r, lens[li], q, nq, hd, scale, o1);
                (f16 ? set_neon.attend_f16 : set_neon.attend_f32)(&r, lens[li], q, nq, hd, scale, o2);
                const bool same = memcmp(o1, o2, sizeof(float) * (size_t)(nq * hd)) == 0;
                if (!same) {
                    free(k);
                    free(v);
                }
                CHECKF(same, "%s cache, hd %d, n %d, %d heads", f16 ? "F16" : "F32", hd, (int)lens[li], nq);
            }
        }
    }
    free(k);
    free(v);
}

/* ---- attention over the quantized KV formats (Q8_0, TQ4): the reference's bits ---- */

static void check_kv_attention(kn_kvt t) {
    if (!have_neon) SKIP("%s", why_neon);
    CHECKF(set_neon.attend_kv[t] != NULL, "the neon set has a %s attention kernel", kn_kvq_traits_get(t)->name);
    /* multiples of 16 take the NEON row helpers (blocks of 16 and 32), the others the reference */
    const int hds[] = {16, 48, 64, 80, 128, 24};
    const int32_t lens[] = {1, 16, 17, 45};
    enum { MAXN = 45, MAXHD = 128 };
    const size_t stride = kn_kvq_head_bytes(t, MAXHD);
    uint8_t *k = malloc((size_t)MAXN * stride), *v = malloc((size_t)MAXN * stride);
    float x[MAXHD], q[KN_ATTEND_MAX_Q * MAXHD], o1[KN_ATTEND_MAX_Q * MAXHD], o2[KN_ATTEND_MAX_Q * MAXHD];
    bool same = true;
    for (size_t hi = 0; hi < sizeof hds / sizeof hds[0] && same; hi++) {
        const int hd = hds[hi];
        for (int p = 0; p < MAXN; p++) {
            for (int i = 0; i < hd; i++) x[i] = (float)kc_gauss() * 2.0f;
            kn_kvq_store(t, x, k + (size_t)p * stride, hd);
            for (int i = 0; i < hd; i++) x[i] = (float)kc_gauss();
            kn_kvq_store(t, x, v + (size_t)p * stride, hd);
        }
        for (int i = 0; i < KN_ATTEND_MAX_Q * hd; i++) q[i] = (float)kc_gauss();
        for (size_t li = 0; li < sizeof lens / sizeof lens[0] && same; li++) {
            const int nq = 1 + (int)((li * 3) % KN_ATTEND_MAX_Q);
            const float scale = 1.0f / sqrtf((float)hd);
            const uint8_t *kb = k, *vb = v;
            const kn_attend_rows rows = kn_attend_rows_flat(&kb, &vb, stride, stride);
            kn_attend_ref_for(t)(&rows, lens[li], q, nq, hd, scale, o1);
            kn_kernels_attend(&set_neon, t)(&rows, lens[li], q, nq, hd, scale, o2);
            same = memcmp(o1, o2, sizeof(float) * (size_t)(nq * hd)) == 0;
            if (!same)
                printf("  %s cache, hd %d, n %d, %d heads: differs\n", kn_kvq_traits_get(t)->name, hd, (int)lens[li],
                       nq);
        }
    }
    free(k);
    free(v);
    CHECK(same);
}
static void test_neon_attention_q8_0(void) { check_kv_attention(KN_KVT_Q8_0); }
static void test_neon_attention_tq4(void) { check_kv_attention(KN_KVT_TQ4); }

/* ---- the library's choice ---- */

static void test_best_is_neon(void) {
    if (!have_neon) SKIP("%s", why_neon);
    const char *want = have_i8mm ? "neon+i8mm" : have_dotprod ? "neon+dotprod" : "neon";
    const char *got = kn_kernels_get(KN_KERNELS_AUTO)->name;
    printf("  kernel set chosen: %s (dotprod %s, i8mm %s)\n", got, kn_cpu_features()->dotprod ? "yes" : "no",
           kn_cpu_features()->i8mm ? "yes" : "no");
    CHECKF(strcmp(got, want) == 0, "chosen %s, expected %s", got, want);
}

int main(void) {
    make_sets();
    RUN(test_best_is_neon);
    RUN(test_neon_F32);
    RUN(test_neon_F16);
    RUN(test_neon_BF16);
    RUN(test_neon_quantizers);
    RUN(test_neon_attention);
    RUN(test_neon_attention_q8_0);
    RUN(test_neon_attention_tq4);
    RUN(test_dotprod_Q4_0);
    RUN(test_dotprod_Q4_1);
    RUN(test_dotprod_Q5_0);
    RUN(test_dotprod_Q5_1);
    RUN(test_dotprod_Q8_0);
    RUN(test_dotprod_Q4_K);
    RUN(test_dotprod_Q5_K);
    RUN(test_dotprod_Q6_K);
    RUN(test_dotprod_Q2_K);
    RUN(test_dotprod_Q3_K);
    RUN(test_dotprod_IQ4_NL);
    RUN(test_dotprod_IQ4_XS);
    RUN(test_dotprod_MXFP4);
    RUN(test_dotprod_MLX8);
    RUN(test_dotprod_MLX8_F32);
    RUN(test_dotprod_raw);
    RUN(test_i8mm_Q4_0);
    RUN(test_i8mm_Q4_1);
    RUN(test_i8mm_Q5_1);
    RUN(test_i8mm_Q8_0);
    RUN(test_i8mm_Q4_K);
    RUN(test_i8mm_Q5_K);
    RUN(test_i8mm_Q6_K);
    RUN(test_i8mm_Q2_K);
    RUN(test_i8mm_Q3_K);
    RUN(test_i8mm_IQ4_NL);
    RUN(test_i8mm_IQ4_XS);
    RUN(test_i8mm_MXFP4);
    RUN(test_i8mm_raw);
    return kt_summary();
}
