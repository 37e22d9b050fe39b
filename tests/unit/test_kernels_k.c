/*
 * test_kernels_k.c - the SIMD kernels of the K formats (Q4_K, Q5_K, Q6_K GEMM tiles and the Q8_K
 * activation quantizer) against the scalar reference kernels of quant_k.c.
 *
 * Sets under test: the best set of this CPU (kn_kernels_get(KN_KERNELS_AUTO), AVX-512 here when the
 * CPU has it) and the AVX2 set, built locally on top of the reference set so that it is tested even on
 * an AVX-512 machine. A set whose ISA the CPU lacks is SKIPped. One RUN per (set, type):
 *   - kc_check_type (kernel_check.h): reference-quantized random rows, every tile shape up to 4x4,
 *     sizes of 1..9 super-blocks and 2048; the set's gemm equal to the reference's (TOL = 0), and
 *     every tile output bit-identical to the 1x1 call;
 *   - the same on raw random block bytes (every scale / min / quant bit pattern, Q6_K scale -128,
 *     activation quants -128), which reference-quantized data never reach, with a leading dimension
 *     larger than the tile (nothing written outside it), and n = 0 and a partial tail;
 *   - the Q8_K quantizer: byte-identical to the reference (d, quants, bsums) on random, zero, huge,
 *     tiny, non-finite and exactly-half inputs.
 *
 * Tolerance: none. quant.h fixes the order of every float operation of the K-format dot products
 * (exact integer sums per super-block, then one fma per super-block into sa and sm, in order), and
 * the SIMD kernels follow it lane by lane, so every output must equal the reference bit for bit
 * (TOL = 0 in kc_check_type, memcmp elsewhere); the quantizer must write the reference's bytes.
 */
#include "harness.h"
#include "kernel_check.h"
#include "tensor/kernels.h"
#include "tensor/quant.h"

#include <float.h>

#define TOL 0.0 /* relative to |w| |x|: bit-identical, see above */

static kn_kernels g_avx2;
static const kn_kernels *g_best;

/* The set named by `which` ("best" or "avx2"), or NULL (with *why set) when this CPU cannot run it. */
static const kn_kernels *get_set(const char *which, const char **why) {
    const kn_cpu *c = kn_cpu_features();
    if (strcmp(which, "avx2") == 0) {
        if (!(c->avx2 && c->fma && c->f16c)) {
            *why = "CPU lacks AVX2/FMA/F16C";
            return NULL;
        }
        return &g_avx2;
    }
    if (strcmp(g_best->name, "ref") == 0) {
        *why = "no SIMD kernel set on this CPU";
        return NULL;
    }
    return g_best;
}

/* ---- GEMM on raw random block bytes ---- */

static uint64_t rng = 0x243F6A8885A308D3ULL;
static uint32_t rnd32(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

/* Random bytes for nb blocks of weight type wt, with sane fp16 super-block scales (hostile scales
 * give inf/NaN in both kernels alike, which proves nothing). */
static void random_weight_blocks(kn_dtype wt, uint8_t *p, int64_t nb) {
    const size_t bb = kn_type_traits_get(wt)->block_bytes;
    for (size_t i = 0; i < bb * (size_t)nb; i++) p[i] = (uint8_t)rnd32();
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = p + bb * (size_t)i;
        kn_half d = kn_fp32_to_fp16(0.001f * (float)(1 + rnd32() % 1000)),
                dm = kn_fp32_to_fp16(0.0005f * (float)(rnd32() % 1000));
        if (wt == KN_Q6_K) {
            memcpy(b + offsetof(kn_block_q6_k, d), &d, 2);
        } else {
            memcpy(b, &d, 2);
            memcpy(b + 2, &dm, 2);
        }
    }
}

/* Random Q8_K blocks: any int8 quant (-128 included), consistent bsums. */
static void random_q8k_blocks(kn_block_q8_k *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        b[i].d = 0.01f * (float)(1 + rnd32() % 100);
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                b[i].qs[16 * j + l] = (int8_t)(uint8_t)rnd32();
                s += b[i].qs[16 * j + l];
            }
            b[i].bsums[j] = (int16_t)s;
        }
    }
}

