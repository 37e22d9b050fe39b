/*
 * quant_lowbit.c - scalar reference kernels of the low-bit K formats Q2_K and Q3_K (weights, super-blocks
 * of 256 elements in 16 sub-blocks of 16, dot products with Q8_K activations).
 *
 * These are the source of truth for SIMD kernels. Bit layouts are documented at the structs in quant.h;
 * the dequantizers compute each element with the float steps of the GGUF tooling (d * sc first, then
 * times the quant, then minus dmin * m), so files dequantize to the same floats everywhere.
 *
 * The quantizers (used by tools/kiln-gen) follow quant_k.c: each sub-block is fitted on its own
 * (kn_fit_scale_min for Q2_K's x ~ s*q - m with q in 0..3, kn_fit_scale_sym for Q3_K's x ~ s*q with q in
 * -4..3), the sub-block scales are quantized against one fp16 super-block scale (4-bit sc and m for Q2_K,
 * 6-bit signed sc - 32 for Q3_K), trying the rounded integer and its +-1 neighbours, and every element is
 * rounded against the scale the dequantizer will use.
 *
 * Dot products: exact int32 sums per sub-block, times the integer sub-block scales, then one fma per
 * super-block (the canonical order of quant.h). Q2_K's mins use Q8_K's bsums (one per sub-block of 16).
 */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

/* ---- layout helpers ---- */

/* The 2-bit field of element e (0..255) of a Q2_K / Q3_K block: e = 128h + 32k + l, bits 2k, 2k+1 of
 * qs[32h + l]. */
static inline int q2_bits(const uint8_t qs[64], int e) {
    return (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3;
}

/* The quant (-4..3) of element e of a Q3_K block: the 2-bit field, minus 4 unless bit 4h + k of
 * hmask[l] is set (e = 128h + 32k + l; 4h + k = e / 32). */
static inline int q3k_get(const kn_block_q3_k *b, int e) {
    int hb = (b->hmask[e & 31] >> (e >> 5)) & 1;
    return q2_bits(b->qs, e) - (hb ? 0 : 4);
}

/* Packs 256 2-bit values (0..3) into the Q2_K / Q3_K qs layout. */
static void pack_q2(const uint8_t v[256], uint8_t qs[64]) {
    memset(qs, 0, 64);
    for (int e = 0; e < 256; e++) qs[32 * (e >> 7) + (e & 31)] |= (uint8_t)((v[e] & 3) << (2 * ((e >> 5) & 3)));
}

/* ---- Q2_K ---- */

void kn_q2_k_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q2_k *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K) {
        float d = kn_fp16_to_fp32(b[i].d), dmin = kn_fp16_to_fp32(b[i].dmin);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)(b[i].scales[j] & 0x0F), ml = dmin * (float)(b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) dst[16 * j + l] = dl * (float)q2_bits(b[i].qs, 16 * j + l) - ml;
        }
    }
}

void kn_q2_k_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q2_k *b = dst;
    float x[256], s[16], m[16];
    uint8_t L[256], T[16];
    double w[16];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        kn_quant_sanitize(src, x, 256);
        float max_s = 0.0f, max_m = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = kn_fit_scale_min(16, 3, x + 16 * j, L + 16 * j, &m[j]);
            if (s[j] > max_s) max_s = s[j];
            if (m[j] > max_m) max_m = m[j];
        }
        b[i].d = kn_fp32_to_fp16_scale(max_s / 15.0f);
        b[i].dmin = kn_fp32_to_fp16_scale(max_m / 15.0f);
        float d = kn_fp16_to_fp32(b[i].d), dmin = kn_fp16_to_fp32(b[i].dmin);
        for (int j = 0; j < 16; j++) {
            /* the rounded fitted scale and min or a neighbour, whichever rounds the sub-block best */
            int sc0 = d > 0.0f ? kn_round_clamp(s[j] / d, 0, 15) : 0;
            int m0 = dmin > 0.0f ? kn_round_clamp(m[j] / dmin, 0, 15) : 0;
            const float *xj = x + 16 * j;
            kn_importance_d(xj, w, 16);
            double best = -1.0;
            for (int a = sc0 - 1; a <= sc0 + 1; a++) {
                if (a < 0 || a > 15 || (a != sc0 && d == 0.0f)) continue;
                for (int c = m0 - 1; c <= m0 + 1; c++) {
                    if (c < 0 || c > 15 || (c != m0 && dmin == 0.0f)) continue;
                    double e = kn_round_affine(16, 3, xj, w, d * (float)a, dmin * (float)c, T);
                    if (best < 0.0 || e < best) {
                        best = e;
                        b[i].scales[j] = (uint8_t)(a | (c << 4));
                        memcpy(L + 16 * j, T, 16);
                    }
                }
            }
        }
        pack_q2(L, b[i].qs);
    }
}

