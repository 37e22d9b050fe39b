/*
 * test_kernels_lowbit.c - the SIMD GEMM tiles of Q2_K, Q3_K and IQ4_XS (x Q8_K) against the scalar
 * reference kernels of quant_lowbit.c / quant_nl.c. (IQ4_NL and MXFP4 run Q4_0's kernels with a table:
 * test_kernels_legacy.c.)
 *
 * Sets under test: the best set of this CPU (AVX-512 where the CPU has it) and the AVX2 set, built
 * locally on top of the reference set so that it is tested on an AVX-512 machine too. A set whose ISA
 * the CPU lacks is SKIPped. One RUN per (set, type):
 *   - kc_check_type (kernel_check.h): reference-quantized random rows, every tile shape up to 4x4,
 *     sizes of 1..9 blocks and a model-sized row; the set's gemm equal to the reference's (TOL = 0),
 *     and every tile output bit-identical to the 1x1 call;
 *   - the same on raw random block bytes (every scale and quant bit pattern, negative super-block
 *     scales) with activations of any quant in -127..127 (the range the activation quantizers write,
 *     quant.h), a leading dimension larger than the tile (nothing written outside it), odd block
 *     counts, and n = 0 and a partial tail.
 *
 * Tolerance: none. quant.h fixes the order of every float operation of these dot products and the SIMD
 * kernels follow it lane by lane, so every output must equal the reference bit for bit.
 */
#include "harness.h"
#include "kernel_check.h"
#include "tensor/kernels.h"
#include "tensor/quant.h"

#define TOL 0.0 /* bit-identical, see above */

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

static uint64_t rng = 0x243F6A8885A308D3ULL;
static uint32_t rnd32(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ULL) >> 32);
}

/* A random activation quant in -127..127. */
static int8_t rnd_q(void) { return (int8_t)((int)(rnd32() % 255) - 127); }

/* Random bytes for nb blocks of weight type wt with sane (finite, either sign) block scales. */
static void random_weight_blocks(kn_dtype wt, uint8_t *p, int64_t nb) {
    const size_t bb = kn_type_traits_get(wt)->block_bytes;
    for (size_t i = 0; i < bb * (size_t)nb; i++) p[i] = (uint8_t)rnd32();
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = p + bb * (size_t)i;
        kn_half d = kn_fp32_to_fp16(0.001f * (float)(1 + rnd32() % 1000) * ((rnd32() & 1) ? 1.0f : -1.0f)),
                dm = kn_fp32_to_fp16(0.0005f * (float)(rnd32() % 1000));
        switch (wt) {
            case KN_Q2_K:
                memcpy(b + offsetof(kn_block_q2_k, d), &d, 2);
                memcpy(b + offsetof(kn_block_q2_k, dmin), &dm, 2);
                break;
            case KN_Q3_K: memcpy(b + offsetof(kn_block_q3_k, d), &d, 2); break;
            default: memcpy(b, &d, 2); break; /* IQ4_XS: d first */
        }
    }
}

/* Random Q8_K activation blocks: quants in -127..127, consistent bsums. */
static void random_act_blocks(uint8_t *p, int64_t nb) {
    kn_block_q8_k *b = (kn_block_q8_k *)p;
    for (int64_t i = 0; i < nb; i++) {
        b[i].d = 0.01f * (float)(1 + rnd32() % 100);
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += (b[i].qs[16 * j + l] = rnd_q());
            b[i].bsums[j] = (int16_t)s;
        }
    }
}

/* Every tile shape on raw random bytes of nb blocks: bit-identical to the reference, every tile output
 * bit-identical to the 1x1 call, nothing written outside the tile; then n = 0 and a partial tail.
 * Returns 0 or -1 (after printing the failure). */
