/*
 * kernels_neon_q.h - the block unpacking shared by the ARM64 integer kernels (kernels_neon_q.c with
 * dotprod, kernels_neon_mm.c with i8mm): fp16 scales, the signed-byte codes of the legacy blocks and
 * the K super-blocks in element order, and their exact integer sums. Included only by files built
 * for ARMv8.2-A+dotprod (or later), after arm_neon.h.
 */
#ifndef KN_KERNELS_NEON_Q_H
#define KN_KERNELS_NEON_Q_H

#include "tensor/quant.h"

#include <arm_neon.h>
#include <string.h>

/* fp16 bits to fp32 (exact; the hardware conversion, equal to kn_fp16_to_fp32 for every non-NaN). */
static inline float h2f(kn_half h) {
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

/* sum of a[e] * b[e] over 32 bytes, exact. */
static inline int32_t dot32(int8x16_t a0, int8x16_t a1, const int8_t *b) {
    int32x4_t s = vdotq_s32(vdupq_n_s32(0), a0, vld1q_s8(b));
    s = vdotq_s32(s, a1, vld1q_s8(b + 16));
    return vaddvq_s32(s);
}

/* The 32 bit-4 bytes (0 or 16) of a 5-bit legacy block: element e has bit e of qh (little-endian). */
static inline void legacy_hbits(const uint8_t qh[4], uint8x16_t *h0, uint8x16_t *h1) {
    static const uint8_t idx0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint32_t q32;
    memcpy(&q32, qh, 4);
    const uint8x16_t src = vreinterpretq_u8_u32(vdupq_n_u32(q32));
    const uint8x16_t i0 = vld1q_u8(idx0), b = vld1q_u8(bits), sixteen = vdupq_n_u8(16);
    *h0 = vandq_u8(vtstq_u8(vqtbl1q_u8(src, i0), b), sixteen);
    *h1 = vandq_u8(vtstq_u8(vqtbl1q_u8(src, vaddq_u8(i0, vdupq_n_u8(2))), b), sixteen);
}

/* ---- legacy formats ---- */

/* Codes of one block: c0 = elements 0..15, c1 = elements 16..31 (signed bytes). */
static inline void codes_q8_0(const kn_block_q8_0 *a, int8x16_t *c0, int8x16_t *c1) {
    *c0 = vld1q_s8(a->qs);
    *c1 = vld1q_s8(a->qs + 16);
}
static inline void codes_q4_0(const kn_block_q4_0 *a, int8x16_t *c0, int8x16_t *c1) {
    const uint8x16_t q = vld1q_u8(a->qs);
    *c0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
    *c1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
}
static inline void codes_q5_0(const kn_block_q5_0 *a, int8x16_t *c0, int8x16_t *c1) {
    uint8x16_t h0, h1;
    legacy_hbits(a->qh, &h0, &h1);
    const uint8x16_t q = vld1q_u8(a->qs);
    *c0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), h0)), vdupq_n_s8(16));
    *c1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), h1)), vdupq_n_s8(16));
}
static inline void codes_q4_1(const kn_block_q4_1 *a, int8x16_t *c0, int8x16_t *c1) {
    const uint8x16_t q = vld1q_u8(a->qs);
    *c0 = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F)));
    *c1 = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
}
static inline void codes_q5_1(const kn_block_q5_1 *a, int8x16_t *c0, int8x16_t *c1) {
    uint8x16_t h0, h1;
    legacy_hbits(a->qh, &h0, &h1);
    const uint8x16_t q = vld1q_u8(a->qs);
    *c0 = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), h0));
    *c1 = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), h1));
}

/* ---- K formats ---- */

/* S2 of Q4_K / Q5_K: sum_j m[j] * (bsums[2j] + bsums[2j + 1]). */
static inline int32_t k_mins(const uint8_t m[8], const int16_t bsums[16]) {
    int32_t summ = 0;
    for (int j = 0; j < 8; j++) summ += (int32_t)m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return summ;
}

