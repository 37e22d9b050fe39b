/*
 * quant_legacy.c - scalar reference kernels of the legacy 32-element block formats: Q4_0, Q4_1, Q5_0,
 * Q5_1, Q8_0 (weights) and Q8_1 (activations only).
 *
 * These are the source of truth for SIMD kernels. Bit layouts are documented at the structs in quant.h.
 * The quantizers are the simple reference ones (one scale per block from the block's extremes, each
 * element rounded to the nearest level), as GGUF tooling's *_ref quantizers: a quantizer computes its
 * scale, stores it as fp16, and rounds the elements against the STORED (fp16-rounded) scale, so the
 * quants are the nearest ones for the scale the dequantizer will actually use.
 *
 * Dot products follow the usual integer scheme: per block an exact int32 sum of products of quants,
 * then one float multiply by the two block scales (plus, for the offset formats, the weight's m times
 * the activation's s = d * sum(qs), which accounts for m * sum(x) in one term).
 */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

/* ---- layout helpers ---- */

/* The 4-bit value of element e (0..31) of a legacy block: low nibbles hold elements 0..15, high nibbles
 * elements 16..31. */
static inline int nib32(const uint8_t qs[16], int e) { return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4); }

/* Bit 4 of element e of a 5-bit legacy block: bit e of qh as a little-endian uint32. */
static inline int hbit32(const uint8_t qh[4], int e) { return (qh[e >> 3] >> (e & 7)) & 1; }

/* The lane accumulation (numerics contract in quant.h, Q5_0): block i's 32 integer codes against its
 * 32 activation quants, with the block's scale s. */
static inline void legacy_accumulate(float acc[16], int64_t i, const int8_t codes[32], const int8_t xq[32], float s) {
    for (int j = 0; j < 8; j++) {
        int32_t p = 0;
        for (int e = 4 * j; e < 4 * j + 4; e++) p += codes[e] * xq[e];
        acc[(i & 1) * 8 + j] = fmaf((float)p, s, acc[(i & 1) * 8 + j]);
    }
}

/* The per-block accumulation (numerics contract in quant.h, Q4_0 and Q8_0): block i's exact integer
 * dot product of its 32 codes with its 32 activation quants, added as one fused multiply-add with the
 * block's scale s. Returns the new accumulator. */
static inline float block_accumulate(float acc, const int8_t codes[32], const int8_t xq[32], float s) {
    int32_t p = 0;
    for (int e = 0; e < 32; e++) p += codes[e] * xq[e];
    return fmaf((float)p, s, acc);
}

/* Packs 32 values (each 0..15 in its low 4 bits) into the nibble layout. */
static void pack_nibbles32(const uint8_t L[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
}

/* Packs bit 4 of 32 values (0..31) into qh. */
static void pack_hbits32(const uint8_t L[32], uint8_t qh[4]) {
    memset(qh, 0, 4);
    for (int e = 0; e < 32; e++) qh[e >> 3] |= (uint8_t)(((L[e] >> 4) & 1) << (e & 7));
}

/* ---- quantizer helpers ---- */

/* The element of largest magnitude, with its sign (0 for an all-zero block; NaN elements are skipped). */
static float signed_absmax32(const float *x) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            vmax = x[j];
        }
    }
    return vmax;
}

/* Largest magnitude of 32 elements (NaN skipped). */
static float absmax32(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    return amax;
}

/* Minimum and maximum of 32 elements (NaN skipped; both 0 if every element is NaN). */
static void minmax32(const float *x, float *mn, float *mx) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < 32; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    if (!(hi >= lo)) lo = hi = 0.0f;
    *mn = lo;
    *mx = hi;
}

/* Symmetric quantization of a block to levels -half .. half-1 (half = 8 for Q4_0, 16 for Q5_0): the
 * element of largest magnitude maps to -half, which uses the extra negative level for whichever sign
 * that element has. Writes L[j] = level + half (0 .. 2*half-1) and returns the stored fp16 scale. */
static kn_half quantize_sym32(const float *x, int half, uint8_t L[32]) {
    kn_half dh = kn_fp32_to_fp16_scale(signed_absmax32(x) / (float)-half);
    float d = kn_fp16_to_fp32(dh);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) L[j] = (uint8_t)(kn_round_clamp(x[j] * id, -half, half - 1) + half);
    return dh;
}

