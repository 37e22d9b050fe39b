/*
 * kernels_neon_q.h - the block unpacking shared by the ARM64 integer kernels (kernels_neon_q.c with
 * dotprod, kernels_neon_mm.c with i8mm): fp16 scales, the signed-byte codes of the legacy blocks and
 * the K super-blocks in element order, and their exact integer sums; the table formats (IQ4_NL,
 * IQ4_XS, MXFP4) as signed table values, and the low-bit K formats (Q2_K, Q3_K) with their sub-block
 * scales. Included only by files built for ARMv8.2-A+dotprod (or later), after arm_neon.h.
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

/* ---- table formats (IQ4_NL, IQ4_XS, MXFP4) ---- */

/* The signed table values of a 16-byte legacy nibble group: c0 = elements 0..15 (low nibbles), c1 =
 * elements 16..31 (high nibbles); lut holds the format's 16 levels. */
static inline void codes_table(const uint8_t qs[16], int8x16_t lut, int8x16_t *c0, int8x16_t *c1) {
    const uint8x16_t q = vld1q_u8(qs);
    *c0 = vqtbl1q_s8(lut, vandq_u8(q, vdupq_n_u8(0x0F)));
    *c1 = vqtbl1q_s8(lut, vshrq_n_u8(q, 4));
}

/* IQ4_NL, MXFP4 blocks: the table values of their nibbles, as codes_q4_0 gives Q4_0's. */
static inline void codes_iq4_nl(const kn_block_iq4_nl *a, int8x16_t *c0, int8x16_t *c1) {
    codes_table(a->qs, vld1q_s8(kn_iq4nl_values), c0, c1);
}
static inline void codes_mxfp4(const kn_block_mxfp4 *a, int8x16_t *c0, int8x16_t *c1) {
    codes_table(a->qs, vld1q_s8(kn_mxfp4_values), c0, c1);
}

/* The fp32 scale of a block with one scale: fp16 d, or half the E8M0 value e (MXFP4). */
#define DW_F16(a)  h2f((a)->d)
#define DW_E8M0(a) kn_e8m0_half((a)->e)

/* The four sums of 16 int32 lanes taken 4 at a time: lane k = the sum of p_k's lanes (exact). */
static inline int32x4_t sums4(int32x4_t p0, int32x4_t p1, int32x4_t p2, int32x4_t p3) {
    return vpaddq_s32(vpaddq_s32(p0, p1), vpaddq_s32(p2, p3));
}

/* ---- Q2_K, Q3_K, IQ4_XS: one weight super-block decoded for every token of a tile ---- */

enum { LB_Q2 = 0, LB_Q3 = 1, LB_IQ4XS = 2 };

/* The codes in element order, 16 per vector (Q2_K: 0..3, Q3_K: -4..3, IQ4_XS: the signed table values;
 * Q2_K and Q3_K have sub-block j in q[j], IQ4_XS sub-block j in q[2j], q[2j + 1]), the integer sub-block
 * scales s (Q2_K: sc, Q3_K: sc - 32, IQ4_XS: ls - 32; 16, 16 and 8 of them), Q2_K's mins as int16 lanes
 * (sub-block j in m[j / 8] lane j % 8), and the fp16 super-block scales. */
typedef struct lb_row {
    int8x16_t q[16];
    int32_t s[16];
    int16x8_t m[2];
    float d, dmin;
} lb_row;

/* The 2-bit fields of a Q2_K / Q3_K block (element e = 128h + 32k + l: bits 2k, 2k + 1 of qs[32h + l]),
 * sub-block j = 8h + 2k + (l >= 16) in q[j]. */
static inline void lb_low2(const uint8_t qs[64], int8x16_t q[16]) {
    const uint8x16_t three = vdupq_n_u8(3);
    for (int h = 0; h < 2; h++) {
        for (int half = 0; half < 2; half++) {
            const uint8x16_t b = vld1q_u8(qs + 32 * h + 16 * half);
            q[8 * h + half] = vreinterpretq_s8_u8(vandq_u8(b, three));
            q[8 * h + 2 + half] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(b, 2), three));
            q[8 * h + 4 + half] = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(b, 4), three));
            q[8 * h + 6 + half] = vreinterpretq_s8_u8(vshrq_n_u8(b, 6));
        }
    }
}

