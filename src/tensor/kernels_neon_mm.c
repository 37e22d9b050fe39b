/*
 * kernels_neon_mm.c - ARM64 GEMM tile kernels with the i8mm extension (SMMLA: a 2x8 by 8x2 int8
 * matrix product into 2x2 int32 lanes) for Q4_0, Q8_0, IQ4_NL, MXFP4, Q4_1, Q5_1, the K formats Q4_K,
 * Q5_K, Q6_K and the low-bit ones Q2_K, Q3_K, IQ4_XS: one SMMLA takes 8 elements of two weight rows
 * against the same 8 elements of two tokens, so a 2x2 block of outputs shares every load and unpack.
 * Registered over the dotprod kernels when the CPU reports i8mm (kernels_neon.c); Q5_0, whose reference
 * sums 4 elements at a time, keeps the dotprod kernel.
 *
 * Bit identity: SMMLA's lanes are exact int32 sums of 8 products; four (two for Q6_K's 16-element
 * sub-blocks) give exactly the block or sub-block sums the dotprod kernels compute, and the float
 * steps after them are the same, per output, in the same order (quant.h's contract). A tile runs in
 * pairs of rows and pairs of tokens; a last odd row or token goes to the dotprod kernel, which gives
 * the same bits, so the tile contract (kernels.h) holds whatever the shape.
 */
#include "tensor/kernels.h"

#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
#include "tensor/kernels_neon_q.h"

/* The dotprod kernels, for the rows and tokens left over from the pairs (set at init). */
static kn_gemm_fn g_dot[KN_DTYPE_COUNT];

/* [row a elements 0..7 | row b elements 0..7] and [a 8..15 | b 8..15] from a's and b's 16 bytes. */
static inline int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* 2x2 exact sums over 32 elements: lanes (a.u, a.v, b.u, b.v) for weight codes a0|a1 and b0|b1
 * (elements 0..15 | 16..31) and activations u, v (32 bytes each). */
static inline int32x4_t mm32(int32x4_t acc, int8x16_t a0, int8x16_t a1, int8x16_t b0, int8x16_t b1, const int8_t *u,
                             const int8_t *v) {
    const int8x16_t u0 = vld1q_s8(u), u1 = vld1q_s8(u + 16), v0 = vld1q_s8(v), v1 = vld1q_s8(v + 16);
    acc = vmmlaq_s32(acc, zip_lo(a0, b0), zip_lo(u0, v0));
    acc = vmmlaq_s32(acc, zip_hi(a0, b0), zip_hi(u0, v0));
    acc = vmmlaq_s32(acc, zip_lo(a1, b1), zip_lo(u1, v1));
    return vmmlaq_s32(acc, zip_hi(a1, b1), zip_hi(u1, v1));
}

/* The same over 16 elements. */
static inline int32x4_t mm16(int8x16_t a, int8x16_t b, const int8_t *u, const int8_t *v) {
    const int8x16_t u0 = vld1q_s8(u), v0 = vld1q_s8(v);
    return vmmlaq_s32(vmmlaq_s32(vdupq_n_s32(0), zip_lo(a, b), zip_lo(u0, v0)), zip_hi(a, b), zip_hi(u0, v0));
}

/* The leftovers of a tile done in pairs: rows [0, nr2) x tokens [nt2, nt) and rows [nr2, nr) x all
 * tokens, through the dotprod kernel of type t. */
static void leftovers(kn_dtype t, int64_t n, const uint8_t *w, size_t ws, int nr, int nr2, const uint8_t *x, size_t xs,
                      int nt, int nt2, float *out, size_t ldo) {
    if (nt2 < nt && nr2 > 0) g_dot[t](n, w, ws, nr2, x + (size_t)nt2 * xs, xs, nt - nt2, out + (size_t)nt2 * ldo, ldo);
    if (nr2 < nr) g_dot[t](n, w + (size_t)nr2 * ws, ws, nr - nr2, x, xs, nt, out + nr2, ldo);
}

/* ---- legacy formats ---- */

/* Q4_0, Q8_0, IQ4_NL, MXFP4 (x Q8_0): per block acc = fma((float)p, dw * dx, acc), dw = DW(block), for a
 * 2x2 block of outputs. */
