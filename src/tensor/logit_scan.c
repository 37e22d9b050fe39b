/*
 * logit_scan.c - the sampler's passes over a logits row (kernels.h): the clean pass (NaN read as
 * -inf, the candidates counted, the greatest value), the greatest value's first index (greedy
 * decoding, drafts), and the next value above a bar (the top-k selection). Each is a loop over the
 * whole vocabulary for every token (128k-200k entries on today's models), which GCC does not
 * vectorize (its compares and blends chain through one maximum), so every set has its own: AVX2 and
 * AVX-512 on four vectors at a time, NEON on four. Each returns the reference's result exactly: the
 * same count and index, a maximum equal (==) to the reference's (a -0.0 / +0.0 tie may give either).
 *
 * The index of a maximum is kept per lane (the first index at which that lane's maximum appeared, a
 * strict > keeping the earliest), then the lanes are merged by value, the lowest index winning ties,
 * which is the first index of the greatest value overall. Indices are held in 32-bit lanes: n is a
 * vocabulary size (below 2^31).
 */
#include "tensor/kernels.h"

#include <math.h>

float kn_logits_clean_ref(const float *x, float *w, int64_t n, int64_t *count) {
    float m = -INFINITY;
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i] != x[i] ? -INFINITY : x[i];
        w[i] = v;
        c += v > -INFINITY;
        m = v > m ? v : m;
    }
    *count = c;
    return m;
}

int64_t kn_argmax_ref(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

int64_t kn_above_ref(const float *x, int64_t n, float t) {
    int64_t i = 0;
    while (i < n && !(x[i] > t)) i++;
    return i;
}

/* Merges lane maxima m[k] first seen at index id[k] (-1: the lane saw nothing above -inf) with the
 * elements i .. n - 1 of x, into the first index of the greatest value; -1 when nothing was above
 * -inf (then the reference decides: the first non-NaN element, or none). */
static int64_t argmax_finish(const float *m, const int32_t *id, int lanes, const float *x, int64_t i, int64_t n) {
    float bv = -INFINITY;
    int64_t bi = -1;
    for (int k = 0; k < lanes; k++)
        if (id[k] >= 0 && (m[k] > bv || (m[k] == bv && id[k] < bi))) bv = m[k], bi = id[k];
    for (; i < n; i++)
        if (x[i] > bv) bv = x[i], bi = i;
    return bi >= 0 ? bi : kn_argmax_ref(x, n);
}

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

AVX2 float kn_logits_clean_avx2(const float *x, float *w, int64_t n, int64_t *count) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf;
    __m256i c0 = _mm256_setzero_si256(), c1 = c0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        a = _mm256_blendv_ps(a, ninf, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
        b = _mm256_blendv_ps(b, ninf, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
        _mm256_storeu_ps(w + i, a);
        _mm256_storeu_ps(w + i + 8, b);
        m0 = _mm256_max_ps(a, m0);
        m1 = _mm256_max_ps(b, m1);
        c0 = _mm256_sub_epi32(c0, _mm256_castps_si256(_mm256_cmp_ps(a, ninf, _CMP_GT_OQ)));
        c1 = _mm256_sub_epi32(c1, _mm256_castps_si256(_mm256_cmp_ps(b, ninf, _CMP_GT_OQ)));
    }
    float m[16];
    int32_t c[16];
    _mm256_storeu_ps(m, m0);
    _mm256_storeu_ps(m + 8, m1);
    _mm256_storeu_si256((__m256i *)c, c0);
    _mm256_storeu_si256((__m256i *)(c + 8), c1);
    int64_t cnt;
    float mx = kn_logits_clean_ref(x + i, w + i, n - i, &cnt);
    for (int k = 0; k < 16; k++) cnt += c[k], mx = m[k] > mx ? m[k] : mx;
    *count = cnt;
    return mx;
}

AVX2 int64_t kn_argmax_avx2(const float *x, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m[4] = {ninf, ninf, ninf, ninf};
    __m256i id[4], at[4];
    const __m256i step = _mm256_set1_epi32(32);
    for (int k = 0; k < 4; k++) {
        id[k] = _mm256_set1_epi32(-1);
        at[k] = _mm256_setr_epi32(8 * k, 8 * k + 1, 8 * k + 2, 8 * k + 3, 8 * k + 4, 8 * k + 5, 8 * k + 6, 8 * k + 7);
    }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
            const __m256 gt = _mm256_cmp_ps(v, m[k], _CMP_GT_OQ); /* false for NaN */
            m[k] = _mm256_max_ps(v, m[k]);                        /* m[k] where not greater, NaN too */
            id[k] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(id[k]), _mm256_castsi256_ps(at[k]), gt));
            at[k] = _mm256_add_epi32(at[k], step);
        }
    float mv[32];
    int32_t iv[32];
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(mv + 8 * k, m[k]);
        _mm256_storeu_si256((__m256i *)(iv + 8 * k), id[k]);
    }
    return argmax_finish(mv, iv, 32, x, i, n);
}