/* Quantization with an offset to levels 0 .. nmax (15 for Q4_1, 31 for Q5_1): m = block minimum,
 * d = range / nmax. Writes L and the stored fp16 d and m. */
static void quantize_off32(const float *x, int nmax, uint8_t L[32], kn_half *dh, kn_half *mh) {
    float mn, mx;
    minmax32(x, &mn, &mx);
    *dh = kn_fp32_to_fp16_scale((mx - mn) / (float)nmax);
    *mh = kn_fp32_to_fp16_sat(mn);
    float d = kn_fp16_to_fp32(*dh), m = kn_fp16_to_fp32(*mh);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) L[j] = (uint8_t)kn_round_clamp((x[j] - m) * id, 0, nmax);
}

/* Symmetric 8-bit quantization (levels -127..127, d = absmax / 127). Returns the stored fp16 scale;
 * *sum receives the sum of the quants. */
static kn_half quantize_q8_32(const float *x, int8_t qs[32], int *sum) {
    kn_half dh = kn_fp32_to_fp16_scale(absmax32(x) / 127.0f);
    float d = kn_fp16_to_fp32(dh);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    int s = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)kn_round_clamp(x[j] * id, -127, 127);
        s += qs[j];
    }
    *sum = s;
    return dh;
}

/* ---- Q4_0 ---- */

void kn_q4_0_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / KN_QK4_0; i++, dst += KN_QK4_0) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)(nib32(b[i].qs, e) - 8);
    }
}

void kn_q4_0_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q4_0 *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / KN_QK4_0; i++, src += KN_QK4_0) {
        b[i].d = quantize_sym32(src, 8, L);
        pack_nibbles32(L, b[i].qs);
    }
}

/* Contract: w is n/32 Q4_0 blocks, x is n/32 Q8_0 blocks. */
float kn_q4_0_vec_dot_q8_0(int64_t n, const void *w, const void *x) {
    const kn_block_q4_0 *a = w;
    const kn_block_q8_0 *b = x;
    float acc = 0.0f;
    int8_t c[32];
    for (int64_t i = 0; i < n / KN_QK4_0; i++) {
        for (int e = 0; e < 32; e++) c[e] = (int8_t)(nib32(a[i].qs, e) - 8);
        acc = block_accumulate(acc, c, b[i].qs, kn_fp16_to_fp32(a[i].d) * kn_fp16_to_fp32(b[i].d));
    }
    return acc;
}

/* ---- Q4_1 ---- */

void kn_q4_1_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / KN_QK4_1; i++, dst += KN_QK4_1) {
        float d = kn_fp16_to_fp32(b[i].d), m = kn_fp16_to_fp32(b[i].m);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)nib32(b[i].qs, e) + m;
    }
}

void kn_q4_1_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q4_1 *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / KN_QK4_1; i++, src += KN_QK4_1) {
        quantize_off32(src, 15, L, &b[i].d, &b[i].m);
        pack_nibbles32(L, b[i].qs);
    }
}

/* Contract: w is n/32 Q4_1 blocks, x is n/32 Q8_1 blocks.
 * sum_e (dw q_e + m)(dx y_e) = dw dx sum(q_e y_e) + m (dx sum y_e) = dw dx sumi + m s. */
float kn_q4_1_vec_dot_q8_1(int64_t n, const void *w, const void *x) {
    const kn_block_q4_1 *a = w;
    const kn_block_q8_1 *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / KN_QK4_1; i++) {
        int32_t sumi = 0;
        for (int e = 0; e < 32; e++) sumi += nib32(a[i].qs, e) * b[i].qs[e];
        /* the scale and min terms nearly cancel: combine them per block (quant.h) */
        sum += (float)sumi * (kn_fp16_to_fp32(a[i].d) * kn_fp16_to_fp32(b[i].d)) +
               kn_fp16_to_fp32(a[i].m) * kn_fp16_to_fp32(b[i].s);
    }
    return sum;
}

/* ---- Q5_0 ---- */

void kn_q5_0_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / KN_QK5_0; i++, dst += KN_QK5_0) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)((nib32(b[i].qs, e) | (hbit32(b[i].qh, e) << 4)) - 16);
    }
}

