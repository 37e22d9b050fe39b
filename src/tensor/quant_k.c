/*
 * quant_k.c - scalar reference kernels of the K block formats: Q4_K, Q5_K, Q6_K (weights) and Q8_K
 * (activations only), super-blocks of 256 elements.
 *
 * These are the source of truth for SIMD kernels. Bit layouts are documented at the structs in quant.h.
 *
 * The weight quantizers search, for every sub-block, for the scale (and min) that minimise a weighted
 * squared error, then quantize those per-sub-block scales to the format's small integers against one
 * fp16 super-block scale (trying the rounded integer and its +-1 neighbours, keeping whichever gives the
 * least error), and round every element against the scale the dequantizer will use:
 *   Q4_K / Q5_K (x ~ s*q - m, q in 0..nmax): fit_scale_min tries a fan of quantization grids around
 *     nmax / range; on each grid it solves the 2x2 weighted least-squares problem for (s, m) with m
 *     kept >= 0, keeps the best, then re-rounds against the best (s, m) until the error stops falling.
 *   Q6_K (x ~ s*q, q in -32..31): fit_scale_sym tries grids that put the largest-magnitude element near
 *     -32 or +31, solves the 1-D least-squares scale on each, and refines the same way.
 * Element weights (importance) are |x| + rms(sub-block): errors on large elements count more, as they
 * matter more in a matrix-vector product, without ignoring the small ones.
 * Sub-blocks are normalised by their largest magnitude before fitting, so huge or tiny inputs neither
 * overflow nor underflow the sums; non-finite inputs are sanitised (NaN -> 0, +-inf -> +-FLT_MAX).
 *
 * Dot products with Q8_K use exact int32 sums per sub-block, the sub-block scales as integers, and Q8_K's
 * bsums (sums of 16 activation quants) for the terms that do not depend on the weight quants: the mins of
 * Q4_K/Q5_K and the -32 offset of Q6_K.
 */
#include "tensor/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- layout helpers ---- */

/* 4-bit part of element e (0..255) of a Q4_K / Q5_K block: nibble (j & 1) of qs[32(j/2) + l],
 * j = e / 32, l = e % 32. */
static inline int q4k_low(const uint8_t qs[128], int e) {
    int j = e >> 5, l = e & 31;
    uint8_t byte = qs[32 * (j >> 1) + l];
    return (j & 1) ? (byte >> 4) : (byte & 0x0F);
}

/* Bit 4 of element e of a Q5_K block: bit j of qh[l]. */
static inline int q5k_high(const uint8_t qh[32], int e) { return (qh[e & 31] >> (e >> 5)) & 1; }

/* The 6-bit quant (0..63) of element e of a Q6_K block; see quant.h for e = 128h + 32k + l. */
static inline int q6k_get(const kn_block_q6_k *b, int e) {
    int h = e >> 7, k = (e >> 5) & 3, l = e & 31;
    int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0F;
    int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return lo | (hi << 4);
}

/* ---- quantizer helpers ---- */

/* Copies n inputs with NaN replaced by 0 and infinities by +-FLT_MAX; returns the largest magnitude. */
float kn_quant_sanitize(const float *x, float *out, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float v = x[i];
        if (v != v) v = 0.0f;
        else if (v > FLT_MAX) v = FLT_MAX;
        else if (v < -FLT_MAX) v = -FLT_MAX;
        out[i] = v;
        if (fabsf(v) > amax) amax = fabsf(v);
    }
    return amax;
}

/* Importance weights of a (normalised) sub-block: |x| + rms(x). */
static void importance(const float *x, float *w, int n) {
    double s2 = 0.0;
    for (int i = 0; i < n; i++) s2 += (double)x[i] * x[i];
    float rms = (float)sqrt(s2 / n);
    for (int i = 0; i < n; i++) w[i] = fabsf(x[i]) + rms;
}

/* Weighted squared error of x ~ s*L + b. */
static float err_affine(int n, const float *x, const float *w, const uint8_t *L, float s, float b) {
    float e = 0.0f;
    for (int i = 0; i < n; i++) {
        float r = s * (float)L[i] + b - x[i];
        e += w[i] * r * r;
    }
    return e;
}

/* Weighted least squares of x ~ s*L + b over fixed L with the constraint b <= 0. Returns false if L is
 * degenerate (no solution with s > 0). */
