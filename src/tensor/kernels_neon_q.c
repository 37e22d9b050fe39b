/*
 * kernels_neon_q.c - ARM64 NEON GEMM tile kernels of the block formats, with the dotprod extension
 * (SDOT: four int8 products summed into each int32 lane): the legacy formats (Q4_0, Q5_0, Q8_0 and the
 * table formats IQ4_NL, MXFP4 x Q8_0 activations; Q4_1, Q5_1 x Q8_1) and the K formats (Q4_K, Q5_K, Q6_K
 * x Q8_K); its init also registers the low-bit formats of kernels_neon_lowbit.c and the MLX 8-bit ones
 * of kernels_neon_mlx.c. Registered only when the CPU reports dotprod (kernels_neon.c); the file is
 * built for ARMv8.2-A+dotprod code.
 *
 * Bit identity with the reference (quant.h's numerics contract): every integer partial sum is exact
 * (any order gives the same integer), so only the float steps matter, and they are the reference's:
 *   Q4_0, Q8_0, IQ4_NL, MXFP4  per block acc = fma((float)p, dw * dx, acc), in block order (the table
 *               formats' codes are their table values, MXFP4's dw its E8M0 scale);
 *   Q5_0        the eight 4-element sums p[j] of a block are exactly the int32 lanes of two SDOTs
 *               over 16 bytes each, so the 16 fp32 lanes (block parity * 8 + j) take one vector fma;
 *   Q4_1, Q5_1  per block sum += (float)sumi * (dw * dx) + m * s, plain operations;
 *   K formats   per super-block the exact integers S1, S2 (S), then the reference's two (one) fmas.
 * The sub-block integer sums use SDOT on the quants as signed bytes (4-, 5- and 6-bit codes are
 * non-negative and below 128; Q4_0 / Q5_0 codes are shifted to -8..7 / -16..15 first).
 *
 * A tile runs row by row: a weight block is unpacked once and taken against every token of the tile
 * (up to 4, each with its own accumulators), so prefill unpacks each weight once per 4 tokens.
 *
 * Tile contract (kernels.h): each output's sequence of operations depends only on its own row and
 * token, whatever the tile, so a tile call equals 1x1 calls bit for bit.
 */
#include "tensor/kernels.h"

#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#include "tensor/kernels_neon_q.h"

/* ---- legacy formats ----
 * A tile runs row by row; each weight block is unpacked once into its 32 codes (two vectors) and
 * taken against every token of the tile, each token with its own accumulator. */

/* Q4_0, Q8_0, IQ4_NL, MXFP4 (x Q8_0): per block acc = fma((float)p, dw * dx, acc), dw = DW(block). */
#define TILE_BLOCK(NAME, WT, CODES, DW)                                                                                \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / 32;                                                                                     \
        for (int r = 0; r < nr; r++) {                                                                                 \
            const WT *a = (const WT *)(const void *)(w + (size_t)r * ws);                                              \
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                                   \
            for (int64_t i = 0; i < nb; i++) {                                                                         \
                int8x16_t c0, c1;                                                                                      \
                CODES(&a[i], &c0, &c1);                                                                                \
                const float dw = DW(&a[i]);                                                                            \
                for (int t = 0; t < nt; t++) {                                                                         \
                    const kn_block_q8_0 *b = (const kn_block_q8_0 *)(const void *)(x + (size_t)t * xs) + i;            \
                    acc[t] = fmaf((float)dot32(c0, c1, b->qs), dw * h2f(b->d), acc[t]);                                \
                }                                                                                                      \
            }                                                                                                          \
            for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = acc[t];                                    \
        }                                                                                                              \
    }
TILE_BLOCK(gemm_q8_0, kn_block_q8_0, codes_q8_0, DW_F16)
TILE_BLOCK(gemm_q4_0, kn_block_q4_0, codes_q4_0, DW_F16)
TILE_BLOCK(gemm_iq4_nl, kn_block_iq4_nl, codes_iq4_nl, DW_F16)
TILE_BLOCK(gemm_mxfp4, kn_block_mxfp4, codes_mxfp4, DW_E8M0)

/* Q4_1, Q5_1 (x Q8_1): per block sum += (float)sumi * (dw * dx) + m * s. */
#define TILE_OFFSET(NAME, WT, CODES)                                                                                   \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / 32;                                                                                     \
        for (int r = 0; r < nr; r++) {                                                                                 \
            const WT *a = (const WT *)(const void *)(w + (size_t)r * ws);                                              \
            float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                                                   \
            for (int64_t i = 0; i < nb; i++) {                                                                         \
                int8x16_t c0, c1;                                                                                      \
                CODES(&a[i], &c0, &c1);                                                                                \
                const float dw = h2f(a[i].d), m = h2f(a[i].m);                                                         \
                for (int t = 0; t < nt; t++) {                                                                         \
                    const kn_block_q8_1 *b = (const kn_block_q8_1 *)(const void *)(x + (size_t)t * xs) + i;            \
                    const float t1 = (float)dot32(c0, c1, b->qs) * (dw * h2f(b->d)), t2 = m * h2f(b->s);               \
                    sum[t] += t1 + t2;                                                                                 \
                }                                                                                                      \
            }                                                                                                          \
            for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = sum[t];                                    \
        }                                                                                                              \
    }
TILE_OFFSET(gemm_q4_1, kn_block_q4_1, codes_q4_1)
TILE_OFFSET(gemm_q5_1, kn_block_q5_1, codes_q5_1)

/* Q5_0 (x Q8_0): the eight 4-element sums of a block are the int32 lanes of two SDOTs; lanes
 * (block parity) * 8 + j of 16 fp32 accumulators, kn_reduce16 at the end. */