void kn_q5_0_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q5_0 *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / KN_QK5_0; i++, src += KN_QK5_0) {
        b[i].d = quantize_sym32(src, 16, L);
        pack_nibbles32(L, b[i].qs);
        pack_hbits32(L, b[i].qh);
    }
}

/* Contract: w is n/32 Q5_0 blocks, x is n/32 Q8_0 blocks. */
float kn_q5_0_vec_dot_q8_0(int64_t n, const void *w, const void *x) {
    const kn_block_q5_0 *a = w;
    const kn_block_q8_0 *b = x;
    float acc[16] = {0};
    int8_t c[32];
    for (int64_t i = 0; i < n / KN_QK5_0; i++) {
        for (int e = 0; e < 32; e++) c[e] = (int8_t)((nib32(a[i].qs, e) | (hbit32(a[i].qh, e) << 4)) - 16);
        legacy_accumulate(acc, i, c, b[i].qs, kn_fp16_to_fp32(a[i].d) * kn_fp16_to_fp32(b[i].d));
    }
    return kn_reduce16(acc);
}

/* ---- Q5_1 ---- */

void kn_q5_1_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / KN_QK5_1; i++, dst += KN_QK5_1) {
        float d = kn_fp16_to_fp32(b[i].d), m = kn_fp16_to_fp32(b[i].m);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)(nib32(b[i].qs, e) | (hbit32(b[i].qh, e) << 4)) + m;
    }
}

void kn_q5_1_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q5_1 *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / KN_QK5_1; i++, src += KN_QK5_1) {
        quantize_off32(src, 31, L, &b[i].d, &b[i].m);
        pack_nibbles32(L, b[i].qs);
        pack_hbits32(L, b[i].qh);
    }
}

/* Contract: w is n/32 Q5_1 blocks, x is n/32 Q8_1 blocks (same scheme as Q4_1). */
float kn_q5_1_vec_dot_q8_1(int64_t n, const void *w, const void *x) {
    const kn_block_q5_1 *a = w;
    const kn_block_q8_1 *b = x;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / KN_QK5_1; i++) {
        int32_t sumi = 0;
        for (int e = 0; e < 32; e++) sumi += (nib32(a[i].qs, e) | (hbit32(a[i].qh, e) << 4)) * b[i].qs[e];
        /* the scale and min terms nearly cancel: combine them per block (quant.h) */
        sum += (float)sumi * (kn_fp16_to_fp32(a[i].d) * kn_fp16_to_fp32(b[i].d)) +
               kn_fp16_to_fp32(a[i].m) * kn_fp16_to_fp32(b[i].s);
    }
    return sum;
}

/* ---- Q8_0 ---- */

void kn_q8_0_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / KN_QK8_0; i++, dst += KN_QK8_0) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)b[i].qs[e];
    }
}

void kn_q8_0_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q8_0 *b = dst;
    int sum;
    for (int64_t i = 0; i < n / KN_QK8_0; i++, src += KN_QK8_0) b[i].d = quantize_q8_32(src, b[i].qs, &sum);
}

/* Contract: w and x are each n/32 Q8_0 blocks. */
float kn_q8_0_vec_dot_q8_0(int64_t n, const void *w, const void *x) {
    const kn_block_q8_0 *a = w;
    const kn_block_q8_0 *b = x;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / KN_QK8_0; i++)
        acc = block_accumulate(acc, a[i].qs, b[i].qs, kn_fp16_to_fp32(a[i].d) * kn_fp16_to_fp32(b[i].d));
    return acc;
}

/* ---- Q8_1 (activations) ---- */

void kn_q8_1_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / KN_QK8_1; i++, dst += KN_QK8_1) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)b[i].qs[e];
    }
}

/* s is computed from the stored fp16 d, so m * s is exactly m * sum(dequantized activations) up to the
 * fp16 rounding of s itself. */
void kn_q8_1_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q8_1 *b = dst;
    int sum;
    for (int64_t i = 0; i < n / KN_QK8_1; i++, src += KN_QK8_1) {
        b[i].d = quantize_q8_32(src, b[i].qs, &sum);
        b[i].s = kn_fp32_to_fp16_sat(kn_fp16_to_fp32(b[i].d) * (float)sum);
    }
}