/* 16 int8 scales to the int32 array s. */
static inline void lb_store_scales(int8x16_t v, int32_t s[16]) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_s8(vget_high_s8(v));
    vst1q_s32(s, vmovl_s16(vget_low_s16(lo)));
    vst1q_s32(s + 4, vmovl_s16(vget_high_s16(lo)));
    vst1q_s32(s + 8, vmovl_s16(vget_low_s16(hi)));
    vst1q_s32(s + 12, vmovl_s16(vget_high_s16(hi)));
}

static inline void decode_q2_k(const kn_block_q2_k *b, lb_row *R) {
    lb_low2(b->qs, R->q);
    const uint8x16_t raw = vld1q_u8(b->scales);
    lb_store_scales(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F))), R->s);
    const uint8x16_t m = vshrq_n_u8(raw, 4);
    R->m[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(m)));
    R->m[1] = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(m)));
    R->d = h2f(b->d);
    R->dmin = h2f(b->dmin);
}

/* Q3_K: q = low2 - 4 unless bit 4h + k = j / 2 of hmask[l] is set; the 6-bit scales of kn_q3k_scale
 * (low nibbles from bytes 0..7, bits 4-5 from bits 2(j / 4) of byte 8 + j % 4), minus 32. */
static inline void decode_q3_k(const kn_block_q3_k *b, lb_row *R) {
    static const int8_t hshift[16] = {0, 0, 0, 0, -2, -2, -2, -2, -4, -4, -4, -4, -6, -6, -6, -6};
    lb_low2(b->qs, R->q);
    const uint8x16_t h[2] = {vld1q_u8(b->hmask), vld1q_u8(b->hmask + 16)}, four = vdupq_n_u8(4);
    for (int j = 0; j < 16; j++) {
        const uint8x16_t hb = vandq_u8(vtstq_u8(h[j & 1], vdupq_n_u8((uint8_t)(1u << (j >> 1)))), four);
        R->q[j] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(R->q[j]), hb)), vdupq_n_s8(4));
    }
    const uint8x8_t l8 = vld1_u8(b->scales);
    const uint8x16_t lo = vcombine_u8(vand_u8(l8, vdup_n_u8(0x0F)), vshr_n_u8(l8, 4));
    uint32_t h32;
    memcpy(&h32, b->scales + 8, 4);
    const uint8x16_t hi = vandq_u8(vshlq_u8(vreinterpretq_u8_u32(vdupq_n_u32(h32)), vld1q_s8(hshift)), vdupq_n_u8(3));
    lb_store_scales(vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32)), R->s);
    R->d = h2f(b->d);
}

static inline void decode_iq4_xs(const kn_block_iq4_xs *b, lb_row *R) {
    const int8x16_t lut = vld1q_s8(kn_iq4nl_values);
    for (int j = 0; j < 8; j++) {
        codes_table(b->qs + 16 * j, lut, &R->q[2 * j], &R->q[2 * j + 1]);
        R->s[j] = (((b->scales_l[j >> 1] >> (4 * (j & 1))) & 0x0F) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
    }
    R->d = h2f(b->d);
}

/* Decodes block i of a row of kind (a constant after inlining). */
static inline void lb_decode(int kind, const uint8_t *row, int64_t i, lb_row *R) {
    if (kind == LB_Q2) decode_q2_k((const kn_block_q2_k *)(const void *)row + i, R);
    else if (kind == LB_Q3) decode_q3_k((const kn_block_q3_k *)(const void *)row + i, R);
    else decode_iq4_xs((const kn_block_iq4_xs *)(const void *)row + i, R);
}

/* Q2_K's S2 = sum_j m[j] * bsums[j] (exact). */
static inline int32_t lb_mins(const lb_row *R, const int16_t bsums[16]) {
    const int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    int32x4_t s = vmull_s16(vget_low_s16(R->m[0]), vget_low_s16(b0));
    s = vmlal_high_s16(s, R->m[0], b0);
    s = vmlal_s16(s, vget_low_s16(R->m[1]), vget_low_s16(b1));
    s = vmlal_high_s16(s, R->m[1], b1);
    return vaddvq_s32(s);
}

#endif