static bool solve_affine(int n, const float *x, const float *w, const uint8_t *L, float *s, float *b) {
    float sw = 0, sx = 0, sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; i++) {
        float l = (float)L[i];
        sw += w[i];
        sx += w[i] * x[i];
        sl += w[i] * l;
        sl2 += w[i] * l * l;
        sxl += w[i] * x[i] * l;
    }
    float det = sw * sl2 - sl * sl;
    if (!(det > 0.0f)) return false;
    float ts = (sw * sxl - sx * sl) / det;
    float tb = (sl2 * sx - sl * sxl) / det;
    if (tb > 0.0f) { /* the format subtracts a non-negative min: clamp b to 0 and refit s alone */
        tb = 0.0f;
        ts = sxl / sl2;
    }
    if (!(ts > 0.0f)) return false;
    *s = ts;
    *b = tb;
    return true;
}

/*
 * Fits n (<= 32) values x ~ s * L - mn with L in 0..nmax, s >= 0 and mn >= 0, minimising sum w (error)^2.
 * Writes L, *mn and returns s (0 when the sub-block is constant: then x ~ -mn exactly or mn = 0).
 * x must be finite; the fit (weights included) is done on x / max|x| so any finite magnitude works.
 */
float kn_fit_scale_min(int n, int nmax, const float *xin, uint8_t *L, float *mn) {
    float x[32], w[32], amax = 0.0f;
    *mn = 0.0f;
    if (n <= 0 || n > 32) return 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(xin[i]) > amax) amax = fabsf(xin[i]);
    memset(L, 0, (size_t)n);
    *mn = 0.0f;
    if (amax == 0.0f) return 0.0f;
    float lo = 0.0f, hi = -FLT_MAX;
    for (int i = 0; i < n; i++) {
        x[i] = xin[i] / amax;
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    importance(x, w, n);
    if (hi <= lo) { /* every element equals lo < 0: x = -mn exactly */
        *mn = -lo * amax;
        return 0.0f;
    }
    /* start: the plain min/max grid */
    float best_s = (hi - lo) / (float)nmax, best_b = lo;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)kn_round_clamp((x[i] - lo) / best_s, 0, nmax);
    float best = err_affine(n, x, w, L, best_s, best_b);
    uint8_t T[32];
    /* a fan of grids from (nmax - 1) to (nmax + 1) steps over the range */
    for (int k = 0; k <= 20; k++) {
        float is = ((float)nmax - 1.0f + 0.1f * (float)k) / (hi - lo);
        for (int i = 0; i < n; i++) T[i] = (uint8_t)kn_round_clamp((x[i] - lo) * is, 0, nmax);
        float s, b;
        if (!solve_affine(n, x, w, T, &s, &b)) continue;
        float e = err_affine(n, x, w, T, s, b);
        if (e < best) {
            best = e;
            best_s = s;
            best_b = b;
            memcpy(L, T, (size_t)n);
        }
    }
    /* refine: round against the best (s, b), refit, repeat while it helps */
    for (int it = 0; it < 8; it++) {
        for (int i = 0; i < n; i++) T[i] = (uint8_t)kn_round_clamp((x[i] - best_b) / best_s, 0, nmax);
        float s, b;
        if (!solve_affine(n, x, w, T, &s, &b)) break;
        float e = err_affine(n, x, w, T, s, b);
        if (!(e < best)) break;
        best = e;
        best_s = s;
        best_b = b;
        memcpy(L, T, (size_t)n);
    }
    *mn = -best_b * amax;
    return best_s * amax;
}

/*
 * Fits n (<= 32) values x ~ s * L with L in lo..hi (lo < 0 < hi; Q6_K: -32..31, Q3_K: -4..3), minimising
 * sum w (error)^2; writes L and returns s (signed: a negative s lets the element of largest magnitude use
 * level lo whatever its sign). x must be finite.
 */