static void gemm_q5_0(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    const int64_t nb = n / 32;
    for (int r = 0; r < nr; r++) {
        const kn_block_q5_0 *a = (const kn_block_q5_0 *)(const void *)(w + (size_t)r * ws);
        float32x4_t acc[4][4];
        for (int t = 0; t < 4; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);
        for (int64_t i = 0; i < nb; i++) {
            int8x16_t c0, c1;
            codes_q5_0(&a[i], &c0, &c1);
            const float dw = h2f(a[i].d);
            const int k = (int)(i & 1) * 2;
            for (int t = 0; t < nt; t++) {
                const kn_block_q8_0 *b = (const kn_block_q8_0 *)(const void *)(x + (size_t)t * xs) + i;
                const int32x4_t p0 = vdotq_s32(vdupq_n_s32(0), c0, vld1q_s8(b->qs));      /* p[0..3] */
                const int32x4_t p1 = vdotq_s32(vdupq_n_s32(0), c1, vld1q_s8(b->qs + 16)); /* p[4..7] */
                const float s = dw * h2f(b->d);
                acc[t][k] = vfmaq_n_f32(acc[t][k], vcvtq_f32_s32(p0), s);
                acc[t][k + 1] = vfmaq_n_f32(acc[t][k + 1], vcvtq_f32_s32(p1), s);
            }
        }
        for (int t = 0; t < nt; t++) { /* kn_reduce16 */
            const float32x4_t v = vaddq_f32(vaddq_f32(acc[t][0], acc[t][2]), vaddq_f32(acc[t][1], acc[t][3]));
            const float32x2_t h = vadd_f32(vget_low_f32(v), vget_high_f32(v));
            out[(size_t)t * ldo + (size_t)r] = vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
        }
    }
}

/* ---- K formats ----
 * Row by row; each super-block's quants are unpacked once into 16 vectors (16 elements each, element
 * order) with the sub-block scales, then taken against every token of the tile. */

/* Q4_K, Q5_K (x Q8_K): sa = fma(S1, dw * dx, sa), sm = fma(S2, dmin * dx, sm); result sa - sm. */
#define TILE_K(NAME, WT, UNPACK)                                                                                       \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / KN_QK_K;                                                                                \
        for (int r = 0; r < nr; r++) {                                                                                 \
            const WT *a = (const WT *)(const void *)(w + (size_t)r * ws);                                              \
            float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sm[4] = {0.0f, 0.0f, 0.0f, 0.0f};                                  \
            for (int64_t i = 0; i < nb; i++) {                                                                         \
                int8x16_t q[16];                                                                                       \
                uint8_t sc[8], m[8];                                                                                   \
                UNPACK(&a[i], q, sc, m);                                                                               \
                const float d = h2f(a[i].d), dmin = h2f(a[i].dmin);                                                    \
                for (int t = 0; t < nt; t++) {                                                                         \
                    const kn_block_q8_k *b = (const kn_block_q8_k *)(const void *)(x + (size_t)t * xs) + i;            \
                    const int32_t sumi = k_sum32(q, sc, b->qs), summ = k_mins(m, b->bsums);                            \
                    sa[t] = fmaf((float)sumi, d * b->d, sa[t]);                                                        \
                    sm[t] = fmaf((float)summ, dmin * b->d, sm[t]);                                                     \
                }                                                                                                      \
            }                                                                                                          \
            for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = sa[t] - sm[t];                             \
        }                                                                                                              \
    }
TILE_K(gemm_q4_k, kn_block_q4_k, unpack_q4_k)
TILE_K(gemm_q5_k, kn_block_q5_k, unpack_q5_k)

/* Q6_K (x Q8_K): S = sum_j sc[j] * (q . xq - 32 bsums[j]); sa = fma(S, d * dx, sa). */
static void gemm_q6_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    for (int r = 0; r < nr; r++) {
        const kn_block_q6_k *a = (const kn_block_q6_k *)(const void *)(w + (size_t)r * ws);
        float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t i = 0; i < nb; i++) {
            int8x16_t q[16];
            unpack_q6_k(&a[i], q);
            const float d = h2f(a[i].d);
            for (int t = 0; t < nt; t++) {
                const kn_block_q8_k *b = (const kn_block_q8_k *)(const void *)(x + (size_t)t * xs) + i;
                int32_t sumi = 0;
                for (int j = 0; j < 16; j++) {
                    const int32_t s = vaddvq_s32(vdotq_s32(vdupq_n_s32(0), q[j], vld1q_s8(b->qs + 16 * j)));
                    sumi += (int32_t)a[i].scales[j] * (s - 32 * (int32_t)b->bsums[j]);
                }
                sa[t] = fmaf((float)sumi, d * b->d, sa[t]);
            }
        }
        for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = sa[t];
    }
}
#endif

bool kn_neon_init_dotprod(kn_kernels *k) {
#if defined(__aarch64__)
    k->name = "neon+dotprod";
    k->gemm[KN_Q4_0] = gemm_q4_0;
    k->gemm[KN_Q4_1] = gemm_q4_1;
    k->gemm[KN_Q5_0] = gemm_q5_0;
    k->gemm[KN_Q5_1] = gemm_q5_1;
    k->gemm[KN_Q8_0] = gemm_q8_0;
    k->gemm[KN_IQ4_NL] = gemm_iq4_nl;
    k->gemm[KN_MXFP4] = gemm_mxfp4;
    k->gemm[KN_Q4_K] = gemm_q4_k;
    k->gemm[KN_Q5_K] = gemm_q5_k;
    k->gemm[KN_Q6_K] = gemm_q6_k;
    kn_neon_init_lowbit(k);
    kn_neon_init_mlx(k);
    return true;
#else
    (void)k;
    return false;
#endif
}
