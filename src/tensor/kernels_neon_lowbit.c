/*
 * kernels_neon_lowbit.c - ARM64 NEON GEMM tile kernels of the low-bit formats, with the dotprod
 * extension: Q2_K, Q3_K and IQ4_XS (x Q8_K). Registered with the other block formats when the CPU
 * reports dotprod (kn_neon_init_dotprod); the file is built for ARMv8.2-A+dotprod code. (IQ4_NL and
 * MXFP4, blocks of 32 with one scale, run Q4_0's kernels with a table: kernels_neon_q.c.)
 *
 * Bit identity with the reference (quant_lowbit.c, quant_nl.c; quant.h's numerics contract): the
 * codes are decoded to signed bytes in element order (Q3_K as q in -4..3, IQ4_XS as its signed table
 * values), so SDOT gives exact integer sums without the sign tricks x86 needs, and the float steps are
 * the reference's: per super-block the exact S1 (sub-block sums by SDOT, reduced four sub-blocks at a
 * time and multiplied by the integer scales) and Q2_K's S2, then the reference's fma (two for Q2_K,
 * result sa - sm).
 *
 * A tile runs row by row: a weight block is decoded once and taken against every token of the tile
 * (up to 4, each with its own accumulators), so the tile contract (kernels.h) holds: each output's
 * operations depend only on its own row and token.
 */
#include "tensor/kernels.h"

#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#include "tensor/kernels_neon_q.h"

/* ---- Q2_K, Q3_K, IQ4_XS (super-blocks of 256, Q8_K activations) ---- */

/* S1 of one decoded super-block against one token's quants: sum_j s[j] * (sub-block j sums). */
static inline int32_t lb_sum(int kind, const lb_row *R, const int8_t *xq) {
    int32x4_t acc = vdupq_n_s32(0);
    if (kind == LB_IQ4XS) { /* 8 sub-blocks of 32 */
        for (int g = 0; g < 2; g++) {
            int32x4_t p[4];
            for (int k = 0; k < 4; k++) {
                const int j = 4 * g + k;
                p[k] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), R->q[2 * j], vld1q_s8(xq + 32 * j)), R->q[2 * j + 1],
                                 vld1q_s8(xq + 32 * j + 16));
            }
            acc = vmlaq_s32(acc, sums4(p[0], p[1], p[2], p[3]), vld1q_s32(R->s + 4 * g));
        }
    } else { /* 16 sub-blocks of 16 */
        for (int g = 0; g < 4; g++) {
            int32x4_t p[4];
            for (int k = 0; k < 4; k++)
                p[k] = vdotq_s32(vdupq_n_s32(0), R->q[4 * g + k], vld1q_s8(xq + 16 * (4 * g + k)));
            acc = vmlaq_s32(acc, sums4(p[0], p[1], p[2], p[3]), vld1q_s32(R->s + 4 * g));
        }
    }
    return vaddvq_s32(acc);
}

/* sa = fma(S1, d * dx, sa) per super-block (Q2_K also sm = fma(S2, dmin * dx, sm); result sa - sm). */
static inline void gemm_lb(int kind, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                           int nt, float *out, size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = w + (size_t)r * ws;
        float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t i = 0; i < nb; i++) {
            lb_row R;
            lb_decode(kind, row, i, &R);
            for (int t = 0; t < nt; t++) {
                const kn_block_q8_k *y = (const kn_block_q8_k *)(const void *)(x + (size_t)t * xs) + i;
                sa[t] = fmaf((float)lb_sum(kind, &R, y->qs), R.d * y->d, sa[t]);
                if (kind == LB_Q2) sm[t] = fmaf((float)lb_mins(&R, y->bsums), R.dmin * y->d, sm[t]);
            }
        }
        for (int t = 0; t < nt; t++) out[(size_t)t * ldo + (size_t)r] = kind == LB_Q2 ? sa[t] - sm[t] : sa[t];
    }
}

static void gemm_q2_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    gemm_lb(LB_Q2, n, w, ws, nr, x, xs, nt, out, ldo);
}
static void gemm_q3_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    gemm_lb(LB_Q3, n, w, ws, nr, x, xs, nt, out, ldo);
}
static void gemm_iq4_xs(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                        size_t ldo) {
    gemm_lb(LB_IQ4XS, n, w, ws, nr, x, xs, nt, out, ldo);
}
#endif

bool kn_neon_init_lowbit(kn_kernels *k) {
#if defined(__aarch64__)
    k->gemm[KN_Q2_K] = gemm_q2_k;
    k->gemm[KN_Q3_K] = gemm_q3_k;
    k->gemm[KN_IQ4_XS] = gemm_iq4_xs;
    return true;
#else
    (void)k;
    return false;
#endif
}