#define MM_BLOCK(NAME, TYPE, WT, CODES, DW)                                                                            \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / 32;                                                                                     \
        const int nr2 = nr & ~1, nt2 = nt & ~1;                                                                        \
        for (int r = 0; r < nr2; r += 2) {                                                                             \
            const WT *a = (const WT *)(const void *)(w + (size_t)r * ws);                                              \
            const WT *b = (const WT *)(const void *)(w + (size_t)(r + 1) * ws);                                        \
            for (int t = 0; t < nt2; t += 2) {                                                                         \
                const kn_block_q8_0 *u = (const kn_block_q8_0 *)(const void *)(x + (size_t)t * xs);                    \
                const kn_block_q8_0 *v = (const kn_block_q8_0 *)(const void *)(x + (size_t)(t + 1) * xs);              \
                float au = 0.0f, av = 0.0f, bu = 0.0f, bv = 0.0f;                                                      \
                for (int64_t i = 0; i < nb; i++) {                                                                     \
                    int8x16_t a0, a1, b0, b1;                                                                          \
                    CODES(&a[i], &a0, &a1);                                                                            \
                    CODES(&b[i], &b0, &b1);                                                                            \
                    const int32x4_t p = mm32(vdupq_n_s32(0), a0, a1, b0, b1, u[i].qs, v[i].qs);                        \
                    const float da = DW(&a[i]), db = DW(&b[i]), du = h2f(u[i].d), dv = h2f(v[i].d);                    \
                    au = fmaf((float)vgetq_lane_s32(p, 0), da * du, au);                                               \
                    av = fmaf((float)vgetq_lane_s32(p, 1), da * dv, av);                                               \
                    bu = fmaf((float)vgetq_lane_s32(p, 2), db * du, bu);                                               \
                    bv = fmaf((float)vgetq_lane_s32(p, 3), db * dv, bv);                                               \
                }                                                                                                      \
                out[(size_t)t * ldo + (size_t)r] = au;                                                                 \
                out[(size_t)(t + 1) * ldo + (size_t)r] = av;                                                           \
                out[(size_t)t * ldo + (size_t)r + 1] = bu;                                                             \
                out[(size_t)(t + 1) * ldo + (size_t)r + 1] = bv;                                                       \
            }                                                                                                          \
        }                                                                                                              \
        leftovers(TYPE, n, w, ws, nr, nr2, x, xs, nt, nt2, out, ldo);                                                  \
    }
MM_BLOCK(mm_q8_0, KN_Q8_0, kn_block_q8_0, codes_q8_0, DW_F16)
MM_BLOCK(mm_q4_0, KN_Q4_0, kn_block_q4_0, codes_q4_0, DW_F16)
MM_BLOCK(mm_iq4_nl, KN_IQ4_NL, kn_block_iq4_nl, codes_iq4_nl, DW_F16)
MM_BLOCK(mm_mxfp4, KN_MXFP4, kn_block_mxfp4, codes_mxfp4, DW_E8M0)

/* Q4_1, Q5_1 (x Q8_1): per block sum += (float)sumi * (dw * dx) + m * s. */
static inline float offset_step(float sum, int32_t sumi, float dw, float m, const kn_block_q8_1 *x) {
    const float t1 = (float)sumi * (dw * h2f(x->d)), t2 = m * h2f(x->s);
    return sum + (t1 + t2);
}