AVX2 int64_t kn_above_avx2(const float *x, int64_t n, float t) {
    const __m256 b = _mm256_set1_ps(t);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 g0 = _mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_GT_OQ);
        const __m256 g1 = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), b, _CMP_GT_OQ);
        const __m256 g2 = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 16), b, _CMP_GT_OQ);
        const __m256 g3 = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 24), b, _CMP_GT_OQ);
        if (_mm256_testz_ps(_mm256_or_ps(_mm256_or_ps(g0, g1), _mm256_or_ps(g2, g3)), _mm256_set1_ps(-0.0f))) continue;
        const uint32_t bits = (uint32_t)_mm256_movemask_ps(g0) | (uint32_t)_mm256_movemask_ps(g1) << 8 |
                              (uint32_t)_mm256_movemask_ps(g2) << 16 | (uint32_t)_mm256_movemask_ps(g3) << 24;
        return i + __builtin_ctz(bits);
    }
    return i + kn_above_ref(x + i, n - i, t);
}

#define AVX512 __attribute__((target("avx512f")))

AVX512 float kn_logits_clean_avx512(const float *x, float *w, int64_t n, int64_t *count) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m0 = ninf, m1 = ninf;
    int64_t c = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        a = _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), ninf);
        b = _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), ninf);
        _mm512_storeu_ps(w + i, a);
        _mm512_storeu_ps(w + i + 16, b);
        m0 = _mm512_max_ps(a, m0);
        m1 = _mm512_max_ps(b, m1);
        const uint32_t g =
            (uint32_t)_mm512_cmp_ps_mask(a, ninf, _CMP_GT_OQ) | (uint32_t)_mm512_cmp_ps_mask(b, ninf, _CMP_GT_OQ) << 16;
        c += __builtin_popcount(g);
    }
    float m[32];
    _mm512_storeu_ps(m, m0);
    _mm512_storeu_ps(m + 16, m1);
    int64_t rest;
    float mx = kn_logits_clean_ref(x + i, w + i, n - i, &rest);
    for (int k = 0; k < 32; k++) mx = m[k] > mx ? m[k] : mx;
    *count = c + rest;
    return mx;
}

AVX512 int64_t kn_argmax_avx512(const float *x, int64_t n) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m[4] = {ninf, ninf, ninf, ninf};
    __m512i id[4], at[4];
    const __m512i step = _mm512_set1_epi32(64),
                  lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int k = 0; k < 4; k++) {
        id[k] = _mm512_set1_epi32(-1);
        at[k] = _mm512_add_epi32(lane, _mm512_set1_epi32(16 * k));
    }
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 4; k++) {
            const __m512 v = _mm512_loadu_ps(x + i + 16 * k);
            const __mmask16 gt = _mm512_cmp_ps_mask(v, m[k], _CMP_GT_OQ); /* false for NaN */
            m[k] = _mm512_mask_mov_ps(m[k], gt, v);
            id[k] = _mm512_mask_mov_epi32(id[k], gt, at[k]);
            at[k] = _mm512_add_epi32(at[k], step);
        }
    float mv[64];
    int32_t iv[64];
    for (int k = 0; k < 4; k++) {
        _mm512_storeu_ps(mv + 16 * k, m[k]);
        _mm512_storeu_si512(iv + 16 * k, id[k]);
    }
    return argmax_finish(mv, iv, 64, x, i, n);
}