/* Every tile shape on raw random bytes of nb super-blocks: bit-identical to the reference (within tol,
 * and memcmp), every tile output bit-identical to the 1x1 call, nothing written outside the tile;
 * then n = 0 and a partial tail. Returns 0 or -1 (after printing the failure). */
static int check_raw(const kn_kernels *set, kn_dtype wt, int64_t nb, double tol) {
    const int64_t n = nb * KN_QK_K;
    const size_t wrb = kn_row_bytes(wt, n), xrb = kn_row_bytes(KN_Q8_K, n);
    uint8_t *w = malloc(wrb * 4), *x = malloc(xrb * 4);
    float *tmp = malloc(sizeof(float) * (size_t)n);
    double wn[4] = {0}, xn[4] = {0};
    int rc = 0;
    random_weight_blocks(wt, w, 4 * nb);
    random_q8k_blocks((kn_block_q8_k *)x, 4 * nb);
    for (int r = 0; r < 4; r++) {
        kn_type_traits_get(wt)->to_float(w + (size_t)r * wrb, tmp, n);
        for (int64_t i = 0; i < n; i++) wn[r] += (double)tmp[i] * tmp[i];
        kn_q8_k_to_float(x + (size_t)r * xrb, tmp, n);
        for (int64_t i = 0; i < n; i++) xn[r] += (double)tmp[i] * tmp[i];
    }
    kn_gemm_fn ref = kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), wt), g = kn_kernels_gemm(set, wt);
    enum { LDO = 6 }; /* a leading dimension larger than the tile: entries r >= nr must stay untouched */
    float out_ref[4 * LDO], out[4 * LDO], one;
    for (int nr = 1; nr <= 4 && !rc; nr++) {
        for (int nt = 1; nt <= 4 && !rc; nt++) {
            for (int k = 0; k < 4 * LDO; k++) out[k] = out_ref[k] = -12345.0f;
            ref(n, w, wrb, nr, x, xrb, nt, out_ref, LDO);
            g(n, w, wrb, nr, x, xrb, nt, out, LDO);
            if (memcmp(out, out_ref, sizeof out) != 0) {
                int k = 0;
                while (k < 4 * LDO && !memcmp(&out[k], &out_ref[k], sizeof out[k])) k++;
                printf("  %s raw %s nb=%lld tile %dx%d: out[%d] = %.9g, reference %.9g\n", set->name, kn_dtype_name(wt),
                       (long long)nb, nr, nt, k, out[k], out_ref[k]);
                rc = -1;
            }
            for (int t = 0; t < nt && !rc; t++) {
                for (int r = 0; r < nr && !rc; r++) {
                    double err = fabs((double)out[t * LDO + r] - out_ref[t * LDO + r]) / (sqrt(wn[r] * xn[t]) + 1e-30);
                    g(n, w + (size_t)r * wrb, wrb, 1, x + (size_t)t * xrb, xrb, 1, &one, 1);
                    if (!(err <= tol)) {
                        printf("  %s raw %s nb=%lld tile %dx%d (r=%d t=%d): set %.9g ref %.9g err %.3g\n", set->name,
                               kn_dtype_name(wt), (long long)nb, nr, nt, r, t, out[t * LDO + r], out_ref[t * LDO + r],
                               err);
                        rc = -1;
                    } else if (memcmp(&one, &out[t * LDO + r], sizeof one) != 0) {
                        printf("  %s raw %s: tile %dx%d output (r=%d t=%d) %.9g differs from the 1x1 call %.9g\n",
                               set->name, kn_dtype_name(wt), nr, nt, r, t, out[t * LDO + r], one);
                        rc = -1;
                    }
                }
            }
        }
    }
    /* n = 0 and a partial tail (ignored, never read): as the reference */
    const int64_t odd[] = {0, n - 100};
    for (size_t k = 0; k < 2 && !rc; k++) {
        ref(odd[k], w, wrb, 4, x, xrb, 4, out_ref, 4);
        g(odd[k], w, wrb, 4, x, xrb, 4, out, 4);
        if (memcmp(out, out_ref, sizeof(float) * 16) != 0) {
            printf("  %s raw %s n=%lld differs from the reference\n", set->name, kn_dtype_name(wt), (long long)odd[k]);
            rc = -1;
        }
        ref(odd[k], w, wrb, 4, x, xrb, 1, out_ref, 4);
        g(odd[k], w, wrb, 4, x, xrb, 1, out, 4);
        if (memcmp(out, out_ref, sizeof(float) * 4) != 0) {
            printf("  %s raw %s n=%lld (decode) differs from the reference\n", set->name, kn_dtype_name(wt),
                   (long long)odd[k]);
            rc = -1;
        }
    }
    free(w);
    free(x);
    free(tmp);
    return rc;
}