#define MM_OFFSET(NAME, TYPE, WT, CODES)                                                                               \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / 32;                                                                                     \
        const int nr2 = nr & ~1, nt2 = nt & ~1;                                                                        \
        for (int r = 0; r < nr2; r += 2) {                                                                             \
            const WT *a = (const WT *)(const void *)(w + (size_t)r * ws);                                              \
            const WT *b = (const WT *)(const void *)(w + (size_t)(r + 1) * ws);                                        \
            for (int t = 0; t < nt2; t += 2) {                                                                         \
                const kn_block_q8_1 *u = (const kn_block_q8_1 *)(const void *)(x + (size_t)t * xs);                    \
                const kn_block_q8_1 *v = (const kn_block_q8_1 *)(const void *)(x + (size_t)(t + 1) * xs);              \
                float au = 0.0f, av = 0.0f, bu = 0.0f, bv = 0.0f;                                                      \
                for (int64_t i = 0; i < nb; i++) {                                                                     \
                    int8x16_t a0, a1, b0, b1;                                                                          \
                    CODES(&a[i], &a0, &a1);                                                                            \
                    CODES(&b[i], &b0, &b1);                                                                            \
                    const int32x4_t p = mm32(vdupq_n_s32(0), a0, a1, b0, b1, u[i].qs, v[i].qs);                        \
                    const float da = h2f(a[i].d), db = h2f(b[i].d), ma = h2f(a[i].m), mb = h2f(b[i].m);                \
                    au = offset_step(au, vgetq_lane_s32(p, 0), da, ma, &u[i]);                                         \
                    av = offset_step(av, vgetq_lane_s32(p, 1), da, ma, &v[i]);                                         \
                    bu = offset_step(bu, vgetq_lane_s32(p, 2), db, mb, &u[i]);                                         \
                    bv = offset_step(bv, vgetq_lane_s32(p, 3), db, mb, &v[i]);                                         \
                }                                                                                                      \
                out[(size_t)t * ldo + (size_t)r] = au;                                                                 \
                out[(size_t)(t + 1) * ldo + (size_t)r] = av;                                                           \
                out[(size_t)t * ldo + (size_t)r + 1] = bu;                                                             \
                out[(size_t)(t + 1) * ldo + (size_t)r + 1] = bv;                                                       \
            }                                                                                                          \
        }                                                                                                              \
        leftovers(TYPE, n, w, ws, nr, nr2, x, xs, nt, nt2, out, ldo);                                                  \
    }
MM_OFFSET(mm_q4_1, KN_Q4_1, kn_block_q4_1, codes_q4_1)
MM_OFFSET(mm_q5_1, KN_Q5_1, kn_block_q5_1, codes_q5_1)

/* ---- K formats ---- */

/* Per super-block, lanes (a.u, a.v, b.u, b.v): S1 = sum_j sc[j] * (sub-block j sums). */
static inline int32x4_t k_mm_sum32(const int8x16_t qa[16], const int8x16_t qb[16], const uint8_t sa[8],
                                   const uint8_t sb[8], const int8_t *u, const int8_t *v) {
    int32x4_t s = vdupq_n_s32(0);
    for (int j = 0; j < 8; j++) {
        const int32x4_t p =
            mm32(vdupq_n_s32(0), qa[2 * j], qa[2 * j + 1], qb[2 * j], qb[2 * j + 1], u + 32 * j, v + 32 * j);
        const int32x4_t sc = vcombine_s32(vdup_n_s32(sa[j]), vdup_n_s32(sb[j]));
        s = vmlaq_s32(s, p, sc);
    }
    return s;
}

/* Q4_K, Q5_K (x Q8_K): sa = fma(S1, dw * dx, sa), sm = fma(S2, dmin * dx, sm); result sa - sm. */
#define MM_K(NAME, TYPE, WT, UNPACK)                                                                                   \
    static void NAME(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,  \
                     size_t ldo) {                                                                                     \
        const int64_t nb = n / KN_QK_K;                                                                                \
        const int nr2 = nr & ~1, nt2 = nt & ~1;                                                                        \
        for (int r = 0; r < nr2; r += 2) {                                                                             \
            const WT *a = (const WT *)(const void *)(w + (size_t)r * ws);                                              \
            const WT *b = (const WT *)(const void *)(w + (size_t)(r + 1) * ws);                                        \
            for (int t = 0; t < nt2; t += 2) {                                                                         \
                const kn_block_q8_k *u = (const kn_block_q8_k *)(const void *)(x + (size_t)t * xs);                    \
                const kn_block_q8_k *v = (const kn_block_q8_k *)(const void *)(x + (size_t)(t + 1) * xs);              \
                float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sm[4] = {0.0f, 0.0f, 0.0f, 0.0f};                              \
                for (int64_t i = 0; i < nb; i++) {                                                                     \
                    int8x16_t qa[16], qb[16];                                                                          \
                    uint8_t sca[8], ma[8], scb[8], mb[8];                                                              \
                    UNPACK(&a[i], qa, sca, ma);                                                                        \
                    UNPACK(&b[i], qb, scb, mb);                                                                        \
                    int32_t s1[4];                                                                                     \
                    vst1q_s32(s1, k_mm_sum32(qa, qb, sca, scb, u[i].qs, v[i].qs));                                     \
                    const int32_t s2[4] = {k_mins(ma, u[i].bsums), k_mins(ma, v[i].bsums), k_mins(mb, u[i].bsums),     \
                                           k_mins(mb, v[i].bsums)};                                                    \
                    const float d[2] = {h2f(a[i].d), h2f(b[i].d)}, dm[2] = {h2f(a[i].dmin), h2f(b[i].dmin)};           \
                    const float dx[2] = {u[i].d, v[i].d};                                                              \
                    for (int k = 0; k < 4; k++) {                                                                      \
                        sa[k] = fmaf((float)s1[k], d[k >> 1] * dx[k & 1], sa[k]);                                      \
                        sm[k] = fmaf((float)s2[k], dm[k >> 1] * dx[k & 1], sm[k]);                                     \
                    }                                                                                                  \
                }                                                                                                      \
                for (int k = 0; k < 4; k++) out[(size_t)(t + (k & 1)) * ldo + (size_t)(r + (k >> 1))] = sa[k] - sm[k]; \
            }                                                                                                          \
        }                                                                                                              \
        leftovers(TYPE, n, w, ws, nr, nr2, x, xs, nt, nt2, out, ldo);                                                  \
    }
