/*
 * test_pack.c - the 16-row panel layout of Q4_0 / Q4_1 / Q8_0 / Q4_K / Q5_K / Q6_K / IQ4_NL / IQ4_XS / MXFP4 matrices
 * (src/tensor/pack.h) and
 * the panel kernels of every kernel set this CPU runs (avx2, avx2vnni, avx512; a set the CPU lacks is
 * SKIPped with the reason) against the scalar reference:
 *   - repacking is lossless: every row read back (plain blocks or floats) equals the original row;
 *   - Q8X / Q8X1 / Q8KX / Q8K6 / Q8KC activation rows hold exactly the reference Q8_0 / Q8_1 / Q8_K
 *     quantization plus the sums;
 *   - every output of a panel kernel, for every tile width 1 .. p16_tile_t and odd lengths, is
 *     bit-identical to the reference vec_dot on the plain row (tolerance 0: the numerics contract of
 *     quant.h defines the same float steps), which also makes any tile width equal to one-token calls.
 * Buffers are allocated at their exact sizes so AddressSanitizer sees any read past a panel or row.
 */
#include "harness.h"

#include "base/base.h"
#include "tensor/kernels.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdint.h>

static uint64_t kc_state = 0x9E3779B97F4A7C15ULL;

/* Deterministic standard normal samples (xorshift64* + Box-Muller). */
static double kc_gauss(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        kc_state ^= kc_state >> 12;
        kc_state ^= kc_state << 25;
        kc_state ^= kc_state >> 27;
        u[i] = (double)((kc_state * 2685821657736338717ULL) >> 11) * 0x1.0p-53;
    }
    return sqrt(-2.0 * log(u[0] + 1e-300)) * cos(6.283185307179586 * u[1]);
}

static const kn_dtype types[] = {KN_Q4_0, KN_Q4_1, KN_Q8_0, KN_Q4_K, KN_Q5_K, KN_Q6_K, KN_IQ4_NL, KN_IQ4_XS, KN_MXFP4};

static bool is_k(kn_dtype t) { return t == KN_Q4_K || t == KN_Q5_K || t == KN_Q6_K || t == KN_IQ4_XS; }
static bool is_table(kn_dtype t) { return t == KN_IQ4_NL || t == KN_IQ4_XS || t == KN_MXFP4; }
#define N_LENS 5

/* Row lengths to test for type t: odd block counts around the kernels' loops. */
static int64_t len_of(kn_dtype t, int i) {
    static const int64_t legacy[N_LENS] = {32, 64, 96, 288, 2080}, k[N_LENS] = {256, 512, 768, 2304, 4352};
    return is_k(t) ? k[i] : legacy[i];
}

/* rows x n random weights (two magnitudes) quantized with the reference quantizer; caller frees. */
static uint8_t *random_matrix(kn_dtype t, int64_t rows, int64_t n) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const size_t rb = kn_row_bytes(t, n);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)(kc_gauss() * ((r & 1) ? 0.02 : 1.5));
        tr->from_float(f, w + (size_t)r * rb, n);
    }
    if (t == KN_MXFP4) /* other exponents too: subnormal halves (e = 0, 1) and large ones (2^72 ..) */
        for (int64_t r = 0; r < rows; r += 3)
            for (int64_t b = 0; b < n / 32; b += 2)
                w[(size_t)r * rb + (size_t)b * sizeof(kn_block_mxfp4)] = (uint8_t)(r % 2 ? 200 + b % 3 : b % 3);
    free(f);
    return w;
}

static void test_pack_roundtrip(void) {
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++) {
        const kn_dtype t = types[ti];
        const kn_type_traits *tr = kn_type_traits_get(t);
        for (int li = 0; li < N_LENS; li++) {
            const int64_t n = len_of(t, li), rows = 48;
            const size_t rb = kn_row_bytes(t, n);
            uint8_t *w = random_matrix(t, rows, n), *p = malloc(rb * (size_t)rows), *row = malloc(rb);
            float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
            kn_p16_pack(t, w, rows, n, p);
            int bad = -1;
            for (int64_t r = 0; r < rows && bad < 0; r++) {
                kn_p16_row_plain(t, p, n, r, row);
                tr->to_float(w + (size_t)r * rb, a, n);
                kn_p16_row_f32(t, p, n, r, b);
                if (memcmp(row, w + (size_t)r * rb, rb) != 0 || memcmp(a, b, sizeof(float) * (size_t)n) != 0)
                    bad = (int)r;
            }
            free(w), free(p), free(row), free(a), free(b);
            CHECKF(bad < 0, "%s n=%lld: row %d differs after packing", tr->name, (long long)n, bad);
        }
    }
}