float kn_fit_scale_sym(int n, int lo, int hi, const float *xin, int8_t *L) {
    float x[32], w[32], amax = 0.0f, vmax = 0.0f;
    if (n <= 0 || n > 32) return 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(xin[i]) > amax) {
            amax = fabsf(xin[i]);
            vmax = xin[i];
        }
    }
    memset(L, 0, (size_t)n);
    if (amax == 0.0f) return 0.0f;
    for (int i = 0; i < n; i++) x[i] = xin[i] / amax;
    importance(x, w, n);
    float sign = vmax < 0.0f ? -1.0f : 1.0f; /* sign of the largest element, normalised to +-1 */
    float best_q = -1.0f, best_s = 0.0f;     /* quality (sum w x l)^2 / sum w l^2, to maximise */
    int8_t T[32];
    for (int target = 0; target < 2; target++) {
        for (int k = -9; k <= 9; k++) {
            /* target 0 maps the largest element near lo, target 1 near hi */
            float is = target == 0 ? ((float)lo - 0.1f * (float)k) * sign : ((float)hi + 0.1f * (float)k) * sign;
            float sxl = 0.0f, sl2 = 0.0f;
            for (int i = 0; i < n; i++) {
                T[i] = (int8_t)kn_round_clamp(x[i] * is, lo, hi);
                sxl += w[i] * x[i] * (float)T[i];
                sl2 += w[i] * (float)T[i] * (float)T[i];
            }
            if (!(sl2 > 0.0f)) continue;
            float q = sxl * sxl / sl2;
            if (q > best_q) {
                best_q = q;
                best_s = sxl / sl2;
                memcpy(L, T, (size_t)n);
            }
        }
    }
    for (int it = 0; it < 8 && best_s != 0.0f; it++) {
        float sxl = 0.0f, sl2 = 0.0f;
        for (int i = 0; i < n; i++) {
            T[i] = (int8_t)kn_round_clamp(x[i] / best_s, lo, hi);
            sxl += w[i] * x[i] * (float)T[i];
            sl2 += w[i] * (float)T[i] * (float)T[i];
        }
        if (!(sl2 > 0.0f)) break;
        float q = sxl * sxl / sl2;
        if (!(q > best_q)) break;
        best_q = q;
        best_s = sxl / sl2;
        memcpy(L, T, (size_t)n);
    }
    return best_s * amax;
}

/* Importance weights of a sub-block in double (for the final rounding, on unnormalised values). */
void kn_importance_d(const float *x, double *w, int n) {
    double s2 = 0.0;
    for (int i = 0; i < n; i++) s2 += (double)x[i] * x[i];
    double r = sqrt(s2 / n);
    for (int i = 0; i < n; i++) w[i] = fabs((double)x[i]) + r;
}

/* Rounds sub-block x[n] against the stored scale ds and min dm (x ~ ds*L - dm, L in 0..nmax), writes L
 * and returns the weighted squared error (in double: safe for any finite x). */
double kn_round_affine(int n, int nmax, const float *x, const double *w, float ds, float dm, uint8_t *L) {
    double err = 0.0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)(ds > 0.0f ? kn_round_clamp((x[i] + dm) / ds, 0, nmax) : 0);
        double r = (double)ds * L[i] - dm - x[i];
        err += w[i] * r * r;
    }
    return err;
}

/* Rounds sub-block x[n] against the stored scale ds (x ~ ds*L, L in lo..hi), writes L and returns the
 * weighted squared error. */
double kn_round_sym(int n, int lo, int hi, const float *x, const double *w, float ds, int8_t *L) {
    double err = 0.0;
    for (int i = 0; i < n; i++) {
        L[i] = (int8_t)(ds != 0.0f ? kn_round_clamp(x[i] / ds, lo, hi) : 0);
        double r = (double)ds * L[i] - x[i];
        err += w[i] * r * r;
    }
    return err;
}

/*
 * Shared Q4_K / Q5_K super-block quantizer: fits the 8 sub-blocks, stores d, dmin and the packed 6-bit
 * scales/mins, and writes the final quants L[256] (0..nmax) rounded against the stored scales. Each
 * sub-block's 6-bit scale and min are the rounded fitted ones or a neighbour (+-1), whichever gives the
 * least error once the elements are rounded against them: the integer grid of d * sc is coarse when
 * sc is small, and a neighbour often fits better.
 */