MM_K(mm_q4_k, KN_Q4_K, kn_block_q4_k, unpack_q4_k)
MM_K(mm_q5_k, KN_Q5_K, kn_block_q5_k, unpack_q5_k)

/* Q6_K (x Q8_K): S = sum_j sc[j] * (q . xq - 32 bsums[j]); sa = fma(S, d * dx, sa). */
static void mm_q6_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                    size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    const int nr2 = nr & ~1, nt2 = nt & ~1;
    for (int r = 0; r < nr2; r += 2) {
        const kn_block_q6_k *a = (const kn_block_q6_k *)(const void *)(w + (size_t)r * ws);
        const kn_block_q6_k *b = (const kn_block_q6_k *)(const void *)(w + (size_t)(r + 1) * ws);
        for (int t = 0; t < nt2; t += 2) {
            const kn_block_q8_k *u = (const kn_block_q8_k *)(const void *)(x + (size_t)t * xs);
            const kn_block_q8_k *v = (const kn_block_q8_k *)(const void *)(x + (size_t)(t + 1) * xs);
            float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t i = 0; i < nb; i++) {
                int8x16_t qa[16], qb[16];
                unpack_q6_k(&a[i], qa);
                unpack_q6_k(&b[i], qb);
                int32x4_t s = vdupq_n_s32(0);
                for (int j = 0; j < 16; j++) {
                    const int32x4_t p = mm16(qa[j], qb[j], u[i].qs + 16 * j, v[i].qs + 16 * j);
                    const int32x2_t bs = {u[i].bsums[j], v[i].bsums[j]};
                    const int32x4_t off = vshlq_n_s32(vcombine_s32(bs, bs), 5); /* 32 bsums, lanes (u, v, u, v) */
                    const int32x4_t sc = vcombine_s32(vdup_n_s32(a[i].scales[j]), vdup_n_s32(b[i].scales[j]));
                    s = vmlaq_s32(s, vsubq_s32(p, off), sc);
                }
                int32_t s1[4];
                vst1q_s32(s1, s);
                const float d[2] = {h2f(a[i].d), h2f(b[i].d)}, dx[2] = {u[i].d, v[i].d};
                for (int k = 0; k < 4; k++) sa[k] = fmaf((float)s1[k], d[k >> 1] * dx[k & 1], sa[k]);
            }
            for (int k = 0; k < 4; k++) out[(size_t)(t + (k & 1)) * ldo + (size_t)(r + (k >> 1))] = sa[k];
        }
    }
    leftovers(KN_Q6_K, n, w, ws, nr, nr2, x, xs, nt, nt2, out, ldo);
}

/* ---- Q2_K, Q3_K, IQ4_XS ---- */

/* Per super-block, lanes (a.u, a.v, b.u, b.v): S1 = sum_j s[j] * (sub-block j sums). */
static inline int32x4_t lb_mm_sum(int kind, const lb_row *A, const lb_row *B, const int8_t *u, const int8_t *v) {
    int32x4_t s = vdupq_n_s32(0);
    if (kind == LB_IQ4XS) {
        for (int j = 0; j < 8; j++) {
            const int32x4_t p = mm32(vdupq_n_s32(0), A->q[2 * j], A->q[2 * j + 1], B->q[2 * j], B->q[2 * j + 1],
                                     u + 32 * j, v + 32 * j);
            s = vmlaq_s32(s, p, vcombine_s32(vdup_n_s32(A->s[j]), vdup_n_s32(B->s[j])));
        }
    } else {
        for (int j = 0; j < 16; j++) {
            const int32x4_t p = mm16(A->q[j], B->q[j], u + 16 * j, v + 16 * j);
            s = vmlaq_s32(s, p, vcombine_s32(vdup_n_s32(A->s[j]), vdup_n_s32(B->s[j])));
        }
    }
    return s;
}