/* S1 = sum over the 8 sub-blocks of 32 of sc[j] * (q . xq): q[2j], q[2j + 1] hold sub-block j. */
static inline int32_t k_sum32(const int8x16_t q[16], const uint8_t sc[8], const int8_t *xq) {
    int32_t sumi = 0;
    for (int j = 0; j < 8; j++) {
        int32x4_t s = vdotq_s32(vdupq_n_s32(0), q[2 * j], vld1q_s8(xq + 32 * j));
        s = vdotq_s32(s, q[2 * j + 1], vld1q_s8(xq + 32 * j + 16));
        sumi += (int32_t)sc[j] * vaddvq_s32(s);
    }
    return sumi;
}

static inline void unpack_q4_k(const kn_block_q4_k *a, int8x16_t q[16], uint8_t sc[8], uint8_t m[8]) {
    const uint8x16_t lo = vdupq_n_u8(0x0F);
    for (int j = 0; j < 8; j++) kn_k_scale_min(j, a->scales, &sc[j], &m[j]);
    for (int c = 0; c < 4; c++) { /* chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high) */
        const uint8x16_t q0 = vld1q_u8(a->qs + 32 * c), q1 = vld1q_u8(a->qs + 32 * c + 16);
        q[4 * c] = vreinterpretq_s8_u8(vandq_u8(q0, lo));
        q[4 * c + 1] = vreinterpretq_s8_u8(vandq_u8(q1, lo));
        q[4 * c + 2] = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4));
        q[4 * c + 3] = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
    }
}

static inline void unpack_q5_k(const kn_block_q5_k *a, int8x16_t q[16], uint8_t sc[8], uint8_t m[8]) {
    const uint8x16_t lo = vdupq_n_u8(0x0F), sixteen = vdupq_n_u8(16);
    const uint8x16_t h0 = vld1q_u8(a->qh), h1 = vld1q_u8(a->qh + 16);
    for (int j = 0; j < 8; j++) kn_k_scale_min(j, a->scales, &sc[j], &m[j]);
    for (int c = 0; c < 4; c++) { /* bit 4 of sub-block j is bit j of qh[l] */
        const uint8x16_t q0 = vld1q_u8(a->qs + 32 * c), q1 = vld1q_u8(a->qs + 32 * c + 16);
        const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * c))), bh = vdupq_n_u8((uint8_t)(2u << (2 * c)));
        q[4 * c] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q0, lo), vandq_u8(vtstq_u8(h0, bl), sixteen)));
        q[4 * c + 1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q1, lo), vandq_u8(vtstq_u8(h1, bl), sixteen)));
        q[4 * c + 2] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q0, 4), vandq_u8(vtstq_u8(h0, bh), sixteen)));
        q[4 * c + 3] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q1, 4), vandq_u8(vtstq_u8(h1, bh), sixteen)));
    }
}

/* Q6_K quants of a super-block in element order, 16 per vector (sub-block j in q[j]), 0..63. Element
 * e = 128h + 32k + l: low 4 bits from ql[64h + 32(k & 1) + l] (high nibble for k >= 2), high 2 bits
 * from bits 2k, 2k + 1 of qh[32h + l]. */
static inline void unpack_q6_k(const kn_block_q6_k *a, int8x16_t q[16]) {
    const uint8x16_t lo = vdupq_n_u8(0x0F), three = vdupq_n_u8(3);
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = a->ql + 64 * h, *qh = a->qh + 32 * h;
        const uint8x16_t L[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32), vld1q_u8(ql + 48)};
        const uint8x16_t H[2] = {vld1q_u8(qh), vld1q_u8(qh + 16)};
        for (int half = 0; half < 2; half++) { /* l = 16 half .. 16 half + 15: sub-block 8h + 2k + half */
            const uint8x16_t hb = H[half];
            const uint8x16_t his[4] = {vandq_u8(hb, three), vandq_u8(vshrq_n_u8(hb, 2), three),
                                       vandq_u8(vshrq_n_u8(hb, 4), three), vshrq_n_u8(hb, 6)};
            for (int k = 0; k < 4; k++) {
                const uint8x16_t l4 = L[2 * (k & 1) + half];
                const uint8x16_t low = (k >> 1) ? vshrq_n_u8(l4, 4) : vandq_u8(l4, lo);
                q[8 * h + 2 * k + half] = vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8(his[k], 4)));
            }
        }
    }
}

#endif
