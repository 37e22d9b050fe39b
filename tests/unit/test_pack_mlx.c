/*
 * test_pack_mlx.c - the 16-row panel layout of MLX8 / MLX8_F32 matrices (src/tensor/pack.c) and their
 * panel kernels in every kernel set this CPU runs (avx2, avx2vnni, avx512; a set the CPU lacks is SKIPped
 * with the reason) against the scalar reference (quant_mlx.c):
 *   - repacking is lossless: every row read back (plain blocks or floats) equals the original row;
 *   - Q8XM activation rows hold exactly the reference Q8_0 quantization, c = -128 sum and xs = d sum;
 *   - every output of a panel kernel, for 1 and 2 panels, every token count 1 .. p16_tile_t and several
 *     block counts, is bit-identical to the reference vec_dot on the plain row (tolerance 0), with
 *     weights at both ends of 0..255 and activations at +-127.
 * Buffers are allocated at their exact sizes so AddressSanitizer sees any read past a panel or row.
 */
#include "harness.h"

#include "base/base.h"
#include "tensor/kernels.h"
#include "tensor/pack.h"
#include "tensor/quant.h"

#include <stdint.h>

static uint64_t kc_state = 0x2545F4914F6CDD1DULL;

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

static const kn_dtype types[] = {KN_MLX8, KN_MLX8_F32};
/* Row lengths: 1, 2, 7, 8, 9, 17 and 65 blocks. */
static const int64_t lens[] = {32, 64, 224, 256, 288, 544, 2080};

/* rows x n random weights (two magnitudes, offset rows) quantized with the reference quantizer; caller frees. */
static uint8_t *random_matrix(kn_dtype t, int64_t rows, int64_t n) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const size_t rb = kn_row_bytes(t, n);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)(kc_gauss() * ((r & 1) ? 0.02 : 1.5) + (r % 3) * 0.7);
        tr->from_float(f, w + (size_t)r * rb, n);
    }
    free(f);
    return w;
}

static void test_pack_roundtrip(void) {
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++) {
        const kn_dtype t = types[ti];
        const kn_type_traits *tr = kn_type_traits_get(t);
        CHECK(kn_p16_type(t));
        for (size_t li = 0; li < KN_ARRAY_LEN(lens); li++) {
            const int64_t n = lens[li], rows = 32;
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

static void test_q8xm_rows(void) {
    const int64_t n = 2080, nb = n / 32;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(kc_gauss() * (i % 7 ? 0.3 : 40.0));
    uint8_t *q = malloc(kn_q8x_row_bytes(KN_MLX8, n));
    CHECK(kn_q8x_row_bytes(KN_MLX8, n) == (size_t)nb * KN_Q8XM_BLOCK);
    CHECK(kn_q8x_row_bytes(KN_MLX8_F32, n) == (size_t)nb * KN_Q8XM_BLOCK);
    kn_block_q8_0 *ref = malloc(sizeof *ref * (size_t)nb);
    kn_q8_0_from_float(x, ref, n);
    kn_q8x_quantize(KN_MLX8_F32, kn_q8_0_from_float, x, q, n);
    int bad = -1;
    for (int64_t b = 0; b < nb && bad < 0; b++) {
        const uint8_t *blk = q + (size_t)b * KN_Q8XM_BLOCK;
        int32_t sum = 0;
        for (int e = 0; e < 32; e++) sum += ref[b].qs[e];
        const float d = kn_fp16_to_fp32(ref[b].d);
        if (memcmp(blk, ref[b].qs, 32) != 0 || kn_ld_f32(blk + 32) != d || kn_ld_i32(blk + 36) != -128 * sum ||
            kn_ld_f32(blk + 40) != (float)((double)sum * d))
            bad = (int)b;
    }
    free(x), free(q), free(ref);
    CHECKF(bad < 0, "Q8XM block %d differs", bad);
}

/* The panel kernel of set for type t against the reference vec_dot, for np panels, n elements, nt tokens. */
static int check_kernel(const kn_kernels *set, kn_dtype t, int np, int64_t n, int nt) {
    const kn_type_traits *tr = kn_type_traits_get(t);
    const int rows = 16 * np;
    const size_t rb = kn_row_bytes(t, n), xb = kn_q8x_row_bytes(t, n), qb = kn_row_bytes(KN_Q8_0, n);
    uint8_t *w = random_matrix(t, rows, n), *p = malloc(rb * (size_t)rows), *x = malloc(xb * (size_t)nt);
    uint8_t *xq = malloc(qb * (size_t)nt);
    float *f = malloc(sizeof(float) * (size_t)n), *out = malloc(sizeof(float) * (size_t)rows * (size_t)nt);
    for (int tk = 0; tk < nt; tk++) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)(kc_gauss() * ((tk & 1) ? 3.0 : 0.1));
        kn_q8x_quantize(t, kn_kernels_quantize(set, KN_Q8_0), f, x + (size_t)tk * xb, n);
        kn_q8_0_from_float(f, xq + (size_t)tk * qb, n);
    }
    kn_p16_pack(t, w, rows, n, p);
    set->p16[t](n, p, np, x, xb, nt, out, (size_t)rows);
    int rc = 0;
    for (int tk = 0; tk < nt && !rc; tk++)
        for (int l = 0; l < rows && !rc; l++) {
            const float want = tr->vec_dot(n, w + (size_t)l * rb, xq + (size_t)tk * qb);
            if (memcmp(&want, &out[tk * rows + l], sizeof want) != 0) {
                printf("  %s %s np=%d n=%lld nt=%d: row %d token %d: %.9g, reference %.9g\n", set->name, tr->name, np,
                       (long long)n, nt, l, tk, out[tk * rows + l], want);
                rc = -1;
            }
        }
    free(w), free(p), free(x), free(xq), free(f), free(out);
    return rc;
}

static void check_set(const char *name) {
    const kn_kernels *set = kn_kernels_named(name);
    if (!set) SKIP("this CPU cannot run the %s kernel set", name);
    CHECKF(set->p16[KN_MLX8] && set->p16[KN_MLX8_F32], "kernel set %s has no MLX8 panel kernels", name);
    if (!set->p16[KN_MLX8] || !set->p16[KN_MLX8_F32]) return;
    printf("KSET %s: MLX8 and MLX8_F32 panel kernels tested, 1 .. %d tokens\n", name, set->p16_tile_t);
    for (size_t ti = 0; ti < KN_ARRAY_LEN(types); ti++)
        for (size_t li = 0; li < KN_ARRAY_LEN(lens); li++)
            for (int np = 1; np <= KN_P16_PANELS; np++)
                for (int nt = 1; nt <= set->p16_tile_t; nt++)
                    CHECK(check_kernel(set, types[ti], np, lens[li], nt) == 0);
}

static void panels_avx2(void) { check_set("avx2"); }
static void panels_avx2vnni(void) { check_set("avx2vnni"); }
static void panels_avx512(void) { check_set("avx512"); }

int main(void) {
    RUN(test_pack_roundtrip);
    RUN(test_q8xm_rows);
    RUN(panels_avx2);
    RUN(panels_avx2vnni);
    RUN(panels_avx512);
    return kt_summary();
}