static void test_q8x_rows(void) {
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++) {
        const kn_dtype t = types[ti];
        const int64_t n = 2304;
        float *x = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(kc_gauss() * (i % 7 ? 0.3 : 40.0));
        uint8_t *q = malloc(kn_q8x_row_bytes(t, n));
        int bad = -1;
        if (t == KN_IQ4_XS) { /* Q8KC: the reference quants, d, and -128 x the sums per sub-block */
            kn_block_q8_k *rk = malloc(sizeof *rk * (size_t)(n / 256));
            kn_q8_k_from_float(x, rk, n);
            kn_q8x_quantize(t, kn_q8_k_from_float, x, q, n);
            for (int64_t b = 0; b < n / 256 && bad < 0; b++) {
                const uint8_t *blk = q + (size_t)b * KN_Q8KC_BLOCK;
                float d;
                memcpy(&d, blk + 256, 4);
                if (memcmp(blk, rk[b].qs, 256) != 0 || d != rk[b].d) bad = (int)b;
                for (int j = 0; j < 8; j++) {
                    int32_t c, sum = 0;
                    memcpy(&c, blk + 260 + 4 * j, 4);
                    for (int e = 0; e < 32; e++) sum += rk[b].qs[32 * j + e];
                    if (c != -128 * sum) bad = (int)b;
                }
            }
            free(rk);
        } else if (t == KN_Q6_K) {
            kn_block_q8_k *ref = malloc(sizeof *ref * (size_t)(n / 256));
            kn_q8_k_from_float(x, ref, n);
            kn_q8x_quantize(t, kn_q8_k_from_float, x, q, n);
            for (int64_t b = 0; b < n / 256 && bad < 0; b++) {
                const uint8_t *blk = q + (size_t)b * KN_Q8K6_BLOCK;
                float d;
                memcpy(&d, blk + 256, 4);
                if (memcmp(blk, ref[b].qs, 256) != 0 || d != ref[b].d || memcmp(blk + 260, ref[b].bsums, 32) != 0)
                    bad = (int)b;
            }
            free(ref);
        } else if (is_k(t)) {
            kn_block_q8_k *ref = malloc(sizeof *ref * (size_t)(n / 256));
            kn_q8_k_from_float(x, ref, n);
            kn_q8x_quantize(t, kn_q8_k_from_float, x, q, n);
            for (int64_t b = 0; b < n / 256 && bad < 0; b++) {
                const uint8_t *blk = q + (size_t)b * KN_Q8KX_BLOCK;
                float d;
                memcpy(&d, blk + 256, 4);
                if (memcmp(blk, ref[b].qs, 256) != 0 || d != ref[b].d) bad = (int)b;
                for (int j = 0; j < 8; j++) {
                    int16_t bs;
                    memcpy(&bs, blk + 260 + 2 * j, 2);
                    if (bs != ref[b].bsums[2 * j] + ref[b].bsums[2 * j + 1]) bad = (int)b;
                }
            }
            free(ref);
        } else if (t == KN_Q4_1) { /* Q8X1: the Q8_1 quants with d and s as fp32 */
            kn_block_q8_1 *ref = malloc(sizeof *ref * (size_t)(n / 32));
            kn_q8_1_from_float(x, ref, n);
            kn_q8x_quantize(t, kn_q8_1_from_float, x, q, n);
            for (int64_t b = 0; b < n / 32 && bad < 0; b++) {
                const uint8_t *blk = q + (size_t)b * KN_Q8X_BLOCK;
                float d, s;
                memcpy(&d, blk + 32, 4);
                memcpy(&s, blk + 36, 4);
                if (memcmp(blk, ref[b].qs, 32) != 0 || d != kn_fp16_to_fp32(ref[b].d) || s != kn_fp16_to_fp32(ref[b].s))
                    bad = (int)b;
            }
            free(ref);
        } else {
            const int32_t off = t == KN_Q4_0 ? 8 : 128;
            kn_block_q8_0 *ref = malloc(sizeof *ref * (size_t)(n / 32));
            kn_q8_0_from_float(x, ref, n);
            kn_q8x_quantize(t, kn_q8_0_from_float, x, q, n);
            for (int64_t b = 0; b < n / 32 && bad < 0; b++) {
                const uint8_t *blk = q + (size_t)b * KN_Q8X_BLOCK;
                float d;
                int32_t c, sum = 0;
                memcpy(&d, blk + 32, 4);
                memcpy(&c, blk + 36, 4);
                for (int e = 0; e < 32; e++) sum += ref[b].qs[e];
                if (memcmp(blk, ref[b].qs, 32) != 0 || d != kn_fp16_to_fp32(ref[b].d) || c != -off * sum) bad = (int)b;
            }
            free(ref);
        }
        free(x), free(q);
        CHECKF(bad < 0, "%s: block %d differs", kn_type_traits_get(t)->name, bad);
    }
}