static void quantize_k_affine(const float *src, int nmax, kn_half *dh, kn_half *dminh, uint8_t scales[12],
                              uint8_t L[256]) {
    float x[256], s[8], m[8];
    kn_quant_sanitize(src, x, 256);
    float max_s = 0.0f, max_m = 0.0f;
    for (int j = 0; j < 8; j++) {
        s[j] = kn_fit_scale_min(32, nmax, x + 32 * j, L + 32 * j, &m[j]);
        if (s[j] > max_s) max_s = s[j];
        if (m[j] > max_m) max_m = m[j];
    }
    *dh = kn_fp32_to_fp16_scale(max_s / 63.0f);
    *dminh = kn_fp32_to_fp16_scale(max_m / 63.0f);
    float d = kn_fp16_to_fp32(*dh), dmin = kn_fp16_to_fp32(*dminh);
    uint8_t sc[8], mq[8], T[32];
    double w[32];
    for (int j = 0; j < 8; j++) {
        int sc0 = d > 0.0f ? kn_round_clamp(s[j] / d, 0, 63) : 0;
        int m0 = dmin > 0.0f ? kn_round_clamp(m[j] / dmin, 0, 63) : 0;
        const float *xj = x + 32 * j;
        kn_importance_d(xj, w, 32);
        double best = -1.0;
        for (int a = sc0 - 1; a <= sc0 + 1; a++) {
            if (a < 0 || a > 63 || (a != sc0 && d == 0.0f)) continue;
            for (int b = m0 - 1; b <= m0 + 1; b++) {
                if (b < 0 || b > 63 || (b != m0 && dmin == 0.0f)) continue;
                double e = kn_round_affine(32, nmax, xj, w, d * (float)a, dmin * (float)b, T);
                if (best < 0.0 || e < best) {
                    best = e;
                    sc[j] = (uint8_t)a;
                    mq[j] = (uint8_t)b;
                    memcpy(L + 32 * j, T, 32);
                }
            }
        }
    }
    kn_k_pack_scale_min(sc, mq, scales);
}

/* Packs 256 4-bit values into the Q4_K / Q5_K nibble layout. */
static void pack_q4k(const uint8_t L[256], uint8_t qs[128]) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((L[64 * c + l] & 0x0F) | ((L[64 * c + 32 + l] & 0x0F) << 4));
}

/* ---- Q4_K ---- */

void kn_q4_k_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q4_k *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K) {
        float d = kn_fp16_to_fp32(b[i].d), dmin = kn_fp16_to_fp32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kn_k_scale_min(j, b[i].scales, &sc, &m);
            float ds = d * (float)sc, dm = dmin * (float)m;
            for (int l = 0; l < 32; l++) dst[32 * j + l] = ds * (float)q4k_low(b[i].qs, 32 * j + l) - dm;
        }
    }
}

void kn_q4_k_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q4_k *b = dst;
    uint8_t L[256];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        quantize_k_affine(src, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        pack_q4k(L, b[i].qs);
    }
}

/* Contract: w is n/256 Q4_K blocks, x is n/256 Q8_K blocks.
 * sum_e (d sc_j q_e - dmin m_j) (dy y_e) = d dy sum_j sc_j sum_e q_e y_e - dmin dy sum_j m_j sum_e y_e,
 * and sum_e y_e over sub-block j is bsums[2j] + bsums[2j+1]. */
float kn_q4_k_vec_dot_q8_k(int64_t n, const void *w, const void *x) {
    const kn_block_q4_k *a = w;
    const kn_block_q8_k *b = x;
    float sa = 0.0f, sm = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_K; i++) {
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kn_k_scale_min(j, a[i].scales, &sc, &m);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += q4k_low(a[i].qs, 32 * j + l) * b[i].qs[32 * j + l];
            sumi += (int32_t)sc * s;
            summ += (int32_t)m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        sa = fmaf((float)sumi, kn_fp16_to_fp32(a[i].d) * b[i].d, sa);
        sm = fmaf((float)summ, kn_fp16_to_fp32(a[i].dmin) * b[i].d, sm);
    }
    return sa - sm;
}

/* ---- Q5_K ---- */

void kn_q5_k_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q5_k *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K) {
        float d = kn_fp16_to_fp32(b[i].d), dmin = kn_fp16_to_fp32(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kn_k_scale_min(j, b[i].scales, &sc, &m);
            float ds = d * (float)sc, dm = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int e = 32 * j + l;
                dst[e] = ds * (float)(q4k_low(b[i].qs, e) | (q5k_high(b[i].qh, e) << 4)) - dm;
            }
        }
    }
}

void kn_q5_k_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q5_k *b = dst;
    uint8_t L[256];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        quantize_k_affine(src, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
        pack_q4k(L, b[i].qs);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < 256; e++) b[i].qh[e & 31] |= (uint8_t)(((L[e] >> 4) & 1) << (e >> 5));
    }
}

/* Contract: w is n/256 Q5_K blocks, x is n/256 Q8_K blocks (same scheme as Q4_K). */
float kn_q5_k_vec_dot_q8_k(int64_t n, const void *w, const void *x) {
    const kn_block_q5_k *a = w;
    const kn_block_q8_k *b = x;
    float sa = 0.0f, sm = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_K; i++) {
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kn_k_scale_min(j, a[i].scales, &sc, &m);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) {
                int e = 32 * j + l;
                s += (q4k_low(a[i].qs, e) | (q5k_high(a[i].qh, e) << 4)) * b[i].qs[e];
            }
            sumi += (int32_t)sc * s;
            summ += (int32_t)m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        sa = fmaf((float)sumi, kn_fp16_to_fp32(a[i].d) * b[i].d, sa);
        sm = fmaf((float)summ, kn_fp16_to_fp32(a[i].dmin) * b[i].d, sm);
    }
    return sa - sm;
}