AVX512 int64_t kn_above_avx512(const float *x, int64_t n, float t) {
    const __m512 b = _mm512_set1_ps(t);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const uint64_t bits = (uint64_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), b, _CMP_GT_OQ) |
                              (uint64_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 16), b, _CMP_GT_OQ) << 16 |
                              (uint64_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 32), b, _CMP_GT_OQ) << 32 |
                              (uint64_t)_mm512_cmp_ps_mask(_mm512_loadu_ps(x + i + 48), b, _CMP_GT_OQ) << 48;
        if (bits) return i + __builtin_ctzll(bits);
    }
    return i + kn_above_ref(x + i, n - i, t);
}

#elif defined(__aarch64__)
#include <arm_neon.h>

float kn_logits_clean_neon(const float *x, float *w, int64_t n, int64_t *count) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t m[4] = {ninf, ninf, ninf, ninf};
    uint32x4_t c[4] = {vdupq_n_u32(0), vdupq_n_u32(0), vdupq_n_u32(0), vdupq_n_u32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++) {
            float32x4_t v = vld1q_f32(x + i + 4 * k);
            v = vbslq_f32(vceqq_f32(v, v), v, ninf); /* NaN: unequal to itself */
            vst1q_f32(w + i + 4 * k, v);
            m[k] = vmaxq_f32(m[k], v); /* no NaN left */
            c[k] = vsubq_u32(c[k], vcgtq_f32(v, ninf));
        }
    int64_t cnt;
    float mx = kn_logits_clean_ref(x + i, w + i, n - i, &cnt);
    for (int k = 0; k < 4; k++) {
        cnt += vaddvq_u32(c[k]);
        const float v = vmaxvq_f32(m[k]);
        mx = v > mx ? v : mx;
    }
    *count = cnt;
    return mx;
}

int64_t kn_argmax_neon(const float *x, int64_t n) {
    const float32x4_t ninf = vdupq_n_f32(-INFINITY);
    float32x4_t m[4] = {ninf, ninf, ninf, ninf};
    int32x4_t id[4], at[4];
    const int32x4_t step = vdupq_n_s32(16);
    for (int k = 0; k < 4; k++) {
        id[k] = vdupq_n_s32(-1);
        const int32_t a[4] = {4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3};
        at[k] = vld1q_s32(a);
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++) {
            const float32x4_t v = vld1q_f32(x + i + 4 * k);
            const uint32x4_t gt = vcgtq_f32(v, m[k]); /* false for NaN */
            m[k] = vbslq_f32(gt, v, m[k]);
            id[k] = vbslq_s32(gt, at[k], id[k]);
            at[k] = vaddq_s32(at[k], step);
        }
    float mv[16];
    int32_t iv[16];
    for (int k = 0; k < 4; k++) {
        vst1q_f32(mv + 4 * k, m[k]);
        vst1q_s32(iv + 4 * k, id[k]);
    }
    return argmax_finish(mv, iv, 16, x, i, n);
}

int64_t kn_above_neon(const float *x, int64_t n, float t) {
    const float32x4_t b = vdupq_n_f32(t);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const uint32x4_t g =
            vorrq_u32(vorrq_u32(vcgtq_f32(vld1q_f32(x + i), b), vcgtq_f32(vld1q_f32(x + i + 4), b)),
                      vorrq_u32(vcgtq_f32(vld1q_f32(x + i + 8), b), vcgtq_f32(vld1q_f32(x + i + 12), b)));
        if (vmaxvq_u32(g)) return i + kn_above_ref(x + i, 16, t);
    }
    return i + kn_above_ref(x + i, n - i, t);
}
#endif