static int check_raw(const kn_kernels *set, kn_dtype wt, int64_t nb) {
    const kn_type_traits *tr = kn_type_traits_get(wt);
    const kn_dtype at = tr->vec_dot_type;
    const int64_t n = nb * tr->block_size;
    const size_t wrb = kn_row_bytes(wt, n), xrb = kn_row_bytes(at, n);
    uint8_t *w = malloc(wrb * 4), *x = malloc(xrb * 4);
    int rc = 0;
    random_weight_blocks(wt, w, 4 * nb);
    random_act_blocks(x, 4 * n / kn_type_traits_get(at)->block_size);
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
                printf("  %s raw %s nb=%lld tile %dx%d: out[%d] = %.9g, reference %.9g\n", set->name, tr->name,
                       (long long)nb, nr, nt, k, out[k], out_ref[k]);
                rc = -1;
            }
            for (int t = 0; t < nt && !rc; t++) {
                for (int r = 0; r < nr && !rc; r++) {
                    g(n, w + (size_t)r * wrb, wrb, 1, x + (size_t)t * xrb, xrb, 1, &one, 1);
                    if (memcmp(&one, &out[t * LDO + r], sizeof one) != 0) {
                        printf("  %s raw %s: tile %dx%d output (r=%d t=%d) %.9g differs from the 1x1 call %.9g\n",
                               set->name, tr->name, nr, nt, r, t, out[t * LDO + r], one);
                        rc = -1;
                    }
                }
            }
        }
    }
    /* n = 0 and a partial tail (ignored, never read): as the reference */
    const int64_t odd[] = {0, n - tr->block_size / 2};
    for (size_t k = 0; k < 2 && !rc; k++) {
        for (int nt = 1; nt <= 4; nt += 3) {
            ref(odd[k], w, wrb, 4, x, xrb, nt, out_ref, 4);
            g(odd[k], w, wrb, 4, x, xrb, nt, out, 4);
            if (memcmp(out, out_ref, sizeof(float) * 4 * (size_t)nt) != 0) {
                printf("  %s raw %s n=%lld nt=%d differs from the reference\n", set->name, tr->name, (long long)odd[k],
                       nt);
                rc = -1;
            }
        }
    }
    free(w);
    free(x);
    return rc;
}

static void check_weight_type(const char *which, kn_dtype wt) {
    const char *why = "";
    const kn_kernels *set = get_set(which, &why);
    if (!set) SKIP("%s", why);
    CHECKF(kn_kernels_gemm(set, wt) != kn_kernels_gemm(kn_kernels_get(KN_KERNELS_REF), wt), "%s has a %s kernel",
           set->name, kn_dtype_name(wt));
    CHECKF(kc_check_type(set, wt, TOL) == 0, "%s %s vs reference", set->name, kn_dtype_name(wt));
    const int64_t nbs[] = {1, 2, 3, 7, 16, 65};
    for (size_t i = 0; i < sizeof nbs / sizeof nbs[0]; i++)
        CHECKF(check_raw(set, wt, nbs[i]) == 0, "%s %s on raw blocks", set->name, kn_dtype_name(wt));
}

static void best_q2_k(void) { check_weight_type("best", KN_Q2_K); }
static void best_q3_k(void) { check_weight_type("best", KN_Q3_K); }
static void best_iq4_xs(void) { check_weight_type("best", KN_IQ4_XS); }
static void avx2_q2_k(void) { check_weight_type("avx2", KN_Q2_K); }
static void avx2_q3_k(void) { check_weight_type("avx2", KN_Q3_K); }
static void avx2_iq4_xs(void) { check_weight_type("avx2", KN_IQ4_XS); }

int main(void) {
    g_best = kn_kernels_get(KN_KERNELS_AUTO);
    g_avx2 = *kn_kernels_get(KN_KERNELS_REF);
    g_avx2.name = "avx2";
    const kn_cpu *c = kn_cpu_features();
    if (c->avx2 && c->fma && c->f16c) kn_avx2_init_lowbit(&g_avx2);
    printf("# best kernel set: %s\n", g_best->name);
    RUN(best_q2_k);
    RUN(best_q3_k);
    RUN(best_iq4_xs);
    RUN(avx2_q2_k);
    RUN(avx2_q3_k);
    RUN(avx2_iq4_xs);
    return kt_summary();
}
