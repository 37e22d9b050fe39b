/*
 * quant_nl.c - scalar reference kernels of the table-based 4-bit formats: IQ4_NL (blocks of 32, Q8_0
 * activations), IQ4_XS (super-blocks of 256 in 8 sub-blocks of 32, Q8_K activations) and MXFP4 (blocks
 * of 32 with a power-of-two scale, Q8_0 activations; the expert weights of gpt-oss files).
 *
 * Each element is a 4-bit index into a 16-entry table of small integers (kn_iq4nl_values,
 * kn_mxfp4_values) times the block scale. These are the source of truth for SIMD kernels; bit layouts
 * are documented at the structs in quant.h, and the dequantizers take the float steps of the GGUF
 * tooling (IQ4_XS: d * (ls - 32) first, then times the table value).
 *
 * Quantizers (used by tools/kiln-gen): fit_table searches a fan of scales that put the element of
 * largest magnitude near either end of the table, rounds every element to its nearest table entry,
 * solves the weighted least-squares scale for those entries and keeps the best; the elements are then
 * re-rounded against the stored scale. IQ4_XS quantizes the sub-block scales to 6-bit signed integers
 * against the fp16 super-block scale (with the +-1 neighbour search of quant_k.c). MXFP4 tries the
 * power-of-two scales around amax / 12 and keeps the one of least squared error.
 *
 * Dot products: exact int32 sums of table value x activation quant, then the float steps of quant.h
 * (IQ4_NL and MXFP4 one fma per block as Q4_0, IQ4_XS one fma per super-block).
 */
#include "tensor/quant.h"

#include <math.h>
#include <string.h>

const int8_t kn_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kn_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ---- layout helpers ---- */

/* The 4-bit index of element e (0..31) of a 32-element group in the legacy nibble layout. */
static inline int nib32(const uint8_t qs[16], int e) { return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4); }

static void pack_nibbles32(const uint8_t L[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4));
}

/* The 6-bit scale of sub-block j (0..7) of an IQ4_XS block (used as ls - 32). */
static inline int iq4xs_scale(const kn_block_iq4_xs *b, int j) {
    return ((b->scales_l[j >> 1] >> (4 * (j & 1))) & 0x0F) | (((b->scales_h >> (2 * j)) & 3) << 4);
}

/* The exact dot product of a 32-element block's table values (at the nibbles qs) with its 32
 * activation quants: |p| <= 32 * 127 * 127. */
static inline int32_t table_dot32(const int8_t table[16], const uint8_t qs[16], const int8_t xq[32]) {
    int32_t p = 0;
    for (int e = 0; e < 32; e++) p += table[nib32(qs, e)] * xq[e];
    return p;
}

/* ---- quantizer helpers ---- */

/* Index of the entry of the ascending table kn_iq4nl_values nearest to v (ties to the lower entry). */
static int nearest_iq4nl(float v) {
    const int8_t *t = kn_iq4nl_values;
    if (!(v > (float)t[0])) return 0; /* also NaN */
    if (v >= (float)t[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < (float)t[mid]) hi = mid;
        else lo = mid;
    }
    return v - (float)t[lo] <= (float)t[hi] - v ? lo : hi;
}

/* Index of the entry of kn_mxfp4_values nearest to v (magnitudes 0,1,2,3,4,6,8,12; index + 8 for the
 * negative ones). */
static int nearest_mxfp4(float v) {
    float a = fabsf(v);
    int best = 0;
    for (int k = 1; k < 8; k++)
        if (fabsf(a - (float)kn_mxfp4_values[k]) < fabsf(a - (float)kn_mxfp4_values[best])) best = k;
    return (v < 0.0f && best > 0) ? best + 8 : best;
}

/*
 * Fits n (<= 32) finite values x ~ s * kn_iq4nl_values[L], minimising sum w (error)^2 with the weights of
 * quant_k.c (|x| + rms); writes L and returns the (signed) scale s, 0 for an all-zero block.
 */