/* ---- Q6_K ---- */

void kn_q6_k_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q6_k *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K) {
        float d = kn_fp16_to_fp32(b[i].d);
        for (int e = 0; e < 256; e++) dst[e] = d * (float)b[i].scales[e >> 4] * (float)(q6k_get(&b[i], e) - 32);
    }
}

void kn_q6_k_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q6_k *b = dst;
    float x[256], s[16];
    int8_t L[256], T[16];
    double w[16];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        kn_quant_sanitize(src, x, 256);
        float max_s = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = kn_fit_scale_sym(16, -32, 31, x + 16 * j, L + 16 * j);
            if (fabsf(s[j]) > max_s) max_s = fabsf(s[j]);
        }
        b[i].d = kn_fp32_to_fp16_scale(max_s / 127.0f);
        float d = kn_fp16_to_fp32(b[i].d);
        for (int j = 0; j < 16; j++) {
            /* the rounded fitted scale or a neighbour, whichever rounds the sub-block best */
            int sc0 = d > 0.0f ? kn_round_clamp(s[j] / d, -127, 127) : 0;
            const float *xj = x + 16 * j;
            kn_importance_d(xj, w, 16);
            double best = -1.0;
            for (int a = sc0 - 1; a <= sc0 + 1; a++) {
                if (a < -127 || a > 127 || (a != sc0 && d == 0.0f)) continue;
                double e = kn_round_sym(16, -32, 31, xj, w, d * (float)a, T);
                if (best < 0.0 || e < best) {
                    best = e;
                    b[i].scales[j] = (int8_t)a;
                    memcpy(L + 16 * j, T, 16);
                }
            }
        }
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < 256; e++) {
            int q = L[e] + 32, h = e >> 7, k = (e >> 5) & 3, l = e & 31;
            b[i].ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((q & 0x0F) << (4 * (k >> 1)));
            b[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * k));
        }
    }
}

/* Contract: w is n/256 Q6_K blocks, x is n/256 Q8_K blocks.
 * sum_e d sc_j (q_e - 32) dy y_e = d dy sum_j sc_j (sum_e q_e y_e - 32 bsums[j]). */
float kn_q6_k_vec_dot_q8_k(int64_t n, const void *w, const void *x) {
    const kn_block_q6_k *a = w;
    const kn_block_q8_k *b = x;
    float sa = 0.0f; /* canonical order: quant.h */
    for (int64_t i = 0; i < n / KN_QK_K; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            int32_t s = 0;
            for (int l = 0; l < 16; l++) s += q6k_get(&a[i], 16 * j + l) * b[i].qs[16 * j + l];
            sumi += (int32_t)a[i].scales[j] * (s - 32 * (int32_t)b[i].bsums[j]);
        }
        sa = fmaf((float)sumi, kn_fp16_to_fp32(a[i].d) * b[i].d, sa);
    }
    return sa;
}

/* ---- Q8_K (activations) ---- */

void kn_q8_k_to_float(const void *src, float *dst, int64_t n) {
    const kn_block_q8_k *b = src;
    for (int64_t i = 0; i < n / KN_QK_K; i++, dst += KN_QK_K)
        for (int e = 0; e < 256; e++) dst[e] = b[i].d * (float)b[i].qs[e];
}

/* Symmetric 8-bit quantization, d = absmax / 127 kept in fp32 (no fp16 rounding), plus the bsums. */
void kn_q8_k_from_float(const float *src, void *dst, int64_t n) {
    kn_block_q8_k *b = dst;
    float x[256];
    for (int64_t i = 0; i < n / KN_QK_K; i++, src += KN_QK_K) {
        float amax = kn_quant_sanitize(src, x, 256);
        b[i].d = amax / 127.0f;
        while (isinf(b[i].d * 127.0f)) b[i].d = nextafterf(b[i].d, 0.0f); /* near FLT_MAX: keep 127*d finite */
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) {
                int8_t q = (int8_t)kn_round_clamp(x[16 * j + l] * id, -127, 127);
                b[i].qs[16 * j + l] = q;
                s += q;
            }
            b[i].bsums[j] = (int16_t)s;
        }
    }
}
