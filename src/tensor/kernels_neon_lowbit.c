/*
 * kernels_neon_lowbit.c - ARM64 NEON GEMM tile kernels of the low-bit and table formats, with the
 * dotprod extension: Q2_K, Q3_K and IQ4_XS (x Q8_K), IQ4_NL and MXFP4 (x Q8_0). Registered with the
 * other block formats when the CPU reports dotprod (kn_neon_init_dotprod); the file is built for
 * ARMv8.2-A+dotprod code.
 *
 * Bit identity with the reference (quant_lowbit.c, quant_nl.c; quant.h's numerics contract): the
 * codes are decoded to signed bytes in element order (Q3_K as q in -4..3, the table formats as their
 * signed table values), so SDOT gives exact integer sums without the sign tricks x86 needs, and the
 * float steps are the reference's:
 *   Q2_K, Q3_K, IQ4_XS  per super-block the exact S1 (sub-block sums by SDOT, reduced four sub-blocks
 *                       at a time and multiplied by the integer scales) and Q2_K's S2, then the
 *                       reference's fma (two for Q2_K, result sa - sm);
 *   IQ4_NL, MXFP4       as Q5_0: the eight 4-element sums p[j] of a block are exactly the int32 lanes of
 *                       two SDOTs, so the 16 fp32 lanes (block parity * 8 + j) take one vector fma with
 *                       s = dw * dx (MXFP4: dw = kn_e8m0_half(e)), then kn_reduce16's order.
 *
 * A tile runs row by row: a weight block is decoded once and taken against every token of the tile
 * (up to 4, each with its own accumulators), so the tile contract (kernels.h) holds: each output's
 * operations depend only on its own row and token.
 */
#include "tensor/kernels.h"

#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod")
#include "tensor/kernels_neon_q.h"

/* ---- IQ4_NL, MXFP4 (blocks of 32, Q8_0 activations) ---- */

enum { NL_IQ4 = 0, NL_MXFP4 = 1 };

static inline void gemm_nl(int kind, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                           int nt, float *out, size_t ldo) {
    const int64_t nb = n / 32;
    const int8x16_t lut = vld1q_s8(kind == NL_IQ4 ? kn_iq4nl_values : kn_mxfp4_values);
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = w + (size_t)r * ws;
        float32x4_t acc[4][4];
        for (int t = 0; t < 4; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);
        for (int64_t i = 0; i < nb; i++) {
            int8x16_t c0, c1;
            float dw;
            if (kind == NL_IQ4) {
                const kn_block_iq4_nl *a = (const kn_block_iq4_nl *)(const void *)row + i;
                codes_table(a->qs, lut, &c0, &c1);
                dw = h2f(a->d);
            } else {
                const kn_block_mxfp4 *a = (const kn_block_mxfp4 *)(const void *)row + i;
                codes_table(a->qs, lut, &c0, &c1);
                dw = kn_e8m0_half(a->e);
            }
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

static void gemm_iq4_nl(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                        size_t ldo) {
    gemm_nl(NL_IQ4, n, w, ws, nr, x, xs, nt, out, ldo);
}
static void gemm_mxfp4(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                       size_t ldo) {
    gemm_nl(NL_MXFP4, n, w, ws, nr, x, xs, nt, out, ldo);
}

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
    k->gemm[KN_IQ4_NL] = gemm_iq4_nl;
    k->gemm[KN_MXFP4] = gemm_mxfp4;
    return true;
#else
    (void)k;
    return false;
#endif
}