static float fit_table(int n, const float *xin, uint8_t *L) {
    float x[32], amax = 0.0f, vmax = 0.0f;
    double w[32];
    if (n <= 0 || n > 32) return 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(xin[i]) > amax) {
            amax = fabsf(xin[i]);
            vmax = xin[i];
        }
    }
    memset(L, 8, (size_t)n);
    if (amax == 0.0f) return 0.0f;
    for (int i = 0; i < n; i++) x[i] = xin[i] / amax; /* normalised: any finite magnitude works */
    kn_importance_d(x, w, n);
    const float sign = vmax < 0.0f ? -1.0f : 1.0f;
    double best_q = -1.0, best_s = 0.0;
    uint8_t T[32];
    for (int end = 0; end < 2; end++) {
        for (int k = -10; k <= 10; k++) {
            /* end 0 maps the largest element near -127, end 1 near +113 */
            float is = (end == 0 ? -127.0f - (float)k : 113.0f + (float)k) * sign;
            double sxl = 0.0, sl2 = 0.0;
            for (int i = 0; i < n; i++) {
                T[i] = (uint8_t)nearest_iq4nl(x[i] * is);
                double l = kn_iq4nl_values[T[i]];
                sxl += w[i] * x[i] * l;
                sl2 += w[i] * l * l;
            }
            double q = sxl * sxl / sl2; /* sl2 > 0: no table entry is 0 */
            if (q > best_q) {
                best_q = q;
                best_s = sxl / sl2;
                memcpy(L, T, (size_t)n);
            }
        }
    }
    return (float)(best_s * amax);
}

/* Rounds x[n] against the stored scale ds (x ~ ds * kn_iq4nl_values[L]); returns the weighted squared
 * error. */
static double round_table(int n, const float *x, const double *w, float ds, uint8_t *L) {
    double err = 0.0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)(ds != 0.0f ? nearest_iq4nl(x[i] / ds) : 8);
        double r = (double)ds * kn_iq4nl_values[L[i]] - x[i];
        err += w[i] * r * r;
    }
    return err;
}

/* ---- IQ4_NL ---- */

void kn_iq4_nl_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / KN_QK4_NL; i++, dst += KN_QK4_NL) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 32; e++) dst[e] = d * (float)kn_iq4nl_values[nib32(b[i].qs, e)];
    }
}

void kn_iq4_nl_from_float(const float *src, void *dst, int64_t n) {
    kn_block_iq4_nl *b = dst;
    float x[32];
    uint8_t L[32];
    double w[32];
    for (int64_t i = 0; i < n / KN_QK4_NL; i++, src += KN_QK4_NL) {
        kn_quant_sanitize(src, x, 32);
        float s = fit_table(32, x, L);
        b[i].d = kn_fp32_to_fp16_scale(s);
        kn_importance_d(x, w, 32);
        round_table(32, x, w, kn_fp16_to_fp32(b[i].d), L);
        pack_nibbles32(L, b[i].qs);
    }
}

/* Contract: w is n/32 IQ4_NL blocks, x is n/32 Q8_0 blocks (activation quants in -127..127). */
float kn_iq4_nl_vec_dot_q8_0(int64_t n, const void *w, const void *x) {
    const kn_block_iq4_nl *a = w;
    const kn_block_q8_0 *b = x;
    float acc = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK4_NL; i++)
        acc = fmaf((float)table_dot32(kn_iq4nl_values, a[i].qs, b[i].qs),
                   kn_fp16_to_fp32(a[i].d) * kn_fp16_to_fp32(b[i].d), acc);
    return acc;
}

/* ---- IQ4_XS ---- */

void kn_iq4_xs_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 8; j++) {
            float dl = d * (float)(iq4xs_scale(&b[i], j) - 32);
            for (int e = 0; e < 32; e++) dst[32 * j + e] = dl * (float)kn_iq4nl_values[nib32(b[i].qs + 16 * j, e)];
        }
    }
}