static void check_weight_type(const char *which, kn_dtype wt) {
    const char *why = "";
    const kn_kernels *set = get_set(which, &why);
    if (!set) SKIP("%s", why);
    CHECKF(kc_check_type(set, wt, TOL) == 0, "%s %s vs reference", set->name, kn_dtype_name(wt));
    const int64_t nbs[] = {1, 2, 7, 16};
    for (size_t i = 0; i < sizeof nbs / sizeof nbs[0]; i++)
        CHECKF(check_raw(set, wt, nbs[i], TOL) == 0, "%s %s on raw blocks", set->name, kn_dtype_name(wt));
}

/* ---- Q8_K quantizer ---- */

/* The set's Q8_K quantizer must write the reference's bytes exactly for src[n]. */
static int same_q8k(const kn_kernels *set, const float *src, int64_t n, const char *what) {
    const int64_t nb = n / KN_QK_K;
    kn_block_q8_k *a = calloc((size_t)nb + 1, sizeof *a), *b = calloc((size_t)nb + 1, sizeof *b);
    int rc = 0;
    kn_q8_k_from_float(src, a, n);
    kn_kernels_quantize(set, KN_Q8_K)(src, b, n);
    for (int64_t i = 0; i < nb && !rc; i++) {
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) {
            int e = 0;
            while (e < 256 && a[i].qs[e] == b[i].qs[e]) e++;
            printf("  %s Q8_K quantizer (%s) block %lld differs: d %.9g vs %.9g, first quant diff at %d\n", set->name,
                   what, (long long)i, a[i].d, b[i].d, e);
            rc = -1;
        }
        int s = 0;
        for (int e = 0; e < 256; e++) s += b[i].qs[e];
        int bs = 0;
        for (int j = 0; j < 16; j++) bs += b[i].bsums[j];
        if (s != bs) {
            printf("  %s Q8_K quantizer (%s) block %lld: bsums do not add up\n", set->name, what, (long long)i);
            rc = -1;
        }
    }
    /* the block after the last must be untouched */
    kn_block_q8_k zero;
    memset(&zero, 0, sizeof zero);
    if (memcmp(&b[nb], &zero, sizeof zero) != 0) {
        printf("  %s Q8_K quantizer (%s) wrote past its %lld blocks\n", set->name, what, (long long)nb);
        rc = -1;
    }
    free(a);
    free(b);
    return rc;
}