/* sa = fma(S1, d * dx, sa) per super-block (Q2_K also sm = fma(S2, dmin * dx, sm); result sa - sm). */
static inline void mm_lb(int kind, kn_dtype type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                         size_t xs, int nt, float *out, size_t ldo) {
    const int64_t nb = n / KN_QK_K;
    const int nr2 = nr & ~1, nt2 = nt & ~1;
    for (int r = 0; r < nr2; r += 2) {
        const uint8_t *a = w + (size_t)r * ws, *b = w + (size_t)(r + 1) * ws;
        for (int t = 0; t < nt2; t += 2) {
            const kn_block_q8_k *u = (const kn_block_q8_k *)(const void *)(x + (size_t)t * xs);
            const kn_block_q8_k *v = (const kn_block_q8_k *)(const void *)(x + (size_t)(t + 1) * xs);
            float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t i = 0; i < nb; i++) {
                lb_row A, B;
                lb_decode(kind, a, i, &A);
                lb_decode(kind, b, i, &B);
                int32_t s1[4];
                vst1q_s32(s1, lb_mm_sum(kind, &A, &B, u[i].qs, v[i].qs));
                const float d[2] = {A.d, B.d}, dx[2] = {u[i].d, v[i].d};
                for (int k = 0; k < 4; k++) sa[k] = fmaf((float)s1[k], d[k >> 1] * dx[k & 1], sa[k]);
                if (kind == LB_Q2) {
                    const int32_t s2[4] = {lb_mins(&A, u[i].bsums), lb_mins(&A, v[i].bsums), lb_mins(&B, u[i].bsums),
                                           lb_mins(&B, v[i].bsums)};
                    const float dm[2] = {A.dmin, B.dmin};
                    for (int k = 0; k < 4; k++) sm[k] = fmaf((float)s2[k], dm[k >> 1] * dx[k & 1], sm[k]);
                }
            }
            for (int k = 0; k < 4; k++)
                out[(size_t)(t + (k & 1)) * ldo + (size_t)(r + (k >> 1))] = kind == LB_Q2 ? sa[k] - sm[k] : sa[k];
        }
    }
    leftovers(type, n, w, ws, nr, nr2, x, xs, nt, nt2, out, ldo);
}

static void mm_q2_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                    size_t ldo) {
    mm_lb(LB_Q2, KN_Q2_K, n, w, ws, nr, x, xs, nt, out, ldo);
}
static void mm_q3_k(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                    size_t ldo) {
    mm_lb(LB_Q3, KN_Q3_K, n, w, ws, nr, x, xs, nt, out, ldo);
}
static void mm_iq4_xs(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt, float *out,
                      size_t ldo) {
    mm_lb(LB_IQ4XS, KN_IQ4_XS, n, w, ws, nr, x, xs, nt, out, ldo);
}
#endif

bool kn_neon_init_i8mm(kn_kernels *k) {
#if defined(__aarch64__)
    const kn_dtype types[] = {KN_Q4_0, KN_Q8_0, KN_IQ4_NL, KN_MXFP4, KN_Q4_1, KN_Q5_1,
                              KN_Q4_K, KN_Q5_K, KN_Q6_K,   KN_Q2_K,  KN_Q3_K, KN_IQ4_XS};
    const kn_gemm_fn mm[] = {mm_q4_0, mm_q8_0, mm_iq4_nl, mm_mxfp4, mm_q4_1, mm_q5_1,
                             mm_q4_k, mm_q5_k, mm_q6_k,   mm_q2_k,  mm_q3_k, mm_iq4_xs};
    kn_kernels dot = *k;
    if (!kn_neon_init_dotprod(&dot)) return false;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        g_dot[types[i]] = dot.gemm[types[i]];
        k->gemm[types[i]] = mm[i];
    }
    k->name = "neon+i8mm";
    return true;
#else
    (void)k;
    return false;
#endif
}