/* Contract: w is n/256 Q2_K blocks, x is n/256 Q8_K blocks (activation quants in -127..127).
 * sum_e (d sc_j q_e - dmin m_j) dy y_e = d dy sum_j sc_j sum_e q_e y_e - dmin dy sum_j m_j bsums[j]. */
float kn_q2_k_vec_dot_q8_k(int64_t n, const void *w, const void *x) {
    const kn_block_q2_k *a = w;
    const kn_block_q8_k *b = x;
    float sa = 0.0f, sm = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_K; i++) {
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++) s += q2_bits(a[i].qs, 16 * j + l) * b[i].qs[16 * j + l];
            sumi += (int32_t)(a[i].scales[j] & 0x0F) * s;
            summ += (int32_t)(a[i].scales[j] >> 4) * b[i].bsums[j];
        }
        sa = fmaf((float)sumi, kn_fp16_to_fp32(a[i].d) * b[i].d, sa);
        sm = fmaf((float)summ, kn_fp16_to_fp32(a[i].dmin) * b[i].d, sm);
    }
    return sa - sm;
}

/* ---- Q3_K ---- */

void kn_q3_k_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q3_k *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)(kn_q3k_scale(j, b[i].scales) - 32);
            for (int l = 0; l < 16; l++) dst[16 * j + l] = dl * (float)q3k_get(&b[i], 16 * j + l);
        }
    }
}

void kn_q3_k_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q3_k *b = dst;
    float x[256], s[16];
    int8_t L[256], T[16];
    uint8_t sc[16], v[256];
    double w[16];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        kn_quant_sanitize(src, x, 256);
        float max_s = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = kn_fit_scale_sym(16, -4, 3, x + 16 * j, L + 16 * j);
            if (fabsf(s[j]) > max_s) max_s = fabsf(s[j]);
        }
        b[i].d = kn_fp32_to_fp16_scale(max_s / 31.0f);
        float d = kn_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            int sc0 = d > 0.0f ? kn_round_clamp(s[j] / d, -32, 31) : 0;
            const float *xj = x + 16 * j;
            kn_importance_d(xj, w, 16);
            double best = -1.0;
            for (int a = sc0 - 1; a <= sc0 + 1; a++) {
                if (a < -32 || a > 31 || (a != sc0 && d == 0.0f)) continue;
                double e = kn_round_sym(16, -4, 3, xj, w, d * (float)a, T);
                if (best < 0.0 || e < best) {
                    best = e;
                    sc[j] = (uint8_t)(a + 32);
                    memcpy(L + 16 * j, T, 16);
                }
            }
        }
        kn_q3k_pack_scales(sc, b[i].scales);
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        for (int e = 0; e < 256; e++) {
            int u = L[e] + 4; /* 0..7: bits 0-1 in qs, bit 2 in hmask */
            v[e] = (uint8_t)(u & 3);
            b[i].hmask[e & 31] |= (uint8_t)((u >> 2) << (e >> 5));
        }
        pack_q2(v, b[i].qs);
    }
}

/* Contract: w is n/256 Q3_K blocks, x is n/256 Q8_K blocks (activation quants in -127..127).
 * sum_e d (sc_j - 32) q_e dy y_e = d dy sum_j (sc_j - 32) sum_e q_e y_e. */
float kn_q3_k_vec_dot_q8_k(int64_t n, const void *w, const void *x) {
    const kn_block_q3_k *a = w;
    const kn_block_q8_k *b = x;
    float sa = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_K; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++) s += q3k_get(&a[i], 16 * j + l) * b[i].qs[16 * j + l];
            sumi += (int32_t)(kn_q3k_scale(j, a[i].scales) - 32) * s;
        }
        sa = fmaf((float)sumi, kn_fp16_to_fp32(a[i].d) * b[i].d, sa);
    }
    return sa;
}