static void check_q8k(const char *which) {
    const char *why = "";
    const kn_kernels *set = get_set(which, &why);
    if (!set) SKIP("%s", why);
    enum { N = 8 * KN_QK_K };
    static float x[N];
    /* random, at several magnitudes */
    const double mags[] = {1.0, 1e-3, 1e5, 3e37, 1e-30};
    for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++) {
        for (int i = 0; i < N; i++) x[i] = (float)(kc_gauss() * mags[m]);
        CHECK(same_q8k(set, x, N, "random") == 0);
    }
    /* zeros, and zero blocks next to non-zero ones */
    memset(x, 0, sizeof x);
    CHECK(same_q8k(set, x, N, "zeros") == 0);
    for (int i = KN_QK_K; i < 2 * KN_QK_K; i++) x[i] = (float)kc_gauss();
    x[3 * KN_QK_K + 5] = -0.0f;
    CHECK(same_q8k(set, x, N, "some zero blocks") == 0);
    /* huge: FLT_MAX (127 d would overflow), infinities, mixed with small values */
    for (int i = 0; i < N; i++) x[i] = (float)kc_gauss();
    x[0] = FLT_MAX;
    x[KN_QK_K + 3] = -FLT_MAX;
    x[2 * KN_QK_K + 7] = INFINITY;
    x[3 * KN_QK_K + 9] = -INFINITY;
    x[4 * KN_QK_K + 1] = 3.0e38f;
    x[4 * KN_QK_K + 2] = -3.0e38f;
    x[5 * KN_QK_K + 11] = NAN;
    for (int i = 6 * KN_QK_K; i < 7 * KN_QK_K; i++) x[i] = NAN;
    CHECK(same_q8k(set, x, N, "huge and non-finite") == 0);
    /* tiny: subnormals and values whose 127 / amax overflows (zeros among them) */
    for (int i = 0; i < N; i++) x[i] = (float)(kc_gauss() * 1e-39);
    for (int i = 0; i < KN_QK_K; i += 3) x[i] = 0.0f;
    x[KN_QK_K] = FLT_TRUE_MIN;
    for (int i = KN_QK_K + 1; i < 2 * KN_QK_K; i++) x[i] = (i & 1) ? -FLT_TRUE_MIN : 0.0f;
    for (int i = 2 * KN_QK_K; i < 3 * KN_QK_K; i++) x[i] = (float)(kc_gauss() * 1e-37);
    CHECK(same_q8k(set, x, N, "tiny") == 0);
    /* exact halves: amax 127 makes the scale 1, so k + 0.5 must round as the reference does (roundf) */
    for (int i = 0; i < N; i++) x[i] = (float)((int)(rnd32() % 254) - 127) + ((i & 2) ? 0.5f : -0.5f);
    for (int b = 0; b < N / KN_QK_K; b++) x[b * KN_QK_K] = 127.0f;
    for (int i = 0; i < N; i++) x[i] = x[i] > 127.0f ? 126.5f : x[i] < -127.0f ? -126.5f : x[i];
    CHECK(same_q8k(set, x, N, "halves") == 0);
    /* n = 0 and a single block */
    CHECK(same_q8k(set, x, 0, "n=0") == 0);
    CHECK(same_q8k(set, x, KN_QK_K, "one block") == 0);
}

static void best_q4_k(void) { check_weight_type("best", KN_Q4_K); }
static void best_q5_k(void) { check_weight_type("best", KN_Q5_K); }
static void best_q6_k(void) { check_weight_type("best", KN_Q6_K); }
static void best_q8_k_quantizer(void) { check_q8k("best"); }
static void avx2_q4_k(void) { check_weight_type("avx2", KN_Q4_K); }
static void avx2_q5_k(void) { check_weight_type("avx2", KN_Q5_K); }
static void avx2_q6_k(void) { check_weight_type("avx2", KN_Q6_K); }
static void avx2_q8_k_quantizer(void) { check_q8k("avx2"); }

int main(void) {
    g_best = kn_kernels_get(KN_KERNELS_AUTO);
    g_avx2 = *kn_kernels_get(KN_KERNELS_REF);
    g_avx2.name = "avx2";
    const kn_cpu *c = kn_cpu_features();
    if (c->avx2 && c->fma && c->f16c) kn_avx2_init_kquants(&g_avx2);
    printf("# best kernel set: %s\n", g_best->name);
    RUN(best_q4_k);
    RUN(best_q5_k);
    RUN(best_q6_k);
    RUN(best_q8_k_quantizer);
    RUN(avx2_q4_k);
    RUN(avx2_q5_k);
    RUN(avx2_q6_k);
    RUN(avx2_q8_k_quantizer);
    return kt_summary();
}