void kn_iq4_xs_from_float(const float *src, void *dst, int64_t n) {
    kn_block_iq4_xs *b = dst;
    float x[256], s[8];
    uint8_t L[256], T[32];
    double w[32];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        kn_quant_sanitize(src, x, 256);
        float max_s = 0.0f;
        for (int j = 0; j < 8; j++) {
            s[j] = fit_table(32, x + 32 * j, L + 32 * j);
            if (fabsf(s[j]) > max_s) max_s = fabsf(s[j]);
        }
        b[i].d = kn_fp32_to_fp16_scale(max_s / 31.0f);
        float d = kn_fp16_to_fp32(b[i].d);
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int j = 0; j < 8; j++) {
            int sc0 = d > 0.0f ? kn_round_clamp(s[j] / d, -32, 31) : 0, ls = sc0;
            const float *xj = x + 32 * j;
            kn_importance_d(xj, w, 32);
            double best = -1.0;
            for (int a = sc0 - 1; a <= sc0 + 1; a++) {
                if (a < -32 || a > 31 || (a != sc0 && d == 0.0f)) continue;
                double e = round_table(32, xj, w, d * (float)a, T);
                if (best < 0.0 || e < best) {
                    best = e;
                    ls = a;
                    memcpy(L + 32 * j, T, 32);
                }
            }
            ls += 32;
            b[i].scales_l[j >> 1] |= (uint8_t)((ls & 0x0F) << (4 * (j & 1)));
            b[i].scales_h |= (uint16_t)((ls >> 4) << (2 * j));
            pack_nibbles32(L + 32 * j, b[i].qs + 16 * j);
        }
    }
}

/* Contract: w is n/256 IQ4_XS blocks, x is n/256 Q8_K blocks (activation quants in -127..127). */
float kn_iq4_xs_vec_dot_q8_k(int64_t n, const void *w, const void *x) {
    const kn_block_iq4_xs *a = w;
    const kn_block_q8_k *b = x;
    float sa = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_K; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < 8; j++)
            sumi += (int32_t)(iq4xs_scale(&a[i], j) - 32) *
                    table_dot32(kn_iq4nl_values, a[i].qs + 16 * j, b[i].qs + 32 * j);
        sa = fmaf((float)sumi, kn_fp16_to_fp32(a[i].d) * b[i].d, sa);
    }
    return sa;
}

/* ---- MXFP4 ---- */

void kn_mxfp4_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / KN_QK_MXFP4; i++, dst += KN_QK_MXFP4) {
        float d = kn_e8m0_half(b[i].e);
        for (int e = 0; e < 32; e++) dst[e] = (float)kn_mxfp4_values[nib32(b[i].qs, e)] * d;
    }
}

void kn_mxfp4_from_float(const float *src, void *dst, int64_t n) {
    kn_block_mxfp4 *b = dst;
    float x[32];
    uint8_t L[32], T[32];
    for (int64_t i = 0; i < n / KN_QK_MXFP4; i++, src += KN_QK_MXFP4) {
        float amax = kn_quant_sanitize(src, x, 32);
        b[i].e = 0;
        memset(L, 0, sizeof L);
        if (amax > 0.0f) {
            /* 12 * 2^(e - 128) ~ amax: try the power of two at or below, and its neighbours (e <= 252 keeps
             * every level finite, so FLT_MAX inputs clip to 12 * 2^124) */
            int e0 = (int)floor(log2((double)amax / 12.0)) + 128;
            e0 = e0 < 1 ? 1 : e0 > 251 ? 251 : e0; /* the extremes still get the nearest scales */
            double best = -1.0;
            for (int e = e0 - 1; e <= e0 + 1; e++) {
                if (e < 0 || e > 252) continue; /* 12 * 2^(e - 128) must stay a finite float */
                double d = kn_e8m0_half((uint8_t)e), err = 0.0;
                for (int k = 0; k < 32; k++) {
                    T[k] = (uint8_t)nearest_mxfp4((float)(x[k] / d));
                    double r = d * kn_mxfp4_values[T[k]] - x[k];
                    err += r * r;
                }
                if (best < 0.0 || err < best) {
                    best = err;
                    b[i].e = (uint8_t)e;
                    memcpy(L, T, sizeof L);
                }
            }
        }
        pack_nibbles32(L, b[i].qs);
    }
}

/* Contract: w is n/32 MXFP4 blocks, x is n/32 Q8_0 blocks (activation quants in -127..127). */
float kn_mxfp4_vec_dot_q8_0(int64_t n, const void *w, const void *x) {
    const kn_block_mxfp4 *a = w;
    const kn_block_q8_0 *b = x;
    float acc = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_MXFP4; i++)
        acc = fmaf((float)table_dot32(kn_mxfp4_values, a[i].qs, b[i].qs),
                   kn_e8m0_half(a[i].e) * kn_fp16_to_fp32(b[i].d), acc);
    return acc;
}