/* The panel kernel of set for type t against the reference vec_dot, for np panels, n elements and every
 * tile width 1 .. max_nt (one weight matrix and one set of activation rows for all the widths). */
static int check_kernel(const kn_kernels *set, kn_dtype t, int np, int64_t n, int max_nt) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const kn_dtype at = tr->vec_dot_type;
    const int rows = 16 * np;
    const size_t rb = kn_row_bytes(t, n), xb = kn_q8x_row_bytes(t, n), qb = kn_row_bytes(at, n);
    uint8_t *w = random_matrix(t, rows, n), *p = malloc(rb * (size_t)rows), *x = malloc(xb * (size_t)max_nt);
    uint8_t *xq = malloc(qb * (size_t)max_nt);
    float *f = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)rows * (size_t)max_nt);
    float *want = malloc(sizeof(float) * (size_t)rows * (size_t)max_nt);
    for (int tk = 0; tk < max_nt; tk++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)(kc_gauss() * ((tk & 1) ? 3.0 : 0.1));
        kn_q8x_quantize(t, kn_kernels_quantize(set, at), f, x + (size_t)tk * xb, n);
        kn_type_traits_get(at)->from_float(f, xq + (size_t)tk * qb, n);
        for (int l = 0; l < rows; l++) want[tk * rows + l] = tr->vec_dot(n, w + (size_t)l * rb, xq + (size_t)tk * qb);
    }
    kn_p16_pack(t, w, rows, n, p);
    int rc = 0;
    for (int nt = 1; nt <= max_nt && !rc; nt++) {
        set->p16[t](n, p, np, x, xb, nt, out, (size_t)rows);
        for (int tk = 0; tk < nt && !rc; tk++)
            for (int l = 0; l < rows && !rc; l++)
                if (memcmp(&want[tk * rows + l], &out[tk * rows + l], sizeof(float)) != 0) {
                    printf("  %s %s np=%d n=%lld nt=%d: row %d token %d: %.9g, reference %.9g\n", set->name, tr->name,
                           np, (long long)n, nt, l, tk, out[tk * rows + l], want[tk * rows + l]);
                    rc = -1;
                }
    }
    free(w), free(p), free(x), free(xq), free(f), free(out), free(want);
    return rc;
}

/* Every panel kernel of the set called name, every type it has one for, every tile shape. The table
 * formats (IQ4_NL, IQ4_XS, MXFP4) must have panel kernels in every x86 set; IQ4_XS's also take tiles
 * wider than p16_tile_t. */
static void check_set(const char *name) {
    const kn_kernels *set = kn_kernels_named(name);
    if (!set) SKIP("this CPU cannot run the %s kernel set", name);
    if (!set->p16[KN_Q4_0]) SKIP("kernel set %s has no panel kernels", set->name);
    printf("KSET %s: panel kernels tested:", name);
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++)
        if (set->p16[types[ti]]) printf(" %s", kn_type_traits_get(types[ti])->name);
    printf("\n");
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++) {
        if (!set->p16[types[ti]]) continue;
        for (int li = 0; li < N_LENS; li++)
            for (int np = 1; np <= KN_P16_PANELS; np++)
                CHECK(check_kernel(set, types[ti], np, len_of(types[ti], li),
                                   set->p16_tile_t + (types[ti] == KN_IQ4_XS ? 2 : 0)) == 0);
    }
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++)
        CHECKF(!is_table(types[ti]) || set->p16[types[ti]], "set %s has no %s panel kernel", name,
               kn_type_traits_get(types[ti])->name);
}

static void panels_avx2(void) { check_set("avx2"); }
static void panels_avx2vnni(void) { check_set("avx2vnni"); }
static void panels_avx512(void) { check_set("avx512"); }

int main(void) {
    RUN(test_pack_roundtrip);
    RUN(test_q8x_rows);
    RUN(panels_avx2);
    RUN(panels_avx2vnni);
    RUN(panels_avx512);
    return kt_summary();
}
